"""Slurm job scripts: the rendering of one sbatch script per job from a job and a cluster profile.

Rendering is pure: a job and a profile in, the script's text out. Values reach the script in
two ways, each with its own defence:
- `#SBATCH` lines are parsed by Slurm, not the shell: a backslash escapes even inside quotes,
  '#' starts a comment, a newline ends the directive and an unmatched quote is fatal
  (docs/reference/sources.md, Slurm 22.05). Quoting cannot make those safe, so every value there is held to an
  allowlist, and relative paths are built from allowlisted job names only.
- The script body is bash: every value is shell-quoted, except the profile's `setup` lines,
  which are shell by design (the profile's author writes them, like a module file).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path

import benchmarks
from benchmarks.common import TORCHRUN_NO_LOG_DIR
from harness.config.cluster_profile import CONTAINER_CODE, ClusterProfile
from harness.run.plan import PER_STEP, Job, WorkloadRun

# The batch shell gets USR2 this long before the time limit; not USR1, which NCCL has caught in
# some releases. Slurm may send it up to SLURM_EARLY_S earlier than asked (docs/reference/sources.md,
# Slurm 22.05), and none is asked that could come in a job's first WARN_AFTER_S, while its shell
# or tasks may not yet catch it: a submitit task the testbed warned at its start died of it.
SIGNAL_LEAD_S = 120
SLURM_EARLY_S = 60
WARN_AFTER_S = 60


def limit_seconds(minutes: float) -> int:
    """A time limit in whole seconds, rounded up, as Slurm is given it."""
    return max(1, int(-(-minutes * 60 // 1)))


def format_time_limit(minutes: float) -> str:
    """Slurm's D-HH:MM:SS, rounded up to whole seconds."""
    days, rest = divmod(limit_seconds(minutes), 86400)
    hours, rest = divmod(rest, 3600)
    mins, secs = divmod(rest, 60)
    return (f"{days}-" if days else "") + f"{hours:02d}:{mins:02d}:{secs:02d}"


def signal_lead_s(time_limit_min: float) -> int | None:
    """How long before the time limit a job asks for USR2: SIGNAL_LEAD_S, less where the limit
    is too short for that warning to come WARN_AFTER_S into the job at the earliest, and None
    where even 1 s cannot (a limit of 2 minutes or less: no warning is asked for)."""
    lead = min(SIGNAL_LEAD_S, limit_seconds(time_limit_min) - SLURM_EARLY_S - WARN_AFTER_S)
    return lead if lead >= 1 else None


def tasks_and_cpus(job: Job, profile: ClusterProfile) -> tuple[int, int]:
    """(tasks per node, CPUs per task): one torchrun agent per node with all the node's CPUs,
    or one srun task per GPU. Never both G tasks and G workers each (the recipes' 16 processes
    on 4 GPUs, docs/reference/sources.md)."""
    if job.launcher == "torchrun":
        return 1, profile.cpus_per_gpu * job.gpus_per_node
    return job.gpus_per_node, profile.cpus_per_gpu


def gpu_request(job: Job, profile: ClusterProfile) -> list[str]:
    """The option that asks for the job's GPUs on each node, as the profile says the site does."""
    gpu = f"{profile.gpu_type}:{job.gpus_per_node}" if profile.gpu_type else str(job.gpus_per_node)
    if profile.gpu_request == "gres":
        return [f"--gres=gpu:{gpu}"]
    if profile.gpu_request == "gpus-per-node":
        return [f"--gpus-per-node={gpu}"]
    return []


def interpreter(profile: ClusterProfile) -> str:
    """The Python the compute nodes run: the profile's `python`; else, when its `setup` lines
    prepare an environment (a venv, conda, a module), the `python3` they leave on the PATH;
    else the interpreter running bench, whose path a shared filesystem makes valid there."""
    if profile.python:
        return profile.python
    return "python3" if profile.setup else sys.executable


