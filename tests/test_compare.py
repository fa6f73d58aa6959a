"""`bench compare`, `bench history`, `bench regress` and `bench report` on a real local run
(gloo ranks), and the bad input each must refuse. The proofs on shaped links are in
test_regress_testbed.py; the statistics are checked here against a brute-force reference."""

from __future__ import annotations

import base64
import contextlib
import csv
import html.parser
import io
import itertools
import json
import math
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import bench, copy_run, planned_later, regress, run, separating
from PIL import Image

from harness import stragglers
from harness.analysis import stats
from harness.analysis.compare import SLOWER, compare
from harness.analysis.sides import load_run
from harness.summary import SUMMARY_VERSION

# --------------------------------------------------------------------------- statistics


def brute_force(a: list[float], b: list[float], z: float = 1.959964) -> tuple[float, float, float, float]:
    """Hodges-Lehmann ratio, its CI and the Mann-Whitney p-value, written out the long way."""
    d = sorted(math.log(x) - math.log(y) for x, y in itertools.product(a, b))
    m, n = len(a), len(b)
    sd = math.sqrt(m * n * (m + n + 1) / 12)
    u = sum(x > y for x, y in itertools.product(a, b)) + 0.5 * sum(x == y for x, y in itertools.product(a, b))
    p = math.erfc(max(abs(u - m * n / 2) - 0.5, 0) / sd / math.sqrt(2))
    k = math.floor(m * n / 2 - z * sd)
    return math.exp(statistics.median(d)), math.exp(d[k]), math.exp(d[m * n - 1 - k]), p


def test_rate_shift_matches_the_brute_force_reference():
    rng = np.random.default_rng(7)
    cases = [
        (rng.lognormal(5, 0.1, 10), rng.lognormal(5.2, 0.1, 10)),  # B slower: ratio ~ 0.82
        (rng.lognormal(5, 0.1, 10), rng.lognormal(5, 0.1, 10)),  # no change
        (rng.lognormal(3, 0.2, 7), rng.lognormal(2.5, 0.2, 12)),  # B faster, unequal counts
        (np.full(5, 100.0), np.full(5, 100.0)),
    ]  # all ties
    width = max(max(len(a), len(b)) for a, b in cases)
    A = np.full((len(cases), width), np.nan)
    B = np.full((len(cases), width), np.nan)
    for i, (a, b) in enumerate(cases):
        A[i, : len(a)], B[i, : len(b)] = a, b
    got = stats.rate_shift(A, B, [len(a) for a, _ in cases], [len(b) for _, b in cases])
    for i, (a, b) in enumerate(cases):
        want = brute_force(list(a), list(b))
        assert (got.ratio[i], got.low[i], got.high[i], got.p_value[i]) == pytest.approx(want, rel=1e-9)
    assert got.p_value[0] < 0.01 and got.high[0] < 1  # slower, significant
    assert got.p_value[1] > 0.05 and got.low[1] < 1 < got.high[1]
    assert got.p_value[2] < 0.01 and got.low[2] > 1  # faster
    assert got.ratio[3] == 1 and got.p_value[3] == 1


def test_rate_shift_leaves_rows_without_samples_undecided():
    got = stats.rate_shift(np.ones((2, 3)), np.ones((2, 3)), [3, 1], [0, 3])
    assert np.isnan(got.p_value).all() and np.isnan(got.ratio).all()


def test_straggler_rule_needs_most_passes_and_three_nodes():
    hosts = ["h1", "h2", "h3", "h4"]
    partners = [[3, 2, 1], [2, 3, 0], [1, 0, 3], [0, 1, 2]]  # the probe's round-robin schedule for 4 ranks

    def links(slow: str, slow_passes: list[int]) -> dict:
        times = [
            [
                [10_000.0 if (slow in (hosts[r], hosts[p]) and it in slow_passes) else 1_000.0 for it in range(4)]
                for p in partners[r]
            ]
            for r in range(4)
        ]
        return {"partners": partners, "time_us": times, "iters": 4}

    named = stragglers.judge("j", hosts, links("h3", [0, 1, 2, 3]))
    assert [s.host for s in named] == ["h3"] and named[0].passes == 4 and named[0].slower == pytest.approx(9)
    assert stragglers.judge("j", hosts, links("h3", [0, 1])) == []  # 2 of 4 passes: not consistent
    two = {"partners": [[1], [0]], "time_us": [[[9e4] * 4], [[9e4] * 4]], "iters": 4}
    assert stragglers.judge("j", ["h1", "h2"], two) == []  # which end is slow? cannot say


