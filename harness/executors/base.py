"""The executor interface: each backend writes what runs a job, then drives jobs to a final
state, recording every change in the job table (which the caller saves)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, ClassVar

from ..plan import Job
from ..rundir import JobRecord, RunDir


class Executor(ABC):
    name: ClassVar[str]

    def __init__(self, run: RunDir, timeout_s: float):
        self.run = run
        # The workloads' process-group timeout: how long a rank waits for a dead peer.
        self.timeout_s = timeout_s

    def cluster(self) -> dict | None:
        """What plan.json records of the cluster the jobs run on (None: this machine)."""
        return None

    @abstractmethod
    def prepare(self, job: Job) -> None:
        """Write what runs `job` (a script, or its command lines) into its job directory."""

    @abstractmethod
    def execute(self, jobs: list[Job], table: dict[str, JobRecord], changed: Callable[[JobRecord], None]) -> None:
        """Run every job of `jobs` whose row is not COMPLETED, calling `changed` after each change of a row."""