def sampler_lines(job: Job, profile: ClusterProfile, python: str) -> list[str]:
    """The telemetry sampler, one task per node beside the steps for the job's life
    (docs/concepts/telemetry.md). --overlap lets it share the CPUs, memory and GPUs the steps use (srun(1),
    Slurm 22.05); the GPUs are asked for so that nvidia-smi sees them where devices are confined.
    The script waits for each node's first sample, so the first workload's start is bracketed,
    and ends the sampler on its way out, which takes a last sample."""
    folder = _quote(f"jobs/{job.name}/telemetry")
    options = " ".join(
        ["--overlap", '--nodes="$SLURM_NNODES"', "--ntasks-per-node=1", "--cpus-per-task=1", *gpu_request(job, profile)]
    )
    return [
        "",
        f"# Every node records its CPU, memory, NIC and GPU counters every {job.sample_s:g} s while the job runs",
        "# (docs/concepts/telemetry.md); run_step marks each workload's start and end.",
        f"mkdir -p {folder}",
        f"srun {options} --job-name=bench-telemetry {python} -m harness.telemetry sample {folder}"
        f" --interval-s={job.sample_s:g} &",
        "sampler=$!",
        "# SIGUSR1, not SIGTERM: srun passes it on to the tasks, while SIGTERM makes srun kill them",
        '# ("srun: forcing job termination", Slurm 22.05 on the testbed) before their last sample.',
        "stop_sampler() {",
        '  kill -USR1 "$sampler" 2>/dev/null || return 0',
        '  for _ in $(seq 20); do kill -0 "$sampler" 2>/dev/null || break; sleep 0.5; done',
        '  kill -TERM "$sampler" 2>/dev/null || true',
        '  wait "$sampler" 2>/dev/null || true',
        "}",
        "trap stop_sampler EXIT",
        "for _ in $(seq 60); do",
        f'  [ "$(ls {folder}/*.samples.jsonl 2>/dev/null | wc -l)" -ge "$SLURM_NNODES" ] && break',
        '  kill -0 "$sampler" 2>/dev/null || break  # it could not start: the job runs without it',
        "  sleep 0.5",
        "done",
    ]


# Globs of job files, one space apart: job names and workload keys are allowlisted, so they
# need no quoting for the shell but their '*', which harness.inside expands itself.
SAFE_GLOBS_RE = re.compile(r"[A-Za-z0-9_./*-]+(?: [A-Za-z0-9_./*-]+)*")


def restart_lines(job: Job, python: str) -> list[str]:
    """A job Slurm requeued (preemption, a node failure, `scontrol requeue`) runs the script
    again from the top with SLURM_RESTART_COUNT set (sbatch(1), Slurm 22.05): what the earlier
    run left is removed first, the same files bench removes before it resubmits a job
    (Job.attempt_files), so that none of it passes for this run's (docs/concepts/preemption.md). `python`
    (quoted) removes them through the run directory's descriptors, as bench does: `rm` would
    follow a link planted while the job waited, and a link fails the job instead."""
    patterns = job.attempt_files()
    assert SAFE_GLOBS_RE.fullmatch(" ".join(patterns)), patterns  # built from allowlisted names
    # Of a glob's characters only '*' is one shlex.quote quotes, and none is a quote: each pattern
    # is what shlex.quote makes of it, as quoting them one by one did.
    quoted = " ".join(f"'{p}'" if "*" in p else p for p in patterns)
    return [
        "# Requeued by Slurm: the earlier run's results, logs and samples go before this run starts",
        "# (docs/concepts/preemption.md), through no link.",
        'if [ -n "${SLURM_RESTART_COUNT:-}" ] && [ "$SLURM_RESTART_COUNT" != 0 ]; then',
        f"  {python} -m harness.inside clear {quoted}",
        "fi",
    ]


def mark_lines(job: Job, python: str) -> list[str]:
    """`mark KEY start|end`: a workload's phase, for the telemetry's timeline, appended through no
    link (harness/files/inside.py); never fails the job."""
    phases = _quote(f"jobs/{job.name}/telemetry/phases.jsonl")
    return [
        "mark() {",
        """  { printf '{"key":"%s","event":"%s","t":%s}\\n' "$1" "$2" "$(date +%s.%N)" """
        f"| {python} -m harness.inside append {phases}; }} 2>/dev/null || true",
        "}",
    ]


