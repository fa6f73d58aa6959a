"""Running a sweep: plan it into a run directory, hand the jobs to an executor behind a
progress bar, then collect the summary and draw the plots. `bench sweep` and `bench sweep
--resume` are `start` and `resume`; the CLI only parses and checks their arguments."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from harness import executors
from harness.collect.gather import collect
from harness.collect.summary import to_frame, write_summary
from harness.config.cluster_profile import DEFAULT_PROFILE, ClusterProfile
from harness.config.fields import FieldError, build, check_time
from harness.config.spec import Sweep
from harness.errors import HistoryError, PlanError, SlurmError, UsageError, shown
from harness.executors import Executor
from harness.present.plot import draw_all
from harness.present.tables import print_jobs, print_plan, print_results, transport_mismatches
from harness.run import cost
from harness.run.cost import Cost
from harness.run.plan import Job, expand
from harness.run.rundir import COMPLETED, FINAL_STATES, RUNNING, JobRecord, RunDir, RunDirError, claim, locked

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

    from harness.analysis.store import Location


def start(
    sweep: Sweep,
    sweep_file: Path,
    kind: type[Executor],
    profile: ClusterProfile | None,
    out: Path,
    console: Console,
    dry_run: bool = False,
    yes: bool = False,
    history: Location | None = None,
) -> int:
    """Plan `sweep` into the new run directory `out` and run it (or only write it, with
    dry_run). A batch executor's cost is shown first, its training rates from the profile's
    cluster's predictions in `history` where it has them, and a large one must be confirmed (yes
    answers for the user). The exit status: 0 when every job completed, 1 when some did not."""
    if not dry_run:
        check_passthrough((*sweep.env_passthrough, *(profile.env_passthrough if profile else ())))
    sweep, jobs = planned(sweep, sweep_file, kind, profile)
    kind.preflight(out, "--out", profile, _warn(console))
    if kind.batch:
        known = known_rates(history, profile, console)
        confirm(cost.estimate(jobs, profile, known), profile or DEFAULT_PROFILE, console, dry_run=dry_run, yes=yes)
    run, created = claim(out)
    executor = kind.create(run, sweep.timeout_s, profile)
    with locked(run):  # held from before the first file is written to the end of the sweep
        create_run(sweep, str(sweep_file), executor, jobs, created)
        print_plan(console, sweep_file, jobs, run)
        if note := executor.plan_note(jobs):
            console.print(note, style="bold", markup=False, soft_wrap=True)
        if dry_run:
            console.print(f"dry run: nothing started; plan written to {run.plan_file}")
            return 0
        return run_and_report(run, executor, jobs, run.read_table(jobs), console)


def planned(
    sweep: Sweep, sweep_file: Path, kind: type[Executor], profile: ClusterProfile | None
) -> tuple[Sweep, list[Job]]:
    """`sweep` with the profile's time limit where it states none, and its jobs, refused
    (PlanError, UsageError) where they cannot be planned or `kind` cannot run them."""
    limit_from = str(sweep_file)
    if sweep.time_limit_min is None and profile is not None and profile.time_limit_min is not None:
        sweep = dataclasses.replace(sweep, time_limit_min=profile.time_limit_min)
        limit_from = f"cluster profile {profile.name}"
    try:
        jobs = expand(sweep)
    except PlanError as exc:
        raise PlanError(f"{sweep_file}: {exc}") from None
    kind.check_jobs(jobs, limit_from)
    return sweep, jobs


def _warn(console: Console) -> Callable[[str], None]:
    # the warning quotes a path, which may hold rich markup such as "[red]"
    return lambda message: console.print(f"[yellow]warning:[/] {shown(message)}", soft_wrap=True)


def resume(run: RunDir, console: Console, yes: bool = False, history: Location | None = None) -> int:
    """Go on with the plan saved in `run`, with the executor and cluster profile it names. The
    jobs it will submit cost what a new sweep of them would, so a batch executor's are confirmed
    the same way (--yes answers; a dry run's plan submits every job of the sweep)."""
    plan = run.read_plan()
    jobs = run.jobs(plan)
    run.check_job_dirs(jobs)
    recorded = plan.get("cluster")
    profile = build(ClusterProfile, recorded, "cluster") if recorded else None
    check_passthrough((*plan["sweep"].get("env_passthrough", ()), *(profile.env_passthrough if profile else ())))
    kind = executors.get(plan["executor"])
    kind.check_jobs(jobs, str(run.plan_file))
    kind.preflight(run.path, "--resume", profile, _warn(console))
    if kind.batch:
        saved = run.read_table(jobs)
        # what `execute` will submit: jobs never submitted, and jobs that ended without completing
        # (a job with an id still in Slurm is tracked, not submitted again)
        rows = [(j, saved[j.name]) for j in jobs]
        to_run = [j for j, r in rows if r.state != COMPLETED and (r.job_id is None or r.state in FINAL_STATES)]
        known = known_rates(history, profile, console)
        confirm(cost.estimate(to_run, profile, known), profile or DEFAULT_PROFILE, console, dry_run=False, yes=yes)
    executor = kind.create(run, _recorded_timeout(run, plan), profile)
    console.print(f"executor: {executor.name} (from the plan in {run.path})")
    with locked(run):
        table = executor.resume(run.read_table(jobs))
        todo = sum(r.state != COMPLETED for r in table.values())
        console.print(f"resuming {run.path}: {todo} of {len(jobs)} jobs to run")
        return run_and_report(run, executor, jobs, table, console)


def _recorded_timeout(run: RunDir, plan: dict) -> float:
    """The sweep's process-group timeout as plan.json records it, held to the sweep file's range
    (harness/config/spec.py): it reaches every rank's command line."""
    value = plan["sweep"].get("timeout_s", 300.0)
    try:
        check_time("timeout_s", value, "sweep.timeout_s")
    except FieldError as exc:
        raise RunDirError(f"{run.plan_file}: malformed plan: {exc.key} {exc}") from None
    return float(value)


def known_rates(history: Location | None, profile: ClusterProfile | None, console: Console) -> list[cost.KnownRate]:
    """The training rates the history holds for the profile's cluster (harness/analysis/predicted.py),
    newest first; none without a profile. A history that cannot be read is said, and the
    estimate takes its defaults: it is an estimate, and the sweep does not depend on it."""
    if history is None or profile is None:
        return []
    from harness.analysis import predicted

    try:
        return predicted.rates(history, profile.name)
    except HistoryError as exc:
        console.print(f"note: the cost estimate takes no rate from the history: {exc}", markup=False, soft_wrap=True)
        return []


def confirm(cost: Cost, profile: ClusterProfile, console: Console, *, dry_run: bool, yes: bool) -> None:
    """Show what the sweep could cost; above the profile's confirm_above_node_hours, go on only
    when the user says so: --yes, or 'y' at the terminal. Without a terminal to ask, refuse."""
    for line in cost.lines():
        console.print(line, markup=False, soft_wrap=True)
    limit = profile.confirm_above_node_hours
    if dry_run or yes or cost.bound_node_hours <= limit:
        return
    what = f"{cost.jobs} job(s), up to {cost.bound_node_hours:,.1f} node-hours"
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError(
            f"{what} is above the profile's confirm_above_node_hours ({limit:g}); no terminal to ask, "
            "so nothing was submitted: add --yes to submit, or narrow the sweep (--only, --max-nodes)"
        )
    try:
        answer = input(f"submit {what}? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise UsageError("not confirmed: nothing was submitted")


def check_passthrough(names: tuple[str, ...]) -> None:
    """Every env_passthrough variable is set here, where jobs inherit the environment from."""
    missing = [n for n in dict.fromkeys(names) if n not in os.environ]
    if missing:
        one = len(missing) == 1
        raise UsageError(
            f"env_passthrough: {', '.join(missing)} {'is' if one else 'are'} not set in this "
            f"environment; export {'it' if one else 'them'} first (jobs take "
            f"{'its' if one else 'their'} value from here)"
        )


def run_and_report(
    run: RunDir, executor: Executor, jobs: list[Job], table: dict[str, JobRecord], console: Console
) -> int:
    """Execute, then collect, plot and print the tables; 130 when interrupted (the directory
    stays consistent and resumable)."""

    try:
        table = execute(run, executor, jobs, table, console)
    except KeyboardInterrupt:
        console.print(
            f"\ninterrupted ({executor.interrupt_note}): {run.path} is consistent; "
            f"continue with `bench sweep --resume {run.path}`",
            markup=False,
        )
        return 130
    except SlurmError as exc:
        print(f"bench sweep: error: {exc}", file=sys.stderr)
        return exc.exit_status
    report = executor.report()
    if report:
        console.print(report, markup=False)
    summary = collect_and_plot(run, console)
    mismatched = transport_mismatches(summary)
    for line in mismatched:
        console.print(f"[red]transport mismatch:[/] {shown(line)}", soft_wrap=True)
    print_jobs(console, table, title="Jobs")
    print_results(console, summary)
    failed = [r for r in table.values() if r.state != COMPLETED]
    console.print(f"\nresults: {run.path}\n  summary: {run.summary_csv}\n  plots:   {run.plots}/", markup=False)
    if failed:
        console.print(
            f"[red]{len(failed)} of {len(table)} jobs did not complete[/] (logs in {shown(str(run.path))}/jobs/<job>/)"
        )
    if mismatched:
        console.print(
            f"[red]{len(mismatched)} job(s) did not run over the transport their settings set expects[/]: "
            "their rows are marked TRANSPORT_MISMATCH and are not compared",
            soft_wrap=True,
        )
    return 1 if failed or mismatched else 0


def collect_and_plot(run: RunDir, console: Console) -> pd.DataFrame:

    # warnings quote file names, which may hold rich markup such as "[red]"
    summary, samples = collect(run, warn=lambda m: console.print(f"[yellow]warning:[/] {shown(m)}"))
    write_summary(run, summary, samples)
    frame = to_frame(summary)
    draw_all(run, frame)
    return frame


def default_run_dir(sweep: Sweep, root: str | Path = "results") -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{sweep.name}-{stamp}"


def create_run(sweep: Sweep, sweep_file: str, executor: Executor, jobs: list[Job], created: bool) -> RunDir:
    """Write each job's files, then plan.json, into the claimed directory, whose lock the
    caller holds; another sweep that got there first is refused. Should writing fail, nothing
    is left: the directory is removed if this sweep created it, emptied otherwise."""
    run = executor.run
    path = run.path
    if run.plan_file.exists() or any(e.name != ".lock" for e in path.iterdir()):
        raise RunDirError(f"{path} was taken by another bench process meanwhile; choose another --out")
    try:
        run.write_plan(
            dataclasses.asdict(sweep),
            sweep_file,
            executor.name,
            jobs,
            executor.cluster(),
            executor.job_files if executor.writes_job_files else None,
        )
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


def execute(
    run: RunDir, executor: Executor, jobs: list[Job], table: dict[str, JobRecord], console: Console
) -> dict[str, JobRecord]:
    """Run the jobs, saving the table after every change and showing progress."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    total = len(jobs)

    def counts() -> tuple[int, int, int]:
        done = sum(r.state == COMPLETED for r in table.values())
        failed = sum(r.state in FINAL_STATES and r.state != COMPLETED for r in table.values())
        running = sum(r.state == RUNNING for r in table.values())
        return done, failed, running

    progress = Progress(
        TextColumn("[bold]jobs"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    task = progress.add_task("jobs", total=total, detail="")
    finished_before = {name for name, r in table.items() if r.state in FINAL_STATES}

    def changed(rec: JobRecord) -> None:
        run.write_table(table, executor.name)
        done, failed, running = counts()
        progress.update(
            task,
            completed=done + failed,
            detail=f"pending {total - done - failed - running}  running {running}  done {done}  failed {failed}",
        )
        if rec.state in FINAL_STATES and rec.name not in finished_before:
            finished_before.add(rec.name)
            style = "green" if rec.state == COMPLETED else "red"
            extra = f": {shown(rec.reason)}" if rec.reason else ""  # reasons quote logs and paths
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
