"""Predictions kept in the history (harness/analysis/predicted.py): `history add` keeps a run's
predict.json, a later run of the cluster measures what it predicted, `history predictions`
states each error, on both backends; a what-if is not kept, and a predict.json that is not this
run's is refused whole."""

from __future__ import annotations

import json
import re
import shutil
import statistics

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SWEEPS, bench, copy_run, planned_later

pytestmark = pytest.mark.slow

CLUSTER = "tb"
SLOWER = 1.25  # the later run's times against the predicting run's


@pytest.fixture(scope="module")
def pair(scaling_run, tmp_path_factory):
    """(a, b): a copy of the 1-4 node run with its predictions at 4 and 8 nodes in its
    predict.json; the same sweep run later, every time 1.25 times as long, which measures 1 to 4
    nodes. Read, never changed: a test that changes one works on its own copy (_copy)."""
    root = tmp_path_factory.mktemp("predicted")
    a = root / "a"
    shutil.copytree(scaling_run, a, symlinks=True)
    (a / "predict.json").unlink(missing_ok=True)  # another test's, with other node counts
    bench("predict", str(a), "--nodes", "4,8", "--out", str(a / "predict.json"))
    b = planned_later(copy_run(a, root / "b", time_factor=SLOWER))
    (b / "predict.json").unlink()  # the predicting run's, not this one's
    return a, b


def _copy(run, tmp_path):
    return shutil.copytree(run, tmp_path / run.name, symlinks=True)


def _add(run, db, *args: str, ok: bool = True):
    r = bench("history", "add", str(run), "--cluster", CLUSTER, "--db", db, *args, check=False)
    assert r.returncode == (0 if ok else 2), r.describe()
    return r


def _listed(db, *args: str) -> tuple[dict[tuple[str, str], list[str]], str]:
    """history predictions' table, (key, metric) -> the row's cells in its order, a cell that
    rich wrapped onto the lines below joined again; and the whole output."""
    r = bench("history", "predictions", "--cluster", CLUSTER, "--db", db, *args)
    assert r.returncode == 0, r.describe()
    rows: list[list[str]] = []
    for line in r.stdout.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0]:
            rows.append(cells)
        else:  # the rest of the row above
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
    return {(cells[1], cells[2]): cells for cells in rows}, r.stdout


def _expected(predicting, later) -> dict[tuple[str, str], tuple[float, float | None, float | None, float]]:
    """(key, metric) -> (predicted, low, high, measured) of what the later run measured at 4
    nodes, worked from predict.json and the later run's summary."""
    result = json.loads((predicting / "predict.json").read_text())
    b = pd.read_parquet(later / "summary.parquet")
    out = {}
    for row in result["collectives"]:
        (p,) = [p for p in row["predictions"] if p["nodes"] == 4]
        m = b[(b["workload"] == "allreduce") & (b["nodes"] == 4) & (b["size_bytes"] == row["size_bytes"])]
        size = f"{row['size_bytes'] >> 20}M" if row["size_bytes"] >= 1 << 20 else f"{row['size_bytes'] >> 10}K"
        key = f"allreduce all_reduce {size}, 4x1, torchrun, default"
        out[key, "busbw_gbps"] = (p["busbw_gbps"], p["busbw_low_gbps"], p["busbw_high_gbps"], m["busbw_gbps"].median())
    (train,) = result["training"]
    (p,) = [p for p in train["predictions"] if p["nodes"] == 4]
    m = b[(b["workload"] == "synthetic") & (b["nodes"] == 4)]
    key = "synthetic weak, 4x1, torchrun, default"
    out[key, "step_time_ms"] = (p["step_time_ms"], p["step_low_ms"], p["step_high_ms"], m["step_time_ms"].median())
    out[key, "images_per_s_per_gpu"] = (
        p["per_gpu"],
        p["per_gpu_low"],
        p["per_gpu_high"],
        m["images_per_s_per_gpu"].median(),
    )
    return out


def _number(cell: str) -> float | None:
    return None if cell == "-" else float(cell)


