"""The node check, pure (harness/nodes/rounds.py, harness/nodes/verdict.py): the round-robin rounds
against the link probe's schedule and against every pair, node names in Slurm's hostlist syntax, the steps of a check,
the figures read from their results, and the verdict on figures measured on the testbed."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from harness.config.cluster_profile import Rail
from harness.config.hostlists import expand_hostlist, hostlist
from harness.nodes.rounds import (
    FigureError,
    Options,
    again_rounds,
    leaf_rounds,
    round_count,
    rounds,
    schedule,
    step_figures,
    steps,
    tournament,
)
from harness.nodes.verdict import Population, by_leaves, judge


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
    from benchmarks.linkprobe import pair_partner

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


@pytest.mark.parametrize(
    ("text", "names"),
    # each as `scontrol show hostnames TEXT` printed it (Slurm 22.05.8, Debian 12)
    [
        ("bnode[3,7]", ["bnode3", "bnode7"]),
        ("gpu[001-004,010]", ["gpu001", "gpu002", "gpu003", "gpu004", "gpu010"]),
        ("node[9-11]", ["node9", "node10", "node11"]),
        ("gpu[099-100]", ["gpu099", "gpu100"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("rack1-n[2-3],login", ["rack1-n2", "rack1-n3", "login"]),
        ("a[1-2]b[1-2]", ["a1b1", "a1b2", "a2b1", "a2b2"]),
        ("a[1-2]-b[1-2]", ["a1-b1", "a1-b2", "a2-b1", "a2-b2"]),
        ("gpu[001-003],cpu[1-2]", ["gpu001", "gpu002", "gpu003", "cpu1", "cpu2"]),
        ("a,,b", ["a", "b"]),
        ("n[1,1,2]", ["n1", "n1", "n2"]),
    ],
)
def test_a_hostlist_expands_as_slurm_expands_it(text, names):
    assert expand_hostlist(text) == names


def test_a_hostlist_of_64_nodes_and_what_is_refused():
    assert expand_hostlist("gpu[001-064]") == [f"gpu{i:03d}" for i in range(1, 65)]
    assert len(expand_hostlist("n[08-100]")) == 93 and expand_hostlist("n[08-100]")[:3] == ["n08", "n09", "n10"]
    # Slurm refuses the first three ("Invalid range", "Invalid hostlist"); bench refuses unpaired
    # brackets, where Slurm prints what no node is called (x[1- gives "x]"), and a typing slip
    for text, why in (
        ("x[3-1]", "not a number or a range"),
        ("n[]", "not a number or a range"),
        ("n[2-3]ib", "follows a bracket"),
        ("x[1-", "brackets do not pair"),
        ("n1-3]", "brackets do not pair"),
        ("n[1-99999999]", "more than 100,000 names"),
        (",", "no node name"),
        ("n[1-2]$(id)", "follows a bracket"),
    ):
        with pytest.raises(ValueError, match=re.escape(why)):
            expand_hostlist(text)


# --------------------------------------------------------------------------- the check's plan


def names(n):
    return [f"bnode{i}" for i in range(1, n + 1)]


def test_a_check_is_its_nodes_then_its_pairs():
    o = Options(gpus_per_node=2)
    plan = schedule(names(4), o)
    assert [kind for kind, _ in plan] == ["gemm", "intra", "pair", "pair", "pair"]
    assert round_count(4, o) == len(plan)
    first = steps(plan[0], o, "jobs/nodes")
    assert [s.name for s in first] == ["gemm-0", "gemm-1", "gemm-2", "gemm-3"]
    assert first[2].args[-2:] == ("--json", "jobs/nodes/steps/gemm-2.json") and first[2].module == "benchmarks.gemm"
    pairs = steps(plan[2], o, "jobs/nodes")
    assert [s.nodes for s in pairs] == [(0, 3), (1, 2)]
    assert "--collective=all_reduce,sendrecv" in pairs[0].args and "--groups=world,inter" in pairs[0].args
    assert "--min-bytes=64M" in pairs[0].args and "--max-bytes=64M" in pairs[0].args
    one_rank = steps(schedule(names(4), Options(gemm=False))[0], Options(gemm=False), "f")
    assert "--groups=world" in one_rank[0].args  # one rank per node: the pair is the world


@pytest.mark.parametrize("n", [4, 7, 8, 64])
def test_partners_meet_k_others_in_k_rounds(n):
    o = Options(partners=3, gemm=False)
    plan = schedule(names(n), o)
    assert len(plan) == round_count(n, o) == 3
    met = {i: set() for i in range(n)}
    for _, pairs in plan:
        for a, b in pairs:
            met[a].add(b)
            met[b].add(a)
    assert all(len(m) == (3 if n % 2 == 0 else len(m)) for m in met.values())
    assert sum(len(m) for m in met.values()) >= 2 * 3 * (n // 2)


def test_references_meet_each_other_then_one_of_them_each_node():
    o = Options(reference=("bnode2", "bnode5"), gemm=False)
    plan = schedule(names(8), o)
    assert [pairs for _, pairs in plan] == [[(1, 4)], [(0, 1), (2, 4)], [(1, 3), (4, 5)], [(1, 6), (4, 7)]]
    assert len(plan) == round_count(8, o) == 1 + 3  # R - 1 + ceil((N - R) / R)
    with pytest.raises(ValueError, match="bnode9 is not among"):
        schedule(names(8), Options(reference=("bnode9",)))


def test_partners_by_leaf_meet_under_their_leaf_and_across_it():
    """8 nodes under two leaves, 3 partners: a round under the leaves, a round across them in
    which every node of one leaf meets one of the other at once (their bisection), another under;
    each node meets 2 partners under its leaf and 1 across, so each has a score of its own leaf's
    pairs and the path between the leaves 4 pairs across. Without the leaves, the same 3 rounds
    leave bnode8 with no partner under its leaf (docs/guides/nodes.md, "Pairs by leaf")."""
    leaf_of = {n: "leaf1" if i < 4 else "leaf2" for i, n in enumerate(names(8))}
    o = Options(partners=3, gemm=False)
    plan = schedule(names(8), o, leaf_of)
    assert len(plan) == round_count(8, o) == 3
    leaf = [0, 0, 0, 0, 1, 1, 1, 1]
    assert [[leaf[a] != leaf[b] for a, b in pairs] for _, pairs in plan] == [[False] * 4, [True] * 4, [False] * 4]
    under = {
        i: {b if a == i else a for _, pairs in plan for a, b in pairs if i in (a, b) and leaf[a] == leaf[b]}
        for i in range(8)
    }
    assert all(len(met) == 2 for met in under.values()), under
    plain = schedule(names(8), o)
    assert not any(7 in (a, b) and leaf[a] == leaf[b] for _, pairs in plain for a, b in pairs)
    every = Options(partners=7, gemm=False)  # every pair: the tournament, leaves or not
    assert schedule(names(8), every, leaf_of) == schedule(names(8), every)
    assert schedule(names(8), o, {}) == plain


@pytest.mark.parametrize(
    "sizes", [[4, 4], [3, 5], [1, 7], [1, 1, 1, 1], [2, 3, 4], [8] * 6, [5, 5, 5], [1, 6, 2, 9, 3], [16] * 4]
)
def test_the_rounds_by_leaf_hold_every_pair_once_in_rounds_of_disjoint_pairs(sizes):
    """Leaves of any sizes, some of one node: every round's pairs are disjoint, every pair of
    nodes is in exactly one round, so there are as many rounds as the tournament's at least, and
    `first` takes the first rounds; each leaf's pairs come in rounds under the leaves, which
    alternate with rounds across while both last."""
    groups, start = [], 0
    for size in sizes:
        groups.append(list(range(start, start + size)))
        start += size
    n, leaf = start, {i: k for k, g in enumerate(groups) for i in g}
    plan = leaf_rounds(groups)
    assert sorted(p for pairs in plan for p in pairs) == list(itertools.combinations(range(n), 2))
    for pairs in plan:
        nodes = [x for p in pairs for x in p]
        assert pairs and len(nodes) == len(set(nodes))
        assert len({leaf[a] == leaf[b] for a, b in pairs}) == 1  # a round is under the leaves or across them
    assert len(plan) >= tournament(n)
    assert leaf_rounds(groups, 3) == plan[:3]
    kinds = [leaf[pairs[0][0]] != leaf[pairs[0][1]] for pairs in plan]
    both = 2 * min(kinds.count(False), kinds.count(True))
    assert kinds[:both] == [False, True] * (both // 2), kinds


def test_the_first_rounds_by_leaf_of_100000_nodes_are_planned_alone():
    """1,024 leaves of 97 or 98 nodes, 3 partners: the rounds across are made one at a time, not
    every one of the leaves' round-robin before the first three are kept (tests/perf/node_plan.py).
    Under the leaves, one node of each of the 352 leaves of 97 sits out: 672 x 49 + 352 x 48 pairs;
    across, each of the 352 leaves of 97 is paired with one of 98, whose last node sits out."""
    leaf_of = {f"gpu{i:06d}": f"leaf{i % 1024:04d}" for i in range(100_000)}
    plan = schedule(list(leaf_of), Options(partners=3, gemm=False), leaf_of)
    assert [len(pairs) for _, pairs in plan] == [49_824] * 3
    assert all(len({n for p in pairs for n in p}) == 2 * len(pairs) for _, pairs in plan)


def test_2048_nodes_are_planned_as_rounds_of_indices():
    plan = schedule([f"gpu{i:04d}" for i in range(2048)], Options())
    assert len(plan) == 1 + 2047 and sum(len(m) for _, m in plan[1:]) == 2048 * 2047 // 2
    assert len(steps(plan[1], Options(), "f")) == 1024


def test_the_first_rounds_of_100000_nodes_are_planned_alone():
    """--partners 3 planned the whole tournament before keeping 3 rounds: 8,192 nodes took 4.3 GB,
    16,384 ended in MemoryError. The circle method gives round r directly, the same rounds as
    the whole tournament's first three (tests/perf/node_plan.py: 100,000 nodes in 3.8 s, 44 MiB)."""
    assert rounds(64, 3) == rounds(64)[:3] and rounds(65, 3) == rounds(65)[:3]
    plan = schedule([f"gpu{i:06d}" for i in range(100_000)], Options(partners=3, gemm=False))
    assert [len(pairs) for _, pairs in plan] == [50_000] * 3
    assert all(len({n for p in pairs for n in p}) == 100_000 for _, pairs in plan)  # disjoint, every node


