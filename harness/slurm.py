"""Slurm job scripts: cluster profiles and the rendering of one sbatch script per job.

A cluster profile (sweeps/clusters/*.yaml, `bench sweep --cluster FILE`) says what every job
on a cluster needs: partition, account, how GPUs are requested, modules, setup lines,
cluster-wide NCCL settings. The same sweep on two profiles is how two cluster configurations
are compared.

Rendering is pure: a job and a profile in, the script's text out. Values reach the script in
two ways, each with its own defence:
- `#SBATCH` lines are parsed by Slurm, not the shell: a backslash escapes even inside quotes,
  '#' starts a comment, a newline ends the directive and an unmatched quote is fatal
  (shared/REFERENCE.md). Quoting cannot make those safe, so every value there is held to an
  allowlist, and relative paths are built from allowlisted job names only.
- The script body is bash: every value is shell-quoted, except the profile's `setup` lines,
  which are shell by design (the profile's author writes them, like a module file).
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .plan import Job, WorkloadRun
from .errors import SpecError
from .spec import FieldError, build, check_env, check_passthrough, read_mapping, safe_text

# Characters Slurm's #SBATCH parser reads as plain text: no quotes, backslash, '#', blanks or '$'.
SBATCH_VALUE_RE = re.compile(r"[A-Za-z0-9_.:,+@/=-]+")
# --constraint has operators of its own: a100&ib, [rack1*2&rack2*2], (a|b).
SBATCH_CONSTRAINT_RE = re.compile(r"[A-Za-z0-9_.:,+@/=&|!()*\[\]-]+")
SBATCH_OPTION_RE = re.compile(r"--[a-z][a-z-]*(=[A-Za-z0-9_.:,+@/=-]+)?")
PROGRAM_RE = re.compile(r"[A-Za-z0-9_./+-]+")
GPU_REQUESTS = ("gres", "gpus-per-node", "none")
# Options an extra sbatch option may not give: those the renderer sets itself (and their
# aliases), and those that change where the job's output goes, whose job it is, where it is
# submitted, or how bench tracks it (docs/hardening.md).
RESERVED_OPTIONS = ("--job-name", "--nodes", "--ntasks", "--ntasks-per-node", "--tasks-per-node", "--ntasks-per-gpu",
                    "--cpus-per-task", "--cpus-per-gpu", "--gres", "--gpus", "--gpus-per-node", "--gpus-per-task",
                    "--gpus-per-socket", "--time", "--output", "--error", "--input", "--open-mode", "--signal",
                    "--partition", "--account", "--qos", "--constraint", "--exclusive", "--chdir", "--dependency",
                    "--array", "--wrap", "--export", "--export-file", "--get-user-env", "--uid", "--gid",
                    "--clusters", "--parsable", "--test-only", "--hold", "--wait", "--kill-on-invalid-dep")
# The batch shell gets USR2 this long before the time limit (Slurm may send it up to 60 s
# earlier); not USR1, which NCCL has caught in some releases (shared/REFERENCE.md).
SIGNAL_LEAD_S = 120


def _sbatch_value(key: str, value: str | None) -> None:
    pattern, allowed = ((SBATCH_CONSTRAINT_RE, "_ . : , + @ / = - & | ! ( ) * [ ]") if key == "constraint"
                        else (SBATCH_VALUE_RE, "_ . : , + @ / = -"))
    if value is not None and not pattern.fullmatch(value):
        raise FieldError(key, f"{value!r} cannot go on an #SBATCH line; use letters, digits and {allowed}")


@dataclass(frozen=True, kw_only=True)
class ClusterProfile:
    name: str
    description: str = ""
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    exclusive: bool = False
    gpu_request: str = "gres"          # --gres=gpu[:type]:G, --gpus-per-node=[type:]G, or none
    gpu_type: str | None = None
    cpus_per_gpu: int = 4
    python: str | None = None          # interpreter on the compute nodes; default: the one running bench
    modules: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()        # shell lines run before the steps, e.g. activating a venv
    env: dict[str, str] = field(default_factory=dict, metadata={"mapping": "env"})
    env_passthrough: tuple[str, ...] = ()   # names taken from the submitting environment (secrets)
    sbatch_options: tuple[str, ...] = ()
    # At most this many jobs of a sweep at once (None: as many as Slurm will run): jobs that
    # would share CPUs or links, as on the testbed, then do not disturb each other's figures.
    max_running_jobs: int | None = None
    # squeue/sacct every poll_min_s while jobs change state, backing off to poll_max_s.
    poll_min_s: float = 2.0
    poll_max_s: float = 30.0

    def __post_init__(self) -> None:
        from .spec import NAME_RE

        if not NAME_RE.fullmatch(self.name):
            raise FieldError("name", f"{self.name!r} is not valid; use letters, digits, '_', '.', '-' (at most 64)")
        for key in ("partition", "account", "qos", "constraint", "gpu_type"):
            _sbatch_value(key, getattr(self, key))
        if self.gpu_request not in GPU_REQUESTS:
            raise FieldError("gpu_request", f"{self.gpu_request!r} is not valid; valid: {', '.join(GPU_REQUESTS)}")
        if self.cpus_per_gpu < 1:
            raise FieldError("cpus_per_gpu", f"must be at least 1, found {self.cpus_per_gpu}")
        if self.max_running_jobs is not None and self.max_running_jobs < 1:
            raise FieldError("max_running_jobs", f"must be at least 1, found {self.max_running_jobs}")
        if not 0.1 <= self.poll_min_s <= self.poll_max_s <= 3600:
            raise FieldError("poll_min_s", f"poll_min_s {self.poll_min_s:g} and poll_max_s {self.poll_max_s:g} must "
                                           f"satisfy 0.1 <= poll_min_s <= poll_max_s <= 3600")
        if self.python is not None and not PROGRAM_RE.fullmatch(self.python):
            raise FieldError("python", f"{self.python!r} is not a plain program path (letters, digits, _ . / + -)")
        for module in self.modules:
            safe_text("modules", module)
        for line in self.setup:
            safe_text("setup", line)
        check_env("env", self.env)
        check_passthrough("env_passthrough", self.env_passthrough)
        for option in self.sbatch_options:
            if not SBATCH_OPTION_RE.fullmatch(option):
                raise FieldError("sbatch_options", f"{option!r} is not a plain --option[=value] that Slurm reads "
                                                   f"as written")
            reserved = reserved_option(option.split("=", 1)[0])
            if reserved:
                name = option.split("=", 1)[0]
                read_as = "" if name == reserved else f" (sbatch reads {name} as {reserved})"
                raise FieldError("sbatch_options", f"{option!r}: {reserved} is set by bench, or would take the job "
                                                   f"out of its hands{read_as}; use the profile's own keys")


def reserved_option(name: str) -> str | None:
    """The reserved option `name` would set, or None. sbatch reads long options with getopt_long,
    which takes any unambiguous abbreviation (`--outp` is `--output`), so a name that begins a
    reserved one is refused too. No sbatch option outside RESERVED_OPTIONS is a prefix of one
    inside it (`sbatch --help`, Slurm 22.05.8), so nothing legitimate is refused by this."""
    return next((r for r in RESERVED_OPTIONS if r.startswith(name)), None)


def load_profile(path: str | Path) -> ClusterProfile:
    path = Path(path)
    data = read_mapping(path, "cluster profile")
    try:
        return build(ClusterProfile, data, "")
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None


DEFAULT_PROFILE = ClusterProfile(name="default")


def format_time_limit(minutes: float) -> str:
    """Slurm's D-HH:MM:SS, rounded up to whole seconds."""
    total = max(1, int(-(-minutes * 60 // 1)))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    mins, secs = divmod(rest, 60)
    return (f"{days}-" if days else "") + f"{hours:02d}:{mins:02d}:{secs:02d}"


def tasks_and_cpus(job: Job, profile: ClusterProfile) -> tuple[int, int]:
    """(tasks per node, CPUs per task): one torchrun agent per node with all the node's CPUs,
    or one srun task per GPU. Never both G tasks and G workers each (the recipes' 16 processes
    on 4 GPUs, shared/REFERENCE.md)."""
    if job.launcher == "torchrun":
        return 1, profile.cpus_per_gpu * job.gpus_per_node
    return job.gpus_per_node, profile.cpus_per_gpu


def sbatch_directives(job: Job, profile: ClusterProfile) -> list[str]:
    """The #SBATCH options of a job, in order, without the '#SBATCH ' prefix."""
    tasks_per_node, cpus = tasks_and_cpus(job, profile)
    log = f"jobs/{job.name}/slurm-%j.out"
    out = [f"--job-name=bench-{job.name}", f"--nodes={job.nodes}", f"--ntasks-per-node={tasks_per_node}",
           f"--cpus-per-task={cpus}"]
    gpu = f"{profile.gpu_type}:{job.gpus_per_node}" if profile.gpu_type else str(job.gpus_per_node)
    if profile.gpu_request == "gres":
        out.append(f"--gres=gpu:{gpu}")
    elif profile.gpu_request == "gpus-per-node":
        out.append(f"--gpus-per-node={gpu}")
    out += [f"--time={format_time_limit(job.time_limit_min)}", f"--output={log}", f"--error={log}",
            f"--signal=B:USR2@{SIGNAL_LEAD_S}"]
    for key in ("partition", "account", "qos", "constraint"):
        value = getattr(profile, key)
        if value is not None:
            out.append(f"--{key}={value}")
    if profile.exclusive:
        out.append("--exclusive")
    out += list(profile.sbatch_options)
    return out


def step_command(job: Job, run: WorkloadRun, profile: ClusterProfile, timeout_s: float) -> str:
    """The srun line of one workload, shell-quoted, with $VARIABLES left for the batch shell."""
    q = shlex.quote
    args = " ".join(q(a) for a in job.run_args(run, timeout_s))
    python = q(profile.python or sys.executable)
    tasks_per_node, cpus = tasks_and_cpus(job, profile)
    # --kill-on-bad-exit: when one rank dies the others stop too, rather than wait in a collective
    # until the process-group timeout (KillOnBadExit defaults to 0, shared/REFERENCE.md).
    # --cpus-per-task again: from Slurm 22.05 srun does not take it from the allocation (22.05
    # release notes: give it to srun, or set SRUN_CPUS_PER_TASK).
    srun = f"srun --ntasks-per-node={tasks_per_node} --cpus-per-task={cpus} --kill-on-bad-exit=1"
    if job.launcher == "torchrun":
        return (f"{srun} {python} -m torch.distributed.run"
                f' --nnodes="$SLURM_NNODES" --nproc-per-node={job.gpus_per_node} --rdzv-backend=c10d'
                f' --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv-id="$SLURM_JOB_ID-{run.key}"'
                f" --max-restarts=0 -m {run.module} {args}")
    return f"{srun} {python} -m {run.module} {args}"


def render_script(job: Job, profile: ClusterProfile, timeout_s: float) -> str:
    """The sbatch script of `job`: pure, the same inputs always give the same text."""
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"# bench job {job.name} (config {job.config_hash}), cluster profile {profile.name}",
        f"# matrix point: {job.nodes} node(s) x {job.gpus_per_node} GPU(s) per node = world size {job.world_size},"
        f" launcher {job.launcher}, NCCL set {job.nccl_config}",
        f"# workloads, in turn: {' '.join(r.key for r in job.runs)}",
        "# Submitted from the run directory, which relative paths below are relative to.",
        *(f"#SBATCH {d}" for d in sbatch_directives(job, profile)),
        "",
        "set -euo pipefail",
    ]
    if profile.modules:
        lines += [f"module load {q(m)}" for m in profile.modules]
    lines += list(profile.setup)
    env = {**profile.env, **dict(job.env), **dict(job.nccl_env),
           "BENCH_JOB": job.name, "BENCH_LAUNCHER": f"slurm-{job.launcher}"}
    lines += [f"export {k}={q(v)}" for k, v in env.items()]
    # Names only (allowlisted, so safe unquoted): the values come from the submitting environment.
    lines += [f'[[ -v {name} ]] || {{ echo "bench: {name} (env_passthrough) is not set where the job was '
              f'submitted" >&2; exit 1; }}' for name in dict.fromkeys((*profile.env_passthrough, *job.passthrough))]
    lines += [
        "",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "# Derived from the job id, so two jobs sharing a node never collide. Arithmetic evaluates a",
        "# variable's value as an expression, commands in array subscripts included: digits only.",
        'case "$SLURM_JOB_ID" in',
        '  ""|*[!0-9]*) echo "bench: SLURM_JOB_ID is not a number: $SLURM_JOB_ID" >&2; exit 1 ;;',
        "esac",
        "MASTER_PORT=$((20000 + 10#$SLURM_JOB_ID % 20000))",
        "export MASTER_ADDR MASTER_PORT",
        "",
        f"# Near the time limit Slurm sends USR2 (--signal=B:USR2@{SIGNAL_LEAD_S}); the note says which step",
        "# was cut short, the results of finished steps are already on disk, and Slurm then ends the",
        "# job as TIMEOUT. bash runs a trap only once the foreground command ends, so each step runs",
        "# in the background while the script waits for it.",
        "step=none",
        f"trap 'echo \"$(date -Is) time limit near during $step\" >> jobs/{job.name}/time-limit.txt' USR2",
        "run_step() {",
        '  step=$1; shift',
        '  "$@" &',
        "  local pid=$! rc",
        '  while true; do',
        '    wait "$pid" && return 0',
        '    rc=$?',
        '    kill -0 "$pid" 2>/dev/null || return "$rc"  # still running: the trap woke us, wait on',
        '  done',
        "}",
    ]
    for run in job.runs:
        lines += ["", f"run_step {run.key} {step_command(job, run, profile, timeout_s)}"]
    return "\n".join(lines) + "\n"
