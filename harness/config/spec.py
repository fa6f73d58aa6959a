"""The sweep's schema: frozen dataclasses, each checked in `__post_init__`.

Every key is checked: an unknown key, a wrong type or an impossible value raises `SpecError`
with one line naming the file, the key and what would be valid. Values that later reach a
command line, a job script or an `#SBATCH` line are held to allowlists here, at the door. A
sweep file is read into these by harness/config/sweepfile.py, with harness/config/fields.py's loader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from benchmarks.catalog import (
    AMPS,
    BACKENDS,
    COLLECTIVE_DEFAULTS,
    COLLECTIVES,
    DEVICES,
    DTYPES,
    GROUPS,
    OPS,
    PARALLEL,
    PARAM_DTYPES,
    PRESETS,
    REDUCE_DTYPES,
    SCALINGS,
    TRAINING_DEFAULTS,
    TRANSFORMER_DEFAULTS,
    WORKLOADS,
)
from harness.config.fields import (
    TIME_RANGES,
    WEEK_S,
    FieldError,
    check_env,
    check_expect,
    check_passthrough,
    check_time,
    choice,
    safe_text,
    within,
)

LAUNCHERS = ("torchrun", "srun")
NODES_POWERS_OF_TWO = "powers_of_two"
MAX_REPEAT = 100
MAX_BYTES = 16 * 1024**3  # a message, as nccl-tests' -e allows on an 80 GB GPU
MAX_COUNT = 1_000_000  # iterations, steps
MAX_BATCH = 1 << 24
MAX_NODES = 100_000
MAX_GPUS_PER_NODE = 1024
DEFAULT_TIME_LIMIT_MIN = 30.0  # a job's, when neither the sweep nor the cluster profile states one

# Names end up in job names, paths and #SBATCH lines, where Slurm's own parser treats
# quotes, backslashes and '#' specially: letters, digits and a few separators only.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
SET_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")  # '.' is reserved in job names
MODEL_RE = re.compile(r"[A-Za-z0-9_]{1,64}")


# --------------------------------------------------------------------------- the schema


@dataclass(frozen=True, kw_only=True)
class AllreduceSpec:
    """The collective microbenchmark, with nccl-tests' parameters. Every default is the
    workload's own (benchmarks/catalog.py, "defaults")."""

    min_bytes: int = field(default=COLLECTIVE_DEFAULTS.min_bytes, metadata={"size": True})
    max_bytes: int = field(default=COLLECTIVE_DEFAULTS.max_bytes, metadata={"size": True})
    step_factor: int = COLLECTIVE_DEFAULTS.step_factor
    iters: int = COLLECTIVE_DEFAULTS.iters
    warmup_iters: int = COLLECTIVE_DEFAULTS.warmup_iters
    check_iters: int = COLLECTIVE_DEFAULTS.check_iters
    dtype: str = COLLECTIVE_DEFAULTS.dtype
    op: str = COLLECTIVE_DEFAULTS.op
    collectives: tuple[str, ...] = COLLECTIVE_DEFAULTS.collectives
    # each collective over every rank, each node's ranks, and one rank per node (docs/reference/sources.md,
    # "Groups"); a group a job's layout lacks is skipped
    groups: tuple[str, ...] = GROUPS
    out_of_place: bool = COLLECTIVE_DEFAULTS.out_of_place
    link_bytes: int = field(default=COLLECTIVE_DEFAULTS.link_bytes, metadata={"size": True, "zero": True})
    link_iters: int = COLLECTIVE_DEFAULTS.link_iters
    # seconds of the first collective on the world at max_bytes, timed window after window once the
    # sizes are measured (benchmarks/timing.py); `bench accept --soak` sets it on a job of its own
    soak_s: float = 0.0

    def __post_init__(self) -> None:
        for key in ("min_bytes", "max_bytes"):
            within(key, getattr(self, key), 1, MAX_BYTES)
        if self.max_bytes < self.min_bytes:
            raise FieldError("max_bytes", f"{self.max_bytes} is below min_bytes {self.min_bytes}")
        within("link_bytes", self.link_bytes, 0, MAX_BYTES)
        within("step_factor", self.step_factor, 2, 1024)
        within("iters", self.iters, 1, MAX_COUNT)
        within("warmup_iters", self.warmup_iters, 0, MAX_COUNT)
        within("check_iters", self.check_iters, 0, MAX_COUNT)
        within("link_iters", self.link_iters, 1, MAX_COUNT)
        within("soak_s", self.soak_s, 0, WEEK_S)
        choice("dtype", self.dtype, DTYPES)
        choice("op", self.op, OPS)
        if not self.collectives:
            raise FieldError("collectives", f"is empty; valid: {', '.join(COLLECTIVES)}")
        for c in self.collectives:
            choice("collectives", c, COLLECTIVES)
        if not self.groups:
            raise FieldError("groups", f"is empty; valid: {', '.join(GROUPS)}")
        for g in self.groups:
            choice("groups", g, GROUPS)

    def args(self) -> list[str]:
        return [
            "-b",
            str(self.min_bytes),
            "-e",
            str(self.max_bytes),
            "-f",
            str(self.step_factor),
            "-n",
            str(self.iters),
            "-w",
            str(self.warmup_iters),
            "-c",
            str(self.check_iters),
            "-d",
            self.dtype,
            "-o",
            self.op,
            "--collective",
            ",".join(self.collectives),
            "--groups",
            ",".join(self.groups),
            "--out-of-place" if self.out_of_place else "--no-out-of-place",
            "--link-bytes",
            str(self.link_bytes),
            "--link-iters",
            str(self.link_iters),
            # only when asked: every other job's arguments, and so its config hash, stay as they were
            *(["--soak", f"{self.soak_s:g}"] if self.soak_s else []),
        ]


