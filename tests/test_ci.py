"""The tiers and the CI script (CONTRIBUTING.md, "Test tiers"): which tests each tier selects,
that CI cannot pass by skipping the testbed, and that the suite's times are quoted in one place."""

from __future__ import annotations

import os
import re
import shutil
import sys

import pytest
from conftest import ROOT, run

# Proofs without the testbed, marked by hand: too long for the default tier, or needing the
# machine to themselves (CONTRIBUTING.md)
LOCAL_PROOFS = (
    "tests/modules/harness/test_check_nodes.py::test_a_link_that_reads_low_once_is_measured_again_and_not_named",
    "tests/proofs/test_nightly_testbed.py::test_three_unshaped_nights_fail_no_key_on_the_local_executor",
    "tests/test_packaging.py::test_a_wheel_in_a_fresh_venv_runs_the_shipped_sweeps",
    "tests/modules/harness/test_sweep.py::test_a_failing_workload_fails_its_job_and_the_sweep_goes_on",
    "tests/modules/harness/test_sweep.py::test_a_job_past_its_time_limit_is_killed_and_recorded_timeout",
    "tests/modules/harness/test_sweep.py::test_ctrl_c_leaves_a_consistent_run_that_resumes_without_rerunning",
)
TESTBED_MODULES = sorted(
    p.relative_to(ROOT / "tests").as_posix() for p in (ROOT / "tests" / "proofs").glob("test_*.py")
)


# A plugin for one collection of every test: its id and its tier markers, in the order pytest
# would run them (after the suite's own reordering)
TIER_MARKS = """
def pytest_collection_finish(session):
    for item in session.items:
        marks = {m.name for m in item.iter_markers()} & {"proof", "testbed"}
        print("TIER", item.nodeid, ",".join(sorted(marks)) or "-")
"""


def tiers(tmp_path) -> list[tuple[str, set[str]]]:
    """Every test id with its tier markers, from one `pytest --collect-only` of all of them
    (`-m ""` lifts the default tier's `-m 'not proof'`): `-m proof` would select those marked
    proof, in this order, and the default tier those not. One process, not one per tier."""
    (tmp_path / "tier_marks.py").write_text(TIER_MARKS)
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-m", "", "-p", "tier_marks"]
    out = run(command, cwd=ROOT, env={"PYTHONPATH": str(tmp_path)}).stdout
    found = [line[len("TIER ") :].rsplit(" ", 1) for line in out.splitlines() if line.startswith("TIER ")]
    return [(test, set(marks.split(",")) - {"-"}) for test, marks in found]


def test_the_default_tier_leaves_out_every_proof_but_the_smoke(tmp_path):
    found = tiers(tmp_path)
    default = [t for t, marks in found if "proof" not in marks]
    proof = [t for t, marks in found if "proof" in marks]
    testbed = [t for t, marks in found if "testbed" in marks]
    assert len(default) > 700 and len(proof) > 50, (len(default), len(proof))
    smoke = "tests/proofs/test_smoke_testbed.py::test_a_small_sweep_runs_through_the_slurm_executor"
    assert [t for t in default if t in testbed] == [smoke]
    assert sorted(proof) == sorted((set(testbed) - {smoke}) | set(LOCAL_PROOFS))
    assert not set(LOCAL_PROOFS) & set(default)
    assert {t.split("::")[0] for t in proof} == {f"tests/{m}" for m in TESTBED_MODULES if "smoke" not in m} | {
        t.split("::")[0] for t in LOCAL_PROOFS
    }
    assert proof[-1] == "tests/proofs/test_testbed.py::test_down_leaves_the_machine_as_found"


def unprivileged(*cmd: str, env: dict[str, str]) -> tuple[int, str]:
    """`CMD` in a user namespace of its own, where it is uid 65534 with no capabilities: not
    root to `id -u` and to the testbed, while it still reads the checkout and the venv."""
    p = run(["unshare", "--user", "env", "-i", *[f"{k}={v}" for k, v in env.items()], *cmd], cwd=ROOT, check=False)
    return p.returncode, p.stdout + p.stderr


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="a user namespace of one's own needs root here"
)


