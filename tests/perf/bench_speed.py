"""Speed of the harness itself, with pytest-benchmark. Not part of the test suite; run

    python -m pytest -n 0 tests/perf/bench_speed.py --benchmark-only

Targets: `bench sweep --dry-run` of a 10,000-job matrix under 2 s; with the Slurm executor, which
writes 10,000 job.sbatch files, a user's matrix (to 512 nodes of 16 GPUs, every collective, a
profile) within twice this disk's floor for 10,000 directories and files (tests/perf/floors.py,
0.5 s or more; the interpreter's start included); `bench
collect` of 100,000 result rows under 1 s, and reading the NCCL logs of 1,000 ranks adds under
1 s to it; `bench compare` of 100,000-row runs under 3 s; `bench regress` of one against a
baseline of five such runs under 3 s, and against thirty (a month of nights, median:30) under
1.5 s; the history stays fast with 1,000 runs; the node check's verdict on every pair of 2,048
nodes under 2 s. Where each stands is in CONTRIBUTING.md ("Speed").
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import subprocess
import sys

import pytest
import yaml
from fixtures import FIRST_NIGHT, FIXTURES, SWEEPS, dated, make_run


@pytest.fixture(scope="session")
def _bytecode(tmp_path_factory):
    return tmp_path_factory.mktemp("bytecode")


@pytest.fixture(autouse=True)
def _as_installed(_bytecode, monkeypatch):
    """Each timed command runs as an installed bench does: with its modules' bytecode, compiled
    once. This machine sets PYTHONDONTWRITEBYTECODE=1, under which every command compiled bench's
    70 modules from source: 0.1 s of each (CHANGELOG.md, "Speed, as measured"), which no user's install
    pays. The bytecode goes to a directory of the session's (PYTHONPYCACHEPREFIX), never into
    the checkout; each benchmark's warm-up round fills it."""
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(_bytecode))


@pytest.fixture(scope="module")
def big_sweep(tmp_path_factory):
    """25 node counts x 8 GPU counts x 50 NCCL sets = 10,000 jobs."""
    sweep = yaml.safe_load((SWEEPS / "local.yaml").read_text())
    sweep.update(
        name="big",
        nodes=list(range(1, 26)),
        max_nodes=None,
        gpus_per_node=list(range(1, 9)),
        nccl={f"set{i}": {"NCCL_MIN_NCHANNELS": str(i)} for i in range(50)},
    )
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

    benchmark.pedantic(run, setup=setup, rounds=5, warmup_rounds=1, iterations=1)


def _dry_run(benchmark, sweep, out, executor: str) -> None:
    """`bench sweep SWEEP --executor EXECUTOR --dry-run`, interpreter start included."""
    _timed_command(
        benchmark,
        lambda i: (
            [sys.executable, "-m", "harness.cli", "sweep", str(sweep), "--executor", executor, "--dry-run"]
            + ["--out", str(out / f"run{i}")]
        ),
    )


def test_dry_run_of_10000_jobs(benchmark, big_sweep, tmp_path):
    """The whole command: plans 10,000 jobs and writes plan.json."""
    _dry_run(benchmark, big_sweep, tmp_path, "local")
    assert (tmp_path / "run0" / "plan.json").stat().st_size > 1_000_000


@pytest.fixture(scope="module")
def user_sweep(tmp_path_factory):
    """A user's matrix: 1 to 512 nodes (powers of two) x 1, 2, 4, 8 and 16 GPUs x both launchers
    x 100 NCCL sets = 10,000 jobs of the default sweep's workloads, every collective, with the
    example profile, whose python is this interpreter: the dry run checks it by starting it."""
    from benchmarks.catalog import COLLECTIVES

    root = tmp_path_factory.mktemp("user")
    sweep = yaml.safe_load((SWEEPS / "default.yaml").read_text())
    sweep.update(
        name="user",
        nodes=[2**i for i in range(10)],
        max_nodes=512,
        gpus_per_node=[1, 2, 4, 8, 16],
        launchers=["torchrun", "srun"],
        nccl={f"set{i}": {"NCCL_MIN_NCHANNELS": str(i + 1)} for i in range(100)},
        exclude=[],
    )
    sweep["workloads"]["allreduce"]["collectives"] = list(COLLECTIVES)
    sweep["workloads"]["synthetic"].update(scaling=["weak"], global_batch=None)  # 256 divides no world past 32 x 8
    profile = yaml.safe_load((SWEEPS / "clusters" / "example.yaml").read_text())
    profile.update(python=sys.executable, setup=[], modules=[])
    (root / "user.yaml").write_text(yaml.safe_dump(sweep))
    (root / "profile.yaml").write_text(yaml.safe_dump(profile))
    return root / "user.yaml", root / "profile.yaml"


