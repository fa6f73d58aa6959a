"""Work split over forked worker processes, Linux only: each worker runs one function and hands
back what it made, its Arrow tables as IPC streams in a memory file (memfd_create(2)) that the
parent maps and reads where they lie, the rest pickled (docs/run-directory.md, "Collect")."""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import pyarrow as pa

Made = tuple[list["pa.Table"], Any]  # a worker's tables, and whatever else it made (picklable)
MAX_WORKERS = 8


def usable(wanted: int) -> int:
    """How many processes of `wanted` (this one among them) to run: at most one per core this
    process may run on and MAX_WORKERS; one where a fork is not safe (another thread, whose locks
    a worker would inherit held) or where Linux's affinity, memfd and /proc are not there."""
    linux = all(hasattr(os, f) for f in ("sched_getaffinity", "memfd_create")) and os.path.isdir("/proc/self/fd")
    if threading.active_count() > 1 or not linux:
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), MAX_WORKERS, wanted))


class Worker:
    """A forked process that runs `work` and leaves what it made in a memory file for this
    process to map. The worker writes it while this process does its own share, and nothing of
    the tables is copied again on this side."""

    def __init__(self, work: Callable[[], Made]) -> None:
        self.file = os.memfd_create("bench-worker", os.MFD_CLOEXEC)
        # Ctrl-C held back over the fork, so that the worker meets it only inside _run's catch
        # and never runs on as a second copy of this process
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self.pid = os.fork()
            if self.pid == 0:
                _run(self.file, work, mask)
        except BaseException:
            os.close(self.file)
            raise
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def result(self) -> Made | None:
        """What the worker made, or None where it did not leave a whole one (it was killed, or
        ran out of memory)."""
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        if status != 0:
            return None
        try:
            return _read(self.file)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):
            return None

    def end(self) -> None:
        """The worker stopped and reaped, where it is still running (this process was
        interrupted), and its file closed; what was read from it stays mapped."""
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = 0
        if self.file >= 0:
            os.close(self.file)
            self.file = -1


def _run(file: int, work: Callable[[], Made], mask: set[int | signal.Signals]) -> NoReturn:
    """The forked worker: `work` done and left in `file`, then its end, with no clean-up of the
    parent's state (os._exit). It keeps no descriptor of the parent's but `file`: above all not
    a lock the parent holds (a run's flock would outlive a killed parent for as long as the
    worker ran); its standard streams are /dev/null, since the parent speaks for it."""
    status = 1
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        for name in os.listdir("/proc/self/fd"):
            if int(name) > 2 and int(name) != file:
                with contextlib.suppress(OSError):
                    os.close(int(name))
        _write(file, work())
        status = 0
    except BaseException:  # Ctrl-C: the parent stops too, and ends this process if it has not
        pass
    os._exit(status)


def _write(file: int, made: Made) -> None:
    """`made` into `file`: each table's IPC stream from a multiple of 64 bytes (Arrow's
    alignment), then the pickled rest with the streams' offsets, and its length in the last 8
    bytes. Arrow writes the streams straight into the file (opened again through /proc): no copy
    in memory first, 0.025 s of a collect worker's 50,000 rows."""
    import pyarrow as pa

    tables, rest = made
    offsets = []
    with pa.OSFile(f"/proc/self/fd/{file}", "wb") as sink:
        for table in tables:
            offsets.append(sink.tell())
            with pa.ipc.new_stream(sink, table.schema) as stream:
                stream.write_table(table)
            sink.write(bytes(-sink.tell() % 64))
        offsets.append(sink.tell())
        tail = pickle.dumps((rest, offsets), protocol=pickle.HIGHEST_PROTOCOL)
        sink.write(tail + len(tail).to_bytes(8, "little"))


def _read(file: int) -> Made:
    """What _write left in `file`, the tables mapped rather than read."""
    import mmap

    import pyarrow as pa

    whole = pa.py_buffer(mmap.mmap(file, os.fstat(file).st_size, prot=mmap.PROT_READ))
    size = int.from_bytes(whole[-8:].to_pybytes(), "little")
    rest, offsets = pickle.loads(whole[-8 - size : -8].to_pybytes())
    tables = [pa.ipc.open_stream(whole.slice(a, b - a)).read_all() for a, b in itertools.pairwise(offsets)]
    return tables, rest
