"""Real local runs, made once a session and shared, and copies of them rewritten to a test's need:
slower, noisier, planned later, a column dropped."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import shutil
import statistics
from pathlib import Path

import pyarrow as pa
import pyarrow.compute
import pyarrow.parquet as pq
import pytest

from support.process import SWEEPS, bench

# --------------------------------------------------------------------------- a real local run, and copies of it


def check_breakdown(row, wait_ms: float | None = None) -> bool:
    """A result's or summary row's step breakdown (docs/concepts/breakdown.md), checked: either judged,
    its four shares each in [0, 1] and adding up to the step within what 7 kept digits allow,
    the exposed part the step less the data wait (`wait_ms`, else the row's own share of it) and
    the slowest rank's compute; or not judged, no share at all, because the slowest rank's
    compute-only step and the wait were longer than the step. Whether it was judged."""
    from benchmarks.catalog import BREAKDOWN_FRACTIONS

    shares = [row[f] for f in BREAKDOWN_FRACTIONS]
    step, slowest = row["step_time_ms"], row["slowest_compute_time_ms"]
    if wait_ms is None:
        share = row["step_data_wait_fraction"]
        wait_ms = (share if share == share and share is not None else 0.0) * step  # NaN: not judged
    assert 0 < row["compute_time_ms"] <= slowest
    note = row["breakdown_note"]
    if isinstance(note, str) and note:  # a CSV's empty cell reads as NaN, not ""
        assert note.startswith("not judged (noise)")
        # a breakdown not judged keeps no wait share; its note says the wait, to 0.1 ms
        said = re.search(r", ([0-9.]+) ms of data wait,", note)
        waited = float(said.group(1)) + 0.05 if said else wait_ms
        assert all(v is None or v != v for v in shares) and slowest + waited > step * (1 - 1e-6), note
        return False
    assert all(0 <= v <= 1 for v in shares), shares
    assert sum(shares) == pytest.approx(1, abs=1e-5)
    assert row["exposed_comm_ms"] == pytest.approx(step - wait_ms - slowest, rel=1e-5, abs=1e-3)
    return True


@pytest.fixture(scope="session")
def real_run(tmp_path_factory):
    """One local sweep: 1 and 2 emulated nodes of 1 gloo rank, all-reduce and synthetic training."""
    root = tmp_path_factory.mktemp("cmp")
    out = root / "run"
    bench(
        "sweep",
        "sweeps/local.yaml",
        "--max-nodes",
        "2",
        "--executor",
        "local",
        "--out",
        str(out),
        "--set",
        "gpus_per_node=[1]",
        "--set",
        "workloads.allreduce.min_bytes=64K",
        "--set",
        "workloads.allreduce.max_bytes=1M",
        "--set",
        "workloads.allreduce.collectives=[all_reduce]",
        "--set",
        "workloads.synthetic.scaling=[weak]",
        "--set",
        "workloads.synthetic.steps=4",
        "--set",
        "workloads.synthetic.sync_free_steps=1",
        "--set",
        "workloads.real=false",
        timeout=600,
    )
    return out


@pytest.fixture(scope="session")
def scaling_run(tmp_path_factory):
    """A local sweep on 1 to 4 emulated nodes of 1 gloo rank, all-reduce at 256K, 1M and 4M and a
    short synthetic ResNet-18: the fewest node counts `bench predict` fits and validates from
    (two or more nodes, the largest held out). Read by tests/modules/harness/commands/test_planning.py."""
    out = tmp_path_factory.mktemp("scaling") / "run"
    bench(
        "sweep", "sweeps/local.yaml", "--executor", "local", "--out", str(out), "--max-nodes", "4",
        "--set", "nodes=[1, 2, 3, 4]", "--set", "gpus_per_node=[1]",
        "--set", "workloads.allreduce.min_bytes=256K", "--set", "workloads.allreduce.max_bytes=4M",
        "--set", "workloads.allreduce.collectives=[all_reduce]", "--set", "workloads.allreduce.iters=5",
        "--set", "workloads.allreduce.link_bytes=0",
        "--set", "workloads.synthetic.scaling=[weak]", "--set", "workloads.synthetic.image_size=32",
        "--set", "workloads.synthetic.steps=4", "--set", "workloads.synthetic.sync_free_steps=2",
        "--set", "workloads.real=false",
        timeout=600,
    )  # fmt: skip
    return out


@pytest.fixture(scope="session")
def fsdp_scaling_run(tmp_path_factory):
    """A local sweep on 2 to 4 emulated nodes of 1 gloo rank: the all-gather and reduce-scatter at
    64K to 1M, and a transformer of a few thousand parameters under FSDP2, weak: what `bench
    predict` fits an FSDP step from. Read by tests/modules/harness/commands/test_planning.py."""
    root = tmp_path_factory.mktemp("fsdp-scaling")
    sweep = root / "s.yaml"
    sweep.write_text(
        "name: fsdp-scaling\ndevice: cpu\nbackend: gloo\nnodes: [2, 3, 4]\ngpus_per_node: [1]\nlaunchers: [torchrun]\n"
        "env: {OMP_NUM_THREADS: '1'}\ntimeout_s: 180\nworkloads:\n"
        "  allreduce: {min_bytes: 64K, max_bytes: 1M, step_factor: 4, iters: 5, warmup_iters: 1, link_bytes: 0,"
        " collectives: [all_gather, reduce_scatter]}\n"
        "  transformer: {layers: 2, width: 32, heads: 4, seq_len: 16, vocab: 64, parallel: fsdp,"
        " scaling: [weak], batch_size: 2, steps: 3, warmup_steps: 1, sync_free_steps: 1}\n"
    )
    out = root / "run"
    bench("sweep", str(sweep), "--executor", "local", "--out", str(out), timeout=600)
    return out


@pytest.fixture(scope="session")
def mixed_run(tmp_path_factory):
    """One local sweep of today's traffic: 1 and 2 emulated nodes of 2 gloo ranks, every
    collective of the catalog at 256K on every group the job has, and the transformer (a shape
    counted by hand in tests/modules/benchmarks/test_transformer.py) under FSDP2, weak and
    strong. Read by tests/modules/benchmarks/test_groups.py, test_transformer.py beside it, and
    tests/modules/harness/config/test_peak.py."""
    from benchmarks.catalog import COLLECTIVES

    root = tmp_path_factory.mktemp("mixed")
    sweep = root / "s.yaml"
    sweep.write_text(
        "name: mixed\ndevice: cpu\nbackend: gloo\nnodes: [1, 2]\ngpus_per_node: [2]\nlaunchers: [torchrun]\n"
        "env: {OMP_NUM_THREADS: '1'}\ntimeout_s: 180\nworkloads:\n"
        "  allreduce: {min_bytes: 256K, max_bytes: 256K, iters: 3, warmup_iters: 1, link_bytes: 0,"
        f" collectives: [{', '.join(COLLECTIVES)}]}}\n"
        "  transformer: {layers: 2, width: 32, heads: 4, seq_len: 16, vocab: 64, parallel: fsdp,"
        " scaling: [weak, strong], batch_size: 2, global_batch: 4, steps: 3, warmup_steps: 1, sync_free_steps: 1}\n"
    )
    out = root / "run"
    result = bench("sweep", str(sweep), "--executor", "local", "--out", str(out), timeout=600)
    return out, result


def separating(run: Path) -> float:
    """A time factor that moves every sample of the run past every other: twice the run's
    largest over its smallest sample. Loopback gloo on 2 busy CPUs spreads samples 20x and
    more, so any fixed factor can leave some rows overlapping, and their verdicts to chance."""
    values = [v for row in pq.read_table(run / "samples.parquet").column("values").to_pylist() for v in row]
    return 2 * max(values) / min(values)


def copy_run(
    src: Path,
    dst: Path,
    *,
    time_factor: float = 1.0,
    drop: str | None = None,
    version: int | None = None,
    launcher: str | None = None,
    spread: float | None = None,
    size_factors: dict[int, float] | None = None,
    widen: float | None = None,
    nodes: set[int] | None = None,
) -> Path:
    """A copy of a run whose summary and samples are rewritten: times scaled by time_factor
    (rates divided), and the collectives' rows of a message size in `size_factors` by its
    factor too; a column dropped, the layout version or the launcher changed. `spread`
    draws each row's samples toward their median, in order, until its largest is at most that
    many times its smallest: for a test that needs a change of a given size to be significant
    within a run, which loopback gloo's 20x spreads (see `separating`) leave to chance. `widen`
    spreads each row's samples away from their median, in log space, by that factor: a busier
    night's run, its p90/p10 raised to the power `widen`. `nodes`: only the rows (and their jobs'
    samples) of these node counts, as a sweep of fewer node counts would have measured."""
    shutil.copytree(src, dst)
    summary = pq.read_table(dst / "summary.parquet")
    samples = pq.read_table(dst / "samples.parquet")
    cols = {n: summary.column(n) for n in summary.column_names}

    def factors(sizes: pa.ChunkedArray) -> pa.Array:  # each row's time factor
        by_size = size_factors or {}
        return pa.array([time_factor * by_size.get(b, 1.0) for b in sizes.to_pylist()], type=pa.float64())

    row_factor = factors(summary.column("size_bytes"))
    for name in ("time_us", "step_time_ms"):
        cols[name] = pa.compute.multiply(cols[name], row_factor)
    for name in ("busbw_gbps", "algbw_gbps", "images_per_s", "images_per_s_per_gpu"):
        cols[name] = pa.compute.divide(cols[name], row_factor)
    if launcher:
        cols["launcher"] = pa.array([launcher] * summary.num_rows, type=pa.string())
    meta = dict(summary.schema.metadata or {})
    if version is not None:
        meta.pop(b"bench_summary_version", None)
        if version > 1:
            meta[b"bench_summary_version"] = str(version).encode()
    table = pa.table({n: c for n, c in cols.items() if n != drop}).replace_schema_metadata(meta)
    if nodes is not None:
        counts = pa.array(sorted(nodes), table.column("nodes").type)
        table = table.filter(pa.compute.is_in(table.column("nodes"), counts))
        samples = samples.filter(pa.compute.is_in(samples.column("job"), table.column("job").unique()))
    pq.write_table(table, dst / "summary.parquet")
    rows = samples.column("values").to_pylist()
    if spread is not None:
        rows = [_narrowed(row, spread) for row in rows]
    if widen is not None:
        rows = [_about_median(row, widen) for row in rows]
    sample_factor = factors(samples.column("size_bytes")).to_pylist()
    values = pa.array([[v * f for v in row] for row, f in zip(rows, sample_factor)], type=pa.list_(pa.float64()))
    pq.write_table(samples.set_column(samples.column_names.index("values"), "values", values), dst / "samples.parquet")
    return dst


def _narrowed(row: list[float], spread: float) -> list[float]:
    """The samples drawn toward their median in log space: v -> m * (v/m)**e, with e such that
    the largest over the smallest is at most `spread`; their order and median stay."""
    if not row or min(row) <= 0 or max(row) / min(row) <= spread:
        return row
    return _about_median(row, math.log(spread) / math.log(max(row) / min(row)))


def _about_median(row: list[float], e: float) -> list[float]:
    """v -> m * (v/m)**e for the row's median m: its spread in log space times e."""
    if not row or min(row) <= 0:
        return row
    m = statistics.median(row)
    return [m * (v / m) ** e for v in row]


