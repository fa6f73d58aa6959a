"""Collection: the result JSONs of a run directory become one summary table.

One row per (job, workload, scaling mode, collective, message size). Rows of jobs or
workloads that did not produce a result are kept, with their status, the job's reason and
the tail of its log, and no figures, so a failure is visible in the table rather than
silently missing. A corrupt or partial result
file is skipped with a warning naming it.

Scaling arithmetic, per configuration (workload, scaling mode, launcher, NCCL set, backend,
device, model), against the row with the smallest world size:
    speedup    = images_per_s / images_per_s at the smallest world size (tokens_per_s for the
                 transformer)
    efficiency = speedup / (world size / smallest world size)
For weak scaling the efficiency equals per-GPU throughput over the baseline's per-GPU
throughput; for strong scaling it is speedup over ideal speedup.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import itertools
import json
import os
import secrets
import stat
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import BREAKDOWN, COLLECTIVE_WORKLOAD, COLLECTIVES, GROUPS, UNITS, WORLD
from benchmarks.common import redacted
from benchmarks.results import ResultError, load_result, open_regular
from harness import inside, provenance, stragglers, telemetry, transport
from harness.cluster import Hardware
from harness.errors import RunDirError, one_line
from harness.fields import FieldError
from harness.rundir import COMPLETED, RunDir
from harness.stragglers import Straggler

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from harness.plan import Job, WorkloadRun

# The transformer's figures (benchmarks/transformer.py; docs/reference.md, "FLOPs per token and
# MFU"): throughput in tokens, the model's size and FLOPs, and MFU against a stated peak
TRANSFORMER_COLUMNS = (
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "n_params",
    "flops_per_token",
    "achieved_tflops_per_gpu",
    "mfu",
    "peak_tflops_per_gpu",
)
# The columns of summary.csv, in order. Units are in the names.
COLUMNS = [
    "job",
    "config_hash",
    "workload",
    "scaling",
    "collective",
    "group",
    "nodes",
    "gpus_per_node",
    "world_size",
    "launcher",
    "backend",
    "device",
    "nccl_config",
    "status",
    "size_bytes",
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
    "busbw_peak_gbps",
    "busbw_pct_peak",
    "wrong",
    "time_us_p10",
    "time_us_median",
    "time_us_p90",
    "oop_time_us",
    "oop_algbw_gbps",
    "oop_busbw_gbps",
    "oop_wrong",
    "images_per_s",
    "images_per_s_per_gpu",
    *TRANSFORMER_COLUMNS,
    "step_time_ms",
    "step_time_ms_p10",
    "step_time_ms_p90",
    "compute_images_per_s",
    "data_wait_fraction",
    *BREAKDOWN,
    "batch_size",
    "global_batch",
    "model",
    "dtype",
    "efficiency",
    "speedup",
    "hosts",
    "net",
    "net_devices",
    "gdr",
    "intra_transport",
    "nccl_channels",
    "nccl_warnings",
    "nic_bytes_ratio",
    "nic_check",
    "reason",
    "log_tail",
    "repeat",
    "params",
    "settings",
    "settings_hash",
    "n_samples",
]
# The summary's own layout, stored in summary.parquet's metadata. 1: no marker (summaries written
# before the reason and log_tail columns); 2: with them; 3: the run's environment and stragglers
# in the metadata too (ENVIRONMENT_KEY, STRAGGLERS_KEY), so comparisons need not reopen results;
# 4: what makes two rows comparable (params, settings, settings_hash), the replicate (repeat)
# and the count of usable samples behind each row (n_samples).
# The transport columns (transport.COLUMNS), the peak columns (PEAK_COLUMNS), the NIC
# cross-check (NIC_COLUMNS), the step's breakdown (catalog.BREAKDOWN), the group and the
# transformer's columns came later within 4: a summary without them reads as null there
# (upgraded, to_frame; the group as "world"), so histories of older runs stay usable.
SUMMARY_VERSION = 4
# busbw against what the profile says the links carry (docs/expected.md)
PEAK_COLUMNS = ("busbw_peak_gbps", "busbw_pct_peak")
# the collectives' bytes against the NIC counters (docs/telemetry.md): the worst node's ratio, and
# what was found, in words
NIC_COLUMNS = ("nic_bytes_ratio", "nic_check")
LATER_COLUMNS = (*transport.COLUMNS, *PEAK_COLUMNS, *NIC_COLUMNS, *BREAKDOWN, *TRANSFORMER_COLUMNS)
_VERSION_KEY = b"bench_summary_version"
ENVIRONMENT_KEY = b"bench_environment"
STRAGGLERS_KEY = b"bench_stragglers"
_ENV_FIELDS = ("nccl", "torch", "cuda", "gpu_driver", "backend", "python", "bench_version", "measurement_rules")
SCALING_KEYS = ["workload", "scaling", "launcher", "backend", "device", "nccl_config", "model", "repeat"]
MISSING = "MISSING"  # the job completed but its result file is absent or unusable

_ROW_FIELDS = (
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
    "time_us_p10",
    "time_us_median",
    "time_us_p90",
    "oop_time_us",
    "oop_algbw_gbps",
    "oop_busbw_gbps",
    "oop_wrong",
    "dtype",
)
_ROW_DEFAULTS = dict.fromkeys(_ROW_FIELDS)
_row_getter = itemgetter(*_ROW_FIELDS)
_TRAINING_FIELDS = (
    "images_per_s",
    "images_per_s_per_gpu",
    *TRANSFORMER_COLUMNS[:-2],  # mfu and its peak: set in _add_result
    "step_time_ms",
    "step_time_ms_p10",
    "step_time_ms_p90",
    "compute_images_per_s",
    "data_wait_fraction",
    *BREAKDOWN,
    "batch_size",
    "global_batch",
)


def _warn(message: str) -> None:
    print(f"bench: warning: {message}", file=sys.stderr)


SAMPLE_KEYS = ["job", "workload", "scaling", "collective", "group", "size_bytes", "metric"]
INT_COLUMNS = {
    "n_params",
    "flops_per_token",
    "nodes",
    "gpus_per_node",
    "world_size",
    "size_bytes",
    "wrong",
    "oop_wrong",
    "batch_size",
    "global_batch",
    "repeat",
    "n_samples",
    "nccl_channels",
    "nccl_warnings",
}
TEXT_COLUMNS = {
    "job",
    "breakdown_note",
    "config_hash",
    "workload",
    "scaling",
    "collective",
    "group",
    "launcher",
    "backend",
    "device",
    "nccl_config",
    "status",
    "model",
    "dtype",
    "hosts",
    "reason",
    "log_tail",
    "params",
    "settings",
    "settings_hash",
    "net",
    "net_devices",
    "gdr",
    "intra_transport",
    "nic_check",
}
# The workload parameters that decide what a figure measures: two rows are comparable only when
# these agree (and their settings sets hold the same variables). Iteration and step counts are
# left out: they change how many samples there are, not what each one measures.
TRAINING_PARAMS = (
    "model",
    "image_size",
    "amp",
    "channels_last",
    "compile",
    "bucket_cap_mb",
    "gradient_as_bucket_view",
    "static_graph",
)  # and the batch its scaling mode holds fixed
COMPARED_PARAMS = {
    COLLECTIVE_WORKLOAD: ("dtype", "op"),
    "synthetic": TRAINING_PARAMS,
    "real": TRAINING_PARAMS + ("workers", "data_set"),
    "transformer": ("model", "layers", "width", "heads", "seq_len", "vocab", "parallel", "amp"),
}


class _Environments:
    """What a run ran on, over its completed jobs: each field a sorted list of the distinct
    values seen, so a run that mixed versions shows it."""

    def __init__(self) -> None:
        self.seen: dict[str, set[str]] = {k: set() for k in ("gpu", *_ENV_FIELDS)}
        self.hosts: set[str] = set()
        self.largest = 0

    def add(self, env: dict[str, Any], nodes: int) -> None:
        for key in _ENV_FIELDS:
            if env.get(key) is not None:
                self.seen[key].add(str(env[key]))
        ranks = env.get("ranks")
        if env.get("device_type") == "cuda" and isinstance(ranks, list):
            self.seen["gpu"].update(str(r.get("device")) for r in ranks if isinstance(r, dict))
        self.hosts.update(env.get("hosts", []))
        self.largest = max(self.largest, nodes)

    def result(self, planned: Any = None) -> dict[str, Any]:
        """The fields seen, and what plan.json says of the bench that planned the run
        (docs/provenance.md): `bench` in words, its rules among the measurement rules; results
        and plans made before either was recorded count as rules 1."""
        measured = self.seen["measurement_rules"] or ({"1"} if self.largest else set())
        self.seen["measurement_rules"] = measured | {str(provenance.rules(planned))}
        out: dict[str, Any] = {k: sorted(v) for k, v in self.seen.items()}
        out["bench"] = [provenance.describe(planned)]
        out["hosts"] = sorted(self.hosts)
        out["largest_job_nodes"] = [str(self.largest)] if self.largest else []
        return out


class _Builder:
    """The summary built column by column: 100,000 rows cost a fraction of 100,000 dicts."""

    def __init__(self) -> None:
        self.columns: dict[str, list] = {c: [] for c in COLUMNS}
        self.keys: list[tuple] = []
        self.values: list[list[float]] = []
        self.sample_rows: list[int] = []  # the summary row of each entry of `values`

    def add(
        self,
        n: int,
        const: dict[str, Any],
        per_row: dict[str, list] | None = None,
        keys: Sequence[tuple] = (),
        values: Sequence[list[float]] = (),
    ) -> None:
        per_row = per_row or {}
        start = len(self.columns["job"])
        self.sample_rows.extend(range(start, start + len(values)))
        for name, column in self.columns.items():
            if name in per_row:
                column.extend(per_row[name])
            else:
                column.extend(repeat(const.get(name), n))
        self.keys.extend(keys)
        self.values.extend(values)

    def table(self, environment: dict[str, Any], stragglers: list[dict[str, Any]]) -> pa.Table:
        """The summary as a typed Arrow table, converted in C (None becomes null)."""
        import pyarrow as pa

        n_samples = self.columns["n_samples"]
        for row, count in zip(self.sample_rows, usable_counts(self.values)):
            n_samples[row] = count
        table = pa.table({name: pa.array(column, type=_arrow_type(name)) for name, column in self.columns.items()})
        return table.replace_schema_metadata(
            {
                _VERSION_KEY: str(SUMMARY_VERSION).encode(),
                ENVIRONMENT_KEY: json.dumps(environment).encode(),
                STRAGGLERS_KEY: json.dumps(stragglers).encode(),
            }
        )

    def samples(self) -> pa.Table:
        """One row per summary row with samples: its keys, the metric, the values as a list."""
        import pyarrow as pa

        columns: list[Sequence[Any]] = list(zip(*self.keys)) if self.keys else [[] for _ in SAMPLE_KEYS]
        return pa.table(
            {
                **{
                    k: pa.array(c, type=pa.int64() if k == "size_bytes" else pa.string())
                    for k, c in zip(SAMPLE_KEYS, columns)
                },
                "values": pa.array(self.values, type=pa.list_(pa.float64())),
            }
        )


def _arrow_type(name: str) -> pa.DataType:
    import pyarrow as pa

    return pa.string() if name in TEXT_COLUMNS else pa.int64() if name in INT_COLUMNS else pa.float64()


def upgraded(table: pa.Table) -> pa.Table:
    """A summary or samples table collected by an earlier bench of SUMMARY_VERSION, with the
    columns that came later within it, as collect writes them now: the `group` column
    (docs/reference.md, "Groups"), "world" on collective rows and null (summary) or "" (samples)
    on the others; and the summary's LATER_COLUMNS, null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    samples = "values" in table.column_names
    if "group" not in table.column_names and "workload" in table.column_names:
        coll = pc.equal(table.column("workload"), COLLECTIVE_WORKLOAD)
        column = pc.if_else(coll, pa.scalar(WORLD), pa.scalar("" if samples else None, pa.string()))
        at = table.column_names.index("collective") + 1 if "collective" in table.column_names else table.num_columns
        table = table.add_column(at, pa.field("group", pa.string()), column)
    for name in () if samples else LATER_COLUMNS:
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows, type=_arrow_type(name)))
    return table


