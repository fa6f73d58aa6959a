"""The cluster-wide node and link check (`bench nodes`), pure: its plan of steps in rounds and the
figures read from the steps' results (docs/guides/nodes.md); the verdict on them is harness/nodes/verdict.py.

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

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.common import format_size
from harness.config.cluster_profile import Rail
from harness.evidence.dcgm import FOLDER as DCGM
from harness.evidence.dcgm import TIMEOUT_S as DCGM_TIMEOUT_S
from harness.evidence.faults import FOLDER as FAULTS


def rounds(n: int, first: int | None = None) -> list[list[tuple[int, int]]]:
    """The rounds of a round-robin tournament of nodes 0..n-1: each a list of disjoint pairs
    (low, high); every pair of nodes meets in exactly one round. With `first`, only the first
    that many: the circle method gives round r directly, so planning k rounds of N nodes costs
    k x N/2 pairs, not the whole tournament's N²/2 (docs/guides/nodes.md, "What each part costs")."""
    return [round_of(n, r) for r in range(tournament(n) if first is None else min(first, tournament(n)))]


def round_of(n: int, r: int) -> list[tuple[int, int]]:
    """Round `r` of `rounds(n)`, alone."""
    m = tournament(n)  # the nodes that rotate, as many as rounds; the fixed one is m, a phantom when n is odd
    pairs = [] if m >= n else [(r, m)]
    for k in range(1, (m + 1) // 2):
        a, b = (r + k) % m, (r - k) % m
        pairs.append((a, b) if a < b else (b, a))
    return pairs


def leaf_rounds(groups: Sequence[Sequence[int]], first: int | None = None) -> list[list[tuple[int, int]]]:
    """The rounds (the first `first`, where given) of pairs of nodes grouped by leaf switch
    (docs/guides/nodes.md, "Pairs by leaf"): a round under the leaves (each leaf's own
    round-robin, every leaf at once), then a round across them, and so on, so that each node's score has pairs under its
    own leaf to come from and each path between two leaves has pairs across to judge it by.

    A round across pairs the leaves as a round-robin of leaves does; two leaves paired, each
    node of the smaller meets one of the other, the other's nodes in turn, shifted by one each
    time the leaves meet again. Run at once, such a round loads the path between the two
    leaves with every node of the smaller leaf: their bisection. Every pair meets at most once;
    a round of neither kind left is skipped, and the other kind goes on."""
    under = (_under(groups, j) for j in range(max((tournament(len(g)) for g in groups), default=0)))
    meets = tournament(len(groups))
    across = (_across(groups, k, meets) for k in range(meets * max((len(g) for g in groups), default=0)))
    out: list[list[tuple[int, int]]] = []
    for pairs in itertools.chain.from_iterable(itertools.zip_longest(under, across)):
        if first is not None and len(out) >= first:
            break
        if pairs:
            out.append(pairs)
    return out


def _under(groups: Sequence[Sequence[int]], j: int) -> list[tuple[int, int]]:
    """Round `j` under the leaves: round j of each leaf's own round-robin, where it has one."""
    out = []
    for g in groups:
        if j < tournament(len(g)):
            out += [(g[a], g[b]) if g[a] < g[b] else (g[b], g[a]) for a, b in round_of(len(g), j)]
    return out


def _across(groups: Sequence[Sequence[int]], k: int, meets: int) -> list[tuple[int, int]]:
    """Round `k` across the leaves: the leaves' round-robin round k mod `meets`, each node of
    the smaller leaf with the other's node k div `meets` places on; empty once every pair of
    the leaves paired has met."""
    shift = k // meets
    out = []
    for x, y in round_of(len(groups), k % meets):
        small, large = sorted((groups[x], groups[y]), key=len)
        if shift < len(large):
            for i, a in enumerate(small):
                b = large[(i + shift) % len(large)]
                out.append((min(a, b), max(a, b)))
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
    # Each pair again on each rail alone, one rank a node (docs/guides/nodes.md, "Rails")
    rails: tuple[Rail, ...] = ()
    # Seconds of the soak: once the rounds have run, their pairs again and again, whole passes
    # begun until this long has passed (docs/guides/nodes.md, "Soak"); 0: none
    soak_s: float = 0.0
    # DCGM's diagnostic of every node's GPUs at this level before the rounds (`dcgmi diag -r`,
    # docs/concepts/faults.md, "DCGM's diagnostic"); 0: none
    dcgm: int = 0


@dataclass(frozen=True)
class Step:
    """One launch of the check: a workload on one node, or on two."""

    name: str  # gemm-3, intra-3, pair-3-5: indices into the node list, so a safe file name
    nodes: tuple[int, ...]
    module: str
    args: tuple[str, ...]
    plain: bool = False  # a program each node runs alone, not ranks of a process group
    tasks: int | None = None  # processes a node: one a rank (the check's ranks a node) where None
    env: tuple[tuple[str, str], ...] = ()  # set for the step's processes: its rail's
    rail: str | None = None  # the rail a rail step measures
    limit_s: float | None = None  # how long Slurm lets it run, where not the check's step timeout

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
    rounds for R references (docs/guides/nodes.md)."""
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


def leaf_groups(names: Sequence[str], leaf_of: Mapping[str, str] | None) -> list[list[int]]:
    """The nodes' indices by leaf, in the order of `names`, the leaves in the order their first
    node comes; the nodes under no leaf are one group more."""
    groups: dict[str | None, list[int]] = {}
    for i, name in enumerate(names):
        groups.setdefault((leaf_of or {}).get(name), []).append(i)
    return list(groups.values())


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
    """How many rounds `schedule` gives for `n` nodes, counted rather than planned; by leaf as
    without leaves: the rounds by leaf hold each pair once, so as many as the tournament's at
    least, and the first `o.partners` are taken alike."""
    return int(o.gemm) + int(o.gpus_per_node > 1) + pair_round_count(n, o) * (1 + len(o.rails))


def pair_round_count(n: int, o: Options) -> int:
    """How many rounds of pairs on the whole node `schedule` gives for `n` nodes (`round_count`)."""
    r = len(o.reference)
    if r:
        return tournament(r) + -(-(n - r) // r)
    return tournament(n) if o.partners is None else min(o.partners, tournament(n))


# A round: what its steps run ("gemm", "intra", "pair", "rail<r>": the pairs on rail r alone, or
# "again" and "againrail<r>": links that read low on the whole node or on rail r, measured once
# more) and the nodes of each step, by index.
Round = tuple[str, list[tuple[int, ...]]]
RAIL = "rail"  # a round of one rail's pairs is "rail<r>", r its index in Options.rails
AGAIN = "again"  # the kinds after the plan's rounds: links that read low (docs/guides/nodes.md, "Measured again")
SOAK = "soak"  # a round of the soak's pass p is "soak<p>", p from 1 (docs/guides/nodes.md, "Soak")


def soak_pass(plan: Sequence[Round], p: int) -> list[Round]:
    """Pass `p` of the soak: the plan's rounds of pairs on the whole node, again, as rounds of
    kind "soak<p>" (not its rails' rounds: a rail is soaked as its node is)."""
    return [(f"{SOAK}{p}", members) for kind, members in plan if kind == "pair"]


def again_rounds(links: Sequence[tuple[str, int, int]]) -> list[Round]:
    """The links that read low, each (the kind of round it was measured in: "pair" or
    "rail<r>", node a, node b), to measure again, as one round of steps on disjoint nodes:
    as many as share no node, in the order given (the rest keep their one reading), grouped
    by kind, each group a Round whose steps run at once with the others'."""
    taken: set[int] = set()
    out: dict[str, list[tuple[int, ...]]] = {}
    for kind, a, b in links:
        if a not in taken and b not in taken:
            taken.update((a, b))
            out.setdefault(AGAIN + ("" if kind == "pair" else kind), []).append((a, b))
    return list(out.items())


def schedule(names: Sequence[str], o: Options, leaf_of: Mapping[str, str] | None = None) -> list[Round]:
    """The check's rounds, each round's steps on disjoint nodes, run at once: every node's
    matmul (unless `o.gemm` is off), then (two or more ranks per node) every node's all-reduce,
    then the pairs, each round of pairs followed by the same pairs on each of `o.rails`. With
    `o.partners` fewer than every pair, and the nodes' leaves (`leaf_of`: node -> leaf), the
    pairs' rounds are `leaf_rounds`. Only indices: a round's steps are made when it runs
    (`steps`), so that the plan of 2,048 nodes (2 million steps) costs what its pairs cost."""
    n = len(names)
    out: list[Round] = [("gemm", [(i,) for i in range(n)])] if o.gemm else []
    if o.gpus_per_node > 1:
        out.append(("intra", [(i,) for i in range(n)]))
    references = reference_indices(names, o)
    by_leaf = leaf_of and o.partners is not None and o.partners < tournament(n)
    for pairs in (
        leaf_rounds(leaf_groups(names, leaf_of), o.partners) if by_leaf else pair_rounds(n, o.partners, references)
    ):
        out.append(("pair", list(pairs)))
        out += [(f"{RAIL}{r}", list(pairs)) for r in range(len(o.rails))]
    return out


def steps(round_: Round, o: Options, folder: str) -> list[Step]:
    """A round's steps, their results under `folder`, relative to where the steps run."""
    kind, members = round_
    common = (f"--device={o.device}", f"--backend={o.backend}", f"--timeout={o.timeout_s:g}")
    if kind == "gemm":
        gemm = (f"--size={o.gemm_size}", f"--iters={o.gemm_iters}", *common)
        return [Step(f"gemm-{i}", (i,), "benchmarks.gemm", (*gemm, *_json(folder, f"gemm-{i}"))) for (i,) in members]
    size = format_size(o.bytes).replace(" ", "")
    measured = kind.removeprefix(AGAIN)  # a link measured again runs as it first ran
    rail = o.rails[int(measured.removeprefix(RAIL))] if measured.startswith(RAIL) else None
    if kind == "intra":
        collectives, groups = "all_reduce", "world"
    else:  # one rank a node on a rail, as nccl-tests' split runs are (docs/guides/nodes.md, "Rails")
        ranks = 1 if rail else o.gpus_per_node
        collectives, groups = "all_reduce,sendrecv", ",".join(dict.fromkeys(("world", exchange_group(ranks))))
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
        step = Step(name, nodes, "benchmarks.allreduce", (*args, *_json(folder, name)))
        if rail:
            step = dataclasses.replace(step, tasks=1, env=tuple(rail.env().items()), rail=rail.name)
        out.append(step)
    return out


def fault_step(n: int, when: str, folder: str) -> Step:
    """Every node's reading of its hardware faults, `when` ("before" or "after") the rounds:
    its IB error counters and its kernel log's Xids (harness/evidence/faults.py)."""
    args = ("faults", f"{folder}/{FAULTS}/{when}")
    return Step(f"faults-{when}", tuple(range(n)), "harness.telemetry", args, plain=True, tasks=1)


def dcgm_step(n: int, level: int, folder: str) -> Step:
    """Every node's run of DCGM's diagnostic at `level` (harness/evidence/dcgm.py), a minute past
    the level's bound, so that the node ends dcgmi and keeps what it printed before Slurm ends it."""
    args = ("dcgm", f"{folder}/{DCGM}", str(level))
    limit = DCGM_TIMEOUT_S[level] + 60
    return Step("dcgm", tuple(range(n)), "harness.telemetry", args, plain=True, tasks=1, limit_s=limit)


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
                raise FigureError(f"{where}: wrong results: {collective} returned {wrong:.0f} wrong element(s)")
            busbw = _number(row.get("busbw_gbps"), f"{where}: {collective} busbw_gbps", positive=True)
            mean, median = (
                _number(row.get(k), f"{where}: {collective} {k}", positive=True) for k in ("time_us", "time_us_median")
            )
            figure = busbw * mean / median
            if not math.isfinite(figure):  # a busbw near the float's limit, times a mean above its median
                raise FigureError(f"{where}: {collective} busbw_gbps {busbw!r} is no measurement")
            return figure
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
