"""Matrix expansion: a sweep becomes a sorted list of jobs, one per point of
(nodes, gpus_per_node, launcher, nccl set), each running all the sweep's workloads in turn.

A pure function: the same sweep always gives the same jobs, names and hashes, whatever the
machine or the run directory. Every path in a job is relative to the run directory, where
executors run jobs.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD
from benchmarks.common import links_path, ranks_path
from benchmarks.progress import DIR as PROGRESS_DIR
from harness.config.spec import DEFAULT_TIME_LIMIT_MIN, Sweep
from harness.errors import PlanError
from harness.evidence.telemetry import DIR as TELEMETRY_DIR


@dataclass(frozen=True)
class WorkloadRun:
    """One workload invocation inside a job: `python -m benchmarks.<workload> <args>`."""

    workload: str
    scaling: str  # "weak", "strong", or "" for the microbenchmark
    args: tuple[str, ...]

    @functools.cached_property
    def key(self) -> str:  # cached: a job's script and files name each workload by it dozens of times
        return f"{self.workload}-{self.scaling}" if self.scaling else self.workload

    @property
    def module(self) -> str:
        return f"benchmarks.{self.workload}"


# NCCL's own account of the transport it chose (docs/concepts/transport.md), on for every job that may run
# NCCL unless the sweep, its settings set or the cluster profile sets the variable itself.
NCCL_DEBUG_DEFAULTS = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,GRAPH"}
# PyTorch's flight recorder: the last collectives of each rank, dumped when NCCL's process-group
# timeout fires or when the stall watch asks (docs/guides/hangs.md, "The flight recorder"). On
# NCCL every torch 2.x reads these names (newer releases also TORCH_FR_*, with these as the
# fallback); gloo records from torch 2.8, under the shared name alone.
FLIGHT_RECORDER_DEFAULTS = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
GLOO_FLIGHT_RECORDER_DEFAULTS = {"TORCH_FR_BUFFER_SIZE": "2000"}
# The variables that name a file per workload step, so each step's files stay apart.
PER_STEP = ("NCCL_DEBUG_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")


@dataclass(frozen=True)
class Job:
    name: str
    config_hash: str
    nodes: int
    gpus_per_node: int
    launcher: str
    nccl_config: str
    nccl_env: tuple[tuple[str, str], ...]
    env: tuple[tuple[str, str], ...]
    device: str
    backend: str
    time_limit_min: float
    runs: tuple[WorkloadRun, ...]
    repeat: int = 1  # which replicate of its matrix point (bench sweep --repeat N)
    passthrough: tuple[str, ...] = ()  # variables taken by name from the environment bench runs in
    # What the job's settings set expects of its transport (fields.EXPECT_KEYS); not part of the
    # config hash, since it changes what is checked, not what is measured.
    expect: tuple[tuple[str, Any], ...] = ()
    stall_s: float = 300.0  # no progress this long is a hang (docs/guides/hangs.md); not in the config hash
    sample_s: float = 1.0  # the telemetry sampler's interval, 0 for none (docs/concepts/telemetry.md); not hashed

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def result_path(self, run: WorkloadRun) -> str:
        return f"jobs/{self.name}/{run.key}.json"

    @property
    def nccl_log_dir(self) -> str:
        return f"jobs/{self.name}/nccl"

    @property
    def flight_dir(self) -> str:
        return f"jobs/{self.name}/flight"

    def attempt_files(self) -> list[str]:
        """What one attempt of the job leaves that the next must not inherit, as glob patterns
        relative to the run directory: results and the per-rank and links files beside them, hang records and
        progress files (docs/guides/hangs.md), NCCL logs and flight-recorder dumps (docs/concepts/transport.md),
        telemetry (docs/concepts/telemetry.md) and the time-limit note. Bench removes them before it
        submits a job again, and a job Slurm requeued removes them itself (docs/concepts/preemption.md)."""
        folder = f"jobs/{self.name}"
        out = []
        for run in self.runs:
            result = self.result_path(run)
            out += [
                result,
                ranks_path(result),
                links_path(result),
                f"{folder}/hang-{run.key}.json",
                f"{folder}/{PROGRESS_DIR}/{run.key}.rank*",
                f"{self.flight_dir}/{run.key}.rank*",
                f"{self.flight_dir}/{run.key}.request",
            ]
            if self.backend != "gloo":  # NCCL's files (debug_env)
                out.append(f"{self.nccl_log_dir}/{run.key}.*")
        return [*out, f"{folder}/{TELEMETRY_DIR}/*.jsonl", f"{folder}/time-limit.txt"]

    def debug_env(self, run: WorkloadRun, given: Iterable[str]) -> dict[str, str]:
        """The NCCL debug and flight-recorder variables of one workload of this job that `given`
        (the names the job's environment already sets) leaves to bench: each rank's NCCL lines
        in a file of its own (NCCL_DEBUG_FILE's %h and %p are NCCL's host name and pid), and
        each rank's flight-recorder dump in the job directory (torch appends the rank). On gloo,
        the recorder's buffer alone: the ranks dump it themselves (benchmarks/recorder.py)."""
        given = set(given)
        if self.backend == "gloo":
            return {k: v for k, v in GLOO_FLIGHT_RECORDER_DEFAULTS.items() if k not in given}
        defaults = {**NCCL_DEBUG_DEFAULTS, **FLIGHT_RECORDER_DEFAULTS}
        out = {k: v for k, v in defaults.items() if k not in given}
        if "NCCL_DEBUG_FILE" not in given:
            out["NCCL_DEBUG_FILE"] = f"{self.nccl_log_dir}/{run.key}.%h.%p.log"
        if "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in given:
            out["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = f"{self.flight_dir}/{run.key}.rank"
        return out

    def run_args(self, run: WorkloadRun, timeout_s: float) -> list[str]:
        """The workload's full argument list, as every rank receives it."""
        return [
            *run.args,
            "--device",
            self.device,
            "--backend",
            self.backend,
            "--timeout",
            f"{timeout_s:g}",
            "--json",
            self.result_path(run),
        ]

    def to_dict(self, with_runs: bool = True) -> dict[str, Any]:
        """A JSON-ready dict; shallow, because a plan of 10,000 jobs writes 10,000 of them."""
        d: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "runs"}
        d["world_size"] = self.world_size
        if with_runs:
            d["runs"] = [asdict(r) for r in self.runs]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Job:
        return cls(
            name=d["name"],
            config_hash=d["config_hash"],
            nodes=d["nodes"],
            gpus_per_node=d["gpus_per_node"],
            launcher=d["launcher"],
            nccl_config=d["nccl_config"],
            nccl_env=tuple(tuple(p) for p in d["nccl_env"]),
            env=tuple(tuple(p) for p in d["env"]),
            device=d["device"],
            backend=d["backend"],
            time_limit_min=d["time_limit_min"],
            runs=tuple(WorkloadRun(r["workload"], r["scaling"], tuple(r["args"])) for r in d["runs"]),
            repeat=d.get("repeat", 1),
            expect=tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in d.get("expect", ())),
            stall_s=d.get("stall_s", 300.0),
            sample_s=d.get("sample_s", 0.0),
            passthrough=tuple(d.get("passthrough", ())),
        )


