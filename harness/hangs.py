"""Hang attribution (docs/hangs.md): when a workload's ranks stop making progress, say which rank
held the others and where each one was.

Each rank keeps a progress file (benchmarks/progress.py) with its host, pid and phase. When no
rank has moved for the stall limit, the harness reads each rank's process state (/proc/PID/stat
on its node), asks every rank that can still run for its Python stack (STACK_SIGNAL, answered by
faulthandler) and names the odd ones out: a rank stopped (state T) or dead, or a rank in another
phase than the rest, e.g. "rank 2 on bnode3 is stopped (state T); ranks 0, 1, 3 wait in
all_reduce (all_reduce 4M)".
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.progress import STACK_SIGNAL
from benchmarks.results import atomic_write_json

# /proc/PID/stat's state letters (proc(5)) that mean the rank cannot take part any more
_STOPPED = {"T": "stopped", "t": "stopped by a tracer", "Z": "a zombie", "X": "dead"}
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+ in (?P<func>\S+)')


@dataclass
class Rank:
    rank: int
    host: str
    pid: int
    phase: str
    t: float  # when the rank entered its phase (its own clock)
    state: str | None = None  # /proc/PID/stat's state letter, None when the process is gone
    where: str | None = None  # the innermost torch.distributed call (or workload function) of its stack

    @property
    def name(self) -> str:
        return f"rank {self.rank} on {self.host}"


def read_ranks(folder: Path, key: str) -> list[Rank]:
    """The progress records of one workload's ranks, by rank; a file being replaced or not JSON
    is skipped (the next poll reads it)."""
    out = []
    for path in folder.glob(f"{key}.rank*.json"):
        try:
            d = json.loads(path.read_text())
            out.append(Rank(int(d["rank"]), str(d["host"]), int(d["pid"]), str(d["phase"]), float(d["t"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(out, key=lambda r: r.rank)


# Starting a rank (the interpreter, torch, the rendezvous) takes seconds, more on a loaded node:
# until every rank has reported, the limit is at least this.
STARTUP_S = 120.0


def stalled(ranks: list[Rank], world: int, started: float, stall_s: float, now: float | None = None) -> bool:
    """Whether no rank has entered a phase for the stall limit (wall clock), counting from the
    workload's start; at least STARTUP_S while some rank has not reported yet."""
    last = max([started, *(r.t for r in ranks)])
    limit = stall_s if len(ranks) >= world else max(stall_s, STARTUP_S)
    return (time.time() if now is None else now) - last > limit


def process_state(pid: int) -> str | None:
    """The state letter of /proc/PID/stat (field 3, after the parenthesised command name, which
    may itself hold spaces and parentheses), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()[0]


def ask_for_stacks(ranks: Iterable[Rank]) -> None:
    """STACK_SIGNAL to every rank that can run: faulthandler writes its stack file."""
    for r in ranks:
        if r.state is not None and r.state not in _STOPPED:
            try:
                os.kill(r.pid, STACK_SIGNAL)
            except OSError:
                r.state = None


def innermost(stack: str) -> str | None:
    """Where a faulthandler dump says the rank waits: the innermost frame of torch.distributed
    (the collective it is in, e.g. all_reduce), else of a workload module; None if neither."""
    frames = [m for m in map(_FRAME.match, stack.splitlines()) if m]  # most recent call first
    for m in frames:
        if "/torch/distributed/" in m["path"] and not m["func"].startswith("_"):
            return m["func"]
    for m in frames:
        if "/benchmarks/" in m["path"]:
            return m["func"]
    return None


def stack_sizes(folder: Path, key: str, ranks: Iterable[Rank]) -> dict[int, int]:
    """How much each rank's stack file holds now: what a new dump is appended after."""
    out = {}
    for r in ranks:
        try:
            out[r.rank] = (folder / f"{key}.rank{r.rank}.stack").stat().st_size
        except OSError:
            out[r.rank] = 0
    return out


def read_stacks(folder: Path, key: str, ranks: Iterable[Rank], since: dict[int, int]) -> None:
    """Each rank's `where`, from the dump appended to its stack file after `since`."""
    for r in ranks:
        try:
            with open(folder / f"{key}.rank{r.rank}.stack", "rb") as f:
                f.seek(since.get(r.rank, 0))
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        r.where = innermost(text)


def _ranks_text(ranks: list[Rank]) -> str:
    nums = ", ".join(str(r.rank) for r in ranks)
    return f"rank {nums}" if len(ranks) == 1 else f"ranks {nums}"


def attribute(ranks: list[Rank], world: int) -> str:
    """The hang in words: the ranks that cannot go on (stopped, dead, never started), then the
    ranks grouped by where they wait."""
    parts = []
    missing = sorted(set(range(world)) - {r.rank for r in ranks})
    if missing:
        parts.append(f"{_ranks_text([Rank(m, '', 0, '', 0) for m in missing])} never reported progress")
    stuck = [r for r in ranks if r.state is None or r.state in _STOPPED]
    for r in stuck:
        what = "is gone" if r.state is None else f"is {_STOPPED[r.state]} (state {r.state})"
        parts.append(f"{r.name} {what} in {r.phase}")
    live = [r for r in ranks if r not in stuck]
    groups: dict[tuple[str, str | None], list[Rank]] = {}
    for r in live:
        groups.setdefault((r.phase, r.where), []).append(r)
    if not stuck and len(groups) > 1:
        # nobody stopped: the ranks in a phase the majority has left are the odd ones
        common = Counter(r.phase for r in live).most_common(1)[0][0]
        order = sorted(groups.items(), key=lambda kv: kv[0][0] == common)
    else:
        order = list(groups.items())
    for (phase, where), members in order:
        if len(members) > 1:
            parts.append(f"{_ranks_text(members)} " + (f"wait in {where} ({phase})" if where else f"are at {phase}"))
        else:
            parts.append(f"{members[0].name} " + (f"waits in {where} ({phase})" if where else f"is at {phase}"))
    return "; ".join(parts)


def diagnose(folder: Path, key: str, world: int, local: bool = True, wait_s: float = 2.0) -> tuple[str, list[Rank]]:
    """Read the ranks of a stalled workload, take their states and stacks (on this machine when
    `local`; the Slurm executor gathers them per node), and say what held them."""
    ranks = read_ranks(folder, key)
    if local:
        for r in ranks:
            r.state = process_state(r.pid)
        before = stack_sizes(folder, key, ranks)
        ask_for_stacks(ranks)
        time.sleep(wait_s)  # faulthandler writes at once; the file system may lag a little
        read_stacks(folder, key, ranks, before)
    return attribute(ranks, world), ranks


def record(job_dir: Path, key: str, stall_s: float, why: str, ranks: list[Rank]) -> None:
    """jobs/<job>/hang-<workload>.json: the reason and every rank's host, pid, state, phase and
    where it waited; the stacks themselves stay in progress/<workload>.rank<R>.stack."""
    atomic_write_json(
        job_dir / f"hang-{key}.json",
        {"workload": key, "stall_s": stall_s, "reason": why, "ranks": [asdict(r) for r in ranks]},
    )
