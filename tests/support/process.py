"""How tests run bench and other processes, one way: a Result of each command, the hostile
values every shell-facing input is tried with, and what a run directory holds after."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
SWEEPS = ROOT / "sweeps"

# an #SBATCH line: spaces, both quotes, ';', command substitution, backslash, '#', '*'.
HOSTILE_VALUES = ["gpu; rm -rf ~", "$(id)", "`id`", "a b 'c' \"d\"", "x\\y #z", "*"]


@dataclass
class Result:
    cmd: list[str]
    returncode: int
    stdout: str
    stderr: str

    def describe(self, lines: int = 40) -> str:
        out = (self.stdout + "\n" + self.stderr).strip().splitlines()[-lines:]
        return f"command: {shlex.join(self.cmd)}\nexit status: {self.returncode}\nlast output:\n" + "\n".join(out)


def run(
    cmd: list[str],
    *,
    timeout: float = 300,
    check: bool = True,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    stdin: str | None = None,
) -> Result:
    """Run a command, capturing output, with `stdin` as its standard input where given; a timeout
    or (with check) a non-zero exit fails the test with the command and the end of its output."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        partial = Result(
            cmd,
            -1,
            (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or ""),
            (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or ""),
        )
        pytest.fail(f"timed out after {timeout} s\n{partial.describe()}")
    result = Result(cmd, p.returncode, p.stdout, p.stderr)
    if check and p.returncode != 0:
        pytest.fail(f"command failed\n{result.describe()}{job_logs(cmd)}")
    return result


def job_logs(cmd: list[str], lines: int = 15) -> str:
    """The end of each job's log of the run a failed `bench ... --out DIR` wrote: why a job did
    not complete is there, not in the command's last lines, which are the result tables."""
    if "--out" not in cmd[:-1]:
        return ""
    logs = sorted(Path(cmd[cmd.index("--out") + 1]).glob("jobs/*/log.txt"))
    return "".join(f"\n--- {log}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) for log in logs)


def bench(*args: str, **kwargs) -> Result:
    """`bench ARGS` through the installed console script's module, with this interpreter."""
    return run([sys.executable, "-m", "harness.cli", *args], **kwargs)


def start_sweep(sweep_file: Path, out: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`bench sweep SWEEP --out OUT ARGS` in the background, its output captured, for a test that
    acts on the run while it runs."""
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "sweep", str(sweep_file), *args, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )


def stall_sweep(path: Path, nodes: int, stall_s: int, timeout_s: int = 120) -> Path:
    """A sweep of one all-reduce job long enough to be stopped in (docs/guides/hangs.md)."""
    path.write_text(
        f"name: h\ndevice: cpu\nbackend: gloo\nnodes: [{nodes}]\ngpus_per_node: [1]\nlaunchers: [torchrun]\n"
        f"env: {{OMP_NUM_THREADS: '1'}}\ntimeout_s: {timeout_s}\nstall_s: {stall_s}\ntime_limit_min: 5\n"
        "workloads:\n  allreduce: {min_bytes: 1M, max_bytes: 4M, iters: 400, warmup_iters: 2, link_bytes: 0}\n"
    )
    return path


def stop_a_rank(
    progress: Path, sweep: subprocess.Popen, pick, timeout: float, key: str = "allreduce", phase: str = "all_reduce"
) -> dict | None:
    """SIGSTOP the first rank whose progress record (progress/<key>.rank<R>.json) `pick`
    accepts once its phase starts with `phase` (inside an all-reduce); its record, or None if
    the sweep ended first or `timeout` passed. Emulated nodes, local or on the testbed, share
    this PID namespace."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and sweep.poll() is None:
        for path in progress.glob(f"{key}.rank*.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if pick(record) and record["phase"].startswith(phase):
                os.kill(record["pid"], signal.SIGSTOP)
                return record
        time.sleep(0.05)
    return None


def regress(run_dir: Path, db: Path, out: Path, *args: str) -> Result:
    """`bench regress RUN --cluster lab --db DB --out OUT ARGS`, its exit status left to the test.
    It asks nothing of what a key can catch (--must-catch 100%) unless ARGS name a --must-catch:
    a test of another verdict on a history of one or two runs would otherwise read "cannot
    judge" at every key (docs/concepts/noise.md, "What a key can catch"); the tests of that rule name it."""
    catch = () if "--must-catch" in args else ("--must-catch", "100%")
    return bench(
        "regress", str(run_dir), "--cluster", "lab", "--db", str(db), "--out", str(out), *catch, *args, check=False
    )


def left_in(run: Path) -> list[str]:
    """The processes, other than this one, that run in the run directory `run`, whatever their
    process group or session: the local executor starts every agent there, and their workers
    inherit it. A job's own run directory, so another test's processes under xdist are not
    counted."""
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):  # gone meanwhile, a zombie, or not readable
            if int(pid) != os.getpid() and Path(f"/proc/{pid}/cwd").resolve() == run.resolve():
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                left.append(f"{pid} ({state}) {command}")
    return left


def left_in_tmp(tmp: Path) -> list[str]:
    """What the commands run with TMPDIR=`tmp` left there: nothing, for bench and every torchrun
    agent it starts (--log-dir=/dev/null, docs/reference/sources.md). torchinductor_USER, which
    `import torch` itself makes (torch 2.14: an empty compile cache, one per user, reused), is
    torch's and not counted."""
    return sorted(p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_"))


def read_json(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


def unavailable(what: str, reason: str) -> NoReturn:
    """A test whose system cannot be had here: skipped with the reason, except under CI=true,
    where it fails (.ci/run provides every one)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run {what}, but: {reason}")
    pytest.skip(reason)


def in_place_of(sweep_text: str, section: str) -> str:
    """A sweep's text with `section`, a top-level section, appended in place of the sweep's own of
    that name: the test's section alone, since a key stated twice is an error of its own."""
    name = re.escape(section.split(":", 1)[0])
    return re.sub(rf"^{name}:.*\n(?:  .*\n)*", "", sweep_text, count=1, flags=re.MULTILINE) + section


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root: its kind, mode, size, modification time, and its bytes (a file's)
    or target (a link's); what a command that must change nothing there is compared against."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            body = os.readlink(p) if stat.S_ISLNK(st.st_mode) else p.read_bytes() if stat.S_ISREG(st.st_mode) else None
            out[str(p.relative_to(root))] = (
                stat.S_IFMT(st.st_mode),
                stat.S_IMODE(st.st_mode),
                st.st_size,
                st.st_mtime_ns,
                body,
            )
    return out
