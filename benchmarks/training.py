"""The DDP training step shared by the `synthetic` and `real` workloads: model, optimizer,
mixed precision, timing and the throughput figures both report.

Scaling modes: weak keeps `--batch-size` per GPU fixed; strong keeps `--global-batch` fixed
and gives each rank global / world size.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP

from .catalog import AMPS, BREAKDOWN
from .catalog import TRAINING_DEFAULTS as D
from .common import PER_RANK, UsageError, add_common_args, positive_arg, spread
from .runtime import Context, gather_at_root, gather_rows, worst_of_ranks


def add_training_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training")
    g.add_argument("--model", default=D.model, help="torchvision model name (default %(default)s)")
    g.add_argument("--num-classes", type=int, default=1000, help="classes of the model's last layer (default 1000)")
    g.add_argument(
        "--batch-size",
        type=int,
        default=D.batch_size,
        help="images per GPU per step, weak scaling (default %(default)s)",
    )
    g.add_argument(
        "--global-batch",
        type=int,
        default=None,
        help="images per step over all GPUs, strong scaling: each rank takes global / world size",
    )
    g.add_argument(
        "--image-size", type=int, default=D.image_size, help="square input size in pixels (default %(default)s)"
    )
    g.add_argument("--steps", type=int, default=D.steps, help="measured steps (default %(default)s)")
    g.add_argument(
        "--warmup-steps", type=int, default=D.warmup_steps, help="steps run before measuring (default %(default)s)"
    )
    g.add_argument(
        "--amp",
        choices=AMPS,
        default=D.amp,
        help="mixed precision: auto is bf16 on GPUs of compute capability 8.0 and up, fp16 below, off on CPU",
    )
    g.add_argument(
        "--channels-last",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="NHWC memory format (default: on for CUDA, off for CPU)",
    )
    g.add_argument("--compile", action="store_true", help="torch.compile the DDP model")
    g.add_argument(
        "--bucket-cap-mb",
        type=positive_arg,
        default=D.bucket_cap_mb,
        help="DDP gradient bucket size (default %(default)s, torch's)",
    )
    g.add_argument(
        "--gradient-as-bucket-view",
        action=argparse.BooleanOptionalAction,
        default=D.gradient_as_bucket_view,
        help="DDP's gradient_as_bucket_view: gradients are views into its buckets",
    )
    g.add_argument(
        "--static-graph",
        action=argparse.BooleanOptionalAction,
        default=D.static_graph,
        help="DDP's static_graph: the graph is the same every step",
    )
    g.add_argument("--lr", type=positive_arg, default=0.1, help="SGD learning rate (momentum 0.9)")
    g.add_argument(
        "--sync-free-steps",
        type=int,
        default=D.sync_free_steps,
        help="steps timed with DDP's gradient all-reduce skipped, among the measured ones, after one untimed "
        "(default %(default)s, 0 for none)",
    )
    add_common_args(p)


def check_training_args(args: argparse.Namespace, world_size: int | None) -> None:
    for flag, value, low in (
        ("--batch-size", args.batch_size, 1),
        ("--image-size", args.image_size, 16),
        ("--steps", args.steps, 1),
        ("--warmup-steps", args.warmup_steps, 0),
        ("--num-classes", args.num_classes, 2),
        ("--sync-free-steps", args.sync_free_steps, 0),
    ):
        if value < low:
            raise UsageError(f"{flag} must be at least {low}, found {value}")
    if args.bucket_cap_mb <= 0:
        raise UsageError(f"--bucket-cap-mb must be positive, found {args.bucket_cap_mb}")
    if args.global_batch is not None and world_size:
        per_gpu_batch(args, world_size)


def per_gpu_batch(args: argparse.Namespace, world_size: int) -> tuple[int, str]:
    """(images, or the transformer's sequences, per rank per step; scaling mode)."""
    if args.global_batch is None:
        return args.batch_size, "weak"
    if args.global_batch < world_size or args.global_batch % world_size:
        raise UsageError(
            f"--global-batch {args.global_batch} is not divisible by the world size {world_size} "
            f"into whole per-GPU batches"
        )
    return args.global_batch // world_size, "strong"


@dataclass
class Trainer:
    model: Any
    optimizer: Any
    scaler: Any
    autocast: Callable[[], Any]
    memory_format: Any
    amp: str
    channels_last: bool
    no_sync: Callable[[], Any]  # DDP's: the steps inside skip the gradient all-reduce
    traffic: dict[str, Any]  # what a synchronised step sends (ddp_traffic)

    def step(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss = F.cross_entropy(self.model(images), labels)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()


def choose_amp(requested: str, device: torch.device) -> str:
    """What --amp `requested` means on `device`. auto: bf16 where the GPU computes it natively,
    compute capability 8.0 and up (Ampere's Tensor Cores brought bf16: NVIDIA A100 Tensor Core GPU
    Architecture, 2020); fp16 with loss scaling before it (V100 is 7.0 and T4 7.5: their Tensor
    Cores take fp16, not bf16); off on CPU."""
    if requested == "fp16" and device.type != "cuda":
        raise UsageError("--amp fp16 needs CUDA; on CPU use --amp bf16 or off")
    if requested != "auto":
        return requested
    if device.type != "cuda":
        return "off"
    return "bf16" if torch.cuda.get_device_capability(device) >= (8, 0) else "fp16"


def mixed_precision(amp: str, device: torch.device) -> tuple[Callable[[], Any], Any]:
    """(a context manager for the forward pass, the loss scaler or None) for a chosen --amp."""
    scaler = torch.amp.GradScaler("cuda") if amp == "fp16" else None
    if amp == "off":
        return contextlib.nullcontext, scaler
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return (lambda: torch.autocast(device.type, dtype=dtype)), scaler


def build_trainer(args: argparse.Namespace, ctx: Context) -> Trainer:
    cuda = ctx.device.type == "cuda"
    amp = choose_amp(args.amp, ctx.device)
    channels_last = cuda if args.channels_last is None else args.channels_last
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    if cuda:
        torch.backends.cudnn.benchmark = True
    try:
        model = torchvision.models.get_model(args.model, weights=None, num_classes=args.num_classes)
    except ValueError:
        known = [m for m in torchvision.models.list_models(module=torchvision.models) if "resnet" in m]
        raise UsageError(
            f"--model {args.model!r} is not a torchvision classification model; e.g. {', '.join(sorted(known))}"
        ) from None
    model = model.to(ctx.device, memory_format=memory_format)
    ddp = DDP(
        model,
        device_ids=[ctx.device.index] if cuda else None,
        bucket_cap_mb=args.bucket_cap_mb,
        gradient_as_bucket_view=args.gradient_as_bucket_view,
        static_graph=args.static_graph,
    )
    runnable = torch.compile(ddp) if args.compile else ddp
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    autocast, scaler = mixed_precision(amp, ctx.device)
    return Trainer(
        model=runnable,
        optimizer=optimizer,
        scaler=scaler,
        autocast=autocast,
        memory_format=memory_format,
        amp=amp,
        channels_last=channels_last,
        no_sync=ddp.no_sync,
        traffic=ddp_traffic(model.parameters(), ctx.launch.world_size),
    )


def ddp_traffic(params: Iterable[torch.nn.Parameter], world: int) -> dict[str, Any]:
    """The collectives one synchronised step of a DDP model calls, in bytes
    (docs/concepts/workloads.md, "What a step sends"): one all-reduce of every gradient, in its
    parameter's dtype (fp32, under autocast too), of which each rank sends 2(p-1)/p by ring."""
    reduced = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    return {
        "policy": None,
        "all_reduce_bytes": reduced,
        "all_gather_bytes": 0,
        "reduce_scatter_bytes": 0,
        "sent_bytes_per_rank": round(2 * (world - 1) / world * reduced),
    }


def sync(ctx: Context) -> None:
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)


def throughput(ctx: Context, batch: int, step_s: list[float]) -> dict[str, Any]:
    """Throughput figures from this rank's measured step times (seconds), over all ranks.

    The measured time is the slowest rank's total: DDP synchronises ranks every step, so that
    is the wall time of the measured phase. images_per_s = batch x world x steps / that time.
    """
    measured_s, *worst_s = worst_of_ranks([sum(step_s), *step_s], ctx.device)
    per_rank = gather_at_root(step_s, ctx)
    world, steps = ctx.launch.world_size, len(step_s)
    worst_ms = [s * 1e3 for s in worst_s]
    images = batch * world * steps
    stats = spread(worst_ms)
    return {
        "images_per_s": images / measured_s,
        "images_per_s_per_gpu": images / measured_s / world,
        "measured_time_s": measured_s,
        "step_time_ms": stats["median"],
        "step_time_ms_p10": stats["p10"],
        "step_time_ms_p90": stats["p90"],
        "samples": {"step_time_ms": worst_ms},
        PER_RANK: {"step_time_ms": [[v * 1e3 for v in r] for r in per_rank]},
    }


def timed(ctx: Context, phase: str, step: Callable[[], Any]) -> float:
    """Seconds of one call of `step`, synchronised with the device, marked in the rank's
    progress as `phase` (for hang attribution)."""
    ctx.progress(phase)
    t0 = time.perf_counter()
    step()
    sync(ctx)
    return time.perf_counter() - t0


def timed_steps(ctx: Context, phase: str, count: int, step: Callable[[], Any]) -> list[float]:
    """Seconds of each of `count` calls of `step`, each timed as "PHASE i"."""
    return [timed(ctx, f"{phase} {i + 1}", step) for i in range(count)]


def schedule(steps: int, free: int) -> list[bool]:
    """The order of `steps` measured and `free` sync-free steps, True where a sync-free one runs:
    spread evenly through the measured ones (Bresenham's rule, rounded to the nearest), so that
    noise, warm-up and clocks fall on both sides alike (docs/concepts/breakdown.md). The same on every
    rank: the measured steps' collectives must line up."""
    total, half = steps + free, 2 * (steps + free)
    return [((2 * j + 2) * free + total) // half > (2 * j * free + total) // half for j in range(total)]


def interleaved(
    ctx: Context,
    steps: int,
    free: int,
    no_sync: Callable[[], Any],
    measured: Callable[[int], None],
    compute: Callable[[], Any],
) -> list[float]:
    """Run measured(i) for each of `steps` measured steps (it times and records itself), with
    `free` steps of `compute` run inside `no_sync()`, gradient synchronisation skipped, placed
    among them by schedule(), after one untimed; the sync-free steps' seconds (docs/concepts/breakdown.md).
    With one rank, which synchronises nothing, there are none: breakdown() needs none there."""

    def sync_free() -> None:
        with no_sync():
            compute()

    free = free if ctx.launch.world_size > 1 else 0
    out: list[float] = []
    if free:
        timed(ctx, "sync-free warmup step", sync_free)
    done = 0
    for is_free in schedule(steps, free):
        if is_free:
            out.append(timed(ctx, f"sync-free step {len(out) + 1}", sync_free))
        else:
            measured(done)
            done += 1
    return out


def measured_steps(
    ctx: Context, steps: int, free: int, no_sync: Callable[[], Any], step: Callable[[], Any]
) -> tuple[list[float], list[float]]:
    """(the measured steps' seconds, the sync-free steps' seconds) of a workload whose measured
    step and compute-only step are the same call (interleaved())."""
    step_s: list[float] = []
    free_s = interleaved(ctx, steps, free, no_sync, lambda i: step_s.append(timed(ctx, f"step {i + 1}", step)), step)
    return step_s, free_s


def breakdown(ctx: Context, step_ms: float, free_s: list[float], wait_ms: float = 0.0) -> dict[str, Any]:
    """Where the step went (docs/concepts/breakdown.md), from the median step `step_ms` (slowest rank per
    step), its median wait for data `wait_ms`, and this rank's steps with gradient
    synchronisation skipped (`free_s`, seconds, compute only); a collective call when there are
    any, and every rank has as many.

    compute_time_ms: the median rank's median sync-free step; slowest_compute_time_ms: the
    slowest rank's. A synchronised step waits for the slowest rank, so the rank imbalance is
    slowest - median, and the exposed communication is what the step took beyond the data wait
    and the slowest rank's compute. The four parts, as fractions of the step, add up to 1.
    One rank communicates and waits for no other: its step less its data wait is its compute,
    with no sync-free step needed. A compute-only step longer than the step itself is noise the
    steps could not average out: the breakdown is then not judged, never a negative share."""
    if ctx.launch.world_size == 1:
        compute = slowest = step_ms - wait_ms
    elif not free_s:
        return dict.fromkeys(BREAKDOWN)
    else:
        mine = spread([s * 1e3 for s in free_s])["median"]
        per_rank = [r[0] for r in gather_rows([mine], ctx.device, ctx.launch.world_size)]
        compute, slowest = spread(per_rank)["median"], max(per_rank)
    exposed = step_ms - wait_ms - slowest
    measured = {"compute_time_ms": compute, "slowest_compute_time_ms": slowest}
    if exposed < 0 or step_ms <= 0:
        with_wait = f", {wait_ms:.1f} ms of data wait," if wait_ms else ""
        return {
            **dict.fromkeys(BREAKDOWN),
            **measured,
            "breakdown_note": (
                f"not judged (noise): the slowest rank's compute-only step, {slowest:.1f} ms{with_wait} "
                f"is longer than the step, {step_ms:.1f} ms"
            ),
        }
    return {
        **measured,
        "exposed_comm_ms": exposed,
        "compute_fraction": compute / step_ms,
        "imbalance_fraction": (slowest - compute) / step_ms,
        "step_data_wait_fraction": wait_ms / step_ms,
        "exposed_comm_fraction": exposed / step_ms,
        "breakdown_note": None,
    }


def log_breakdown(ctx: Context, result: dict[str, Any]) -> None:
    if result["breakdown_note"]:
        ctx.log(f"# step breakdown {result['breakdown_note']}")
    elif result["compute_time_ms"] is not None:
        ctx.log(
            f"# compute-only step {result['compute_time_ms']:.1f} ms (median rank; slowest "
            f"{result['slowest_compute_time_ms']:.1f}): exposed communication "
            f"{result['exposed_comm_fraction']:.1%}, rank imbalance {result['imbalance_fraction']:.1%} of the step"
        )


def training_params(args: argparse.Namespace, trainer: Trainer, batch: int, scaling: str, world: int) -> dict[str, Any]:
    return {
        "traffic": trainer.traffic,
        "scaling": scaling,
        "batch_size": batch,
        "global_batch": batch * world,
        "params": {
            "model": args.model,
            "image_size": args.image_size,
            "steps": args.steps,
            "warmup_steps": args.warmup_steps,
            "amp": trainer.amp,
            "channels_last": trainer.channels_last,
            "compile": args.compile,
            "bucket_cap_mb": args.bucket_cap_mb,
            "gradient_as_bucket_view": args.gradient_as_bucket_view,
            "static_graph": args.static_graph,
            "optimizer": f"SGD(lr={args.lr}, momentum=0.9)",
            "num_classes": args.num_classes,
            "sync_free_steps": args.sync_free_steps,
        },
    }
