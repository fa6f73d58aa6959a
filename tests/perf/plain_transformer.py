"""The baseline for `bench run transformer`: the plainest DDP loop around bench's decoder.

    torchrun --standalone --nproc-per-node 2 tests/perf/plain_transformer.py PRESET BATCH STEPS WARMUP

The model is the thing measured, so it is bench's own (benchmarks/transformer.py's Decoder, as
plain_ddp.py takes torchvision's ResNet); everything around it is written here, as anyone would:
AdamW, cross-entropy on random tokens, wall time of the steps. Rank 0 prints one JSON line:
tokens_per_s over all ranks (the slowest rank's time). `measure` is the loop alone, for
fidelity.py's runs of both sides in one process group.
"""

import json
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from benchmarks.catalog import PRESETS
from benchmarks.transformer import Decoder


def measure(preset: str, batch: int, steps: int, warmup: int) -> float:
    world = dist.get_world_size()
    shape = PRESETS[preset]
    model = DDP(Decoder(shape))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    tokens = torch.randint(0, shape.vocab, (batch, shape.seq_len + 1))
    x, y = tokens[:, :-1], tokens[:, 1:]

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x).reshape(-1, shape.vocab), y.reshape(-1)).backward()
        opt.step()

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = torch.tensor([time.perf_counter() - t0])
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return batch * shape.seq_len * world * steps / elapsed.item()


if __name__ == "__main__":
    dist.init_process_group("gloo")
    tokens_per_s = measure(sys.argv[1], *(int(a) for a in sys.argv[2:5]))
    if dist.get_rank() == 0:
        print(json.dumps({"tokens_per_s": tokens_per_s}))
    dist.destroy_process_group()
