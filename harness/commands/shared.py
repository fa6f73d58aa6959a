"""What every command group shares: the console, the directories and files the environment names
(BENCH_RESULTS, BENCH_HISTORY, BENCH_CLUSTER), argument checks, and the executor a command runs on."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from harness import executors
from harness.analysis.compare import parse_threshold
from harness.analysis.sides import DEFAULT_METRICS
from harness.analysis.store import Location, parse_location
from harness.config.cluster_profile import ClusterProfile, load_profile
from harness.config.fields import SHIPPED
from harness.errors import UsageError
from harness.executors.slurm.executor import python_check

if TYPE_CHECKING:
    from rich.console import Console

    from harness.executors import Executor


def new_console() -> Console:
    return console_to(sys.stdout)


def console_to(stream: TextIO) -> Console:
    from rich.console import Console

    # A pipe or log file gets wide lines rather than rich's 80-column default.
    return Console(file=stream, highlight=False, width=None if stream.isatty() else 160)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, found {value}")
    return value


def env_path(name: str) -> Path | None:
    """A path from the environment variable `name`, None when it is unset."""
    value = os.environ.get(name)
    if value is None:
        return None
    if not value.strip():
        raise UsageError(f"{name} is set but empty; unset it or give a path")
    return Path(value)


def results_root() -> Path:
    """Where run directories go by default: $BENCH_RESULTS, else results/ here."""
    return env_path("BENCH_RESULTS") or Path("results")


EXECUTOR_HELP = "where the jobs run: auto is slurm where sbatch is on PATH, this machine otherwise"
DB_HELP = (
    "history: an SQLite file or a postgresql:// URL (docs/guides/fleet.md); default $BENCH_HISTORY, else "
    "history.sqlite in $BENCH_RESULTS or results/"
)


def history_db(args: argparse.Namespace) -> Location:
    """The history: --db, else $BENCH_HISTORY, else history.sqlite in the results root."""
    given, name = (args.db, "--db") if args.db else (os.environ.get("BENCH_HISTORY"), "BENCH_HISTORY")
    if given is not None and not given.strip():
        raise UsageError("BENCH_HISTORY is set but empty; unset it or give a path or a postgresql:// URL")
    return parse_location(given, name) if given else Location(str(results_root() / "history.sqlite"))


def threshold_arg(text: str, option: str = "--threshold", whole: bool = False) -> float:
    """A percentage from 0% to below 100%, or to 100% itself where `whole` is allowed."""
    try:
        return parse_threshold(text, option, whole)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def metric_names(names: list[str] | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names)) if names else DEFAULT_METRICS


def out_dir_arg(path: str | None, flag: str) -> Path | None:
    if path is None:
        return None
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{flag} {path}: is a file; give a directory (it is created if missing)")
    can_create(p, flag)
    return p


def can_create(path: Path, flag: str) -> None:
    """The nearest existing ancestor of `path` is a directory, so `path` can be created there."""
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"{flag} {path}: {parent} is not a directory")
            return


def chosen_executor(
    args: argparse.Namespace, console: Console, *, profile_on_dry_run: bool
) -> tuple[type[Executor], ClusterProfile | None]:
    """(the executor, the cluster profile) of `bench sweep` or `bench nodes`, said on the
    console's first line and checked: sbatch on PATH for a batch executor (a dry run writes the
    job's files only), --cluster only with one, and the profile it needs (on a dry run too, with
    `profile_on_dry_run`), which submitit must be able to carry."""
    kind, why = executors.choose(args.executor)
    name, batch = kind.name, kind.batch
    console.print(f"executor: {name} ({why})")
    if batch and not args.dry_run and not shutil.which("sbatch"):
        raise UsageError(
            f"--executor {name}: sbatch not found on PATH; run where Slurm's client commands are, "
            "or write the job scripts only with --dry-run"
        )
    if args.cluster and not batch:
        raise UsageError(
            f"--cluster describes a Slurm cluster; it needs --executor {' or '.join(executors.BATCH)}, not {name}"
        )
    cluster = args.cluster or (env_path("BENCH_CLUSTER") if batch else None)
    if batch and cluster is None and (profile_on_dry_run or not args.dry_run):
        raise UsageError(
            f"the {name} executor ({why}) needs the cluster's profile: --cluster FILE or BENCH_CLUSTER=FILE "
            f"(start from a copy of {SHIPPED / 'clusters' / 'example.yaml'}); to run on this machine instead, "
            "--executor local"
        )
    profile = load_profile(cluster) if cluster else None
    if batch and args.dry_run and profile is not None and (problem := python_check(profile)):
        console.print(f"warning: {problem}", markup=False, soft_wrap=True)
    if profile is not None and cluster is not None:
        kind.check_profile(profile, cluster)
    return kind, profile
