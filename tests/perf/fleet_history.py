"""A fleet's history at size (docs/guides/fleet.md, "Speed"): 100 clusters x 365 nights x 200 keys,
7.3 million figures, in PostgreSQL; and one cluster's 365 nights in SQLite, the default. Not part
of the test suite; run

    python tests/perf/fleet_history.py [--clusters 100] [--nights 365] [--rounds 5]

It starts a throwaway PostgreSQL server (tests/postgres.py) unless --db names one. One night is a
real run directory of 8 jobs x 25 all-reduce sizes (200 keys, tests/perf/fixtures.py), collected
by bench, added to a history by bench, and judged by `bench regress` against it; the fleet is
that night's stored rows (the run, its Parquet, its points, the gate's verdict and its 200
bands) written once per cluster and night with their own identity and date, by COPY. Then each
command is timed as a user runs it, the interpreter's start included: `bench history add` of a
new night, `bench regress` of a night against its cluster's history, `bench history list` of one
cluster. Targets on PostgreSQL: add under 1 s, regress under 2 s, list under 1 s.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parents[1])]  # fixtures, postgres, bench

from fixtures import dated, make_run  # noqa: E402

from harness.analysis import store  # noqa: E402

START = dt.datetime(2025, 11, 1, 2, tzinfo=dt.timezone.utc)
LATER = dt.datetime(2030, 1, 1, 2, tzinfo=dt.timezone.utc)  # the nights measured: after every seeded one
# What is written per night, in the order of the tables' references
MIXED = ("--allow-rules-change",)
TABLES = ("runs", "data", "points", "gate_runs", "gate_keys", "gate_bands")


CHECKOUT = HERE.parents[1]  # the bench timed: this one, unless --before names another


def bench(*args: str, checkout: Path = CHECKOUT) -> float:
    """Seconds `bench ARGS` of the bench in `checkout` takes, interpreter included; a failure
    stops the script."""
    began = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    p = subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, cwd=checkout, env=env
    )
    took = time.perf_counter() - began
    if p.returncode not in (0, 3):
        shown = " ".join(str(store.Location(a)) if a.startswith("postgresql://") else a for a in args)
        sys.exit(f"bench {shown} ended with {p.returncode}:\n{p.stdout}{p.stderr}")
    return took


def night(root: Path, template: Path, tag: str, when: dt.datetime) -> Path:
    """A copy of the template night with a plan of its own (so an identity of its own)."""
    out = root / tag
    shutil.copytree(template, out, symlinks=True, ignore=shutil.ignore_patterns("regress"))
    return dated(out, when)


def template_rows(root: Path) -> tuple[Path, dict[str, tuple[list[str], list[tuple]]]]:
    """(a night's run directory, what bench stored of it: table -> (columns, rows)), the night
    added after a first one and judged against it, so that it has a verdict and bands."""
    run = make_run(root / "night", 8)
    bench("collect", str(run.path))
    db = root / "template.sqlite"
    first = night(root, run.path, "first", START - dt.timedelta(days=1))
    bench("history", "add", str(first), "--create", "--cluster", "c", "--db", str(db))
    # the fixture's results name no measurement rules (1) in a plan of rules 2: allowed, as alike
    bench("regress", str(run.path), "--cluster", "c", "--db", str(db), "--baseline", "last", *MIXED)
    bench("history", "add", str(run.path), "--cluster", "c", "--db", str(db))
    out = {}
    with store.session(db) as con:
        for table in TABLES:
            key = "id" if table == "runs" else "run_id"
            cur = con.execute(f"SELECT * FROM {table} WHERE {key} = 2")
            out[table] = ([d[0] for d in cur.description], [tuple(r) for r in cur.fetchall()])
    assert len(out["gate_bands"][1]) == 200, len(out["gate_bands"][1])
    return run.path, out


def seed(con, kind: str, rows: dict[str, tuple[list[str], list[tuple]]], clusters: int, nights: int, vary=None) -> None:
    """Every cluster's nights: the template's rows with their own id, identity, cluster and date;
    `vary(table, row, cluster index, night index)`, when given, changes a row's dict in place."""
    cols = {t: c for t, (c, _) in rows.items()}

    def night_rows(table: str, run_id: int, cluster: str, when: str):
        for r in rows[table][1]:
            d = dict(zip(cols[table], r))
            if table == "runs":
                d.update(id=run_id, fingerprint=f"{cluster}-{run_id}", cluster=cluster, created=when, label="nightly")
            else:
                d["run_id"] = run_id
            if vary is not None:
                vary(table, d, *divmod(run_id - 1, nights))
            yield tuple(d[c] for c in cols[table])

    nights_of = [
        (c * nights + n + 1, f"c{c:03d}", (START + dt.timedelta(days=n)).isoformat())
        for c in range(clusters)
        for n in range(nights)
    ]
    for table in TABLES:
        if kind == store.POSTGRES:
            with con.raw.cursor().copy(f"COPY {table} ({', '.join(cols[table])}) FROM STDIN") as cp:
                for args in nights_of:
                    for row in night_rows(table, *args):
                        cp.write_row(row)
        else:
            marks = ", ".join("?" * len(cols[table]))
            con.executemany(
                f"INSERT INTO {table} ({', '.join(cols[table])}) VALUES ({marks})",
                [row for args in nights_of for row in night_rows(table, *args)],
            )
    if kind == store.POSTGRES:
        con.execute("SELECT setval(pg_get_serial_sequence('runs', 'id'), (SELECT max(id) FROM runs))")
        con.execute("ANALYZE")


def measure(
    db: str, template: Path, root: Path, cluster: str, rounds: int, checkout: Path = CHECKOUT
) -> dict[str, list[float]]:
    root.mkdir()
    times: dict[str, list[float]] = {"history add (a new night)": [], "regress (median:5)": [], "history list": []}
    for i in range(rounds):
        new = night(root, template, f"{root.name}{i}", LATER + dt.timedelta(hours=i))
        times["history add (a new night)"].append(
            bench("history", "add", str(new), "--cluster", cluster, "--db", db, checkout=checkout)
        )
        times["regress (median:5)"].append(
            bench(
                "regress",
                str(template),
                "--cluster",
                cluster,
                "--db",
                db,
                "--out",
                str(root / f"g{i}"),
                *MIXED,
                checkout=checkout,
            )
        )
        times["history list"].append(bench("history", "list", "--cluster", cluster, "--db", db, checkout=checkout))
    return times


def report(what: str, figures: int, times: dict[str, list[float]]) -> None:
    print(f"\n{what} ({figures:,} figures)")
    for name, ts in times.items():
        print(f"  {name:28} median {statistics.median(ts):6.3f} s   min {min(ts):6.3f}   max {max(ts):6.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clusters", type=int, default=100)
    ap.add_argument("--nights", type=int, default=365)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--db", help="an empty PostgreSQL database's URL (default: a throwaway server)")
    ap.add_argument(
        "--before",
        metavar="CHECKOUT",
        help="also time the SQLite commands with the bench in this checkout (an SQLite-only bench: before "
        "PostgreSQL), on the same history",
    )
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fleet-"))
    scope = contextlib.ExitStack()
    try:
        template, rows = template_rows(root)
        keys = len(rows["gate_bands"][1])
        url = args.db
        if url is None:
            import postgres

            url = scope.enter_context(postgres.throwaway("fleet-postgres-")).new_database("fleet")
        bench("history", "migrate", "--db", url)
        began = time.perf_counter()
        with store.session(url) as con, con.transaction():
            seed(con, store.POSTGRES, rows, args.clusters, args.nights)
        took = time.perf_counter() - began
        print(f"seeded {args.clusters} clusters x {args.nights} nights in PostgreSQL in {took:.0f} s")
        report(
            f"PostgreSQL, {args.clusters} clusters x {args.nights} nights x {keys} keys",
            args.clusters * args.nights * keys,
            measure(url, template, root / "postgresql", "c042" if args.clusters > 42 else "c000", args.rounds),
        )
        lite = str(root / "one-cluster.sqlite")
        bench("history", "migrate", "--db", lite)
        with store.session(lite) as con, con.transaction():
            seed(con, store.SQLITE, rows, 1, args.nights)
        report(
            f"SQLite, 1 cluster x {args.nights} nights x {keys} keys",
            args.nights * keys,
            measure(lite, template, root / "sqlite", "c000", args.rounds),
        )
        if args.before:
            before = Path(args.before).resolve()
            report(
                f"SQLite, the same history, the bench in {before}",
                args.nights * keys,
                measure(lite, template, root / "before", "c000", args.rounds, before),
            )
        size = Path(lite).stat().st_size / 1e6
        print(f"\nSQLite file: {size:.0f} MB; {json.dumps({'python': sys.version.split()[0]})}")
    finally:
        scope.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
