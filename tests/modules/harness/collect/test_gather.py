"""`bench collect` stopped at many points, by Ctrl-C and by kill -9: what a reader then finds is
the old summary set or the new one, never a mix, and the next collect leaves nothing behind
(docs/reference/run-directory.md; tests/perf/collect_interrupt.py is the large version)."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest
from conftest import ROOT, bench
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(ROOT / "tests" / "perf"))

from collect_interrupt import interrupt_points
from fixtures import make_run


@pytest.mark.slow
def test_collect_interrupted_at_eight_points(tmp_path):
    rows = interrupt_points(tmp_path / "run", n_jobs=400, points=8)
    assert all(r["set"] in ("old", "new") for r in rows), rows
    assert all(not r["after_next_collect"] for r in rows), rows
    for r in rows:
        assert "Traceback" not in r["stderr"], r
        if r["signal"] == "SIGINT" and r["exit"] == 130:
            assert r["stderr"] == "bench collect: interrupted", r
    assert {r["set"] for r in rows} == {"old", "new"}, "no point fell before or after the commit: " + str(rows)


def test_a_null_sample_is_nan_and_the_run_still_compares(tmp_path):
    """A result writes a non-finite sample as null (json_safe); collect keeps it as NaN, which
    no test uses, never as a null, which every comparison refuses as damage."""
    import pyarrow.parquet as pq

    run = make_run(tmp_path / "run", 2, iters=20)
    job = run.jobs()[0]
    path = run.path / job.result_path(job.runs[0])
    result = json.loads(path.read_text())
    result["rows"][0]["samples_us"][1] = None
    path.write_text(json.dumps(result))
    bench("collect", str(run.path))
    values = pq.read_table(run.samples_parquet).column("values").combine_chunks()
    first = values[0].as_py()
    assert values.flatten().null_count == 0 and len(first) == 20 and math.isnan(first[1]), first
    assert pq.read_table(run.summary_parquet).column("n_samples")[0].as_py() == 19
    r = bench("compare", str(run.path), str(run.path), check=False)
    assert r.returncode == 0 and "no significant change" in r.stdout, r.describe()


def test_a_sample_no_float_holds_is_refused():
    """orjson reads a whole number past 64 bits as a float (or refuses it); the json module, the
    fallback where orjson is missing, keeps it whole, and NumPy could not make it a float."""
    from harness.collect.gather import _checked_samples

    assert _checked_samples([[1, 2.5, None], [2**53]]) == [[1, 2.5, None], [2**53]]
    for lists in ([[1.0, 2**1100]], [[-(2**54)]]):
        with pytest.raises(ValueError, match="a sample is a whole number past 2"):
            _checked_samples(lists)


def test_summary_csv_is_one_csv_though_encoded_in_halves(tmp_path):
    """write_summary encodes summary.csv as two halves side by side, the second without the
    header: put together they are the bytes of one write, at any row count."""
    import io

    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from harness.collect.summary import _encoded

    def whole(table: pa.Table) -> bytes:
        buf = io.BytesIO()
        pacsv.write_csv(table, buf)
        return buf.getvalue()

    for n in (0, 1, 2, 7):
        table = pa.table({"job": [f'j{i},"q"\nx' for i in range(n)], "time_us": [i / 3 for i in range(n)]})
        parquet, csv, samples = _encoded(table, table[:1])
        assert csv == whole(table), n
        assert pq.read_table(io.BytesIO(parquet)).equals(table) and pq.read_table(io.BytesIO(samples)).num_rows == min(
            n, 1
        )

    run = make_run(tmp_path / "run", 3)  # 75 rows: halves of 37 and 38
    bench("collect", str(run.path))
    summary = pq.read_table(run.summary_parquet)
    text = run.summary_csv.read_bytes()
    assert summary.num_rows == 75 and text == whole(summary) and text.count(b'"job"') == 1


def _collected(run: Path, *args: str) -> tuple[str, dict]:
    """`bench collect RUN ARGS`: its warnings, and what it wrote (the tables and the CSV's bytes)."""
    import pyarrow.parquet as pq

    r = bench("collect", str(run), *args)
    return r.stderr, {
        "summary": pq.read_table(run / "summary.parquet"),
        "samples": pq.read_table(run / "samples.parquet"),
        "csv": (run / "summary.csv").read_bytes(),
    }


def _damage(run: Path, job: str) -> None:
    """Cut job's all-reduce result short: collect skips it with a warning naming the file."""
    path = run / "jobs" / job / "allreduce.json"
    path.write_bytes(path.read_bytes()[:100])


def test_a_run_read_by_two_workers_is_the_run_read_by_one(mixed_run, tmp_path):
    """Job n1's results read here, n2's by a forked worker: the same tables, the same CSV, the
    same warnings in the same order; the transformer's speedup at 2 nodes, worked out against
    the 1-node job of the other share, as one process works it out."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(mixed_run[0], run, symlinks=True)
    jobs = sorted(p.name for p in (run / "jobs").iterdir())
    assert len(jobs) == 2, jobs
    for job in jobs:
        _damage(run, job)
    one_warnings, one = _collected(run, "--workers", "1")
    two_warnings, two = _collected(run, "--workers", "2")
    assert [line.split(":")[1] for line in one_warnings.splitlines()] == [
        f" skipping {run}/jobs/{j}/allreduce.json" for j in jobs
    ]
    assert two_warnings == one_warnings
    assert two["summary"].equals(one["summary"], check_metadata=True) and two["csv"] == one["csv"]
    assert two["samples"].equals(one["samples"], check_metadata=True)
    summary = two["summary"].to_pylist()
    strong = {r["nodes"]: r for r in summary if r["workload"] == "transformer" and r["scaling"] == "strong"}
    assert strong[1]["speedup"] == 1.0
    assert strong[2]["speedup"] == pytest.approx(strong[2]["tokens_per_s"] / strong[1]["tokens_per_s"])


def test_a_worker_killed_has_its_share_read_here(tmp_path):
    """A worker that dies (SIGKILL, as the kernel's OOM killer sends it) leaves no part: collect
    reads that share itself and writes the whole summary."""
    import signal
    import subprocess
    import time

    run = make_run(tmp_path / "run", 1000)
    p = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "collect", str(run.path), "--workers", "2"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    children = Path(f"/proc/{p.pid}/task/{p.pid}/children")
    worker = ""
    while p.poll() is None and not worker:
        worker = children.read_text().strip() if children.exists() else ""
        time.sleep(0.001)
    assert worker, "collect ended before its worker was seen"
    os.kill(int(worker), signal.SIGKILL)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0 and err == "", (p.returncode, err)
    assert "25000 summary rows (25000 COMPLETED)" in out, out
    _, whole = _collected(run.path, "--workers", "1")
    _, again = _collected(run.path, "--workers", "2")
    assert again["summary"].equals(whole["summary"], check_metadata=True) and again["csv"] == whole["csv"]


_TEXTS = st.text(max_size=12)
_FEW_TEXTS = st.sampled_from(["all_reduce", "world", "ünï", "", "nvlink"])


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.tuples(st.just("float64"), st.lists(st.none() | st.floats(allow_nan=False) | st.integers(-(2**53), 2**53))),
        st.tuples(st.just("int64"), st.lists(st.none() | st.integers(-(2**63), 2**63 - 1))),
        st.tuples(st.just("string"), st.lists(st.none() | _TEXTS)),
        st.tuples(st.just("string"), st.lists(st.none() | _FEW_TEXTS, min_size=8, max_size=200)),
    )
)
def test_arrays_made_from_buffers_are_what_pa_array_makes(case):
    """collect builds its arrays from their buffers (pa.array would import pandas): for every
    value a summary column holds, the same array as pa.array's, nulls where the Nones are."""
    import pyarrow as pa

    from harness.collect.summary import arrow_array, arrow_scalar

    name, values = case
    arrow = getattr(pa, name)()
    made = arrow_array(values, arrow)
    assert made.type == arrow and made.equals(pa.array(values, type=arrow)), (values, made)
    if values:
        assert arrow_scalar(values[0], arrow).equals(pa.scalar(values[0], type=arrow))


def test_arrays_from_numpy_keep_nan_apart_from_null():
    import numpy as np
    import pyarrow as pa

    from harness.collect.summary import arrow_array, numpy_array

    values = np.array([1.5, np.nan, -0.0, np.inf, 7.0])
    made = numpy_array(values, np.array([True, True, False, True, True]))
    assert [repr(v) for v in made.to_pylist()] == ["1.5", "nan", "None", "inf", "7.0"]
    assert numpy_array(np.arange(5, dtype=np.int32)).type == pa.int32() and numpy_array(np.arange(3)).null_count == 0
    assert [repr(v) for v in arrow_array([float("nan"), None, 2], pa.float64()).to_pylist()] == ["nan", "None", "2.0"]
    with pytest.raises(TypeError):
        numpy_array(np.array([True, False]))


def test_collect_imports_no_pandas(tmp_path):
    """A collect in a process of its own, with a worker, leaves pandas unimported: 0.12 s of each
    process (harness/collect/summary.py says why)."""
    import subprocess

    run = make_run(tmp_path / "run", 4)
    code = (
        "import sys; from harness.cli import main; status = main(['collect', sys.argv[1], '--workers', '2']); "
        "print(status, 'pandas' in sys.modules)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(run.path)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert r.stdout.split()[-2:] == ["0", "False"], r.stdout + r.stderr
