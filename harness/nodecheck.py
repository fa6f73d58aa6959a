"""The cluster-wide node and link check (`bench nodes`), pure: its plan of steps in rounds, the
figures read from the steps' results, and the verdict that names nodes and links to drain
(docs/nodes.md).

Every node is first measured alone (a matmul on each of its devices, and with two or more
ranks per node an all-reduce among them). Then every pair of nodes runs a two-node all-reduce
and a point-to-point exchange, in N - 1 rounds (N even; N when odd, one node idle in each) of
disjoint pairs that run at once: the circle method of a round-robin tournament, the schedule
`benchmarks/linkprobe.py`'s link probe follows between ranks. Node N - 1 (N when odd: a phantom
whose partner sits out) stays put; in round r it meets node r, and node r + k meets node
r - k (mod N - 1) for k = 1 .. N/2 - 1. So the check takes O(N) rounds, not O(N^2) jobs; with
`partners` = K only the first K rounds run, and each node meets K others.
"""

from __future__ import annotations

import itertools
import math
import shlex
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import format_size
from harness.hostlists import hostlist


def rounds(n: int, first: int | None = None) -> list[list[tuple[int, int]]]:
    """The rounds of a round-robin tournament of nodes 0..n-1: each a list of disjoint pairs
    (low, high); every pair of nodes meets in exactly one round. With `first`, only the first
    that many: the circle method gives round r directly, so planning k rounds of N nodes costs
    k x N/2 pairs, not the whole tournament's N²/2 (docs/nodes.md, "What each part costs")."""
    if n < 2:
        return []
    m = tournament(n)  # the nodes that rotate, as many as rounds; the fixed one is m, a phantom when n is odd
    half = (m + 1) // 2
    out = []
    for r in range(m if first is None else min(first, m)):
        pairs = [] if m >= n else [(r, m)]
        for k in range(1, half):
            a, b = (r + k) % m, (r - k) % m
            pairs.append((a, b) if a < b else (b, a))
        out.append(pairs)
    return out


# --------------------------------------------------------------------------- the plan

STEPS_DIR = "steps"  # in the check's job directory: each step's result and log


@dataclass(frozen=True)
class Options:
    """What every step of a check runs with; plan.json keeps it."""

    gpus_per_node: int = 1
    device: str = "auto"
    backend: str = "auto"
    bytes: int = 64 * 2**20  # the all-reduce's and the exchange's message
    iters: int = 20  # timed calls of each, after 5 warmup calls
    gemm: bool = True  # each node's matmul (where GPUs exist: not with device cpu)
    gemm_size: int = 0  # 0: the workload's default for the device
    gemm_iters: int = 20
    partners: int | None = None  # None: every pair; K: the first K rounds only
    reference: tuple[str, ...] = ()  # nodes every other node is measured against, one each
    # Steps of a round at once (None: all). Emulated nodes that share one machine's CPUs, as the
    # local executor's and the testbed's do, measure each other's load when run at once.
    concurrency: int | None = None
    step_timeout_s: float = 120.0  # a step still running this long is ended and counted failed
    timeout_s: float = 120.0  # the process group's timeout inside each step


@dataclass(frozen=True)
class Step:
    """One launch of the check: a workload on one node, or on two."""

    name: str  # gemm-3, intra-3, pair-3-5: indices into the node list, so a safe file name
    nodes: tuple[int, ...]
    module: str
    args: tuple[str, ...]

    @property
    def result(self) -> str:
        return f"{STEPS_DIR}/{self.name}.json"

    @property
    def log(self) -> str:
        return f"{STEPS_DIR}/{self.name}.log"


def pair_rounds(n: int, partners: int | None = None, reference: Sequence[int] = ()) -> list[list[tuple[int, int]]]:
    """The rounds of pairs the check runs: every pair; the first `partners` rounds, in which
    each node meets that many others; or, with reference nodes, every pair of them, then each
    other node with one of them, each reference in one pair per round: R - 1 + ceil((N - R) / R)
    rounds for R references (docs/nodes.md)."""
    if reference:
        refs = list(reference)
        out = [
            [(refs[a], refs[b]) if refs[a] < refs[b] else (refs[b], refs[a]) for a, b in r] for r in rounds(len(refs))
        ]
        others = [i for i in range(n) if i not in set(refs)]
        for start in range(0, len(others), len(refs)):
            out.append([(min(r, i), max(r, i)) for r, i in zip(refs, others[start : start + len(refs)])])
        return out
    return rounds(n, partners)


def reference_indices(names: Sequence[str], o: Options) -> list[int]:
    """The indices of the reference nodes among `names`; ValueError for one not among them."""
    missing = [r for r in o.reference if r not in names]
    if missing:
        raise ValueError(f"reference node {missing[0]} is not among the nodes checked")
    return [names.index(r) for r in o.reference]


