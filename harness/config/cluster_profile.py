"""Cluster profiles: what every job on a cluster needs.

A cluster profile (sweeps/clusters/*.yaml, `bench sweep --cluster FILE`) says what every job
on a cluster needs: partition, account, how GPUs are requested, modules, setup lines,
cluster-wide NCCL settings. The same sweep on two profiles is how two cluster configurations
are compared.

Values that reach an `#SBATCH` line are held to an allowlist here, when the profile is loaded:
Slurm parses those lines itself, not the shell, so quoting cannot make them safe
(docs/concepts/hardening.md, docs/reference/sources.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.catalog import COLLECTIVE_WORKLOAD, COLLECTIVES, GROUPS, UNITS, WORKLOADS, WORLD
from harness.config import peak
from harness.config.fields import FieldError, build, check_env, check_passthrough, check_time, read_mapping, safe_text
from harness.config.hostlists import expand_hostlist
from harness.config.spec import NAME_RE
from harness.errors import SpecError

# Characters Slurm's #SBATCH parser reads as plain text: no quotes, backslash, '#', blanks or '$'.
SBATCH_VALUE_RE = re.compile(r"[A-Za-z0-9_.:,+@/=-]+")
# --constraint has operators of its own: a100&ib, [rack1*2&rack2*2], (a|b).
SBATCH_CONSTRAINT_RE = re.compile(r"[A-Za-z0-9_.:,+@/=&|!()*\[\]-]+")
# An extra option: `--name` or `--name=value`, the value allowing Slurm's hostlists (gpu[001-004]).
OPTION_RE = re.compile(r"--[a-z][a-z-]*(=[A-Za-z0-9_.:,+@/=\[\]-]+)?")
PROGRAM_RE = re.compile(r"[A-Za-z0-9_./+-]+")
GPU_REQUESTS = ("gres", "gpus-per-node", "none")
# Options an extra sbatch option may not give: those the renderer sets itself (and their
# aliases), and those that change where the job's output goes, whose job it is, where it is
# submitted, or how bench tracks it (docs/concepts/hardening.md).
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


# Options an extra srun option may not give: those bench sets on the steps' srun lines, and those
# that would move a step out of the job's allocation or its output (srun(1), Slurm 22.05).
RESERVED_SRUN_OPTIONS = (
    "--nodes",
    "--ntasks",
    "--ntasks-per-node",
    "--tasks-per-node",
    "--cpus-per-task",
    "--kill-on-bad-exit",
    "--overlap",
    "--job-name",
    "--jobid",
    "--output",
    "--error",
    "--input",
    "--open-mode",
    "--chdir",
    "--export",
    "--uid",
    "--gid",
    "--clusters",
    "--partition",
    "--account",
    "--time",
    "--dependency",
    "--pty",
    "--label",
    "--unbuffered",
    "--wait",
)


# pyxis is a SPANK plugin: its options are srun's, and every one begins with one of these (pyxis
# wiki, "Usage": --container-image, --container-mounts, ..., --no-container-mount-home). In
# srun_options they would override the profile's container, so they are the container block's.
PYXIS_PREFIXES = ("--container", "--no-container")


def _pyxis_option(name: str) -> bool:
    """Whether srun would read `name` as a pyxis option: one of them, or an abbreviation that
    only they begin with (getopt_long, as reserved_option)."""
    return name.startswith(PYXIS_PREFIXES) or any(p.startswith(name) and len(name) > 6 for p in PYXIS_PREFIXES)


def _check_options(key: str, options: tuple[str, ...], reserved: tuple[str, ...], program: str) -> None:
    for option in options:
        if not OPTION_RE.fullmatch(option):
            raise FieldError(
                key,
                f"{option!r} is not a plain --option[=value] that {program} reads as written "
                "(values: letters, digits, _ . : , + @ / = - and hostlist brackets)",
            )
        name = option.split("=", 1)[0]
        taken = reserved_option(name, reserved)
        if taken:
            read_as = "" if name == taken else f" ({program} reads {name} as {taken})"
            raise FieldError(
                key,
                f"{option!r}: {taken} is set by bench, or would take the job out of its hands{read_as}{hint(taken)}",
            )


def hint(option: str) -> str:
    """Where a reserved option's setting belongs instead, when the profile has a key for it."""
    keys = {
        "--time": "time_limit_min",
        "--partition": "partition",
        "--account": "account",
        "--qos": "qos",
        "--constraint": "constraint",
        "--exclusive": "exclusive",
        "--gres": "gpu_request",
        "--gpus-per-node": "gpu_request",
        "--cpus-per-task": "cpus_per_gpu",
        "--export": "env or env_passthrough",
    }
    return f"; use the profile's {keys[option]} key" if option in keys else ""


