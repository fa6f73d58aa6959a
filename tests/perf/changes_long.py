"""How `bench history changes` grows with the nights of one key, the search it runs per series
(harness/analysis/changes.py: E-divisive means, 499 seeded shuffles per split):

    python tests/perf/changes_long.py [--nights 250,500,1000,2000] [--dense]

Each series is a key's log values with 5% noise and a 20% step at 60% of its nights, so the
search splits once and then searches both halves, as a year of one key's nightly history with
one change would have it. `--dense` sums every pair's distance at every length (the search of
before, n x n per shuffle) for comparison. Prints the seconds per series at each length; the
docs' speed table (CONTRIBUTING.md, "Speed") quotes them.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from harness.analysis import changes


def series(nights: int, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    at = int(nights * 0.6)
    return np.r_[rng.normal(0, 0.05, at), rng.normal(np.log(0.8), 0.05, nights - at)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", default="250,500,1000,2000")
    parser.add_argument("--dense", action="store_true", help="every pair's distance, at every length")
    args = parser.parse_args()
    if args.dense:
        changes.DENSE_MAX = 10**9
    for nights in (int(n) for n in args.nights.split(",")):
        x = series(nights)
        start = time.perf_counter()
        found = changes.change_points(x, seed=1)
        took = time.perf_counter() - start
        print(f"{nights:>6} nights: {took:7.2f} s per series, steps at {[t for t, _ in found]}", flush=True)


if __name__ == "__main__":
    main()