def test_a_rank_that_waited_for_its_partners_to_start_is_not_a_straggler():
    """h2's rank left each round's barrier first, so its own clock also ran while it waited for
    its partner to start (1.3 ms on top of the 1 ms exchange); its partners' clocks did not. A
    pair's time is the lesser of its two ends': every node reads 1 ms, nobody is named. The
    slow link of h3 shows on both ends of each of its pairs, and is named."""
    hosts = ["h1", "h2", "h3", "h4"]
    partners = [[3, 2, 1], [2, 3, 0], [1, 0, 3], [0, 1, 2]]
    waited = [[[2_300.0 if r == 1 else 1_000.0] * 4 for _ in partners[r]] for r in range(4)]
    assert stragglers.judge("j", hosts, {"partners": partners, "time_us": waited, "iters": 4}) == []
    slow = [[[3_000.0 if 2 in (r, p) else 1_000.0] * 4 for p in partners[r]] for r in range(4)]
    assert [s.host for s in stragglers.judge("j", hosts, {"partners": partners, "time_us": slow, "iters": 4})] == ["h3"]


def test_pair_schedule_meets_every_pair_once():
    from benchmarks.linkprobe import pair_partner, pair_rounds

    for world in range(2, 10):
        met = set()
        for k in range(pair_rounds(world)):
            partners = [pair_partner(r, k, world) for r in range(world)]
            for r, p in enumerate(partners):
                if p is not None:
                    assert partners[p] == r and p != r
                    met.add(frozenset((r, p)))
        assert met == {frozenset(c) for c in itertools.combinations(range(world), 2)}


# --------------------------------------------------------------------------- a real run


def test_a_run_against_itself_changes_nothing(real_run, tmp_path):
    r = bench(
        "compare",
        str(real_run),
        str(real_run),
        "--csv",
        str(tmp_path / "c.csv"),
        "--markdown",
        str(tmp_path / "c.md"),
        "--plots",
        str(tmp_path / "plots"),
        "--labels",
        "before,after",
    )
    assert "Mann-Whitney" in r.stdout and "0 failed, 0 slower, 0 cannot judge, 0 faster" in r.stdout, r.describe()
    assert "bench compare: after against before" in (tmp_path / "c.md").read_text()  # a side each, named apart
    import pandas as pd

    table = pd.read_csv(tmp_path / "c.csv")
    # 2-node all-reduce at 64K, 256K, 1M (1-node busbw is 0: one rank moves nothing) + 2 training rows
    assert sorted(table["metric"].unique()) == ["busbw_gbps", "images_per_s"]
    assert len(table) == 3 + 2
    assert (table["ratio"] == 1).all() and (table["p_value"] == 1).all()
    assert (table["verdict"] == "no significant change").all()
    assert "## No significant change: 5" in (tmp_path / "c.md").read_text()
    for png in ("compare_busbw.png", "compare_scaling.png"):
        Image.open(tmp_path / "plots" / png).verify()


def test_a_summary_collected_before_groups_and_the_transformer_compares_key_for_key(real_run, tmp_path):
    """A summary of the same layout version written before the `group` column and the
    transformer's columns existed (and its samples without `group`): its collective rows read as
    the world's, its other new columns as null, and it meets today's summary key for key."""
    from harness.summary import TRANSFORMER_COLUMNS

    old = tmp_path / "old"
    shutil.copytree(real_run, old)
    summary = pq.read_table(old / "summary.parquet")
    pq.write_table(summary.drop(["group", *TRANSFORMER_COLUMNS]), old / "summary.parquet")
    samples = pq.read_table(old / "samples.parquet")
    pq.write_table(samples.drop(["group"]), old / "samples.parquet")
    r = bench("compare", str(old), str(real_run), "--csv", str(tmp_path / "c.csv"))
    assert "0 failed, 0 slower, 0 cannot judge, 0 faster, 5 no significant change, of 5 compared" in r.stdout
    side = load_run(old)
    coll = side.rows[side.rows["workload"] == "allreduce"]
    assert set(coll["group"]) == {"world"} and side.rows["tokens_per_s"].isna().all()


