"""Straggler attribution: which node, by hostname, is consistently slower than the rest.

Collective and DDP step times cannot say it: every rank of a collective waits for the slowest
one, so all ranks record the same times whichever node is slow. The all-reduce workload's link
probe can (benchmarks/linkprobe.py, `link_probe`): every pair of ranks exchanges a message
on its own, so a slow node's link shows in every pair that includes it, and in no other.

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


def judge(job: str, hosts: list[str], links: dict[str, Any]) -> list[Straggler]:
    """The stragglers of one job, from its per-rank file's hosts and link probe."""
    nodes = sorted(set(hosts))
    if len(nodes) < MIN_NODES:
        return []
    partners, times = links["partners"], links["time_us"]
    passes = int(links["iters"])
    flagged: dict[str, list[float]] = {h: [] for h in nodes}
    judged = 0
    for it in range(passes):
        pairs: dict[tuple[int, int], float] = {}
        for rank, (peers, rounds) in enumerate(zip(partners, times)):
            for peer, samples in zip(peers, rounds):
                t = samples[it] if samples and it < len(samples) else None
                if peer is None or t is None or hosts[peer] == hosts[rank]:
                    continue
                key = (min(rank, peer), max(rank, peer))
                pairs[key] = min(t, pairs.get(key, t))
        per_node: dict[str, list[float]] = {h: [] for h in nodes}
        for (a, b), t in pairs.items():
            per_node[hosts[a]].append(t)
            per_node[hosts[b]].append(t)
        scores = {h: statistics.median(v) for h, v in per_node.items() if v}
        if len(scores) < MIN_NODES:
            continue
        judged += 1
        ref = statistics.median(scores.values())
        for h, s in scores.items():
            flagged[h].append(s / ref - 1 if ref > 0 else 0.0)
    out = []
    for h, ratios in flagged.items():
        over = sum(r > SLOWER for r in ratios)
        if judged and over >= MOST * judged:
            out.append(Straggler(job, h, statistics.median(ratios), over, judged))
    return out


def judge_file(job: str, path: Path, warn: Callable[[str], None] | None = None) -> list[Straggler]:
    """The stragglers of one job from its all-reduce per-rank file; [] if it has no link probe."""
    try:
        data = load_result(path)
        return judge(job, data["hosts"], data["links"]) if "links" in data else []
    except (ResultError, KeyError, TypeError, IndexError, ValueError) as exc:
        if warn:
            warn(f"{path}: no straggler analysis ({exc})")
        return []