def test_slurm_dry_run_of_10000_jobs(benchmark, user_sweep, tmp_path):
    """The whole command at a user's shape: renders and writes 10,000 job.sbatch files, each
    job priced with the profile's peaks (target: within twice this disk's floor for 10,000
    directories and files, tests/perf/floors.py, measured in the same run)."""
    sweep, profile = user_sweep
    _timed_command(
        benchmark,
        lambda i: (
            [sys.executable, "-m", "harness.cli", "sweep", str(sweep), "--executor", "slurm"]
            + ["--cluster", str(profile), "--dry-run", "--out", str(tmp_path / f"run{i}")]
        ),
    )
    assert len(list((tmp_path / "run0" / "jobs").glob("*/job.sbatch"))) == 10_000


@pytest.fixture(scope="module")
def run_100k(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("collect") / "run", 4000)  # 4,000 results x 25 sizes


def test_collect_100k_rows(benchmark, run_100k):
    """The whole command, interpreter start included."""
    _timed_command(benchmark, lambda i: [sys.executable, "-m", "harness.cli", "collect", str(run_100k.path)])
    import pyarrow.parquet as pq

    assert pq.read_metadata(run_100k.summary_parquet).num_rows == 100_000


# ---- the NCCL logs of 1,000 ranks: what parsing them adds to collect


def _nccl_run(root, with_logs: bool):
    """125 jobs of 8 ranks; with_logs: each rank's NCCL debug file (the 2.28.9 fixture's lines of
    one rank, about 20), and each result naming their pattern as a real job's does."""
    run = make_run(root, 125)
    rank_lines = [
        line
        for line in (FIXTURES / "nccl" / "ib-gdrdma-2.28.9.log").read_text().splitlines()
        if line.startswith("cn76:")
    ]
    for job in run.jobs():
        wr = job.runs[0]
        path = run.path / job.result_path(wr)
        result = json.loads(path.read_text())
        pattern = f"jobs/{job.name}/nccl/{wr.key}.%h.%p.log"
        result["transport"] = {"source": "nccl_log", "debug": "INFO", "debug_file": pattern if with_logs else None}
        path.write_text(json.dumps(result))
        if with_logs:
            (run.path / job.nccl_log_dir).mkdir()
            for rank in range(8):
                host, pid = f"n{job.name}-{rank // 8}", 1000 + rank
                text = "\n".join(line.replace("cn76:155:", f"{host}:{pid}:") for line in rank_lines) + "\n"
                (run.path / pattern.replace("%h", host).replace("%p", str(pid))).write_text(text)
    return run


@pytest.mark.parametrize("with_logs", [False, True], ids=["without-logs", "with-1000-rank-logs"])
def test_collect_with_nccl_logs_of_1000_ranks(benchmark, tmp_path_factory, with_logs):
    """The whole command on 125 jobs x 8 ranks, with and without each rank's NCCL log: the
    difference is what reading 1,000 logs costs (target under 1 s)."""
    run = _nccl_run(tmp_path_factory.mktemp("nccl") / "run", with_logs)
    _timed_command(benchmark, lambda i: [sys.executable, "-m", "harness.cli", "collect", str(run.path)])
    import pandas as pd

    net = pd.read_csv(run.summary_csv)["net"]
    assert (net == "IB").all() if with_logs else net.isna().all()


# ---- compare and regress on 100,000-row runs; the history with 1,000 runs


