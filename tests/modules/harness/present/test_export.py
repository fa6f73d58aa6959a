"""`bench export`: a real run's figures in OpenMetrics (node_exporter's textfile collector) and in
InfluxDB's line protocol, each read back by a real parser of its format: prometheus_client's
OpenMetrics and Prometheus text parsers, and line-protocol-parser."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math

import pandas as pd
import pytest
from conftest import bench, copy_run, planned_later, separating
from line_protocol_parser import parse_line
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as prometheus_families

from harness.analysis.sides import load_run
from harness.cli import main
from harness.present import export

pytestmark = pytest.mark.slow  # the session's real local run


def _expected(run) -> dict[tuple, float]:
    """{(metric, size or '', nodes, workload): value} straight from the run's keys."""
    rows = load_run(run).rows
    out = {}
    for r in rows.to_dict("records"):
        size = str(int(r["size_bytes"])) if r["size_bytes"] else ""
        metric = "busbw_gbps" if r["workload"] == "allreduce" else "images_per_s"
        if metric == "busbw_gbps" and r["nodes"] * r["gpus_per_node"] == 1:
            continue
        out[(metric, size, str(r["nodes"]), r["workload"])] = float(r[metric])
    return out


def test_openmetrics_is_read_back_by_both_parsers_with_every_key(real_run, tmp_path):
    out = tmp_path / "bench.prom"
    bench("export", str(real_run), "--format", "openmetrics", "--out", str(out))
    text = out.read_text()
    assert text.endswith("# EOF\n") and " 1700" not in text  # no timestamps: the textfile collector refuses them
    for parse in (openmetrics_families, prometheus_families):
        families = {f.name: f for f in parse(text)}
        assert {"bench_busbw_gbps", "bench_images_per_s", "bench_completed"} <= set(families)
        assert all(f.type == "gauge" for f in families.values())
        got = {}
        for name in ("bench_busbw_gbps", "bench_images_per_s"):
            for s in families[name].samples:
                # bounded labels: the run's name is none of them, or every night starts new series
                assert s.labels["cluster"] == "local" and "run" not in s.labels
                key = (
                    name.removeprefix("bench_"),
                    s.labels.get("size_bytes", ""),
                    s.labels["nodes"],
                    s.labels["workload"],
                )
                got[key] = s.value
        expected = _expected(real_run)
        assert got.keys() == expected.keys() and all(math.isclose(got[k], expected[k], rel_tol=1e-12) for k in got)
        # 1-node all-reduce: no busbw (one rank moves nothing), yet it completed
        completed = families["bench_completed"].samples
        assert len(completed) == len(load_run(real_run).rows) and {s.value for s in completed} == {1.0}
        assert any(s.labels["nodes"] == "1" and s.labels["workload"] == "allreduce" for s in completed)


def test_openmetrics_carries_the_run_s_start_and_its_verdict(real_run, tmp_path):
    """The run's start as a value (the textfile collector refuses sample timestamps), the verdict
    of the regress that judged it (0, 1 or 3, as its exit status), and busbw's HELP, which names
    every collective's bus factor, not all-reduce's alone."""
    created = dt.datetime.fromisoformat(json.loads((real_run / "plan.json").read_text())["created"])
    db = tmp_path / "history.sqlite"
    bench("history", "add", str(real_run), "--create", "--cluster", "lab", "--db", str(db))
    slow = planned_later(copy_run(real_run, tmp_path / "slow", time_factor=separating(real_run)))
    judged = bench("regress", str(slow), "--cluster", "lab", "--db", str(db), check=False)
    assert judged.returncode == 1, judged.describe()

    def families(run):
        text = bench("export", str(run), "--format", "openmetrics").stdout
        return {f.name: f for f in openmetrics_families(text)}

    plain, judged_run = families(real_run), families(slow)
    (start,) = plain["bench_run_start_timestamp_seconds"].samples
    assert start.value == created.timestamp() and start.labels == {"cluster": "local"}
    assert "bench_verdict" not in plain  # never judged: no verdict, rather than a made-up 0
    assert [s.value for s in judged_run["bench_verdict"].samples] == [1.0]
    assert "collective label names (2(n-1)/n for all_reduce" in plain["bench_busbw_gbps"].documentation
    assert export.regress_verdict('<testsuites name="bench regress" tests="4" failures="0" errors="2"') == 3
    assert export.regress_verdict('<testsuites name="other" tests="4" failures="1" errors="0"') is None


