"""`bench history changes`: where each key's series of runs stepped, and by how much.

The method is E-divisive means (Matteson and James, "A Nonparametric Approach for Multiple
Change Point Analysis of Multivariate Data", JASA 109, 2014), as MongoDB runs it over every
test's history in its performance CI (Daly et al., "The Use of Change Point Detection to
Identify Software Performance Regressions in a Continuous Integration System", ICPE 2020):

- A series x_1..x_n (here the log of one key's per-run value, oldest first) is split at the
  point tau that maximises the energy statistic between the runs before and after it,
      Q(tau) = m k / (m + k) * (2/(m k) sum|x_i - y_j| - sum_{i<l}|x_i - x_l| / C(m,2)
                                                      - sum_{j<l}|y_j - y_l| / C(k,2)),
  with m runs before and k after (the divergence with exponent alpha = 1).
- The split is kept when a permutation test finds it significant: the largest Q of the series
  shuffled PERMUTATIONS times reaches the observed one in a share p of the shuffles, p < ALPHA.
- Each kept split divides its segment in two, and both halves are searched again.

Segments are at least MIN_SEGMENT runs long, so a step is reported once that many runs on each
side of it show it, and a step smaller than the threshold (5% by default, as asv and Apache
Otava's min_magnitude) is not reported. The permutation test is exact, and that bounds it with
few runs: a perfect split of 4 runs from 3 reaches p = 2/C(7,3) = 0.057 at best, so a step needs
8 runs (5 + 3: 0.036) before it can be found at ALPHA = 0.05. The shuffles are seeded from the
key, so the same history gives the same answer every time (the nondeterminism the Hunter paper
found in E-divisive comes from unseeded shuffles; Fleming et al., ICPE 2023).

A series is a cluster, a stack and a key (analysis/series.py): runs on another stack are
another series, searched apart. `--store` keeps what a search found in the history, as Apache
Otava writes its findings back: per series, the step's first run and medians, and the
parameters that found it, in place of the cluster's earlier findings of the metrics searched.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from harness.analysis import history, series
from harness.analysis.sides import METRICS, key_texts
from harness.analysis.store import Location, now, session

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from harness.analysis.sides import Entry
    from harness.analysis.stats import Values

METHOD = "E-divisive means"
ALPHA = 0.05
PERMUTATIONS = 499
MIN_SEGMENT = 3
RUNS, NODE_CHECKS = "runs", "node checks"  # change_points' kinds
_CHUNK = 4_000_000  # distance-matrix entries held at once over the shuffles
DENSE_MAX = 64  # runs up to which a segment's every distance is summed (energy); longer, by ranks


class Dated(Protocol):
    """A stored run or node check, as a change point names it."""

    @property
    def id(self) -> int: ...
    @property
    def label(self) -> str | None: ...
    @property
    def created(self) -> str: ...


@dataclass(frozen=True)
class Change:
    metric: str
    key: str
    run_id: int  # the first run after the step
    run: str  # that run in words: id, label, date
    before: float  # median of the segment before the step
    after: float  # median of the segment from it
    p_value: float
    stack: str | None = None  # the series' stack (analysis/series.py); None for node checks

    @property
    def change(self) -> float:
        return self.after / self.before - 1


def energy(x: Values) -> Values:
    """Q(tau) for every split of each row of x (shape (r, n)): an (r, n + 1) array, -inf where
    a side would be shorter than MIN_SEGMENT. Each split needs three sums of |x_i - x_j| over
    ordered pairs: within [0, tau) (`left`), across (`cross`) and within [tau, n) (`right`)."""
    import numpy as np

    r, n = x.shape
    tau = np.arange(n + 1)
    if n <= DENSE_MAX:  # every pair's distance, summed by two cumulative sums
        d = np.abs(x[:, :, None] - x[:, None, :])
        c = np.zeros((r, n + 1, n + 1))
        c[:, 1:, 1:] = d.cumsum(axis=1).cumsum(axis=2)
        full = c[:, n, n][:, None]
        left = c[:, tau, tau]  # sum over [0, tau) x [0, tau)
        cross = c[:, tau, n] - left  # [0, tau) x [tau, n)
    else:
        full, left, cross = _pair_sums(x)
    right = full - 2 * cross - left  # [tau, n) x [tau, n)
    m, k = tau.astype(float), (n - tau).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = m * k / n * (2 * cross / (m * k) - left / (m * (m - 1)) - right / (k * (k - 1)))
    q[:, (tau < MIN_SEGMENT) | (tau > n - MIN_SEGMENT)] = -np.inf
    return q


def _pair_sums(x: Values) -> tuple[Values, Values, Values]:
    """(full, left, cross) of energy() in O(r n log n) time and O(r n) memory, for long series,
    where n x n distances per shuffle grow with the square of the nights (CONTRIBUTING.md, "Speed").

    D_i, the sum of |x_i - x_j| over every j, comes from the sorted row's prefix sums; the sum of
    the first tau rows' D_i is left + cross. `left` grows by 2 sum_{i<t} |x_t - x_i| as x_t joins,
    and that sum is x_t (c - c') - (s - s') over the earlier values below x_t (count c, sum s)
    and above it (c', s'), which a Fenwick tree over the values' ranks gives in log n steps:
    every row's tree at once."""
    import numpy as np

    r, n = x.shape
    order = np.argsort(x, axis=1, kind="stable")
    rows = np.arange(r)
    rank = np.empty_like(order)
    rank[rows[:, None], order] = np.arange(n)
    ordered = np.take_along_axis(x, order, axis=1)
    below = np.cumsum(ordered, axis=1) - ordered  # the sum of the values sorted before each
    k = np.arange(n)
    total = ordered.sum(axis=1, keepdims=True)
    d_sorted = k * ordered - below + (total - below - ordered) - (n - 1 - k) * ordered
    d = np.empty_like(x)
    np.put_along_axis(d, order, d_sorted, axis=1)
    counts, sums = np.zeros((r, n + 1)), np.zeros((r, n + 1))
    joined = np.zeros((r, n))  # sum_{i<t} |x_t - x_i|
    seen = np.zeros(r)
    for t in range(n):
        value, at = x[:, t], rank[:, t]
        c, s = np.zeros(r), np.zeros(r)
        i = at.copy()  # the tree's positions 1..at hold ranks 0..at-1: the values below
        while (live := np.flatnonzero(i > 0)).size:
            c[live] += counts[live, i[live]]
            s[live] += sums[live, i[live]]
            i[live] -= i[live] & -i[live]
        joined[:, t] = value * (2 * c - t) - 2 * s + seen
        i = at + 1
        while (live := np.flatnonzero(i <= n)).size:
            counts[live, i[live]] += 1
            sums[live, i[live]] += value[live]
            i[live] += i[live] & -i[live]
        seen += value
    left = np.zeros((r, n + 1))
    left[:, 1:] = np.cumsum(2 * joined, axis=1)
    before = np.zeros((r, n + 1))
    before[:, 1:] = np.cumsum(d, axis=1)
    return before[:, n][:, None], left, before - left


