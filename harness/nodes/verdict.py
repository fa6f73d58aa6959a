"""The node check's verdict (`bench nodes`, docs/guides/nodes.md): each figure's population of
nodes, the nodes that lie low against the others or against the stated hardware, the links that
lie low against their two nodes, and the scontrol line that drains what was named. Its figures
are harness/nodes/rounds.py's, per node and per pair of nodes; a check of every pair of 2,048
nodes gives two million pairs, judged as arrays. All of it is pure: harness/nodes/judged.py
reads what a check's steps measured and judges it.
"""

from __future__ import annotations

import itertools
import math
import shlex
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.config.hostlists import hostlist
from harness.nodes.rounds import METRICS, exchange_group

if TYPE_CHECKING:
    from harness.config.cluster_profile import ClusterProfile

# The population rule, as the regress band's (harness/analysis/stats.py): centre the median,
# spread 1.4826 x the MAD (a normal sigma); a figure is low when it lies below the centre by
# more than SPREADS spreads and by more than the threshold.
SPREADS = 3.0
MAD_SIGMA = 1.4826
MIN_NODES = 3  # it takes three nodes to tell which end of a slow pair is slow
EXPECTED_SHARE = 0.5  # below half the stated hardware's figure is named, whatever the population


def _robust(values: Any) -> tuple[float, float]:
    """(median, 1.4826 x MAD): the centre and the spread, in the units of the values (a sequence
    or an array of floats; numpy's median is statistics.median's: the middle value, or the mean
    of the two middle ones)."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    centre = float(np.median(v))
    return centre, MAD_SIGMA * float(np.median(np.abs(v - centre)))


@dataclass(frozen=True)
class Population:
    centre: float
    spread: float
    low: float  # below this a figure is named

    @classmethod
    def of(cls, values: Iterable[float], threshold: float, noise: float = 0.0) -> Population:
        """`noise`: a floor under the spread, as a fraction of the centre (the pairs' own noise,
        `pair_noise`), for the few values whose MAD is near zero when three happen to agree."""
        centre, mad = _robust(values if hasattr(values, "dtype") else list(values))
        spread = max(mad, noise * centre)
        return cls(centre, spread, centre - max(threshold * centre, SPREADS * spread))

    @classmethod
    def leave_one_out(cls, values: list[float], threshold: float, noise: float = 0.0) -> list[Population]:
        """`of` the values but the i-th, for every i: exactly what n calls of `of` give, in
        O(n log n) rather than O(n²), which at 10,000 nodes took minutes. Leaving one value out moves the
        median to one of at most three values, so the MAD's deviations are sorted once per
        such centre, and each leave-one-out median is read off a sorted list by index."""
        n = len(values)
        order = sorted(range(n), key=values.__getitem__)
        s = [values[i] for i in order]
        rank = [0] * n
        for r, i in enumerate(order):
            rank[i] = r
        centres = [_median_without(s, rank[i]) for i in range(n)]
        deviations: dict[float, tuple[list[float], list[int]]] = {}
        out = []
        for i in range(n):
            c = centres[i]
            if c not in deviations:
                d = [abs(v - c) for v in values]
                d_order = sorted(range(n), key=d.__getitem__)
                d_rank = [0] * n
                for r, j in enumerate(d_order):
                    d_rank[j] = r
                deviations[c] = ([d[j] for j in d_order], d_rank)
            d_sorted, d_rank = deviations[c]
            spread = max(MAD_SIGMA * _median_without(d_sorted, d_rank[i]), noise * c)
            out.append(cls(c, spread, c - max(threshold * c, SPREADS * spread)))
        return out


def _median_without(s: list[float], k: int) -> float:
    """The median of the sorted list `s` without its k-th element, as statistics.median gives it."""
    m = len(s) - 1

    def at(p: int) -> float:
        return s[p] if p < k else s[p + 1]

    return at(m // 2) if m % 2 else (at(m // 2 - 1) + at(m // 2)) / 2


def pair_noise(ratios: Iterable[float]) -> float:
    """The relative spread of single pairs' figures: 1.4826 MAD of each pair's figure over the
    lesser score of its two nodes, over the median of those ratios. A slow node's pairs keep a
    ratio near 1 (its own score is as low), so it does not inflate the figure; a slow link is one
    value of many, which the MAD ignores."""
    values: Any = ratios if hasattr(ratios, "dtype") else list(ratios)
    if len(values) < MIN_NODES:
        return 0.0
    centre, spread = _robust(values)
    return spread / centre if centre > 0 else 0.0


@dataclass
class Finding:
    """A node or a link named, and why, one reason per figure."""

    nodes: tuple[str, ...]  # one name, or the pair
    reasons: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    names: list[str]
    node_figures: dict[str, dict[str, float | None]]  # metric -> node -> figure (None: failed)
    node_scores: dict[str, dict[str, float]]  # pair metric -> node -> median over its partners
    pair_figures: dict[str, dict[tuple[str, str], float | None]]  # metric -> pair -> figure
    populations: dict[str, Population]
    nodes: list[Finding]
    links: list[Finding]
    cluster: list[str]  # findings of the whole population: below the stated hardware
    unjudged: list[str]  # what the check could not judge, and why
    unread: list[str] = field(default_factory=list)  # records the nodes did not let it read (faults.NodeFaults)
    rails: dict[str, Verdict] = field(default_factory=dict)  # each rail's pairs judged alone (`on_rails`)
    # the links measured again: pair -> metric -> (first reading, second); pair_figures has the better
    again: Mapping[tuple[str, str], Mapping[str, tuple[float, float]]] = field(default_factory=dict)
    # the uplinks named (`by_leaves`): a leaf's own, or the path between two leaves
    uplinks: list[Finding] = field(default_factory=list)
    # every path between two leaves judged (`by_leaves`), named or not: metric -> (leaf, leaf) ->
    # (pairs across, the median of their figures over the lesser of their nodes' medians)
    paths: dict[str, dict[tuple[str, str], tuple[int, float]]] = field(default_factory=dict)
    leaf_of: Mapping[str, str] = field(default_factory=dict)  # node -> its leaf, where judged by leaves
    # the soak (harness/nodes/soak.py): its whole passes (None: no soak asked), and each link it
    # judged: metric -> pair -> (the link's first reading, its last, its drift)
    soak_passes: int | None = None
    soak: dict[str, dict[tuple[str, str], tuple[float, float, float]]] = field(default_factory=dict)

    def by_leaf(self) -> list[str]:
        """The nodes in the order a report draws them: leaf by leaf, each leaf's in the check's
        order, the leaves in the order their first node comes; the nodes under no leaf last."""
        first: dict[str, int] = {}
        for i, node in enumerate(self.names):
            first.setdefault(self.leaf_of.get(node, ""), i)
        last = len(self.names)
        return sorted(self.names, key=lambda n: first[self.leaf_of[n]] if n in self.leaf_of else last)

    @property
    def drain(self) -> str:
        """The named nodes in Slurm's hostlist syntax, empty when none."""
        return hostlist(n for f in self.nodes for n in f.nodes)

    @property
    def named(self) -> bool:
        return bool(self.nodes or self.links or self.cluster or self.uplinks)

    @property
    def node_metrics(self) -> list[str]:
        """The metrics of a node's row: its own figures, then its scores of the pair figures."""
        return [*self.node_figures, *self.node_scores]

    def node_row(self, node: str) -> list[float | None]:
        """The node's value of each of `node_metrics`, None where it has none (its step failed)."""
        return [self.node_figures[m].get(node) for m in self.node_figures] + [
            self.node_scores[m].get(node) for m in self.node_scores
        ]


