"""Sweep definitions: YAML read with `yaml.safe_load` and turned at once into frozen dataclasses.

Every key is checked: an unknown key, a wrong type or an impossible value raises `SpecError`
with one line naming the file, the key and what would be valid. Values that later reach a
command line, a job script or an `#SBATCH` line are held to allowlists here, at the door.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

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
    PRESETS,
    SCALINGS,
    TRAINING_DEFAULTS,
    TRANSFORMER_DEFAULTS,
    WORKLOADS,
)
from benchmarks.common import looks_secret, parse_size, secret_name
from harness.errors import SpecError

LAUNCHERS = ("torchrun", "srun")
NODES_POWERS_OF_TWO = "powers_of_two"
MAX_REPEAT = 100
MAX_BYTES = 16 * 1024**3  # a message, as nccl-tests' -e allows on an 80 GB GPU
MAX_COUNT = 1_000_000  # iterations, steps
MAX_BATCH = 1 << 24
MAX_NODES = 100_000
MAX_GPUS_PER_NODE = 1024
MAX_MINUTES = 366 * 24 * 60  # Slurm's time limit, at most a year
DEFAULT_TIME_LIMIT_MIN = 30.0  # a job's, when neither the sweep nor the cluster profile states one

# Names end up in job names, paths and #SBATCH lines, where Slurm's own parser treats
# quotes, backslashes and '#' specially: letters, digits and a few separators only.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
SET_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")  # '.' is reserved in job names
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MODEL_RE = re.compile(r"[A-Za-z0-9_]{1,64}")


class FieldError(ValueError):
    """Raised by a dataclass check: `key` is the field, relative to the dataclass."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def _choice(key: str, value: Any, choices: Collection[str]) -> None:
    if value not in choices:
        raise FieldError(key, f"{value!r} is not valid; valid: {', '.join(choices)}")


def _within(key: str, value: float, low: float, high: float) -> None:
    """`value` in [low, high]; the bounds keep every size, count and time to what can run (a
    count in the millions, a time limit within a year), and NaN fails every comparison."""
    if not low <= value <= high:
        raise FieldError(key, f"must be between {_number(low)} and {_number(high)}, found {_number(value)}")


WEEK_S = 7 * 86400
# A sweep's times, as a sweep file, a profile and the plan.json that records them must hold them.
TIME_RANGES = {
    "time_limit_min": (0.1, MAX_MINUTES),
    "timeout_s": (1, WEEK_S),
    "stall_s": (2, WEEK_S),
    "sample_s": (0.1, 3600),  # or 0: no sampling
}


