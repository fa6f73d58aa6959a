"""`bench compare` on a real local run (gloo ranks): a run against itself, a slower copy, the
estimator's ratio and interval, keys of one run only, environment differences, and the bad runs
and output paths it must refuse. The statistics are in test_stats.py, the history in
test_history.py, the gate in test_gate.py; the proofs on shaped links in
tests/proofs/test_regress_testbed.py."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import bench, copy_run, planned_later, regress, separating
from PIL import Image

from harness.analysis.compare import SLOWER, compare
from harness.analysis.sides import load_run
from harness.collect.summary import SUMMARY_VERSION

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
    from harness.collect.summary import TRANSFORMER_COLUMNS

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


def test_keys_in_the_same_order_are_joined_as_pandas_merges_them(real_run, tmp_path, monkeypatch):
    """A run against a slower copy of itself has the same keys in the same order: compare puts
    their rows side by side rather than merging them (compare._joined), and its table and new
    keys are those the merge makes, row for row and dtype for dtype. A copy with a key left out
    is merged."""
    from harness.analysis import compare as compare_module

    slow = load_run(copy_run(real_run, tmp_path / "slow", time_factor=separating(real_run)))
    fewer = copy_run(real_run, tmp_path / "fewer")
    summary = pq.read_table(fewer / "summary.parquet")
    pq.write_table(
        summary.filter(pa.compute.not_equal(summary.column("job"), "n2-g1-torchrun-default")), fewer / "summary.parquet"
    )
    a = load_run(real_run)
    assert compare_module.aligned_sides(a, slow) and not compare_module.aligned_sides(a, load_run(fewer))
    side_by_side = compare(a, slow)
    monkeypatch.setattr(compare_module, "aligned_sides", lambda a, b: False)
    merged = compare(a, slow)
    pd.testing.assert_frame_equal(side_by_side.table, merged.table)
    pd.testing.assert_frame_equal(side_by_side.new_in_b, merged.new_in_b)
    assert set(merged.table["verdict"]) == {SLOWER} and len(merged.table) == 5


def test_keys_in_one_run_only(real_run, tmp_path):
    """A key B never planned is "only in A", never "failed" (nothing failed: B's sweep is
    another), and the summary counts it so; a key only B has is listed as only completed in B.
    `bench regress` cannot judge such a key: exit 3, and an <error> in junit.xml."""
    other = copy_run(real_run, tmp_path / "other")
    summary = pq.read_table(other / "summary.parquet")
    keep = pa.compute.not_equal(summary.column("job"), "n2-g1-torchrun-default")
    pq.write_table(summary.filter(keep), other / "summary.parquet")
    r = bench("compare", str(real_run), str(other))
    assert len(re.findall(r"│ only in A .* never planned in other │", r.stdout)) == 4, r.describe()
    assert "0 failed, 0 slower, 0 cannot judge, 4 only in A, " in r.stdout, r.describe()
    back = bench("compare", str(other), str(real_run))
    # one group per state in the other run, each key once: not "(absent in other)" after every key
    assert re.search(
        r"only completed in run: 4 keys: absent in other: allreduce all_reduce 64K, 2x1, torchrun, default; ",
        back.stdout,
    ), back.describe()
    assert back.stdout.count("absent in other") == 1, back.describe()
    db = tmp_path / "h.sqlite"
    bench("history", "add", str(real_run), "--create", "--cluster", "lab", "--db", str(db))
    gated = regress(planned_later(other, "9"), db, tmp_path / "g")
    assert gated.returncode == 3 and "4 only in the baseline (never planned in the run)" in gated.stderr, (
        gated.describe()
    )
    errors = [c.find("error") for c in ET.parse(tmp_path / "g" / "junit.xml").getroot().iter("testcase")]
    assert [e.get("type") for e in errors if e is not None] == ["only-in-a"] * 2  # busbw and time, one configuration
    assert "## Only in A (never planned in B: not judged): 4" in (tmp_path / "g" / "report.md").read_text()


def _rewritten(run: Path, edit) -> Path:
    """The run with its summary's table passed through `edit` (rows kept, dropped or changed)."""
    summary = pq.read_table(run / "summary.parquet")
    pq.write_table(edit(summary), run / "summary.parquet")
    return run


