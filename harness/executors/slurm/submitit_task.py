"""What each Slurm task of a job submitted through submitit runs (docs/guides/submitit.md).

submitit's batch script runs the profile's setup, bench's exports and the rendezvous address
(script.environment_lines), then one srun of `python -m submitit.core._submit`, which unpickles
`run` and its Task and calls it in every task: one task per node under torchrun, one per GPU
under srun. Each task runs the job's workloads in turn as child processes, so that what runs
is what the sbatch script runs (the same modules, arguments and variables), and does the batch
shell's other duties itself:
- local rank 0 of each node keeps the node's telemetry sampler for the job's life;
- global rank 0 marks each workload's start and end, and watches its progress files for a
  stall (docs/guides/hangs.md), ending the step as the sbatch script's watcher does;
- near the time limit (USR2, which Slurm sends to every process of the step), the note of the
  step that was cut short is written, and the children ignore the signal, so that the job runs
  on to its limit and ends TIMEOUT as an sbatch job does.
A workload that fails raises, the task exits non-zero, and srun's --kill-on-bad-exit ends the
other tasks: the job ends FAILED at that workload.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import RunDirError
from harness.evidence import hangs, telemetry
from harness.executors.slurm.script import torchrun_words
from harness.files import inside
from harness.run.procs import sampler


@dataclass(frozen=True)
class Step:
    """One workload: its key, its module and arguments, and the variables of this step only."""

    key: str
    module: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    """Everything a task needs, computed where bench runs, pickled by submitit."""

    job_dir: str  # relative to the run directory, the job's working directory
    launcher: str  # torchrun or srun
    gpus_per_node: int
    world_size: int
    stall_s: float
    sample_s: float  # 0: no telemetry
    steps: tuple[Step, ...]


class StepFailed(RuntimeError):
    """A workload ended non-zero: the task fails, so the job does."""


def command(task: Task, step: Step, env: dict[str, str]) -> list[str]:
    """The workload's command in this task: the module itself (srun), or this node's torchrun agent."""
    python = sys.executable
    if task.launcher != "torchrun":
        return [python, "-m", step.module, *step.args]
    nnodes, endpoint = env["SLURM_NNODES"], f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    words = torchrun_words(task.gpus_per_node, step.module, nnodes, endpoint, f"{env['SLURM_JOB_ID']}-{step.key}")
    return [python, *words, *step.args]


def _quiet_usr2() -> None:
    """In a child before exec: ignore USR2, the time-limit warning meant for the task (an ignored
    signal stays ignored across exec; a handler would not)."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


@contextlib.contextmanager
def _sampler(task: Task, local_rank: int) -> Iterator[None]:
    if local_rank != 0 or not task.sample_s:
        yield
        return
    with sampler(Path(task.job_dir) / telemetry.DIR, task.sample_s, sys.stderr.buffer):
        yield


def run(task: Task) -> None:
    """Run the job's workloads in this task (see the module's docstring)."""
    env = dict(os.environ)
    rank, local_rank = int(env["SLURM_PROCID"]), int(env["SLURM_LOCALID"])
    job_dir = Path(task.job_dir)
    current = ["none"]

    def near_limit(signum: int, frame: object) -> None:
        if rank == 0:
            # through no link (harness/files/inside.py), relative to the run directory, the task's own
            note = f"{task.job_dir}/time-limit.txt"
            with contextlib.suppress(OSError, ValueError, RunDirError), inside.append(Path("."), note) as f:
                f.write(f"time limit near during {current[0]}\n".encode())

    signal.signal(signal.SIGUSR2, near_limit)
    marks = job_dir / telemetry.DIR
    with _sampler(task, local_rank):
        for step in task.steps:
            current[0] = step.key
            if rank == 0 and task.sample_s:
                telemetry.mark(marks, step.key, "start")
            step_env = {**env, **step.env}
            proc = subprocess.Popen(command(task, step, step_env), env=step_env, preexec_fn=_quiet_usr2)  # noqa: PLW1509
            watcher = None
            if rank == 0:
                watcher = threading.Thread(
                    target=hangs.watch, args=(job_dir, step.key, task.world_size, task.stall_s, proc.pid), daemon=True
                )
                watcher.start()
            rc = proc.wait()
            if watcher is not None:
                watcher.join()
            if rank == 0 and task.sample_s:
                telemetry.mark(marks, step.key, "end")
            if rc != 0:
                raise StepFailed(f"bench: {step.key} exited with status {rc} on rank {rank}")
