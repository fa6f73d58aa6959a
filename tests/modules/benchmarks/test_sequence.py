"""Several workloads in one launch (benchmarks/sequence.py, runtime.in_turn), with real torchrun
ranks on gloo: each workload recorded as its own launch would record it, by the same processes;
a later workload's bad arguments end the turns at it, after the earlier ones' results."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run

from benchmarks.catalog import SEQUENCE, THEN

pytestmark = pytest.mark.slow

CPU = ["--device", "cpu", "--backend", "gloo"]
ALLREDUCE = [
    "allreduce",
    "-b",
    "1K",
    "-e",
    "4K",
    "-f",
    "4",
    "--iters",
    "2",
    "--warmup-iters",
    "1",
    "--link-bytes",
    "0",
    *CPU,
]
SYNTHETIC = ["synthetic", "--model", "resnet18", "--image-size", "32", "--steps", "2", "--warmup-steps", "1", *CPU]


def torchrun(*argv: str, check: bool = True):
    return run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", SEQUENCE, *argv],
        env={"OMP_NUM_THREADS": "1"},
        check=check,
        timeout=240,
    )


def test_workloads_in_turn_share_each_ranks_process(tmp_path: Path):
    a, b = tmp_path / "jobs" / "allreduce.json", tmp_path / "jobs" / "synthetic-weak.json"
    torchrun(*ALLREDUCE, "--json", str(a), THEN, *SYNTHETIC, "--batch-size", "2", "--json", str(b))
    first, second = json.loads(a.read_text()), json.loads(b.read_text())
    assert (first["workload"], second["workload"]) == ("allreduce", "synthetic")
    assert first["argv"][:3] == ["-b", "1K", "-e"] and second["argv"][-2:] == ["--json", str(b)]
    assert first["world_size"] == second["world_size"] == 2 and second["images_per_s"] > 0
    assert len(first["rows"]) == 2 and all(row["wrong"] == 0 for row in first["rows"])
    pids = [[r["pid"] for r in res["environment"]["ranks"]] for res in (first, second)]
    assert pids[0] == pids[1] and len(set(pids[0])) == 2, pids
    progress = sorted(p.name for p in (tmp_path / "jobs" / "progress").glob("*.json"))
    assert progress == [f"{k}.rank{r}.json" for k in ("allreduce", "synthetic-weak") for r in (0, 1)]
    assert all(json.loads((tmp_path / "jobs" / "progress" / p).read_text())["phase"] == "done" for p in progress)


def test_a_later_workloads_bad_arguments_end_the_turns_at_it(tmp_path: Path):
    a, b = tmp_path / "allreduce.json", tmp_path / "synthetic-strong.json"
    r = torchrun(*ALLREDUCE, "--json", str(a), THEN, *SYNTHETIC, "--global-batch", "3", "--json", str(b), check=False)
    assert r.returncode != 0
    assert json.loads(a.read_text())["workload"] == "allreduce" and not b.exists()
    said = [line for line in r.stdout.splitlines() + r.stderr.splitlines() if line.startswith("bench run ")]
    assert said == [
        "bench run synthetic: error: --global-batch 3 is not divisible by the world size 2 into whole per-GPU batches"
    ], r.describe()


def test_one_launch_has_one_device(tmp_path: Path):
    r = torchrun(*ALLREDUCE, THEN, *SYNTHETIC[:-4], "--device", "auto", check=False)
    said = [line for line in r.stdout.splitlines() + r.stderr.splitlines() if line.startswith("bench run ")]
    assert said == ["bench run synthetic: error: --device auto differs from the launch's first workload's, cpu"], (
        r.describe()
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        ([THEN, *ALLREDUCE], "benchmarks.sequence: error: nothing where a workload should be; valid: allreduce, "),
        (["resnet", "-b", "1K"], "benchmarks.sequence: error: 'resnet' where a workload should be; valid: allreduce, "),
        (
            [*ALLREDUCE, THEN, *ALLREDUCE],
            "bench run allreduce: error: several workloads in turn run inside a launch (torchrun, srun)",
        ),
    ],
)
def test_a_malformed_sequence_is_one_line_and_exit_2(argv: list[str], line: str):
    r = run([sys.executable, "-m", SEQUENCE, *argv], check=False, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith(line), r.stderr
