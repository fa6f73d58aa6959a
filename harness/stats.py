"""Statistics that tell a real change from noise, vectorised over many comparisons at once.

Each comparison has two sets of per-iteration times, A and B. The change is estimated on the
log scale, where a slowdown is a shift: d = log(a_i) - log(b_j) over all pairs (i, j).

- Mann-Whitney U test: U counts the pairs with a_i > b_j; under "no change" U is centred on
  m*n/2 with variance m*n*(m+n+1)/12 (normal approximation, continuity-corrected, two-sided).
- Hodges-Lehmann estimate of the rate ratio B/A: exp(median of d). Its confidence interval is
  the distribution-free one that inverts the same test: exp of the k-th smallest and k-th
  largest d, k = m*n/2 - z * sqrt(m*n*(m+n+1)/12) (Lehmann, Nonparametrics, 1975, ch. 2).
  The interval excludes 1 exactly when the test rejects at that level.

Times, not rates, go in: a rate is size / time, so the rate ratio B/A is time_A / time_B.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

ALPHA = 0.05
METHOD = "Mann-Whitney U test; 95% CI of the Hodges-Lehmann ratio estimate"
_CHUNK_PAIRS = 4_000_000  # pairwise differences held at once: 32 MB


@dataclass
class Shift:
    """Per comparison: Hodges-Lehmann rate ratio B/A, its CI, and the two-sided p-value (NaN
    where a side has fewer than 2 samples)."""

    ratio: Any
    low: Any
    high: Any
    p_value: Any


def _z(alpha: float) -> float:
    """The standard normal quantile 1 - alpha/2, by bisection on erfc (no scipy needed)."""
    lo, hi = 0.0, 10.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if math.erfc(mid / math.sqrt(2)) > alpha:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def rate_shift(a: Any, b: Any, count_a: Any, count_b: Any, alpha: float = ALPHA) -> Shift:
    """Compare row i of `a` (count_a[i] leading values, the rest ignored) with row i of `b`.

    `a` and `b` are 2-D float arrays of positive times; rows are grouped by their sample
    counts so that each group is one array operation."""
    import numpy as np

    n = len(a)
    ratio, low, high, p = (np.full(n, np.nan) for _ in range(4))
    if n == 0:
        return Shift(ratio, low, high, p)
    z = _z(alpha)
    count_a, count_b = np.asarray(count_a), np.asarray(count_b)
    pairs = np.stack([count_a, count_b], axis=1)
    for m, k in np.unique(pairs, axis=0):
        if m < 2 or k < 2:
            continue
        rows = np.flatnonzero((count_a == m) & (count_b == k))
        step = max(1, _CHUNK_PAIRS // (m * k))
        for start in range(0, len(rows), step):
            idx = rows[start:start + step]
            la = np.log(a[idx, :m])
            lb = np.log(b[idx, :k])
            d = (la[:, :, None] - lb[:, None, :]).reshape(len(idx), m * k)
            d.sort(axis=1)
            mn = m * k
            sd = math.sqrt(mn * (m + k + 1) / 12)
            pos = (d > 0).sum(axis=1) + 0.5 * (d == 0).sum(axis=1)
            zs = np.maximum(np.abs(pos - mn / 2) - 0.5, 0) / sd
            p[idx] = np.fromiter((math.erfc(v / math.sqrt(2)) for v in zs), float, len(idx))
            mid = mn // 2
            med = d[:, mid] if mn % 2 else (d[:, mid - 1] + d[:, mid]) / 2
            c = int(math.floor(mn / 2 - z * sd))
            c = min(max(c, 0), mn - 1)
            ratio[idx] = np.exp(med)
            low[idx] = np.exp(d[:, c])
            high[idx] = np.exp(d[:, mn - 1 - c])
    return Shift(ratio, low, high, p)


def padded(lists: Any) -> tuple[Any, Any]:
    """(values, counts): a pyarrow list array (or a list of lists) as a NaN-padded 2-D array."""
    import numpy as np
    import pyarrow as pa

    arr = lists if isinstance(lists, (pa.Array, pa.ChunkedArray)) else pa.array(lists, type=pa.list_(pa.float64()))
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], type=pa.list_(pa.float64()))
    n = len(arr)
    counts = arr.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    width = int(counts.max()) if n else 0
    out = np.full((n, max(width, 1)), np.nan)
    if n and width:
        flat = arr.flatten().to_numpy(zero_copy_only=False).astype(float)
        rows = np.repeat(np.arange(n), counts)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        cols = np.arange(len(flat)) - np.repeat(starts, counts)
        out[rows, cols] = flat
    return out, counts
