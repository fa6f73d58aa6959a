"""Per-node telemetry during a job (docs/concepts/telemetry.md): what each node's CPUs, memory, network
interfaces and GPUs did while the job's workloads ran, and whether the bytes its NIC counters
saw agree with what the all-reduce says it sent.

A sampler runs on every node of a job, from the job's start to its end: the local executor
starts one beside each job, a Slurm job's batch script one `srun --overlap` task per node
(`python -m harness.telemetry sample`). Every interval it appends one JSON line to
jobs/<job>/telemetry/<host>.samples.jsonl with the raw counters: /proc/stat's CPU jiffies,
/proc/meminfo, /proc/net/dev (the node's network namespace) and the InfiniBand port counters in
sysfs. Where `nvidia-smi` is on the PATH it also runs `nvidia-smi dmon -s pucvmet` and keeps each
GPU line. It reads the node's hardware faults before its first sample and after its last, and
the IB error counters at each sample where they changed (harness/evidence/faults.py). Whoever
runs the workloads marks each one's start and end in jobs/<job>/telemetry/phases.jsonl.
Counters, not rates, are kept: a rate is a difference of two samples, taken when the data is
read.

Only the standard library and the torch-free benchmarks/catalog.py: the sampler starts on every
node of every job, and reads a few small files per interval.

One file: the sampler that writes a sample and the reader that turns samples into rates and
the NIC cross-check share the sample's record field by field, and the sampler is started as
this module (`python -m harness.telemetry sample`) on nodes that may have only bench's code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.catalog import COLLECTIVES, WORLD, collective
from benchmarks.results import bounded_lines, open_regular
from harness.evidence import dcgm, faults
from harness.files import inside

DIR = "telemetry"  # jobs/<job>/telemetry/
PHASES = "phases.jsonl"
INTERVAL_S = 1.0
# /proc/stat's cpu line, in order (proc(5)); guest time is already counted in user and nice
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_IDLE = (CPU_FIELDS.index("idle"), CPU_FIELDS.index("iowait"))
# /proc/net/dev's columns kept: receive bytes and packets, transmit bytes and packets
NET_FIELDS = ("rx_bytes", "rx_packets", "tx_bytes", "tx_packets")
# sysfs IB port counters, in the same order. PortRcvData and PortXmitData count octets divided
# by 4 (InfiniBand Architecture Specification vol. 1, PortCounters; docs/concepts/telemetry.md).
_IB_COUNTERS = (("port_rcv_data", 4), ("port_rcv_packets", 1), ("port_xmit_data", 4), ("port_xmit_packets", 1))
LOOPBACK = "lo"  # not a NIC: it carries the machine's own traffic
_HOST_SAFE = re.compile(r"[^A-Za-z0-9._-]")


# --------------------------------------------------------------------------- reading the node


def read_cpu(proc: Path) -> list[int]:
    """The machine's CPU time so far, in clock ticks, as CPU_FIELDS."""
    with open(proc / "stat") as f:
        words = f.readline().split()
    if not words or words[0] != "cpu":
        raise ValueError(f"{proc / 'stat'} does not start with the cpu line")
    return [int(w) for w in words[1 : 1 + len(CPU_FIELDS)]]


def read_memory(proc: Path) -> dict[str, int]:
    """Total and available memory in bytes (/proc/meminfo prints kB, meaning KiB)."""
    want = {"MemTotal:": "total", "MemAvailable:": "available"}
    out: dict[str, int] = {}
    with open(proc / "meminfo") as f:
        for line in f:
            name, _, rest = line.partition(" ")
            if name in want:
                out[want[name]] = int(rest.split()[0]) * 1024
    return out


def read_net(proc: Path) -> dict[str, list[int]]:
    """Each interface's NET_FIELDS. /proc/net/dev is the reading process's network namespace."""
    out: dict[str, list[int]] = {}
    with open(proc / "net" / "dev") as f:
        for line in f:
            name, colon, rest = line.partition(":")
            if not colon or "|" in line:
                continue
            v = rest.split()
            if len(v) >= 10:
                out[name.strip()] = [int(v[0]), int(v[1]), int(v[8]), int(v[9])]
    return out


