"""The transformer's memory estimate (benchmarks/memory.py) against the peak a rank reaches, on the
CPU: each shape trains three steps in a process of its own, one gloo rank under DDP or FSDP, and
the growth of its resident set (the kernel's high-water mark, less what the process held before
the model was built) is set beside the estimate.

    python tests/perf/memory_peaks.py

docs/concepts/hardening.md ("Memory") quotes its output. A GPU's allocator is not measured here: no GPU
is lent to this project.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# (layers, width, heads, tokens, vocabulary, batch): attention-heavy, logits-heavy, balanced, deep
SHAPES = [(2, 256, 4, 2048, 512, 4), (2, 128, 2, 256, 50_000, 8), (4, 512, 8, 512, 8192, 4), (8, 256, 4, 1024, 1024, 8)]
MODES = [("ddp", "off"), ("ddp", "bf16"), ("fsdp", "off")]


def rank(layers: int, width: int, heads: int, seq_len: int, vocab: int, batch: int, parallel: str, amp: str) -> dict:
    """One shape's peak, in this process (a rank of world 1)."""
    import resource
    from types import SimpleNamespace

    import torch
    import torch.distributed as dist

    from benchmarks import memory
    from benchmarks.catalog import Shape
    from benchmarks.training import mixed_precision
    from benchmarks.transformer import Decoder, training_step, wrap

    def resident() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc/self/status")

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(20000 + os.getpid() % 20000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    shape = Shape(layers, width, heads, seq_len, vocab)
    torch.manual_seed(0)
    tokens = torch.randint(0, vocab, (batch, seq_len + 1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    before = resident()
    ctx = SimpleNamespace(device=torch.device("cpu"), launch=SimpleNamespace(world_size=1))
    model, _ = wrap(Decoder(shape), parallel, ctx)  # type: ignore[arg-type]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = training_step(model, optimizer, *mixed_precision(amp, ctx.device), inputs, targets)
    for _ in range(3):
        step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    estimate = memory.transformer_bytes(shape, batch, 1, parallel == "fsdp", amp != "off")
    return {"peak": peak - before, "estimate": estimate}


def main() -> None:
    if len(sys.argv) > 1:
        args = json.loads(sys.argv[1])
        print(json.dumps(rank(*args)))
        return
    print("| layers x width, heads, tokens x batch, vocabulary | parallel, amp | peak | estimate | ratio |")
    print("|---|---|---:|---:|---:|")
    for layers, width, heads, seq_len, vocab, batch in SHAPES:
        for parallel, amp in MODES:
            args = [layers, width, heads, seq_len, vocab, batch, parallel, amp]
            out = subprocess.run(
                [sys.executable, __file__, json.dumps(args)],
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            r = json.loads(out.stdout.splitlines()[-1])
            print(
                f"| {layers} x {width}, {heads}, {seq_len} x {batch}, {vocab} | {parallel}, {amp} "
                f"| {r['peak'] / 2**20:.0f} MiB | {r['estimate'] / 2**20:.0f} MiB | {r['estimate'] / r['peak']:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
