"""The run directory and its job table.

    DIR/plan.json                 the sweep as run, and every job of its matrix
    DIR/jobs.json                 the job table: state, exit code, elapsed, log tail per job
    DIR/jobs/<job>/               commands or job.sbatch, the log, one result JSON per workload
    DIR/data/                     a generated image set, when the real workload needs one
    DIR/summary.parquet, .csv     one row per (job, workload, scaling, collective, size)
    DIR/samples.parquet           per-iteration samples behind the summary's statistics
    DIR/.summary/                 the generations those three link into (docs/reference/run-directory.md)
    DIR/plots/                    PNG plots and the CSV of each plot's points

Everything is written atomically, and the job table after every change, so a crash or
Ctrl-C leaves a directory that `bench status` reads and `bench sweep --resume` continues.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import fcntl
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from benchmarks.catalog import BACKENDS, COLLECTIVE_WORKLOAD, DEVICES, SCALINGS, TRAINING
from benchmarks.results import kind_of, read_regular, write_all
from harness.config.fields import FieldError, check_env, check_env_name, check_time
from harness.config.spec import LAUNCHERS, SET_NAME_RE
from harness.errors import RunDirError, one_line
from harness.files import inside
from harness.run import forked, provenance
from harness.run.plan import Job

# plan.json and jobs.json are read up to this size. A job takes about 360 bytes of plan.json and
# 490 of jobs.json (a local run's, measured), or a few KiB with a failure's log tail: 100,000 jobs
# fit.
RUN_FILE_LIMIT = 256 * 2**20

PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, CANCELLED = (
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "TIMEOUT",
    "CANCELLED",
)
# A Slurm job the harness is handing to sbatch: if the harness dies now, resume looks the job up
# in Slurm (by name and working directory) before it submits anything again.
SUBMITTING = "SUBMITTING"
# What `bench status` shows for a PENDING row without a job id: never handed to Slurm (or, locally,
# never started). jobs.json keeps PENDING with a null id, so PENDING on screen means queued.
NOT_SUBMITTED = "NOT_SUBMITTED"
FINAL_STATES = frozenset(
    {COMPLETED, FAILED, TIMEOUT, CANCELLED, "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
)


# The formats of plan.json and jobs.json, apart from the result files' schema: a new result
# schema leaves existing run directories readable. A directory written before these had their
# own version (they carried the result schema_version 1 instead, with the same layout) is read
# as version 1 of each.
PLAN_VERSION = 1
TABLE_VERSION = 1

WORKER_JOBS = 1_000  # jobs from which RunDir.write_job_files shares them with a forked worker


class Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=Named)  # a job of a sweep's, or of the node check's


def _format_version(data: dict[str, Any], key: str, current: int, where: Path) -> None:
    """Refuse a plan or job table this bench cannot read, in one line that says why."""
    found = data.get(key)
    if found is None and key not in data and data.get("schema_version") == 1:
        found = 1  # written before the formats had versions of their own
    if found == current:
        return
    if isinstance(found, int) and not isinstance(found, bool) and found > current:
        raise RunDirError(f"{where}: {key} {found} was written by a newer bench; this one reads {current}")
    raise RunDirError(f"{where}: {key} required {current}, found {found!r}")


def _one_per_line(top: dict[str, Any], key: str) -> str:
    """`top` as JSON with each item of the list top[key] on a line of its own, so that a plan
    of 10,000 jobs stays short and greppable. Every member is json.dumps' own output."""
    members = [f"{json.dumps(k)}: {json.dumps(v, indent=1)}" for k, v in top.items() if k != key]
    items = ",\n  ".join(json.dumps(item) for item in top[key])
    members.append(f"{json.dumps(key)}: [\n  {items}\n ]" if items else f"{json.dumps(key)}: []")
    return "{\n " + ",\n ".join(members) + "\n}\n"