def read_ib(sys_root: Path) -> dict[str, list[int]]:
    """Each InfiniBand or RoCE port's NET_FIELDS in bytes and packets, as "mlx5_0:1". RDMA
    traffic bypasses the kernel's network stack, so /proc/net/dev never sees it."""
    out: dict[str, list[int]] = {}
    base = sys_root / "class" / "infiniband"
    with contextlib.suppress(OSError):
        for dev in sorted(os.listdir(base)):
            with contextlib.suppress(OSError):
                for port in sorted(os.listdir(base / dev / "ports")):
                    counters = base / dev / "ports" / port / "counters"
                    values = []
                    for name, scale in _IB_COUNTERS:
                        with open(counters / name) as f:
                            values.append(int(f.read().strip()) * scale)
                    out[f"{dev}:{port}"] = values
    return out


def snapshot(proc: Path = Path("/proc"), sys_root: Path = Path("/sys")) -> dict[str, Any]:
    """One sample of the node's counters."""
    return {
        "kind": "sample",
        "t": time.time(),
        "cpu": read_cpu(proc),
        "mem": read_memory(proc),
        "net": read_net(proc),
        "ib": read_ib(sys_root),
        "self_cpu_s": round(time.process_time(), 6),  # the sampler's own CPU, all its threads
    }


class DmonParser:
    """`nvidia-smi dmon` lines in, one record per GPU line out. The first '#' line names the
    columns, the second gives their units; "-" is a metric the GPU does not report (nvidia-smi(1),
    Device Monitoring). Columns are read by name, since drivers add some (gtemp/mtemp replaced
    temp; jpg, ofa and ccpm came later)."""

    def __init__(self) -> None:
        self.names: list[str] | None = None
        self.units: list[str] | None = None

    def feed(self, line: str) -> dict[str, Any] | None:
        words = line.split()
        if not words:
            return None
        if words[0].startswith("#"):  # dmon prints its two header lines again now and then
            words = " ".join(words).lstrip("#").split()
            if words and words[0].lower() in ("gpu", "time", "date"):
                self.names, self.units = words, None
            elif words:
                self.units = words
            return None
        if self.names is None or len(words) != len(self.names):
            return None
        record: dict[str, Any] = {}
        for name, word in zip(self.names, words, strict=True):
            record[name] = None if word == "-" else _number(word)
        return record if isinstance(record.get("gpu"), int) else None


def _number(word: str) -> int | float | str:
    try:
        return int(word)
    except ValueError:
        try:
            return float(word)
        except ValueError:
            return word


# --------------------------------------------------------------------------- the sampler


# SIGUSR1 is what a batch script sends through srun, which forwards it; SIGTERM and SIGINT are
# what the local executor and a person send.
STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
SAMPLES = ".samples.jsonl"  # jobs/<job>/telemetry/<host>.samples.jsonl


def host_file(folder: Path, host: str) -> Path:
    return folder / f"{_HOST_SAFE.sub('_', host) or 'host'}{SAMPLES}"