def tournament(n: int) -> int:
    """How many rounds `rounds(n)` has: n - 1, or n when odd (a phantom's partner sits out)."""
    return 0 if n < 2 else n - 1 + n % 2


def round_count(n: int, o: Options) -> int:
    """How many rounds `schedule` gives for `n` nodes, counted rather than planned."""
    r = len(o.reference)
    if r:
        pairs = tournament(r) + -(-(n - r) // r)
    else:
        pairs = tournament(n) if o.partners is None else min(o.partners, tournament(n))
    return int(o.gemm) + int(o.gpus_per_node > 1) + pairs


# A round: what its steps run ("gemm", "intra" or "pair") and the nodes of each step, by index.
Round = tuple[str, list[tuple[int, ...]]]


def schedule(names: Sequence[str], o: Options) -> list[Round]:
    """The check's rounds, each round's steps on disjoint nodes, run at once: every node's
    matmul (unless `o.gemm` is off), then (two or more ranks per node) every node's all-reduce,
    then the pairs. Only indices: a round's steps are made when it runs (`steps`), so that the
    plan of 2,048 nodes (2 million steps) costs what its pairs cost."""
    n = len(names)
    out: list[Round] = [("gemm", [(i,) for i in range(n)])] if o.gemm else []
    if o.gpus_per_node > 1:
        out.append(("intra", [(i,) for i in range(n)]))
    out += [("pair", list(pairs)) for pairs in pair_rounds(n, o.partners, reference_indices(names, o))]
    return out


def steps(round_: Round, o: Options, folder: str) -> list[Step]:
    """A round's steps, their results under `folder`, relative to where the steps run."""
    kind, members = round_
    common = (f"--device={o.device}", f"--backend={o.backend}", f"--timeout={o.timeout_s:g}")
    if kind == "gemm":
        gemm = (f"--size={o.gemm_size}", f"--iters={o.gemm_iters}", *common)
        return [Step(f"gemm-{i}", (i,), "benchmarks.gemm", (*gemm, *_json(folder, f"gemm-{i}"))) for (i,) in members]
    size = format_size(o.bytes).replace(" ", "")
    if kind == "intra":
        collectives, groups = "all_reduce", "world"
    else:
        collectives, groups = "all_reduce,sendrecv", ",".join(dict.fromkeys(("world", exchange_group(o.gpus_per_node))))
    args = (
        f"--collective={collectives}",
        f"--groups={groups}",
        f"--min-bytes={size}",
        f"--max-bytes={size}",
        f"--iters={o.iters}",
        "--warmup-iters=5",
        "--check=1",
        "--no-out-of-place",
        "--link-bytes=0",
        *common,
    )
    out = []
    for nodes in members:
        name = f"{kind}-{'-'.join(map(str, nodes))}"
        out.append(Step(name, nodes, "benchmarks.allreduce", (*args, *_json(folder, name))))
    return out


def _json(folder: str, name: str) -> tuple[str, str]:
    return ("--json", f"{folder}/{STEPS_DIR}/{name}.json")


# --------------------------------------------------------------------------- figures

# What the check measures: (label, unit, on one node or a pair). Higher is better for each.
METRICS = {
    "gemm_tflops": ("matmul, slowest device", "TFLOP/s", "node"),
    "intra_busbw_gbps": ("all-reduce inside the node, busbw", "GB/s", "node"),
    "busbw_gbps": ("two-node all-reduce, busbw", "GB/s", "pair"),
    "p2p_gbps": ("point-to-point exchange, per rank", "GB/s", "pair"),
}


class FigureError(ValueError):
    """A step's result that does not hold the figure it should."""


def _number(value: Any, where: str, positive: bool = False) -> float:
    """A figure of a result; a rate or a time must be positive: a step that read 0 GB/s, or 0 s
    a call, measured nothing, and fails rather than join a population of zeros."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise FigureError(f"{where}: not a non-negative number ({value!r})")
    if positive and value == 0:
        raise FigureError(f"{where}: 0, which is no measurement")
    return float(value)


def _median_busbw(result: Mapping[str, Any], collective: str, group: str, where: str) -> float:
    """busbw at the check's size from the median call's time (one slow call does not move it),
    or FigureError when the row is missing or any call returned a wrong element."""
    rows = result.get("rows")
    if not isinstance(rows, list):
        raise FigureError(f"{where}: no rows")
    for row in rows:
        if isinstance(row, dict) and row.get("collective") == collective and row.get("group") == group:
            wrong = _number(row.get("wrong"), f"{where}: {collective} wrong")
            if wrong:
                raise FigureError(f"{where}: {collective} returned {wrong:.0f} wrong element(s)")
            busbw = _number(row.get("busbw_gbps"), f"{where}: {collective} busbw_gbps", positive=True)
            mean, median = (
                _number(row.get(k), f"{where}: {collective} {k}", positive=True) for k in ("time_us", "time_us_median")
            )
            return busbw * mean / median
    raise FigureError(f"{where}: no {collective} row on the {group} group")


def exchange_group(gpus_per_node: int) -> str:
    """The group a pair's exchange runs on: the inter group where a node has several ranks, each
    rank with its peer on the other node, every rail at once; with one rank per node, the world."""
    return "inter" if gpus_per_node > 1 else "world"


# What each kind of round measures.
KIND_METRICS = {"gemm": ("gemm_tflops",), "intra": ("intra_busbw_gbps",), "pair": ("busbw_gbps", "p2p_gbps")}


def step_metrics(step: Step) -> tuple[str, ...]:
    """The metrics a step measures."""
    kind = "gemm" if step.module == "benchmarks.gemm" else "intra" if len(step.nodes) == 1 else "pair"
    return KIND_METRICS[kind]


def planned_metrics(o: Options) -> list[str]:
    """The metrics a check's rounds measure (`schedule`'s kinds), counted rather than planned."""
    kinds = [*(["gemm"] if o.gemm else []), *(["intra"] if o.gpus_per_node > 1 else []), "pair"]
    return [m for kind in kinds for m in KIND_METRICS[kind]]


def step_figures(step: Step, result: Mapping[str, Any]) -> dict[str, float]:
    """The figures one step's result gives, by metric; FigureError when it does not hold them."""
    where = step.name
    metrics = step_metrics(step)
    if metrics == ("gemm_tflops",):
        values = result.get("tflops_per_rank")
        if not isinstance(values, list) or not values:
            raise FigureError(f"{where}: no tflops_per_rank")
        return {"gemm_tflops": min(_number(v, f"{where}: tflops_per_rank", positive=True) for v in values)}
    if metrics == ("intra_busbw_gbps",):
        return {"intra_busbw_gbps": _median_busbw(result, "all_reduce", "world", where)}
    params = result.get("params") or {}
    groups = params.get("groups") if isinstance(params, dict) else None
    if not isinstance(groups, (dict, type(None))):
        raise FigureError(f"{where}: params.groups is not an object of groups")
    p2p_group = "inter" if groups and "inter" in groups else "world"
    return {
        "busbw_gbps": _median_busbw(result, "all_reduce", "world", where),
        "p2p_gbps": _median_busbw(result, "sendrecv", p2p_group, where),
    }


