"""`bench history` on a real local run (gloo ranks): add, list, plot and remove, a run added
twice, and a damaged, malformed, locked or missing history stopped with one line and nothing
written. The gate's use of the history is in test_gate.py; the change points in test_changes.py."""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, bench, copy_run, planned_later, regress, snapshot
from conftest import run as run_command
from PIL import Image


def test_history_add_list_plot_and_duplicates(real_run, tmp_path):
    db = tmp_path / "h" / "history.sqlite"
    r = bench("history", "add", str(real_run), "--create", "--cluster", "lab", "--label", "first", "--db", str(db))
    assert "as run 1 of cluster lab (label first)" in r.stdout
    before = db.read_bytes()
    dup = bench("history", "add", str(real_run), "--create", "--cluster", "other", "--db", str(db), check=False)
    assert dup.returncode == 2 and "already in the history as run 1 (cluster lab, label first" in dup.stderr, (
        dup.describe()
    )
    assert db.read_bytes() == before
    shutil.copytree(real_run, tmp_path / "second")
    planned_later(tmp_path / "second")  # a new run
    bench("history", "add", str(tmp_path / "second"), "--create", "--cluster", "lab", "--db", str(db))
    listed = bench("history", "list", "--cluster", "lab", "--db", str(db)).stdout
    assert "2 runs" in listed and "first" in listed
    nosuch = bench("history", "list", "--cluster", "nosuch", "--db", str(db), check=False)
    assert nosuch.returncode == 2 and "has no cluster of that name (its clusters: lab)" in nosuch.stderr
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


def _history_of(cluster):
    def make(db, real_run, tmp_path):
        other = copy_run(real_run, tmp_path / "other")
        planned_later(other, "0")
        bench("history", "add", str(other), "--create", "--cluster", cluster, "--db", str(db))

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


def _damage(db: Path, case: str) -> None:
    con = sqlite3.connect(db)
    if case == "null sample":
        blob = con.execute("SELECT samples FROM data WHERE run_id = 2").fetchone()[0]
        t = pq.read_table(pa.BufferReader(blob))
        values = t.column("values").to_pylist()
        values[0] = [None] + values[0][1:]
        t = t.set_column(t.column_names.index("values"), "values", pa.array(values, type=pa.list_(pa.float64())))
        sink = pa.BufferOutputStream()
        pq.write_table(t, sink)
        con.execute("UPDATE data SET samples = ? WHERE run_id = 2", (sink.getvalue().to_pybytes(),))
    elif case == "bad blob":
        con.execute("UPDATE data SET summary = ? WHERE run_id = 2", (b"PAR1 not a parquet file",))
    elif case == "bad environment":
        con.execute("UPDATE runs SET environment = '{\"gpu\": [' WHERE id = 2")
    con.commit()
    con.close()


@pytest.mark.parametrize("case", ["null sample", "bad blob", "bad environment"])
def test_a_damaged_entry_is_named_and_removable(real_run, tmp_path, history_of, case):
    db = history_of(
        planned_later(copy_run(real_run, tmp_path / "a"), "0"), planned_later(copy_run(real_run, tmp_path / "b"), "1")
    )
    _damage(db, case)
    r = regress(real_run, db, tmp_path / "o", "--baseline", "last")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert "run 2 is damaged" in r.stderr or "run 2's" in r.stderr, r.describe()
    assert "bench history remove 2" in r.stderr
    checked = bench("history", "check", "--db", str(db), check=False)
    assert checked.returncode == 1 and "checked 2 runs" in checked.stdout and "1 problem" in checked.stdout
    assert "run 1" not in checked.stdout.replace("run 2", "")
    assert "removed run 2 of cluster lab" in bench("history", "remove", "2", "--db", str(db)).stdout
    assert regress(real_run, db, tmp_path / "o", "--baseline", "last").returncode == 0
    assert bench("history", "check", "--db", str(db)).stdout.strip().endswith("all readable")


