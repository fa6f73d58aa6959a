"""Work split over forked worker processes, Linux only: each worker runs one function and hands
back what it made in a memory file (memfd_create(2)) that the parent maps and reads where it
lies: its Arrow tables as IPC streams, the rest pickled with its arrays' buffers beside the
pickle (protocol 5's out-of-band buffers, PEP 574), so that they are not copied again on this
side (docs/reference/run-directory.md, "Collect"; docs/guides/fleet.md, "A large run against a month of nights")."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from harness.errors import BenchError

if TYPE_CHECKING:
    import pyarrow as pa

Made = tuple[list["pa.Table"], Any]  # a worker's tables, and whatever else it made (picklable)
MAX_WORKERS = 8
T = TypeVar("T")


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


@contextlib.contextmanager
def beside(work: Callable[[], T]) -> Iterator[Callable[[], T]]:
    """`work` done by a forked worker while this process goes on with its own: the function
    given waits for the worker and returns what `work` returned. A BenchError that `work`
    raised there is raised here. Where no worker can run (usable) or it left no whole result
    (killed, out of memory, a result that cannot be pickled), `work` is done here when the
    function is called: the outcome is the same, only later. Leaving the block ends a worker
    still running (this process was interrupted, or failed in its own part)."""
    worker = None
    if usable(2) > 1:
        with contextlib.suppress(OSError):  # no more processes or memory to fork with
            worker = Worker(lambda: ([], _outcome(work)))

    def result() -> T:
        made = worker.result() if worker else None
        if made is None:
            return work()
        done, value = made[1]
        if not done:
            raise value
        return value

    try:
        yield result
    finally:
        if worker:
            worker.end()


def _outcome(work: Callable[[], T]) -> tuple[bool, Any]:
    """(True, what `work` returned) or (False, the BenchError it raised), for `beside`; an error
    that would not come back whole from its pickle (one whose __init__ takes other arguments
    than its message) fails the worker, and the parent does the work itself."""
    try:
        return True, work()
    except BenchError as exc:
        pickle.loads(pickle.dumps(exc))
        return False, exc


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
    """`made` into `file`: each table's IPC stream, then each out-of-band buffer of the pickled
    rest, each from a multiple of 64 bytes (Arrow's alignment); then the pickle itself with the
    pieces' offsets, and its length in the last 8 bytes. Arrow writes the streams straight into
    the file (opened again through /proc): no copy in memory first."""
    tables, rest = made
    buffers: list[pickle.PickleBuffer] = []
    pickled = pickle.dumps(rest, protocol=5, buffer_callback=buffers.append)
    pieces = []  # (start, end) of each
    path = f"/proc/self/fd/{file}"
    if tables:
        import pyarrow as pa

        sink: Any = pa.OSFile(path, "wb")
    else:  # a pickle alone: no import of Arrow in a process that has none
        sink = open(path, "wb")  # noqa: SIM115  (closed by the with below)
    with sink:
        for table in tables:
            start = sink.tell()
            with pa.ipc.new_stream(sink, table.schema) as stream:
                stream.write_table(table)
            pieces.append((start, sink.tell()))
            sink.write(bytes(-sink.tell() % 64))
        for buffer in buffers:
            start = sink.tell()
            sink.write(buffer.raw())
            pieces.append((start, sink.tell()))
            sink.write(bytes(-sink.tell() % 64))
        tail = pickle.dumps((len(tables), pieces, pickled), protocol=pickle.HIGHEST_PROTOCOL)
        sink.write(tail + len(tail).to_bytes(8, "little"))


def _read(file: int) -> Made:
    """What _write left in `file`, mapped rather than read. The mapping is private and writable,
    so that an array unpickled onto it can be changed in place as one made here could (a change
    copies the page it touches, and never reaches the file)."""
    import mmap

    size = os.fstat(file).st_size
    whole = memoryview(mmap.mmap(file, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE))
    length = int.from_bytes(whole[-8:], "little")
    n_tables, where, pickled = pickle.loads(whole[-8 - length : -8])
    pieces = [whole[a:b] for a, b in where]
    tables = []
    if n_tables:
        import pyarrow as pa

        tables = [pa.ipc.open_stream(pa.py_buffer(piece)).read_all() for piece in pieces[:n_tables]]
    return tables, pickle.loads(pickled, buffers=pieces[n_tables:])
