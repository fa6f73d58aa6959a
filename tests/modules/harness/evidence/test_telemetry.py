"""Per-node telemetry (docs/concepts/telemetry.md): the dmon parser against recorded nvidia-smi output, the
sampler as a real process (with a fake nvidia-smi that replays a recording), the bytes the
collectives account for, worked by hand, and the NIC cross-check's verdicts."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, bench

from harness.evidence import telemetry
from harness.present import plot

DMON = ROOT / "tests" / "fixtures" / "dmon"


def dmon_lines(name: str) -> list[str]:
    """What nvidia-smi printed: the fixture without its "##" header."""
    return [line for line in (DMON / name).read_text().splitlines() if not line.startswith("##")]


def parse(name: str) -> list[dict]:
    parser = telemetry.DmonParser()
    return [r for r in map(parser.feed, dmon_lines(name)) if r is not None]


def test_dmon_pucvmet_of_four_gpus():
    gpus = parse("pucvmet-4gpu.txt")
    assert [g["gpu"] for g in gpus] == [0, 1, 2, 3]
    assert gpus[0] == {
        "gpu": 0,
        "pwr": 111,
        "temp": 83,
        "sm": 25,
        "mem": 7,
        "enc": 0,
        "dec": 0,
        "mclk": 4513,
        "pclk": 1683,
        "pviol": 0,
        "tviol": 0,
        "fb": 11651,
        "bar1": 2,
        "sbecc": None,  # "-": not reported
        "dbecc": None,
        "pci": 0,
        "rxpci": 41,
        "txpci": 8,
    }
    assert [g["pwr"] for g in gpus] == [111, 111, 112, 86]
    assert [g["txpci"] for g in gpus] == [8, 14, 10, 5]


def test_dmon_default_columns_of_a_newer_driver():
    gpus = parse("default-1gpu.txt")
    assert [g["sm"] for g in gpus] == [5, 11, 3, 10, 75, 86, 99, 86, 85]
    assert {g["mtemp"] for g in gpus} == {None} and gpus[-1]["gtemp"] == 57 and gpus[-1]["pclk"] == 1740


def test_dmon_header_repeats_and_odd_lines():
    parser = telemetry.DmonParser()
    lines = dmon_lines("default-1gpu.txt")
    out = [parser.feed(x) for x in [*lines[:3], "", "garbage line", *lines[:2], "    0   12    40"]]
    assert [o["sm"] if o else None for o in out] == [None, None, 5, None, None, None, None, None]


@pytest.fixture
def fake_smi(tmp_path):
    """A `nvidia-smi` that records its arguments and prints a recorded dmon output, then waits
    like dmon does until it is ended."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    out = "\n".join(dmon_lines("pucvmet-4gpu.txt"))
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/smi-args\ncat <<"EOF"\n{out}\nEOF\nexec sleep 60\n')
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def test_sampler_records_counters_gpus_and_its_end(tmp_path, fake_smi):
    folder = tmp_path / "jobs" / "j" / telemetry.DIR
    env = {**os.environ, "PATH": f"{fake_smi}:{os.environ['PATH']}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.telemetry", "sample", str(folder), "--interval-s=0.2"], cwd=ROOT, env=env
    )
    host = next(iter(folder.glob(f"*{telemetry.SAMPLES}")), None) if folder.exists() else None
    deadline = time.monotonic() + 20
    while host is None and time.monotonic() < deadline:
        time.sleep(0.05)
        host = next(iter(folder.glob(f"*{telemetry.SAMPLES}")), None) if folder.exists() else None
    assert host is not None and telemetry.wait_for_first_sample(host)
    telemetry.mark(folder, "allreduce", "start")
    time.sleep(1.0)
    telemetry.mark(folder, "allreduce", "end")
    proc.send_signal(signal.SIGUSR1)  # what the batch script sends through srun
    assert proc.wait(timeout=20) == 0
    assert (tmp_path / "smi-args").read_text().split() == ["dmon", "-s", "pucvmet", "-d", "1"]

    tele = telemetry.read(tmp_path / "jobs" / "j")
    assert tele is not None and len(tele.hosts) == 1
    (h,) = tele.hosts.values()
    assert h.interval_s == 0.2 and len(h.samples) >= 5
    start, end = tele.phases["allreduce"]
    assert 0.9 < end - start < 5
    before, after = telemetry.bracket(h.samples, start, end)
    assert before["t"] <= start and after["t"] >= end  # the stop signal took a last sample
    assert "lo" in h.samples[0]["net"] and h.samples[0]["mem"]["total"] > 0
    assert [g["gpu"] for g in h.gpus] == [0, 1, 2, 3] and h.gpus[3]["pwr"] == 86
    records = [json.loads(x) for x in host.read_text().splitlines()]
    assert records[0]["kind"] == "start" and records[-1]["kind"] == "end"
    assert h.overhead is not None and 0 <= h.overhead < 0.5
    rates = telemetry.series(h)
    assert len(rates["t"]) == len(h.samples) - 1
    # /proc/stat counts in ticks of 10 ms (USER_HZ, proc(5)): the stop signal's sample may come a
    # few ms after the last regular one, with no tick between, and that interval's share is
    # unknown (NaN, a gap in the plot). Every other share is within 0-100%.
    shares = [c for c in rates["cpu_pct"] if not math.isnan(c)]
    assert len(shares) >= len(rates["cpu_pct"]) - 1 and all(0 <= c <= 100 for c in shares), rates["cpu_pct"]

    # the report's timeline draws the GPUs dmon saw beside the node's CPU, over the workload
    made = plot.timeline_figure("j", tele)
    assert made is not None
    fig, points = made
    # a share reads from 0: a CPU 98.5-100% busy was once drawn across the whole panel
    for ax in fig.axes:
        if ax.get_ylabel().endswith("%"):
            assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 100, (ax.get_ylabel(), ax.get_ylim())
    gpu = points[points["metric"] == "GPU SM %"]
    assert sorted(gpu["series"]) == [f"{h.host} gpu{i}" for i in range(4)] and sorted(gpu["y"]) == [18, 18, 24, 25]
    # one point per known share: an interval without a tick (above) is a gap, not a point
    assert (points["metric"] == "CPU busy %").sum() == len(shares) and set(points["plot"]) == {"timeline"}


