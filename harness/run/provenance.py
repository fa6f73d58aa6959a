"""Which bench produced a result: its version, the commit of the checkout it runs from, and the
measurement rules it follows (docs/concepts/provenance.md). plan.json records it for the harness that
planned the run, each result for the workloads that measured it; the summary and the history
carry both, and compare and regress read them."""

from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.common import DISTRIBUTION, MEASUREMENT_RULES

# The checkout bench runs from, when it runs from one (`pip install -e .`); a wheel has no .git.
_SOURCE = Path(__file__).resolve().parents[2]


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(_SOURCE), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


@functools.lru_cache(maxsize=1)
def record() -> dict[str, Any]:
    """{version, commit, modified, measurement_rules}: commit and modified are None outside a
    git checkout (a wheel's install), modified whether tracked files differ from the commit."""
    commit = _git("rev-parse", "HEAD") if (_SOURCE / ".git").exists() else None
    changed = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {
        "version": version(),
        "commit": commit,
        "modified": None if changed is None else bool(changed),
        "measurement_rules": MEASUREMENT_RULES,
    }


def describe(bench: dict[str, Any] | None) -> str:
    """One line: '0.1.0 (commit 1a2b3c4d5e6f, modified; measurement rules 2)'."""
    if not isinstance(bench, dict):
        return "unknown (recorded before bench versions were)"
    where = []
    if isinstance(bench.get("commit"), str):
        where.append(f"commit {bench['commit'][:12]}" + (", modified" if bench.get("modified") else ""))
    where.append(f"measurement rules {rules(bench)}")
    return f"{bench.get('version', 'unknown')} ({'; '.join(where)})"


def rules(bench: dict[str, Any] | None) -> int:
    """The measurement rules a plan's or result's bench record states; 1 for one made before
    they were recorded."""
    value = bench.get("measurement_rules") if isinstance(bench, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1
