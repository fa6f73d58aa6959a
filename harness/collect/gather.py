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
import functools
import gc
import hashlib
import itertools
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD, COLLECTIVES, GROUPS, UNITS, WORLD
from benchmarks.common import redacted
from benchmarks.results import WRONG_RESULTS, ResultError, load_result, wrong_count
from harness.collect.builder import Builder
from harness.collect.summary import (
    ENVIRONMENT_KEY,
    EXACT_IN_DOUBLE,
    NUMBER_TYPES,
    STRAGGLERS_KEY,
    SUMMARY_VERSION,
    TRAFFIC_COLUMNS,
    TRAINING_FIGURES,
    VERSION_KEY,
    arrow_array,
    check_columns,
    numpy_array,
    within,
)
from harness.config.cluster_profile import Hardware
from harness.config.fields import FieldError
from harness.evidence import stragglers, telemetry, transport
from harness.evidence.stragglers import Straggler
from harness.run import forked, provenance
from harness.run.rundir import COMPLETED, RunDir

if TYPE_CHECKING:
    import pyarrow as pa

    from harness.run.plan import Job, WorkloadRun
    from harness.run.rundir import JobRecord

_ENV_FIELDS = ("nccl", "torch", "cuda", "gpu_driver", "backend", "python", "bench_version", "measurement_rules")
SCALING_KEYS = ["workload", "scaling", "launcher", "backend", "device", "nccl_config", "model", "repeat"]
# every column add_scaling reads
_SCALING_READS = (
    "job",
    "status",
    "world_size",
    "nodes",
    *SCALING_KEYS,
    *(f"{u}_per_s" for u in sorted(set(UNITS.values()))),
)
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
_ROW_CHECKED = (*_ROW_FIELDS, "size_bytes")  # collective and group are the catalog's names
# The figures a training result gives its row as they are; MFU and its peak are worked out
# (_mfu) from the result and the profile's stated peak
_MFU = ("mfu", "peak_tflops_per_gpu")
_TRAINING_FIELDS = tuple(f for f in TRAINING_FIGURES if f not in _MFU)
_TRAINING_CHECKED = ("model", *_TRAINING_FIELDS, *_MFU)


def _warn(message: str) -> None:
    print(f"bench: warning: {message}", file=sys.stderr)


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
# Compared where a result sets them (FSDP's policy, activation checkpointing): results written
# before them, and DDP runs, which have none, stay comparable with each other
COMPARED_WHEN_SET = {"transformer": ("param_dtype", "reduce_dtype", "activation_checkpointing")}


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

    def merge(self, other: _Environments) -> None:
        for key, values in other.seen.items():
            self.seen[key] |= values
        self.hosts |= other.hosts
        self.largest = max(self.largest, other.largest)

    def result(self, planned: Any = None) -> dict[str, Any]:
        """The fields seen, and what plan.json says of the bench that planned the run
        (docs/concepts/provenance.md): `bench` in words, its rules among the measurement rules; results
        and plans made before either was recorded count as rules 1."""
        measured = self.seen["measurement_rules"] or ({"1"} if self.largest else set())
        self.seen["measurement_rules"] = measured | {str(provenance.rules(planned))}
        out: dict[str, Any] = {k: sorted(v) for k, v in self.seen.items()}
        out["bench"] = [provenance.describe(planned)]
        out["hosts"] = sorted(self.hosts)
        out["largest_job_nodes"] = [str(self.largest)] if self.largest else []
        return out


