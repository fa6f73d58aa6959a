"""The baseline for `bench run allreduce`: the plainest torch.distributed loop of one collective.

    torchrun --standalone --nproc-per-node 2 tests/perf/plain_collective.py COLLECTIVE SIZE_BYTES ITERS WARMUP

COLLECTIVE is all_reduce or all_to_all. Rank 0 prints one JSON line: size_bytes, time_us (worst
rank's average), busbw_gbps, with nccl-tests' bus factors (PERFORMANCE.md): 2(n-1)/n for
all_reduce, (n-1)/n for all_to_all. `measure` is the loop alone, for fidelity.py's runs of both
sides in one process group.
"""

import json
import sys
import time

import torch
import torch.distributed as dist


def measure(name: str, size: int, iters: int, warmup: int) -> float:
    """busbw in GB/s of `iters` calls after `warmup`, the worst rank's average time."""
    n = dist.get_world_size()
    x = torch.ones(size // 4)
    if name == "all_reduce":
        factor = 2 * (n - 1) / n

        def call():
            dist.all_reduce(x)

    else:
        factor = (n - 1) / n
        y = torch.empty_like(x)

        def call():
            dist.all_to_all_single(y, x)

    for _ in range(warmup):
        call()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        call()
    elapsed = torch.tensor([(time.perf_counter() - t0) / iters])
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return size / elapsed.item() / 1e9 * factor


if __name__ == "__main__":
    dist.init_process_group("gloo")
    size = int(sys.argv[2])
    busbw = measure(sys.argv[1], size, int(sys.argv[3]), int(sys.argv[4]))
    if dist.get_rank() == 0:
        print(json.dumps({"size_bytes": size, "busbw_gbps": busbw}))
    dist.destroy_process_group()
