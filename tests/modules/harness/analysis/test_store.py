"""Where a history lives (harness/analysis/store.py, docs/guides/fleet.md): an SQLite file or a
PostgreSQL database on a real server (tests/postgres.py), the numbered migrations and what a
history at another schema gets, and the one line a server that cannot be reached gives."""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import math
import re
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import bench, copy_run, planned_later

from harness.analysis import store


def _same(text: str, db: str) -> str:
    """Output with the history's name taken out, to compare across backends."""
    return text.replace(str(store.Location(db)), "DB")


def test_the_same_run_again_is_a_no_op_and_replace_swaps_it(real_run, tmp_path, history_at):
    """On both backends; every other history command is compared across them below."""
    a = planned_later(copy_run(real_run, tmp_path / "a"), "0")
    b = planned_later(copy_run(real_run, tmp_path / "b"), "1")
    for run in (a, b):
        bench("history", "add", str(run), "--create", "--cluster", "lab", "--db", history_at)
    # the same run again: nothing added, and said; other figures under its identity: refused
    # unless --replace, which stores them in its place
    again = _same(
        bench("history", "add", str(b), "--create", "--cluster", "lab", "--db", history_at).stdout, history_at
    )
    assert again.strip() == f"{b} is in DB already, as run 2 of cluster lab with these figures: nothing added"
    slower = copy_run(b, tmp_path / "b-slower", time_factor=2)  # the same plan, other figures
    r = bench("history", "add", str(slower), "--create", "--cluster", "lab", "--db", history_at, check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert "already in the history as run 2" in r.stderr and "this one has other figures: `--replace`" in r.stderr
    other = bench("history", "add", str(b), "--create", "--cluster", "other", "--db", history_at, check=False)
    assert other.returncode == 2 and "this one has cluster other, label -" in other.stderr, other.describe()
    replaced = bench(
        "history", "add", str(slower), "--create", "--cluster", "lab", "--replace", "--db", history_at
    ).stdout
    assert "as run 3 of cluster lab" in replaced and "in place of run 2" in replaced, replaced
    assert bench("history", "list", "--count", "--cluster", "lab", "--db", history_at).stdout == "2\n"
    bench("history", "add", str(b), "--create", "--cluster", "lab", "--replace", "--db", history_at)
    r = bench("regress", str(real_run), "--cluster", "lab", "--db", history_at, "--out", str(tmp_path / "g"),
              "--must-catch", "100%")  # fmt: skip
    assert r.returncode == 0 and "(history runs 1, 4)" in (tmp_path / "g" / "report.md").read_text()


def test_every_history_command_says_the_same_on_both_backends(real_run, tmp_path, postgres):
    """One script of history commands, run on an SQLite file and on a PostgreSQL database: the
    same words, exit statuses and files, but for the history's name and the times rows were
    added. Nights 1-3 alike, nights 4 and 5 at half their rates."""
    nights = [planned_later(copy_run(real_run, tmp_path / f"n{i}", time_factor=1 + (i >= 3)), f"0{i}")
              for i in range(5)]  # fmt: skip
    said: dict[str, list[tuple[int, str, str]]] = {}
    for name, db in (("sqlite", str(tmp_path / "h.sqlite")), ("postgresql", postgres.new_database("same"))):
        out = tmp_path / name
        script = [
            ["history", "migrate"],
            *(
                ["history", "add", str(n), "--create", "--cluster", "lab", "--label", f"night{i}"]
                for i, n in enumerate(nights[:3])
            ),
            [
                "regress",
                str(nights[3]),
                "--cluster",
                "lab",
                "--baseline",
                "median:3",
                "--out",
                str(out / "g"),
                "--must-catch",
                "100%",
            ],
            ["history", "add", str(nights[3]), "--cluster", "lab", "--verdict", str(out / "g" / "gate.json")],
            ["history", "add", str(nights[3]), "--cluster", "lab"],
            ["history", "add", str(nights[3]), "--cluster", "other"],
            ["history", "accept", "4", "--reason", "new firmware"],
            ["history", "list", "--cluster", "lab"],
            ["history", "list", "--count"],
            ["history", "plot", "--cluster", "lab", "--out", str(out / "h.png")],
            ["history", "changes", "--cluster", "lab", "--store"],
            ["history", "check"],
            ["regress", str(nights[4]), "--cluster", "lab", "--out", str(out / "g2"), "--must-catch", "100%"],
            ["history", "remove", "1"],
            ["history", "list", "--count", "--cluster", "lab"],
            ["history", "remove", "9"],
        ]
        said[name] = []
        for args in script:
            r = bench(*args, "--db", db, check=False)
            # words, not widths: a table is as wide as the history's name in its title
            words = [
                " ".join(_same(t, db).replace(str(out), "OUT").replace("━", "").split()) for t in (r.stdout, r.stderr)
            ]
            said[name].append((r.returncode, *(re.sub(r"\d\d:\d\d:\d\d", "TIME", w) for w in words)))
        said[name].append(
            (0, (out / "h.csv").read_text(), (out / "g2" / "report.md").read_text().replace(str(out), "OUT"))
        )
    for step, (lite, pg) in enumerate(zip(said["sqlite"], said["postgresql"])):
        assert lite == pg, f"step {step}: {lite} != {pg}"
    statuses = [s for s, _, _ in said["sqlite"]]
    # night 5 against night 4, accepted: judged provisionally, which loopback may leave unjudged
    assert statuses[:14] + statuses[15:] == [0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0], said["sqlite"]
    assert statuses[14] in (0, 3) and "history run 4 (" in said["sqlite"][-1][2]
    assert "nothing added" in said["sqlite"][6][1] and "4 runs" in said["sqlite"][9][1]


def test_migrate_makes_a_history_and_then_has_nothing_to_do(tmp_path, postgres):
    for db in (str(tmp_path / "h.sqlite"), postgres.new_database("migrated")):
        first = bench("history", "migrate", "--db", db).stdout
        new = f"{store.Location(db)}: migrated from schema 0 to {store.SCHEMA_VERSION} (a new history)"
        assert first.strip() == new, first
        again = bench("history", "migrate", "--db", db).stdout
        assert again.strip() == f"{store.Location(db)}: already at schema {store.SCHEMA_VERSION}, nothing to do"


def test_a_damaged_schema_number_or_a_device_is_one_line(tmp_path):
    """meta's schema '²' (a digit to str.isdigit, not to int) or 5,000 digits (past int()'s
    limit), in list and in migrate; and --db a character device, which SQLite would open and
    leave a journal beside: one line, exit 2, and nothing made."""
    db = tmp_path / "h.sqlite"
    bench("history", "migrate", "--db", str(db))
    for schema in ("²", "9" * 5000):
        with sqlite3.connect(db) as con:
            con.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (schema,))
        for action in ("list", "migrate"):
            r = bench("history", action, "--db", str(db), check=False)
            assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
            assert "is not a migration's number: the history is damaged" in r.stderr, r.stderr
    r = bench("history", "list", "--db", "/dev/null", check=False)
    assert r.returncode == 2 and "--db /dev/null: is a character device, not a file" in r.stderr, r.describe()
    assert not Path("/dev/null-journal").exists()