def test_cpu_share_stays_within_0_and_1_when_iowait_goes_down():
    """/proc/stat's iowait may decrease (proc(5)); over a 0.1 s interval a drop of 2 jiffies
    against 3 busy ones read as 300% busy, and failed the sampler's test under CI."""
    a = {"cpu": [903485, 2, 208266, 2544698, 4247, 0, 6, 0]}
    b = {"cpu": [903487, 2, 208267, 2544698, 4245, 0, 6, 0]}
    assert telemetry.cpu_busy(a, b) == 1.0  # 3 busy jiffies, none idle
    c = {"cpu": [903488, 2, 208267, 2544701, 4245, 0, 6, 0]}
    assert telemetry.cpu_busy(b, c) == 0.25


def test_a_torn_last_line_is_skipped(tmp_path):
    folder = tmp_path / telemetry.DIR
    folder.mkdir()
    good = {"kind": "sample", "t": 1.0, "cpu": [1] * 8, "mem": {}, "net": {"eth0": [0, 0, 0, 0]}, "ib": {}}
    (folder / f"n1{telemetry.SAMPLES}").write_text(json.dumps(good) + '\n{"kind":"sample","t":2.0,"cpu"')
    tele = telemetry.read(tmp_path)
    assert tele is not None and len(tele.hosts["n1"].samples) == 1


