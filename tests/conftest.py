"""Shared test helpers: the one way tests run subprocesses, hostile values, and the Slurm
testbed (tests/testbed/testbed), a real Slurm 22.05 cluster of emulated nodes brought up once
per test session and taken down at its end. Where it cannot run (not root, no apt) its tests
skip with the reason; under CI (CI=true) they must run, and a skip fails."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import re
import shlex
import shutil
import signal
import stat
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pyarrow as pa
import pyarrow.compute
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = ROOT / "sweeps"
TESTBED = ROOT / "tests" / "testbed" / "testbed"
STATE = Path(os.environ.get("BENCH_TESTBED_STATE", "/run/bench-testbed"))
SLURM_ENV = {"SLURM_CONF": str(STATE / "etc" / "slurm.conf")}
ON_TESTBED = ("--executor", "slurm", "--cluster", str(SWEEPS / "clusters" / "testbed.yaml"), "--yes")
NODES = 4
FINAL = (
    "COMPLETED",
    "FAILED",
    "TIMEOUT",
    "CANCELLED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
)

# Values that must never be executed or break a line when they reach a shell, a job script or
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
) -> Result:
    """Run a command, capturing output; a timeout or (with check) a non-zero exit fails the test
    with the command and the end of its output."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)
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


def slurm_sweep(sweep_file: Path, out: Path, *args: str, timeout: float = 1200) -> Result:
    """`bench sweep SWEEP` on the testbed's cluster profile, its exit status left to the test."""
    return bench(
        "sweep", str(sweep_file), *ON_TESTBED, "--out", str(out), *args, check=False, timeout=timeout, env=SLURM_ENV
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


# --------------------------------------------------------------------------- a real local run, and copies of it


def check_breakdown(row, wait_ms: float | None = None) -> bool:
    """A result's or summary row's step breakdown (docs/concepts/breakdown.md), checked: either judged,
    its four shares each in [0, 1] and adding up to the step within what 7 kept digits allow,
    the exposed part the step less the data wait (`wait_ms`, else the row's own share of it) and
    the slowest rank's compute; or not judged, no share at all, because the slowest rank's
    compute-only step and the wait were longer than the step. Whether it was judged."""
    from benchmarks.catalog import BREAKDOWN_FRACTIONS

    shares = [row[f] for f in BREAKDOWN_FRACTIONS]
    step, slowest = row["step_time_ms"], row["slowest_compute_time_ms"]
    if wait_ms is None:
        share = row["step_data_wait_fraction"]
        wait_ms = (share if share == share and share is not None else 0.0) * step  # NaN: not judged
    assert 0 < row["compute_time_ms"] <= slowest
    note = row["breakdown_note"]
    if isinstance(note, str) and note:  # a CSV's empty cell reads as NaN, not ""
        assert note.startswith("not judged (noise)")
        # a breakdown not judged keeps no wait share; its note says the wait, to 0.1 ms
        said = re.search(r", ([0-9.]+) ms of data wait,", note)
        waited = float(said.group(1)) + 0.05 if said else wait_ms
        assert all(v is None or v != v for v in shares) and slowest + waited > step * (1 - 1e-6), note
        return False
    assert all(0 <= v <= 1 for v in shares), shares
    assert sum(shares) == pytest.approx(1, abs=1e-5)
    assert row["exposed_comm_ms"] == pytest.approx(step - wait_ms - slowest, rel=1e-5, abs=1e-3)
    return True


@pytest.fixture(scope="session")
def real_run(tmp_path_factory):
    """One local sweep: 1 and 2 emulated nodes of 1 gloo rank, all-reduce and synthetic training."""
    root = tmp_path_factory.mktemp("cmp")
    out = root / "run"
    bench(
        "sweep",
        "sweeps/local.yaml",
        "--max-nodes",
        "2",
        "--executor",
        "local",
        "--out",
        str(out),
        "--set",
        "gpus_per_node=[1]",
        "--set",
        "workloads.allreduce.min_bytes=64K",
        "--set",
        "workloads.allreduce.max_bytes=1M",
        "--set",
        "workloads.allreduce.collectives=[all_reduce]",
        "--set",
        "workloads.synthetic.scaling=[weak]",
        "--set",
        "workloads.synthetic.steps=4",
        "--set",
        "workloads.synthetic.sync_free_steps=1",
        "--set",
        "workloads.real=false",
        timeout=600,
    )
    return out


@pytest.fixture(scope="session")
def mixed_run(tmp_path_factory):
    """One local sweep of today's traffic: 1 and 2 emulated nodes of 2 gloo ranks, every
    collective of the catalog at 256K on every group the job has, and the transformer (a shape
    counted by hand in tests/modules/benchmarks/test_transformer.py) under FSDP2, weak and
    strong. Read by tests/modules/benchmarks/test_groups.py, test_transformer.py beside it, and
    tests/modules/harness/test_peak.py."""
    from benchmarks.catalog import COLLECTIVES

    root = tmp_path_factory.mktemp("mixed")
    sweep = root / "s.yaml"
    sweep.write_text(
        "name: mixed\ndevice: cpu\nbackend: gloo\nnodes: [1, 2]\ngpus_per_node: [2]\nlaunchers: [torchrun]\n"
        "env: {OMP_NUM_THREADS: '1'}\ntimeout_s: 180\nworkloads:\n"
        "  allreduce: {min_bytes: 256K, max_bytes: 256K, iters: 3, warmup_iters: 1, link_bytes: 0,"
        f" collectives: [{', '.join(COLLECTIVES)}]}}\n"
        "  transformer: {layers: 2, width: 32, heads: 4, seq_len: 16, vocab: 64, parallel: fsdp,"
        " scaling: [weak, strong], batch_size: 2, global_batch: 4, steps: 3, warmup_steps: 1, sync_free_steps: 1}\n"
    )
    out = root / "run"
    result = bench("sweep", str(sweep), "--executor", "local", "--out", str(out), timeout=600)
    return out, result


def separating(run: Path) -> float:
    """A time factor that moves every sample of the run past every other: twice the run's
    largest over its smallest sample. Loopback gloo on 2 busy CPUs spreads samples 20x and
    more, so any fixed factor can leave some rows overlapping, and their verdicts to chance."""
    values = [v for row in pq.read_table(run / "samples.parquet").column("values").to_pylist() for v in row]
    return 2 * max(values) / min(values)


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


def copy_run(
    src: Path,
    dst: Path,
    *,
    time_factor: float = 1.0,
    drop: str | None = None,
    version: int | None = None,
    launcher: str | None = None,
    spread: float | None = None,
    size_factors: dict[int, float] | None = None,
    widen: float | None = None,
) -> Path:
    """A copy of a run whose summary and samples are rewritten: times scaled by time_factor
    (rates divided), and the collectives' rows of a message size in `size_factors` by its
    factor too; a column dropped, the layout version or the launcher changed. `spread`
    draws each row's samples toward their median, in order, until its largest is at most that
    many times its smallest: for a test that needs a change of a given size to be significant
    within a run, which loopback gloo's 20x spreads (see `separating`) leave to chance. `widen`
    spreads each row's samples away from their median, in log space, by that factor: a busier
    night's run, its p90/p10 raised to the power `widen`."""
    shutil.copytree(src, dst)
    summary = pq.read_table(dst / "summary.parquet")
    samples = pq.read_table(dst / "samples.parquet")
    cols = {n: summary.column(n) for n in summary.column_names}

    def factors(sizes: pa.ChunkedArray) -> pa.Array:  # each row's time factor
        by_size = size_factors or {}
        return pa.array([time_factor * by_size.get(b, 1.0) for b in sizes.to_pylist()], type=pa.float64())

    row_factor = factors(summary.column("size_bytes"))
    for name in ("time_us", "step_time_ms"):
        cols[name] = pa.compute.multiply(cols[name], row_factor)
    for name in ("busbw_gbps", "algbw_gbps", "images_per_s", "images_per_s_per_gpu"):
        cols[name] = pa.compute.divide(cols[name], row_factor)
    if launcher:
        cols["launcher"] = pa.array([launcher] * summary.num_rows, type=pa.string())
    meta = dict(summary.schema.metadata or {})
    if version is not None:
        meta.pop(b"bench_summary_version", None)
        if version > 1:
            meta[b"bench_summary_version"] = str(version).encode()
    table = pa.table({n: c for n, c in cols.items() if n != drop}).replace_schema_metadata(meta)
    pq.write_table(table, dst / "summary.parquet")
    rows = samples.column("values").to_pylist()
    if spread is not None:
        rows = [_narrowed(row, spread) for row in rows]
    if widen is not None:
        rows = [_about_median(row, widen) for row in rows]
    sample_factor = factors(samples.column("size_bytes")).to_pylist()
    values = pa.array([[v * f for v in row] for row, f in zip(rows, sample_factor)], type=pa.list_(pa.float64()))
    pq.write_table(samples.set_column(samples.column_names.index("values"), "values", values), dst / "samples.parquet")
    return dst


def _narrowed(row: list[float], spread: float) -> list[float]:
    """The samples drawn toward their median in log space: v -> m * (v/m)**e, with e such that
    the largest over the smallest is at most `spread`; their order and median stay."""
    if not row or min(row) <= 0 or max(row) / min(row) <= spread:
        return row
    return _about_median(row, math.log(spread) / math.log(max(row) / min(row)))


def _about_median(row: list[float], e: float) -> list[float]:
    """v -> m * (v/m)**e for the row's median m: its spread in log space times e."""
    if not row or min(row) <= 0:
        return row
    m = statistics.median(row)
    return [m * (v / m) ** e for v in row]


def planned_later(run_dir: Path, tag: str = "9") -> Path:
    """Make a copied run a run of its own: plan.json's time moves, and with it the run's
    fingerprint in the history. The tag, of digits, places the copy as it would sort before or
    after the original's year as text: read as the fraction 0.TAG against the year's 0.2026,
    whole hours of ten thousand ("9" about 290 days later, "1" about 43 days earlier, "01" before
    "02" before "1" before "2" before the original)."""
    plan = run_dir / "plan.json"
    data = json.loads(plan.read_text())
    hours = round((float(f"0.{tag}") - 0.2026) * 10_000)
    data["created"] = (dt.datetime.fromisoformat(data["created"]) + dt.timedelta(hours=hours)).isoformat()
    plan.write_text(json.dumps(data))
    return run_dir


@pytest.fixture(scope="session")
def local_check(tmp_path_factory):
    """Two emulated nodes of one gloo rank: one pair, the least check that runs every part of it
    (a population takes 3 nodes, so its verdict is "not judged", exit 3)."""
    out = tmp_path_factory.mktemp("nodes") / "check"
    r = bench(
        "nodes",
        "--executor",
        "local",
        "--nodes",
        "2",
        "--no-gemm",
        "--bytes",
        "256K",
        "--iters",
        "5",
        "--json",
        "--out",
        str(out),
        check=False,
        timeout=300,
    )
    return r, out


@pytest.fixture(scope="session")
def judged_history(real_run, local_check, tmp_path_factory) -> Path:
    """An SQLite history of every kind of row, for tests that only read it: four nights of
    cluster lab, 1 to 4 November 2026 at 02:00 UTC (runs 1-3 alike, run 4 at half their rates,
    failed by the gate with its bands and accepted), a stored change point at run 4, and a node
    check. The nights are beside it."""
    from harness.analysis import changes
    from harness.analysis.store import Location

    root = tmp_path_factory.mktemp("judged")
    db = str(root / "history.sqlite")
    for i, factor in enumerate((1, 1, 1, 2)):
        night = copy_run(real_run, root / f"n{i}", time_factor=factor)
        plan = json.loads((night / "plan.json").read_text())
        (night / "plan.json").write_text(json.dumps({**plan, "created": f"2026-11-0{i + 1}T02:00:00+00:00"}))
        if i == 3:  # judged: its verdict and bands, and it fails
            r = bench("regress", str(night), "--cluster", "lab", "--db", db, "--baseline", "median:3", check=False)
            assert r.returncode == 1, r.describe()
        bench("history", "add", str(night), "--create", "--cluster", "lab", "--label", f"night{i}", "--db", db)
    bench("history", "accept", "4", "--reason", "new firmware", "--db", db)
    step = changes.Change("busbw_gbps", "all_reduce 2x1", 4, "run 4", 1.0, 0.5, 0.01, "0123456789ab")
    changes.store(Location(db), "lab", changes.RUNS, ["busbw_gbps"], [step], 0.05)
    assert (
        bench("history", "add", str(local_check[1]), "--create", "--cluster", "lab", "--db", db, check=False).returncode
        == 3
    )
    return Path(db)


@pytest.fixture
def history_of(tmp_path):
    """A history database with the given runs added, oldest first."""

    def make(*runs: Path, cluster: str = "lab") -> Path:
        db = tmp_path / "history.sqlite"
        for r in runs:
            bench("history", "add", str(r), "--create", "--cluster", cluster, "--db", str(db))
        return db

    return make


def default_jobs(max_nodes: int = 8) -> list:
    """The jobs of sweeps/default.yaml, as `bench sweep --max-nodes N` plans them."""
    from harness.plan import expand
    from harness.sweepfile import load_sweep

    return expand(load_sweep(SWEEPS / "default.yaml", max_nodes=max_nodes))


@pytest.fixture
def data_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data-cache")


# --------------------------------------------------------------------------- fake Slurm commands

SLURM_COMMANDS = ("sbatch", "srun", "salloc", "squeue", "sacct", "sinfo", "scontrol", "scancel")


@dataclass
class SlurmStandIns:
    """Slurm's client commands on PATH as stand-ins that record any call and fail, for commands
    that must refuse or stop before they reach Slurm: the test is the same whether or not this
    machine has Slurm's own (CI installs them; a user's machine may not)."""

    bin_dir: Path
    log: Path

    @property
    def path(self) -> str:
        return f"{self.bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin"

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def slurm_stand_ins(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> SlurmStandIns:
    root = tmp_path_factory.mktemp("slurm-stand-ins")
    stand_ins = SlurmStandIns(root / "bin", root / "called.txt")
    stand_ins.bin_dir.mkdir()
    for name in SLURM_COMMANDS:
        shim = stand_ins.bin_dir / name
        shim.write_text(f'#!/bin/sh\necho "{name} $*" >> {shlex.quote(str(stand_ins.log))}\nexit 1\n')
        shim.chmod(0o755)
    monkeypatch.setenv("PATH", stand_ins.path)
    return stand_ins


FAKE_SLURM = ROOT / "tests" / "fakes" / "slurm" / "fake_slurm.py"


@dataclass
class FakeSlurm:
    """sbatch, squeue, sacct and scancel on PATH that replay Slurm 22.05's replies as a
    scenario says (tests/fakes/slurm/fake_slurm.py)."""

    state: Path

    def scenario(self, jobs: dict, fail: dict | None = None) -> None:
        (self.state / "scenario.json").write_text(json.dumps({"jobs": jobs, "fail": fail or {}}))

    def calls(self, tool: str | None = None) -> list[list]:
        """[monotonic time, tool, *args] of every call so far, or of one tool's."""
        log = self.state / "calls.log"
        rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return [r for r in rows if tool is None or r[1] == tool]

    def jobs(self) -> dict:
        """The fake controller's jobs: {id: {name, workdir, after, ...}}."""
        return json.loads((self.state / "state.json").read_text())["jobs"]


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    bin_dir, state = tmp_path / "fake-slurm-bin", tmp_path / "fake-slurm-state"
    bin_dir.mkdir()
    state.mkdir()
    for tool in ("sbatch", "squeue", "sacct", "scancel"):
        wrapper = bin_dir / tool
        wrapper.write_text(
            f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_SLURM))} {tool} "$@"\n'
        )
        wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(state))
    fake = FakeSlurm(state)
    fake.scenario({})
    return fake


