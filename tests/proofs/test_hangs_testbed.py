"""Hang attribution inside a Slurm job (docs/guides/hangs.md), on the testbed: a 4-node all-reduce in
which the rank on bnode3 is stopped with SIGSTOP. The job's own watcher sees the stall, probes
every node with `srun --overlap`, names the stopped rank and the ranks left waiting in
all_reduce, and ends the step well before gloo's process-group timeout (120 s) would. About 1
minute."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time

import pytest
from conftest import ON_TESTBED, SLURM_ENV, slurm, stall_sweep, start_sweep, stop_a_rank

pytestmark = pytest.mark.slow

JOB = "n4-g1-torchrun-default"
STALL_S = 6
TIMEOUT_S = 120  # gloo's own timeout: ending before it shows the watcher did it


def test_a_stopped_rank_of_a_slurm_job_is_named(testbed, tmp_path):
    out = tmp_path / "run"
    proc = start_sweep(stall_sweep(tmp_path / "s.yaml", 4, STALL_S, TIMEOUT_S), out, *ON_TESTBED, env=SLURM_ENV)
    stopped = None
    try:
        stopped = stop_a_rank(out / "jobs" / JOB / "progress", proc, lambda record: record["host"] == "bnode3", 300)
        stopped_at = time.monotonic()
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:  # the sweep did not end: take its job down with it
            proc.kill()
            slurm("scancel", f"--name=bench-{JOB}", check=False)
        if stopped:
            with contextlib.suppress(ProcessLookupError):
                gone = time.monotonic() + 30
                while time.monotonic() < gone:  # the job's end should have taken it; else do
                    os.kill(stopped["pid"], 0)
                    time.sleep(0.5)
                os.kill(stopped["pid"], signal.SIGKILL)
                pytest.fail(f"the stopped rank {stopped} outlived its job")
    assert stopped is not None, output
    took = time.monotonic() - stopped_at
    print(f"\n{output}\nended {took:.1f} s after the SIGSTOP")
    assert proc.returncode == 1, output
    rank = stopped["rank"]
    hang = json.loads((out / "jobs" / JOB / "hang-allreduce.json").read_text())
    assert hang["reason"].startswith(f"rank {rank} on bnode3 is stopped (state T) in all_reduce"), hang
    # each other rank waits in all_reduce or in the barrier before the timed calls (as in
    # tests/modules/harness/evidence/test_hangs.py); a rank that left the barrier before the stop waits in
    # all_reduce while the others still wait in the barrier: "ranks 0, 3 wait in barrier
    # (all_reduce 1M); rank 1 on bnode2 waits in all_reduce (all_reduce 1M)"
    waiting = re.findall(
        r"(?:ranks ([\d, ]+) wait|rank (\d+) on \S+ waits) in (?:all_reduce|barrier) \(all_reduce", hang["reason"]
    )
    named = sorted(int(r) for group, one in waiting for r in (group.split(", ") if group else [one]))
    assert named == [r for r in range(4) if r != rank], hang
    assert {r["host"] for r in hang["ranks"]} == {"bnode1", "bnode2", "bnode3", "bnode4"}
    assert took < TIMEOUT_S - 30, took  # the watcher ended it, not gloo's timeout
    table = json.loads((out / "jobs.json").read_text())["jobs"][JOB]
    assert table["state"] == "FAILED", table
    assert table["reason"].startswith(f"allreduce made no progress for {STALL_S} s: rank {rank} on bnode3"), table
    steps = slurm("sacct", "-j", table["job_id"], "-P", "-n", "--format=JobName,NodeList").stdout
    assert "bench-hang-probe|bnode[1-4]" in steps, steps  # the states came from a task on each node
