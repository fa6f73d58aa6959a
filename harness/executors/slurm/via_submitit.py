"""The submitit executor: the plan's jobs submitted through submitit's AutoExecutor, for sites
that standardise on submitit (docs/guides/submitit.md).

Each job is one `AutoExecutor.submit` of submitit_task.run with the job's Task, into the job's
own submitit folder (DIR/jobs/<job>/submitit/): submitit writes the batch script and the pickle
there, and each task's log. The cluster profile maps to submitit's parameters (`parameters`),
with what the sbatch script would do before its steps as submitit's `setup` lines. Tracking,
collection, resubmission and `--resume` are the Slurm executor's: the job ids submitit gets from
sbatch are followed with squeue and sacct, and a row left SUBMITTING is found again by the job's
name and working directory.

Containers are not offered here: submitit starts its own Python in each task, and it would have
to run inside the image, with submitit and bench installed there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.config.cluster_profile import ClusterProfile
from harness.errors import SlurmError, UsageError
from harness.executors.slurm import submitit_task
from harness.executors.slurm.executor import CALL_TIMEOUT_S, NoAnswer, SlurmExecutor
from harness.executors.slurm.script import (
    SLURM_EARLY_S,
    WARN_AFTER_S,
    directive_path_problem,
    environment_lines,
    format_time_limit,
    gpu_request,
    interpreter,
    restart_lines,
    signal_lead_s,
    site_directives,
    tasks_and_cpus,
)
from harness.run.plan import Job
from harness.run.rundir import JobRecord

FOLDER = "submitit"  # in each job's directory
PARAMETERS = "submitit.json"  # in each job's directory: what bench gives AutoExecutor
TEMPORARY_PICKLE = re.compile(r"[0-9a-f]{32}\.pkl")  # submitit's uuid4().hex name before the job id is known


def _as_parameter(option: str) -> tuple[str, str | bool]:
    """An sbatch option of the job's script ("--exclude=gpu[001-004]", "--requeue") as submitit's
    additional parameter (name, value, or True for a flag); script.py and the profile allowlisted it."""
    name, eq, value = option.removeprefix("--").partition("=")
    return name, value if eq else True


def warning_lead(time_limit_min: float, where: str) -> int:
    """submitit's `slurm_signal_delay_s` for a job of that limit. submitit always asks Slurm for
    the warning (`--signal=USR2@N`), so a limit too short for one that comes after the tasks
    have started is refused: one that came sooner would kill a task before it could catch it."""
    if (lead := signal_lead_s(time_limit_min)) is None:
        raise UsageError(
            f"{where}: time_limit_min {time_limit_min:g} is too short for the submitit executor, which always asks for "
            f"Slurm's time-limit warning: it may come {SLURM_EARLY_S} s early and must come after the first "
            f"{WARN_AFTER_S} s, so the limit must be over {(SLURM_EARLY_S + WARN_AFTER_S) / 60:g} minutes "
            "(docs/guides/submitit.md); or use --executor slurm"
        )
    return lead


def parameters(job: Job, profile: ClusterProfile, run_path: Path) -> dict[str, Any]:
    """The keyword arguments of `AutoExecutor.update_parameters` for `job`: the same allocation,
    limits and start as the job's sbatch script (script.py). Pure."""
    tasks_per_node, cpus = tasks_and_cpus(job, profile)
    setup, _, _ = environment_lines(job, profile, executor="submitit")
    additional: dict[str, str | bool] = {
        # submitit's `time` is whole minutes; Slurm's D-HH:MM:SS keeps the sweep's limit exact
        "time": format_time_limit(job.time_limit_min),
        # the run directory, which the job's relative paths are relative to (as sbatch's cwd is)
        "chdir": str(run_path),
    }
    additional.update(_as_parameter(o) for o in (*gpu_request(job, profile), *site_directives(profile)))
    return {
        "name": f"bench-{job.name}",
        "nodes": job.nodes,
        "tasks_per_node": tasks_per_node,
        "cpus_per_task": cpus,
        "timeout_min": max(1, math.ceil(job.time_limit_min)),
        "stderr_to_stdout": True,
        "slurm_signal_delay_s": warning_lead(job.time_limit_min, f"job {job.name}"),
        # run before srun by the batch shell: a failing line fails the job, as in the sbatch script
        # (a requeued job's clean-up after the set-up, whose environment may hold its python)
        "slurm_setup": ["set -euo pipefail", *setup, *restart_lines(job, shlex.quote(interpreter(profile)))],
        # --cpus-per-task again, and --kill-on-bad-exit: see script.step_launch
        "slurm_srun_args": [f"--cpus-per-task={cpus}", "--kill-on-bad-exit=1", *profile.srun_options],
        "slurm_additional_parameters": additional,
    }


