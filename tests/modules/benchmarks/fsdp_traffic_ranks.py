"""Run by test_transformer.py under torchrun on gloo: the transformer's SMALL shape wrapped as
the workload wraps it, one training step under torch's profiler, and what the step asked gloo to
carry, summed from the profiler's c10d all-gather and reduce-scatter events (their tensors'
element counts and dtypes), printed by rank 0 as JSON beside the workload's own step_traffic().

    python -m torch.distributed.run --standalone --nproc-per-node 2 fsdp_traffic_ranks.py PARAM REDUCE
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from benchmarks.common import detect_launch
from benchmarks.runtime import Context
from benchmarks.transformer import Decoder, Shape, step_traffic, wrap

SIZES = {"c10::BFloat16": 2, "BFloat16": 2, "float": 4, "Float": 4}


def main() -> None:
    param, reduce = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    launch = detect_launch(os.environ)
    assert launch is not None
    ctx = Context(launch=launch, device=torch.device("cpu"), backend="gloo")
    torch.manual_seed(0)
    model = Decoder(Shape(layers=2, width=32, heads=4, seq_len=16, vocab=64))
    expected = step_traffic(model, (param, reduce), launch.world_size)
    runnable, _ = wrap(model, (param, reduce), ctx)
    tokens = torch.randint(0, 64, (2, 17))

    def step() -> None:
        logits = runnable(tokens[:, :-1])
        torch.nn.functional.cross_entropy(logits.reshape(-1, 64).float(), tokens[:, 1:].reshape(-1)).backward()

    step()  # the first step builds FSDP's state; the second is the one counted
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    seen = {"all_gather_bytes": 0, "reduce_scatter_bytes": 0, "calls": []}
    for e in prof.events():
        # (output, input, ...): an all-gather's output and a reduce-scatter's input are its size
        if e.name in ("c10d::_allgather_base_", "c10d::_reduce_scatter_base_"):
            out, inp = e.input_shapes[0], e.input_shapes[1]
            dtype = e.input_dtypes[0]
            gather = "allgather" in e.name
            numel = (out if gather else inp)[0]
            seen["all_gather_bytes" if gather else "reduce_scatter_bytes"] += numel * SIZES[dtype]
            seen["calls"].append([e.name, numel, dtype])
    if launch.rank == 0:
        print(json.dumps({"expected": expected, "seen": seen}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