@contextlib.contextmanager
def _without_cycle_collection() -> Iterator[None]:
    """Building a summary makes millions of small lists, dicts and tuples, none in a cycle;
    Python's cycle collector would walk them over and over, a third of collect's time at 100,000
    rows. Reference counting still frees everything."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def collect(run: RunDir, warn: Callable[[str], None] = _warn, workers: int | None = None) -> tuple[pa.Table, pa.Table]:
    """(summary, samples), both Arrow tables, from the run directory's plan, job table and
    results (`to_frame` turns the summary into a DataFrame). The samples table has one row per
    summary row that has samples: its keys, the metric, and the per-iteration values (worst
    rank) as a list. `workers`: processes that read the results, this one among them (default:
    one per WORKER_JOBS jobs, at most one per core (forked.usable); docs/reference/run-directory.md, "Collect")."""
    with _without_cycle_collection():
        return _collect(run, warn, workers)


def _collect(run: RunDir, warn: Callable[[str], None], workers: int | None) -> tuple[pa.Table, pa.Table]:
    import pyarrow as pa

    plan = run.read_plan()
    jobs = run.jobs(plan)
    table = run.read_table(jobs)
    hardware = _hardware(plan.get("cluster"), warn)
    parts = _gathered(
        run, jobs, table, hardware, warn, min(workers or forked.usable(len(jobs) // WORKER_JOBS), len(jobs))
    )
    envs = _Environments()
    for part in parts:
        envs.merge(part.envs)
    slow = sorted((s for part in parts for s in part.slow), key=lambda s: -s.slower)
    summary = _scaled(pa.concat_tables([part.summary for part in parts])).replace_schema_metadata(
        {
            VERSION_KEY: str(SUMMARY_VERSION).encode(),
            ENVIRONMENT_KEY: json.dumps(envs.result(plan.get("bench"))).encode(),
            STRAGGLERS_KEY: json.dumps([asdict(s) for s in slow]).encode(),
        }
    )
    return summary, pa.concat_tables([part.samples for part in parts])


@dataclass
class _Part:
    """What the results of some of a run's jobs give: the summary's rows (speedup and efficiency
    not yet worked out), their samples, what they ran on, and their stragglers."""

    summary: pa.Table
    samples: pa.Table
    envs: _Environments
    slow: list[Straggler]


def _gather(
    run: RunDir, jobs: list[Job], table: dict[str, JobRecord], hardware: Hardware | None, warn: Callable[[str], None]
) -> _Part:
    """The part of the summary that `jobs` give (_Part)."""
    out = Builder()
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
            # collective (harness/config/peak.py); not a column
            "_hardware": hardware,
            "_peak_tflops": hardware.peak_tflops_per_gpu if hardware else None,
        }
        # the samples only where an all-reduce's NIC bytes are checked; every job's faults
        collective = any(wr.workload == COLLECTIVE_WORKLOAD for wr in job.runs)
        tele = telemetry.read(run.job_dir(job), warn, faults_only=not collective)
        for wr in job.runs:
            status = rec.runs.get(wr.key, rec.state)
            head = {**base, "workload": wr.workload, "scaling": wr.scaling, "status": status}
            if tele is not None and (fault := telemetry.fault_words(tele, wr.key)) is not None:
                head["hardware_faults"] = fault
                if not fault.startswith(("none", "not judged")):
                    warn(f"{job.name} {wr.key}: hardware faults while it ran: {fault}")
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
                wrong = _add_result(out, head, result)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
                warn(f"skipping {path}: incomplete result ({type(exc).__name__}: {exc})")
                out.add(1, {**head, "status": MISSING})
                continue
            if status == COMPLETED or wrong:  # a job its wrong results failed still ran on what it says
                envs.add(environment, job.nodes)
                # the link probe's own file; a run before it kept the probe in the per-rank file
                links_file = result.get("links_file", result.get("per_rank_file"))
                if (
                    wr.workload == COLLECTIVE_WORKLOAD
                    and isinstance(links_file, str)
                    and links_file
                    and "/" not in links_file
                ):
                    slow += stragglers.judge_file(job.name, path.parent / links_file, warn)
    summary = out.table()
    return _Part(summary, out.samples(summary), envs, slow)


# Jobs a worker process is worth: a worker adds its fork and its part's Arrow streams, which the
# results of 200 jobs pay for, and fewer do not (docs/reference/run-directory.md, "Collect").
WORKER_JOBS = 200


def _gathered(
    run: RunDir,
    jobs: list[Job],
    table: dict[str, JobRecord],
    hardware: Hardware | None,
    warn: Callable[[str], None],
    workers: int,
) -> list[_Part]:
    """The parts of the summary in job order, the jobs split in `workers` shares: the first
    gathered here, each other by a worker process forked for it (harness/run/forked.py), side by
    side. A worker's warnings are given after those of the shares before it, as one process
    would give them; a worker that does not leave a whole part (killed, out of memory), or could
    not be forked, has its share gathered here."""
    shares = [jobs[i * len(jobs) // workers : (i + 1) * len(jobs) // workers] for i in range(max(1, workers))]
    started: list[forked.Worker | None] = []
    try:
        for share in shares[1:]:
            try:
                started.append(forked.Worker(functools.partial(_in_worker, run, share, table, hardware)))
            except OSError:  # no more processes or memory to fork with
                started.append(None)
        parts = [_gather(run, shares[0], table, hardware, warn)]
        for share, worker in zip(shares[1:], started):
            made = worker.result() if worker else None
            if made is None:
                part = _gather(run, share, table, hardware, warn)
            else:
                (summary, samples), (envs, slow, warnings) = made
                part = _Part(summary, samples, envs, slow)
                for message in warnings:
                    warn(message)
            parts.append(part)
        return parts
    finally:
        for worker in started:
            if worker:
                worker.end()


def _in_worker(run: RunDir, jobs: list[Job], table: dict[str, JobRecord], hardware: Hardware | None) -> forked.Made:
    """A share gathered in a worker: its tables, and what else it found, its warnings kept for
    the parent to give."""
    warnings: list[str] = []
    part = _gather(run, jobs, table, hardware, warnings.append)
    return [part.summary, part.samples], (part.envs, part.slow, warnings)


def _scaled(summary: pa.Table) -> pa.Table:
    """The summary with `speedup` and `efficiency` (add_scaling) worked out over its rows of a
    workload with a rate: training results, a row each, so that a collective sweep's 100,000
    rows are not walked."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    # the rows' numbers as a list: a few, and to_numpy would import pandas (numpy_array says why)
    rated = pc.indices_nonzero(pc.is_in(summary.column("workload"), value_set=arrow_array(list(UNITS), pa.string())))
    columns = {name: summary.column(name).take(rated).to_pylist() for name in _SCALING_READS}
    add_scaling(columns)
    rows = rated.to_pylist()
    for name in ("speedup", "efficiency"):
        values = np.full(summary.num_rows, np.nan)
        values[rows] = np.array(columns[name], dtype=float)  # None (not worked out) as NaN
        column = numpy_array(values, ~np.isnan(values))
        summary = summary.set_column(summary.schema.get_field_index(name), name, column)
    return summary


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


