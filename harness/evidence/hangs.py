"""Hang attribution (docs/guides/hangs.md): when a workload's ranks stop making progress, say which rank
held the others and where each one was.

Each rank keeps a progress file (benchmarks/progress.py) with its host, pid and phase. When no
rank has moved for the stall limit, the harness reads each rank's process state (/proc/PID/stat
on its node), asks every rank that can still run for its Python stack (STACK_SIGNAL, answered by
faulthandler) and names the odd ones out: a rank stopped (state T) or dead, or a rank in another
phase than the rest, e.g. "rank 2 on bnode3 is stopped (state T); ranks 0, 1, 3 wait in
all_reduce (all_reduce 4M)".

The local executor watches its jobs itself. A Slurm job is watched from inside: beside each step
the batch script runs `python -m harness.hangs watch`, which reads the progress files on the
shared run directory and, on a stall, runs one `srun --overlap` task per node (`probe`) to read
the states and ask for the stacks of the ranks on that node, then ends the step.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.common import runs
from benchmarks.progress import DIR as PROGRESS_DIR
from benchmarks.progress import STACK_SIGNAL
from benchmarks.results import json_bytes, open_regular, read_regular
from harness.evidence import flight
from harness.files import inside

# /proc/PID/stat's state letters (proc(5)) that mean the rank cannot take part any more
# A progress file or hang record is a few hundred bytes, and one dump of a rank's stacks a few
# KiB (faulthandler prints at most 100 frames a thread); what is larger is not bench's.
RECORD_LIMIT = 2**20
STACK_LIMIT = 16 * 2**20
_STOPPED = {"T": "stopped", "t": "stopped by a tracer", "Z": "a zombie", "X": "dead"}
UNKNOWN = "?"  # a rank on a node whose probe did not answer: neither running nor known to be gone
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
            d = json.loads(read_regular(path, RECORD_LIMIT))
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
            with open_regular(folder / f"{key}.rank{r.rank}.stack") as f:
                f.seek(since.get(r.rank, 0))
                text = f.read(STACK_LIMIT).decode(errors="replace")
        except OSError:
            continue
        r.where = innermost(text)


def _ranks_text(ranks: Iterable[Rank | int]) -> str:
    """ "rank 3", or "ranks 0, 2, 5-4098": three or more in a row as a span, so that the ranks of
    a job of thousands read as a few."""
    numbers = sorted(r if isinstance(r, int) else r.rank for r in ranks)
    words = [f"{a}-{b}" if b - a >= 2 else ", ".join(map(str, range(a, b + 1))) for a, b in runs(numbers)]
    return ("rank " if len(numbers) == 1 else "ranks ") + ", ".join(words)


def attribute(ranks: list[Rank], world: int) -> str:
    """The hang in words: the ranks that cannot go on (stopped, dead, never started), then the
    ranks grouped by where they wait."""
    parts = []
    missing = sorted(set(range(world)) - {r.rank for r in ranks})
    if missing:
        parts.append(f"{_ranks_text(missing)} never reported progress")
    stuck = [r for r in ranks if r.state is None or r.state in _STOPPED]
    for r in stuck:
        what = "is gone" if r.state is None else f"is {_STOPPED[r.state]} (state {r.state})"
        parts.append(f"{r.name} {what} in {r.phase}")
    unknown = [r for r in ranks if r.state == UNKNOWN]
    if unknown:
        hosts = ", ".join(dict.fromkeys(r.host for r in unknown))
        parts.append(f"{_ranks_text(unknown)} on {hosts}: state unknown (the node's probe did not answer)")
    held = {id(r) for r in stuck + unknown}
    live = [r for r in ranks if id(r) not in held]
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


def probe_local(ranks: list[Rank]) -> None:
    """Read the ranks' states and ask for their stacks, here: the ranks run on this machine."""
    for r in ranks:
        r.state = process_state(r.pid)
    ask_for_stacks(ranks)


def probe_here(ranks: list[Rank]) -> list[Rank]:
    """The ranks that run on this host, probed (`probe_local`)."""
    here = socket.gethostname()
    mine = [r for r in ranks if r.host == here]
    probe_local(mine)
    return mine


Probe = Callable[[list[Rank]], None]


