"""Hardware faults a check can see on a node (docs/concepts/faults.md): the error counters of its
InfiniBand ports, and its GPUs' Xid events in the kernel log. What rose, or was logged, while a
check ran names the port or the GPU; what could not be read is said, never taken for clean.

Only the standard library: the telemetry sampler reads these on every node of a job
(harness/evidence/telemetry.py), on nodes that may have only bench's code.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.files import inside

# An IB port's error counters in sysfs and the width of each in bits (Linux,
# drivers/infiniband/core/sysfs.c, PORT_PMA_ATTR, after the InfiniBand Architecture
# Specification vol. 1, PortCounters). Such a counter stops at its largest value rather than
# wrap: one there cannot show a rise until it is reset (`perfquery -R`).
IB_ERRORS = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
}
Counters = dict[str, dict[str, int | None]]  # port ("mlx5_0/1") -> counter -> value, None: unreadable


def read_ib_errors(sys_root: Path = Path("/sys")) -> Counters:
    """Every IB port's error counters. A counter the port cannot give (the kernel prints
    "N/A (no PMA)") or that cannot be read is None; one the driver does not have is left out."""
    out: Counters = {}
    base = sys_root / "class" / "infiniband"
    try:
        devices = sorted(p.name for p in base.iterdir())
    except OSError:
        return out
    for dev in devices:
        try:
            ports = sorted(p.name for p in (base / dev / "ports").iterdir())
        except OSError:
            continue
        for port in ports:
            folder = base / dev / "ports" / port / "counters"
            values: dict[str, int | None] = {}
            for name in IB_ERRORS:
                try:
                    text = (folder / name).read_text().strip()
                except FileNotFoundError:
                    continue
                except OSError:
                    text = ""
                values[name] = int(text) if text.isdigit() else None
            out[f"{dev}/{port}"] = values
    return out


@dataclass(frozen=True)
class Rise:
    """An error counter of a port that rose between two readings."""

    port: str
    counter: str
    before: int
    after: int

    def line(self) -> str:
        return f"{self.port}: {self.counter} rose from {self.before} to {self.after}"


def rises(before: Counters, after: Counters) -> tuple[list[Rise], list[str]]:
    """What rose between two readings of one node's ports, and what could not be judged, each
    said in a line: a port that came or went, a counter unreadable in either, one that fell (it
    was reset between them), and one at its largest value in both."""
    risen: list[Rise] = []
    unjudged: list[str] = []
    for port in sorted(set(before) | set(after)):
        a, b = before.get(port), after.get(port)
        if a is None or b is None:
            unjudged.append(f"{port}: {'went' if b is None else 'came'} during the check")
            continue
        for name, width in IB_ERRORS.items():
            if name not in a and name not in b:
                continue  # a driver without it
            x, y = a.get(name), b.get(name)
            if x is None or y is None:
                unjudged.append(f"{port}: {name} could not be read")
            elif y < x:
                unjudged.append(f"{port}: {name} fell from {x} to {y} (reset during the check)")
            elif y > x:
                risen.append(Rise(port, name, x, y))
            elif x == (1 << width) - 1:
                unjudged.append(f"{port}: {name} is at its largest value, {x}, where it stops: reset it (perfquery -R)")
    return risen, unjudged


# The NVIDIA driver's Xid line in the kernel log (NVIDIA, "Xid Errors"; the lines of
# tests/fixtures/xid/, each from a cited log): the GPU's PCI address, the Xid, on newer drivers
# the process, then what the driver says of it.
#   NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001
#   NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000000 intr 00004000
_XID = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): (?P<xid>\d+)"
    r"(?:, pid=(?P<pid>[^,]*), name=(?P<name>[^,]*))?,? ?(?P<text>.*)$"
)
# A GPU off the bus, which newer drivers say in three lines and no Xid line:
#   NVRM: The NVIDIA GPU 0000:b3:00.0
#         NVRM: (PCI ID: 10de:26b5) installed in this system has
#         NVRM: fallen off the bus and is not responding to commands.
_GONE = re.compile(r"NVRM: The NVIDIA GPU (?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
FELL_OFF = 79  # the Xid of a GPU fallen off the bus (NVIDIA, "Xid Errors")
_STAMP = re.compile(r"^\[\s*(?P<s>\d+\.\d+)\]")  # dmesg's seconds since boot


@dataclass(frozen=True)
class Xid:
    """One Xid event of the kernel log."""

    at_s: float | None  # seconds since boot (dmesg's stamp), None where the line has none
    pci: str
    xid: int
    text: str

    def line(self) -> str:
        return f"GPU {self.pci}: Xid {self.xid}" + (f" ({self.text})" if self.text else "")


def parse_xids(text: str) -> list[Xid]:
    """The Xid events of a kernel log (dmesg's lines, or journalctl's), in order."""
    lines = text.splitlines()
    out: list[Xid] = []
    for i, line in enumerate(lines):
        stamp = _STAMP.match(line)
        at = float(stamp.group("s")) if stamp else None
        if m := _XID.search(line):
            out.append(Xid(at, m.group("pci").lower(), int(m.group("xid")), m.group("text").strip()))
        elif (m := _GONE.search(line)) and "fallen off the bus" in " ".join(lines[i + 1 : i + 3]):
            out.append(Xid(at, m.group("pci").lower(), FELL_OFF, "fallen off the bus, said without an Xid line"))
    return out


def kernel_log(timeout_s: float = 10.0) -> tuple[str | None, str | None]:
    """(the kernel log as `dmesg` prints it, None) or (None, why it cannot be read here): an
    unprivileged user where kernel.dmesg_restrict is 1 may not (dmesg(1))."""
    try:
        r = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=timeout_s, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"dmesg could not run ({exc})"
    if r.returncode != 0:
        said = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        return None, said[:200]
    return r.stdout, None


def since(events: list[Xid], start_s: float) -> list[Xid] | None:
    """The events at or after `start_s` seconds since boot; None where one has no stamp, so that
    which came during the check cannot be told."""
    if any(e.at_s is None for e in events):
        return None
    return [e for e in events if e.at_s is not None and e.at_s >= start_s]


# --------------------------------------------------------------------------- a node's reading

FOLDER = "faults"  # in a check's folder: before/<host>.json and after/<host>.json
SYSFS_ENV = "BENCH_SYSFS_ROOT"  # where sysfs is mounted, if not /sys (a container's view of the host's)
READING_VERSION = 1
READING_LIMIT = 1 << 22  # bytes of one node's reading: thousands of Xids, hundreds of ports
# This node's place in Slurm's switch tree as its job step sees it (topology/tree only): the switches
# from the top down and the node, `spine.leaf1.bnode3`, and what each part is, `switch.switch.node`
# (docs/reference/sources.md, "The switch tree"). Kept beside the faults, which every node of a check
# reads in a step of its own, so that the check's leaves can be held against Slurm's.
TOPOLOGY_ENV = ("SLURM_TOPOLOGY_ADDR", "SLURM_TOPOLOGY_ADDR_PATTERN")
ADDRESS_LIMIT = 1024  # characters of each


def uptime_s(proc: Path = Path("/proc")) -> float:
    """Seconds since boot (proc(5), /proc/uptime's first field): dmesg's stamps count from it."""
    return float((proc / "uptime").read_text().split()[0])


def reading(sys_root: Path = Path("/sys"), proc: Path = Path("/proc")) -> dict[str, Any]:
    """What one node's hardware has recorded of its faults so far: its uptime, its IB ports'
    error counters, and the Xids of its kernel log, or why that log cannot be read."""
    text, why = kernel_log()
    return {
        "version": READING_VERSION,
        "uptime_s": uptime_s(proc),
        "ib_errors": read_ib_errors(sys_root),
        "xids": [asdict(x) for x in parse_xids(text)] if text is not None else None,
        "kernel_log": why,
        "topology": _address(),
    }


def _address() -> list[str] | None:
    """[SLURM_TOPOLOGY_ADDR, its pattern] of this step, None where either is unset or too long."""
    found = [os.environ.get(name, "") for name in TOPOLOGY_ENV]
    return found if all(0 < len(x) <= ADDRESS_LIMIT for x in found) else None


def write_reading(folder: Path, host: str, sys_root: Path = Path("/sys"), proc: Path = Path("/proc")) -> Path:
    """This node's reading, written atomically to FOLDER/<host>.json (FOLDER made in its parent,
    which must be there: a run directory's)."""
    return inside.write(folder.parent, f"{folder.name}/{host}.json", json.dumps(reading(sys_root, proc)).encode())


def load_reading(path: Path) -> dict[str, Any]:
    """A reading written by write_reading; a ValueError that says what is wrong otherwise."""
    with open(path, "rb") as f:
        data = json.loads(f.read(READING_LIMIT))
    if not is_reading(data):
        raise ValueError(f"{path}: not a reading of a node's faults (harness/evidence/faults.py)")
    return data


def is_reading(data: object) -> bool:
    """Whether `data` is a reading as `reading` makes one (a file's is untrusted)."""
    return (
        isinstance(data, dict)
        and data.get("version") == READING_VERSION
        and isinstance(data.get("uptime_s"), (int, float))
        and math.isfinite(data["uptime_s"])
        and is_counters(data.get("ib_errors"))
        and (data.get("xids") is None) != (data.get("kernel_log") is None)
        and all(_xid(x) for x in data.get("xids") or ())
        and _is_address(data.get("topology"))
    )


def _is_address(data: object) -> bool:
    """None (no address: not under Slurm's topology/tree, or a reading from before it was read),
    or [address, pattern] as `_address` reads them."""
    return data is None or (
        isinstance(data, list) and len(data) == 2 and all(isinstance(x, str) and len(x) <= ADDRESS_LIMIT for x in data)
    )


def is_counters(data: object) -> bool:
    """Whether `data` is a reading of IB error counters as `read_ib_errors` makes one."""
    return isinstance(data, dict) and all(
        isinstance(c, dict) and all(v is None or (type(v) is int and v >= 0) for v in c.values()) for c in data.values()
    )


def _xid(x: object) -> bool:
    return (
        isinstance(x, dict)
        and set(x) == {"at_s", "pci", "xid", "text"}
        and (x["at_s"] is None or isinstance(x["at_s"], (int, float)))
        and isinstance(x["pci"], str)
        and isinstance(x["xid"], int)
        and isinstance(x["text"], str)
    )


@dataclass
class NodeFaults:
    """What one node's two readings say of the check between them: the faults that name a port
    or a GPU; what could not be judged of the hardware it has (a port's counter); and what it
    does not let bench read (a kernel log restricted to root), which a check states and does not
    fail on: it is how the node is set up, not what it did."""

    host: str
    named: list[str] = field(default_factory=list)
    unjudged: list[str] = field(default_factory=list)  # of what the node has: a check that cannot vouch
    unread: list[str] = field(default_factory=list)  # what the node does not let bench read: said, not judged
    address: tuple[str, str] | None = None  # SLURM_TOPOLOGY_ADDR and its pattern, where its step had them


def judge(host: str, before: dict[str, Any], after: dict[str, Any]) -> NodeFaults:
    """A node's faults between its reading before a check and its reading after."""
    out = NodeFaults(host)
    if after["uptime_s"] < before["uptime_s"]:
        out.unjudged.append("the node booted again during the check: its counters and kernel log began anew")
        return out
    risen, out.unjudged = rises(before["ib_errors"], after["ib_errors"])
    out.named += [r.line() for r in risen]
    if after["xids"] is None:
        out.unread.append(f"Xids: the kernel log cannot be read ({after['kernel_log']})")
        return out
    new = since([Xid(**x) for x in after["xids"]], before["uptime_s"])
    if new is None:
        out.unread.append("Xids: the kernel log's lines have no stamp, so those of the check cannot be told")
    else:
        out.named += [x.line() for x in new]
    return out


def host_name() -> str:
    """The node's name as the check names it: Slurm's (SLURMD_NODENAME), the local executor's
    emulated node's (BENCH_NODE), else the host's."""
    return os.environ.get("SLURMD_NODENAME") or os.environ.get("BENCH_NODE") or socket.gethostname()


def read_here(folder: Path) -> Path:
    """This node's reading, into FOLDER/<host>.json: what each node of a check runs, before it
    and after it (`python -m harness.telemetry faults FOLDER`)."""
    return write_reading(folder, host_name(), Path(os.environ.get(SYSFS_ENV) or "/sys"))


def read_check(folder: Path, names: list[str]) -> list[NodeFaults]:
    """Each node's faults over a check whose readings are in FOLDER/before and FOLDER/after, with
    its place in Slurm's tree from the first; a node without both, or with one that cannot be
    read, is not judged, and says why."""
    out = []
    for host in names:
        found = NodeFaults(host)
        readings = {}
        for when in ("before", "after"):
            path = folder / when / f"{host}.json"
            try:
                readings[when] = load_reading(path)
            except FileNotFoundError:
                found.unjudged.append(f"no reading {when} the check")
            except (OSError, ValueError) as exc:
                found.unjudged.append(f"its reading {when} the check cannot be read ({str(exc)[:120]})")
        if len(readings) == 2:
            found = judge(host, readings["before"], readings["after"])
        if address := readings.get("before", {}).get("topology"):
            found.address = (address[0], address[1])
        out.append(found)
    return out


# --------------------------------------------------------------------------- over a job

FAULTS_RECORD, ERRORS_RECORD = "faults", "ib_errors"  # the sampler's records (harness/evidence/telemetry.py)


@dataclass
class Watch:
    """What a job's sampler read of one node's faults: a whole reading (with its wall-clock "t")
    at the job's start and one at its end, and the IB error counters at each sample where they
    differed from the sample before."""

    host: str
    start: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    changes: list[tuple[float, Counters]] = field(default_factory=list)

    def counters_at(self, t: float) -> Counters:
        """The counters as last read at or before wall-clock time `t` (the start's reading before any change)."""
        assert self.start is not None
        now: Counters = self.start["ib_errors"]
        for at, counters in self.changes:
            if at > t:
                break
            now = counters
        return now


def during(watch: Watch, start_t: float, end_t: float) -> NodeFaults:
    """A node's faults from wall-clock `start_t` to `end_t`, a workload's span with the sampler's
    interval after it (the counters are read once an interval): the counters that rose and the
    Xids logged in it; what cannot be judged or read is the whole job's."""
    if watch.start is None or watch.end is None:
        return NodeFaults(watch.host, unjudged=[f"no reading at the job's {'start' if watch.start is None else 'end'}"])
    out = judge(watch.host, watch.start, watch.end)
    if watch.end["uptime_s"] < watch.start["uptime_s"]:
        return out  # booted again: judge said so
    risen, _ = rises(watch.counters_at(start_t), watch.counters_at(end_t))
    out.named = [r.line() for r in risen]
    boot_t = watch.end["t"] - watch.end["uptime_s"]  # the wall-clock time of the node's boot
    for x in (Xid(**d) for d in watch.end["xids"] or ()):
        if x.at_s is not None and start_t <= boot_t + x.at_s <= end_t:
            out.named.append(x.line())
    return out


def in_words(found: list[NodeFaults]) -> str:
    """What a workload's nodes' faults were, in the summary's words: each port or GPU named with
    its node; else what could not be judged; else none, with what was read."""
    named = [f"{f.host} {line}" for f in found for line in f.named]
    if named:
        return "; ".join(named)
    unjudged = [f"{f.host}: {line}" for f in found for line in f.unjudged]
    if unjudged:
        return "not judged: " + "; ".join(unjudged)
    unread = sorted({line for f in found for line in f.unread})
    return f"none on {len(found)} node(s)" + (f"; {'; '.join(unread)}" if unread else "")