def _scalings(scaling: tuple[str, ...], global_batch: int | None, items: str) -> None:
    if not scaling or len(set(scaling)) != len(scaling):
        raise FieldError("scaling", f"needs distinct values among {', '.join(SCALINGS)}")
    for s in scaling:
        choice("scaling", s, SCALINGS)
    if "strong" in scaling:
        if global_batch is None:
            raise FieldError("global_batch", f"strong scaling needs global_batch ({items} per step over all GPUs)")
        within("global_batch", global_batch, 1, MAX_BATCH)


def _batch_args(scaling: str, batch_size: int, global_batch: int | None) -> list[str]:
    """Weak scaling holds the batch per GPU, strong scaling the batch over all GPUs."""
    return ["--global-batch", str(global_batch)] if scaling == "strong" else ["--batch-size", str(batch_size)]


@dataclass(frozen=True, kw_only=True)
class TrainingSpec:
    """ResNet DDP training, shared by the synthetic and real workloads."""

    model: str = TRAINING_DEFAULTS.model
    image_size: int = TRAINING_DEFAULTS.image_size
    scaling: tuple[str, ...] = ("weak",)
    batch_size: int = TRAINING_DEFAULTS.batch_size
    global_batch: int | None = None
    steps: int = TRAINING_DEFAULTS.steps
    warmup_steps: int = TRAINING_DEFAULTS.warmup_steps
    amp: str = TRAINING_DEFAULTS.amp
    channels_last: bool | None = None
    compile: bool = False
    bucket_cap_mb: float = TRAINING_DEFAULTS.bucket_cap_mb
    gradient_as_bucket_view: bool = TRAINING_DEFAULTS.gradient_as_bucket_view
    static_graph: bool = TRAINING_DEFAULTS.static_graph
    # steps with DDP's all-reduce skipped, among the measured (docs/concepts/breakdown.md)
    sync_free_steps: int = TRAINING_DEFAULTS.sync_free_steps

    def __post_init__(self) -> None:
        if not MODEL_RE.fullmatch(self.model):
            raise FieldError("model", f"{self.model!r} is not a torchvision model name (letters, digits, _)")
        within("image_size", self.image_size, 16, 8192)
        within("batch_size", self.batch_size, 1, MAX_BATCH)
        within("steps", self.steps, 1, MAX_COUNT)
        within("warmup_steps", self.warmup_steps, 0, MAX_COUNT)
        within("sync_free_steps", self.sync_free_steps, 0, MAX_COUNT)
        choice("amp", self.amp, AMPS)
        within("bucket_cap_mb", self.bucket_cap_mb, 0.001, 65536)
        _scalings(self.scaling, self.global_batch, "images")

    def args(self, scaling: str) -> list[str]:
        out = [
            "--model",
            self.model,
            "--image-size",
            str(self.image_size),
            "--steps",
            str(self.steps),
            "--warmup-steps",
            str(self.warmup_steps),
            "--amp",
            self.amp,
            "--bucket-cap-mb",
            f"{self.bucket_cap_mb:g}",
            "--gradient-as-bucket-view" if self.gradient_as_bucket_view else "--no-gradient-as-bucket-view",
            "--static-graph" if self.static_graph else "--no-static-graph",
            "--sync-free-steps",
            str(self.sync_free_steps),
        ]
        out += _batch_args(scaling, self.batch_size, self.global_batch)
        if self.channels_last is not None:
            out.append("--channels-last" if self.channels_last else "--no-channels-last")
        if self.compile:
            out.append("--compile")
        return out


