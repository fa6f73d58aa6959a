"""PyTorch's flight recorder read back (docs/guides/hangs.md, "The flight recorder"): each rank's
dump of its last collectives in; the collective a stalled or failed workload stopped in, its
sequence number, the ranks that entered it and those that did not, and the findings of PyTorch's
own analyser (`python -m torch.distributed.flight_recorder.fr_trace`) out.

A dump is a pickle (or JSON) of plain data: "entries", each a collective with its process group,
sequence number, name ("gloo:all_reduce", "nccl:all_reduce"), input sizes and dtypes; "pg_config"
and, from torch 2.5, "pg_status" with each group's last collective enqueued and completed. It is
read with an unpickler that refuses every class, so a run directory's dump cannot run code.

PyTorch's analyser matches the ranks' entries and names a size, dtype or collective mismatch
and its culprit rank. It refuses dumps whose "pg_config" does not name the groups their entries
do, which gloo's dumps of torch 2.14 leave unnamed; it is given copies in which the groups are
named from the entries. Where it fails or is absent, bench says so beside its own reading.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.recorder import DIR, dump_path, request_path
from benchmarks.results import read_regular
from harness.files import inside

DUMP_LIMIT = 256 * 2**20  # a rank's dump of 2,000 entries is about 1 MiB; stacks make it more
ANALYSER = "torch.distributed.flight_recorder.fr_trace"
ANALYSER_TIMEOUT_S = 300.0
ANALYSER_RANKS = 1024  # its copies, one per rank, are read by one process at once
FINDINGS_LIMIT = 10  # the analyser's findings kept: the earliest, as it prints them


class _PlainData(pickle.Unpickler):
    """An unpickler of plain data only (dicts, lists, tuples, strings, numbers): a class named in
    the pickle, which is how a pickle runs code, is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a dump holds {module}.{name}, not plain data")


@dataclass(frozen=True)
class Entry:
    """One collective of one rank's record."""

    group: str  # the process group's name and description, "0:default_pg"
    seq: int  # its sequence number in the group, counting from 1
    name: str  # "gloo:all_reduce"
    sizes: str  # the inputs' sizes and dtypes, "65536 Float"

    def text(self) -> str:
        return f"{self.name} #{self.seq}" + (f" ({self.sizes})" if self.sizes else "")


def load_dump(path: Path) -> dict[str, Any]:
    """A rank's dump; ValueError saying what is wrong with it otherwise."""
    data = read_regular(path, DUMP_LIMIT)
    try:
        dump = json.loads(data) if data[:1] == b"{" else _PlainData(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, ValueError, EOFError, TypeError, IndexError) as exc:
        raise ValueError(f"{path}: not a flight-recorder dump ({exc})") from None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        raise ValueError(f"{path}: not a flight-recorder dump (no list of entries)")
    return dump


def _last_entries(dump: dict[str, Any]) -> dict[str, Entry]:
    """The dump's last collective (not a point-to-point call) in each group, by group; malformed
    entries skipped."""
    out: dict[str, Entry] = {}
    for e in dump["entries"]:
        try:
            if e.get("is_p2p"):
                continue
            name, desc = e["process_group"]
            shapes = zip(e.get("input_sizes") or (), e.get("input_dtypes") or ())
            sizes = " ".join(f"{'x'.join(map(str, s))} {t}" for s, t in shapes)
            entry = Entry(f"{name}:{desc}", int(e["collective_seq_id"]), str(e["profiling_name"]), sizes)
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
        if entry.group not in out or entry.seq > out[entry.group].seq:
            out[entry.group] = entry
    return out


def _completed(dump: dict[str, Any]) -> dict[str, int]:
    """Each group's last completed collective, by group id, where the dump says (pg_status)."""
    out = {}
    for pg, status in (dump.get("pg_status") or {}).items():
        try:
            out[str(pg)] = int(status["last_completed_collective"])
        except (KeyError, TypeError, ValueError):
            continue
    return out


