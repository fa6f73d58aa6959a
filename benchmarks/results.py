"""Result files: the schema version, atomic writes and checked loading.

Imports nothing heavy, so the harness can use it without paying for torch.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from .catalog import PROBES, WORKLOADS

# Bump when a field of the result JSON changes meaning or disappears.
SCHEMA_VERSION = 1


class ResultError(ValueError):
    """A result file that cannot be used: unreadable, partial or of another schema."""


# A summary row's status where the collective's output check found a wrong element: measured,
# and not a figure of a working fabric. nccl-tests fails such a run (its "# Out of bounds values
# : N FAILED" and exit status 1), and so does bench (docs/reference/sources.md, "The output check").
WRONG_RESULTS = "WRONG_RESULTS"


def wrong_count(row: Mapping[str, Any]) -> int:
    """Elements of one collective row that failed the output check, in place and out of place:
    0 where the check passed or did not run. A count that is not a number is left to the
    result's own checks (harness/collect/gather.py refuses it)."""
    counts = (row.get("wrong"), row.get("oop_wrong"))
    return int(sum(c for c in counts if isinstance(c, (int, float)) and not isinstance(c, bool) and c > 0))


def wrong_results(rows: Iterable[Mapping[str, Any]]) -> str | None:
    """What a collective result's output check found, in one phrase that names each collective,
    group and size count with wrong elements, or None where none was wrong."""
    total, where = 0, dict[str, int]()
    for row in rows:
        n = wrong_count(row)
        if n:
            total += n
            key = f"{row.get('collective')} ({row.get('group', 'world')})"
            where[key] = where.get(key, 0) + 1
    if not total:
        return None
    at = ", ".join(f"{key} at {n} size{'s' if n > 1 else ''}" for key, n in where.items())
    return f"wrong results: {total} element{'s' if total > 1 else ''} failed the output check, {at}"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees the old file or the new one, never a mix.

    The temporary file lives in the target's directory, so the final rename stays on one
    filesystem and is atomic; it is fsynced first, so a crash cannot leave an empty file.
    """
    path = Path(path)
    if _write_through(path, data):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode_for(path))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def is_stream(path: str | os.PathLike) -> bool:
    """Whether `path` names a character device or a FIFO: written through, and nothing is
    written beside it (a per-rank file or progress records beside /dev/null would land in /dev)."""
    mode = _mode(path)
    return mode is not None and _streams(mode)


def _streams(mode: int) -> bool:
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _mode(path: str | os.PathLike) -> int | None:
    try:
        return os.stat(path).st_mode
    except OSError:
        return None


def _write_through(path: Path, data: bytes) -> bool:
    """Whether `path` names a character device or a FIFO (/dev/null, a named pipe), which is
    written through, never replaced by a file: renaming over /dev/null as root would remove the
    device (docs/concepts/hardening.md, "Outputs"). A directory, a block device or a socket is an
    OSError naming it; anything else is for the atomic write."""
    mode = _mode(path)
    if mode is None or stat.S_ISREG(mode):
        return False
    if not _streams(mode):
        raise NotARegularFile(errno.EINVAL, f"{kind_of(mode)}: bench writes a file, a FIFO or a device", str(path))
    fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)
    return True


def umask() -> int:
    """The process's umask, read without changing it where Linux shows it (/proc, since 4.7):
    setting it to read it back would race with other threads creating files."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def mode_for(path: str | os.PathLike, dir_fd: int | None = None) -> int:
    """The mode of a file written in place of `path` (relative to `dir_fd` when given): the mode
    of the regular file it replaces, else what open(2) would give a new file (0666 less the
    umask), as any Unix tool does; mkstemp's 0600 would make a team's shared results unreadable
    to the team."""
    try:
        st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    return 0o666 & ~umask()


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to the descriptor `fd` (os.write may write less than it is given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def json_bytes(obj: Any) -> bytes:
    """The bytes a JSON file of bench holds. allow_nan=False: NaN is not JSON; callers store
    missing values as null."""
    return (json.dumps(obj, indent=1, allow_nan=False) + "\n").encode()


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_bytes(path, json_bytes(obj))


try:  # 3-4x faster parsing where installed (the harness depends on it; a job need not)
    from orjson import JSONDecodeError as _DecodeError
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - exercised on machines without orjson
    from json import JSONDecodeError as _DecodeError  # type: ignore[assignment]
    from json import loads as _loads  # type: ignore[assignment]


_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotARegularFile(OSError):
    """A path bench reads that is not a regular file (a FIFO, a device, a directory, a socket),
    or one larger than its bound."""

    def __str__(self) -> str:
        return str(self.strerror)


def kind_of(mode: int) -> str:
    """What a file of this st_mode is, in words: "a FIFO", "a directory", "a regular file"."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file")


def open_regular(path: Path | str) -> IO[bytes]:
    """`path` opened for reading, if it is a regular file: opened with O_NONBLOCK (so a FIFO
    does not wait for a writer), then checked with fstat. NotARegularFile otherwise."""
    fd, _ = _regular_fd(path)
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path | str, limit: int) -> bytes:
    """The bytes of the regular file `path`, NotARegularFile when it is not one or holds more than
    `limit` bytes (the bound is read, never more: a file still growing ends there). Read from the
    descriptor, with no file object, since a collect reads thousands of small results."""
    fd, size = _regular_fd(path)
    try:
        # As much as fstat says the file holds, and a byte more to see it grow, never `limit`:
        # a read of 64 MiB allocates 64 MiB before it reads, for each small file.
        data = _read_up_to(fd, min(size, limit) + 1)
        if len(data) > size:  # grown since: read on, to the bound
            data += _read_up_to(fd, limit + 1 - len(data))
    finally:
        os.close(fd)
    if len(data) > limit:
        raise NotARegularFile(errno.EFBIG, f"larger than {limit:,} bytes", str(path))
    return data


def _regular_fd(path: Path | str) -> tuple[int, int]:
    """(descriptor, size) of `path` opened for blocking reads, or NotARegularFile: opened with
    O_NONBLOCK, so that a FIFO does not wait for a writer, and checked with fstat before reading."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(errno.EINVAL, f"{kind_of(st.st_mode)}, not a file", str(path))
        os.set_blocking(fd, True)
        return fd, st.st_size
    except BaseException:
        os.close(fd)
        raise


def _read_up_to(fd: int, n: int) -> bytes:
    """Up to `n` bytes of `fd`, fewer only at the end of the file: read(2) may return less (procfs
    a page at a time), and each read asks at most 1 MiB, since os.read allocates what it asks."""
    parts = []
    while n > 0 and (part := os.read(fd, min(n, 1 << 20))):
        parts.append(part)
        n -= len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


# A result is a few KiB and holds its samples: a training result one step time of about 10 bytes
# a step, so 1,000,000 steps (the most a sweep may ask) take about 10 MB. What is larger is not
# a result.
RESULT_LIMIT = 64 * 2**20


LINE_LIMIT = 64 * 1024  # longer than any line NCCL, torch or bench prints (docs/concepts/transport.md)


def bounded_lines(f: IO[bytes], limit: int = LINE_LIMIT, chunk: int = 2**20) -> Iterator[str]:
    """The lines of the binary file `f`, decoded as UTF-8 (bad bytes replaced), each cut to its
    first `limit` bytes: one pass over the file in chunks, so a log of one endless line costs
    time linear in its size and memory bounded by `chunk` and `limit`."""
    line = bytearray()
    while block := f.read(chunk):
        start = 0
        while start < len(block):
            end = block.find(b"\n", start)
            stop = len(block) if end < 0 else end
            room = limit - len(line)
            if room > 0:  # what is past the limit is skipped, never copied
                line += block[start : min(stop, start + room)]
            if end < 0:
                break
            yield line.decode(errors="replace")
            line.clear()
            start = end + 1
    if line:
        yield line.decode(errors="replace")


def load_result(path: str | os.PathLike) -> dict[str, Any]:
    """Read a workload's result JSON, rejecting anything that is not a complete result of our
    schema, and reading nothing that is not a regular file (a FIFO, a device: open_regular)."""
    path = Path(path)
    try:
        data = _loads(read_regular(path, RESULT_LIMIT))
    except (OSError, UnicodeDecodeError, ValueError, _DecodeError) as exc:
        raise ResultError(f"{path}: not a readable result file ({exc})") from None
    if not isinstance(data, dict):
        raise ResultError(f"{path}: not a result file (top level is {type(data).__name__}, not an object)")
    found = data.get("schema_version")
    if found != SCHEMA_VERSION:
        raise ResultError(f"{path}: schema_version required {SCHEMA_VERSION}, found {found!r}")
    if data.get("workload") not in (*WORKLOADS, *PROBES):
        raise ResultError(f"{path}: unknown workload {data.get('workload')!r}")
    return data
