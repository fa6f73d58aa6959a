"""A job's workloads in one launch: each rank starts, imports torch and joins the process group
once, then runs the workloads one after another, each measured and recorded as its own launch
would (docs/concepts/architecture.md, "One launch per job"). The local executor runs its gloo jobs so.

    torchrun --nproc-per-node 2 -m benchmarks.sequence \\
        allreduce -b 1K -e 4M --json a.json --then synthetic --scaling weak --json b.json

Each workload's arguments are its own (`bench run WORKLOAD --help`), `--then` between them. Each
is parsed and checked as its turn comes, as its own launch would check it; the first workload
that fails ends the launch with its status, and the ones after it do not run.
"""

from __future__ import annotations

import importlib
import sys

from .catalog import PROBES, THEN, WORKLOADS
from .runtime import Workload, exit_rank, in_turn, usage_error


def steps(argv: list[str]) -> list[tuple[Workload, list[str]]]:
    """`WORKLOAD ARGS... --then WORKLOAD ARGS...` as (workload, its arguments) in order."""
    out: list[tuple[Workload, list[str]]] = []
    part: list[str] = []
    for arg in [*argv, THEN]:
        if arg != THEN:
            part.append(arg)
            continue
        if not part or part[0] not in (*WORKLOADS, *PROBES):
            found = repr(part[0]) if part else "nothing"
            raise ValueError(f"{found} where a workload should be; valid: {', '.join((*WORKLOADS, *PROBES))}")
        out.append((importlib.import_module(f"benchmarks.{part[0]}").WORKLOAD, part[1:]))
        part = []
    return out


def main(argv: list[str] | None = None) -> int:
    try:
        todo = steps(list(sys.argv[1:] if argv is None else argv))
    except ValueError as exc:
        usage_error(f"benchmarks.sequence: error: {exc}")
        return 2
    return in_turn(todo)


if __name__ == "__main__":
    exit_rank(main())