def sbatch_directives(job: Job, profile: ClusterProfile) -> list[str]:
    """The #SBATCH options of a job, in order, without the '#SBATCH ' prefix."""
    tasks_per_node, cpus = tasks_and_cpus(job, profile)
    log = f"jobs/{job.name}/slurm-%j.out"
    out = [
        f"--job-name=bench-{job.name}",
        f"--nodes={job.nodes}",
        f"--ntasks-per-node={tasks_per_node}",
        f"--cpus-per-task={cpus}",
    ]
    out += gpu_request(job, profile)
    out += [f"--time={format_time_limit(job.time_limit_min)}", f"--output={log}", f"--error={log}"]
    if lead := signal_lead_s(job.time_limit_min):
        out.append(f"--signal=B:USR2@{lead}")
    return out + site_directives(profile)


def site_directives(profile: ClusterProfile) -> list[str]:
    """The options every job on the profile's cluster carries: where it may run and on whose
    account (partition, account, qos, constraint, exclusive), then the profile's own sbatch_options."""
    out = [
        f"--{key}={value}"
        for key in ("partition", "account", "qos", "constraint")
        if (value := getattr(profile, key)) is not None
    ]
    return out + (["--exclusive"] if profile.exclusive else []) + list(profile.sbatch_options)


# Most arguments are alike across the jobs of a sweep: 10,000 scripts quote a few hundred strings.
_quote = functools.lru_cache(maxsize=4096)(shlex.quote)


@functools.lru_cache(maxsize=64)
def _quoted(words: tuple[str, ...]) -> str:
    """A workload's own arguments, quoted and joined once for every job of a sweep that runs it."""
    return " ".join(map(_quote, words))


def bench_code() -> Path:
    """bench's `benchmarks` package on this machine: what a container mounts when the profile
    names no copy of its own in the image."""
    return Path(benchmarks.__file__).resolve().parent


# pyxis keeps a named container on each node: the image is imported once, by the job's first
# step (container_import_lines), and every later step starts the container that one left (pyxis
# README, --container-name: "If a container with this name already exists, the existing container
# is used and the import is skipped"). Named for the job alone: pyxis's default container_scope,
# global (its config.c), keeps named containers across jobs, and another job's, perhaps of
# another image, must never be taken for this one's. In double quotes for the batch shell.
CONTAINER_NAME = 'bench-"$SLURM_JOB_ID"'


def container_import_lines(profile: ClusterProfile, on_exit: tuple[str, ...] = ()) -> list[str]:
    """The pyxis image imported on every node of the job, before the first timed step and outside
    every step's limits (docs/guides/containers.md), and removed again on the way out; `on_exit`, what
    else the EXIT trap must call (the one trap bash keeps). Nothing for Apptainer, whose .sif
    is a file, or no container."""
    c = profile.container
    if c is None or c.engine != "pyxis":
        return []
    q = _quote
    options = [
        f"--container-image={q(c.image)}",
        f"--container-name={CONTAINER_NAME}",
        *([] if c.mount_home else ["--no-container-mount-home"]),
        *(q(o) for o in c.options),
    ]
    every_node = 'srun --nodes="$SLURM_NNODES" --ntasks-per-node=1'
    return [
        "",
        "# The image, imported once a node before the first timed step, outside every step's limits;",
        "# each step then starts the named container this leaves, and the job removes it on its way",
        "# out (pyxis keeps named containers across jobs by default; docs/guides/containers.md).",
        " ".join([every_node, *(q(o) for o in profile.srun_options), *options, "true"]),
        "remove_container() {",
        f'  {every_node} enroot remove -f "pyxis_bench-$SLURM_JOB_ID" >/dev/null 2>&1 || true',
        "}",
        f"trap '{'; '.join([*on_exit, 'remove_container'])}' EXIT",
    ]


