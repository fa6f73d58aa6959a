"""Matrix expansion: deterministic, complete, readable names, stable hashes."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
from conftest import SWEEPS, bench

from harness.plan import Job, PlanError, expand
from harness.rundir import PLAN_VERSION, RunDir
from harness.spec import load_sweep


def test_default_sweep_expands_to_the_full_matrix():
    sweep = load_sweep(SWEEPS / "default.yaml")
    jobs = expand(sweep)
    # 4 node counts x 4 GPU counts x 2 launchers x 3 NCCL sets
    assert len(jobs) == 4 * 4 * 2 * 3
    assert len({j.name for j in jobs}) == len(jobs)
    points = [(j.nodes, j.gpus_per_node, j.launcher, j.nccl_config) for j in jobs]
    assert points == list(
        itertools.product((1, 2, 4, 8), (1, 2, 4, 8), ("torchrun", "srun"), ("default", "ib", "socket"))
    )
    assert jobs[0].name == "n1-g1-torchrun-default"
    assert jobs[-1].name == "n8-g8-srun-socket"
    assert {r.key for r in jobs[0].runs} == {"allreduce", "synthetic-weak", "synthetic-strong", "real-weak"}
    ib = next(j for j in jobs if j.nccl_config == "ib")
    assert dict(ib.nccl_env) == {"NCCL_IB_DISABLE": "0", "NCCL_NET_GDR_LEVEL": "5"}


def test_expansion_is_deterministic_and_hashes_track_the_configuration():
    sweep = load_sweep(SWEEPS / "default.yaml")
    first, second = expand(sweep), expand(load_sweep(SWEEPS / "default.yaml"))
    assert first == second
    assert [j.config_hash for j in first] == [j.config_hash for j in second]
    assert len({j.config_hash for j in first}) == len(first)
    changed = expand(load_sweep(SWEEPS / "default.yaml", overrides=("workloads.synthetic.steps=51",)))
    assert all(a.config_hash != b.config_hash for a, b in zip(first, changed))
    assert all(a.name == b.name for a, b in zip(first, changed))
    renamed = expand(dataclasses.replace(sweep, name="other"))
    assert [j.config_hash for j in renamed] == [j.config_hash for j in first]


def test_strong_scaling_splits_the_global_batch_and_weak_keeps_the_per_gpu_batch():
    job = expand(load_sweep(SWEEPS / "default.yaml"))[0]
    runs = {r.key: r.args for r in job.runs}
    strong, weak = runs["synthetic-strong"], runs["synthetic-weak"]
    assert strong[strong.index("--global-batch") + 1] == "256" and "--batch-size" not in strong
    assert weak[weak.index("--batch-size") + 1] == "64" and "--global-batch" not in weak


def test_global_batch_must_divide_every_world_size():
    sweep = load_sweep(SWEEPS / "local.yaml", overrides=("workloads.synthetic.global_batch=6",))
    with pytest.raises(PlanError, match=r"global_batch 6 is not divisible by the world size 4"):
        expand(sweep)


def test_job_paths_are_relative_and_the_job_round_trips():
    job = expand(load_sweep(SWEEPS / "local.yaml"))[-1]
    args = job.run_args(job.runs[0], 120)
    assert args[args.index("--json") + 1] == f"jobs/{job.name}/allreduce.json"
    assert args[args.index("--timeout") + 1] == "120"
    assert Job.from_dict(job.to_dict()) == job
    real = next(r for r in job.runs if r.workload == "real")
    assert real.args[real.args.index("--data-cache") + 1] == "data"


def test_plan_json_is_json_with_a_version_of_its_own_and_one_job_per_line(tmp_path):
    out = tmp_path / "run"
    bench("sweep", str(SWEEPS / "default.yaml"), "--executor", "slurm", "--dry-run", "--out", str(out))
    text = (out / "plan.json").read_text()
    plan = json.loads(text)
    assert plan["plan_version"] == PLAN_VERSION and "schema_version" not in plan
    jobs = RunDir(out).jobs()
    assert [j.name for j in jobs] == [j.name for j in expand(load_sweep(SWEEPS / "default.yaml"))]
    job_lines = [line for line in text.splitlines() if line.lstrip().startswith('{"name": ')]
    assert len(job_lines) == len(jobs) == 96


def test_a_run_directory_from_before_the_format_versions_is_read(tmp_path):
    """Directories written before plan.json and jobs.json had versions of their own carried the
    result schema_version 1, with the same layout: they are read as version 1."""
    out = tmp_path / "run"
    bench("sweep", str(SWEEPS / "local.yaml"), "--executor", "local", "--dry-run", "--out", str(out))
    run = RunDir(out)
    plan = json.loads(run.plan_file.read_text())
    plan["schema_version"] = 1
    del plan["plan_version"]
    run.plan_file.write_text(json.dumps(plan))
    table = run.read_table(run.jobs())
    run.write_table(table, "local")
    old = json.loads(run.table_file.read_text())
    old["schema_version"] = 1
    del old["table_version"]
    run.table_file.write_text(json.dumps(old))
    r = bench("status", str(out))
    assert f"0 of {len(table)} jobs COMPLETED" in r.stdout, r.describe()
    assert RunDir(out).read_table(run.jobs()).keys() == table.keys()
