"""The statistics of a verdict, against references computed another way: the rate shift against
a brute-force one, the exact smallest p a sample can reach, and the band's floor."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest

from harness.analysis import stats

NAN = float("nan")


def brute_force(a: list[float], b: list[float], z: float = 1.959964) -> tuple[float, float, float, float]:
    """Hodges-Lehmann ratio, its CI and the Mann-Whitney p-value, written out the long way."""
    d = sorted(math.log(x) - math.log(y) for x, y in itertools.product(a, b))
    m, n = len(a), len(b)
    sd = math.sqrt(m * n * (m + n + 1) / 12)
    u = sum(x > y for x, y in itertools.product(a, b)) + 0.5 * sum(x == y for x, y in itertools.product(a, b))
    p = math.erfc(max(abs(u - m * n / 2) - 0.5, 0) / sd / math.sqrt(2))
    k = math.floor(m * n / 2 - z * sd)
    return math.exp(statistics.median(d)), math.exp(d[k]), math.exp(d[m * n - 1 - k]), p


def test_rate_shift_matches_the_brute_force_reference():
    rng = np.random.default_rng(7)
    cases = [
        (rng.lognormal(5, 0.1, 10), rng.lognormal(5.2, 0.1, 10)),  # B slower: ratio ~ 0.82
        (rng.lognormal(5, 0.1, 10), rng.lognormal(5, 0.1, 10)),  # no change
        (rng.lognormal(3, 0.2, 7), rng.lognormal(2.5, 0.2, 12)),  # B faster, unequal counts
        (np.full(5, 100.0), np.full(5, 100.0)),
    ]  # all ties
    width = max(max(len(a), len(b)) for a, b in cases)
    A = np.full((len(cases), width), np.nan)
    B = np.full((len(cases), width), np.nan)
    for i, (a, b) in enumerate(cases):
        A[i, : len(a)], B[i, : len(b)] = a, b
    got = stats.rate_shift(A, B, [len(a) for a, _ in cases], [len(b) for _, b in cases])
    for i, (a, b) in enumerate(cases):
        want = brute_force(list(a), list(b))
        assert (got.ratio[i], got.low[i], got.high[i], got.p_value[i]) == pytest.approx(want, rel=1e-9)
    assert got.p_value[0] < 0.01 and got.high[0] < 1  # slower, significant
    assert got.p_value[1] > 0.05 and got.low[1] < 1 < got.high[1]
    assert got.p_value[2] < 0.01 and got.low[2] > 1  # faster
    assert got.ratio[3] == 1 and got.p_value[3] == 1


def test_rate_shift_leaves_rows_without_samples_undecided():
    got = stats.rate_shift(np.ones((2, 3)), np.ones((2, 3)), [3, 1], [0, 3])
    assert np.isnan(got.p_value).all() and np.isnan(got.ratio).all()


def test_band_limits_floor_at_the_median_spread():
    spread = np.array([0.0, 0.1, 0.2, 0.3])
    floor = stats.spread_floor(spread)
    assert floor == pytest.approx(0.15)  # the median of the four
    lo, hi = stats.band_limits(np.zeros(4), spread, floor, c=2)
    assert np.log(hi) == pytest.approx([0.3, 0.3, 0.4, 0.6]) and np.log(lo) == pytest.approx(-np.log(hi))
    assert stats.spread_floor(spread[:2]) == 0  # two keys: too few to pool


def test_the_band_s_spread_takes_the_small_sample_factor_of_its_count():
    """Rows of 3, 5 and 12 runs and one of a single run, each spread worked by hand: 1.4826 MAD
    of the logs times b_K (1.495 for 3, 1.206 for 5, K / (K - 0.8) past 9, Croux and
    Rousseeuw 1992); a single run has no spread. Values past a row's count are never read."""
    steps = np.exp(0.1 * np.arange(12))  # logs 0, 0.1, ..., 1.1
    values = np.full((5, 12), 999.0)
    values[0, :3] = [100.0, 110.0, 121.0]  # logs log(1.1) apart: MAD log(1.1)
    values[1, :5] = steps[:5]  # median 0.2; deviations 0.2, 0.1, 0, 0.1, 0.2: MAD 0.1
    values[2, :] = steps  # median 0.55; deviations 0.05 to 0.55 in pairs: MAD (0.25 + 0.35) / 2
    values[3, :1] = [7.0]
    counts = np.array([3, 5, 12, 1, 0])
    centre, spread = stats.band(values, counts)
    want = [1.495 * math.log(1.1), 1.206 * 0.1, 12 / 11.2 * 0.3, 0.0]
    assert spread[:4] == pytest.approx(1.4826 * np.array(want))
    assert centre[:4] == pytest.approx([math.log(110.0), 0.2, 0.55, math.log(7.0)])
    assert np.isnan(centre[4]) and np.isnan(spread[4])