@dataclass(frozen=True, kw_only=True)
class RealSpec(TrainingSpec):
    """Training on an ImageFolder data set; with no data_dir, a generated one in the run directory."""

    workers: int = TRAINING_DEFAULTS.workers
    data_dir: str | None = None
    data_classes: int = TRAINING_DEFAULTS.data_classes
    data_images_per_class: int = TRAINING_DEFAULTS.data_images_per_class

    def __post_init__(self) -> None:
        super().__post_init__()
        within("workers", self.workers, 0, 1024)
        within("data_classes", self.data_classes, 1, 100_000)
        within("data_images_per_class", self.data_images_per_class, 1, 100_000)
        if self.data_dir is not None:
            safe_text("data_dir", self.data_dir)

    def args(self, scaling: str) -> list[str]:
        out = super().args(scaling) + ["--workers", str(self.workers)]
        if self.data_dir is not None:
            # one word: a directory that begins with "-" stays a value, never an option (or --then)
            return out + [f"--data-dir={self.data_dir}"]
        # Relative to the run directory, where every job runs: one generated set per run.
        return out + [
            "--data-cache",
            "data",
            "--data-classes",
            str(self.data_classes),
            "--data-images-per-class",
            str(self.data_images_per_class),
        ]


@dataclass(frozen=True, kw_only=True)
class TransformerSpec:
    """The decoder-only transformer on synthetic tokens, under DDP or FSDP2 (benchmarks/transformer.py):
    a preset's shape, any of whose dimensions the fields below may override."""

    preset: str = TRANSFORMER_DEFAULTS.preset
    layers: int | None = None
    width: int | None = None
    heads: int | None = None
    seq_len: int | None = None
    vocab: int | None = None
    parallel: str = TRANSFORMER_DEFAULTS.parallel
    scaling: tuple[str, ...] = ("weak",)
    batch_size: int = TRANSFORMER_DEFAULTS.batch_size  # sequences per rank, weak scaling
    global_batch: int | None = None  # sequences over all ranks, strong scaling
    steps: int = TRANSFORMER_DEFAULTS.steps
    warmup_steps: int = TRANSFORMER_DEFAULTS.warmup_steps
    # steps with gradient synchronisation skipped (docs/concepts/breakdown.md)
    sync_free_steps: int = TRANSFORMER_DEFAULTS.sync_free_steps
    amp: str = TRANSFORMER_DEFAULTS.amp
    # FSDP2's mixed-precision policy (fsdp only): parameters all-gathered in, gradients reduced in
    param_dtype: str = TRANSFORMER_DEFAULTS.param_dtype
    reduce_dtype: str = TRANSFORMER_DEFAULTS.reduce_dtype
    activation_checkpointing: bool = TRANSFORMER_DEFAULTS.activation_checkpointing

    def __post_init__(self) -> None:
        choice("preset", self.preset, PRESETS)
        choice("parallel", self.parallel, PARALLEL)
        base = PRESETS[self.preset]
        for key, high in (
            ("layers", 1024),
            ("width", 1 << 16),
            ("heads", 1024),
            ("seq_len", 1 << 20),
            ("vocab", 1 << 22),
        ):
            value = getattr(self, key)
            if value is not None:
                within(key, value, 1, high)
        width, heads = self.width or base.width, self.heads or base.heads
        if width % heads:
            raise FieldError("heads", f"{heads} does not divide the width {width}")
        within("batch_size", self.batch_size, 1, MAX_BATCH)
        within("steps", self.steps, 1, MAX_COUNT)
        within("warmup_steps", self.warmup_steps, 0, MAX_COUNT)
        within("sync_free_steps", self.sync_free_steps, 0, MAX_COUNT)
        choice("amp", self.amp, AMPS)
        if self.parallel == "fsdp" and self.amp == "fp16":
            raise FieldError("amp", "fp16 under fsdp needs a sharded gradient scaler; use bf16 (or auto)")
        choice("param_dtype", self.param_dtype, PARAM_DTYPES)
        choice("reduce_dtype", self.reduce_dtype, REDUCE_DTYPES)
        if self.parallel != "fsdp":
            for key, default in (
                ("param_dtype", TRANSFORMER_DEFAULTS.param_dtype),
                ("reduce_dtype", TRANSFORMER_DEFAULTS.reduce_dtype),
            ):
                if getattr(self, key) != default:
                    raise FieldError(key, f"is FSDP's mixed-precision policy: set parallel: fsdp, or leave {key} out")
        _scalings(self.scaling, self.global_batch, "sequences")

    def args(self, scaling: str) -> list[str]:
        out = ["--preset", self.preset, "--parallel", self.parallel]
        for key in ("layers", "width", "heads", "seq_len", "vocab"):
            value = getattr(self, key)
            if value is not None:
                out += [f"--{key.replace('_', '-')}", str(value)]
        out += [
            "--steps",
            str(self.steps),
            "--warmup-steps",
            str(self.warmup_steps),
            "--sync-free-steps",
            str(self.sync_free_steps),
            "--amp",
            self.amp,
        ]
        if self.parallel == "fsdp":
            out += ["--param-dtype", self.param_dtype, "--reduce-dtype", self.reduce_dtype]
        if self.activation_checkpointing:
            out.append("--activation-checkpointing")
        return out + _batch_args(scaling, self.batch_size, self.global_batch)