def test_leave_one_out_populations_are_exactly_the_naive_ones():
    """Population.leave_one_out (O(n log n)) against n calls of Population.of (O(n²)), on
    values with and without ties: equal, field by field."""
    rng = random.Random(7)
    for trial in range(2000):
        n = rng.randint(3, 12)
        values = [float(rng.choice([1, 2, 2, 3, 5, 8])) if trial % 2 else rng.random() * 10 for _ in range(n)]
        threshold, noise = rng.random(), rng.random() * 0.1
        naive = [Population.of(values[:i] + values[i + 1 :], threshold, noise) for i in range(n)]
        assert Population.leave_one_out(values, threshold, noise) == naive, values


# --------------------------------------------------------------------------- figures


def pair_result(busbw, sendrecv, group="world", wrong=0):
    def row(collective, value):
        return {
            "collective": collective,
            "group": group,
            "busbw_gbps": value,
            "time_us": 1000.0,
            "time_us_median": 800.0,
            "wrong": wrong,
        }

    return {"params": {"groups": {group: [[0, 1]]}}, "rows": [row("all_reduce", busbw), row("sendrecv", sendrecv)]}


def test_a_pair_s_figures_are_from_its_median_call():
    step = steps(("pair", [(0, 1)]), Options(), "f")[0]
    figures = step_figures(step, pair_result(0.8, 0.4))
    assert figures == {"busbw_gbps": pytest.approx(1.0), "p2p_gbps": pytest.approx(0.5)}  # x 1000/800


