"""Writing an output the user named (`--csv`, `--markdown`, `report --out`, `history plot --out`).

What each kind of path gets (docs/concepts/hardening.md):
- a regular file, or a new one: written atomically (a temporary file renamed over it), with the
  replaced file's mode, or 0666 less the umask for a new file;
- a symbolic link: followed, and its final target gets the rule for its kind; the link stays;
- a character device or a FIFO (/dev/null, /dev/stdout on a terminal or pipe, a named pipe):
  written through, never replaced;
- anything reached through /dev/ or /proc/ (/dev/stdout, /dev/fd/3): written through, even when
  it leads to a regular file, which is then appended to, as a shell's `>>` would;
- a block device, a socket, a directory, or a link to nothing: refused with one line.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

from benchmarks.results import atomic_write_bytes, write_all
from harness.errors import OutputError

_STREAM_ROOTS = ("/dev/", "/proc/")


def kind(path: Path, flag: str) -> str:
    """ "replace" or "through": how `path` will be written; OutputError if it will not be."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.lexists(path):
            raise OutputError(f"{flag} {path}: a symbolic link to {os.readlink(path)}, which does not exist") from None
        if not path.parent.is_dir():
            raise OutputError(f"{flag} {path}: no such directory {path.parent}") from None
        return "replace"
    except OSError as exc:
        raise OutputError(f"{flag} {path}: {exc.strerror or exc}") from None
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise OutputError(f"{flag} {path}: is a directory; give a file name")
    if stat.S_ISBLK(mode):
        raise OutputError(f"{flag} {path}: is a block device; bench writes no output onto a disk")
    if stat.S_ISSOCK(mode):
        raise OutputError(f"{flag} {path}: is a socket; give a file, a FIFO or /dev/stdout")
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return "through"
    if os.path.abspath(path).startswith(_STREAM_ROOTS):
        return "through"
    return "replace"


def check(path: str | None, flag: str) -> Path | None:
    """The output path of `flag`, checked before any work is done (None when not given)."""
    if path is None:
        return None
    p = Path(path)
    kind(p, flag)
    return p


def write(path: Path, data: bytes, flag: str) -> None:
    """Write `data` to the user-named `path` by the rules above."""
    how = kind(path, flag)
    try:
        if how == "replace":
            atomic_write_bytes(Path(os.path.realpath(path)), data)
            return
        own = _own_descriptor(path)
        if own is not None:
            # bench's own stdout or stderr: through the descriptor it already has, after what it
            # printed so far. Opening the path anew would start a second file offset, which
            # overwrites earlier output when the shell redirected with `>`.
            sys.stdout.flush()
            sys.stderr.flush()
            write_all(own, data)
            return
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_APPEND | os.O_CLOEXEC)
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None


_OWN = re.compile(r"/dev/(?:(?P<name>stdout|stderr)|fd/(?P<fd>\d+))|/proc/(?:self|thread-self)/fd/(?P<pfd>\d+)")


def _own_descriptor(path: Path) -> int | None:
    """The descriptor of this process that `path` names (/dev/stdout, /dev/fd/N), or None."""
    m = _OWN.fullmatch(os.path.normpath(str(path)))
    if not m:
        return None
    if m["name"]:
        return {"stdout": 1, "stderr": 2}[m["name"]]
    return int(m["fd"] or m["pfd"])


def beside(path: Path, suffix: str) -> Path | None:
    """A companion file next to a replaced output (plot.png -> plot.csv); None for a stream,
    beside which nothing is created (no /dev/stdout.csv)."""
    try:
        through = kind(path, "") == "through"
    except OutputError:
        through = True
    return None if through else Path(os.path.realpath(path)).with_suffix(suffix)
