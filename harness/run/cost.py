"""What a sweep costs before it is submitted (docs/concepts/cost.md).

Two figures per sweep. The bound: every job held for its whole time limit, which is the most
Slurm can charge. The estimate: each workload's step counts and message sizes at a stated rate,
plus a start-up per workload step. The rates are the profile's own reference figures where it
states them, else published figures for one GPU, or this project's own CPU measurement for
`device: cpu`; docs/concepts/cost.md lists them with their sources and the estimate against measured
sweeps.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.catalog import (
    COLLECTIVE_WORKLOAD,
    INTER,
    INTRA,
    PRESETS,
    WORLD,
    Shape,
    collective,
    decoder_params,
    flops_per_token,
    node_groups,
)
from benchmarks.common import message_sizes
from harness.config.cluster_profile import ClusterProfile, Hardware
from harness.run.plan import Job, WorkloadRun

# Launching one workload step: srun or torchrun, importing torch, the rendezvous, CUDA and NCCL
# initialisation and building the model (docs/concepts/cost.md). CPU jobs skip CUDA and NCCL.
START_S = {"cuda": 30.0, "cpu": 10.0}
# One GPU training ResNet-50 at 224 px: NVIDIA's DeepLearningExamples, DGX A100 80GB, 2,470 img/s
# with AMP and 938 in TF32 (docs/reference/sources.md), for every GPU: docs/concepts/cost.md says why
# a newer GPU's peak does not scale it. One CPU rank on one thread: the testbed's ResNet-18 at
# 64 px, 76-93 img/s, scaled to ResNet-50 at 224 px by the ratio of their FLOPs.
RESNET50_IMAGES_PER_S = {"cuda-amp": 2470.0, "cuda-fp32": 938.0, "cpu": 80.0 * 1.81 / 4.09 * (64 / 224) ** 2}
# GFLOPs of one 224 px forward pass, torchvision's model documentation: the rate of another
# model is ResNet-50's times 4.09 over its figure. A model not listed counts as ResNet-50.
MODEL_GFLOPS = {
    "resnet18": 1.81,
    "resnet34": 3.66,
    "resnet50": 4.09,
    "resnet101": 7.80,
    "resnet152": 11.51,
    "resnext50_32x4d": 4.23,
    "resnext101_32x8d": 16.41,
    "wide_resnet50_2": 11.40,
    "wide_resnet101_2": 22.75,
}
# The transformer's achieved FLOP/s per rank. A GPU: 40% of its peak dense TFLOP/s (the profile's
# hardware.peak_tflops_per_gpu, else an A100's 312 in bf16, 156 in TF32), torchtitan's MFU for
# Llama-3 8B on H100s (docs/reference/sources.md). One CPU rank on one thread: the small preset measured
# on this project's 2-core machine, 0.0065 TFLOP/s (1,500 tokens/s at 4.33 MFLOP per token).
TRANSFORMER_MFU = 0.4
A100_TFLOPS = {"cuda-amp": 312.0, "cuda-fp32": 156.0}
CPU_TFLOPS = 0.0065
# The links where the profile states no hardware (docs/concepts/cost.md): 8 NDR400 NICs a node at the
# 46 GB/s NVIDIA measures of one, and 8x A100 over NVLink inside a node (230 GB/s busbw), whose
# peak each collective's model gives (harness/config/peak.py); gloo over TCP about 0.11 GB/s on 1 GbE
# (docs/reference/sources.md). A collective also pays a latency per call.
ASSUMED = Hardware(network_gbps_per_node=8 * 46.0, nics_per_node=8, intra_node_gbps_per_gpu=230.0)
CPU_BUSBW_GBPS = 0.11
LATENCY_S = {"cuda": 30e-6, "cpu": 300e-6}


@dataclass(frozen=True)
class KnownRate:
    """One GPU's rate (images/s, or the transformer's tokens/s) in a training series at a node
    count, from the cluster's history (harness/analysis/predicted.py): what a later run measured
    of a prediction, else the prediction; and where it came from."""

    workload: str
    scaling: str
    nodes: int
    gpus_per_node: int
    launcher: str
    nccl_config: str
    params: Mapping[str, Any]  # the workload's parameters, as the predicting run's results state them
    per_gpu: float
    source: str


@dataclass(frozen=True)
class Cost:
    jobs: int
    time_limit_min: float
    bound_node_hours: float  # every job for its whole time limit
    bound_gpu_hours: float
    estimate_node_hours: float  # from the step counts
    estimate_gpu_hours: float
    rates: tuple[str, ...]  # where the estimate's rates came from, one line each

    def lines(self) -> list[str]:
        return [
            f"cost: {self.jobs} job(s), at most {self.bound_node_hours:,.1f} node-hours "
            f"({self.bound_gpu_hours:,.1f} GPU-hours) if each runs to its {self.time_limit_min:g}-min time limit",
            f"  estimated from the workloads' step counts: {self.estimate_node_hours:,.2f} node-hours "
            f"({self.estimate_gpu_hours:,.2f} GPU-hours), at {'; '.join(self.rates) or 'link speed'} "
            "(docs/concepts/cost.md)",
        ]


@functools.lru_cache(maxsize=64)  # every job of a sweep runs the same few workloads
def _args(run: WorkloadRun) -> Mapping[str, str]:
    """A workload's flags as a mapping (`--steps 50` and `-n 20` alike); switches map to ''."""
    out: dict[str, str] = {}
    args = list(run.args)
    for i, a in enumerate(args):
        if a.startswith("-"):
            nxt = args[i + 1] if i + 1 < len(args) else ""
            out[a] = "" if nxt.startswith("-") and not nxt.lstrip("-").isdigit() else nxt
    return out