def in_container(profile: ClusterProfile, names: Iterable[str]) -> tuple[list[str], str]:
    """(extra srun options, the command's prefix) that run a workload step in the profile's
    container (docs/guides/containers.md). `names` are the variables bench exports for the step: an
    image's own value of a variable wins over the host's in both engines (pyxis's tests,
    "--container-env overriding container variable"; Apptainer's user guide, "Environment from
    the host"), so pyxis is told to keep the host's (--container-env) and Apptainer gets them
    again with its prefix (`env_prefix`). The run directory is mounted at its own path and is
    the working directory, so every relative path of the job means the same inside."""
    c = profile.container
    if c is None:
        return [], ""
    q = _quote
    code = c.code or CONTAINER_CODE
    mounts = [] if c.code else [f"{bench_code()}:{CONTAINER_CODE}/benchmarks:ro"]
    mounts += c.mounts
    workdir = q(c.workdir) if c.workdir else '"$PWD"'
    binds = ([] if c.workdir else ['"$PWD:$PWD"']) + [q(m) for m in mounts]
    inner = f"env PYTHONPATH={q(code)}"
    if c.engine == "pyxis":
        options = [
            f"--container-image={q(c.image)}",
            f"--container-name={CONTAINER_NAME}",
            *([f"--container-mounts={','.join(binds)}"] if binds else []),
            f"--container-workdir={workdir}",
            *([] if c.mount_home else ["--no-container-mount-home"]),
            *([f"--container-env={','.join(dict.fromkeys(names))}"] if names else []),
            *(q(o) for o in c.options),
        ]
        return options, inner
    words = [
        c.engine,
        "exec",
        *(["--nv"] if c.nv else []),
        *([] if c.mount_home else ["--no-home"]),
        *(f"--bind {b}" for b in binds),
        f"--pwd {workdir}",
        *(q(o) for o in c.options),
        q(c.image),
    ]
    return [], " ".join(words) + " " + inner


# Filesystems whose files no other machine sees, and the directories sites keep node-local.
LOCAL_FILESYSTEMS = ("tmpfs", "ramfs")
LOCAL_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))


def looks_local(path: Path, mounts: Path = Path("/proc/self/mounts")) -> str | None:
    """Why `path` seems private to this machine, or None: a batch job runs on other nodes, which
    must see the run directory at the same path (docs/concepts/cost.md). The filesystem is the longest
    mount point above the path, as /proc/self/mounts lists it (octal escapes for blanks)."""
    path = Path(os.path.abspath(path))
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        lines = []
    best, fstype = "", ""
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
        if (path == Path(point) or Path(point) in path.parents) and len(point) > len(best):
            best, fstype = point, fields[2]
    if fstype in LOCAL_FILESYSTEMS:
        return f"it is on {fstype} ({best}), which only this machine sees"
    under = next((d for d in LOCAL_DIRS if d == path or d in path.parents), None)
    if under is not None:
        return f"it is under {under}, which is usually each node's own"
    return None


def unmountable(profile: ClusterProfile, run_dir: Path) -> str | None:
    """The path a container would mount but cannot, or None: pyxis and Apptainer both read ','
    as the end of a mount and ':' as the end of its source (pyxis README, --container-mounts)."""
    if profile.container is None:
        return None
    paths = [Path(os.path.abspath(run_dir))] + ([] if profile.container.code else [bench_code()])
    return next((str(p) for p in paths if "," in str(p) or ":" in str(p)), None)


# A path that reaches an #SBATCH line: submitit writes the run directory's absolute path into its
# job script's --chdir, --output and --error. Slurm, not the shell, reads those lines (module
# docstring), so nothing can be quoted there: the path is held to these characters.
DIRECTIVE_PATH = re.compile(r"[A-Za-z0-9_./+@,:=-]+")


