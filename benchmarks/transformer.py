"""Decoder-only transformer training on synthetic tokens, under DDP or FSDP: the traffic of
LLM training (DDP's gradient all-reduce; FSDP's parameter all-gather and gradient
reduce-scatter), with no data loading.

    bench run transformer --nproc 2                                   # small defaults, CPU
    bench run transformer --parallel fsdp --global-batch 16 --nproc 4 # strong scaling
    torchrun --nproc-per-node 8 -m benchmarks.transformer --preset 1.3b --parallel fsdp \\
        --peak-tflops 989 --json out.json

A GPT-style model: token embedding tied to the output projection, learned positions, pre-norm
blocks of causal self-attention and a 4x MLP (GELU), no biases in the linear layers.
Reports tokens_per_s over all ranks and per GPU, flops_per_token = 6N + 12·L·D·T (PaLM,
Chowdhery et al. 2022, appendix B; docs/reference/sources.md), achieved TFLOP/s per GPU and mfu,
that over --peak-tflops (null without it: never a guessed peak). --sync-free-steps steps with
gradient synchronisation skipped, spread among the measured ones, give the compute-only step and
the ranks' spread, from which the step's exposed communication and rank imbalance
(docs/concepts/breakdown.md).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

from . import memory
from .catalog import AMPS, PARALLEL, PARAM_DTYPES, PRESETS, REDUCE_DTYPES, Shape, flops_per_token
from .catalog import TRANSFORMER_DEFAULTS as D
from .common import OneLineParser, UsageError, add_common_args, positive_arg
from .runtime import Context, Workload, exit_rank
from .runtime import main as run_main
from .training import (
    breakdown,
    choose_amp,
    ddp_traffic,
    log_breakdown,
    measured_steps,
    mixed_precision,
    per_gpu_batch,
    throughput,
    timed_steps,
)


class Block(nn.Module):
    def __init__(self, width: int, heads: int, checkpointed: bool = False):
        super().__init__()
        self.heads = heads
        self.checkpointed = checkpointed
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width, bias=False)
        self.down = nn.Linear(4 * width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block; under activation checkpointing it keeps only its input and runs again in
        the backward pass. The checkpoint is inside the module, so that FSDP's hooks, on the
        module's call, gather its parameters once for the backward pass and the recompute alike."""
        if self.checkpointed:
            return checkpoint(self.compute, x, use_reentrant=False)
        return self.compute(x)

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Decoder(nn.Module):
    def __init__(self, shape: Shape, checkpointed: bool = False):
        super().__init__()
        self.tokens = nn.Embedding(shape.vocab, shape.width)
        self.positions = nn.Embedding(shape.seq_len, shape.width)
        self.blocks = nn.ModuleList(Block(shape.width, shape.heads, checkpointed) for _ in range(shape.layers))
        self.norm = nn.LayerNorm(shape.width)
        self.head = nn.Linear(shape.width, shape.vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tokens(idx) + self.positions(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def counted_parameters(model: Decoder) -> int:
    """N of the 6N count: every parameter once (the tied embedding is the output projection's
    matmul), but the position table, a lookup that does no multiply-adds."""
    positions = {id(p) for p in model.positions.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in positions)


# A stated peak below these is no device's (a V100 does 15.7 TFLOP/s in FP32, one core of a
# laptop a few GFLOP/s); an MFU against it would be thousands of per cent, or infinite.
MIN_PEAK_TFLOPS_GPU = 1.0
MIN_PEAK_TFLOPS_CPU = 1e-3


def mfu(tokens_per_s_per_gpu: float, flops: int, peak_tflops: float | None) -> float | None:
    """Model FLOPs utilisation: achieved FLOP/s per GPU over the stated peak; None without one,
    and None above 1, which no device reaches: the stated peak is wrong (the log says so)."""
    if not peak_tflops:
        return None
    share = tokens_per_s_per_gpu * flops / (peak_tflops * 1e12)
    return share if share <= 1 else None


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="bench run transformer", description=__doc__.split("\n\n")[0])
    g = p.add_argument_group("model")
    g.add_argument("--preset", choices=sorted(PRESETS), default=D.preset, help="model shape (default %(default)s)")
    for flag, what in (
        ("--layers", "blocks"),
        ("--width", "model width D"),
        ("--heads", "attention heads, dividing the width"),
        ("--seq-len", "tokens per sequence T"),
        ("--vocab", "vocabulary size"),
    ):
        g.add_argument(flag, type=int, default=None, help=f"{what} (default: the preset's)")
    t = p.add_argument_group("training")
    t.add_argument("--parallel", choices=PARALLEL, default=D.parallel, help="ddp, or fsdp (FSDP2's fully_shard)")
    t.add_argument(
        "--batch-size",
        type=int,
        default=D.batch_size,
        help="sequences per GPU per step, weak scaling (default %(default)s)",
    )
    t.add_argument(
        "--global-batch",
        type=int,
        default=None,
        help="sequences per step over all GPUs, strong scaling: each rank takes global / world size",
    )
    t.add_argument("--steps", type=int, default=D.steps, help="measured steps (default %(default)s)")
    t.add_argument(
        "--warmup-steps", type=int, default=D.warmup_steps, help="steps run before measuring (default %(default)s)"
    )
    t.add_argument(
        "--sync-free-steps",
        type=int,
        default=D.sync_free_steps,
        help="steps timed with gradient synchronisation skipped, among the measured ones, after one untimed "
        "(default %(default)s, 0 for none)",
    )
    t.add_argument(
        "--amp",
        choices=AMPS,
        default=D.amp,
        help="mixed precision: auto is bf16 on GPUs of compute capability 8.0 and up, fp16 below, off on CPU",
    )
    t.add_argument(
        "--param-dtype",
        choices=PARAM_DTYPES,
        default=D.param_dtype,
        help="fsdp: the dtype parameters are all-gathered and computed in (FSDP2's MixedPrecisionPolicy); "
        "auto, the default, is bf16 under --amp bf16 and fp32 with it off",
    )
    t.add_argument(
        "--reduce-dtype",
        choices=REDUCE_DTYPES,
        default=D.reduce_dtype,
        help=f"fsdp: the dtype gradients are reduce-scattered in (default {D.reduce_dtype})",
    )
    t.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="keep each block's input only and compute the block again in the backward pass",
    )
    t.add_argument("--lr", type=positive_arg, default=3e-4, help="AdamW learning rate (default 3e-4)")
    t.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="the GPU's peak dense TFLOP/s at the training precision, for MFU (e.g. 989 for H100 SXM bf16)",
    )
    t.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the weights (every rank's alike) and of each rank's tokens (default 0)",
    )
    add_common_args(p)
    return p