@needs_root
def test_ci_without_root_fails_at_once_and_says_why():
    status, out = unprivileged("bash", ".ci/run", env={"PATH": os.environ["PATH"]})
    assert status == 1, out
    assert out.strip() == (
        ".ci/run: FAILED: the proof tier runs on the Slurm testbed (tests/testbed/testbed), which needs root; "
        "this is uid 65534"
    )


@needs_root
def test_under_ci_a_testbed_test_fails_rather_than_skips_without_root():
    test = "tests/proofs/test_smoke_testbed.py"
    args = (sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", test)
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    status, out = unprivileged(*args, env={**env, "CI": "true"})
    assert status == 1 and "1 error" in out, out
    assert "CI must run the Slurm testbed, but: the Slurm testbed needs root" in out
    status, out = unprivileged(*args, env=env)  # elsewhere, it skips and says why
    assert status == 0 and "1 skipped" in out and "the Slurm testbed needs root" in out, out


def test_the_suite_s_times_are_quoted_only_in_contributing():
    """README and CONTRIBUTING once quoted different times; now only CONTRIBUTING does, with the
    date and commit they were measured at, and README points there."""
    readme = (ROOT / "README.md").read_text()
    tests = next(p for p in readme.split("\n\n") if p.startswith("The second command"))
    assert not re.search(r"\d+(\.\d+)? ?(minutes|min|s)\b", tests), tests
    assert "CONTRIBUTING.md gives each tier's command and its measured time" in tests
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    # one table of CI times, each row with the date and commit it was measured at
    assert re.search(r"^\| \d{4}-\d{2}-\d{2} \| [0-9a-f]{7,} \|", contributing, re.M)
    budget = re.search(r"PROOF_BUDGET_S:-(\d+)", (ROOT / ".ci" / "run").read_text())
    assert budget and f"budget of {int(budget.group(1)) // 60} min" in contributing


SHARING = """\
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def sweep():
    # a sweep that one worker builds: each build leaves a file named for its worker
    Path(os.environ["BUILDS"], os.environ.get("PYTEST_XDIST_WORKER", "main")).touch()


@pytest.mark.parametrize("k", range(8))
def test_reads_the_sweep(sweep, k):
    pass


@pytest.mark.parametrize("k", range(8))
def test_alone(k):
    pass
"""


def test_tests_that_share_a_sweep_run_on_one_worker(tmp_path):
    """Under -n 2 the tests of one module-scoped fixture go to one worker, which builds it once
    (conftest.shared_groups): with pytest-xdist 3.8 under pytest 9.2 the grouping is silently lost
    and both workers build it, which doubled the default tier's sweeps."""
    (tmp_path / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    shutil.copytree(
        ROOT / "tests" / "support", tmp_path / "tests" / "support", ignore=shutil.ignore_patterns("__pycache__")
    )
    (tmp_path / "tests" / "test_sharing.py").write_text(SHARING)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    builds = tmp_path / "builds"
    builds.mkdir()
    args = ("-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider")
    out = run(
        [sys.executable, "-m", "pytest", *args, "tests"], cwd=tmp_path, env={**os.environ, "BUILDS": str(builds)}
    ).stdout
    assert "16 passed" in out, out
    workers = {m.group(1) for m in re.finditer(r"\[(gw\d)\] .* PASSED tests/test_sharing.py::test_reads_the", out)}
    assert len(list(builds.iterdir())) == 1 and len(workers) == 1, out


def test_one_python_floor():
    """The README, pyproject's requires-python, and the versions ruff and mypy hold the code to
    name one floor."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    floor = re.fullmatch(r">=(3\.\d+)", project["project"]["requires-python"])
    assert floor, project["project"]["requires-python"]
    version = floor.group(1)
    assert project["tool"]["ruff"]["target-version"] == "py" + version.replace(".", "")
    assert project["tool"]["mypy"]["python_version"] == version
    readme = (ROOT / "README.md").read_text()
    assert set(re.findall(r"Python (3\.\d+)\+", readme)) == {version}
