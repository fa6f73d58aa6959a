"""`bench regress`'s outputs for CI: the exit status, report.md, junit.xml and gate.json of a
real local run against a history."""

from __future__ import annotations

import json
import re
import shutil
import sys
import xml.etree.ElementTree as ET

import pandas as pd
import pytest
from conftest import bench, copy_run, planned_later, regress, run, separating

from harness.analysis.compare import BY_RUNS, BY_SAMPLES, FAILED, FASTER, REFERENCE, SAME, SLOWER, UNJUDGED
from harness.present.regress import _fmt
from harness.present.tables import intervals


def test_regress_outputs_for_ci(real_run, tmp_path):
    db = tmp_path / "history.sqlite"
    base = copy_run(real_run, tmp_path / "base", time_factor=1 / separating(real_run))  # a much faster baseline
    planned_later(base, "0")
    bench("history", "add", str(base), "--create", "--cluster", "lab", "--label", "good", "--db", str(db))
    out = tmp_path / "out"
    r = regress(real_run, db, out, "--baseline", "label:good")
    assert (
        r.returncode == 1
        and ("REGRESSION: 5 regressions, 0 failed keys, 0 cannot judge, 0 improvements, 0 unchanged of 5") in r.stderr
    ), r.describe()
    report = (out / "report.md").read_text()
    assert (
        report.index("## Slower (regressions): 5")
        < report.index("## Faster (improvements): 0")
        < report.index("## No significant change: 0")
    )
    # one test case per configuration: the 2-node all-reduce curve (3 sizes) and two training rows
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    assert suite.get("tests") == "3" and suite.get("failures") == "3"
    curve = suite.find("testcase[@name='busbw_gbps[allreduce all_reduce, 2x1, torchrun, default]']")
    assert curve.find("failure").get("type") == "regression"
    assert re.fullmatch(r"regression: (\d+[KM] -\d+\.\d%(, )?){3}", curve.find("failure").get("message"))
    # each size a line: its verdict, A -> B, and B/A with the interval it was judged by (one
    # run of A: the samples' ratio and CI), and what it catches (at least the provisional margin)
    size_line = r"\d+[KM]: slower, busbw GB/s [\d.]+ -> [\d.]+, B/A \(Hodges-Lehmann of the samples\) 0\.\d{3}, "
    size_line += r"95% CI \[0\.\d{3}, 0\.\d{3}\], catches ≥ (4\d|[5-9]\d)%"
    lines = curve.find("failure").text.splitlines()
    assert len(lines) == 3 and all(re.fullmatch(size_line, line) for line in lines), lines
    assert not (out / "benchmark.json").exists()  # opt-in
    r = regress(real_run, db, out, "--baseline", "label:good", "--benchmark-json")
    doc = json.loads((out / "benchmark.json").read_text())
    assert {b["name"] for b in doc["benchmarks"]} >= {
        "allreduce all_reduce 1M, 2x1, torchrun, default",
        "synthetic weak, 1x1, torchrun, default",
    }
    one = next(b for b in doc["benchmarks"] if b["name"] == "allreduce all_reduce 1M, 2x1, torchrun, default")
    assert one["param"] == "allreduce all_reduce, 2x1, torchrun, default"
    assert one["fullname"] == "bench::time_us[allreduce all_reduce 1M, 2x1, torchrun, default]"
    assert one["stats"]["rounds"] == 10 and 0 < one["stats"]["min"] <= one["stats"]["median"] <= one["stats"]["max"]
    # pytest-benchmark itself reads it
    shutil.copy(out / "benchmark.json", tmp_path / "0001_run.json")
    listed = run(
        [
            sys.executable,
            "-m",
            "pytest_benchmark",
            "compare",
            str(tmp_path / "0001_run.json"),
            "--columns",
            "min,median,rounds",
        ]
    )
    assert "allreduce all_reduce 1M, 2x1, torchrun, default" in listed.stdout, listed.describe()
    for how in ("last", "best", "median:3", None):
        again = regress(real_run, db, tmp_path / str(how).replace(":", ""), *(("--baseline", how) if how else ()))
        assert again.returncode == 1, again.describe()
        if how is None:  # one history run: fewer than the default median:5 asks, so each key is judged within it
            assert "5 of 5 keys have fewer than 5 usable runs in the history" in again.stdout, again.describe()


def test_a_figure_that_is_not_finite_reads_as_a_dash():
    assert _fmt([1.5, float("nan"), float("inf"), -float("inf"), 12345.0], "%.4g") == [
        "1.5",
        "-",
        "-",
        "-",
        "1.234e+04",
    ]


