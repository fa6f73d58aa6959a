"""Executors: interchangeable backends that run the jobs of a plan (local now; Slurm to come)."""

from .base import Executor
from .local import LocalExecutor

__all__ = ["Executor", "LocalExecutor"]
