"""A node check's verdict (harness/nodes/verdict.py) as the files an admin reads or a script
takes (docs/guides/nodes.md):

verdict.json   everything below, for a script (`bench nodes --json` prints it)
nodes.csv      one row per node: each figure, and why it is named (and its leaf, judged by leaves)
pairs.csv      one row per pair: each figure, its state, and why it is named
heatmap.png    the pair matrix of each pair figure, with heatmap.csv, its points
drain.txt      the nodes to drain in Slurm's hostlist syntax, empty when none
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import shown
from harness.files import inside
from harness.nodes.driver import Plan
from harness.nodes.rounds import AGAIN, METRICS, SOAK
from harness.nodes.verdict import Verdict
from harness.present.plot import draw_heatmap
from harness.run.rundir import COMPLETED

if TYPE_CHECKING:
    from rich.console import Console


def as_json(v: Verdict, record: dict[str, Any], plan: Plan) -> dict[str, Any]:
    def pair_key(p: tuple[str, str]) -> str:
        return f"{p[0]} {p[1]}"

    return {
        "clean": not v.named and not v.unjudged,
        "drain": v.drain,
        "nodes_named": [{"node": f.nodes[0], "reasons": f.reasons} for f in v.nodes],
        "links_named": [{"nodes": list(f.nodes), "reasons": f.reasons} for f in v.links],
        # a leaf's uplink (one leaf) or the path between two (docs/guides/nodes.md, "Leaves")
        "uplinks_named": [{"leaves": list(f.nodes), "reasons": f.reasons} for f in v.uplinks],
        # every path between two leaves judged: its pairs across and their median over their nodes'
        "paths_judged": [
            {"leaves": list(p), "metric": m, "pairs": n, "median_ratio": ratio}
            for m, by in v.paths.items()
            for p, (n, ratio) in sorted(by.items())
        ],
        # what each rail's pairs alone name: the card or cable to replace (docs/guides/nodes.md, "Rails")
        "rails_named": [
            {"rail": rail, "nodes": list(f.nodes), "reasons": f.reasons}
            for rail, rv in v.rails.items()
            for f in [*rv.nodes, *rv.links]
        ],
        "rail_scores": {rail: rv.node_scores for rail, rv in v.rails.items()},
        "cluster": v.cluster,
        "not_judged": v.unjudged,
        "not_read": v.unread,
        "hosts": v.names,
        "node_figures": v.node_figures,
        "node_scores": v.node_scores,
        "pair_figures": {m: {pair_key(p): x for p, x in figs.items()} for m, figs in v.pair_figures.items()},
        # each link measured again, its two readings by metric (docs/guides/nodes.md, "Measured again")
        "measured_again": {pair_key(p): {m: list(r) for m, r in by.items()} for p, by in v.again.items()},
        # the soak (docs/guides/nodes.md, "Soak"): its whole passes, and each link it judged by
        # metric, its first reading, its last and its drift (the last third's median over the first's)
        "soak": None
        if v.soak_passes is None
        else {
            "passes": v.soak_passes,
            "links": {
                m: {pair_key(p): {"first": x0, "last": xn, "drift": d} for p, (x0, xn, d) in by.items()}
                for m, by in v.soak.items()
            },
        },
        "populations": {m: vars(p) for m, p in v.populations.items()},
        "units": {m: unit for m, (_, unit, _) in METRICS.items()},
        "threshold": plan.threshold,
        "rounds": record["rounds"],
        "round_s": record["round_s"],
        "steps": {k: {f: s.get(f) for f in ("state", "elapsed_s", "reason")} for k, s in record["steps"].items()},
    }


def _csv(rows: list[list[Any]]) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue().encode()


def write_outputs(run: Path, v: Verdict, record: dict[str, Any], plan: Plan) -> list[Path]:
    """The files of the module's docstring, each replaced atomically in `run`."""
    named = {f.nodes[0]: "; ".join(f.reasons) for f in v.nodes}
    leaf = ["leaf"] if v.leaf_of else []  # judged by leaves: each node's, the nodes leaf by leaf
    rows: list[list[Any]] = [["node", *leaf, *v.node_metrics, "named"]]
    for node in v.by_leaf():
        figures = ("" if x is None else f"{x:.6g}" for x in v.node_row(node))
        rows.append([node, *([v.leaf_of.get(node, "")] if leaf else []), *figures, named.get(node, "")])
    links = {f.nodes: "; ".join(f.reasons) for f in v.links}
    pair_rows: list[list[Any]] = [["node_a", "node_b", *v.pair_figures, "named"]]
    pairs = sorted(
        {p for figs in v.pair_figures.values() for p in figs}, key=lambda p: (v.names.index(p[0]), v.names.index(p[1]))
    )
    for p in pairs:
        values = [v.pair_figures[m].get(p) for m in v.pair_figures]
        pair_rows.append([*p, *("failed" if x is None else f"{x:.6g}" for x in values), links.get(p, "")])
    out = [
        inside.write(run, "verdict.json", (json.dumps(as_json(v, record, plan), indent=2) + "\n").encode()),
        inside.write(run, "nodes.csv", _csv(rows)),
        inside.write(run, "pairs.csv", _csv(pair_rows)),
        inside.write(run, "drain.txt", (v.drain + "\n").encode() if v.drain else b""),
    ]
    heatmap = draw_heatmap(run, v)
    return out if heatmap is None else [*out, heatmap]


