"""The `bench` command.

    bench sweep [SWEEP.yaml] [--max-nodes N] [--repeat N] [--executor auto|local|slurm|submitit] [--out DIR] [--dry-run]
    bench sweep --resume DIR [--yes]
    bench run allreduce|synthetic|real|transformer|gemm [workload flags]
    bench nodes [--cluster PROFILE] [--nodelist HOSTLIST | --nodes N] [--partners K] [--json]
    bench collect DIR | bench plot DIR | bench status DIR
    bench compare DIR_A [DIR_B] [--across AXIS=A,B]
    bench history add|list|plot|changes|check|remove
    bench regress DIR --cluster NAME [--baseline median:K|last|best|label:L] | DIR --baseline reference
    bench report DIR [--compare DIR_B | --across AXIS=A,B]
    bench transport LOG... [--json]
    bench export DIR --format openmetrics|influx [--out FILE]

User mistakes end with one line on stderr and exit status 2; a sweep with failed jobs exits 1;
regress exits 1 on a regression or failed key and 3 on a key it cannot judge; nodes exits 1
when it names a node or link and 3 when part of the check could not be judged.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import importlib
import json
import os
import re
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from benchmarks.catalog import PROBES, WORKLOADS
from benchmarks.common import OneLineParser, parse_size
from benchmarks.results import atomic_write_bytes, open_regular
from harness import accept, executors, inside, nodes, outputs, provenance, sweep, transport
from harness.analysis import changes, gate, history, nodehistory, reference
from harness.analysis.compare import (
    AXES,
    BY_SAMPLES,
    FAILED,
    MIN_RUNS,
    PROVISIONAL_MARGIN,
    SLOWER,
    UNJUDGED,
    compare,
    parse_across,
    parse_threshold,
)
from harness.analysis.history import BASELINE_HELP, DEFAULT_BASELINE
from harness.analysis.sides import DEFAULT_METRICS, METRICS, Side, load_run
from harness.cluster import ClusterProfile, load_profile
from harness.collect import collect
from harness.errors import (
    EXIT_FOUND,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_UNJUDGED,
    BenchError,
    DataError,
    UsageError,
    one_line,
    shown,
)
from harness.executors.slurm.executor import python_check
from harness.fields import SHIPPED, FieldError, check_time
from harness.nodecheck import Options
from harness.nodesteps import check_options
from harness.present import export, report
from harness.present.plot import draw_all, draw_compare, history_figure
from harness.present.regress import summary_line, write_all
from harness.present.tables import markdown, print_comparison, print_jobs, run_mismatches, table_csv
from harness.rundir import COMPLETED, FINAL_STATES, RunDir, in_use, locked
from harness.spec import MATRIX_AXES, NAME_RE
from harness.summary import read_summary, write_summary
from harness.sweepfile import load_sweep

if TYPE_CHECKING:
    from rich.console import Console

    from harness.executors import Executor


RUN_HELP = f"""usage: bench run WORKLOAD [workload flags]

Run one workload on this machine (--nproc N ranks), or as a rank of a launch it is in (torchrun, srun).

WORKLOAD: {", ".join((*WORKLOADS, *PROBES))}
`bench run WORKLOAD --help` lists a workload's flags."""


def _console() -> Console:
    return _console_to(sys.stdout)


def _console_to(stream: TextIO) -> Console:
    from rich.console import Console

    # A pipe or log file gets wide lines rather than rich's 80-column default.
    return Console(file=stream, highlight=False, width=None if stream.isatty() else 160)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, found {value}")
    return value


# --------------------------------------------------------------------------- commands


def cmd_run(args: argparse.Namespace) -> int:
    module = importlib.import_module(f"benchmarks.{args.workload}")
    return module.main(args.workload_args)


