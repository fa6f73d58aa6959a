"""The soak's verdict (harness/nodes/soak.py), pure: six nodes, every pair, each link's readings
over four passes around 1.0 GB/s with a spread of 5% (this machine's healthy gloo pairs spread
more, and the local test runs them: tests/modules/harness/test_check_nodes.py); one link, one
node or every link made to fall while warm."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from harness.nodes.soak import MIN_PASSES, drift, judge_soak
from harness.nodes.verdict import judge

NAMES = [f"gpu{i}" for i in range(1, 7)]
PAIRS = list(itertools.combinations(NAMES, 2))
PASSES = 4
METRIC = "busbw_gbps"


def soaked(fall=lambda pair, p: 1.0, passes=PASSES, failures=None, threshold=0.1):
    """The verdict of a clean check of NAMES, with the soak's readings: each link's reading of
    pass p is about `fall(pair, p)` times its first."""
    rng = random.Random(3)
    first = {METRIC: {pair: 1.0 + rng.uniform(-0.05, 0.05) for pair in PAIRS}}
    v = judge(NAMES, {}, {METRIC: dict(first[METRIC])}, threshold, {})
    assert not v.named
    soak = {
        METRIC: {
            pair: {
                p: first[METRIC][pair] * fall(pair, p) * (1 + rng.uniform(-0.05, 0.05)) for p in range(1, passes + 1)
            }
            for pair in PAIRS
        }
    }
    judge_soak(v, first, soak, failures or {}, passes, threshold)
    return v


def test_healthy_links_drift_nowhere_and_nothing_is_named():
    v = soaked()
    assert not v.named and not v.unjudged, (v.nodes, v.links, v.cluster, v.unjudged)
    assert v.soak_passes == PASSES and len(v.soak[METRIC]) == len(PAIRS)
    assert all(0.85 < d < 1.15 for _, _, d in v.soak[METRIC].values())


def test_a_link_that_falls_while_warm_is_named_and_neither_node():
    """gpu2 - gpu4 reads 1.0 at the check's round, then 0.9, 0.6, 0.4, 0.3 of it: named for
    its drift, with its first and last readings; its nodes' other links hold them up."""
    falls = {1: 0.9, 2: 0.6, 3: 0.4, 4: 0.3}
    v = soaked(lambda pair, p: falls[p] if pair == ("gpu2", "gpu4") else 1.0)
    assert not v.nodes and not v.cluster and not v.unjudged
    assert [f.nodes for f in v.links] == [("gpu2", "gpu4")]
    why = v.links[0].reasons[0]
    assert why.startswith("two-node all-reduce, busbw ") and "over the soak: 7" in why and "lower at its end" in why
    assert v.soak[METRIC][("gpu2", "gpu4")][2] == pytest.approx(0.3, abs=0.03)


def test_a_node_whose_links_all_fall_while_warm_is_named_and_drained():
    v = soaked(lambda pair, p: 1 - 0.12 * p if "gpu5" in pair else 1.0)
    assert [f.nodes for f in v.nodes] == [("gpu5",)] and v.drain == "gpu5"
    why = re.fullmatch(
        r"two-node all-reduce, busbw: its 5 link\(s\) read (\d+)% lower at the soak's end .*", v.nodes[0].reasons[0]
    )
    assert why and 40 <= int(why[1]) <= 55, v.nodes[0].reasons  # 1 - 0.12 x 4, give or take the 5%
    assert not v.links  # the node's links are the node's


def test_every_link_falling_is_the_population_s_and_names_no_node():
    v = soaked(lambda pair, p: 1 - 0.1 * p)
    assert not v.nodes and not v.links
    assert len(v.cluster) == 1 and "every link slowed while warm" in v.cluster[0]


def test_a_link_that_fails_in_the_soak_is_named_for_it():
    v = soaked(failures={("gpu1", "gpu6"): "soak3-0-5 FAILED: Connection reset by peer"})
    assert [(f.nodes, f.reasons) for f in v.links] == [
        (("gpu1", "gpu6"), ["failed in the soak: soak3-0-5 FAILED: Connection reset by peer"])
    ]
    assert ("gpu1", "gpu6") not in v.soak[METRIC]


def test_one_pass_cannot_judge_a_drift_and_says_so():
    v = soaked(lambda pair, p: 0.2, passes=MIN_PASSES - 1)
    assert not v.named and v.unjudged == [
        f"the soak: {MIN_PASSES - 1} pass(es) of the pairs; a drift takes {MIN_PASSES}: give a longer --soak"
    ]


@pytest.mark.parametrize(
    ("readings", "expected"),
    [
        ([1.0, 0.5, 0.25], 0.25),
        ([2.0, 2.0, 2.0, 1.0, 1.0, 1.0], 0.5),
        ([1.0, 1.0, 0.1, 1.0, 1.0, 1.0], 1.0),
        ([0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.1], 1.0),
        ([0.0, 1.0], 0.0),
    ],
)
def test_drift_is_the_last_third_s_median_over_the_first_s(readings, expected):
    """One slow reading in the middle, or at either end of thirds of three, is no drift; a first
    third of 0 (no measurement) is no rise."""
    assert drift(readings) == pytest.approx(expected)