def test_a_slower_copy_is_slower_and_worst_first(real_run, tmp_path):
    factor = separating(real_run)
    slow = copy_run(real_run, tmp_path / "slow", time_factor=factor)
    cmp = compare(load_run(real_run), load_run(slow))
    assert set(cmp.table["verdict"]) == {SLOWER}
    assert cmp.table["ratio"].to_numpy() == pytest.approx(1 / factor)
    assert (cmp.table["ci_high"] < 1).all() and (cmp.table["p_value"] < 0.05).all()
    r = bench("compare", str(real_run), str(slow), "--labels", "before,after", "--threshold", "99.99%")
    assert factor < 1e4 and "0 slower, 0 cannot judge, 0 faster, 5 no significant change" in r.stdout, (
        r.describe()
    )  # under threshold
    assert "after against before" in r.stdout


def test_the_ratio_comes_from_the_estimator_its_interval_does(real_run, tmp_path):
    """B's samples a quarter quicker while its summary's figures (from mean times) stay as
    they were: B/A is the samples' Hodges-Lehmann ratio, 1.25, inside its CI, never the
    summary's 1.0 beside an interval that excludes it (compare once printed B/A 1.559 beside
    [1.038, 1.117])."""
    quick = tmp_path / "quick"
    shutil.copytree(real_run, quick)
    samples = pq.read_table(quick / "samples.parquet")
    values = pa.array([[v * 0.8 for v in row] for row in samples.column("values").to_pylist()])
    pq.write_table(
        samples.set_column(samples.column_names.index("values"), "values", values), quick / "samples.parquet"
    )
    cmp = compare(load_run(real_run), load_run(quick))
    within = cmp.table[cmp.table["test"] == "within run"]
    assert len(within) == 5
    assert within["ratio"].to_numpy() == pytest.approx(1.25)
    assert ((within["ci_low"] <= within["ratio"]) & (within["ratio"] <= within["ci_high"])).all()
    assert "B/A the Hodges-Lehmann estimate of the samples' ratio" in cmp.method


def test_keys_in_one_run_only(real_run, tmp_path):
    """A key B lacks is a failed row (absent); a key only B has is listed as new."""
    other = copy_run(real_run, tmp_path / "other")
    summary = pq.read_table(other / "summary.parquet")
    keep = pa.compute.not_equal(summary.column("job"), "n2-g1-torchrun-default")
    pq.write_table(summary.filter(keep), other / "summary.parquet")
    r = bench("compare", str(real_run), str(other))
    assert re.search(r"failed .* allreduce all_reduce 64K, 2x1, torchrun, default .* absent from other", r.stdout), (
        r.describe()
    )
    assert "4 failed, 0 slower" in r.stdout, r.describe()
    back = bench("compare", str(other), str(real_run))
    # one group per state in the other run, each key once: not "(absent in other)" after every key
    assert re.search(
        r"only completed in run: 4 keys: absent in other: allreduce all_reduce 64K, 2x1, torchrun, default; ",
        back.stdout,
    ), back.describe()
    assert back.stdout.count("absent in other") == 1, back.describe()


