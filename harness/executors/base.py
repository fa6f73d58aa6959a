"""The executor interface: each backend writes what runs a job, then drives jobs to a final
state, recording every change in the job table (which the caller saves)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

from harness.plan import Job
from harness.rundir import FINAL_STATES, PENDING, JobRecord, RunDir


class Executor(ABC):
    name: ClassVar[str]
    # What becomes of running jobs when the harness is interrupted, for the message it prints.
    interrupt_note: ClassVar[str] = ""

    def __init__(self, run: RunDir, timeout_s: float):
        self.run = run
        # The workloads' process-group timeout: how long a rank waits for a dead peer.
        self.timeout_s = timeout_s

    def cluster(self) -> dict | None:
        """What plan.json records of the cluster the jobs run on (None: this machine)."""
        return None

    def report(self) -> str | None:
        """A line for the end of a sweep about how the executor did its work, if it has one."""
        return None

    def resume(self, table: dict[str, JobRecord]) -> dict[str, JobRecord]:
        """The table a resumed sweep continues from. Here: jobs the harness left unfinished died
        with it, so they go back to PENDING, keeping their history; `execute` reruns every job
        that is not COMPLETED. An executor whose jobs outlive the harness keeps tracking them."""
        for rec in table.values():
            if rec.state not in FINAL_STATES and rec.state != PENDING:
                rec.orphaned()
        return table

    def job_files(self, job: Job) -> dict[str, str]:
        """What runs `job` (a script, say), by file name within its job directory: written with
        the plan, before any job starts. Pure: the same job always gives the same files."""
        return {}

    @abstractmethod
    def execute(self, jobs: list[Job], table: dict[str, JobRecord], changed: Callable[[JobRecord], None]) -> None:
        """Run every job of `jobs` whose row is not COMPLETED, calling `changed` after each change of a row."""
