"""Comparison of two runs (or a run and a baseline from the history), key by key.

A key is a point of the matrix: workload, collective, scaling mode, nodes, GPUs per node,
launcher, NCCL settings set and message size. For every key both sides completed, and every
metric asked for, the table gives A, B, the ratio B/A, a confidence interval and a verdict
(stats.py says how):

    faster / slower           the change passes the threshold AND the test is significant
    no significant change     otherwise

Ratios are of the metric as the summary states it (busbw from the average time, nccl-tests'
way); the interval and the test come from the per-iteration samples behind it. A verdict speaks
of performance: a time that went up is "slower".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import format_size

from . import stats
from .collect import SUMMARY_VERSION, run_facts, summary_version
from .rundir import COMPLETED, RunDir, RunDirError

KEYS = ["workload", "collective", "scaling", "nodes", "gpus_per_node", "launcher", "nccl_config", "size_bytes"]
SAMPLE_JOIN = ["job", "workload", "scaling", "collective", "size_bytes"]
TRAINING = ("synthetic", "real")
FASTER, SLOWER, SAME = "faster", "slower", "no significant change"


@dataclass(frozen=True)
class Metric:
    name: str
    allreduce: bool          # a collective metric, else a training one
    higher_is_better: bool
    samples: str             # the samples.parquet metric behind it (always a time)
    label: str


METRICS = {m.name: m for m in (
    Metric("busbw_gbps", True, True, "time_us", "busbw GB/s"),
    Metric("algbw_gbps", True, True, "time_us", "algbw GB/s"),
    Metric("time_us", True, False, "time_us", "time us"),
    Metric("images_per_s", False, True, "step_time_ms", "images/s"),
    Metric("images_per_s_per_gpu", False, True, "step_time_ms", "images/s per GPU"),
    Metric("step_time_ms", False, False, "step_time_ms", "step ms"),
)}
DEFAULT_METRICS = ("busbw_gbps", "images_per_s")
REQUIRED = ["job", "status", *KEYS, *METRICS, "hosts"]
# What makes two runs incomparable by accident (pyperf checks its metadata the same way).
CHECKED_ENV = {"gpu": "GPU model", "nccl": "NCCL", "torch": "torch", "cuda": "CUDA",
               "gpu_driver": "GPU driver", "backend": "backend", "largest_job_nodes": "nodes in the largest job"}


class DataError(ValueError):
    """Input that cannot be compared: not a run, an unusable summary, no key in common."""


@dataclass
class Side:
    """One side of a comparison: completed rows with their samples."""

    label: str
    source: str
    rows: Any                                   # DataFrame: KEYS, metrics, hosts, status
    samples: dict[str, tuple[Any, Any]]         # samples metric -> (padded values, counts), row-aligned
    environment: dict[str, Any] = field(default_factory=dict)
    stragglers: list = field(default_factory=list)
    incomplete: Any = None                      # DataFrame of keys that did not complete


@dataclass
class Comparison:
    a: Side
    b: Side
    table: Any          # one row per (metric, key), worst first
    only_a: Any         # keys completed in A only, in words too (with B's status, where B has the key)
    only_b: Any
    env_diffs: list[str]
    threshold: float
    method: str = stats.METHOD

    def counts(self) -> dict[str, int]:
        v = self.table["verdict"]
        return {FASTER: int((v == FASTER).sum()), SLOWER: int((v == SLOWER).sum()), SAME: int((v == SAME).sum())}


# --------------------------------------------------------------------------- loading

def check_summary(table: Any, where: str) -> None:
    version = summary_version(table)
    if version != SUMMARY_VERSION:
        raise DataError(f"{where}: summary schema_version {version} is older than this bench's {SUMMARY_VERSION}; "
                        f"re-collect it with `bench collect`" if version < SUMMARY_VERSION else
                        f"{where}: summary schema_version {version} is newer than this bench's {SUMMARY_VERSION}; "
                        f"upgrade bench")
    missing = [c for c in REQUIRED if c not in table.column_names]
    if missing:
        raise DataError(f"{where}: summary lacks column{'s' if len(missing) > 1 else ''} {', '.join(missing)}; "
                        f"re-collect it with `bench collect`")


def read_tables(run: RunDir) -> tuple[Any, Any]:
    """(summary, samples) Arrow tables of a run, checked; DataError if unusable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        run.read_plan()
    except RunDirError as exc:
        raise DataError(str(exc)) from None
    if not run.summary_parquet.exists():
        raise DataError(f"{run.path}: no summary.parquet; run `bench collect {run.path}` first")
    try:
        summary = pq.read_table(run.summary_parquet)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{run.summary_parquet}: unreadable ({exc})") from None
    check_summary(summary, str(run.summary_parquet))
    samples = None
    if run.samples_parquet.exists():
        try:
            samples = pq.read_table(run.samples_parquet)
        except (OSError, pa.ArrowException) as exc:
            raise DataError(f"{run.samples_parquet}: unreadable ({exc})") from None
    return summary, samples


