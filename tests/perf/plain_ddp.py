"""The baseline for `bench run synthetic`: the plainest DDP training loop on random tensors.

    torchrun --standalone --nproc-per-node 2 tests/perf/plain_ddp.py MODEL IMAGE_SIZE BATCH STEPS WARMUP

Rank 0 prints one JSON line: images_per_s over all ranks (slowest rank's time).
"""

import json
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
world = dist.get_world_size()
model_name, image_size, batch, steps, warmup = sys.argv[1], *(int(a) for a in sys.argv[2:6])
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
if dist.get_rank() == 0:
    print(json.dumps({"images_per_s": batch * world * steps / elapsed.item()}))
dist.destroy_process_group()