def wait_for_first_sample(path: Path, timeout_s: float = 30.0, alive: Callable[[], bool] = lambda: True) -> bool:
    """Wait until the sampler writing `path` has taken its first sample, so that the first
    workload's start is bracketed; give up when `alive` says the sampler has gone."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        with contextlib.suppress(OSError), open(path, "rb") as f:
            if b'"kind":"sample"' in f.read():
                return True
        time.sleep(0.05)
    return False


class _Lines:
    """Appends whole JSON lines, one write() each, so a crash leaves at most a torn last line,
    which the reader skips."""

    def __init__(self, path: Path) -> None:
        # made with its folders and reached through no link below the run directory, the working
        # directory of a job's processes (harness/files/inside.py); an absolute path, below its parent
        if path.is_absolute():
            path.parent.mkdir(parents=True, exist_ok=True)
            self.file = inside.append(path.parent, path.name)
        else:
            self.file = inside.append(Path("."), path.as_posix())
        self.fd = self.file.fileno()
        self.lock = threading.Lock()

    def write(self, record: Mapping[str, Any]) -> None:
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        with self.lock:
            os.write(self.fd, data)

    def close(self) -> None:
        self.file.close()


def _dmon(command: list[str], out: _Lines) -> subprocess.Popen[str] | None:
    """Start `nvidia-smi dmon` and a thread that keeps its GPU lines; None where it cannot run."""
    try:
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True
        )
    except OSError:
        return None

    def keep() -> None:
        parser = DmonParser()
        assert proc.stdout is not None
        for line in proc.stdout:
            gpu = parser.feed(line)
            if gpu is not None:
                out.write({"kind": "gpu", "t": time.time(), **gpu})

    threading.Thread(target=keep, daemon=True).start()
    return proc


def dmon_command(interval_s: float) -> list[str] | None:
    smi = shutil.which("nvidia-smi")
    return [smi, "dmon", "-s", "pucvmet", "-d", str(max(1, round(interval_s)))] if smi else None


def sample(folder: Path, interval_s: float, host: str | None = None, stop: threading.Event | None = None) -> Path:
    """Sample this node into folder/<host>.samples.jsonl until `stop` is set or one of STOP_SIGNALS arrives;
    the last sample is taken on the way out, so a workload's end is always bracketed."""
    host = host or socket.gethostname()
    path = host_file(folder, host)
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, lambda *_: stop.set())
        # Slurm's time-limit warning, which reaches every process of a submitit job's step
        # (docs/guides/submitit.md): the sampler goes on to the job's end, to take its last sample.
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    out = _Lines(path)
    started = time.time()
    out.write(
        {
            "kind": "start",
            "t": started,
            "host": host,
            "pid": os.getpid(),
            "interval_s": interval_s,
            "clock_ticks": os.sysconf("SC_CLK_TCK"),
            "cpus": os.cpu_count(),
        }
    )
    command = dmon_command(interval_s)
    dmon = _dmon(command, out) if command else None
    sys_root = Path(os.environ.get(faults.SYSFS_ENV) or "/sys")
    tick = time.monotonic()
    try:
        # before the first sample, which the first workload waits for: its faults are all after it
        errors = _faults(out, "start", sys_root)
        while True:
            out.write(snapshot(sys_root=sys_root))
            if (now := faults.read_ib_errors(sys_root)) != errors:
                out.write({"kind": faults.ERRORS_RECORD, "t": time.time(), "ports": now})
                errors = now
            if stop.is_set():
                break
            tick += interval_s
            stop.wait(max(0.0, tick - time.monotonic()))
    finally:
        if dmon is not None:
            dmon.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                dmon.wait(timeout=5)
        _faults(out, "end", sys_root)
        out.write({"kind": "end", "t": time.time(), "wall_s": round(time.time() - started, 3)})
        out.close()
    return path


def _faults(out: _Lines, when: str, sys_root: Path) -> faults.Counters:
    """The node's faults so far (harness/evidence/faults.py), recorded; its IB error counters."""
    reading = faults.reading(sys_root)
    out.write({"kind": faults.FAULTS_RECORD, "t": time.time(), "when": when, **reading})
    return reading["ib_errors"]


def mark(folder: Path, key: str, event: str) -> None:
    """Record that workload `key` started or ended ("start", "end") now."""
    lines = _Lines(folder / PHASES)
    try:
        lines.write({"key": key, "event": event, "t": time.time()})
    finally:
        lines.close()


# --------------------------------------------------------------------------- reading it back


@dataclass
class Host:
    """One node's samples: counters as recorded, GPU lines, and what the sampler itself used."""

    host: str
    interval_s: float | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    watch: faults.Watch | None = None  # its faults; None in samples taken before bench read them

    @property
    def startup_cpu_s(self) -> float | None:
        """The sampler's CPU time up to its first sample: Python starting, once per job."""
        return self.samples[0].get("self_cpu_s") if self.samples else None

    @property
    def overhead(self) -> float | None:
        """The sampler's own CPU time after its first sample, as a share of one core."""
        if len(self.samples) < 2:
            return None
        first, last = self.samples[0], self.samples[-1]
        if "self_cpu_s" not in first or "self_cpu_s" not in last:
            return None
        wall = last["t"] - first["t"]
        return (last["self_cpu_s"] - first["self_cpu_s"]) / wall if wall > 0 else None