def test_a_history_at_an_older_schema_is_refused_until_migrated(real_run, tmp_path):
    """A history written before migrations were numbered: meta's version 2, runs, data and
    points, no gate or node tables. Writers and readers name the command; it migrates."""
    db = tmp_path / "old.sqlite"
    _, _, first = store.migrations()[0]
    with sqlite3.connect(db) as con:
        con.executescript(first.format(**store.TYPES[store.SQLITE]))
    for args in (["history", "add", str(real_run), "--create", "--cluster", "lab"], ["history", "list"]):
        r = bench(*args, "--db", str(db), check=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
        want = f"at schema 1, this bench writes {store.SCHEMA_VERSION}; run `bench history migrate --db {db}`"
        assert want in r.stderr, r.stderr
    assert f"migrated from schema 1 to {store.SCHEMA_VERSION}" in bench("history", "migrate", "--db", str(db)).stdout
    assert (
        "as run 1 of cluster lab"
        in bench("history", "add", str(real_run), "--create", "--cluster", "lab", "--db", str(db)).stdout
    )


def test_an_empty_postgresql_database_is_not_set_up_by_a_writer(real_run, postgres):
    url = postgres.new_database("empty")
    r = bench("history", "add", str(real_run), "--create", "--cluster", "lab", "--db", url, check=False)
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
    # URLs that libpq reads otherwise than urlsplit, or not at all, and a password from the
    # environment: one line, exit 2, no piece of the secret (its halves either side of the @)
    base = f"127.0.0.1:{postgres.port}/postgres"
    for url, env, words in (
        (f"postgresql://u:tops3cret@lEak3d@{base}", {}, "write @ in a password as %40"),
        (f"postgresql://u@{base}?password=tops3cret%zzlEak3d", {}, "write % as %25"),
        ("postgresql://u:tops3cret@[::1/postgres?x=lEak3d", {}, "an unclosed ["),
        (f"postgresql://u:tops3cretlEak3d@{base}", {}, "password authentication failed"),
        (f"postgresql://u@{base}?password=tops3cretlEak3d", {}, "password authentication failed"),
        (f"postgresql://u@{base}", {"PGPASSWORD": "tops3cretlEak3d"}, "password authentication failed"),
    ):
        r = bench("history", "list", "--db", url, check=False, env=env)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
        said = r.stdout + r.stderr
        assert words in said and "tops3cret" not in said and "lEak3d" not in said, said


def test_migrations_at_the_same_moment_leave_one_schema(postgres):
    """Eight `history migrate` at once on a new database: the advisory lock lets one make the
    tables; the others wait and find nothing to do."""
    url = postgres.new_database("raced")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        said = list(pool.map(lambda _: bench("history", "migrate", "--db", url).stdout, range(8)))
    assert sum(f"migrated from schema 0 to {store.SCHEMA_VERSION}" in s for s in said) == 1, said
    assert sum("nothing to do" in s for s in said) == 7, said
    import psycopg

    with psycopg.connect(url) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchall() == [(str(store.SCHEMA_VERSION),)]


def test_two_migrations_and_six_writers_at_once_leave_each_row_once(real_run, tmp_path, postgres):
    """Eight processes on a new database: two `history migrate` and six `history add` (three
    runs, each twice). The test holds the migrations' advisory lock until all eight wait on it,
    the migrations first in its queue: one migrates, the other finds nothing to do, and the
    writers, waiting on the lock shared, find the schema made and store each run once."""
    import psycopg

    url = postgres.new_database("raced_writers")
    runs = [planned_later(copy_run(real_run, tmp_path / f"r{i}"), str(i)) for i in range(3)]
    waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"

    def until(count: int, watch) -> None:
        """Until `count` processes wait on the lock, or 30 s: without the lock they would not wait,
        and the counts below say what they did instead."""
        deadline = time.monotonic() + 30
        while watch.execute(waiting).fetchone()[0] < count and time.monotonic() < deadline:
            time.sleep(0.1)

    with psycopg.connect(url, autocommit=True) as hold, concurrent.futures.ThreadPoolExecutor(8) as pool:
        hold.execute("SELECT pg_advisory_lock(%s)", (store.MIGRATION_LOCK,))
        migrations = [pool.submit(bench, "history", "migrate", "--db", url, timeout=180, check=False) for _ in range(2)]
        until(2, hold)
        adds = [pool.submit(bench, "history", "add", str(r), "--create", "--cluster", "lab", "--db", url, timeout=180,
                            check=False) for r in runs * 2]  # fmt: skip
        until(8, hold)
        hold.execute("SELECT pg_advisory_unlock(%s)", (store.MIGRATION_LOCK,))
        migrated = [(m := f.result()).stdout + m.stderr for f in migrations]
        added = [(a := f.result()).stdout + a.stderr for f in adds]
    assert sum(f"migrated from schema 0 to {store.SCHEMA_VERSION}" in s for s in migrated) == 1, migrated
    assert sum("nothing to do" in s for s in migrated) == 1, migrated
    assert sum(s.startswith("added ") for s in added) == 3 and sum("nothing added" in s for s in added) == 3, added
    with store.session(url) as con:
        counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("runs", "data")}
        schema = con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchall()
        paths = sorted(p for (p,) in con.execute("SELECT path FROM runs"))
    assert counts == {"runs": 3, "data": 3} and schema == [(str(store.SCHEMA_VERSION),)], (counts, schema)
    assert paths == sorted(str(r.resolve()) for r in runs)


