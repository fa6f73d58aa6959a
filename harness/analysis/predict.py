"""From the node counts a run measured to those a site plans: each collective's time and busbw,
and each training workload's step, throughput and scaling efficiency, with 95% prediction
intervals, each validated by predicting the run's own largest node count from the others
(docs/concepts/predict.md).

Collectives. The points of one series (a collective on a group, at one count of GPUs a node,
launcher and settings set), each message size at each node count of two nodes or more, are
fitted together to NCCL's model of a call (docs/concepts/predict.md): a fixed latency, a
latency per inter-node step of the collective's ring, and per message size the time its bytes
take at the bus's rate, times the collective's bus factor at that many ranks:

    t(n, S) = a + b * steps(n) + c_S * factor(ranks(n))

by least squares on relative errors. One node is a class of its own (no network) and is left
out. The interval is the regression's prediction interval of a new run, on the relative scale.

Training. A step is compute, data wait and the part of its gradient traffic that the backward
pass does not hide: step(n) = compute(n) + wait + max(0, comm(n) - hidden), where comm(n) is
the run's own collectives' fit at the step's bytes (the result's `traffic`) and `hidden` is
fitted from the measured breakdowns.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import INTER, INTRA, collective
from harness.analysis.stats import t_quantile

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd

LEVEL = 0.95
METHOD = (
    "least squares on relative errors of t(n, S) = a + b*steps(n) + c_S*factor(ranks) over the runs "
    "of two nodes or more; 95% prediction intervals; validated by refitting without the largest node count"
)
# NCCL takes its constants by node class, 1, 2, and 3 or more nodes (docs/concepts/predict.md). A
# fit with fewer than two node counts of the 3+ class cannot tell the 2-node class from it:
# its interval is widened by this factor, and it says so.
CLASS_WIDEN = 2.0
# The series a collective fit is one of: every key but the node count and the message size
SERIES = ("collective", "group", "gpus_per_node", "launcher", "nccl_config")
TRAINING_SERIES = ("workload", "scaling", "gpus_per_node", "launcher", "nccl_config")


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

    def constant(self, column: str) -> tuple[float, float, float]:
        """(value, low, high) of one fitted constant: "fixed" and "per step" in microseconds,
        "bytes S" in microseconds per unit of bus factor (S bytes over the bus's rate)."""
        j = self.columns.index(column)
        half = t_quantile(LEVEL, self.dof) * self.sd * math.sqrt(float(self.inverse[j, j])) * self.widen
        value = float(self.beta[j])
        return value, value - half, value + half

    def row(self, nodes: int, size: int) -> npt.NDArray[np.float64]:
        return design(self.columns, self.name, self.group, self.gpus_per_node, nodes, size)

    def predict(self, nodes: int, size: int) -> tuple[float, float, float]:
        """(time, low, high) in microseconds at `nodes` nodes for a measured message size."""
        x = self.row(nodes, size)
        t = float(x @ self.beta)
        if t <= 0:
            return t, math.nan, math.nan
        rel = x / t
        se = self.sd * math.sqrt(1 + float(rel @ self.inverse @ rel))
        # relative errors: the interval is symmetric on the log scale, never below zero
        spread = _exp(t_quantile(LEVEL, self.dof) * se * self.widen)
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
        t = t_ref - self._bytes_term(nodes, ref) + size / rate * factor
        scale = t / t_ref if t_ref > 0 else math.nan
        return t, low * scale, high * scale

    def _rate(self, size: int) -> float:
        c = float(self.beta[self.columns.index(f"bytes {size}")])
        return size / c if c > 0 else math.inf

    def _bytes_term(self, nodes: int, size: int) -> float:
        c = float(self.beta[self.columns.index(f"bytes {size}")])
        return c * collective(self.name).bus_factor(ranks(self.group, nodes, self.gpus_per_node))


def _exp(x: float) -> float:
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
    dof = len(y) - len(columns)
    if dof < 1 or np.linalg.matrix_rank(X) < X.shape[1]:
        return (
            f"cannot judge: {len(y)} measured point(s) at {_counts(counts)} for {len(columns)} constants; "
            "a fit needs more points than constants"
        )
    weights = 1 / y
    for _ in range(2):  # relative errors: weighted by the measured time, then by the fitted one
        beta, *_ = np.linalg.lstsq(X * weights[:, None], y * weights, rcond=None)
        fitted = X @ beta
        weights = 1 / np.where(fitted > 0, fitted, y)
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
    if sum(n >= 3 for n in counts) < 2:
        out.widen = CLASS_WIDEN
        out.notes.append(
            f"fitted on {_counts(counts)}: NCCL takes other constants at 1, 2, and 3 or more nodes, and fewer "
            f"than two node counts of 3 or more cannot tell them apart; its interval is widened {CLASS_WIDEN:g}x"
        )
    return out


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
        out[tuple(_plain(key))] = [
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
            row: dict[str, Any] = dict(zip(SERIES, _plain(key), strict=True)) | {"size_bytes": size}
            if isinstance(result, str):
                out.append(row | {"fitted_nodes": [], "predictions": [], "note": result, "validation": None})
                continue
            row |= {"fitted_nodes": result.nodes, "note": "; ".join(result.notes) or None}
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


def _plain(values: Iterable[Any]) -> list[Any]:
    """numpy scalars as Python's, for JSON."""
    return [v.item() if hasattr(v, "item") else v for v in values]


def summarise(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The median absolute error of `key` over the validated rows, and how many of their
    measured values fell inside the interval."""
    import statistics

    checked = [v for r in rows if isinstance(v := r.get("validation"), dict) and "inside" in v]
    errors = [abs(v[key]) for v in checked if math.isfinite(v[key])]
    return {
        "validated": len(checked),
        "median_abs_error": statistics.median(errors) if errors else None,
        "inside": sum(v["inside"] for v in checked),
    }


# What each training row's step sends (the summary's traffic columns) and the collective that
# carries it over every rank
TRAFFIC = {
    "step_all_reduce_bytes": "all_reduce",
    "step_all_gather_bytes": "all_gather",
    "step_reduce_scatter_bytes": "reduce_scatter",
}
UNIT_COLUMNS = {"synthetic": "images", "real": "images", "transformer": "tokens"}


@dataclass
class Step:
    """A training series' step model (the module's docstring): the fitted compute per item,
    data wait and hidden communication, the residual spread at the measured node counts, and
    the collectives' fits it takes its traffic's time from."""

    scaling: str
    per_item_ms: float
    wait_ms: float
    hidden_ms: float
    sd: float
    dof: int
    points: int
    traffic: dict[str, float]  # collective -> bytes a step
    fits: dict[str, Fit]
    nodes: list[int]

    def comm(self, nodes: int) -> tuple[float, float, float]:
        """(ms, low, high) of the step's traffic at `nodes` nodes, each collective's interval added."""
        parts = [self.fits[name].at_bytes(nodes, size) for name, size in self.traffic.items() if size > 0]
        return tuple(sum(p[i] for p in parts) / 1e3 for i in range(3))  # type: ignore[return-value]

    def predict(self, nodes: int, batch: float) -> tuple[float, float, float]:
        """(step ms, low, high) at `nodes` nodes, `batch` items a rank."""
        comm, low, high = self.comm(nodes)
        exposed = max(0.0, comm - self.hidden_ms)
        step = self.per_item_ms * batch + self.wait_ms + exposed
        # relative, on the log scale as the collectives' intervals: the residual spread of the
        # step model at the measured node counts, and the exposed traffic's own interval
        spread = t_quantile(LEVEL, self.dof) * self.sd * math.sqrt(1 + 1 / self.points)
        traffic = math.log(high / low) / 2 * exposed / step if exposed > 0 and low > 0 else 0.0
        factor = _exp(math.hypot(spread, traffic))
        return step, step / factor, step * factor


def step_model(rows: pd.DataFrame, fits: dict[str, Fit | str]) -> Step | str:
    """The step model of one training series' rows, or why it cannot be judged."""
    import statistics

    first = rows.iloc[0]
    traffic = {name: float(first[col]) for col, name in TRAFFIC.items() if col in rows and first[col] > 0}
    if not traffic:
        return "cannot judge: its rows state no traffic (collected before bench stated what a step sends)"
    missing = [name for name in traffic if not isinstance(fits.get(name), Fit)]
    if missing:
        why = "; ".join(f"{name}: {fits[name]}" if name in fits else f"the run measured no {name}" for name in missing)
        return f"cannot judge its traffic over every rank ({why})"
    multi = rows[rows["nodes"] >= 2]
    counts = sorted({int(n) for n in multi["nodes"]})
    if len(multi) < 2 or rows["slowest_compute_time_ms"].isna().all():
        return (
            f"cannot judge: {len(multi)} measured step(s) of two nodes or more, with a compute-only step; it needs two"
        )
    step = rows["step_time_ms"].astype(float)
    wait = (rows["step_data_wait_fraction"].fillna(0.0) * step).astype(float)
    compute = rows["slowest_compute_time_ms"].astype(float)
    model = Step(
        scaling=str(first["scaling"]),
        # from the rows that cross the network, as those predicted do
        per_item_ms=statistics.median((compute[multi.index] / multi["batch_size"]).dropna()),
        wait_ms=statistics.median(wait),
        hidden_ms=0.0,
        sd=0.0,
        dof=len(multi) - 1,
        points=len(multi),
        traffic=traffic,
        fits={name: fits[name] for name in traffic},  # type: ignore[misc]
        nodes=counts,
    )
    comm = [model.comm(int(n))[0] for n in multi["nodes"]]
    exposed = multi["step_time_ms"] - multi["slowest_compute_time_ms"] - wait[multi.index]
    model.hidden_ms = max(0.0, statistics.median(c - e for c, e in zip(comm, exposed, strict=True)))
    rel = [
        s / model.predict(int(n), float(b))[0] - 1
        for n, b, s in zip(multi["nodes"], multi["batch_size"], multi["step_time_ms"], strict=True)
    ]
    model.sd = math.sqrt(sum(r * r for r in rel) / model.dof)
    return model


def batch_at(first: Any, nodes: int) -> float:
    """Items a rank takes at `nodes` nodes: the same under weak scaling, the global batch shared
    out under strong."""
    if first["scaling"] == "strong":
        return float(first["global_batch"]) / (nodes * int(first["gpus_per_node"]))
    return float(first["batch_size"])


def predict_training(
    summary: pd.DataFrame, fits: dict[tuple[Any, ...], Fit | str], targets: list[int], validate: bool = True
) -> list[dict[str, Any]]:
    """Each training series' step, throughput and efficiency at `targets`, and their validation.
    `fits`: the collective fits by (collective, group, gpus_per_node, launcher, nccl_config)."""
    rows = summary[summary["workload"].isin(list(UNIT_COLUMNS)) & (summary["status"] == "COMPLETED")]
    out = []
    refits: dict[int, dict[tuple[Any, ...], Fit | str]] = {}  # without each largest node count, fitted once
    for key, part in rows.groupby(list(TRAINING_SERIES), sort=True, dropna=False):
        head = dict(zip(TRAINING_SERIES, _plain(key), strict=True))
        row = head | _series(part, fits, targets)
        if validate and row["predictions"]:
            largest = int(part["nodes"].max())
            if largest not in refits:
                refits[largest] = fit_all(collective_series(summary[summary["nodes"] != largest]))
            row["validation"] = _validate_training(part, refits[largest])
        out.append(row)
    return out


def _series(part: pd.DataFrame, fits: dict[tuple[Any, ...], Fit | str], targets: list[int]) -> dict[str, Any]:
    """One training series' predictions at `targets` from its rows and the run's collective fits."""
    first = part.sort_values("nodes").iloc[0]
    g, launcher, nccl = first["gpus_per_node"], first["launcher"], first["nccl_config"]
    mine = {name: fits[k] for name in TRAFFIC.values() if (k := (name, "world", g, launcher, nccl)) in fits}
    model = step_model(part, mine)
    row: dict[str, Any] = {
        "unit": UNIT_COLUMNS[str(first["workload"])],
        "measured_nodes": sorted(set(part["nodes"].astype(int))),
    }
    if isinstance(model, str):
        return row | {"note": model, "predictions": [], "validation": None}
    base_nodes = int(first["nodes"])
    base = batch_at(first, base_nodes) / float(part[part["nodes"] == base_nodes]["step_time_ms"].median()) * 1e3
    preds = []
    for n in targets:
        batch = batch_at(first, n)
        step, low, high = model.predict(n, batch)
        per_gpu = [batch / (x / 1e3) if x > 0 else math.nan for x in (step, high, low)]
        preds.append(
            {"nodes": n, "step_time_ms": step, "step_low_ms": low, "step_high_ms": high}
            | dict(zip(("per_gpu", "per_gpu_low", "per_gpu_high"), per_gpu, strict=True))
            | dict(zip(("efficiency", "efficiency_low", "efficiency_high"), (x / base for x in per_gpu), strict=True))
            | {"exposed_comm_ms": max(0.0, model.comm(n)[0] - model.hidden_ms)}
        )
    return row | {
        "fitted_nodes": model.nodes,
        "compute_ms_per_item": model.per_item_ms,
        "data_wait_ms": model.wait_ms,
        "hidden_comm_ms": model.hidden_ms,
        "traffic_bytes": model.traffic,
        "note": None,
        "predictions": preds,
        "validation": None,
    }


def _validate_training(part: pd.DataFrame, fits: dict[tuple[Any, ...], Fit | str]) -> dict[str, Any]:
    """The series' step at its largest node count, predicted from the rest of the run, with
    `fits`, every collective refitted without that count."""
    import statistics

    largest = int(part["nodes"].max())
    again = _series(part[part["nodes"] != largest], fits, [largest])
    if not again["predictions"]:
        return {"note": f"not validated: without {largest} nodes, {again['note'].removeprefix('cannot judge: ')}"}
    predicted = again["predictions"][0]
    measured = statistics.median(part[part["nodes"] == largest]["step_time_ms"])
    return {
        "fitted_nodes": again["fitted_nodes"],
        "nodes": largest,
        "measured_step_ms": measured,
        "predicted_step_ms": predicted["step_time_ms"],
        "step_error": predicted["step_time_ms"] / measured - 1,
        "inside": bool(predicted["step_low_ms"] <= measured <= predicted["step_high_ms"]),
    }


def fit_all(series: dict[tuple[Any, ...], list[Point]]) -> dict[tuple[Any, ...], Fit | str]:
    return {key: fit(str(key[0]), str(key[1]), int(key[2]), points) for key, points in series.items()}


def predictions(summary: pd.DataFrame, targets: list[int] | None, curve: bool = False) -> dict[str, Any]:
    """Everything `bench predict` states of a run's summary at `targets` (by default 2, 4 and 8
    times the largest node count measured): predict.json's content; with `curve`, also "curve",
    the same fits at curve_nodes(), unvalidated, each collective at its largest size: a figure's."""
    measured = sorted({int(n) for n in summary["nodes"]})
    targets = targets or [measured[-1] * k for k in (2, 4, 8)]
    series = collective_series(summary)
    fits = fit_all(series)
    collectives = predict_collectives(series, fits, targets)
    training = predict_training(summary, fits, targets)
    out = {
        "measured_nodes": measured,
        "nodes": targets,
        "level": LEVEL,
        "method": METHOD,
        "collectives": collectives,
        "training": training,
        "validation": {
            "collectives_busbw": summarise(collectives, "busbw_error"),
            "collectives_time": summarise(collectives, "time_error"),
            "training_step": summarise(training, "step_error"),
        },
    }
    if curve:
        at = curve_nodes(measured, targets)
        out["curve"] = {
            "measured_nodes": measured,
            "collectives": predict_collectives(series, fits, at, validate=False, largest=True),
            "training": predict_training(summary, fits, at, validate=False),
        }
    return out


def curve_nodes(measured: list[int], targets: list[int]) -> list[int]:
    """The node counts a figure draws the predicted curve at: from two nodes to the largest
    asked, 24 steps evenly apart on a log scale, and every count measured or asked."""
    top = max([*targets, *measured, 2])
    steps = {round(2 ** (1 + k * (math.log2(top) - 1) / 24)) for k in range(25)}
    return sorted({n for n in (*steps, *measured, *targets) if n >= 2})
