"""From the node counts a run measured to those a site plans: each collective's time and busbw
(harness/analysis/collective_fit.py), and each training workload's step, throughput and scaling
efficiency (harness/analysis/step_fit.py), with 95% prediction intervals, each validated by
predicting the run's own largest node count from the others; on the hardware measured, or on
other hardware (harness/analysis/whatif.py). docs/concepts/predict.md is the method.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import TYPE_CHECKING, Any

from harness.analysis.collective_fit import (
    LEVEL,
    SERIES,
    Fit,
    collective_series,
    fit_all,
    fitted_on,
    plain,
    predict_collectives,
)
from harness.analysis.step_fit import TRAINING_SERIES, predict_training
from harness.analysis.whatif import WhatIf

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LEVEL", "METHOD", "curve_nodes", "fitted_on", "pooled", "predictions", "stated_of", "summarise"]

METHOD = (
    "least squares on relative errors of t(n, S) = a + b*steps(n) + c_S*factor(ranks) over the runs "
    "of two nodes or more; 95% prediction intervals; validated by refitting without the largest node count"
)


def summarise(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The median absolute error of `key` over the validated rows, and how many of their
    measured values fell inside the interval."""
    checked = [v for r in rows if isinstance(v := r.get("validation"), dict) and "inside" in v]
    errors = [abs(v[key]) for v in checked if math.isfinite(v[key])]
    return {
        "validated": len(checked),
        "median_abs_error": statistics.median(errors) if errors else None,
        "inside": sum(v["inside"] for v in checked),
    }


def predictions(
    summary: pd.DataFrame,
    targets: list[int] | None,
    curve: bool = False,
    what_if: WhatIf | None = None,
    borrowed: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """Everything `bench predict` states of a run's summary at `targets` (by default 2, 4 and 8
    times the largest node count fitted): predict.json's content; with `curve`, also "curve",
    the same fits at curve_nodes(), unvalidated, each collective at its largest size: a figure's.
    With `what_if`, on other hardware: the validation stays the fit's on the hardware measured.
    `borrowed`: collective rows of the run's series at other node counts, from its cluster's
    history (analysis/pooled.py), fitted with the run's own."""
    measured = sorted({int(n) for n in summary["nodes"]})
    fitted_on_rows = pooled(summary, borrowed)
    fitted = sorted({int(n) for n in fitted_on_rows["nodes"]})
    targets = targets or [fitted[-1] * k for k in (2, 4, 8)]
    series = collective_series(fitted_on_rows)
    measured_fits = fit_all(series)
    fits, moved = dict(measured_fits), []
    for key, f in measured_fits.items():
        if what_if is not None and isinstance(f, Fit):
            scale = what_if.rate_scale(f.name, f.group, f.gpus_per_node)
            fits[key] = dataclasses.replace(f, scale=scale)
            moved += what_if.moved(f.name, f.group, f.gpus_per_node, scale, targets)
    compute = what_if.compute_scale if what_if else None
    collectives = stated(summary, predict_collectives(series, fits, targets), SERIES)
    training = stated(
        summary, predict_training(summary, measured_fits, targets, compute=compute, other=fits), TRAINING_SERIES
    )
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
    if what_if is not None:
        workloads = sorted({row["workload"] for row in training})
        moved += [f"{w}: compute x{compute(w):.3g}" for w in workloads if compute and compute(w) != 1]
        out["what_if"] = what_if.describe() | {"moved": sorted(set(moved)) or ["nothing: no term here depends on it"]}
    if curve:
        at = curve_nodes(fitted, targets)
        out["curve"] = {
            "measured_nodes": fitted,
            "collectives": predict_collectives(series, fits, at, validate=False, largest=True),
            "training": predict_training(summary, measured_fits, at, validate=False, compute=compute, other=fits),
        }
    return out


# What a prediction is of beyond its key: the workload's parameters and its settings set's hash,
# as the summary states them (harness/collect/gather.py), which a later run must share to measure it
STATED = ("params", "settings_hash")


def stated(summary: pd.DataFrame, rows: list[dict[str, Any]], series: tuple[str, ...]) -> list[dict[str, Any]]:
    """`rows` (each of one series, named by the `series` columns) with STATED of that series'
    completed rows of the summary; null where the rows disagree or do not say."""
    done = summary[summary["status"] == "COMPLETED"]
    known = {tuple(plain(key)): stated_of(part) for key, part in done.groupby(list(series), sort=False, dropna=False)}
    nothing = dict.fromkeys(STATED)
    return [row | known.get(tuple(row[c] for c in series), nothing) for row in rows]


def stated_of(rows: pd.DataFrame) -> dict[str, str | None]:
    """STATED of one series' rows: each column's one value, null where they disagree or do not say."""
    values: dict[str, Any] = {c: rows[c].dropna().unique() if c in rows.columns else [] for c in STATED}
    return {c: str(v[0]) if len(v) == 1 else None for c, v in values.items()}


def pooled(summary: pd.DataFrame, borrowed: pd.DataFrame | None) -> pd.DataFrame:
    """The run's summary with the rows borrowed from its cluster's history (analysis/pooled.py)
    after it: what the collectives are fitted on, and the figure draws."""
    import pandas as pd

    return summary if borrowed is None or borrowed.empty else pd.concat([summary, borrowed], ignore_index=True)


def curve_nodes(measured: list[int], targets: list[int]) -> list[int]:
    """The node counts a figure draws the predicted curve at: from two nodes to the largest
    asked, 24 steps evenly apart on a log scale, and every count measured or asked."""
    top = max([*targets, *measured, 2])
    steps = {round(2 ** (1 + k * (math.log2(top) - 1) / 24)) for k in range(25)}
    return sorted({n for n in (*steps, *measured, *targets) if n >= 2})