def _executor(
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
    cluster = args.cluster or (_env_path("BENCH_CLUSTER") if batch else None)
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


def cmd_sweep(args: argparse.Namespace) -> int:
    console = _console()
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
        return sweep.resume(RunDir(args.resume), console, yes=args.yes)

    kind, profile = _executor(args, console, profile_on_dry_run=False)
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
    out = Path(args.out) if args.out else sweep.default_run_dir(spec, _results_root())
    return sweep.start(spec, sweep_path, kind, profile, out, console, dry_run=args.dry_run, yes=args.yes)


def cmd_nodes(args: argparse.Namespace) -> int:
    # With --json the verdict alone goes to stdout, and the rest to stderr.
    console = _console_to(sys.stderr if args.json else sys.stdout)
    if args.report:
        given = [
            f for f, v in (("--nodelist", args.nodelist), ("--nodes", args.nodes), ("--cluster", args.cluster)) if v
        ]
        if given or args.out or args.dry_run:
            extra = ", ".join(given) or "--out or --dry-run"
            raise UsageError(
                f"--report DIR judges the check in DIR again; it takes --threshold and --json, not {extra}"
            )
        try:
            threshold = parse_threshold(args.threshold) if args.threshold else None
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return nodes.judge_again(Path(args.report), threshold, console, args.json)
    # The check's nodes come from the profile's partition, so a dry run needs it too.
    kind, profile = _executor(args, console, profile_on_dry_run=True)
    try:
        size = parse_size(args.bytes)
        threshold = parse_threshold(args.threshold or kind.node_threshold)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    options = Options(
        gpus_per_node=args.gpus_per_node,
        device=args.device,
        backend=args.backend,
        bytes=size,
        iters=args.iters,
        gemm_size=args.gemm_size,
        partners=args.partners,
        reference=tuple(nodes.expand(args.reference)) if args.reference else (),
        gemm=args.device != "cpu" if args.gemm is None else args.gemm,
        concurrency=args.concurrency or ((profile.max_running_jobs if profile else None) if kind.batch else 1),
        step_timeout_s=args.step_timeout,
    )
    _check_options(options)
    if args.time_limit is not None:
        try:
            check_time("time_limit_min", args.time_limit, "--time-limit")
        except FieldError as exc:
            raise UsageError(f"--time-limit {exc}") from None
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else _results_root() / f"nodes-{stamp}"
    return nodes.start(
        executor=kind,
        profile=profile,
        options=options,
        threshold=threshold,
        count=args.nodes,
        nodelist=args.nodelist,
        time_limit_min=args.time_limit,
        out=out,
        console=console,
        yes=args.yes,
        dry_run=args.dry_run,
        as_json=args.json,
        db=_db(args),
    )


def _check_options(options: Options) -> None:
    """The node check's options, checked; a bad one is a UsageError naming its flag."""
    try:
        check_options(options)
    except ValueError as exc:
        key = str(exc).split(" ", 1)[0]
        flag = {"step_timeout_s": "--step-timeout"}.get(key, f"--{key.replace('_', '-')}")
        raise UsageError(f"{flag}: {exc}") from None


def cmd_accept(args: argparse.Namespace) -> int:
    console = _console()
    kind, profile = _executor(args, console, profile_on_dry_run=True)
    assert profile is not None  # a batch executor has one (_executor)
    try:
        size = parse_size(args.bytes)
        threshold = parse_threshold(args.threshold)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    gpus = args.gpus_per_node or max((r.gpus_per_node or 1 for r in profile.reference), default=1)
    options = Options(gpus_per_node=gpus, bytes=size, iters=args.iters)
    _check_options(options)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return accept.start(
        executor=kind,
        profile=profile,
        profile_path=args.cluster or os.environ.get("BENCH_CLUSTER", ""),
        sweep_path=Path(args.sweep) if args.sweep else SHIPPED / "accept.yaml",
        options=options,
        threshold=threshold,
        nodelist=args.nodelist,
        count=None,
        out=Path(args.out) if args.out else _results_root() / f"accept-{stamp}",
        console=console,
        yes=args.yes,
        db=_db(args),
        dry_run=args.dry_run,
    )


def cmd_collect(args: argparse.Namespace) -> int:
    run = RunDir(args.dir)
    run.read_plan()
    with locked(run):
        summary, samples = collect(run, warn=lambda m: print(f"warning: {one_line(m)}", file=sys.stderr))
        write_summary(run, summary, samples)
    ok = summary.column("status").to_pylist().count(COMPLETED)
    print(f"{summary.num_rows} summary rows ({ok} COMPLETED) written to {run.summary_parquet} and {run.summary_csv}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    run = RunDir(args.dir)
    run.read_plan()
    summary = read_summary(run)
    written = draw_all(run, summary)
    console = _console()
    for path in written:
        console.print(f"wrote {path}")
    if not written:
        console.print("nothing to plot: the summary has no COMPLETED rows")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    run = RunDir(args.dir)
    jobs = run.jobs()
    table = run.read_table(jobs)
    console = _console()
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


# --------------------------------------------------------------------------- compare, history, regress, report


def _threshold(text: str, option: str = "--threshold") -> float:
    try:
        return parse_threshold(text, option)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _across(text: str | None) -> tuple[str, str, str] | None:
    if text is None:
        return None
    try:
        return parse_across(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _metrics(names: list[str] | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names)) if names else DEFAULT_METRICS


def _labels(text: str | None, a: str, b: str) -> tuple[str, str]:
    if text is None:
        return (a, b) if a != b else (f"A:{a}", f"B:{b}")
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip() for p in parts) or parts[0].strip() == parts[1].strip():
        raise UsageError(f"--labels {text!r} must be two different names separated by a comma, e.g. before,after")
    return parts[0].strip(), parts[1].strip()


def _check_out_dir(path: str | None, flag: str) -> Path | None:
    if path is None:
        return None
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{flag} {path}: is a file; give a directory (it is created if missing)")
    _check_can_create(p, flag)
    return p


def _check_can_create(path: Path, flag: str) -> None:
    """The nearest existing ancestor of `path` is a directory, so `path` can be created there."""
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"{flag} {path}: {parent} is not a directory")
            return


def _min_runs(value: int) -> int:
    if value < 3:
        raise UsageError(f"--min-runs {value}: a band needs at least 3 runs")
    return value