# How long the ranks that can run have to write their flight-recorder dumps once asked: a rank
# looks for the request once a second (benchmarks/recorder.py), and a shared file system may lag.
FLIGHT_WAIT_S = 15.0


def diagnose(
    folder: Path, key: str, world: int, probe: Probe = probe_local, wait_s: float = 2.0, flight_s: float = FLIGHT_WAIT_S
) -> tuple[str, list[Rank], flight.Reading]:
    """Read the ranks of a stalled workload, take their states and stacks (`probe` sets each
    rank's state and asks for its stack on whichever node it runs; by default on this machine),
    ask them for their flight-recorder dumps and wait up to `flight_s` for those that can run,
    read the dumps, and say what held them."""
    ranks = read_ranks(folder, key)
    before = stack_sizes(folder, key, ranks)
    job_dir = folder.parent
    flight.ask(job_dir, key)
    probe(ranks)
    time.sleep(wait_s)  # faulthandler writes at once; a shared file system may lag a little
    read_stacks(folder, key, ranks, before)
    able = [r.rank for r in ranks if r.state is not None and r.state not in _STOPPED]
    flight.wait_for(job_dir, key, able, flight_s, first_s=min(flight_s, 5.0))
    reading = flight.examine(job_dir, key, world)
    return f"{attribute(ranks, world)}; {recorded(reading, world)}", ranks, reading


def after_failure(why: str | None, job_dir: Path, key: str | None, world: int) -> str:
    """What a failure's reason adds after its head ("allreduce failed (exit code 1)"): the log's
    line that says why, and what the flight recorder says where the ranks dumped it as their
    collective raised (benchmarks/recorder.py); "" when neither says anything."""
    said = [why] if why else []
    if key is not None and any((job_dir / flight.DIR).glob(f"{glob.escape(key)}.rank*")):
        said.append(recorded(flight.examine(job_dir, key, world), world))
    return f": {'; '.join(said)}" if said else ""


def recorded(reading: flight.Reading, world: int) -> str:
    """The flight recorder's account in words: the collective it stopped in, who entered it and
    who did not, the ranks without a dump, and PyTorch's analyser's findings."""
    if not reading.dumped and not reading.unread:
        return (
            "flight recorder: no rank dumped it (a stopped or dead rank cannot; gloo's recorder needs torch 2.8 "
            "or later)"
        )
    parts = []
    if reading.stuck is not None:
        if reading.entered:
            parts.append(f"{_ranks_text(reading.entered)} entered {reading.stuck.text()} and did not complete it")
        if reading.done:
            # gloo's record counts a call that raised as completed, its error being the end of it
            verb = "completed it" if reading.entered else f"last entered {reading.stuck.text()}, recorded as ended"
            parts.append(f"{_ranks_text(reading.done)} {verb}")
        behind: dict[str, list[int]] = {}
        for rank, text in reading.behind.items():
            behind.setdefault(text, []).append(rank)
        parts += [f"{_ranks_text(ranks)} last entered {text}" for text, ranks in behind.items()]
    missing = sorted(set(range(world)) - set(reading.dumped) - set(reading.unread))
    if missing:
        parts.append(f"no dump from {_ranks_text(missing)}")
    if reading.unread:
        parts.append(f"{_ranks_text(reading.unread)}: dump unreadable")
    if reading.analyser_error:
        parts.append(f"PyTorch's analyser {reading.analyser_error}")
    else:
        parts.append("PyTorch's analyser: " + ("; ".join(reading.analyser) or "no error found"))
    return "flight recorder: " + "; ".join(parts)


def read_record(job_dir: Path, key: str) -> dict | None:
    """The hang record of a workload (`record`), or None when there is none or it is unreadable."""
    try:
        d = json.loads(read_regular(job_dir / f"hang-{key}.json", RECORD_LIMIT))
        ok = isinstance(d, dict) and isinstance(d.get("reason"), str) and isinstance(d.get("stall_s"), (int, float))
        return d if ok else None
    except (OSError, ValueError):
        return None


