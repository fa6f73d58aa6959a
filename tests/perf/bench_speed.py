"""Speed of the harness itself, with pytest-benchmark. Not part of the test suite; run

    python -m pytest tests/perf/bench_speed.py --benchmark-only

Targets (issue 2): `bench sweep --dry-run` of a 10,000-job matrix under 2 s; `bench collect`
of 100,000 result rows under 2 s.
"""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
import yaml

from fixtures import SWEEPS, make_run


@pytest.fixture(scope="module")
def big_sweep(tmp_path_factory):
    """25 node counts x 8 GPU counts x 50 NCCL sets = 10,000 jobs."""
    sweep = yaml.safe_load((SWEEPS / "local.yaml").read_text())
    sweep.update(name="big", nodes=list(range(1, 26)), max_nodes=None, gpus_per_node=list(range(1, 9)),
                 nccl={f"set{i}": {"NCCL_MIN_NCHANNELS": str(i)} for i in range(50)})
    sweep["workloads"]["synthetic"].update(scaling=["weak"], global_batch=None)
    path = tmp_path_factory.mktemp("big") / "big.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def _timed_command(benchmark, make_cmd):
    counter = itertools.count()

    def setup():
        return (make_cmd(next(counter)),), {}

    def run(cmd):
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)

    benchmark.pedantic(run, setup=setup, rounds=5, iterations=1)


def test_dry_run_of_10000_jobs(benchmark, big_sweep, tmp_path):
    """The whole command, interpreter start included."""
    _timed_command(benchmark, lambda i: [sys.executable, "-m", "harness.cli", "sweep", str(big_sweep),
                                         "--executor", "local", "--dry-run", "--out", str(tmp_path / f"run{i}")])
    assert (tmp_path / "run0" / "plan.json").stat().st_size > 1_000_000


@pytest.fixture(scope="module")
def run_100k(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("collect") / "run", 4000)  # 4,000 results x 25 sizes


def test_collect_100k_rows(benchmark, run_100k):
    """The whole command, interpreter start included."""
    _timed_command(benchmark, lambda i: [sys.executable, "-m", "harness.cli", "collect", str(run_100k.path)])
    import pyarrow.parquet as pq

    assert pq.read_metadata(run_100k.summary_parquet).num_rows == 100_000
