"""Property-based tests (hypothesis) over everything bench reads: the sweep loader, the `--set`
parser, result files and the job table. Every input either loads or ends in one line with
exit status 2; none reaches a traceback."""

from __future__ import annotations

import copy
import itertools
import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from conftest import SWEEPS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.errors import BenchError
from harness.run.rundir import RunDir

sys.path.insert(0, str(Path(__file__).parent / "perf"))
from fixtures import make_run

LOCAL = yaml.safe_load((SWEEPS / "local.yaml").read_text())
FUZZ = settings(
    max_examples=int(os.environ.get("BENCH_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
_counter = itertools.count()

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(
        [
            "8",
            "64M",
            "0",
            "-5",
            ".nan",
            "weak",
            "all_reduce",
            "torchrun",
            "$(id)",
            "a\nb",
            "ON",
            "powers_of_two",
            "x" * 300,
        ]
    )
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.booleans() | st.integers(), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(tree, prefix=()):
    """Every key path of a nested mapping."""
    for key, value in tree.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from _paths(value, prefix + (key,))


SWEEP_PATHS = list(_paths(LOCAL))


def _set(tree: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(tree)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def _bench_sweep(tmp: Path, sweep_file: Path, *more: str, capsys) -> tuple[int, str]:
    out = tmp / f"out{next(_counter)}"
    capsys.readouterr()
    try:
        status = main(["sweep", str(sweep_file), "--dry-run", "--executor", "local", "--out", str(out), *more])
    except SystemExit as exc:  # argparse's own errors end the process, as they would in `bench`
        status = exc.code
    err = capsys.readouterr().err
    return status, err


def _one_line_or_success(status: int, err: str) -> None:
    assert status in (0, 2), err
    if status == 2:
        # `--set --=` is an option to argparse, refused by bench's own parser, not sweep's
        assert len(err.strip().splitlines()) == 1 and err.startswith(("bench sweep: error: ", "bench: error: ")), err
    assert "Traceback" not in err


@pytest.mark.slow
@FUZZ
@given(path=st.sampled_from(SWEEP_PATHS), value=values)
def test_any_value_anywhere_in_a_sweep(tmp_path, capsys, path, value):
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(yaml.safe_dump(_set(LOCAL, path, value)))
    _one_line_or_success(*_bench_sweep(tmp_path, sweep_file, "--max-nodes", "2", capsys=capsys))


@pytest.mark.slow
@FUZZ
@given(text=st.text(max_size=300) | st.binary(max_size=300))
def test_any_text_as_a_sweep_file(tmp_path, capsys, text):
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    _one_line_or_success(*_bench_sweep(tmp_path, sweep_file, capsys=capsys))


@pytest.mark.slow
@FUZZ
@given(
    key=st.sampled_from([".".join(p) for p in SWEEP_PATHS]) | st.text(max_size=20),
    raw=st.text(max_size=40) | st.sampled_from(["[1, 2]", "{a: 1}", "&a [*a]", ".inf", "null", "-1", "1e400"]),
)
def test_any_override(tmp_path, capsys, key, raw):
    status, err = _bench_sweep(
        tmp_path, SWEEPS / "local.yaml", "--max-nodes", "2", "--set", f"{key}={raw}", capsys=capsys
    )
    _one_line_or_success(status, err)


@pytest.fixture(scope="module")
def one_job_run(tmp_path_factory) -> RunDir:
    return make_run(tmp_path_factory.mktemp("fuzz") / "run", 2, iters=3)


def _result_path(run: RunDir) -> Path:
    job = run.jobs()[0]
    return run.path / job.result_path(job.runs[0])


@pytest.mark.slow
@FUZZ
@given(data=st.data())
def test_any_result_file_is_collected_or_left_out(one_job_run, data):
    """A result that parses but holds anything at all: collect keeps it or leaves it out with a
    warning naming it, and never raises."""
    from harness.collect.gather import collect

    path = _result_path(one_job_run)
    good = json.loads(path.read_text())
    try:
        if data.draw(st.booleans()):
            doc = data.draw(values)
        else:
            doc = _set(good, data.draw(st.sampled_from(list(_paths(good)))), data.draw(values))
        path.write_text(json.dumps(doc, allow_nan=True))
        warnings: list[str] = []
        summary, _ = collect(one_job_run, warn=warnings.append)
        statuses = set(summary.column("status").to_pylist())
        assert statuses <= {"COMPLETED", "MISSING"}
        if "MISSING" in statuses:
            assert any(str(path) in w for w in warnings), warnings
    finally:
        path.write_text(json.dumps(good))


@pytest.mark.slow
@FUZZ
@given(
    doc=values
    | st.fixed_dictionaries({"jobs": values})
    | st.fixed_dictionaries({"jobs": st.dictionaries(st.just("n1-g8-torchrun-s0"), values)})
)
def test_any_job_table_reads_or_is_refused(one_job_run, doc):
    table_file = one_job_run.table_file
    good = table_file.read_text()
    try:
        table_file.write_text(json.dumps(doc, allow_nan=True))
        try:
            table = one_job_run.read_table(one_job_run.jobs())
        except BenchError as exc:
            assert exc.exit_status == 2 and str(exc).startswith(str(table_file))
        else:
            assert all(isinstance(r.state, str) for r in table.values())
    finally:
        table_file.write_text(good)