def check_time(key: str, value: Any, name: str | None = None) -> None:
    """FieldError (under `name`, default `key`) unless `value` is a number in TIME_RANGES[key]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FieldError(name or key, f"is {value!r}, not a number")
    if not (key == "sample_s" and value == 0):
        _within(name or key, value, *TIME_RANGES[key])


def _number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


# Characters a line-based tool (a shell script line, an #SBATCH line, a CSV cell, a log) cannot
# carry as text: C0 controls but tab, DEL, and what Python's splitlines also breaks at.
_LINE_BREAKING = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")


def safe_text(key: str, value: str) -> None:
    """A value that must stay on one line: no newline, NUL or other control character."""
    if _LINE_BREAKING.search(value):
        raise FieldError(key, f"{value!r} holds a newline or another control character; give it on one line")


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
    # each collective over every rank, each node's ranks, and one rank per node (docs/reference.md,
    # "Groups"); a group a job's layout lacks is skipped
    groups: tuple[str, ...] = GROUPS
    out_of_place: bool = COLLECTIVE_DEFAULTS.out_of_place
    link_bytes: int = field(default=COLLECTIVE_DEFAULTS.link_bytes, metadata={"size": True, "zero": True})
    link_iters: int = COLLECTIVE_DEFAULTS.link_iters

    def __post_init__(self) -> None:
        for key in ("min_bytes", "max_bytes"):
            _within(key, getattr(self, key), 1, MAX_BYTES)
        if self.max_bytes < self.min_bytes:
            raise FieldError("max_bytes", f"{self.max_bytes} is below min_bytes {self.min_bytes}")
        _within("link_bytes", self.link_bytes, 0, MAX_BYTES)
        _within("step_factor", self.step_factor, 2, 1024)
        _within("iters", self.iters, 1, MAX_COUNT)
        _within("warmup_iters", self.warmup_iters, 0, MAX_COUNT)
        _within("check_iters", self.check_iters, 0, MAX_COUNT)
        _within("link_iters", self.link_iters, 1, MAX_COUNT)
        _choice("dtype", self.dtype, DTYPES)
        _choice("op", self.op, OPS)
        if not self.collectives:
            raise FieldError("collectives", f"is empty; valid: {', '.join(COLLECTIVES)}")
        for c in self.collectives:
            _choice("collectives", c, COLLECTIVES)
        if not self.groups:
            raise FieldError("groups", f"is empty; valid: {', '.join(GROUPS)}")
        for g in self.groups:
            _choice("groups", g, GROUPS)

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
        ]


def _scalings(scaling: tuple[str, ...], global_batch: int | None, items: str) -> None:
    if not scaling or len(set(scaling)) != len(scaling):
        raise FieldError("scaling", f"needs distinct values among {', '.join(SCALINGS)}")
    for s in scaling:
        _choice("scaling", s, SCALINGS)
    if "strong" in scaling:
        if global_batch is None:
            raise FieldError("global_batch", f"strong scaling needs global_batch ({items} per step over all GPUs)")
        _within("global_batch", global_batch, 1, MAX_BATCH)


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
    # steps with DDP's all-reduce skipped, among the measured (docs/breakdown.md)
    sync_free_steps: int = TRAINING_DEFAULTS.sync_free_steps

    def __post_init__(self) -> None:
        if not MODEL_RE.fullmatch(self.model):
            raise FieldError("model", f"{self.model!r} is not a torchvision model name (letters, digits, _)")
        _within("image_size", self.image_size, 16, 8192)
        _within("batch_size", self.batch_size, 1, MAX_BATCH)
        _within("steps", self.steps, 1, MAX_COUNT)
        _within("warmup_steps", self.warmup_steps, 0, MAX_COUNT)
        _within("sync_free_steps", self.sync_free_steps, 0, MAX_COUNT)
        _choice("amp", self.amp, AMPS)
        _within("bucket_cap_mb", self.bucket_cap_mb, 0.001, 65536)
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
        _within("workers", self.workers, 0, 1024)
        _within("data_classes", self.data_classes, 1, 100_000)
        _within("data_images_per_class", self.data_images_per_class, 1, 100_000)
        if self.data_dir is not None:
            safe_text("data_dir", self.data_dir)

    def args(self, scaling: str) -> list[str]:
        out = super().args(scaling) + ["--workers", str(self.workers)]
        if self.data_dir is not None:
            return out + ["--data-dir", self.data_dir]
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
    # steps with gradient synchronisation skipped (docs/breakdown.md)
    sync_free_steps: int = TRANSFORMER_DEFAULTS.sync_free_steps
    amp: str = TRANSFORMER_DEFAULTS.amp

    def __post_init__(self) -> None:
        _choice("preset", self.preset, PRESETS)
        _choice("parallel", self.parallel, PARALLEL)
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
                _within(key, value, 1, high)
        width, heads = self.width or base.width, self.heads or base.heads
        if width % heads:
            raise FieldError("heads", f"{heads} does not divide the width {width}")
        _within("batch_size", self.batch_size, 1, MAX_BATCH)
        _within("steps", self.steps, 1, MAX_COUNT)
        _within("warmup_steps", self.warmup_steps, 0, MAX_COUNT)
        _within("sync_free_steps", self.sync_free_steps, 0, MAX_COUNT)
        _choice("amp", self.amp, AMPS)
        if self.parallel == "fsdp" and self.amp == "fp16":
            raise FieldError("amp", "fp16 under fsdp needs a sharded gradient scaler; use bf16 (or auto)")
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
                _within(key, v, 1, high)
        for launcher in self.launcher or ():
            _choice("launcher", launcher, LAUNCHERS)

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
    # read from the `nccl` key; checked against each job's transport facts (docs/transport.md).
    nccl_expect: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={"derived": True})
    env: dict[str, str] = field(default_factory=dict, metadata={"mapping": "env"})
    # Variables every job takes from the environment bench runs in, by name only: how a job gets
    # a secret (a token, a password) without the plan or its scripts holding it.
    env_passthrough: tuple[str, ...] = ()
    time_limit_min: float | None = None  # each job's; left out: the cluster profile's, else 30 min
    timeout_s: float = 300.0
    # A workload whose ranks all stop making progress this long is ended and the rank that held
    # the others named (docs/hangs.md); by default 80% of timeout_s, at most 300 s, so it acts
    # before the process-group timeout does.
    stall_s: float | None = None
    # Every node of a job records its CPU, memory, NIC and GPU counters this often while the job
    # runs (docs/telemetry.md); 0 turns the sampler off.
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
        _choice("device", self.device, DEVICES)
        _choice("backend", self.backend, BACKENDS)
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
            _within("max_nodes", self.max_nodes, 1, MAX_NODES)
        _distinct_within("gpus_per_node", self.gpus_per_node, MAX_GPUS_PER_NODE)
        if not self.launchers or len(set(self.launchers)) != len(self.launchers):
            raise FieldError("launchers", f"needs distinct values among {', '.join(LAUNCHERS)}")
        for launcher in self.launchers:
            _choice("launchers", launcher, LAUNCHERS)
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
        _within("repeat", self.repeat, 1, MAX_REPEAT)
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
        _within(key, v, 1, high)


# Variables bench, Slurm or torchrun set for every job, or that change how the job script's
# bash reads its own lines (docs/hardening.md lists the sources): a sweep or profile cannot set
# them. A value here would at best be overwritten and at worst reach shell arithmetic, as
# SLURM_JOB_ID does in the script's MASTER_PORT line.
RESERVED_ENV_PREFIXES = (
    "SLURM_",
    "SBATCH_",
    "SRUN_",
    "SALLOC_",
    "BENCH_",
    "TORCHELASTIC_",
    "MASTER_",
    "LOCAL_",
    "GROUP_",
    "ROLE_",
    "BASH_FUNC_",
)
RESERVED_ENV = frozenset(
    {
        "RANK",
        "WORLD_SIZE",
        "NODE_RANK",
        "PYTHON_EXEC",
        "IFS",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "BASH_XTRACEFD",
        "CDPATH",
        "GLOBIGNORE",
        "PROMPT_COMMAND",
    }
)


def check_env_name(key: str, name: str) -> None:
    if not ENV_NAME_RE.fullmatch(name):
        raise FieldError(key, f"{name!r} is not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
    if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
        raise FieldError(
            key, f"{name} is set by bench, Slurm, torchrun or bash for every job; a sweep or profile cannot set it"
        )


# NAME= inside free text (a setup line `export WANDB_API_KEY=...`): the name is judged as a
# variable's name is. A run of name characters is tried once, where it starts (the lookbehind).
_ASSIGNMENT = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)=")


def secret_text(value: str) -> bool:
    """Whether recording the text `value` would record a secret: one by content (a token, a URL's
    password, benchmarks.common.redacted) or an assignment to a name a secret's (`KEY=...`)."""
    return looks_secret("", value) or any(secret_name(m[1]) for m in _ASSIGNMENT.finditer(value))


