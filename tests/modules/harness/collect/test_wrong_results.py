"""A collective whose output check finds a wrong element fails, as nccl-tests fails it: the ranks
exit 1 after writing their result, the job fails, its rows are WRONG_RESULTS, and regress fails
each such key naming "wrong results" (docs/reference/sources.md, "The output check"). The wrong elements
come from tests/fakes/wrong (rank 1 adds 1 to an element of every all_reduce); the ranks, gloo
and the check are real."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from conftest import ROOT, SWEEPS, bench

FAKE = str(ROOT / "tests" / "fakes" / "wrong")
SMALL = (
    "--set", "nodes=[2]", "--set", "gpus_per_node=[1]", "--set", "workloads.allreduce.min_bytes=64K",
    "--set", "workloads.allreduce.max_bytes=256K", "--set", "workloads.allreduce.collectives=[all_reduce]",
    "--set", "workloads.allreduce.link_bytes=0", "--set", "workloads.synthetic=false", "--set", "workloads.real=false",
)  # fmt: skip


def corrupting() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": FAKE}


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """Two nights of one 2-node all-reduce job: a right one, then one whose rank 1 corrupts."""
    root = tmp_path_factory.mktemp("wrong")
    right, wrong = root / "right", root / "wrong"
    bench("sweep", str(SWEEPS / "local.yaml"), "--executor", "local", "--out", str(right), *SMALL)
    r = bench("sweep", str(SWEEPS / "local.yaml"), "--executor", "local", "--out", str(wrong), *SMALL,
              check=False, env=corrupting())  # fmt: skip
    assert r.returncode == 1, r.describe()
    return right, wrong


def test_bench_run_says_wrong_results_in_one_line_and_exits_1(tmp_path):
    out = tmp_path / "out.json"
    args = ("run", "allreduce", "--nproc", "2", "-b", "64K", "-e", "128K", "-n", "2", "-w", "1", "--link-bytes", "0")
    r = bench(*args, "--json", str(out), check=False, env=corrupting(), cwd=tmp_path)
    # each size: element 0 of rank 1's output, in place and out of place
    assert r.returncode == 1, r.describe()
    assert r.stderr.strip().splitlines() == [
        "bench run allreduce: wrong results: 4 elements failed the output check, all_reduce (world) at 2 sizes"
    ], r.stderr
    assert "# Out of bounds values : 4 FAILED" in r.stdout, r.stdout
    rows = json.loads(out.read_text())["rows"]  # the result is written all the same
    assert [(row["wrong"], row["oop_wrong"]) for row in rows] == [(1, 1), (1, 1)]
    r = bench(*args, "--json", str(out), cwd=tmp_path)
    assert "# Out of bounds values : 0 OK" in r.stdout and not r.stderr.strip(), r.describe()


def test_a_night_with_wrong_results_fails_its_job_rows_and_gate(nights, tmp_path):
    right, wrong = nights
    job = json.loads((wrong / "jobs.json").read_text())["jobs"]
    assert [j["state"] for j in job.values()] == ["FAILED"], job
    summary = pd.read_csv(wrong / "summary.csv")
    assert summary["status"].tolist() == ["WRONG_RESULTS", "WRONG_RESULTS"], summary
    assert summary["reason"].tolist() == ["wrong results: 2 elements failed the output check"] * 2
    assert pd.read_csv(right / "summary.csv")["status"].tolist() == ["COMPLETED", "COMPLETED"]

    db = tmp_path / "h.sqlite"
    bench("history", "add", str(right), "--create", "--cluster", "lab", "--db", str(db))
    out = tmp_path / "gate"
    r = bench("regress", str(wrong), "--cluster", "lab", "--db", str(db), "--out", str(out), "--must-catch", "100%",
              check=False)  # fmt: skip
    assert r.returncode == 1 and "2 failed keys" in r.stderr, r.describe()
    bands = json.loads((out / "gate.json").read_text())["bands"]
    assert bands["verdict"] == ["failed", "failed"], bands
    report = (out / "report.md").read_text()
    assert report.count("WRONG_RESULTS in wrong: wrong results: 2 elements failed the output check") == 2, report
    assert "wrong results" in (out / "junit.xml").read_text()
    r = bench("compare", str(right), str(wrong))  # a report, not a gate: exit 0
    assert "wrong results" in r.stdout.replace("\n", " ").replace("│", " "), r.describe()


def test_the_job_log_keeps_nccl_tests_footer(nights):
    right, wrong = nights
    assert "# Out of bounds values : 4 FAILED" in "".join(p.read_text() for p in wrong.glob("jobs/*/log.txt"))
    assert "# Out of bounds values : 0 OK" in "".join(p.read_text() for p in right.glob("jobs/*/log.txt"))