@dataclass(frozen=True, kw_only=True)
class Workloads:
    allreduce: AllreduceSpec | None = None
    synthetic: TrainingSpec | None = None
    real: RealSpec | None = None
    transformer: TransformerSpec | None = None

    def __post_init__(self) -> None:
        if self.training() == () and self.allreduce is None:
            raise FieldError("", f"names no workload; valid: {', '.join(WORKLOADS)}")

    def training(self) -> tuple[tuple[str, TrainingSpec | TransformerSpec], ...]:
        """(name, spec) of each training workload the sweep runs, in the catalog's order."""
        specs = {"synthetic": self.synthetic, "real": self.real, "transformer": self.transformer}
        return tuple((name, spec) for name, spec in specs.items() if spec is not None)


# The matrix's axes as include/exclude rules and `--only` name them: one value per job.
MATRIX_AXES = ("nodes", "gpus_per_node", "launcher", "nccl")
# The summary and `bench compare --across` call the settings axis nccl_config: either name works
# in either place.
AXIS_ALIASES = {"nccl_config": "nccl"}


@dataclass(frozen=True, kw_only=True)
class MatrixRule:
    """One include or exclude rule: the matrix points where every axis the rule names takes one
    of the values it lists (`{nodes: 1, nccl: [ib, socket]}`). A scalar is a list of one."""

    nodes: tuple[int, ...] | None = field(default=None, metadata={"one_or_more": True})
    gpus_per_node: tuple[int, ...] | None = field(default=None, metadata={"one_or_more": True})
    launcher: tuple[str, ...] | None = field(default=None, metadata={"one_or_more": True})
    nccl: tuple[str, ...] | None = field(default=None, metadata={"one_or_more": True})

    def __post_init__(self) -> None:
        named = {axis: getattr(self, axis) for axis in MATRIX_AXES if getattr(self, axis) is not None}
        if not named:
            raise FieldError("", f"names no axis; valid: {', '.join(MATRIX_AXES)}")
        for axis, values in named.items():
            if not values:
                raise FieldError(axis, "is empty; list one or more values")
        for key, high in (("nodes", MAX_NODES), ("gpus_per_node", MAX_GPUS_PER_NODE)):
            for v in getattr(self, key) or ():
                within(key, v, 1, high)
        for launcher in self.launcher or ():
            choice("launcher", launcher, LAUNCHERS)

    def matches(self, nodes: int, gpus_per_node: int, launcher: str, nccl: str) -> bool:
        point = {"nodes": nodes, "gpus_per_node": gpus_per_node, "launcher": launcher, "nccl": nccl}
        return all(getattr(self, axis) is None or point[axis] in getattr(self, axis) for axis in MATRIX_AXES)