def shape_of(args: argparse.Namespace) -> Shape:
    base = PRESETS[args.preset]
    return Shape(
        layers=args.layers or base.layers,
        width=args.width or base.width,
        heads=args.heads or base.heads,
        seq_len=args.seq_len or base.seq_len,
        vocab=args.vocab or base.vocab,
    )


def check_args(args: argparse.Namespace, world_size: int | None) -> None:
    for flag, value in (
        ("--layers", args.layers),
        ("--width", args.width),
        ("--heads", args.heads),
        ("--seq-len", args.seq_len),
        ("--vocab", args.vocab),
    ):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1, found {value}")
    shape = shape_of(args)
    if shape.width % shape.heads:
        raise UsageError(f"--width {shape.width} is not divisible by --heads {shape.heads}")
    for flag, value, low in (
        ("--batch-size", args.batch_size, 1),
        ("--steps", args.steps, 1),
        ("--warmup-steps", args.warmup_steps, 0),
        ("--sync-free-steps", args.sync_free_steps, 0),
    ):
        if value < low:
            raise UsageError(f"{flag} must be at least {low}, found {value}")
    if args.peak_tflops is not None:
        gpu = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
        floor = MIN_PEAK_TFLOPS_GPU if gpu else MIN_PEAK_TFLOPS_CPU
        if not (floor <= args.peak_tflops < 1e6):
            raise UsageError(
                f"--peak-tflops {args.peak_tflops:g}: give the {'GPU' if gpu else 'CPU'}'s peak dense TFLOP/s, "
                f"from {floor:g} (no {'GPU' if gpu else 'CPU'} is slower) to 1e6"
            )
    _check_fsdp_amp(args.parallel, args.amp)
    if args.parallel != "fsdp":
        for flag, value, default in (
            ("--param-dtype", args.param_dtype, D.param_dtype),
            ("--reduce-dtype", args.reduce_dtype, D.reduce_dtype),
        ):
            if value != default:
                raise UsageError(
                    f"{flag} is FSDP's mixed-precision policy; with --parallel {args.parallel} gradients are "
                    "all-reduced in the parameters' fp32: use --parallel fsdp, or leave it out"
                )
    if args.parallel == "fsdp" and (args.device == "cpu" or not torch.cuda.is_available()):
        _fully_shard(torch.device("cpu"))  # refused here, before any rank starts, where it cannot run
    if args.global_batch is not None and world_size:
        per_gpu_batch(args, world_size)


def _check_fsdp_amp(parallel: str, amp: str) -> None:
    if parallel == "fsdp" and amp == "fp16":
        raise UsageError("--amp fp16 with --parallel fsdp needs a sharded gradient scaler; use --amp bf16")


