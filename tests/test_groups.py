"""Each collective on each node's ranks and on one rank per node, inside one job (docs/reference.md,
"Groups"): a real local sweep of 1 and 2 emulated nodes of 2 gloo ranks, every collective of the
catalog, checked on every group and keyed by it from the result to the summary, the comparison,
the plot and the report."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import bench, read_json

from benchmarks.catalog import COLLECTIVES

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("groups")
    sweep = root / "s.yaml"
    sweep.write_text(
        "name: g\ndevice: cpu\nbackend: gloo\nnodes: [1, 2]\ngpus_per_node: [2]\nlaunchers: [torchrun]\n"
        "env: {OMP_NUM_THREADS: '1'}\ntimeout_s: 60\n"
        "workloads:\n  allreduce: {min_bytes: 40K, max_bytes: 160K, step_factor: 4, iters: 3, warmup_iters: 1,"
        f" link_bytes: 0, collectives: [{', '.join(COLLECTIVES)}]}}\n"
    )
    out = root / "run"
    bench("sweep", str(sweep), "--executor", "local", "--out", str(out), timeout=600)
    return out


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
    # busbw by the bus factor of the group's own size: 2 ranks for intra and inter, 4 for the world
    for c, g, algbw, busbw in zip(two["collective"], two["group"], two["algbw_gbps"], two["busbw_gbps"]):
        assert busbw == pytest.approx(algbw * COLLECTIVES[c].bus_factor(4 if g == "world" else 2)), (c, g)
    # sizes round to whole parts of the group's size: alltoallv of 2 ranks in 3 units, of 4 in 10
    v = two[two["collective"] == "alltoallv"]
    assert sorted(v[v["group"] == "intra"]["size_bytes"]) == [40956, 163836]
    assert sorted(v[v["group"] == "world"]["size_bytes"]) == [40960, 163840]


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
    # 10 collectives x 2 sizes: on 3 groups of the 2-node job, on the world of the 1-node job
    r = bench("compare", str(run), str(run), "--csv", str(tmp_path / "c.csv"))
    assert "of 80 compared" in r.stdout
    keys = set(pd.read_csv(tmp_path / "c.csv")["key"])
    assert len(keys) == 80
    assert "allreduce all_reduce intra 40K, 2x2, torchrun, default" in keys
    assert "allreduce gather inter 160K, 2x2, torchrun, default" in keys
    assert "allreduce all_reduce 160K, 2x2, torchrun, default" in keys
    bench("plot", str(run))
    points = pd.read_csv(run / "plots" / "allreduce_busbw.csv")
    assert {"all_reduce", "all_reduce intra", "all_reduce inter"} <= set(points["collective"])
    bench("report", str(run), "--out", str(tmp_path / "r.html"))
    assert "all_reduce intra" in (tmp_path / "r.html").read_text()