def _write_job_files(
    folder: Path, jobs: Sequence[N], files: Callable[[N], dict[str, str]], again: bool = False
) -> bool:
    """RunDir.write_job_files' work for `jobs`: whether it wrote any file. `again` replaces a
    file already there, where a worker that died may have left it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_TRUNC if again else os.O_EXCL)
    top = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    wrote = False
    try:
        for job in jobs:
            if not (named := files(job)):
                continue
            with contextlib.suppress(FileExistsError):
                os.mkdir(job.name, dir_fd=top)
            job_fd = os.open(job.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=top)
            try:
                for name, text in named.items():
                    # 0o666: the process's umask applies, as to any file a tool creates. Bytes
                    # to the descriptor, with no file object, for each of thousands of files.
                    fd = os.open(name, flags, 0o666, dir_fd=job_fd)
                    try:
                        write_all(fd, text.encode())
                    finally:
                        os.close(fd)
                    wrote = True
            finally:
                os.close(job_fd)
    finally:
        os.close(top)
    return wrote


def sync_filesystem(path: Path) -> None:
    """Flush the filesystem that holds `path` to disk: syncfs(2) on Linux, sync(2) elsewhere."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
        if syncfs is None:
            os.sync()
        elif syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(path))
    finally:
        os.close(fd)


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class JobRecord:
    """One row of the job table."""

    name: str
    nodes: int
    state: str = PENDING
    job_id: str | None = None
    exit_code: int | None = None
    elapsed_s: float | None = None
    started: str | None = None
    ended: str | None = None
    attempts: int = 0
    submitted: str | None = None
    cluster: str | None = None  # Slurm's cluster, where sbatch named one (federations, -M)
    node_list: str | None = None  # the hosts Slurm gave the job
    reason: str | None = None
    log_tail: str | None = None
    runs: dict[str, str] = field(default_factory=dict)  # workload key -> state
    # What the attempt used, where the executor can tell (Slurm: sacct, as seff reckons it)
    cpu_s: float | None = None
    cpu_efficiency: float | None = None  # of the allocated CPUs over the elapsed time
    mem_bytes: int | None = None
    mem_efficiency: float | None = None  # of the allocated memory

    @property
    def shown_state(self) -> str:
        """The state as a person reads it: NOT_SUBMITTED for a pending job with no id yet."""
        return NOT_SUBMITTED if self.state == PENDING and self.job_id is None else self.state

    # Every change of state goes through one of these, so each executor changes rows alike.

    def new_attempt(self, state: str, reason: str | None = None) -> None:
        """Start an attempt: forget what the last one left (its id, times, exit, hosts, log and
        workload states); `attempts` counts only attempts that started."""
        self.state, self.reason = state, reason
        self.job_id = self.cluster = self.node_list = self.log_tail = None
        self.exit_code = self.elapsed_s = None
        self.started = self.ended = self.submitted = None
        self.runs = {}
        self.used()

    def accepted(
        self, job_id: str, cluster: str | None = None, state: str = PENDING, reason: str | None = None
    ) -> None:
        """The attempt has an id: Slurm took the job, or it started here."""
        self.job_id, self.cluster, self.state, self.attempts = job_id, cluster, state, self.attempts + 1
        if reason is not None:
            self.reason = reason

    def not_submitted(self, reason: str | None = None) -> None:
        """Back to PENDING: the attempt never reached Slurm, or Slurm never took it."""
        self.state, self.submitted, self.reason = PENDING, None, reason

    def finished(
        self,
        state: str,
        exit_code: int | None,
        elapsed_s: float | None,
        ended: str | None,
        reason: str | None = None,
        log_tail: str | None = None,
    ) -> None:
        """The attempt ended in `state` (a final state), with what is known of how."""
        self.state, self.exit_code, self.elapsed_s, self.ended = state, exit_code, elapsed_s, ended
        self.reason, self.log_tail = reason, log_tail

    def used(
        self,
        cpu_s: float | None = None,
        cpu_efficiency: float | None = None,
        mem_bytes: int | None = None,
        mem_efficiency: float | None = None,
    ) -> None:
        """What the attempt used (none of it: forgotten)."""
        self.cpu_s, self.cpu_efficiency, self.mem_bytes, self.mem_efficiency = (
            cpu_s,
            cpu_efficiency,
            mem_bytes,
            mem_efficiency,
        )

    def orphaned(self) -> None:
        """The harness that ran the job stopped, and the job with it: PENDING again, keeping its
        history, so that resume reruns it."""
        self.reason = f"harness stopped while the job was {self.state}; rerun"
        self.state = PENDING


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            str(self.path).encode("utf-8")
        except UnicodeEncodeError:  # undecodable bytes, which os.fsdecode keeps as surrogates
            raise RunDirError(
                f"{one_line(str(self.path))}: the name is not UTF-8; rename the directory, since "
                f"summaries, reports and the history record it as text"
            ) from None

    plan_file = property(lambda self: self.path / "plan.json")
    table_file = property(lambda self: self.path / "jobs.json")
    summary_parquet = property(lambda self: self.path / "summary.parquet")
    summary_csv = property(lambda self: self.path / "summary.csv")
    samples_parquet = property(lambda self: self.path / "samples.parquet")
    # The summary files are one set, committed at once (docs/reference/run-directory.md): each is a link
    # into GENERATIONS/current, and `current` names the newest complete generation.
    generations = property(lambda self: self.path / ".summary")

    def summary_set(self) -> dict[str, Path]:
        """Where to read the summary files from: one committed generation, resolved once, so a
        collect committing meanwhile cannot hand a reader one old file and one new. A directory
        whose files are plain (copied, or collected by an older bench) is read as it is."""
        names = {
            "summary_parquet": "summary.parquet",
            "summary_csv": "summary.csv",
            "samples_parquet": "samples.parquet",
        }
        plain = {key: self.path / name for key, name in names.items()}
        if self.generations.is_symlink():
            raise RunDirError(
                f"{self.generations}: a symbolic link where bench keeps the summary's generations; bench reads "
                f"nothing through a link out of a run directory; remove it and run `bench collect {self.path}`"
            )
        link = plain["summary_parquet"]
        if not (link.is_symlink() and os.readlink(link) == f"{self.generations.name}/current/summary.parquet"):
            return plain
        try:
            generation = os.readlink(self.generations / "current")
        except OSError:
            return plain
        if "/" in generation or generation in ("", ".", ".."):
            raise RunDirError(
                f"{self.generations / 'current'}: points outside {self.generations}; "
                f"run `bench collect {self.path}` again"
            )
        return {key: self.generations / generation / name for key, name in names.items()}

    plots = property(lambda self: self.path / "plots")

    def job_dir(self, job: Job | str) -> Path:
        return self.path / "jobs" / (job if isinstance(job, str) else job.name)

    def clear_results(self, job: Job) -> None:
        """Remove the result files of an earlier attempt, its hang records and progress files
        (docs/guides/hangs.md) and its telemetry (docs/concepts/telemetry.md), so they cannot pass for the next
        one's."""
        inside.clear(self.path, job.attempt_files())

    def check_job_dirs(self, jobs: Iterable[Job]) -> None:
        """RunDirError unless each directory a job's attempt writes in or clears (its own, its
        progress, telemetry and NCCL folders) is, where it exists, a directory of bench's and
        not a link out of the run directory: checked before a resumed run writes anything."""
        for job in jobs:
            folders = {f"jobs/{job.name}", *(pattern.rsplit("/", 1)[0] for pattern in job.attempt_files())}
            for folder in sorted(folders):
                with contextlib.suppress(FileNotFoundError), inside.directory(self.path, folder):
                    pass

    def log_file(self, job: Job | str) -> Path:
        return self.job_dir(job) / "log.txt"

    def write_job_files(self, jobs: Sequence[N], files: Callable[[N], dict[str, str]]) -> None:
        """Create each job's files ({file name: text} by `files`), none of which exists yet, then
        flush them to disk at once. They need no atomic replace: nothing reads a job's files
        before plan.json exists, and plan.json, written after them and fsynced, is the commit
        point. One flush of the filesystem rather than an fsync per file."""
        if self._create_job_files(jobs, files):
            sync_filesystem(self.path)

    def _create_job_files(self, jobs: Sequence[N], files: Callable[[N], dict[str, str]]) -> bool:
        """write_job_files' files, not yet flushed: whether there were any. Names are opened
        relative to their directory; from WORKER_JOBS jobs on, the second half is rendered and
        written by a forked worker (harness/run/forked.py) while this process does the first: the
        kernel's part, a directory and a file per job, is most of it."""
        (self.path / "jobs").mkdir(exist_ok=True)
        if len(jobs) < WORKER_JOBS:
            return _write_job_files(self.path / "jobs", jobs, files)
        half, here = len(jobs) // 2, os.getpid()
        # Done here only where the worker left no whole result: some of its files may be there.
        theirs = lambda: _write_job_files(self.path / "jobs", jobs[half:], files, again=os.getpid() == here)  # noqa: E731
        with forked.beside(theirs) as their_share:
            mine = _write_job_files(self.path / "jobs", jobs[:half], files)
            return their_share() or mine

    # ---- plan

    def write_plan(
        self,
        sweep: dict[str, Any],
        sweep_file: str,
        executor: str,
        jobs: list[Job],
        cluster: dict[str, Any] | None = None,
        files: Callable[[Job], dict[str, str]] | None = None,
    ) -> None:
        """plan.json with one job per line. Every job of a sweep runs the same workloads, so
        they are stored once, under "runs", rather than in each job. With `files`, each job's
        files come first (write_job_files), flushed to disk by a thread while plan.json's text
        is made, since syncfs mostly waits on the disk, not the processor; plan.json, the commit
        point, is written once they are on disk."""
        with contextlib.ExitStack() as stack:
            flushed = None
            if files is not None and self._create_job_files(jobs, files):
                flushed = stack.enter_context(ThreadPoolExecutor(1)).submit(sync_filesystem, self.path)
            runs = [asdict(r) for r in jobs[0].runs] if jobs else []
            plan = {
                "plan_version": PLAN_VERSION,
                "created": now(),
                "bench": provenance.record(),  # which bench planned the run (docs/concepts/provenance.md)
                "sweep_file": sweep_file,
                "executor": executor,
                "cluster": cluster,
                "sweep": sweep,
                "runs": runs,
                "jobs": [j.to_dict(with_runs=False) for j in jobs],
            }
            text = _one_per_line(plan, "jobs").encode()
            if flushed:
                flushed.result()
        inside.write(self.path, self.plan_file.name, text)

    def read_plan(self) -> dict[str, Any]:
        if not self.path.is_dir():
            raise RunDirError(f"{self.path}: no such run directory")
        try:
            plan = json.loads(read_regular(self.plan_file, RUN_FILE_LIMIT))
        except FileNotFoundError:
            raise RunDirError(f"{self.path}: not a run directory (no plan.json)") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RunDirError(f"{self.plan_file}: unreadable ({one_line(str(exc))})") from None
        if not isinstance(plan, dict):
            raise RunDirError(f"{self.plan_file}: malformed plan: a {type(plan).__name__}, not an object")
        _format_version(plan, "plan_version", PLAN_VERSION, self.plan_file)
        for key, kinds in (
            ("sweep", (dict,)),
            ("executor", (str,)),
            ("cluster", (dict, type(None))),
            ("runs", (list,)),
            ("jobs", (list,)),
        ):
            if not isinstance(plan.get(key), kinds):
                raise RunDirError(f"{self.plan_file}: malformed plan: {key} is {type(plan.get(key)).__name__}")
        return plan

    def jobs(self, plan: dict[str, Any] | None = None) -> list[Job]:
        """The plan's jobs (of `plan`, when already read), checked: a job's name and workloads
        become paths under the run directory, so an edited plan.json cannot point them anywhere
        else."""
        plan = self.read_plan() if plan is None else plan
        try:
            jobs = [Job.from_dict({**d, "runs": plan["runs"]}) for d in plan["jobs"]]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RunDirError(f"{self.plan_file}: malformed plan ({type(exc).__name__}: {exc})") from None
        for job in jobs:
            problem = _job_problem(job)
            if problem:
                raise RunDirError(f"{self.plan_file}: malformed plan: job {job.name!r}: {problem}")
        return jobs

    # ---- job table

    def read_table(self, jobs: Iterable[Job]) -> dict[str, JobRecord]:
        """The saved table, with a PENDING row for any job of the plan it does not have yet."""
        saved: dict[str, Any] = {}
        if os.path.lexists(self.table_file):
            try:
                data = json.loads(read_regular(self.table_file, RUN_FILE_LIMIT))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise RunDirError(f"{self.table_file}: unreadable job table ({one_line(str(exc))})") from None
            if not isinstance(data, dict):
                raise RunDirError(f"{self.table_file}: malformed job table: a {type(data).__name__}, not an object")
            _format_version(data, "table_version", TABLE_VERSION, self.table_file)
            saved = data.get("jobs", {})
            if not isinstance(saved, dict):
                raise RunDirError(
                    f'{self.table_file}: malformed job table: "jobs" is a {type(saved).__name__}, '
                    f"not an object of job names"
                )
        table = {}
        for job in jobs:
            row = saved.get(job.name)
            table[job.name] = _record(row, self.table_file, job) if row else JobRecord(name=job.name, nodes=job.nodes)
        return table

    def write_table(self, table: dict[str, JobRecord], executor: str) -> None:
        table_json = {
            "table_version": TABLE_VERSION,
            "executor": executor,
            "updated": now(),
            "jobs": {name: vars(rec) for name, rec in table.items()},
        }
        inside.write(
            self.path, self.table_file.name, (json.dumps(table_json, indent=1, allow_nan=False) + "\n").encode()
        )


