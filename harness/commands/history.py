"""`bench history`: a cluster's runs and node checks in the history database, added, listed,
plotted, checked, accepted and removed, and their change points; the command beside its parser."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.results import atomic_write_bytes
from harness import check_nodes, user_files
from harness.analysis import changes, gate, history, nodehistory, overview, store, transfer
from harness.analysis.sides import METRICS
from harness.commands.common import (
    DB_HELP,
    history_db,
    metric_names,
    new_console,
    out_dir_arg,
    results_root,
    threshold_arg,
)
from harness.errors import EXIT_UNJUDGED, UsageError, shown
from harness.present import dashboard
from harness.present.compare_plot import history_figure

if TYPE_CHECKING:
    pass


def cmd_history(args: argparse.Namespace) -> int:
    console = new_console()
    db = history_db(args)
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
            "history accept needs --reason TEXT: why this run's level is its series' new normal "
            "(kept with it, and shown by history list)"
        )
    for flag, given in (("--replace", args.replace), ("--create", args.create), ("--new-cluster", args.new_cluster)):
        if given and args.action != "add":
            raise UsageError(f"{flag} is for history add")
    if args.count and args.action != "list":
        raise UsageError("--count is for history list")
    if args.store and args.action != "changes":
        raise UsageError("--store is for history changes")
    if (args.action == "copy") != (args.to is not None) or (args.action == "copy" and (not args.dir or args.db)):
        raise UsageError(
            "history copy takes two histories, each a path or a postgresql:// URL: bench history copy FROM TO"
            if args.action == "copy"
            else f"history {args.action} takes one argument; two are for history copy FROM TO"
        )
    if args.action == "copy":
        source, target = store.parse_location(args.dir, "history copy FROM"), store.parse_location(args.to, "TO")
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
    if args.action == "add" and nodehistory.is_check(Path(args.dir)):
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
        if judged.unjudged and not judged.named:  # kept as history, but not a clean check (docs/nodes.md)
            return EXIT_UNJUDGED
    elif args.action == "add":
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
            print(
                f"{args.dir} is in {db} already, as run {e.id} of cluster {e.cluster} with these figures: nothing added"
            )
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
    elif args.action == "accept":
        e = history.accept(db, _run_id(args.dir, "accept"), args.reason)
        print(
            f"accepted run {e.id} of cluster {e.cluster} ({e.label or 'no label'}, ran {e.created}) as its new "
            f"normal: its series' baselines begin at it"
        )
    elif args.action == "remove":
        run_id = _run_id(args.dir, "remove")
        if args.nodes:
            n = nodehistory.remove(db, run_id)
            print(f"removed node check {n.id} of cluster {n.cluster} (added from {n.path}) from {db}")
            return 0
        e = history.remove(db, run_id)
        print(f"removed run {e.id} of cluster {e.cluster} ({e.label or 'no label'}, added from {e.path}) from {db}")
    elif args.action == "grant":
        if not args.dir:
            raise UsageError("history grant needs the role: bench history grant ROLE --db postgresql://...")
        schema = store.grant_reader(db, args.dir)
        print(
            f"{db}: role {shown(args.dir)} may read every table and view of schema {shown(schema)}, and those "
            f"later migrations make; it may write none"
        )
    elif args.action == "migrate":
        before, after = store.migrate(db)
        print(
            f"{db}: already at schema {after}, nothing to do"
            if before == after
            else f"{db}: migrated from schema {before} to {after}" + (" (a new history)" if before == 0 else "")
        )
    elif args.action == "check":
        checked, problems = history.check(db)
        for line in problems:
            print(line)
        print(
            f"checked {checked} run{'s' if checked != 1 else ''} in {db}: "
            + (f"{len(problems)} problem{'s' if len(problems) != 1 else ''}" if problems else "all readable")
        )
        return 1 if problems else 0
    elif args.action == "list" and args.count:
        # for scripts (recipes/nightly.sh): a number, or exit 2 with a line where the history does
        # not exist or does not know the cluster; never a 0 that a script would take for a first night
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
        stacks = history.series_of(db, found, args.cluster)
        t = Table(title=f"Runs in {shown(str(db))}", title_justify="left")
        for col in ("id", "cluster", "label", "sweep", "ran", "added", "keys", "failed rows", "gate", "stack", "path"):
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
                stacks[e.id][0],
                shown(e.path),
            )
        console.print(t)
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
    elif args.action == "changes" and args.nodes:
        threshold = threshold_arg(args.threshold)
        checks, values = nodehistory.series(db, args.cluster)
        result = changes.steps_in(checks, values, threshold)
        text = changes.render(result, args.cluster, threshold, nodehistory.metric_label)
        console.print(text.replace(" runs;", " node checks;", 1), markup=False)
        if args.store:
            changes.store(db, args.cluster, changes.NODE_CHECKS, list(nodehistory.METRICS), result[0], threshold)
            console.print(f"stored {len(result[0])} change points of node checks in {db}", markup=False)
    elif args.action == "changes":
        threshold = threshold_arg(args.threshold)
        metrics = metric_names(args.metric)
        result = changes.changes(db, args.cluster, metrics, threshold)
        console.print(changes.render(result, args.cluster, threshold), markup=False)
        if args.store:
            changes.store(db, args.cluster, changes.RUNS, metrics, result[0], threshold)
            console.print(f"stored {len(result[0])} change points in {db}", markup=False)
    else:
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
        help="write a static site of a history: every cluster's keys, verdicts, node checks (docs/dashboard.md)",
    )
    d.add_argument("--db", help=DB_HELP)
    d.add_argument(
        "--out", required=True, metavar="DIR", help="the site's directory: new, empty, or a dashboard written before"
    )
    d.set_defaults(func=cmd_dashboard)
    h = sub.add_parser("history", help="store runs per cluster; list, plot, check, remove; find change points")
    h.add_argument(
        "action", choices=("add", "list", "plot", "changes", "check", "remove", "accept", "migrate", "copy", "grant")
    )
    h.add_argument(
        "dir",
        nargs="?",
        metavar="DIR|ID|FROM|ROLE",
        help="run directory (add), run id (remove, accept), history (copy) or PostgreSQL role (grant)",
    )
    h.add_argument("to", nargs="?", metavar="TO", help="history copy: the history to copy FROM into (path or URL)")
    h.add_argument("--cluster", help="cluster name (required for add, plot and changes; a filter for list)")
    h.add_argument("--label", help="label of the run (history add), e.g. nccl-2.21 or after-ib-fix")
    h.add_argument("--db", help=DB_HELP)
    h.add_argument(
        "--verdict",
        metavar="FILE",
        help="the gate.json bench regress wrote for the run (history add; default DIR/regress/gate.json)",
    )
    h.add_argument("--reason", help="why the run's level is the new normal (history accept; required)")
    h.add_argument(
        "--replace",
        action="store_true",
        help="history add: store the run in place of the one of its identity (its plan) with other figures",
    )
    h.add_argument(
        "--create",
        action="store_true",
        help="history add: create the SQLite history if there is none (nothing else creates one but "
        "history migrate); a PostgreSQL history is created by history migrate",
    )
    h.add_argument(
        "--new-cluster",
        action="store_true",
        help="history add: the cluster's first run; without it, a cluster the history does not know is refused",
    )
    h.add_argument("--count", action="store_true", help="history list: print only the number of runs, for scripts")
    h.add_argument(
        "--store",
        action="store_true",
        help="history changes: keep the change points found in the history, in place of the cluster's earlier "
        "ones (docs/fleet.md)",
    )
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