def _collective_s(job: Job, run: WorkloadRun, device: str, profile: ClusterProfile | None) -> float:
    a = _args(run)
    lo, hi, factor = int(a["-b"]), int(a["-e"]), int(a["-f"])
    calls = int(a["-n"]) + int(a["-w"]) + int(a["-c"])
    sizes = message_sizes(lo, hi, factor)
    hardware = profile.hardware if profile else None
    groups, _ = node_groups([node for node in range(job.nodes) for _ in range(job.gpus_per_node)])
    # ranks in each group measured (catalog.node_groups)
    ranks = {WORLD: job.world_size, INTRA: job.gpus_per_node, INTER: job.nodes}
    total = 0.0
    for kind in a.get("--groups", WORLD).split(","):
        if kind != WORLD and kind not in groups:
            continue
        n = ranks[kind]
        for name in a["--collective"].split(","):
            if n < 2:
                continue
            shape = (job.nodes, job.gpus_per_node, kind, name)
            stated = hardware.peak_busbw_gbps(*shape) if hardware else None
            assumed = CPU_BUSBW_GBPS if device == "cpu" else ASSUMED.peak_busbw_gbps(*shape)
            busbw = (stated or assumed or CPU_BUSBW_GBPS) * 1e9
            total += calls * sum(LATENCY_S[device] + s * collective(name).bus_factor(n) / busbw for s in sizes)
    return total


STATED = "the profile's reference figures where they apply"


def _stated_rate(job: Job, run: WorkloadRun, profile: ClusterProfile | None) -> float | None:
    """One rank's rate from the profile's reference figure for the job's workload (images/s, or
    the transformer's tokens/s), where one applies."""
    for ref in profile.reference if profile else ():
        if (
            ref.workload == run.workload
            and ref.nodes == job.nodes
            and ref.gpus_per_node in (None, job.gpus_per_node)
            and ref.scaling in (None, run.scaling)
        ):
            return ref.value / job.world_size
    return None