def planned_later(run_dir: Path, tag: str = "9") -> Path:
    """Make a copied run a run of its own: plan.json's time moves, and with it the run's
    fingerprint in the history. The tag, of digits, places the copy as it would sort before or
    after the original's year as text: read as the fraction 0.TAG against the year's 0.2026,
    whole hours of ten thousand ("9" about 290 days later, "1" about 43 days earlier, "01" before
    "02" before "1" before "2" before the original)."""
    plan = run_dir / "plan.json"
    data = json.loads(plan.read_text())
    hours = round((float(f"0.{tag}") - 0.2026) * 10_000)
    data["created"] = (dt.datetime.fromisoformat(data["created"]) + dt.timedelta(hours=hours)).isoformat()
    plan.write_text(json.dumps(data))
    return run_dir


@pytest.fixture(scope="session")
def local_check(tmp_path_factory):
    """Two emulated nodes of one gloo rank: one pair, the least check that runs every part of it
    (a population takes 3 nodes, so its verdict is "not judged", exit 3)."""
    out = tmp_path_factory.mktemp("nodes") / "check"
    r = bench(
        "nodes",
        "--executor",
        "local",
        "--nodes",
        "2",
        "--no-gemm",
        "--bytes",
        "256K",
        "--iters",
        "5",
        "--json",
        "--out",
        str(out),
        check=False,
        timeout=300,
    )
    return r, out