def test_a_later_run_measures_what_was_predicted_of_its_node_counts(pair, history_at):
    a, b = pair
    r = _add(a, history_at, "--new-cluster", "--create")
    # 3 sizes of the all-reduce and 2 figures of the training run, each at 4 and 8 nodes
    assert "kept its 10 predictions" in r.stdout, r.stdout
    r = _add(b, history_at)
    assert "measured 5 stored predictions" in r.stdout, r.stdout
    rows, out = _listed(history_at)
    expected = _expected(a, b)
    assert set(rows) == set(expected), out
    for (key, metric), (value, low, high, measured) in expected.items():
        cells = rows[key, metric]
        assert cells[0] == "1" and cells[5] == "2", out  # predicted by run 1, measured by run 2
        assert _number(cells[3]) == pytest.approx(value, rel=1e-3)
        assert _number(cells[6]) == pytest.approx(measured, rel=1e-3)
        assert cells[7] == f"{value / measured - 1:+.1%}", out
        inside = (low is None or low <= measured) and (high is None or measured <= high)
        assert cells[8] == ("yes" if inside else "NO"), out
    # per metric: how many were measured, and the median of their errors
    busbw = [abs(v / m - 1) for (_, metric), (v, _, _, m) in expected.items() if metric == "busbw_gbps"]
    assert f"busbw_gbps: 3 of 6 predictions measured, median |error| {statistics.median(busbw):.1%}" in out, out
    assert "5 not measured by a later run yet (--all lists them)" in out, out
    every, out = _listed(history_at, "--all")
    assert len(every) == 10 and all(every[k][5:] == ["-"] * 4 for k in every if ", 8x1," in k[0]), out


def test_predictions_follow_their_runs_when_added_out_of_order_removed_and_copied(pair, tmp_path):
    db = str(tmp_path / "h.sqlite")
    a, b = pair
    _add(b, db, "--new-cluster", "--create")
    r = _add(a, db)  # ran before b, added after it: b measures it all the same
    assert "kept its 10 predictions" in r.stdout and "measured 5 stored predictions" in r.stdout, r.stdout
    before, _ = _listed(db)
    assert len(before) == 5
    bench("history", "remove", "1", "--db", db)  # b: what it measured is unmeasured again
    rows, out = _listed(db)
    assert not rows and "busbw_gbps: 0 of 6 predictions measured" in out, out
    r = _add(b, db)
    assert "measured 5 stored predictions" in r.stdout, r.stdout
    after, _ = _listed(db)
    assert {k: v[3:5] + v[6:] for k, v in after.items()} == {k: v[3:5] + v[6:] for k, v in before.items()}
    copied = str(tmp_path / "copy.sqlite")
    r = bench("history", "copy", db, copied)
    assert "predictions 10" in r.stdout, r.stdout
    there, _ = _listed(copied)  # the copy's ids are its own; the figures and who measured them stay
    assert {k: v[3:5] + v[6:] for k, v in there.items()} == {k: v[3:5] + v[6:] for k, v in after.items()}


def test_a_run_of_other_parameters_does_not_measure_a_prediction(pair, tmp_path):
    """The training predictions made of a batch of 16 images a rank: a run of 8 measures none."""
    db = str(tmp_path / "h.sqlite")
    a = _copy(pair[0], tmp_path)
    result = json.loads((a / "predict.json").read_text())
    (train,) = result["training"]
    train["params"] = train["params"].replace('"batch_size":8', '"batch_size":16')
    assert '"batch_size":16' in train["params"]
    (a / "predict.json").write_text(json.dumps(result))
    _add(a, db, "--new-cluster", "--create")
    r = _add(pair[1], db)
    assert "measured 3 stored predictions" in r.stdout, r.stdout  # the all-reduce's alone
    rows, _ = _listed(db)
    assert {metric for _, metric in rows} == {"busbw_gbps"}


def test_a_what_if_is_not_kept_and_one_added_since_is(pair, tmp_path):
    db = str(tmp_path / "h.sqlite")
    a = _copy(pair[0], tmp_path)
    what_if = ("--set", "network_gbps_per_node=0.2:0.4", "--set", "nics_per_node=1:1")
    bench("predict", str(a), "--nodes", "4,8", "--out", str(a / "predict.json"), *what_if)
    r = _add(a, db, "--new-cluster", "--create")
    assert "predicts other hardware (bench predict --set): not kept" in r.stdout and "kept its" not in r.stdout
    r = bench("predict", str(a), "--nodes", "8", "--out", str(a / "predict.json"))
    r = _add(a, db)  # the same run: nothing else is added, and the predictions made since are kept
    assert "nothing added" in r.stdout and "kept its 5 predictions" in r.stdout, r.stdout
    r = _add(a, db)
    assert "kept its" not in r.stdout, r.stdout  # once