def rail_table(v: Verdict) -> Any:
    """Each node's two-node all-reduce on each rail alone (the median of its pairs there), and
    the rails named on it."""
    from rich.table import Table

    table = Table(title="Rails: two-node all-reduce, busbw (GB/s), median of its pairs", title_justify="left")
    table.add_column("NODE")
    for rail in v.rails:
        table.add_column(shown(rail), justify="right")
    table.add_column("RAILS NAMED")
    for node in v.names:
        scores = [rv.node_scores.get("busbw_gbps", {}).get(node) for rv in v.rails.values()]
        named = [rail for rail, rv in v.rails.items() if any(node in f.nodes for f in rv.nodes)]
        cells = ["failed" if x is None else f"{x:.4g}" for x in scores]
        table.add_row(shown(node), *cells, "[red]" + shown(", ".join(named)) + "[/]" if named else "ok")
    return table


def print_verdict(console: Console, v: Verdict, record: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title="Nodes", title_justify="left")
    table.add_column("NODE")
    if v.leaf_of:
        table.add_column("LEAF")
    for m in v.node_metrics:
        label, unit, scope = METRICS[m]
        table.add_column(f"{label} ({unit})" + (", median of its pairs" if scope == "pair" else ""), justify="right")
    table.add_column("VERDICT")
    named = {f.nodes[0]: f for f in v.nodes}
    for node in v.by_leaf():
        cells = ["failed" if x is None else f"{x:.4g}" for x in v.node_row(node)]
        verdict_cell = "[red]drain[/]: " + shown("; ".join(named[node].reasons)) if node in named else "ok"
        leaf = [shown(v.leaf_of.get(node, "-"))] if v.leaf_of else []
        table.add_row(shown(node), *leaf, *cells, verdict_cell)
    console.print(table)
    if v.rails:
        console.print(rail_table(v))
    for f in v.links:
        console.print(
            f"[red]link {shown(f.nodes[0])} - {shown(f.nodes[1])}[/]: {shown('; '.join(f.reasons))}", soft_wrap=True
        )
    for f in v.uplinks:
        console.print(f"[red]uplink {shown(' - '.join(f.nodes))}[/]: {shown('; '.join(f.reasons))}", soft_wrap=True)
    paths_named = {f.nodes for f in v.uplinks}
    own_named = {f.nodes[0] for f in v.uplinks if len(f.nodes) == 1}  # each of its paths is slow
    for m, by in v.paths.items():
        healthy = [
            f"{one} - {other} ({n} pairs, {ratio:.0%})"
            for (one, other), (n, ratio) in sorted(by.items())
            if (one, other) not in paths_named and not {one, other} & own_named
        ]
        if healthy:
            console.print(
                f"paths between leaves judged healthy by {METRICS[m][0]} (pairs across, their median over their "
                f"nodes'): {shown(', '.join(healthy))}",
                soft_wrap=True,
            )
    for m, drifts in v.soak.items():
        if drifts:
            lowest, (_, _, least) = min(drifts.items(), key=lambda item: item[1][2])
            centre = statistics.median(d for _, _, d in drifts.values())
            console.print(
                f"the soak, {v.soak_passes} passes: {METRICS[m][0]}, each link's last readings over its first: "
                f"median {centre:.0%}, lowest {least:.0%} ({' - '.join(lowest)})",
                soft_wrap=True,
                markup=False,
            )
    for line in v.cluster:
        console.print(f"[red]every node[/]: {shown(line)}", soft_wrap=True)
    for line in v.unjudged:
        console.print(f"[yellow]not judged[/]: {shown(line)}", soft_wrap=True)
    for line in v.unread:
        console.print(f"not read: {shown(line)}", soft_wrap=True)
    steps = record["steps"]
    failed = sum(s.get("state") != COMPLETED for s in steps.values())
    again = sum(name.startswith(AGAIN) for name in steps)  # again-A-B and againrail<r>-A-B
    soak = sum(name.startswith(SOAK) for name in steps)
    console.print(
        f"{len(steps)} steps in {min(record['ran'], record['rounds'])} of {record['rounds']} rounds"
        + (f" and {again} link(s) that read low measured again" if again else "")
        + (f" and {soak} in the soak's {record['soak']} rounds" if soak else "")
        + f", {sum(record['round_s']):.1f} s"
        + (f", {failed} failed" if failed else ""),
        markup=False,
    )