def record(job_dir: Path, key: str, stall_s: float, why: str, ranks: list[Rank], reading: flight.Reading) -> None:
    """jobs/<job>/hang-<workload>.json: the reason, every rank's host, pid, state, phase and
    where it waited, and the flight recorder's reading; the stacks themselves stay in
    progress/<workload>.rank<R>.stack, the dumps in flight/<workload>.rank<R>."""
    found = {
        "workload": key,
        "stall_s": stall_s,
        "reason": why,
        "ranks": [asdict(r) for r in ranks],
        "flight": reading.as_dict(),
    }
    inside.write(job_dir, f"hang-{key}.json", json_bytes(found))


# --- inside a Slurm job ---------------------------------------------------------------------
# srun(1), Slurm 22.05: "--overlap allows steps to share all resources (CPUs, memory, and GRES)
# with all other steps", so a probe runs beside a step that holds every CPU of the allocation;
# and "If <control-c> is entered twice within one second ... a termination sequence will be
# entered sending SIGCONT, SIGTERM, and SIGKILL to all spawned tasks": the SIGCONT wakes a
# stopped rank, which then ends with the rest.
PROBE_TIMEOUT_S = 60.0
END_GRACE_S = 30.0  # after the two SIGINTs, before srun itself is killed
LOOK_S = 2.0  # how often the watcher reads the progress files


def probe_srun(folder: Path, key: str) -> Probe:
    """A probe that runs `probe` on every node of the allocation, one task each, and takes the
    states they print; ranks on a node that did not answer are left UNKNOWN."""

    def run(ranks: list[Rank]) -> None:
        nodes = os.environ.get("SLURM_NNODES", "1")
        cmd = [
            "srun", "--overlap", f"--nodes={nodes}", "--ntasks-per-node=1", "--cpus-per-task=1",
            "--kill-on-bad-exit=0", "--job-name=bench-hang-probe",
            sys.executable, "-m", "harness.hangs", "probe", str(folder), key,
        ]  # fmt: skip
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        states: dict[int, str | None] = {}
        for line in out.splitlines():
            try:
                d = json.loads(line)
                states[int(d["rank"])] = None if d["state"] is None else str(d["state"])
            except (ValueError, KeyError, TypeError):
                continue
        for r in ranks:
            r.state = states.get(r.rank, UNKNOWN)

    return run


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return process_state(pid) not in ("Z", "X", None)


def end_step(pid: int) -> None:
    """End a step's srun: two SIGINTs within a second (its termination sequence, which wakes a
    stopped task first), then SIGKILL if it is still there after END_GRACE_S."""
    for _ in range(2):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
        time.sleep(0.3)
    deadline = time.monotonic() + END_GRACE_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def watch(job_dir: Path, key: str, world: int, stall_s: float, pid: int, look_s: float = LOOK_S) -> bool:
    """Watch one step (srun `pid`) of a Slurm job until it ends; on a stall, attribute it, keep
    the record, say it on stderr (the job's log) and end the step. True when it ended the step."""
    folder, started = job_dir / PROGRESS_DIR, time.time()
    while _alive(pid):
        time.sleep(look_s)
        if not stalled(read_ranks(folder, key), world, started, stall_s):
            continue
        why, ranks, reading = diagnose(folder, key, world, probe=probe_srun(folder, key))
        record(job_dir, key, stall_s, why, ranks, reading)
        print(f"bench: {key} made no progress for {stall_s:g} s: {why}", file=sys.stderr, flush=True)
        end_step(pid)
        return True
    return False


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.hangs watch|probe`, run by a Slurm job's batch script and its probe
    steps; not a user command."""
    parser = argparse.ArgumentParser(prog="python -m harness.hangs")
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("watch", help="watch one step's progress files; attribute and end it on a stall")
    w.add_argument("job_dir", type=Path)
    w.add_argument("key")
    w.add_argument("--world", type=int, required=True)
    w.add_argument("--stall-s", type=float, required=True)
    w.add_argument("--pid", type=int, required=True)
    p = sub.add_parser("probe", help="print the states of this node's ranks and ask them for their stacks")
    p.add_argument("folder", type=Path)
    p.add_argument("key")
    args = parser.parse_args(argv)
    if args.command == "watch":
        watch(args.job_dir, args.key, args.world, args.stall_s, args.pid)
        return 0
    for r in probe_here(read_ranks(args.folder, args.key)):
        print(json.dumps({"rank": r.rank, "state": r.state}), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
