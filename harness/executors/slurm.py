"""The Slurm executor: one sbatch script per job of the plan, written to
DIR/jobs/<job>/job.sbatch before anything is submitted.

This version writes the scripts (`bench sweep --executor slurm --dry-run`); submission and
tracking with sbatch/squeue/sacct are not in it yet, and it says so rather than pretend.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from benchmarks.results import atomic_write_text

from ..plan import Job
from ..rundir import JobRecord, RunDir, RunDirError
from ..slurm import DEFAULT_PROFILE, ClusterProfile, render_script
from .base import Executor


class SlurmExecutor(Executor):
    name = "slurm"

    def __init__(self, run: RunDir, timeout_s: float, profile: ClusterProfile = DEFAULT_PROFILE):
        super().__init__(run, timeout_s)
        self.profile = profile

    def cluster(self) -> dict:
        return dataclasses.asdict(self.profile)

    def script_path(self, job: Job):
        return self.run.job_dir(job) / "job.sbatch"

    def prepare(self, job: Job) -> None:
        atomic_write_text(self.script_path(job), render_script(job, self.profile, self.timeout_s))

    def execute(self, jobs: list[Job], table: dict[str, JobRecord], changed: Callable[[JobRecord], None]) -> None:
        raise RunDirError("submitting to Slurm is not in this version yet; "
                          "`bench sweep --executor slurm --dry-run` writes and checks the job scripts")
