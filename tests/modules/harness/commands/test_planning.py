"""`bench predict` on real local runs (harness/commands/planning.py): what it predicts, how it
validates itself against a node count the run measured, and what it cannot judge."""

from __future__ import annotations

import json
import math
import shutil
import statistics

import pandas as pd
import pytest
from conftest import bench

pytestmark = pytest.mark.slow


def test_predict_fits_two_to_three_nodes_predicts_four_and_the_asked_counts(scaling_run, tmp_path):
    out = tmp_path / "p.json"
    r = bench("predict", str(scaling_run), "--nodes", "16,8", "--out", str(out))
    assert r.returncode == 0, r.describe()
    result = json.loads(out.read_text())
    assert result["measured_nodes"] == [1, 2, 3, 4] and result["nodes"] == [8, 16]
    summary = pd.read_csv(scaling_run / "summary.csv")
    coll = summary[summary["workload"] == "allreduce"]
    rows = result["collectives"]
    assert sorted(r["size_bytes"] for r in rows) == [256 << 10, 1 << 20, 4 << 20]
    for row in rows:
        assert row["fitted_nodes"] == [2, 3, 4] and [p["nodes"] for p in row["predictions"]] == [8, 16]
        for p in row["predictions"]:
            # an interval too wide to bound above (the CPU, not a network, sets these times) is null
            assert p["time_low_us"] < p["time_us"] < (p["time_high_us"] or math.inf), r.stdout
            assert (p["busbw_low_gbps"] or 0.0) < p["busbw_gbps"] < (p["busbw_high_gbps"] or math.inf), r.stdout
            # busbw from the predicted time: size / time x the all-reduce's 2(p-1)/p on p = n ranks
            n = p["nodes"]
            assert p["busbw_gbps"] == pytest.approx(row["size_bytes"] / (p["time_us"] * 1e3) * 2 * (n - 1) / n)
        # the validation: refitted on 2 and 3 nodes, 4 predicted and set against the run's own row
        v = row["validation"]
        measured = coll[(coll["nodes"] == 4) & (coll["size_bytes"] == row["size_bytes"])]["time_us"].median()
        assert v["fitted_nodes"] == [2, 3] and v["nodes"] == 4
        assert v["measured_time_us"] == pytest.approx(measured)
        assert v["time_error"] == pytest.approx(v["predicted_time_us"] / measured - 1)
        assert v["busbw_error"] == pytest.approx(measured / v["predicted_time_us"] - 1)
    (train,) = result["training"]
    assert (train["workload"], train["scaling"], train["unit"]) == ("synthetic", "weak", "images")
    assert train["traffic_bytes"] == {"all_reduce": 4 * 11_689_512}  # ResNet-18's gradients, fp32
    steps = summary[summary["workload"] == "synthetic"].set_index("nodes")["step_time_ms"]
    for p in train["predictions"]:
        assert p["step_low_ms"] < p["step_time_ms"] < (p["step_high_ms"] or math.inf), r.stdout
        assert p["per_gpu"] == pytest.approx(8 / (p["step_time_ms"] / 1e3))  # 8 images a rank, weak
        assert p["efficiency"] == pytest.approx(p["per_gpu"] / (8 / (steps[1] / 1e3)))  # against one node's
    assert train["validation"]["nodes"] == 4 and train["validation"]["measured_step_ms"] == pytest.approx(steps[4])
    # the terminal says what was fitted, what was predicted and how far off
    assert "fitted on 2, 3 nodes, predicted 4:" in r.stdout and f"wrote {out}" in r.stdout
    v = result["validation"]["collectives_busbw"]
    errors = [abs(row["validation"]["busbw_error"]) for row in rows]
    assert v["validated"] == 3 and v["median_abs_error"] == pytest.approx(statistics.median(errors))
    assert not math.isnan(v["median_abs_error"])


def test_in_the_run_directory_beside_its_plots_and_in_the_report(scaling_run, tmp_path):
    """Without --out: RUN/predict.json, and the figure in RUN/plots with the points it draws;
    the report then has the section, at the node counts predict.json asked for."""
    r = bench("predict", str(scaling_run), "--nodes", "8")
    assert (
        f"wrote {scaling_run / 'predict.json'}" in r.stdout
        and f"wrote {scaling_run / 'plots' / 'predict.png'}" in r.stdout
    )
    points = pd.read_csv(scaling_run / "plots" / "predict.csv")
    assert set(points["series"]) == {"predicted", "measured"}
    measured = points[(points["series"] == "measured") & (points["metric"] == "busbw_gbps")]
    summary = pd.read_csv(scaling_run / "summary.csv")
    top = summary[(summary["size_bytes"] == 4 << 20) & (summary["nodes"] >= 2)]
    assert sorted(zip(measured["x"], measured["y"].round(6))) == sorted(zip(top["nodes"], top["busbw_gbps"].round(6)))
    assert points[points["series"] == "predicted"]["x"].max() == 8
    bench("report", str(scaling_run), "--out", str(tmp_path / "r.html"))
    page = (tmp_path / "r.html").read_text()
    assert "<h2>Predicted scale</h2>" in page and "from 1, 2, 3, 4 node(s) measured to 8 (95%" in page
    assert 'alt="predicted scale" src="data:image/png;base64,' in page