def _fully_shard(device: torch.device) -> tuple[Callable[..., Any], Any]:
    """FSDP2's fully_shard and MixedPrecisionPolicy: public from torch 2.6, under _composable
    before (from 2.3, the oldest torch pyproject allows). The _composable one makes CUDA streams
    whatever the device (torch 2.3 on this CPU-only machine: "CUDA driver version is
    insufficient"), so on the CPU it is refused."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        if device.type != "cuda":
            raise UsageError(
                f"--parallel fsdp on the CPU needs torch 2.6 or later (FSDP2's public fully_shard); "
                f"this is torch {torch.__version__}: use --parallel ddp, or a GPU"
            ) from None
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    return fully_shard, MixedPrecisionPolicy


DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def fsdp_policy(args: argparse.Namespace, amp: str) -> tuple[str, str] | None:
    """(parameter dtype, reduction dtype) of FSDP2's mixed precision, None under DDP."""
    if args.parallel != "fsdp":
        return None
    param = args.param_dtype
    return ("bf16" if amp == "bf16" else "fp32") if param == "auto" else param, args.reduce_dtype


def wrap(model: Decoder, policy: tuple[str, str] | None, ctx: Context) -> tuple[nn.Module, Callable[[], Any]]:
    """The model under DDP (no policy) or FSDP2 with `policy`, and a context manager that skips
    gradient synchronisation for the steps inside it: DDP's no_sync; FSDP2's
    set_requires_gradient_sync(False), which skips the gradients' reduce-scatter but still
    all-gathers the parameters (docs/concepts/breakdown.md). Under FSDP each block is a unit
    resharded after its forward pass, and the root (embeddings and final norm) is kept gathered
    until its backward, as step_traffic() counts."""
    cuda = ctx.device.type == "cuda"
    if policy is None:
        ddp = DDP(model, device_ids=[ctx.device.index] if cuda else None)
        return ddp, ddp.no_sync
    from torch.distributed.device_mesh import init_device_mesh

    fully_shard, mixed_precision_policy = _fully_shard(ctx.device)
    mesh = init_device_mesh(ctx.device.type, (ctx.launch.world_size,))
    mp = mixed_precision_policy(param_dtype=DTYPES[policy[0]], reduce_dtype=DTYPES[policy[1]])
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=True)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=False)

    @contextlib.contextmanager
    def no_sync() -> Iterator[None]:
        model.set_requires_gradient_sync(False)  # type: ignore[operator]
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)  # type: ignore[operator]

    return model, no_sync


BYTES = {"bf16": 2, "fp32": 4}