def _sbatch_value(key: str, value: str | None) -> None:
    pattern, allowed = (
        (SBATCH_CONSTRAINT_RE, "_ . : , + @ / = - & | ! ( ) * [ ]")
        if key == "constraint"
        else (SBATCH_VALUE_RE, "_ . : , + @ / = -")
    )
    if value is not None and not pattern.fullmatch(value):
        raise FieldError(key, f"{value!r} cannot go on an #SBATCH line; use letters, digits and {allowed}")


# The GB/s keys' largest plausible values, about what the fastest parts carry today, so that a
# figure in Gbit/s (8 x 400 Gb/s NICs written 3200) is refused, not taken as 8 times the truth.
# ConnectX-8 runs 800 Gb/s a port (NVIDIA's ConnectX-8 SuperNIC datasheet); NVLink 5 carries
# 1,800 GB/s a GPU, both directions (NVIDIA's Blackwell architecture technical brief).
_GBYTES = (
    ("network_gbps_per_node", 1000, "8 NICs at 800 Gb/s carry (800 GB/s)"),
    ("intra_node_gbps_per_gpu", 2000, "NVLink 5 carries per GPU (1,800 GB/s)"),
)


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """What a cluster's links can carry, as its owner states it (docs/concepts/expected.md): the node's
    network in GB/s (NICs x rate: 8 x NDR400 at 50 GB/s is 400) and how many NICs carry it, and
    the bandwidth inside a node per GPU (NVLink, or whatever joins the node's GPUs); and a GPU's
    peak dense TFLOP/s at the training precision, which the transformer's MFU is taken against
    (docs/reference/sources.md)."""

    network_gbps_per_node: float | None = None
    # NCCL runs a ring per NIC, so what a job reaches depends on how many NICs its ranks reach
    nics_per_node: int | None = None
    intra_node_gbps_per_gpu: float | None = None
    peak_tflops_per_gpu: float | None = None

    def __post_init__(self) -> None:
        for key, unit in (
            ("network_gbps_per_node", "GB/s"),
            ("intra_node_gbps_per_gpu", "GB/s"),
            ("peak_tflops_per_gpu", "TFLOP/s"),
        ):
            value = getattr(self, key)
            # from 0.001 (a megabyte a second, a gigaflop: less than any link or device does) up:
            # a rate of almost nothing divides a plan's time by zero, and a peak of almost nothing
            # estimates nothing
            if value is not None and not (math.isfinite(value) and 1e-3 <= value <= 1e6):
                raise FieldError(key, f"must be a number of {unit} from 0.001 to 1e6, found {value!r}")
        for key, most, fastest in _GBYTES:
            value = getattr(self, key)
            if value is not None and value > most:
                raise FieldError(
                    key,
                    f"is in GB/s (gigabytes), and {value:g} GB/s is more than {fastest}: it reads like Gbit/s, "
                    f"which is {value / 8:g} GB/s; give {value / 8:g}",
                )
        nics = self.nics_per_node
        if nics is not None and (isinstance(nics, bool) or not isinstance(nics, int) or not 1 <= nics <= 64):
            raise FieldError("nics_per_node", f"must be a whole number of NICs from 1 to 64, found {nics!r}")
        if (nics is None) != (self.network_gbps_per_node is None):
            raise FieldError(
                "nics_per_node",
                "network_gbps_per_node and nics_per_node go together: the node's NICs x their rate in GB/s, "
                "and how many NICs that is (400 and 8 for 8 x NDR400), since NCCL runs a ring on each NIC "
                "(docs/concepts/expected.md)",
            )

    def peak_busbw_gbps(
        self, nodes: int, gpus_per_node: int, group: str = WORLD, collective: str = "all_reduce"
    ) -> float | None:
        """The busbw a job's links allow for `collective` over `group`, comparable with busbw
        (harness/config/peak.py, docs/concepts/expected.md); None for one rank, or when the link it is bounded
        by is not stated."""
        return peak.peak_busbw_gbps(
            name=collective,
            group=group,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            network_gbps_per_node=self.network_gbps_per_node,
            nics_per_node=self.nics_per_node,
            intra_node_gbps_per_gpu=self.intra_node_gbps_per_gpu,
        )


