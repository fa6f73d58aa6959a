"""The straggler rule of the link probe's pair times: a node is named only when most passes and
three nodes agree, and a rank that waited for its partner to start is not named."""

from __future__ import annotations

import random

import pytest

from benchmarks.linkprobe import pair_partner, probe_rounds
from harness.evidence import stragglers


def test_straggler_rule_needs_most_passes_and_three_nodes():
    hosts = ["h1", "h2", "h3", "h4"]
    partners = [[3, 2, 1], [2, 3, 0], [1, 0, 3], [0, 1, 2]]  # the probe's round-robin schedule for 4 ranks

    def links(slow: str, slow_passes: list[int]) -> dict:
        times = [
            [
                [10_000.0 if (slow in (hosts[r], hosts[p]) and it in slow_passes) else 1_000.0 for it in range(4)]
                for p in partners[r]
            ]
            for r in range(4)
        ]
        return {"partners": partners, "time_us": times, "iters": 4}

    named = stragglers.judge("j", hosts, links("h3", [0, 1, 2, 3]))
    assert [s.host for s in named] == ["h3"] and named[0].passes == 4 and named[0].slower == pytest.approx(9)
    assert stragglers.judge("j", hosts, links("h3", [0, 1])) == []  # 2 of 4 passes: not consistent
    two = {"partners": [[1], [0]], "time_us": [[[9e4] * 4], [[9e4] * 4]], "iters": 4}
    assert stragglers.judge("j", ["h1", "h2"], two) == []  # which end is slow? cannot say


def test_a_rank_that_waited_for_its_partners_to_start_is_not_a_straggler():
    """h2's rank left each round's barrier first, so its own clock also ran while it waited for
    its partner to start (1.3 ms on top of the 1 ms exchange); its partners' clocks did not. A
    pair's time is the lesser of its two ends': every node reads 1 ms, nobody is named. The
    slow link of h3 shows on both ends of each of its pairs, and is named."""
    hosts = ["h1", "h2", "h3", "h4"]
    partners = [[3, 2, 1], [2, 3, 0], [1, 0, 3], [0, 1, 2]]
    waited = [[[2_300.0 if r == 1 else 1_000.0] * 4 for _ in partners[r]] for r in range(4)]
    assert stragglers.judge("j", hosts, {"partners": partners, "time_us": waited, "iters": 4}) == []
    slow = [[[3_000.0 if 2 in (r, p) else 1_000.0] * 4 for p in partners[r]] for r in range(4)]
    assert [s.host for s in stragglers.judge("j", hosts, {"partners": partners, "time_us": slow, "iters": 4})] == ["h3"]


def test_one_slow_node_of_1024_is_named_from_the_probe_s_rounds():
    """1,024 nodes of 8 GPUs: the probe's rounds (every rank meets LINK_ROUNDS partners, not
    8,191), five passes, one node 30% slower on every pair it is in, the rest within 3%."""
    world, slow = 8192, "gpu0517"
    hosts = [f"gpu{r // 8:04d}" for r in range(world)]
    rng = random.Random(0)
    partners = [[pair_partner(r, k, world) for k in probe_rounds(world)] for r in range(world)]
    times = [
        [[1_000.0 * (1.3 if slow in (hosts[r], hosts[p]) else 1.0) * rng.uniform(0.97, 1.03)] * 5 for p in ps]
        for r, ps in enumerate(partners)
    ]
    named = stragglers.judge("j", hosts, {"partners": partners, "time_us": times, "iters": 5})
    assert [s.host for s in named] == [slow] and named[0].passes == 5
    assert named[0].slower == pytest.approx(0.3, abs=0.05)
