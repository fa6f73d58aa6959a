"""Processes bench starts on this machine and must end: torchrun agents of emulated nodes, the
telemetry sampler, and the tag that finds every process of a job however it was started. The
local executor (harness/executors/local.py) and the node check's local driver
(harness/nodes/driver.py) both start theirs here.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from benchmarks.common import TORCHRUN_NO_LOG_DIR
from harness.evidence import telemetry

# Set in the environment of a job's agents, and so of their workers: how every process of the
# job is found and ended, whatever process group or session it is in (kill_groups).
TAG = "BENCH_PROCESS_TAG"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """In the child before exec: receive SIGTERM when the harness dies, even by SIGKILL, so no
    agent outlives it (Linux prctl PR_SET_PDEATHSIG; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def kill_groups(procs: list[subprocess.Popen], tag: str | None = None) -> None:
    """Terminate each agent's whole process group, then kill what is left; then kill every
    process that carries `tag` (see `tagged`): torchrun starts each worker in a session of its
    own, so a worker that ignores or cannot take SIGTERM (stopped, hung in a call) outlives its
    agent's group."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, sig)
        deadline = time.monotonic() + 5
        for p in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
    if tag is not None:
        kill_tagged(tag)


def new_tag() -> str:
    """A value of TAG for one set of agents: this harness's pid and a random part."""
    return f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


def tagged(tag: str) -> list[int]:
    """The processes whose environment holds TAG=`tag`: the agents given it and every process
    they start, which inherit it (torchrun passes its environment on to its workers). Read from
    /proc/PID/environ (Linux); elsewhere none are found, and the process groups are all that is
    ended. A zombie's environment reads empty: it is gone already."""
    entry = f"\0{TAG}={tag}\0".encode()
    found = []
    with contextlib.suppress(OSError):
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                # gone meanwhile, or not ours to read
                with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as f:
                    if entry in b"\0" + f.read():
                        found.append(int(pid))
    return found


def kill_tagged(tag: str, wait_s: float = 5.0) -> None:
    """SIGKILL, which ends a stopped process too, every process tagged `tag`, and wait for them
    to go."""
    deadline = time.monotonic() + wait_s
    while (pids := tagged(tag)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def agent_command(
    nnodes: int, nproc: int, node: int, port: int | str, rdzv_id: str, module: str, args: Iterable[str]
) -> list[str]:
    """The torchrun agent of emulated node `node` of `nnodes`, meeting the others at
    127.0.0.1:`port`, with `nproc` workers of `module`."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--rdzv-id={rdzv_id}",
        # Say which agent hosts the rendezvous store rather than leave all of them,
        # sharing one hostname, to race for the port.
        f"--rdzv-conf=is_host={'true' if node == 0 else 'false'}",
        "--max-restarts=0",
        TORCHRUN_NO_LOG_DIR,
        "--local-addr=127.0.0.1",
        "-m",
        module,
        *args,
    ]


@contextlib.contextmanager
def sampler(folder: Path, interval_s: float, log: BinaryIO) -> Iterator[None]:
    """This machine's telemetry sampler for the life of one job (docs/concepts/telemetry.md); its last
    sample is taken after the job's last workload ended. Nothing where interval_s is 0."""
    if not interval_s:
        yield
        return
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "harness.telemetry", "sample", str(folder), f"--interval-s={interval_s:g}"]
    proc = subprocess.Popen(
        command,
        cwd=folder,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C reaches the harness only, which then stops the sampler
        preexec_fn=die_with_parent,  # noqa: PLW1509
    )
    try:
        first = telemetry.host_file(folder, socket.gethostname())
        telemetry.wait_for_first_sample(first, alive=lambda: proc.poll() is None)
        yield
    finally:
        kill_groups([proc])  # its session too: nvidia-smi dmon, where it runs
