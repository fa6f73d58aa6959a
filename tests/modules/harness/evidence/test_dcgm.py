"""DCGM's diagnostic of a node's GPUs (harness/evidence/dcgm.py): `dcgmi diag -j` as DCGM 3.1.0
printed it (the output NVIDIA keeps in its own test) and as DCGM 4.x's schema states it
(tests/fixtures/dcgm/, each with its source in its header); what a run that did not tell is said
as; and a node check whose nodes run a stand-in dcgmi that prints them, which no GPU here can."""

from __future__ import annotations

import json
import os
import stat

import pytest
from conftest import ROOT, bench, read_json

from harness.evidence import dcgm

FIXTURES = ROOT / "tests" / "fixtures" / "dcgm"
PASSED, FAILED = "dcgmi-3.1.0-pass.txt", "dcgmi-4.6.0-schema-fail.txt"


def output(name: str) -> str:
    return "".join(line for line in (FIXTURES / name).read_text().splitlines(True) if not line.startswith("##"))


def ran(stdout: str, returncode: int | None = 0, stderr: str = "", level: int = 2) -> dict:
    return {
        "version": 1,
        "level": level,
        "missing": False,
        "returncode": returncode,
        "stdout": stdout,
        "stderr": stderr,
    }


def test_dcgm_3_s_document_is_read_after_the_line_before_it_and_its_nulls():
    version, results, error = dcgm.parse(output(PASSED))
    assert (version, error, len(results)) == ("3.1.0", None, 9 + 8)
    assert (results[0].category, results[0].test, results[0].entity, results[0].status) == (
        "Deployment", "Denylist", "GPUs 0,1,2,3,4,5,6,7", "pass"
    )  # fmt: skip
    assert [r.entity for r in results[9:]] == [f"GPU {g}" for g in range(8)]
    found = dcgm.judge("h1", ran(output(PASSED)))
    assert (found.named, found.unjudged, found.unread) == ([], [], [])


def test_dcgm_4_s_failed_gpu_is_named_its_warning_said_and_its_skips_are_not_failures():
    version, results, error = dcgm.parse(output(FAILED))
    assert (version, error, len(results)) == ("4.6.0", None, 4 * 8)
    found = dcgm.judge("h1", ran(output(FAILED), returncode=226))
    assert found.named == ["dcgmi diag -r 2: memory failed on GPU 3: GPU 3: DBE memory error detected"]
    assert found.unread == ["dcgmi diag -r 2: pcie warned on GPU 5: GPU 5: PCIe replay count rose"]
    assert found.unjudged == []


@pytest.mark.parametrize(
    ("record", "said"),
    [
        ({"version": 1, "level": 1, "missing": True, "returncode": None}, "dcgmi is not on the node (its PATH)"),
        (ran("", returncode=None, level=3), "dcgmi diag -r 3 did not end within 7200 s and was ended"),
        (
            ran(
                "", returncode=255, stderr="Error: unable to establish a connection to the specified host: localhost\n"
            ),
            "dcgmi diag -r 2 exited 255 without DCGM's JSON (no JSON document): Error: unable to establish",
        ),
        (ran('{"DCGM Diagnostic": {"runtime_error": "No GPUs to run on"}}', 1), "dcgmi diag -r 2 stopped: No GPUs"),
        (ran(output(FAILED).replace('"Pass"', '"Skip"').replace('"Fail"', '"Skip"')), "passed no test (DCGM 4.6.0)"),
        (ran(output(PASSED), returncode=1), "dcgmi diag -r 2 exited 1 though no test of its output failed"),
        (ran('{"DCGM Diagnostic": {"test_categories": {"a": 1}}}'), "test_categories is not a list"),
        (ran('{"Other": {}}'), 'no "DCGM Diagnostic" (4.x) or "DCGM GPU Diagnostic" (3.x) object'),
    ],
)
def test_a_run_that_cannot_tell_is_not_judged_and_says_why(record, said):
    found = dcgm.judge("h1", record)
    assert found.named == [] and len(found.unjudged) == 1 and said in found.unjudged[0], found.unjudged


def test_a_node_without_a_kept_run_or_with_a_damaged_one_is_not_judged(tmp_path):
    (tmp_path / "h2.json").write_text("{not json")
    (tmp_path / "h3.json").write_text(json.dumps({"version": 9}))
    found = dcgm.read_check(tmp_path, ["h1", "h2", "h3"])
    assert [f.unjudged[0].split(" (")[0] for f in found] == [
        "no run of DCGM's diagnostic was kept",
        "its run of DCGM's diagnostic cannot be read",
        f"{tmp_path / 'h3.json'}: not a run of DCGM's diagnostic",
    ]


def test_a_check_s_nodes_run_dcgm_s_diagnostic_and_the_failed_gpu_s_node_is_drained(tmp_path):
    """Two emulated nodes, each running a stand-in dcgmi on its PATH that prints what DCGM printed:
    local0 the 3.1.0 node whose every test passed, local1 the 4.x node whose GPU 3 failed its memory
    test. The check runs the diagnostic on every node before its rounds, keeps each node's output,
    and names local1 for its GPU, the test and DCGM's words in the reason; local0 is not named."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in (PASSED, FAILED):
        (bin_dir / name).write_text(output(name))
    stand_in = bin_dir / "dcgmi"
    stand_in.write_text(
        "#!/bin/sh\n# dcgmi diag -r LEVEL -j, as DCGM printed it on the node this emulated node stands for\n"
        f'[ "$1 $2 $4" = "diag -r -j" ] || exit 64\n'
        f'if [ "$BENCH_NODE" = local1 ]; then cat {bin_dir / FAILED}; exit 226; fi\ncat {bin_dir / PASSED}\n'
    )
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "check"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    check = ("nodes", "--executor", "local", "--nodes", "2", "--bytes", "1M", "--iters", "3", "--dcgm", "1")
    r = bench(*check, "--out", str(out), check=False, timeout=300, env=env)
    assert r.returncode == 1, r.describe()
    v = read_json(out / "verdict.json")
    assert v["drain"] == "local1" and [n["node"] for n in v["nodes_named"]] == ["local1"], v["nodes_named"]
    assert v["nodes_named"][0]["reasons"] == [
        "DCGM: dcgmi diag -r 1: memory failed on GPU 3: GPU 3: DBE memory error detected"
    ]
    assert "local1: dcgmi diag -r 1: pcie warned on GPU 5: GPU 5: PCIe replay count rose" in v["not_read"]
    kept = read_json(out / "jobs/nodes/dcgm/local0.json")
    assert (kept["level"], kept["returncode"], kept["missing"]) == (1, 0, False) and "3.1.0" in kept["stdout"]
