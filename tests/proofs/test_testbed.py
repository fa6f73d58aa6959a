"""The Slurm testbed itself (tests/testbed/testbed): a real Slurm 22.05 cluster of emulated
nodes (the session fixture `testbed` in conftest.py brings it up)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from conftest import NODES, STATE, SWEEPS, TESTBED, bench, run, slurm, wait_done

pytestmark = pytest.mark.slow


def test_nodes_are_distinct_hosts_with_emulated_gpus(testbed):
    info = slurm("sinfo", "-h", "-N", "-o", "%N %T %G").stdout.split("\n")
    assert sorted(line for line in info if line) == [f"bnode{k} idle gpu:4" for k in range(1, NODES + 1)]
    out = slurm(
        "srun",
        f"-N{NODES}",
        "--ntasks-per-node=1",
        "--gres=gpu:2",
        "bash",
        "-c",
        'echo "$(hostname) $SLURM_PROCID $SLURM_STEP_ID $CUDA_VISIBLE_DEVICES"',
        timeout=60,
    ).stdout
    rows = sorted(line.split() for line in out.splitlines())
    assert rows == [[f"bnode{k}", str(k - 1), "0", "0,1"] for k in range(1, NODES + 1)]


SITE_KEYS = """
sbatch_options: ["--exclude=bnode[3-4]", --begin=now]
srun_options: [--cpu-bind=none]
time_limit_min: 7
"""
CONTAINER = {
    "pyxis": "container: {engine: pyxis, image: 'nvcr.io#nvidia/pytorch:24.05-py3', mounts: ['/srv:/srv:ro']}\n",
    "apptainer": "container: {engine: apptainer, image: /srv/pytorch.sif, options: [--writable-tmpfs]}\n",
}


@pytest.mark.parametrize("variant", ["plain", "site", "pyxis", "apptainer"])
def test_every_generated_script_passes_sbatch_test_only(testbed, tmp_path, variant):
    """sbatch --test-only parses every #SBATCH line and checks the job against the cluster;
    it does not run the body, so the containers' srun and apptainer lines are checked by
    tests/modules/harness/executors/slurm/test_script.py (no container engine installs from the package registries)."""
    out = tmp_path / "run"
    profile = tmp_path / "p.yaml"
    extra = {"plain": "", "site": SITE_KEYS, **CONTAINER}[variant]
    profile.write_text((SWEEPS / "clusters" / "testbed.yaml").read_text() + extra)
    bench(
        "sweep",
        str(SWEEPS / "testbed.yaml"),
        "--max-nodes",
        str(2 if variant == "site" else NODES),
        "--executor",
        "slurm",
        "--cluster",
        str(profile),
        "--dry-run",
        "--out",
        str(out),
    )
    scripts = sorted(out.glob("jobs/*/job.sbatch"))
    # 1, 2, 4 nodes (1, 2 on the two nodes the site keys leave) x 2 launchers x 2 settings sets
    assert len(scripts) == (2 if variant == "site" else 3) * 2 * 2
    if variant == "site":
        assert all("#SBATCH --exclude=bnode[3-4]\n" in s.read_text() for s in scripts)
    for script in scripts:
        r = slurm("sbatch", "--test-only", str(script.relative_to(out)), cwd=out, check=False)
        assert r.returncode == 0 and "to start at" in r.stderr, r.describe()


@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_a_rendered_job_runs_across_nodes(testbed, tmp_path, launcher):
    """One generated script, submitted with sbatch from the run directory: the all-reduce runs
    on two emulated nodes and sacct records the job COMPLETED."""
    out = tmp_path / "run"
    bench(
        "sweep",
        str(SWEEPS / "testbed.yaml"),
        "--max-nodes",
        "2",
        "--executor",
        "slurm",
        "--cluster",
        str(SWEEPS / "clusters" / "testbed.yaml"),
        "--dry-run",
        "--out",
        str(out),
        "--set",
        "workloads.synthetic=false",
        "--set",
        "workloads.real=false",
        "--set",
        "workloads.allreduce.max_bytes=64K",
    )
    job = f"n2-g1-{launcher}-default"
    job_id = slurm("sbatch", "--parsable", f"jobs/{job}/job.sbatch", cwd=out).stdout.strip().split(";")[0]
    states = wait_done([job_id], timeout=300)
    log = out / "jobs" / job / f"slurm-{job_id}.out"
    assert states[job_id][:2] == ["COMPLETED", "0:0"], log.read_text()[-3000:]
    assert states[job_id][2] == "2"
    result = json.loads((out / "jobs" / job / "allreduce.json").read_text())
    assert result["environment"]["hosts"] == ["bnode1", "bnode2"]
    assert result["launcher"] == f"slurm-{launcher}" and result["world_size"] == 2 and result["nodes"] == 2
    assert all(row["wrong"] == 0 and row["busbw_gbps"] > 0 for row in result["rows"])
    assert result["environment"]["variables"]["GLOO_SOCKET_IFNAME"] == "eth0"
    assert result["environment"]["variables"]["SLURM_JOB_ID"] == job_id


XFER = """
import socket, sys, time
if sys.argv[1] == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 15555)); s.listen(1)
    c, _ = s.accept()
    while c.recv(1 << 20): pass
    c.sendall(b"ok")
else:
    data = b"x" * (4 << 20)
    for _ in range(100):  # the server may still be starting
        try:
            s = socket.create_connection((sys.argv[2], 15555), timeout=30); break
        except ConnectionRefusedError:
            time.sleep(0.1)
    t = time.perf_counter()
    s.sendall(data); s.shutdown(socket.SHUT_WR); s.recv(2)
    print(len(data) / (time.perf_counter() - t) / 1e6)
"""


def throughput_mb_s(src: str, dst: str) -> float:
    """MB/s of a 4 MiB TCP transfer from node `src` to node `dst` (testbed addresses only)."""
    k = dst.removeprefix("bnode")
    server = subprocess.Popen(["nsenter", f"--net=/run/netns/{dst}", "python3", "-c", XFER, "serve"])
    try:
        time.sleep(0.5)
        out = run(["nsenter", f"--net=/run/netns/{src}", "python3", "-c", XFER, "send", f"198.18.0.{k}"], timeout=60)
    finally:
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            raise
    return float(out.stdout)


def test_shape_throttles_one_node_and_clears(testbed):
    before = throughput_mb_s("bnode3", "bnode1")
    run([str(TESTBED), "shape", "--rate", "20mbit", "--node", "bnode3"])
    try:
        shaped = throughput_mb_s("bnode3", "bnode1")
        other = throughput_mb_s("bnode2", "bnode1")
    finally:
        run([str(TESTBED), "shape", "--clear"])
    after = throughput_mb_s("bnode3", "bnode1")
    # 20 Mbit/s is 2.5 MB/s; unshaped links here carry hundreds of MB/s
    assert shaped < 4 < 20 < min(before, other, after), (before, shaped, other, after)
    bad = run([str(TESTBED), "shape", "--rate", "fast; reboot"], check=False)
    assert bad.returncode == 2 and "--rate like 200mbit" in bad.stderr


@pytest.mark.run_last
def test_down_leaves_the_machine_as_found(testbed):
    """Last of the session: down, then check (the fixture's own down finds nothing to do)."""
    run([str(TESTBED), "down"], timeout=300)
    assert not STATE.exists()
    assert "bnode" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "bbr0" not in subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert "bench-testbed" not in Path("/etc/hosts").read_text()
    assert not subprocess.run(["pgrep", "-x", "slurmctld"], capture_output=True).stdout
