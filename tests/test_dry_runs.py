"""A dry run never runs (docs/concepts/hardening.md, "Dry runs"): `bench sweep`, `bench nodes` and `bench
accept` with --dry-run, on every executor each takes, start no workload and call no Slurm
command. Slurm's commands are stand-ins on PATH that record any call; the run directory must
hold plans and scripts only, no log, no result, no process.

`bench nodes --executor local --dry-run` once ran the whole check: 64 nodes would have started
2,016 pair steps on this machine."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
from conftest import ROOT, SWEEPS, bench, left_in

PROFILE = SWEEPS / "clusters" / "testbed.yaml"
REFERENCE = "reference:\n  - {workload: allreduce, size: 4M, nodes: 2, gpus_per_node: 1, busbw_gbps: 0.3}\n"
SWEEP = ("--set", "workloads.real=false", "--set", "workloads.transformer=false")
CASES = [
    ("sweep", "local", (str(SWEEPS / "local.yaml"), "--max-nodes", "2", *SWEEP)),
    ("sweep", "slurm", (str(SWEEPS / "testbed.yaml"), "--cluster", str(PROFILE))),
    ("sweep", "submitit", (str(SWEEPS / "testbed.yaml"), "--cluster", str(PROFILE))),
    ("nodes", "local", ("--nodes", "64")),
    ("nodes", "slurm", ("--cluster", str(PROFILE), "--nodelist", "bnode[1-64]")),
    ("nodes", "submitit", ("--cluster", str(PROFILE), "--nodelist", "bnode[1-64]")),
    ("accept", "slurm", ("--cluster", "ACCEPT", "--nodelist", "bnode[1-4]", "--soak", "30")),
    ("accept", "submitit", ("--cluster", "ACCEPT", "--nodelist", "bnode[1-4]")),
]


@pytest.mark.parametrize(("command", "executor", "args"), CASES, ids=[f"{c}-{e}" for c, e, _ in CASES])
def test_a_dry_run_starts_nothing(tmp_path, slurm_stand_ins, command, executor, args):
    profile = tmp_path / "accept.yaml"
    profile.write_text(PROFILE.read_text() + REFERENCE)
    args = tuple(str(profile) if a == "ACCEPT" else a for a in args)
    out = tmp_path / "out"
    r = bench(command, "--executor", executor, *args, "--dry-run", "--yes", "--out", str(out), timeout=120)
    assert "dry run" in r.stdout, r.describe()
    assert slurm_stand_ins.calls() == []
    files = [p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()]
    started = [f for f in files if f.endswith(("log.txt", ".log")) or "/steps/" in f or "/progress/" in f]
    assert files and started == [], files
    assert not [f for f in files if f.endswith(("allreduce.json", ".ranks.json", ".links.json", "steps.json"))], files
    assert left_in(out) == []
    if "--soak" in args:  # the acceptance's node check is soaked as asked (docs/guides/nodes.md, "Soak")
        assert json.loads((out / "nodes" / "check.json").read_text())["options"]["soak_s"] == 1800.0
        # and the sweep's collective, one job on the references' most nodes, its time limit 30 min longer
        plan = json.loads((out / "soak" / "plan.json").read_text())
        (job,) = plan["jobs"]
        assert (job["name"], job["time_limit_min"]) == ("n2-g1-torchrun-default", 30.0 + 30), job
        (run,) = plan["runs"]
        assert " ".join(run["args"]).startswith("-b 4194304 -e 4194304 ") and run["args"][-2:] == ["--soak", "1800"]
        assert "--time=01:00:00" in (out / "soak" / "jobs" / job["name"] / "job.sbatch").read_text()


# ---- the GPU acceptance run (docs/guides/gpu-acceptance.md): here, its refusal and its plan

ACCEPTANCE = ROOT / "tests" / "gpu" / "acceptance.sh"


def _acceptance(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BENCH_PYTHON": sys.executable}
    return subprocess.run([str(ACCEPTANCE), *args], env=env, capture_output=True, text=True, timeout=120)


def test_the_gpu_acceptance_run_refuses_a_machine_without_a_gpu_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: run tests/gpu/acceptance.sh itself")
    r = _acceptance("--out", str(tmp_path / "acc"))
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.startswith("acceptance: no CUDA GPU on this machine") and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "acc").exists()


def test_the_gpu_acceptance_plan_is_commands_bench_accepts(tmp_path):
    """The dry run's table has a row per path; each `bench run` it lists parses and passes its
    workload's checks for 2 GPUs, and its sweep file plans a 1-node and a 2-node job on NCCL."""
    import importlib

    from harness.config.sweepfile import load_sweep
    from harness.run.plan import expand

    r = _acceptance("--dry-run", "--gpus", "2", "--peak-tflops", "989", "--out", str(tmp_path / "acc"))
    assert r.returncode == 0, r.stderr
    commands = [line for line in r.stdout.splitlines() if line.startswith("$ bench ")]
    rows = [line for line in r.stdout.splitlines() if "  RUN  " in line]
    assert len(commands) == 7 and len(rows) == 19, r.stdout
    assert any(row.startswith("sendrecv on NCCL, 2 rank(s)") for row in rows)
    assert not (tmp_path / "acc").exists()  # a dry run writes nothing

    spec = importlib.util.spec_from_file_location("acceptance", ACCEPTANCE.with_suffix(".py"))
    acceptance = sys.modules["acceptance"] = importlib.util.module_from_spec(spec)  # its dataclasses look it up
    spec.loader.exec_module(acceptance)
    steps = acceptance.steps(2, True, 989.0, tmp_path / "acc")
    (tmp_path / "acc").mkdir()
    assert [f"$ bench {shlex.join(s.command(tmp_path / 'acc'))}" for s in steps] == commands
    for step in steps:
        if step.argv[0] == "run":
            module = importlib.import_module(f"benchmarks.{step.argv[1]}")
            args = module.build_parser().parse_args([*step.argv[2:], "--json", str(tmp_path / "r.json")])
            checks = {  # what each workload's main checks before a rank starts
                "allreduce": ("collectives", "check_args"),
                "synthetic": ("training", "check_training_args"),
                "transformer": ("transformer", "check_args"),
                "gemm": ("gemm", "check"),
            }
            where, check = checks[step.argv[1]]
            getattr(importlib.import_module(f"benchmarks.{where}"), check)(args, 2)
            assert args.device == "cuda" and args.nproc == 2
        else:
            for path, text in step.files.items():
                path.write_text(text)
            jobs = expand(load_sweep(step.argv[1]))
            assert [(j.nodes, j.gpus_per_node) for j in jobs] == [(1, 1), (2, 1)]
            assert {(j.device, j.backend) for j in jobs} == {("cuda", "nccl")}


def test_the_gpu_acceptance_run_without_bench_installed_says_so_in_one_line(tmp_path):
    python = tmp_path / "python"  # this interpreter without its site-packages: no torch, no bench
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S "$@"\n')
    python.chmod(0o755)
    r = subprocess.run(
        [str(ACCEPTANCE), "--dry-run"], env={**os.environ, "BENCH_PYTHON": str(python)}, capture_output=True, text=True
    )
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.startswith("acceptance: bench is not installed for ") and r.stderr.count("\n") == 1, r.stderr