def test_writers_at_the_same_moment_store_each_run_once(real_run, tmp_path, history_at):
    """Eight `history add` processes at once, four runs each added twice: every add exits 0,
    four of them add, four find their run there already, and the history holds each run once
    with its stored tables. On PostgreSQL the test holds a SHARE lock on `runs` (which blocks
    inserts, not reads) until all eight wait on it: each has looked for its run and found none,
    so the second of each pair meets the first's row at its insert."""
    runs = [planned_later(copy_run(real_run, tmp_path / f"r{i}"), str(i)) for i in range(4)]
    hold = None
    if history_at.startswith("postgresql://"):
        import psycopg

        hold = psycopg.connect(history_at)
        hold.execute("LOCK TABLE runs IN SHARE MODE")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        adds = [
            pool.submit(bench, "history", "add", str(r), "--create", "--cluster", "lab", "--db", history_at)
            for r in runs * 2
        ]
        if hold is not None:
            waiting = "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'runs'::regclass"
            deadline = time.monotonic() + 120
            with psycopg.connect(history_at, autocommit=True) as watch:
                while watch.execute(waiting).fetchone()[0] < 8 and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert watch.execute(waiting).fetchone()[0] == 8, "the eight writers never all waited"
            hold.commit()
            hold.close()
        said = [a.result() for a in adds]
    assert all(r.returncode == 0 for r in said)
    assert sum(r.stdout.startswith("added ") for r in said) == 4, [r.stdout for r in said]
    assert sum("nothing added" in r.stdout for r in said) == 4, [r.stdout for r in said]
    with store.session(history_at) as con:
        per_run = con.execute(
            "SELECT r.path, count(d.run_id) FROM runs r JOIN data d ON d.run_id = r.id GROUP BY r.path"
        )
        assert sorted(per_run.fetchall()) == sorted((str(r.resolve()), 1) for r in runs)


