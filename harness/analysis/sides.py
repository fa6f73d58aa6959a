"""The sides a comparison judges: a run, a run's settings set, or a baseline drawn from the
history, loaded into a `Side`; and what a side is made of: its keys (the matrix points), the
metrics with their direction, the rows that are alike enough to compare, and the environment
that must agree. analysis/compare.py judges two sides; analysis/history.py builds a baseline
side from many runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD, TRAINING, UNITS, WORLD
from benchmarks.common import format_size
from benchmarks.results import open_regular
from harness.analysis import stats
from harness.collect.summary import SUMMARY_VERSION, run_facts, summary_version, to_frame, upgraded
from harness.errors import DataError, one_line
from harness.run.rundir import COMPLETED, RunDir, RunDirError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd
    import pyarrow as pa

    from harness.analysis.stats import Counts, Mask, Texts, Values
    from harness.evidence.stragglers import Straggler

KEYS = ["workload", "collective", "group", "scaling", "nodes", "gpus_per_node", "launcher", "nccl_config", "size_bytes"]
CONFIG = [k for k in KEYS if k not in ("collective", "group", "size_bytes")]  # a key without its message
CONFIG_KEYS = [k for k in KEYS if k != "size_bytes"]  # a key without its message size: a configuration
SAMPLE_JOIN = ["job", "workload", "scaling", "collective", "group", "size_bytes"]


@dataclass(frozen=True)
class Metric:
    name: str
    workloads: tuple[str, ...]  # the workloads whose rows have it
    higher_is_better: bool
    samples: str  # the samples.parquet metric behind it (always a time)
    label: str
    zero_for_one_rank: bool = False  # busbw: one rank moves nothing over a bus

    @property
    def allreduce(self) -> bool:
        """A collective metric, else a training one."""
        return self.workloads == (COLLECTIVE_WORKLOAD,)


_COLL, _IMAGES = (COLLECTIVE_WORKLOAD,), tuple(w for w in TRAINING if UNITS[w] == "images")
METRICS = {
    m.name: m
    for m in (
        Metric("busbw_gbps", _COLL, True, "time_us", "busbw GB/s", zero_for_one_rank=True),
        Metric("algbw_gbps", _COLL, True, "time_us", "algbw GB/s"),
        Metric("time_us", _COLL, False, "time_us", "time us"),
        Metric("images_per_s", _IMAGES, True, "step_time_ms", "images/s"),
        Metric("images_per_s_per_gpu", _IMAGES, True, "step_time_ms", "images/s per GPU"),
        Metric("tokens_per_s", ("transformer",), True, "step_time_ms", "tokens/s"),
        Metric("tokens_per_s_per_gpu", ("transformer",), True, "step_time_ms", "tokens/s per GPU"),
        Metric("step_time_ms", TRAINING, False, "step_time_ms", "step ms"),
    )
}
# busbw for the collectives, and each training workload's throughput
DEFAULT_METRICS = ("busbw_gbps", "images_per_s", "tokens_per_s")
LIKE = ["params", "settings", "settings_hash"]  # what makes two rows comparable
REQUIRED = ["job", "status", *KEYS, *METRICS, "hosts", "reason", "repeat", "n_samples", *LIKE]
# What each side's jobs ran over (docs/concepts/transport.md): a verdict between two transports says so.
SEEN = ["net", "net_devices"]
# What makes two runs incomparable by accident (pyperf checks its metadata the same way).
CHECKED_ENV = {
    "bench": "bench",  # docs/concepts/provenance.md: a change in bench can look like one in the cluster
    "bench_version": "bench that measured",
    "gpu": "GPU model",
    "nccl": "NCCL",
    "torch": "torch",
    "cuda": "CUDA",
    "gpu_driver": "GPU driver",
    "backend": "backend",
    "largest_job_nodes": "nodes in the largest job",
}


@dataclass(frozen=True)
class Entry:
    """A run of the history database (analysis/history.py), as a baseline drawn from it names it."""

    id: int
    cluster: str
    label: str | None
    path: str
    sweep: str | None
    created: str
    added: str
    rows: int
    keys: int
    failed: int

    @property
    def name(self) -> str:
        return f"run {self.id}" + (f" ({self.label})" if self.label else "")


@dataclass
class Side:
    """One side of a comparison.

    rows      one row per completed key: KEYS, the metrics (the median over the side's runs of
              the key; a baseline drawn for some metrics holds those alone), hosts,
              parameters, `runs`, the number of runs behind the row, and `failed_runs`, how
              many other runs of the key did not complete (bench sweep --repeat), with the
              first one's status and "job STATUS: reason" (`failed_status`, `failed_note`)
    samples   samples metric -> (padded per-iteration values, counts), row-aligned, pooled
              over the runs; only finite, positive values
    runs      metric -> (padded per-run values, counts), row-aligned, newest first; only
              finite, positive values
    others    keys that no run of the side completed: KEYS, status, reason, job
    """

    label: str
    source: str
    rows: pd.DataFrame
    samples: dict[str, tuple[Values, Counts]]
    runs: dict[str, tuple[Values, Counts]] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    stragglers: list[Straggler] = field(default_factory=list)
    others: pd.DataFrame | None = None
    entries: list[Entry] = field(default_factory=list)  # the history runs a baseline was drawn from
    run_spread: float = math.nan  # a run's within-run spread (stats.within_spread); NaN for a baseline

    def spread(self) -> pd.DataFrame:
        """The rows with the p10 and p90 of each sampled time (time_us, step_time_ms) over the
        side's pooled samples, as `<time>_p10` and `<time>_p90` (NaN where a row has none):
        the spread the comparison plots draw."""
        import numpy as np

        rows = self.rows.copy()
        for name, (values, counts) in self.samples.items():
            have = counts > 0
            for q in (10, 90):
                out = np.full(len(counts), np.nan)
                if have.any():
                    out[have] = np.nanpercentile(values[have], q, axis=1)
                rows[f"{name}_p{q}"] = out
        return rows

    def where(self, axis: str, value: str, relabel: str) -> Side:
        """The side's rows whose `axis` is `value`, with that axis renamed to `relabel`, so
        that two settings sets (or launchers) join as one key."""
        import numpy as np

        keep = (self.rows[axis] == value).to_numpy(dtype=bool)
        idx = np.flatnonzero(keep)
        rows = self.rows[keep].reset_index(drop=True).assign(**{axis: relabel})
        others = self.others
        if others is not None:
            others = others[others[axis] == value].reset_index(drop=True).assign(**{axis: relabel})
        return replace(
            self,
            label=f"{self.label}:{value}",
            rows=rows,
            samples={k: (v[idx], c[idx]) for k, (v, c) in self.samples.items()},
            runs={k: (v[idx], c[idx]) for k, (v, c) in self.runs.items()},
            others=others,
        )


# --------------------------------------------------------------------------- loading


def check_summary(table: pa.Table, where: str) -> None:
    version = summary_version(table)
    if version != SUMMARY_VERSION:
        raise DataError(
            f"{where}: summary schema_version {version} is older than this bench's {SUMMARY_VERSION}; "
            f"re-collect it with `bench collect`"
            if version < SUMMARY_VERSION
            else f"{where}: summary schema_version {version} is newer than this bench's {SUMMARY_VERSION}; "
            f"upgrade bench"
        )
    missing = [c for c in REQUIRED if c not in table.column_names]
    if missing:
        raise DataError(
            f"{where}: summary lacks column{'s' if len(missing) > 1 else ''} {', '.join(missing)}; "
            f"re-collect it with `bench collect`"
        )


def check_samples(samples: pa.Table, where: str) -> None:
    """collect never writes a null sample: one means the table was damaged after it."""
    import pyarrow.compute as pc

    values = samples.column("values")
    if values.null_count or pc.sum(pc.is_null(pc.list_flatten(values))).as_py():
        raise DataError(f"{where}: the samples hold nulls, which bench never writes: the table is damaged")


def read_tables(run: RunDir) -> tuple[pa.Table, pa.Table | None]:
    """(summary, samples) Arrow tables of a run, checked; DataError if unusable."""
    import pyarrow as pa

    try:
        run.read_plan()
    except RunDirError as exc:
        raise DataError(str(exc)) from None
    files = run.summary_set()
    if not files["summary_parquet"].exists():
        raise DataError(f"{run.path}: no summary.parquet; run `bench collect {run.path}` first")
    try:
        summary = _parquet(files["summary_parquet"])
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{run.summary_parquet}: unreadable ({one_line(str(exc))})") from None
    summary = upgraded(summary)
    check_summary(summary, str(run.summary_parquet))
    samples = None
    if files["samples_parquet"].exists():
        try:
            samples = upgraded(_parquet(files["samples_parquet"]))
        except (OSError, pa.ArrowException) as exc:
            raise DataError(f"{run.samples_parquet}: unreadable ({one_line(str(exc))})") from None
        check_samples(samples, str(run.samples_parquet))
    return summary, samples


def side_from_tables(
    summary: pa.Table,
    samples: pa.Table | None,
    label: str,
    source: str,
    environment: dict[str, Any] | None = None,
    found: list[Straggler] | None = None,
) -> Side:
    """A Side from a summary and samples (Arrow tables): one row per completed key, the
    replicates of a key (bench sweep --repeat) pooled into it."""
    import numpy as np

    df = key_frame(summary)
    done = df[(df["status"] == COMPLETED).to_numpy(dtype=bool, na_value=False)].reset_index(drop=True)
    codes = done.groupby(KEYS, sort=False, dropna=False).ngroup().to_numpy() if len(done) else np.zeros(0, int)
    groups = int(codes.max()) + 1 if len(codes) else 0
    first = np.unique(codes, return_index=True)[1]
    pooled: dict[str, tuple[Values, Counts]] = {}
    spread = math.nan
    if samples is not None and samples.num_rows and len(done):
        by_row = samples_by_row(samples, done)
        spread = stats.within_spread(by_row.values())[0]  # replicate by replicate, before they are pooled
        for metric_name, (vals, counts) in by_row.items():
            mask = (np.arange(vals.shape[1])[None, :] < counts[:, None]) & usable(vals)
            pooled[metric_name] = stats.pool(codes, vals, mask, groups)
    figures = {name: done[name].to_numpy(dtype=float, na_value=np.nan) for name in METRICS}
    others = df[(df["status"] != COMPLETED).to_numpy(dtype=bool, na_value=True)]
    rows = done.iloc[first].reset_index(drop=True)
    side = grouped_side(rows, codes, figures, pooled, others, label, source, environment, found)
    side.run_spread = spread
    return side


def grouped_side(
    rows: pd.DataFrame,
    codes: npt.NDArray[np.intp],
    figures: dict[str, Values],
    pooled: dict[str, tuple[Values, Counts]],
    others: pd.DataFrame,
    label: str,
    source: str,
    environment: dict[str, Any] | None = None,
    found: list[Straggler] | None = None,
    order: npt.NDArray[np.intp] | None = None,
) -> Side:
    """The Side of completed rows grouped by key: `rows` the first row of each key, in the
    order of `codes` (each completed row's key); `figures` each metric's value per completed
    row, for every metric the Side holds (a metric not among them is not in its rows either);
    `pooled` the samples pooled by key; `others` the rows that did not complete; `order` the
    completed rows by key (stats.pool_columns), where known."""
    import numpy as np

    groups = len(rows)
    runs = stats.pool_columns(codes, figures, groups, order)
    rows = rows.drop(columns=[name for name in METRICS if name not in runs and name in rows])
    for name in runs:
        rows[name] = stats.row_medians(runs[name][0])
    rows["runs"] = np.bincount(codes, minlength=groups) if groups else np.zeros(0, int)
    others = others[KEYS + ["status", "reason", "job"]]
    rows["failed_runs"], rows["failed_status"], rows["failed_note"] = _failed_replicates(rows, others)
    others = others.drop_duplicates(KEYS)
    if len(others) and len(rows):
        others = others.merge(rows[KEYS].assign(_done=1), on=KEYS, how="left")
        others = others[others["_done"].isna()].drop(columns="_done")
    return Side(
        label=label,
        source=source,
        rows=rows,
        samples=pooled,
        runs=runs,
        environment=environment or {},
        stragglers=found or [],
        others=others.reset_index(drop=True),
    )


def _failed_replicates(rows: pd.DataFrame, failed: pd.DataFrame) -> tuple[npt.NDArray[np.int64], Texts, Texts]:
    """Per completed key: how many of its runs failed (a row of the key that did not complete,
    or its job's workload that failed before it measured anything), the first one's status,
    and "job STATUS: reason"."""
    import numpy as np
    import pandas as pd

    count = np.zeros(len(rows), dtype=np.int64)
    status, note = np.full(len(rows), "", dtype=object), np.full(len(rows), "", dtype=object)
    if not len(rows) or not len(failed):
        return count, status, note
    keyed = rows[KEYS].reset_index(names="_row")
    whole = failed[(failed["collective"] == "") & (failed["size_bytes"] == 0)]
    hits = pd.concat(
        [keyed.merge(failed, on=KEYS), keyed.merge(whole[[*CONFIG, "status", "reason", "job"]], on=CONFIG)]
    ).drop_duplicates(["_row", "job"])
    for row, runs in hits.groupby("_row", sort=False):
        first = runs.iloc[0]
        reason = first["reason"] if isinstance(first["reason"], str) and first["reason"] else ""
        count[row] = len(runs)
        status[row] = first["status"]
        note[row] = f"{first['job']} {first['status']}" + (f": {reason}" if reason else "")
    return count, status, note


def key_frame(summary: pa.Table) -> pd.DataFrame:
    """A summary Arrow table as a DataFrame of the columns comparisons read, its keys made
    joinable: no collective, group or scaling is "", no size is 0 (nulls never match in a join)."""
    df = to_frame(summary.select([c for c in (*REQUIRED, *SEEN) if c in summary.column_names]))
    df["collective"] = df["collective"].fillna("")
    df["group"] = df["group"].fillna("")
    df["scaling"] = df["scaling"].fillna("")
    df["size_bytes"] = df["size_bytes"].fillna(0)
    return df


def usable(values: Values) -> Mask:
    """Where a value can be judged: finite and positive (a time, a rate)."""
    import numpy as np

    with np.errstate(invalid="ignore"):
        return np.isfinite(values) & (values > 0)


def samples_by_row(samples: pa.Table, rows: pd.DataFrame) -> dict[str, tuple[Values, Counts]]:
    """Each samples metric as (padded values, counts) aligned with `rows` (SAMPLE_JOIN columns)."""
    import numpy as np
    import pyarrow as pa

    sdf = samples.drop(["values"]).to_pandas()
    sdf["collective"] = sdf["collective"].fillna("")
    sdf["group"] = sdf["group"].fillna("")
    sdf["scaling"] = sdf["scaling"].fillna("")
    sdf["_pos"] = np.arange(len(sdf))
    values = samples.column("values")
    out = {}
    for metric_name, part in sdf.groupby("metric", sort=False):
        # in step, as collect writes a run's rows and its samples of a metric: their order is the join
        matched = (
            part
            if _in_step(rows, part)
            else rows[SAMPLE_JOIN].merge(part.drop(columns="metric"), on=SAMPLE_JOIN, how="left")
        )
        pos = matched["_pos"].to_numpy(dtype=float)
        have = ~np.isnan(pos)
        whole = len(pos) == len(values) and bool((pos == np.arange(len(pos))).all())  # every sample, in order
        taken = values if whole else values.take(pa.array(np.where(have, pos, 0).astype(np.int64)))
        vals, counts = stats.padded(taken)
        out[str(metric_name)] = (vals, np.where(have, counts, 0))
    return out


def _in_step(rows: pd.DataFrame, part: pd.DataFrame) -> bool:
    """Whether the samples `part` are `rows`' own, row by row: then the join is their order, and
    no merge is needed. Compared as Arrow arrays, a missing value equal to a missing one, with no
    Python object made for each; columns that cannot be compared so are not in step, and the
    merge joins them."""
    import pyarrow as pa

    if len(rows) != len(part):
        return False

    def whole(column: pd.Series) -> pa.Array:  # pandas' own str columns give Arrow in chunks
        array = pa.array(column, from_pandas=True)
        return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array

    try:
        for c in SAMPLE_JOIN:
            mine, theirs = whole(rows[c]), whole(part[c])
            if not mine.equals(theirs if theirs.type == mine.type else theirs.cast(mine.type)):
                return False
    except pa.ArrowException:
        return False
    return True


def _parquet(path: Path) -> pa.Table:
    """A summary file of a run, read only if it is a regular file (a FIFO is not waited on)."""
    import pyarrow.parquet as pq

    with open_regular(path) as f:  # ParquetFile: read_table would import pyarrow.dataset, a slow import
        return pq.ParquetFile(f).read()


@dataclass
class RunTables:
    """A run's tables read and checked, what collect recorded beside them known; its Side is
    still to be made (`side`), so that what needs only the environment can start first."""

    run: RunDir
    summary: pa.Table
    samples: pa.Table | None
    environment: dict[str, Any]
    found: list[Straggler]

    def side(self, label: str | None = None) -> Side:
        run = self.run
        return side_from_tables(
            self.summary, self.samples, label or run.path.name, str(run.path), self.environment, self.found
        )


def read_run(path: str | Path) -> RunTables:
    run = RunDir(path)
    summary, samples = read_tables(run)
    return RunTables(run, summary, samples, *run_facts(summary.schema))


def recorded_environment(run: RunDir) -> dict[str, Any] | None:
    """The environment collect recorded with a run (run_facts), read from its summary's footer
    alone, for what needs it before the tables are read; None where it cannot be read, and
    read_tables says why."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with open_regular(run.summary_parquet) as f:
            return run_facts(pq.ParquetFile(f).schema_arrow)[0]
    except (OSError, ValueError, pa.ArrowException):
        return None


def load_run(path: str | Path, label: str | None = None) -> Side:
    return read_run(path).side(label)


def measurement_rules(environment: dict[str, Any]) -> list[str]:
    """The measurement rules a side's runs were measured under (docs/concepts/provenance.md); 1 for a
    summary made before they were recorded."""
    return [str(r) for r in environment.get("measurement_rules") or ["1"]]


def check_rules(a: Side, b: Side, allowed: bool) -> str | None:
    """A DataError when A and B were measured under different measurement rules, unless
    `allowed`; then the line that says they were, else None."""
    ra, rb = measurement_rules(a.environment), measurement_rules(b.environment)
    if len(set(ra) | set(rb)) < 2:
        return None
    said = f"measurement rules: {', '.join(ra)} vs {', '.join(rb)}"
    if not allowed:
        raise DataError(
            f"{a.source} was measured under bench's measurement rules {', '.join(ra)} and {b.source} under "
            f"{', '.join(rb)} (docs/concepts/provenance.md says what changed): a difference may be bench's, not the "
            "cluster's; judge anyway with --allow-rules-change"
        )
    return f"{said}, judged anyway (--allow-rules-change)"


def env_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    diffs = []
    for key, name in CHECKED_ENV.items():
        va, vb = a.get(key) or [], b.get(key) or []
        if va and vb and va != vb:
            diffs.append(f"{name}: {', '.join(va)} vs {', '.join(vb)}")
    return diffs


# --------------------------------------------------------------------------- text


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """A DataFrame's rows as dicts, missing values as None: 5x quicker than to_dict("records")
    on pandas' string and nullable-integer columns."""
    cols = list(df.columns)
    # pandas takes None as na_value; pandas-stubs leaves it out of the annotation
    arrays = [df[c].to_numpy(dtype=object, na_value=None) for c in cols]  # type: ignore[call-overload]
    return [dict(zip(cols, values)) for values in zip(*arrays)]


def measured(df: pd.DataFrame) -> pd.Series:
    """What each collective row measured, in words: its collective, and its group where that is
    not the world ('all_reduce', 'all_reduce intra'; docs/reference/sources.md, "Groups")."""
    names = df["collective"].astype(str)
    if "group" not in df.columns:
        return names
    group = df["group"].astype(str)
    return names + group.radd(" ").where(~group.isin(["", WORLD, "<NA>", "None", "nan"]), "")


def key_texts(df: pd.DataFrame, sizes: bool = True) -> pd.Series:
    """Each row's key in words, e.g. 'allreduce all_reduce 4M, 4x1, torchrun, default',
    'allreduce all_reduce intra 4M, 2x4, torchrun, default' (a group other than the world's is
    named) or 'synthetic weak, 2x1, srun, ib'; without `sizes`, its configuration ('allreduce
    all_reduce, 4x1, torchrun, default'). Worded once per configuration and once per size, then
    joined per row: a run has thousands of configurations and a hundred times as many keys."""
    import numpy as np
    import pandas as pd

    if not len(df):
        return pd.Series([], index=df.index, dtype=object)
    config = df.groupby([k for k in CONFIG_KEYS if k in df.columns], sort=False, dropna=False).ngroup().to_numpy()
    one = df.iloc[np.unique(config, return_index=True)[1]]
    coll = one["workload"] == COLLECTIVE_WORKLOAD
    what = (
        one["workload"].astype(str) + " " + measured(one).where(coll, "") + one["scaling"].astype(str).where(~coll, "")
    )
    where = (
        ", "
        + one["nodes"].astype(str)
        + "x"
        + one["gpus_per_node"].astype(str)
        + ", "
        + one["launcher"].astype(str)
        + ", "
        + one["nccl_config"].astype(str)
    )
    if not sizes:
        return pd.Series((what + where).to_numpy(dtype=object)[config], index=df.index, dtype=object)
    codes, seen = pd.factorize(df["size_bytes"])
    size = np.array([f" {format_size(int(v))}" for v in seen], dtype=object)[codes]
    size[(df["workload"] != COLLECTIVE_WORKLOAD).to_numpy(dtype=bool)] = ""
    text = what.to_numpy(dtype=object)[config] + size + where.to_numpy(dtype=object)[config]
    return pd.Series(text, index=df.index, dtype=object)


def unfinished_beyond(b: Side, ra: pd.DataFrame, metric: Metric) -> pd.DataFrame:
    """The keys of `metric` B planned and did not complete that A has no row of: failed all the
    same, never dropped because the baseline lacks them (a smaller sweep its newest night). A
    row that stands for a whole job (no collective, no size) is A's already where A has a key
    of its configuration (compare._status_of)."""
    others = b.others
    if others is None or not len(others):
        return ra[KEYS].iloc[:0]
    mine = others[others["workload"].isin(metric.workloads).to_numpy(dtype=bool)][KEYS]
    if not len(mine) or not len(ra):
        return mine.drop_duplicates().reset_index(drop=True)
    whole = ((mine["collective"] == "") & (mine["size_bytes"] == 0)).to_numpy(dtype=bool)
    known = mine.merge(ra[KEYS].drop_duplicates().assign(_in=1), on=KEYS, how="left")["_in"].notna().to_numpy()
    in_config = mine.merge(ra[CONFIG].drop_duplicates().assign(_in=1), on=CONFIG, how="left")["_in"].notna().to_numpy()
    return mine[~known & ~(whole & in_config)].drop_duplicates().reset_index(drop=True)
