"""The default tier's one run on the Slurm testbed (CONTRIBUTING.md): a small sweep through
`bench sweep --executor slurm`, 2 emulated nodes, both launch modes, submitted, tracked and
collected for real. Its proofs in depth are the proof tier's (tests/proofs/test_sweep_slurm.py)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import sacct_rows, slurm_sweep

from harness.evidence import telemetry

SWEEP = """name: smoke
device: cpu
backend: gloo
nodes: [2]
gpus_per_node: [1]
launchers: [torchrun, srun]
env: {OMP_NUM_THREADS: "1"}
time_limit_min: 5
timeout_s: 120
workloads:
  allreduce: {min_bytes: 64K, max_bytes: 1M, step_factor: 4, iters: 5, warmup_iters: 1, link_bytes: 0}
"""
JOBS = ["n2-g1-srun-default", "n2-g1-torchrun-default"]


@pytest.mark.smoke
def test_a_small_sweep_runs_through_the_slurm_executor(testbed, tmp_path):
    sweep, out = tmp_path / "smoke.yaml", tmp_path / "run"
    sweep.write_text(SWEEP)
    r = slurm_sweep(sweep, out, timeout=600)
    assert r.returncode == 0, r.describe()
    table = json.loads((out / "jobs.json").read_text())["jobs"]
    assert sorted(table) == JOBS
    for name, row in table.items():
        assert (row["state"], row["attempts"], row["node_list"]) == ("COMPLETED", 1, "bnode[1-2]"), row
        assert sacct_rows("-j", row["job_id"])[row["job_id"]] == ["COMPLETED", "0:0", "2"]
        result = json.loads((out / "jobs" / name / "allreduce.json").read_text())
        assert result["launcher"] == f"slurm-{name.split('-')[2]}" and result["world_size"] == 2
        assert result["environment"]["hosts"] == ["bnode1", "bnode2"]
        assert result["environment"]["variables"]["SLURM_JOB_ID"] == row["job_id"]
        samples = telemetry.read(out / "jobs" / name)
        assert samples is not None and sorted(samples.hosts) == ["bnode1", "bnode2"], name
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(set(summary["job"])) == JOBS and set(summary["status"]) == {"COMPLETED"}
    assert sorted(summary["size_bytes"].unique()) == [64 << 10, 256 << 10, 1 << 20]
    assert (summary["busbw_gbps"] > 0).all() and (summary["wrong"] == 0).all()