def test_a_pair_that_returned_wrong_elements_has_no_figure():
    step = steps(("pair", [(0, 1)]), Options(), "f")[0]
    with pytest.raises(FigureError, match="all_reduce returned 3 wrong element"):
        step_figures(step, pair_result(0.8, 0.4, wrong=3))
    with pytest.raises(FigureError, match="no sendrecv row on the inter group"):
        step_figures(step, {**pair_result(0.8, 0.4), "params": {"groups": {"world": [], "inter": []}}})
    with pytest.raises(FigureError, match="not a non-negative number"):
        step_figures(step, pair_result(float("nan"), 0.4))


def test_the_exchange_is_read_on_the_inter_group_where_it_ran():
    step = steps(("pair", [(0, 1)]), Options(gpus_per_node=2), "f")[0]
    result = pair_result(0.8, 0.4)
    result["rows"].append({**result["rows"][1], "group": "inter", "busbw_gbps": 0.2})
    result["params"]["groups"]["inter"] = [[0, 2], [1, 3]]
    assert step_figures(step, result)["p2p_gbps"] == pytest.approx(0.25)


# --------------------------------------------------------------------------- the verdict
# Figures measured on the Slurm testbed (4 emulated nodes, 1 gloo rank each, eth0), by
# `bench nodes --executor slurm --device cpu` on 2026-11-25.