def test_each_row_shows_the_interval_it_was_judged_by():
    """The band for a key judged between runs or against a reference, the samples' CI within a
    run, and '-' for a failed key (whatever its columns hold) or a CI with an end missing."""
    nan = float("nan")
    t = pd.DataFrame(
        {
            "verdict": [FAILED, SLOWER, SAME, FASTER, SAME, UNJUDGED],
            "test": [BY_SAMPLES, BY_RUNS, REFERENCE, BY_SAMPLES, BY_SAMPLES, None],
            "band_low": [0.9, 0.81234, 0.8, nan, nan, nan],
            "band_high": [1.1, 1.2, 1.25, nan, nan, nan],
            "ci_low": [0.5, nan, nan, 1.0625, 0.9, nan],
            "ci_high": [0.6, nan, nan, 1.5, nan, nan],
        }
    )
    assert intervals(t) == ["-", "band [0.812, 1.200]", "band [0.800, 1.250]", "[1.062, 1.500]", "-", "-"]
    assert intervals(t.drop(columns=["ci_low", "ci_high"]))[3] == "-"  # a table without the CI


def test_junit_lines_keep_xml_s_special_characters_as_text():
    """A size's line carries its note, which can quote anything a job printed: junit.xml holds it
    escaped, and an XML reader gets the very text back, with the line's arrow."""
    from harness.present.regress import _testcases

    note = 'job 3 FAILED: <exit 1> & "bad" \x07'
    t = pd.DataFrame(
        {
            "metric": ["busbw_gbps"] * 2,
            "workload": ["allreduce"] * 2,
            "collective": ["all_reduce"] * 2,
            "group": ["world"] * 2,
            "scaling": [""] * 2,
            "nodes": [2, 2],
            "gpus_per_node": [1, 1],
            "launcher": ["torchrun"] * 2,
            "nccl_config": ["default"] * 2,
            "size_bytes": [1024, 2048],
            "verdict": [FAILED, SAME],
            "test": [None, BY_RUNS],
            "a": [2.0, 3.0],
            "b": [float("nan"), 3.3],
            "ratio": [float("nan"), 1.1],
            "ci_low": [float("nan")] * 2,
            "ci_high": [float("nan")] * 2,
            "band_low": [float("nan"), 0.9],
            "band_high": [float("nan"), 1.2],
            "change": [-float("inf"), 0.1],
            "note": [note, None],
        }
    )
    cases, kinds = _testcases(t, strict=True)
    assert kinds == ["failure"]
    failure = ET.fromstring(cases[0]).find("failure")
    read = note.replace("\x07", "\ufffd")  # XML 1.0 cannot hold BEL even escaped
    assert failure.text.splitlines() == [
        f"1K: failed, busbw GB/s 2 -> -, B/A (Hodges-Lehmann of the samples) -, 95% CI [-, -]; {read}",
        "2K: no significant change, busbw GB/s 3 -> 3.3, B/A 1.100, band [0.900, 1.200]",
    ]
    assert failure.get("message") == f"failed: 1K: {read}"


def test_junit_cases_made_in_two_shares_are_those_made_whole():
    """write_all has a worker make the first test cases and makes the rest itself: the two shares
    together are the cases and kinds made whole, in order, each case in one share alone, though
    a comparison's rows (worst first) interleave its cases."""
    import numpy as np

    from harness.present.regress import _configurations, _testcases, _worker_fraction, _worker_share

    rng = np.random.default_rng(3)
    n = 12 * 5  # twelve configurations of five sizes, in an order that mixes them
    nodes, size = rng.permutation(np.repeat(np.arange(1, 13), 5)), rng.permutation(n)
    t = pd.DataFrame(
        {
            "metric": ["busbw_gbps"] * n, "workload": ["allreduce"] * n, "collective": ["all_reduce"] * n,
            "group": ["world"] * n, "scaling": [""] * n, "nodes": nodes, "gpus_per_node": [8] * n,
            "launcher": ["torchrun"] * n, "nccl_config": ["default"] * n, "size_bytes": 1024 << size,
            "verdict": rng.choice([FAILED, SLOWER, UNJUDGED, FASTER, SAME], n), "test": [BY_RUNS] * n,
            "a": rng.uniform(1, 2, n), "b": rng.uniform(1, 2, n), "ratio": rng.uniform(0.5, 1.5, n),
            "ci_low": [float("nan")] * n, "ci_high": [float("nan")] * n, "band_low": [0.9] * n,
            "band_high": [1.1] * n, "change": rng.uniform(-0.5, 0.5, n), "note": ["why"] * n,
        }
    )  # fmt: skip
    config = _configurations(t)
    theirs = _worker_share(config, 2 / 3)
    assert not set(config[theirs]) & set(config[~theirs])
    assert 0.5 < theirs.mean() <= 2 / 3 + 5 / n
    assert not _worker_share(config, 0.0).any() and _worker_share(config, 1.0).all()
    # the worker makes report.md too: the more keys it lists, the fewer test cases the worker makes
    assert _worker_fraction(t.assign(verdict=SAME)) == pytest.approx(0.655, abs=0.001)
    every = _worker_fraction(t.assign(verdict=SLOWER))
    assert every == pytest.approx(0.207, abs=0.001) and every < _worker_fraction(t) < 0.5
    # what this process prints beside the worker (regress's comparison) leaves the worker more
    assert _worker_fraction(t.assign(verdict=SAME), printed=True) == pytest.approx(0.707, abs=0.001)
    made = _testcases(t, True, config, theirs)
    mine = _testcases(t, True, config, ~theirs)
    whole = _testcases(t, True)
    assert made[0] + mine[0] == whole[0] and made[1] + mine[1] == whole[1] and len(whole[0]) == 12