def _known_rate(job: Job, run: WorkloadRun, device: str, known: Sequence[KnownRate]) -> KnownRate | None:
    """The first of `known` (newest first) of the job's series at its node count, made with the
    workload parameters the job's arguments give (_same_params)."""
    for k in known:
        if (k.workload, k.scaling, k.nodes, k.gpus_per_node, k.launcher, k.nccl_config) == (
            run.workload,
            run.scaling,
            job.nodes,
            job.gpus_per_node,
            job.launcher,
            job.nccl_config,
        ) and _same_params(run, device, k.params):
            return k
    return None


def _same_params(run: WorkloadRun, device: str, params: Mapping[str, Any]) -> bool:
    """Whether a result's parameters (harness/collect/gather.py, compared_params) are what the
    workload's arguments ask for: the model and image size (the transformer: its shape and
    parallelism), the batch its scaling holds fixed, and the precision (--amp auto: off on a CPU,
    and on a GPU whichever it chose but off)."""
    a = _args(run)
    fixed = ("global_batch", "--global-batch") if run.scaling == "strong" else ("batch_size", "--batch-size")
    amp, stated = a.get("--amp", "auto"), params.get("amp")
    if amp == "auto":
        amp_same = stated == "off" if device == "cpu" else stated not in (None, "off")
    else:
        amp_same = stated == amp
    if run.workload == "transformer":
        shape = _shape(a)
        wanted: dict[str, Any] = {k: getattr(shape, k) for k in ("layers", "width", "heads", "seq_len", "vocab")}
        wanted["parallel"] = a.get("--parallel", "ddp")
    else:
        wanted = {"model": a.get("--model", "resnet50"), "image_size": int(a.get("--image-size", "224"))}
    wanted[fixed[0]] = int(a[fixed[1]]) if fixed[1] in a else None
    return amp_same and all(params.get(k) == v for k, v in wanted.items())


def _images_per_s(
    job: Job, run: WorkloadRun, device: str, profile: ClusterProfile | None, known: Sequence[KnownRate]
) -> tuple[float, str]:
    """The rate of one rank, and where it came from."""
    if stated := _stated_rate(job, run, profile):
        return stated, STATED
    a = _args(run)
    model, size = a.get("--model", "resnet50"), int(a.get("--image-size", "224"))
    if k := _known_rate(job, run, device, known):
        return k.per_gpu, f"{model} at {size} px, {k.per_gpu:,.0f} img/s per {_rank(device)} {k.source}"
    amp = a.get("--amp", "auto") != "off"
    base = RESNET50_IMAGES_PER_S["cpu" if device == "cpu" else ("cuda-amp" if amp else "cuda-fp32")]
    rate = base * MODEL_GFLOPS["resnet50"] / MODEL_GFLOPS.get(model, MODEL_GFLOPS["resnet50"]) * (224 / size) ** 2
    # Not scaled by the profile's peak FLOP/s: scaled, an H100 would train at MLPerf's tuned
    # MXNet-and-DALI rate, not eager PyTorch's (docs/concepts/cost.md)
    where = "per CPU rank of one thread" if device == "cpu" else f"per GPU (an A100's, {'AMP' if amp else 'TF32'})"
    return rate, f"{model} at {size} px, {rate:,.0f} img/s {where}"


def _shape(a: Mapping[str, str]) -> Shape:
    """The transformer's shape its arguments give: the preset's, each flag given in its place."""
    base = PRESETS[a.get("--preset", "small")]
    return Shape(**{k: int(a.get(f"--{k.replace('_', '-')}", getattr(base, k))) for k in vars(base)})


def _rank(device: str) -> str:
    return "CPU rank of one thread" if device == "cpu" else "GPU"