@pytest.fixture(scope="module")
def two_runs_100k(tmp_path_factory):
    from harness.collect.gather import collect
    from harness.collect.summary import write_summary

    root = tmp_path_factory.mktemp("compare")
    runs = [make_run(root / name, 4000, seed=seed) for name, seed in (("a", 0), ("b", 1))]
    dated(runs[0].path, FIRST_NIGHT)  # planned in the same second: made two runs, b the later
    dated(runs[1].path, FIRST_NIGHT + dt.timedelta(hours=1))
    for run in runs:
        write_summary(run, *collect(run))
    return runs


def test_compare_100k_rows(benchmark, two_runs_100k, tmp_path):
    """`bench compare A B --csv`, interpreter start included."""
    a, b = two_runs_100k
    _timed_command(
        benchmark,
        lambda i: [
            sys.executable,
            "-m",
            "harness.cli",
            "compare",
            str(a.path),
            str(b.path),
            "--csv",
            str(tmp_path / f"c{i}.csv"),
        ],
    )
    assert (tmp_path / "c0.csv").read_text().count("\n") == 100_000 + 1


@pytest.fixture(scope="module")
def history_of_five_100k(tmp_path_factory, two_runs_100k):
    """Five 100,000-row runs of one cluster in a history: the default baseline, median:5."""
    from harness.analysis import history
    from harness.collect.gather import collect
    from harness.collect.summary import write_summary

    root = tmp_path_factory.mktemp("history5")
    db = root / "history.sqlite"
    for k in range(5):
        run = make_run(root / f"h{k}", 4000, seed=10 + k)
        dated(run.path, FIRST_NIGHT + dt.timedelta(days=k))
        write_summary(run, *collect(run))
        history.add(db, run.path, "big", create=True)
    return db


def test_regress_100k_rows_against_5_runs(benchmark, two_runs_100k, history_of_five_100k, tmp_path):
    """`bench regress B` against the band of five 100,000-row history runs (the default
    baseline, median:5), interpreter start included: load B, read five summaries from SQLite,
    judge 100,000 keys, write report.md and junit.xml."""
    _, b = two_runs_100k
    db = history_of_five_100k

    def cmd(i):
        return [
            sys.executable,
            "-m",
            "harness.cli",
            "regress",
            str(b.path),
            "--cluster",
            "big",
            "--db",
            str(db),
            "--out",
            str(tmp_path / f"r{i}"),
        ]

    counter = itertools.count()
    benchmark.pedantic(
        lambda c: subprocess.run(c, stdout=subprocess.DEVNULL),
        setup=lambda: ((cmd(next(counter)),), {}),
        rounds=5,
        warmup_rounds=1,
        iterations=1,
    )
    junit = (tmp_path / "r0" / "junit.xml").read_text()
    assert junit.count("<testcase ") == 4000 and "between runs" in (tmp_path / "r0" / "report.md").read_text()


@pytest.fixture(scope="module", params=["repeated", "ordinary"])
def month_100k(request, tmp_path_factory, two_runs_100k):
    """Thirty 100,000-row runs of one cluster: a month of nightly runs. "repeated": one night
    thirty times, a band with no spread, which B leaves at 68,000 of its 100,000 keys (report.md
    lists each); "ordinary": each night measured afresh (its own seed), a band with the nights'
    spread, inside which B stays."""
    from harness.analysis import history
    from harness.collect.gather import collect
    from harness.collect.summary import write_summary

    root = tmp_path_factory.mktemp(request.param)
    db = root / "history.sqlite"
    run = make_run(root / "night", 4000, seed=100)
    for k in range(30):
        if request.param == "ordinary" and k:
            run = make_run(root / f"night{k}", 4000, seed=100 + k)
        dated(run.path, FIRST_NIGHT + dt.timedelta(days=k))  # another night: a plan the history has not seen
        write_summary(run, *collect(run))
        history.add(db, run.path, "month", create=True)
    return db, request.param


