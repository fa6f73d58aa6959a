"""The Slurm executor: one sbatch script per job of the plan, written to
DIR/jobs/<job>/job.sbatch before anything is submitted (script.py renders it), then
submitted with `sbatch --parsable` and tracked until Slurm's accounting gives every job a final
state.

Tracking costs one `squeue` per poll for all jobs still queued or running, and one
`sacct -X -P` for those that left the queue, never one call per job. A job that left the
queue is never assumed to have completed: slurmctld tells slurmdbd of a job's end a moment
later, and until then sacct still says RUNNING (seen on the testbed), so the job stays
tracked until sacct gives a final state.

The job table is saved after every change, so a harness killed at any point (Ctrl-C, a lost
SSH session, SIGKILL) loses nothing: `bench sweep --resume DIR` goes on tracking the recorded
job ids and submits only jobs never submitted or finished without completing. The one gap,
a harness killed while sbatch runs, is closed by marking the row SUBMITTING first; resume
then looks the job up by its name and working directory (the run directory) before it
submits anything again.

A cluster profile may cap how many jobs of a sweep run at once (`max_running_jobs`): the
sweep is then submitted as that many chains, each job depending (afterany) on the previous
one of its chain, so Slurm itself starts the next job the moment one ends.

One file: submission, tracking, requeues and adoption on resume move one job table through
Slurm's states, and each reads the others' bookkeeping (the chains, the ids seen queued again,
the grace periods); what Slurm's commands reply is parsed apart, in replies.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

from harness.config.cluster_profile import DEFAULT_PROFILE, ClusterProfile
from harness.errors import SlurmError, UsageError, shown
from harness.evidence import hangs
from harness.evidence.logs import error_line, tail
from harness.executors.base import Executor
from harness.executors.slurm.replies import (
    SACCT_FIELDS,
    USAGE_FIELDS,
    Accounting,
    Usage,
    one_line_of,
    parse_sacct,
    parse_sbatch_reply,
    parse_squeue,
    parse_usage,
    user_name,
)
from harness.executors.slurm.script import format_time_limit, interpreter, looks_local, render_script, unmountable
from harness.run.plan import Job
from harness.run.rundir import (
    CANCELLED,
    COMPLETED,
    FAILED,
    FINAL_STATES,
    PENDING,
    RUNNING,
    SUBMITTING,
    TIMEOUT,
    JobRecord,
    RunDir,
    now,
)

SCRIPT = "job.sbatch"  # in each job's directory
# squeue states of a job that waits to run; every other state squeue lists is a live one.
# Final states the cluster caused, not the job: such a job is submitted again, up to the
# profile's max_attempts (docs/concepts/preemption.md).
RESUBMITTED = frozenset({"PREEMPTED", "NODE_FAIL", "BOOT_FAIL"})
QUEUED_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"})
# Bounds on Slurm's commands: consecutive failures of squeue or sacct before the sweep stops
# and says why, tries of one sbatch that failed for a passing reason, and per-call timeouts.
QUERY_TRIES = 6
SBATCH_TRIES = 3
CALL_TIMEOUT_S = 120
# sbatch errors that say the controller is busy or unreachable, not that the job is wrong.
TRANSIENT = re.compile(
    r"Socket timed out|Unable to contact slurm controller|temporarily unable|"
    r"Resource temporarily unavailable|Zero Bytes were transmitted",
    re.I,
)
# Pending reasons that say the job cannot start as the cluster stands: more nodes or time than
# the partition allows, a constraint no node has, an account or QOS it may not use (squeue(1),
# JOB REASON CODES). Without EnforcePartLimits sbatch accepts such a job, and it would pend
# for ever, holding up the sweep; after UNRUNNABLE_GRACE_S (a node briefly down also reads
# PartitionNodeLimit) the harness cancels it and says why. `--resume` submits it again.
UNRUNNABLE = frozenset(
    {
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "BadConstraints",
        "InvalidAccount",
        "InvalidQOS",
        "DependencyNeverSatisfied",
        "AssocMaxNodesPerJobLimit",
        "AssocMaxWallDurationPerJobLimit",
        "QOSMaxNodePerJobLimit",
        "QOSMaxWallDurationPerJobLimit",
    }
)
UNRUNNABLE_GRACE_S = 30.0
# How long a job may be out of the queue without a final state in sacct before the harness
# stops waiting for it (slurmdbd down, or accounting far behind).
ACCOUNTING_GRACE_S = 300.0


# What runs on the nodes with the profile's Python, beside the workloads (docs/guides/containers.md,
# "What stays on the host"): the modules each imports, and what is lost without them. Without a
# container the workloads run with it too, and need what WORKLOAD_MODULES names: found, not
# imported, since importing torch takes longer than the rest of a dry run.
HOST_MODULES = ("harness.evidence.hangs", "harness.evidence.telemetry", "harness.nodes.allocation")
WORKLOAD_MODULES = ("benchmarks.runtime", "torch")
_IMPORT_TIMEOUT_S = 60


def python_check(profile: ClusterProfile) -> str | None:
    """A dry run's look at the Python the nodes run (script.interpreter): where it can be found
    here (an absolute path, or a name with no setup lines to change what it means), whether it
    imports bench; one line of what will not run when it does not, of what was not checked when
    setup lines decide it on the nodes, else None."""
    python = interpreter(profile)
    if not os.path.isabs(python) and (profile.setup or profile.modules):
        return (
            f"the nodes' Python ({python}) is what the profile's setup and modules leave there, not checked here: "
            f"on a node, after them, `{python} -c 'import harness, benchmarks'` must work, or the hang watcher, "
            "the telemetry sampler and the node check's driver will not run"
        )
    found = python if os.path.isabs(python) else shutil.which(python)
    lost = "the hang watcher, the telemetry sampler and the node check's driver will not run" + (
        "" if profile.container else ", nor any workload"
    )
    if not found or not os.access(found, os.X_OK):
        return (
            f"the profile's python {python!r} is not an executable here; if the nodes see what this host does, {lost}"
        )
    code = "\n".join(
        [
            f"import importlib.util, {', '.join(HOST_MODULES)}",
            f"for name in {[] if profile.container else list(WORKLOAD_MODULES)!r}:",
            "    if importlib.util.find_spec(name) is None:",
            "        raise ModuleNotFoundError(f'No module named {name!r}')",
        ]
    )
    try:
        done = subprocess.run(
            [found, "-c", code],
            capture_output=True,
            text=True,
            timeout=_IMPORT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            cwd="/",  # not this directory, which may hold bench's source: a node's is the run directory
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the profile's python {found} did not start here ({exc}); {lost}"
    if done.returncode:
        said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        return f"the profile's python {found} cannot import bench ({said[-1] if said else done.returncode}): {lost}"
    return None


class NoAnswer(SlurmError):
    """A Slurm command that timed out: whether it acted is not known."""


# --------------------------------------------------------------------------- signals


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP (a lost SSH session) while sbatch runs and its job id is
    saved, then act on them: a job Slurm accepted is never left out of the table."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in sigs}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    if caught:
        signal.raise_signal(caught[0])


# --------------------------------------------------------------------------- executor


class SlurmExecutor(Executor):
    name = "slurm"
    interrupt_note = "jobs already submitted keep running in Slurm"
    batch = True
    writes_job_files = True

    def __init__(self, run: RunDir, timeout_s: float, profile: ClusterProfile = DEFAULT_PROFILE):
        super().__init__(run, timeout_s)
        self.profile = profile
        self.calls: Counter[str] = Counter()
        # The generated script is what runs: SBATCH_* variables would override its directives.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SBATCH_")}
        self._failures: Counter[str] = Counter()
        self._absent_since: dict[str, float] = {}
        self._stuck_since: dict[str, float] = {}
        self._cancelled_why: dict[str, str] = {}
        self._requeued: set[str] = set()  # ids seen queued again after they ran
        self._previous: dict[str, str] = {}  # job name -> what its earlier attempts ended in
        self._tails: list[str | None] = []  # the newest job of each max_running_jobs chain

    @classmethod
    def create(cls, run: RunDir, timeout_s: float, profile: ClusterProfile | None) -> SlurmExecutor:
        return cls(run, timeout_s, profile or DEFAULT_PROFILE)

    @classmethod
    def preflight(cls, out: Path, given: str, profile: ClusterProfile | None, warn: Callable[[str], None]) -> None:
        """The run directory must be one the compute nodes see (a warning: bench cannot know),
        and one a container can mount (docs/guides/containers.md)."""
        if why := looks_local(out):
            warn(
                f"the run directory {shown(str(out))} may not be visible to the compute nodes: {why}; "
                "give --out (or BENCH_RESULTS) on a filesystem they share"
            )
        if bad := unmountable(profile or DEFAULT_PROFILE, out):
            raise UsageError(
                f"{given} {out}: the container would mount {bad}, and container engines read ',' and ':' in a "
                "mount as separators; choose a run directory (and an install of bench) whose path has neither"
            )

    def cluster(self) -> dict:
        return dataclasses.asdict(self.profile)

    def script_path(self, job: Job) -> Path:
        return self.run.job_dir(job) / SCRIPT

    def log_path(self, job: Job | str, job_id: str) -> Path:
        return self.run.job_dir(job) / f"slurm-{job_id}.out"

    def job_files(self, job: Job) -> dict[str, str]:
        return {SCRIPT: render_script(job, self.profile, self.timeout_s)}

    def resume(self, table: dict[str, JobRecord]) -> dict[str, JobRecord]:
        """Unchanged: jobs with a Slurm id outlive the harness and are tracked again, rows left
        SUBMITTING are looked up in Slurm, and `execute` resubmits only jobs never submitted or
        finished without completing."""
        return table

    def report(self) -> str:
        return "Slurm commands: " + ", ".join(
            f"{self.calls[c]} {c}" for c in ("sbatch", "squeue", "sacct", "scancel") if c != "scancel" or self.calls[c]
        )

    # ---- Slurm's commands

    def _call(self, tool: str, args: list[str]) -> subprocess.CompletedProcess:
        self.calls[tool] += 1
        try:
            # A session of its own: Ctrl-C in the terminal reaches the harness, not sbatch.
            return subprocess.run(
                [tool, *args],
                capture_output=True,
                text=True,
                timeout=CALL_TIMEOUT_S,
                env=self.env,
                cwd=self.run.path,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except FileNotFoundError:
            raise SlurmError(
                f"{tool} not found on PATH; the Slurm executor needs Slurm's client commands", exit_status=2
            ) from None
        except subprocess.TimeoutExpired:
            raise NoAnswer(f"{tool} gave no answer in {CALL_TIMEOUT_S} s") from None

    def _query(self, tool: str, args: list[str], ok: Callable[[subprocess.CompletedProcess], bool]) -> str | None:
        """The output of squeue or sacct, or None after a failure; QUERY_TRIES failures in a
        row stop the sweep with the command's own words."""
        try:
            p = self._call(tool, args)
        except NoAnswer as exc:
            p = subprocess.CompletedProcess([tool], 124, "", str(exc))
        if ok(p):
            self._failures[tool] = 0
            return p.stdout
        self._failures[tool] += 1
        if self._failures[tool] >= QUERY_TRIES:
            raise SlurmError(
                f"{tool} failed {QUERY_TRIES} times in a row (exit status {p.returncode}): "
                f"{one_line_of(p.stderr or p.stdout)}"
            )
        return None

    def squeue(self, ids: list[str]) -> dict[str, tuple[str, str | None]] | None:
        # squeue fails with "Invalid job id specified" when no id it was given is still known.
        out = self._query(
            "squeue",
            ["-h", "-o", "%i|%T|%r", "-j", ",".join(ids)],
            lambda p: p.returncode == 0 or "Invalid job id" in p.stderr,
        )
        return None if out is None else parse_squeue(out)

    def sacct(self, ids: list[str]) -> dict[str, Accounting] | None:
        out = self._query(
            "sacct",
            ["-X", "-D", "-P", "-n", f"--format={SACCT_FIELDS}", "-j", ",".join(ids)],
            lambda p: p.returncode == 0,
        )
        return None if out is None else parse_sacct(out)

    # ---- running a sweep

    def execute(self, jobs: list[Job], table: dict[str, JobRecord], changed: Callable[[JobRecord], None]) -> None:
        by_name = {job.name: job for job in jobs}
        self._adopt([table[j.name] for j in jobs if table[j.name].state == SUBMITTING], changed)
        live = {r.job_id: r for r in table.values() if r.job_id and r.state not in FINAL_STATES}
        queued = self._poll(live, by_name, changed) if live else {}
        todo = [j for j in jobs if table[j.name].state != COMPLETED and table[j.name].job_id not in live]
        self._submit_all(todo, table, live, queued, changed)
        interval = self.profile.poll_min_s
        while live:
            time.sleep(interval)
            before = {i: (r.state, r.reason, dict(r.runs)) for i, r in live.items()}
            self._poll(live, by_name, changed)
            moved = live.keys() != before.keys() or any(
                before[i] != (r.state, r.reason, r.runs) for i, r in live.items()
            )
            interval = self.profile.poll_min_s if moved else min(interval * 1.5, self.profile.poll_max_s)
            lost = [i for i, since in self._absent_since.items() if time.monotonic() - since > ACCOUNTING_GRACE_S]
            if lost and set(lost) >= set(live):
                raise SlurmError(
                    f"job(s) {', '.join(sorted(lost))} left the queue but sacct has had no final state "
                    f"for them for {ACCOUNTING_GRACE_S:.0f} s (is slurmdbd up?); their ids are saved: "
                    f"`bench sweep --resume {self.run.path}` looks again"
                )

    def _submit_all(
        self,
        todo: list[Job],
        table: dict[str, JobRecord],
        live: dict[str, JobRecord],
        queued: dict,
        changed: Callable[[JobRecord], None],
    ) -> None:
        """Submit `todo`, as `max_running_jobs` chains when the profile caps running jobs."""
        cap = self.profile.max_running_jobs
        # A resumed sweep's chains go on from its newest jobs still queued or running.
        self._tails = [*sorted((i for i in live if i in queued), key=int)[-cap:]] if cap else []
        self._tails += [None] * ((cap or 0) - len(self._tails))
        # Until Slurm has taken one job of the sweep, a refusal is most likely the profile's fault.
        taken = any(r.attempts for r in table.values())
        for k, job in enumerate(todo):
            if self._chained(k % cap if cap else 0, job, table[job.name], live, changed, first=not taken):
                taken = True

    def _chained(
        self,
        slot: int,
        job: Job,
        rec: JobRecord,
        live: dict[str, JobRecord],
        changed: Callable[[JobRecord], None],
        first: bool = False,
    ) -> str | None:
        """Submit `job` at the end of chain `slot` (max_running_jobs), or on its own without a cap."""
        after = self._tails[slot] if self._tails else None
        job_id = self._submit(job, rec, after if after in live else None, changed, first=first)
        if job_id:
            live[job_id] = rec
            if self._tails:
                self._tails[slot] = job_id
        return job_id

    def _submit(
        self, job: Job, rec: JobRecord, after: str | None, changed: Callable[[JobRecord], None], first: bool
    ) -> str | None:
        """sbatch one job; its id, or None when Slurm refused it (then the row says why)."""
        self.run.clear_results(job)
        where = f" on {rec.node_list}" if rec.node_list and rec.state in RESUBMITTED else ""
        previous = f"attempt {rec.attempts} was Slurm job {rec.job_id} ({rec.state}{where})" if rec.job_id else None
        if previous:
            self._previous[job.name] = "; ".join(filter(None, (self._previous.get(job.name), previous)))
        with deferred_signals():
            rec.new_attempt(SUBMITTING, reason=previous)
            rec.submitted = now()
            changed(rec)
            for attempt in range(SBATCH_TRIES):
                try:
                    p = self._sbatch(job, after)
                except NoAnswer as exc:  # the row stays SUBMITTING: resume looks the job up
                    raise SlurmError(
                        f"{exc} for {job.name}, so whether Slurm took it is not known; "
                        f"`bench sweep --resume {self.run.path}` finds out before submitting again"
                    ) from None
                except SlurmError:  # sbatch never ran
                    rec.not_submitted(previous)
                    changed(rec)
                    raise
                if p.returncode == 0 or not TRANSIENT.search(p.stderr) or attempt == SBATCH_TRIES - 1:
                    break
                time.sleep(2**attempt)
            if p.returncode == 0:
                rec.accepted(*parse_sbatch_reply(p.stdout, p.stderr))
                changed(rec)
                return rec.job_id
            why = one_line_of(p.stderr or p.stdout)
            if first:
                rec.not_submitted(previous)
                changed(rec)
                raise SlurmError(
                    f"sbatch could not submit {self.script_path(job)}, the first job of the sweep, so "
                    f"nothing was submitted: {why}",
                    exit_status=2,
                )
            rec.finished(FAILED, None, None, None, f"sbatch refused the job: {why}")
            changed(rec)
            return None

    def _sbatch(self, job: Job, after: str | None) -> subprocess.CompletedProcess:
        """Submit `job`'s script, after job `after` ends when it is given; sbatch's answer,
        whose stdout is `--parsable`'s `id[;cluster]` when it took the job."""
        args = [
            "--parsable",
            *([f"--dependency=afterany:{after}"] if after else []),
            str(self.script_path(job).relative_to(self.run.path)),
        ]
        return self._call("sbatch", args)

    def _adopt(self, recs: list[JobRecord], changed: Callable[[JobRecord], None]) -> None:
        """Rows a killed harness left SUBMITTING: find the job Slurm may have accepted, by job
        name and working directory, in the queue (all states) or in accounting."""
        if not recs:
            return
        names = ",".join(f"bench-{r.name}" for r in recs)
        workdir = os.path.realpath(self.run.path)
        found: dict[str, str] = {}
        out = self._query("squeue", ["-h", "-t", "all", "-n", names, "-o", "%i|%j|%Z"], lambda p: p.returncode == 0)
        since = (
            min(dt.datetime.fromisoformat(r.submitted) for r in recs if r.submitted)
            if any(r.submitted for r in recs)
            else dt.datetime.now(dt.timezone.utc)
        )
        start = (since.astimezone() - dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
        acct = self._query(
            "sacct",
            ["-X", "-P", "-n", f"--name={names}", "-S", start, "--format=JobID,JobName,WorkDir"],
            lambda p: p.returncode == 0,
        )
        if out is None or acct is None:
            raise SlurmError(
                "cannot ask Slurm whether the jobs being submitted when the harness stopped were "
                f"accepted ({', '.join(r.name for r in recs)}); try the resume again"
            )
        for line in (out + acct).splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3 and parts[0].isdigit() and os.path.realpath(parts[2]) == workdir:
                name = parts[1].removeprefix("bench-")
                if int(parts[0]) > int(found.get(name, "0")):
                    found[name] = parts[0]
        for rec in recs:
            if rec.name in found:
                rec.accepted(found[rec.name], reason="found in Slurm after the harness stopped while submitting it")
            else:
                rec.not_submitted()
            changed(rec)

    def _poll(
        self, live: dict[str, JobRecord], by_name: dict[str, Job], changed: Callable[[JobRecord], None]
    ) -> dict[str, tuple[str, str | None]]:
        """One squeue for every live job, one sacct for those that left the queue; rows that
        reach a final state leave `live`. Returns what squeue said."""
        queue = self.squeue(list(live))
        if queue is None:
            return {}
        gone = [i for i in live if i not in queue or queue[i][0] in FINAL_STATES]
        acct = (self.sacct(gone) if gone else {}) or {}
        self._cancel_unrunnable({i: q for i, q in queue.items() if i in live})
        ended = [i for i in gone if i in acct and acct[i].state in FINAL_STATES]
        used = self.usage(ended) if ended else {}
        for job_id in list(live):
            rec = live[job_id]
            job = by_name[rec.name]
            a = acct.get(job_id)
            if job_id in gone and a is not None and a.state in FINAL_STATES:
                self._absent_since.pop(job_id, None)
                del live[job_id]
                self._finish(job, rec, a)
                if job_id in used:
                    rec.used(**asdict(used[job_id]))
                if a.state in RESUBMITTED and rec.attempts < self.profile.max_attempts:
                    # Ended by the cluster, not by the job: submitted again, at the end of its chain
                    slot = self._tails.index(job_id) if job_id in self._tails else 0
                    self._chained(slot, job, rec, live, changed)
                    continue
                changed(rec)
                continue
            reason: str | None
            if job_id in gone:
                self._absent_since.setdefault(job_id, time.monotonic())
                state, reason = RUNNING, "left the queue; waiting for sacct's final state"
            else:
                slurm_state, why = queue[job_id]
                state = PENDING if slurm_state in QUEUED_STATES else RUNNING
                reason = (
                    f"{slurm_state}: {why}" if why else (None if slurm_state in (PENDING, RUNNING) else slurm_state)
                )
                if state == PENDING and (rec.started is not None or job_id in self._requeued):
                    # it ran and is queued again: Slurm requeued it, and it will start over
                    self._requeued.add(job_id)
                    reason = f"requeued by Slurm, to run again from its first step ({reason or slurm_state})"
            runs = self._workload_states(job, rec.runs, state)
            if (state, reason, runs) != (rec.state, rec.reason, rec.runs):
                if state == RUNNING and rec.started is None:
                    rec.started = now()
                rec.state, rec.reason, rec.runs = state, reason, runs
                changed(rec)
        return queue

    def usage(self, ids: list[str]) -> dict[str, Usage]:
        """The CPU and memory figures of finished jobs; nothing when sacct cannot say (accounting
        without jobacct_gather, or sacct failing): they are a record, not a verdict."""
        try:
            p = self._call("sacct", ["-P", "-n", f"--format={USAGE_FIELDS}", "-j", ",".join(ids)])
        except SlurmError:
            return {}
        return parse_usage(p.stdout) if p.returncode == 0 else {}

    def _cancel_unrunnable(self, queue: dict[str, tuple[str, str | None]]) -> None:
        """scancel, in one call, jobs pending for UNRUNNABLE_GRACE_S with a reason that says
        they cannot start (see UNRUNNABLE)."""
        clock = time.monotonic()
        stuck = {i: why for i, (state, why) in queue.items() if state in QUEUED_STATES and why in UNRUNNABLE}
        for i in list(self._stuck_since):
            if i not in stuck:
                del self._stuck_since[i]
        due = [
            i
            for i in stuck
            if clock - self._stuck_since.setdefault(i, clock) > UNRUNNABLE_GRACE_S and i not in self._cancelled_why
        ]
        if not due:
            return
        p = self._call("scancel", due)
        if p.returncode != 0:  # tried again next poll; the job stays visible as pending
            return
        for i in due:
            self._cancelled_why[i] = (
                f"cancelled by bench: pending for {UNRUNNABLE_GRACE_S:.0f} s with reason "
                f"{stuck[i]}, which says it cannot start on this cluster as it stands "
                f"(squeue's JOB REASON CODES); `bench sweep --resume` submits it again"
            )

    def _workload_states(self, job: Job, runs: dict[str, str], state: str) -> dict[str, str]:
        """Workload states from the result files on disk: those with a result COMPLETED, the
        first without one in `state` (running, or how the job ended), the rest not reached."""
        if state == PENDING:
            return runs
        out = {}
        for run in job.runs:
            if (self.run.path / job.result_path(run)).exists():
                out[run.key] = COMPLETED
            elif state != COMPLETED:
                out[run.key] = state
                break
        return out

    def _finish(self, job: Job, rec: JobRecord, a: Accounting) -> None:
        rec.started, rec.node_list = a.start or rec.started, a.node_list
        rec.runs = self._workload_states(job, rec.runs, a.state)
        # Each run Slurm requeued is an attempt too; the script cleared what it left.
        rec.attempts += len(a.earlier)
        history = "; ".join(
            note
            for note in (
                self._previous.get(job.name),
                f"requeued by Slurm after {', '.join(a.earlier)}" if a.earlier else None,
            )
            if note
        )
        if a.state == COMPLETED:
            note = f"{history}; completed on attempt {rec.attempts}" if history else None
            rec.finished(COMPLETED, a.exit_code, a.elapsed_s, a.end, note)
            return
        log = self.log_path(job, rec.job_id or a.job_id)
        why = self._reason(job, rec, a, log)
        why = f"{history}; attempt {rec.attempts}: {why}" if history else why
        rec.finished(a.state, a.exit_code, a.elapsed_s, a.end, why, tail(log))

    def _reason(self, job: Job, rec: JobRecord, a: Accounting, log: Path) -> str:
        step = next((k for k, s in rec.runs.items() if s != COMPLETED), None) if a.start else None
        if a.state == CANCELLED and rec.job_id in self._cancelled_why:
            return self._cancelled_why[rec.job_id]
        if a.state == CANCELLED:
            who = f" by {user_name(a.by_uid)}" if a.by_uid is not None else ""
            return f"cancelled{who}" + (f" during {step}" if step else " before it started")
        if a.state == TIMEOUT:
            # The results on disk name the step the limit cut; the warning's note names the step
            # running when it came, up to three minutes before, and is read only without them.
            note = tail(self.run.job_dir(job) / "time-limit.txt", lines=1)
            noted = note.rsplit(" during ", 1)[-1] if " during " in note else None
            during = step or (noted if noted != "none" else None)
            return f"time limit of {format_time_limit(job.time_limit_min)} reached" + (
                f" during {during}" if during else ""
            )
        hang = hangs.read_record(self.run.job_dir(job), step) if step else None
        if a.state == FAILED and hang is not None:  # the job's own watcher ended the step
            return f"{step} made no progress for {hang['stall_s']:g} s: {hang['reason']}"
        if a.state == FAILED and not log.exists():
            # Slurm could not open the job's output, so the job never ran: on the testbed a job
            # whose log directory had gone ended FAILED with exit code 0:53 and no file at all.
            return (
                f"the job could not start on {a.node_list or 'its node'} (exit code {a.exit_code}, signal "
                f"{a.signal}) and left no log at {log.relative_to(self.run.path)}: the compute nodes must see "
                f"the run directory {self.run.path.resolve()} at the same path, on a shared filesystem"
            )
        if a.state == FAILED:
            why = error_line(tail(log, lines=400))
            code = f"exit code {a.exit_code}" + (f", signal {a.signal}" if a.signal else "")
            said = hangs.after_failure(why, self.run.job_dir(job), step, job.world_size)
            return f"{step or 'the job'} failed ({code}){said}"
        signal_part = f", signal {a.signal}" if a.signal else ""
        return f"Slurm ended the job {a.state} (exit code {a.exit_code}{signal_part})" + (
            f" during {step}" if step else ""
        )