# --------------------------------------------------------------------------- the verdict

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
        O(n log n) rather than O(n²) (10,000 nodes took 188 s). Leaving one value out moves the
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

    @property
    def drain(self) -> str:
        """The named nodes in Slurm's hostlist syntax, empty when none."""
        return hostlist(n for f in self.nodes for n in f.nodes)

    @property
    def named(self) -> bool:
        return bool(self.nodes or self.links or self.cluster)

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
        low = np.fmin(scores[self.a], scores[self.b])
        low = np.where(np.isnan(scores[self.a]) | np.isnan(scores[self.b]), math.nan, low)
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
) -> Verdict:
    """Name the nodes and links to drain (docs/nodes.md).

    `node_figures[metric][node]` and `pair_figures[metric][(a, b)]` are the steps' figures,
    None where the step failed (`failures` says why, by node or by "a b"). A node is named when
    its own step failed, when its figure (a pair metric: the median over its partners, a failed
    pair counting 0) lies low against the population of the other nodes, or when it is below
    EXPECTED_SHARE of the stated hardware while the population is not. A pair whose two nodes
    are not named is named as a link when it failed, or when its figure lies low against the
    population of pairs' figures each divided by the lesser score of its two nodes. When most
    figures of a metric failed, the check failed, not the nodes: nothing is named by that
    metric, and it says why."""
    failures = failures or {}
    findings: dict[str, Finding] = {}
    cluster: list[str] = []
    unjudged: list[str] = []
    populations: dict[str, Population] = {}
    scores: dict[str, dict[str, float]] = {}

    def name(node: str, why: str) -> None:
        findings.setdefault(node, Finding((node,))).reasons.append(why)

    def against(metric: str, values: dict[str, float], noise: float = 0.0) -> None:
        """Name the nodes whose figure lies low against the other nodes' (each node is left out
        of its own population, so that with few nodes a slow one does not widen the spread it
        is judged by), and against the stated hardware."""
        label, unit, _ = METRICS[metric]
        if len(values) >= MIN_NODES:
            populations[metric] = Population.of(values.values(), threshold, noise)
            others = Population.leave_one_out(list(values.values()), threshold, noise)
            for (node, v), pop in zip(values.items(), others):
                if v < pop.low:
                    below = 1 - v / pop.centre if pop.centre else 0.0
                    name(
                        node, f"{label} {_fmt(v)} {unit}, {below:.0%} below the other nodes' median {_fmt(pop.centre)}"
                    )
        else:
            unjudged.append(f"{label}: {len(values)} node(s) measured; the population takes {MIN_NODES}")
        want = expected.get(metric)
        if want:
            floor = EXPECTED_SHARE * want
            centre = statistics.median(values.values()) if values else None
            if centre is not None and centre < floor:
                cluster.append(
                    f"{label}: the median node's {_fmt(centre)} {unit} is below {EXPECTED_SHARE:.0%} of the "
                    f"stated hardware's {_fmt(want)}: a setting every node shares, not one node"
                )
            else:
                for node, v in values.items():
                    if v < floor:
                        name(node, f"{label} {_fmt(v)} {unit}, below {EXPECTED_SHARE:.0%} of the stated {_fmt(want)}")

    def systemic(metric: str, lost: int, total: int, first: str, what: str) -> bool:
        """Most figures of a metric failed (`lost` of `total`, the first `first`): the check's
        setup, not the nodes; nothing is named by it."""
        if lost <= total / 2:
            return False
        unjudged.append(
            f"{METRICS[metric][0]}: {lost} of {total} {what} failed (first: "
            f"{failures.get(first, 'no result')}): the check's setup, profile or software, not a node; "
            "nothing is named by it"
        )
        return True

    for metric, figures in node_figures.items():
        label = METRICS[metric][0]
        lost = [node for node, v in figures.items() if v is None]
        if systemic(metric, len(lost), len(figures), lost[0] if lost else "", "nodes"):
            continue
        for node, v in figures.items():
            if v is None:
                name(node, f"{label} failed: {failures.get(node, 'no result')}")
        against(metric, {n: v for n, v in figures.items() if v is not None})

    import numpy as np

    noises: dict[str, float] = {}
    judged: dict[str, _Pairs] = {}
    previous = None
    for metric, by_pair in pair_figures.items():
        pairs = previous = _Pairs.of(by_pair, names, previous)
        failed = np.isnan(pairs.value)
        first = " ".join(pairs.keys[int(np.argmax(failed))]) if failed.any() else ""
        if not systemic(metric, int(failed.sum()), len(failed), first, "pairs"):
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
        score = scores[metric] = {}
        for k, node in enumerate(pairs.nodes):  # in the order each node first came
            if n_lost[k] > counts[k] / 2:
                start = starts[k]
                failed = pairs.keys[pairs.by_node[start + int(np.argmax(lost[start : start + counts[k]]))] // 2]
                why = failures.get(" ".join(failed), "no result")
                name(node, f"{METRICS[metric][0]}: {n_lost[k]} of {counts[k]} pairs failed (first: {why})")
            else:
                score[node] = float(medians[k])
        noises[metric] = pair_noise(pairs.ratios(score)[1])
        against(metric, score, noises[metric])

    links: dict[tuple[str, str], Finding] = {}
    for metric, pairs in judged.items():
        label, unit, _ = METRICS[metric]
        score = scores[metric]
        named = np.array([n in findings for n in pairs.nodes], dtype=bool)
        healthy = ~(named[pairs.a] | named[pairs.b])
        for i in np.flatnonzero(healthy & np.isnan(pairs.value)):
            a, b = pairs.keys[i]
            links.setdefault((a, b), Finding((a, b))).reasons.append(
                f"{label} failed: {failures.get(f'{a} {b}', 'no result')}"
            )
        which, ratios = pairs.ratios(score, healthy)
        spanned = np.unique(np.concatenate((pairs.a[which], pairs.b[which])))
        if len(spanned) < MIN_NODES + 1 or len(ratios) < MIN_NODES:
            if len(ratios):
                unjudged.append(f"{label} of single links: {len(ratios)} pair(s) of healthy nodes; it takes 4 nodes")
            continue
        pop = Population.of(ratios, threshold, noises[metric])
        populations[f"{metric}/link"] = pop
        for i, r in zip(which[ratios < pop.low], ratios[ratios < pop.low]):
            a, b = pairs.keys[i]
            links.setdefault((a, b), Finding((a, b))).reasons.append(
                f"{label} {_fmt(float(pairs.value[i]))} {unit}, {1 - r:.0%} below the lesser of its nodes' medians "
                f"({_fmt(min(score[a], score[b]))})"
            )
    order = {n: i for i, n in enumerate(names)}
    return Verdict(
        names=names,
        node_figures=node_figures,
        node_scores=scores,
        pair_figures=pair_figures,
        populations=populations,
        nodes=sorted(findings.values(), key=lambda f: order.get(f.nodes[0], 0)),
        links=sorted(links.values(), key=lambda f: tuple(order.get(n, 0) for n in f.nodes)),
        cluster=cluster,
        unjudged=unjudged,
    )