# An HCA (mlx5_0, or mlx5_0:1 with its port) or a network interface's name (Linux allows up to
# 15 characters, IFNAMSIZ - 1): what a rail's NCCL and gloo variables are set to.
RAIL_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,31}")
TOPOLOGY_SLURM = "slurm"  # a profile's topology: read `scontrol show topology`
LEAF_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True, kw_only=True)
class Rail:
    """One rail of the cluster's nodes (docs/guides/nodes.md, "Rails"): its HCA, which NCCL is
    held to (NCCL_IB_HCA), and its interface, which gloo's and NCCL's sockets are held to
    (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME); one of the two at least."""

    hca: str | None = None
    ifname: str | None = None

    def __post_init__(self) -> None:
        if self.hca is None and self.ifname is None:
            raise FieldError("hca", "each rail needs its hca (e.g. mlx5_0), its ifname (e.g. ib0), or both")
        for key in ("hca", "ifname"):
            value = getattr(self, key)
            if value is not None and not RAIL_NAME_RE.fullmatch(value):
                raise FieldError(
                    key, f"{value!r} is not an HCA or interface name (letters, digits, _ . : -; at most 32)"
                )

    @property
    def name(self) -> str:
        """What the rail is called in a verdict: its HCA, the part replaced, else its interface."""
        return self.hca or self.ifname or ""

    def env(self) -> dict[str, str]:
        """The variables that hold a step to this rail; "=" makes NCCL match the name exactly, not
        as a prefix (NCCL's environment variables, NCCL_SOCKET_IFNAME and NCCL_IB_HCA)."""
        out = {"NCCL_IB_HCA": f"={self.hca}"} if self.hca else {}
        if self.ifname:
            out |= {"GLOO_SOCKET_IFNAME": self.ifname, "NCCL_SOCKET_IFNAME": f"={self.ifname}"}
        return out


@dataclass(frozen=True, kw_only=True)
class Leaf:
    """A leaf switch of the cluster's fabric and the nodes under it, in Slurm's hostlist syntax
    (docs/guides/nodes.md, "Leaves"): as topology.conf's `SwitchName=NAME Nodes=HOSTLIST`."""

    name: str
    nodes: str

    def __post_init__(self) -> None:
        if not LEAF_NAME_RE.fullmatch(self.name):
            raise FieldError("name", f"{self.name!r} is not a switch name (letters, digits, _ . -; at most 64)")
        try:
            expand_hostlist(self.nodes)
        except ValueError as exc:
            raise FieldError("nodes", f"{self.nodes!r} is not a hostlist of nodes: {exc}") from None

    def hosts(self) -> list[str]:
        return expand_hostlist(self.nodes)