def test_grafana_reads_the_views_as_a_reader_that_cannot_write(judged_history, postgres, tmp_path):
    """The views queried as Grafana's PostgreSQL data source queries them (a `time` column,
    ORDER BY time; annotations as time, text, tags), by a role `history grant` let read."""
    import psycopg

    url = postgres.new_database("fleet")
    bench("history", "migrate", "--db", url)
    bench("history", "copy", str(judged_history), url)
    postgres.sql("CREATE ROLE grafana LOGIN PASSWORD 'grafana-secret'")
    said = bench("history", "grant", "grafana", "--db", url).stdout
    assert said.strip() == (
        f"{store.Location(url)}: role grafana may read every table and view of schema public, and those later "
        f"migrations make; it may write none"
    )
    reader = postgres.url("fleet", user="grafana", password="grafana-secret")
    nights = [dt.datetime(2026, 11, day, 2, tzinfo=dt.timezone.utc) for day in (1, 2, 3, 4)]
    with psycopg.connect(reader) as con:
        keys = [k for (k,) in con.execute("SELECT DISTINCT key FROM grafana_series WHERE metric = 'busbw_gbps'")]
        assert keys
        for key in keys:
            series = con.execute(
                "SELECT time, value FROM grafana_series WHERE cluster = 'lab' AND metric = 'busbw_gbps' "
                "AND key = %s ORDER BY time",
                (key,),
            ).fetchall()
            assert [t for t, _ in series] == nights, series
            first, *_, last = [v for _, v in series]
            assert len({v for _, v in series[:3]}) == 1 and math.isclose(last, first / 2, rel_tol=1e-9), series
        bands = con.execute(
            "SELECT time, baseline, low, high, value, verdict FROM grafana_bands WHERE cluster = 'lab' "
            "AND metric = 'busbw_gbps' ORDER BY time"
        ).fetchall()
        assert bands and {b[0] for b in bands} == {nights[3]} and {b[5] for b in bands} == {"slower"}, bands
        assert all(math.isclose(v, base / 2, rel_tol=1e-9) for _, base, _, _, v, _ in bands)
        notes = con.execute(
            "SELECT time, text, tags FROM grafana_annotations WHERE cluster = 'lab' ORDER BY time, text"
        ).fetchall()
        assert notes == [
            (nights[3], "change point: busbw_gbps all_reduce 2x1: 1.0000 -> 0.5000 from run 4", "bench,change point"),
            (nights[3], "failed night: run 4 (night3), gate failed, 0 failed rows", "bench,failed night"),
        ], notes
        nodes = con.execute("SELECT time, key, metric, value FROM grafana_node_series ORDER BY time").fetchall()
        figures = con.execute("SELECT count(*) FROM node_figures WHERE value IS NOT NULL").fetchone()[0]
        assert len(nodes) == figures > 0 and all(v > 0 for *_, v in nodes), nodes
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            con.execute("DELETE FROM runs")
    # bench as the reader: it reads, and a write is one line, exit 2, without the password
    assert "4 runs" in bench("history", "list", "--db", reader).stdout
    new = planned_later(copy_run(judged_history.parent / "n0", tmp_path / "new"), "5")
    r = bench("history", "add", str(new), "--create", "--cluster", "lab", "--db", reader, check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert "permission denied" in r.stderr and "grafana-secret" not in r.stderr + r.stdout
    # a writer as docs/guides/fleet.md grants one: table privileges alone
    postgres.sql("CREATE ROLE nightly LOGIN PASSWORD 'nightly-secret'")
    postgres.sql("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO nightly", database="fleet")
    writer = postgres.url("fleet", user="nightly", password="nightly-secret")
    assert (
        "as run 5 of cluster lab"
        in bench("history", "add", str(new), "--create", "--cluster", "lab", "--db", writer).stdout
    )
    # a role that is not there, however it is spelled, is one line; nothing else happens
    for role in ('x"; DROP TABLE runs; --', "nobody"):
        r = bench("history", "grant", role, "--db", url, check=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "does not exist" in r.stderr, (
            r.describe()
        )
    # PUBLIC (every role, now and later), however spelled, and the server's predefined roles
    for role, words in (("public", "every role (PUBLIC)"), ("PUBLIC", "every role (PUBLIC)"),
                        ("pg_read_all_data", "a predefined role")):  # fmt: skip
        r = bench("history", "grant", role, "--db", url, check=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.describe()
    with psycopg.connect(postgres.url("fleet")) as con:
        granted = con.execute(
            "SELECT count(*) FROM information_schema.role_table_grants "
            "WHERE grantee = 'PUBLIC' AND table_schema = 'public'"
        )
        assert granted.fetchone() == (0,)
    r = bench("history", "grant", "grafana", "--db", str(judged_history), check=False)
    assert r.returncode == 2 and "grant is for a postgresql:// history" in r.stderr, r.describe()
    assert "5 runs" in bench("history", "list", "--db", url).stdout


HOSTILE = [
    "lab'; DROP TABLE runs; --",
    'a "quoted" name \\ with a backslash',
    "%s %(x)s ? $1 :name",
    "集群-α ☃",
    "x" * 200,
]


def test_hostile_names_are_stored_and_come_back_verbatim(real_run, tmp_path, history_at):
    """Cluster names and labels that would break a statement built from them: stored as given,
    listed, judged against and copied as given, on both backends; the tables are all there."""
    for i, name in enumerate(HOSTILE):
        run = planned_later(copy_run(real_run, tmp_path / f"r{i}"), f"0{i}")
        said = bench("history", "add", str(run), "--create", "--new-cluster", "--cluster", name, "--label", name[::-1],
                     "--db", history_at).stdout  # fmt: skip
        assert f"as run {i + 1} of cluster {name} (label {name[::-1]})" in said, said
        r = bench("regress", str(real_run), "--cluster", name, "--db", history_at, "--out", str(tmp_path / f"g{i}"),
                  "--baseline", "last", check=False)  # fmt: skip
        assert r.returncode in (0, 3) and f"history run {i + 1} (" in (tmp_path / f"g{i}" / "report.md").read_text()
        assert bench("history", "list", "--count", "--cluster", name, "--db", history_at).stdout == "1\n"
    with store.session(history_at) as con:
        stored = con.execute("SELECT cluster, label FROM runs ORDER BY id").fetchall()
        assert {"runs", "data", "points", "gate_runs"} <= con.tables()
    assert stored == [(name, name[::-1]) for name in HOSTILE]
    copied = str(tmp_path / "copy.sqlite")
    bench("history", "copy", history_at, copied)
    with store.session(copied) as con:
        assert con.execute("SELECT cluster, label FROM runs ORDER BY id").fetchall() == stored
