"""Charts as inline SVG for the dashboard (present/dashboard.py): a series over time with its
band, marks and change points; a sparkline; a heatmap. Pure: numbers in, SVG text out, every
coordinate an integer so that a year of nights stays a few kilobytes per chart, and the same
numbers give the same bytes.

Every text drawn here comes through `esc`, the one escape of the dashboard: HTML and XML
special characters as entities, control characters made visible, long texts cut.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Floats = npt.NDArray[np.float64]

LONGEST = 160  # characters of a text shown whole; the rest is cut, its length said
LOG_SPAN = 10  # a value axis spanning this factor or more is drawn on a log scale
FONT = 11  # px; a label's width is taken as 0.62 em per character (a sans-serif's digits)
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}


def esc(text: object, limit: int = LONGEST) -> str:
    """`text` fit for HTML and XML, as text or inside a quoted attribute: control characters
    shown as \\xNN (XML 1.0 allows none of them), and cut at `limit` characters."""
    s = str(text)
    if len(s) > limit:
        s = f"{s[:limit]}… ({len(s):,} characters)"
    s = s.translate(_CONTROL).encode("utf-8", "replace").decode("utf-8")
    return html.escape(s, quote=True)


# A unit and its smaller steps: a figure is shown in the largest in which it is 1 or more
SCALES = {"GB/s": (("GB/s", 1.0), ("MB/s", 1e3), ("kB/s", 1e6), ("B/s", 1e9))}


def figure(value: float, unit: str = "") -> str:
    """A value to 3 significant figures, never in exponent form, with its unit (GB/s stepping
    down to MB/s, kB/s and B/s for small figures)."""
    if value != value:
        return "none"
    for name, factor in SCALES.get(unit, ()) if value else ():
        unit, scaled = name, value * factor
        if abs(scaled) >= 1:
            break
    else:
        scaled = value
    value = scaled
    a = abs(value)
    if a >= 1000:
        text = f"{value:,.0f}"
    elif a >= 100:
        text = f"{value:.0f}"
    elif a >= 10:
        text = f"{value:.1f}"
    elif a >= 1:
        text = f"{value:.2f}"
    elif a == 0:
        text = "0"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}" if unit else text


def percent(change: float) -> str:
    return minus(f"{change * 100:+.0f}%")


def minus(text: str) -> str:
    """The typographic minus sign (U+2212) for the hyphen of a negative number."""
    return text.replace("-", "\u2212")


def width(text: str) -> int:
    return math.ceil(len(text) * FONT * 0.62)


def spaced(xs: Sequence[float], widths: Sequence[int], gap: int = 6) -> list[int]:
    """Which of the labels centred at `xs` (ascending) to keep so that none overlaps another:
    the first and the last, then every one that clears its kept neighbours."""
    if not xs:
        return []
    kept = [0]
    last = len(xs) - 1
    for i in range(1, len(xs)):
        clear = xs[i] - widths[i] / 2 >= xs[kept[-1]] + widths[kept[-1]] / 2 + gap
        if i == last:
            while kept and not (xs[i] - widths[i] / 2 >= xs[kept[-1]] + widths[kept[-1]] / 2 + gap):
                kept.pop()
            kept.append(i)
        elif clear and xs[last] - widths[last] / 2 >= xs[i] + widths[i] / 2 + gap:
            kept.append(i)
    return kept


def rows(xs: Sequence[float], widths: Sequence[int], gap: int = 4) -> list[int]:
    """A row for each label centred at `xs` (ascending) so that labels of one row never
    overlap: the first row with room, greedily (interval partitioning)."""
    ends: list[float] = []
    out = []
    for x, w in zip(xs, widths):
        for r, end in enumerate(ends):
            if x - w / 2 >= end + gap:
                ends[r] = x + w / 2
                out.append(r)
                break
        else:
            ends.append(x + w / 2)
            out.append(len(ends) - 1)
    return out


@dataclass(frozen=True)
class Frame:
    """Where a chart draws: its size, its plot area, and the ranges its axes span."""

    days: tuple[float, float]
    values: tuple[float, float]
    log: bool
    width: int = 640
    height: int = 116
    left: int = 70
    right: int = 630
    top: int = 6
    bottom: int = 92

    def x(self, days: Floats) -> npt.NDArray[np.int64]:
        import numpy as np

        lo, hi = self.days
        span = (hi - lo) or 1.0
        frac = (days - lo) / span if hi > lo else np.full(len(days), 0.5)
        return np.rint(self.left + frac * (self.right - self.left)).astype(np.int64)

    def y(self, values: Floats) -> npt.NDArray[np.int64]:
        import numpy as np

        lo, hi = self.values
        v = np.asarray(values, dtype=float)
        if self.log:
            v, lo, hi = np.log10(np.maximum(v, lo)), math.log10(lo), math.log10(hi)
        frac = (v - lo) / ((hi - lo) or 1.0)
        return np.rint(self.bottom - np.clip(frac, 0, 1) * (self.bottom - self.top)).astype(np.int64)


def value_range(*arrays: Floats) -> tuple[tuple[float, float], bool]:
    """The value axis for these figures: (low, high), and whether on a log scale (when they
    span LOG_SPAN or more). Linear axes start at zero when the figures are near it, so that a
    halving looks like one."""
    import numpy as np

    both = np.concatenate([a[np.isfinite(a) & (a > 0)] for a in arrays]) if arrays else np.array([])
    if not len(both):
        return (0.0, 1.0), False
    lo, hi = float(both.min()), float(both.max())
    if hi / lo >= LOG_SPAN:
        return (lo / 1.2, hi * 1.2), True
    pad = (hi - lo) * 0.08 or hi * 0.05
    return (max(0.0, lo - pad) if lo - pad > hi * 0.25 else 0.0, hi + pad), False


def _path(x: npt.NDArray[np.int64], y: npt.NDArray[np.int64]) -> str:
    """One polyline as a path: its first point absolute, the rest relative (the shortest text)."""
    import numpy as np

    if len(x) == 1:
        return f"M{x[0]} {y[0]}h0"
    if len(x) > 2:  # a point in line with both neighbours adds nothing: a level band is two points
        dx, dy = np.diff(x), np.diff(y)
        keep = np.r_[True, dx[:-1] * dy[1:] != dy[:-1] * dx[1:], True]
        x, y = x[keep], y[keep]
    steps = np.empty(2 * (len(x) - 1), dtype=np.int64)
    steps[0::2], steps[1::2] = np.diff(x), np.diff(y)
    return f"M{x[0]} {y[0]}l" + " ".join(map(str, steps.tolist()))


def _runs(ok: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    """The (start, end) of each run of True in `ok`."""
    import numpy as np

    edges = np.flatnonzero(np.diff(np.r_[0, ok.astype(np.int8), 0]))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))


def line(x: npt.NDArray[np.int64], y: npt.NDArray[np.int64], ok: npt.NDArray[np.bool_]) -> str:
    return "".join(_path(x[a:b], y[a:b]) for a, b in _runs(ok))


def area(
    x: npt.NDArray[np.int64], lo: npt.NDArray[np.int64], hi: npt.NDArray[np.int64], ok: npt.NDArray[np.bool_]
) -> str:
    """The band between `lo` and `hi`: along the top, back along the bottom, closed."""
    out = []
    for a, b in _runs(ok):
        top = _path(x[a:b], hi[a:b])
        back = _path(x[a:b][::-1], lo[a:b][::-1])
        out.append(top + "L" + back[1:] + "Z")
    return "".join(out)


def date_ticks(frame: Frame) -> str:
    """Dates along the time axis: month starts, or days for a short span, as many as fit."""
    import numpy as np

    lo, hi = frame.days
    first = dt.date(1970, 1, 1) + dt.timedelta(days=math.floor(lo))
    last = dt.date(1970, 1, 1) + dt.timedelta(days=math.floor(hi))
    span = (last - first).days
    if span > 62:
        days, d = [], dt.date(first.year, first.month, 1)
        while d <= last:
            if d >= first:
                days.append(d)
            d = dt.date(d.year + d.month // 12, d.month % 12 + 1, 1)
        days = [first, *[d for d in days if d != first], *([last] if days[-1:] != [last] else [])]
    else:
        step = max(1, span // 8)
        days = [first + dt.timedelta(days=i) for i in range(0, span + 1, step)]
        if days[-1] != last:
            days.append(last)
    days = sorted(set(days))
    epoch = dt.date(1970, 1, 1)
    at = frame.x(np.array([(d - epoch).days + (lo - math.floor(lo)) for d in days], dtype=float)).tolist()
    if lo == hi:
        at, days = at[:1], days[:1]
    texts = [d.isoformat() for d in days]
    w = width(texts[0])  # every date is as wide
    at = [min(max(a, w // 2 + 1), frame.width - w // 2 - 1) for a in at]  # inside the chart
    keep = spaced(at, [w] * len(at))
    y = frame.bottom + 18
    return "".join(f'<text x="{at[i]}" y="{y}" text-anchor="middle">{texts[i]}</text>' for i in keep)


def value_ticks(frame: Frame, unit: str) -> tuple[list[float], list[str]]:
    """Three values up the value axis: its bottom, middle and top (the middle geometric on a
    log axis), each with its unit; 40 px apart at the least, so never overlapping."""
    lo, hi = frame.values
    values = [lo, math.sqrt(lo * hi) if frame.log else (lo + hi) / 2, hi]
    return values, [figure(v, unit) for v in values]


def _value_axis(frame: Frame, values: list[float], texts: list[str]) -> str:
    import numpy as np

    out = []
    for y, text in zip(frame.y(np.array(values, dtype=float)).tolist(), texts):
        out.append(
            f'<text x="{frame.left - 4}" y="{y + 4}" text-anchor="end">{esc(text)}</text>'
            f'<line class="grid" x1="{frame.left}" x2="{frame.right}" y1="{y}" y2="{y}"/>'
        )
    return "".join(out)


@dataclass(frozen=True)
class Mark:
    """A change point on a chart: where, and the words above it."""

    day: float
    text: str


def timeseries(
    frame: Frame,
    days: Floats,
    value: Floats,
    low: Floats,
    high: Floats,
    bad: npt.NDArray[np.bool_],
    failed_days: Floats,
    marks: Sequence[Mark],
    unit: str,
    label: str,
) -> str:
    """A key over the nights: the band shaded, the figures joined, a red dot on each night the
    key was slower or failed (a cross at the foot where it gave no figure), a red tick under
    each night the gate failed, and each change point a dashed line with its size above."""
    import numpy as np

    values, texts = value_ticks(frame, unit)
    frame = replace(frame, left=max(width(t) for t in texts) + 8)  # the value labels' room, no more
    x = frame.x(days)
    parts = [
        f'<svg class="chart" viewBox="0 0 {frame.width} {frame.height}" role="img" aria-label="{esc(label)}">',
        _value_axis(frame, values, texts),
        date_ticks(frame),
    ]
    ok_band = np.isfinite(low) & np.isfinite(high)
    if ok_band.any():
        bottom, top = (frame.y(np.where(ok_band, v, frame.values[0])) for v in (low, high))  # no NaN cast to int
        parts.append(f'<path class="band" d="{area(x, bottom, top, ok_band)}"/>')
    ok = np.isfinite(value)
    y = frame.y(np.where(ok, value, frame.values[0]))
    if ok.any():
        parts.append(f'<path class="line" d="{line(x, y, ok)}"/>')
    dots = np.flatnonzero(bad & ok).tolist()
    if dots:  # a dot is a zero-length stroke with round caps: a tenth of the text of a circle
        parts.append(f'<path class="bad" d="{"".join(f"M{x[i]} {y[i]}h0" for i in dots)}"/>')
    crosses = np.flatnonzero(bad & ~ok).tolist()
    if crosses:
        parts.append(
            f'<path class="cross" d="{"".join(f"M{x[i] - 3} {frame.bottom - 3}l6 6m0 -6l-6 6" for i in crosses)}"/>'
        )
    if len(failed_days):
        ticks = "".join(f"M{v} {frame.bottom + 1}v5" for v in sorted(set(frame.x(failed_days).tolist())))
        parts.append(f'<path class="gate" d="{ticks}"/>')
    if marks:
        at = frame.x(np.array([m.day for m in marks], dtype=float)).tolist()
        order = sorted(range(len(marks)), key=lambda i: at[i])
        placed = rows([at[i] for i in order], [width(marks[i].text) for i in order])
        for r, i in zip(placed, order):
            parts.append(
                f'<line class="change" x1="{at[i]}" x2="{at[i]}" y1="{frame.top}" y2="{frame.bottom}"/>'
                f'<text class="change" x="{at[i]}" y="{frame.top + 10 + 12 * r}" text-anchor="middle">'
                f"{esc(marks[i].text)}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)


def sparkline(values: Floats, width_px: int = 160, height_px: int = 28) -> str:
    """A small line of `values` in order, its range its own; NaN a gap."""
    import numpy as np

    ok = np.isfinite(values)
    if not ok.any():
        return ""
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    n = len(values)
    x = np.rint(np.linspace(2, width_px - 2, n) if n > 1 else np.array([width_px / 2])).astype(np.int64)
    frac = (np.where(ok, values, lo) - lo) / ((hi - lo) or 1.0)
    y = np.rint(height_px - 3 - frac * (height_px - 6)).astype(np.int64)
    return (
        f'<svg class="spark" viewBox="0 0 {width_px} {height_px}" width="{width_px}" height="{height_px}">'
        f'<path class="line" d="{line(x, y, ok)}"/></svg>'
    )


def heatmap(names: Sequence[str], cells: dict[tuple[int, int], float], unit: str, median: float, title: str) -> str:
    """Pairs of nodes as a matrix, each measured pair a cell coloured by its figure over the
    check's median (white at the median or above, red at half or below), unmeasured pairs
    blank. Node names along the sides when they fit."""
    n = len(names)
    cell = max(4, min(18, 480 // max(n, 1)))
    # names beside the rows and over the columns where a cell is taller than a line of text, so
    # that they never overlap; else only in each cell's title
    label = max(width(esc(t, 24)) for t in names) if n and cell >= FONT + 2 else 0
    size = label + n * cell + 4
    parts = [
        f'<svg class="heat" viewBox="0 0 {size} {size}" width="{size}" height="{size}" role="img" '
        f'aria-label="{esc(title)}">'
    ]
    if label:
        for i, name in enumerate(names):
            c = label + i * cell + cell // 2 + 4
            parts.append(f'<text x="{label - 2}" y="{c}" text-anchor="end">{esc(name, 24)}</text>')
            parts.append(
                f'<text transform="translate({c} {label - 2}) rotate(-90)" text-anchor="start">{esc(name, 24)}</text>'
            )
    for (i, j), v in sorted(cells.items()):
        ratio = v / median if median > 0 else 1.0
        red = max(0.0, min(1.0, (1 - ratio) * 2))
        shade = round(255 * (1 - red))
        tip = f"{names[i]} – {names[j]}: {figure(v, unit)} ({ratio:.0%} of the median)"
        parts.append(
            f'<rect x="{label + j * cell}" y="{label + i * cell}" width="{cell - 1}" height="{cell - 1}" '
            f'fill="rgb(255,{shade},{shade})"><title>{esc(tip, 200)}</title></rect>'
        )
    parts.append("</svg>")
    return "".join(parts)
