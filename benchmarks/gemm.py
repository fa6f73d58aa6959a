"""Matrix-multiply throughput of every rank on its own device: the node check's compute probe.

    bench run gemm --nproc 2
    torchrun --nproc-per-node 8 -m benchmarks.gemm --size 8192 --json out.json

Each rank multiplies two `size x size` matrices `iters` times after `warmup` untimed calls and
counts 2·size³ FLOPs per call; the device is synchronised before the clock stops. No rank
waits for another while it is timed, so a slow device (clocks held down, a thermal or power
cap) shows as its own figure, not as everyone's; the operands stay on the device, so the host
link is not measured. Reports each rank's TFLOP/s with its host, and the slowest and median rank.
The default precision is bf16 on a GPU and fp32 on the CPU, where bf16 matmul is emulated.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from . import memory
from .common import OneLineParser, UsageError, add_common_args
from .runtime import Context, Workload, exit_rank, gather_rows
from .runtime import main as run_main

DTYPES = {"auto": None, "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="bench run gemm", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=0, help="matrix side (default 8192 on a GPU, 1024 on the CPU)")
    p.add_argument("--iters", type=int, default=20, help="timed multiplications (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed multiplications first (default 3)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="auto", help="bf16 on a GPU, fp32 on the CPU (auto)")
    add_common_args(p)
    return p


def check(args: argparse.Namespace, world: int | None) -> None:
    for flag, value, least in (("--size", args.size, 0), ("--iters", args.iters, 1), ("--warmup", args.warmup, 0)):
        if value < least:
            raise UsageError(f"{flag} must be at least {least}, found {value}")
    if args.size > 65536:
        raise UsageError(f"--size {args.size} needs {3 * args.size**2 * 4 / 2**30:.0f} GiB per rank; at most 65536")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(args: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    gpu = ctx.device.type == "cuda"
    size = args.size or (8192 if gpu else 1024)
    dtype = DTYPES[args.dtype] or (torch.bfloat16 if gpu else torch.float32)
    memory.check(
        memory.gemm_bytes(size, dtype.itemsize),
        ctx.device,
        ctx.launch.local_world_size,
        f"gemm of {size}x{size} {str(dtype).removeprefix('torch.')}",
        "--size",
    )
    gen = torch.Generator(device="cpu").manual_seed(ctx.launch.rank)
    a = torch.randn(size, size, generator=gen).to(ctx.device, dtype)
    b = torch.randn(size, size, generator=gen).to(ctx.device, dtype)
    out = torch.empty(size, size, device=ctx.device, dtype=dtype)
    ctx.log(f"# gemm {size}x{size} {str(dtype).removeprefix('torch.')}, {args.iters} timed calls per rank")
    ctx.progress("warmup")
    for _ in range(args.warmup):
        torch.matmul(a, b, out=out)
    _sync(ctx.device)
    ctx.progress("timed multiplications")
    start = time.perf_counter()
    for _ in range(args.iters):
        torch.matmul(a, b, out=out)
    _sync(ctx.device)
    elapsed = time.perf_counter() - start
    if not torch.isfinite(out).all():
        raise RuntimeError(f"rank {ctx.launch.rank}: the product holds a non-finite value")
    mine = 2 * size**3 * args.iters / elapsed / 1e12
    ctx.progress("gathering the figures")
    every = [row[0] for row in gather_rows([mine], ctx.device, ctx.launch.world_size)]
    result = {
        "params": {"size": size, "dtype": str(dtype).removeprefix("torch."), "iters": args.iters},
        "tflops_per_rank": every,
        "tflops_min": min(every),
        "tflops_median": statistics.median(every),
    }
    ctx.log(f"# TFLOP/s per rank: {' '.join(f'{v:.4g}' for v in every)} (slowest {min(every):.4g})")
    return result


WORKLOAD = Workload("gemm", build_parser, measure, check)


def main(argv: list[str] | None = None) -> int:
    return run_main(WORKLOAD, argv)


if __name__ == "__main__":
    exit_rank(main())
