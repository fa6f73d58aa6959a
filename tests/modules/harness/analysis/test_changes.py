"""Change points (docs/concepts/noise.md): the energy statistic against its definition, a step found and
noise left alone, and `history changes` naming the run a step started with."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest
from conftest import bench, copy_run, planned_later

from harness.analysis import changes, store


def test_energy_statistic_matches_its_definition():
    rng = np.random.default_rng(3)
    x = rng.normal(0, 0.1, 11)
    q = changes.energy(x[None, :])[0]
    for t in range(changes.MIN_SEGMENT, len(x) - changes.MIN_SEGMENT + 1):
        a, b = x[:t], x[t:]
        m, k = len(a), len(b)
        within = lambda s: sum(abs(u - v) for u, v in itertools.combinations(s, 2)) / (len(s) * (len(s) - 1) / 2)  # noqa: E731
        want = m * k / (m + k) * (2 * sum(abs(u - v) for u in a for v in b) / (m * k) - within(a) - within(b))
        assert q[t] == pytest.approx(want)
    assert np.isneginf(q[: changes.MIN_SEGMENT]).all()


@pytest.mark.parametrize("n", [6, 7, 40, 129])
def test_long_series_are_summed_by_rank_as_every_pair_sums_them(n, monkeypatch):
    """The O(n log n) sums a long series takes (changes._pair_sums) give every split's Q as the
    n x n distances do, ties included, and so the same steps with the same p."""
    rng = np.random.default_rng(n)
    x = np.round(rng.normal(0, 0.1, (4, n)), 2)  # rounded: values repeat
    monkeypatch.setattr(changes, "DENSE_MAX", 10**9)
    dense = changes.energy(x)
    step = np.r_[rng.normal(0, 0.05, n - n // 3), rng.normal(np.log(0.7), 0.05, n // 3)]
    found = changes.change_points(step, seed=4)
    monkeypatch.setattr(changes, "DENSE_MAX", 0)
    ranked = changes.energy(x)
    assert np.array_equal(np.isneginf(dense), np.isneginf(ranked))
    assert np.allclose(dense[np.isfinite(dense)], ranked[np.isfinite(ranked)], rtol=1e-9, atol=1e-12)
    assert changes.change_points(step, seed=4) == found


def test_change_points_find_a_step_and_leave_noise_alone():
    rng = np.random.default_rng(11)
    step = np.r_[rng.normal(0, 0.05, 8), rng.normal(np.log(0.5), 0.05, 6)]
    found = changes.change_points(step, seed=1)
    assert [t for t, _ in found] == [8] and found[0][1] < 0.05
    assert changes.change_points(step, seed=1) == found  # seeded: the same answer every time
    flat = rng.normal(0, 0.05, 14)
    assert changes.change_points(flat, seed=2) == []


def test_history_changes_names_the_run_a_step_started_with(real_run, tmp_path, history_at):
    """Five nights, then three at half the rates: each of the 5 series steps at run 6. With
    --store the steps are kept per series with what found them, once however often stored."""
    rng = np.random.default_rng(5)
    for i in range(8):  # 5 + 3: the fewest runs an exact permutation test can split at 0.05
        factor = (1.0 if i < 5 else 2.0) * float(rng.uniform(0.98, 1.02))
        run = planned_later(copy_run(real_run, tmp_path / f"r{i}", time_factor=factor), f"0{i}")
        bench("history", "add", str(run), "--create", "--cluster", "lab", "--label", f"night{i}", "--db", history_at)
    r = bench("history", "changes", "--cluster", "lab", "--db", history_at)
    assert "change points in 5 series of cluster lab (8 runs; E-divisive means" in r.stdout, r.describe()
    steps = [line for line in r.stdout.splitlines() if line.startswith("run ")]
    night5 = json.loads((tmp_path / "r5" / "plan.json").read_text())["created"]
    assert len(steps) == 5 and all(line.startswith(f"run 6 (night5) of {night5}:") for line in steps), r.stdout
    assert all(re.search(r"\(-4\d\.\d%, p 0\.0\d\d\)", line) for line in steps), r.stdout
    assert changes.stored(history_at, "lab") == []  # a search without --store keeps nothing
    for _ in range(2):
        r = bench("history", "changes", "--cluster", "lab", "--store", "--db", history_at)
        assert r.stdout.rstrip().endswith("stored 5 change points in " + str(store.Location(history_at))), r.stdout
    kept = changes.stored(history_at, "lab")
    assert len(kept) == 5 and {k[0] for k in kept} == {changes.RUNS} and {k[4] for k in kept} == {6}, kept
    assert len({k[1] for k in kept}) == 1 and len(kept[0][1]) == 12  # one stack: one series per key
    assert {k[9:] for k in kept} == {("E-divisive means", changes.PERMUTATIONS, changes.ALPHA, 3, 0.05)}
    assert all(-0.5 < change < -0.4 and after < before for *_, before, after, change, _p in (k[:9] for k in kept))
    bench("history", "remove", "6", "--db", history_at)
    assert changes.stored(history_at, "lab") == []
