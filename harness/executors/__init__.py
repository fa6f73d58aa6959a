"""Executors: interchangeable backends that run the jobs of a plan."""

from .base import Executor
from .local import LocalExecutor
from .slurm import SlurmExecutor

__all__ = ["Executor", "LocalExecutor", "SlurmExecutor"]