def test_a_key_that_failed_in_the_run_fails_where_the_baseline_lacks_it(real_run, tmp_path):
    """The history's newest run a smaller sweep (no 64K): a night whose every 64K key failed
    fails on those keys, each named, where it passed "unchanged" while the baseline's keys alone
    were looked at; with the baseline holding them too, the same keys fail the same way."""
    size = pa.compute.field("size_bytes")
    smaller = _rewritten(copy_run(real_run, tmp_path / "smaller"), lambda t: t.filter(size != 64 << 10))

    def failed_64k(t: pa.Table) -> pa.Table:
        at = pa.compute.fill_null(pa.compute.equal(t.column("size_bytes"), 64 << 10), False)
        for name, value in (("status", "FAILED"), ("reason", "exit 1: a rank lost its link")):
            column = pa.compute.if_else(at, pa.scalar(value, pa.string()), t.column(name).cast(pa.string()))
            t = t.set_column(t.schema.get_field_index(name), name, column.cast(t.schema.field(name).type))
        return t

    night = planned_later(_rewritten(copy_run(real_run, tmp_path / "night"), failed_64k), "4")
    failed = set(pq.read_table(night / "summary.parquet").filter(size == 64 << 10).column("job").to_pylist())
    assert failed == {"n1-g1-torchrun-default", "n2-g1-torchrun-default"}
    for newest in (planned_later(smaller, "3"), None):
        db = tmp_path / f"h-{newest is None}.sqlite"
        for run in (real_run, newest) if newest else (real_run,):
            bench("history", "add", str(run), "--create", "--cluster", "lab", "--db", str(db))
        out = tmp_path / f"g-{newest is None}"
        r = regress(night, db, out)
        assert r.returncode == 1, r.describe()
        bands = json.loads((out / "gate.json").read_text())["bands"]
        keys = {k for k, v in zip(bands["key"], bands["verdict"]) if v == "failed"}
        # the 64K keys: time on 1 and 2 nodes, busbw on 2 (1 rank has none)
        assert {json.loads(k)[-1] for k in keys} == {64 << 10} and len(keys) >= 2, bands
        assert "a rank lost its link" in (out / "report.md").read_text()


def test_a_key_the_newest_run_lacks_is_judged_against_the_older_runs_that_hold_it(real_run, tmp_path):
    """The history's newest run a smaller sweep (no 64K), an older one the whole sweep: a night
    whose 64K keys are slower is judged slower on them against the older run, where it was
    listed "only completed" and passed; a key no run of the history holds stays listed, unjudged."""
    size = pa.compute.field("size_bytes")
    smaller = _rewritten(copy_run(real_run, tmp_path / "smaller"), lambda t: t.filter(size != 64 << 10))
    factor = separating(real_run)
    night = planned_later(copy_run(real_run, tmp_path / "night", size_factors={64 << 10: factor}), "4")
    db = tmp_path / "h.sqlite"
    for run in (real_run, planned_later(smaller, "3")):
        bench("history", "add", str(run), "--create", "--cluster", "lab", "--db", str(db))
    r = regress(night, db, tmp_path / "g")
    assert r.returncode == 1, r.describe()
    bands = json.loads((tmp_path / "g" / "gate.json").read_text())["bands"]
    slower = {json.loads(k)[-1] for k, v in zip(bands["key"], bands["verdict"]) if v == "slower"}
    assert slower == {64 << 10}, bands
    assert "only completed" not in (tmp_path / "g" / "report.md").read_text()
    alone = tmp_path / "alone.sqlite"  # no run of it holds 64K: those keys are new, listed
    bench("history", "add", str(smaller), "--create", "--cluster", "lab", "--db", str(alone))
    r = regress(night, alone, tmp_path / "new")
    bands = json.loads((tmp_path / "new" / "gate.json").read_text())["bands"]
    assert 64 << 10 not in {json.loads(k)[-1] for k in bands["key"]}, bands
    assert re.search(
        r"only completed in night: 4 keys: absent in median:5 of 1 run: allreduce all_reduce 64K", r.stdout
    )