def _check_recorded(key: str, value: Any) -> None:
    """Every text of a sweep or a profile reaches plan.json or a job script, so none may hold a
    secret (docs/hardening.md, "Secrets"): the scalars and lists of this level (the mappings are
    their own level, or variables, which check_env judges by name too)."""
    for i, text in enumerate(value if isinstance(value, list) else [value]):
        if isinstance(text, str) and secret_text(text):
            where = f"{key}[{i}]" if isinstance(value, list) else key
            raise SpecError(
                f"{where}: holds what looks like a secret (a token, a URL's password, or NAME=value of a secret's "
                "name), which plan.json and the job scripts would record; export it where bench runs and list "
                "its name under env_passthrough instead"
            )


def check_env(key: str, variables: dict[str, str]) -> None:
    for name, value in variables.items():
        check_env_name(f"{key}.{name}", name)
        safe_text(f"{key}.{name}", value)
        if looks_secret(name, value):
            raise FieldError(
                f"{key}.{name}",
                "holds what looks like a secret, which plan.json and the job scripts "
                "would record; export it where bench runs and list its name under "
                "env_passthrough instead",
            )


# What a settings set may expect of its jobs' transport facts, and the kind of each value. The
# network facts are checked on multi-node jobs, intra_transport on jobs of several GPUs per node.
EXPECT_KEYS = {
    "net": "a network name as NCCL logs it (IB, Socket, AWS Libfabric) or Socket for gloo",
    "net_devices": "a list of devices, e.g. [mlx5_0, mlx5_1] or, for gloo, [eth0]",
    "link_layer": "IB or RoCE",
    "gdr": "true or false",
    "intra_transport": "a list among P2P/IPC, P2P/CUMEM, P2P/direct pointer, SHM, NVLS, CollNet",
    "nccl_version": "a version or its prefix, e.g. 2.21 or 2.21.5",
}
EXPECT_LISTS = ("net_devices", "intra_transport")
EXPECT_TEXT_RE = re.compile(r"[A-Za-z0-9_.:/+ -]{1,64}")


