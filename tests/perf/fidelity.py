"""Does bench add anything to what it measures? Each workload run by `bench run`, as a user runs
it, against the plainest loop anyone would write (plain_collective.py, plain_training.py), on
the same machine with the same ranks, sizes and step counts. Not part of the test suite; run it
on a quiet machine, or on a cluster's node:

    python tests/perf/fidelity.py [--rounds 8] [--nproc 2] [--case NAME ...] [--sampler | --within | --in-turn]
                                  [--flight]

The two sides alternate, A B B A A B ..., one process launch each, so that drift (clocks, another
job, the page cache) falls on both alike. With --within, both sides run in one launch's ranks,
alternated as often (fidelity_within.py): what bench does inside its measurement, without the
noise of where each launch's processes land. For each case it prints each side's median and
every figure, and the ratio bench / plain as the Hodges-Lehmann estimate (the median of every
bench/plain pair of rounds) with its distribution-free 95% interval (harness/analysis/stats.py,
Lehmann 1975). Target (docs/concepts/fidelity.md): a ratio of 0.99 or better, with the interval holding
1.0; `ok` or `MISS` says which. --sampler runs bench's per-node telemetry sampler beside
bench's side, started as a sweep's job starts it (harness/run/procs.py). --flight runs bench's
side with PyTorch's flight recorder on, as a sweep's gloo job runs it (harness/run/plan.py,
GLOO_FLIGHT_RECORDER_DEFAULTS), with its dumper thread waiting for a request
(benchmarks/recorder.py); the plain side records nothing. --in-turn runs bench's side as the
local executor runs a job: in one launch, after the all-reduce turn every job of
sweeps/local.yaml starts with (benchmarks/sequence.py).
Exit status 1 when a case misses.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from benchmarks.catalog import SEQUENCE, THEN  # noqa: E402
from harness.analysis.stats import rate_shift  # noqa: E402
from harness.run import procs  # noqa: E402
from harness.run.plan import GLOO_FLIGHT_RECORDER_DEFAULTS  # noqa: E402

MiB = 2**20
ITERS, WARMUP = 100, 10  # each collective side; 100 calls average out the per-call noise of gloo on few cores
STEPS, WARMUP_STEPS = 20, 3  # each training side
SAMPLE_S = 1.0  # the sampler's interval with --sampler: a sweep's default (harness/config/spec.py)
# With --in-turn, the turn before bench's: sweeps/local.yaml's all-reduce, its first workload
BEFORE = ["allreduce", "-b", "1K", "-e", "4M", "-f", "4", "-n", "10", "-w", "3", "--groups", "world"]


@dataclass(frozen=True)
class Case:
    name: str
    unit: str
    bench: list[str]  # after `bench run`
    plain: list[str]  # after torchrun's options
    figure: Callable[[dict], float]  # bench's result file -> the figure


def _row(collective: str) -> Callable[[dict], float]:
    def figure(result: dict) -> float:
        (row,) = [r for r in result["rows"] if r["collective"] == collective and r["group"] == "world"]
        return row["busbw_gbps"]

    return figure


def _collective(name: str, size: int) -> Case:
    return Case(
        f"{name} {size // MiB} MiB",
        "GB/s busbw",
        # bench's defaults but the sizes and counts the plain loop takes: the check (-c), the
        # out-of-place calls and the link probe run after the timed in-place calls, as a sweep's do
        ["allreduce", "--collective", name, "--groups", "world", "-b", str(size), "-e", str(size)]
        + ["-n", str(ITERS), "-w", str(WARMUP)],
        [str(HERE / "plain_collective.py"), name, str(size), str(ITERS), str(WARMUP)],
        _row(name),
    )


CASES = [
    _collective("all_reduce", 16 * MiB),
    _collective("all_reduce", 64 * MiB),
    _collective("all_to_all", 16 * MiB),
    Case(
        "synthetic resnet18 64px b16",
        "images/s",
        ["synthetic", "--model", "resnet18", "--image-size", "64", "--batch-size", "16"]
        + ["--steps", str(STEPS), "--warmup-steps", str(WARMUP_STEPS), "--amp", "off"]
        # DDP's own default, as the plain loop has it: the harness is measured, not a setting
        + ["--no-gradient-as-bucket-view"],
        [str(HERE / "plain_training.py"), "resnet", "resnet18", "64", "16", str(STEPS), str(WARMUP_STEPS)],
        lambda r: r["images_per_s"],
    ),
    Case(
        "transformer small b4",
        "tokens/s",
        ["transformer", "--preset", "small", "--batch-size", "4", "--steps", str(STEPS)]
        + ["--warmup-steps", str(WARMUP_STEPS), "--amp", "off"],
        [str(HERE / "plain_training.py"), "transformer", "small", "4", str(STEPS), str(WARMUP_STEPS)],
        lambda r: r["tokens_per_s"],
    ),
]


def _run(cmd: list[str], env: dict[str, str], figure_printed: bool = False) -> str:
    """The command's output; a failure ends the script, but for a plain loop whose rank 0 printed
    its figure first: a rank aborting in torch's teardown after the measurement (SIGABRT,
    "terminate called without an active exception", which bench avoids by leaving with os._exit,
    benchmarks/runtime.py) does not change the figure, and is said on stderr."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        if figure_printed and p.stdout.strip().startswith("{"):
            print(f"# the plain loop exited {p.returncode} after printing its figure", file=sys.stderr)
            return p.stdout
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n" + "\n".join(p.stderr.splitlines()[-15:]))
    return p.stdout


def _env() -> dict[str, str]:
    # one thread per rank on both sides, as `bench run` sets it (benchmarks/common.py)
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def bench_side(case: Case, nproc: int, sampler: bool, in_turn: bool = False, flight: bool = False) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "result.json"  # a file, so the per-rank and progress files are written as in a sweep
        if in_turn:
            before = ["--json", str(Path(d) / "before.json")]
            cmd = [*torchrun(nproc), "-m", SEQUENCE, *BEFORE, *before, THEN, *case.bench, "--json", str(out)]
        else:
            cmd = [sys.executable, "-m", "harness.cli", "run", *case.bench, "--nproc", str(nproc), "--json", str(out)]
        env = {**_env(), **(GLOO_FLIGHT_RECORDER_DEFAULTS if flight else {})}
        with open(os.devnull, "wb") as log, procs.sampler(Path(d) / "telemetry", SAMPLE_S if sampler else 0, log):
            _run(cmd, env)
        return case.figure(json.loads(out.read_text()))


def torchrun(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]


def within(case: Case, nproc: int, rounds: int) -> tuple[list[float], list[float]]:
    """Both sides alternated `rounds` times in one process group (fidelity_within.py)."""
    cmd = [*torchrun(nproc), str(HERE / "fidelity_within.py"), case.name, str(rounds)]
    figures = json.loads(_run(cmd, _env(), figure_printed=True).strip().splitlines()[-1])
    return figures["bench"], figures["plain"]


def plain_side(case: Case, nproc: int) -> float:
    cmd = [*torchrun(nproc), *case.plain]
    line = json.loads(_run(cmd, _env(), figure_printed=True).strip().splitlines()[-1])
    return float(line.get("busbw_gbps") or line.get("images_per_s") or line["tokens_per_s"])


def launches(
    case: Case, nproc: int, rounds: int, sampler: bool, in_turn: bool, flight: bool = False
) -> tuple[list[float], list[float]]:
    """Each side a launch of its own, `rounds` times, the first side alternating: A B, B A, ..."""
    bench: list[float] = []
    plain: list[float] = []
    for i in range(rounds):
        for side in ("bench", "plain") if i % 2 == 0 else ("plain", "bench"):
            if side == "bench":
                bench.append(bench_side(case, nproc, sampler, in_turn, flight))
            else:
                plain.append(plain_side(case, nproc))
    return bench, plain


@dataclass(frozen=True)
class Verdict:
    ratio: float
    low: float
    high: float

    @property
    def ok(self) -> bool:
        return self.ratio >= 0.99 and self.low <= 1.0 <= self.high


def judge(bench: list[float], plain: list[float]) -> Verdict:
    """bench / plain: the Hodges-Lehmann estimate and its 95% interval. rate_shift takes times
    and returns the rate ratio B/A, so the plain side's inverse rates are A and bench's are B."""
    a = np.array([[1 / v for v in plain]])
    b = np.array([[1 / v for v in bench]])
    shift = rate_shift(a, b, np.array([len(plain)]), np.array([len(bench)]))
    return Verdict(float(shift.ratio[0]), float(shift.low[0]), float(shift.high[0]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=8, help="bench and plain launches per case (default 8)")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--case", action="append", help="a case whose name starts with this (repeatable)")
    p.add_argument("--sampler", action="store_true", help="bench's telemetry sampler beside bench's side")
    p.add_argument(
        "--within",
        action="store_true",
        help="both sides in one process group, alternated ROUNDS times (fidelity_within.py), not a launch each",
    )
    p.add_argument(
        "--in-turn",
        action="store_true",
        help="bench's side as a local sweep's job runs it: one launch, after an all-reduce turn",
    )
    p.add_argument("--flight", action="store_true", help="bench's side with the flight recorder, as a sweep's gloo job")
    args = p.parse_args()
    if args.rounds < 2:
        p.error(f"--rounds {args.rounds}: a ratio's interval takes 2 rounds or more (8 for a useful one)")
    if args.within and (args.sampler or args.in_turn or args.flight):
        p.error("--sampler, --in-turn and --flight are ways of bench's launches; --within has none")
    cases = [c for c in CASES if not args.case or any(c.name.startswith(k) for k in args.case)]
    print(
        f"{'case':30} {'unit':11} {'bench median':>12} {'plain median':>12} {'ratio':>6} {'95% CI':>15}  target",
        flush=True,
    )
    missed = False
    for case in cases:
        if args.within:
            bench, plain = within(case, args.nproc, args.rounds)
        else:
            bench, plain = launches(case, args.nproc, args.rounds, args.sampler, args.in_turn, args.flight)
        v = judge(bench, plain)
        missed |= not v.ok
        print(
            f"{case.name:30} {case.unit:11} {statistics.median(bench):>12.4g} {statistics.median(plain):>12.4g} "
            f"{v.ratio:>6.3f} [{v.low:.3f}, {v.high:.3f}]  {'ok' if v.ok else 'MISS'}",
            flush=True,
        )
        print(f"  bench {' '.join(f'{x:.4g}' for x in bench)}\n  plain {' '.join(f'{x:.4g}' for x in plain)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