def run_facts(table: pa.Table) -> tuple[dict[str, Any], list[Straggler]]:
    """(environment, stragglers) recorded in a summary's metadata by `collect`."""
    meta = table.schema.metadata or {}
    env = json.loads(meta.get(ENVIRONMENT_KEY, b"{}"))
    return env, [Straggler(**d) for d in json.loads(meta.get(STRAGGLERS_KEY, b"[]"))]


def summary_version(table: pa.Table) -> int:
    """The layout version of a summary Arrow table (1 when it carries no marker)."""
    raw = (table.schema.metadata or {}).get(_VERSION_KEY, b"1")
    try:
        return int(raw)
    except ValueError:
        return 0


def to_frame(table: pa.Table) -> pd.DataFrame:
    """A summary table as a DataFrame: text as pandas strings, counts as nullable integers."""
    import pandas as pd
    import pyarrow as pa

    mapping = {pa.string(): pd.StringDtype(), pa.int64(): pd.Int64Dtype()}
    return upgraded(table).to_pandas(types_mapper=mapping.get)


@contextlib.contextmanager
def _without_cycle_collection() -> Iterator[None]:
    """Building a summary makes millions of small lists, dicts and tuples, none in a cycle;
    Python's cycle collector would walk them over and over, a third of collect's time at 100,000
    rows (measured: 1.45 s against 0.93 s). Reference counting still frees everything."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def collect(run: RunDir, warn: Callable[[str], None] = _warn) -> tuple[pa.Table, pa.Table]:
    """(summary, samples), both Arrow tables, from the run directory's plan, job table and
    results (`to_frame` turns the summary into a DataFrame). The samples table has one row per
    summary row that has samples: its keys, the metric, and the per-iteration values (worst
    rank) as a list."""
    with _without_cycle_collection():
        return _collect(run, warn)


def _collect(run: RunDir, warn: Callable[[str], None]) -> tuple[pa.Table, pa.Table]:
    plan = run.read_plan()
    jobs = run.jobs(plan)
    table = run.read_table(jobs)
    hardware = _hardware(plan.get("cluster"), warn)
    out = _Builder()
    envs = _Environments()
    slow: list[Straggler] = []
    for job in jobs:
        rec = table[job.name]
        base = {
            "job": job.name,
            "config_hash": job.config_hash,
            "nodes": job.nodes,
            "gpus_per_node": job.gpus_per_node,
            "world_size": job.world_size,
            "launcher": job.launcher,
            "nccl_config": job.nccl_config,
            "repeat": job.repeat,
            **settings_columns(job.nccl_env),
            # the stated hardware, which gives each collective row's peak by its group and
            # collective (harness/peak.py); not a column
            "_hardware": hardware,
            "_peak_tflops": hardware.peak_tflops_per_gpu if hardware else None,
        }
        tele = (
            telemetry.read(run.job_dir(job), warn)
            if any(wr.workload == COLLECTIVE_WORKLOAD for wr in job.runs)
            else None
        )
        for wr in job.runs:
            status = rec.runs.get(wr.key, rec.state)
            head = {**base, "workload": wr.workload, "scaling": wr.scaling, "status": status}
            if status != COMPLETED:  # why, where the summary is all a reader opens
                head.update(reason=rec.reason, log_tail=rec.log_tail)
            path = run.path / job.result_path(wr)
            result = None
            if path.exists():
                try:
                    result = load_result(path)
                    problem = foreign(result, job, wr)
                    if problem:
                        warn(f"skipping {path}: {problem}")
                        result = None
                except ResultError as exc:
                    warn(f"skipping {exc}")
            if result is None:
                out.add(1, {**head, "status": MISSING if status == COMPLETED else status})
                continue
            try:
                environment = result["environment"]
                hosts = environment["hosts"]
                if not (isinstance(hosts, list) and all(isinstance(h, str) for h in hosts)):
                    raise TypeError(f"environment.hosts is {hosts!r}, not a list of host names")
                head.update(backend=str(result["backend"]), device=str(result["device"]), hosts=",".join(hosts))
                head["params"] = compared_params(wr.workload, result)
                ranks = transport.rank_facts(result, run.path, warn)
                head.update(transport.columns(ranks))
                why = job.expect and transport.mismatch(
                    job.nccl_config, job.expect, ranks, job.nodes, job.gpus_per_node
                )
                if wr.workload == COLLECTIVE_WORKLOAD and tele is not None:
                    nic, disagrees = telemetry.nic_columns(result, wr.key, tele)
                    head.update(nic)
                    why = why or disagrees
                if status == COMPLETED and why:  # measured, but not over what the set expects
                    head.update(status=transport.TRANSPORT_MISMATCH, reason=why)
                _add_result(out, head, result)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
                warn(f"skipping {path}: incomplete result ({type(exc).__name__}: {exc})")
                out.add(1, {**head, "status": MISSING})
                continue
            if status == COMPLETED:
                envs.add(environment, job.nodes)
                ranks_file = result.get("per_rank_file")
                if (
                    wr.workload == COLLECTIVE_WORKLOAD
                    and isinstance(ranks_file, str)
                    and ranks_file
                    and "/" not in ranks_file
                ):
                    slow += stragglers.judge_file(job.name, path.parent / ranks_file, warn)
    add_scaling(out.columns)
    slow.sort(key=lambda s: -s.slower)
    return out.table(envs.result(plan.get("bench")), [asdict(s) for s in slow]), out.samples()


def _hardware(cluster: Any, warn: Callable[[str], None]) -> Hardware | None:
    """The link speeds the run's cluster profile states (plan.json keeps the profile), or None."""
    stated = cluster.get("hardware") if isinstance(cluster, dict) else None
    if stated is None:
        return None
    try:
        return Hardware(**stated)
    except (TypeError, FieldError) as exc:
        warn(f"plan.json: cluster hardware {stated!r} is not usable ({exc}); busbw is not shown as % of peak")
        return None


