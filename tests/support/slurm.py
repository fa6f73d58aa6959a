"""Slurm, faked or real: stand-ins that no test may reach, fake commands replaying what Slurm
22.05 printed, and the testbed (tests/testbed/testbed), a real Slurm cluster of emulated nodes
brought up once per session. Where it cannot run (not root, no apt) its tests skip with the
reason; under CI (CI=true) they must run, and a skip fails."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.process import ROOT, SWEEPS, Result, bench, run, unavailable

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


def _testbed_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the Slurm testbed needs root"
    if not shutil.which("apt-get") and not shutil.which("slurmctld"):
        return "the Slurm testbed needs Debian's packages (no apt-get, no slurmctld)"
    return None


# The node count the machine's testbed is up with now: each module's fixture brings it to its own
# (testbed, eight_nodes), so that two modules in a row of one size share one bring-up.
_up: dict[str, int] = {}


def _resize(nodes: int) -> None:
    if _up.get("nodes") != nodes:
        _up.pop("nodes", None)
        run([str(TESTBED), "down"], timeout=300)
        run([str(TESTBED), "up", "--nodes", str(nodes)], timeout=900)
        _up["nodes"] = nodes


@pytest.fixture(scope="session")
def testbed_machine():
    """The machine's one Slurm testbed, for the session: down at its end, whatever its size."""
    reason = _testbed_unavailable()
    if reason:
        unavailable("the Slurm testbed", reason)
    _up.clear()  # what a testbed left over by an interrupted run is up with is not known
    try:
        yield
    finally:  # also after a failed `up`: never leave daemons and namespaces behind
        _up.clear()
        run([str(TESTBED), "down"], timeout=300)


@pytest.fixture(scope="module")
def testbed(testbed_machine):
    """The testbed with NODES nodes, for one module; its Slurm environment."""
    _resize(NODES)
    return SLURM_ENV


@pytest.fixture(scope="module")
def eight_nodes(testbed_machine):
    """The testbed with 8 nodes, for one module (and the next, if it asks for 8 too)."""
    _resize(8)
    return SLURM_ENV


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


def slurm_sweep(sweep_file: Path, out: Path, *args: str, timeout: float = 1200) -> Result:
    """`bench sweep SWEEP` on the testbed's cluster profile, its exit status left to the test."""
    return bench(
        "sweep", str(sweep_file), *ON_TESTBED, "--out", str(out), *args, check=False, timeout=timeout, env=SLURM_ENV
    )
