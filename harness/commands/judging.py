"""The commands that judge runs and say what they did: `compare`, `regress`, `report`, `export`
and `transport`; each command beside its parser."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import functools
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import parse_size
from benchmarks.results import open_regular
from harness import executors
from harness.analysis import gate, history, profile_reference, series
from harness.analysis.baseline import keys_beyond
from harness.analysis.compare import (
    AXES,
    BY_SAMPLES,
    FAILED,
    MIN_RUNS,
    ONLY_A,
    PROVISIONAL_MARGIN,
    SLOWER,
    UNJUDGED,
    compare,
    parse_across,
)
from harness.analysis.gating import MUST_CATCH, hold_to, watch_below, weigh_run_noise
from harness.analysis.history import BASELINE_HELP, DEFAULT_BASELINE
from harness.analysis.sides import METRICS, Side, load_run, read_run, recorded_environment
from harness.commands.shared import (
    DB_HELP,
    history_db,
    metric_names,
    new_console,
    out_dir_arg,
    positive_int,
    threshold_arg,
)
from harness.config.spec import NAME_RE
from harness.errors import EXIT_FOUND, EXIT_UNJUDGED, BenchError, DataError, UsageError, one_line, shown
from harness.evidence import transport
from harness.files import inside, user_files
from harness.present import export, report
from harness.present.compare_plot import draw_compare
from harness.present.regress import summary_line, write_all
from harness.present.tables import markdown, print_comparison, run_mismatches, table_csv
from harness.run import forked
from harness.run.rundir import RunDir, RunDirError

if TYPE_CHECKING:
    import pandas as pd

    from harness.analysis.store import Location


def _across(text: str | None) -> tuple[str, str, str] | None:
    if text is None:
        return None
    try:
        return parse_across(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _labels(text: str | None, a: str, b: str) -> tuple[str, str]:
    if text is None:
        return (a, b) if a != b else (f"A:{a}", f"B:{b}")
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip() for p in parts) or parts[0].strip() == parts[1].strip():
        raise UsageError(f"--labels {text!r} must be two different names separated by a comma, e.g. before,after")
    return parts[0].strip(), parts[1].strip()


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
    threshold, across = threshold_arg(args.threshold), _across(args.across)
    csv_path, md_path = user_files.check(args.csv, "--csv"), user_files.check(args.markdown, "--markdown")
    plots = out_dir_arg(args.plots, "--plots")
    a, b = _sides(args.dir_a, args.dir_b, across)
    if a is not b:
        a.label, b.label = _labels(args.labels, a.label, b.label)
    cmp = compare(
        a,
        b,
        metric_names(args.metric),
        threshold,
        min_runs=_min_runs(args.min_runs),
        allow_mismatch=args.allow_mismatch,
        allow_rules_change=args.allow_rules_change,
        across=across,
    )
    if args.labels and a is b:
        cmp.a.label, cmp.b.label = _labels(args.labels, cmp.a.label, cmp.b.label)
    console = new_console()
    print_comparison(console, cmp, args.top)
    if csv_path:
        user_files.write(csv_path, table_csv(cmp.table), "--csv")
        print(f"wrote {csv_path}")
    if md_path:
        user_files.write(
            md_path,
            (markdown(cmp, f"bench compare: {cmp.b.label} against {cmp.a.label}", include_same=True) + "\n").encode(),
            "--markdown",
        )
        print(f"wrote {md_path}")
    if plots:
        for path in draw_compare(plots, cmp.a.spread(), cmp.b.spread(), (cmp.a.label, cmp.b.label)):
            print(f"wrote {path}")
    return 0


def cmd_regress(args: argparse.Namespace) -> int:
    threshold = threshold_arg(args.threshold)
    must_catch = threshold_arg(args.must_catch, "--must-catch", whole=True)
    named = out_dir_arg(args.out, "--out")
    db = history_db(args)
    new_series: history.NewSeries | None = None
    if args.baseline == profile_reference.BASELINE:
        kind, k = profile_reference.BASELINE, 1
        run = load_run(args.dir)
        profile = RunDir(args.dir).read_plan().get("cluster")
        name = (profile or {}).get("name", "none")
        cmp = profile_reference.against_reference(run, profile_reference.references(profile), name)
        where = f"the reference of cluster profile {name}"
    else:
        if not args.cluster:
            raise UsageError("regress needs --cluster NAME, the cluster whose history holds the baseline")
        kind, k = history.parse_baseline(args.baseline)
        run, base, new_series = _run_and_baseline(args, db)
        cmp = compare(
            base,
            run,
            metric_names(args.metric),
            threshold,
            min_runs=k if kind == "median" else MIN_RUNS,
            allow_mismatch=args.allow_mismatch,
            allow_rules_change=args.allow_rules_change,
            margin=threshold_arg(args.provisional_margin, "--provisional-margin"),
        )
        where = f"{base.label} ({args.cluster})"
    if new_series is not None:
        # a key that failed tonight fails whatever the series; the others have nothing to be judged by
        figures = (cmp.table["verdict"] != FAILED).to_numpy(dtype=bool)
        cmp.table.loc[figures, "verdict"] = UNJUDGED
        cmp.table.loc[figures, "note"] = (
            f"a new series: {'; '.join(new_series.differences)}; shown against the series before it"
        )
    elif kind != profile_reference.BASELINE:
        weigh_run_noise(cmp, run.run_spread, lambda: history.spreads(db, base.entries), must_catch)
    hold_to(cmp, must_catch)
    if args.gate_min_size is not None:
        watch_below(cmp, args.gate_min_size)
    counts = cmp.gate_counts()
    status = (
        EXIT_FOUND
        if counts[SLOWER] or counts[FAILED] or run_mismatches(cmp)
        else EXIT_UNJUDGED
        if (counts[UNJUDGED] or counts[ONLY_A]) and not args.allow_unjudged
        else 0
    )

    def show() -> None:  # the comparison on the console, while write_all's worker makes its part
        console = new_console()
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
        if new_series is not None:
            console.print(
                f"this run starts a new series of cluster {shown(args.cluster)} (stack {new_series.stack}): "
                f"{shown('; '.join(new_series.differences))}. Its figures are shown against the series before it "
                f"({shown(new_series.newest.name)} the newest) and not judged; added to the history, it is the first "
                f"baseline of its series (docs/guides/fleet.md)",
                markup=False,
                soft_wrap=True,
            )

    # the verdict history add stores with the run, so that what failed never becomes a baseline
    fingerprint = history.fingerprint(RunDir(args.dir))
    cluster = None if kind == profile_reference.BASELINE else args.cluster
    paths = write_all(
        cmp,
        named or Path(args.dir),
        "" if named else "regress",
        f"bench regress: {run.label} against {where}",
        benchmark_json=args.benchmark_json,
        strict=not args.allow_unjudged,
        verdict=lambda: gate.encode(gate.document(cmp, fingerprint, cluster, args.baseline, status, kind, k)),
        meanwhile=show,
    )
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    word = {EXIT_FOUND: "REGRESSION: ", EXIT_UNJUDGED: "CANNOT JUDGE: ", 0: ""}[status]
    print(f"bench regress: {word}{summary_line(cmp)}", file=sys.stderr if status else sys.stdout)
    return status


def _run_and_baseline(args: argparse.Namespace, db: Location) -> tuple[Side, Side, history.NewSeries | None]:
    """The run under test, loaded by a forked worker, and its baseline, drawn from the history by
    this process meanwhile (harness/run/forked.py), side by side rather than one after the other
    (docs/guides/fleet.md, "A large run against a month of nights"). The baseline needs only the
    stack the run ran on, read from its plan and its summary's footer. A run that cannot be read
    is said before anything of the history, as when the two were done in turn. Where the run has
    keys the baseline lacks (the history's newest run a smaller sweep), the baseline is drawn
    again with them, from the older runs that hold them."""
    run_dir = RunDir(args.dir)
    environment = recorded_environment(run_dir)
    try:
        plan = run_dir.read_plan()
    except RunDirError:
        environment = None
    if environment is None:  # read_run says what is wrong with the run, in its own words
        tables = read_run(args.dir)
        environment, plan, load = tables.environment, tables.run.read_plan(), tables.side
    else:
        load = functools.partial(load_run, args.dir)
    stack = None if args.across_series else series.of(environment, plan.get("cluster"))
    draw = functools.partial(
        _baseline, db, args.cluster, args.baseline, history.fingerprint(run_dir), stack, metric_names(args.metric)
    )
    with forked.beside(load) as loaded:
        try:
            base, new_series = draw()
        except BenchError:
            loaded()  # the run's own error first, where it has one
            raise
        side = loaded()
    beyond = keys_beyond(side, base)
    if len(beyond):
        base, new_series = draw(beyond)
    return side, base, new_series


def _baseline(
    db: Location,
    cluster: str,
    how: str,
    exclude: str,
    stack: dict[str, Any] | None,
    metrics: tuple[str, ...],
    also: pd.DataFrame | None = None,
) -> tuple[Side, history.NewSeries | None]:
    """The baseline of the run's series, drawn for the metrics judged (and `also` the keys it
    names, history.baseline); where none of the cluster's runs shares its stack, the baseline
    of the series before it, with the NewSeries that says so."""
    try:
        return history.baseline(db, cluster, how, exclude=exclude, stack=stack, metrics=metrics, also=also), None
    except history.NewSeries as exc:  # shown against the series before it, and not judged
        return history.baseline(db, cluster, how, exclude=exclude, metrics=metrics, also=also), exc


def cmd_report(args: argparse.Namespace) -> int:
    run = RunDir(args.dir)
    out = user_files.check(args.out, "--out")
    across = _across(args.across)
    cmp = None
    if args.compare or across:
        side, other = _sides(args.dir, args.compare, across)
        if side is not other:
            side.label, other.label = _labels(args.labels, side.label, other.label)
        cmp = compare(
            side,
            other,
            metric_names(args.metric),
            threshold_arg(args.threshold),
            min_runs=_min_runs(args.min_runs),
            allow_mismatch=args.allow_mismatch,
            allow_rules_change=args.allow_rules_change,
            across=across,
        )
    else:
        side = load_run(args.dir)
    html = report.render(run, side, cmp).encode()
    if out:
        user_files.write(out, html, "--out")
    else:  # inside the run directory: never through a link planted there (harness/files/inside.py)
        out = inside.write(run.path, report.DEFAULT_NAME, html)
    print(f"wrote {out}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    run = RunDir(args.dir)
    plan = run.read_plan()
    out = user_files.check(args.out, "--out")
    recorded = "local" if executors.runs_here(plan.get("executor")) else (plan.get("cluster") or {}).get("name")
    cluster = args.cluster or recorded
    if not isinstance(cluster, str) or not NAME_RE.fullmatch(cluster):
        raise UsageError(f"--cluster {cluster!r}: not a valid name; use letters, digits, '_', '.', '-' (at most 64)")
    side = load_run(args.dir)
    labels = {"cluster": cluster}  # bounded: the run's name is no label (docs/guides/export.md)
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
        user_files.write(out, text.encode(), "--out")
        print(f"wrote {out}")
    return 0


def cmd_transport(args: argparse.Namespace) -> int:
    facts = [transport.read_log(Path(p)) for p in args.logs]
    if args.json:
        print(json.dumps(facts, indent=2))
    else:
        print("\n".join(one_line(line) for f in facts for line in transport.describe(f)))  # a log's words
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The group's subcommands, on `sub`."""

    def analysis(c: argparse.ArgumentParser) -> None:
        c.add_argument(
            "--metric",
            action="append",
            choices=list(METRICS),
            help="metric to compare (repeatable; default busbw_gbps and images_per_s)",
        )
        c.add_argument("--threshold", default="5%", help="smallest change that counts, e.g. 5%% (default 5%%)")
        c.add_argument("--top", type=positive_int, default=30, help="rows shown in the terminal (default 30)")
        c.add_argument(
            "--allow-mismatch",
            action="store_true",
            help="compare keys whose workload parameters or settings differ (every output says so)",
        )
        c.add_argument(
            "--allow-rules-change",
            action="store_true",
            help="judge runs measured under different measurement rules of bench (docs/concepts/provenance.md; "
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
        "--across-series",
        action="store_true",
        help="draw the baseline from every run of the cluster, not only those of the run's stack "
        '(its GPUs, drivers, NCCL, torch, profile: docs/guides/fleet.md, "What a series is")',
    )
    g.add_argument(
        "--must-catch",
        metavar="PCT",
        default=f"{MUST_CATCH:.0%}",
        help="the fall every key must be able to catch: a key with no significant change whose noise hides a "
        "fall this large cannot be judged (exit 3), not unchanged; 100%% asks nothing "
        f"(default {MUST_CATCH * 100:.0f}%%, docs/concepts/noise.md)",
    )
    g.add_argument(
        "--gate-min-size",
        metavar="SIZE",
        type=_size,
        help="collective keys of smaller messages are watched: judged and listed, but only a failed job among "
        "them sets the exit status (e.g. 1M; training keys always gate)",
    )
    g.add_argument(
        "--provisional-margin",
        metavar="PCT",
        default=f"{PROVISIONAL_MARGIN:.0%}",
        help="while the history holds fewer runs of a key than the band needs (a gate's first nights), "
        "a change must pass this too to count; 0%% leaves --threshold alone "
        f"(default {PROVISIONAL_MARGIN * 100:.0f}%%, docs/concepts/noise.md)",
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
    x.add_argument(
        "--format",
        choices=export.FORMATS,
        required=True,
        help="openmetrics (node_exporter's textfile collector) or influx",
    )
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
