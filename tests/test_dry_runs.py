"""A dry run never runs (docs/hardening.md, "Dry runs"): `bench sweep`, `bench nodes` and `bench
accept` with --dry-run, on every executor each takes, start no workload and call no Slurm
command. Slurm's commands are stand-ins on PATH that record any call; the run directory must
hold plans and scripts only, no log, no result, no process.

`bench nodes --executor local --dry-run` once ran the whole check: 64 nodes would have started
2,016 pair steps on this machine."""

from __future__ import annotations

import pytest
from conftest import SWEEPS, bench, left_in

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
    ("accept", "slurm", ("--cluster", "ACCEPT", "--nodelist", "bnode[1-4]")),
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
    assert not [f for f in files if f.endswith(("allreduce.json", ".ranks.json", "steps.json"))], files  # results
    assert left_in(out) == []