@dataclass
class Summary:
    """What bench keeps of one rank's dump: its last collective in each group, and the last each
    group completed; a few hundred bytes, so that 8,192 ranks' dumps are read one at a time."""

    last: dict[str, Entry]
    completed: dict[str, int]


@dataclass
class Reading:
    """What the ranks' dumps of one workload say."""

    dumped: list[int] = field(default_factory=list)  # ranks with a dump
    unread: dict[int, str] = field(default_factory=dict)  # rank: why its dump could not be read
    stuck: Entry | None = None  # the collective the workload stopped in, else the last of all
    entered: list[int] = field(default_factory=list)  # ranks that entered it and did not complete it
    done: list[int] = field(default_factory=list)  # ranks that entered it and completed it
    behind: dict[int, str] = field(default_factory=dict)  # rank: its last collective, before `stuck`
    analyser: list[str] = field(default_factory=list)  # PyTorch's analyser's findings
    analyser_error: str | None = None  # why it found nothing: absent, failed, timed out, not run

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["stuck"] = None if self.stuck is None else {**asdict(self.stuck), "text": self.stuck.text()}
        out["unread"] = {str(k): v for k, v in self.unread.items()}
        out["behind"] = {str(k): v for k, v in self.behind.items()}
        return out


def ask(job_dir: Path, key: str) -> None:
    """Ask every rank of workload `key` for its dump (benchmarks/recorder.py): the request file."""
    inside.write(job_dir, request_path(DIR, key), b"")


def wait_for(job_dir: Path, key: str, ranks: Iterable[int], wait_s: float, first_s: float = 5.0) -> None:
    """Until each of `ranks` has dumped, or `wait_s` has passed; or `first_s` has, with no dump
    from any of them (a job whose ranks have no recorder: a torch without gloo's, `bench run`)."""
    folder, start = job_dir / DIR, time.monotonic()
    pending, some = set(ranks), False
    while pending:
        waited = time.monotonic() - start
        if waited >= wait_s or (waited >= first_s and not some):
            return
        time.sleep(0.2)
        left = {r for r in pending if not os.path.exists(dump_path(folder, key, r))}
        some, pending = some or left != pending, left


def examine(job_dir: Path, key: str, world: int) -> Reading:
    """The dumps of workload `key`'s ranks, read by bench and, up to ANALYSER_RANKS ranks, by
    PyTorch's analyser (on copies whose groups are named, `_named_groups`). One dump is held at a
    time."""
    folder, summaries, unread = job_dir / DIR, {}, {}
    with tempfile.TemporaryDirectory(prefix="bench-flight-") as tmp:
        for rank in range(world):
            path = Path(dump_path(folder, key, rank))
            if not path.exists():
                continue
            try:
                dump = load_dump(path)
            except (OSError, ValueError) as exc:
                unread[rank] = str(exc)
                continue
            summaries[rank] = Summary(_last_entries(dump), _completed(dump))
            if world <= ANALYSER_RANKS:
                with open(os.path.join(tmp, f"rank{rank}"), "wb") as f:
                    pickle.dump(_named_groups(dump, world), f)
        reading = judge(summaries)
        reading.unread = unread
        if not summaries:
            return reading
        if world > ANALYSER_RANKS:
            reading.analyser_error = f"was not run: it reads {ANALYSER_RANKS} ranks or fewer, not {world}"
        else:
            analyse(Path(tmp), len(summaries) < world, reading)
    return reading


def judge(summaries: dict[int, Summary]) -> Reading:
    """bench's own reading of the dumps: in the first group (the default one first) whose last
    collective some rank that dumped has not completed, else in the default group, that
    collective; the ranks that entered it and have not completed it, those that completed it,
    and those whose last collective came before it."""
    out = Reading(dumped=sorted(summaries))
    groups = {g for s in summaries.values() for g in s.last}
    if not groups:
        return out
    group = min(groups, key=lambda g: (_completed_by_all(summaries, g), _group_order(g)))
    last = {rank: s.last.get(group) for rank, s in summaries.items()}
    top = max((e for e in last.values() if e is not None), key=lambda e: e.seq)
    finished = [r for r, s in summaries.items() if s.completed.get(_pg(group), -1) >= top.seq]
    out.stuck = top
    entered = [r for r, e in last.items() if e is not None and e.seq == top.seq]
    out.done = sorted(r for r in entered if r in finished)
    out.entered = sorted(r for r in entered if r not in finished)
    out.behind = {r: "nothing" if e is None else e.text() for r, e in sorted(last.items()) if r not in entered}
    return out


