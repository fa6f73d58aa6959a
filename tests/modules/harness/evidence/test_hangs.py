"""Hang attribution (docs/guides/hangs.md): real processes stopped with SIGSTOP, real faulthandler
dumps from ranks blocked in gloo, and the words that name the rank that held the others."""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import bench, left_in, stall_sweep, start_sweep, stop_a_rank

from harness.evidence import hangs
from harness.evidence.hangs import Rank


def test_the_state_of_a_stopped_process_is_read_from_proc():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert hangs.process_state(child.pid) in ("S", "R", "D")  # running, asleep, or loading
        os.kill(child.pid, signal.SIGSTOP)
        for _ in range(50):
            if hangs.process_state(child.pid) == "T":
                break
            time.sleep(0.02)
        assert hangs.process_state(child.pid) == "T"
    finally:
        child.kill()
        child.wait()
    assert hangs.process_state(child.pid) is None  # gone


@pytest.mark.parametrize(
    ("ranks", "words"),
    [
        (
            [Rank(0, "n1", 10, "all_reduce 4M", 0, "S", "all_reduce"), Rank(1, "n2", 11, "all_reduce 4M", 0, "T")]
            + [Rank(r, f"n{r + 1}", 10 + r, "all_reduce 4M", 0, "S", "all_reduce") for r in (2, 3)],
            "rank 1 on n2 is stopped (state T) in all_reduce 4M; ranks 0, 2, 3 wait in all_reduce (all_reduce 4M)",
        ),
        (  # nobody stopped: the rank left behind in an earlier phase is named first
            [Rank(0, "n1", 10, "step 12", 0, "S", "all_reduce"), Rank(1, "n2", 11, "step 11", 0, "R", "forward")],
            "rank 1 on n2 waits in forward (step 11); rank 0 on n1 waits in all_reduce (step 12)",
        ),
        (
            [Rank(0, "n1", 10, "all_reduce 1M", 0, "S", "all_reduce"), Rank(1, "n2", 11, "all_reduce 1M", 0, None)],
            "rank 1 on n2 is gone in all_reduce 1M; rank 0 on n1 waits in all_reduce (all_reduce 1M)",
        ),
    ],
)
def test_the_odd_rank_is_named_in_words(ranks, words):
    assert hangs.attribute(ranks, len(ranks)) == words


def test_a_rank_that_never_reported_is_named():
    assert hangs.attribute([Rank(0, "n1", 10, "joining the process group", 0, "S")], 2).startswith(
        "rank 1 never reported progress; rank 0 on n1 is at joining the process group"
    )


def test_one_stopped_rank_of_8192_is_named_and_the_rest_in_spans(tmp_path):
    """1,024 nodes of 8: the attribution reads 8,192 progress records and names the one rank
    stopped; the others are one span each side of it, not 8,191 numbers."""
    world, stopped = 8192, 4099
    (tmp_path / "progress").mkdir()
    for r in range(world):
        phase = "all_reduce 256M" if r == stopped else "all_reduce 512M"
        record = {"rank": r, "host": f"gpu{r // 8:04d}", "pid": 1000 + r, "phase": phase, "n": 30, "t": 1.0}
        (tmp_path / "progress" / f"allreduce.rank{r}.json").write_text(json.dumps(record))

    def probe(ranks):
        for r in ranks:
            r.state = "T" if r.rank == stopped else "S"

    why, ranks, _ = hangs.diagnose(tmp_path / "progress", "allreduce", world, probe=probe, wait_s=0, flight_s=0)
    assert len(ranks) == world
    assert why == (
        "rank 4099 on gpu0512 is stopped (state T) in all_reduce 256M; ranks 0-4098, 4100-8191 are at all_reduce 512M; "
        "flight recorder: no rank dumped it (a stopped or dead rank cannot; gloo's recorder needs torch 2.8 or later)"
    )
    # nobody stopped, one rank behind: it is named first, by itself
    for r in ranks:
        r.state = "S"
    assert hangs.attribute(ranks, world) == (
        "rank 4099 on gpu0512 is at all_reduce 256M; ranks 0-4098, 4100-8191 are at all_reduce 512M"
    )
    # a node that never reported: its 8 ranks in one span
    assert hangs.attribute(ranks[:8] + ranks[16:], world).startswith("ranks 8-15 never reported progress; ")