def split(x: Values, rng: np.random.Generator) -> tuple[int, float] | None:
    """(tau, p) of the best split of the series x, or None where it has no room for one."""
    import numpy as np

    n = len(x)
    if n < 2 * MIN_SEGMENT:
        return None
    q = energy(x[None, :])[0]
    tau = int(np.argmax(q))
    best = q[tau]
    hits = 0
    step = max(1, _CHUNK // (n * n)) if n <= DENSE_MAX else PERMUTATIONS  # _pair_sums holds r x n
    for start in range(0, PERMUTATIONS, step):
        count = min(step, PERMUTATIONS - start)
        shuffled = rng.permuted(np.broadcast_to(x, (count, n)), axis=1)
        hits += int((energy(shuffled).max(axis=1) >= best - 1e-12 * abs(best)).sum())
    return tau, (hits + 1) / (PERMUTATIONS + 1)


def change_points(x: Values, seed: int) -> list[tuple[int, float]]:
    """Every significant step of the series, as (index of its first point, p), in order."""
    import numpy as np

    rng = np.random.default_rng(seed)
    found: list[tuple[int, float]] = []
    todo = [(0, len(x))]
    while todo:
        lo, hi = todo.pop()
        got = split(x[lo:hi], rng)
        if got is None or got[1] >= ALPHA:
            continue
        tau, p = got
        found.append((lo + tau, p))
        todo += [(lo, lo + tau), (lo + tau, hi)]
    return sorted(found)


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def runs(db: Location, cluster: str, metrics: tuple[str, ...]) -> tuple[list[Entry], pd.DataFrame]:
    """(entries oldest first, DataFrame of stack, metric, key, entry index, value): each key's
    value per run, the median over the run's usable replicates."""
    import numpy as np
    import pandas as pd

    found = history.entries(db, cluster)
    if not found:
        raise history.HistoryError(f"{db}: no run of cluster {cluster!r}; see `bench history list`")
    with session(db) as con:
        stacks = history.stacks(con, cluster)
    parts = []
    for i, df in enumerate(history.usable_rows(db, found)):
        for name in metrics:
            metric = METRICS[name]
            rows = df[df["workload"].isin(metric.workloads)]
            rows = rows[rows[name].to_numpy(dtype=float, na_value=np.nan) > 0]
            if not len(rows):
                continue
            value = rows.assign(key=key_texts(rows)).groupby("key", sort=False)[name].median()
            parts.append(
                pd.DataFrame(
                    {
                        "stack": series.digest(stacks.get(found[i].id, {})),
                        "metric": name,
                        "key": value.index,
                        "entry": i,
                        "value": value.to_numpy(dtype=float),
                    }
                )
            )
    columns = ["stack", "metric", "key", "entry", "value"]
    return found, (pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns))