def test_row_medians_are_nanmedian_s_worked_by_hand():
    """Each row's median of its values but NaN: odd and even counts, NaN anywhere in the row,
    an infinity among them, a row of NaN alone, and rows of no width."""
    rows = np.array(
        [
            [5.0, 1.0, 3.0, NAN],  # 1, 3, 5: 3
            [NAN, 4.0, 1.0, 2.0],  # 1, 2, 4 -> the middle one, 2
            [8.0, 2.0, 6.0, 4.0],  # 2, 4, 6, 8: (4 + 6) / 2
            [-np.inf, 1.0, 2.0, NAN],  # -inf, 1, 2: 1
            [-np.inf, 3.0, NAN, NAN],  # -inf, 3: -inf, as (-inf + 3) / 2
            [NAN, NAN, NAN, NAN],
        ]
    )
    got = stats.row_medians(rows)
    np.testing.assert_array_equal(got, [3.0, 2.0, 5.0, 1.0, -np.inf, NAN])
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):  # nanmedian warns of the row of NaN
        np.testing.assert_array_equal(got, np.nanmedian(rows, axis=1))
    assert np.isnan(stats.row_medians(np.zeros((2, 0)))).all()
    # rows without a NaN among them: each as long as the matrix
    np.testing.assert_array_equal(stats.row_medians(rows[2:3]), [5.0])
    np.testing.assert_array_equal(stats.row_medians(np.array([[3.0, 1.0, 2.0], [9.0, 7.0, 8.0]])), [2.0, 8.0])


@pytest.mark.parametrize(
    "codes, want",
    [
        # every key as full as the widest: three keys of two runs, their rows interleaved
        ([0, 1, 2, 0, 1, 2], [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]),
        # ragged: key 1 has three rows, key 0 one, key 2 none; NaN pads, and a row's order stays
        ([1, 0, 1, 1, 9, 9], [[2.0, NAN, NAN], [1.0, 3.0, 4.0], [NAN, NAN, NAN]]),
    ],
)
def test_pool_columns_groups_each_key_s_values_in_row_order(codes, want):
    """Rows 1..6 (values 1.0..6.0) pooled by key; a code past the groups (9) is a row whose
    value is not usable here (negative), which pooling leaves out."""
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    codes = np.array(codes)
    if 9 in codes:
        values[codes == 9], codes[codes == 9] = -1.0, 0
    pooled, counts = stats.pool_columns(codes, {"m": values, "none": np.full(6, np.nan)}, 3)["m"]
    np.testing.assert_array_equal(pooled, np.array(want))
    assert counts.tolist() == [int(np.isfinite(row).sum()) for row in np.array(want)]
    empty, no_counts = stats.pool_columns(codes, {"none": np.full(6, np.nan)}, 3)["none"]
    assert empty.shape == (3, 1) and np.isnan(empty).all() and no_counts.tolist() == [0, 0, 0]


def test_can_reject_is_the_exact_smallest_p():
    for m, n in itertools.product(range(1, 8), repeat=2):
        exact = 2 / math.comb(m + n, m)
        assert bool(stats.can_reject(m, n)) == (exact < 0.05), (m, n)


@pytest.mark.parametrize(
    ("codes", "groups", "parts"),
    [
        ([0, 1, 2, 0, 1, 2], 3, 2),
        ([0, 0, 0], 1, 3),
        ([0, 1, 2, 0, 2, 1], 3, 0),  # a night in another order
        ([0, 1, 0, 1, 0], 2, 0),  # a night short of a key
        ([0, 1, 2, 0, 1], 3, 0),
        ([], 0, 0),
        ([], 3, 0),
    ],
)
def test_matrix_parts_counts_nights_that_each_give_every_key_in_order(codes, groups, parts):
    assert stats.matrix_parts(np.array(codes, dtype=np.intp), groups) == parts


def test_pool_columns_reads_nights_of_one_plan_by_column():
    """Three nights of the same three keys, row by row (codes 0 1 2 0 1 2 0 1 2): each key's
    values in night order, a value that cannot be judged left out and the rest moved up, as
    wide as the fullest key; the column passed in is left as it was."""
    codes = np.tile(np.arange(3), 3)
    values = np.array([1.0, 2.0, 3.0, -4.0, 5.0, NAN, 7.0, 8.0, NAN])
    kept = values.copy()
    pooled, counts = stats.pool_columns(codes, {"m": values}, 3)["m"]
    np.testing.assert_array_equal(pooled, [[1.0, 7.0, NAN], [2.0, 5.0, 8.0], [3.0, NAN, NAN]])
    assert counts.tolist() == [2, 3, 1] and pooled.flags.c_contiguous
    np.testing.assert_array_equal(values, kept)
    # a key with no value in any night, and the fullest with two: two columns wide
    pooled, counts = stats.pool_columns(codes, {"m": np.array([1.0, NAN, 3.0, 4.0, NAN, NAN, NAN, NAN, 9.0])}, 3)["m"]
    np.testing.assert_array_equal(pooled, [[1.0, 4.0], [NAN, NAN], [3.0, 9.0]])
    assert counts.tolist() == [2, 0, 2]
    # one key of 30 nights, every third not usable: the other twenty in night order, and the
    # column of a single key (a view of it would be the result) left as it was
    values = np.arange(1.0, 31.0)
    values[::3] = NAN
    kept = values.copy()
    pooled, counts = stats.pool_columns(np.zeros(30, dtype=np.intp), {"m": values}, 1)["m"]
    np.testing.assert_array_equal(pooled, [kept[np.isfinite(kept)]])
    assert counts.tolist() == [20]
    np.testing.assert_array_equal(values, kept)


