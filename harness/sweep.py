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
from .plan import Job
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


def claim(path: Path) -> tuple[RunDir, bool]:
    """(run directory, whether it was created) for a new sweep, checked before anything is
    written: it is new, or empty (a lock file from an earlier claim aside). Lock it (`locked`)
    before writing into it."""
    run = RunDir(path)
    if os.path.lexists(path) and not path.is_dir():
        raise RunDirError(f"--out {path}: exists and is not a directory")
    if run.plan_file.exists():
        raise RunDirError(f"{path} already holds a run; continue it with `bench sweep --resume {path}` "
                          f"or choose another --out")
    if path.is_dir() and any(e.name != ".lock" for e in path.iterdir()):
        raise RunDirError(f"--out {path}: the directory is not empty; give a new or empty directory")
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"--out {path}: cannot create the directory ({exc.strerror or exc})") from None
    return run, created


def create_run(sweep: Sweep, sweep_file: str, executor: Executor, jobs: list[Job], created: bool) -> RunDir:
    """Write each job's files, then plan.json, into the claimed directory, whose lock the
    caller holds; another sweep that got there first is refused. Should writing fail, nothing
    is left: the directory is removed if this sweep created it, emptied otherwise."""
    run = executor.run
    path = run.path
    if run.plan_file.exists() or any(e.name != ".lock" for e in path.iterdir()):
        raise RunDirError(f"{path} was taken by another bench process meanwhile; choose another --out")
    try:
        for job in jobs:
            executor.prepare(job)
        run.write_plan(dataclasses.asdict(sweep), sweep_file, executor.name, jobs, cluster=executor.cluster())
    except BaseException as exc:
        for entry in path.iterdir():
            if entry.name != ".lock":
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        if created:
            shutil.rmtree(path, ignore_errors=True)
        if isinstance(exc, OSError):
            raise RunDirError(f"--out {path}: cannot write the plan ({exc.strerror or exc})") from None
        raise
    return run


@contextlib.contextmanager
def locked(run: RunDir) -> Iterator[None]:
    """Hold the run directory for one harness at a time; the lock dies with the process."""
    try:  # O_NOFOLLOW: a link planted as .lock must not make root create or open its target
        fd = os.open(run.path / ".lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        raise RunDirError(f"{run.path}: cannot take the run's lock ({exc.strerror or exc})") from None
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