def changes(
    db: Location, cluster: str, metrics: tuple[str, ...], threshold: float = 0.05
) -> tuple[list[Change], int, int]:
    """(the steps of at least `threshold` found in every key's series, oldest first; series
    searched; runs)."""
    found, values = runs(db, cluster, metrics)
    return steps_in(found, values, threshold)


def steps_in(found: Sequence[Dated], values: pd.DataFrame, threshold: float) -> tuple[list[Change], int, int]:
    """The change points of every (stack, metric, key) series of `values` (columns stack, where
    there are stacks, metric, key, entry, value: the index into `found` of the run each value is
    from) of at least `threshold`."""
    import numpy as np

    out = []
    searched = 0
    if "stack" not in values:
        values = values.assign(stack="")
    for (stack, metric, key), group in values.groupby(["stack", "metric", "key"], sort=True):
        g = group.sort_values("entry")
        x = np.log(g["value"].to_numpy(dtype=float))
        if len(x) < 2 * MIN_SEGMENT:
            continue
        searched += 1
        points = change_points(x, _seed(f"{metric}|{key}"))
        bounds = [0] + [t for t, _ in points] + [len(x)]
        for j, (t, p) in enumerate(points):
            entry = found[int(g["entry"].iat[t])]
            step = Change(
                str(metric),
                str(key),
                entry.id,
                f"run {entry.id}{f' ({entry.label})' if entry.label else ''} of {entry.created}",
                math.exp(float(np.median(x[bounds[j] : t]))),
                math.exp(float(np.median(x[t : bounds[j + 2]]))),
                p,
                str(stack) or None,
            )
            if abs(step.change) >= threshold:
                out.append(step)
    out.sort(key=lambda c: (c.run_id, c.metric, c.key))
    return out, searched, len(found)


def store(
    db: Location, cluster: str, kind: str, metrics: Sequence[str], found: Sequence[Change], threshold: float
) -> None:
    """Keep a search's change points in the history, in place of the cluster's earlier ones of
    this kind and these metrics, in one transaction."""
    found_at = now()
    column = "run_id" if kind == RUNS else "check_id"
    with session(db) as con, con.transaction():
        con.executemany(
            "DELETE FROM change_points WHERE cluster = ? AND kind = ? AND metric = ?",
            [(cluster, kind, m) for m in metrics],
        )
        con.executemany(
            f"INSERT INTO change_points (cluster, kind, stack, metric, key, {column}, before, after, change, "
            "p_value, method, permutations, alpha, min_segment, threshold, found) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (cluster, kind, c.stack, c.metric, c.key, c.run_id, c.before, c.after, c.change, c.p_value)
                + (METHOD, PERMUTATIONS, ALPHA, MIN_SEGMENT, threshold, found_at)
                for c in found
            ],
        )


def stored(db: Location, cluster: str) -> list[tuple]:
    """The cluster's stored change points: (kind, stack, metric, key, run or check id, before,
    after, change, p, method, permutations, alpha, min_segment, threshold), in that order."""
    with session(db) as con:
        return [
            tuple(r)
            for r in con.execute(
                "SELECT kind, stack, metric, key, coalesce(run_id, check_id), before, after, change, p_value, "
                "method, permutations, alpha, min_segment, threshold FROM change_points WHERE cluster = ? "
                "ORDER BY kind, coalesce(run_id, check_id), metric, key",
                (cluster,),
            )
        ]


def render(
    result: tuple[list[Change], int, int], cluster: str, threshold: float, label: Callable[[str], str] | None = None
) -> str:
    """The search's lines; `label` names a metric (compare's labels by default)."""
    label = label or (lambda metric: METRICS[metric].label)
    found, searched, runs = result
    head = (
        f"change points in {searched} series of cluster {cluster} ({runs} runs; {METHOD}, "
        f"{PERMUTATIONS} permutations, p < {ALPHA}, at least {MIN_SEGMENT} runs on each side, steps of "
        f"{threshold:.0%} or more)"
    )
    if not found:
        return (
            head + "\nno change point found" + ("" if searched else f": a series needs {2 * MIN_SEGMENT} usable runs")
        )
    lines = [head]
    for c in found:
        lines.append(
            f"{c.run}: {label(c.metric)} {c.key}: {c.before:.4g} -> {c.after:.4g} ({c.change:+.1%}, p {c.p_value:.3f})"
        )
    return "\n".join(lines)
