"""bench's first run on a GPU: every CUDA path it has, one command, a PASS/FAIL table with the
figure each path measured (docs/guides/gpu-acceptance.md). Run it through tests/gpu/acceptance.sh:

    tests/gpu/acceptance.sh [--out DIR] [--peak-tflops TF]   # on a machine with 1 to 8 GPUs
    tests/gpu/acceptance.sh --dry-run [--gpus N]            # what it would run, anywhere

The paths: every collective on NCCL at the machine's GPU count (sendrecv needs two); the groups
of a node's ranks and of one rank per node, on two emulated nodes (two GPUs or more); synthetic
ResNet-50 in bf16 and in fp16 with its loss scaler; the transformer under DDP and under FSDP;
gemm TFLOP/s; `bench sweep` on the local executor with the GPU, its nvidia-smi sampler and
NCCL's own debug log read back by `bench transport`. Exit status: 0 when every path passed or
was skipped for want of a second GPU, 1 when any failed, 2 without a GPU or on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MAX_GPUS = 8  # one node's; the local executor emulates nodes on one machine
STEP_TIMEOUT_S = 240  # a path that takes longer has hung: the whole run must stay under 8 minutes


class Failed(Exception):
    """A path ran but what it left is wrong; the message says what."""


@dataclass
class Row:
    path: str
    result: str  # PASS, FAIL, SKIP or, in a dry run, RUN
    figure: str


@dataclass
class Step:
    """One bench command and the table rows its output gives."""

    name: str
    argv: list[str]  # after `bench`
    judge: Callable[[Path, int], list[Row]]  # (the step's output path, its exit status) -> rows
    rows: list[str]  # the paths it reports, for a dry run
    skip: str | None = None  # why this machine cannot run it
    files: dict[Path, str] | None = None  # written before it runs

    def output(self, folder: Path) -> Path:
        """Where its result goes: a run directory for a sweep, a result file for `bench run`."""
        slug = self.name.replace(" ", "-").replace(",", "")
        return folder / slug if self.argv[0] == "sweep" else folder / f"{slug}.json"

    def command(self, folder: Path) -> list[str]:
        return [*self.argv, "--out" if self.argv[0] == "sweep" else "--json", str(self.output(folder))]


def _result(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise Failed(f"no result file {path.name}")
    return json.loads(path.read_text())


def _finite_positive(value: Any, what: str) -> float:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise Failed(f"{what} is {value!r}, not a positive figure")
    return float(value)


def _one(path: str, judge: Callable[[], str]) -> Row:
    try:
        return Row(path, "PASS", judge())
    except Failed as exc:
        return Row(path, "FAIL", str(exc))
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a result file not as bench writes it
        return Row(path, "FAIL", f"unreadable result: {type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------- the paths


def collectives_step(gpus: int) -> Step:
    from benchmarks.catalog import COLLECTIVES, collective

    names = list(COLLECTIVES)
    labels = [f"{name} on NCCL, {gpus} rank(s)" for name in names]

    def judge(out: Path, status: int) -> list[Row]:
        rows = []
        for name, label in zip(names, labels):
            if collective(name).min_ranks > gpus:
                rows.append(Row(label, "SKIP", f"needs {collective(name).min_ranks} GPUs"))
                continue

            def figure(name: str = name) -> str:
                if status != 0:
                    raise Failed(f"bench run exited {status}")
                mine = [r for r in _result(out)["rows"] if r["collective"] == name]
                if not mine:
                    raise Failed("no rows")
                wrong = sum(int(r["wrong"] or 0) for r in mine) + sum(int(r.get("oop_wrong") or 0) for r in mine)
                if wrong or any(r["wrong"] is None for r in mine):
                    raise Failed(f"{wrong} wrong elements (or unchecked rows)")
                top = max(mine, key=lambda r: r["size_bytes"])
                bw = _finite_positive(top["busbw_gbps"], "busbw") if gpus > 1 else top["algbw_gbps"]
                what = "busbw" if gpus > 1 else "algbw"
                return f"{bw:.1f} GB/s {what} at {top['size_bytes'] // 2**20} MiB, 0 wrong"

            rows.append(_one(label, figure))
        return rows

    argv = ["run", "allreduce", "--collective", ",".join(names), "--groups", "world", "-b", "1M", "-e", "256M"]
    argv += ["-f", "4", "-n", "20", "-w", "5", "-c", "1", "--device", "cuda", "--backend", "nccl"]
    return Step("collectives", argv + ["--nproc", str(gpus)], judge, labels)


def training_step(name: str, argv: list[str], figure_key: str, unit: str, gpus: int) -> Step:
    def judge(out: Path, status: int) -> list[Row]:
        def figure() -> str:
            if status != 0:
                raise Failed(f"bench run exited {status}")
            r = _result(out)
            value = _finite_positive(r[figure_key], figure_key)
            text = f"{value / gpus:,.0f} {unit} per GPU"
            if figure_key == "tokens_per_s":
                mfu = r.get("mfu")
                text += f", {r['achieved_tflops_per_gpu']:.0f} TFLOP/s, MFU " + ("n/a" if mfu is None else f"{mfu:.0%}")
            return text

        return [_one(name, figure)]

    return Step(name, [*argv, "--device", "cuda", "--nproc", str(gpus)], judge, [name])


def gemm_step(gpus: int) -> Step:
    def judge(out: Path, status: int) -> list[Row]:
        def figure() -> str:
            if status != 0:
                raise Failed(f"bench run exited {status}")
            r = _result(out)
            return f"{_finite_positive(r['tflops_min'], 'tflops_min'):.0f} TFLOP/s bf16, slowest of {gpus} GPU(s)"

        return [_one("gemm bf16 8192", figure)]

    return Step("gemm", ["run", "gemm", "--device", "cuda", "--nproc", str(gpus)], judge, ["gemm bf16 8192"])


SWEEP = """\
# Written by tests/gpu/acceptance.py: the local executor with the GPU, its sampler and NCCL's log.
name: gpu-acceptance
device: cuda
backend: nccl
nodes: {nodes}
gpus_per_node: [1]
launchers: [torchrun]
nccl:
  default: {{}}
