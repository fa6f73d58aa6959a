"""A run judged against the figures its cluster profile states (`reference:`), in the manner of
ReFrame's performance references: the first run on a new cluster gets a verdict without any
history (docs/concepts/expected.md).

Each reference names a key of the matrix (the fields it leaves out match any value), its value
and a tolerance. A completed row below value x (1 - tolerance) is slower, above value x
(1 + tolerance) faster, and in between no significant change. A reference whose key the run
planned but did not complete is failed, and one whose key the run never planned cannot be
judged: it is not taken as met.

A row that completed without a usable value (NaN, zero) cannot be judged, as against the history.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD, WORLD
from harness.analysis.compare import FAILED, FASTER, ORDER, REFERENCE, SAME, SLOWER, UNJUDGED, Comparison
from harness.analysis.sides import KEYS, Side, key_texts
from harness.config.cluster_profile import Reference
from harness.errors import DataError

if TYPE_CHECKING:
    import pandas as pd

BASELINE = "reference"  # bench regress --baseline reference


def references(cluster: dict[str, Any] | None) -> tuple[Reference, ...]:
    """The references of the profile a run's plan.json records."""
    raw = (cluster or {}).get("reference") or ()
    try:
        return tuple(Reference(**r) for r in raw)
    except (TypeError, ValueError) as exc:
        raise DataError(f"plan.json: the cluster profile's reference block is not usable ({exc})") from None


def _matches(frame: pd.DataFrame, ref: Reference) -> pd.Series:
    mask = (frame["workload"] == ref.workload) & (frame["nodes"] == ref.nodes)
    for key in ("gpus_per_node", "launcher", "nccl_config", "scaling"):
        value = getattr(ref, key)
        if value is not None:
            mask &= frame[key] == value
    if ref.workload == COLLECTIVE_WORKLOAD:
        mask &= (
            (frame["collective"] == (ref.collective or "all_reduce"))
            & (frame["group"] == (ref.group or WORLD))
            & (frame["size_bytes"] == ref.size)
        )
    return mask


def against_reference(run: Side, refs: tuple[Reference, ...], profile: str) -> Comparison:
    """The run (as B) against its profile's references (as A), in the shape `bench regress`
    writes: one table row per (reference, matching key)."""
    import numpy as np
    import pandas as pd

    if not refs:
        raise DataError(
            f"{run.source}: its cluster profile {profile!r} states no reference figures; add a reference: "
            f"block to the profile (docs/concepts/expected.md), or judge against the history with --baseline median:5"
        )
    rows: list[dict[str, Any]] = []
    others = run.others if run.others is not None else pd.DataFrame(columns=[*KEYS, "status", "reason", "job"])
    for ref in refs:
        tol, value = ref.tolerance, ref.value
        base = {"metric": ref.metric, "a": value, "band_low": 1 - tol, "band_high": 1 + tol, "test": REFERENCE}
        done = run.rows[_matches(run.rows, ref).to_numpy(dtype=bool)]
        for r in done.to_dict("records"):
            b = float(r[ref.metric])
            ratio = b / value
            verdict = SLOWER if ratio < 1 - tol else FASTER if ratio > 1 + tol else SAME
            note = ""
            if not math.isfinite(b) or b <= 0:  # no measurement: never taken as met (compare.usable)
                verdict, note = UNJUDGED, f"{ref.metric} is {b:g} in {run.label}"
            if r.get("failed_runs", 0):  # another run of the key did not complete (compare.Side)
                lost = r["failed_runs"]
                verdict, note = FAILED, f"{lost} of {lost + r['runs']} runs failed in {run.label}: {r['failed_note']}"
            rows.append({**base, **{k: r[k] for k in KEYS}, "b": b, "ratio": ratio, "verdict": verdict, "note": note})
        failed = others[_matches(others, ref).to_numpy(dtype=bool)]
        for r in failed.to_dict("records"):
            why = f"{r['job']} {r['status']}" + (f": {r['reason']}" if r.get("reason") else "")
            rows.append(
                {**base, **{k: r[k] for k in KEYS}, "b": np.nan, "ratio": np.nan, "verdict": FAILED, "note": why}
            )
        if done.empty and failed.empty:
            key = {
                "workload": ref.workload,
                "collective": ref.collective or "all_reduce" if ref.workload == COLLECTIVE_WORKLOAD else "",
                "group": ref.group or WORLD if ref.workload == COLLECTIVE_WORKLOAD else "",
                "scaling": ref.scaling or "",
                "nodes": ref.nodes,
                "gpus_per_node": ref.gpus_per_node or 0,
                "launcher": ref.launcher or "any",
                "nccl_config": ref.nccl_config or "any",
                "size_bytes": ref.size or 0,
            }
            rows.append(
                {**base, **key, "b": np.nan, "ratio": np.nan, "verdict": UNJUDGED, "note": "the run has no such key"}
            )
    table = pd.DataFrame(rows)
    table["change"] = table["ratio"] - 1
    # a fall past the tolerance is what the reference calls slower (stats.catches for a band)
    table["catches"] = np.where(table["verdict"].isin((SLOWER, FASTER, SAME)), 1 - table["band_low"], np.nan)
    for col in ("ci_low", "ci_high", "p_value"):
        table[col] = np.nan
    table["runs_a"], table["runs_b"], table["n_a"], table["n_b"] = 1, 1, 0, 0
    table["status_b"] = np.where(table["verdict"] == FAILED, "failed", "COMPLETED")
    table["mismatch"] = False
    table = table[["metric", *KEYS, *(c for c in table.columns if c not in ("metric", *KEYS))]]
    table = table.assign(_o=table["verdict"].map(ORDER)).sort_values(["_o", "change"], kind="stable")
    table = table.drop(columns="_o").reset_index(drop=True)
    table.insert(len(KEYS) + 1, "key", key_texts(table))
    a = Side(label=f"reference of {profile}", source=f"cluster profile {profile}", rows=run.rows.iloc[:0], samples={})
    return Comparison(a, run, table, run.rows.iloc[:0], [], 0.0, 1)
