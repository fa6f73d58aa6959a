"""Result files: the schema version, atomic writes and checked loading.

Imports nothing heavy, so the harness can use it without paying for torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

# Bump when a field of the result JSON changes meaning or disappears.
SCHEMA_VERSION = 1


class ResultError(ValueError):
    """A result file that cannot be used: unreadable, partial or of another schema."""


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees the old file or the new one, never a mix.

    The temporary file lives in the target's directory, so the final rename stays on one
    filesystem and is atomic; it is fsynced first, so a crash cannot leave an empty file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _mode_for(path))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


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


def _mode_for(path: Path) -> int:
    """The mode of a file written in place of `path`: the mode of the file it replaces, else
    what open(2) would give a new file (0666 less the umask), as any Unix tool does; mkstemp's
    0600 would make a team's shared results unreadable to the team."""
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    return 0o666 & ~umask()


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    # allow_nan=False: NaN is not JSON; callers store missing values as null.
    atomic_write_text(path, json.dumps(obj, indent=1, allow_nan=False) + "\n")


try:  # 3-4x faster parsing where installed (the harness depends on it; a job need not)
    from orjson import JSONDecodeError as _DecodeError
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - exercised on machines without orjson
    from json import JSONDecodeError as _DecodeError  # type: ignore[assignment]
    from json import loads as _loads  # type: ignore[assignment]


def load_result(path: str | os.PathLike) -> dict[str, Any]:
    """Read a workload's result JSON, rejecting anything that is not a complete result of our schema."""
    path = Path(path)
    try:
        data = _loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, ValueError, _DecodeError) as exc:
        raise ResultError(f"{path}: not a readable result file ({exc})") from None
    if not isinstance(data, dict):
        raise ResultError(f"{path}: not a result file (top level is {type(data).__name__}, not an object)")
    found = data.get("schema_version")
    if found != SCHEMA_VERSION:
        raise ResultError(f"{path}: schema_version required {SCHEMA_VERSION}, found {found!r}")
    if data.get("workload") not in ("allreduce", "synthetic", "real"):
        raise ResultError(f"{path}: unknown workload {data.get('workload')!r}")
    return data
