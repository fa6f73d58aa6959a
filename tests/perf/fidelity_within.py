"""Both sides of a fidelity.py case in one process group: bench's measurement (the workload's own
`measure`, its progress file written as in a sweep's job) and the plain loop's `measure`,
alternated in the same ranks after a round of both not kept. Started by `fidelity.py --within`:

    torchrun --standalone --nproc-per-node 2 tests/perf/fidelity_within.py CASE ROUNDS

What the two launches of fidelity.py's other rounds share with each other only by chance (which
core each rank lands on, the page cache, what else the machine runs that second), the two sides
here share by construction, so the interval is that of what bench does inside its measurement.
Rank 0 prints one JSON line: {"bench": [figures], "plain": [figures]}.
"""

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

import torch.distributed as dist

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fidelity import CASES  # noqa: E402

from benchmarks.common import detect_launch  # noqa: E402
from benchmarks.progress import Progress  # noqa: E402
from benchmarks.runtime import Context, init_process_group, resolve_backend, resolve_device  # noqa: E402


def _plain(script: str):
    spec = importlib.util.spec_from_file_location(Path(script).stem, script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.measure


def main() -> None:
    (case,) = [c for c in CASES if c.name == sys.argv[1]]
    rounds = int(sys.argv[2])
    # the allreduce workload is benchmarks/collectives.py's (benchmarks/allreduce.py names it)
    workload = importlib.import_module(f"benchmarks.{ {'allreduce': 'collectives'}.get(case.bench[0], case.bench[0]) }")
    with tempfile.TemporaryDirectory() as d:
        args = workload.build_parser().parse_args([*case.bench[1:], "--json", os.path.join(d, "result.json")])
        launch = detect_launch(os.environ)
        device = resolve_device(args.device, launch)
        backend = resolve_backend(args.backend, device)
        init_process_group(launch, backend, device, args.timeout)
        ctx = Context(launch=launch, device=device, backend=backend, progress=Progress(args.json, launch.rank))
        plain = _plain(case.plain[0])
        plain_args = [int(a) if a.isdigit() else a for a in case.plain[1:]]
        figures: dict[str, list[float]] = {"bench": [], "plain": []}
        # round 0 is both sides' warm-up, not kept: the first call in a process also pays for its
        # connections and for touching its fresh buffers, whichever side makes it
        for i in range(rounds + 1):
            for side in ("bench", "plain") if i % 2 == 0 else ("plain", "bench"):
                if side == "bench":
                    figure = case.figure(workload.measure(args, ctx))
                else:
                    figure = plain(*plain_args)
                if i:
                    figures[side].append(figure)
        ctx.progress.close()
        if launch.rank == 0:
            print(json.dumps(figures), flush=True)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