def test_what_if_the_network_were_twice_as_fast(scaling_run, tmp_path):
    """--set network_gbps_per_node=BEFORE:AFTER, on a run whose profile states none: one rank a
    node on one NIC, each collective's peak doubles, so its bytes terms halve at every node
    count; its latencies stay, and so does its validation, the measured fit's. The step keeps
    its compute (a ResNet's does not follow the GPU's peak) and sends faster."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    bench("predict", str(scaling_run), "--nodes", "8", "--out", str(a))
    r = bench(
        "predict", str(scaling_run), "--nodes", "8", "--out", str(b),
        "--set", "network_gbps_per_node=0.025:0.05", "--set", "nics_per_node=1:1",
    )  # fmt: skip
    before, after = json.loads(a.read_text()), json.loads(b.read_text())
    for x, y in zip(before["collectives"], after["collectives"], strict=True):
        size, (p, q) = x["size_bytes"], (x["predictions"][0], y["predictions"][0])
        c = max(0.0, x["constants_us"][f"bytes {size}"])  # one below zero is no rate, and stays
        halved = c * 2 * 7 / 8 / 2  # the all-reduce's factor on 8 ranks
        assert q["time_us"] == pytest.approx(p["time_us"] - halved, rel=1e-9)
        assert y["validation"] == x["validation"] and y["constants_us"] == x["constants_us"]
    assert after["what_if"]["set"] == {
        "network_gbps_per_node": {"before": 0.025, "after": 0.05},
        "nics_per_node": {"before": 1, "after": 1},
    }
    assert after["what_if"]["moved"] == ["all_reduce over world, 1 GPU(s) a node: bytes terms x0.5 at 8 nodes"]
    (t0,), (t1,) = before["training"], after["training"]
    assert t1["compute_ms_per_item"] == t0["compute_ms_per_item"] and t1["validation"] == t0["validation"]
    # faster links never slow a step (a bytes term fitted below zero, as this CPU-bound host can
    # give, is left where it is, and says so)
    assert t1["predictions"][0]["exposed_comm_ms"] <= t0["predictions"][0]["exposed_comm_ms"]
    assert t1["predictions"][0]["step_time_ms"] <= t0["predictions"][0]["step_time_ms"]
    assert "what if: network_gbps_per_node 0.025 -> 0.05, nics_per_node 1 -> 1; it assumes" in r.stdout


def test_an_fsdp_step_is_predicted_from_its_all_gathers_and_reduce_scatters(fsdp_scaling_run, tmp_path):
    """The transformer under FSDP on 2 to 4 nodes: its step sends what the result states, the
    all-gathers and reduce-scatters of its own sweep, each fitted, and is predicted at 8 nodes,
    validated at 4 from 2 and 3."""
    out = tmp_path / "p.json"
    r = bench("predict", str(fsdp_scaling_run), "--nodes", "8", "--out", str(out))
    result = json.loads(out.read_text())
    assert {row["collective"] for row in result["collectives"] if row["predictions"]} == {
        "all_gather",
        "reduce_scatter",
    }
    (train,) = result["training"]
    assert (train["workload"], train["unit"], train["note"]) == ("transformer", "tokens", None), r.stdout
    summary = pd.read_csv(fsdp_scaling_run / "summary.csv")
    first = summary[summary["workload"] == "transformer"].sort_values("nodes").iloc[0]
    assert first["step_all_gather_bytes"] > 0 and first["step_reduce_scatter_bytes"] > 0
    assert train["traffic_bytes"] == {
        "all_gather": first["step_all_gather_bytes"],
        "reduce_scatter": first["step_reduce_scatter_bytes"],
    }
    (p,) = train["predictions"]
    assert p["nodes"] == 8 and p["step_low_ms"] < p["step_time_ms"] < (p["step_high_ms"] or math.inf), r.stdout
    assert p["per_gpu"] == pytest.approx(2 * 16 / (p["step_time_ms"] / 1e3))  # 2 sequences of 16 tokens a rank
    v = train["validation"]
    assert v["fitted_nodes"] == [2, 3] and v["nodes"] == 4 and "inside" in v, v


def test_without_two_node_counts_of_two_or_more_nothing_is_judged_and_it_exits_1(real_run, tmp_path):
    """real_run measured 1 and 2 nodes: no fit, and it says why."""
    out = tmp_path / "p.json"
    r = bench("predict", str(real_run), "--out", str(out), check=False)
    assert r.returncode == 1 and "nothing could be judged" in r.stderr, r.describe()
    assert "cannot judge: measured at 2 nodes of two nodes or more" in r.stdout
    result = json.loads(out.read_text())
    assert result["nodes"] == [4, 8, 16]  # 2, 4 and 8 times the largest measured
    assert all(not row["predictions"] for row in result["collectives"] + result["training"])
    # the report says how to predict, and once predicted, that nothing could be
    bench("report", str(real_run), "--out", str(tmp_path / "r.html"))
    assert f"Not predicted: <code>bench predict {real_run} --nodes" in (tmp_path / "r.html").read_text()
    run = tmp_path / "run"
    shutil.copytree(real_run, run, symlinks=True)
    bench("predict", str(run), check=False)
    bench("report", str(run), "--out", str(tmp_path / "r.html"))
    assert "Nothing could be predicted: a fit takes two node counts" in (tmp_path / "r.html").read_text()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--nodes", "0"], "--nodes: '0': each node count must be from 1 to 100,000"),
        (["--nodes", "8,x"], "--nodes: '8,x': give node counts separated by commas"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(real_run, args, words):
    r = bench("predict", str(real_run), *args, check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.describe()


def test_a_directory_without_a_summary_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "run").mkdir()
    r = bench("predict", str(tmp_path / "run"), check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert not (tmp_path / "run" / "predict.json").exists()
