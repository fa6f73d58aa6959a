"""Submitting to Slurm cannot surprise (docs/concepts/cost.md): no profile, no submission; a sweep above
the profile's confirm_above_node_hours is asked about at a terminal and refused without one
unless --yes; and a profile's site keys (hostlists, srun options, its time limit) reach the real
testbed's jobs."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, SLURM_ENV, SWEEPS, bench, sacct_rows, start_sweep

pytestmark = pytest.mark.slow
PROFILE = SWEEPS / "clusters" / "testbed.yaml"
TINY = """name: tiny
device: cpu
backend: gloo
nodes: [2]
gpus_per_node: [1]
launchers: [srun]
env: {OMP_NUM_THREADS: "1"}
sample_s: 0
workloads:
  allreduce: {min_bytes: 1K, max_bytes: 64K, step_factor: 8, iters: 3, warmup_iters: 1, link_bytes: 0}
"""
SITE = """
sbatch_options:
  - --exclude=bnode[1-2]
srun_options: [--cpu-bind=none]
time_limit_min: 3
confirm_above_node_hours: 0
"""


def at_terminal(args: list[str], answer: str, env: dict[str, str], timeout: float = 300) -> tuple[int, str]:
    """`bench ARGS` on a pseudo-terminal, typing `answer` when it asks [y/N]; (exit status, output)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: bench, its stdin and stdout the terminal
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "-m", "harness.cli", *args], {**os.environ, **env})
    output, asked = b"", False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child has gone and the terminal closed
                break
            if not chunk:
                break
            output += chunk
            if not asked and b"[y/N]" in output:
                os.write(fd, answer.encode() + b"\n")
                asked = True
        else:
            os.kill(pid, 9)
            pytest.fail(f"bench at a terminal did not finish in {timeout} s:\n{output.decode(errors='replace')}")
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace").replace("\r\n", "\n")


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    sweep, site = tmp_path / "tiny.yaml", tmp_path / "site.yaml"
    sweep.write_text(TINY)
    site.write_text(PROFILE.read_text() + SITE)
    return sweep, site


def test_without_a_profile_or_a_yes_nothing_is_submitted(testbed, tmp_path, files):
    sweep, site = files
    before = sacct_rows("-S", "now-1days")
    out = tmp_path / "run"
    env = {**SLURM_ENV, "BENCH_CLUSTER": ""}
    # sbatch is on the PATH, so Slurm is chosen, and it needs a profile
    r = bench(
        "sweep", str(sweep), "--out", str(out), env={k: v for k, v in env.items() if k != "BENCH_CLUSTER"}, check=False
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert "needs the cluster's profile: --cluster FILE or BENCH_CLUSTER=FILE" in r.stderr
    assert f"start from a copy of {SWEEPS.resolve() / 'clusters' / 'example.yaml'}" in r.stderr
    # BENCH_CLUSTER names it; the profile asks above 0 node-hours, and no terminal can answer
    r = bench("sweep", str(sweep), "--out", str(out), env={**SLURM_ENV, "BENCH_CLUSTER": str(site)}, check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert "cost: 1 job(s), at most 0.1 node-hours (0.1 GPU-hours) if each runs to its 3-min time limit" in r.stdout
    assert "no terminal to ask, so nothing was submitted: add --yes" in r.stderr
    # the testbed sweep on the testbed profile: 4.7 node-hours at its limit, above the default 4
    r = bench(
        "sweep", str(SWEEPS / "testbed.yaml"), "--cluster", str(PROFILE), "--out", str(out), env=SLURM_ENV, check=False
    )
    assert (
        r.returncode == 2
        and "12 job(s), up to 4.7 node-hours is above the profile's confirm_above_node_hours (4)" in r.stderr
    )
    # an empty BENCH_CLUSTER is a mistake, not "no profile"
    r = bench("sweep", str(sweep), "--out", str(out), env=env, check=False)
    assert r.returncode == 2 and "BENCH_CLUSTER is set but empty" in r.stderr
    assert not out.exists() and sacct_rows("-S", "now-1days") == before


def test_at_a_terminal_no_submits_nothing_and_yes_runs_on_the_profile_s_terms(testbed, tmp_path, files):
    """'n' leaves nothing; 'y' submits the one job, with the profile's hostlist, srun option and
    time limit, into a run directory under BENCH_RESULTS."""
    sweep, site = files
    before = sacct_rows("-S", "now-1days")
    env = {**SLURM_ENV, "BENCH_CLUSTER": str(site), "BENCH_RESULTS": str(tmp_path / "results")}
    status, output = at_terminal(["sweep", str(sweep)], "n", env)
    assert status == 2 and "submit 1 job(s), up to 0.1 node-hours? [y/N]" in output, output
    assert "not confirmed: nothing was submitted" in output
    assert not (tmp_path / "results").exists() and sacct_rows("-S", "now-1days") == before

    status, output = at_terminal(["sweep", str(sweep)], "y", env)
    assert status == 0, output
    (run,) = (tmp_path / "results").iterdir()
    assert run.name.startswith("tiny-")
    script = (run / "jobs" / "n2-g1-srun-default" / "job.sbatch").read_text()
    assert "#SBATCH --exclude=bnode[1-2]\n" in script and "#SBATCH --time=00:03:00\n" in script
    assert "--kill-on-bad-exit=1 --cpu-bind=none " in script
    table = json.loads((run / "jobs.json").read_text())["jobs"]
    (record,) = table.values()
    assert record["state"] == "COMPLETED"
    # Once under CI sacct first gave ['COMPLETED', 'bnode3', '']: a record slurmdbd made from the
    # job's end before the rest of it arrived (sacct prints an empty Timelimit for 0). Wait for
    # the time limit to be recorded, as wait_done waits for a final state.
    deadline = time.monotonic() + 60
    while True:
        rows = sacct_rows("-j", record["job_id"], fields="JobID,State,NodeList,Timelimit")
        if rows.get(record["job_id"], ["", "", ""])[2] or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert rows[record["job_id"]] == ["COMPLETED", "bnode[3-4]", "00:03:00"], rows
    assert set(sacct_rows("-S", "now-1days")) - set(before) == {record["job_id"]}


def test_a_job_that_cannot_see_its_directory_says_so(testbed, tmp_path, files):
    """What a node without the run directory does, for real: the job's directory removed while
    the job waits (--begin), so Slurm cannot open its log. Slurm says FAILED 0:53; bench says
    why, and warned at submission that /tmp is no place for a run directory."""
    sweep, site = files
    site.write_text(PROFILE.read_text() + "sbatch_options: [--begin=now+20]\n")
    out = tmp_path / "run"
    proc = start_sweep(sweep, out, "--executor", "slurm", "--cluster", str(site), "--yes", env=SLURM_ENV)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        table = json.loads((out / "jobs.json").read_text())["jobs"] if (out / "jobs.json").exists() else {}
        if any(r["job_id"] for r in table.values()):
            break
        time.sleep(0.5)
    shutil.rmtree(out / "jobs" / "n2-g1-srun-default")
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, output
    assert f"warning: the run directory {out} may not be visible to the compute nodes: it is under /tmp" in output
    (record,) = json.loads((out / "jobs.json").read_text())["jobs"].values()
    assert record["state"] == "FAILED", record
    assert (
        record["reason"].startswith("the job could not start on bnode")
        and (
            f"left no log at jobs/n2-g1-srun-default/slurm-{record['job_id']}.out: the compute nodes must see the run "
            f"directory {out} at the same path, on a shared filesystem"
        )
        in record["reason"]
    ), record["reason"]