# Every variable a rail may set (Rail.env), which a step script exports again for a container.
RAIL_VARIABLES = ("NCCL_IB_HCA", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


@dataclass(frozen=True, kw_only=True)
class Reference:
    """One expected figure of a cluster, in the manner of ReFrame's performance references
    (docs/concepts/expected.md): a key of the matrix, its value, and how far below it a run may fall.
    The fields left out match any value (every launcher, settings set, ...)."""

    workload: str
    nodes: int
    gpus_per_node: int | None = None
    collective: str | None = None  # allreduce only; all_reduce when left out
    group: str | None = None  # allreduce only; world (every rank) when left out (docs/reference/sources.md)
    size: int | None = field(default=None, metadata={"size": True})  # allreduce only
    scaling: str | None = None  # training only
    launcher: str | None = None
    nccl_config: str | None = None
    busbw_gbps: float | None = None  # allreduce
    images_per_s: float | None = None  # synthetic, real
    tokens_per_s: float | None = None  # transformer
    tolerance: float = 0.1  # a run below value x (1 - tolerance) fails

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise FieldError("workload", f"{self.workload!r} is not valid; valid: {', '.join(WORKLOADS)}")
        collective = self.workload == COLLECTIVE_WORKLOAD
        metric = self.metric
        value = getattr(self, metric)
        if value is None or not (math.isfinite(value) and value > 0):
            raise FieldError(metric, f"a {self.workload} reference needs a positive {metric}, found {value!r}")
        for other in ("busbw_gbps", "images_per_s", "tokens_per_s"):
            if other != metric and getattr(self, other) is not None:
                raise FieldError(other, f"is not a figure of {self.workload}; give {metric}")
        if collective and self.size is None:
            raise FieldError("size", "an allreduce reference needs the message size, e.g. 1G")
        for key in ("size", "collective", "group"):
            if not collective and getattr(self, key) is not None:
                raise FieldError(key, f"is not a key of {self.workload}")
        if self.group is not None and self.group not in GROUPS:
            raise FieldError("group", f"{self.group!r} is not valid; valid: {', '.join(GROUPS)}")
        if self.collective is not None and self.collective not in COLLECTIVES:
            raise FieldError("collective", f"{self.collective!r} is not valid; valid: {', '.join(COLLECTIVES)}")
        if self.scaling is not None and (collective or self.scaling not in ("weak", "strong")):
            raise FieldError("scaling", f"{self.scaling!r} is not valid; valid: weak, strong (training only)")
        if self.nodes < 1 or (self.gpus_per_node is not None and self.gpus_per_node < 1):
            raise FieldError("nodes", "nodes and gpus_per_node must be at least 1")
        if not 0 <= self.tolerance < 1:
            raise FieldError("tolerance", f"must be at least 0 and below 1 (0.1 is 10%), found {self.tolerance!r}")
        for key in ("launcher", "nccl_config"):
            value_ = getattr(self, key)
            if value_ is not None and not NAME_RE.fullmatch(value_):
                raise FieldError(key, f"{value_!r} is not a valid name")

    @property
    def metric(self) -> str:
        """busbw for the collectives, else the workload's throughput (catalog.UNITS)."""
        return "busbw_gbps" if self.workload == COLLECTIVE_WORKLOAD else f"{UNITS[self.workload]}_per_s"

    @property
    def value(self) -> float:
        return float(getattr(self, self.metric))


ENGINES = ("pyxis", "apptainer", "singularity")
# An image: a registry reference (pyxis spells it nvcr.io#nvidia/pytorch:24.05-py3, Apptainer
# docker://nvcr.io/nvidia/pytorch:24.05-py3), a digest (@sha256:...), or a file (.sqsh, .sif).
IMAGE_RE = re.compile(r"[A-Za-z0-9_.:/#@+=-]+")
# A path of a mount: absolute, plain characters; ',' separates pyxis's mounts and ':' its fields.
MOUNT_PATH_RE = re.compile(r"/[A-Za-z0-9_./+@=-]*")
MOUNT_FLAGS = ("ro", "rw")
# Options a container's `options` may not give: those bench sets itself, and those that would
# hide bench's environment from the workload or put the ranks in a PID namespace of their own,
# where the hang watcher's probes could not see them (pyxis README; apptainer exec --help).
RESERVED_CONTAINER_OPTIONS = {
    "pyxis": (
        "--container-image",
        "--container-name",
        "--container-mounts",
        "--container-workdir",
        "--container-mount-home",
        "--no-container-mount-home",
        "--container-env",
    ),
    "apptainer": (
        "--bind",
        "--mount",
        "--pwd",
        "--nv",
        "--no-home",
        "--home",
        "--cleanenv",
        "--containall",
        "--pid",
        "--env",
        "--env-file",
    ),
}
RESERVED_CONTAINER_OPTIONS["singularity"] = RESERVED_CONTAINER_OPTIONS["apptainer"]
# Where bench's workloads are mounted in the image when the profile names no `code` there.
CONTAINER_CODE = "/opt/bench"


@dataclass(frozen=True, kw_only=True)
class Container:
    """The image every workload step runs in (docs/guides/containers.md). pyxis adds srun options
    (--container-image, --container-mounts, ...); Apptainer and Singularity wrap the command in
    `apptainer exec`. The run directory is mounted at its own path and is the working directory."""

    engine: str
    image: str
    mounts: tuple[str, ...] = ()  # SRC:DST or SRC:DST:ro|rw, both absolute
    workdir: str | None = None  # inside the image; default: the run directory, at its own path
    python: str = "python3"  # the interpreter inside the image
    # Where the image holds bench's `benchmarks` package (PYTHONPATH); default: bench's own,
    # mounted read-only at /opt/bench/benchmarks.
    code: str | None = None
    mount_home: bool = False  # pyxis: --no-container-mount-home; Apptainer: --no-home
    nv: bool = True  # Apptainer/Singularity --nv: the host's NVIDIA driver and devices
    options: tuple[str, ...] = ()  # the engine's own extra options

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise FieldError("engine", f"{self.engine!r} is not valid; valid: {', '.join(ENGINES)}")
        if not IMAGE_RE.fullmatch(self.image):
            raise FieldError(
                "image", f"{self.image!r} is not an image reference or path (letters, digits, _ . : / # @ + = -)"
            )
        for mount in self.mounts:
            check_mount(mount)
        for key in ("workdir", "code"):
            value = getattr(self, key)
            if value is not None and not MOUNT_PATH_RE.fullmatch(value):
                raise FieldError(key, f"{value!r} is not an absolute path of letters, digits and _ . / + @ = -")
        if not PROGRAM_RE.fullmatch(self.python):
            raise FieldError("python", f"{self.python!r} is not a plain program path (letters, digits, _ . / + -)")
        if not self.nv and self.engine == "pyxis":
            raise FieldError("nv", "is an Apptainer/Singularity option; pyxis gives GPUs through enroot's hooks")
        # pyxis's options go on the steps' srun line, so srun's reserved options are refused there too
        reserved = RESERVED_CONTAINER_OPTIONS[self.engine]
        _check_options(
            "options", self.options, reserved + (RESERVED_SRUN_OPTIONS if self.engine == "pyxis" else ()), self.engine
        )


def check_mount(mount: str) -> None:
    """SRC:DST[:FLAGS], both absolute paths, as pyxis and Apptainer both read it."""
    parts = mount.split(":")
    if not (
        2 <= len(parts) <= 3
        and all(MOUNT_PATH_RE.fullmatch(p) for p in parts[:2])
        and (len(parts) == 2 or parts[2] in MOUNT_FLAGS)
    ):
        raise FieldError(
            "mounts",
            f"{mount!r} is not SRC:DST or SRC:DST:ro|rw with absolute paths of letters, digits and _ . / + @ = -",
        )


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
    sbatch_options: tuple[str, ...] = ()  # extra #SBATCH options, e.g. --exclude=gpu[001-004]
    srun_options: tuple[str, ...] = ()  # extra options of every step's srun, e.g. --mpi=pmix, --cpu-bind=cores
    # Each job's time limit, unless the sweep states its own (default 30 min).
    time_limit_min: float | None = None
    # bench sweep asks before submitting a sweep that could use more than this many node-hours
    # (every job to its time limit); --yes answers, and without a terminal --yes is needed.
    confirm_above_node_hours: float = 4.0
    # Attempts a job gets when the cluster ends it (PREEMPTED, NODE_FAIL, BOOT_FAIL) or Slurm
    # requeues it: bench submits it again until this many have run (docs/concepts/preemption.md).
    max_attempts: int = 3
    container: Container | None = field(default=None, metadata={"null": True})  # docs/guides/containers.md
    # At most this many jobs of a sweep at once (None: as many as Slurm will run): jobs that
    # would share CPUs or links, as on the testbed, then do not disturb each other's figures.
    max_running_jobs: int | None = None
    # squeue/sacct every poll_min_s while jobs change state, backing off to poll_max_s.
    poll_min_s: float = 2.0
    poll_max_s: float = 30.0
    hardware: Hardware | None = None  # stated link speeds: busbw is then also a % of peak
    # Seconds one round of `bench nodes` takes here, for its estimate (docs/guides/nodes.md, "Cost");
    # without it, the cluster's last check in the history says, else there is no estimate.
    node_check_round_s: float | None = None
    reference: tuple[Reference, ...] = ()  # expected figures: `bench regress --baseline reference`
    rails: tuple[Rail, ...] = ()  # the nodes' rails, each checked alone by `bench nodes --rails`
    leaves: tuple[Leaf, ...] = ()  # the fabric's leaf switches: the node check judges their uplinks
    # Where bench nodes reads the leaves instead: "slurm" (`scontrol show topology` when the check
    # is planned) or a topology.conf's absolute path (docs/guides/nodes.md, "Leaves")
    topology: str | None = None

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
        if not 1 <= self.max_attempts <= 100:
            raise FieldError("max_attempts", f"must be between 1 and 100, found {self.max_attempts}")
        _check_options("sbatch_options", self.sbatch_options, RESERVED_OPTIONS, "sbatch")
        _check_options("srun_options", self.srun_options, RESERVED_SRUN_OPTIONS, "srun")
        for option in self.srun_options:
            if _pyxis_option(option.split("=", 1)[0]):
                raise FieldError(
                    "srun_options",
                    f"{option!r} is a container option (pyxis); give the image and its options under container:",
                )
        if self.time_limit_min is not None:
            check_time("time_limit_min", self.time_limit_min)
        if len({r.name for r in self.rails}) != len(self.rails):
            raise FieldError("rails", "two rails share a name; give each its own hca or ifname")
        under: dict[str, str] = {}
        for i, leaf in enumerate(self.leaves):
            if any(other.name == leaf.name for other in self.leaves[:i]):
                raise FieldError("leaves", f"two leaves are named {leaf.name!r}")
            for node in leaf.hosts():
                if under.setdefault(node, leaf.name) != leaf.name:
                    raise FieldError("leaves", f"{node} is under two leaves, {under[node]} and {leaf.name}")
        if self.topology is not None:
            if self.leaves:
                raise FieldError("topology", "the profile states leaves too; give one of leaves and topology")
            path = self.topology
            if path != TOPOLOGY_SLURM and not MOUNT_PATH_RE.fullmatch(path):
                raise FieldError(
                    "topology",
                    f"{path!r} is not valid; valid: slurm, or a topology.conf's absolute path "
                    "(letters, digits, _ . / + @ = -)",
                )
        round_s = self.node_check_round_s
        if round_s is not None and not (math.isfinite(round_s) and 0 < round_s <= 86400):
            raise FieldError("node_check_round_s", f"must be seconds above 0, at most 86400, found {round_s!r}")
        if not 0 <= self.confirm_above_node_hours <= 1e9:
            raise FieldError(
                "confirm_above_node_hours", f"must be 0 (always ask) or more, found {self.confirm_above_node_hours:g}"
            )

    def leaf_of(self) -> dict[str, str]:
        """Each node under one of the profile's leaves -> that leaf's name."""
        return {node: leaf.name for leaf in self.leaves for node in leaf.hosts()}


def reserved_option(name: str, reserved: tuple[str, ...] = RESERVED_OPTIONS) -> str | None:
    """The reserved option `name` would set, or None. sbatch and srun read long options with
    getopt_long, which takes any unambiguous abbreviation (`--outp` is `--output`), so a name
    that begins a reserved one is refused too. No sbatch option outside RESERVED_OPTIONS is a
    prefix of one inside it (`sbatch --help`, Slurm 22.05.8), so nothing legitimate is refused."""
    return next((r for r in reserved if r.startswith(name)), None)


def load_profile(path: str | Path) -> ClusterProfile:
    path = Path(path)
    data = read_mapping(path, "cluster profile")
    try:
        return build(ClusterProfile, data, "")
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None


DEFAULT_PROFILE = ClusterProfile(name="default")