# --bytes 1M --iters 10, every pair at once, bnode3's eth0 shaped to 200mbit (testbed shape --node bnode3)
SLOW_NODE = {
    "busbw_gbps": [0.676903, 0.0238193, 0.316519, 0.0238607, 0.648352, 0.0238298],
    "p2p_gbps": [0.669254, 0.0153339, 0.487809, 0.0153577, 0.544514, 0.0153568],
}
# --bytes 4M --iters 20, one pair at a time, bnode1-bnode2 at 1gbit (testbed shape --node bnode1 --peer bnode2)
SLOW_LINK = {
    "busbw_gbps": [0.112708, 0.939269, 0.927302, 0.719154, 0.723968, 0.716701],
    "p2p_gbps": [0.0583602, 0.859736, 0.889074, 0.726566, 0.863364, 0.881205],
}
# --bytes 1M --iters 10, one pair at a time, nothing shaped
UNSHAPED = {
    "busbw_gbps": [0.335107, 0.344785, 0.330429, 0.484074, 0.304267, 0.298522],
    "p2p_gbps": [0.370357, 0.563515, 0.542591, 0.559407, 0.597336, 0.603503],
}
PAIRS4 = list(itertools.combinations(names(4), 2))


def pairs_of(figures, failed=()):
    return {m: {p: (None if p in failed else v) for p, v in zip(PAIRS4, vs)} for m, vs in figures.items()}


def test_the_slow_node_is_named_and_no_other():
    for threshold in (0.1, 0.5):
        v = judge(names(4), {}, pairs_of(SLOW_NODE), threshold, {})
        assert [f.nodes for f in v.nodes] == [("bnode3",)] and v.links == [] and v.drain == "bnode3"
        assert len(v.nodes[0].reasons) == 2  # by both figures
        assert "97% below the other nodes' median" in v.nodes[0].reasons[1]


def test_a_slow_node_among_few_is_judged_against_the_others_only():
    """bnode3's busbw against all four nodes' (bnode3's own 0.024 and bnode2's noisy 0.65
    among them) has a spread of 0.22 GB/s around 0.32, and three spreads reach below zero: only
    against the other three is it named."""
    v = judge(names(4), {}, pairs_of({"busbw_gbps": SLOW_NODE["busbw_gbps"]}), 0.5, {})
    assert [f.nodes for f in v.nodes] == [("bnode3",)]
    assert v.populations["busbw_gbps"].low < 0  # what the whole population would have said


def test_the_slow_link_is_named_and_neither_of_its_nodes():
    v = judge(names(4), {}, pairs_of(SLOW_LINK), 0.5, {})
    assert v.nodes == [] and [f.nodes for f in v.links] == [("bnode1", "bnode2")] and v.drain == ""
    assert "84% below the lesser of its nodes' medians" in v.links[0].reasons[0]
    assert v.named


def test_a_link_low_on_both_readings_is_named_with_both():
    """The figures hold a link's better reading (driver.gather); its reason states both."""
    again = {("bnode1", "bnode2"): {"busbw_gbps": (0.112708, 0.1034), "p2p_gbps": (0.0583602, 0.0611)}}
    figures = pairs_of(SLOW_LINK)
    for metric, readings in again[("bnode1", "bnode2")].items():
        figures[metric][("bnode1", "bnode2")] = max(readings)
    v = judge(names(4), {}, figures, 0.5, {}, again=again)
    assert [f.nodes for f in v.links] == [("bnode1", "bnode2")] and v.again == again
    why = "point-to-point exchange, per rank 0.0611 GB/s (the better of 0.05836 and 0.0611, measured again)"
    assert v.links[0].reasons[1].startswith(f"{why}, 92% below")