def foreign(result: dict[str, Any], job: Job, wr: WorkloadRun) -> str | None:
    """Why a result does not belong where it sits (another job's file copied in, another
    workload's file renamed), or None. Every result records the --json path it was written to,
    relative to the run directory, which names its job and workload."""
    if result.get("workload") != wr.workload:
        return f"its workload is {result.get('workload')!r}, not {wr.workload!r}"
    if wr.scaling and result.get("scaling") != wr.scaling:
        return f"its scaling is {result.get('scaling')!r}, not {wr.scaling!r}"
    if result.get("world_size") != job.world_size:
        return f"its world size is {result.get('world_size')!r}, but job {job.name} has {job.world_size} ranks"
    argv = result.get("argv")
    written = argv[argv.index("--json") + 1] if isinstance(argv, list) and "--json" in argv[:-1] else None
    if written != job.result_path(wr):
        return f"it was written as {written!r}, not as {job.result_path(wr)!r} of job {job.name}"
    return None


# Bounds no real run reaches, past which a figure is damage, not a measurement: a trillion
# images or tokens a second (an H100 at its 989 TFLOP/s peak makes about 1.6e11 tokens/s of a
# model of a thousand parameters, at 6 FLOPs per parameter and token), or a step of a day.
MAX_RATE = 1e12
MAX_STEP_MS = 86_400_000.0


