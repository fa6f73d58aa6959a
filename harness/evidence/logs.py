"""Reading job logs: their last lines, and the one line that says why a launch failed.

The executors record both in the job table; the patterns are the lines torchrun, srun and the
workloads themselves print when a rank fails (docs/reference/sources.md).
"""

from __future__ import annotations

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
        # An agent that srun or torchrun stopped because another rank failed raises
        # SignalException: a consequence. The failing rank's own line says why.
        causes = [f for f in found if not f.startswith(_STOPPED)]
        if causes or found:
            return (causes or found)[-1]
    return None
