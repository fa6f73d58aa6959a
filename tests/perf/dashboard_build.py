"""`bench dashboard` of a fleet at size (docs/guides/dashboard.md, "Speed"): 100 clusters x 365 nights x
200 keys, 7.3 million judged figures with their bands, in PostgreSQL. Not part of the test suite;
run

    python tests/perf/dashboard_build.py [--clusters 100] [--nights 365] [--rounds 3] [--sqlite]

The fleet is fleet_history.py's (a real night collected, judged and added by bench, its stored
rows written once per cluster and night by COPY), with figures that move as real ones do: each
night's busbw off by up to 3% (a seeded generator), the band 5% either side of the template's
baseline, and every seventh cluster 40% slower from 30 nights before the end, failed by the gate
there, with a stored change point on each of its keys. Then `bench dashboard` is timed as a user
runs it, the interpreter's start included, and the largest page named. Target: under 60 s, and
no page over 2 MB. --sqlite seeds an SQLite file instead (a quick look at a smaller fleet).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parents[1])]  # fixtures, postgres, bench

from fleet_history import START, bench, seed, template_rows  # noqa: E402

from harness.analysis import store  # noqa: E402
from harness.analysis.sides import KEYS, key_texts  # noqa: E402

SHAPED_EVERY = 7  # every seventh cluster (3, 10, 17, ...) is shaped for its last SHAPED_NIGHTS
SHAPED_NIGHTS = 30
SLOWER_BY = 0.6


def shaped(cluster: int) -> bool:
    return cluster % SHAPED_EVERY == 3


def vary(nights: int):
    """fleet_history.seed's hook: each night's figures moved, shaped clusters slower at the end."""
    rng = random.Random(0)
    noise = [1 + rng.uniform(-0.03, 0.03) for _ in range(1 << 16)]

    def change(table: str, row: dict, cluster: int, night: int) -> None:
        slow = shaped(cluster) and night >= nights - SHAPED_NIGHTS
        if table == "gate_bands" and row["value"] is not None:
            base = row["baseline"]
            f = noise[(cluster * 7919 + night * 104729 + zlib.crc32(row["key"].encode()) % 997) % len(noise)]
            row["value"] = base * f * (SLOWER_BY if slow else 1)
            row["low"], row["high"] = base * 0.95, base * 1.05
            row["verdict"] = "slower" if slow else "no significant change"
        elif table == "gate_runs":
            row["verdict"], row["status"] = ("failed", 1) if slow else ("passed", 0)

    return change


def change_points(con, rows, clusters: int, nights: int) -> None:
    """A stored change point on every key of each shaped cluster, where it slowed."""
    import pandas as pd

    cols, bands = rows["gate_bands"]
    keys = [dict(zip(cols, r)) for r in bands]
    texts = key_texts(pd.DataFrame([json.loads(k["key"]) for k in keys], columns=KEYS))
    at = nights - SHAPED_NIGHTS
    found = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).isoformat()
    con.executemany(
        "INSERT INTO change_points (cluster, kind, stack, metric, key, run_id, before, after, change, p_value, "
        "method, permutations, alpha, min_segment, threshold, found) VALUES "
        "(?, 'runs', NULL, ?, ?, ?, ?, ?, ?, 0.002, 'E-divisive means', 499, 0.05, 3, 0.05, ?)",
        [
            (
                f"c{c:03d}",
                k["metric"],
                text,
                c * nights + at + 1,
                k["baseline"],
                k["baseline"] * SLOWER_BY,
                SLOWER_BY - 1,
                found,
            )
            for c in range(clusters)
            if shaped(c)
            for k, text in zip(keys, texts)
        ],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clusters", type=int, default=100)
    ap.add_argument("--nights", type=int, default=365)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sqlite", action="store_true", help="seed an SQLite file, not a throwaway PostgreSQL")
    ap.add_argument("--keep", metavar="DIR", help="leave the last site in DIR, to open")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dashboard-"))
    scope = contextlib.ExitStack()
    try:
        _, rows = template_rows(root)
        keys = len(rows["gate_bands"][1])
        if args.sqlite:
            db, kind = str(root / "fleet.sqlite"), store.SQLITE
        else:
            import postgres

            server = scope.enter_context(postgres.throwaway("dashboard-postgres-"))
            db, kind = server.new_database("fleet"), store.POSTGRES
        bench("history", "migrate", "--db", db)
        began = time.perf_counter()
        with store.session(db) as con, con.transaction():
            seed(con, kind, rows, args.clusters, args.nights, vary(args.nights))
            change_points(con, rows, args.clusters, args.nights)
            if kind == store.POSTGRES:
                con.execute("ANALYZE")
        print(
            f"seeded {args.clusters} clusters x {args.nights} nights x {keys} keys "
            f"({args.clusters * args.nights * keys:,} figures, from {START.date()}) "
            f"in {time.perf_counter() - began:.0f} s"
        )
        times, sizes = [], {}
        for i in range(args.rounds):
            out = root / f"site{i}"
            times.append(bench("dashboard", "--db", db, "--out", str(out)))
            sizes = {p.name: p.stat().st_size for p in out.iterdir()}
        largest = max(sizes, key=lambda n: sizes[n])
        print(
            f"bench dashboard: median {statistics.median(times):.1f} s (min {min(times):.1f}, max {max(times):.1f}, "
            f"{args.rounds} rounds); {len(sizes)} files, {sum(sizes.values()) / 1e6:.0f} MB; the largest {largest} "
            f"{sizes[largest] / 1e6:.2f} MB; index.html {sizes['index.html'] / 1e3:.0f} kB"
        )
        if args.keep:
            shutil.rmtree(args.keep, ignore_errors=True)
            shutil.copytree(root / f"site{args.rounds - 1}", args.keep)
    finally:
        scope.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