# --------------------------------------------------------------------------- the Slurm testbed


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects and before xdist reads the groups
def pytest_collection_modifyitems(items: list) -> None:
    """The tiers (CONTRIBUTING.md). Every test that uses the testbed is marked `testbed`, and
    `proof` unless it is the default tier's `smoke`: `-m "not proof"` (the default) leaves the
    long testbed proofs out, `-m proof` runs only them. Every testbed test is in one xdist group,
    so that under `-n 2` a single worker brings the one testbed of the machine up; the tests that
    share a sweep are in one group too (shared_groups). Tests marked run_last go to the end,
    keeping their order (a stable sort)."""
    groups = shared_groups(items)
    for item in items:
        if "testbed" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.testbed)
            item.add_marker(pytest.mark.xdist_group("testbed"))
            if item.get_closest_marker("smoke") is None:
                item.add_marker(pytest.mark.proof)
        elif item in groups:
            item.add_marker(pytest.mark.xdist_group(groups[item]))
    items.sort(key=lambda item: item.get_closest_marker("run_last") is not None)


def shared_groups(items: list) -> dict:
    """Test -> xdist group, for the tests that use a module- or session-scoped fixture of this
    directory (a sweep run once and read by many tests). Tests linked through such fixtures, even
    by way of others, are one group, which one worker runs: under -n 2 a worker builds each
    fixture it needs, and two workers would run the same sweep twice, each slowing the other."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent[name] != name:
            name = parent[name]
        return name

    uses = {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)  # pytest's own record of the test's fixtures
        names = []
        for name in getattr(item, "fixturenames", ()):
            defs = info.name2fixturedefs.get(name) if info else None
            if defs and defs[-1].scope in ("module", "session") and _here(defs[-1].func):
                names.append(name)
                parent.setdefault(name, name)
        for other in names[1:]:
            parent[root(other)] = root(names[0])
        if names:
            uses[item] = names[0]
    return {item: f"shared-{root(name)}" for item, name in uses.items()}


def _here(func) -> bool:
    code = getattr(func, "__code__", None)
    return code is not None and Path(code.co_filename).resolve().is_relative_to(ROOT / "tests")


def _testbed_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the Slurm testbed needs root"
    if not shutil.which("apt-get") and not shutil.which("slurmctld"):
        return "the Slurm testbed needs Debian's packages (no apt-get, no slurmctld)"
    return None


def unavailable(what: str, reason: str) -> NoReturn:
    """A test whose system cannot be had here: skipped with the reason, except under CI=true,
    where it fails (.ci/run provides every one)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run {what}, but: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def testbed():
    reason = _testbed_unavailable()
    if reason:
        unavailable("the Slurm testbed", reason)
    run([str(TESTBED), "down"], timeout=300)  # a testbed left over by an interrupted run
    try:
        run([str(TESTBED), "up", "--nodes", str(NODES)], timeout=900)
        yield SLURM_ENV
    finally:  # also after a failed `up`: never leave daemons and namespaces behind
        run([str(TESTBED), "down"], timeout=300)