def test_regress_100k_rows_against_30_runs(benchmark, two_runs_100k, month_100k, tmp_path):
    """`bench regress B --baseline median:30` against a month of 100,000-row nights,
    interpreter start included (target under 1.5 s)."""
    _, b = two_runs_100k
    db, kind = month_100k
    counter = itertools.count()

    def cmd(i):
        return [sys.executable, "-m", "harness.cli", "regress", str(b.path), "--cluster", "month"] + [
            "--baseline",
            "median:30",
            "--db",
            str(db),
            "--out",
            str(tmp_path / f"r{i}"),
        ]

    benchmark.pedantic(
        lambda c: subprocess.run(c, stdout=subprocess.DEVNULL),
        setup=lambda: ((cmd(next(counter)),), {}),
        rounds=5,
        warmup_rounds=1,
        iterations=1,
    )
    report = (tmp_path / "r0" / "report.md").read_text()
    changed = sum(report.count(f"| {v} |") for v in ("slower", "faster"))
    assert "30 runs" in report and (changed > 50_000 if kind == "repeated" else changed < 20_000), changed


@pytest.fixture(scope="module")
def history_1000(tmp_path_factory):
    """1,000 runs of one cluster (small ones: the database's size is in the runs, the work in the lookups)."""
    from harness.analysis import history
    from harness.collect.gather import collect
    from harness.collect.summary import write_summary

    root = tmp_path_factory.mktemp("history")
    db = root / "history.sqlite"
    template = make_run(root / "template", 8)
    write_summary(template, *collect(template))
    for i in range(1000):
        # a distinct plan per run: the history refuses a plan it has seen
        dated(template.path, FIRST_NIGHT + dt.timedelta(hours=i))
        history.add(db, template.path, "c1000", label=f"r{i}", create=True)
    return db, template


@pytest.mark.parametrize(
    "command",
    [
        ["history", "list", "--cluster", "c1000"],
        ["regress", "RUN", "--cluster", "c1000", "--baseline", "median:5"],
        ["regress", "RUN", "--cluster", "c1000", "--baseline", "label:r10"],
    ],
)
def test_history_of_1000_runs(benchmark, history_1000, tmp_path, command):
    db, template = history_1000
    cmd = [
        sys.executable,
        "-m",
        "harness.cli",
        *[str(template.path) if c == "RUN" else c for c in command],
        "--db",
        str(db),
    ] + (["--out", str(tmp_path / "r")] if command[0] == "regress" else [])
    benchmark.pedantic(lambda: subprocess.run(cmd, stdout=subprocess.DEVNULL), rounds=5, warmup_rounds=1, iterations=1)


def test_plan_the_node_check_of_2048_nodes(benchmark):
    """`bench nodes`' plan of 2,048 nodes: 2,047 rounds of 1,024 pairs (target under 1 s)."""
    from harness.nodes.rounds import Options, schedule

    names = [f"gpu{i:04d}" for i in range(2048)]
    plan = benchmark.pedantic(schedule, args=(names, Options()), rounds=5, iterations=1)
    assert len(plan) == 2048 and sum(len(m) for _, m in plan) == 2048 + 2048 * 2047 // 2


def test_judge_the_node_check_of_2048_nodes(benchmark):
    """The verdict on every pair of 2,048 nodes, `bench nodes`' default: 2,096,128 pairs of two
    figures, one slow node and one slow link (target under 2 s)."""
    import itertools
    import random

    from harness.nodes.verdict import judge

    rng = random.Random(0)
    names = [f"gpu{i:04d}" for i in range(2048)]
    pairs = {}
    for a, b in itertools.combinations(names, 2):
        slow = 0.1 if "gpu0007" in (a, b) or (a, b) == ("gpu0100", "gpu0200") else 1.0
        pairs[(a, b)] = 45.0 * slow * rng.uniform(0.97, 1.03)
    figures = {"busbw_gbps": pairs, "p2p_gbps": dict(pairs)}
    v = benchmark.pedantic(judge, args=(names, {}, figures, 0.1, {}), rounds=3, iterations=1)
    assert v.drain == "gpu0007" and [f.nodes for f in v.links] == [("gpu0100", "gpu0200")]