def test_the_round_measured_again_takes_the_links_that_share_no_node():
    low = [("pair", 1, 2), ("pair", 0, 1), ("rail1", 0, 3), ("pair", 2, 3), ("rail0", 4, 5), ("rail1", 4, 6)]
    assert again_rounds(low) == [("again", [(1, 2)]), ("againrail1", [(0, 3)]), ("againrail0", [(4, 5)])]
    assert again_rounds([]) == []
    o = Options(rails=(Rail(hca="mlx5_0", ifname="ib0"), Rail(hca="mlx5_1", ifname="ib1")))
    (step,) = steps(("again", [(0, 3)]), o, "jobs/nodes")
    (planned,) = steps(("pair", [(0, 3)]), o, "jobs/nodes")
    assert step.name == "again-0-3" and step.args == tuple(a.replace("pair-0-3", "again-0-3") for a in planned.args)
    (step,) = steps(("againrail1", [(0, 3)]), o, "jobs/nodes")
    (planned,) = steps(("rail1", [(0, 3)]), o, "jobs/nodes")
    assert step.name == "againrail1-0-3" and (step.rail, step.tasks, step.env) == ("mlx5_1", 1, planned.env)
    assert dict(step.env)["NCCL_IB_HCA"] == "=mlx5_1"


def test_unshaped_figures_name_nothing_at_the_testbed_s_margin():
    assert not judge(names(4), {}, pairs_of(UNSHAPED), 0.5, {}).named
    # at 10% the testbed's noise names a link: one pair's exchange read 32% below its nodes'
    v = judge(names(4), {}, pairs_of(UNSHAPED), 0.1, {})
    assert v.nodes == [] and [f.nodes for f in v.links] == [("bnode1", "bnode2")]


def test_a_node_whose_pairs_failed_is_named_and_the_check_goes_on():
    failed = [p for p in PAIRS4 if "bnode4" in p]
    failures = {" ".join(p): "pair step exited 1: no interface eth0" for p in failed}
    v = judge(names(4), {}, pairs_of(UNSHAPED, failed), 0.5, {}, failures)
    assert [f.nodes for f in v.nodes] == [("bnode4",)] and v.links == []
    why = "3 of 3 pairs failed (first: pair step exited 1: no interface eth0)"
    assert v.nodes[0].reasons == [f"two-node all-reduce, busbw: {why}", f"point-to-point exchange, per rank: {why}"]
    assert "bnode4" not in v.node_scores["p2p_gbps"]


def test_a_node_whose_pairs_failed_is_named_by_its_first_failure_as_the_figures_came():
    failed = [("bnode2", "bnode4"), ("bnode1", "bnode4"), ("bnode3", "bnode4")]
    figures = {"p2p_gbps": {p: None if p in failed else 0.5 for p in [("bnode1", "bnode2"), *failed[:2]]}}
    figures["p2p_gbps"].update({("bnode1", "bnode3"): 0.5, ("bnode2", "bnode3"): 0.5, failed[2]: None})
    failures = {" ".join(p): f"pair {n} timed out" for n, p in enumerate(failed)}
    v = judge(names(4), {}, figures, 0.5, {}, failures)
    assert v.nodes[0].reasons == ["point-to-point exchange, per rank: 3 of 3 pairs failed (first: pair 0 timed out)"]


@pytest.mark.parametrize("seed", range(5))
def test_each_node_s_score_is_the_median_of_its_pairs_however_many_it_has(seed):
    """Nodes that met different numbers of partners (a pair not planned, a reference node): each
    score is exactly statistics.median of its pairs' figures, a failed pair counting 0."""
    import statistics

    rng = random.Random(seed)
    nodes = names(7)
    pairs = [p for p in itertools.combinations(nodes, 2) if rng.random() < 0.7]
    figures = {p: None if rng.random() < 0.1 else rng.uniform(1, 2) for p in pairs}
    v = judge(nodes, {}, {"busbw_gbps": figures}, 0.5, {})
    mine = {n: [0.0 if x is None else x for p, x in figures.items() if n in p] for n in nodes}
    named = {f.nodes[0] for f in v.nodes}
    expected = {n: statistics.median(xs) for n, xs in mine.items() if xs and n not in named}
    assert {n: x for n, x in v.node_scores["busbw_gbps"].items() if n not in named} == expected
    assert len({len(xs) for xs in mine.values()}) > 1  # the groups differ in size


