"""What a workload's rank will hold in memory, estimated before it allocates, against what its
device has (docs/concepts/hardening.md, "Memory"). A message or a model that cannot fit is refused with
one line naming the setting to lower, rather than found by the allocator as a traceback per rank
or by the OOM killer.

    collectives   the input and output buffers of the largest message (benchmarks/collectives.py
                  allocates both once), and the link probe's send and receive buffers
    gemm          its three matrices and the finiteness check's mask of the product
    transformer   the tensors benchmarks/transformer.py's step holds at its peak, counted from
                  what each operation keeps for the backward pass (docs/concepts/hardening.md, "Memory"):
                  parameters, gradients and AdamW's two moments, 16 bytes a parameter in fp32
                  (sharded over the world under FSDP, with the all-gathered root and two blocks on
                  top; DDP's gradient buckets, 4 more, under DDP; autocast's 16-bit copies of the
                  weights, 2 more, under mixed precision); per layer 20·s·b·h activations, 4 bytes
                  each in fp32, 44·s·b·h bytes under autocast, whose residual stream stays fp32,
                  and the attention's log-sum-exp, 4·a·s·b bytes: scaled_dot_product_attention's
                  fused kernels never hold the s x s scores (Korthikanti et al. 2022, "Reducing
                  Activation Recomputation in Large Transformer Models", eq. 1, counts 5·a·s²·b
                  bytes for them, and two bytes of dropout masks a layer this model has not);
                  the backward pass's gradients of one block's MLP, 9·s·b·h values; and the
                  logits, their log-softmax and the gradients of both, 18·b·s·V bytes. Under
                  activation checkpointing a layer keeps its input, 4·s·b·h bytes, and one layer
                  at a time holds the whole of its activations again in the backward pass

An estimate: allocator caching, CUDA context and NCCL's buffers come on top, so a workload that
fits on paper can still fail; one that does not fit on paper never runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .catalog import Shape, decoder_params
from .common import UsageError

if TYPE_CHECKING:
    import torch


def available(device: torch.device, local_ranks: int) -> tuple[int, str]:
    """(bytes a rank may use, where that figure comes from): a GPU's free memory, or this node's
    MemAvailable shared among its ranks."""
    if device.type == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(device)
        return int(free), f"free on {device}"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                kib = int(line.split()[1])
                return kib * 1024 // max(1, local_ranks), f"available to each of {local_ranks} rank(s) on this node"
    except (OSError, ValueError, IndexError):
        pass
    return 2**63, "unknown"


def check(need: int, device: torch.device, local_ranks: int, what: str, setting: str) -> None:
    """UsageError when `need` bytes per rank exceed what the device has."""
    have, where = available(device, local_ranks)
    if need > have:
        raise UsageError(
            f"{what} needs about {_gib(need)} per rank, more than the {_gib(have)} {where}; lower {setting}"
        )


def collective_bytes(max_message: int, link_bytes: int) -> int:
    return 2 * max_message + 2 * link_bytes


def gemm_bytes(size: int, element: int) -> int:
    return 3 * size * size * element + size * size


def transformer_bytes(shape: Shape, batch: int, world: int, fsdp: bool, half: bool, checkpointed: bool = False) -> int:
    d = shape.width
    params = decoder_params(shape) + shape.seq_len * d  # the position table too
    if fsdp:  # each rank's shard, and the root (embeddings, final norm) and two blocks unsharded with their gradients
        state = 16 * params // world + 8 * (params - shape.layers * 12 * d * d + 2 * 12 * d * d)
    else:
        state = 20 * params
    if half:
        state += 2 * params
    sbh = shape.seq_len * batch * d
    per_layer = (44 if half else 80) * sbh + 4 * shape.heads * shape.seq_len * batch
    backward = 9 * sbh * (2 if half else 4)
    final = 2 * sbh * 4  # the final norm's input and output, the head's input
    logits = 18 * batch * shape.seq_len * shape.vocab
    # under activation checkpointing a block keeps its fp32 input, and one block at a time is
    # computed again, whole, for its backward pass
    activations = shape.layers * 4 * sbh + per_layer if checkpointed else shape.layers * per_layer
    return state + activations + backward + final + logits


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"