def _lab_history(real_run, tmp_path):
    """A history whose cluster lab holds one run: real_run's, made much faster."""
    db = tmp_path / "history.sqlite"
    base = copy_run(real_run, tmp_path / "base", time_factor=1 / separating(real_run))
    planned_later(base, "0")
    bench("history", "add", str(base), "--create", "--cluster", "lab", "--db", str(db))
    return db


def test_regress_on_one_core_writes_what_it_writes_with_a_worker(real_run, tmp_path):
    """With two cores the run is loaded and junit.xml made by forked workers
    (harness/run/forked.py); on one core (taskset) each is done in turn, in this process: the same
    report.md, gate.json, junit.xml (but its timestamp) and the same lines."""
    db = _lab_history(real_run, tmp_path)
    args = ["regress", str(real_run), "--cluster", "lab", "--db", str(db), "--must-catch", "100%", "--out"]
    two = bench(*args, str(tmp_path / "two"), check=False)
    one = run(["taskset", "-c", "0", sys.executable, "-m", "harness.cli", *args, str(tmp_path / "one")], check=False)
    assert two.returncode == one.returncode == 1, (two.describe(), one.describe())
    assert two.stdout.replace("/two/", "/one/") == one.stdout and two.stderr == one.stderr
    for name in ("report.md", "gate.json"):
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    stamp = re.compile(r' timestamp="[^"]+"')
    junit = [stamp.sub("", (tmp_path / side / "junit.xml").read_text()) for side in ("two", "one")]
    assert junit[0] == junit[1] and junit[0].count("<testcase ") == 3


def test_a_damaged_run_is_said_before_a_history_without_its_cluster(real_run, tmp_path):
    """The run's tables are read by a worker while the baseline is drawn here: where both are
    wrong, the run's error is the one said, as when one was done after the other."""
    db = _lab_history(real_run, tmp_path)
    bad = copy_run(real_run, tmp_path / "bad", drop="busbw_gbps")  # its footer reads; its columns do not
    out = ["--db", str(db), "--out", str(tmp_path / "r")]
    r = bench("regress", str(bad), "--cluster", "nowhere", *out, check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.describe()
    assert "summary lacks column busbw_gbps" in r.stderr, r.describe()
    r = bench(
        "regress", str(real_run), "--cluster", "nowhere", "--db", str(db), "--out", str(tmp_path / "r"), check=False
    )
    assert r.returncode == 2 and "no run of cluster 'nowhere' to use as baseline" in r.stderr, r.describe()


def test_what_is_printed_beside_the_worker_is_printed_first_and_a_failure_writes_nothing(real_run, tmp_path):
    """write_all does `meanwhile` (regress prints its comparison) beside its worker, before it
    writes anything: a reader gone (BrokenPipeError) ends the worker, and leaves no folder and no
    file; otherwise it is done once and the files are written."""
    from harness.analysis.compare import compare
    from harness.analysis.sides import load_run
    from harness.present.regress import write_all

    cmp = compare(load_run(real_run), load_run(real_run))
    out = tmp_path / "out"

    def gone() -> None:
        raise BrokenPipeError

    with pytest.raises(BrokenPipeError):
        write_all(cmp, out, "regress", "t", meanwhile=gone)
    assert not out.exists()
    printed = []
    paths = write_all(cmp, out, "regress", "t", meanwhile=lambda: printed.append(out.exists()))
    assert printed == [False] and sorted(paths) == ["junit", "report"]
    assert all(p.is_file() for p in paths.values())