def _sides(dir_a: str, dir_b: str | None, across: tuple[str, str, str] | None) -> tuple[Side, Side]:
    """The two sides of a comparison: two runs, or one run twice when --across names the axis."""
    if dir_b is None and across is None:
        raise UsageError("give two run directories, or one with --across AXIS=A,B")
    a = load_run(dir_a)
    if dir_b is None:
        return a, a
    # a run against itself: the same figures under a label of its own (--labels A,B)
    return a, dataclasses.replace(a) if Path(dir_b).resolve() == Path(dir_a).resolve() else load_run(dir_b)


def cmd_compare(args: argparse.Namespace) -> int:
    threshold, across = _threshold(args.threshold), _across(args.across)
    csv_path, md_path = outputs.check(args.csv, "--csv"), outputs.check(args.markdown, "--markdown")
    plots = _check_out_dir(args.plots, "--plots")
    a, b = _sides(args.dir_a, args.dir_b, across)
    if a is not b:
        a.label, b.label = _labels(args.labels, a.label, b.label)
    cmp = compare(
        a,
        b,
        _metrics(args.metric),
        threshold,
        min_runs=_min_runs(args.min_runs),
        allow_mismatch=args.allow_mismatch,
        allow_rules_change=args.allow_rules_change,
        across=across,
    )
    if args.labels and a is b:
        cmp.a.label, cmp.b.label = _labels(args.labels, cmp.a.label, cmp.b.label)
    console = _console()
    print_comparison(console, cmp, args.top)
    if csv_path:
        outputs.write(csv_path, table_csv(cmp.table), "--csv")
        print(f"wrote {csv_path}")
    if md_path:
        outputs.write(
            md_path,
            (markdown(cmp, f"bench compare: {cmp.b.label} against {cmp.a.label}", include_same=True) + "\n").encode(),
            "--markdown",
        )
        print(f"wrote {md_path}")
    if plots:
        for path in draw_compare(plots, cmp.a.spread(), cmp.b.spread(), (cmp.a.label, cmp.b.label)):
            print(f"wrote {path}")
    return 0


def _env_path(name: str) -> Path | None:
    """A path from the environment variable `name`, None when it is unset."""
    value = os.environ.get(name)
    if value is None:
        return None
    if not value.strip():
        raise UsageError(f"{name} is set but empty; unset it or give a path")
    return Path(value)


def _results_root() -> Path:
    """Where run directories go by default: $BENCH_RESULTS, else results/ here."""
    return _env_path("BENCH_RESULTS") or Path("results")


def _db(args: argparse.Namespace) -> Path:
    """The history database: --db, else $BENCH_HISTORY, else history.sqlite in the results root."""
    return Path(args.db) if args.db else _env_path("BENCH_HISTORY") or _results_root() / "history.sqlite"


