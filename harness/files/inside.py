"""Files under a run directory, which is data and not instructions (docs/concepts/hardening.md, "Files").

Other users share run directories, copy them and can plant anything in them, and bench may run
over them as root. So:

- Writing and removing: every path below the run directory is reached one name at a time from a
  descriptor of the directory, each directory opened with O_NOFOLLOW (openat(2)). A symbolic link
  or a file where bench keeps a directory is refused with one line naming it, exit 2. A file is
  written under a temporary name created with O_EXCL | O_NOFOLLOW and renamed over its name
  within that directory: rename(2) replaces a link of that name, never what the link points to.
  A directory is removed through descriptors, level by level, each opened with O_NOFOLLOW. So
  nothing outside the run directory is written or removed, whatever the directory holds and
  however it changes underneath.
- A job's own shell (harness/executors/slurm/script.py) removes and appends through the same
  descriptors, by `python -m harness.inside clear PATTERN...` and `... append FILE`, run in the
  run directory: the shell's `rm` and `>>` would follow a link planted while the job waited.
- Reading (benchmarks/results.py, `open_regular` and `read_regular`): a file is opened without
  blocking and checked to be a regular file before a byte is read (a FIFO would wait for a
  writer forever, a device never end), and read up to a bound.

The run directory itself is followed if it is a link: the user named it.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import secrets
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from benchmarks.results import kind_of, mode_for, write_all
from harness.errors import RunDirError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _names(rel: str | PurePosixPath) -> list[str]:
    parts = [p for p in PurePosixPath(rel).parts if p not in ("", ".")]
    if any(p in ("/", "..") for p in parts):  # bench's own names never hold either
        raise ValueError(f"{rel}: not a path inside the run directory")
    return parts


@contextlib.contextmanager
def directory(root: Path, rel: str | PurePosixPath = "", create: bool = False) -> Iterator[int]:
    """A descriptor of ROOT/REL, reached without following a link below ROOT; each missing
    directory is made when `create` (FileNotFoundError otherwise)."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        walked = Path(root)
        for name in _names(rel):
            walked = walked / name
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=fd)  # the umask applies, as for any tool
            try:
                sub = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                found = kind_of(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
                raise RunDirError(
                    f"{walked}: {found} where bench keeps a directory; bench follows no link and writes "
                    f"through nothing but its own directories inside a run directory; remove it"
                ) from None
            os.close(fd)
            fd = sub
        yield fd
    finally:
        os.close(fd)


def _split(rel: str | PurePosixPath) -> tuple[str, str]:
    names = _names(rel)
    if not names:
        raise ValueError(f"{rel}: names no file")
    return "/".join(names[:-1]), names[-1]


def write(root: Path, rel: str | PurePosixPath, data: bytes) -> Path:
    """ROOT/REL replaced atomically by `data` (a reader sees the old bytes or the new), its
    directories made as needed. A replaced regular file keeps its mode; a new file gets 0666 less
    the umask, as open(2) would give it. Returns the path written."""
    parent, name = _split(rel)
    with directory(root, parent, create=True) as d:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.stat(name, dir_fd=d, follow_symlinks=False).st_mode):
                raise RunDirError(f"{Path(root, rel)}: a directory where bench writes a file; remove it")
        mode = mode_for(name, dir_fd=d)

        def make(tmp: str) -> None:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=d)
            try:
                os.fchmod(fd, mode)
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)

        _replace(d, name, make)
    return Path(root, rel)


def append(root: Path, rel: str | PurePosixPath) -> BinaryIO:
    """ROOT/REL opened to append to (a job's log) and to read back through the same descriptor
    (os.pread), unbuffered, made with its directories when missing: reached without following a
    link below ROOT, and refused when it is a link or not a regular file (a planted FIFO would
    block the job, a link would send its log elsewhere)."""
    parent, name = _split(rel)
    with directory(root, parent, create=True) as d:
        try:
            fd = os.open(
                name,
                os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                0o666,
                dir_fd=d,
            )
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise RunDirError(f"{Path(root, rel)}: a symbolic link where bench keeps a file; remove it") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise RunDirError(f"{Path(root, rel)}: {kind_of(mode)} where bench keeps a file; remove it")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab", buffering=0)


def _replace(d: int, name: str, make: Callable[[str], None]) -> None:
    """`make` a new entry under a temporary name in the directory `d`, then rename it over
    `name` in one step; the temporary is removed if either fails."""
    tmp = f".{name}.{secrets.token_hex(4)}.tmp"
    try:
        make(tmp)
        os.rename(tmp, name, src_dir_fd=d, dst_dir_fd=d)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=d)
        raise


