"""Each collective's fit against the node count, for `bench predict` (harness/analysis/predict.py,
docs/concepts/predict.md). The points of one series (a collective on a group, at one count of GPUs
a node, launcher and settings set), each message size at each node count of two nodes or more,
are fitted together to NCCL's model of a call: a fixed latency, a latency per inter-node step of
the collective's ring, and per message size the time its bytes take at the bus's rate, times
the collective's bus factor at that many ranks:

    t(n, S) = a + b * steps(n) + c_S * factor(ranks(n))

by least squares on relative errors. One node is a class of its own (no network) and is left
out. The interval is the regression's prediction interval of a new run, on the relative scale.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import INTER, INTRA, collective
from harness.analysis.stats import t_quantile

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd

LEVEL = 0.95
# NCCL takes its constants by node class, 1, 2, and 3 or more nodes (docs/concepts/predict.md). A
# fit with fewer than two node counts of the 3+ class cannot tell the 2-node class from it:
# its interval is widened by this factor, and it says so.
CLASS_WIDEN = 2.0
# The series a collective fit is one of: every key but the node count and the message size
SERIES = ("collective", "group", "gpus_per_node", "launcher", "nccl_config")
LATENCY_WORDS = {"per step": "per-step latency", "fixed": "fixed latency"}


def steps(name: str, nodes: int) -> float:
    """Inter-node latency steps of one call on `nodes` nodes (NCCL's ring: 2(n-1) for an
    all-reduce, n-1 for a collective that passes each part once; one exchange for sendrecv)."""
    if name == "sendrecv":
        return 1.0
    return 2.0 * (nodes - 1) if name == "all_reduce" else float(nodes - 1)


def ranks(group: str, nodes: int, gpus_per_node: int) -> int:
    """Ranks in one group of the kind `group` (benchmarks/catalog.py, node_groups)."""
    return gpus_per_node if group == INTRA else nodes if group == INTER else nodes * gpus_per_node


@dataclass(frozen=True)
class Point:
    nodes: int
    size: int
    time_us: float


@dataclass
class Fit:
    """A fitted series: the kept columns' coefficients, (X'X)^-1 of the relative design, the
    relative residual standard deviation, its degrees of freedom, the node counts fitted, and
    the factor its intervals are widened by (CLASS_WIDEN, or 1)."""

    name: str
    group: str
    gpus_per_node: int
    columns: list[str]
    beta: npt.NDArray[np.float64]
    inverse: npt.NDArray[np.float64]
    sd: float
    dof: int
    nodes: list[int]
    sizes: list[int]
    widen: float = 1.0
    notes: list[str] = field(default_factory=list)
    # what the bytes terms are multiplied by at n nodes: 1 as fitted; other hardware's
    # (harness/analysis/whatif.py)
    scale: Callable[[int], float] | None = None

    def constant(self, column: str) -> tuple[float, float, float]:
        """(value, low, high) of one fitted constant: "fixed" and "per step" in microseconds,
        "bytes S" in microseconds per unit of bus factor (S bytes over the bus's rate)."""
        j = self.columns.index(column)
        half = t_quantile(LEVEL, self.dof) * self.sd * math.sqrt(float(self.inverse[j, j])) * self.widen
        value = float(self.beta[j])
        return value, value - half, value + half

    def row(self, nodes: int, size: int) -> npt.NDArray[np.float64]:
        x = design(self.columns, self.name, self.group, self.gpus_per_node, nodes, size)
        if self.scale is not None:  # a bytes term fitted below zero is no rate to scale
            x[[c.startswith("bytes ") and b > 0 for c, b in zip(self.columns, self.beta, strict=True)]] *= self.scale(
                nodes
            )
        return x

    def predict(self, nodes: int, size: int) -> tuple[float, float, float]:
        """(time, low, high) in microseconds at `nodes` nodes for a measured message size."""
        x = self.row(nodes, size)
        t = float(x @ self.beta)
        if t <= 0:
            return t, math.nan, math.nan
        rel = x / t
        se = self.sd * math.sqrt(1 + float(rel @ self.inverse @ rel))
        # relative errors: the interval is symmetric on the log scale, never below zero
        spread = exp_or_inf(t_quantile(LEVEL, self.dof) * se * self.widen)
        return t, t / spread, t * spread

    def at_bytes(self, nodes: int, size: float) -> tuple[float, float, float]:
        """(time, low, high) for a message of any size: the nearest measured size's prediction,
        its bytes' term taken at the bus rate interpolated in log size between the measured
        sizes around `size` (the nearest one's outside them), its interval as wide relatively."""
        sizes = self.sizes
        ref = min(sizes, key=lambda s: abs(math.log(s / size)))
        below, above = [s for s in sizes if s <= size], [s for s in sizes if s >= size]
        if not below or not above or max(below) == min(above):
            rate = self._rate(ref)
        else:
            lo, hi = max(below), min(above)
            w = math.log(size / lo) / math.log(hi / lo)
            rate = math.exp((1 - w) * math.log(self._rate(lo)) + w * math.log(self._rate(hi)))
        t_ref, low, high = self.predict(nodes, ref)
        factor = collective(self.name).bus_factor(ranks(self.group, nodes, self.gpus_per_node))
        factor *= self.scale(nodes) if self.scale and math.isfinite(rate) else 1.0
        t = t_ref - self._bytes_term(nodes, ref) + size / rate * factor
        wider = t / t_ref if t_ref > 0 else math.nan
        return t, low * wider, high * wider

    def _rate(self, size: int) -> float:
        column = f"bytes {size}"
        c = float(self.beta[self.columns.index(column)]) if column in self.columns else 0.0
        return size / c if c > 0 else math.inf

    def _bytes_term(self, nodes: int, size: int) -> float:
        """The bytes' term of a measured size at `nodes` nodes, as predict() takes it (none where
        it was fitted below zero)."""
        column = f"bytes {size}"
        if column not in self.columns:
            return 0.0
        j = self.columns.index(column)
        return float(self.row(nodes, size)[j] * self.beta[j])


def exp_or_inf(x: float) -> float:
    """e to the x, infinite past what a float holds: an interval too wide to bound."""
    return math.exp(x) if x < 700 else math.inf


def design(columns: list[str], name: str, group: str, g: int, nodes: int, size: int) -> npt.NDArray[np.float64]:
    """One point's row of the design matrix for the named columns: "fixed", "per step", and
    "bytes S" for each message size S."""
    import numpy as np

    factor, latency = _terms(name, group, g, nodes)
    bytes_column = f"bytes {size}"
    return np.array(
        [1.0 if c == "fixed" else latency if c == "per step" else factor if c == bytes_column else 0.0 for c in columns]
    )


@functools.lru_cache(maxsize=4096)
def _terms(name: str, group: str, g: int, nodes: int) -> tuple[float, float]:
    """(bus factor, latency steps) of a call on `nodes` nodes, the same for every size."""
    return collective(name).bus_factor(ranks(group, nodes, g)), steps(name, nodes) if group != INTRA else 0.0


def fit(name: str, group: str, g: int, points: list[Point]) -> Fit | str:
    """The series' fit over its points of two nodes or more, or why it cannot be judged."""
    import numpy as np

    usable = [p for p in points if p.nodes >= 2 and p.time_us > 0 and math.isfinite(p.time_us)]
    counts = sorted({p.nodes for p in usable})
    if len(counts) < 2:
        return f"cannot judge: measured at {_counts(counts)} of two nodes or more; a fit needs two node counts"
    sizes = sorted({p.size for p in usable})
    columns = ["fixed", "per step", *(f"bytes {s}" for s in sizes)]
    X = np.array([design(columns, name, group, g, p.nodes, p.size) for p in usable])
    y = np.array([p.time_us for p in usable])
    # a column that does not vary where it is used adds nothing the others lack: drop the
    # per-step latency, then the fixed one, until the rest are independent
    for drop in ("per step", "fixed"):
        if np.linalg.matrix_rank(X) == X.shape[1]:
            break
        keep = [i for i, c in enumerate(columns) if c != drop]
        columns, X = [columns[i] for i in keep], X[:, keep]
    dropped: list[str] = []
    while True:
        dof = len(y) - len(columns)
        if dof < 1 or np.linalg.matrix_rank(X) < X.shape[1]:
            return (
                f"cannot judge: {len(y)} measured point(s) at {_counts(counts)} for {len(columns)} constants; "
                "a fit needs more points than constants"
            )
        beta, weights = _weighted(X, y)
        resid = (y - X @ beta) * weights
        Xw = X * weights[:, None]
        out = Fit(
            name=name,
            group=group,
            gpus_per_node=g,
            columns=columns,
            beta=np.asarray(beta, dtype=np.float64),
            inverse=np.linalg.pinv(Xw.T @ Xw),
            sd=float(math.sqrt(resid @ resid / dof)),
            dof=dof,
            nodes=counts,
            sizes=sizes,
        )
        # A constant below zero is no hardware's. Over three node counts or fewer, the three
        # terms that vary with the count (fixed, per step, the bus factor) fit each size
        # exactly, and the latencies can take the growth its bytes should carry, or give back
        # more than they took: they are left out in turn and the rest fitted again. Over more
        # counts, the fit stands as it is.
        latency = next((c for c in ("per step", "fixed") if c in columns), None)
        if latency is None or dof < 2 or len(counts) > 3 or not (beta < 0).any():
            break
        dropped.append(latency)
        keep = [i for i, c in enumerate(columns) if c != latency]
        columns, X = [columns[i] for i in keep], X[:, keep]
    if dropped:
        out.notes.append(
            f"fitted without its {' and '.join(LATENCY_WORDS[c] for c in dropped)}: with "
            f"{'it' if len(dropped) == 1 else 'them'}, a constant came out below zero, which no hardware has"
        )
    if below := [c for c, v in zip(columns, beta, strict=True) if c.startswith("bytes ") and v < 0]:
        out.notes.append(
            f"{', '.join(below)} fitted below zero: those sizes' time did not grow with the bus factor (a host "
            "whose CPU sets the time), and no other hardware moves them"
        )
    if sum(n >= 3 for n in counts) < 2:
        out.widen = CLASS_WIDEN
        out.notes.append(
            f"fitted on {_counts(counts)}: NCCL takes other constants at 1, 2, and 3 or more nodes, and fewer "
            f"than two node counts of 3 or more cannot tell them apart; its interval is widened {CLASS_WIDEN:g}x"
        )
    return out


def _weighted(X: npt.NDArray[np.float64], y: npt.NDArray[np.float64]) -> tuple[Any, Any]:
    """Least squares on relative errors: weighted by the measured time, then by the fitted one;
    the coefficients and the last weights."""
    import numpy as np

    weights = 1 / y
    for _ in range(2):
        beta, *_ = np.linalg.lstsq(X * weights[:, None], y * weights, rcond=None)
        fitted = X @ beta
        weights = 1 / np.where(fitted > 0, fitted, y)
    return beta, weights


def _counts(counts: Iterable[int]) -> str:
    c = list(counts)
    return "no node count" if not c else f"{', '.join(map(str, c))} node{'s' if c != [1] else ''}"


def fitted_on(counts: list[int]) -> str:
    """ "1-4 nodes" for consecutive counts, else the list."""
    if counts and counts == list(range(counts[0], counts[-1] + 1)) and len(counts) > 2:
        return f"{counts[0]}-{counts[-1]} nodes"
    return _counts(counts)


def busbw(name: str, group: str, g: int, nodes: int, size: int, time_us: float) -> float:
    """busbw in GB/s of a call of `size` bytes taking `time_us` (nccl-tests' definition)."""
    if not time_us or not math.isfinite(time_us) or time_us <= 0:
        return math.nan
    return size / (time_us * 1e3) * collective(name).bus_factor(ranks(group, nodes, g))


def collective_series(summary: pd.DataFrame) -> dict[tuple[Any, ...], list[Point]]:
    """Each collective series' points: its completed rows of the summary, each message size
    named by the sweep's (a collective that divides its message among the ranks rounds it down
    to a multiple of their count: 262,140 bytes of 262,144 on 3 ranks)."""
    rows = summary[(summary["workload"] == "allreduce") & (summary["status"] == "COMPLETED")]
    out: dict[tuple[Any, ...], list[Point]] = {}
    for key, part in rows.groupby(list(SERIES), sort=True, dropna=False):
        named = nominal(int(s) for s in part["size_bytes"])
        out[tuple(plain(key))] = [
            Point(int(n), named[int(s)], float(t))
            for n, s, t in zip(part["nodes"], part["size_bytes"], part["time_us"], strict=True)
        ]
    return out


def nominal(sizes: Iterable[int]) -> dict[int, int]:
    """Each size to the largest of the sizes within 1% below it and itself, chained: the size
    the sweep asked for, of which the measured ones are rounded down."""
    out: dict[int, int] = {}
    group: list[int] = []
    for size in sorted(set(sizes), reverse=True):
        if group and size < group[0] * 0.99:
            group = []
        group.append(size)
        out[size] = group[0]
    return out


def predict_collectives(
    series: dict[tuple[Any, ...], list[Point]],
    fits: dict[tuple[Any, ...], Fit | str],
    targets: list[int],
    validate: bool = True,
    largest: bool = False,
) -> list[dict[str, Any]]:
    """For each series and measured size (its largest alone, with `largest`): its fit's
    predictions at `targets`, and its validation."""
    out = []
    for key, points in series.items():
        name, group, g = str(key[0]), str(key[1]), int(key[2])
        result = fits[key]
        check = validation(name, group, g, points) if validate else {}
        sizes = sorted({p.size for p in points})
        for size in sizes[-1:] if largest else sizes:
            row: dict[str, Any] = dict(zip(SERIES, plain(key), strict=True)) | {"size_bytes": size}
            if isinstance(result, str):
                out.append(row | {"fitted_nodes": [], "predictions": [], "note": result, "validation": None})
                continue
            row |= {"fitted_nodes": result.nodes, "note": "; ".join(result.notes) or None}
            row["constants_us"] = {c: float(v) for c, v in zip(result.columns, result.beta, strict=True)}
            row["predictions"] = [_prediction(result, n, size) for n in targets]
            row["validation"] = check.get(size) if isinstance(check, dict) else {"note": check}
            out.append(row)
    return out


def _prediction(f: Fit, nodes: int, size: int) -> dict[str, Any]:
    t, low, high = f.predict(nodes, size)
    bw = (busbw(f.name, f.group, f.gpus_per_node, nodes, size, x) for x in (t, high, low))
    return {"nodes": nodes, "time_us": t, "time_low_us": low, "time_high_us": high} | dict(
        zip(("busbw_gbps", "busbw_low_gbps", "busbw_high_gbps"), bw, strict=True)
    )


def validation(name: str, group: str, g: int, points: list[Point]) -> dict[int, dict[str, Any]] | str:
    """Per message size: the series refitted without its largest node count, that count
    predicted and set against what was measured there (the median of its runs)."""
    import statistics

    largest = max((p.nodes for p in points), default=0)
    refit = fit(name, group, g, [p for p in points if p.nodes != largest])
    if isinstance(refit, str):
        return f"not validated: without {largest} nodes, {refit.removeprefix('cannot judge: ')}"
    out = {}
    for size in sorted({p.size for p in points if p.nodes == largest}):
        measured = statistics.median(p.time_us for p in points if p.nodes == largest and p.size == size)
        t, low, high = refit.predict(largest, size)
        bw_measured, bw_predicted = (busbw(name, group, g, largest, size, x) for x in (measured, t))
        out[size] = {
            "fitted_nodes": refit.nodes,
            "nodes": largest,
            "measured_time_us": measured,
            "predicted_time_us": t,
            "time_error": t / measured - 1,
            "busbw_error": bw_predicted / bw_measured - 1,
            "inside": bool(low <= measured <= high),
        }
    return out


def plain(values: Iterable[Any]) -> list[Any]:
    """numpy scalars as Python's, for JSON."""
    return [v.item() if hasattr(v, "item") else v for v in values]


def fit_all(series: dict[tuple[Any, ...], list[Point]]) -> dict[tuple[Any, ...], Fit | str]:
    return {key: fit(str(key[0]), str(key[1]), int(key[2]), points) for key, points in series.items()}