def all_reduce_result(hosts: list[str], sizes: list[int], interfaces: list[str]) -> dict:
    """An all_reduce result as benchmarks/allreduce.py writes it, reduced to what the check reads."""
    return {
        "params": {
            "collectives": ["all_reduce"],
            "iters": 10,
            "warmup_iters": 3,
            "check_iters": 1,
            "out_of_place": True,
            "link_bytes": 4 * 2**20,
            "link_iters": 5,
        },
        "rows": [{"collective": "all_reduce", "size_bytes": s} for s in sizes],
        "environment": {"ranks": [{"rank": r, "hostname": h} for r, h in enumerate(hosts)]},
        "transport": {
            "source": "sockets",
            "ranks": [{"rank": r, "host": h, "interfaces": interfaces} for r, h in enumerate(hosts)],
        },
    }


def test_cross_node_bytes_worked_by_hand():
    """2 nodes x 2 ranks, all_reduce of 1M and 4M, 3 warmup + 10 timed + 1 check calls, in place
    and out of place: 28 calls of each size. Each rank sends 2(n-1)/n = 1.5 x size per call to the
    next rank; ranks 1 -> 2 and 3 -> 0 cross nodes, one edge out of each node:
    28 x 1.5 x 5 MiB = 220,200,960 bytes. The link probe sends 4 MiB to each other rank in 6
    passes (one warmup); each node's two ranks have two peers on the other node:
    2 x 2 x 6 x 4 MiB = 100,663,296. Together 320,864,256 bytes per node."""
    result = all_reduce_result(["a", "a", "b", "b"], [2**20, 4 * 2**20], ["eth0", "lo"])
    assert telemetry.cross_node_bytes(result) == {"a": 320_864_256, "b": 320_864_256}
    assert telemetry.nic_interfaces(result) == {"a": ("eth0",), "b": ("eth0",)}
    one_node = all_reduce_result(["a", "a"], [2**20], ["lo"])
    assert telemetry.cross_node_bytes(one_node) == "one node: no traffic crosses a NIC"
    other = {**result, "params": {**result["params"], "collectives": ["all_reduce", "all_gather"]}}
    assert telemetry.cross_node_bytes(other) == (
        "only all_reduce, all_to_all, alltoallv, sendrecv are accounted for, not all_gather"
    )


def test_cross_node_bytes_of_all_to_all_and_sendrecv_worked_by_hand():
    """The same 2 nodes x 2 ranks and calls, with all_to_all and sendrecv rows of 4 MiB beside
    the all_reduce's. Neither has an in-place form, so 14 calls each. all_to_all: each rank sends
    size/4 = 1 MiB to each of the two ranks on the other node, 2 MiB a call, 4 MiB a node:
    14 x 4 MiB = 58,720,256. sendrecv: rank 1 sends to rank 2 and rank 3 to rank 0, 4 MiB a call
    out of each node: 58,720,256. alltoallv over 4 ranks (10 units of 0.4 MiB, rank s sends
    1 + (d - s) mod 4 units to d): node a's ranks 0 and 1 send 3 + 4 and 2 + 3 units to ranks 2
    and 3, 12 units or 4.8 MiB a call; node b's ranks 2 and 3 send 3 + 4 and 2 + 3 to ranks 0
    and 1, also 12: 14 x 12 x 0.4 MiB = 70,464,307.2."""
    result = all_reduce_result(["a", "a", "b", "b"], [2**20, 4 * 2**20], ["eth0", "lo"])
    base = telemetry.cross_node_bytes(result)["a"]
    for name, more in (("all_to_all", 58_720_256), ("sendrecv", 58_720_256), ("alltoallv", 70_464_307)):
        mixed = {
            **result,
            "params": {**result["params"], "collectives": ["all_reduce", name]},
            "rows": [*result["rows"], {"collective": name, "size_bytes": 4 * 2**20}],
        }
        assert telemetry.cross_node_bytes(mixed) == {"a": base + more, "b": base + more}, name


