"""The local executor, the embedded default: every job of the plan runs on this machine with
real torch.distributed processes.

A job of `nodes x gpus_per_node` starts `nodes` torchrun agents, one per emulated node, that
meet through torchrun's c10d rendezvous on 127.0.0.1 (the first hosts the store) and get
distinct node ranks; each starts `gpus_per_node` workers. So the multi-node code paths (node
ranks, a rendezvous across agents, collectives between agents) really run. On a machine with
GPUs each agent gets its own slice of them; without, workers run on CPU with gloo.

Jobs run one after another. A job runs its workloads in turn and stops at the first failure,
as a batch script under `set -e` does: a gloo job's in one launch, its ranks started once (see
`launches`), any other's a launch each. A job past its time limit is killed and recorded
TIMEOUT. Ctrl-C kills the running job, records it CANCELLED and propagates.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from benchmarks.catalog import SEQUENCE, THEN
from benchmarks.progress import DIR as PROGRESS_DIR
from harness.evidence import hangs, telemetry
from harness.evidence.logs import error_line, tail
from harness.executors.base import Executor
from harness.files import inside
from harness.run.plan import Job, WorkloadRun
from harness.run.procs import TAG, agent_command, die_with_parent, free_port, kill_groups, kill_tagged, new_tag, sampler
from harness.run.rundir import CANCELLED, COMPLETED, FAILED, RUNNING, TIMEOUT, JobRecord, now

# After one agent fails, how long the others get to notice and exit before they are killed.
_FAILURE_GRACE_S = 20.0
_STALL_LOOK_S = 1.0  # how often the ranks' progress files are read
_POLL_S = 0.1
_ERROR_READ = 4 << 20  # bytes of a failed workload's log read back for its error line


def visible_gpus() -> list[str]:
    """GPU ids this machine offers: CUDA_VISIBLE_DEVICES if set, else what nvidia-smi lists."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g for g in env.split(",") if g.strip() and g.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def gpus_for(job: Job, gpus: list[str] | None) -> tuple[list[str] | None, str | None]:
    """(the GPU ids the job's emulated nodes split, or None to leave CUDA_VISIBLE_DEVICES as it is;
    what is wrong, or None). Each emulated node gets gpus_per_node GPUs of its own (agent_env), so
    no two ranks share one, which NCCL refuses. Where fewer are visible than the job has ranks, a
    job of `device: cuda` fails saying so, and one of `device: auto` runs on the CPU, with a
    warning: no GPU is made visible to it ([])."""
    needed, have = job.world_size, len(gpus or [])
    if have >= needed:
        return gpus, None
    if job.device == "cuda":
        return None, f"needs {needed} GPUs, {have} visible on this machine"
    if job.device == "auto" and have:
        return [], f"{needed} ranks and {have} GPUs visible on this machine: device auto runs on the CPU"
    return None, None


