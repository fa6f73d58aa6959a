"""Collection: the result JSONs of a run directory become one summary table.

One row per (job, workload, scaling mode, collective, message size). Rows of jobs or
workloads that did not produce a result are kept, with their status and no figures, so a
failure is visible in the table rather than silently missing. A corrupt or partial result
file is skipped with a warning naming it.

Scaling arithmetic, per configuration (workload, scaling mode, launcher, NCCL set, backend,
device, model), against the row with the smallest world size:
    speedup    = images_per_s / images_per_s at the smallest world size
    efficiency = speedup / (world size / smallest world size)
For weak scaling the efficiency equals per-GPU throughput over the baseline's per-GPU
throughput; for strong scaling it is speedup over ideal speedup.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any, Callable

from benchmarks.results import ResultError, atomic_write_bytes, load_result

from .plan import Job
from .rundir import COMPLETED, RunDir

# The columns of summary.csv, in order. Units are in the names.
COLUMNS = [
    "job", "config_hash", "workload", "scaling", "collective", "nodes", "gpus_per_node", "world_size",
    "launcher", "backend", "device", "nccl_config", "status",
    "size_bytes", "time_us", "algbw_gbps", "busbw_gbps", "wrong",
    "time_us_p10", "time_us_median", "time_us_p90",
    "oop_time_us", "oop_algbw_gbps", "oop_busbw_gbps", "oop_wrong",
    "images_per_s", "images_per_s_per_gpu", "step_time_ms", "step_time_ms_p10", "step_time_ms_p90",
    "compute_images_per_s", "data_wait_fraction", "batch_size", "global_batch", "model", "dtype",
    "efficiency", "speedup", "hosts",
]
SCALING_KEYS = ["workload", "scaling", "launcher", "backend", "device", "nccl_config", "model"]
MISSING = "MISSING"  # the job completed but its result file is absent or unusable

_ROW_FIELDS = ("time_us", "algbw_gbps", "busbw_gbps", "wrong", "time_us_p10", "time_us_median", "time_us_p90",
               "oop_time_us", "oop_algbw_gbps", "oop_busbw_gbps", "oop_wrong", "dtype")
_TRAINING_FIELDS = ("images_per_s", "images_per_s_per_gpu", "step_time_ms", "step_time_ms_p10", "step_time_ms_p90",
                    "compute_images_per_s", "data_wait_fraction", "batch_size", "global_batch")


def _warn(message: str) -> None:
    print(f"bench: warning: {message}", file=sys.stderr)


def collect(run: RunDir, warn: Callable[[str], None] = _warn) -> tuple[Any, Any]:
    """(summary, samples) DataFrames built from the run directory's plan, job table and results."""
    import pandas as pd

    jobs = run.jobs()
    table = run.read_table(jobs)
    rows: list[dict[str, Any]] = []
    samples: list[Any] = []
    for job in jobs:
        rec = table[job.name]
        base = {"job": job.name, "config_hash": job.config_hash, "nodes": job.nodes,
                "gpus_per_node": job.gpus_per_node, "world_size": job.world_size, "launcher": job.launcher,
                "nccl_config": job.nccl_config}
        for wr in job.runs:
            status = rec.runs.get(wr.key, rec.state)
            head = {**base, "workload": wr.workload, "scaling": wr.scaling, "status": status}
            path = run.path / job.result_path(wr)
            result = None
            if path.exists():
                try:
                    result = load_result(path)
                except ResultError as exc:
                    warn(f"skipping {exc}")
            if result is None:
                rows.append({**head, "status": MISSING if status == COMPLETED else status})
                continue
            head.update(backend=result.get("backend"), device=result.get("device"),
                        hosts=",".join(result.get("environment", {}).get("hosts", [])))
            try:
                new_rows, new_samples = _result_rows(head, result)
            except (KeyError, TypeError, ValueError) as exc:
                warn(f"skipping {path}: incomplete result ({type(exc).__name__}: {exc})")
                rows.append({**head, "status": MISSING})
                continue
            rows.extend(new_rows)
            samples.extend(new_samples)
    summary = pd.DataFrame(rows, columns=COLUMNS)
    summary = add_scaling(summary)
    sample_df = pd.DataFrame(samples, columns=["job", "workload", "scaling", "collective", "size_bytes",
                                               "metric", "iteration", "value"])
    return summary, sample_df


def _result_rows(head: dict[str, Any], result: dict[str, Any]) -> tuple[list[dict[str, Any]], list[tuple]]:
    rows, samples = [], []
    key = (head["job"], head["workload"], head["scaling"])
    if head["workload"] == "allreduce":
        for r in result["rows"]:
            rows.append({**head, "collective": r["collective"], "size_bytes": int(r["size_bytes"]),
                         **{f: r.get(f) for f in _ROW_FIELDS}})
            samples.extend((*key, r["collective"], int(r["size_bytes"]), "time_us", i, v)
                           for i, v in enumerate(r["samples_us"]))
    else:
        rows.append({**head, "model": result["params"]["model"],
                     **{f: result.get(f) for f in _TRAINING_FIELDS}})
        samples.extend((*key, "", 0, "step_time_ms", i, v)
                       for i, v in enumerate(result["samples"]["step_time_ms"]))
        if float(result["images_per_s"]) <= 0:
            raise ValueError(f"images_per_s is {result['images_per_s']}")
    return rows, samples


def add_scaling(df: Any) -> Any:
    """Fill `speedup` and `efficiency` for training rows (see the module docstring)."""
    import pandas as pd

    df = df.copy()
    df["speedup"] = pd.Series(float("nan"), index=df.index)
    df["efficiency"] = pd.Series(float("nan"), index=df.index)
    ok = df[(df["workload"] != "allreduce") & df["images_per_s"].notna() & (df["status"] == COMPLETED)]
    if ok.empty:
        return df
    keys = ok[SCALING_KEYS].fillna("")
    ordered = ok.assign(_k=keys.astype(str).agg("|".join, axis=1)).sort_values(["world_size", "nodes"])
    base = ordered.groupby("_k", sort=False)[["images_per_s", "world_size"]].transform("first")
    speedup = ordered["images_per_s"].astype(float) / base["images_per_s"].astype(float)
    df.loc[ordered.index, "speedup"] = speedup
    df.loc[ordered.index, "efficiency"] = speedup / (ordered["world_size"] / base["world_size"])
    return df


def _frame_bytes(df: Any, kind: str) -> bytes:
    buf = io.BytesIO()
    if kind == "parquet":
        df.to_parquet(buf, index=False)
    else:
        df.to_csv(buf, index=False)
    return buf.getvalue()


def write_summary(run: RunDir, summary: Any, samples: Any) -> None:
    """Write summary.parquet, summary.csv and samples.parquet, each atomically."""
    for df in (summary, samples):
        for col in df.columns:
            if df[col].dtype == object:
                df[col] = df[col].astype("string")
    atomic_write_bytes(run.summary_parquet, _frame_bytes(summary, "parquet"))
    atomic_write_bytes(run.summary_csv, _frame_bytes(summary, "csv"))
    atomic_write_bytes(run.samples_parquet, _frame_bytes(samples, "parquet"))


def read_summary(run: RunDir) -> Any:
    import pandas as pd

    if not run.summary_parquet.exists():
        raise FileNotFoundError(f"{run.path}: no summary.parquet; run `bench collect {run.path}` first")
    return pd.read_parquet(run.summary_parquet)
