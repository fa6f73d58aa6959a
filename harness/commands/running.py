"""`bench run`, `bench sweep` and what reads a run's jobs back: `collect`, `plot`, `status`; each
command beside its parser."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.catalog import PROBES, WORKLOADS
from harness import executors, sweep
from harness.collect.gather import WORKER_JOBS, collect
from harness.collect.summary import read_summary, write_summary
from harness.commands.shared import (
    DB_HELP,
    EXECUTOR_HELP,
    chosen_executor,
    history_db,
    new_console,
    positive_int,
    results_root,
)
from harness.config.fields import SHIPPED
from harness.config.spec import MATRIX_AXES
from harness.config.sweepfile import load_sweep
from harness.errors import UsageError, one_line
from harness.present.plot import draw_all
from harness.present.tables import print_jobs
from harness.run.forked import MAX_WORKERS
from harness.run.rundir import COMPLETED, FINAL_STATES, RunDir, in_use, locked

if TYPE_CHECKING:
    pass


RUN_HELP = f"""usage: bench run WORKLOAD [workload flags]

Run one workload on this machine (--nproc N ranks), or as a rank of a launch it is in (torchrun, srun).

WORKLOAD: {", ".join((*WORKLOADS, *PROBES))}
`bench run WORKLOAD --help` lists a workload's flags."""


def cmd_run(args: argparse.Namespace) -> int:
    module = importlib.import_module(f"benchmarks.{args.workload}")
    return module.main(args.workload_args)


def cmd_sweep(args: argparse.Namespace) -> int:
    console = new_console()
    if args.resume:
        given = (
            args.sweep,
            args.overrides,
            args.only,
            args.max_nodes,
            args.repeat,
            args.out,
            args.dry_run,
            args.cluster,
        )
        if any(given):
            raise UsageError(
                "--resume DIR continues the plan saved in DIR; it takes no sweep file, "
                "--set, --only, --max-nodes, --repeat, --out, --cluster or --dry-run"
            )
        return sweep.resume(RunDir(args.resume), console, yes=args.yes, history=history_db(args))

    kind, profile = chosen_executor(args, console, profile_on_dry_run=False)
    sweep_path = Path(args.sweep) if args.sweep else SHIPPED / kind.default_sweep
    spec = load_sweep(
        sweep_path, max_nodes=args.max_nodes, repeat=args.repeat, overrides=tuple(args.overrides), only=tuple(args.only)
    )
    if unknown := [launcher for launcher in spec.launchers if launcher not in kind.launchers]:
        raise UsageError(
            f"{sweep_path}: launchers: the {kind.name} executor runs {' and '.join(kind.launchers)} only, and the "
            f"sweep asks for {', '.join(unknown)}; use --executor {executors.BATCH[0]} or "
            f"--set launchers=[{','.join(kind.launchers)}]"
        )
    out = Path(args.out) if args.out else sweep.default_run_dir(spec, results_root())
    return sweep.start(
        spec, sweep_path, kind, profile, out, console, dry_run=args.dry_run, yes=args.yes, history=history_db(args)
    )


def cmd_collect(args: argparse.Namespace) -> int:
    run = RunDir(args.dir)
    run.read_plan()
    with locked(run):
        summary, samples = collect(
            run, warn=lambda m: print(f"warning: {one_line(m)}", file=sys.stderr), workers=args.workers
        )
        write_summary(run, summary, samples)
    ok = summary.column("status").to_pylist().count(COMPLETED)
    print(f"{summary.num_rows} summary rows ({ok} COMPLETED) written to {run.summary_parquet} and {run.summary_csv}")
    return 0


def _workers(text: str) -> int:
    value = positive_int(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_WORKERS}, found {value}")
    return value


def cmd_plot(args: argparse.Namespace) -> int:
    run = RunDir(args.dir)
    run.read_plan()
    summary = read_summary(run)
    written = draw_all(run, summary)
    console = new_console()
    for path in written:
        console.print(f"wrote {path}")
    if not written:
        console.print("nothing to plot: the summary has no COMPLETED rows")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    run = RunDir(args.dir)
    jobs = run.jobs()
    table = run.read_table(jobs)
    console = new_console()
    print_jobs(console, table, title=f"Jobs of {run.path}")
    done = sum(r.state == COMPLETED for r in table.values())
    console.print(f"{done} of {len(table)} jobs COMPLETED")
    unfinished = sum(r.state not in FINAL_STATES for r in table.values())
    if unfinished:
        console.print(
            f"a bench process is tracking {run.path} now"
            if in_use(run)
            else f"no bench process is tracking {run.path}: the table is as it was last saved; "
            f"`bench sweep --resume {run.path}` goes on",
            markup=False,
        )
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The group's subcommands, on `sub`."""
    s = sub.add_parser("sweep", help="run (or --dry-run plan) a sweep of jobs")
    s.add_argument(
        "sweep", nargs="?", help="sweep YAML (default: sweeps/local.yaml locally, sweeps/default.yaml on Slurm)"
    )
    s.add_argument("--max-nodes", type=positive_int, help="cap the node axis (or set it, for nodes: powers_of_two)")
    s.add_argument(
        "--repeat",
        type=positive_int,
        metavar="N",
        help="run every job N times, replicate by replicate across the matrix (sweep key repeat)",
    )
    s.add_argument("--executor", choices=(executors.AUTO, *executors.NAMES), default=executors.AUTO, help=EXECUTOR_HELP)
    s.add_argument("--out", help="run directory (default <sweep>-<timestamp> in $BENCH_RESULTS, else in results/)")
    s.add_argument(
        "--yes",
        action="store_true",
        help="submit without asking, whatever the cost (needed without a terminal above the profile's "
        "confirm_above_node_hours)",
    )
    s.add_argument("--dry-run", action="store_true", help="write and print the plan, run nothing")
    s.add_argument(
        "--db",
        help=DB_HELP + "; the cost estimate takes each training job's rate from the profile's cluster's predictions "
        "there (bench predict, then history add) where it has one at the job's node count",
    )
    s.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a sweep value, e.g. --set workloads.synthetic.steps=20 (repeatable)",
    )
    s.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="AXIS=V1,V2",
        help=f"run only the matrix points whose AXIS takes these values; AXIS: {', '.join(MATRIX_AXES)} (repeatable)",
    )
    s.add_argument(
        "--cluster",
        metavar="PROFILE",
        help="cluster profile YAML for the Slurm executor, needed to submit (default $BENCH_CLUSTER)",
    )
    s.add_argument("--resume", metavar="DIR", help="continue the run in DIR: jobs not COMPLETED run again")
    s.set_defaults(func=cmd_sweep)

    r = sub.add_parser("run", help="run one workload (see `bench run WORKLOAD --help`)", add_help=False)
    r.add_argument("workload", choices=(*WORKLOADS, *PROBES))
    r.add_argument("workload_args", nargs=argparse.REMAINDER)
    r.set_defaults(func=cmd_run)

    for name, func, text in (
        ("collect", cmd_collect, "rebuild summary.parquet/csv from the job results"),
        ("plot", cmd_plot, "redraw the plots from the summary"),
        ("status", cmd_status, "show the job table of a run"),
    ):
        c = sub.add_parser(name, help=text)
        c.add_argument("dir", help="run directory")
        if name == "collect":
            c.add_argument(
                "--workers",
                type=_workers,
                metavar="N",
                help=f"processes that read the results, this one among them, 1 to {MAX_WORKERS} (default: "
                f"one per {WORKER_JOBS} jobs, at most one per core)",
            )
        c.set_defaults(func=func)