def test_environment_differences_are_warned(real_run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(real_run, other)
    for path in other.glob("jobs/*/*.json"):
        if ".ranks." in path.name or ".links." in path.name:  # beside the results: no environment
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
        ["history", "add", str(bad), "--create", "--cluster", "c", "--db", str(db)],
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


def test_every_verdict_has_a_severity_and_a_way_to_be_shown():
    """A verdict is defined in analysis/compare.py and shown from one record of
    present/tables.py: a new one without either fails here, not in a user's report."""
    from harness.analysis.compare import ORDER, VERDICTS, WORST_FIRST
    from harness.present.tables import PRESENTED

    assert set(WORST_FIRST) == set(VERDICTS) == set(PRESENTED) == set(ORDER)
    assert len(WORST_FIRST) == 6
    assert [v for v in WORST_FIRST if PRESENTED[v].junit] == ["failed", "slower", "cannot judge", "only in A"]


def test_each_row_gets_its_own_samples_in_whatever_order_they_come():
    """samples_by_row matches a summary's rows to their samples by key: in step (as collect
    writes them) by position, otherwise by a join, and a row without samples counts none."""
    from harness.analysis.sides import _in_step, samples_by_row

    rows = pd.DataFrame(
        {
            "job": ["a", "a", "b"],
            "workload": ["allreduce", "allreduce", "synthetic"],
            "scaling": ["", "", "weak"],
            "collective": ["all_reduce", "all_reduce", ""],
            "group": ["world", "world", ""],
            "size_bytes": [8, 16, 0],
        }
    ).astype(dict.fromkeys(("job", "workload", "scaling", "collective", "group"), "string") | {"size_bytes": "Int64"})
    samples = pa.table(
        {
            "job": ["a", "a", "b"],
            "workload": ["allreduce", "allreduce", "synthetic"],
            "scaling": [None, None, "weak"],
            "collective": ["all_reduce", "all_reduce", None],
            "group": ["world", "world", ""],
            "size_bytes": [8, 16, 0],
            "metric": ["time_us", "time_us", "step_time_ms"],
            "values": [[1.0, 2.0], [3.0, 4.0, 5.0], [6.0]],
        }
    )

    def got(table, metric, n_rows):
        vals, counts = samples_by_row(table, rows.iloc[:n_rows])[metric]
        return [list(v[:c]) for v, c in zip(vals, counts)]

    assert got(samples, "time_us", 3) == [[1.0, 2.0], [3.0, 4.0, 5.0], []]
    assert got(samples, "step_time_ms", 3) == [[], [], [6.0]]
    collective = samples.slice(0, 2)
    assert _in_step(rows.iloc[:2], collective.drop(["values"]).to_pandas().fillna(""))
    assert got(collective, "time_us", 2) == [[1.0, 2.0], [3.0, 4.0, 5.0]]
    backwards = collective.take([1, 0])  # as many samples as rows, not in their order
    assert got(backwards, "time_us", 2) == [[1.0, 2.0], [3.0, 4.0, 5.0]]
    # in step: a missing text against a missing one, never against a text or an empty one
    plain = collective.drop(["values"]).to_pandas()
    assert _in_step(rows.iloc[:2].assign(scaling=pd.array([pd.NA, pd.NA], dtype="string")), plain)
    assert not _in_step(rows.iloc[:2], plain) and not _in_step(rows.iloc[:2].assign(scaling="x"), plain.fillna(""))
    assert not _in_step(rows.iloc[:2], backwards.drop(["values"]).to_pandas().fillna(""))

    # rows of two runs concatenated (pandas' own str columns, Arrow in chunks) against one
    # run's samples of another text type: compared value by value, never an internal error
    def two_runs(first, second):
        return pd.concat([rows.iloc[first].astype({"job": "str"}), rows.iloc[second].astype({"job": "str"})])

    assert _in_step(two_runs([0], [1]), plain.fillna("").astype({"job": object}))
    assert not _in_step(two_runs([0], [2]), plain.fillna("").astype({"job": object}))


def test_each_key_is_worded_from_its_own_columns():
    """key_texts words each configuration once and each size once, then joins them per row:
    rows that differ in any one column of their configuration are worded apart, by hand."""
    from harness.analysis.sides import key_texts

    rows = [
        ("allreduce", "all_reduce", "world", None, 1, 8, "torchrun", "default", 4 << 20),
        ("allreduce", "all_reduce", "intra", None, 1, 8, "torchrun", "default", 4 << 20),
        ("allreduce", "all_reduce", "world", None, 1, 8, "torchrun", "default", 128),
        ("allreduce", "all_to_all", "world", None, 1, 8, "torchrun", "default", 4 << 20),
        ("allreduce", "all_reduce", "world", None, 2, 8, "torchrun", "default", 4 << 20),
        ("allreduce", "all_reduce", "world", None, 1, 4, "torchrun", "default", 4 << 20),
        ("allreduce", "all_reduce", "world", None, 1, 8, "srun", "default", 4 << 20),
        ("allreduce", "all_reduce", "world", None, 1, 8, "torchrun", "ib", 4 << 20),
        ("synthetic", None, None, "weak", 2, 1, "srun", "ib", 0),
        ("synthetic", None, None, "strong", 2, 1, "srun", "ib", 0),
        ("transformer", None, None, "weak", 2, 1, "srun", "ib", 0),
        ("allreduce", "all_reduce", "intra", None, 1, 8, "torchrun", "default", 4 << 20),  # a key again
    ]
    columns = ["workload", "collective", "group", "scaling", "nodes", "gpus_per_node", "launcher", "nccl_config"]
    df = pd.DataFrame(rows, columns=[*columns, "size_bytes"], index=range(100, 100 + len(rows)))
    df = df.astype(dict.fromkeys(("workload", "collective", "group", "scaling", "launcher", "nccl_config"), "string"))
    df = df.astype(dict.fromkeys(("nodes", "gpus_per_node", "size_bytes"), "Int64"))
    words = [
        "allreduce all_reduce 4M, 1x8, torchrun, default",
        "allreduce all_reduce intra 4M, 1x8, torchrun, default",
        "allreduce all_reduce 128, 1x8, torchrun, default",
        "allreduce all_to_all 4M, 1x8, torchrun, default",
        "allreduce all_reduce 4M, 2x8, torchrun, default",
        "allreduce all_reduce 4M, 1x4, torchrun, default",
        "allreduce all_reduce 4M, 1x8, srun, default",
        "allreduce all_reduce 4M, 1x8, torchrun, ib",
        "synthetic weak, 2x1, srun, ib",
        "synthetic strong, 2x1, srun, ib",
        "transformer weak, 2x1, srun, ib",
        "allreduce all_reduce intra 4M, 1x8, torchrun, default",
    ]
    texts = key_texts(df)
    assert texts.tolist() == words and list(texts.index) == list(df.index)
    configs = key_texts(df, sizes=False).tolist()
    assert configs[0] == configs[2] == "allreduce all_reduce, 1x8, torchrun, default"
    assert configs[8:] == words[8:11] + ["allreduce all_reduce intra, 1x8, torchrun, default"]
    assert key_texts(df.iloc[:0]).tolist() == []


def test_the_table_is_worst_first_then_by_change():
    """Failed, slower, cannot judge, unchanged, faster; within each the change smallest first,
    a missing change last, and rows alike in the order they came."""
    from harness.analysis.compare import worst_first

    rows = [
        ("no significant change", 0.01, "a"),
        ("slower", -0.20, "b"),
        ("faster", 0.30, "c"),
        ("slower", -0.50, "d"),
        ("failed", float("nan"), "e"),
        ("cannot judge", float("nan"), "f"),
        ("slower", float("nan"), "g"),
        ("slower", -0.20, "h"),
        ("no significant change", -0.02, "i"),
        ("faster", 0.10, "j"),
        ("failed", float("nan"), "k"),
    ]
    table = pd.DataFrame(rows, columns=["verdict", "change", "key"], index=range(50, 50 + len(rows)))
    table["verdict"] = table["verdict"].astype("str")
    ordered = worst_first(table)
    assert ordered["key"].tolist() == ["e", "k", "d", "b", "h", "g", "f", "i", "a", "j", "c"]
    assert list(ordered.index) == list(range(len(rows)))


def test_what_differs_is_worked_out_of_the_rows_that_differ_alone():
    """The rows whose parameters or settings differ, found as the columns' arrays (compare's
    _differ), and what differs in each, of those rows alone and in their order; a missing value
    is compared as Python compares the objects: None equals None and no text."""
    from harness.analysis.compare import _diff_texts, _differ

    m = pd.DataFrame(
        {
            "params_a": pd.array(['{"b": 8}', '{"b": 8}', '{"b": 8}', '{"b": 2}'], dtype="string"),
            "params_b": pd.array(['{"b": 8}', '{"b": 4}', '{"b": 8}', '{"b": 1}'], dtype="string"),
            "settings_a": ["s"] * 4,
            "settings_b": ["s", "s", "t", "s"],
            "settings_hash_a": pd.array(["h"] * 4, dtype="string"),
            "settings_hash_b": pd.array(["h", "h", "g", "h"], dtype="string"),
        }
    )
    differ = _differ(m, "params") | _differ(m, "settings_hash")
    assert differ.tolist() == [False, True, True, True]
    assert _diff_texts(m, differ, ignore_settings=False) == ["b 8 vs 4", "settings s vs t", "b 2 vs 1"]
    missing = pd.DataFrame({"x_a": ["p", None, "p"], "x_b": ["p", None, None]}, dtype=object)
    assert _differ(missing, "x").tolist() == [False, False, True]
