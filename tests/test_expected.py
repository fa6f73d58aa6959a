"""Expected figures (docs/expected.md): busbw as a % of the peak a cluster profile states, checked
against a hand computation; and `bench regress --baseline reference`, which judges a run
against the profile's reference figures without any history."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
from conftest import bench

from harness.executors.slurm.profile import Hardware, load_profile

# 8 NDR400 NICs per node at 50 GB/s, NVLink at 450 GB/s per GPU (docs/expected.md)
H100 = Hardware(network_gbps_per_node=400, intra_node_gbps_per_gpu=450)


@pytest.mark.parametrize(
    ("nodes", "gpus", "peak"),
    [
        (2, 8, 50.0),  # across nodes: each GPU's share of the node's 400 GB/s
        (4, 4, 100.0),
        (16, 1, 400.0),
        (1, 8, 450.0),  # one node: the per-GPU intra-node figure
        (1, 1, None),  # one rank moves nothing over a link
    ],
)
def test_peak_by_hand(nodes, gpus, peak):
    assert H100.peak_busbw_gbps(nodes, gpus) == peak


def test_a_figure_not_stated_gives_no_peak():
    assert Hardware(intra_node_gbps_per_gpu=450).peak_busbw_gbps(2, 8) is None
    assert Hardware(network_gbps_per_node=400).peak_busbw_gbps(1, 8) is None


@pytest.fixture
def run(mixed_run):
    """A real local run of 1 and 2 emulated nodes of 2 gloo ranks (tests/conftest.py), whose plan
    each test gives the cluster profile a Slurm run would record."""
    return mixed_run[0]


def _with_profile(run, tmp_path, text: str):
    """A copy of `run` whose plan.json records the profile `text`, as the Slurm executor writes it."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    (tmp_path / "p.yaml").write_text(text)
    plan = json.loads((copy / "plan.json").read_text())
    plan["cluster"] = dataclasses.asdict(load_profile(tmp_path / "p.yaml"))
    (copy / "plan.json").write_text(json.dumps(plan))
    bench("collect", str(copy))
    return copy


def test_busbw_as_a_percentage_of_the_stated_peak(run, tmp_path):
    hw = "name: lab\nhardware: {network_gbps_per_node: 2.5, intra_node_gbps_per_gpu: 4}\n"
    copy = _with_profile(run, tmp_path, hw)
    t = pd.read_csv(copy / "summary.csv")
    coll = t[t["workload"] == "allreduce"]
    # by hand: 2 nodes x 2 GPUs share 2.5 GB/s per node, 1.25 each, over every rank and over one
    # rank per node; one node's ranks, alone or as the intra-node group of 2 nodes, 4 GB/s per GPU
    peaks = dict(zip(zip(coll["nodes"], coll["group"]), coll["busbw_peak_gbps"]))
    assert peaks == {(1, "world"): 4.0, (2, "world"): 1.25, (2, "inter"): 1.25, (2, "intra"): 4.0}
    expected = [
        100 * b / (1.25 if n == 2 and g != "intra" else 4.0)
        for n, g, b in zip(coll["nodes"], coll["group"], coll["busbw_gbps"])
    ]
    assert coll["busbw_pct_peak"].tolist() == pytest.approx(expected)
    assert t[t["workload"] != "allreduce"]["busbw_pct_peak"].isna().all()
    bench("plot", str(copy))
    points = pd.read_csv(copy / "plots" / "allreduce_busbw.csv")
    peak_points = points[(points["metric"] == "busbw_peak_gbps") & points["collective"].str.startswith("all_reduce")]
    assert sorted(zip(peak_points["collective"], peak_points["y"])) == [
        ("all_reduce", 1.25),
        ("all_reduce", 4.0),
        ("all_reduce inter", 1.25),
        ("all_reduce intra", 4.0),
    ]
    html = tmp_path / "r.html"
    bench("report", str(copy), "--out", str(html))
    assert "% of peak" in html.read_text()