def job_name(nodes: int, gpus_per_node: int, launcher: str, nccl_config: str, repeat: int | None = None) -> str:
    """`n2-g4-torchrun-ib`, and `n2-g4-torchrun-ib-r3` for the third replicate of a repeated sweep."""
    return f"n{nodes}-g{gpus_per_node}-{launcher}-{nccl_config}" + (f"-r{repeat}" if repeat else "")


def _runs(sweep: Sweep) -> tuple[WorkloadRun, ...]:
    w = sweep.workloads
    runs = []
    if w.allreduce is not None:
        runs.append(WorkloadRun(COLLECTIVE_WORKLOAD, "", tuple(w.allreduce.args())))
    for name, spec in w.training():
        runs.extend(WorkloadRun(name, s, tuple(spec.args(s))) for s in spec.scaling)
    return tuple(runs)


def _config_hash(fields: dict[str, Any], runs: str) -> str:
    """The first 10 hex digits of SHA-256 over a job's identity as sorted, compact JSON: `fields`
    and then "runs", whose JSON (`runs`) every job of a sweep shares and is encoded once, not once
    a job. "runs" sorts after every key of `fields`, so the bytes are
    those of the whole identity encoded in one, as every plan's hashes have been made."""
    assert all(key < "runs" for key in fields), sorted(fields)
    head = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f'{head[:-1]},"runs":{runs}}}'.encode()).hexdigest()[:10]