def write_job(job: Path, sent: dict[str, int]) -> None:
    """A job directory's telemetry in the sampler's format: two samples per host 10 s apart, the
    second `sent` bytes further on eth0, and the workload marked between them."""
    folder = job / telemetry.DIR
    folder.mkdir(parents=True)
    for host, n in sent.items():
        lines = [{"kind": "start", "t": 100.0, "host": host, "interval_s": 1.0}]
        for t, tx in ((100.0, 5_000), (110.0, 5_000 + n)):
            net = {"lo": [0, 0, 0, 0], "eth0": [tx, 10, tx, 10]}
            lines.append({"kind": "sample", "t": t, "cpu": [1] * 8, "mem": {}, "net": net, "ib": {}, "self_cpu_s": 0.1})
        (folder / f"{host}{telemetry.SAMPLES}").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (folder / telemetry.PHASES).write_text(
        '{"key":"allreduce","event":"start","t":101.5}\n{"key":"allreduce","event":"end","t":108.25}\n'
    )


@pytest.mark.parametrize(
    ("factor", "agrees"), [(1.004, True), (1.0, True), (1.14, True), (1.3, False), (0.5, False), (0.0, False)]
)
def test_the_nic_check_flags_what_the_all_reduce_cannot_account_for(tmp_path, factor, agrees):
    result = all_reduce_result(["a", "a", "b", "b"], [2**20, 4 * 2**20], ["eth0", "lo"])
    want = 320_864_256
    write_job(tmp_path, {"a": round(want * 1.004), "b": round(want * factor)})
    tele = telemetry.read(tmp_path)
    assert tele is not None
    columns, disagrees = telemetry.nic_columns(result, "allreduce", tele)
    if agrees:
        assert disagrees is None and columns["nic_check"].startswith("agrees: ")
        assert columns["nic_bytes_ratio"] == pytest.approx(max(1.004, factor) if factor >= 1 else factor, rel=1e-6)
    else:
        assert disagrees == columns["nic_check"]
        assert f"b eth0 sent {want * factor / 1e6:.1f} MB against 320.9 MB" in disagrees
        assert "a eth0" not in disagrees and columns["nic_bytes_ratio"] == pytest.approx(factor, rel=1e-6)


def test_the_nic_check_says_why_it_cannot_judge(tmp_path):
    result = all_reduce_result(["a", "b"], [2**20], ["eth0"])
    write_job(tmp_path, {"a": 1})  # no samples of b
    tele = telemetry.read(tmp_path)
    assert tele is not None
    columns, disagrees = telemetry.nic_columns(result, "allreduce", tele)
    assert disagrees is None and columns == {
        "nic_bytes_ratio": None,
        "nic_check": "not judged: no samples of b's NICs around allreduce",
    }
    small = all_reduce_result(["a", "b"], [1024], ["eth0"])
    small["params"]["link_bytes"] = 0
    write_job(tmp_path / "small", {"a": 1, "b": 1})
    columns, _ = telemetry.nic_columns(small, "allreduce", telemetry.read(tmp_path / "small"))  # type: ignore[arg-type]
    assert columns["nic_check"] == "not judged: under 64 MiB per node, too little to judge"
    nccl = {**result, "transport": {"source": "nccl_log"}}
    assert telemetry.check_nics(nccl, "allreduce", tele) == "only gloo's socket traffic is accounted for"


def test_infiniband_port_counters_are_read_in_bytes(tmp_path):
    """No HCA here, so a sysfs tree in the kernel's layout (Documentation/ABI/stable/sysfs-class-
    infiniband): port_xmit_data and port_rcv_data count octets divided by 4."""
    for dev, port, words in (("mlx5_0", "1", 1000), ("mlx5_1", "1", 7)):
        counters = tmp_path / "class" / "infiniband" / dev / "ports" / port / "counters"
        counters.mkdir(parents=True)
        for name, value in (
            ("port_rcv_data", words),
            ("port_rcv_packets", 3),
            ("port_xmit_data", 2 * words),
            ("port_xmit_packets", 5),
        ):
            (counters / name).write_text(f"{value}\n")
    assert telemetry.read_ib(tmp_path) == {"mlx5_0:1": [4000, 3, 8000, 5], "mlx5_1:1": [28, 3, 56, 5]}
    assert telemetry.read_ib(tmp_path / "none") == {}
    a = {"ib": {"mlx5_0:1": [0, 0, 100, 0]}, "net": {"eth0": [0, 0, 10, 0]}}
    b = {"ib": {"mlx5_0:1": [0, 0, 8100, 0]}, "net": {"eth0": [0, 0, 30, 0]}}
    assert telemetry.sent(a, b, ["mlx5_0:1", "eth0"]) == 8020 and telemetry.sent(a, b, ["ib0"]) is None


