"""ResNet DDP training on random tensors that stay on the device: compute and gradient
all-reduce only, no data loading.

    bench run synthetic --model resnet50 --batch-size 64 --nproc 2           # weak scaling
    bench run synthetic --global-batch 512 --nproc 4                         # strong scaling
    torchrun --nproc-per-node 8 -m benchmarks.synthetic --json out.json

Warmup steps are excluded; each measured step is synchronised and timed on every rank.
Reports images_per_s over all ranks, images_per_s_per_gpu and step_time_ms (median, p10, p90
of the slowest rank per step), with the per-step samples.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

from .common import OneLineParser
from .runtime import Context, Workload, exit_rank
from .runtime import main as run_main
from .training import (
    add_training_args,
    breakdown,
    build_trainer,
    check_training_args,
    log_breakdown,
    measured_steps,
    per_gpu_batch,
    throughput,
    timed_steps,
    training_params,
)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="bench run synthetic", description=__doc__.split("\n\n")[0])
    add_training_args(p)
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the generated batches, each rank's plus its rank (default 0)"
    )
    return p


def measure(args: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    world = ctx.launch.world_size
    batch, scaling = per_gpu_batch(args, world)
    trainer = build_trainer(args, ctx)
    gen = torch.Generator(device="cpu").manual_seed(args.seed + ctx.launch.rank)
    images = torch.randn(batch, 3, args.image_size, args.image_size, generator=gen).to(
        ctx.device, memory_format=trainer.memory_format
    )
    labels = torch.randint(0, args.num_classes, (batch,), generator=gen).to(ctx.device)
    ctx.log(
        f"# synthetic {args.model} {scaling} scaling: batch {batch} per rank, world size {world}, "
        f"{args.image_size}px, amp {trainer.amp}, device {ctx.device.type}, backend {ctx.backend}"
    )

    def step() -> None:
        trainer.step(images, labels)

    warmup_ms = [s * 1e3 for s in timed_steps(ctx, "warmup step", args.warmup_steps, step)]
    step_s, free_s = measured_steps(ctx, args.steps, args.sync_free_steps, trainer.no_sync, step)

    result = training_params(args, trainer, batch, scaling, world)
    result.update(throughput(ctx, batch, step_s))
    result.update(breakdown(ctx, result["step_time_ms"], free_s))
    result["warmup"] = {"step_time_ms": warmup_ms}
    ctx.log(
        f"# {result['images_per_s']:.1f} images/s total, {result['images_per_s_per_gpu']:.1f} per GPU, "
        f"step {result['step_time_ms']:.1f} ms median (p10 {result['step_time_ms_p10']:.1f}, "
        f"p90 {result['step_time_ms_p90']:.1f})"
    )
    log_breakdown(ctx, result)
    return result


WORKLOAD = Workload("synthetic", build_parser, measure, check_training_args)


def main(argv: list[str] | None = None) -> int:
    return run_main(WORKLOAD, argv)


if __name__ == "__main__":
    exit_rank(main())
