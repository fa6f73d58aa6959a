"""What planning a node check costs, by node count: time and peak memory of the plan of
`--partners 3` (rounds.schedule and every round's steps), and of the judged verdict of its
figures, without leaves and by leaves of 32 nodes. Not part of the test suite; run

    python tests/perf/node_plan.py

Both should grow linearly with the nodes (docs/guides/nodes.md, "What each part costs"): the circle
method gives round r directly, so the first three rounds of 100,000 nodes are 150,000 pairs.
"""

from __future__ import annotations

import random
import time
import tracemalloc

from harness.nodes import rounds
from harness.nodes import verdict as node_verdict
from harness.nodes.rounds import Options

LEAF = 32  # nodes under each leaf, where the check is planned and judged by leaves


def leaves(names: list[str], by_leaf: bool) -> dict[str, str]:
    return {name: f"leaf{i // LEAF:05d}" for i, name in enumerate(names)} if by_leaf else {}


def plan(n: int, o: Options, by_leaf: bool) -> int:
    names = [f"gpu{i:06d}" for i in range(n)]
    return sum(len(rounds.steps(r, o, "jobs/nodes")) for r in rounds.schedule(names, o, leaves(names, by_leaf)))


def verdict(n: int, o: Options, by_leaf: bool) -> int:
    rng = random.Random(0)
    names = [f"gpu{i:06d}" for i in range(n)]
    leaf_of = leaves(names, by_leaf)
    pairs: dict[str, dict[tuple[str, str], float | None]] = {"busbw_gbps": {}, "p2p_gbps": {}}
    for kind, members in rounds.schedule(names, o, leaf_of):
        if kind == "pair":
            for a, b in members:
                pairs["busbw_gbps"][(names[a], names[b])] = 40 + rng.random()
                pairs["p2p_gbps"][(names[a], names[b])] = 20 + rng.random()
    if by_leaf:
        v = node_verdict.by_leaves(names, {}, pairs, 0.1, {}, {}, {}, leaf_of)
    else:
        v = node_verdict.judge(names, {}, pairs, 0.1, {})
    return len(v.names)


def measure(fn, n: int, o: Options, by_leaf: bool) -> tuple[float, float]:
    tracemalloc.start()
    t = time.perf_counter()
    fn(n, o, by_leaf)
    seconds = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak / 2**20


def main() -> None:
    o = Options(gemm=False, partners=3)
    print("nodes    leaves     plan s   plan MiB   verdict s   verdict MiB")
    for n in (1_000, 10_000, 100_000):
        for by_leaf in (False, True):
            ps, pm = measure(plan, n, o, by_leaf)
            vs, vm = measure(verdict, n, o, by_leaf)
            label = f"of {LEAF}" if by_leaf else "none"
            print(f"{n:>7,}  {label:>6}  {ps:8.2f}  {pm:9.1f}  {vs:10.2f}  {vm:12.1f}")


if __name__ == "__main__":
    main()