def task(job: Job, timeout_s: float, given: set[str]) -> submitit_task.Task:
    """What each of the job's tasks runs; `given` are the variables the batch shell exports."""
    return submitit_task.Task(
        job_dir=f"jobs/{job.name}",
        launcher=job.launcher,
        gpus_per_node=job.gpus_per_node,
        world_size=job.world_size,
        stall_s=job.stall_s,
        sample_s=job.sample_s,
        steps=tuple(
            submitit_task.Step(run.key, run.module, tuple(job.run_args(run, timeout_s)), job.debug_env(run, given))
            for run in job.runs
        ),
    )


class SubmititExecutor(SlurmExecutor):
    name = "submitit"

    @classmethod
    def check_profile(cls, profile: ClusterProfile, path: str | Path) -> None:
        """Refuse what this executor cannot do with the profile read from `path`, before anything is written."""
        if profile.container is not None:
            raise UsageError(
                f"{path}: container: the submitit executor cannot run a job in a container "
                "(submitit starts its own Python in each task, outside the image); use --executor slurm"
            )

    @classmethod
    def check_jobs(cls, jobs: list[Job], where: str) -> None:
        for limit in sorted({job.time_limit_min for job in jobs}):
            warning_lead(limit, where)

    @classmethod
    def preflight(cls, out: Path, given: str, profile: ClusterProfile | None, warn: Callable[[str], None]) -> None:
        """As Slurm's, and the run directory's path must fit the #SBATCH lines submitit writes."""
        if why_not := directive_path_problem(out):
            raise UsageError(f"{given} {why_not}")
        super().preflight(out, given, profile, warn)

    def script_path(self, job: Job) -> Path:
        return self.run.job_dir(job) / PARAMETERS

    def log_path(self, job: Job | str, job_id: str) -> Path:
        # stderr_to_stdout: task 0's output and errors, and the batch shell's, in one file
        return self.run.job_dir(job) / FOLDER / f"{job_id}_0_log.out"

    def _given(self, job: Job) -> set[str]:
        _, env, passed = environment_lines(job, self.profile, executor="submitit")
        return {*env, *passed}

    def parameters(self, job: Job) -> dict[str, Any]:
        """What AutoExecutor.update_parameters gets for `job`."""
        return parameters(job, self.profile, self.run.path.resolve())

    def payload(self, job: Job) -> tuple[Callable[[Any], None], Any]:
        """The function each task of `job` calls, and its argument, pickled by submitit."""
        return submitit_task.run, task(job, self.timeout_s, self._given(job))

    def job_files(self, job: Job) -> dict[str, str]:
        """The parameters and the task bench hands submitit, for a person to read before submitting."""
        argument = self.payload(job)[1]
        record = {
            "parameters": self.parameters(job),
            "python": interpreter(self.profile),
            "task": argument if isinstance(argument, str) else dataclasses.asdict(argument),
        }
        return {PARAMETERS: json.dumps(record, indent=2) + "\n"}

    def _unnamed(self, job: Job | str) -> dict[str, list[Path]]:
        """The files submitit wrote for a submission and had not yet named after the job id,
        by the name they get: it names the batch script, then the pickle, once sbatch has
        answered, and the job waits 60 s for the pickle (submitit's core/submission.py,
        process_job). A named script leaves a symlink under its temporary name."""
        folder = self.run.job_dir(job) / FOLDER
        return {
            "submitted.pkl": [p for p in folder.glob("*.pkl") if TEMPORARY_PICKLE.fullmatch(p.name)],
            "submission.sh": [p for p in folder.glob(".submission_file_*.sh") if not p.is_symlink()],
        }

    def _adopt(self, recs: list[JobRecord], changed: Callable[[JobRecord], None]) -> None:
        """As the Slurm executor, and a job found in Slurm gets its files: a harness killed
        after sbatch answered, before submitit named them, left them under temporary names, the
        only ones in the job's folder (`_sbatch` clears older ones)."""
        super()._adopt(recs, changed)
        for rec in (r for r in recs if r.job_id):
            for suffix, pending in self._unnamed(rec.name).items():
                named = self.run.job_dir(rec.name) / FOLDER / f"{rec.job_id}_{suffix}"
                if not named.exists() and len(pending) == 1:
                    pending[0].rename(named)

    def _sbatch(self, job: Job, after: str | None) -> subprocess.CompletedProcess:
        """One AutoExecutor.submit; its answer as sbatch's would be, the job id on stdout."""
        try:
            import submitit
        except ImportError:
            raise SlurmError(
                "--executor submitit needs the submitit package where bench runs (pip install submitit)", exit_status=2
            ) from None
        for stale in (p for files in self._unnamed(job).values() for p in files):
            stale.unlink()  # of submissions sbatch refused: no job runs them
        self.calls["sbatch"] += 1
        folder = self.run.job_dir(job).resolve() / FOLDER
        python = shlex.quote(interpreter(self.profile))
        try:
            executor = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_python=python)
        except RuntimeError as exc:  # submitit's Slurm executor wants srun on PATH
            raise SlurmError(f"submitit cannot submit from here: {exc}", exit_status=2) from None
        params = self.parameters(job)
        if after:
            params["slurm_additional_parameters"]["dependency"] = f"afterany:{after}"
        executor.update_parameters(**params)
        # submitit runs `sbatch FILE` in bench's environment and waits for ever: here SBATCH_*
        # variables are dropped (they would override the script's directives, as for the Slurm
        # executor) and sbatch gets CALL_TIMEOUT_S. submitit's Slurm executor makes this command
        # in _make_submission_command, the method its own subclasses override.
        drop = [w for name in sorted(os.environ) if name.startswith("SBATCH_") for w in ("-u", name)]

        def submission(path: Path) -> list[str]:
            return ["timeout", str(CALL_TIMEOUT_S), "env", *drop, "sbatch", str(path)]

        setattr(executor._executor, "_make_submission_command", submission)  # noqa: B010
        stderr = io.StringIO()  # submitit prints sbatch's complaint; bench says it in the job's row
        try:
            with contextlib.redirect_stderr(stderr):
                submitted = executor.submit(*self.payload(job))
        except submitit.core.utils.FailedJobError as exc:
            code = getattr(exc.__cause__, "returncode", 1)
            if code == 124:
                raise NoAnswer(f"sbatch gave no answer in {CALL_TIMEOUT_S} s") from None
            if code == 127:
                raise SlurmError(
                    "sbatch not found on PATH; the submitit executor needs Slurm's client commands", exit_status=2
                ) from None
            return subprocess.CompletedProcess(["sbatch"], code, "", str(exc))
        except submitit.core.utils.FailedSubmissionError as exc:
            return subprocess.CompletedProcess(["sbatch"], 1, "", str(exc))
        return subprocess.CompletedProcess(["sbatch"], 0, f"{submitted.job_id}\n", "")