def test_no_peak_without_stated_hardware(run, tmp_path):
    t = pd.read_csv(run / "summary.csv")
    assert t["busbw_pct_peak"].isna().all() and t["busbw_peak_gbps"].isna().all()
    bench("report", str(run), "--out", str(tmp_path / "r.html"))
    assert "% of peak" not in (tmp_path / "r.html").read_text()


def _reference(run, tmp_path, factor_1, factor_2, extra=""):
    """A profile whose references sit at `factor` x the run's own 256K busbw of 1 and 2 nodes."""
    t = pd.read_csv(run / "summary.csv")
    at = {
        int(n): float(b)
        for n, b in t[(t["collective"] == "all_reduce") & (t["size_bytes"] == 256 * 1024) & (t["group"] == "world")][
            ["nodes", "busbw_gbps"]
        ].values
    }
    return _with_profile(
        run,
        tmp_path,
        "name: lab\nreference:\n"
        f"  - {{workload: allreduce, size: 256K, nodes: 1, busbw_gbps: {at[1] * factor_1!r}, tolerance: 0.2}}\n"
        f"  - {{workload: allreduce, size: 256K, nodes: 2, busbw_gbps: {at[2] * factor_2!r}, tolerance: 0.2}}\n"
        + extra,
    )


def _regress(copy, tmp_path):
    return bench("regress", str(copy), "--baseline", "reference", "--out", str(tmp_path / "rg"), check=False)


def test_a_first_run_meets_its_reference(run, tmp_path):
    copy = _reference(run, tmp_path, 1.0, 0.9)
    r = _regress(copy, tmp_path)
    assert r.returncode == 0, r.describe()
    assert "0 regressions, 0 failed keys, 0 cannot judge, 0 improvements, 2 unchanged of 2 compared" in r.stdout
    junit = (tmp_path / "rg" / "junit.xml").read_text()
    assert "band [0.800, 1.200]" in junit and "<failure" not in junit


def test_a_first_run_below_its_reference_fails(run, tmp_path):
    copy = _reference(run, tmp_path, 1.0, 2.0)  # the 2-node figure expected twice as high
    r = _regress(copy, tmp_path)
    assert r.returncode == 1 and "1 regression" in r.stderr, r.describe()
    junit = (tmp_path / "rg" / "junit.xml").read_text()
    assert junit.count("<failure") == 1 and "allreduce all_reduce, 2x2" in junit


def test_a_reference_the_run_cannot_answer_is_not_taken_as_met(run, tmp_path):
    copy = _reference(
        run, tmp_path, 1.0, 1.0, "  - {workload: allreduce, size: 256K, nodes: 8, busbw_gbps: 40, tolerance: 0.1}\n"
    )
    r = _regress(copy, tmp_path)
    assert r.returncode == 3 and "1 cannot judge" in r.stderr, r.describe()
    assert "the run has no such key" in (tmp_path / "rg" / "report.md").read_text()


def test_no_reference_block_is_one_line(run, tmp_path):
    copy = _with_profile(run, tmp_path, "name: lab\n")
    r = _regress(copy, tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert "states no reference figures" in r.stderr


def test_a_key_without_a_measurement_is_not_taken_as_met(run, tmp_path):
    """A completed row whose figure is missing (null in its result, NaN in the summary) cannot be
    judged against its reference, as against the history: a gap never passes the gate."""
    copy = _reference(run, tmp_path, 1.0, 1.0)
    result = copy / "jobs" / "n2-g2-torchrun-default" / "allreduce.json"
    data = json.loads(result.read_text())
    row = next(r for r in data["rows"] if r["size_bytes"] == 256 * 1024)
    row.update(time_us=None, algbw_gbps=None, busbw_gbps=None)
    result.write_text(json.dumps(data))
    bench("collect", str(copy))
    r = _regress(copy, tmp_path)
    assert r.returncode == 3 and "1 cannot judge, 0 improvements, 1 unchanged of 2 compared" in r.stderr, r.describe()
    assert "busbw_gbps is nan in run" in (tmp_path / "rg" / "report.md").read_text()