def cmd_history(args: argparse.Namespace) -> int:
    console = _console()
    db = _db(args)
    if args.action in ("add", "plot", "changes") and not args.cluster:
        raise UsageError(f"history {args.action} needs --cluster NAME")
    if args.action in ("add", "remove", "accept") and not args.dir:
        raise UsageError(
            "history add needs the run directory: bench history add DIR --cluster NAME"
            if args.action == "add"
            else f"history {args.action} needs the run id: bench history {args.action} ID"
            + (" --reason TEXT" if args.action == "accept" else "")
        )
    if args.action == "accept" and not args.reason:
        raise UsageError(
            "history accept needs --reason TEXT: why this run's level is the cluster's new normal "
            "(kept with it, and shown by history list)"
        )
    if args.count and args.action != "list":
        raise UsageError("--count is for history list")
    if args.action == "add" and nodehistory.is_check(Path(args.dir)):
        judged = nodes.verdict_of(Path(args.dir))
        check = nodehistory.add(db, Path(args.dir), args.cluster, args.label, judged)
        print(
            f"added the node check {args.dir} to {db} as node check {check.id} of cluster {check.cluster}"
            f"{f' (label {check.label})' if check.label else ''}: {check.nodes} nodes"
            + (f", named {check.named}" if check.named else "")
        )
        if judged.unjudged and not judged.named:  # kept as history, but not a clean check (docs/nodes.md)
            return EXIT_UNJUDGED
    elif args.action == "add":
        added = history.add(db, args.dir, args.cluster, args.label, Path(args.verdict) if args.verdict else None)
        e = added.entry
        print(
            f"added {args.dir} to {db} as run {e.id} of cluster {e.cluster}"
            f"{f' (label {e.label})' if e.label else ''}: {e.keys} keys, {e.rows} summary rows"
        )
        v = added.verdict
        if v is None:
            print("note: no verdict of bench regress with it: stored as not judged")
        elif v["verdict"] == gate.REJECTED:
            what = "all its keys" if gate.WHOLE in v["rejected"] else f"its {len(v['rejected'])} rejected keys"
            print(
                f"note: it failed the gate ({v['baseline']}): {what} never serve as a baseline, unless "
                f"`bench history accept {e.id} --reason TEXT` makes its level the new normal"
            )
        if added.failed_jobs:
            some = ", ".join(added.failed_jobs[:5]) + (", ..." if len(added.failed_jobs) > 5 else "")
            print(
                f"note: {len(added.failed_jobs)} job{'s' if len(added.failed_jobs) != 1 else ''} did not complete "
                f"({some}); their {e.failed} rows are stored as failed and never serve as a baseline"
            )
    elif args.action == "accept":
        e = history.accept(db, _run_id(args.dir, "accept"), args.reason)
        print(
            f"accepted run {e.id} of cluster {e.cluster} ({e.label or 'no label'}, ran {e.created}) as its new "
            f"normal: baselines begin at it"
        )
    elif args.action == "remove":
        run_id = _run_id(args.dir, "remove")
        if args.nodes:
            n = nodehistory.remove(db, run_id)
            print(f"removed node check {n.id} of cluster {n.cluster} (added from {n.path}) from {db}")
            return 0
        e = history.remove(db, run_id)
        print(f"removed run {e.id} of cluster {e.cluster} ({e.label or 'no label'}, added from {e.path}) from {db}")
    elif args.action == "check":
        checked, problems = history.check(db)
        for line in problems:
            print(line)
        print(
            f"checked {checked} run{'s' if checked != 1 else ''} in {db}: "
            + (f"{len(problems)} problem{'s' if len(problems) != 1 else ''}" if problems else "all readable")
        )
        return 1 if problems else 0
    elif args.action == "list" and args.count:  # for scripts (recipes/nightly.sh): a number, or a failure
        if not db.exists():
            print(f"bench history: {db} does not exist yet: 0 runs", file=sys.stderr)
            print(0)
        else:
            print(len(history.entries(db, args.cluster)))
    elif args.action == "list":
        from rich.table import Table

        # The node checks first, then the runs, the last line counting them.
        checks = nodehistory.entries(db, args.cluster)
        if checks:
            t = Table(title="Node checks (bench nodes)", title_justify="left")
            for col in ("id", "cluster", "label", "ran", "added", "nodes", "named", "path"):
                t.add_column(col)
            for c in checks:
                t.add_row(
                    str(c.id),
                    shown(c.cluster),
                    shown(c.label or "-"),
                    c.created,
                    c.added,
                    str(c.nodes),
                    shown(c.named or "-"),
                    shown(c.path),
                )
            console.print(t)
            console.print(f"{len(checks)} node check{'s' if len(checks) != 1 else ''}")
        found = history.entries(db, args.cluster)
        gated = history.gate_verdicts(db, found)
        t = Table(title=f"Runs in {shown(str(db))}", title_justify="left")
        for col in ("id", "cluster", "label", "sweep", "ran", "added", "keys", "failed rows", "gate", "path"):
            t.add_column(col)
        for e in found:
            t.add_row(
                str(e.id),
                shown(e.cluster),
                shown(e.label or "-"),
                shown(e.sweep or "-"),
                e.created,
                e.added,
                str(e.keys),
                str(e.failed),
                shown(_gate_cell(gated.get(e.id))),
                shown(e.path),
            )
        console.print(t)
        console.print(f"{len(found)} run{'s' if len(found) != 1 else ''}")
    elif args.action == "changes" and args.nodes:
        threshold = _threshold(args.threshold)
        checks, values = nodehistory.series(db, args.cluster)
        result = changes.steps_in(checks, values, threshold)
        text = changes.render(result, args.cluster, threshold, nodehistory.metric_label)
        console.print(text.replace(" runs;", " node checks;", 1), markup=False)
    elif args.action == "changes":
        threshold = _threshold(args.threshold)
        console.print(
            changes.render(
                changes.changes(db, args.cluster, _metrics(args.metric), threshold), args.cluster, threshold
            ),
            markup=False,
        )
    else:
        pts = history.points(db, args.cluster)
        if pts.empty:
            raise UsageError(f"{db}: no run of cluster {args.cluster!r}; see `bench history list`")
        out = Path(args.out) if args.out else db.parent / f"history-{_file_safe(args.cluster)}.png"
        outputs.check(str(out), "--out")
        png, points = history_figure(pts, args.cluster)
        outputs.write(out, png, "--out")
        csv = outputs.beside(out, ".csv")
        if csv is not None:
            atomic_write_bytes(csv, points)
        print(f"wrote {out}" + (f" and {csv}" if csv is not None else ""))
    return 0


def _run_id(text: str, action: str) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 18):
        raise UsageError(f"history {action} {text[:40]!r}: give the run's id, a number from `bench history list`")
    return int(text)


def _gate_cell(verdict: tuple[str, int, str | None, str | None] | None) -> str:
    """history list's gate column (analysis/gate.py)."""
    if verdict is None:
        return "-"
    word, rejected, accepted, reason = verdict
    if word == gate.REJECTED:
        word = f"failed ({'whole run' if rejected < 0 else f'{rejected} keys'})"
    return word + (f"; accepted {accepted}: {reason}" if accepted else "")


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "cluster"