def shape(*args: str) -> None:
    """`testbed shape ARGS`: tc on the emulated nodes' links."""
    run([str(TESTBED), "shape", *args])


@contextlib.contextmanager
def no_eth0_on(node: str) -> Iterator[None]:
    """The node's eth0 renamed, as on a node whose image names its NIC otherwise: the profile's
    GLOO_SOCKET_IFNAME=eth0 then fails there, and only there."""
    run(["ip", "-n", node, "link", "set", "eth0", "down"])
    run(["ip", "-n", node, "link", "set", "eth0", "name", "ethX"])
    run(["ip", "-n", node, "link", "set", "ethX", "up"])
    try:
        yield
    finally:
        run(["ip", "-n", node, "link", "set", "ethX", "down"])
        run(["ip", "-n", node, "link", "set", "ethX", "name", "eth0"])
        run(["ip", "-n", node, "link", "set", "eth0", "up"])


def slurm(*cmd: str, **kw) -> Result:
    """A Slurm command against the testbed."""
    return run(list(cmd), env=SLURM_ENV, **kw)


def sacct_rows(*args: str, fields: str = "JobID,State,ExitCode,NNodes") -> dict[str, list[str]]:
    out = slurm("sacct", "-X", "-P", "-n", *args, f"--format={fields}").stdout
    return {line.split("|")[0]: line.split("|")[1:] for line in out.splitlines() if line}


