"""What a non-editable install holds: a wheel built with `pip wheel`, installed in a fresh venv,
runs `bench sweep --dry-run` with the sweeps it ships (harness/sweeps, package data), from a
directory that is not the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import ROOT, run

pytestmark = [pytest.mark.slow, pytest.mark.proof]  # a wheel build and a venv: ~20 s


def test_a_wheel_in_a_fresh_venv_runs_the_shipped_sweeps(tmp_path):
    # the checkout's files as they stand, without what earlier builds and runs left in it (a
    # build/ directory would hand its files to the wheel) and without writing into it
    src = tmp_path / "src"
    junk = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis")
    shutil.copytree(ROOT, src, symlinks=True, ignore=junk)
    wheels = tmp_path / "wheels"
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)],
        timeout=300,
    )
    (wheel,) = wheels.glob("bench_scaling-*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)], timeout=300)
    # The dependencies (torch and the rest, GBs) from this environment: its site-packages as a
    # plain path, whose .pth files, the editable install of this checkout among them, are not
    # read, so harness and benchmarks can come from the wheel only.
    site = Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BENCH_CLUSTER")}
    where = run(
        [str(py), "-c", "import harness, benchmarks; print(harness.__file__, benchmarks.__file__)"],
        cwd=elsewhere,
        env=env,
    ).stdout
    assert all(Path(p).is_relative_to(site) for p in where.split()), where
    shipped = sorted(
        p.relative_to(site / "harness" / "sweeps").as_posix() for p in (site / "harness" / "sweeps").rglob("*.yaml")
    )
    assert shipped == sorted(p.relative_to(ROOT / "sweeps").as_posix() for p in (ROOT / "sweeps").rglob("*.yaml"))

    for executor, default in (("local", "local"), ("slurm", "default")):
        out = elsewhere / executor
        r = subprocess.run(
            [
                str(venv / "bin" / "bench"),
                "sweep",
                "--executor",
                executor,
                "--max-nodes",
                "2",
                "--dry-run",
                "--out",
                str(out),
            ],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert (
            f"name: {default}" in (out / "plan.json").read_text()
            or f'"name": "{default}"' in (out / "plan.json").read_text()
        ), r.stdout