def test_a_stopped_rank_of_a_local_job_is_named(tmp_path):
    """A local job of 2 emulated nodes: rank 1 is stopped (SIGSTOP) in the all-reduce. The job
    ends within the stall limit, and its reason names rank 1 as stopped and rank 0 as waiting in
    all_reduce, from rank 0's own stack."""
    out = tmp_path / "run"
    sweep_proc = start_sweep(stall_sweep(tmp_path / "s.yaml", nodes=2, stall_s=6), out, "--executor", "local")
    progress = out / "jobs" / "n2-g1-torchrun-default" / "progress"
    stopped = stop_a_rank(progress, sweep_proc, lambda record: record["rank"] == 1, timeout=120)
    stopped_at = time.monotonic() if stopped else None
    output, _ = sweep_proc.communicate(timeout=180)
    took = time.monotonic() - stopped_at if stopped_at else None
    assert took is not None, output
    print(f"\n{output}\nended {took:.1f} s after the SIGSTOP")
    assert sweep_proc.returncode == 1, output
    # torchrun's workers run in sessions of their own: the stopped rank is ended with the rest
    assert left_in(out) == []
    hang = json.loads((out / "jobs" / "n2-g1-torchrun-default" / "hang-allreduce.json").read_text())
    host = os.uname().nodename
    assert hang["reason"].startswith(f"rank 1 on {host} is stopped (state T) in all_reduce"), hang
    # where rank 0 waits is read from its stack: the all-reduce, or the barrier before the timed
    # calls when rank 1 was stopped in the warm-up (benchmarks/timing.py, time_calls)
    assert re.search(rf"rank 0 on {host} waits in (all_reduce|barrier) \(all_reduce 1M\)", hang["reason"]), hang
    # rank 0 dumped its flight recorder when asked; the stopped rank 1 could not
    recorded = hang["flight"]
    assert (recorded["dumped"], recorded["entered"]) == ([0], [0]), recorded
    assert recorded["stuck"]["name"] in ("gloo:all_reduce", "gloo:barrier"), recorded
    assert recorded["analyser"] == ["cannot decide: no dump from ranks 1"], recorded
    words = (
        f"; flight recorder: rank 0 entered {recorded['stuck']['text']} and did not complete it; no dump from rank 1; "
        "PyTorch's analyser: cannot decide: no dump from ranks 1"
    )
    assert hang["reason"].endswith(words), hang
    assert took < 6 + 30  # the stall limit, a look a second, the stacks, the dump, the analyser, the kill
    table = json.loads((out / "jobs.json").read_text())
    job = table["jobs"]["n2-g1-torchrun-default"]
    assert job["state"] == "FAILED" and "made no progress for 6 s: rank 1 on" in job["reason"]
    assert job["reason"].endswith(words), job["reason"]
    status = bench("status", str(out)).stdout
    assert "is stopped (state T)" in status
    bench("report", str(out))
    assert html.escape(words.removeprefix("; ")) in (out / "report.html").read_text()