def link(root: Path, rel: str | PurePosixPath, target: str) -> None:
    """ROOT/REL made a symbolic link to `target` in one rename; what held the name stays until then."""
    parent, name = _split(rel)
    with directory(root, parent, create=True) as d:
        with contextlib.suppress(FileNotFoundError):
            old = os.stat(name, dir_fd=d, follow_symlinks=False)
            if stat.S_ISLNK(old.st_mode) and os.readlink(name, dir_fd=d) == target:
                return
            if stat.S_ISDIR(old.st_mode):
                raise RunDirError(f"{Path(root, rel)}: a directory where bench keeps a link; remove it")
        _replace(d, name, lambda tmp: os.symlink(target, tmp, dir_fd=d))


def readlink(root: Path, rel: str | PurePosixPath) -> str | None:
    """Where the link ROOT/REL points, or None when it is not a link (or not there)."""
    parent, name = _split(rel)
    try:
        with directory(root, parent) as d:
            return os.readlink(name, dir_fd=d)
    except (OSError, RunDirError):
        return None


def mkdir(root: Path, rel: str | PurePosixPath) -> Path:
    """ROOT/REL as a directory of bench's, made with its parents when missing."""
    with directory(root, rel, create=True):
        return Path(root, rel)


def remove(root: Path, rel: str | PurePosixPath) -> bool:
    """ROOT/REL removed, whatever it is: a link is removed, never what it points to, and a
    directory with everything in it. False when it was not there."""
    parent, name = _split(rel)
    try:
        with directory(root, parent) as d:
            try:
                st = os.stat(name, dir_fd=d, follow_symlinks=False)
            except FileNotFoundError:
                return False
            if stat.S_ISDIR(st.st_mode):
                _remove_tree(d, name, Path(root, rel))
            else:
                os.unlink(name, dir_fd=d)
            return True
    except FileNotFoundError:  # the parent is not there
        return False


_DEPTH = 64  # bench nests nothing half as deep; a deeper tree is not its own


def _remove_tree(parent: int, name: str, where: Path, depth: int = 0) -> None:
    """The directory `name` under the descriptor `parent` and all it holds, each level opened
    with O_NOFOLLOW: a link inside is unlinked, never entered."""
    if depth > _DEPTH:
        raise RunDirError(f"{where}: nested deeper than {_DEPTH} directories; bench made no such tree, remove it")
    fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    _remove_tree(fd, entry.name, where / entry.name, depth + 1)
                else:
                    os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def listing(root: Path, rel: str | PurePosixPath = "") -> list[str]:
    """The names in the directory ROOT/REL ([] when it is not there)."""
    try:
        with directory(root, rel) as d:
            return os.listdir(d)
    except FileNotFoundError:
        return []


def fsync(root: Path, rel: str | PurePosixPath = "") -> None:
    """Flush the directory ROOT/REL, so that renames in it survive a crash."""
    with directory(root, rel) as d:
        os.fsync(d)


def clear(root: Path, patterns: Iterable[str]) -> None:
    """Remove what matches each pattern, a folder below ROOT and a glob of names in it (Job's
    attempt_files): nothing when the folder is not there, RunDirError when it is not bench's."""
    for pattern in patterns:
        folder, files = pattern.rsplit("/", 1)
        for name in fnmatch.filter(listing(root, folder), files):
            remove(root, f"{folder}/{name}")


# What one `append` takes from its standard input: a line of the job script's (a phase mark, the
# time-limit note), never a stream.
APPEND_LIMIT = 64 * 1024


def main(argv: list[str] | None = None) -> int:
    """`clear PATTERN...` and `append FILE` (its standard input, appended), for a job's shell,
    relative to the working directory, the run directory; a refusal is one line, exit 2."""
    args = sys.argv[1:] if argv is None else argv
    try:
        if len(args) >= 2 and args[0] == "clear":
            clear(Path("."), args[1:])
        elif len(args) == 2 and args[0] == "append":
            data = sys.stdin.buffer.read(APPEND_LIMIT)
            with append(Path("."), args[1]) as out:
                write_all(out.fileno(), data)
        else:
            print("usage: python -m harness.inside clear PATTERN... | append FILE", file=sys.stderr)
            return 2
    except (RunDirError, ValueError, OSError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