def test_a_check_whose_steps_mostly_failed_names_nothing():
    """Every node's matmul failed, then every pair: that is the check's setup (on the testbed, an
    srun that asked for the batch shell's task count), not every node to drain."""
    nodes = {"gemm_tflops": dict.fromkeys(names(4))}
    why = "srun: error: Unable to create step for job 1: More processors requested than permitted"
    v = judge(names(4), nodes, pairs_of(UNSHAPED), 0.5, {}, {"bnode1": f"gemm-0 {why}"})
    assert v.nodes == [] and not v.named and len(v.unjudged) == 1
    assert f"4 of 4 nodes failed (first: gemm-0 {why}): the check's setup" in v.unjudged[0]
    failures = {"bnode1": "gemm-0 exit 1", "bnode1 bnode2": "pair-0-1 exit 1"}
    v = judge(names(4), nodes, pairs_of(UNSHAPED, PAIRS4), 0.5, {}, failures)
    assert v.nodes == [] and v.links == [] and not v.drain and len(v.unjudged) == 3
    assert v.pair_figures == pairs_of(UNSHAPED, PAIRS4)  # every figure is still shown
    assert "6 of 6 pairs failed (first: pair-0-1 exit 1)" in v.unjudged[1]


def test_a_failed_single_link_is_named():
    v = judge(names(4), {}, pairs_of(UNSHAPED, [("bnode2", "bnode3")]), 0.5, {}, {"bnode2 bnode3": "timed out"})
    assert v.nodes == [] and [f.nodes for f in v.links] == [("bnode2", "bnode3")]
    assert "failed: timed out" in v.links[0].reasons[0]


def test_a_slow_matmul_names_its_node():
    gemm = {"gemm_tflops": {"bnode1": 700.0, "bnode2": 690.0, "bnode3": 310.0, "bnode4": 705.0}}
    v = judge(names(4), gemm, {}, 0.1, {})
    assert [f.nodes for f in v.nodes] == [("bnode3",)]


def test_the_stated_hardware_names_a_node_the_population_cannot():
    """Half the nodes at a tenth of the stated figure: the population's median falls between
    them, but against the stated 48 GB/s each slow node is named."""
    figures = {"p2p_gbps": dict.fromkeys(PAIRS4, 45.0)}
    for p in PAIRS4:
        if "bnode1" in p:
            figures["p2p_gbps"][p] = 4.0
    v = judge(names(4), {}, figures, 0.1, {"p2p_gbps": 48.0})
    assert [f.nodes for f in v.nodes] == [("bnode1",)]
    everyone = judge(names(4), {}, {"p2p_gbps": dict.fromkeys(PAIRS4, 4.0)}, 0.1, {"p2p_gbps": 48.0})
    assert everyone.nodes == [] and everyone.named and "a setting every node shares" in everyone.cluster[0]


def test_two_nodes_cannot_be_told_apart():
    v = judge(names(2), {}, {"p2p_gbps": {("bnode1", "bnode2"): 0.5}}, 0.1, {})
    assert not v.named and v.unjudged and "the population takes 3" in v.unjudged[0]


def test_three_nodes_that_agree_by_chance_do_not_close_the_band():
    """Emulated nodes on one machine (`bench nodes --executor local --nodes 4 --bytes 1M --iters
    10`, one step at a time, 2026-11-25): three nodes' exchange medians agreed to 1% and the
    fourth read 20% lower. Their MAD alone would name it at 10%; the pairs' own noise (one pair
    read 0.52 against its nodes' 0.86) keeps it open."""
    local = {"p2p_gbps": [1.28109, 1.09042, 1.08085, 1.08082, 0.860413, 0.521276]}
    v = judge(names(4), {}, pairs_of(local), 0.1, {})
    assert v.nodes == []
    assert v.populations["p2p_gbps"].spread > 0.1


