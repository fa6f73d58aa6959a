"""Where a history lives (harness/analysis/store.py, docs/fleet.md): an SQLite file or a
PostgreSQL database on a real server (tests/postgres.py), the numbered migrations and what a
history at another schema gets, and the one line a server that cannot be reached gives."""

from __future__ import annotations

import concurrent.futures
import re
import sqlite3

from conftest import bench, copy_run, planned_later

from harness.analysis import store


def _same(text: str, db: str) -> str:
    """Output with the history's name taken out, to compare across backends."""
    return text.replace(str(store.Location(db)), "DB")


def test_the_history_commands_say_the_same_on_both_backends(real_run, tmp_path, history_at):
    a = planned_later(copy_run(real_run, tmp_path / "a"), "0")
    b = planned_later(copy_run(real_run, tmp_path / "b"), "1")
    said = []
    for args in (
        ["add", str(a), "--cluster", "lab", "--label", "first"],
        ["add", str(b), "--cluster", "lab"],
        ["list", "--cluster", "lab"],
        ["list", "--count", "--cluster", "lab"],
        ["check"],
        ["remove", "1"],
        ["list", "--count", "--cluster", "lab"],
    ):
        said.append(_same(bench("history", *args, "--db", history_at).stdout, history_at))
    assert said[0].startswith(f"added {a} to DB as run 1 of cluster lab (label first)"), said[0]
    assert "as run 2 of cluster lab" in said[1] and "2 runs" in said[2]
    assert said[3] == "2\n" and said[4].strip() == "checked 2 runs in DB: all readable"
    assert said[5].startswith("removed run 1 of cluster lab (first") and said[6] == "1\n"
    again = bench("history", "add", str(b), "--cluster", "lab", "--db", history_at, check=False)
    assert again.returncode == 2 and "already in the history as run 2" in again.stderr, again.describe()
    r = bench("regress", str(real_run), "--cluster", "lab", "--db", history_at, "--out", str(tmp_path / "g"))
    assert r.returncode == 0 and "history run 2 (" in (tmp_path / "g" / "report.md").read_text()


def test_migrate_makes_a_history_and_then_has_nothing_to_do(tmp_path, postgres):
    for db in (str(tmp_path / "h.sqlite"), postgres.new_database("migrated")):
        first = bench("history", "migrate", "--db", db).stdout
        assert first.strip() == f"{store.Location(db)}: migrated from schema 0 to 3 (a new history)", first
        again = bench("history", "migrate", "--db", db).stdout
        assert again.strip() == f"{store.Location(db)}: already at schema 3, nothing to do"


def test_a_history_at_an_older_schema_is_refused_until_migrated(real_run, tmp_path):
    """A history written before migrations were numbered: meta's version 2, runs, data and
    points, no gate or node tables. Writers and readers name the command; it migrates."""
    db = tmp_path / "old.sqlite"
    _, _, first = store.migrations()[0]
    with sqlite3.connect(db) as con:
        con.executescript(first.format(**store.TYPES[store.SQLITE]))
    for args in (["history", "add", str(real_run), "--cluster", "lab"], ["history", "list"]):
        r = bench(*args, "--db", str(db), check=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
        assert f"at schema 1, this bench writes 3; run `bench history migrate --db {db}`" in r.stderr
    assert "migrated from schema 1 to 3" in bench("history", "migrate", "--db", str(db)).stdout
    assert (
        "as run 1 of cluster lab" in bench("history", "add", str(real_run), "--cluster", "lab", "--db", str(db)).stdout
    )


def test_an_empty_postgresql_database_is_not_set_up_by_a_writer(real_run, postgres):
    url = postgres.new_database("empty")
    r = bench("history", "add", str(real_run), "--cluster", "lab", "--db", url, check=False)
    assert r.returncode == 2 and f"`bench history migrate --db {store.Location(url)}`" in r.stderr, r.describe()
    assert postgres.password not in r.stderr + r.stdout


def test_a_server_that_cannot_be_used_is_one_line_without_the_password(postgres, tmp_path):
    closed = postgres.url(password="x").replace(f":{postgres.port}/", ":1/")
    cases = [
        (postgres.url("postgres", password="wrong-secret"), "password authentication failed"),
        (closed, "Connection refused"),
        (postgres.url("no_such_db"), 'database "no_such_db" does not exist'),
    ]
    for url, words in cases:
        r = bench("history", "list", "--db", url, check=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
        port = re.search(r":(\d+)/", url)[1]
        assert f"host 127.0.0.1, port {port}, database {url.rsplit('/', 1)[1]}" in r.stderr, r.stderr
        assert words in r.stderr and "wrong-secret" not in r.stderr and postgres.password not in r.stderr


def test_migrations_at_the_same_moment_leave_one_schema(postgres):
    """Eight `history migrate` at once on a new database: the advisory lock lets one make the
    tables; the others wait and find nothing to do."""
    url = postgres.new_database("raced")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        said = list(pool.map(lambda _: bench("history", "migrate", "--db", url).stdout, range(8)))
    assert sum("migrated from schema 0 to 3" in s for s in said) == 1, said
    assert sum("nothing to do" in s for s in said) == 7, said
    import psycopg

    with psycopg.connect(url) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchall() == [("3",)]
