"""Running a sweep: plan it into a run directory, hand the jobs to an executor behind a
progress bar, then collect the summary and draw the plots."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

from .executors import Executor, LocalExecutor, SlurmExecutor
from .plan import Job, expand
from .rundir import COMPLETED, FINAL_STATES, RUNNING, JobRecord, RunDir, RunDirError
from .slurm import DEFAULT_PROFILE, ClusterProfile
from .spec import Sweep

def choose_executor(requested: str) -> tuple[str, str]:
    """(executor name, why): `auto` is slurm where sbatch is on PATH, local otherwise."""
    if requested != "auto":
        return requested, "chosen with --executor"
    if shutil.which("sbatch"):
        return "slurm", "sbatch found on PATH"
    return "local", "no sbatch on PATH"


def make_executor(name: str, run: RunDir, timeout_s: float, profile: ClusterProfile | None = None) -> Executor:
    if name == "local":
        return LocalExecutor(run, timeout_s)
    if name == "slurm":
        return SlurmExecutor(run, timeout_s, profile or DEFAULT_PROFILE)
    raise RunDirError(f"executor {name!r} is not available; valid: local, slurm")


def default_run_dir(sweep: Sweep, root: str | Path = "results") -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{sweep.name}-{stamp}"


def create_run(sweep: Sweep, sweep_file: str, executor: Executor) -> tuple[RunDir, list[Job]]:
    """Expand the sweep, refuse an existing run, and write each job's files, then plan.json."""
    jobs = expand(sweep)
    run = executor.run
    path = run.path
    if run.plan_file.exists():
        raise RunDirError(f"{path} already holds a run; continue it with `bench sweep --resume {path}` "
                          f"or choose another --out")
    if path.exists() and not path.is_dir():
        raise RunDirError(f"--out {path} exists and is not a directory")
    path.mkdir(parents=True, exist_ok=True)
    for job in jobs:
        executor.prepare(job)
    run.write_plan(dataclasses.asdict(sweep), sweep_file, executor.name, jobs, cluster=executor.cluster())
    return run, jobs


@contextlib.contextmanager
def locked(run: RunDir) -> Iterator[None]:
    """Hold the run directory for one harness at a time; the lock dies with the process."""
    fd = os.open(run.path / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirError(f"{run.path} is in use by another bench process") from None
        yield
    finally:
        os.close(fd)


def in_use(run: RunDir) -> bool:
    """Whether a bench process holds the run directory now (it is sweeping or resuming it)."""
    try:
        fd = os.open(run.path / ".lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def execute(run: RunDir, executor: Executor, jobs: list[Job], table: dict[str, JobRecord], console: Any) -> dict[str, JobRecord]:
    """Run the jobs, saving the table after every change and showing progress."""
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    total = len(jobs)

    def counts() -> tuple[int, int, int]:
        done = sum(r.state == COMPLETED for r in table.values())
        failed = sum(r.state in FINAL_STATES and r.state != COMPLETED for r in table.values())
        running = sum(r.state == RUNNING for r in table.values())
        return done, failed, running

    progress = Progress(TextColumn("[bold]jobs"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), console=console, transient=True)
    task = progress.add_task("jobs", total=total, detail="")
    finished_before = {name for name, r in table.items() if r.state in FINAL_STATES}

    def changed(rec: JobRecord) -> None:
        run.write_table(table, executor.name)
        done, failed, running = counts()
        progress.update(task, completed=done + failed,
                        detail=f"pending {total - done - failed - running}  running {running}  done {done}  failed {failed}")
        if rec.state in FINAL_STATES and rec.name not in finished_before:
            finished_before.add(rec.name)
            style = "green" if rec.state == COMPLETED else "red"
            extra = f": {escape(rec.reason)}" if rec.reason else ""  # reasons quote logs and paths
            took = "" if rec.elapsed_s is None else f" in {rec.elapsed_s:.1f} s"
            progress.console.print(f"[{done + failed}/{total}] {rec.name} [{style}]{rec.state}[/]{took}{extra}")
        elif rec.state not in FINAL_STATES and rec.name in finished_before:
            finished_before.discard(rec.name)

    run.write_table(table, executor.name)
    with progress:
        done, failed, _ = counts()
        progress.update(task, completed=done + failed, detail=f"done {done}  failed {failed}")
        executor.execute(jobs, table, changed)
    return table