# --------------------------------------------------------------------------- rails


def test_each_round_of_pairs_runs_again_on_each_rail_alone_one_rank_a_node():
    """docs/guides/nodes.md, "Rails": a round of whole-node pairs, then the same pairs on each
    rail, named rail<r>-a-b, one task a node, held to the rail by NCCL's and gloo's variables."""
    o = Options(gpus_per_node=8, gemm=False, rails=(Rail(hca="mlx5_0", ifname="ib0"), Rail(hca="mlx5_3")))
    plan = schedule(names(4), o)
    assert [kind for kind, _ in plan] == ["intra", *["pair", "rail0", "rail1"] * 3]
    assert round_count(4, o) == len(plan) == 10 and plan[2][1] == plan[3][1] == plan[1][1]
    whole, rail0, rail1 = (steps(plan[k], o, "f") for k in (1, 2, 3))
    assert [s.name for s in rail1] == ["rail1-0-3", "rail1-1-2"] and {s.rail for s in rail1} == {"mlx5_3"}
    assert whole[0].tasks is None and whole[0].env == () and "--groups=world,inter" in whole[0].args
    assert rail0[0].tasks == 1 and "--groups=world" in rail0[0].args  # one rank a node: the pair is the world
    assert dict(rail0[0].env) == {"NCCL_IB_HCA": "=mlx5_0", "GLOO_SOCKET_IFNAME": "ib0", "NCCL_SOCKET_IFNAME": "=ib0"}
    assert dict(rail1[0].env) == {"NCCL_IB_HCA": "=mlx5_3"}
    assert round_count(64, Options(gemm=False, partners=3, rails=o.rails)) == 3 * 3


def test_a_node_slow_on_one_rail_is_named_with_the_rail():
    """Each rail's pairs judged alone: bnode3 slow on eth1 (the testbed's slow-node figures) and
    not on eth0 nor on the whole node is named for eth1 alone; the drain line names the node."""
    from harness.nodes.figures import Figures, RailFigures
    from harness.nodes.judged import on_rails

    f = Figures(names(4), {}, pairs_of(UNSHAPED), {}, 0, {})
    f.rails = {"eth0": RailFigures(pairs_of(UNSHAPED), {}), "eth1": RailFigures(pairs_of(SLOW_NODE), {})}
    v = judge(f.names, f.nodes, f.pairs, 0.5, {}, f.failures)
    on_rails(v, f, 0.5)
    assert v.drain == "bnode3" and [x.nodes for x in v.nodes] == [("bnode3",)] and v.links == []
    assert len(v.nodes[0].reasons) == 2 and all(r.startswith("rail eth1: ") for r in v.nodes[0].reasons)
    assert v.rails["eth0"].nodes == [] and [x.nodes for x in v.rails["eth1"].nodes] == [("bnode3",)]
    link = Figures(names(4), {}, pairs_of(UNSHAPED), {}, 0, {})
    link.rails = {"mlx5_1": RailFigures(pairs_of(SLOW_LINK), {})}
    v = judge(link.names, {}, link.pairs, 0.5, {})
    on_rails(v, link, 0.5)
    assert v.nodes == [] and [x.nodes for x in v.links] == [("bnode1", "bnode2")]
    assert v.links[0].reasons[0].startswith("rail mlx5_1: ") and v.drain == ""


def _leaf_figures(n, leaf_of, across, seed=0, slow_pairs=()):
    """Every pair of `n` nodes: 0.7 GB/s under one leaf and `across(leaf a, leaf b)` times that
    across two leaves, with a 5% spread as the testbed's unshaped pairs have; `slow_pairs` at a tenth."""
    rng = random.Random(seed)
    figures = {}
    for a, b in itertools.combinations(names(n), 2):
        factor = 1.0 if leaf_of[a] == leaf_of[b] else across(leaf_of[a], leaf_of[b])
        figures[(a, b)] = 0.7 * factor * rng.uniform(0.95, 1.05) * (0.1 if (a, b) in slow_pairs else 1.0)
    return {"p2p_gbps": figures}


