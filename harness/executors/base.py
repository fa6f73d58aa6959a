"""The executor interface: each backend writes what runs a job, then drives jobs to a final
state, recording every change in the job table (which the caller saves). What the rest of
bench asks of a backend before it runs anything (is it a batch system, which sweep is its
default, can it use this run directory) it asks of the class, never of its name."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from harness.config.cluster_profile import ClusterProfile
from harness.config.spec import LAUNCHERS
from harness.run.plan import Job
from harness.run.rundir import FINAL_STATES, PENDING, JobRecord, RunDir


class Executor(ABC):
    name: ClassVar[str]
    # What becomes of running jobs when the harness is interrupted, for the message it prints.
    interrupt_note: ClassVar[str] = ""
    # A batch system: its jobs go to a cluster's queue, so it needs the cluster's profile and
    # its client commands, and a sweep's cost is shown (and confirmed) before they are
    # submitted; otherwise they run on this machine, its nodes emulated.
    batch: ClassVar[bool] = False
    default_sweep: ClassVar[str] = "default.yaml"  # of the sweeps bench ships (harness/sweeps)
    launchers: ClassVar[tuple[str, ...]] = LAUNCHERS  # what its jobs can be started with
    # The node check's threshold where --threshold is not given (docs/guides/nodes.md, "Thresholds").
    node_threshold: ClassVar[str] = "10%"
    # Whether its jobs have files (job_files) written with the plan: a batch system's script.
    writes_job_files: ClassVar[bool] = False

    def __init__(self, run: RunDir, timeout_s: float):
        self.run = run
        # The workloads' process-group timeout: how long a rank waits for a dead peer.
        self.timeout_s = timeout_s

    @classmethod
    def create(cls, run: RunDir, timeout_s: float, profile: ClusterProfile | None) -> Executor:
        """The executor of `run`, on the cluster of `profile` where it runs on one."""
        return cls(run, timeout_s)

    @classmethod
    def check_profile(cls, profile: ClusterProfile, path: str | Path) -> None:
        """Refuse (UsageError) a cluster profile, loaded from `path`, that this backend cannot
        carry. Here: any profile will do."""
        return None

    @classmethod
    def check_jobs(cls, jobs: list[Job], where: str) -> None:
        """Refuse (UsageError) planned jobs that this backend cannot run as planned, `where`
        naming what planned them. Here: any will do."""
        return None

    @classmethod
    def preflight(cls, out: Path, given: str, profile: ClusterProfile | None, warn: Callable[[str], None]) -> None:
        """Before a sweep claims or resumes the run directory `out` (named by the flag `given`):
        raise UsageError for what cannot work there, and `warn` of what may not. Here: nothing."""
        return None

    def plan_note(self, jobs: list[Job]) -> str | None:
        """A line for the plan's end about where its jobs will run, if the user must see it."""
        return None

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
        the plan, before any job starts, where writes_job_files. Pure: the same job always gives
        the same files."""
        return {}

    @abstractmethod
    def execute(self, jobs: list[Job], table: dict[str, JobRecord], changed: Callable[[JobRecord], None]) -> None:
        """Run every job of `jobs` whose row is not COMPLETED, calling `changed` after each change of a row."""
