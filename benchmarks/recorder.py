"""A rank's flight-recorder dump, written when the harness asks for it (docs/guides/hangs.md,
"The flight recorder").

PyTorch's flight recorder keeps each rank's last collectives in a ring buffer when the job's
environment sizes it (TORCH_FR_BUFFER_SIZE; TORCH_NCCL_TRACE_BUFFER_SIZE on releases before
the name was shared with gloo). NCCL's watchdog dumps it on a process-group timeout; nothing
dumps gloo's. So each rank of a workload whose result has a folder runs a thread that waits for
the harness's request (a file, flight/<workload>.request, which its stall watch writes) and then
writes the rank's dump to flight/<workload>.rank<R>, the name NCCL's own dump takes
(TORCH_NCCL_DEBUG_INFO_TEMP_FILE, to which torch appends the rank). The thread runs while the
main thread is blocked inside a collective, since torch releases the GIL there; a rank that is
stopped (SIGSTOP) or dead cannot dump, and the harness says so. A rank whose workload raises
(a collective's timeout, a peer gone) dumps too, before it ends.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

from .results import atomic_write_bytes

DIR = "flight"  # beside the workload's result file: jobs/<job>/flight/
POLL_S = 1.0  # how often the thread looks for the request: one stat a second
# The buffer's size, by the name each torch release reads: TORCH_FR_* since the recorder was
# shared by the backends (torch 2.8), TORCH_NCCL_* before, and still read as a fallback.
BUFFER_VARIABLES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")


def request_path(folder: str | os.PathLike, key: str) -> str:
    """The file whose appearance asks every rank of workload `key` for its dump."""
    return os.path.join(folder, f"{key}.request")


def dump_path(folder: str | os.PathLike, key: str, rank: int) -> str:
    """Where rank `rank` writes its dump of workload `key`: NCCL's name for it."""
    return os.path.join(folder, f"{key}.rank{rank}")


def recording(env: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether the recorder keeps anything: a buffer size above 0 by either name."""
    for name in BUFFER_VARIABLES:
        with contextlib.suppress(ValueError):
            if int(env.get(name, "0")) > 0:
                return True
    return False


def dumper(backend: str) -> Callable[[], bytes] | None:
    """The function of this torch that returns the recorder's dump (a pickle of plain data) for
    `backend`, or None where it has none: gloo's recorder came with torch 2.8
    (`_dump_fr_trace`); NCCL's dump takes its three flags since torch 2.4, none before."""
    from torch._C import _distributed_c10d as c10d

    name = "_dump_fr_trace" if backend == "gloo" else "_dump_nccl_trace" if backend == "nccl" else None
    found = getattr(c10d, name, None) if name else None
    if found is None:
        return None

    def dump() -> bytes:
        try:
            # collectives, no C++ stacks, every entry (not only those still running)
            return found(True, False, False)
        except TypeError:
            return found()

    return dump


class Recorder:
    """One workload's dump on request, in a thread of its own; does nothing without a result
    folder (`bench run` by hand), a recorder that keeps anything, or a torch that can dump it."""

    def __init__(self, json_path: str | None, rank: int, backend: str) -> None:
        self._dump = dumper(backend) if json_path and recording() else None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        if self._dump is None or not json_path:
            return
        folder = os.path.join(os.path.dirname(json_path), DIR)
        key = os.path.splitext(os.path.basename(json_path))[0]
        os.makedirs(folder, exist_ok=True)
        self._request, self._path = request_path(folder, key), dump_path(folder, key, rank)
        self._thread = threading.Thread(target=self._wait, name="bench-flight-recorder", daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        while not self._stop.wait(POLL_S):
            if os.path.exists(self._request):
                self.dump()
                return

    def dump(self) -> None:
        """Write the rank's dump now, once; a dump that fails leaves nothing, and the harness says
        the rank did not dump."""
        if self._dump is None:
            return
        with self._lock:
            if self._dump is None:
                return
            dump, self._dump = self._dump, None
            with contextlib.suppress(Exception):  # the job's own failure is what it reports
                atomic_write_bytes(self._path, dump())

    def close(self) -> None:
        self._stop.set()
