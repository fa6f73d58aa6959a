"""PyTorch's flight recorder read back (harness/evidence/flight.py): dumps written by real gloo
ranks with bench's dumper (benchmarks/recorder.py), each holding a fault the test injects
(tests/support/flight_ranks.py), read by bench and by PyTorch's analyser."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.recorder import dump_path
from harness.evidence import flight, hangs

RANKS = Path(__file__).resolve().parents[3] / "support" / "flight_ranks.py"


def _faulty_ranks(job_dir: Path, fault: str) -> tuple[subprocess.Popen, flight.Reading]:
    """4 ranks under torchrun come to `fault`; once they are there, the harness asks for their
    dumps, as its stall watch does, and reads them."""
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "2000", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4"]
    proc = subprocess.Popen(
        [*cmd, str(RANKS), str(job_dir), fault], env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(list(job_dir.glob("at-fault.rank*"))) < 4:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        time.sleep(1)  # the ranks that can go on are in their next call
        flight.ask(job_dir, "w")
        able = [0, 1, 3] if fault == "stop" else [0, 1, 2, 3]
        flight.wait_for(job_dir, "w", able, 30)
        return proc, flight.examine(job_dir, "w", 4)
    finally:
        os.killpg(proc.pid, signal.SIGCONT)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        _end_ranks(job_dir)


def _end_ranks(job_dir: Path) -> None:
    """torchrun starts each rank in a session of its own, out of reach of the agent's group: once
    the agent is killed they would live on (a stopped one forever), so each is ended by the job
    directory its command line names."""
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:  # ended meanwhile
            continue
        if str(RANKS).encode() in argv and str(job_dir).encode() in argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


def test_a_rank_stopped_before_an_all_reduce_is_the_one_without_a_dump(tmp_path):
    """Rank 2 stopped before the fourth all-reduce: ranks 0, 1 and 3 entered it and did not
    complete it; rank 2 did not dump; PyTorch's analyser cannot decide without it."""
    _, reading = _faulty_ranks(tmp_path, "stop")
    assert reading.dumped == [0, 1, 3] and reading.unread == {}
    assert reading.stuck == flight.Entry("0:default_pg", 4, "gloo:all_reduce", "65536 Float")
    assert (reading.entered, reading.done, reading.behind) == ([0, 1, 3], [], {})
    assert reading.analyser == ["cannot decide: no dump from ranks 2"], reading
    assert hangs.recorded(reading, 4) == (
        "flight recorder: ranks 0, 1, 3 entered gloo:all_reduce #4 (65536 Float) and did not complete it; "
        "no dump from rank 2; PyTorch's analyser: cannot decide: no dump from ranks 2"
    )


def test_a_broadcast_of_another_size_is_named_by_the_analyser(tmp_path):
    """Rank 2's broadcast of 8,192 floats where rank 0 sends 4,096: gloo completes it, and
    PyTorch's analyser, on bench's copies of the dumps whose groups are named, names rank 2 and
    both sizes at sequence number 4."""
    _, reading = _faulty_ranks(tmp_path, "size")
    assert reading.dumped == [0, 1, 2, 3]
    assert reading.analyser == [
        "gloo:broadcast #4: Culprit rank 2; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: "
        "'[[4096]]' does not match found input sizes: '[[8192]]'"
    ], reading
    # the dumps as torch wrote them: the analyser refuses gloo's, whose groups are unnamed
    raw = flight.Reading()
    copies = tmp_path / "raw"
    copies.mkdir()
    for rank in range(4):
        (copies / f"rank{rank}").write_bytes(Path(dump_path(tmp_path / flight.DIR, "w", rank)).read_bytes())
    flight.analyse(copies, False, raw)
    assert raw.analyser == [] and raw.analyser_error and raw.analyser_error.startswith("failed: KeyError"), raw


def test_a_dump_that_names_a_class_is_refused_unrun(tmp_path):
    """A pickle is code: a dump planted in a run directory that would call a function when
    loaded is refused, and the function is not called."""
    marker = tmp_path / "ran"

    class Planted:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    path = tmp_path / "w.rank0"
    path.write_bytes(pickle.dumps({"entries": [Planted()], "version": "2.10"}))
    with pytest.raises(ValueError, match=r"w.rank0: not a flight-recorder dump \(a dump holds posix.mkdir"):
        flight.load_dump(path)
    assert not marker.exists()
    path.write_bytes(b"\x80\x04K\x05.")  # a pickle of the number 5
    with pytest.raises(ValueError, match="no list of entries"):
        flight.load_dump(path)