def _add_result(out: _Builder, head: dict[str, Any], result: dict[str, Any]) -> None:
    """Add one result's rows and sample lists; raises before adding anything if it is incomplete."""
    job, workload, scaling = head["job"], head["workload"], head["scaling"]
    if workload == COLLECTIVE_WORKLOAD:
        rows = result["rows"]
        # Without oop_ columns: run with --no-out-of-place, or a collective with no in-place form
        # (all_to_all, alltoallv, sendrecv) beside others that have one.
        if not rows:
            raise ValueError("no rows")
        rows = [r if all(f in r for f in _ROW_FIELDS) else {**_ROW_DEFAULTS, **r} for r in rows]
        per_row = dict(zip(_ROW_FIELDS, map(list, zip(*map(_row_getter, rows)))))
        per_row["collective"] = [r["collective"] for r in rows]
        per_row["group"] = [r.get("group", WORLD) for r in rows]  # results before groups: the world's
        # names the catalog knows, never free text: a 30,000-character group made `bench plot`
        # take 3.7 GB
        if not set(per_row["collective"]) <= set(COLLECTIVES) or not set(per_row["group"]) <= set(GROUPS):
            raise ValueError("a collective or group the catalog does not have")
        per_row["size_bytes"] = [int(r["size_bytes"]) for r in rows]
        keys = [
            (job, workload, scaling, c, g, size, "time_us")
            for c, g, size in zip(per_row["collective"], per_row["group"], per_row["size_bytes"])
        ]
        samples = _checked_samples([r["samples_us"] for r in rows])
        hw: Hardware | None = head["_hardware"]
        peaks = (
            [
                hw.peak_busbw_gbps(head["nodes"], head["gpus_per_node"], g, c)
                for g, c in zip(per_row["group"], per_row["collective"])
            ]
            if hw
            else []
        )
        if any(peaks):
            per_row["busbw_peak_gbps"] = peaks
            per_row["busbw_pct_peak"] = [
                None if b is None or not p else 100.0 * b / p for b, p in zip(per_row["busbw_gbps"], peaks)
            ]
        out.add(len(rows), head, per_row, keys, samples)
    else:
        rate = f"{UNITS[workload]}_per_s"
        for field, most in ((rate, MAX_RATE), (f"{rate}_per_gpu", MAX_RATE), ("step_time_ms", MAX_STEP_MS)):
            value = float(result[field])
            if not 0 < value <= most:  # nan fails too
                raise ValueError(f"{field} is {result[field]}, outside (0, {most:g}]")
        samples = _checked_samples([result["samples"]["step_time_ms"]])
        row = {**head, "model": result["params"]["model"], **{f: result.get(f) for f in _TRAINING_FIELDS}}
        if workload == "transformer":
            row.update(_mfu(result, head["_peak_tflops"]))
        out.add(1, row, keys=[(job, workload, scaling, "", "", 0, "step_time_ms")], values=samples)