class LocalExecutor(Executor):
    name = "local"
    interrupt_note = "the running job was stopped and recorded CANCELLED"
    default_sweep = "local.yaml"
    launchers = ("torchrun",)
    # Emulated nodes are one machine: what tells them apart is its noise (docs/guides/nodes.md).
    node_threshold = "50%"
    # No job files: the commands depend on the port chosen at run time, and are recorded in
    # the job directory when the job starts (record_commands).
    writes_job_files = False

    def plan_note(self, jobs: list[Job]) -> str:
        """The plan's line for the local executor: where the jobs run, and how many ranks the
        largest puts on this machine's cores, so that a sweep meant for Slurm (sbatch missing, a
        module not loaded) is seen before it starts on a login node."""
        big = max(jobs, key=lambda j: j.world_size)
        gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
        return (
            f"local: all {len(jobs)} jobs run on this machine ({socket.gethostname()}), one after another; the "
            f"largest, {big.name}, puts {big.world_size} ranks ({big.nodes} emulated node(s) x {big.gpus_per_node}) "
            f"on its {os.cpu_count()} CPU cores"
            + (f" and GPUs {gpus}" if gpus else "")
            + (", more ranks than cores" if big.world_size > (os.cpu_count() or 1) else "")
            + ". For a Slurm cluster, "
            "run where sbatch is on PATH, or give --executor slurm"
        )

    @staticmethod
    def launches(job: Job) -> list[tuple[WorkloadRun, ...]]:
        """The job's workloads by launch. A gloo job's run in one launch (benchmarks/sequence.py):
        its ranks import torch and join once, not once per workload, which was most of a small
        job's time (docs/concepts/architecture.md, "One launch per job"). Any other backend's run a launch
        each, as the Slurm executor's steps do: NCCL reads NCCL_DEBUG_FILE once per process, and
        each workload's log is kept apart (Job.debug_env)."""
        if job.backend == "gloo" and len(job.runs) > 1:
            return [tuple(job.runs)]
        return [(run,) for run in job.runs]

    def agent_command(self, job: Job, runs: tuple[WorkloadRun, ...], node: int, port: int | str) -> list[str]:
        if len(runs) == 1:
            module, args = runs[0].module, job.run_args(runs[0], self.timeout_s)
        else:
            module, args = SEQUENCE, []
            for run in runs:
                args += [*([THEN] if args else []), run.workload, *job.run_args(run, self.timeout_s)]
        return agent_command(job.nodes, job.gpus_per_node, node, port, f"{job.name}-{runs[0].key}", module, args)

    def agent_env(self, job: Job, runs: tuple[WorkloadRun, ...], node: int, gpus: list[str] | None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(job.env)
        env.update(job.nccl_env)
        # the launch's debug variables: a workload's own files on NCCL, where a launch is one workload
        # (`launches`); on gloo, whose launch may run several, only the recorder's buffer, the same for all
        env.update(job.debug_env(runs[0], env))
        env["BENCH_LAUNCHER"] = "local-torchrun"
        env["BENCH_JOB"] = job.name
        env["BENCH_NODE"] = str(node)
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[node * job.gpus_per_node : (node + 1) * job.gpus_per_node])
        return env

    def record_commands(self, job: Job) -> None:
        """Write the exact commands the job runs, for a person to read or rerun by hand."""
        lines = [
            f"# {job.name} (config {job.config_hash}): {job.nodes} node(s) x {job.gpus_per_node} rank(s),",
            "# run by the local executor from the run directory; PORT is a free port chosen at run time.",
            *(f"export {k}={shlex.quote(v)}" for k, v in (*job.env, *job.nccl_env)),
            *(f"# {name}: from the environment bench ran in (env_passthrough)" for name in job.passthrough),
        ]
        given = {k for k, _ in (*job.env, *job.nccl_env)} | set(job.passthrough)
        for runs in self.launches(job):
            lines.append(f"\n# {', '.join(run.key for run in runs)}: {job.nodes} agent(s)")
            lines += [f"export {k}={shlex.quote(v)}" for k, v in job.debug_env(runs[0], given).items()]
            lines += [
                shlex.join(self.agent_command(job, runs, node, "PORT")).replace("127.0.0.1:PORT", "127.0.0.1:$PORT")
                + (" &" if job.nodes > 1 else "")
                for node in range(job.nodes)
            ]
            if job.nodes > 1:
                lines.append("wait")
        inside.write(self.run.path, f"jobs/{job.name}/commands.sh", ("\n".join(lines) + "\n").encode())

    def execute(self, jobs: list[Job], table: dict[str, JobRecord], changed: Callable[[JobRecord], None]) -> None:
        gpus = None
        if any(j.device != "cpu" for j in jobs):
            found = visible_gpus()
            gpus = found or None
        for job in jobs:
            rec = table[job.name]
            if rec.state == COMPLETED:
                continue
            self._run_job(job, rec, gpus, changed)

    def _run_job(self, job: Job, rec: JobRecord, gpus: list[str] | None, changed: Callable[[JobRecord], None]) -> None:
        # Its directories are bench's own, never a link planted in the run directory (harness/files/inside.py).
        inside.mkdir(self.run.path, f"jobs/{job.name}")
        if job.backend != "gloo":  # NCCL and torch do not create their files' directories
            inside.mkdir(self.run.path, job.nccl_log_dir)
            inside.mkdir(self.run.path, job.flight_dir)
        self.record_commands(job)
        self.run.clear_results(job)
        rec.new_attempt(RUNNING)
        # The harness's pid, the job and its attempt: an id of its own for every job of the sweep
        rec.accepted(f"local-{os.getpid()}-{job.name}-{rec.attempts + 1}", state=RUNNING)
        rec.started = now()
        changed(rec)
        start = time.monotonic()
        deadline = start + job.time_limit_min * 60
        log_path = self.run.log_file(job)
        job_gpus, problem = gpus_for(job, gpus)
        if job_gpus is None and problem:
            self._finish(rec, start, FAILED, 1, problem, log_path, changed)
            return
        code: int | None
        state, code, reason = COMPLETED, 0, None
        samples = self.run.job_dir(job) / telemetry.DIR
        with inside.append(self.run.path, log_path.relative_to(self.run.path).as_posix()) as log:
            log.write(f"# {now()} attempt {rec.attempts} of {job.name} (config {job.config_hash})\n".encode())
            if problem:
                log.write(f"# warning: {problem}\n".encode())
            try:
                with sampler(samples, job.sample_s, log):  # inside the try: Ctrl-C while it starts cancels too
                    for runs in self.launches(job):
                        state, code, reason = self._run_launch(
                            job, _Turns(runs, rec, changed, samples), job_gpus, deadline, log
                        )
                        if state != COMPLETED:
                            break
            except KeyboardInterrupt:
                for key, s in rec.runs.items():
                    if s == RUNNING:
                        rec.runs[key] = CANCELLED
                self._finish(rec, start, CANCELLED, 130, "interrupted (Ctrl-C)", log_path, changed)
                raise
        self._finish(rec, start, state, code, reason, log_path, changed)

    def _finish(
        self,
        rec: JobRecord,
        start: float,
        state: str,
        code: int | None,
        reason: str | None,
        log_path: Path,
        changed: Callable[[JobRecord], None],
    ) -> None:
        rec.finished(
            state,
            code,
            round(time.monotonic() - start, 3),
            now(),
            reason,
            None if state == COMPLETED else tail(log_path),
        )
        changed(rec)

    def _hung(
        self, job: Job, run: WorkloadRun, procs: list[subprocess.Popen], tag: str, progress_dir: Path, log: BinaryIO
    ) -> tuple[str, int | None, str | None]:
        """A workload that stopped making progress: name who held it (docs/guides/hangs.md), then end it."""
        why, ranks, reading = hangs.diagnose(progress_dir, run.key, job.world_size)
        kill_groups(procs, tag)
        hangs.record(self.run.job_dir(job), run.key, job.stall_s, why, ranks, reading)
        log.write(f"# {now()} {run.key}: no progress for {job.stall_s:g} s: {why}\n".encode())
        return FAILED, None, f"{run.key} made no progress for {job.stall_s:g} s: {why}"

    def _run_launch(
        self, job: Job, turns: _Turns, gpus: list[str] | None, deadline: float, log: BinaryIO
    ) -> tuple[str, int | None, str | None]:
        """One launch of the job's agents, running `turns`' workloads; their states and marks are
        kept as each one's result appears (its end, and the next one's start)."""
        port = free_port()
        log_start = log.tell()
        log.write(
            f"# {now()} {', '.join(r.key for r in turns.runs)}: {job.nodes} agent(s) on 127.0.0.1:{port}\n".encode()
        )
        procs: list[subprocess.Popen] = []
        tag = new_tag()
        turns.begin()
        results = [self.run.path / job.result_path(run) for run in turns.runs]
        try:
            for node in range(job.nodes):
                # A session of its own: Ctrl-C in the terminal reaches the harness only, which
                # then ends every agent's process group.
                procs.append(
                    subprocess.Popen(
                        self.agent_command(job, turns.runs, node, port),
                        cwd=self.run.path,
                        env={**self.agent_env(job, turns.runs, node, gpus), TAG: tag},
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        # only prctl(PR_SET_PDEATHSIG) runs in the child, which is async-signal-safe
                        preexec_fn=die_with_parent,  # noqa: PLW1509
                    )
                )
            failed_at = None
            progress_dir = self.run.job_dir(job) / PROGRESS_DIR
            next_look = time.monotonic() + _STALL_LOOK_S
            while True:
                # a workload whose result is written has ended (rank 0 writes it last), and the
                # launch's next one begun; lexists: a link planted there is not followed
                while turns.more and os.path.lexists(results[turns.at]):
                    turns.next()
                codes = [p.poll() for p in procs]
                if all(c is not None for c in codes):
                    break
                if failed_at is None and any(c not in (None, 0) for c in codes):
                    failed_at = time.monotonic()
                if failed_at is not None and time.monotonic() - failed_at > _FAILURE_GRACE_S:
                    kill_groups(procs, tag)
                    break
                if failed_at is None and time.monotonic() > next_look:
                    next_look = time.monotonic() + _STALL_LOOK_S
                    run = turns.run
                    if hangs.stalled(hangs.read_ranks(progress_dir, run.key), job.world_size, turns.since, job.stall_s):
                        return turns.end(*self._hung(job, run, procs, tag, progress_dir, log))
                if time.monotonic() > deadline:
                    kill_groups(procs, tag)
                    key, limit = turns.run.key, job.time_limit_min
                    log.write(f"# {now()} {key}: killed at the job's time limit of {limit:g} min\n".encode())
                    return turns.end(TIMEOUT, None, f"{key} exceeded the time limit of {limit:g} min")
                time.sleep(_POLL_S)
        except BaseException:
            kill_groups(procs, tag)
            raise
        kill_tagged(tag)  # a worker its agent left behind, though every agent exited
        codes = [p.returncode for p in procs]
        bad = [c for c in codes if c != 0]
        if bad:
            # read back through the log's own descriptor (inside.append): its path is not
            # reopened, since a link could be planted there meanwhile
            end = os.fstat(log.fileno()).st_size
            start = max(log_start, end - _ERROR_READ)
            why = error_line(os.pread(log.fileno(), end - start, start).decode(errors="replace"))
            key = turns.run.key
            said = hangs.after_failure(why, self.run.job_dir(job), key, job.world_size)
            return turns.end(FAILED, bad[0], f"{key} failed (agent exit codes {codes}){said}")
        while turns.more:  # every agent exited 0: its workloads ran (collect reads their results)
            turns.next()
        return turns.end(COMPLETED, 0, None)


class _Turns:
    """The workloads of one launch, in turn: which one runs, since when, and its state and
    telemetry marks in the job's record as it begins and ends."""

    def __init__(
        self, runs: tuple[WorkloadRun, ...], rec: JobRecord, changed: Callable[[JobRecord], None], samples: Path
    ) -> None:
        self.runs, self.rec, self.changed, self.samples = runs, rec, changed, samples
        self.at, self.since = 0, time.time()

    @property
    def run(self) -> WorkloadRun:
        return self.runs[self.at]

    @property
    def more(self) -> bool:
        """Whether a workload follows the running one in this launch."""
        return self.at < len(self.runs) - 1

    def begin(self) -> None:
        self.since = time.time()
        self.rec.runs[self.run.key] = RUNNING
        self.changed(self.rec)
        telemetry.mark(self.samples, self.run.key, "start")

    def next(self) -> None:
        self.end(COMPLETED, 0, None)
        self.at += 1
        self.begin()

    def end(self, state: str, code: int | None, reason: str | None) -> tuple[str, int | None, str | None]:
        telemetry.mark(self.samples, self.run.key, "end")
        self.rec.runs[self.run.key] = state
        self.changed(self.rec)
        return state, code, reason
