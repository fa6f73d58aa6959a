"""Reading job logs: their last lines, and the one line that says why a launch failed.

The executors record both in the job table; the patterns are the lines torchrun, srun and the
workloads themselves print when a rank fails (docs/reference/sources.md).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from benchmarks.results import open_regular


def tail(path: Path, lines: int = 20, max_bytes: int = 64 * 1024) -> str:
    """The last lines of a log, read from its end (logs can be large)."""
    try:
        with open_regular(path) as f:  # a FIFO or a device planted in a run is not waited on
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


_OUR_ERROR = re.compile(r"bench run \w+: error: .*")
_EXCEPTION = re.compile(r"\b\w*(?:Error|Exception): .*")
# A rank killed by a signal leaves no exception: torchrun's root-cause block and srun name it.
_SIGNALLED = re.compile(r"Signal \d+ \(SIG\w+\) received by PID \d+")
_STOPPED = "SignalException: "
_SRUN_TASK = re.compile(r"srun: error: (\S+: task \d+: (?!Exited with exit code).*)")
# A C++ exception nothing caught ends the process in std::terminate, which prints its type and
# then its what() (libstdc++'s verbose terminate handler): gloo's enforce failures end a rank so.
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']+)'")
_WHAT = re.compile(r"^\s*what\(\):\s+(.*)")
# What a rank says when its peer is gone: the peer's own line says why.
_PEER_GONE = ("Connection reset by peer", "Connection closed by peer")


def error_line(text: str) -> str | None:
    """The line of a failed launch's log that says why: a workload's own one-line error, else
    the last exception line that is not torchrun's wrapper (ChildFailedError) around it, else
    the signal that killed a rank."""
    lines = text.splitlines()
    for line in lines:
        m = _OUR_ERROR.search(line)
        if m:
            return m.group(0)
    for pattern, group in ((_EXCEPTION, 0), (_SIGNALLED, 0), (_SRUN_TASK, 1)):
        found = [m.group(group) for line in lines if "ChildFailedError" not in line and (m := pattern.search(line))]
        if pattern is _EXCEPTION:
            found = _terminated(lines) + found
        # An agent that srun or torchrun stopped because another rank failed raises
        # SignalException, and a rank whose peer died reads a reset connection: consequences.
        # The failing rank's own line says why.
        causes = [f for f in found if not f.startswith(_STOPPED) and not any(p in f for p in _PEER_GONE)]
        if causes or found:
            return (causes or found)[-1]
    return None


def _terminated(lines: list[str]) -> list[str]:
    """Each uncaught C++ exception of the log, as "TYPE: WHAT"."""
    out = []
    for line, after in itertools.pairwise(lines):
        if (m := _TERMINATE.search(line)) and (what := _WHAT.match(after)):
            out.append(f"{m.group(1)}: {what.group(1)}")
    return out