def side_from_tables(summary: Any, samples: Any, label: str, source: str,
                     environment: dict[str, Any] | None = None, found: list | None = None) -> Side:
    """A Side from a summary and samples (Arrow tables): the completed rows, one per key, and
    each row's samples as padded arrays."""
    import numpy as np
    import pyarrow as pa

    from .collect import to_frame

    cols = [c for c in REQUIRED if c in summary.column_names]
    df = to_frame(summary.select(cols))
    df["collective"] = df["collective"].fillna("")
    df["size_bytes"] = df["size_bytes"].fillna(0)
    done = df["status"] == COMPLETED
    incomplete = df.loc[~done, KEYS + ["status"]].reset_index(drop=True)
    rows = df[done].drop_duplicates(KEYS).reset_index(drop=True)
    out: dict[str, tuple[Any, Any]] = {}
    if samples is not None and samples.num_rows:
        sdf = samples.drop(["values"]).to_pandas()
        sdf["collective"] = sdf["collective"].fillna("")
        sdf["_pos"] = np.arange(len(sdf))
        values = samples.column("values")
        for metric_name, part in sdf.groupby("metric", sort=False):
            merged = rows[SAMPLE_JOIN].merge(part.drop(columns="metric"), on=SAMPLE_JOIN, how="left")
            pos = merged["_pos"].to_numpy(dtype=float)
            have = ~np.isnan(pos)
            taken = values.take(pa.array(np.where(have, pos, 0).astype(np.int64)))
            vals, counts = stats.padded(taken)
            counts = np.where(have, counts, 0)
            out[str(metric_name)] = (vals, counts)
    return Side(label=label, source=source, rows=rows, samples=out, environment=environment or {},
                stragglers=found or [], incomplete=incomplete)


def load_run(path: str | Path, label: str | None = None) -> Side:
    run = RunDir(path)
    summary, samples = read_tables(run)
    environment, found = run_facts(summary)
    return side_from_tables(summary, samples, label or run.path.name, str(run.path), environment, found)


def env_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    diffs = []
    for key, name in CHECKED_ENV.items():
        va, vb = a.get(key) or [], b.get(key) or []
        if va and vb and va != vb:
            diffs.append(f"{name}: {', '.join(va)} vs {', '.join(vb)}")
    return diffs


# --------------------------------------------------------------------------- comparing

