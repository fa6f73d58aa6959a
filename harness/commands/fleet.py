"""`bench history`: a cluster's runs and node checks in the history database, added, listed,
plotted, checked, accepted and removed, and their change points; the command beside its parser."""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.results import atomic_write_bytes
from harness import check_nodes
from harness.analysis import changes, gate, history, nodehistory, overview, predicted, store, transfer
from harness.analysis.sides import METRICS
from harness.commands.shared import (
    DB_HELP,
    history_db,
    metric_names,
    new_console,
    out_dir_arg,
    results_root,
    threshold_arg,
)
from harness.errors import EXIT_UNJUDGED, UsageError, shown
from harness.files import user_files
from harness.present import dashboard
from harness.present.compare_plot import history_figure

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console


def history_add(args: argparse.Namespace) -> int:
    """`bench history add DIR --cluster NAME`: a run, or a node check (bench nodes), and the
    verdict bench regress gave it."""
    db = history_db(args)
    if nodehistory.is_check(Path(args.dir)):
        return _add_check(args, db)
    verdict_file = Path(args.verdict) if args.verdict else None
    added = history.add(
        db,
        args.dir,
        args.cluster,
        args.label,
        verdict_file,
        replace=args.replace,
        create=args.create,
        new_cluster=args.new_cluster,
    )
    e = added.entry
    if added.existing:
        print(f"{args.dir} is in {db} already, as run {e.id} of cluster {e.cluster} with these figures: nothing added")
        _print_predictions(added)
        return 0
    print(
        f"added {args.dir} to {db} as run {e.id} of cluster {e.cluster}"
        f"{f' (label {e.label})' if e.label else ''}: {e.keys} keys, {e.rows} summary rows"
        + (f", in place of run {added.replaced}" if added.replaced is not None else "")
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
    _print_predictions(added)
    return 0


def _print_predictions(added: history.Added) -> None:
    """What history add did with predictions: the run's own kept, and stored ones it measured."""
    if added.predictions:
        print(f"kept its {added.predictions} predictions (bench predict): `bench history predictions` lists them")
    if added.unkept:
        print(f"note: {added.unkept}")
    if added.measured:
        print(f"measured {added.measured} stored predictions: `bench history predictions` gives their errors")


def _add_check(args: argparse.Namespace, db: store.Location) -> int:
    """history add of a node check's run directory, with the verdict it reaches."""
    judged = check_nodes.verdict_of(Path(args.dir))
    check = nodehistory.add(
        db, Path(args.dir), args.cluster, args.label, judged, create=args.create, new_cluster=args.new_cluster
    )
    if check.existing:
        print(
            f"{args.dir} is in {db} already, as node check {check.id} of cluster {check.cluster} with these "
            f"figures: nothing added"
        )
    else:
        print(
            f"added the node check {args.dir} to {db} as node check {check.id} of cluster {check.cluster}"
            f"{f' (label {check.label})' if check.label else ''}: {check.nodes} nodes"
            + (f", named {check.named}" if check.named else "")
        )
    if judged.unjudged and not judged.named:  # kept as history, but not a clean check (docs/guides/nodes.md)
        return EXIT_UNJUDGED
    return 0


def history_list(args: argparse.Namespace) -> int:
    """`bench history list [--cluster NAME] [--count]`: the node checks, then the runs, the last
    line counting them; --count prints the number of runs alone."""
    db = history_db(args)
    if args.count:
        # for scripts (recipes/nightly.sh): a number, or exit 2 with a line where the history does
        # not exist or does not know the cluster; never a 0 that a script would take for a first night
        print(len(history.entries(db, args.cluster)))
        return 0
    console = new_console()
    checks = nodehistory.entries(db, args.cluster)
    if checks:
        _print_table(
            console,
            "Node checks (bench nodes)",
            ("id", "cluster", "label", "ran", "added", "nodes", "named", "path"),
            [
                (
                    str(c.id),
                    shown(c.cluster),
                    shown(c.label or "-"),
                    c.created,
                    c.added,
                    str(c.nodes),
                    shown(c.named or "-"),
                    shown(c.path),
                )
                for c in checks
            ],
        )
        console.print(f"{len(checks)} node check{'s' if len(checks) != 1 else ''}")
    found = history.entries(db, args.cluster)
    gated = history.gate_verdicts(db, found)
    stacks = history.series_of(db, found, args.cluster)
    _print_table(
        console,
        f"Runs in {shown(str(db))}",
        ("id", "cluster", "label", "sweep", "ran", "added", "keys", "failed rows", "gate", "stack", "path"),
        [
            (
                str(e.id),
                shown(e.cluster),
                shown(e.label or "-"),
                shown(e.sweep or "-"),
                e.created,
                e.added,
                str(e.keys),
                str(e.failed),
                shown(_gate_cell(gated.get(e.id))),
                stacks[e.id][0],
                shown(e.path),
            )
            for e in found
        ],
    )
    for e in found:  # where a series starts, runs before it are not compared with runs after
        differs = stacks[e.id][1]
        if differs:
            console.print(
                f"run {e.id} of cluster {shown(e.cluster)} starts a new series (stack {stacks[e.id][0]}): "
                f"{shown('; '.join(differs))}; runs before it are not its baseline",
                markup=False,
                soft_wrap=True,
            )
    console.print(f"{len(found)} run{'s' if len(found) != 1 else ''}")
    return 0


def _print_table(console: Console, title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """One table of history list: its title, columns and rows, each cell text already made safe."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*row)
    console.print(t)


def history_predictions(args: argparse.Namespace) -> int:
    """`bench history predictions --cluster NAME [--all]`: the predictions kept with the cluster's
    runs, each against what the first later run to measure its key measured, and per metric how
    good they were (docs/concepts/predict.md, "Predictions in the history")."""
    db = history_db(args)
    found = predicted.judged(db, args.cluster)
    if not found:
        print(
            f"no predictions kept with the runs of cluster {shown(args.cluster)} in {db}: `bench predict RUN`, "
            "then `bench history add RUN`, keeps them"
        )
        return 0
    console = new_console()
    listed = found if args.all else [j for j in found if j.measured is not None]

    def figure(v: float | None) -> str:
        return "-" if v is None else f"{v:.4g}"

    if listed:
        _print_table(
            console,
            f"Predictions of cluster {shown(args.cluster)}" + ("" if args.all else ", measured since"),
            (
                "predicted by",
                "key",
                "metric",
                "predicted",
                "95% interval",
                "measured by",
                "measured",
                "error",
                "inside",
            ),
            [
                (
                    f"{j.run_id} {shown(j.label or '')}".strip(),
                    shown(j.key),
                    j.metric,
                    figure(j.value),
                    f"{figure(j.low)} to {figure(j.high)}",
                    f"{j.measured_by[0]} {shown(j.measured_by[1] or '')}".strip() if j.measured_by else "-",
                    figure(j.measured),
                    "-" if j.error is None else f"{j.error:+.1%}",
                    {None: "-", True: "yes", False: "NO"}[j.inside],
                )
                for j in listed
            ],
        )
    for metric in dict.fromkeys(j.metric for j in found):
        mine = [j for j in found if j.metric == metric]
        done = [j for j in mine if j.error is not None]
        line = f"{metric}: {len(done)} of {len(mine)} predictions measured"
        if done:
            errors = sorted(abs(j.error) for j in done if j.error is not None)
            line += (
                f", median |error| {statistics.median(errors):.1%}, largest {errors[-1]:.1%}, "
                f"{sum(bool(j.inside) for j in done)} inside their 95% interval"
            )
        console.print(line)
    if not args.all and len(listed) < len(found):
        console.print(f"{len(found) - len(listed)} not measured by a later run yet (--all lists them)")
    return 0


def history_plot(args: argparse.Namespace) -> int:
    """`bench history plot --cluster NAME`: each key's figures over the runs, an image and its
    points as CSV."""
    db = history_db(args)
    pts = history.points(db, args.cluster)
    if pts.empty:
        raise UsageError(f"{db}: no run of cluster {args.cluster!r}; see `bench history list`")
    beside = db.path.parent if db.kind == store.SQLITE else results_root()  # a server has no folder
    out = Path(args.out) if args.out else beside / f"history-{_file_safe(args.cluster)}.png"
    user_files.check(str(out), "--out")
    png, points = history_figure(pts, args.cluster)
    user_files.write(out, png, "--out")
    csv = user_files.beside(out, ".csv")
    if csv is not None:
        atomic_write_bytes(csv, points)
    print(f"wrote {out}" + (f" and {csv}" if csv is not None else ""))
    return 0


def history_changes(args: argparse.Namespace) -> int:
    """`bench history changes --cluster NAME`: the change points of the runs' figures, or with
    --nodes of the node checks' (docs/guides/fleet.md); --store keeps them."""
    db = history_db(args)
    console = new_console()
    threshold = threshold_arg(args.threshold)
    if args.nodes:
        checks, values = nodehistory.series(db, args.cluster)
        result = changes.steps_in(checks, values, threshold)
        text = changes.render(result, args.cluster, threshold, nodehistory.metric_label)
        console.print(text.replace(" runs;", " node checks;", 1), markup=False)
        if args.store:
            changes.store(db, args.cluster, changes.NODE_CHECKS, nodehistory.SERIES_METRICS, result[0], threshold)
            console.print(f"stored {len(result[0])} change points of node checks in {db}", markup=False)
        return 0
    metrics = metric_names(args.metric)
    result = changes.changes(db, args.cluster, metrics, threshold)
    console.print(changes.render(result, args.cluster, threshold), markup=False)
    if args.store:
        changes.store(db, args.cluster, changes.RUNS, metrics, result[0], threshold)
        console.print(f"stored {len(result[0])} change points in {db}", markup=False)
    return 0


def history_check(args: argparse.Namespace) -> int:
    """`bench history check`: every run's stored files read back; exit 1 on a problem."""
    db = history_db(args)
    checked, problems = history.check(db)
    for line in problems:
        print(line)
    print(
        f"checked {checked} run{'s' if checked != 1 else ''} in {db}: "
        + (f"{len(problems)} problem{'s' if len(problems) != 1 else ''}" if problems else "all readable")
    )
    return 1 if problems else 0


def history_remove(args: argparse.Namespace) -> int:
    """`bench history remove ID [--nodes]`: a run, or a node check."""
    db = history_db(args)
    run_id = _run_id(args.id, "remove")
    if args.nodes:
        n = nodehistory.remove(db, run_id)
        print(f"removed node check {n.id} of cluster {n.cluster} (added from {n.path}) from {db}")
        return 0
    e = history.remove(db, run_id)
    print(f"removed run {e.id} of cluster {e.cluster} ({e.label or 'no label'}, added from {e.path}) from {db}")
    return 0


def history_accept(args: argparse.Namespace) -> int:
    """`bench history accept ID --reason TEXT`: the run's level is its series' new normal."""
    e = history.accept(history_db(args), _run_id(args.id, "accept"), args.reason)
    print(
        f"accepted run {e.id} of cluster {e.cluster} ({e.label or 'no label'}, ran {e.created}) as its new "
        f"normal: its series' baselines begin at it"
    )
    return 0


def history_migrate(args: argparse.Namespace) -> int:
    """`bench history migrate`: the history's schema brought to this bench's, or a new one made."""
    db = history_db(args)
    before, after = store.migrate(db)
    print(
        f"{db}: already at schema {after}, nothing to do"
        if before == after
        else f"{db}: migrated from schema {before} to {after}" + (" (a new history)" if before == 0 else "")
    )
    return 0


def history_copy(args: argparse.Namespace) -> int:
    """`bench history copy FROM TO`: every run and node check of one history into another."""
    source, target = store.parse_location(args.source, "history copy FROM"), store.parse_location(args.target, "TO")
    done = transfer.copy(source, target)
    n_runs, n_checks = done.counts.get("runs", 0), done.counts.get("node_checks", 0)
    print(
        f"copied {n_runs} run{'s' if n_runs != 1 else ''} and {n_checks} node check{'s' if n_checks != 1 else ''} "
        f"from {source} to {target}"
        + (
            f" ({done.held.get('runs', 0)} runs and {done.held.get('node_checks', 0)} node checks there already)"
            if done.held
            else ""
        )
        + ": "
        + ", ".join(f"{table} {n}" for table, n in done.counts.items())
    )
    return 0


def history_grant(args: argparse.Namespace) -> int:
    """`bench history grant ROLE --db postgresql://...`: a role that may read the history."""
    db = history_db(args)
    schema = store.grant_reader(db, args.role)
    print(
        f"{db}: role {shown(args.role)} may read every table and view of schema {shown(schema)}, and those "
        f"later migrations make; it may write none"
    )
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
    elif rejected < 0:  # not judged, and kept out of every baseline: a run noisier than its history
        word = f"{word} (serves no baseline)"
    return word + (f"; accepted {accepted}: {reason}" if accepted else "")


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "cluster"


def cmd_dashboard(args: argparse.Namespace) -> int:
    out = out_dir_arg(args.out, "--out")
    assert out is not None
    db = history_db(args)
    sizes = dashboard.build(overview.read(db), out)
    largest = max(sizes, key=lambda name: (sizes[name], name))
    print(
        f"wrote the dashboard of {db} to {out}: {len(sizes)} files, {sum(sizes.values()) / 1e6:.1f} MB, the largest "
        f"{largest} ({sizes[largest] / 1e3:,.0f} kB); open {out / 'index.html'}"
    )
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The group's subcommands, on `sub`."""
    d = sub.add_parser(
        "dashboard",
        help="write a static site of a history: every cluster's keys, verdicts, node checks (docs/guides/dashboard.md)",
    )
    d.add_argument("--db", help=DB_HELP)
    d.add_argument(
        "--out", required=True, metavar="DIR", help="the site's directory: new, empty, or a dashboard written before"
    )
    d.set_defaults(func=cmd_dashboard)
    h = sub.add_parser("history", help="store runs per cluster; list, plot, check, remove; find change points")
    actions = h.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(
        name: str, func: Callable[[argparse.Namespace], int], text: str, db: bool = True
    ) -> argparse.ArgumentParser:
        a = actions.add_parser(name, help=text, description=text)
        if db:
            a.add_argument("--db", help=DB_HELP)
        a.set_defaults(func=func)
        return a

    a = action("add", history_add, "add a run or a node check (bench nodes) to the history, with its gate verdict")
    a.add_argument("dir", metavar="DIR", help="the run directory")
    a.add_argument("--cluster", required=True, help="the cluster it ran on")
    a.add_argument("--label", help="a label of the run, e.g. nccl-2.21 or after-ib-fix")
    a.add_argument(
        "--verdict",
        metavar="FILE",
        help="the gate.json bench regress wrote for the run (default DIR/regress/gate.json)",
    )
    a.add_argument(
        "--replace",
        action="store_true",
        help="store the run in place of the one of its identity (its plan) with other figures",
    )
    a.add_argument(
        "--create",
        action="store_true",
        help="create the SQLite history if there is none (nothing else creates one but history migrate); "
        "a PostgreSQL history is created by history migrate",
    )
    a.add_argument(
        "--new-cluster",
        action="store_true",
        help="the cluster's first run; without it, a cluster the history does not know is refused",
    )
    a = action("list", history_list, "list the node checks and runs, with their gate verdicts and series")
    a.add_argument("--cluster", help="only this cluster's")
    a.add_argument("--count", action="store_true", help="print only the number of runs, for scripts")
    a = action(
        "predictions",
        history_predictions,
        "list the predictions kept with the cluster's runs (bench predict), each with its error once measured",
    )
    a.add_argument("--cluster", required=True, help="the cluster")
    a.add_argument("--all", action="store_true", help="also the predictions no later run has measured yet")
    a = action("plot", history_plot, "draw each key's figures over the cluster's runs, with their points as CSV")
    a.add_argument("--cluster", required=True, help="the cluster")
    a.add_argument("--out", help="image file (default beside the database)")
    a = action("changes", history_changes, "find the change points in the cluster's figures (docs/guides/fleet.md)")
    a.add_argument("--cluster", required=True, help="the cluster")
    a.add_argument(
        "--metric", action="append", choices=list(METRICS), help="metric whose series to search (repeatable)"
    )
    a.add_argument("--threshold", default="5%", help="the smallest step reported (default 5%%)")
    a.add_argument(
        "--store",
        action="store_true",
        help="keep the change points found in the history, in place of the cluster's earlier ones",
    )
    a.add_argument("--nodes", action="store_true", help="search each node's and pair's figures of the node checks")
    action("check", history_check, "read back every run's stored files; exit 1 on a problem")
    a = action("remove", history_remove, "remove a run, or with --nodes a node check")
    a.add_argument("id", metavar="ID", help="the run's id, from history list")
    a.add_argument("--nodes", action="store_true", help="ID is a node check's")
    a = action("accept", history_accept, "make a run's level its series' new normal: its baselines begin at it")
    a.add_argument("id", metavar="ID", help="the run's id, from history list")
    a.add_argument("--reason", required=True, help="why the run's level is the new normal (kept, and shown by list)")
    action("migrate", history_migrate, "bring the history's schema to this bench's, or make a new history")
    a = action("copy", history_copy, "copy every run and node check of one history into another", db=False)
    a.add_argument("source", metavar="FROM", help="the history to copy: a path or a postgresql:// URL")
    a.add_argument("target", metavar="TO", help="the history to copy into: a path or a postgresql:// URL")
    a = action("grant", history_grant, "let a PostgreSQL role read the history, and write nothing")
    a.add_argument("role", metavar="ROLE", help="the role (never PUBLIC or a pg_ role)")