_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # no '/', so a name is one path component
_RUN_KEYS = {(COLLECTIVE_WORKLOAD, ""), *((w, s) for w in TRAINING for s in SCALINGS)}


def _job_problem(job: Job) -> str | None:
    """What makes a job of plan.json one that no sweep file could have planned, or None. The plan
    is data: an edited one is held to the sweep file's rules (harness/config/spec.py), since its jobs'
    variables, names and numbers reach job scripts and shells on a resume."""
    if not isinstance(job.name, str) or not _NAME_RE.fullmatch(job.name):
        return "the name is not letters, digits, '_', '.' and '-'"
    for key in ("nodes", "gpus_per_node", "repeat"):
        value = getattr(job, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return f"{key} is {value!r}, not a positive integer"
    for run in job.runs:
        if (run.workload, run.scaling) not in _RUN_KEYS or not all(isinstance(a, str) for a in run.args):
            return f"workload {run.workload!r} with scaling {run.scaling!r} is not one bench runs"
    for key, value, choices in (
        ("launcher", job.launcher, LAUNCHERS),
        ("device", job.device, DEVICES),
        ("backend", job.backend, BACKENDS),
    ):
        if value not in choices:
            return f"{key} is {value!r}; valid: {', '.join(choices)}"
    if not isinstance(job.nccl_config, str) or not SET_NAME_RE.fullmatch(job.nccl_config):
        return f"nccl_config {job.nccl_config!r} is not a settings set's name"
    try:
        for key in ("time_limit_min", "stall_s", "sample_s"):
            check_time(key, getattr(job, key))
    except FieldError as exc:  # "stall_s must be between ...", "time_limit_min is '1; id', not a number"
        return f"{exc.key} {exc}"
    try:
        for key, pairs in (("nccl_env", job.nccl_env), ("env", job.env)):
            if not all(len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs):
                return f"{key} is not a list of [name, value] texts"
            check_env(key, dict(pairs))
        for name in job.passthrough:
            if not isinstance(name, str):
                return f"passthrough holds {name!r}, not a variable's name"
            check_env_name("passthrough", name)
    except FieldError as exc:
        return f"{exc.key}: {exc}"
    return None


# The type of each job-table field as JSON holds it.
_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "nodes": (int,),
    "state": (str,),
    "job_id": (str, type(None)),
    "exit_code": (int, type(None)),
    "elapsed_s": (int, float, type(None)),
    "started": (str, type(None)),
    "ended": (str, type(None)),
    "attempts": (int,),
    "submitted": (str, type(None)),
    "cluster": (str, type(None)),
    "node_list": (str, type(None)),
    "reason": (str, type(None)),
    "log_tail": (str, type(None)),
    "runs": (dict,),
    "cpu_s": (int, float, type(None)),
    "cpu_efficiency": (int, float, type(None)),
    "mem_bytes": (int, type(None)),
    "mem_efficiency": (int, float, type(None)),
}


