"""Straggler attribution: which node, by hostname, is consistently slower than the rest.

Collective and DDP step times cannot say it: every rank of a collective waits for the slowest
one, so all ranks record the same times whichever node is slow. The all-reduce workload's link
probe can (benchmarks/linkprobe.py, `link_probe`): pairs of ranks exchange a message on their
own (every pair, or LINK_ROUNDS partners a rank in a larger job), so a slow node's link shows in
every pair that includes it, and in no other.

Per job, per pass of the probe, a pair's time is the lesser of what its two ranks measured: each
starts its clock when it leaves the barrier before the round, and the one that left first also
counts the time it waited for its partner to start, which says nothing of the link (on shaped
links the barrier's own messages queue behind the last round's data, tens of milliseconds). A
node's score is the median time of the pairs between its ranks and ranks on other nodes; the
pass's reference is the median of the node scores. A node is a
straggler when its score exceeds the reference by more than SLOWER (20%) in at least MOST
(3 in 4) of the passes. It takes three nodes to tell which end of a slow pair is slow, so
jobs of fewer nodes are not judged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.results import ResultError, load_result

SLOWER = 0.20
MOST = 0.75
MIN_NODES = 3
RULE = (
    f"more than {SLOWER:.0%} slower than the median node in at least {MOST:.0%} of the link probe's "
    f"passes, in a job of {MIN_NODES} or more nodes"
)


@dataclass(frozen=True)
class Straggler:
    job: str
    host: str
    slower: float  # median over passes of score / reference - 1
    passes: int  # passes in which it was more than SLOWER slower
    of: int  # passes judged

    def line(self) -> str:
        return (
            f"{self.host} is {self.slower:.0%} slower than the median node in {self.job}'s link probe "
            f"({self.passes} of {self.of} passes over {SLOWER:.0%})"
        )


def _grid(links: dict[str, Any], ranks: int) -> tuple[Any, Any]:
    """The probe as arrays: partners (ranks x rounds) and times (ranks x rounds x passes), NaN
    where a rank sat a round out or a time was not measured. A probe written whole converts at
    once; a ragged one, cell by cell."""
    import numpy as np

    passes = int(links["iters"])
    partners, times = links["partners"][:ranks], links["time_us"][:ranks]
    try:
        peers, samples = np.array(partners, dtype=float), np.array(times, dtype=float)
        if peers.ndim == 2 and samples.shape == (*peers.shape, passes):
            return peers, samples
    except (ValueError, TypeError):
        pass
    rounds = max((len(p) for p in partners), default=0)
    peers, samples = np.full((len(partners), rounds), math.nan), np.full((len(partners), rounds, passes), math.nan)
    for rank, (row, cells) in enumerate(zip(partners, times)):
        for k, (peer, got) in enumerate(zip(row, cells)):
            peers[rank, k] = math.nan if peer is None else peer
            for it, t in enumerate((got or [])[:passes]):
                samples[rank, k, it] = math.nan if t is None else t
    return peers, samples


class _Pairs:
    """The probe's pairs of ranks on different nodes, each once, with its two ends' nodes."""

    def __init__(self, hosts: list[str], links: dict[str, Any], nodes: list[str]) -> None:
        import numpy as np

        node_of = {h: i for i, h in enumerate(nodes)}
        node = np.array([node_of[h] for h in hosts], dtype=np.int64)
        peers, samples = _grid(links, len(hosts))
        rank, k = np.nonzero(~np.isnan(peers))
        peer = peers[rank, k].astype(np.int64)
        other = node[rank] != node[peer]
        rank, k, peer = rank[other], k[other], peer[other]
        key = np.minimum(rank, peer) * len(hosts) + np.maximum(rank, peer)
        order = np.argsort(key, kind="stable")
        key = key[order]
        self.starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]])) if len(key) else key
        first = order[self.starts]
        self.ends = np.concatenate([node[rank[first]], node[peer[first]]])
        self.times = samples[rank[order], k[order]]  # one row per exchange, by pair: its passes
        self.nodes = len(nodes)

    def scores(self, it: int) -> Any:
        """Each node's median pair time in pass `it` (NaN for a node in no measured pair), a
        pair's time being the lesser of its two ends'."""
        import numpy as np

        scores = np.full(self.nodes, math.nan)
        if not len(self.starts):
            return scores
        pair = np.fmin.reduceat(self.times[:, it], self.starts)  # NaN only where neither end measured
        value, end = np.concatenate([pair, pair]), self.ends
        ok = ~np.isnan(value)
        value, end = value[ok], end[ok]
        order = np.argsort(value, kind="stable")
        order = order[np.argsort(end[order], kind="stable")]  # by node, then by time
        value = value[order]
        count = np.bincount(end, minlength=self.nodes)
        start = np.concatenate([[0], np.cumsum(count)[:-1]])
        has = count > 0
        low, high = start[has] + (count[has] - 1) // 2, start[has] + count[has] // 2
        scores[has] = (value[low] + value[high]) / 2
        return scores


def judge(job: str, hosts: list[str], links: dict[str, Any]) -> list[Straggler]:
    """The stragglers of one job, from its hosts (by rank) and link probe."""
    nodes = sorted(set(hosts))
    if len(nodes) < MIN_NODES:
        return []
    pairs = _Pairs(hosts, links, nodes)
    flagged: dict[str, list[float]] = {h: [] for h in nodes}
    judged = 0
    for it in range(int(links["iters"])):
        scores = pairs.scores(it)
        scored = scores == scores  # NaN for a node in no measured pair
        if scored.sum() < MIN_NODES:
            continue
        judged += 1
        ref = statistics.median(scores[scored].tolist())
        for i in scored.nonzero()[0]:
            flagged[nodes[i]].append(float(scores[i]) / ref - 1 if ref > 0 else 0.0)
    out = []
    for h, ratios in flagged.items():
        over = sum(r > SLOWER for r in ratios)
        if judged and over >= MOST * judged:
            out.append(Straggler(job, h, statistics.median(ratios), over, judged))
    return out


def judge_file(job: str, path: Path, warn: Callable[[str], None] | None = None) -> list[Straggler]:
    """The stragglers of one job from its all-reduce links file (or, before it, its per-rank
    file, which held the probe); [] if it has no link probe."""
    try:
        data = load_result(path)
        return judge(job, data["hosts"], data["links"]) if "links" in data else []
    except (ResultError, KeyError, TypeError, IndexError, ValueError) as exc:
        if warn:
            warn(f"{path}: no straggler analysis ({exc})")
        return []
