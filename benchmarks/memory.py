"""What a workload's rank will hold in memory, estimated before it allocates, against what its
device has (docs/hardening.md, "Memory"). A message or a model that cannot fit is refused with
one line naming the setting to lower, rather than found by the allocator as a traceback per rank
or by the OOM killer.

    collectives   the input and output buffers of the largest message (benchmarks/collectives.py
                  allocates both once), and the link probe's send and receive buffers
    transformer   parameters, gradients and AdamW's two moments, 16 bytes a parameter in fp32
                  (sharded over the world under FSDP), plus activations: per layer
                  s·b·h·(34 + 5·a·s/h) bytes in 16-bit precision (Korthikanti et al. 2022,
                  "Reducing Activation Recomputation in Large Transformer Models", section 4.1,
                  eq. 1), twice that in fp32, and the logits with their gradient, 8·b·s·V bytes

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


def transformer_bytes(shape: Shape, batch: int, world: int, fsdp: bool, half: bool) -> int:
    params = decoder_params(shape) + shape.seq_len * shape.width  # the position table too
    state = 16 * params // (world if fsdp else 1)
    s, b, h, a = shape.seq_len, batch, shape.width, shape.heads
    per_layer = s * b * h * 34 + 5 * a * s * s * b
    activations = shape.layers * per_layer * (1 if half else 2)
    logits = 8 * b * s * shape.vocab
    return state + activations + logits


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"
