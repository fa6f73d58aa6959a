"""A check that ran, judged (docs/guides/nodes.md): what its steps measured, read back from its
run directory (harness/nodes/figures.py), judged by harness/nodes/verdict.py, by the profile's
leaves where it states them; each rail's pairs judged alone; the hardware faults its nodes
recorded (harness/evidence/faults.py); and, while it runs, the links that read low, which the
driver measures again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config.hostlists import hostlist
from harness.config.topology import leaf_in_address
from harness.errors import DataError
from harness.evidence import dcgm, faults
from harness.nodes.driver import FOLDER, Plan
from harness.nodes.figures import Figures, gather
from harness.nodes.rounds import METRICS, RAIL, planned_metrics
from harness.nodes.soak import judge_soak
from harness.nodes.verdict import Finding, Verdict, by_leaves, expected, judge

if TYPE_CHECKING:
    from harness.config.cluster_profile import ClusterProfile


def judge_check(run: Path, plan: Plan, profile: ClusterProfile | None) -> tuple[Verdict, dict[str, Any]]:
    """The verdict of the check in `run`, from what its steps measured, and its record (steps.json)."""
    leaf_of = profile.leaf_of() if profile else {}
    try:
        f = gather(run, plan, leaf_of)
    except ValueError as exc:
        raise DataError(str(exc)) from None
    v = _judged(f, plan, profile, leaf_of)
    if f.never:
        v.unjudged.append(
            f"{f.never} step(s) never ran (the check was cut short): their nodes and pairs are not judged"
        )
    for metric in planned_metrics(plan.options):  # a metric nothing measured was not judged: never clean
        if not (f.nodes.get(metric) or f.pairs.get(metric)):
            v.unjudged.append(f"{METRICS[metric][0]}: no step measured it")
    on_rails(v, f, plan.threshold)
    if plan.options.soak_s:  # each link's first reading: its round's, before any reading again
        first = {m: {p: f.again.get(p, {}).get(m, (x,))[0] for p, x in by.items()} for m, by in f.pairs.items()}
        judge_soak(v, first, f.soak, f.soak_failures, f.soak_passes, plan.threshold)
    for rail in plan.options.rails:  # a rail nothing measured was not judged either
        if rail.name not in f.rails or not any(f.rails[rail.name].pairs.values()):
            v.unjudged.append(f"rail {rail.name}: no step measured it")
    found = faults.read_check(run / FOLDER / faults.FOLDER, f.names)
    hardware_faults(v, found)
    if plan.options.dcgm:
        hardware_faults(v, dcgm.read_check(run / FOLDER / dcgm.FOLDER, f.names), "DCGM", "DCGM")
    if leaf_of:  # each node's place in Slurm's tree, kept with its faults
        leaves_in_job(v, {node.host: node.address for node in found if node.address}, leaf_of)
    return v, f.record


def low_links(run: Path, plan: Plan, profile: ClusterProfile | None) -> list[tuple[str, int, int]]:
    """The links of the check in `run` that the rounds run so far name for a low figure, on the
    whole node and on each rail, each (the kind of round it ran in: "pair" or "rail<r>", node
    a, node b by index): the driver measures them again (docs/guides/nodes.md, "Measured
    again"); a failed link is named for its failure, and is not. ValueError when the record
    cannot be read."""
    leaf_of = profile.leaf_of() if profile else {}
    f = gather(run, plan, leaf_of)
    v = _judged(f, plan, profile, leaf_of)
    found = [("pair", f.pairs, list(v.links))]  # before on_rails folds each rail's links into them
    on_rails(v, f, plan.threshold)
    rail_kind = {rail.name: f"{RAIL}{r}" for r, rail in enumerate(plan.options.rails)}
    found += [(rail_kind[name], f.rails[name].pairs, rv.links) for name, rv in v.rails.items()]
    index = {n: i for i, n in enumerate(f.names)}
    return [
        (kind, index[a], index[b])
        for kind, figures, links in found
        for a, b in (link.nodes for link in links)
        if all(by_pair.get((a, b)) is not None for by_pair in figures.values())
    ]


def _judged(f: Figures, plan: Plan, profile: ClusterProfile | None, leaf_of: Mapping[str, str]) -> Verdict:
    """`judge` of a check's figures, by the profile's leaves (`leaf_of`, node -> leaf) where it
    states them (`by_leaves`)."""
    expect = expected(profile, plan.options.gpus_per_node)
    if leaf_of:
        return by_leaves(f.names, f.nodes, f.pairs, plan.threshold, expect, f.failures, f.again, leaf_of)
    return judge(f.names, f.nodes, f.pairs, plan.threshold, expect, f.failures, f.again)


def on_rails(v: Verdict, f: Figures, threshold: float) -> None:
    """Judge each rail's pairs alone, as `judge` judges whole nodes' pairs, and fold what it names
    into `v`, the rail in each reason: a node slow on one rail is named (the drain line names
    the node; the reason, the rail to replace), a link on one rail is named as a link."""
    order = {n: i for i, n in enumerate(v.names)}
    named = {finding.nodes[0]: finding for finding in v.nodes}
    links = {finding.nodes: finding for finding in v.links}
    for rail, figures in f.rails.items():
        rv = v.rails[rail] = judge(f.names, {}, figures.pairs, threshold, {}, figures.failures, figures.again)
        for finding in rv.nodes:
            node = named.setdefault(finding.nodes[0], Finding(finding.nodes))
            node.reasons += [f"rail {rail}: {why}" for why in finding.reasons]
        for finding in rv.links:
            link = links.setdefault(finding.nodes, Finding(finding.nodes))
            link.reasons += [f"rail {rail}: {why}" for why in finding.reasons]
        v.cluster += [f"rail {rail}: {line}" for line in rv.cluster]
        v.unjudged += [f"rail {rail}: {line}" for line in rv.unjudged]
    v.nodes = sorted(named.values(), key=lambda x: order.get(x.nodes[0], 0))
    v.links = sorted(links.values(), key=lambda x: tuple(order.get(n, 0) for n in x.nodes))


def leaves_in_job(v: Verdict, found: Mapping[str, tuple[str, str]], leaf_of: Mapping[str, str]) -> None:
    """Hold the leaves the check is judged by (`leaf_of`: the profile's, or its topology's as the
    check was planned) against those Slurm gave each node's step (`found`: SLURM_TOPOLOGY_ADDR and
    its pattern, read with the node's faults). A node under another leaf in the job fails closed:
    the paths between leaves rest on the leaves, so they are not taken as judged. An address that
    cannot be read is said."""
    job, unread = {}, []
    for host, (address, pattern) in found.items():
        try:
            job[host] = leaf_in_address(address, pattern, host)
        except ValueError as exc:
            unread.append(f"{host}: {exc}")
    moved = [n for n in v.names if n in job and n in leaf_of and job[n] != leaf_of[n]]
    if moved:
        n = moved[0]
        v.unjudged.append(
            f"the leaves: Slurm's SLURM_TOPOLOGY_ADDR in the job puts {hostlist(moved)} under other leaves than the"
            f" check's ({n} under {job[n]}, not {leaf_of[n]}): the paths between leaves cannot be judged by them;"
            " mend the profile's leaves or topology"
        )
    v.unread += unread


def hardware_faults(
    v: Verdict,
    found: Sequence[faults.NodeFaults | dcgm.Diagnosis],
    source: str = "hardware fault",
    sources: str = "hardware faults",
) -> None:
    """Name each node whose hardware recorded a fault during the check (harness/evidence/faults.py)
    or that DCGM's diagnostic failed (`source` "DCGM", harness/evidence/dcgm.py), the port, GPU or
    test in the reason; what could not be judged is said once per reason, with the nodes it holds
    for (`sources` of them)."""
    order = {n: i for i, n in enumerate(v.names)}
    named = {f.nodes[0]: f for f in v.nodes}
    unjudged: dict[str, list[str]] = {}
    unread: dict[str, list[str]] = {}
    for node in found:
        for line in node.named:
            named.setdefault(node.host, Finding((node.host,))).reasons.append(f"{source}: {line}")
        for line in node.unjudged:
            unjudged.setdefault(line, []).append(node.host)
        for line in node.unread:
            unread.setdefault(line, []).append(node.host)
    v.nodes = sorted(named.values(), key=lambda f: order.get(f.nodes[0], 0))
    v.unjudged += [f"{sources} of {hostlist(hosts)}: {line}" for line, hosts in unjudged.items()]
    v.unread += [f"{hostlist(hosts)}: {line}" for line, hosts in unread.items()]