@pytest.mark.parametrize(
    "sql,words",
    [
        ("UPDATE data SET summary = x'50415231' WHERE run_id = 1", "run 1 is damaged (its stored tables"),
        ("DELETE FROM data WHERE run_id = 1", "run 1 is damaged (no stored summary)"),
    ],
)
def test_a_damaged_run_is_said_when_the_baseline_reaches_it(real_run, tmp_path, history_of, sql, words):
    """The history's runs are read ahead of the draw (history._Ahead), yet a damaged one stops
    a regress only where the baseline takes rows from it: `last` finds every key in run 2 and
    stops there; median:3 reaches run 1."""
    db = history_of(
        planned_later(copy_run(real_run, tmp_path / "a"), "0"), planned_later(copy_run(real_run, tmp_path / "b"), "1")
    )
    con = sqlite3.connect(db)
    con.execute(sql)
    con.commit()
    con.close()
    ok = regress(real_run, db, tmp_path / "o", "--baseline", "last")
    assert ok.returncode == 0 and "history run 2 " in (tmp_path / "o" / "report.md").read_text(), ok.describe()
    r = regress(real_run, db, tmp_path / "p", "--baseline", "median:3")
    assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize(
    "sql,words",
    [
        ("UPDATE points SET value = 'x' WHERE run_id = 2", "run 2 is damaged (a point of"),
        ("DROP TABLE points", "no such table: points"),
    ],
)
def test_history_plot_of_a_damaged_history_is_one_line(real_run, tmp_path, history_of, sql, words):
    """A text value, or a dropped table, ended `history plot` with exit 70."""
    db = history_of(
        planned_later(copy_run(real_run, tmp_path / "a"), "0"), planned_later(copy_run(real_run, tmp_path / "b"), "1")
    )
    with sqlite3.connect(db) as con:
        con.execute(sql)
    r = bench("history", "plot", "--cluster", "lab", "--db", str(db), "--out", str(tmp_path / "h.png"), check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.describe()
    assert not (tmp_path / "h.png").exists()
    if "UPDATE" in sql:
        checked = bench("history", "check", "--db", str(db), check=False)
        assert checked.returncode == 1 and "run 2 is damaged (a point that is no number)" in checked.stdout


def test_a_malformed_database_is_one_line(real_run, tmp_path, history_of):
    db = history_of(planned_later(copy_run(real_run, tmp_path / "a"), "0"))
    data = bytearray(db.read_bytes())
    page = 4096
    for at in range(page, len(data), page):  # every page after the header page
        data[at : at + 64] = b"\xff" * 64
    db.write_bytes(bytes(data))
    for args in (["regress", str(real_run), "--cluster", "lab"], ["history", "list"], ["history", "check"]):
        r = bench(*args, "--db", str(db), check=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
        assert str(db) in r.stderr and ("malformed" in r.stderr or "not a database" in r.stderr), r.describe()


def test_history_remove_of_an_unknown_id(real_run, tmp_path, history_of):
    db = history_of(planned_later(copy_run(real_run, tmp_path / "a"), "0"))
    ids = (("7", "no run 7 in the history"), ("x", "give the run's id"), ("\u00b2", "give the run's id"))
    for arg, want in (*ids, ("9" * 20, "give the run's id"), ("9" * 5000, "give the run's id")):
        for action in ("remove", "accept"):
            reason = ("--reason", "r") if action == "accept" else ()
            r = bench("history", action, arg, *reason, "--db", str(db), check=False)
            assert r.returncode == 2 and want in r.stderr and len(r.stderr) < 300, r.describe()


def test_history_list_count_fails_closed(real_run, tmp_path, history_of):
    """What recipes/nightly.sh reads: a number, and a failure, never 0, when the history does not
    exist, cannot be read or does not know the cluster (a typo is no first night)."""
    none = tmp_path / "none.sqlite"
    missing = bench("history", "list", "--count", "--cluster", "lab", "--db", str(none), check=False)
    assert missing.returncode == 2 and missing.stdout == "" and "no history database" in missing.stderr
    assert not none.exists()
    db = history_of(planned_later(copy_run(real_run, tmp_path / "a"), "0"))
    assert bench("history", "list", "--count", "--cluster", "lab", "--db", str(db)).stdout == "1\n"
    typo = bench("history", "list", "--count", "--cluster", "lba", "--db", str(db), check=False)
    assert typo.returncode == 2 and typo.stdout == "", typo.describe()
    assert "no cluster of that name (did you mean 'lab'? its clusters: lab)" in typo.stderr, typo.describe()
    with sqlite3.connect(db) as con:
        con.execute("DROP TABLE runs")
    r = bench("history", "list", "--count", "--cluster", "lab", "--db", str(db), check=False)
    assert r.returncode == 2 and r.stdout == "" and "not a bench history" in r.stderr, r.describe()


@pytest.mark.parametrize(
    "given,cluster,words",
    [
        ("postgresq://bench@127.0.0.1:5439/bench", "lab", "'postgresq:' is not a history's scheme"),
        ("nosuch.sqlite", "lab", "no history database"),
        ("history.sqlite", "lba", "did you mean 'lab'?"),
        ("history.sqlite", "lab", None),  # the history knows lab: the night would go on to the sweep
    ],
)
def test_a_typo_stops_the_nightly_recipe_before_its_sweep(real_run, tmp_path, given, cluster, words):
    """recipes/nightly.sh with a mistyped history URL, a history that does not exist, or a cluster
    the history does not know: exit 2 with bench's one line, before anything is swept, and no file
    made anywhere (the working directory, where a mistyped URL would have become an SQLite file,
    and the results). `bench` is a stand-in that fails the sweep loudly: a night that gets that
    far says so."""
    work = tmp_path / "work"
    work.mkdir()
    bench("history", "add", str(real_run), "--create", "--cluster", "lab", "--db", str(work / "history.sqlite"))
    tools = tmp_path / "bin"
    tools.mkdir()
    sweep = 'if [ "$1" = sweep ]; then echo "swept" >&2; exit 64; fi'
    (tools / "bench").write_text(f'#!/bin/sh\n{sweep}\nexec {sys.executable} -m harness.cli "$@"\n')
    (tools / "bench").chmod(0o755)
    env = {"PATH": f"{tools}:{os.environ['PATH']}", "BENCH_RESULTS": str(tmp_path / "results"), "NAME": cluster}
    before = snapshot(tmp_path)
    recipe = ["bash", str(ROOT / "recipes" / "nightly.sh")]
    r = run_command(recipe, env={**env, "BENCH_HISTORY": given}, cwd=work, check=False)
    if words is None:
        assert r.returncode == 64 and "swept" in r.stderr, r.describe()
        return
    assert r.returncode == 2 and r.stdout == "" and "swept" not in r.stderr, r.describe()
    assert len(r.stderr.splitlines()) == 1 and words in r.stderr, r.describe()
    assert snapshot(tmp_path) == before
    for first in ("yes", "2"):  # only 1 seeds a night
        r = run_command(recipe, env={**env, "BENCH_HISTORY": given, "BENCH_FIRST_NIGHT": first}, cwd=work, check=False)
        assert r.returncode == 2 and "BENCH_FIRST_NIGHT" in r.stderr and "swept" not in r.stderr, r.describe()


def _stored_summary(rows: int, **changed) -> pa.Table:
    """A summary of `rows` all_reduce keys as collect writes it, with columns `changed` (name ->
    function of the row) from it."""
    from harness.collect.summary import COLUMNS, SUMMARY_VERSION, VERSION_KEY, arrow_type

    values = {
        "job": lambda i: f"n{i % 4 + 1}-g8", "workload": lambda i: "allreduce", "collective": lambda i: "all_reduce",
        "group": lambda i: "world", "nodes": lambda i: i % 4 + 1, "gpus_per_node": lambda i: 8,
        "launcher": lambda i: "torchrun", "nccl_config": lambda i: "default", "status": lambda i: "COMPLETED",
        "size_bytes": lambda i: 1 << (i // 4 % 30), "time_us": lambda i: 10.0 + i,
        "busbw_gbps": lambda i: 1e3 / (10 + i),
        "repeat": lambda i: 0, "n_samples": lambda i: 20, "hosts": lambda i: "n1", "params": lambda i: "{}",
    } | changed  # fmt: skip
    columns = {
        c: pa.array([values[c](i) if c in values else None for i in range(rows)], arrow_type(c)) for c in COLUMNS
    }
    return pa.table(columns).replace_schema_metadata({VERSION_KEY: str(SUMMARY_VERSION).encode()})


def test_a_column_stored_as_the_first_entrys_is_lent_by_it_and_no_other():
    """A baseline's reads decode a column the first entry stored as the same bytes once
    (history._Shared): each night read after a lender is that night read alone, its own figures
    and the one key that changed among them; its keys, states and counts are the lender's own
    arrays. A file whose chunks do not tile its data (a page index before its footer) is
    decoded whole, neither lending nor borrowing."""
    import io

    from harness.analysis import history
    from harness.analysis.baseline import columns_read
    from harness.analysis.sides import METRICS, Entry
    from harness.analysis.store import Location

    db, rows = Location("h.sqlite"), 2000
    nights = {
        1: _stored_summary(rows),
        2: _stored_summary(rows, time_us=lambda i: 11.0 + i, busbw_gbps=lambda i: 1e3 / (11 + i)),
        3: _stored_summary(rows, nccl_config=lambda i: "ring" if i == 1234 else "default"),
    }
    columns = columns_read("median", list(METRICS))

    def read(run: int, shared: history._Shared | None, blob: bytes | None = None) -> pa.Table:
        entry = Entry(run, "c", None, f"/r/{run}", "s", "2026-11-01", "", rows, rows, 0)
        found = (blob or history._parquet(nights[run]), None, "{}")
        return history._decode(db, entry, found, columns, shared)[0]

    shared = history._Shared()
    first = read(1, shared)
    for run in (2, 3):
        lent = read(run, shared)
        assert lent.equals(read(run, None), check_metadata=True), run
        for name in ("workload", "job", "status", "n_samples", "size_bytes", "nccl_config", "time_us"):
            same = lent.column(name).chunk(0).buffers()[-1].address == first.column(name).chunk(0).buffers()[-1].address
            assert same == ((run, name) not in ((2, "time_us"), (3, "nccl_config"))), (run, name)
    assert read(3, shared).column("nccl_config").to_pylist()[1233:1236] == ["default", "ring", "default"]

    indexed = io.BytesIO()
    pq.write_table(nights[2], indexed, compression="zstd", write_page_index=True)
    file = pq.ParquetFile(io.BytesIO(indexed.getvalue()))
    assert history._Stored(indexed.getvalue(), file.metadata, file.schema_arrow, columns).columns is None
    alone = history._Shared()
    assert read(2, alone, indexed.getvalue()).equals(read(2, None), check_metadata=True)
    assert alone.table is None and read(1, alone).equals(first)


def test_the_newest_entry_read_ahead_whole_says_which_keys_are_expected(tmp_path):
    """The draw begins with the newest entry read whole, which the read-ahead thread decodes
    (history._Ahead): its keys are the baseline's, here 12 where the two older nights have 8;
    and a newest entry that does not decode is said by name, as a read of it here would."""
    from harness.analysis import history, store
    from harness.analysis.store import Location

    db = tmp_path / "h.sqlite"
    store.migrate(str(db))
    nights = {1: _stored_summary(8), 2: _stored_summary(8), 3: _stored_summary(12)}
    with sqlite3.connect(db) as con:
        for run, table in nights.items():
            con.execute(
                "INSERT INTO runs (id, fingerprint, cluster, path, created, added, rows, keys, failed, environment) "
                "VALUES (?, ?, 'c', ?, ?, ?, ?, ?, 0, '{}')",
                (run, f"f{run}", f"/r/{run}", f"2026-11-0{run}", f"2026-11-0{run}", table.num_rows, table.num_rows),
            )
            con.execute("INSERT INTO data (run_id, summary) VALUES (?, ?)", (run, history._parquet(table)))
    side = history.baseline(Location(str(db)), "c", "median:3", metrics=["busbw_gbps"])
    assert sorted(side.rows["size_bytes"].tolist()) == sorted(nights[3].column("size_bytes").to_pylist())
    assert side.rows["runs"].tolist().count(3) == 8 and side.rows["runs"].tolist().count(1) == 4
    with sqlite3.connect(db) as con:
        con.execute("UPDATE data SET summary = x'50415231' WHERE run_id = 3")
    with pytest.raises(history.HistoryError, match="run 3 is damaged"):
        history.baseline(Location(str(db)), "c", "median:3", metrics=["busbw_gbps"])