def test_environment_differences_are_warned(real_run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(real_run, other)
    for path in other.glob("jobs/*/*.json"):
        if ".ranks." in path.name:
            continue
        data = json.loads(path.read_text())
        data["environment"]["torch"] = "2.0.0+cu118"
        data["environment"]["cuda"] = "11.8"
        path.write_text(json.dumps(data))
    bench("collect", str(other))  # collect records the environment in the summary
    r = bench("compare", str(real_run), str(other))
    assert re.search(
        r"warning: The environments differ:\n  torch: \S+ vs 2\.0\.0\+cu118\n  CUDA: \S+ vs 11\.8", r.stdout
    ), r.describe()


def _older_bench(real_run, dst):
    """A copy of `real_run` as a bench before measurement rules were recorded wrote it: no
    `bench` in plan.json, no bench_version or measurement_rules in the results' environments."""
    shutil.copytree(real_run, dst)
    plan = json.loads((dst / "plan.json").read_text())
    del plan["bench"]
    (dst / "plan.json").write_text(json.dumps(plan))
    planned_later(dst)
    for path in dst.glob("jobs/*/*.json"):
        data = json.loads(path.read_text())
        if "environment" in data:
            del data["environment"]["bench_version"], data["environment"]["measurement_rules"]
            path.write_text(json.dumps(data))
    bench("collect", str(dst))
    return dst


def test_which_bench_measured_a_run_is_recorded_and_judged(real_run, tmp_path):
    """docs/provenance.md: `bench --version`; the bench, torch and Python in plan.json, the
    summary and the history; a comparison across measurement rules refused, then passed with
    --allow-rules-change, saying so."""
    from importlib import metadata

    from harness.summary import run_facts

    def facts(path):
        return run_facts(pq.read_table(path / "summary.parquet"))[0]

    version = metadata.version("bench-scaling")
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    shown = bench("--version").stdout
    assert shown.startswith(f"bench {version} (commit {head[:12]}") and "measurement rules 2)" in shown, shown
    plan = json.loads((real_run / "plan.json").read_text())
    assert plan["bench"]["version"] == version and plan["bench"]["measurement_rules"] == 2
    assert plan["bench"]["commit"] == head and isinstance(plan["bench"]["modified"], bool)
    env = facts(real_run)
    assert env["measurement_rules"] == ["2"] and env["bench_version"] == [version]
    assert env["bench"] == [f"{version} (commit {head[:12]}{', modified' if plan['bench']['modified'] else ''}; "
                            "measurement rules 2)"]  # fmt: skip
    assert env["torch"] and env["python"] == [sys.version.split()[0]]
    db = tmp_path / "history.sqlite"
    bench("history", "add", str(real_run), "--cluster", "lab", "--db", str(db))
    with contextlib.closing(sqlite3.connect(db)) as con:
        (stored,) = con.execute("SELECT environment FROM runs").fetchone()
    assert {k: json.loads(stored)[k] for k in env} == env

    old = _older_bench(real_run, tmp_path / "old")
    assert facts(old)["measurement_rules"] == ["1"]
    refused = bench("compare", str(old), str(real_run), check=False)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.describe()
    assert "measurement rules 1 and" in refused.stderr and "--allow-rules-change" in refused.stderr
    judged = bench("compare", str(old), str(real_run), "--allow-rules-change")
    assert "measurement rules: 1 vs 2, judged anyway (--allow-rules-change)" in judged.stdout, judged.describe()
    # the gate too: a history of the older bench's run does not judge tonight's
    other = tmp_path / "db2.sqlite"
    bench("history", "add", str(old), "--cluster", "lab", "--db", str(other))
    gate = regress(real_run, other, tmp_path / "gate")
    assert gate.returncode == 2 and "--allow-rules-change" in gate.stderr, gate.describe()
    assert regress(real_run, other, tmp_path / "gate2", "--allow-rules-change").returncode == 0


def _not_a_run(real_run, tmp_path):
    (tmp_path / "empty").mkdir()
    return tmp_path / "empty"


def _no_summary(real_run, tmp_path):
    shutil.copytree(real_run, tmp_path / "bad")
    (tmp_path / "bad" / "summary.parquet").unlink()
    return tmp_path / "bad"


def _every_reader(good, bad, db):
    return [
        ["compare", str(good), str(bad)],
        ["history", "add", str(bad), "--cluster", "c", "--db", str(db)],
        ["regress", str(bad), "--cluster", "c", "--db", str(db)],
        ["report", str(bad)],
    ]


def _compare_only(good, bad, db):
    return [["compare", str(good), str(bad)]]


@pytest.mark.parametrize(
    "make,want,commands",
    [
        pytest.param(_not_a_run, "not a run directory (no plan.json)", _every_reader, id="not a run"),
        pytest.param(_no_summary, "no summary.parquet; run `bench collect", _every_reader, id="no summary"),
        pytest.param(
            lambda run, tmp: copy_run(run, tmp / "bad", drop="busbw_gbps"),
            "summary lacks column busbw_gbps",
            _every_reader,
            id="missing column",
        ),
        pytest.param(
            lambda run, tmp: copy_run(run, tmp / "bad", version=1),
            f"summary schema_version 1 is older than this bench's {SUMMARY_VERSION}",
            _every_reader,
            id="old schema",
        ),
        # a run with no key in common with the other is a comparison's problem only
        pytest.param(
            lambda run, tmp: copy_run(run, tmp / "bad", launcher="srun"),
            "no completed key in common",
            _compare_only,
            id="no common key",
        ),
    ],
)
def test_bad_runs_are_refused_with_one_line(real_run, tmp_path, make, want, commands):
    db = tmp_path / "history.sqlite"
    bad = make(real_run, tmp_path)
    for args in commands(real_run, bad, db):
        r = bench(*args, check=False)
        assert r.returncode == 2 and want in r.stderr, r.describe()
        assert len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert not db.exists()  # nothing written to the history
    assert not (bad / "regress").exists() and not (bad / "report.html").exists()


def test_history_add_list_plot_and_duplicates(real_run, tmp_path):
    db = tmp_path / "h" / "history.sqlite"
    r = bench("history", "add", str(real_run), "--cluster", "lab", "--label", "first", "--db", str(db))
    assert "as run 1 of cluster lab (label first)" in r.stdout
    before = db.read_bytes()
    dup = bench("history", "add", str(real_run), "--cluster", "other", "--db", str(db), check=False)
    assert dup.returncode == 2 and "already in the history as run 1 (cluster lab, label first" in dup.stderr
    assert db.read_bytes() == before
    shutil.copytree(real_run, tmp_path / "second")
    plan = tmp_path / "second" / "plan.json"
    plan.write_text(plan.read_text().replace('"created": "', '"created": "9', 1))  # planned later: a new run
    bench("history", "add", str(tmp_path / "second"), "--cluster", "lab", "--db", str(db))
    listed = bench("history", "list", "--cluster", "lab", "--db", str(db)).stdout
    assert "2 runs" in listed and "first" in listed
    assert "0 runs" in bench("history", "list", "--cluster", "nosuch", "--db", str(db)).stdout
    out = tmp_path / "h.png"
    bench("history", "plot", "--cluster", "lab", "--db", str(db), "--out", str(out))
    Image.open(out).verify()
    # the history spells a key as compare and regress do
    new = {
        "allreduce all_reduce, 2x1, torchrun, default",
        "synthetic weak, 1x1, torchrun, default",
        "synthetic weak, 2x1, torchrun, default",
    }
    with contextlib.closing(sqlite3.connect(db)) as con:
        assert {s for (s,) in con.execute("SELECT series FROM points WHERE run_id = 1")} == new
        # a history written before that spelled them 'all_reduce 2x1 torchrun default' and
        # 'synthetic-weak 1x1 torchrun default'; it plots under today's names, unchanged on disk
        with con:
            con.execute(
                "UPDATE points SET series = CASE WHEN series LIKE 'allreduce %' "
                "THEN 'all_reduce 2x1 torchrun default' "
                "ELSE replace(replace(replace(series, 'synthetic weak', 'synthetic-weak'), ',', ''), '  ', ' ') END"
            )
        old = {s for (s,) in con.execute("SELECT series FROM points")}
    assert old == {
        "all_reduce 2x1 torchrun default",
        "synthetic-weak 1x1 torchrun default",
        "synthetic-weak 2x1 torchrun default",
    }
    before = db.read_bytes()
    bench("history", "plot", "--cluster", "lab", "--db", str(db), "--out", str(out))
    with out.with_suffix(".csv").open() as f:
        assert {row["series"] for row in csv.DictReader(f)} == new
    assert db.read_bytes() == before


def test_output_paths_that_are_files_are_refused(real_run, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("keep me\n")
    db = tmp_path / "history.sqlite"
    for args, want in (
        (["compare", str(real_run), str(real_run), "--plots", str(a_file)], "--plots"),
        (["regress", str(real_run), "--cluster", "lab", "--db", str(db), "--out", str(a_file)], "--out"),
        (["compare", str(real_run), str(real_run), "--csv", str(tmp_path)], "--csv"),
    ):
        r = bench(*args, check=False)
        assert r.returncode == 2 and f"{want} " in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert a_file.read_text() == "keep me\n" and not db.exists()


def _history_of(cluster):
    def make(db, real_run, tmp_path):
        other = copy_run(real_run, tmp_path / "other")
        plan = other / "plan.json"
        plan.write_text(plan.read_text().replace('"created": "', '"created": "0', 1))
        bench("history", "add", str(other), "--cluster", cluster, "--db", str(db))

    return make


@contextlib.contextmanager
def _locked(db):
    """An exclusive sqlite transaction held by this process, as another bench would hold it.
    Taken after the test read the file: closing any descriptor of the file drops this
    process's POSIX locks."""
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


REGRESS = ["regress", "RUN", "--cluster", "lab"]


@pytest.mark.parametrize(
    "make,args,hold,want",
    [
        pytest.param(None, REGRESS, False, "no history database", id="absent"),
        pytest.param(lambda db, run, tmp: db.write_bytes(b""), REGRESS, False, "the history is empty", id="empty"),
        pytest.param(
            lambda db, run, tmp: db.write_text("this is not a database\n" * 100),
            REGRESS,
            False,
            "not a bench history database",
            id="not sqlite",
        ),
        pytest.param(
            _history_of("lab"),
            ["history", "add", "RUN", "--cluster", "lab"],
            True,
            "locked by another process",
            id="locked",
        ),
        pytest.param(
            _history_of("elsewhere"), REGRESS, False, "no run of cluster 'lab' to use as baseline", id="other cluster"
        ),
        pytest.param(
            _history_of("lab"),
            [*REGRESS, "--baseline", "median:x"],
            False,
            "--baseline 'median:x': K must be a whole number",
            id="bad baseline",
        ),
    ],
)
def test_bad_history_is_refused_with_one_line(real_run, tmp_path, make, args, hold, want):
    db = tmp_path / "history.sqlite"
    if make:
        make(db, real_run, tmp_path)
    before = db.read_bytes() if db.exists() else None
    args = [str(real_run) if a == "RUN" else a for a in args] + ["--db", str(db)]
    with _locked(db) if hold else contextlib.nullcontext():
        r = bench(*args, check=False)
    assert r.returncode == 2 and want in r.stderr, r.describe()
    assert len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert (db.read_bytes() if db.exists() else None) == before
    assert not (real_run / "regress").exists()


def test_regress_outputs_for_ci(real_run, tmp_path):
    db = tmp_path / "history.sqlite"
    base = copy_run(real_run, tmp_path / "base", time_factor=1 / separating(real_run))  # a much faster baseline
    plan = base / "plan.json"
    plan.write_text(plan.read_text().replace('"created": "', '"created": "0', 1))
    bench("history", "add", str(base), "--cluster", "lab", "--label", "good", "--db", str(db))
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


class _Images(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.sources.append(attrs.get("src", ""))
        for key in ("href", "src"):
            if attrs.get(key) and not attrs[key].startswith("data:"):
                self.links.append(attrs[key])


def test_report_is_self_contained(real_run, tmp_path):
    other = copy_run(real_run, tmp_path / "other", time_factor=separating(real_run))
    out = tmp_path / "report.html"
    bench("report", str(real_run), "--compare", str(other), "--out", str(out))
    text = out.read_text()
    parser = _Images()
    parser.feed(text)
    assert parser.links == []  # nothing to fetch: opens offline
    assert len(parser.sources) >= 5  # scaling, the step's breakdown, busbw, and the two comparison plots
    for src in parser.sources:
        assert src.startswith("data:image/png;base64,")
        img = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
        img.load()
        assert img.size[0] > 100 and img.size[1] > 100
    for heading in ("Environment", "Jobs", "Stragglers", "Scaling", "Where the step went", "Collectives", "Comparison"):
        assert f"<h2>{heading}" in text
    assert 'alt="where each training step went"' in text
    created = json.loads((real_run / "plan.json").read_text())["created"][:10]
    assert f"<h1>bench report: local on this machine (local executor), {created}</h1>" in text
    assert "<summary>The sweep's parameters, as run</summary>\n<pre>name: local\n" in text
    # the compact table: per job its largest size (1M), which is also the nearest to DDP's 25 MiB
    # bucket; every size (64K, 256K, 1M for 2 jobs) behind <details>
    # from the compact table's caption on: the plot above it is base64, which may hold "64K" by chance
    collectives = text[text.index("<p>Per job, the largest message") : text.index("<h2>Comparison")]
    compact, full = collectives.split("<summary>Every message size (6 rows)</summary>")
    assert compact.count("<tr>") == 1 + 2 and full.split("</details>")[0].count("<tr>") == 1 + 6
    assert "1M" in compact and "64K" not in compact and "64K" in full
    assert "n2-g1-torchrun-default" in text and "COMPLETED" in text
    assert '<tr class="slower"><td>slower</td><td>busbw GB/s</td>' in text
    # no job has three nodes: nothing was judged, and the report says so rather than "none"
    assert (
        "<p>Not judged: no all-reduce job of 3 or more nodes completed, and it takes 3 nodes to tell "
        "which end of a slow pair is slow.</p>" in text
    )
    assert "None in" not in text


def test_every_verdict_has_a_severity_and_a_way_to_be_shown():
    """A verdict is defined in analysis/compare.py and shown from one record of
    present/tables.py: a new one without either fails here, not in a user's report."""
    from harness.analysis.compare import ORDER, VERDICTS, WORST_FIRST
    from harness.present.tables import PRESENTED

    assert set(WORST_FIRST) == set(VERDICTS) == set(PRESENTED) == set(ORDER)
    assert len(WORST_FIRST) == 5
    assert [v for v in WORST_FIRST if PRESENTED[v].junit] == ["failed", "slower", "cannot judge"]