def cmd_regress(args: argparse.Namespace) -> int:
    threshold = _threshold(args.threshold)
    named = _check_out_dir(args.out, "--out")
    db = _db(args)
    if args.baseline == reference.BASELINE:
        kind, k = reference.BASELINE, 1
        run = load_run(args.dir)
        profile = RunDir(args.dir).read_plan().get("cluster")
        name = (profile or {}).get("name", "none")
        cmp = reference.against_reference(run, reference.references(profile), name)
        where = f"the reference of cluster profile {name}"
    else:
        if not args.cluster:
            raise UsageError("regress needs --cluster NAME, the cluster whose history holds the baseline")
        kind, k = history.parse_baseline(args.baseline)
        run = load_run(args.dir)
        base = history.baseline(db, args.cluster, args.baseline, exclude=history.fingerprint(RunDir(args.dir)))
        cmp = compare(
            base,
            run,
            _metrics(args.metric),
            threshold,
            min_runs=k if kind == "median" else MIN_RUNS,
            allow_mismatch=args.allow_mismatch,
            allow_rules_change=args.allow_rules_change,
            margin=_threshold(args.provisional_margin, "--provisional-margin"),
        )
        where = f"{base.label} ({args.cluster})"
    console = _console()
    print_comparison(console, cmp, args.top)
    if kind == "median":
        few = int((cmp.table["test"] == BY_SAMPLES).sum())
        if few:
            console.print(
                f"{few} of {len(cmp.table)} keys have fewer than {k} usable runs in the history: judged "
                f"provisionally, against the median of the runs it has by the within-run test instead "
                f"of the band, and slower only beyond the provisional margin of {cmp.margin:.0%}",
                soft_wrap=True,
            )
    counts = cmp.counts()
    status = (
        EXIT_FOUND
        if counts[SLOWER] or counts[FAILED] or run_mismatches(cmp)
        else EXIT_UNJUDGED
        if counts[UNJUDGED] and not args.allow_unjudged
        else 0
    )
    # the verdict history add stores with the run, so that what failed never becomes a baseline
    verdict = gate.document(
        cmp,
        history.fingerprint(RunDir(args.dir)),
        None if kind == reference.BASELINE else args.cluster,
        args.baseline,
        status,
    )
    paths = write_all(
        cmp,
        named or Path(args.dir),
        "" if named else "regress",
        f"bench regress: {run.label} against {where}",
        benchmark_json=args.benchmark_json,
        strict=not args.allow_unjudged,
        verdict=gate.encode(verdict),
    )
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    word = {EXIT_FOUND: "REGRESSION: ", EXIT_UNJUDGED: "CANNOT JUDGE: ", 0: ""}[status]
    print(f"bench regress: {word}{summary_line(cmp)}", file=sys.stderr if status else sys.stdout)
    return status