@pytest.fixture(scope="session")
def judged_history(real_run, local_check, tmp_path_factory) -> Path:
    """An SQLite history of every kind of row, for tests that only read it: four nights of
    cluster lab, 1 to 4 November 2026 at 02:00 UTC (runs 1-3 alike, run 4 at half their rates,
    failed by the gate with its bands and accepted), a stored change point at run 4, and a node
    check. The nights are beside it."""
    from harness.analysis import changes
    from harness.analysis.store import Location

    root = tmp_path_factory.mktemp("judged")
    db = str(root / "history.sqlite")
    for i, factor in enumerate((1, 1, 1, 2)):
        night = copy_run(real_run, root / f"n{i}", time_factor=factor)
        plan = json.loads((night / "plan.json").read_text())
        (night / "plan.json").write_text(json.dumps({**plan, "created": f"2026-11-0{i + 1}T02:00:00+00:00"}))
        if i == 3:  # judged: its verdict and bands, and it fails
            r = bench("regress", str(night), "--cluster", "lab", "--db", db, "--baseline", "median:3", check=False)
            assert r.returncode == 1, r.describe()
        bench("history", "add", str(night), "--create", "--cluster", "lab", "--label", f"night{i}", "--db", db)
    bench("history", "accept", "4", "--reason", "new firmware", "--db", db)
    step = changes.Change("busbw_gbps", "all_reduce 2x1", 4, "run 4", 1.0, 0.5, 0.01, "0123456789ab")
    changes.store(Location(db), "lab", changes.RUNS, ["busbw_gbps"], [step], 0.05)
    assert (
        bench("history", "add", str(local_check[1]), "--create", "--cluster", "lab", "--db", db, check=False).returncode
        == 3
    )
    return Path(db)


@pytest.fixture
def history_of(tmp_path):
    """A history database with the given runs added, oldest first."""

    def make(*runs: Path, cluster: str = "lab") -> Path:
        db = tmp_path / "history.sqlite"
        for r in runs:
            bench("history", "add", str(r), "--create", "--cluster", cluster, "--db", str(db))
        return db

    return make


def default_jobs(max_nodes: int = 8) -> list:
    """The jobs of sweeps/default.yaml, as `bench sweep --max-nodes N` plans them."""
    from harness.config.sweepfile import load_sweep
    from harness.run.plan import expand

    return expand(load_sweep(SWEEPS / "default.yaml", max_nodes=max_nodes))


@pytest.fixture
def data_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data-cache")