def wait_done(job_ids: list[str], timeout: float = 600) -> dict[str, list[str]]:
    """sacct rows (JobID, State, ExitCode, NNodes) once sacct gives every job a final state.
    Leaving squeue is not enough: slurmctld tells slurmdbd of the end a moment later, and
    meanwhile sacct still says RUNNING (seen on this testbed)."""
    ids = ",".join(job_ids)
    deadline = time.monotonic() + timeout
    rows: dict[str, list[str]] = {}
    while time.monotonic() < deadline:
        rows = sacct_rows("-j", ids)
        if len(rows) == len(job_ids) and all(r[0].split()[0] in FINAL for r in rows.values()):
            return rows
        time.sleep(1)
    pytest.fail(f"jobs {ids} not finished after {timeout} s: {rows}")


# --------------------------------------------------------------------------- PostgreSQL


@pytest.fixture(scope="session")
def postgres():
    """A throwaway PostgreSQL server (tests/postgres.py) for this worker's session. Without one
    installed the tests that need it skip, except under CI=true, where they fail (.ci/run
    installs Debian's package)."""
    import postgres as pg

    if pg.bindir() is None:
        unavailable("the PostgreSQL tests", "no PostgreSQL server installed (Debian: apt-get install postgresql)")
    with pg.throwaway() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def history_at(request, tmp_path):
    """Where a test's history lives, once for each backend: an SQLite file's path, or the URL of
    a new database on the session's PostgreSQL server (its tables made by `history migrate`)."""
    if request.param == "sqlite":
        return str(tmp_path / "history.sqlite")
    server = request.getfixturevalue("postgres")
    url = server.new_database(f"t{uuid.uuid4().hex[:12]}")
    bench("history", "migrate", "--db", url)
    return url


# --------------------------------------------------------------------------- a real browser


@pytest.fixture
def browser():
    """Debian's chromium, headless, one tab (tests/browser.py), for one test. Without it the
    tests that need it skip, except under CI=true, where they fail (.ci/run installs it)."""
    import browser as chromium

    if chromium.program() is None:
        unavailable("the browser tests", "no chromium on PATH (Debian: apt-get install chromium)")
    with chromium.Browser() as b:
        yield b
