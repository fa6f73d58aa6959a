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

That test sees the spread *within* one run only. Runs also differ from each other (another job
on the fabric, another allocation of nodes, clock states), and a test on within-run samples
alone flags those differences as changes. Where a baseline has the values of several runs, the
between-run band is used instead (`band`): a run is one observation, and a new value counts as
changed only outside the band the baseline runs' values draw.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

    Values = npt.NDArray[np.float64]  # a float per row, or per row and sample (padded with NaN)
    Counts = npt.NDArray[np.int64]  # how many of a row's padded values are real
    Mask = npt.NDArray[np.bool_]
    Texts = npt.NDArray[np.object_]  # a text per row (a verdict's note)

ALPHA = 0.05
METHOD = "Mann-Whitney U test; B/A the Hodges-Lehmann estimate of the samples' ratio, with its 95% CI"
_CHUNK_PAIRS = 4_000_000  # pairwise differences held at once: 32 MB


@dataclass
class Shift:
    """Per comparison: Hodges-Lehmann rate ratio B/A, its CI, and the two-sided p-value (NaN
    where a side has fewer than 2 samples)."""

    ratio: Values
    low: Values
    high: Values
    p_value: Values


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


@functools.lru_cache(maxsize=1024)
def t_quantile(level: float, dof: int) -> float:
    """Student's t quantile of a two-sided interval at `level` with `dof` degrees of freedom:
    the t with P(|T| <= t) = level, by bisection on that probability in closed form for a whole
    number of degrees of freedom (Abramowitz and Stegun, 26.7.3 and 26.7.4); the normal's past
    300, where the two differ by less than 0.1%."""
    if dof > 300:
        return _z(1 - level)

    def within(t: float) -> float:
        theta = math.atan(t / math.sqrt(dof))
        c2, s = math.cos(theta) ** 2, math.sin(theta)
        term, total = 1.0, 1.0
        if dof % 2:  # odd: (2/pi)(theta + sin cos (1 + 2/3 cos^2 + 2.4/3.5 cos^4 + ...))
            for k in range(1, (dof - 1) // 2):
                term *= c2 * (2 * k) / (2 * k + 1)
                total += term
            return 2 / math.pi * (theta + (s * math.cos(theta) * total if dof > 1 else 0.0))
        for k in range(1, dof // 2):  # even: sin (1 + 1/2 cos^2 + 1.3/2.4 cos^4 + ...)
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        return s * total

    lo, hi = 0.0, 1e4
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if within(mid) < level else (lo, mid)
    return (lo + hi) / 2


def rate_shift(a: Values, b: Values, count_a: Counts, count_b: Counts, alpha: float = ALPHA) -> Shift:
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
    live = np.flatnonzero((count_a >= 2) & (count_b >= 2))  # a test needs two of each
    if not len(live):
        return Shift(ratio, low, high, p)
    live_a, live_b = count_a[live], count_b[live]
    width = int(live_b.max()) + 1
    for pair in np.unique(live_a * width + live_b):  # each (m, k) of counts once
        m, k = divmod(int(pair), width)
        rows = live[(live_a == m) & (live_b == k)]
        step = max(1, _CHUNK_PAIRS // (m * k))
        for start in range(0, len(rows), step):
            idx = rows[start : start + step]
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
            c = math.floor(mn / 2 - z * sd)
            c = min(max(c, 0), mn - 1)
            ratio[idx] = np.exp(med)
            low[idx] = np.exp(d[:, c])
            high[idx] = np.exp(d[:, mn - 1 - c])
    return Shift(ratio, low, high, p)


def can_reject(m: Counts, n: Counts, alpha: float = ALPHA) -> Mask:
    """Whether a two-sided rank test on m and n samples can reach significance at all: its
    smallest p-value, 2 / C(m + n, m) (every A sample beyond every B sample), is below alpha.
    With 3 and 3 samples it is 0.1, so such a key cannot be judged at 0.05."""
    import numpy as np

    fm, fn = np.asarray(m, dtype=float), np.asarray(n, dtype=float)
    lgamma = np.vectorize(math.lgamma, otypes=[float])
    with np.errstate(invalid="ignore"):
        log_c = lgamma(fm + fn + 1) - lgamma(fm + 1) - lgamma(fn + 1)
    return (fm >= 1) & (fn >= 1) & (np.log(2.0) - log_c < math.log(alpha))


def pool(codes: npt.NDArray[np.intp], values: Values, valid: Mask, groups: int) -> tuple[Values, Counts]:
    """Rows of a padded 2-D array pooled into groups: the valid entries of row i go to group
    codes[i], in row order. Returns the groups' padded array (NaN beyond each count) and counts."""
    import numpy as np

    codes = np.asarray(codes)
    if len(codes) == groups and bool((codes == np.arange(groups)).all()):  # a row a group: a run without replicates
        return _by_column(values, valid)  # its rows' valid values to their fronts, without a sort
    rows, cols = np.nonzero(valid)
    group = codes[rows]
    order = np.argsort(group, kind="stable")
    return _packed(group[order], values[rows, cols][order], groups)


def _packed(group: npt.NDArray[np.intp], flat: Values, groups: int) -> tuple[Values, Counts]:
    """Values sorted by their group (stably) as the groups' padded array and counts."""
    import numpy as np

    sizes = np.bincount(group, minlength=groups).astype(np.int64)
    width = max(int(sizes.max()) if groups else 0, 1)
    if groups and int(sizes.min()) == width:  # every group as full as the widest: the rows as they are
        return flat.reshape(groups, width).copy(), sizes
    out = np.full(groups * width, np.nan)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    place = np.arange(len(flat)) - starts[group]
    place += group * width
    out[place] = flat
    return out.reshape(groups, width), sizes


def _by_column(values: Values, valid: Mask) -> tuple[Values, Counts]:
    """_packed's result for a matrix of rows by group: each row's valid values moved to its
    front, in order, the rest NaN, as wide as the fullest row."""
    import numpy as np

    sizes = valid.sum(axis=1).astype(np.int64)
    width = max(int(sizes.max()), 1)
    out = values[:, :width].copy()  # C order, never a view of the caller's column
    short = np.flatnonzero(sizes < values.shape[1])  # rows with a value left out
    if len(short):
        front = np.argsort(~valid[short], axis=1, kind="stable")[:, :width]  # valid first, in order
        moved = np.take_along_axis(values[short], front, axis=1)
        moved[np.arange(width)[None, :] >= sizes[short][:, None]] = np.nan
        out[short] = moved
    return out, sizes


def matrix_parts(codes: npt.NDArray[np.intp], groups: int) -> int:
    """How many parts `codes` is made of when each part gives every group once, in group order
    (a month of nights of one plan): its stable sort is then the parts' matrix read by column.
    0 when it is not so made."""
    import numpy as np

    parts = len(codes) // groups if groups else 0
    if parts and parts * groups == len(codes) and (codes.reshape(parts, groups) == np.arange(groups)).all():
        return parts
    return 0


def pool_columns(
    codes: npt.NDArray[np.intp], columns: dict[str, Values], groups: int, order: npt.NDArray[np.intp] | None = None
) -> dict[str, tuple[Values, Counts]]:
    """pool() of each 1-D column with its usable values (finite, positive) valid: the rows
    sorted by group once for all the columns. `order`: that stable sort of codes, where the
    caller knows it: a month's baseline is millions of rows, whose sort is the cost."""
    import numpy as np

    codes = np.asarray(codes)
    checked = {}
    for name, column in columns.items():
        values = np.asarray(column, dtype=float)
        with np.errstate(invalid="ignore"):
            checked[name] = (values, np.isfinite(values) & (values > 0))
    out = {name: _packed(codes[:0], values[:0], groups) for name, (values, valid) in checked.items() if not valid.any()}
    if len(out) < len(checked) and (parts := matrix_parts(codes, groups)):
        # each group's values are a column of the parts' matrix, read without a sort or a gather
        for name, (values, valid) in checked.items():
            if name not in out:
                out[name] = _by_column(values.reshape(parts, groups).T, valid.reshape(parts, groups).T)
        return {name: out[name] for name in columns}
    if len(out) < len(checked):  # a metric none of the rows holds needs no sort
        order = np.argsort(codes, kind="stable") if order is None else order
        by_group = codes[order]
        for name, (values, valid) in checked.items():
            if name not in out:
                kept = valid[order]
                out[name] = _packed(by_group[kept], values[order[kept]], groups)
    return {name: out[name] for name in columns}


# The between-run band. Per key, the baseline runs' values x_1..x_K are taken on the log scale
# (changes are ratios). Centre: their median. Spread: the MAD scaled to a normal sigma
# (1.4826 MAD, Rousseeuw and Croux, JASA 1993), times the small-sample factor b_K that makes it
# unbiased below K = 10 (Croux and Rousseeuw, Computational Statistics 1992; checked here by
# simulation: 1.217 for K = 5 against the table's 1.206).
#
# Five values give a shaky MAD: when three of them happen to agree it is near zero, and the
# band closes. Run-level noise is much alike across the keys of one comparison, so no key's
# spread is taken below the median spread of all the keys judged between runs, of every metric
# (at least POOL_MIN of them). The band is centre +- BAND_C spreads. Measured on the 4-node
# testbed (docs/concepts/noise.md): in two sets of six unshaped runs, each run judged against the other
# five, no key fell more than 3.4 spreads below its band's centre, while shaping the links moved
# the multi-node keys 7 spreads and more.
BAND_C = 4.0
POOL_MIN = 3
_MAD_SIGMA = 1.4826
_SMALL_K = {2: 1.196, 3: 1.495, 4: 1.363, 5: 1.206, 6: 1.200, 7: 1.140, 8: 1.129, 9: 1.107}
BAND_METHOD = (
    f"B/A against A's value; B outside median ± {BAND_C:g} spreads of A's per-run values (log scale; "
    f"spread 1.4826·MAD, at least the median spread of the keys compared)"
)


def band(values: Values, counts: Counts) -> tuple[Values, Values]:
    """Per row: (centre, spread) on the log scale of the row's leading counts[i] positive
    values; NaN where a row has none."""
    import numpy as np

    counts = np.asarray(counts)
    n = len(counts)
    centre, spread = np.full(n, np.nan), np.full(n, np.nan)
    have = counts > 0
    if not have.any():
        return centre, spread
    whole = bool(have.all()) and bool((counts == values.shape[1]).all())  # no row shorter than the matrix
    inside = None if whole else np.arange(values.shape[1])[None, :] < counts[:, None]
    with np.errstate(all="ignore"):
        logs = np.log(values if inside is None else np.where(inside, values, np.nan)[have])
        mid = row_medians(logs)
        mad = row_medians(np.abs(logs - mid[:, None]))
    k = counts[have].astype(float)
    with np.errstate(divide="ignore"):  # K = 1 has no spread to correct: its MAD is 0
        factor = np.where(k > 9, k / (k - 0.8), 1.0)
    for n, small in _SMALL_K.items():
        factor[k == n] = small
    centre[have], spread[have] = mid, _MAD_SIGMA * mad * factor
    return centre, spread


def row_medians(values: Values) -> Values:
    """Each row's median of its values other than NaN, NaN where it has none: nanmedian's
    figures, from the two middle values of the row sorted (NaN last), at a quarter of its time."""
    import numpy as np

    if not values.shape[1]:
        return np.full(len(values), np.nan)
    ordered, at = np.sort(values, axis=1), np.arange(len(values))
    if np.isnan(ordered[:, -1]).any():  # NaN sorts last: a row without one is full
        n = np.count_nonzero(~np.isnan(ordered), axis=1)
    else:
        n = np.full(len(values), values.shape[1])
    with np.errstate(invalid="ignore"):  # -inf and inf in the middle: NaN, as nanmedian gives
        out = (ordered[at, np.maximum(n - 1, 0) // 2] + ordered[at, n // 2]) / 2
    out[n == 0] = np.nan
    return out


def spread_floor(spreads: Values) -> float:
    """The median of the spreads of the keys judged between runs, where there are POOL_MIN or
    more; 0 otherwise."""
    import numpy as np

    pooled = spreads[np.isfinite(spreads)]
    return float(np.median(pooled)) if len(pooled) >= POOL_MIN else 0.0


def band_limits(centre: Values, spread: Values, floor: float, c: float = BAND_C) -> tuple[Values, Values]:
    """(low, high) of each row's band, as values: centre +- c spreads, no spread below floor."""
    import numpy as np

    width = c * np.fmax(spread, floor)
    return np.exp(centre - width), np.exp(centre + width)


def catches(by_runs: Mask, band_floor: Values, shift: Shift, threshold: float, margin: float) -> Values:
    """Per row, the smallest fall of performance (0.25: a quarter) its verdict would have called
    slower, from what judged it (docs/concepts/noise.md, "What a key can catch"). Between runs: B must
    fall below the band, whose low end is `band_floor` x A's value in performance terms, and past
    the threshold. Within a run: the samples' 95% interval of B/A must lie below 1, and the
    change must pass the threshold and the margin; the interval keeps its width as the ratio
    moves, so the estimate must fall below ratio / high, `shift` being the samples' rate shift
    (B/A as performance, with its interval). NaN where the test could not run."""
    import numpy as np

    with np.errstate(all="ignore"):
        band = np.maximum(1 - band_floor, threshold)
        within = np.maximum(1 - shift.ratio / shift.high, max(threshold, margin))
        out = np.where(by_runs, band, within)
    out[~np.isfinite(out)] = np.nan
    return out


# The rows a run's within-run spread is read on: evenly spaced, at most this many, of its rows
# with at least SPREAD_SAMPLES samples (docs/concepts/noise.md, "A run noisier than its history")
SPREAD_ROWS = 4000
SPREAD_SAMPLES = 5
SPREAD_RUNS = 5  # the newest runs of a baseline whose spreads are what its history shows


def within_spread(parts: Iterable[tuple[Values, Counts]]) -> tuple[float, int]:
    """A run's within-run spread and the rows it was read on: the median over its rows of
    ln(p90 / p10) of each row's samples, the percentiles taken of their logs as NumPy's linear
    percentile takes them (`parts`: each sampled time's padded samples and counts, as padded
    gives them), its positive samples alone; NaN of no row."""
    import numpy as np

    spreads = []
    for values, counts in parts:
        with np.errstate(invalid="ignore", divide="ignore"):
            chosen = values[spread_rows(counts)]
            logs = np.sort(np.log(np.where(chosen > 0, chosen, np.nan)), axis=1)  # NaN last
        n = np.sum(np.isfinite(logs), axis=1)
        logs, n = logs[n >= SPREAD_SAMPLES], n[n >= SPREAD_SAMPLES]
        if len(n):
            spreads.append(_row_percentile(logs, n, 0.9) - _row_percentile(logs, n, 0.1))
    every = np.concatenate(spreads) if spreads else np.zeros(0)
    return (float(np.median(every)), len(every)) if len(every) else (math.nan, 0)


def spread_rows(counts: Counts) -> npt.NDArray[np.intp]:
    """The rows within_spread reads of a sampled time: those with SPREAD_SAMPLES samples or
    more, evenly spaced, at most SPREAD_ROWS."""
    import numpy as np

    rows = np.flatnonzero(counts >= SPREAD_SAMPLES)
    return rows[np.linspace(0, len(rows) - 1, SPREAD_ROWS).astype(np.intp)] if len(rows) > SPREAD_ROWS else rows


def _row_percentile(ordered: Values, n: Counts, q: float) -> Values:
    """Each row's q-quantile of its first n values, sorted: linear between the two nearest, as
    np.percentile's default, for all rows at once (np.nanpercentile takes a row at a time)."""
    import numpy as np

    at = (n - 1) * q
    low = np.floor(at).astype(np.intp)
    high = np.minimum(low + 1, n - 1)
    rows = np.arange(len(n))
    return ordered[rows, low] + (at - low) * (ordered[rows, high] - ordered[rows, low])


def padded(lists: pa.ListArray | pa.ChunkedArray | list[list[float]]) -> tuple[Values, Counts]:
    """(values, counts): a pyarrow list array (or a list of lists) as a NaN-padded 2-D array."""
    import numpy as np
    import pyarrow as pa

    arr = lists if isinstance(lists, (pa.Array, pa.ChunkedArray)) else pa.array(lists, type=pa.list_(pa.float64()))
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], type=pa.list_(pa.float64()))
    n = len(arr)
    counts = arr.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    width = int(counts.max()) if n else 0
    if n and width and bool((counts == width).all()):  # as many values in every row: the matrix
        return arr.flatten().to_numpy(zero_copy_only=False).astype(float).reshape(n, width), counts
    out = np.full((n, max(width, 1)), np.nan)
    if n and width:
        flat = arr.flatten().to_numpy(zero_copy_only=False).astype(float)
        rows = np.repeat(np.arange(n), counts)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        cols = np.arange(len(flat)) - np.repeat(starts, counts)
        out[rows, cols] = flat
    return out, counts