timeout_s: 120
sample_s: 1
workloads:
  allreduce:
    min_bytes: 1M
    max_bytes: 64M
    step_factor: 4
    iters: 20
    warmup_iters: 5
    check_iters: 1
    collectives: [all_reduce]
  synthetic:
    model: resnet50
    image_size: 224
    scaling: [weak]
    batch_size: 64
    steps: 20
    warmup_steps: 5
    amp: bf16
"""


def sweep_step(gpus: int, folder: Path) -> Step:
    """1 node of one GPU, and 2 emulated nodes of one GPU each where there are two: the groups."""
    from harness.evidence import telemetry

    two = gpus >= 2
    sweep = folder / "acceptance.yaml"

    def judge(out: Path, status: int) -> list[Row]:
        import pandas as pd

        def ran() -> str:
            if status != 0:
                raise Failed(f"bench sweep exited {status}")
            jobs = json.loads((out / "jobs.json").read_text())["jobs"]
            states = {j["state"] for j in jobs.values()}
            summary = pd.read_csv(out / "summary.csv")
            if states != {"COMPLETED"}:
                raise Failed(f"job states {sorted(map(str, states))}")
            imgs = summary["images_per_s"].dropna()
            return f"{len(jobs)} jobs COMPLETED, {len(summary)} rows, {imgs.max():,.0f} images/s at most"

        def groups() -> str:
            summary = pd.read_csv(out / "summary.csv")
            two_nodes = summary[(summary["nodes"] == 2) & summary["busbw_gbps"].notna()]
            seen = set(two_nodes["group"].dropna())
            if not {"world", "intra", "inter"} <= seen:
                raise Failed(f"groups measured on 2 nodes: {sorted(seen)}")
            inter = two_nodes[two_nodes["group"] == "inter"]["busbw_gbps"].max()
            return f"world, intra, inter on 2 nodes; inter {inter:.1f} GB/s busbw at most"

        def sampler() -> str:
            lines = 0
            for job in sorted((out / "jobs").iterdir()):
                tele = telemetry.read(job)
                mine = sum(len(h.gpus) for h in tele.hosts.values()) if tele else 0
                if not mine:
                    raise Failed(f"no nvidia-smi dmon line in {job.name}'s telemetry")
                lines += mine
            return f"{lines} nvidia-smi dmon lines over the jobs"

        def nccl_log() -> str:
            logs = sorted((out / "jobs").glob("*/nccl/*.log"))
            if not logs:
                raise Failed("no NCCL debug log under jobs/*/nccl/")
            p = subprocess.run(bench(["transport", "--json", str(logs[0])]), capture_output=True, text=True)
            if p.returncode != 0:
                raise Failed(f"bench transport exited {p.returncode}: {p.stderr.strip()[-200:]}")
            facts = json.loads(p.stdout)[0]
            if not facts.get("nccl_version"):
                raise Failed("bench transport read no NCCL version from the log")
            return f"NCCL {facts['nccl_version']}, {facts.get('intra_transport') or 'no intra-node'} transport"

        rows = [_one("bench sweep, local executor", ran)]
        if two:
            rows.append(_one("groups world, intra, inter", groups))
        else:
            rows.append(Row("groups world, intra, inter", "SKIP", "needs 2 GPUs: two emulated nodes of one"))
        return rows + [_one("nvidia-smi sampler", sampler), _one("NCCL log read by bench transport", nccl_log)]

    rows = ["bench sweep, local executor", "groups world, intra, inter", "nvidia-smi sampler"]
    rows.append("NCCL log read by bench transport")
    return Step(
        "sweep",
        ["sweep", str(sweep), "--yes"],
        judge,
        rows,
        files={sweep: SWEEP.format(nodes="[1, 2]" if two else "[1]")},
    )


def steps(gpus: int, bf16: bool, peak: float | None, folder: Path) -> list[Step]:
    resnet = ["run", "synthetic", "--model", "resnet50", "--image-size", "224", "--batch-size", "64"]
    resnet += ["--steps", "30", "--warmup-steps", "10"]
    gpt = ["run", "transformer", "--preset", "125m", "--batch-size", "4", "--steps", "10", "--warmup-steps", "3"]
    gpt += ["--peak-tflops", str(peak)] if peak else []
    amp = "bf16" if bf16 else "fp16"  # the transformer's: FSDP takes bf16 only (benchmarks/transformer.py)
    out = [
        collectives_step(gpus),
        training_step("ResNet-50 bf16", [*resnet, "--amp", "bf16"], "images_per_s", "images/s", gpus),
        training_step("ResNet-50 fp16, loss scaler", [*resnet, "--amp", "fp16"], "images_per_s", "images/s", gpus),
        training_step(
            f"transformer 125M DDP {amp}", [*gpt, "--parallel", "ddp", "--amp", amp], "tokens_per_s", "tokens/s", gpus
        ),
        training_step(
            "transformer 125M FSDP bf16",
            [*gpt, "--parallel", "fsdp", "--amp", "bf16"],
            "tokens_per_s",
            "tokens/s",
            gpus,
        ),
        gemm_step(gpus),
        sweep_step(gpus, folder),
    ]
    for step in out:
        if not bf16 and step.name in ("ResNet-50 bf16", "transformer 125M FSDP bf16"):
            step.skip = "this GPU has no bf16 (compute capability below 8.0)"
    return out


# --------------------------------------------------------------------------- running them


def bench(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "harness.cli", *argv]


def run(step: Step, folder: Path) -> list[Row]:
    out = step.output(folder)
    log = out.with_suffix(".log")
    for path, text in (step.files or {}).items():
        path.write_text(text)
    with open(log, "w") as f:
        try:
            status = subprocess.run(
                bench(step.command(folder)), stdout=f, stderr=subprocess.STDOUT, timeout=STEP_TIMEOUT_S
            ).returncode
        except subprocess.TimeoutExpired:
            return [Row(name, "FAIL", f"no end after {STEP_TIMEOUT_S} s; see {log}") for name in step.rows]
    rows = step.judge(out, status)
    for r in rows:
        if r.result == "FAIL":
            r.figure += f"; see {log}"
    return rows


def table(rows: list[Row]) -> str:
    width = max(len(r.path) for r in rows)
    lines = [f"{'path':<{width}}  {'result':<6}  figure"]
    lines += [f"{r.path:<{width}}  {r.result:<6}  {r.figure}" for r in rows]
    return "\n".join(lines)


def gpu_count() -> tuple[int, str, bool]:
    """(GPUs, the first one's name, whether it does bf16) or exit 2 with one line."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print(
            f"acceptance: no CUDA GPU on this machine (torch {torch.__version__}, CUDA build "
            f"{torch.version.cuda or 'none'}, torch.cuda.is_available() is False); run it on a GPU node",
            file=sys.stderr,
        )
        sys.exit(2)
    return torch.cuda.device_count(), torch.cuda.get_device_name(0), torch.cuda.is_bf16_supported()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tests/gpu/acceptance.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="list the commands and the table's rows; run nothing")
    p.add_argument("--gpus", type=int, help=f"GPUs to use, 1 to {MAX_GPUS} (default: every one this machine has)")
    p.add_argument("--out", type=Path, help="where the runs and logs go (default: a new temporary directory)")
    p.add_argument(
        "--peak-tflops", type=float, help="the GPU's dense bf16 peak, for the transformer's MFU (989 on H100 SXM)"
    )
    args = p.parse_args(argv)
    try:
        import torch  # noqa: F401

        import harness.cli  # noqa: F401
    except ImportError as exc:
        print(
            f"acceptance: bench is not installed for {sys.executable} ({exc}); run the README's first "
            "command, or give BENCH_PYTHON the Python bench is installed in",
            file=sys.stderr,
        )
        return 2
    if args.gpus is not None and not 1 <= args.gpus <= MAX_GPUS:
        p.error(f"--gpus {args.gpus}: give 1 to {MAX_GPUS}")
    if args.dry_run:
        folder = args.out or Path(tempfile.gettempdir(), "bench-gpu-acceptance-XXXXXXXX")  # made by a real run
        gpus = args.gpus or 1
        planned = steps(gpus, True, args.peak_tflops, folder)
        for step in planned:
            print(f"$ bench {shlex.join(step.command(folder))}")
        print(table([Row(name, "RUN", "-") for step in planned for name in step.rows]))
        print(f"# {sum(len(s.rows) for s in planned)} paths; each runs as PASS, FAIL (with why) or SKIP (with why)")
        return 0
    have, name, bf16 = gpu_count()
    folder = args.out or Path(tempfile.mkdtemp(prefix="bench-gpu-acceptance-"))
    folder.mkdir(parents=True, exist_ok=True)
    gpus = min(args.gpus or have, have, MAX_GPUS)
    print(f"# {gpus} x {name}; runs and logs in {folder}", flush=True)
    start = time.monotonic()
    rows: list[Row] = []
    for step in steps(gpus, bf16, args.peak_tflops, folder):
        if step.skip:
            rows += [Row(name, "SKIP", step.skip) for name in step.rows]
            continue
        print(f"# {step.name} ...", flush=True)
        rows += run(step, folder)
    print(table(rows))
    failed = sum(r.result == "FAIL" for r in rows)
    skipped = sum(r.result == "SKIP" for r in rows)
    print(
        f"# {len(rows) - failed - skipped} passed, {failed} failed, {skipped} skipped, {time.monotonic() - start:.0f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