def cmd_report(args: argparse.Namespace) -> int:
    run = RunDir(args.dir)
    out = outputs.check(args.out, "--out")
    across = _across(args.across)
    cmp = None
    if args.compare or across:
        side, other = _sides(args.dir, args.compare, across)
        if side is not other:
            side.label, other.label = _labels(args.labels, side.label, other.label)
        cmp = compare(
            side,
            other,
            _metrics(args.metric),
            _threshold(args.threshold),
            min_runs=_min_runs(args.min_runs),
            allow_mismatch=args.allow_mismatch,
            allow_rules_change=args.allow_rules_change,
            across=across,
        )
    else:
        side = load_run(args.dir)
    html = report.render(run, side, cmp).encode()
    if out:
        outputs.write(out, html, "--out")
    else:  # inside the run directory: never through a link planted there (harness/inside.py)
        out = inside.write(run.path, report.DEFAULT_NAME, html)
    print(f"wrote {out}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    run = RunDir(args.dir)
    plan = run.read_plan()
    out = outputs.check(args.out, "--out")
    recorded = "local" if executors.runs_here(plan.get("executor")) else (plan.get("cluster") or {}).get("name")
    cluster = args.cluster or recorded
    if not isinstance(cluster, str) or not NAME_RE.fullmatch(cluster):
        raise UsageError(f"--cluster {cluster!r}: not a valid name; use letters, digits, '_', '.', '-' (at most 64)")
    side = load_run(args.dir)
    labels = {"cluster": cluster}  # bounded: the run's name is no label (docs/export.md)
    created = plan.get("created")
    try:
        when = dt.datetime.fromisoformat(created) if isinstance(created, str) else None
    except ValueError:
        when = None
    if args.format == "openmetrics":
        junit = run.path / "regress" / "junit.xml"  # where bench regress and the nightly recipe write it
        head = ""
        with contextlib.suppress(OSError), open_regular(junit) as f:  # none, or not a file: no verdict
            head = f.read(4096).decode(errors="replace")
        text = export.openmetrics(side, labels, when, export.regress_verdict(head))
    else:
        if when is None:
            raise DataError(f"{run.plan_file}: no valid 'created' time, which the line protocol's timestamp needs")
        text = export.influx(side, labels, when, run.path.resolve().name)
    if out is None:
        sys.stdout.write(text)
    else:
        outputs.write(out, text.encode(), "--out")
        print(f"wrote {out}")
    return 0


def cmd_transport(args: argparse.Namespace) -> int:
    facts = [transport.read_log(Path(p)) for p in args.logs]
    if args.json:
        print(json.dumps(facts, indent=2))
    else:
        print("\n".join(one_line(line) for f in facts for line in transport.describe(f)))  # a log's words
    return 0


# --------------------------------------------------------------------------- parser


DB_HELP = "history database (default $BENCH_HISTORY, else history.sqlite in $BENCH_RESULTS or results/)"


class _Version(argparse.Action):
    """`bench --version`: which bench this is (docs/provenance.md), read only when asked, since
    the commit takes a git call."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print bench's version, commit and measurement rules")

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None) -> None:
        import platform
        from importlib import metadata

        try:
            torch = metadata.version("torch")
        except metadata.PackageNotFoundError:
            torch = "not installed"
        print(f"bench {provenance.describe(provenance.record())}; Python {platform.python_version()}, torch {torch}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="bench", description="Scaling benchmarks for distributed PyTorch training.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("sweep", help="run (or --dry-run plan) a sweep of jobs")
    s.add_argument(
        "sweep", nargs="?", help="sweep YAML (default: sweeps/local.yaml locally, sweeps/default.yaml on Slurm)"
    )
    s.add_argument("--max-nodes", type=_positive_int, help="cap the node axis (or set it, for nodes: powers_of_two)")
    s.add_argument(
        "--repeat",
        type=_positive_int,
        metavar="N",
        help="run every job N times, replicate by replicate across the matrix (sweep key repeat)",
    )
    s.add_argument("--executor", choices=(executors.AUTO, *executors.NAMES), default=executors.AUTO)
    s.add_argument("--out", help="run directory (default <sweep>-<timestamp> in $BENCH_RESULTS, else in results/)")
    s.add_argument(
        "--yes",
        action="store_true",
        help="submit without asking, whatever the cost (needed without a terminal above the profile's "
        "confirm_above_node_hours)",
    )
    s.add_argument("--dry-run", action="store_true", help="write and print the plan, run nothing")
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

    def analysis(c: argparse.ArgumentParser) -> None:
        c.add_argument(
            "--metric",
            action="append",
            choices=list(METRICS),
            help="metric to compare (repeatable; default busbw_gbps and images_per_s)",
        )
        c.add_argument("--threshold", default="5%", help="smallest change that counts, e.g. 5%% (default 5%%)")
        c.add_argument("--top", type=_positive_int, default=30, help="rows shown in the terminal (default 30)")
        c.add_argument(
            "--allow-mismatch",
            action="store_true",
            help="compare keys whose workload parameters or settings differ (every output says so)",
        )
        c.add_argument(
            "--allow-rules-change",
            action="store_true",
            help="judge runs measured under different measurement rules of bench (docs/provenance.md; "
            "every output says so)",
        )

    def pairwise(c: argparse.ArgumentParser) -> None:
        c.add_argument(
            "--across",
            metavar="AXIS=A,B",
            help=f"compare two configurations: A's rows of AXIS value A against B's of value B (one run "
            f"is enough); AXIS: {', '.join(AXES)}",
        )
        c.add_argument(
            "--min-runs",
            type=int,
            default=MIN_RUNS,
            metavar="K",
            help=f"judge a key by the band of A's runs where A has K or more (replicates from "
            f"--repeat); default {MIN_RUNS}",
        )
        c.add_argument("--labels", metavar="A,B", help="names of the two sides in output and plots")

    c = sub.add_parser("compare", help="compare two runs (or two configurations of one) key by key")
    c.add_argument("dir_a", metavar="DIR_A", help="run directory A (the reference)")
    c.add_argument("dir_b", metavar="DIR_B", nargs="?", help="run directory B (default: DIR_A, with --across)")
    analysis(c)
    pairwise(c)
    c.add_argument("--csv", metavar="FILE", help="write every compared row as CSV")
    c.add_argument("--markdown", metavar="FILE", help="write the comparison as markdown")
    c.add_argument("--plots", metavar="DIR", help="write compare_busbw.png and compare_scaling.png here")
    c.set_defaults(func=cmd_compare)

    h = sub.add_parser("history", help="store runs per cluster; list, plot, check, remove; find change points")
    h.add_argument("action", choices=("add", "list", "plot", "changes", "check", "remove", "accept"))
    h.add_argument("dir", nargs="?", metavar="DIR|ID", help="run directory (add) or run id (remove, accept)")
    h.add_argument("--cluster", help="cluster name (required for add, plot and changes; a filter for list)")
    h.add_argument("--label", help="label of the run (history add), e.g. nccl-2.21 or after-ib-fix")
    h.add_argument("--db", help=DB_HELP)
    h.add_argument(
        "--verdict",
        metavar="FILE",
        help="the gate.json bench regress wrote for the run (history add; default DIR/regress/gate.json)",
    )
    h.add_argument("--reason", help="why the run's level is the new normal (history accept; required)")
    h.add_argument("--count", action="store_true", help="history list: print only the number of runs, for scripts")
    h.add_argument("--out", help="image file (history plot; default beside the database)")
    h.add_argument(
        "--metric",
        action="append",
        choices=list(METRICS),
        help="metric whose series to search for change points (history changes; repeatable)",
    )
    h.add_argument("--threshold", default="5%", help="smallest step history changes reports (default 5%%)")
    h.add_argument(
        "--nodes",
        action="store_true",
        help="node checks (`bench nodes`): history changes searches each node's and pair's figures; "
        "history remove takes a node check's id",
    )
    h.set_defaults(func=cmd_history)

    g = sub.add_parser(
        "regress",
        help="compare a run with a baseline from the history; exit 1 on a regression or "
        "a failed key, 3 on a key that cannot be judged",
    )
    g.add_argument("dir", help="run directory")
    g.add_argument("--cluster", help="cluster whose history holds the baseline (not with --baseline reference)")
    g.add_argument(
        "--baseline",
        default=DEFAULT_BASELINE,
        help=f"{BASELINE_HELP} | reference: the run's cluster profile's reference figures, no history "
        f"(default {DEFAULT_BASELINE})",
    )
    g.add_argument("--db", help=DB_HELP)
    g.add_argument("--out", help="directory for report.md and junit.xml (default DIR/regress)")
    g.add_argument(
        "--allow-unjudged",
        action="store_true",
        help="exit 0 when keys cannot be judged but nothing regressed or failed (they are still reported)",
    )
    g.add_argument(
        "--benchmark-json",
        action="store_true",
        help="also write benchmark.json in pytest-benchmark's format (large for big sweeps)",
    )
    g.add_argument(
        "--provisional-margin",
        metavar="PCT",
        default=f"{PROVISIONAL_MARGIN:.0%}",
        help="while the history holds fewer runs of a key than the band needs (a gate's first nights), "
        "a change must pass this too to count; 0%% leaves --threshold alone "
        f"(default {PROVISIONAL_MARGIN * 100:.0f}%%, docs/noise.md)",
    )
    analysis(g)
    g.set_defaults(func=cmd_regress)

    o = sub.add_parser("report", help="write one self-contained HTML report of a run")
    o.add_argument("dir", help="run directory")
    o.add_argument("--compare", metavar="DIR_B", help="add a comparison of DIR (as A) with DIR_B")
    o.add_argument("--out", metavar="FILE", help="HTML file (default DIR/report.html)")
    analysis(o)
    pairwise(o)
    o.set_defaults(func=cmd_report)

    x = sub.add_parser(
        "export", help="a run's figures for node_exporter's textfile collector (OpenMetrics) or InfluxDB"
    )
    x.add_argument("dir", help="run directory")
    x.add_argument("--format", choices=export.FORMATS, required=True)
    x.add_argument("--out", metavar="FILE", help="file to write, replaced atomically (default: standard output)")
    x.add_argument("--cluster", help="the cluster label (default: the run's cluster profile name, or local)")
    x.set_defaults(func=cmd_export)

    t = sub.add_parser(
        "transport",
        help="what NCCL's debug log (NCCL_DEBUG=INFO) says the job ran over: network, devices, GPUDirect RDMA, "
        "transports inside a node, channels, warnings",
    )
    t.add_argument("logs", nargs="+", metavar="LOG", help="an NCCL log, or a directory of per-rank logs")
    t.add_argument("--json", action="store_true", help="one JSON object per LOG; a fact the log does not state is null")
    t.set_defaults(func=cmd_transport)

    n = sub.add_parser(
        "nodes", help="check every node and every pair of nodes, and name the ones to drain (docs/nodes.md)"
    )
    n.add_argument("--executor", choices=(executors.AUTO, *executors.NAMES), default=executors.AUTO)
    n.add_argument("--cluster", metavar="PROFILE", help="cluster profile YAML (default $BENCH_CLUSTER)")
    n.add_argument("--db", help=DB_HELP + "; the estimate takes the last check of the profile's cluster")
    n.add_argument(
        "--nodelist",
        metavar="HOSTLIST",
        help="the nodes to check, in Slurm's hostlist syntax (default: the profile's partition's usable nodes)",
    )
    n.add_argument("--nodes", type=_positive_int, metavar="N", help="emulated nodes of the local executor (default 4)")
    n.add_argument("--gpus-per-node", type=_positive_int, default=1, metavar="G", help="ranks per node (default 1)")
    n.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    n.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    n.add_argument(
        "--bytes", default="64M", metavar="SIZE", help="message of the all-reduce and the exchange (default 64M)"
    )
    n.add_argument("--iters", type=_positive_int, default=20, help="timed calls of each collective (default 20)")
    n.add_argument(
        "--gemm-size", type=int, default=0, metavar="N", help="matmul side (default 8192 on GPUs, 1024 on CPUs)"
    )
    n.add_argument(
        "--partners",
        type=_positive_int,
        metavar="K",
        help="test each node against K others (the first K rounds; K at least 3, so that a slow link is not "
        "taken for a slow node) rather than every pair: K rounds, not N-1",
    )
    n.add_argument(
        "--reference",
        metavar="HOSTLIST",
        help="known-good nodes: they meet each other, then every other node meets one of them; "
        "R-1 + (N-R)/R rounds for R of them",
    )
    n.add_argument(
        "--concurrency",
        type=_positive_int,
        metavar="K",
        help="steps of a round at once (default: all on Slurm, or the profile's max_running_jobs; 1 locally, "
        "where emulated nodes share the CPUs)",
    )
    n.add_argument(
        "--gemm",
        action=argparse.BooleanOptionalAction,
        help="each node's matmul throughput (default on, off with --device cpu)",
    )
    n.add_argument(
        "--threshold",
        help="the least shortfall against the other nodes' median (for a link, its nodes') that names it "
        "(default 10%%; 50%% locally, where the emulated nodes are one machine)",
    )
    n.add_argument(
        "--step-timeout",
        type=float,
        default=Options.step_timeout_s,
        metavar="S",
        help=f"a step running longer fails (default {Options.step_timeout_s:g})",
    )
    n.add_argument(
        "--time-limit", type=float, metavar="MIN", help="the Slurm job's limit (default: rounds x step timeout + 5)"
    )
    n.add_argument("--out", help="run directory (default nodes-<timestamp> in $BENCH_RESULTS, else in results/)")
    n.add_argument("--json", action="store_true", help="print the verdict as JSON on stdout (the rest on stderr)")
    n.add_argument("--yes", action="store_true", help="submit without asking, whatever the node-hours")
    n.add_argument("--dry-run", action="store_true", help="write the job's scripts, submit nothing")
    n.add_argument(
        "--report",
        metavar="DIR",
        help="judge the check in DIR again (with --threshold, if given) and rewrite its verdict's files",
    )
    n.set_defaults(func=cmd_nodes)

    a = sub.add_parser(
        "accept",
        help="after maintenance: the node check, the sweep the profile's references name, one verdict and a "
        "report to sign (docs/accept.md)",
    )
    a.add_argument("--executor", choices=(executors.AUTO, *executors.BATCH), default=executors.AUTO)
    a.add_argument(
        "--cluster", metavar="PROFILE", help="cluster profile YAML, with reference: figures (default $BENCH_CLUSTER)"
    )
    a.add_argument("--nodelist", metavar="HOSTLIST", help="the nodes to check (default: the profile's partition's)")
    a.add_argument(
        "--sweep", help="the acceptance sweep, narrowed to the references' keys (default: bench's accept.yaml)"
    )
    a.add_argument(
        "--gpus-per-node",
        type=_positive_int,
        metavar="G",
        help="the node check's ranks per node (default: the most the references name, else 1)",
    )
    a.add_argument("--bytes", default="64M", metavar="SIZE", help="the node check's message (default 64M)")
    a.add_argument("--iters", type=_positive_int, default=20, help="the node check's timed calls (default 20)")
    a.add_argument("--threshold", default="10%", help="the node check's threshold (default 10%%)")
    a.add_argument("--db", help=DB_HELP + "; the node check's estimate takes the cluster's last check")
    a.add_argument(
        "--out", help="directory of the acceptance (default accept-<timestamp> in $BENCH_RESULTS, else results/)"
    )
    a.add_argument("--yes", action="store_true", help="submit without asking, whatever the node-hours")
    a.add_argument(
        "--dry-run",
        action="store_true",
        help="write the node check's and the sweep's job scripts and show their cost; submit nothing",
    )
    a.set_defaults(func=cmd_accept)

    for name, func, text in (
        ("collect", cmd_collect, "rebuild summary.parquet/csv from the job results"),
        ("plot", cmd_plot, "redraw the plots from the summary"),
        ("status", cmd_status, "show the job table of a run"),
    ):
        c = sub.add_parser(name, help=text)
        c.add_argument("dir", help="run directory")
        c.set_defaults(func=func)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # a path with undecodable bytes is printed, not fatal
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    # `bench run WORKLOAD ...` hands everything after the workload to it, --help included; the
    # run subcommand has no --help of its own, so `bench run --help` is answered here.
    if argv[:1] == ["run"] and argv[1:] in (["-h"], ["--help"]):
        print(RUN_HELP)
        return 0
    if len(argv) >= 2 and argv[0] == "run" and argv[1] in (*WORKLOADS, *PROBES):
        return cmd_run(argparse.Namespace(workload=argv[1], workload_args=argv[2:]))
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BenchError as exc:
        print(f"bench {args.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        print(f"bench {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `bench compare A B | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except Exception as exc:
        # A bug in bench: still one line, and the traceback for whoever asks for it.
        if os.environ.get("BENCH_DEBUG"):
            raise
        print(
            f"bench {args.command}: internal error (a bug in bench; BENCH_DEBUG=1 shows where): "
            f"{type(exc).__name__}: {one_line(str(exc))}",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def entry() -> int:
    """The `bench` console script: `main`, then the process ends at once with main's status.

    After main a Ctrl-C ends the process quietly, the work and its one line being done (Python
    would print a KeyboardInterrupt traceback). And the interpreter's teardown is skipped: a
    pyarrow worker thread still alive then makes libstdc++ abort the process, which turns exit
    status 0 or 2 into SIGABRT now and then (apache/arrow#34314). Every file bench writes is
    complete and closed before main returns; only the standard streams need flushing.
    BENCH_DEBUG=1 keeps the normal exit, for profilers and debuggers that report at exit.
    """
    try:
        status = main()
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    if os.environ.get("BENCH_DEBUG"):
        return status
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, OSError):
        pass
    os._exit(status)


if __name__ == "__main__":
    sys.exit(entry())
