"""How a workload's process ends (benchmarks/runtime.py, `exit_rank`): a rank that has written
its result leaves without the interpreter's finalization, where torch's teardown has aborted
finished ranks; its status and its output still arrive."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import run


@pytest.mark.slow
def test_a_finished_rank_leaves_without_finalization(tmp_path):
    """A sitecustomize planted on PYTHONPATH registers an atexit handler in every Python process
    of `bench run allreduce --nproc 1`: the workload's own process, torchrun's agent and the
    rank. Only the agent, which is torch's code, finalizes; the other two leave by os._exit
    after flushing, and the result, the table and the exit status are all there."""
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "sitecustomize.py").write_text(
        "import atexit, os\n"
        f"atexit.register(lambda: open(os.path.join({str(marks)!r}, 'finalized-%d' % os.getpid()), 'w').close())\n"
    )
    out = tmp_path / "out.json"
    r = run(
        [sys.executable, "-m", "benchmarks.allreduce", "-b", "1K", "-e", "1K", "--iters", "1", "--warmup-iters", "0"]
        + ["--nproc", "1", "--link-bytes", "0", "--json", str(out)],
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert f"# result written to {out}" in r.stdout and json.loads(out.read_text())["world_size"] == 1
    assert len(list(marks.iterdir())) == 1, sorted(p.name for p in marks.iterdir())
