"""The link probe's pair schedule: every pair of ranks meets once."""

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
