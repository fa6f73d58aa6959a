"""The dashboard's charts (harness/present/charts.py): labels that never overlap, paths as short as
their points allow, figures with their units, and every text escaped."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from harness.present import charts
from harness.present.charts import Frame, esc, figure


def test_a_path_is_its_first_point_then_steps_with_points_in_line_dropped():
    # by hand: (0,5) (1,5) (2,5) (3,7) (5,11): the second point is in line with its neighbours,
    # and so is (3,7) between (2,5) and (5,11), a slope of 2 throughout
    x, y = np.array([0, 1, 2, 3, 5]), np.array([5, 5, 5, 7, 11])
    assert charts.line(x, y, np.ones(5, dtype=bool)) == "M0 5l2 0 3 6"
    # a gap starts a new line; one point alone is a dot
    assert charts.line(x, y, np.array([True, True, False, True, True])) == "M0 5l1 0M3 7l2 4"
    assert charts.line(x, y, np.array([True, False, False, False, False])) == "M0 5h0"
    # a band: along the top, back along the bottom
    assert charts.area(x[:2], np.array([9, 9]), np.array([3, 4]), np.ones(2, dtype=bool)) == "M0 3l1 1L1 9l-1 0Z"


def test_figures_carry_their_unit_in_three_figures():
    assert [figure(v, "GB/s") for v in (812.4, 23.456, 1.5, 0.401, 0.000197, 0)] == [
        "812 GB/s",
        "23.5 GB/s",
        "1.50 GB/s",
        "401 MB/s",
        "197 kB/s",
        "0 GB/s",
    ]
    assert figure(12345.6, "images/s") == "12,346 images/s"
    assert figure(float("nan"), "ms") == "none"
    assert charts.percent(-0.5) == "\u221250%" and charts.percent(0.25) == "+25%"


def test_texts_are_escaped_shown_and_cut():
    assert esc('<b a="1">&\'') == "&lt;b a=&quot;1&quot;&gt;&amp;&#x27;"
    assert esc("a\x00b\x1b\x7f\x9fc") == "a\\x00b\\x1b\\x7f\\x9fc"
    assert esc("x" * 200) == "x" * 160 + "… (200 characters)"
    assert esc("\ud800") == "?"  # a lone surrogate cannot be written as UTF-8


def test_a_value_axis_is_logarithmic_when_it_spans_ten_times():
    (lo, hi), log = charts.value_range(np.array([1.0, 5.0]))
    assert not log and lo == 0 and hi == 5.0 + 4 * 0.08
    (lo, hi), log = charts.value_range(np.array([0.5, 600.0]), np.array([np.nan]))
    assert log and lo == 0.5 / 1.2 and hi == 600 * 1.2
    (lo, hi), log = charts.value_range(np.array([100.0, 101.0]))
    assert not log and lo > 0  # a level series is drawn close, not from zero


widths = st.integers(min_value=1, max_value=120)


@given(st.lists(st.tuples(st.floats(min_value=0, max_value=2000), widths), min_size=1, max_size=60))
def test_labels_kept_never_overlap(labels):
    labels.sort()
    xs, ws = [x for x, _ in labels], [w for _, w in labels]
    kept = charts.spaced(xs, ws)
    assert kept == sorted(set(kept)) and kept[-1] == len(xs) - 1
    for a, b in itertools.pairwise(kept):
        assert xs[b] - ws[b] / 2 >= xs[a] + ws[a] / 2 + 6
    placed = charts.rows(xs, ws)
    for r in set(placed):
        mine = [i for i, p in enumerate(placed) if p == r]
        for a, b in itertools.pairwise(mine):
            assert xs[b] - ws[b] / 2 >= xs[a] + ws[a] / 2 + 4


@given(st.floats(min_value=19000, max_value=21000), st.integers(min_value=0, max_value=800))
def test_dates_along_an_axis_never_overlap_and_stay_inside(first, span):
    frame = Frame((first, first + span), (0.0, 1.0), False)
    svg = charts.date_ticks(frame)
    at = [int(x) for x in re.findall(r'<text x="(\d+)"', svg)]
    texts = re.findall(r">(\d{4}-\d\d-\d\d)<", svg)
    assert texts and len(at) == len(texts)
    w = charts.width("2026-11-27")
    assert all(w / 2 <= x <= frame.width - w / 2 for x in at)
    assert all(b - a >= w + 6 for a, b in itertools.pairwise(at))
    assert texts == sorted(texts)


def test_a_chart_marks_what_it_says():
    days = np.arange(20000.0, 20010.0)
    value = np.full(10, 2.0)
    value[6:] = 1.0
    value[8] = np.nan
    bad = np.zeros(10, dtype=bool)
    bad[6:] = True
    frame = Frame((days[0], days[-1]), (0.0, 2.2), False)
    svg = charts.timeseries(
        frame,
        days,
        value,
        np.full(10, 1.8),
        np.full(10, 2.2),
        bad,
        days[6:],
        [charts.Mark(days[6], "\u221250%"), charts.Mark(days[6] + 0.1, "<again>")],
        "GB/s",
        "a key",
    )
    dots = re.search(r'<path class="bad" d="([^"]*)"', svg).group(1)
    assert dots.count("h0") == 3  # nights 7, 8 and 10: night 9 gave no figure, and is a cross
    assert re.search(r'<path class="cross" d="M\d+ \d+l6 6m0 -6l-6 6"', svg)
    assert re.search(r'<path class="gate" d="(M\d+ 93v5){4}"', svg)
    tops = [int(y) for y in re.findall(r'<text class="change" x="\d+" y="(\d+)"', svg)]
    assert tops == [16, 28]  # two change labels at one place: two rows
    assert "&lt;again&gt;" in svg and "<again>" not in svg
    assert list(re.findall(r'text-anchor="end">([^<]*)<', svg)) == ["0 GB/s", "1.10 GB/s", "2.20 GB/s"]
    left = int(re.search(r'<line class="grid" x1="(\d+)"', svg).group(1))
    assert left == math.ceil(len("1.10 GB/s") * 11 * 0.62) + 8  # room for the widest value label