def drain_command(hostlist: str, reason: str) -> str:
    """The scontrol line an admin pastes to drain what a check named, every word quoted for a
    shell: the reason holds a run directory's name, which is anyone's to choose."""
    return shlex.join(["scontrol", "update", f"nodename={hostlist}", "state=drain", f"reason={reason}"])


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _group_medians(values: Any, counts: Any) -> Any:
    """The median of each group of `values`, which lie group after group, `counts[k]` in group k
    (each at least 1): statistics.median's, the middle value or the mean of the two middle ones.
    Groups of one size, as every pair or `--partners K` give, are the rows of a matrix."""
    import numpy as np

    if len(counts) and (counts == counts[0]).all():
        return np.median(values.reshape(len(counts), int(counts[0])), axis=1)
    group = np.repeat(np.arange(len(counts)), counts)
    ordered = values[np.lexsort((values, group))]  # by group, then by value
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return (ordered[starts + (counts - 1) // 2] + ordered[starts + counts // 2]) / 2


@dataclass(frozen=True)
class _Pairs:
    """One metric's pairs as arrays, in the order the figures came: each end's index into
    `nodes`, and the figure, NaN where the pair failed. A check of every pair of 2,048 nodes has
    two million of them: the verdict is array operations over these, not a loop of Python."""

    nodes: list[str]
    keys: list[tuple[str, str]]
    a: Any
    b: Any
    value: Any
    by_node: Any  # both ends of every pair (pair i's at 2i and 2i + 1), grouped by node, stably
    bounds: Any  # node k's ends are by_node[bounds[k]:bounds[k + 1]]

    @classmethod
    def of(
        cls, by_pair: Mapping[tuple[str, str], float | None], names: Sequence[str], like: _Pairs | None = None
    ) -> _Pairs:
        """The pairs of `by_pair`, their nodes numbered in the order each first came; `like`, the
        pairs of another metric, lends its numbering where the pairs are the same."""
        import numpy as np

        keys = list(by_pair)
        value = np.array(list(by_pair.values()), dtype=float)  # None, a failed pair, becomes NaN
        if like is not None and like.keys == keys:
            return cls(like.nodes, like.keys, like.a, like.b, value, like.by_node, like.bounds)
        index = {n: i for i, n in enumerate(names)}
        flat = list(itertools.chain.from_iterable(keys))
        try:
            ends = np.fromiter(map(index.__getitem__, flat), np.intp, len(flat))
        except KeyError:  # a pair of a node outside `names`: numbered after them
            for node in flat:
                index.setdefault(node, len(index))
            ends = np.fromiter(map(index.__getitem__, flat), np.intp, len(flat))
        first = np.full(len(index), len(flat), np.intp)
        first[ends[::-1]] = np.arange(len(flat) - 1, -1, -1)  # the last write of a node is its first place
        came = np.argsort(first, kind="stable")[: int((first < len(flat)).sum())]
        renumber = np.empty(len(index), np.intp)
        renumber[came] = np.arange(len(came))
        ends = renumber[ends]
        every = list(index)
        by_node = np.argsort(ends, kind="stable")
        bounds = np.concatenate(([0], np.cumsum(np.bincount(ends, minlength=len(came)))))
        return cls([every[i] for i in came], keys, ends[0::2], ends[1::2], value, by_node, bounds)

    def ratios(self, score: Mapping[str, float], keep: Any = None) -> tuple[Any, Any]:
        """(which pairs, their figure over the lesser score of their two nodes): the measured
        pairs of `keep` (a mask; all by default) whose two nodes are scored, above 0."""
        import numpy as np

        scores = np.array([score.get(n, math.nan) for n in self.nodes], dtype=float)
        low = np.minimum(scores[self.a], scores[self.b])  # NaN where a node is not scored
        ok = ~np.isnan(self.value) & (low > 0)
        if keep is not None:
            ok &= keep
        which = np.flatnonzero(ok)
        return which, self.value[which] / low[which]


def judge(
    names: list[str],
    node_figures: dict[str, dict[str, float | None]],
    pair_figures: dict[str, dict[tuple[str, str], float | None]],
    threshold: float,
    expected: Mapping[str, float | None],
    failures: Mapping[str, str] | None = None,
    again: Mapping[tuple[str, str], Mapping[str, tuple[float, float]]] | None = None,
) -> Verdict:
    """Name the nodes and links to drain (docs/guides/nodes.md).

    `node_figures[metric][node]` and `pair_figures[metric][(a, b)]` are the steps' figures,
    None where the step failed (`failures` says why, by node or by "a b"). A node is named when
    its own step failed, when its figure (a pair metric: the median over its partners, a failed
    pair counting 0) lies low against the population of the other nodes, or when it is below
    EXPECTED_SHARE of the stated hardware while the population is not. A pair whose two nodes
    are not named is named as a link when it failed, or when its figure lies low against the
    population of pairs' figures each divided by the lesser score of its two nodes. When most
    figures of a metric failed, the check failed, not the nodes: nothing is named by that
    metric, and it says why. `again` holds the two readings of each link measured again, of which
    `pair_figures` holds the better (docs/guides/nodes.md, "Measured again")."""
    judging = _Judging(threshold, expected, failures or {}, again or {})
    judging.nodes_alone(node_figures)
    judged = judging.nodes_by_their_pairs(names, pair_figures)
    links = judging.links(judged)
    order = {n: i for i, n in enumerate(names)}
    return Verdict(
        names=names,
        node_figures=node_figures,
        node_scores=judging.scores,
        pair_figures=pair_figures,
        populations=judging.populations,
        nodes=sorted(judging.findings.values(), key=lambda f: order.get(f.nodes[0], 0)),
        links=sorted(links.values(), key=lambda f: tuple(order.get(n, 0) for n in f.nodes)),
        cluster=judging.cluster,
        unjudged=judging.unjudged,
        again=judging.again,
    )


class _Judging:
    """What `judge` finds as it goes, stage by stage: the nodes named and why, what the cluster
    as a whole shows, what could not be judged, and each metric's population and node scores."""

    def __init__(
        self,
        threshold: float,
        expected: Mapping[str, float | None],
        failures: Mapping[str, str],
        again: Mapping[tuple[str, str], Mapping[str, tuple[float, float]]],
    ):
        self.threshold, self.expected, self.failures, self.again = threshold, expected, failures, again
        self.findings: dict[str, Finding] = {}
        self.cluster: list[str] = []
        self.unjudged: list[str] = []
        self.populations: dict[str, Population] = {}
        self.scores: dict[str, dict[str, float]] = {}
        self.noises: dict[str, float] = {}

    def name(self, node: str, why: str) -> None:
        self.findings.setdefault(node, Finding((node,))).reasons.append(why)

    def against(self, metric: str, values: dict[str, float], noise: float = 0.0) -> None:
        """Name the nodes whose figure lies low against the other nodes' (each node is left out
        of its own population, so that with few nodes a slow one does not widen the spread it
        is judged by), and against the stated hardware."""
        label, unit, _ = METRICS[metric]
        if len(values) >= MIN_NODES:
            self.populations[metric] = Population.of(values.values(), self.threshold, noise)
            others = Population.leave_one_out(list(values.values()), self.threshold, noise)
            for (node, v), pop in zip(values.items(), others):
                if v < pop.low:
                    below = 1 - v / pop.centre if pop.centre else 0.0
                    self.name(
                        node, f"{label} {_fmt(v)} {unit}, {below:.0%} below the other nodes' median {_fmt(pop.centre)}"
                    )
        else:
            self.unjudged.append(f"{label}: {len(values)} node(s) measured; the population takes {MIN_NODES}")
        want = self.expected.get(metric)
        if want:
            floor = EXPECTED_SHARE * want
            centre = statistics.median(values.values()) if values else None
            if centre is not None and centre < floor:
                self.cluster.append(
                    f"{label}: the median node's {_fmt(centre)} {unit} is below {EXPECTED_SHARE:.0%} of the "
                    f"stated hardware's {_fmt(want)}: a setting every node shares, not one node"
                )
            else:
                for node, v in values.items():
                    if v < floor:
                        self.name(
                            node, f"{label} {_fmt(v)} {unit}, below {EXPECTED_SHARE:.0%} of the stated {_fmt(want)}"
                        )

    def systemic(self, metric: str, lost: int, total: int, first: str, what: str) -> bool:
        """Most figures of a metric failed (`lost` of `total`, the first `first`): the check's
        setup, not the nodes; nothing is named by it."""
        if lost <= total / 2:
            return False
        self.unjudged.append(
            f"{METRICS[metric][0]}: {lost} of {total} {what} failed (first: "
            f"{self.failures.get(first, 'no result')}): the check's setup, profile or software, not a node; "
            "nothing is named by it"
        )
        return True

    def nodes_alone(self, node_figures: dict[str, dict[str, float | None]]) -> None:
        """Each node by its own steps' figures: a failed step names it, a low figure too."""
        for metric, figures in node_figures.items():
            label = METRICS[metric][0]
            lost = [node for node, v in figures.items() if v is None]
            if self.systemic(metric, len(lost), len(figures), lost[0] if lost else "", "nodes"):
                continue
            for node, v in figures.items():
                if v is None:
                    self.name(node, f"{label} failed: {self.failures.get(node, 'no result')}")
            self.against(metric, {n: v for n, v in figures.items() if v is not None})

    def nodes_by_their_pairs(
        self, names: list[str], pair_figures: dict[str, dict[tuple[str, str], float | None]]
    ) -> dict[str, _Pairs]:
        """Each node by the median of its pairs' figures (a failed pair counting 0), against the
        other nodes': the pair metrics judged, by metric (a metric most of whose pairs failed
        is not)."""
        import numpy as np

        judged: dict[str, _Pairs] = {}
        previous = None
        for metric, by_pair in pair_figures.items():
            pairs = previous = _Pairs.of(by_pair, names, previous)
            failed = np.isnan(pairs.value)
            first = " ".join(pairs.keys[int(np.argmax(failed))]) if failed.any() else ""
            if not self.systemic(metric, int(failed.sum()), len(failed), first, "pairs"):
                judged[metric] = pairs
        for metric, pairs in judged.items():
            # Each node's pairs, in the order the figures came (_Pairs.by_node)
            values = np.repeat(pairs.value, 2)[pairs.by_node]
            lost = np.isnan(values)
            starts, counts = pairs.bounds[:-1], np.diff(pairs.bounds)
            n_lost = np.add.reduceat(lost.astype(np.intp), starts) if len(starts) else starts
            medians = _group_medians(np.where(lost, 0.0, values), counts)
            # A node most of whose pairs failed is named for that, and left out of the population,
            # where its zeros would widen the spread the others are judged by.
            score = self.scores[metric] = {}
            for k, node in enumerate(pairs.nodes):  # in the order each node first came
                if n_lost[k] > counts[k] / 2:
                    start = starts[k]
                    failed = pairs.keys[pairs.by_node[start + int(np.argmax(lost[start : start + counts[k]]))] // 2]
                    why = self.failures.get(" ".join(failed), "no result")
                    self.name(node, f"{METRICS[metric][0]}: {n_lost[k]} of {counts[k]} pairs failed (first: {why})")
                else:
                    score[node] = float(medians[k])
            self.noises[metric] = pair_noise(pairs.ratios(score)[1])
            self.against(metric, score, self.noises[metric])
        return judged

    def links(self, judged: dict[str, _Pairs]) -> dict[tuple[str, str], Finding]:
        """The links of two nodes not named that failed, or whose figure lies low against the
        other pairs', each divided by the lesser score of its two nodes."""
        import numpy as np

        links: dict[tuple[str, str], Finding] = {}
        for metric, pairs in judged.items():
            label = METRICS[metric][0]
            score = self.scores[metric]
            named = np.array([n in self.findings for n in pairs.nodes], dtype=bool)
            healthy = ~(named[pairs.a] | named[pairs.b])
            for i in np.flatnonzero(healthy & np.isnan(pairs.value)):
                a, b = pairs.keys[i]
                links.setdefault((a, b), Finding((a, b))).reasons.append(
                    f"{label} failed: {self.failures.get(f'{a} {b}', 'no result')}"
                )
            which, ratios = pairs.ratios(score, healthy)
            spanned = np.unique(np.concatenate((pairs.a[which], pairs.b[which])))
            if len(spanned) < MIN_NODES + 1 or len(ratios) < MIN_NODES:
                if len(ratios):
                    self.unjudged.append(
                        f"{label} of single links: {len(ratios)} pair(s) of healthy nodes; it takes 4 nodes"
                    )
                continue
            pop = Population.of(ratios, self.threshold, self.noises[metric])
            self.populations[f"{metric}/link"] = pop
            for i, r in zip(which[ratios < pop.low], ratios[ratios < pop.low]):
                a, b = pairs.keys[i]
                why = low_link(metric, float(pairs.value[i]), r, min(score[a], score[b]), self.again.get((a, b), {}))
                links.setdefault((a, b), Finding((a, b))).reasons.append(why)
        return links


def low_link(metric: str, value: float, ratio: float, lesser: float, again: Mapping[str, tuple[float, float]]) -> str:
    """Why a link is named for its figure of `metric`: `value`, `ratio` of the lesser of its
    nodes' scores, and its two readings where it was measured again."""
    label, unit, _ = METRICS[metric]
    two = again.get(metric)
    both = f" (the better of {_fmt(two[0])} and {_fmt(two[1])}, measured again)" if two else ""
    return (
        f"{label} {_fmt(value)} {unit}{both}, {1 - ratio:.0%} below the lesser of its nodes' medians ({_fmt(lesser)})"
    )


MIN_ACROSS = 3  # pairs across two leaves it takes to judge the path between them, not its links


def by_leaves(
    names: list[str],
    node_figures: dict[str, dict[str, float | None]],
    pair_figures: dict[str, dict[tuple[str, str], float | None]],
    threshold: float,
    expected: Mapping[str, float | None],
    failures: Mapping[str, str],
    again: Mapping[tuple[str, str], Mapping[str, tuple[float, float]]],
    leaf_of: Mapping[str, str],
) -> Verdict:
    """`judge` of a fabric of leaf switches (docs/guides/nodes.md, "Leaves"): the nodes and the
    links under each leaf judged by the pairs under one leaf alone, so that a slow uplink does
    not lower the scores of the nodes behind it; then the pairs across two leaves, each divided
    by the lesser score of its nodes as a link's is, against the same population of the pairs
    under one leaf. When the median of the pairs across two leaves lies low, the path between
    them is named, not its links: with three leaves or more, a leaf whose every path is named
    is named for its own uplink. A node under no leaf is judged as without leaves."""

    def across(pair: tuple[str, str]) -> bool:
        a, b = pair
        return a in leaf_of and b in leaf_of and leaf_of[a] != leaf_of[b]

    under = {m: {p: x for p, x in by.items() if not across(p)} for m, by in pair_figures.items()}
    v = judge(names, node_figures, under, threshold, expected, failures, again)
    v.pair_figures = pair_figures  # every figure is shown
    v.leaf_of = {n: leaf_of[n] for n in names if n in leaf_of}
    named = {f.nodes[0] for f in v.nodes}
    links = {f.nodes: f for f in v.links}
    paths: dict[tuple[str, str], list[str]] = {}
    for metric, by_pair in pair_figures.items():
        label = METRICS[metric][0]
        crossing = [(p, x) for p, x in by_pair.items() if across(p) and not set(p) & named]
        score, pop = v.node_scores.get(metric, {}), v.populations.get(f"{metric}/link")
        if pop is None:
            if crossing:
                v.unjudged.append(
                    f"{label} across leaves: the pairs under one leaf could not be judged, nor the uplinks"
                )
            continue
        alone = sorted({n for p, _ in crossing for n in p if n not in score}, key=names.index)
        if alone:  # a node with no figure under its own leaf: nothing to hold its pairs across to
            v.unjudged.append(f"{label} of {hostlist(alone)} across leaves: no pair under its leaf measured it")
        groups: dict[tuple[str, str], list[tuple[tuple[str, str], float | None, float]]] = {}
        for (a, b), x in crossing:
            if a in score and b in score:
                lesser = min(score[a], score[b])
                ratio = 0.0 if x is None or lesser <= 0 else x / lesser
                key = (leaf_of[a], leaf_of[b]) if leaf_of[a] < leaf_of[b] else (leaf_of[b], leaf_of[a])
                groups.setdefault(key, []).append(((a, b), x, ratio))
        for (one, other), members in groups.items():
            centre = statistics.median(r for _, _, r in members)
            if len(members) >= MIN_ACROSS:
                v.paths.setdefault(metric, {})[(one, other)] = (len(members), centre)
            if len(members) >= MIN_ACROSS and centre < pop.low:
                paths.setdefault((one, other), []).append(
                    f"{label}: {len(members)} pairs across, their median {1 - centre:.0%} below the lesser of their "
                    f"nodes' medians, while the pairs under each leaf are not"
                )
                continue
            if len(members) < MIN_ACROSS:
                v.unjudged.append(
                    f"{label} of the path between leaves {one} and {other}: {len(members)} pair(s) across; it takes "
                    f"{MIN_ACROSS} (its pairs are judged as links)"
                )
            for (a, b), x, ratio in members:
                if x is None:
                    why = f"{label} failed: {failures.get(f'{a} {b}', 'no result')}"
                elif ratio < pop.low:
                    why = low_link(metric, x, ratio, min(score[a], score[b]), again.get((a, b), {}))
                else:
                    continue
                links.setdefault((a, b), Finding((a, b))).reasons.append(why)
    order = {n: i for i, n in enumerate(names)}
    v.links = sorted(links.values(), key=lambda f: tuple(order.get(n, 0) for n in f.nodes))
    v.uplinks = _uplinks(paths, sorted({leaf_of[n] for n in names if n in leaf_of}))
    return v


def _uplinks(paths: dict[tuple[str, str], list[str]], leaves: list[str]) -> list[Finding]:
    """The paths named, as findings: with three leaves or more, a leaf whose every path to the
    others is named is named alone, for its own uplink, and its paths go; else each path."""
    own = [
        leaf
        for leaf in leaves
        if len(leaves) >= 3 and all(tuple(sorted((leaf, o))) in paths for o in leaves if o != leaf)
    ]
    out = []
    for leaf in own:
        to = {o if leaf == one else one: reasons for (one, o), reasons in sorted(paths.items()) if leaf in (one, o)}
        reasons = [f"the uplink of leaf {leaf}: every path from it to the other leaves is slow"]
        out.append(Finding((leaf,), reasons + [f"to leaf {o}: {why}" for o, whys in to.items() for why in whys]))
    for (one, other), reasons in sorted(paths.items()):
        if one not in own and other not in own:
            out.append(Finding((one, other), [f"the path between leaves {one} and {other}: {why}" for why in reasons]))
    return out


def expected(profile: ClusterProfile | None, gpus_per_node: int) -> dict[str, float | None]:
    """The stated hardware's figure of each metric (docs/concepts/expected.md), None where not stated:
    the matmul against a device's peak TFLOP/s, and each step's collective against the peak of
    its layout (harness/config/peak.py): the node's all-reduce inside the node, a pair's all-reduce
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