def test_an_all_reduce_of_another_size_is_read_from_the_flight_recorder(tmp_path):
    """Rank 1 of a local job calls its fifth all-reduce with half the tensor (the test's fault,
    put in by a sitecustomize on PYTHONPATH, not a bench flag): gloo aborts rank 1, rank 0's
    call raises and it dumps its record. The job's reason, and the report's, name the
    all-reduce rank 0 entered, its sequence number and size, and rank 1 as the one without a
    dump."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(
        "import os\n"
        "if os.environ.get('RANK') == '1' and os.environ.get('BENCH_JOB'):\n"
        "    import torch.distributed as dist\n"
        "    real, calls = dist.all_reduce, []\n"
        "    def all_reduce(tensor, *args, **kwargs):\n"
        "        calls.append(1)\n"
        "        if len(calls) == 5:\n"
        "            tensor = tensor.flatten()[: tensor.numel() // 2].clone()\n"
        "        return real(tensor, *args, **kwargs)\n"
        "    dist.all_reduce = all_reduce\n"
    )
    sweep = stall_sweep(tmp_path / "s.yaml", nodes=2, stall_s=60)
    out = tmp_path / "run"
    env = {"PYTHONPATH": os.pathsep.join(filter(None, (str(inject), os.environ.get("PYTHONPATH"))))}
    r = bench("sweep", str(sweep), "--executor", "local", "--out", str(out), check=False, timeout=300, env=env)
    assert r.returncode == 1, r.describe()
    job = json.loads((out / "jobs.json").read_text())["jobs"]["n2-g1-torchrun-default"]
    assert job["state"] == "FAILED" and job["reason"].startswith("allreduce failed (agent exit codes"), job
    # the aborted rank's own line, not rank 0's reset connection
    assert "gloo::EnforceNotMet: [enforce fail at" in job["reason"] and "Connection reset" not in job["reason"], job
    # gloo's record of the call that raised reads it as ended or as not completed, by the timing
    # of rank 1's abort (both seen on this machine: "last entered ..., recorded as ended", and
    # "entered ... and did not complete it"); either names rank 0's all-reduce, its number and size
    entered = (
        r"flight recorder: rank 0 (?:last )?entered gloo:all_reduce #(\d+) \((\d+) Float\)"
        r"(?:, recorded as ended| and did not complete it)"
    )
    found = re.search(entered, job["reason"])
    assert found and int(found[1]) >= 5 and int(found[2]) * 4 in (2**20, 2**21, 2**22), job["reason"]
    assert job["reason"].endswith("; no dump from rank 1; PyTorch's analyser: cannot decide: no dump from ranks 1"), job
    bench("report", str(out))
    assert found[0] in (out / "report.html").read_text()


def test_a_stopped_rank_in_a_later_turn_of_a_launch_is_named(tmp_path):
    """A gloo job's workloads share a launch (benchmarks/sequence.py): rank 1 stopped in the
    second, synthetic ResNet's measured steps. The stall watch has followed the turn: the
    all-reduce before it completed, the hang record and the reason are the second's."""
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        "name: h\ndevice: cpu\nbackend: gloo\nnodes: [2]\ngpus_per_node: [1]\nlaunchers: [torchrun]\n"
        "env: {OMP_NUM_THREADS: '1'}\ntimeout_s: 120\nstall_s: 6\ntime_limit_min: 5\nworkloads:\n"
        "  allreduce: {min_bytes: 1K, max_bytes: 4K, iters: 2, warmup_iters: 1, link_bytes: 0}\n"
        "  synthetic: {model: resnet18, image_size: 32, batch_size: 2, steps: 100000, warmup_steps: 1,"
        " scaling: [weak]}\n"
    )
    out = tmp_path / "run"
    sweep_proc = start_sweep(sweep, out, "--executor", "local")
    job_dir = out / "jobs" / "n2-g1-torchrun-default"
    pick = lambda record: record["rank"] == 1  # noqa: E731
    stopped = stop_a_rank(job_dir / "progress", sweep_proc, pick, timeout=120, key="synthetic-weak", phase="step")
    output, _ = sweep_proc.communicate(timeout=180)
    assert stopped is not None and sweep_proc.returncode == 1, output
    assert left_in(out) == []
    rec = json.loads((out / "jobs.json").read_text())["jobs"]["n2-g1-torchrun-default"]
    assert rec["runs"] == {"allreduce": "COMPLETED", "synthetic-weak": "FAILED"}, rec
    assert rec["reason"].startswith("synthetic-weak made no progress for 6 s: rank 1 on"), rec["reason"]
    hang = json.loads((job_dir / "hang-synthetic-weak.json").read_text())
    assert hang["reason"].startswith(f"rank 1 on {os.uname().nodename} is stopped (state T) in step"), hang
    assert not (job_dir / "hang-allreduce.json").exists() and (job_dir / "allreduce.json").exists()


def test_a_node_probe_reads_only_its_own_ranks(tmp_path):
    """`python -m harness.hangs probe`, as each node of a Slurm job runs it: the states of the
    ranks on this host, one JSON line each, and a stack asked of the one that can run; a rank on
    another host is left to that host's probe."""
    folder = tmp_path / "progress"
    folder.mkdir()
    host = os.uname().nodename
    code = (
        "import faulthandler, signal, sys, time; "
        "faulthandler.register(signal.SIGUSR2, file=open(sys.argv[1], 'w')); time.sleep(60)"
    )
    kids = [subprocess.Popen([sys.executable, "-c", code, str(folder / f"a.rank{r}.stack")]) for r in (0, 1)]
    try:
        time.sleep(1.0)  # both have registered their handler
        os.kill(kids[1].pid, signal.SIGSTOP)
        for r, (pid, where) in enumerate([(kids[0].pid, host), (kids[1].pid, host), (kids[0].pid, "elsewhere")]):
            record = {"rank": r, "host": where, "pid": pid, "phase": "all_reduce 1M", "t": time.time()}
            (folder / f"a.rank{r}.json").write_text(json.dumps(record))
        out = subprocess.run(
            [sys.executable, "-m", "harness.hangs", "probe", str(folder), "a"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        states = {d["rank"]: d["state"] for d in map(json.loads, out.splitlines())}
        assert states == {0: "S", 1: "T"}, out
        time.sleep(0.5)
        assert "File " in (folder / "a.rank0.stack").read_text()  # rank 0 was asked for its stack
        status = dict(line.split(":\t", 1) for line in Path(f"/proc/{kids[1].pid}/status").read_text().splitlines())
        assert int(status["ShdPnd"], 16) & (1 << (signal.SIGUSR2 - 1)) == 0  # the stopped rank was not asked
    finally:
        for k in kids:
            k.kill()
            k.wait()
