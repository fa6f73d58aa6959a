"""Large run directories for the speed benchmarks: the real result-file layout, made-up numbers."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
from pathlib import Path

from benchmarks.common import MEASUREMENT_RULES, json_safe
from benchmarks.results import SCHEMA_VERSION
from harness.config.sweepfile import load_sweep
from harness.run.plan import expand
from harness.run.rundir import COMPLETED, JobRecord, RunDir

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # tests/fixtures
SIZES = [8 * 2**i for i in range(25)]  # 8 B .. 128 MiB, as nccl-tests -b 8 -e 128M -f 2


def collective_row(rng: random.Random, size: int, iters: int, collective: str = "all_reduce", **more: str) -> dict:
    """One row of a collectives result, as benchmarks/collectives.py writes it, with made-up
    times; `more` adds keys (a row's group)."""
    worst = [rng.uniform(10, 1000) for _ in range(iters)]
    t = sum(worst) / iters
    row = {
        "collective": collective,
        **more,
        "size_bytes": size,
        "count": size // 4,
        "dtype": "float32",
        "op": "sum",
        "time_us": t,
        "algbw_gbps": size / t / 1e3,
        "busbw_gbps": size / t / 1e3 * 1.75,
        "wrong": 0,
        "time_us_p10": min(worst),
        "time_us_median": sorted(worst)[iters // 2],
        "time_us_p90": max(worst),
        "samples_us": worst,
    }
    row.update({f"oop_{k}": row[k] for k in ("time_us", "algbw_gbps", "busbw_gbps", "wrong")})
    return row


def _allreduce_result(rng: random.Random, world: int, iters: int) -> dict:
    rows = [collective_row(rng, size, iters) for size in SIZES]
    return {
        "schema_version": SCHEMA_VERSION,
        "workload": "allreduce",
        "world_size": world,
        "backend": "nccl",
        "device": "cuda",
        "launcher": "slurm-torchrun",
        "params": {"dtype": "float32", "op": "sum"},
        "rows": rows,
        # as every rank of this bench records it (benchmarks/runtime.py), so that a run's rules are one
        "environment": {
            "hosts": [f"gpu{i:03d}" for i in range(max(world // 8, 1))],
            "measurement_rules": MEASUREMENT_RULES,
        },
    }


# The first night of the histories these benchmarks build: a real time, as bench's plans hold.
FIRST_NIGHT = dt.datetime(2026, 1, 1, 2, tzinfo=dt.timezone.utc)


def dated(run_dir: Path, when: dt.datetime) -> Path:
    """Give a run's plan another time, and with it another identity in the history (which holds
    each plan once and orders a cluster's runs by their times)."""
    plan = run_dir / "plan.json"
    plan.write_text(json.dumps({**json.loads(plan.read_text()), "created": when.isoformat()}))
    return run_dir


def make_run(root: Path, n_jobs: int, world: int = 8, iters: int = 20, seed: int = 0) -> RunDir:
    """A completed run directory of `n_jobs` jobs, each with one all-reduce result of 25 sizes."""
    sweep = load_sweep(
        SWEEPS / "local.yaml",
        overrides=(
            f"nodes={list(range(1, 101))}",
            "max_nodes=100",
            "gpus_per_node=[8]",
            "workloads.synthetic=false",
            "workloads.real=false",
        ),
    )
    sweep = dataclasses.replace(sweep, nccl={f"s{i}": {} for i in range(-(-n_jobs // 100))})
    jobs = expand(sweep)[:n_jobs]
    run = RunDir(root)
    root.mkdir(parents=True, exist_ok=True)
    run.write_plan({}, "tests/perf fixture", "local", jobs)
    run.write_table(
        {j.name: JobRecord(name=j.name, nodes=j.nodes, state=COMPLETED, runs={"allreduce": COMPLETED}) for j in jobs},
        "local",
    )
    # through the workloads' own encoding, so files are as large as real ones; each names its
    # job's world size and --json path, as collect checks
    result = {**_allreduce_result(random.Random(seed), world, iters), "world_size": -1, "argv": ["--json", "@PATH@"]}
    text = json.dumps(json_safe(result))
    for job in jobs:
        path = root / job.result_path(job.runs[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            text.replace('"world_size": -1', f'"world_size": {job.world_size}', 1).replace(
                '"@PATH@"', json.dumps(job.result_path(job.runs[0])), 1
            )
        )
    return run