def test_pool_of_a_row_a_group_is_each_rows_valid_values_moved_to_its_front():
    """A run without replicates pools each row into its own group (codes 0..n-1): its rows with
    their valid values moved up in order, NaN after them, as wide as the fullest row, and the
    array passed in left as it was; the same as when a group with no row follows them."""
    rng = np.random.default_rng(7)
    values = rng.uniform(1.0, 2.0, (500, 6))
    values[rng.uniform(size=values.shape) < 0.2] = NAN
    values[3] = NAN  # a row with no valid value
    values[:, 5] = NAN  # no row uses the last column: one column narrower
    valid = np.isfinite(values)
    kept = values.copy()
    pooled, counts = stats.pool(np.arange(500), values, valid, 500)
    with_empty, empty_counts = stats.pool(np.arange(500), values, valid, 501)
    np.testing.assert_array_equal(pooled, with_empty[:500])
    assert counts.tolist() == empty_counts[:500].tolist() == valid.sum(axis=1).tolist()
    assert pooled.shape == (500, 5) and np.isnan(pooled[3]).all()
    np.testing.assert_array_equal(pooled[0, : counts[0]], values[0][valid[0]])
    np.testing.assert_array_equal(values, kept)


@pytest.mark.parametrize(
    "lists",
    [
        [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],  # as many values in every row: read as the matrix
        [[1.0, 2.0, 3.0], [4.0], None, [], [5.0, None, 6.0]],
        [[], []],
    ],
)
def test_padded_is_each_list_left_aligned_in_a_row_of_nan(lists):
    """stats.padded, worked by hand: row i holds list i's values from its left, NaN after them
    (and for a missing value in a list), as wide as the longest list; its count beside it."""
    import pyarrow as pa

    values, counts = stats.padded(pa.array(lists, type=pa.list_(pa.float64())))
    width = max((len(v) for v in lists if v), default=0)
    want = [[math.nan if x is None else x for x in (v or [])] + [math.nan] * (width - len(v or [])) for v in lists]
    assert values.shape == (len(lists), max(width, 1))
    assert np.array_equal(values[:, :width], np.array(want).reshape(len(lists), width), equal_nan=True)
    assert counts.tolist() == [len(v or []) for v in lists]
    sliced = pa.array([[9.0, 9.0, 9.0], *lists], type=pa.list_(pa.float64()))[1:]  # its offsets from 3
    assert np.array_equal(stats.padded(sliced)[0], values, equal_nan=True)


def test_a_runs_within_run_spread_worked_by_hand():
    """within_spread: each row's ln(p90 / p10), the percentiles of its logs taken linearly (at
    (n - 1) q of its sorted values), and their median over the rows of every sampled time. Rows
    of fewer than 5 positive samples are not read; a run of no such row has NaN of 0 rows."""
    e = math.e
    times = np.array(
        [
            [1.0, e, e**2, e**3, e**4, NAN],  # logs 0..4: p10 at 0.4, p90 at 3.6, spread 3.2
            [1.0, 1.0, 1.0, 1.0, e, e],  # logs 0,0,0,0,1,1: p10 0, p90 at 4.5 -> 1; spread 1
            [e, 0.0, -1.0, NAN, NAN, NAN],  # one positive sample: not read
        ]
    )
    steps = np.array([[e**2, e**2, e**2, e**2, e**2, e**4]])  # logs 2 x5, 4: p90 at 4.5 -> 3; spread 1
    got, rows = stats.within_spread([(times, np.array([5, 6, 3])), (steps, np.array([6]))])
    assert rows == 3 and got == pytest.approx(statistics.median([3.2, 1.0, 1.0]))
    logs = np.log(times[0, :5])
    assert np.percentile(logs, 90) - np.percentile(logs, 10) == pytest.approx(3.2)
    assert stats.within_spread([(times[2:], np.array([3]))]) == (pytest.approx(NAN, nan_ok=True), 0)
    # at most SPREAD_ROWS rows, evenly spaced: of as many tight rows (logs 0 x5, 1: 0.5) as wide
    # ones after them (logs 0..5: 4.0), half and half, their median halfway
    tight, wide = [1.0] * 5 + [e], [1.0, e, e**2, e**3, e**4, e**5]
    many = np.array([tight] * stats.SPREAD_ROWS + [wide] * stats.SPREAD_ROWS)
    assert stats.within_spread([(many, np.full(len(many), 6))]) == (pytest.approx(2.25), stats.SPREAD_ROWS)
