"""`bench history copy FROM TO` (harness/analysis/transfer.py, docs/guides/fleet.md): a history moved
from SQLite to PostgreSQL and back is the same, table by table; a second copy adds nothing; a
run held under the same identity with other figures is refused and nothing is copied."""

from __future__ import annotations

from conftest import bench, copy_run

from harness.analysis import store

TABLES = (
    "runs",
    "data",
    "points",
    "gate_runs",
    "gate_keys",
    "gate_bands",
    "node_checks",
    "node_figures",
    "change_points",
)


def _dump(db: str) -> dict[str, list[tuple]]:
    with store.session(db) as con:
        return {t: sorted((tuple(r) for r in con.execute(f"SELECT * FROM {t}")), key=repr) for t in TABLES}


def test_a_history_copied_to_postgresql_and_back_is_the_same(judged_history, tmp_path, postgres):
    source = str(judged_history)
    before = _dump(source)
    assert all(before[t] for t in TABLES), {t: len(v) for t, v in before.items()}

    pg = postgres.new_database("copied")
    bench("history", "migrate", "--db", pg)
    said = bench("history", "copy", source, pg).stdout
    assert said.startswith(f"copied 4 runs and 1 node check from {source} to {store.Location(pg)}: runs 4, "), said
    assert postgres.password not in said
    assert _dump(pg) == before  # ids included: a new history numbers them as the old one did
    again = bench("history", "copy", source, pg).stdout
    assert "copied 0 runs and 0 node checks" in again and "(4 runs and 1 node checks there already)" in again, again
    assert _dump(pg) == before
    back = str(tmp_path / "b.sqlite")
    bench("history", "copy", pg, back)
    assert _dump(back) == before
    # the copies judge as the original does
    judged = [
        " ".join(bench("history", "list", "--db", db, env={"COLUMNS": "400"}).stdout.split())
        .replace(str(store.Location(db)), "DB")
        .replace("━", "")
        for db in (source, pg, back)
    ]
    assert judged[0] == judged[1] == judged[2] and "accepted" in judged[0], judged[0]

    # a run held with other figures under its identity: refused, one line, nothing copied
    clash = str(tmp_path / "c.sqlite")
    other = copy_run(judged_history.parent / "n0", tmp_path / "n0-other", time_factor=3)
    bench("history", "add", str(other), "--create", "--cluster", "lab", "--label", "night0", "--db", clash)
    r = bench("history", "copy", source, clash, check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert f"run 1 of {source} (cluster lab, label night0) is in {clash} as run 1 with other" in r.stderr, r.stderr
    assert len(_dump(clash)["runs"]) == 1
    for args in (["copy", source], ["copy", source, source], ["list", source, clash], ["copy", source, pg, "--db", pg]):
        r = bench("history", *args, check=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()


# what SQLite reads as a column and PostgreSQL, whose comments nest, as a statement of its own
HOSTILE = "id /* /* */ FROM runs -- */) SELECT pg_sleep(3), (SELECT rolpassword FROM pg_authid LIMIT 1) RETURNING id --"


def test_a_source_whose_columns_are_not_benchs_is_refused(judged_history, tmp_path, postgres):
    """Column names come from bench's schema, never from the source: a history with a column of
    its own, named to run SQL on PostgreSQL, or without one of bench's, is refused in one line
    and nothing is copied."""
    import shutil
    import sqlite3

    pg = postgres.new_database("hostile")
    bench("history", "migrate", "--db", pg)
    for name, statement in (
        ("extra", f'ALTER TABLE runs ADD COLUMN "{HOSTILE}" TEXT'),
        ("renamed", "ALTER TABLE gate_bands RENAME COLUMN catches TO caught"),
    ):
        source = tmp_path / f"{name}.sqlite"
        shutil.copyfile(judged_history, source)
        with sqlite3.connect(source) as con:
            con.execute(statement)
        r = bench("history", "copy", str(source), pg, check=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
        assert "has columns bench's schema" in r.stderr and "nothing copied" in r.stderr, r.stderr
        assert _dump(pg) == {t: [] for t in TABLES}