def step_traffic(model: Decoder, policy: tuple[str, str] | None, world: int) -> dict[str, Any]:
    """The collectives one synchronised step calls, in bytes (docs/concepts/workloads.md, "What a
    step sends"), as nccl-tests sizes them: an all-gather's output, a reduce-scatter's input.
    Under DDP, ddp_traffic's. FSDP2 pads each parameter's first dimension to a multiple of the
    world size; it all-gathers each block for its forward and again for its backward pass and
    the root once, in the policy's parameter dtype, and reduce-scatters every unit's gradients
    once, in its reduction dtype. A sync-free step sends the all-gathers alone. Each rank sends
    (p-1)/p of each by ring."""
    if policy is None:
        return ddp_traffic(model.parameters(), world)  # parameters() gives the tied one once

    def padded(params: list[nn.Parameter]) -> int:
        return sum(-(-p.shape[0] // world) * world * (p.numel() // p.shape[0]) for p in params)

    in_blocks = {id(p) for p in model.blocks.parameters()}
    blocks = padded(list(model.blocks.parameters()))
    root = padded([p for p in model.parameters() if id(p) not in in_blocks])
    gathered = (2 * blocks + root) * BYTES[policy[0]]
    scattered = (blocks + root) * BYTES[policy[1]]
    return {
        "policy": {"param_dtype": policy[0], "reduce_dtype": policy[1]},
        "all_reduce_bytes": 0,
        "all_gather_bytes": gathered,
        "reduce_scatter_bytes": scattered,
        "sent_bytes_per_rank": round((world - 1) / world * (gathered + scattered)),
    }


def training_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    autocast: Callable[[], Any],
    scaler: Any,
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> Callable[[], None]:
    """One step of next-token training: forward under `autocast`, the loss in fp32, backward
    (scaled when `scaler`), the optimizer's step. tests/perf/memory_peaks.py measures it."""

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            logits = model(inputs)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()

    return step


def measure(args: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    world = ctx.launch.world_size
    batch, scaling = per_gpu_batch(args, world)
    shape = shape_of(args)
    amp = choose_amp(args.amp, ctx.device)
    _check_fsdp_amp(args.parallel, amp)  # again: auto is fp16 on GPUs before compute capability 8.0
    policy = fsdp_policy(args, amp)
    checkpointed = args.activation_checkpointing
    memory.check(
        memory.transformer_bytes(shape, batch, world, policy is not None, amp != "off", checkpointed),
        ctx.device,
        ctx.launch.local_world_size,
        f"the transformer ({shape.layers} layers of width {shape.width}, batch {batch} x {shape.seq_len} tokens)",
        "--batch-size, --seq-len, --width or --layers, or shard it with --parallel fsdp",
    )
    torch.manual_seed(args.seed)  # every rank starts from the same weights
    model = Decoder(shape, checkpointed).to(ctx.device)
    n_params = counted_parameters(model)
    flops = flops_per_token(n_params, shape)
    traffic = step_traffic(model, policy, world)
    runnable, no_sync = wrap(model, policy, ctx)
    optimizer = torch.optim.AdamW(runnable.parameters(), lr=args.lr)
    autocast, scaler = mixed_precision(amp, ctx.device)
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1 + ctx.launch.rank)
    tokens = torch.randint(0, shape.vocab, (batch, shape.seq_len + 1), generator=gen).to(ctx.device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    step = training_step(runnable, optimizer, autocast, scaler, inputs, targets)
    ctx.log(
        f"# transformer {args.parallel} {scaling} scaling: {shape.layers} layers, width {shape.width}, "
        f"{shape.heads} heads, {shape.seq_len} tokens x {batch} sequences per rank, vocabulary {shape.vocab}, "
        f"{n_params / 1e6:.1f}M parameters, {flops / 1e9:.3f} GFLOP per token, world size {world}, "
        f"amp {amp}, device {ctx.device.type}, backend {ctx.backend}"
        + (f", FSDP parameters in {policy[0]}, gradients reduced in {policy[1]}" if policy else "")
        + (", activation checkpointing" if checkpointed else "")
        + f"; each step sends {traffic['sent_bytes_per_rank'] / 2**20:.2f} MiB per rank"
    )
    warmup_s = timed_steps(ctx, "warmup step", args.warmup_steps, step)
    step_s, free_s = measured_steps(ctx, args.steps, args.sync_free_steps, no_sync, step)

    seq_tokens = batch * shape.seq_len
    result: dict[str, Any] = {
        "scaling": scaling,
        "batch_size": batch,
        "global_batch": batch * world,
        "params": {
            "model": f"decoder-{shape.layers}x{shape.width}",
            "preset": args.preset,
            "layers": shape.layers,
            "width": shape.width,
            "heads": shape.heads,
            "seq_len": shape.seq_len,
            "vocab": shape.vocab,
            "parallel": args.parallel,
            "steps": args.steps,
            "warmup_steps": args.warmup_steps,
            "sync_free_steps": args.sync_free_steps,
            "amp": amp,
            "param_dtype": policy[0] if policy else None,
            "reduce_dtype": policy[1] if policy else None,
            "activation_checkpointing": checkpointed,
            "optimizer": f"AdamW(lr={args.lr})",
            "peak_tflops": args.peak_tflops,
        },
        "n_params": n_params,
        "flops_per_token": flops,
        "traffic": traffic,
    }
    figures = throughput(ctx, seq_tokens, step_s)
    # throughput() counts items of the batch; here an item is a token
    tokens_per_s = figures.pop("images_per_s")
    per_gpu_tokens = figures.pop("images_per_s_per_gpu")
    result.update(figures)
    result["tokens_per_s"] = tokens_per_s
    result["tokens_per_s_per_gpu"] = per_gpu_tokens
    result["achieved_tflops_per_gpu"] = per_gpu_tokens * flops / 1e12
    result["mfu"] = mfu(per_gpu_tokens, flops, args.peak_tflops)
    result.update(breakdown(ctx, result["step_time_ms"], free_s))
    result["warmup"] = {"step_time_ms": [s * 1e3 for s in warmup_s]}
    ctx.log(
        f"# {tokens_per_s:.1f} tokens/s total, {per_gpu_tokens:.1f} per GPU, "
        f"{result['achieved_tflops_per_gpu']:.4f} TFLOP/s per GPU, MFU "
        + (
            f"{result['mfu']:.1%}"
            if result["mfu"] is not None
            else "n/a (no --peak-tflops)"
            if not args.peak_tflops
            else f"not recorded: above 100% of --peak-tflops {args.peak_tflops:g}, which must be too low"
        )
        + f"; step {result['step_time_ms']:.1f} ms median"
    )
    log_breakdown(ctx, result)
    return result


WORKLOAD = Workload("transformer", build_parser, measure, check_args)


def main(argv: list[str] | None = None) -> int:
    return run_main(WORKLOAD, argv)


if __name__ == "__main__":
    exit_rank(main())