def _record(row: object, where: Path, job: Job) -> JobRecord:
    """A job-table row, its fields type-checked (a hand-edited table fails here, not later); its
    name and node count are the plan's."""
    name = job.name
    if not isinstance(row, dict):
        raise RunDirError(f"{where}: malformed job table: job {name!r} is a {type(row).__name__}, not an object")
    kept = {k: v for k, v in row.items() if k in _RECORD_TYPES}
    for key, value in kept.items():
        if not isinstance(value, _RECORD_TYPES[key]) or isinstance(value, bool):
            raise RunDirError(f"{where}: malformed job table: job {name!r}: {key} is {value!r}")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in kept.get("runs", {}).items()):
        raise RunDirError(f"{where}: malformed job table: job {name!r}: runs must map workloads to states")
    return JobRecord(**{**kept, "name": job.name, "nodes": job.nodes})


# --------------------------------------------------------------------------- claiming and locking


def claim(path: Path) -> tuple[RunDir, bool]:
    """(run directory, whether it was created) for a new sweep, checked before anything is
    written: it is new, or empty (a lock file from an earlier claim aside). Lock it (`locked`)
    before writing into it."""
    run = RunDir(path)
    if os.path.lexists(path) and not path.is_dir():
        raise RunDirError(f"--out {path}: exists and is not a directory")
    if run.plan_file.exists():
        raise RunDirError(
            f"{path} already holds a run; continue it with `bench sweep --resume {path}` or choose another --out"
        )
    if path.is_dir() and any(e.name != ".lock" for e in path.iterdir()):
        raise RunDirError(f"--out {path}: the directory is not empty; give a new or empty directory")
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"--out {path}: cannot create the directory ({exc.strerror or exc})") from None
    return run, created


@contextlib.contextmanager
def locked(run: RunDir) -> Iterator[None]:
    """Hold the run directory for one harness at a time; the lock dies with the process."""
    # O_NOFOLLOW: a link planted as .lock must not make root create or open its target;
    # O_NONBLOCK: nor a FIFO make it wait.
    try:
        fd = os.open(run.path / ".lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise RunDirError(f"{run.path}: cannot take the run's lock ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise RunDirError(f"{run.path / '.lock'}: {kind_of(mode)}, not bench's lock file; remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirError(f"{run.path} is in use by another bench process") from None
        yield
    finally:
        os.close(fd)


def in_use(run: RunDir) -> bool:
    """Whether a bench process holds the run directory now (it is sweeping or resuming it)."""
    try:
        fd = os.open(run.path / ".lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
