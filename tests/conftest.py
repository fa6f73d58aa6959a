"""Shared test helpers: the one way tests run subprocesses, and hostile values."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = ROOT / "sweeps"

# Values that must never be executed or break a line when they reach a shell, a job script or
# an #SBATCH line: spaces, both quotes, ';', command substitution, backslash, '#', '*'.
HOSTILE_VALUES = [
    "gpu; rm -rf ~",
    "$(id)",
    "`id`",
    "a b 'c' \"d\"",
    "x\\y #z",
    "*",
]


@dataclass
class Result:
    cmd: list[str]
    returncode: int
    stdout: str
    stderr: str

    def describe(self, lines: int = 40) -> str:
        out = (self.stdout + "\n" + self.stderr).strip().splitlines()[-lines:]
        return f"command: {shlex.join(self.cmd)}\nexit status: {self.returncode}\nlast output:\n" + "\n".join(out)


def run(cmd: list[str], *, timeout: float = 300, check: bool = True, env: dict[str, str] | None = None,
        cwd: str | Path | None = None) -> Result:
    """Run a command, capturing output; a timeout or (with check) a non-zero exit fails the test
    with the command and the end of its output."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        partial = Result(cmd, -1, (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes)
                         else (exc.stdout or ""), (exc.stderr or b"").decode(errors="replace")
                         if isinstance(exc.stderr, bytes) else (exc.stderr or ""))
        pytest.fail(f"timed out after {timeout} s\n{partial.describe()}")
    result = Result(cmd, p.returncode, p.stdout, p.stderr)
    if check and p.returncode != 0:
        pytest.fail(f"command failed\n{result.describe()}")
    return result


def bench(*args: str, **kwargs) -> Result:
    """`bench ARGS` through the installed console script's module, with this interpreter."""
    return run([sys.executable, "-m", "harness.cli", *args], **kwargs)


def read_json(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


@pytest.fixture
def data_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data-cache")
