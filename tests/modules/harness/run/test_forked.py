"""harness/run/forked.py's `beside`: work done by a real forked process while this one goes on, what
it made handed back whole, and the work done here wherever the worker left nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

from harness.errors import DataError
from harness.run import forked

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a worker runs beside only with two cores")


def _pids(path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _noting(path, then):
    """Work that notes the process it ran in, then does `then`."""

    def work():
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")
        return then()

    return work


def test_what_the_worker_made_comes_back_whole_and_changeable(tmp_path):
    """A frame of 100,000 rows, text among its columns, and an array, made in the worker: equal
    here, and changeable in place as if made here (the mapping is private and writable)."""
    texts = pd.array([f"key {i % 977}" for i in range(100_000)], dtype="string")

    def make():
        return pd.DataFrame({"x": np.arange(100_000) / 7, "key": texts}), np.arange(10)

    with forked.beside(_noting(tmp_path / "pids", make)) as made:
        frame, array = made()
    assert _pids(tmp_path / "pids") != [os.getpid()] and len(_pids(tmp_path / "pids")) == 1
    pd.testing.assert_frame_equal(frame, make()[0])
    assert array.tolist() == list(range(10))
    array[0] = 7
    frame.loc[3, "x"] = -1.0
    assert array[0] == 7 and frame["x"][3] == -1.0


def test_a_bench_error_in_the_worker_is_raised_here_once(tmp_path):
    def fail():
        raise DataError("run r: the table is damaged", exit_status=3)

    with forked.beside(_noting(tmp_path / "pids", fail)) as made, pytest.raises(DataError) as raised:
        made()
    assert str(raised.value) == "run r: the table is damaged" and raised.value.exit_status == 3
    assert len(_pids(tmp_path / "pids")) == 1 and os.getpid() not in _pids(tmp_path / "pids")  # not done again


class _Unpicklable(DataError):
    """An error whose pickle does not come back (its __init__ takes other arguments than its
    message), as history.NewSeries."""

    def __init__(self, newest: str, why: list[str]):
        self.newest = newest
        super().__init__(f"{newest}: {'; '.join(why)}")


def test_an_error_that_cannot_come_back_has_the_work_done_here(tmp_path):
    def fail():
        raise _Unpicklable("night 3", ["NCCL 2.21 vs 2.23"])

    with forked.beside(_noting(tmp_path / "pids", fail)) as made, pytest.raises(_Unpicklable) as raised:
        made()
    assert raised.value.newest == "night 3" and str(raised.value) == "night 3: NCCL 2.21 vs 2.23"
    worker, here = _pids(tmp_path / "pids")
    assert worker != here == os.getpid()


def test_a_worker_killed_has_its_work_done_here(tmp_path):
    """SIGKILL, as the kernel's OOM killer sends it: no result, so the work is done here."""
    parent = os.getpid()

    def work():
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return "made here"

    with forked.beside(_noting(tmp_path / "pids", work)) as made:
        assert made() == "made here"
    assert len(_pids(tmp_path / "pids")) == 2 and _pids(tmp_path / "pids")[1] == parent


def test_leaving_the_block_ends_a_worker_still_running(tmp_path):
    pids = tmp_path / "pids"
    started = time.monotonic()
    with pytest.raises(KeyError), forked.beside(_noting(pids, lambda: time.sleep(60))):
        while not pids.exists():
            time.sleep(0.01)
        raise KeyError("this process failed in its own part")
    assert time.monotonic() - started < 30
    with pytest.raises(ProcessLookupError):  # ended and reaped
        os.kill(_pids(pids)[0], 0)


def test_with_one_core_the_work_is_done_here(tmp_path):
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(mask)})
    try:
        with forked.beside(_noting(tmp_path / "pids", lambda: 5)) as made:
            assert made() == 5
    finally:
        os.sched_setaffinity(0, mask)
    assert _pids(tmp_path / "pids") == [os.getpid()]


def test_a_worker_that_made_no_table_imports_no_arrow(tmp_path):
    """Where neither side has Arrow (a sweep writing its job files), the worker's result goes
    through the memory file as a pickle alone: pyarrow's import, 0.1 s, is in neither process
    (an audit hook, which the worker inherits, notes each process that imports it)."""
    code = (
        "import os, sys\n"
        "def hook(event, args):\n"
        "    if event == 'import' and args[0] == 'pyarrow':\n"
        f"        open({str(tmp_path / 'imported')!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        "sys.addaudithook(hook)\n"
        "from harness.run import forked\n"
        "with forked.beside(lambda: os.getpid()) as made:\n"
        "    print(made() != os.getpid())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "True\n" and not (tmp_path / "imported").exists()