def test_cross_node_bytes_of_each_group_worked_by_hand():
    """The same 2 nodes x 2 ranks and 28 calls a size, all_reduce rows of 4 MiB on each group.
    intra, ranks [0, 1] and [2, 3]: a ring inside each node, nothing crosses a NIC. inter, ranks
    [0, 2] and [1, 3] at once: each rank sends 2(2-1)/2 x 4 MiB = 4 MiB a call to its partner on
    the other node, two ranks a node: 28 x 2 x 4 MiB = 234,881,024 bytes more per node. Groups
    that do not divide the ranks between them are refused, not counted."""
    result = all_reduce_result(["a", "a", "b", "b"], [2**20, 4 * 2**20], ["eth0", "lo"])
    base = telemetry.cross_node_bytes(result)["a"]
    groups = {"world": [[0, 1, 2, 3]], "intra": [[0, 1], [2, 3]], "inter": [[0, 2], [1, 3]]}
    for group, more in (("intra", 0), ("inter", 234_881_024)):
        grouped = {
            **result,
            "params": {**result["params"], "groups": groups},
            "rows": [*result["rows"], {"collective": "all_reduce", "group": group, "size_bytes": 4 * 2**20}],
        }
        assert telemetry.cross_node_bytes(grouped) == {"a": base + more, "b": base + more}, group
    bad = {**result, "params": {**result["params"], "groups": {"inter": [[0, 2], [1, 1]]}}}
    assert "inter groups [[0, 2], [1, 1]] do not divide the ranks 0..3" in telemetry.cross_node_bytes(bad)


