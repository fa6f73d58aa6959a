"""Each training workload's step against the node count, for `bench predict`
(harness/analysis/predict.py, docs/concepts/predict.md). A step is compute, data wait and the
part of its traffic that the backward pass does not hide:

    step(n) = compute(n) + wait + max(0, comm(n) - hidden)

where comm(n) is the run's own collective fits (harness/analysis/collective_fit.py) at the
step's bytes (the result's `traffic`) and `hidden` is fitted from the measured breakdowns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.analysis.collective_fit import LEVEL, Fit, collective_series, exp_or_inf, fit_all, plain
from harness.analysis.stats import t_quantile

if TYPE_CHECKING:
    import pandas as pd

# The series a training prediction is one of: every key but the node count
TRAINING_SERIES = ("workload", "scaling", "gpus_per_node", "launcher", "nccl_config")

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
        factor = exp_or_inf(math.hypot(spread, traffic))
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


def units_per_item(first: Any) -> float:
    """What one item of a batch counts in its unit (UNIT_COLUMNS): an image is one image; a
    transformer's sequence is seq_len tokens (the summary's params state it; NaN where they do not)."""
    if UNIT_COLUMNS[str(first["workload"])] != "tokens":
        return 1.0
    try:
        return float(json.loads(first["params"])["seq_len"])
    except (TypeError, ValueError, KeyError):  # a summary from before params were stated: no rate
        return math.nan


def predict_training(
    summary: pd.DataFrame,
    fits: dict[tuple[Any, ...], Fit | str],
    targets: list[int],
    validate: bool = True,
    compute: Callable[[str], float] | None = None,
    other: dict[tuple[Any, ...], Fit | str] | None = None,
) -> list[dict[str, Any]]:
    """Each training series' step, throughput and efficiency at `targets`, and their validation.
    `fits`: the collective fits by (collective, group, gpus_per_node, launcher, nccl_config);
    `compute` and `other`: on other hardware, what a workload's compute is multiplied by, and
    the collective fits with their bytes terms scaled; the step model is fitted with `fits`."""
    rows = summary[summary["workload"].isin(list(UNIT_COLUMNS)) & (summary["status"] == "COMPLETED")]
    out = []
    refits: dict[int, dict[tuple[Any, ...], Fit | str]] = {}  # without each largest node count, fitted once
    for key, part in rows.groupby(list(TRAINING_SERIES), sort=True, dropna=False):
        head = dict(zip(TRAINING_SERIES, plain(key), strict=True))
        row = head | _series(part, fits, targets, compute(head["workload"]) if compute else 1.0, other)
        if validate and row["predictions"]:
            largest = int(part["nodes"].max())
            if largest not in refits:
                refits[largest] = fit_all(collective_series(summary[summary["nodes"] != largest]))
            row["validation"] = _validate_training(part, refits[largest])
        out.append(row)
    return out


def _series(
    part: pd.DataFrame,
    fits: dict[tuple[Any, ...], Fit | str],
    targets: list[int],
    compute: float = 1.0,
    other: dict[tuple[Any, ...], Fit | str] | None = None,
) -> dict[str, Any]:
    """One training series' predictions at `targets` from its rows and the run's collective fits."""
    first = part.sort_values("nodes").iloc[0]
    g, launcher, nccl = first["gpus_per_node"], first["launcher"], first["nccl_config"]
    mine = {name: fits[k] for name in TRAFFIC.values() if (k := (name, "world", g, launcher, nccl)) in fits}
    model = step_model(part, mine)
    if not isinstance(model, str):  # fitted as measured, predicted on the other hardware
        model.per_item_ms *= compute
        if other:
            model.fits = {name: other[(name, "world", g, launcher, nccl)] for name in model.fits}  # type: ignore[misc]
    row: dict[str, Any] = {
        "unit": UNIT_COLUMNS[str(first["workload"])],
        "measured_nodes": sorted(set(part["nodes"].astype(int))),
    }
    if isinstance(model, str):
        return row | {"note": model, "predictions": [], "validation": None}
    base_nodes = int(first["nodes"])
    units = units_per_item(first)
    base = batch_at(first, base_nodes) * units / float(part[part["nodes"] == base_nodes]["step_time_ms"].median()) * 1e3
    preds = []
    for n in targets:
        batch = batch_at(first, n)
        step, low, high = model.predict(n, batch)
        per_gpu = [batch * units / (x / 1e3) if x > 0 else math.nan for x in (step, high, low)]
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
