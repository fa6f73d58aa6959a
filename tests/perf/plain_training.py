"""The baseline for `bench run synthetic`: the plainest DDP training loop on random tensors.

    torchrun --standalone --nproc-per-node 2 tests/perf/plain_ddp.py MODEL IMAGE_SIZE BATCH STEPS WARMUP

Rank 0 prints one JSON line: images_per_s over all ranks (slowest rank's time). `measure` is the
loop alone, for fidelity.py's runs of both sides in one process group.
"""

import json
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP


def measure(model_name: str, image_size: int, batch: int, steps: int, warmup: int) -> float:
    world = dist.get_world_size()
    model = DDP(torchvision.models.get_model(model_name, weights=None, num_classes=1000))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(batch, 3, image_size, image_size)
    y = torch.randint(0, 1000, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = torch.tensor([time.perf_counter() - t0])
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return batch * world * steps / elapsed.item()


if __name__ == "__main__":
    dist.init_process_group("gloo")
    images_per_s = measure(sys.argv[1], *(int(a) for a in sys.argv[2:6]))
    if dist.get_rank() == 0:
        print(json.dumps({"images_per_s": images_per_s}))
    dist.destroy_process_group()
