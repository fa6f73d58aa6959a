"""What the interconnect did, from the evidence it left: NCCL's own debug log (NCCL_DEBUG=INFO)
and, on gloo, the sockets each rank's connections actually used.

Every fact is taken from a line that states it; a fact with no such line is None, never a guess
from the variables that asked for it. The line formats, and the NCCL versions that print them,
are in docs/concepts/transport.md.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.results import bounded_lines, open_regular
from harness.errors import UsageError

# The prefix NCCL's logger puts on each line: "host:pid:tid [cudaDev] NCCL INFO ...". Anything
# before it (an mpirun "[1,23]<stdout>:" tag, a timestamp) is ignored. The host starts where a
# run of host characters starts (the lookbehind), so a search over a long run of them tries one
# start rather than each of its characters: linear in the line, not quadratic. Every pattern
# here is matched on lines cut to LINE_LIMIT (benchmarks/results.py) and right-stripped, and
# none has a lazy or nested repeat followed by one that can match the same characters.
_LINE = re.compile(
    r"(?<![^\s:\[\]])(?P<host>[^\s:\[\]]+):(?P<pid>\d+):\d+ \[(?P<dev>\d+)\] "
    r"(?:[\w./-]+:\d+ )?NCCL (?P<level>INFO|WARN) (?P<msg>.*)"
)
# Older releases print the version once, bare, on rank 0's stdout; newer ones log it per rank.
_VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+)")
# A job on gloo says so: bench's workloads print "backend gloo" in their header, torch names
# ProcessGroupGloo in its errors. Such a log has no NCCL lines because it has no NCCL.
_GLOO = re.compile(r"\bbackend[ =:]+gloo\b|ProcessGroupGloo", re.IGNORECASE)
_PLUGIN_NONE = re.compile(r"NET/Plugin ?: (?:No plugin found|Could not find|Plugin load .* returned)")
_PLUGIN_LOADED = re.compile(r"NET/Plugin ?: Loaded net plugin (?P<name>.+?)(?: \(v\d+\))?$")
_PLUGIN_PATH = re.compile(r"Plugin Path : (?P<path>\S+)")
_OFI = re.compile(r"NET/OFI Using (?P<name>aws-ofi-nccl \S+)")
_NETWORK = re.compile(r"^Using network (?P<net>.+)$")
_IB_DEVICES = re.compile(r"NET/IB ?: Using (?P<devs>[^;]*);\s*OOB (?P<oob>\S+)")
_IB_NONE = re.compile(r"NET/IB ?: No device found")
# One line per device in recent releases (src/transport/net_ib.cc: "NET/IB: [%d] %s:%s:%d/%s
# provider=%s speed=%d ..."): device, verbs device, port, link layer.
_IB_DEVICE = re.compile(r"^NET/IB: \[\d+\] (?P<name>[^:\s]+):[^:\s]+:(?P<port>\d+)/(?P<link>\w+) provider=")
# With NCCL_DEBUG_SUBSYS=TUNING, rank 0 logs each call's choice (src/enqueue.cc: "%s: %ld Bytes
# -> Algo %s proto %s channel{Lo..Hi}={%d..%d}").
_TUNING = re.compile(r"^\w+: \d+ Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)")
_SOCKET_DEVICES = re.compile(r"^NET/Socket ?: Using (?P<devs>.+)$")
_BOOTSTRAP = re.compile(r"^Bootstrap ?: Using (?:\[\d+\])?(?P<iface>\S+)")
_DEVICE = re.compile(r"\[\d+\](?P<name>[^\s\[\]]+)")
_VIA = re.compile(r" via (?P<via>.+)$")
_NET_VIA = re.compile(r"^NET/(?P<net>.+?)/\d+(?P<gdr>/GDRDMA)?")
_CHANNELS = re.compile(r"^(?P<n>\d+) coll channels")
_NVLS = re.compile(r"(?P<n>\d+) nvls channels")
_CHANNEL_LIST = re.compile(r"^Channel (?P<i>\d+)(?:/(?P<of>\d+))? :(?:\s+\d+)+$")
_IB_DEVICE_LIST = "NET/IB device list"
_ALGO = re.compile(r"NCCL_ALGO set (?:by environment )?to (?P<algo>\S+)")


@dataclass
class RankFacts:
    """What one NCCL rank's lines say; None where they say nothing."""

    host: str
    pid: int
    device: int
    nccl_version: str | None = None
    net_plugin: str | None = None
    net: str | None = None
    net_devices: list[str] | None = None
    oob: str | None = None
    gdr: bool | None = None
    intra_transport: set[str] = field(default_factory=set)
    nccl_channels: int | None = None
    nvls_channels: int | None = None
    graphs: set[str] = field(default_factory=set)
    algo: str | None = None
    algorithms: set[str] = field(default_factory=set)
    _device_lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    _plugin_path: str | None = None
    _listed_channels: set[int] = field(default_factory=set)
    _channels_of: int | None = None
    _no_ib: bool = False
    _socket_devices: list[str] | None = None
    _net_via: set[str] = field(default_factory=set)
    _gdr_via: set[bool] = field(default_factory=set)
    _evidence: set[str] = field(default_factory=set)

    def read(self, level: str, msg: str) -> None:
        msg = msg.rstrip()
        if level == "WARN":
            self.warnings.append(msg)
            return
        if m := _VERSION.search(msg):
            self.nccl_version = m["v"]
        elif _PLUGIN_NONE.search(msg):
            self.net_plugin = self.net_plugin or "internal"
        elif m := _PLUGIN_LOADED.search(msg):
            self.net_plugin = m["name"]
        elif m := _PLUGIN_PATH.search(msg):
            self._plugin_path = m["path"]
        elif m := _OFI.search(msg):
            self.net_plugin = m["name"]
        elif m := _NETWORK.search(msg):
            self.net = m["net"]
        elif m := _IB_DEVICES.search(msg):
            self._evidence.add(_IB_DEVICE_LIST)
            self.net_devices = _DEVICE.findall(m["devs"].rstrip())
            self.oob = _interface(m["oob"])
        elif _IB_NONE.search(msg):
            self._no_ib = True
        elif m := _IB_DEVICE.search(msg):
            self._device_lines.append(f"{m['name']}:{m['port']}/{m['link']}")
        elif m := _TUNING.search(msg):
            self.algorithms.add(f"{m['algo']}/{m['proto']}")
        elif m := _SOCKET_DEVICES.search(msg):
            self._socket_devices = [_interface(d) for d in _DEVICE.findall(m["devs"])]
        elif m := _BOOTSTRAP.search(msg):
            self.oob = self.oob or _interface(m["iface"])
        elif m := _CHANNELS.search(msg):
            self.nccl_channels = _count(m["n"])
            if c := _NVLS.search(msg):
                self.nvls_channels = _count(c["n"])
        elif m := _CHANNEL_LIST.search(msg):
            if (i := _count(m["i"])) is not None:
                self._listed_channels.add(i)
            if m["of"]:
                self._channels_of = _count(m["of"])
        elif msg.startswith("Connected all rings"):
            self.graphs.add("ring")
        elif msg.startswith("Connected all trees"):
            self.graphs.add("tree")
        elif m := _ALGO.search(msg):
            self.algo = m["algo"]
        elif m := _VIA.search(msg):
            self._transport(m["via"])

    def _transport(self, via: str) -> None:
        if m := _NET_VIA.match(via):
            self._net_via.add(m["net"])
            self._gdr_via.add(bool(m["gdr"]))
        elif via.startswith("P2P/"):
            # "P2P/IPC", "P2P/CUMEM", "P2P/direct pointer"; "P2P/CUMEM/CE" is CUMEM too
            self.intra_transport.add("/".join(via.split("/")[:2]))
        elif via.startswith("SHM"):
            self.intra_transport.add("SHM")
        elif via.startswith("CollNet"):
            self.intra_transport.add("CollNet")

    def finish(self) -> RankFacts:
        """Settle the facts that need all of a rank's lines."""
        if self.net_plugin is None and self._plugin_path:
            self.net_plugin = self._plugin_path.rsplit("/", 1)[-1]
        if self.net is None and len(self._net_via) == 1:
            # NCCL before 2.6 names the network only in its channel lines ("via NET/IB/0")
            self.net = next(iter(self._net_via))
        if self.net_devices is None and self._device_lines:  # the list line missing, the device lines not
            self.net_devices = list(dict.fromkeys(self._device_lines))
            self._evidence.add(_IB_DEVICE_LIST)
        if self.net_devices is None and self._socket_devices is not None and self.net in (None, "Socket"):
            self.net_devices = self._socket_devices
        if self.net == "Socket" and self._socket_devices is not None:
            self.net_devices = self._socket_devices
        if self._gdr_via:
            self.gdr = all(self._gdr_via)
        if self.nccl_channels is None and self._listed_channels:
            self.nccl_channels = self._channels_of or len(self._listed_channels)
        if self.nvls_channels:
            self.intra_transport.add("NVLS")
        return self

    def facts(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "pid": self.pid,
            "device": self.device,
            "nccl_version": self.nccl_version,
            "net_plugin": self.net_plugin,
            "net": self.net,
            "net_devices": self.net_devices,
            "link_layer": _link_layers(self.net_devices),
            "oob": self.oob,
            "gdr": self.gdr,
            "intra_transport": sorted(self.intra_transport) or None,
            "nccl_channels": self.nccl_channels,
            "nvls_channels": self.nvls_channels,
            "graphs": sorted(self.graphs) or None,
            "algo": self.algo,
            "algorithms": sorted(self.algorithms) or None,
            "ib_device_found": False if self._no_ib else (True if _IB_DEVICE_LIST in self._evidence else None),
            "warnings": self.warnings,
        }