def parse_threshold(text: str) -> float:
    """'5%' or '0.05' -> 0.05."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"--threshold {text!r} is not a percentage like 5%") from None
    if not 0 <= value < 1 or math.isnan(value):
        raise ValueError(f"--threshold {text!r} must be at least 0% and below 100%")
    return value


def compare(a: Side, b: Side, metrics: tuple[str, ...] = DEFAULT_METRICS, threshold: float = 0.05) -> Comparison:
    import numpy as np
    import pandas as pd

    parts = []
    for name in metrics:
        metric = METRICS[name]
        ra, rb = (_metric_rows(s.rows, metric) for s in (a, b))
        if ra.empty or rb.empty:
            continue
        m = ra[KEYS + [name, "_i"]].merge(rb[KEYS + [name, "_i"]], on=KEYS, suffixes=("_a", "_b"))
        # busbw of a single rank is 0 (its bus factor is): nothing to compare there
        m = m[(m[f"{name}_a"] > 0) & (m[f"{name}_b"] > 0)]
        if m.empty:
            continue
        ia, ib = m["_i_a"].to_numpy(), m["_i_b"].to_numpy()
        (va, ca), (vb, cb) = _samples(a, metric, ia), _samples(b, metric, ib)
        shift = stats.rate_shift(va, vb, ca, cb)
        value_a = m[f"{name}_a"].to_numpy(dtype=float)
        value_b = m[f"{name}_b"].to_numpy(dtype=float)
        ratio = value_b / value_a
        # performance ratio (> 1 is better) and its interval, from the rate ratio of the samples
        perf = ratio if metric.higher_is_better else 1 / ratio
        low, high = shift.low, shift.high
        ci_low, ci_high = (low, high) if metric.higher_is_better else (1 / high, 1 / low)
        significant = shift.p_value < stats.ALPHA
        verdict = np.where(significant & (perf < 1 - threshold) & (high < 1), SLOWER,
                           np.where(significant & (perf > 1 + threshold) & (low > 1), FASTER, SAME))
        part = m[KEYS].copy()
        part.insert(0, "metric", name)
        part["a"], part["b"], part["ratio"] = value_a, value_b, ratio
        part["ci_low"], part["ci_high"], part["p_value"] = ci_low, ci_high, shift.p_value
        part["change"] = perf - 1
        part["n_a"], part["n_b"] = ca, cb
        part["verdict"] = verdict
        parts.append(part)
    if not parts:
        raise DataError(f"{a.source} and {b.source} have no completed key in common for "
                        f"{', '.join(metrics)}; compare runs of the same sweep")
    table = pd.concat(parts, ignore_index=True)
    order = {SLOWER: 0, SAME: 1, FASTER: 2}
    table = table.assign(_o=table["verdict"].map(order)).sort_values(["_o", "change"], kind="stable")
    table = table.drop(columns="_o").reset_index(drop=True)
    table.insert(len(KEYS) + 1, "key", key_texts(table))
    only_a, only_b = _one_sided(a, b), _one_sided(b, a)
    return Comparison(a, b, table, only_a, only_b, env_differences(a.environment, b.environment), threshold)


def _metric_rows(rows: Any, metric: Metric) -> Any:
    is_coll = rows["workload"] == "allreduce"
    sub = rows[is_coll if metric.allreduce else rows["workload"].isin(TRAINING)]
    return sub.assign(_i=sub.index.to_numpy())


def _samples(side: Side, metric: Metric, idx: Any) -> tuple[Any, Any]:
    import numpy as np

    if metric.samples not in side.samples:
        return np.full((len(idx), 1), np.nan), np.zeros(len(idx), dtype=np.int64)
    vals, counts = side.samples[metric.samples]
    return vals[idx], counts[idx]


def _one_sided(x: Side, y: Side) -> Any:
    """Keys completed in x and not in y, with y's status where y ran the key."""
    m = x.rows[KEYS].merge(y.rows[KEYS].assign(_in=1), on=KEYS, how="left")
    only = m[m["_in"].isna()][KEYS].reset_index(drop=True)
    if y.incomplete is not None and len(y.incomplete):
        only = only.merge(y.incomplete.drop_duplicates(KEYS), on=KEYS, how="left")
    else:
        only = only.assign(status=None)
    only["status"] = only["status"].fillna("absent")
    only["key"] = key_texts(only)
    return only


# --------------------------------------------------------------------------- text

def records(df: Any) -> list[dict[str, Any]]:
    """A DataFrame's rows as dicts, missing values as None: 5x quicker than to_dict("records")
    on pandas' string and nullable-integer columns."""
    cols = list(df.columns)
    arrays = [df[c].to_numpy(dtype=object, na_value=None) for c in cols]
    return [dict(zip(cols, values)) for values in zip(*arrays)]