@pytest.mark.parametrize(
    "change, words",
    [
        (
            lambda d: d.update(measured_nodes=[1, 2, 3]),
            "made from runs of 1, 2, 3 nodes, and this run measured 1, 2, 3, 4",
        ),
        (lambda d: d["collectives"][0].update(size_bytes="4M"), "has size_bytes '4M' where a whole number was"),
        (lambda d: d["training"][0]["predictions"][0].update(step_time_ms="fast"), "has step_time_ms 'fast'"),
        (lambda d: d["training"][0].pop("params"), "has no params (text or null)"),
        (lambda d: d["collectives"][0].update(launcher="a\nb"), "has launcher 'a\\nb' where a name was expected"),
        (lambda d: d.update(training={}), "has no list of objects 'training'"),
    ],
)
def test_a_predict_json_not_of_this_run_is_refused_and_nothing_is_added(pair, tmp_path, change, words):
    db = str(tmp_path / "h.sqlite")
    a = _copy(pair[0], tmp_path)
    result = json.loads((a / "predict.json").read_text())
    change(result)
    (a / "predict.json").write_text(json.dumps(result))
    r = _add(a, db, "--new-cluster", "--create", ok=False)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(a / "predict.json") in lines[0] and words in lines[0], r.stderr
    assert "Traceback" not in r.stderr and not r.stdout.strip()
    assert not (tmp_path / "h.sqlite").exists()  # refused before the history is created


def test_a_predict_json_that_is_not_json_is_refused(pair, tmp_path):
    a = _copy(pair[0], tmp_path)
    (a / "predict.json").write_text("{" + "x" * 10)
    r = _add(a, str(tmp_path / "h.sqlite"), "--new-cluster", "--create", ok=False)
    assert re.search(r"predict\.json cannot be read as JSON", r.stderr) and len(r.stderr.splitlines()) == 1, r.stderr


def _profile(tmp_path):
    """The testbed's profile under the cluster name the history knows."""
    text = (SWEEPS / "clusters" / "testbed.yaml").read_text().replace("name: testbed", f"name: {CLUSTER}")
    (tmp_path / "tb.yaml").write_text(text)
    return tmp_path / "tb.yaml"


def _cost_line(tmp_path, db, *sets: str) -> str:
    """The cost estimate's second line of a Slurm dry run of the scaling run's sweep on 8 nodes."""
    args = ("--set", "nodes=[8]", "--set", "max_nodes=8", "--set", "gpus_per_node=[1]", "--set", "launchers=[torchrun]")
    args += ("--set", "workloads.allreduce=false", "--set", "workloads.real=false")
    args += ("--set", "workloads.synthetic.scaling=[weak]", "--set", "workloads.synthetic.image_size=32", *sets)
    out = tmp_path / f"dry{len(list(tmp_path.glob('dry*')))}"
    r = bench(
        "sweep", "sweeps/local.yaml", "--executor", "slurm", "--cluster", str(_profile(tmp_path)), "--dry-run",
        "--db", db, "--out", str(out), *args,
    )  # fmt: skip
    (line,) = [x for x in r.stdout.splitlines() if "estimated from the workloads' step counts" in x]
    return line + "\n" + r.stdout


def test_a_sweeps_cost_takes_the_clusters_prediction_at_its_node_count(pair, tmp_path):
    db = str(tmp_path / "h.sqlite")
    a, b = pair
    _add(a, db, "--new-cluster", "--create")
    (train,) = json.loads((a / "predict.json").read_text())["training"]
    (at8,) = [p for p in train["predictions"] if p["nodes"] == 8]
    line = _cost_line(tmp_path, db)
    rate = (
        f"{at8['per_gpu']:,.0f} img/s per CPU rank of one thread (predicted at 8 nodes by run 1 of cluster {CLUSTER})"
    )
    assert f"resnet18 at 32 px, {rate}" in line, line
    # a batch of 16 a rank was never predicted: the default rate
    line = _cost_line(tmp_path, db, "--set", "workloads.synthetic.batch_size=16")
    assert "predicted" not in line and "per CPU rank of one thread (docs/concepts/cost.md)" in line, line
    # 4 nodes, once a later run has measured them: what it measured
    _add(b, db)
    later = pd.read_parquet(b / "summary.parquet")
    (measured,) = later[(later["workload"] == "synthetic") & (later["nodes"] == 4)]["images_per_s_per_gpu"]
    line = _cost_line(tmp_path, db, "--set", "nodes=[4]")
    assert f"{measured:,.0f} img/s per CPU rank of one thread (measured at 4 nodes, as run 1 predicted" in line, line
    # a history that is not one: said, and the defaults taken
    (tmp_path / "not.sqlite").write_text("not a database")
    line = _cost_line(tmp_path, str(tmp_path / "not.sqlite"))
    assert "note: the cost estimate takes no rate from the history:" in line and "predicted" not in line.splitlines()[0]


def _predicted(run, *args: str, ok: bool = True) -> tuple[dict, str]:
    r = bench("predict", str(run), "--nodes", "8", "--out", str(run / "p.json"), *args, check=False)
    assert r.returncode == (0 if ok else 2), r.describe()
    return (json.loads((run / "p.json").read_text()) if ok else {}), r.stdout + r.stderr