def check_expect(key: str, expect: dict[str, Any]) -> None:
    if not expect:
        raise FieldError(key, f"is empty; expect one or more of {', '.join(EXPECT_KEYS)}")
    for name, value in expect.items():
        if name not in EXPECT_KEYS:
            raise FieldError(f"{key}.{name}", f"unknown key; valid: {', '.join(EXPECT_KEYS)}")
        if name == "gdr":
            ok = isinstance(value, bool)
        elif name in EXPECT_LISTS:
            ok = (
                isinstance(value, tuple)
                and bool(value)
                and all(isinstance(v, str) and EXPECT_TEXT_RE.fullmatch(v) for v in value)
            )
        else:
            ok = isinstance(value, str) and bool(EXPECT_TEXT_RE.fullmatch(value))
        if not ok:
            raise FieldError(f"{key}.{name}", f"{value!r} is not valid; expected {EXPECT_KEYS[name]}")


def check_passthrough(key: str, names: tuple[str, ...]) -> None:
    for name in names:
        check_env_name(key, name)


# --------------------------------------------------------------------------- conversion


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if isinstance(tp, type):
        return {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}.get(
            tp.__name__, tp.__name__
        )
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0]).removeprefix('an ').removeprefix('a ')}s"
    return str(tp)


def _convert(tp: Any, value: Any, where: str, meta: typing.Mapping[str, Any]) -> Any:
    """Check `value` from YAML against the annotation `tp` and convert it (lists to tuples,
    sizes to bytes, nested mappings to dataclasses)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        concrete = [o for o in options if o is not type(None)]
        # null is None, except for a workload section, where an empty one means its defaults
        if (
            value is None
            and type(None) in options
            and not (dataclasses.is_dataclass(concrete[0]) and not meta.get("null"))
        ):
            return None
        if len(concrete) == 1:
            # A workload section left empty (`allreduce:`) means its defaults; `false` turns it
            # off (`--set workloads.real=false`).
            if value is False and type(None) in options and dataclasses.is_dataclass(concrete[0]):
                return None
            return _convert(concrete[0], value, where, meta)
        for option in options:
            try:
                return _convert(option, value, where, meta)
            except SpecError:
                pass
        raise SpecError(f"{where}: {value!r} is not {_type_name(tp)}")
    if tp is type(None):
        if value is None:
            return None
    elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, dict):
            return build(tp, value, where)
        if value is None:
            return build(tp, {}, where)
        raise SpecError(f"{where}: expected a mapping of {tp.__name__} settings, found {value!r}")
    elif origin is tuple:
        item_tp = typing.get_args(tp)[0]
        if isinstance(value, list):
            return tuple(_convert(item_tp, v, f"{where}[{i}]", {}) for i, v in enumerate(value))
        if meta.get("one_or_more") and not isinstance(value, dict):
            return (_convert(item_tp, value, where, {}),)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is int:
        if meta.get("size") and isinstance(value, str):
            try:
                return parse_size(value, allow_zero=bool(meta.get("zero")))
            except ValueError as exc:
                raise SpecError(f"{where}: {exc}") from None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise SpecError(f"{where}: expected a finite number, found {value!r}")
            return float(value)
    elif tp is bool and isinstance(value, bool):
        return value
    raise SpecError(f"{where}: expected {_type_name(tp)}, found {value!r}")


def _key(where: str, key: Any) -> str:
    """A mapping key, which must have been a string in the YAML: YAML 1.1 (PyYAML's) reads an
    unquoted on/off/yes/no/true/false as a boolean and digits as a number, so `ON: "1"` would
    otherwise define a variable named True."""
    if isinstance(key, str):
        return key
    why = " (YAML 1.1 reads unquoted on/off/yes/no/true/false as booleans)" if isinstance(key, bool) else ""
    raise SpecError(f'{where}: the key {key!r} is not a string{why}; quote the key in YAML, e.g. "ON": ...')


def _env_values(value: Any, where: str) -> dict[str, str]:
    """An environment mapping: names to strings; integers are accepted and written as digits."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected a mapping of variable names to values, found {value!r}")
    out = {}
    for raw, v in value.items():
        k = _key(where, raw)
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise SpecError(f"{where}.{k}: expected a string (quote it in YAML), found {v!r}")
        out[k] = str(v)
    return out