def directive_path_problem(run_dir: Path) -> str | None:
    """Why the run directory's absolute path cannot go on an #SBATCH line, or None."""
    path = os.path.abspath(run_dir)
    bad = sorted({c for c in path if not DIRECTIVE_PATH.fullmatch(c)})
    if not bad:
        return None
    shown = " ".join(repr(c) for c in bad)
    return (
        f"{path!r}: the submitit executor writes the run directory's path on #SBATCH lines, where Slurm "
        f"reads {shown} itself; choose a run directory (--out, BENCH_RESULTS) of letters, digits and _ . / + @ , : = -"
    )


def env_prefix(profile: ClusterProfile) -> str | None:
    """The prefix that makes Apptainer (APPTAINERENV_) or Singularity (SINGULARITYENV_) set a
    variable in the container over the image's own value; None for pyxis or no container."""
    c = profile.container
    return None if c is None or c.engine == "pyxis" else f"{c.engine.upper()}ENV_"


def exports(items: Iterable[tuple[str, str]], profile: ClusterProfile) -> list[str]:
    """`export NAME=value` lines, each also given under the container's prefix (env_prefix)."""
    prefix = env_prefix(profile)
    q = _quote
    return [f"export {k}={q(v)}" + (f" {prefix}{k}={q(v)}" if prefix else "") for k, v in items]


def step_python(profile: ClusterProfile, names: Iterable[str] = ()) -> tuple[list[str], str]:
    """(srun's container options, the Python a step runs, shell-quoted): the image's, started
    through the container's prefix (in_container), or the compute nodes' interpreter."""
    container, inner = in_container(profile, names)
    python = _quote(profile.container.python) if profile.container else _quote(interpreter(profile))
    return container, f"{inner} {python}" if inner else python


def step_launch(job: Job, profile: ClusterProfile, names: Iterable[str] = ()) -> str:
    """What starts each workload step of `job`, the same for every one: srun with the job's
    tasks and the profile's options, then the Python it runs (step_python); `names` are the
    variables exported for the steps, which a container must keep (in_container)."""
    container, python = step_python(profile, names)
    tasks_per_node, cpus = tasks_and_cpus(job, profile)
    # --kill-on-bad-exit: when one rank dies the others stop too, rather than wait in a collective
    # until the process-group timeout (KillOnBadExit defaults to 0, docs/reference/sources.md).
    # --cpus-per-task again: from Slurm 22.05 srun does not take it from the allocation (22.05
    # release notes: give it to srun, or set SRUN_CPUS_PER_TASK).
    srun = " ".join(
        [
            f"srun --ntasks-per-node={tasks_per_node} --cpus-per-task={cpus} --kill-on-bad-exit=1",
            *(_quote(o) for o in profile.srun_options),
            *container,
        ]
    )
    return f"{srun} {python}"


def step_command(job: Job, run: WorkloadRun, timeout_s: float, launch: str) -> str:
    """The srun line of one workload, shell-quoted, with $VARIABLES left for the batch shell:
    `launch` (step_launch), then torchrun's agent or the workload's module, and its arguments."""
    q = _quote
    every = job.run_args(run, timeout_s)
    args = " ".join([_quoted(run.args), *(q(a) for a in every[len(run.args) :])] if run.args else map(q, every))
    if job.launcher == "torchrun":
        rdzv = ('"$SLURM_NNODES"', '"$MASTER_ADDR:$MASTER_PORT"', f'"$SLURM_JOB_ID-{run.key}"')
        agent = torchrun_words(job.gpus_per_node, run.module, *rdzv)
        return f"{launch} {' '.join(agent)} {args}"
    return f"{launch} -m {run.module} {args}"