def _add_result(out: Builder, head: dict[str, Any], result: dict[str, Any]) -> bool:
    """Add one result's rows and sample lists, and say whether any returned wrong results;
    raises before adding anything if it is incomplete."""
    workload = head["workload"]
    if workload == COLLECTIVE_WORKLOAD:
        rows = result["rows"]
        # Without oop_ columns: run with --no-out-of-place, or a collective with no in-place form
        # (all_to_all, alltoallv, sendrecv) beside others that have one.
        if not rows:
            raise ValueError("no rows")
        # a set comparison of each row's keys, in C, not a generator over its 13 fields
        rows = [r if r.keys() >= _ROW_DEFAULTS.keys() else {**_ROW_DEFAULTS, **r} for r in rows]
        per_row = dict(zip(_ROW_FIELDS, map(list, zip(*map(_row_getter, rows)))))
        per_row["collective"] = [r["collective"] for r in rows]
        per_row["group"] = [r.get("group", WORLD) for r in rows]  # results before groups: the world's
        # names the catalog knows, never free text: a 30,000-character group made `bench plot`
        # take 3.7 GB
        if not set(per_row["collective"]) <= set(COLLECTIVES) or not set(per_row["group"]) <= set(GROUPS):
            raise ValueError("a collective or group the catalog does not have")
        per_row["size_bytes"] = [int(r["size_bytes"]) for r in rows]
        check_columns(per_row, _ROW_CHECKED)
        wrong = _fail_wrong_rows(head, rows, per_row)
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
        out.add(len(rows), head, per_row, samples)
        return wrong
    else:
        rate = f"{UNITS[workload]}_per_s"
        for field, most in ((rate, MAX_RATE), (f"{rate}_per_gpu", MAX_RATE), ("step_time_ms", MAX_STEP_MS)):
            value = float(result[field])
            if not 0 < value <= most:  # nan fails too
                raise ValueError(f"{field} is {result[field]}, outside (0, {most:g}]")
        samples = _checked_samples([result["samples"]["step_time_ms"]])
        row = {**head, "model": result["params"]["model"], **{f: result.get(f) for f in _TRAINING_FIELDS}}
        row.update(_traffic(result))
        if workload == "transformer":
            row.update(_mfu(result, head["_peak_tflops"]))
        check_columns({f: [row.get(f)] for f in _TRAINING_CHECKED}, _TRAINING_CHECKED)
        out.add(1, row, values=samples)
        return False