def _tokens_per_s(
    job: Job, run: WorkloadRun, device: str, profile: ClusterProfile | None, known: Sequence[KnownRate]
) -> tuple[float, str]:
    """The transformer's rate of one rank in tokens/s, and where it came from."""
    if stated := _stated_rate(job, run, profile):
        return stated, STATED
    a = _args(run)
    shape = _shape(a)
    if k := _known_rate(job, run, device, known):
        described = f"a decoder of {decoder_params(shape) / 1e6:.1f}M parameters"
        return k.per_gpu, f"{described}, {k.per_gpu:,.0f} tokens/s per {_rank(device)} {k.source}"
    flops = flops_per_token(decoder_params(shape), shape)
    if device == "cpu":
        tflops, where = CPU_TFLOPS, "per CPU rank of one thread"
    else:
        amp = a.get("--amp", "auto") != "off"
        stated = profile.hardware.peak_tflops_per_gpu if profile and profile.hardware else None
        peak = stated or A100_TFLOPS["cuda-amp" if amp else "cuda-fp32"]
        tflops = TRANSFORMER_MFU * peak
        where = f"per GPU ({TRANSFORMER_MFU:.0%} MFU of {peak:g} TFLOP/s{'' if stated else ', an A100'})"
    rate = tflops * 1e12 / flops
    return rate, f"a decoder of {decoder_params(shape) / 1e6:.1f}M parameters, {rate:,.0f} tokens/s {where}"


def _training_s(
    job: Job, run: WorkloadRun, device: str, profile: ClusterProfile | None, known: Sequence[KnownRate]
) -> tuple[float, str]:
    a = _args(run)
    steps = int(a["--steps"]) + int(a.get("--warmup-steps", "0"))
    free = int(a.get("--sync-free-steps", "0"))
    steps += (
        free + 1 if free and job.world_size > 1 else 0
    )  # and one untimed; one rank runs none (docs/concepts/breakdown.md)
    batch = int(a["--batch-size"]) if run.scaling == "weak" else int(a["--global-batch"]) // job.world_size
    if run.workload == "transformer":  # a batch of sequences, counted in tokens
        rate, source = _tokens_per_s(job, run, device, profile, known)
        return steps * batch * _shape(a).seq_len / rate, source
    rate, source = _images_per_s(job, run, device, profile, known)
    return steps * batch / rate, source


def job_seconds(job: Job, profile: ClusterProfile | None, known: Sequence[KnownRate] = ()) -> tuple[float, set[str]]:
    """The estimated run time of one job, at most its time limit, and the rates it assumed;
    `known`: the cluster's history's rates, newest first, taken where the profile states none."""
    device = "cpu" if job.device == "cpu" else "cuda"
    seconds, sources = 0.0, set()
    for run in job.runs:
        seconds += START_S[device]
        if run.workload == COLLECTIVE_WORKLOAD:
            seconds += _collective_s(job, run, device, profile)
        else:
            took, source = _training_s(job, run, device, profile, known)
            seconds += took
            sources.add(source)
    return min(seconds, job.time_limit_min * 60), sources


def estimate(jobs: Iterable[Job], profile: ClusterProfile | None, known: Sequence[KnownRate] = ()) -> Cost:
    jobs = list(jobs)
    bound = sum(j.nodes * j.time_limit_min / 60 for j in jobs)
    bound_gpu = sum(j.world_size * j.time_limit_min / 60 for j in jobs)
    node_s = gpu_s = 0.0
    sources: set[str] = set()
    # A job's estimate depends on its matrix point, not its name or replicate: one per point (and
    # per launcher and settings set where the history gives rates: they are a series' own).
    estimated: dict[tuple, tuple[float, set[str]]] = {}
    for job in jobs:
        series = (job.launcher, job.nccl_config) if known else ()
        point = (job.nodes, job.gpus_per_node, job.device, job.runs, job.time_limit_min, *series)
        if point not in estimated:
            estimated[point] = job_seconds(job, profile, known)
        seconds, used = estimated[point]
        node_s += job.nodes * seconds
        gpu_s += job.world_size * seconds
        sources |= used
    limit = max((j.time_limit_min for j in jobs), default=0.0)
    return Cost(len(jobs), limit, bound, bound_gpu, node_s / 3600, gpu_s / 3600, tuple(sorted(sources)))
