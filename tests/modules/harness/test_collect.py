"""`bench collect` stopped at many points, by Ctrl-C and by kill -9: what a reader then finds is
the old summary set or the new one, never a mix, and the next collect leaves nothing behind
(docs/run-directory.md; tests/perf/collect_interrupt.py is the large version)."""

from __future__ import annotations

import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "perf"))

from collect_interrupt import interrupt_points


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
