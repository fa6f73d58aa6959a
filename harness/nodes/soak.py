"""The soak's verdict (`bench nodes --soak MINUTES`, docs/guides/nodes.md, "Soak"). Once the
check's rounds have run, the driver measures their pairs again and again, whole passes, for
that long (harness/nodes/driver.py). Each link then has a series of readings: its round's, then
one a pass. A link that degrades while warm (an optic, a cable, a port that heats) reads lower
at the end of its series than at its start, while the others do not; a node that slows while
warm (its GPUs' clocks, its HCA) lowers all its links at once; a fabric or a room that slows
lowers every link. Each is judged as the check's figures are (harness/nodes/verdict.py): against
the others, beyond the threshold and three spreads. Pure.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from harness.nodes.rounds import METRICS
from harness.nodes.verdict import MIN_NODES, Finding, Population, Verdict

MIN_PASSES = 2  # passes of the soak it takes to judge a drift: with the round's reading, three readings a link

Pair = tuple[str, str]


def ends(readings: Sequence[float]) -> tuple[float, float]:
    """The medians of the first third and of the last third of `readings` (a reading each at
    least), so that one slow reading at either end is not taken for the figure there."""
    k = max(1, len(readings) // 3)
    return statistics.median(readings[:k]), statistics.median(readings[-k:])


def drift(readings: Sequence[float]) -> float:
    """How a link's figure moved over the soak: the median of the last third of its readings over
    the median of the first third (`ends`); 0 when the first third's median is 0."""
    early, late = ends(readings)
    return late / early if early > 0 else 0.0


def judge_soak(
    v: Verdict,
    first: Mapping[str, Mapping[Pair, float | None]],
    soak: Mapping[str, Mapping[Pair, Mapping[int, float | None]]],
    failures: Mapping[Pair, str],
    passes: int,
    threshold: float,
) -> None:
    """Fold the soak's findings into `v`: each link's readings are its `first` (the round it ran
    in) and one a pass of `soak` (metric -> link -> pass -> figure, None where the step failed,
    `failures` saying why). A link that failed in the soak is named; a node whose links' median
    drift lies low against the other nodes' is named (its links are not); a link whose drift
    lies low against the other links' is named; when the links' median drift itself is below
    1 - threshold, the population is. Fewer than MIN_PASSES passes, or than MIN_NODES links with a
    reading of every pass, cannot be judged, and say so."""
    v.soak_passes = passes
    if passes < MIN_PASSES:
        v.unjudged.append(f"the soak: {passes} pass(es) of the pairs; a drift takes {MIN_PASSES}: give a longer --soak")
        return
    order = {n: i for i, n in enumerate(v.names)}
    named = {f.nodes[0]: f for f in v.nodes}
    links = {f.nodes: f for f in v.links}
    before = set(named)  # nodes the rounds named: their links are theirs, not the soak's
    for pair, why in failures.items():
        if not set(pair) & before:
            links.setdefault(pair, Finding(pair)).reasons.append(f"failed in the soak: {why}")
    for metric, by_pair in soak.items():
        label, unit, _ = METRICS[metric]
        series: dict[Pair, list[float]] = {}
        for pair, by_pass in by_pair.items():
            readings = [first.get(metric, {}).get(pair), *(by_pass.get(p) for p in range(1, passes + 1))]
            if pair not in failures and not set(pair) & before and all(x is not None for x in readings):
                series[pair] = [x for x in readings if x is not None]
        ratios = {pair: drift(r) for pair, r in series.items()}
        v.soak[metric] = {pair: (r[0], r[-1], ratios[pair]) for pair, r in series.items()}
        if len(ratios) < MIN_NODES:
            v.unjudged.append(
                f"{label} over the soak: {len(ratios)} link(s) with a reading of every pass; judging their drift "
                f"takes {MIN_NODES}"
            )
            continue
        centre = statistics.median(ratios.values())
        if centre < 1 - threshold:
            v.cluster.append(
                f"{label}: the links' median read {1 - centre:.0%} lower at the soak's end than at its start: "
                "every link slowed while warm (the room's cooling or power, or a switch they share)"
            )
            continue
        slow = _nodes(v, named, ratios, label, threshold)
        rest = {pair: r for pair, r in ratios.items() if not set(pair) & slow}
        if len(rest) < MIN_NODES:
            v.unjudged.append(
                f"{label} over the soak: {len(rest)} link(s); telling a link's drift from the others' takes {MIN_NODES}"
            )
            continue
        pop = Population.of(rest.values(), threshold)
        for pair, r in rest.items():
            if r < pop.low:
                x0, xn = series[pair][0], series[pair][-1]
                links.setdefault(pair, Finding(pair)).reasons.append(
                    f"{label} {x0:.4g} then {xn:.4g} {unit} over the soak: {1 - r:.0%} lower at its end than at "
                    f"its start, while the links' median moved {pop.centre - 1:+.0%}"
                )
    v.nodes = sorted(named.values(), key=lambda f: order.get(f.nodes[0], 0))
    v.links = sorted(links.values(), key=lambda f: tuple(order.get(n, 0) for n in f.nodes))


def _nodes(
    v: Verdict, named: dict[str, Finding], ratios: Mapping[Pair, float], label: str, threshold: float
) -> set[str]:
    """Name the nodes whose links' median drift lies low against the other nodes' (each node left
    out of its own population, as the rounds' nodes are); the nodes named."""
    by_node: dict[str, list[float]] = {}
    for (a, b), r in ratios.items():
        by_node.setdefault(a, []).append(r)
        by_node.setdefault(b, []).append(r)
    if len(by_node) < MIN_NODES:
        v.unjudged.append(
            f"{label} over the soak: {len(by_node)} node(s); telling a node's drift from the others' takes {MIN_NODES}"
        )
        return set()
    medians = {n: statistics.median(rs) for n, rs in by_node.items()}
    slow = set()
    for (node, d), others in zip(medians.items(), Population.leave_one_out(list(medians.values()), threshold)):
        if d < others.low:
            slow.add(node)
            named.setdefault(node, Finding((node,))).reasons.append(
                f"{label}: its {len(by_node[node])} link(s) read {1 - d:.0%} lower at the soak's end than at its "
                f"start (their median), while the other nodes' moved {others.centre - 1:+.0%}"
            )
    return slow