TWO_LEAVES = {f"bnode{i}": "s0" if i <= 4 else "s1" for i in range(1, 9)}


def test_a_slow_path_between_two_leaves_is_named_and_no_node_or_link():
    """Every pair across the two leaves at a quarter: judged without the leaves, every node's
    median is a crossing pair's and nothing stands out; by leaves, the path is named."""
    figures = _leaf_figures(8, TWO_LEAVES, lambda one, other: 0.25)
    assert not judge(names(8), {}, figures, 0.5, {}).named  # what a check without leaves says
    v = by_leaves(names(8), {}, figures, 0.5, {}, {}, {}, TWO_LEAVES)
    assert v.nodes == [] and v.links == [] and v.drain == "" and v.named
    (uplink,) = v.uplinks
    assert uplink.nodes == ("s0", "s1")
    assert uplink.reasons[0].startswith(
        "the path between leaves s0 and s1: point-to-point exchange, per rank: 16 pairs"
    )
    assert len(v.pair_figures["p2p_gbps"]) == 28  # every figure is shown


def test_by_leaves_with_nothing_slow_names_nothing_and_a_slow_crossing_pair_is_a_link():
    assert not by_leaves(names(8), {}, _leaf_figures(8, TWO_LEAVES, lambda *_: 1.0), 0.5, {}, {}, {}, TWO_LEAVES).named
    slow = _leaf_figures(8, TWO_LEAVES, lambda *_: 1.0, slow_pairs=[("bnode2", "bnode7")])
    v = by_leaves(names(8), {}, slow, 0.5, {}, {}, {}, TWO_LEAVES)
    assert v.uplinks == [] and v.nodes == [] and [f.nodes for f in v.links] == [("bnode2", "bnode7")]


def test_with_three_leaves_a_leaf_slow_to_both_others_is_named_for_its_own_uplink():
    leaf_of = {f"bnode{i}": f"s{(i - 1) // 3}" for i in range(1, 10)}  # s0, s1, s2: 3 nodes each
    figures = _leaf_figures(9, leaf_of, lambda one, other: 0.2 if "s1" in (one, other) else 1.0)
    v = by_leaves(names(9), {}, figures, 0.5, {}, {}, {}, leaf_of)
    (uplink,) = v.uplinks
    assert (
        uplink.nodes == ("s1",)
        and uplink.reasons[0] == "the uplink of leaf s1: every path from it to the other leaves is slow"
    )
    assert [why.split(":")[0] for why in uplink.reasons[1:]] == ["to leaf s0", "to leaf s2"]
    assert uplink.reasons[1].startswith("to leaf s0: point-to-point exchange, per rank: 9 pairs across, their median 8")
    assert v.nodes == [] and v.links == []


def test_a_path_of_too_few_pairs_across_is_judged_by_its_links_and_says_so():
    figures = _leaf_figures(8, TWO_LEAVES, lambda *_: 0.25)
    keep = {p: x for p, x in figures["p2p_gbps"].items() if TWO_LEAVES[p[0]] == TWO_LEAVES[p[1]]}
    keep[("bnode1", "bnode5")] = figures["p2p_gbps"][("bnode1", "bnode5")]
    keep[("bnode2", "bnode6")] = figures["p2p_gbps"][("bnode2", "bnode6")]
    v = by_leaves(names(8), {}, {"p2p_gbps": keep}, 0.5, {}, {}, {}, TWO_LEAVES)
    assert v.uplinks == [] and [f.nodes for f in v.links] == [("bnode1", "bnode5"), ("bnode2", "bnode6")]
    assert any("path between leaves s0 and s1: 2 pair(s) across; it takes 3" in line for line in v.unjudged)


def test_a_node_alone_under_its_leaf_leaves_its_pairs_across_unjudged_and_says_so():
    leaf_of = {**TWO_LEAVES, "bnode9": "s2"}  # one node under s2: no pair under its leaf
    figures = _leaf_figures(9, leaf_of, lambda *_: 1.0)
    v = by_leaves(names(9), {}, figures, 0.5, {}, {}, {}, leaf_of)
    assert not v.nodes and not v.links and not v.uplinks
    assert "point-to-point exchange, per rank of bnode9 across leaves: no pair under its leaf measured it" in v.unjudged