# What a sample may be in a result file: a number, or null where it was not finite (json_safe).
_SAMPLE_TYPES = frozenset({float, int, type(None)})


def _mfu(result: dict[str, Any], stated: float | None) -> dict[str, float | None]:
    """MFU and the peak it is against: the run's own --peak-tflops where it was given one, else
    the cluster profile's hardware figure, else none (never a guessed peak)."""
    peak = result["params"].get("peak_tflops") or stated
    achieved = float(result["achieved_tflops_per_gpu"])
    share = achieved / peak if peak else None
    # above 1 no device reaches: the stated peak is wrong, and no MFU is recorded against it
    return {"mfu": share if share is not None and share <= 1 else None, "peak_tflops_per_gpu": peak or None}


def _checked_samples(lists: list[Any]) -> list[list[float]]:
    """The sample lists of a result, refused (ValueError, the result is left out) unless each is
    a list of numbers: a string or a boolean among them would reach the samples table."""
    if not all(type(v) is list for v in lists):
        raise ValueError("samples are not lists")
    if not set(map(type, itertools.chain.from_iterable(lists))) <= _SAMPLE_TYPES:
        raise ValueError("samples are not all numbers")
    return lists


def usable_counts(lists: list[list[float]]) -> list[int]:
    """How many of each list's samples a test can use: finite, positive times. One pass over
    all of them (the lists are already checked to hold numbers or None, which counts as NaN)."""
    import numpy as np

    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    flat = np.array(list(itertools.chain.from_iterable(lists)), dtype=float)
    with np.errstate(invalid="ignore"):
        usable = np.concatenate([[0], np.cumsum((flat > 0) & np.isfinite(flat))])
    ends = np.cumsum(lengths)
    return (usable[ends] - usable[ends - lengths]).tolist()


