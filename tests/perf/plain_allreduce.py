"""The baseline for `bench run allreduce`: the plainest torch.distributed all-reduce loop.

    torchrun --standalone --nproc-per-node 2 tests/perf/plain_allreduce.py SIZE_BYTES ITERS WARMUP

Rank 0 prints one JSON line: size_bytes, time_us (worst rank), busbw_gbps (factor 2(n-1)/n).
"""

import json
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
world = dist.get_world_size()
size, iters, warmup = (int(a) for a in sys.argv[1:4])
x = torch.ones(size // 4)
for _ in range(warmup):
    dist.all_reduce(x)
dist.barrier()
t0 = time.perf_counter()
for _ in range(iters):
    dist.all_reduce(x)
elapsed = torch.tensor([(time.perf_counter() - t0) / iters])
dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
if dist.get_rank() == 0:
    t = elapsed.item()
    print(json.dumps({"size_bytes": size, "time_us": t * 1e6, "busbw_gbps": size / t / 1e9 * 2 * (world - 1) / world}))
dist.destroy_process_group()