def _pg(group: str) -> str:
    """A group's id, as pg_status keys it: "0" of "0:default_pg"."""
    return group.split(":", 1)[0]


def _completed_by_all(summaries: dict[int, Summary], group: str) -> bool:
    """Whether every rank that dumped completed the group's last collective of any rank."""
    top = max(s.last[group].seq for s in summaries.values() if group in s.last)
    return all(s.completed.get(_pg(group), -1) >= top for s in summaries.values())


def _group_order(group: str) -> tuple[int, str]:
    """The default group (id 0) first, then the others by id."""
    pg = _pg(group)
    return (int(pg) if pg.isdigit() else 1 << 30, group)


def analyse(folder: Path, incomplete: bool, reading: Reading) -> None:
    """PyTorch's analyser on the copies in `folder` (rank<R>); its findings, or why there are
    none, into `reading`."""
    cmd = [sys.executable, "-m", ANALYSER, str(folder), "--prefix", "rank"]
    if incomplete:
        cmd.append("--allow-incomplete-ranks")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=ANALYSER_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        reading.analyser_error = f"did not finish in {ANALYSER_TIMEOUT_S:g} s"
        return
    if done.returncode != 0:
        lines = [x for x in done.stderr.splitlines() if x.strip()]
        last = lines[-1] if lines else f"exit status {done.returncode}"
        absent = "No module named" in last
        reading.analyser_error = "is not in this torch" if absent else f"failed: {last}"
        return
    reading.analyser = findings(f"{done.stdout}\n{done.stderr}")  # it prints through a logger, to stderr


_SEQ = re.compile(r"^Collective sequence number: (\d+) has errors")
_MISSED = re.compile(r"missed FR dumps from ranks \(\{([\d, ]+)\}\)")


def findings(text: str) -> list[str]:
    """The analyser's printed findings, one line each: each collective it found errors in, with
    its name and error message, and the ranks whose dumps it missed; the earliest
    FINDINGS_LIMIT."""
    out: list[str] = []
    seq, collective = None, None
    for line in text.splitlines():
        if m := _SEQ.match(line):
            seq, collective = m[1], None
        elif line.startswith("collective: ") and seq is not None:
            collective = line.removeprefix("collective: ").strip()
        elif line.startswith("error msg: ") and seq is not None:
            out.append(f"{collective or 'collective'} #{seq}: {line.removeprefix('error msg: ').strip()}")
            seq = None
        elif m := _MISSED.search(line):
            said = f"cannot decide: no dump from ranks {m[1]}"
            if said not in out:
                out.append(said)
    return out[:FINDINGS_LIMIT]


def _named_groups(dump: dict[str, Any], world: int) -> dict[str, Any]:
    """The dump with "pg_config" keyed by the group names its entries carry, each with its ranks
    (the default group's are every rank), as the analyser reads them."""
    given_config = dump.get("pg_config")
    config: dict[str, Any] = given_config if isinstance(given_config, dict) else {}
    unnamed = [c for c in config.values() if isinstance(c, dict) and not c.get("name")]
    everyone = json.dumps(list(range(world)))
    named = {}
    for e in dump["entries"]:
        try:
            name, desc = e["process_group"]
        except (KeyError, TypeError, ValueError):
            continue
        given = config.get(name)
        if isinstance(given, dict) and given.get("ranks"):
            ranks = given["ranks"]
        elif desc == "default_pg":
            ranks = everyone
        else:  # gloo's one unnamed group, else every rank
            ranks = unnamed[0].get("ranks") or everyone if len(unnamed) == 1 else everyone
        named[str(name)] = {"name": str(name), "desc": str(desc), "ranks": ranks}
    return {**dump, "pg_config": named or config}