@dataclass(frozen=True, kw_only=True)
class Sweep:
    name: str
    description: str = ""
    device: str = "auto"
    backend: str = "auto"
    nodes: tuple[int, ...] | str = (1,)
    max_nodes: int | None = None
    gpus_per_node: tuple[int, ...] = (1,)
    launchers: tuple[str, ...] = ("torchrun",)
    nccl: dict[str, dict[str, str]] = field(default_factory=lambda: {"default": {}}, metadata={"mapping": "env_sets"})
    # What each settings set declares it runs over (`nccl: {ib: {env: {...}, expect: {...}}}`),
    # read from the `nccl` key; checked against each job's transport facts (docs/concepts/transport.md).
    nccl_expect: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={"derived": True})
    env: dict[str, str] = field(default_factory=dict, metadata={"mapping": "env"})
    # Variables every job takes from the environment bench runs in, by name only: how a job gets
    # a secret (a token, a password) without the plan or its scripts holding it.
    env_passthrough: tuple[str, ...] = ()
    time_limit_min: float | None = None  # each job's; left out: the cluster profile's, else 30 min
    timeout_s: float = 300.0
    # A workload whose ranks all stop making progress this long is ended and the rank that held
    # the others named (docs/guides/hangs.md); by default 80% of timeout_s, at most 300 s, so it acts
    # before the process-group timeout does.
    stall_s: float | None = None
    # Every node of a job records its CPU, memory, NIC and GPU counters this often while the job
    # runs (docs/concepts/telemetry.md); 0 turns the sampler off.
    sample_s: float = 1.0
    repeat: int = 1  # replicates of every job, interleaved across the matrix
    # Which points of the matrix run: those matching an include rule (every point, without
    # one) and no exclude rule; e.g. no network settings sets on 1-node jobs.
    include: tuple[MatrixRule, ...] = ()
    exclude: tuple[MatrixRule, ...] = ()
    # `bench sweep --only AXIS=V1,V2`: the points every named axis of which takes a listed value.
    only: MatrixRule | None = field(default=None, metadata={"derived": True})
    workloads: Workloads

    def __post_init__(self) -> None:
        if not NAME_RE.fullmatch(self.name):
            raise FieldError("name", f"{self.name!r} is not valid; use letters, digits, '_', '.', '-' (at most 64)")
        choice("device", self.device, DEVICES)
        choice("backend", self.backend, BACKENDS)
        if self.backend == "nccl" and self.device == "cpu":
            raise FieldError("backend", "nccl needs device cuda or auto; use gloo on cpu")
        if isinstance(self.nodes, str):
            if self.nodes != NODES_POWERS_OF_TWO:
                raise FieldError(
                    "nodes",
                    f"{self.nodes!r} is not valid; valid: a list of node counts or "
                    f"{NODES_POWERS_OF_TWO!r} with max_nodes",
                )
            if self.max_nodes is None:
                raise FieldError("max_nodes", f"nodes: {NODES_POWERS_OF_TWO} needs max_nodes (or --max-nodes)")
        else:
            _distinct_within("nodes", self.nodes, MAX_NODES)
        if self.max_nodes is not None:
            within("max_nodes", self.max_nodes, 1, MAX_NODES)
        _distinct_within("gpus_per_node", self.gpus_per_node, MAX_GPUS_PER_NODE)
        if not self.launchers or len(set(self.launchers)) != len(self.launchers):
            raise FieldError("launchers", f"needs distinct values among {', '.join(LAUNCHERS)}")
        for launcher in self.launchers:
            choice("launchers", launcher, LAUNCHERS)
        if not self.nccl:
            raise FieldError("nccl", "needs at least one named set, e.g. default: {}")
        for set_name, variables in self.nccl.items():
            if not SET_NAME_RE.fullmatch(set_name):
                raise FieldError(
                    f"nccl.{set_name}", "is not a valid set name; use letters, digits, '_', '-' (at most 32)"
                )
            check_env(f"nccl.{set_name}", variables)
        for set_name, expect in self.nccl_expect.items():
            if set_name not in self.nccl:
                raise FieldError(f"nccl.{set_name}.expect", "names no settings set")
            check_expect(f"nccl.{set_name}.expect", expect)
        check_env("env", self.env)
        check_passthrough("env_passthrough", self.env_passthrough)
        for key in TIME_RANGES:
            if getattr(self, key) is not None:
                check_time(key, getattr(self, key))
        within("repeat", self.repeat, 1, MAX_REPEAT)
        rules = [(f"{key}[{i}]", r) for key in ("include", "exclude") for i, r in enumerate(getattr(self, key))]
        for where, rule in rules + ([("--only", self.only)] if self.only else []):
            unknown = [n for n in rule.nccl or () if n not in self.nccl]
            if unknown:
                raise FieldError(
                    f"{where}.nccl", f"{unknown[0]!r} names no settings set; valid: {', '.join(self.nccl)}"
                )

    def selects(self, nodes: int, gpus_per_node: int, launcher: str, nccl: str) -> bool:
        """Whether the include and exclude rules keep this point of the matrix."""
        point = (nodes, gpus_per_node, launcher, nccl)
        return (
            (not self.include or any(r.matches(*point) for r in self.include))
            and not any(r.matches(*point) for r in self.exclude)
            and (self.only is None or self.only.matches(*point))
        )

    @property
    def stall_limit_s(self) -> float:
        return self.stall_s if self.stall_s is not None else min(300.0, 0.8 * self.timeout_s)

    @property
    def node_counts(self) -> tuple[int, ...]:
        """The node axis: the listed counts up to max_nodes, or the powers of two up to it."""
        if isinstance(self.nodes, str):
            out, n = [], 1
            while n <= self.max_nodes:  # type: ignore[operator]
                out.append(n)
                n *= 2
            return tuple(out)
        return tuple(n for n in sorted(self.nodes) if self.max_nodes is None or n <= self.max_nodes)


def _distinct_within(key: str, values: tuple[int, ...], high: int) -> None:
    if not values:
        raise FieldError(key, "is empty; give at least one positive integer")
    if len(set(values)) != len(values):
        raise FieldError(key, f"repeats a value: {list(values)}")
    for v in values:
        within(key, v, 1, high)
