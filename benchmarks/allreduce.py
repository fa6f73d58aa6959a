"""The `allreduce` workload: the collectives microbenchmark of benchmarks/collectives.py under
the name sweeps, results, histories and `bench run` have always given it (all_reduce is its
first and default collective). Its job scripts run this module.

    bench run allreduce -b 8 -e 128M -f 2 --nproc 2
    torchrun --nproc-per-node 8 -m benchmarks.allreduce -b 8 -e 1G -f 2 --json out.json
"""

from __future__ import annotations

from .collectives import WORKLOAD, build_parser, main
from .runtime import exit_rank

__all__ = ["WORKLOAD", "build_parser", "main"]

if __name__ == "__main__":
    exit_rank(main())
