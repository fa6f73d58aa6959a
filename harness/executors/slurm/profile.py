"""Cluster profiles: what every job on a cluster needs.

A cluster profile (sweeps/clusters/*.yaml, `bench sweep --cluster FILE`) says what every job
on a cluster needs: partition, account, how GPUs are requested, modules, setup lines,
cluster-wide NCCL settings. The same sweep on two profiles is how two cluster configurations
are compared.

Values that reach an `#SBATCH` line are held to an allowlist here, when the profile is loaded:
Slurm parses those lines itself, not the shell, so quoting cannot make them safe
(docs/hardening.md, docs/reference.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import SpecError
from harness.spec import NAME_RE, FieldError, build, check_env, check_passthrough, read_mapping, safe_text

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
RESERVED_OPTIONS = (
    "--job-name",
    "--nodes",
    "--ntasks",
    "--ntasks-per-node",
    "--tasks-per-node",
    "--ntasks-per-gpu",
    "--cpus-per-task",
    "--cpus-per-gpu",
    "--gres",
    "--gpus",
    "--gpus-per-node",
    "--gpus-per-task",
    "--gpus-per-socket",
    "--time",
    "--output",
    "--error",
    "--input",
    "--open-mode",
    "--signal",
    "--partition",
    "--account",
    "--qos",
    "--constraint",
    "--exclusive",
    "--chdir",
    "--dependency",
    "--array",
    "--wrap",
    "--export",
    "--export-file",
    "--get-user-env",
    "--uid",
    "--gid",
    "--clusters",
    "--parsable",
    "--test-only",
    "--hold",
    "--wait",
    "--kill-on-invalid-dep",
)


def _sbatch_value(key: str, value: str | None) -> None:
    pattern, allowed = (
        (SBATCH_CONSTRAINT_RE, "_ . : , + @ / = - & | ! ( ) * [ ]")
        if key == "constraint"
        else (SBATCH_VALUE_RE, "_ . : , + @ / = -")
    )
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
    gpu_request: str = "gres"  # --gres=gpu[:type]:G, --gpus-per-node=[type:]G, or none
    gpu_type: str | None = None
    cpus_per_gpu: int = 4
    python: str | None = None  # interpreter on the compute nodes; default: the one running bench
    modules: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()  # shell lines run before the steps, e.g. activating a venv
    env: dict[str, str] = field(default_factory=dict, metadata={"mapping": "env"})
    env_passthrough: tuple[str, ...] = ()  # names taken from the submitting environment (secrets)
    sbatch_options: tuple[str, ...] = ()
    # At most this many jobs of a sweep at once (None: as many as Slurm will run): jobs that
    # would share CPUs or links, as on the testbed, then do not disturb each other's figures.
    max_running_jobs: int | None = None
    # squeue/sacct every poll_min_s while jobs change state, backing off to poll_max_s.
    poll_min_s: float = 2.0
    poll_max_s: float = 30.0

    def __post_init__(self) -> None:
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
            raise FieldError(
                "poll_min_s",
                f"poll_min_s {self.poll_min_s:g} and poll_max_s {self.poll_max_s:g} must "
                f"satisfy 0.1 <= poll_min_s <= poll_max_s <= 3600",
            )
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
                raise FieldError(
                    "sbatch_options", f"{option!r} is not a plain --option[=value] that Slurm reads as written"
                )
            reserved = reserved_option(option.split("=", 1)[0])
            if reserved:
                name = option.split("=", 1)[0]
                read_as = "" if name == reserved else f" (sbatch reads {name} as {reserved})"
                raise FieldError(
                    "sbatch_options",
                    f"{option!r}: {reserved} is set by bench, or would take the job "
                    f"out of its hands{read_as}; use the profile's own keys",
                )


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
