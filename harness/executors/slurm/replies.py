"""What Slurm's client commands reply, parsed: sbatch's job id, squeue's states and reasons,
sacct's accounting of each allocation (its earlier runs under the same id too) and its CPU and
memory figures, in the formats Slurm 22.05 prints (docs/reference/sources.md). Pure: text in, records
out; the Slurm executor (executor.py) makes the calls.
"""

from __future__ import annotations

import pwd
import re
from dataclasses import dataclass

from harness.errors import SlurmError

SACCT_FIELDS = "JobID,State,ExitCode,ElapsedRaw,NNodes,NodeList,Start,End"
# What a finished job used, as seff (Slurm's contribs/seff) reckons it: TotalCPU over Elapsed x
# AllocCPUS, and the largest step's sum of task memory peaks (TRESUsageInTot's mem) over the
# memory allocated (AllocTRES's mem). Step rows are needed, so this query has no -X.
USAGE_FIELDS = "JobID,TotalCPU,ElapsedRaw,AllocCPUS,AllocTRES,TRESUsageInTot"


@dataclass(frozen=True)
class Accounting:
    """One allocation's row of `sacct -X -P`."""

    job_id: str
    state: str  # first word: "CANCELLED by 1000" is CANCELLED
    by_uid: int | None  # who cancelled it
    exit_code: int | None
    signal: int | None
    elapsed_s: float | None
    nodes: int | None
    node_list: str | None
    start: str | None
    end: str | None
    # The states of the job's earlier runs under the same id, oldest first: a job Slurm requeued
    # (preemption, a node failure, `scontrol requeue`) has one row per run in `sacct -D`.
    earlier: tuple[str, ...] = ()


@dataclass(frozen=True)
class Usage:
    """A finished job's CPU and memory figures from sacct (USAGE_FIELDS); None where sacct had none."""

    cpu_s: float | None  # TotalCPU: user and system time of all steps
    cpu_efficiency: float | None  # cpu_s / (elapsed x allocated CPUs)
    mem_bytes: int | None  # the largest step's sum of its tasks' memory peaks
    mem_efficiency: float | None  # mem_bytes / the memory allocated


def one_line_of(text: str) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines() if line.strip()) or "(no output)"


def parse_sbatch_reply(stdout: str, stderr: str = "") -> tuple[str, str | None]:
    """(job id, cluster or None) from `sbatch --parsable`, which prints `id` or `id;cluster`."""
    for line in reversed(stdout.splitlines()):
        m = re.fullmatch(r"\s*(\d+)(?:;([A-Za-z0-9_.-]+))?\s*", line)
        if m:
            return m.group(1), m.group(2)
    raise SlurmError(f"sbatch replied without a job id: {one_line_of(stdout + chr(10) + stderr)}")


def parse_squeue(text: str) -> dict[str, tuple[str, str | None]]:
    """{job id: (state, pending reason or None)} from `squeue -h -o %i|%T|%r`."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0].isdigit():
            reason = parts[2] if len(parts) > 2 and parts[2] not in ("", "None", "(null)") else None
            out[parts[0]] = (parts[1], reason)
    return out


def _int(text: str) -> int | None:
    return int(text) if text.strip().lstrip("-").isdigit() else None


def _time(text: str) -> str | None:
    return None if text in ("", "Unknown", "None", "N/A") else text


def parse_sacct(text: str) -> dict[str, Accounting]:
    """{job id: Accounting} from `sacct -X -D -P -n --format=SACCT_FIELDS`; step rows are skipped."""
    out: dict[str, Accounting] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != SACCT_FIELDS.count(",") + 1 or not parts[0].isdigit():
            continue
        job_id, state, exit_code, elapsed, nodes, node_list, start, end = parts
        words = state.split()
        by_uid = _int(words[2]) if len(words) == 3 and words[1] == "by" else None
        code, _, sig = exit_code.partition(":")
        # sacct -D lists a requeued job's runs oldest first; the last is the one that counts
        before = out.get(job_id)
        earlier = (*before.earlier, before.state) if before else ()
        out[job_id] = Accounting(
            job_id=job_id,
            state=words[0] if words else "",
            by_uid=by_uid,
            exit_code=_int(code),
            signal=_int(sig),
            elapsed_s=float(elapsed) if elapsed.isdigit() else None,
            nodes=_int(nodes),
            node_list=node_list or None,
            start=_time(start),
            end=_time(end),
            earlier=earlier,
        )
    return out


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def _cpu_time(text: str) -> float | None:
    """Seconds from sacct's [D-][HH:]MM:SS[.mmm] (TotalCPU)."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)", text.strip())
    if not m:
        return None
    days, hours, mins, secs = m.groups()
    return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(mins) * 60 + float(secs)


def _tres_bytes(tres: str, name: str = "mem") -> int | None:
    """Bytes of one entry of a TRES string ("cpu=4,mem=4000M,node=2"); binary units."""
    for item in tres.split(","):
        key, _, value = item.partition("=")
        m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]?)", value.strip())
        if key == name and m:
            return int(float(m.group(1)) * _UNITS[m.group(2)])
    return None


def parse_usage(text: str) -> dict[str, Usage]:
    """{job id: Usage} from `sacct -P -n --format=USAGE_FIELDS -j IDS` (allocation and step rows)."""
    jobs: dict[str, list[str]] = {}
    mem: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != USAGE_FIELDS.count(",") + 1:
            continue
        job_id, step = parts[0].partition(".")[::2]
        if not job_id.isdigit():
            continue
        if not step:
            jobs[job_id] = parts
        used = _tres_bytes(parts[5])
        if step and used is not None:
            mem[job_id] = max(mem.get(job_id, 0), used)
    out = {}
    for job_id, (_, total_cpu, elapsed, cpus, alloc, _usage) in jobs.items():
        cpu_s = _cpu_time(total_cpu)
        core_s = float(elapsed) * int(cpus) if elapsed.isdigit() and cpus.isdigit() else 0.0
        alloc_mem, used = _tres_bytes(alloc), mem.get(job_id)
        out[job_id] = Usage(
            cpu_s=cpu_s,
            cpu_efficiency=cpu_s / core_s if cpu_s is not None and core_s > 0 else None,
            mem_bytes=used,
            mem_efficiency=used / alloc_mem if used is not None and alloc_mem else None,
        )
    return out


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