def torchrun_words(gpus_per_node: int, module: str, nnodes: str, endpoint: str, rdzv_id: str) -> list[str]:
    """torchrun's arguments for one workload, one agent per node, up to the workload's module
    (its own arguments follow): a c10d rendezvous at `endpoint`, and no restarts, since a rank
    that failed once has given its answer."""
    return [
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={gpus_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={rdzv_id}",
        "--max-restarts=0",
        TORCHRUN_NO_LOG_DIR,
        "-m",
        module,
    ]


def environment_lines(
    job: Job, profile: ClusterProfile, executor: str = "slurm"
) -> tuple[list[str], dict[str, str], list[str]]:
    """(the batch shell's lines before the steps, the variables they export, the names passed
    through from the submitting environment): modules, the profile's setup, the job's and the NCCL
    set's variables, the passthrough checks, and the rendezvous address: the first node, and a
    port derived from the job id. The Slurm and submitit executors both start their jobs so."""
    lines = [f"module load {_quote(m)}" for m in profile.modules]
    lines += list(profile.setup)
    env = {
        **profile.env,
        **dict(job.env),
        **dict(job.nccl_env),
        "BENCH_JOB": job.name,
        "BENCH_LAUNCHER": f"{executor}-{job.launcher}",
    }
    lines += exports(env.items(), profile)
    # Names only (allowlisted, so safe unquoted): the values come from the submitting environment.
    lines += [
        f'[[ -v {name} ]] || {{ echo "bench: {name} (env_passthrough) is not set where the job was '
        f'submitted" >&2; exit 1; }}'
        for name in dict.fromkeys((*profile.env_passthrough, *job.passthrough))
    ]
    passed = [*profile.env_passthrough, *job.passthrough]
    prefix = env_prefix(profile)
    if prefix and passed:
        lines.append("export " + " ".join(f'{prefix}{n}="${n}"' for n in dict.fromkeys(passed)))
    lines += [
        "",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "# Derived from the job id, so two jobs sharing a node never collide. Arithmetic evaluates a",
        "# variable's value as an expression, commands in array subscripts included: digits only.",
        'case "$SLURM_JOB_ID" in',
        '  ""|*[!0-9]*) echo "bench: SLURM_JOB_ID is not a number: $SLURM_JOB_ID" >&2; exit 1 ;;',
        "esac",
        "MASTER_PORT=$((20000 + 10#$SLURM_JOB_ID % 20000))",
        "export MASTER_ADDR MASTER_PORT"
        + (f' {prefix}MASTER_ADDR="$MASTER_ADDR" {prefix}MASTER_PORT="$MASTER_PORT"' if prefix else ""),
    ]
    return lines, env, passed


def script_head(
    job: Job, profile: ClusterProfile, comments: Iterable[str], directives: Iterable[str] = ()
) -> tuple[list[str], dict[str, str], list[str]]:
    """The start every job script shares: bash, the comments, the #SBATCH lines (the job's, then
    `directives`), strict mode, the clean-up of a requeued run and the environment; (the lines,
    the variables they export, the names passed through), as environment_lines gives them."""
    lines = [
        "#!/bin/bash",
        *comments,
        *(f"#SBATCH {d}" for d in (*sbatch_directives(job, profile), *directives)),
        "",
        "set -euo pipefail",
    ]
    setup, env, passed = environment_lines(job, profile)
    return lines + setup + restart_lines(job, shlex.quote(interpreter(profile))), env, passed


def time_limit_trap(job: Job, python: str, note: str) -> str:
    """The trap that notes Slurm's time-limit warning in the job's time-limit.txt, with `note`
    (expanded when the signal comes), appended through no link (harness/files/inside.py); a note that
    cannot be written is said on the job's log, and never ends the job (strict mode would)."""
    path = _quote(f"jobs/{job.name}/time-limit.txt")
    append = f'echo "$(date -Is) {note}" | {python} -m harness.inside append {path} || true'
    return f"trap {shlex.quote(append)} USR2"


def warning_comment(job: Job, what: str) -> list[str]:
    """The script's comment on the time-limit warning: when it comes, and `what` its trap does."""
    if lead := signal_lead_s(job.time_limit_min):
        return [
            f"# Slurm sends USR2 {lead} s before the time limit, or up to {SLURM_EARLY_S} s sooner"
            f" (--signal=B:USR2@{lead});",
            f"# {what}.",
        ]
    return [
        f"# No time-limit warning: Slurm may send one up to {SLURM_EARLY_S} s early, and this job's limit is too",
        f"# short for one that could not come in its first {WARN_AFTER_S} s (docs/reference/sources.md).",
    ]


def render_script(job: Job, profile: ClusterProfile, timeout_s: float) -> str:
    """The sbatch script of `job`: pure, the same inputs always give the same text."""
    q = shlex.quote
    python = q(interpreter(profile))
    c = profile.container
    comments = [
        f"# bench job {job.name} (config {job.config_hash}), cluster profile {profile.name}",
        f"# matrix point: {job.nodes} node(s) x {job.gpus_per_node} GPU(s) per node = world size {job.world_size},"
        f" launcher {job.launcher}, NCCL set {job.nccl_config}",
        f"# workloads, in turn: {' '.join(r.key for r in job.runs)}",
        *([f"# each workload step runs in the {c.engine} image {c.image} (docs/guides/containers.md)"] if c else []),
        "# Submitted from the run directory, which relative paths below are relative to.",
    ]
    lines, env, passed = script_head(job, profile, comments)
    lines += [
        "",
        *warning_comment(job, "a trap notes the step it came during"),
        "# The results of finished steps are already on disk, and Slurm ends the job as TIMEOUT. bash",
        "# runs a trap only once the foreground command ends, so each step runs in the background",
        "# while the script waits for it.",
        f"# Beside each step a watcher reads the ranks' progress files: when none has moved for {job.stall_s:g} s",
        "# it names the rank that held the others, keeps the record and ends the step (docs/guides/hangs.md).",
        "step=none",
        time_limit_trap(job, python, "time limit near during $step"),
        *(mark_lines(job, python) if job.sample_s else []),
        "run_step() {",
        "  step=$1; shift",
        *(['  mark "$step" start'] if job.sample_s else []),
        '  "$@" &',
        "  local pid=$! rc watcher",
        f'  {python} -m harness.hangs watch {q(f"jobs/{job.name}")} "$step" --world={job.world_size}'
        f' --stall-s={job.stall_s:g} --pid="$pid" &',
        "  watcher=$!",
        "  while true; do",
        '    rc=0; wait "$pid" || rc=$?',
        '    [ "$rc" -eq 0 ] || ! kill -0 "$pid" 2>/dev/null && break  # still running: the trap woke us',
        "  done",
        '  kill "$watcher" 2>/dev/null || true',
        '  wait "$watcher" 2>/dev/null || true',
        *(['  mark "$step" end'] if job.sample_s else []),
        '  return "$rc"',
        "}",
    ]
    if job.sample_s:
        lines += sampler_lines(job, profile, python)
    lines += container_import_lines(profile, ("stop_sampler",) if job.sample_s else ())
    given = {*env, *profile.env_passthrough, *job.passthrough}
    debug = job.debug_env(job.runs[0], given)
    per_step = [k for k in PER_STEP if debug.pop(k, None) is not None]
    if debug or per_step:
        lines += [
            "",
            *(
                [
                    "# PyTorch's flight recorder of gloo's collectives, which each rank dumps itself on a stall",
                    "# or a failed collective (docs/guides/hangs.md, benchmarks/recorder.py)",
                ]
                if job.backend == "gloo"
                else [
                    "# NCCL's own log of the transport it chose (docs/concepts/transport.md) and PyTorch's flight",
                    "# recorder, dumped on a process-group timeout (docs/guides/hangs.md): files per rank",
                ]
            ),
        ]
        lines += exports(debug.items(), profile)
        folders = {"NCCL_DEBUG_FILE": job.nccl_log_dir, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": job.flight_dir}
        lines += [f"mkdir -p {' '.join(q(folders[k]) for k in per_step)}"] if per_step else []
    launch = step_launch(job, profile, [*env, *passed, "MASTER_ADDR", "MASTER_PORT", *debug, *per_step])
    for run in job.runs:
        lines.append("")
        step = job.debug_env(run, given)
        lines += exports(((k, step[k]) for k in per_step), profile)
        lines.append(f"run_step {run.key} {step_command(job, run, timeout_s, launch)}")
    return "\n".join(lines) + "\n"