# NCCL runs tens of channels at most (MAXCHANNELS, src/include/device.h); a count far past that
# is not NCCL's, and is read as none rather than carried into the summary's integer columns.
_MAX_COUNT = 1024


def _count(digits: str) -> int | None:
    return int(digits) if len(digits) <= 4 and int(digits) <= _MAX_COUNT else None


def _link_layers(devices: list[str] | None) -> list[str] | None:
    """ "mlx5_0:1/RoCE" -> RoCE: the link layer NCCL names after each IB device's port."""
    layers = {d.split("/")[1] for d in devices or () if ":" in d and "/" in d}
    return sorted(layers) or None


def _interface(text: str) -> str:
    """ "eth0:10.0.0.1<0>" -> "eth0": the interface, without the address that differs per host."""
    return text.split(":", 1)[0]


def parse_nccl(lines: Iterable[str]) -> list[RankFacts]:
    """The ranks found in NCCL debug output (one rank's file, or many ranks interleaved), each
    with its facts, in the order they first appear."""
    ranks: dict[tuple[str, int, int], RankFacts] = {}
    bare_version = None
    for line in lines:
        m = _LINE.search(line)
        if m is None:
            if "NCCL version" in line and (v := _VERSION.search(line)):
                bare_version = v["v"]
            continue
        key = (m["host"], int(m["pid"]), int(m["dev"]))
        rank = ranks.get(key)
        if rank is None:
            rank = ranks[key] = RankFacts(host=key[0], pid=key[1], device=key[2])
        rank.read(m["level"], m["msg"])
    out = [r.finish() for r in ranks.values()]
    if bare_version is not None:
        # printed by one process for all of its ranks: true of every rank of that run
        for r in out:
            r.nccl_version = r.nccl_version or bare_version
    return out