def table_csv(table: Any) -> bytes:
    """The comparison table as CSV, with Arrow's C++ writer (pandas' is 10x slower)."""
    import io

    import pyarrow as pa
    import pyarrow.csv as pacsv

    buf = io.BytesIO()
    pacsv.write_csv(pa.Table.from_pandas(table, preserve_index=False), buf)
    return buf.getvalue()


def key_texts(df: Any) -> Any:
    """Each row's key in words, e.g. 'allreduce all_reduce 4M, 4x1, torchrun, default' or
    'synthetic weak, 2x1, srun, ib', as one vectorised string operation."""
    sizes = {int(v): format_size(int(v)) for v in df["size_bytes"].unique()}
    coll = df["workload"] == "allreduce"
    what = df["workload"].astype(str) + " " + df["collective"].astype(str).where(coll, "") \
        + df["size_bytes"].map(sizes).astype(str).radd(" ").where(coll, "") + df["scaling"].astype(str).where(~coll, "")
    return (what + ", " + df["nodes"].astype(str) + "x" + df["gpus_per_node"].astype(str) + ", "
            + df["launcher"].astype(str) + ", " + df["nccl_config"].astype(str)).astype(object)


def fmt_value(v: Any, spec: str = ".4g") -> str:
    """A number for a table: `spec` formatted, '-' where missing."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def fmt_ci(lo: float, hi: float) -> str:
    if lo is None or math.isnan(lo) or math.isnan(hi):
        return "no samples"
    return f"[{lo:.3f}, {hi:.3f}]"


def markdown(cmp: Comparison, title: str, include_same: bool = False) -> str:
    """The comparison as markdown: header, warnings, stragglers, then regressions,
    improvements and the count of unchanged keys (all keys when include_same)."""
    t = cmp.table
    lines = [f"# {title}", "",
             f"- A: `{cmp.a.label}` ({cmp.a.source})", f"- B: `{cmp.b.label}` ({cmp.b.source})",
             f"- threshold: {cmp.threshold:.1%}; statistics: {cmp.method}; α = {stats.ALPHA}",
             f"- compared: {len(t)} (metric, key) pairs; "
             + ", ".join(f"{v}: {n}" for v, n in cmp.counts().items()), ""]
    if cmp.env_diffs:
        lines += ["## Warning: the environments differ", ""] + [f"- {d}" for d in cmp.env_diffs] + [""]
    named = cmp.a.stragglers + cmp.b.stragglers
    if named:
        lines += ["## Stragglers", ""]
        lines += [f"- {side.label}: {s.line()}" for side in (cmp.a, cmp.b) for s in side.stragglers] + [""]
    for verdict, heading in ((SLOWER, "Slower (regressions)"), (FASTER, "Faster (improvements)")):
        sub = t[t["verdict"] == verdict]
        lines += [f"## {heading}: {len(sub)}", ""]
        if len(sub):
            lines += _md_table(sub) + [""]
    same = t[t["verdict"] == SAME]
    lines += [f"## No significant change: {len(same)}", ""]
    if include_same and len(same):
        lines += _md_table(same) + [""]
    for side, only in ((cmp.a, cmp.only_a), (cmp.b, cmp.only_b)):
        if len(only):
            lines += [f"## Only completed in {side.label}: {len(only)}", ""]
            lines += [f"- {r['key']} (other side: {r['status']})" for r in records(only.head(200))]
            if len(only) > 200:
                lines.append(f"- ... and {len(only) - 200} more")
            lines.append("")
    return "\n".join(lines)


def _md_table(t: Any) -> list[str]:
    out = ["| metric | key | A | B | B/A | 95% CI | p | verdict |", "|---|---|---:|---:|---:|---|---:|---|"]
    for r in records(t):
        out.append(f"| {r['metric']} | {r['key']} | {fmt_value(r['a'])} | {fmt_value(r['b'])} | "
                   f"{r['ratio']:.3f} | {fmt_ci(r['ci_low'], r['ci_high'])} | {fmt_value(r['p_value'])} | {r['verdict']} |")
    return out
