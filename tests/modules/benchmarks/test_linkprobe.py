"""The link probe's pair schedule: every pair of ranks meets once, and past LINK_ROUNDS rounds
each rank meets that many partners, spread over the job's nodes."""

from __future__ import annotations

import itertools


def test_pair_schedule_meets_every_pair_once():
    from benchmarks.linkprobe import pair_partner, pair_rounds

    for world in range(2, 10):
        met = set()
        for k in range(pair_rounds(world)):
            partners = [pair_partner(r, k, world) for r in range(world)]
            for r, p in enumerate(partners):
                if p is not None:
                    assert partners[p] == r and p != r
                    met.add(frozenset((r, p)))
        assert met == {frozenset(c) for c in itertools.combinations(range(world), 2)}


def test_the_probe_meets_every_pair_up_to_its_rounds_and_spreads_beyond():
    from benchmarks.linkprobe import LINK_ROUNDS, pair_partner, pair_rounds, probe_rounds

    for world in range(2, LINK_ROUNDS + 1):  # up to 32 ranks: every pair
        assert probe_rounds(world) == list(range(pair_rounds(world)))
    for world in (LINK_ROUNDS + 1, 100, 8192):
        rounds = probe_rounds(world)
        assert len(rounds) == LINK_ROUNDS == len(set(rounds)) and set(rounds) <= set(range(pair_rounds(world)))
    # 1,024 nodes of 8: each rank's partners on at least LINK_ROUNDS - 1 nodes (two of them
    # side by side now and then), and every node in as many pairs
    world = 8192
    met = [0] * (world // 8)
    for r in range(world):
        nodes = [p // 8 for p in (pair_partner(r, k, world) for k in probe_rounds(world)) if p is not None]
        assert len(nodes) == LINK_ROUNDS and len(set(nodes)) >= LINK_ROUNDS - 1
        for n in nodes:
            met[n] += 1
    assert set(met) == {8 * LINK_ROUNDS}
