"""The baselines for `bench run synthetic` and `bench run transformer`: the plainest DDP loop.

    torchrun --standalone --nproc-per-node 2 tests/perf/plain_training.py resnet MODEL IMAGE_SIZE BATCH STEPS WARMUP
    torchrun --standalone --nproc-per-node 2 tests/perf/plain_training.py transformer PRESET BATCH STEPS WARMUP

The model is the thing measured, so it is the one bench trains: torchvision's ResNet on random
images, or bench's own decoder (benchmarks/transformer.py) on random tokens. Everything around
it is written here, as anyone would: SGD or AdamW, cross-entropy, the wall time of the steps
after the warm-up ones. Rank 0 prints one JSON line: images_per_s or tokens_per_s over all ranks
(the slowest rank's time). `measure` is the loop alone, for fidelity.py's runs of both sides in
one process group.
"""

import json
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def resnet(name: str, image_size: int, batch: int):
    """(the DDP model, its optimizer, inputs, targets, items per step): images."""
    import torchvision

    model = DDP(torchvision.models.get_model(name, weights=None, num_classes=1000))
    x, y = torch.randn(batch, 3, image_size, image_size), torch.randint(0, 1000, (batch,))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), x, y, batch


def transformer(preset: str, batch: int):
    """The same for bench's decoder: tokens."""
    from benchmarks.catalog import PRESETS
    from benchmarks.transformer import Decoder

    shape = PRESETS[preset]
    model = DDP(Decoder(shape))
    tokens = torch.randint(0, shape.vocab, (batch, shape.seq_len + 1))
    x, y = tokens[:, :-1], tokens[:, 1:].reshape(-1)
    return model, torch.optim.AdamW(model.parameters(), lr=3e-4), x, y, batch * shape.seq_len


def measure(kind: str, name: str, *sizes: int) -> float:
    """Items per second over all ranks: `sizes` are the model's (image size and batch, or batch),
    then the measured steps and the warm-up steps."""
    *shape, steps, warmup = sizes
    model, opt, x, y, items = {"resnet": resnet, "transformer": transformer}[kind](name, *shape)

    def step():
        opt.zero_grad(set_to_none=True)
        out = model(x)
        F.cross_entropy(out.reshape(-1, out.shape[-1]), y).backward()
        opt.step()

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = torch.tensor([time.perf_counter() - t0])
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return items * dist.get_world_size() * steps / elapsed.item()


if __name__ == "__main__":
    dist.init_process_group("gloo")
    rate = measure(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:]))
    if dist.get_rank() == 0:
        print(json.dumps({"images_per_s" if sys.argv[1] == "resnet" else "tokens_per_s": rate}))
    dist.destroy_process_group()
