"""Each collective on each node's ranks and on one rank per node, inside one job (docs/reference/sources.md,
"Groups"): a real local sweep of 1 and 2 emulated nodes of 2 gloo ranks, every collective of the
catalog (tests/conftest.py, `mixed_run`), checked on every group and keyed by it from the result
to the summary, the comparison, the plot and the report."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import bench, read_json

from benchmarks.catalog import COLLECTIVES

pytestmark = pytest.mark.slow


@pytest.fixture
def run(mixed_run):
    return mixed_run[0]


def _summary(run) -> pd.DataFrame:
    t = pd.read_csv(run / "summary.csv")
    return t[t["workload"] == "allreduce"]


def test_two_nodes_measure_every_collective_on_every_group_and_one_node_on_the_world_alone(run):
    t = _summary(run)
    two, one = t[t["nodes"] == 2], t[t["nodes"] == 1]
    assert set(zip(two["collective"], two["group"])) == {
        (c, g) for c in COLLECTIVES for g in ("world", "intra", "inter")
    }
    assert set(one["group"]) == {"world"} and set(one["collective"]) == set(COLLECTIVES)
    # every rank's output checked on its own group: roots and peers named within the group reach
    # the right global rank (gather's root of the inter-node group [1, 3] is rank 1)
    assert (t["wrong"] == 0).all(), t[t["wrong"] != 0][["collective", "group", "size_bytes", "wrong"]]
    assert (t["oop_wrong"].dropna() == 0).all()
    # busbw by the bus factor of the group's own size, counted by hand: each rank's share of the
    # message over its link on 4 ranks (the world) and on 2 (intra, inter); alltoallv keeps 1 of
    # n(n+1)/2 units, 1 of 10 on 4 ranks and 1 of 3 on 2
    hand = {
        4: {"all_reduce": 3 / 2, "all_gather": 3 / 4, "reduce_scatter": 3 / 4, "broadcast": 1, "all_to_all": 3 / 4,
            "alltoallv": 9 / 10, "reduce": 1, "gather": 3 / 4, "scatter": 3 / 4, "sendrecv": 1},
        2: {"all_reduce": 1, "all_gather": 1 / 2, "reduce_scatter": 1 / 2, "broadcast": 1, "all_to_all": 1 / 2,
            "alltoallv": 2 / 3, "reduce": 1, "gather": 1 / 2, "scatter": 1 / 2, "sendrecv": 1},
    }  # fmt: skip
    for c, g, algbw, busbw in zip(two["collective"], two["group"], two["algbw_gbps"], two["busbw_gbps"]):
        assert busbw == pytest.approx(algbw * hand[4 if g == "world" else 2][c], rel=1e-6), (c, g)
    # sizes round to whole parts of the group's size: alltoallv of 2 ranks in 3 units (65,536
    # floats to 65,535), of 4 in 10 (to 65,530)
    v = two[two["collective"] == "alltoallv"]
    assert v[v["group"] == "intra"]["size_bytes"].tolist() == [262140]
    assert v[v["group"] == "world"]["size_bytes"].tolist() == [262120]


def test_the_result_records_the_groups_it_measured_in_global_ranks(run):
    job = next(p for p in (run / "jobs").iterdir() if p.name.startswith("n2"))
    res = read_json(job / "allreduce.json")
    assert res["params"]["groups"] == {"world": [[0, 1, 2, 3]], "intra": [[0, 1], [2, 3]], "inter": [[0, 2], [1, 3]]}
    ranks = read_json(job / "allreduce.ranks.json")
    assert [(r["collective"], r["group"]) for r in ranks["rows"]] == [
        (r["collective"], r["group"]) for r in res["rows"]
    ]
    one = next(p for p in (run / "jobs").iterdir() if p.name.startswith("n1"))
    assert read_json(one / "allreduce.json")["params"]["groups"] == {"world": [[0, 1]]}
    assert "# intra, inter: skipped, one node: the world's ranks" in (one / "log.txt").read_text()


def test_groups_are_keys_of_the_comparison_the_plot_and_the_report(run, tmp_path):
    # 10 collectives: on 3 groups of the 2-node job, on the world of the 1-node job
    r = bench("compare", str(run), str(run), "--metric", "busbw_gbps", "--csv", str(tmp_path / "c.csv"))
    assert "of 40 compared" in r.stdout
    keys = set(pd.read_csv(tmp_path / "c.csv")["key"])
    assert len(keys) == 40
    assert "allreduce all_reduce intra 256K, 2x2, torchrun, default" in keys
    assert "allreduce gather inter 256K, 2x2, torchrun, default" in keys
    assert "allreduce all_reduce 256K, 2x2, torchrun, default" in keys
    points = pd.read_csv(run / "plots" / "allreduce_busbw.csv")
    assert {"all_reduce", "all_reduce intra", "all_reduce inter"} <= set(points["collective"])
    bench("report", str(run), "--out", str(tmp_path / "r.html"))
    assert "all_reduce intra" in (tmp_path / "r.html").read_text()
