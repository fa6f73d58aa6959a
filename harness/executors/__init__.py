"""Executors: interchangeable backends that run the jobs of a plan."""

from harness.executors.base import Executor
from harness.executors.local import LocalExecutor
from harness.executors.slurm.executor import SlurmExecutor

__all__ = ["Executor", "LocalExecutor", "SlurmExecutor"]
