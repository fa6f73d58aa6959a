"""A directory of pages that bench writes whole and replaces whole (bench dashboard's site): the
new one is written beside it and renamed into its place, so that a failure or Ctrl-C leaves the
old one or none, never half of one; and nothing bench did not write is ever deleted with it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from harness.errors import UsageError

MARKER = ".bench-dashboard"  # in a directory bench wrote, which it may replace
MARKER_TEXT = b"a site of bench dashboard; bench dashboard replaces this directory whole\n"


def _not_ours(out: Path) -> str | None:
    """Why `out` may not be replaced by a new site, or None: it is new, empty, or holds only what
    bench dashboard writes (its pages, its feed and MARKER as bench writes it), none of them a
    link. A planted or linked MARKER, or a file of someone else's beside it, keeps it."""
    if out.is_symlink():
        return "is a link; name the directory itself"
    if not out.exists():
        return None
    if not out.is_dir():
        return "exists and is not a directory"
    entries = sorted(out.iterdir())
    if not entries:
        return None
    marker = out / MARKER
    if marker.is_symlink() or not marker.is_file() or marker.stat().st_size != len(MARKER_TEXT):
        return f"exists and is not a dashboard bench wrote (no {MARKER} of bench's in it)"
    if marker.read_bytes() != MARKER_TEXT:
        return f"exists and is not a dashboard bench wrote (its {MARKER} is not bench's)"
    for entry in entries:
        page = entry.suffix == ".html" or entry.name in ("feed.xml", MARKER)
        if entry.is_symlink() or not entry.is_file() or not page:
            return f"holds {entry.name[:80]!r}, which bench dashboard does not write, and would delete"
    return None


def replace(out: Path, pages: Iterable[tuple[str, Callable[[], bytes]]]) -> dict[str, int]:
    """Write `pages` (name, what makes its bytes) to `out` whole, into a directory beside it and
    then in its place. `out` must be new, empty, or a site bench wrote (_not_ours). Returns each
    file's size."""
    why = _not_ours(out)
    if why:
        raise UsageError(f"--out {out}: {why}; give a new or empty directory, or a site bench dashboard wrote")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = out.parent / f".{out.name}.{os.getpid()}.new"
    old = out.parent / f".{out.name}.{os.getpid()}.old"
    sizes: dict[str, int] = {}
    os.mkdir(work)  # honours the umask, as every file opened below does
    try:
        for name, make in pages:
            data = make()
            with open(work / name, "xb") as f:
                f.write(data)
            sizes[name] = len(data)
        (work / MARKER).write_bytes(MARKER_TEXT)
        if out.exists():
            os.rename(out, old)
        os.rename(work, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return sizes
