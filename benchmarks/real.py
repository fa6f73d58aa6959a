"""ResNet DDP training on real images: torchvision ImageFolder, standard ImageNet training
transforms, DistributedSampler and a DataLoader with workers, pinned memory and persistent
workers.

    bench run real --data-dir /datasets/imagenet/train --workers 8 --nproc 8
    bench run real --nproc 2                 # no --data-dir: a generated JPEG set in the cache
    torchrun --nproc-per-node 8 -m benchmarks.real --data-dir /data/train --json out.json

Like NVIDIA's DeepLearningExamples it reports total throughput (data + compute, images_per_s),
compute-only throughput (compute_images_per_s) and the fraction of step time spent waiting
for data (data_wait_fraction).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import datasets, transforms

from .catalog import TRAINING_DEFAULTS as D
from .common import OneLineParser, UsageError, spread
from .imagefolder import count_images, ensure_imagefolder
from .runtime import Context, Workload, exit_rank, gather_rows
from .runtime import main as run_main
from .training import (
    add_training_args,
    breakdown,
    build_trainer,
    check_training_args,
    interleaved,
    log_breakdown,
    per_gpu_batch,
    sync,
    throughput,
    training_params,
)

# torchvision's ImageNet normalisation constants.
_MEAN, _STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def default_cache() -> Path:
    return Path(os.environ.get("BENCH_DATA_CACHE") or Path.home() / ".cache" / "bench-scaling")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="bench run real", description=__doc__.split("\n\n")[0])
    add_training_args(p)
    g = p.add_argument_group("data")
    g.add_argument("--data-dir", help="ImageFolder root (<dir>/<class>/<image>); default: a generated set")
    g.add_argument(
        "--workers", type=int, default=D.workers, help="DataLoader worker processes per rank (default %(default)s)"
    )
    g.add_argument(
        "--data-cache", help="where a generated set is kept (default $BENCH_DATA_CACHE or ~/.cache/bench-scaling)"
    )
    g.add_argument(
        "--data-classes", type=int, default=D.data_classes, help="classes of a generated set (default %(default)s)"
    )
    g.add_argument(
        "--data-images-per-class",
        type=int,
        default=D.data_images_per_class,
        help="images per class of a generated set (default %(default)s)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the generated data set and of the sampler's shuffle (default 0)"
    )
    return p


def check_args(args: argparse.Namespace, world_size: int | None) -> None:
    check_training_args(args, world_size)
    if args.workers < 0:
        raise UsageError(f"--workers must be 0 or more, found {args.workers}")
    if args.data_dir is not None:
        path = Path(args.data_dir)
        if not path.is_dir():
            raise UsageError(f"--data-dir {args.data_dir}: no such directory")
        if count_images(path) == 0:
            raise UsageError(
                f"--data-dir {args.data_dir}: no images in class folders "
                f"(ImageFolder layout: <dir>/<class>/<image>.jpg)"
            )
    elif args.data_classes < 1 or args.data_images_per_class < 1:
        raise UsageError("--data-classes and --data-images-per-class must be at least 1")


def _data_dir(args: argparse.Namespace, ctx: Context) -> Path:
    if args.data_dir is not None:
        return Path(args.data_dir)
    size = max(args.image_size * 8 // 7, 16)  # ImageNet-like: a bit larger than the crop
    root = Path(args.data_cache) if args.data_cache else default_cache()
    # One builder per node; the others wait and then find the set complete.
    if ctx.launch.local_rank == 0:
        ensure_imagefolder(root, args.data_classes, args.data_images_per_class, size, seed=args.seed)
    dist.barrier()
    return ensure_imagefolder(root, args.data_classes, args.data_images_per_class, size, seed=args.seed)


def measure(args: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    world, rank = ctx.launch.world_size, ctx.launch.rank
    batch, scaling = per_gpu_batch(args, world)
    data_dir = _data_dir(args, ctx)
    tf = transforms.Compose(
        [
            transforms.RandomResizedCrop(args.image_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(_MEAN, _STD),
        ]
    )
    dataset = datasets.ImageFolder(str(data_dir), transform=tf)
    sampler: DistributedSampler = DistributedSampler(
        dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed, drop_last=True
    )
    if len(sampler) < batch:
        raise UsageError(
            f"{data_dir} has {len(dataset)} images: fewer than one batch of {batch} per rank for {world} ranks"
        )
    cuda = ctx.device.type == "cuda"
    loader = DataLoader(
        dataset,
        batch_size=batch,
        sampler=sampler,
        num_workers=args.workers,
        pin_memory=cuda,
        persistent_workers=args.workers > 0,
        drop_last=True,
    )
    trainer = build_trainer(args, ctx)
    ctx.log(
        f"# real {args.model} {scaling} scaling: batch {batch} per rank, world size {world}, "
        f"{len(dataset)} images in {len(dataset.classes)} classes at {data_dir}, {args.workers} workers, "
        f"amp {trainer.amp}, device {ctx.device.type}, backend {ctx.backend}"
    )

    epoch = 0
    sampler.set_epoch(epoch)
    batches = iter(loader)

    def next_batch():
        nonlocal epoch, batches
        try:
            return next(batches)
        except StopIteration:
            epoch += 1
            sampler.set_epoch(epoch)
            batches = iter(loader)
            return next(batches)

    warmup_ms: list[float] = []
    total_s: list[float] = []
    wait_s: list[float] = []
    last: list[Any] = []  # the batch of the last step, on the device

    def one_step(phase: str) -> tuple[float, float]:
        """(seconds in all, seconds waiting for data) of one step on the next batch."""
        ctx.progress(phase)
        t0 = time.perf_counter()
        images, labels = next_batch()
        images = images.to(ctx.device, non_blocking=True, memory_format=trainer.memory_format)
        labels = labels.to(ctx.device, non_blocking=True)
        sync(ctx)  # the copy to the device counts as waiting for data
        t1 = time.perf_counter()
        trainer.step(images, labels)
        sync(ctx)
        last[:] = [images, labels]
        return time.perf_counter() - t0, t1 - t0

    for i in range(args.warmup_steps):
        warmup_ms.append(one_step(f"warmup step {i + 1}")[0] * 1e3)

    def measured(i: int) -> None:
        total, wait = one_step(f"step {i + 1}")
        total_s.append(total)
        wait_s.append(wait)

    # compute only: the last step's batch again, already on the device, so no data wait either
    free_s = interleaved(ctx, args.steps, args.sync_free_steps, trainer.no_sync, measured, lambda: trainer.step(*last))

    result = training_params(args, trainer, batch, scaling, world)
    result.update(throughput(ctx, batch, total_s))
    compute_per_rank = gather_rows([t - w for t, w in zip(total_s, wait_s)], ctx.device, world)
    wait_per_rank = gather_rows(wait_s, ctx.device, world)
    images = batch * world * args.steps
    result["compute_images_per_s"] = images / max(sum(r) for r in compute_per_rank)
    result["data_wait_fraction"] = sum(map(sum, wait_per_rank)) / (
        sum(map(sum, wait_per_rank)) + sum(map(sum, compute_per_rank))
    )
    result["samples"]["data_wait_ms"] = [max(r[i] for r in wait_per_rank) * 1e3 for i in range(args.steps)]
    result.update(breakdown(ctx, result["step_time_ms"], free_s, spread(result["samples"]["data_wait_ms"])["median"]))
    result["warmup"] = {"step_time_ms": warmup_ms}
    result["data"] = {
        "path": str(data_dir),
        "images": len(dataset),
        "classes": len(dataset.classes),
        "workers": args.workers,
        "generated": args.data_dir is None,
    }
    ctx.log(
        f"# {result['images_per_s']:.1f} images/s total (data + compute), "
        f"{result['compute_images_per_s']:.1f} compute-only, {result['images_per_s_per_gpu']:.1f} per GPU, "
        f"waiting for data {result['data_wait_fraction']:.1%} of step time"
    )
    log_breakdown(ctx, result)
    return result


WORKLOAD = Workload("real", build_parser, measure, check_args)


def main(argv: list[str] | None = None) -> int:
    return run_main(WORKLOAD, argv)


if __name__ == "__main__":
    exit_rank(main())