def compared_params(workload: str, result: dict[str, Any]) -> str:
    """COMPARED_PARAMS of a result as canonical JSON (sorted keys), taken from what the workload
    recorded it ran with (amp "auto" is recorded resolved, as bf16 or off)."""
    params = result["params"]
    if workload == COLLECTIVE_WORKLOAD:
        values = {"dtype": params["dtype"], "op": params["op"]}
    else:
        values = {k: params[k] for k in COMPARED_PARAMS[workload] if k in params}
        # the batch the scaling mode holds fixed: per GPU for weak scaling, over all GPUs for strong
        fixed = "global_batch" if result.get("scaling") == "strong" else "batch_size"
        values[fixed] = result[fixed]
        if workload == "real":
            data = result["data"]
            values["workers"] = data["workers"]
            values["data_set"] = (
                f"generated: {data['images']} images in {data['classes']} classes"
                if data.get("generated")
                else str(data["path"])
            )
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


def settings_columns(nccl_env: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """A settings set by content: its variables as text (secret-looking values redacted) and a
    hash of the real values, so that two sets of one name but other contents never compare as one."""
    blob = json.dumps(sorted(map(list, nccl_env)), separators=(",", ":")).encode()
    return {
        "settings": " ".join(f"{k}={redacted(k, v)}" for k, v in sorted(nccl_env)),
        "settings_hash": hashlib.sha256(blob).hexdigest()[:16],
    }


def add_scaling(columns: dict[str, list]) -> None:
    """Fill the `speedup` and `efficiency` columns in place (see the module docstring).

    Plain Python over the training rows, which are few (one per job and mode) even when the
    summary has 100,000 collective rows; no DataFrame is needed to collect a run."""
    n = len(columns["job"])
    speedup: list[float | None] = [None] * n
    efficiency: list[float | None] = [None] * n
    groups: dict[tuple, list[int]] = {}
    rates: dict[int, float] = {}  # images/s, or the transformer's tokens/s
    for i in range(n):
        unit = UNITS.get(columns["workload"][i])
        rate = columns[f"{unit}_per_s"][i] if unit else None
        if columns["status"][i] == COMPLETED and rate is not None:
            rates[i] = float(rate)
            groups.setdefault(tuple(columns[k][i] for k in SCALING_KEYS), []).append(i)
    for members in groups.values():
        base = min(members, key=lambda i: (columns["world_size"][i], columns["nodes"][i]))
        base_world = columns["world_size"][base]
        for i in members:
            speedup[i] = rates[i] / rates[base]
            efficiency[i] = speedup[i] / (columns["world_size"][i] / base_world)
    columns["speedup"], columns["efficiency"] = speedup, efficiency


SUMMARY_FILES = ("summary.parquet", "summary.csv", "samples.parquet")


def write_summary(run: RunDir, summary: pa.Table, samples: pa.Table) -> None:
    """Commit summary.parquet, summary.csv and samples.parquet (Arrow tables) as one set.

    The three are written into a new generation directory under `run.generations`, and one
    rename of the `current` link commits them together; DIR/summary.parquet and its siblings
    are links through `current`. A kill at any moment therefore leaves the old set or the new
    one, never a mix (docs/run-directory.md). The caller holds the run's lock: what an earlier,
    interrupted collect left behind is removed here.
    """
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    gens = run.generations.name
    linked = inside.readlink(run.path, f"{gens}/current") is not None and all(
        inside.readlink(run.path, n) in (_link_target(run, n), None) for n in SUMMARY_FILES
    )
    if not linked or any(_plain(run, n) for n in SUMMARY_FILES):
        _adopt_plain_files(run)
    new = f"{gens}/g-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{secrets.token_hex(3)}"
    inside.mkdir(run.path, new)
    for name, table, write in (
        ("summary.parquet", summary, pq.write_table),
        ("summary.csv", summary, pacsv.write_csv),
        ("samples.parquet", samples, pq.write_table),
    ):
        buf = io.BytesIO()
        write(table, buf)
        inside.write(run.path, f"{new}/{name}", buf.getvalue())
    inside.fsync(run.path, new)
    for name in SUMMARY_FILES:  # no-ops after the first collect
        inside.link(run.path, name, _link_target(run, name))
    inside.link(run.path, f"{gens}/current", new.rsplit("/", 1)[1])  # the commit
    inside.fsync(run.path, gens)
    inside.fsync(run.path)
    clean_generations(run)


def _link_target(run: RunDir, name: str) -> str:
    return f"{run.generations.name}/current/{name}"


def _plain(run: RunDir, name: str) -> bool:
    """Whether DIR/NAME is a plain file (not bench's link into the generations)."""
    try:
        return stat.S_ISREG((run.path / name).lstat().st_mode)
    except OSError:
        return False


def _adopt_plain_files(run: RunDir) -> None:
    """Move a run collected by an older bench (plain files) to generations without a moment of
    mixed content: the plain files are hard-linked into a first generation, `current` names it,
    and only then does each plain file become a link to the same bytes. Whatever `.summary`
    held is not read while the plain files are (a copy made with the links followed), so it
    goes; a link there is removed, never followed."""
    gens = run.generations.name
    inside.remove(run.path, gens)
    first = f"{gens}/g-adopted-{os.getpid()}-{secrets.token_hex(3)}"
    inside.mkdir(run.path, first)
    adopted = []
    with inside.directory(run.path) as top, inside.directory(run.path, first) as into:
        for name in SUMMARY_FILES:
            if _plain(run, name):
                try:
                    os.link(name, name, src_dir_fd=top, dst_dir_fd=into, follow_symlinks=False)
                except OSError:  # a file system without hard links
                    with open_regular(run.path / name) as f:
                        inside.write(run.path, f"{first}/{name}", f.read())
                adopted.append(name)
    inside.fsync(run.path, first)
    inside.link(run.path, f"{gens}/current", first.rsplit("/", 1)[1])
    for name in adopted:
        inside.link(run.path, name, _link_target(run, name))


def clean_generations(run: RunDir) -> list[str]:
    """Remove what interrupted collects left: generations `current` does not name, and temporary
    files of the summary. Only under the run's lock, and only inside the run directory: a link
    among them is removed, never followed. Returns the names removed."""
    removed = []
    gens = run.generations.name
    keep = inside.readlink(run.path, f"{gens}/current")
    for name in inside.listing(run.path, gens):
        if name not in ("current", keep):
            inside.remove(run.path, f"{gens}/{name}")
            removed.append(f"{gens}/{name}")
    for name in inside.listing(run.path):  # temporaries of a write that was interrupted
        if name.startswith(tuple(f".{n}." for n in SUMMARY_FILES)) and name.endswith(".tmp"):
            inside.remove(run.path, name)
            removed.append(name)
    return removed


def read_summary(run: RunDir) -> pd.DataFrame:
    """The run's summary.parquet as a DataFrame."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = run.summary_set()["summary_parquet"]
    if not path.exists():
        raise RunDirError(f"{run.path}: no summary.parquet; run `bench collect {run.path}` first")
    try:
        with open_regular(path) as f:
            return to_frame(pq.read_table(f))
    except (OSError, pa.ArrowException) as exc:
        raise RunDirError(
            f"{run.summary_parquet}: unreadable ({one_line(str(exc))}); run `bench collect {run.path}` again"
        ) from None