def _env_set(body: Any, where: str) -> tuple[dict[str, str], dict[str, Any] | None]:
    """A settings set: its variables, and what it expects of the transport. Two forms: the
    variables alone (`ib: {NCCL_IB_HCA: mlx5_0}`), or `ib: {env: {...}, expect: {...}}`, told
    apart by their keys (env and expect only) holding mappings, which a variable cannot."""
    if (
        isinstance(body, dict)
        and body
        and set(body) <= {"env", "expect"}
        and any(isinstance(v, dict) or v is None for v in body.values())
    ):
        expect = body.get("expect")
        if expect is not None and not isinstance(expect, dict):
            raise SpecError(f"{where}.expect: expected a mapping such as {{net: IB, gdr: true}}, found {expect!r}")
        if expect is not None:
            expect = {_key(f"{where}.expect", k): tuple(v) if isinstance(v, list) else v for k, v in expect.items()}
        return _env_values(body.get("env"), f"{where}.env"), expect
    return _env_values(body, where), None


def build(cls: type, data: dict[str, Any], where: str) -> Any:
    """A checked dataclass from a YAML mapping; errors are `SpecError('where.key: ...')`."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    prefix = f"{where}." if where else ""
    kwargs: dict[str, Any] = {}
    fields = {name: f for name, f in fields.items() if not f.metadata.get("derived")}
    for raw, value in data.items():
        key = _key(where or "top level", raw)
        if key not in fields:
            raise SpecError(f"{prefix}{key}: unknown key; valid: {', '.join(fields)}")
        _check_recorded(f"{prefix}{key}", value)
        kind = fields[key].metadata.get("mapping")
        if kind == "env":
            kwargs[key] = _env_values(value, f"{prefix}{key}")
        elif kind == "env_sets":
            if not isinstance(value, dict):
                raise SpecError(f"{prefix}{key}: expected a mapping of set names to variables, found {value!r}")
            kwargs[key], kwargs["nccl_expect"] = {}, {}
            for raw_set, body in value.items():
                name = _key(f"{prefix}{key}", raw_set)
                env, expect = _env_set(body, f"{prefix}{key}.{name}")
                kwargs[key][name] = env
                if expect is not None:
                    kwargs["nccl_expect"][name] = expect
        else:
            kwargs[key] = _convert(hints[key], value, f"{prefix}{key}", fields[key].metadata)
    missing = [
        name
        for name, f in fields.items()
        if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise SpecError(f"{prefix}{missing[0]}: required key is missing")
    try:
        return cls(**kwargs)
    except FieldError as exc:
        key = f"{prefix}{exc.key}" if exc.key else where or cls.__name__
        raise SpecError(f"{key}: {exc}") from None


# --------------------------------------------------------------------------- loading


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `--set key.path=value` to the raw mapping; the value is read as YAML."""
    if "=" not in assignment:
        raise SpecError(f"--set {assignment!r}: expected KEY=VALUE, e.g. workloads.synthetic.steps=20")
    path, _, raw = assignment.partition("=")
    keys = path.strip().split(".")
    if not all(keys):
        raise SpecError(f"--set {assignment!r}: empty key in {path!r}")
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, dict):
        raise SpecError(f"--set {path}: sets scalars and lists, not mappings; edit the sweep file instead")
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        # a section left empty (`real:`) is still a section; and a workload the sweep leaves out
        # is one --set adds (`workloads.transformer.steps=6`), with its defaults for the rest
        if child is None and (key in node or (keys[:i] == ["workloads"] and key in WORKLOADS)):
            child = node[key] = {}
        if not isinstance(child, dict):
            raise SpecError(f"--set {path}: {'.'.join(keys[: i + 1])} is not a section of this sweep")
        node = child
    node[keys[-1]] = value