def test_influx_lines_carry_the_run_s_time_and_every_figure(real_run, tmp_path):
    r = bench("export", str(real_run), "--format", "influx", "--cluster", "lab-a")
    lines = [parse_line(line) for line in r.stdout.splitlines()]
    rows = load_run(real_run).rows
    assert len(lines) == len(rows)
    created = dt.datetime.fromisoformat(json.loads((real_run / "plan.json").read_text())["created"])
    assert {p["time"] for p in lines} == {int(created.timestamp()) * 10**9}
    assert all(p["measurement"] == "bench" and p["tags"]["cluster"] == "lab-a" for p in lines)
    expected = _expected(real_run)
    got = {
        (m, p["tags"].get("size_bytes", ""), p["tags"]["nodes"], p["tags"]["workload"]): p["fields"][m]
        for p in lines
        for m in ("busbw_gbps", "images_per_s")
        if m in p["fields"]
    }
    assert got.keys() == expected.keys() and all(math.isclose(got[k], expected[k], rel_tol=1e-12) for k in got)
    assert all(p["fields"]["completed"] is True for p in lines)


def test_a_run_name_that_needs_escaping_comes_back_as_it_was(real_run, tmp_path):
    """A run directory named with a blank, a comma, '=', a quote and a backslash, at the end too:
    the line protocol's `run` field reads back unchanged; OpenMetrics has no run label."""
    for name in ('run, "q" =x\\y', "run\\"):
        run = copy_run(real_run, tmp_path / name)
        lp = bench("export", str(run), "--format", "influx").stdout
        lines = [parse_line(line) for line in lp.splitlines()]
        assert {p["fields"]["run"] for p in lines} == {name} and all("run" not in p["tags"] for p in lines)
        om = bench("export", str(run), "--format", "openmetrics").stdout
        assert name not in om and all("run" not in s.labels for f in openmetrics_families(om) for s in f.samples)


def test_a_key_that_did_not_complete_is_exported_as_not_completed(real_run):
    side = load_run(real_run)
    failed = side.rows.iloc[:1][["workload", "collective", "scaling", "nodes", "gpus_per_node", "launcher"]].copy()
    failed = failed.assign(
        nccl_config="ib", size_bytes=side.rows.iloc[0]["size_bytes"], status="FAILED", reason="x", job="j"
    )
    side = dataclasses.replace(side, others=pd.DataFrame(failed))
    families = {f.name: f for f in openmetrics_families(export.openmetrics(side, {"cluster": "c", "run": "r"}))}
    zero = [s for s in families["bench_completed"].samples if s.value == 0]
    assert len(zero) == 1 and zero[0].labels["nccl_config"] == "ib"
    assert not any(s.labels.get("nccl_config") == "ib" for s in families.get("bench_busbw_gbps", []).samples)
    lines = [parse_line(line) for line in export.influx(side, {"cluster": "c"}, dt.datetime.now()).splitlines()]
    assert [p["fields"] for p in lines if p["tags"]["nccl_config"] == "ib"] == [{"completed": False}]


def test_bad_export_arguments_exit_2_with_one_line(real_run, tmp_path):
    for args, words in (
        (["--format", "csv"], "invalid choice: 'csv'"),
        (["--format", "influx", "--cluster", "a b"], "--cluster 'a b': not a valid name"),
        (["--format", "influx", "--out", str(tmp_path)], "--out"),
    ):
        r = bench("export", str(real_run), *args, check=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.describe()
    r = bench("export", str(tmp_path / "nothing"), "--format", "influx", check=False)
    assert r.returncode == 2 and "no such run directory" in r.stderr


@pytest.mark.parametrize("breaks", ["\n", "\r", "\x1b[2J", "\u2028"])
def test_a_run_name_with_a_line_break_is_refused_in_the_line_protocol(real_run, tmp_path, capsys, breaks):
    """A run directory whose name holds a line break would forge a line: refused in one line naming
    it, with exit 2 and nothing written. OpenMetrics carries no run name, and is written."""
    run = copy_run(real_run, tmp_path / f"run{breaks}x")
    out = tmp_path / "out.influx"
    status = main(["export", str(run), "--format", "influx", "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and "label run=" in err, err
    assert "control character" in err and not out.exists()
    assert main(["export", str(run), "--format", "openmetrics", "--out", str(tmp_path / "out.prom")]) == 0


@pytest.mark.parametrize("created", ["9999-12-31T00:00:00+00:00", "1600-01-01T00:00:00+00:00"])
def test_a_start_time_influx_cannot_store_is_refused(real_run, tmp_path, capsys, created):
    run = copy_run(real_run, tmp_path / "run")
    plan = json.loads((run / "plan.json").read_text())
    (run / "plan.json").write_text(json.dumps({**plan, "created": created}))
    status = main(["export", str(run), "--format", "influx"])
    out, err = capsys.readouterr()
    assert status == 2 and not out and "outside the times InfluxDB can store" in err, err
    assert main(["export", str(run), "--format", "openmetrics"]) == 0  # no timestamps there
