"""Does the harness cost anything? `bench run` against plain torch.distributed and DDP loops,
same machine, same settings, runs interleaved so drift hits both alike.

    python tests/perf/overhead.py [--reps 5] [--nproc 2]

Targets: allreduce busbw within 5% of the plain loop at 16 MiB and 64 MiB; synthetic
images/s within 3% of the plain DDP loop. Prints the median of each and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def torchrun(nproc: int, *args: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n" + "\n".join(p.stderr.splitlines()[-15:]))
    return p.stdout


def bench_allreduce(nproc: int, size: int, iters: int, warmup: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        torchrun(
            nproc,
            "-m",
            "benchmarks.allreduce",
            "-b",
            str(size),
            "-e",
            str(size),
            "-n",
            str(iters),
            "-w",
            str(warmup),
            "-c",
            "0",
            "--no-out-of-place",
            "--device",
            "cpu",
            "--json",
            str(out),
        )
        return json.loads(out.read_text())["rows"][0]["busbw_gbps"]


def plain_allreduce(nproc: int, size: int, iters: int, warmup: int) -> float:
    return json.loads(torchrun(nproc, str(HERE / "plain_allreduce.py"), str(size), str(iters), str(warmup)))[
        "busbw_gbps"
    ]


def bench_synthetic(nproc: int, model: str, image: int, batch: int, steps: int, warmup: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        torchrun(
            nproc,
            "-m",
            "benchmarks.synthetic",
            "--model",
            model,
            "--image-size",
            str(image),
            "--batch-size",
            str(batch),
            "--steps",
            str(steps),
            "--warmup-steps",
            str(warmup),
            "--amp",
            "off",
            "--device",
            "cpu",
            "--json",
            str(out),
            # DDP's own defaults, as in the plain loop: the harness, not a setting, is measured
            "--no-gradient-as-bucket-view",
        )
        return json.loads(out.read_text())["images_per_s"]


def plain_synthetic(nproc: int, model: str, image: int, batch: int, steps: int, warmup: int) -> float:
    return json.loads(
        torchrun(nproc, str(HERE / "plain_ddp.py"), model, str(image), str(batch), str(steps), str(warmup))
    )["images_per_s"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--case", choices=("allreduce", "synthetic"), help="run only these cases")
    args = p.parse_args()
    cases = [
        ("allreduce busbw GB/s, 16 MiB", bench_allreduce, plain_allreduce, (16 * 2**20, 20, 5), 0.05),
        ("allreduce busbw GB/s, 64 MiB", bench_allreduce, plain_allreduce, (64 * 2**20, 20, 5), 0.05),
        ("synthetic images/s, resnet18 64px b16", bench_synthetic, plain_synthetic, ("resnet18", 64, 16, 20, 3), 0.03),
    ]
    print(f"{'case':40} {'bench (median)':>15} {'plain (median)':>15} {'ratio':>7} {'target':>7}  samples")
    for name, ours, plain, params, tolerance in cases:
        if args.case and not name.startswith(args.case):
            continue
        a, b = [], []
        for _ in range(args.reps):  # interleaved
            a.append(ours(args.nproc, *params))
            b.append(plain(args.nproc, *params))
        ma, mb = statistics.median(a), statistics.median(b)
        verdict = "ok" if ma >= mb * (1 - tolerance) else "MISS"
        print(
            f"{name:40} {ma:>15.4f} {mb:>15.4f} {ma / mb:>7.3f} {'>=' + format(1 - tolerance, '.2f'):>7}  "
            f"{verdict}  bench {[round(v, 4) for v in a]} plain {[round(v, 4) for v in b]}",
            flush=True,
        )


if __name__ == "__main__":
    main()