def test_the_sampler_names_the_faults_of_the_workload_they_came_in(tmp_path):
    """A real sampler over a sysfs tree of one IB port (BENCH_SYSFS_ROOT, the kernel's format) and
    a `dmesg` that prints the log the test writes: the port's symbol_error rises and a GPU logs an
    Xid while "allreduce" runs, nothing while "synthetic" does. Each workload is told its own:
    the port and the GPU for the first, none for the second; a job whose sampler left no end
    reading cannot be judged."""
    from harness.evidence import faults

    counters = tmp_path / "sys" / "class" / "infiniband" / "mlx5_3" / "ports" / "1" / "counters"
    counters.mkdir(parents=True)
    for name in faults.IB_ERRORS:
        (counters / name).write_text("0\n")
    kernel_log = tmp_path / "kernel.log"
    kernel_log.write_text("[    0.000000] Linux version 6.1.0\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dmesg").write_text(f"#!/bin/sh\ncat {kernel_log}\n")
    (bin_dir / "dmesg").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", faults.SYSFS_ENV: str(tmp_path / "sys")}
    folder = tmp_path / "jobs" / "j" / telemetry.DIR
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.telemetry", "sample", str(folder), "--interval-s=0.2"], cwd=ROOT, env=env
    )
    host = telemetry.host_file(folder, socket.gethostname())
    assert telemetry.wait_for_first_sample(host, alive=lambda: proc.poll() is None)
    telemetry.mark(folder, "allreduce", "start")
    time.sleep(0.5)
    (counters / "symbol_error").write_text("9\n")
    uptime = faults.uptime_s()
    kernel_log.write_text(
        kernel_log.read_text() + f"[{uptime:12.6f}] NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus.\n"
    )
    time.sleep(0.5)
    telemetry.mark(folder, "allreduce", "end")
    time.sleep(0.5)  # more than the sampler's interval: the rise is read before the next workload
    telemetry.mark(folder, "synthetic", "start")
    time.sleep(0.5)
    telemetry.mark(folder, "synthetic", "end")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0

    tele = telemetry.read(tmp_path / "jobs" / "j")
    assert tele is not None
    (h,) = tele.hosts.values()
    assert h.watch is not None and h.watch.start is not None and h.watch.end is not None
    assert [c["mlx5_3/1"]["symbol_error"] for _, c in h.watch.changes] == [9]  # one record, of the rise
    assert telemetry.fault_words(tele, "allreduce") == (
        f"{h.host} mlx5_3/1: symbol_error rose from 0 to 9; "
        f"{h.host} GPU 0000:b3:00: Xid 79 (GPU has fallen off the bus.)"
    )
    assert telemetry.fault_words(tele, "synthetic") == "none on 1 node(s)"
    assert telemetry.fault_words(tele, "transformer") is None  # no marks: it did not run
    # the faults alone, the samples skipped unread, say the same
    only = telemetry.read(tmp_path / "jobs" / "j", faults_only=True)
    assert only is not None and only.hosts[h.host].samples == []
    assert telemetry.fault_words(only, "allreduce") == telemetry.fault_words(tele, "allreduce")

    lines = host.read_text().splitlines()
    host.write_text("\n".join(x for x in lines if '"when":"end"' not in x) + "\n")  # a sampler killed hard
    assert telemetry.fault_words(telemetry.read(tmp_path / "jobs" / "j"), "synthetic") == (
        f"not judged: {h.host}: no reading at the job's end"
    )


def test_a_sweeps_summary_names_the_port_whose_errors_rose_while_its_all_reduce_ran(tmp_path):
    """A local sweep of one 2-node job whose sysfs (BENCH_SYSFS_ROOT) has one IB port: once the
    all-reduce's start is marked, its symbol_error rises. The summary's rows of the all-reduce
    name the port and its node in hardware_faults, and `bench sweep` warns of it."""
    import pandas as pd
    from conftest import start_sweep

    from harness.evidence import faults

    counters = tmp_path / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters"
    counters.mkdir(parents=True)
    for name in faults.IB_ERRORS:
        (counters / name).write_text("3\n")
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        "name: f\ndevice: cpu\nbackend: gloo\nnodes: [2]\ngpus_per_node: [1]\nlaunchers: [torchrun]\n"
        "env: {OMP_NUM_THREADS: '1'}\ntimeout_s: 120\ntime_limit_min: 5\n"
        "workloads:\n  allreduce: {min_bytes: 1M, max_bytes: 4M, iters: 40, warmup_iters: 2, link_bytes: 0}\n"
    )
    out = tmp_path / "run"
    running = start_sweep(sweep, out, "--executor", "local", env={faults.SYSFS_ENV: str(tmp_path / "sys")})
    phases = out / "jobs" / "n2-g1-torchrun-default" / telemetry.DIR / telemetry.PHASES
    deadline = time.monotonic() + 120
    while running.poll() is None and time.monotonic() < deadline:
        if phases.is_file() and '"event":"start"' in phases.read_text():
            (counters / "link_downed").write_text("4\n")
            break
        time.sleep(0.05)
    said, _ = running.communicate(timeout=300)
    assert running.returncode == 0, said
    rows = pd.read_csv(out / "summary.csv")
    (words,) = set(rows["hardware_faults"])
    assert words == f"{socket.gethostname()} mlx5_0/1: link_downed rose from 3 to 4", words
    assert f"n2-g1-torchrun-default allreduce: hardware faults while it ran: {words}" in said, said
    bench("report", str(out))
    assert f"<li>allreduce: {words}</li>" in (out / "report.html").read_text()
