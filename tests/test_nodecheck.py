"""The node check's plan (harness/nodecheck.py): the round-robin rounds against the link probe's
schedule and against every pair, and node names in Slurm's hostlist syntax."""

from __future__ import annotations

import itertools

import pytest

from harness.nodecheck import hostlist, rounds


@pytest.mark.parametrize("n", [*range(2, 18), 64, 65])
def test_every_pair_meets_once_in_rounds_of_disjoint_pairs(n):
    plan = rounds(n)
    assert len(plan) == (n - 1 if n % 2 == 0 else n)  # O(N) rounds
    assert sorted(p for r in plan for p in r) == list(itertools.combinations(range(n), 2))
    for pairs in plan:
        nodes = [x for p in pairs for x in p]
        assert len(nodes) == len(set(nodes)) and len(pairs) == n // 2


def test_the_rounds_are_the_link_probe_s_schedule():
    """The same circle method as the probe between ranks (benchmarks/allreduce.py), so a node
    check and a job's probe pair the same nodes in the same order."""
    from benchmarks.allreduce import pair_partner

    for n in (4, 5, 8):
        for r, pairs in enumerate(rounds(n)):
            want = {tuple(sorted((i, p))) for i in range(n) if (p := pair_partner(i, r, n)) is not None}
            assert set(pairs) == want, (n, r)


def test_rounds_of_nothing():
    assert rounds(0) == rounds(1) == []


@pytest.mark.parametrize(
    ("names", "text"),
    [
        (["bnode3", "bnode7"], "bnode[3,7]"),
        (["bnode3"], "bnode3"),
        (["bnode7", "bnode3", "bnode3"], "bnode[3,7]"),  # sorted; Slurm would repeat: bnode[3,3,7]
        (["gpu001", "gpu002", "gpu003", "gpu004", "gpu010"], "gpu[001-004,010]"),
        (["node9", "node10", "node11"], "node[9-11]"),
        (["gpu099", "gpu100"], "gpu[099-100]"),  # 100 has the padded width of 099
        (["node09", "node10"], "node[09-10]"),
        (["rack1-n2", "rack1-n3", "login"], "rack1-n[2-3],login"),
        (["a01", "b1"], "a01,b1"),
    ],
)
def test_hostlist_as_slurm_writes_it(names, text):
    assert hostlist(names) == text