MAX_FILE_BYTES = 1024**2  # a sweep or profile is a page of YAML
# The sweeps and cluster profiles bench ships (package data); the repository's sweeps/ links here
SHIPPED = Path(__file__).resolve().parent / "sweeps"
MAX_DEPTH = 32  # sections nest four deep; 32 is room for any hand-written file
MAX_YAML_VALUES = 100_000  # scalars, lists and mappings after aliases are expanded


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing what no sweep needs and a hostile file uses to crash or
    hang its reader: nesting past MAX_DEPTH (Python's recursion limit ends in a traceback) and
    aliases that expand past MAX_YAML_VALUES values (the "billion laughs", nine lines for 10^9)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._total = 0
        self._sizes: dict[int, int] = {}  # id(node) -> its size with aliases expanded

    def _count(self, n: int, mark: Any) -> None:
        self._total += n
        if self._total > MAX_YAML_VALUES:
            raise yaml.composer.ComposerError(
                None, None, f"more than {MAX_YAML_VALUES:,} values once aliases are expanded", mark
            )

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            self._count(self._sizes.get(id(node), 1), event.start_mark)
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        before = self._total
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._count(1, event.start_mark)
        self._sizes[id(node)] = self._total - before
        return node


def load_yaml(text: str) -> Any:
    """YAML as `yaml.safe_load` reads it, within MAX_DEPTH and MAX_YAML_VALUES."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _shipped(path: Path, exc: OSError) -> str:
    """Where bench ships a missing `sweeps/...` file, which the README names relative to the
    repository: outside a checkout (a wheel's install) there is no sweeps/ there. '' for any
    other file."""
    parts = Path(path).parts
    if not isinstance(exc, FileNotFoundError) or len(parts) < 2 or parts[0] != "sweeps":
        return ""
    there = SHIPPED.joinpath(*parts[1:])
    return f"; bench ships {Path(path)} as {there}" if there.is_file() else ""


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """The top-level mapping of a YAML file, or a one-line SpecError naming the file."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"{path}: cannot read {what} file ({exc.strerror or exc}){_shipped(path, exc)}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError(f"{path}: larger than {MAX_FILE_BYTES // 1024} KiB; a {what} file is a page of YAML")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(f"{path}: not valid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping of {what} settings at the top level")
    return data


def only_rule(sweep: Sweep, selections: tuple[str, ...]) -> MatrixRule:
    """The rule `--only AXIS=V1,V2 [--only ...]` states, each value checked against the sweep's
    own values on that axis, so that a typo is an error rather than an empty selection."""
    chosen: dict[str, tuple[Any, ...]] = {}
    for text in selections:
        axis, sep, raw = (part.strip() for part in text.partition("="))
        axis = AXIS_ALIASES.get(axis, axis)
        if not sep or axis not in MATRIX_AXES:
            raise SpecError(f"--only {text!r}: expected AXIS=V1,V2 with AXIS one of {', '.join(MATRIX_AXES)}")
        present = {
            "nodes": sweep.node_counts,
            "gpus_per_node": tuple(sorted(sweep.gpus_per_node)),
            "launcher": sweep.launchers,
            "nccl": tuple(sweep.nccl),
        }[axis]
        values = [v.strip() for v in raw.split(",") if v.strip()]
        missing = [v for v in values if v not in {str(p) for p in present}]
        if not values or missing:
            what = f"{missing[0]!r} is not" if missing else "names no value; list values"
            raise SpecError(f"--only {axis}: {what} among the sweep's {axis}: {', '.join(map(str, present))}")
        if axis in chosen:
            raise SpecError(f"--only {axis} is given twice; list the values once, e.g. {axis}=A,B")
        chosen[axis] = tuple(p for p in present if str(p) in values)
    return MatrixRule(**chosen)


def load_sweep(
    path: str | Path,
    *,
    max_nodes: int | None = None,
    repeat: int | None = None,
    overrides: tuple[str, ...] = (),
    only: tuple[str, ...] = (),
) -> Sweep:
    """Read, override and check a sweep file. Errors name the file: `SpecError('FILE: key: ...')`."""
    path = Path(path)
    data = read_mapping(path, "sweep")
    try:
        for assignment in overrides:
            apply_override(data, assignment)
        for flag, key, value in (("--max-nodes", "max_nodes", max_nodes), ("--repeat", "repeat", repeat)):
            if value is not None:
                if value < 1:
                    raise SpecError(f"{flag} must be at least 1, found {value}")
                data[key] = value
        sweep = build(Sweep, data, "")
        if not sweep.node_counts:
            raise SpecError(f"nodes: no node count of {list(sweep.nodes)} is within max_nodes {sweep.max_nodes}")
        if only:
            sweep = dataclasses.replace(sweep, only=only_rule(sweep, only))
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None
    return sweep