def test_predict_fits_what_the_clusters_history_measured_beyond_the_run(pair, tmp_path):
    """A run of 1-3 nodes whose cluster's history holds a run of 1-4: `bench predict --cluster`
    fits its collectives on 2-4 nodes, the 4 borrowed, and predicts 8 nodes as the 1-4 node run
    does itself. The report fits the same points again, from predict.json alone. Nothing is
    borrowed from a run of another stack or of other parameters; an unknown cluster and a --db
    without --cluster are one line, exit 2."""
    a, _ = pair
    db = str(tmp_path / "h.sqlite")
    _add(a, db, "--new-cluster", "--create")
    small = planned_later(copy_run(a, tmp_path / "small", nodes={1, 2, 3}))
    (small / "predict.json").unlink()
    whole, _ = _predicted(_copy(a, tmp_path / "whole"))
    alone, _ = _predicted(small)
    got, out = _predicted(small, "--cluster", CLUSTER, "--db", db)

    assert got["measured_nodes"] == alone["measured_nodes"] == [1, 2, 3]
    created = json.loads((a / "plan.json").read_text())["created"]
    assert [(r["id"], r["nodes"], r["created"]) for r in got["history"]["runs"]] == [(1, [4], created)]
    head = "from 1, 2, 3 node(s) measured to 8 (95% prediction intervals; docs/concepts/predict.md)"
    assert f"{head}\nfrom the history ({db}, cluster {CLUSTER}): run 1 ({created[:10]}) at 4 nodes\n" in out, out
    assert len(got["history"]["rows"]) == 3 and {r["nodes"] for r in got["history"]["rows"]} == {4}
    assert len(got["collectives"]) == len(whole["collectives"]) == 3
    for mine, theirs, own in zip(got["collectives"], whole["collectives"], alone["collectives"], strict=True):
        assert mine["fitted_nodes"] == theirs["fitted_nodes"] == [2, 3, 4] and own["fitted_nodes"] == [2, 3]
        (p,), (q,) = mine["predictions"], theirs["predictions"]
        assert p == pytest.approx(q, rel=1e-9) and mine["validation"] == pytest.approx(theirs["validation"], rel=1e-9)
    # training is fitted on the run's own nodes: the history keeps no step breakdown
    assert got["training"][0]["fitted_nodes"] == alone["training"][0]["fitted_nodes"]

    (small / "p.json").rename(small / "predict.json")
    bench("report", str(small))
    report = (small / "report.html").read_text()
    (line,) = [x for x in out.splitlines() if x.startswith("  all_reduce world g1 torchrun default 4M: 8 nodes ")]
    assert f"from the history ({db}, cluster {CLUSTER}): run 1" in report and line in report, (line, out)

    # the run itself in the history changes nothing: 4 is still run a's
    _add(small, db)
    again, _ = _predicted(small, "--cluster", CLUSTER, "--db", db)
    assert [r["nodes"] for r in again["history"]["runs"]] == [[4]]
    # lending nothing: a run of another stack (planned for a profile's partition), and a run of
    # other parameters (the all-reduce's op)
    other = str(tmp_path / "other.sqlite")
    moved = planned_later(_copy(a, tmp_path / "moved"), "1")
    plan = json.loads((moved / "plan.json").read_text())
    plan["cluster"] = {"name": CLUSTER, "partition": "other"}
    (moved / "plan.json").write_text(json.dumps(plan))
    _add(moved, other, "--new-cluster", "--create")
    got, out = _predicted(small, "--cluster", CLUSTER, "--db", other)
    assert got["history"]["runs"] == [] and got["collectives"][0]["fitted_nodes"] == [2, 3]
    assert f"cluster {CLUSTER}): nothing: none of the 1 runs of cluster {CLUSTER} ran on this run's stack" in out, out
    maximum = planned_later(_copy(a, tmp_path / "maximum"), "01")
    table = pq.read_table(maximum / "summary.parquet")
    params = pa.array([p.replace('"op":"sum"', '"op":"max"') for p in table.column("params").to_pylist()])
    pq.write_table(table.set_column(table.column_names.index("params"), "params", params), maximum / "summary.parquet")
    _add(maximum, other)
    got, out = _predicted(small, "--cluster", CLUSTER, "--db", other)
    assert got["history"]["runs"] == [] and got["collectives"][0]["fitted_nodes"] == [2, 3]
    assert "nothing: no run of the 2 of cluster tb on this run's stack measured its collectives, with its" in out, out
    for args, words in ((("--cluster", "nosuch", "--db", db), "nosuch"), (("--db", db), "--db: give --cluster too")):
        _, out = _predicted(small, *args, ok=False)
        assert words in out and len(out.strip().splitlines()) == 1, out