@dataclass
class Telemetry:
    hosts: dict[str, Host]
    phases: dict[str, tuple[float, float | None]]  # workload key -> (start, end or None)


def _records(path: Path, skip: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
    """The records of a telemetry file: JSON objects with a time, one a line, each line bounded
    (a line past the bound is cut, so it is not JSON and is skipped); those whose line starts
    with one of `skip` are skipped unread."""
    with open_regular(path) as f:
        for line in bounded_lines(f):
            if skip and line.startswith(skip):
                continue
            try:
                record = json.loads(line)
            except ValueError:  # a torn last line
                continue
            if isinstance(record, dict) and _well_formed(record):
                yield record


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _counters(value: Any, fields: int) -> bool:
    """A list of `fields` non-negative whole counters."""
    return (
        isinstance(value, list)
        and len(value) == fields
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    )


def _well_formed(r: dict[str, Any]) -> bool:
    """A record every reader below may index without a check: a finite time; a sample with its
    CPU fields, each table of interfaces counters of NET_FIELDS' length, and a finite sampler
    time where it has one (samples before bench recorded it have none); a GPU
    line with its index. A damaged line (a job's file is untrusted) is skipped like a torn one."""
    if not _finite(r.get("t")):
        return False
    kind = r.get("kind")
    if kind == "sample":
        tables, cpu = [r.get("net"), r.get("ib", {})], r.get("cpu")
        return (
            isinstance(cpu, list)
            and 4 <= len(cpu) <= len(CPU_FIELDS)
            and _counters(cpu, len(cpu))
            and ("self_cpu_s" not in r or _finite(r["self_cpu_s"]))
            and all(isinstance(t, dict) and all(_counters(c, len(NET_FIELDS)) for c in t.values()) for t in tables)
        )
    if kind == "gpu":
        return isinstance(r.get("gpu"), int) and (r.get("sm") is None or _finite(r.get("sm")))
    return True


# How the sampler's samples and GPU lines start (_Lines writes "kind" first, without spaces).
_BULK = ('{"kind":"sample"', '{"kind":"gpu"')


def read(job_dir: Path, warn: Callable[[str], None] = lambda _: None, faults_only: bool = False) -> Telemetry | None:
    """The telemetry of one job, or None where it has none; with `faults_only`, the hosts' faults
    alone (each Host's watch), their samples and GPU lines skipped unparsed. A file that is not a
    regular file (a FIFO, a device) is skipped with a warning, never waited on."""
    folder = job_dir / DIR
    if not folder.is_dir():
        return None
    hosts: dict[str, Host] = {}
    for path in sorted(folder.glob(f"*{SAMPLES}")):
        h = Host(path.name[: -len(SAMPLES)])
        for r in _readable(path, warn, _BULK if faults_only else ()):
            kind = r.get("kind")
            if kind == "start":
                h.host = str(r.get("host") or h.host)
                h.interval_s = r.get("interval_s")
            elif kind == "sample" and isinstance(r.get("net"), dict):
                h.samples.append(r)
            elif kind == "gpu":
                h.gpus.append(r)
            elif kind == faults.FAULTS_RECORD and r.get("when") in ("start", "end") and faults.is_reading(r):
                h.watch = h.watch or faults.Watch(h.host)
                setattr(h.watch, r["when"], r)
            elif kind == faults.ERRORS_RECORD and h.watch and faults.is_counters(r.get("ports")):
                h.watch.changes.append((r["t"], r["ports"]))
        hosts[h.host] = h
    phases: dict[str, tuple[float, float | None]] = {}
    for r in _readable(folder / PHASES, warn) if os.path.lexists(folder / PHASES) else ():
        key, event = r.get("key"), r.get("event")
        if not isinstance(key, str):
            continue
        if event == "start":
            phases[key] = (r["t"], None)
        elif event == "end" and key in phases:
            phases[key] = (phases[key][0], r["t"])
    return Telemetry(hosts, phases) if hosts else None


def _readable(path: Path, warn: Callable[[str], None], skip: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    try:
        return list(_records(path, skip))
    except OSError as exc:
        warn(f"skipping {path}: {exc.strerror or exc}")
        return []


def bracket(samples: list[dict[str, Any]], start: float, end: float) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The last sample at or before `start` and the first at or after `end`: the counters'
    difference between them holds everything that happened in [start, end], and a little more."""
    before = [s for s in samples if s["t"] <= start]
    after = [s for s in samples if s["t"] >= end]
    return (before[-1], after[0]) if before and after else None


def sent(a: Mapping[str, Any], b: Mapping[str, Any], interfaces: Iterable[str]) -> int | None:
    """Bytes transmitted on `interfaces` (netdev names or IB "dev:port") between samples a and b."""
    total = 0
    tx = NET_FIELDS.index("tx_bytes")
    for name in interfaces:
        table = "ib" if ":" in name else "net"
        if name not in a.get(table, {}) or name not in b.get(table, {}):
            return None
        total += b[table][name][tx] - a[table][name][tx]
    return total


def cpu_busy(a: Mapping[str, Any], b: Mapping[str, Any]) -> float | None:
    """The share of the node's CPU time that was not idle between samples a and b, 0..1. A
    field that went down counts 0: proc(5) warns that iowait "may decrease in certain
    conditions", which over a short interval made the share negative."""
    d = [max(0, y - x) for x, y in zip(a["cpu"], b["cpu"], strict=False)]
    total = sum(d)
    return None if total <= 0 else 1 - sum(d[i] for i in _IDLE if i < len(d)) / total


def series(h: Host) -> dict[str, list[float]]:
    """What the timeline draws, between consecutive samples, at each interval's midpoint: "t",
    "cpu_pct", and "nic_sent_mbps", the MB/s sent on the interfaces but loopback that both
    samples have (NaN where there are none)."""
    out: dict[str, list[float]] = {"t": [], "cpu_pct": [], "nic_sent_mbps": []}
    for a, b in zip(h.samples, h.samples[1:], strict=False):
        dt = b["t"] - a["t"]
        if dt <= 0:
            continue
        out["t"].append((a["t"] + b["t"]) / 2)
        busy = cpu_busy(a, b)
        out["cpu_pct"].append(math.nan if busy is None else 100 * busy)
        nics = [n for table in ("net", "ib") for n in b.get(table, {}) if n in a.get(table, {}) and n != LOOPBACK]
        nic = sent(a, b, nics) if nics else None
        out["nic_sent_mbps"].append(math.nan if nic is None else nic / dt / 1e6)
    return out


def fault_words(tele: Telemetry, key: str) -> str | None:
    """The hardware faults of workload `key`'s nodes while it ran, in words (faults.in_words): the
    ports whose error counters rose and the GPUs that logged an Xid, each with its node. None
    where the job's sampler read no faults (a run before bench read them) or `key` has no start
    mark; a workload that did not end is judged to the job's end."""
    start, end = tele.phases.get(key, (None, None))
    if start is None or not any(h.watch for h in tele.hosts.values()):
        return None
    slack = max((h.interval_s or INTERVAL_S for h in tele.hosts.values()), default=INTERVAL_S)
    found = []
    for h in tele.hosts.values():
        watch = h.watch or faults.Watch(h.host)
        stop = end if end is not None else (watch.end or {}).get("t", math.inf)
        found.append(faults.during(watch, start, stop + slack))
    return faults.in_words(found)


# --------------------------------------------------------------------------- the NIC cross-check

# A node's NICs must carry, during the all-reduce step, between AGREE[0] and AGREE[1] times the
# bytes the workload says its ranks sent across nodes (docs/concepts/telemetry.md, where these figures
# were measured). Below: the traffic took another path, or the counters are not the NIC's.
# Above: something else used the link, or the workload moved more than it accounts for; either
# way busbw is not what the link did.
AGREE = (0.98, 1.15)
# Below this many expected bytes per node, connection setup and Slurm's own traffic weigh too much.
MIN_BYTES = 64 * 2**20


@dataclass(frozen=True)
class NicCheck:
    """One node's NIC bytes during the all-reduce step against what the ranks on it sent."""

    host: str
    interfaces: tuple[str, ...]
    expected: int
    measured: int

    @property
    def ratio(self) -> float:
        return self.measured / self.expected

    @property
    def agrees(self) -> bool:
        return AGREE[0] <= self.ratio <= AGREE[1]

    def line(self) -> str:
        return (
            f"{self.host} {','.join(self.interfaces)} sent {self.measured / 1e6:.1f} MB against "
            f"{self.expected / 1e6:.1f} MB the collectives account for ({self.ratio:.3f}x)"
        )


# The collectives whose bytes on the wire under gloo are accounted for (benchmarks/catalog.py,
# Collective.gloo_sent).
ACCOUNTED = tuple(name for name, c in COLLECTIVES.items() if c.gloo_sent)


def cross_node_bytes(result: Mapping[str, Any]) -> dict[str, int] | str:
    """Bytes the ranks of each host sent to ranks on other hosts during a collective result, or
    why that cannot be told. Each call of each row sends what its collective's record says
    (benchmarks/catalog.py, gloo_sent); a byte counts where its peer is on another host; a row of
    a group (params["groups"]) counts every group of its kind, each rank's peers in its own group.
    The link probe sends each other rank --link-bytes per pass. Barriers and the gathered timings
    are left out: a few KB."""
    params = result["params"]
    names = list(params.get("collectives") or ())
    if not names or any(c not in ACCOUNTED for c in names):
        return f"only {', '.join(ACCOUNTED)} are accounted for, not {', '.join(c for c in names if c not in ACCOUNTED)}"
    ranks = sorted(result["environment"]["ranks"], key=lambda r: r["rank"])
    n = len(ranks)
    hosts = [str(r["hostname"]) for r in ranks]
    if n < 2 or len(set(hosts)) < 2:
        return "one node: no traffic crosses a NIC"
    once = params["warmup_iters"] + params["iters"] + params["check_iters"]
    probe = (params["link_iters"] + 1) * params["link_bytes"] if params.get("link_bytes") else 0
    sent_by = dict.fromkeys(hosts, 0.0)
    groups = params.get("groups") or {}
    for kind, members in groups.items():
        flat = [r for m in members for r in m]
        if sorted(flat) != list(range(n)) or not all(type(r) is int for r in flat):
            return f"its {kind} groups {members!r:.60} do not divide the ranks 0..{n - 1} among them"
    for row in result["rows"]:
        name = row["collective"]
        # out of place too where the collective has an in-place form (benchmarks/collectives.py)
        record = collective(name)
        calls = once * (2 if params["out_of_place"] and record.in_place else 1)
        sent = record.gloo_sent
        if sent is None:  # not accounted for: refused above
            continue
        # each group of the row's kind at once, its ranks counted within it (catalog.node_groups)
        for members in groups.get(row.get("group", WORLD)) or [list(range(n))]:
            for i, rank in enumerate(members):
                for j, nbytes in sent(row["size_bytes"], i, len(members)).items():
                    if hosts[members[j]] != hosts[rank]:
                        sent_by[hosts[rank]] += calls * nbytes
    for host in hosts:
        sent_by[host] += probe * sum(1 for peer in hosts if peer != host)
    return {h: round(b) for h, b in sent_by.items()}


def nic_interfaces(result: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """The interfaces other than loopback that each host's ranks' connections used (gloo's
    sockets, benchmarks/links.py)."""
    out: dict[str, set[str]] = {}
    for r in (result.get("transport") or {}).get("ranks") or ():
        out.setdefault(str(r["host"]), set()).update(i for i in r.get("interfaces") or () if i != LOOPBACK)
    return {h: tuple(sorted(i)) for h, i in out.items()}


def check_nics(result: Mapping[str, Any], key: str, tele: Telemetry) -> list[NicCheck] | str:
    """Each node's NIC bytes during workload `key` against what its ranks sent, or why the run
    cannot be judged. Judged: gloo over sockets, whose bytes all pass the kernel's counters.
    NCCL is not: it picks ring, tree or NVLS per size and spreads channels over NICs, and RDMA
    traffic is counted by the IB ports; its counters are kept for the timeline only."""
    if (result.get("transport") or {}).get("source") != "sockets":
        return "only gloo's socket traffic is accounted for"
    expected = cross_node_bytes(result)
    if isinstance(expected, str):
        return expected
    start, end = tele.phases.get(key, (None, None))
    if start is None or end is None:
        return f"no start and end marks for {key}"
    interfaces = nic_interfaces(result)
    out = []
    for host, want in expected.items():
        names = interfaces.get(host)
        h = tele.hosts.get(host)
        edge = bracket(h.samples, start, end) if h else None
        got = sent(*edge, names) if edge and names else None
        if got is None:
            return f"no samples of {host}'s NICs around {key}"
        if want >= MIN_BYTES:
            out.append(NicCheck(host, names or (), want, got))
    return out or f"under {MIN_BYTES // 2**20} MiB per node, too little to judge"


def nic_columns(result: Mapping[str, Any], key: str, tele: Telemetry) -> tuple[dict[str, Any], str | None]:
    """The summary's NIC columns for one all-reduce result, and the disagreement, in words, that
    makes its rows a transport mismatch (None where the counters agree or cannot judge)."""
    checks = check_nics(result, key, tele)
    if isinstance(checks, str):
        return {"nic_bytes_ratio": None, "nic_check": f"not judged: {checks}"}, None
    worst = max(checks, key=lambda c: abs(math.log(c.ratio)) if c.ratio > 0 else math.inf)
    off = [c for c in checks if not c.agrees]
    if off:
        text = (
            "NIC counters disagree with the collectives' bytes: "
            + "; ".join(c.line() for c in off)
            + f"; agreement is {AGREE[0]:g}-{AGREE[1]:g}x (docs/concepts/telemetry.md)"
        )
        return {"nic_bytes_ratio": worst.ratio, "nic_check": text}, text
    ratios = [c.ratio for c in checks]
    text = f"agrees: {min(ratios):.3f}-{max(ratios):.3f}x of the collectives' bytes on {len(checks)} node(s)"
    return {"nic_bytes_ratio": worst.ratio, "nic_check": text}, None


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.telemetry sample|mark|faults|dcgm`, run by the executors, the batch script and
    the node check; not a user command."""
    parser = argparse.ArgumentParser(prog="python -m harness.telemetry")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample", help="sample this node into FOLDER/<host>.samples.jsonl until SIGTERM")
    s.add_argument("folder", type=Path)
    s.add_argument("--interval-s", type=float, default=INTERVAL_S)
    m = sub.add_parser("mark", help="record a workload's start or end in FOLDER/phases.jsonl")
    m.add_argument("folder", type=Path)
    m.add_argument("key")
    m.add_argument("event", choices=("start", "end"))
    f = sub.add_parser("faults", help="write this node's IB error counters and Xids to FOLDER/<host>.json")
    f.add_argument("folder", type=Path)
    d = sub.add_parser("dcgm", help="run DCGM's diagnostic of this node's GPUs into FOLDER/<host>.json")
    d.add_argument("folder", type=Path)
    d.add_argument("level", type=int, choices=dcgm.LEVELS)
    args = parser.parse_args(argv)
    if args.command == "faults":
        faults.read_here(args.folder)
    elif args.command == "dcgm":
        dcgm.run_here(args.folder, args.level)
    elif args.command == "sample":
        if not (0.05 <= args.interval_s <= 3600):
            parser.error(f"--interval-s must be between 0.05 and 3600, found {args.interval_s:g}")
        sample(args.folder, args.interval_s)
    else:
        mark(args.folder, args.key, args.event)
    return 0


if __name__ == "__main__":
    sys.exit(main())
