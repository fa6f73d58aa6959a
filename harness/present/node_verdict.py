"""A node check's run directory in, its verdict out: the figures of every step, the nodes and
links named, and the files an admin reads or a script takes (docs/guides/nodes.md):

    verdict.json   everything below, for a script (`bench nodes --json` prints it)
    nodes.csv      one row per node: each figure, and why it is named
    pairs.csv      one row per pair: each figure, its state, and why it is named
    heatmap.png    the pair matrix of each pair figure, with heatmap.csv, its points
    drain.txt      the nodes to drain in Slurm's hostlist syntax, empty when none
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import inside
from harness.cluster import ClusterProfile
from harness.errors import DataError, shown
from harness.nodecheck import METRICS, exchange_group, planned_metrics
from harness.nodesteps import Plan, gather
from harness.nodeverdict import Verdict, judge
from harness.present.plot import draw_heatmap
from harness.rundir import COMPLETED

if TYPE_CHECKING:
    from rich.console import Console


def expected(profile: ClusterProfile | None, gpus_per_node: int) -> dict[str, float | None]:
    """The stated hardware's figure of each metric (docs/concepts/expected.md), None where not stated:
    the matmul against a device's peak TFLOP/s, and each step's collective against the peak of
    its layout (harness/peak.py): the node's all-reduce inside the node, a pair's all-reduce
    over both nodes' ranks (every NIC the ranks reach), and a pair's exchange on one rank's
    share of its node's NICs (the inter group's, where a node has several ranks)."""
    hw = profile.hardware if profile else None
    if hw is None:
        return {}
    return {
        "gemm_tflops": hw.peak_tflops_per_gpu,
        "intra_busbw_gbps": hw.peak_busbw_gbps(1, gpus_per_node),
        "busbw_gbps": hw.peak_busbw_gbps(2, gpus_per_node),
        "p2p_gbps": hw.peak_busbw_gbps(2, gpus_per_node, exchange_group(gpus_per_node), "sendrecv"),
    }


def verdict(run: Path, plan: Plan, profile: ClusterProfile | None) -> tuple[Verdict, dict[str, Any]]:
    """The verdict of the check in `run`, and its record (steps.json)."""
    try:
        f = gather(run, plan)
    except ValueError as exc:
        raise DataError(str(exc)) from None
    expect = expected(profile, plan.options.gpus_per_node)
    v = judge(f.names, f.nodes, f.pairs, plan.threshold, expect, f.failures)
    if f.never:
        v.unjudged.append(
            f"{f.never} step(s) never ran (the check was cut short): their nodes and pairs are not judged"
        )
    for metric in planned_metrics(plan.options):  # a metric nothing measured was not judged: never clean
        if not (f.nodes.get(metric) or f.pairs.get(metric)):
            v.unjudged.append(f"{METRICS[metric][0]}: no step measured it")
    return v, f.record


def as_json(v: Verdict, record: dict[str, Any], plan: Plan) -> dict[str, Any]:
    def pair_key(p: tuple[str, str]) -> str:
        return f"{p[0]} {p[1]}"

    return {
        "clean": not v.named and not v.unjudged,
        "drain": v.drain,
        "nodes_named": [{"node": f.nodes[0], "reasons": f.reasons} for f in v.nodes],
        "links_named": [{"nodes": list(f.nodes), "reasons": f.reasons} for f in v.links],
        "cluster": v.cluster,
        "not_judged": v.unjudged,
        "hosts": v.names,
        "node_figures": v.node_figures,
        "node_scores": v.node_scores,
        "pair_figures": {m: {pair_key(p): x for p, x in figs.items()} for m, figs in v.pair_figures.items()},
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
    rows: list[list[Any]] = [["node", *v.node_metrics, "named"]]
    for node in v.names:
        rows.append([node, *("" if x is None else f"{x:.6g}" for x in v.node_row(node)), named.get(node, "")])
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


def print_verdict(console: Console, v: Verdict, record: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title="Nodes", title_justify="left")
    table.add_column("NODE")
    for m in v.node_metrics:
        label, unit, scope = METRICS[m]
        table.add_column(f"{label} ({unit})" + (", median of its pairs" if scope == "pair" else ""), justify="right")
    table.add_column("VERDICT")
    named = {f.nodes[0]: f for f in v.nodes}
    for node in v.names:
        cells = ["failed" if x is None else f"{x:.4g}" for x in v.node_row(node)]
        verdict_cell = "[red]drain[/]: " + shown("; ".join(named[node].reasons)) if node in named else "ok"
        table.add_row(shown(node), *cells, verdict_cell)
    console.print(table)
    for f in v.links:
        console.print(
            f"[red]link {shown(f.nodes[0])} - {shown(f.nodes[1])}[/]: {shown('; '.join(f.reasons))}", soft_wrap=True
        )
    for line in v.cluster:
        console.print(f"[red]every node[/]: {shown(line)}", soft_wrap=True)
    for line in v.unjudged:
        console.print(f"[yellow]not judged[/]: {shown(line)}", soft_wrap=True)
    steps = record["steps"]
    failed = sum(s.get("state") != COMPLETED for s in steps.values())
    console.print(
        f"{len(steps)} steps in {record['ran']} of {record['rounds']} rounds, {sum(record['round_s']):.1f} s"
        + (f", {failed} failed" if failed else ""),
        markup=False,
    )