def expand(sweep: Sweep) -> list[Job]:
    """All jobs of the sweep, ordered by nodes, GPUs per node, then launcher and NCCL set as listed.

    With `repeat: N` the whole matrix is listed N times over, replicate by replicate, so that
    the replicates of one point run apart in time rather than back to back: a slow hour on the
    cluster then touches one replicate of many points, not every replicate of one. Replicates
    share their config hash."""
    runs = _runs(sweep)
    runs_json = json.dumps([[r.workload, r.scaling, list(r.args)] for r in runs], separators=(",", ":"))
    env = tuple(sorted(sweep.env.items()))
    jobs = []
    for nodes in sweep.node_counts:
        for gpus in sorted(sweep.gpus_per_node):
            world = nodes * gpus
            kept = [
                (launcher, nccl_name)
                for launcher in sweep.launchers
                for nccl_name in sweep.nccl
                if sweep.selects(nodes, gpus, launcher, nccl_name)
            ]
            for name, training in sweep.workloads.training() if kept else ():
                batch = training.global_batch if "strong" in training.scaling else None
                if batch is not None and (batch < world or batch % world):
                    raise PlanError(
                        f"global_batch {batch} is not divisible by the world size "
                        f"{world} of {nodes} nodes x {gpus} GPUs; pick a multiple of every world size, or "
                        f"scale weak only (--set workloads.{name}.scaling=[weak]; bench's "
                        "sweeps/accept.yaml scales to any node count)"
                    )
            for launcher, nccl_name in kept:
                nccl_env = tuple(sorted(sweep.nccl[nccl_name].items()))
                identity = {
                    "nodes": nodes,
                    "gpus_per_node": gpus,
                    "launcher": launcher,
                    "nccl_env": nccl_env,
                    "env": env,
                    "device": sweep.device,
                    "backend": sweep.backend,
                }
                jobs.append(
                    Job(
                        name=job_name(nodes, gpus, launcher, nccl_name),
                        config_hash=_config_hash(identity, runs_json),
                        nodes=nodes,
                        gpus_per_node=gpus,
                        launcher=launcher,
                        nccl_config=nccl_name,
                        nccl_env=nccl_env,
                        env=env,
                        device=sweep.device,
                        backend=sweep.backend,
                        time_limit_min=sweep.time_limit_min or DEFAULT_TIME_LIMIT_MIN,
                        runs=runs,
                        passthrough=sweep.env_passthrough,
                        expect=tuple(sorted(sweep.nccl_expect.get(nccl_name, {}).items())),
                        stall_s=sweep.stall_limit_s,
                        sample_s=sweep.sample_s,
                    )
                )
    if not jobs:
        raise PlanError("the include and exclude rules leave no job to run; loosen them")
    if sweep.repeat == 1:
        return jobs
    return [
        dataclasses.replace(j, name=job_name(j.nodes, j.gpus_per_node, j.launcher, j.nccl_config, k), repeat=k)
        for k in range(1, sweep.repeat + 1)
        for j in jobs
    ]