def _fail_wrong_rows(head: dict[str, Any], rows: list[dict[str, Any]], per_row: dict[str, list]) -> bool:
    """Give each row whose output check found a wrong element the status WRONG_RESULTS and a
    reason saying how many, whatever its job's state: never COMPLETED, so compare, regress and
    the history count it failed (docs/reference/sources.md, "The output check")."""
    counts = [wrong_count(r) for r in rows]
    if not any(counts):
        return False
    per_row["status"] = [WRONG_RESULTS if n else head["status"] for n in counts]
    per_row["reason"] = [
        f"wrong results: {n} element{'s' if n > 1 else ''} failed the output check" if n else head.get("reason")
        for n in counts
    ]
    return True


# What a sample may be in a result file: a number, or null where it was not finite (json_safe).
_SAMPLE_TYPES = NUMBER_TYPES


def _mfu(result: dict[str, Any], stated: float | None) -> dict[str, float | None]:
    """MFU and the peak it is against: the run's own --peak-tflops where it was given one, else
    the cluster profile's hardware figure, else none (never a guessed peak)."""
    peak = result["params"].get("peak_tflops") or stated
    achieved = float(result["achieved_tflops_per_gpu"])
    share = achieved / peak if peak else None
    # above 1 no device reaches: the stated peak is wrong, and no MFU is recorded against it
    return {"mfu": share if share is not None and share <= 1 else None, "peak_tflops_per_gpu": peak or None}


def _traffic(result: dict[str, Any]) -> dict[str, int | None]:
    """A training result's `traffic` as its row's TRAFFIC_COLUMNS: whole numbers of bytes from
    0 to 2**53, or none (a result written before it had them)."""
    traffic = result.get("traffic")
    keys = ("all_reduce_bytes", "all_gather_bytes", "reduce_scatter_bytes", "sent_bytes_per_rank")
    if traffic is None:
        return dict.fromkeys(TRAFFIC_COLUMNS)
    values = [traffic[k] for k in keys] if isinstance(traffic, dict) else None
    if values is None or not all(type(v) is int and 0 <= v <= EXACT_IN_DOUBLE for v in values):
        raise ValueError(f"traffic is {traffic!r}, not {', '.join(keys)} as whole numbers of bytes")
    return dict(zip(TRAFFIC_COLUMNS, values, strict=True))


def _checked_samples(lists: list[Any]) -> list[list[float]]:
    """The sample lists of a result, refused (ValueError, the result is left out) unless each is
    a list of numbers: a string or a boolean among them would reach the samples table."""
    if not all(type(v) is list for v in lists):
        raise ValueError("samples are not lists")
    found = set(map(type, itertools.chain.from_iterable(lists)))
    if not found <= _SAMPLE_TYPES:
        raise ValueError("samples are not all numbers")
    if int in found and not within(itertools.chain.from_iterable(lists), EXACT_IN_DOUBLE):
        raise ValueError("a sample is a whole number past 2**53, which no time reaches")
    return lists


def compared_params(workload: str, result: dict[str, Any]) -> str:
    """COMPARED_PARAMS of a result as canonical JSON (sorted keys), taken from what the workload
    recorded it ran with (amp "auto" is recorded resolved, as bf16 or off)."""
    params = result["params"]
    if workload == COLLECTIVE_WORKLOAD:
        values = {"dtype": params["dtype"], "op": params["op"]}
    else:
        values = {k: params[k] for k in COMPARED_PARAMS[workload] if k in params}
        values.update({k: params[k] for k in COMPARED_WHEN_SET.get(workload, ()) if params.get(k)})
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