# The facts a log or a job reports, in the order they are shown.
FACTS = (
    "nccl_version",
    "net_plugin",
    "net",
    "net_devices",
    "link_layer",
    "ib_device_found",
    "oob",
    "gdr",
    "intra_transport",
    "nccl_channels",
    "nvls_channels",
    "graphs",
    "algo",
    "algorithms",
)


def combine(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """One record from many ranks' facts: a fact every rank with evidence agrees on is that value;
    a fact they disagree on is an object from each value (as text) to the hosts that reported it;
    a fact none of them reports is None. Warnings are listed once each, with a count."""
    out: dict[str, Any] = {}
    for name in FACTS:
        seen: dict[str, tuple[Any, dict[str, None]]] = {}  # hosts as a dict: ordered, and found in O(1)
        for r in ranks:
            value = r.get(name)
            if value is None:
                continue
            seen.setdefault(as_text(value), (value, {}))[1][r["host"]] = None
        if not seen:
            out[name] = None
        elif len(seen) == 1:
            out[name] = next(iter(seen.values()))[0]
        else:
            out[name] = {text: list(hosts) for text, (_v, hosts) in sorted(seen.items())}
    warnings = Counter(w for r in ranks for w in r.get("warnings") or ())
    out["warnings"] = [f"{w} (x{n})" if n > 1 else w for w, n in warnings.items()]
    out["hosts"] = sorted({r["host"] for r in ranks})
    out["ranks"] = len(ranks)
    return out


def as_text(value: Any) -> str:
    """A fact as one short text: lists joined with commas, booleans as yes/no."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    if isinstance(value, Mapping):
        return "; ".join(f"{k} on {','.join(v)}" for k, v in value.items())
    return str(value)


def read_log(path: Path) -> dict[str, Any]:
    """The facts of one NCCL log: a file, or a directory whose files are one job's ranks
    (NCCL_DEBUG_FILE=DIR/%h.%p). Raises UsageError for a path that cannot be read."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file())
    elif path.is_file():
        files = [path]
    elif path.exists():  # a FIFO or a device would block or never end
        raise UsageError(f"{path}: not a regular file or a directory (give an NCCL log, or a directory of them)")
    else:
        raise UsageError(f"{path}: no such file or directory (give an NCCL log, or a directory of them)")
    ranks: list[dict[str, Any]] = []
    gloo = False

    def watched(lines: Iterable[str]) -> Iterable[str]:
        nonlocal gloo
        for line in lines:
            gloo = gloo or bool(_GLOO.search(line))
            yield line

    try:
        for f in files:
            with open_regular(f) as lines:
                ranks += [r.facts() for r in parse_nccl(watched(bounded_lines(lines)))]
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    facts = {"log": str(path), **combine(ranks)}
    if not ranks and gloo:
        facts["backend"] = "gloo"
    return facts


def describe(facts: Mapping[str, Any]) -> list[str]:
    """A log's facts as lines for the terminal; facts with no evidence say so."""
    head = f"{facts['log']}: {facts['ranks']} rank(s) on {len(facts['hosts'])} host(s)"
    if not facts["ranks"] and facts.get("backend") == "gloo":
        return [
            f"{facts['log']}: a gloo job's log: gloo reports no transport, and NCCL did not run; "
            f"bench transport reads NCCL's logs (a job on backend nccl with NCCL_DEBUG=INFO)"
        ]
    if not facts["ranks"]:
        return [f"{facts['log']}: no NCCL lines (was NCCL_DEBUG=INFO set?)"]
    width = max(map(len, FACTS))
    lines = [head]
    for name in FACTS:
        value = facts[name]
        lines.append(f"  {name:<{width}}  {'(not in the log)' if value is None else as_text(value)}")
    lines.append(f"  {'warnings':<{width}}  {len(facts['warnings'])}")
    lines += [f"    NCCL WARN {w}" for w in facts["warnings"]]
    return lines


# --------------------------------------------------------------------------- a job's facts

# The summary's transport columns (docs/concepts/transport.md), each from the job's combined facts.
COLUMNS = ("net", "net_devices", "gdr", "intra_transport", "nccl_channels", "nccl_warnings")
TRANSPORT_MISMATCH = "TRANSPORT_MISMATCH"  # a summary status: the facts contradict the set's expect
NETWORK_FACTS = ("net", "net_devices", "link_layer", "gdr")  # checked on multi-node jobs only


def rank_facts(
    result: Mapping[str, Any], run_dir: Path, warn: Callable[[str], None] = lambda _: None
) -> list[dict[str, Any]]:
    """The per-rank facts behind one workload result: gloo's sockets as the ranks recorded them,
    or the NCCL debug files the ranks wrote (NCCL_DEBUG_FILE, inside the run directory). What is
    not a regular file there is skipped with a warning."""
    evidence = result.get("transport")
    if not isinstance(evidence, Mapping):
        return []
    if evidence.get("source") == "sockets":
        # the node of each rank, which is not its host where emulated nodes share one machine
        nodes = {r["rank"]: r["node_rank"] for r in result.get("environment", {}).get("ranks") or ()}
        out = []
        for r in evidence.get("ranks") or ():
            used = r.get("connections", 0) > 0
            out.append(
                {
                    "host": str(r["host"]),
                    "node": f"node {nodes[r['rank']]}" if r.get("rank") in nodes else str(r["host"]),
                    "net": "Socket" if used else None,
                    "net_devices": r["interfaces"] or None,
                }
            )
        return out
    pattern = evidence.get("debug_file")
    if evidence.get("source") != "nccl_log" or not isinstance(pattern, str) or not pattern:
        return []
    glob = pattern.replace("%h", "*").replace("%p", "*")
    root = run_dir.resolve()
    ranks: list[dict[str, Any]] = []
    for path in sorted(run_dir.glob(glob)) if not Path(glob).is_absolute() else ():
        if not path.resolve().is_relative_to(root):
            continue
        try:
            with open_regular(path) as lines:
                ranks += [r.facts() for r in parse_nccl(bounded_lines(lines))]
        except OSError as exc:  # a FIFO, a device, a directory: not a log
            warn(f"skipping {path}: {exc.strerror or exc}")
    return ranks


def columns(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary's transport columns of one job's ranks: texts, a channel count where the ranks
    agree on one, and the number of NCCL WARN lines."""
    facts = combine(ranks)
    channels = facts["nccl_channels"]
    return {
        "net": None if facts["net"] is None else as_text(facts["net"]),
        "net_devices": None if facts["net_devices"] is None else as_text(facts["net_devices"]),
        "gdr": None if facts["gdr"] is None else as_text(facts["gdr"]),
        "intra_transport": None if facts["intra_transport"] is None else as_text(facts["intra_transport"]),
        "nccl_channels": channels if isinstance(channels, int) else None,
        # NCCL's ranks carry their WARN lines; gloo's have no such lines
        "nccl_warnings": sum(len(r["warnings"]) for r in ranks if "warnings" in r)
        if any("warnings" in r for r in ranks)
        else None,
    }


def _device_names(devices: Iterable[str]) -> set[str]:
    """ "mlx5_0:1/IB" answers to mlx5_0:1/IB, mlx5_0:1 and mlx5_0."""
    out = set()
    for d in devices:
        out |= {d, d.split("/", 1)[0], d.split(":", 1)[0]}
    return out


def _satisfies(name: str, want: Any, value: Any) -> bool:
    if value is None:
        return False
    if name == "net":
        got, wanted = str(value).lower(), str(want).lower()
        # NCCL names its IB network "IB", and the IB net plugin's "IBext" or "IBext_vN"
        return got == wanted or (wanted == "ib" and got.startswith("ibext"))
    if name == "net_devices":
        return all(_device_names([d]) & set(want) for d in value) and set(want) <= _device_names(value)
    if name == "link_layer":
        return set(value) == {want}
    if name == "intra_transport":
        return set(want) <= set(value)
    if name == "nccl_version":
        return str(value) == want or str(value).startswith(f"{want}.")
    return bool(value == want)


def _phrase(name: str, value: Any) -> str:
    if value is None:
        return f"no evidence of {name}"
    if name == "net":
        return f"ran over {value}"
    if name == "gdr":
        return "ran with GPUDirect RDMA" if value else "ran without GPUDirect RDMA"
    if name == "net_devices":
        return f"used {as_text(value)}"
    return f"had {name} {as_text(value)}"


def mismatch(
    set_name: str, expect: Iterable[tuple[str, Any]], ranks: list[dict[str, Any]], nodes: int, gpus_per_node: int
) -> str | None:
    """Why a job's transport facts contradict what its settings set expects, in words such as
    "set ib ran over Socket on 2 of 4 nodes (expected net IB)"; None when they agree. A node
    whose ranks logged nothing about an expected fact counts against it: an expectation is met
    by evidence only."""
    problems = []
    for name, want in expect:
        if (name in NETWORK_FACTS and nodes < 2) or (name == "intra_transport" and gpus_per_node < 2):
            continue  # one node needs no network; one GPU per node no transport inside it
        by_host: dict[str, list[Any]] = {}
        for r in ranks:  # a node is its host, but for emulated nodes on one machine
            by_host.setdefault(r.get("node", r["host"]), []).append(r.get(name))
        bad: dict[str, int] = {}  # what the failing nodes showed -> how many nodes
        for values in by_host.values():
            wrong = [v for v in values if not _satisfies(name, want, v)]
            if wrong:
                text = _phrase(name, wrong[0])
                bad[text] = bad.get(text, 0) + 1
        missing = max(nodes - len(by_host), 0)
        if missing:
            text = _phrase(name, None)
            bad[text] = bad.get(text, 0) + missing
        for text, count in bad.items():
            problems.append(f"{text} on {count} of {nodes} node{'s' * (nodes != 1)} (expected {name} {as_text(want)})")
    if not problems:
        return None
    return f"set {set_name} " + "; ".join(problems)
