"""What every test shares: the tiers and xdist groups (the collection hook below), and the
helpers and fixtures of tests/support/, by what they serve, registered and handed on here so
that a test imports any of them from `conftest`."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.process import (
    HOSTILE_VALUES,
    ROOT,
    SWEEPS,
    Result,
    bench,
    in_place_of,
    job_logs,
    left_in,
    left_in_tmp,
    read_json,
    regress,
    run,
    snapshot,
    stall_sweep,
    start_sweep,
    stop_a_rank,
    unavailable,
)
from support.runs import (
    check_breakdown,
    copy_run,
    data_cache,
    default_jobs,
    fsdp_scaling_run,
    history_of,
    judged_history,
    local_check,
    mixed_run,
    planned_later,
    real_run,
    scaling_run,
    separating,
)
from support.services import browser, history_at, postgres
from support.slurm import (
    FINAL,
    NODES,
    ON_TESTBED,
    SLURM_ENV,
    STATE,
    TESTBED,
    FakeSlurm,
    SlurmStandIns,
    eight_nodes,
    fake_slurm,
    no_eth0_on,
    sacct_rows,
    shape,
    slurm,
    slurm_stand_ins,
    slurm_sweep,
    testbed,
    testbed_machine,
    wait_done,
)

__all__ = [
    "FINAL",
    "HOSTILE_VALUES",
    "NODES",
    "ON_TESTBED",
    "ROOT",
    "SLURM_ENV",
    "STATE",
    "SWEEPS",
    "TESTBED",
    "FakeSlurm",
    "Result",
    "SlurmStandIns",
    "bench",
    "browser",
    "check_breakdown",
    "copy_run",
    "data_cache",
    "default_jobs",
    "eight_nodes",
    "fake_slurm",
    "fsdp_scaling_run",
    "history_at",
    "history_of",
    "in_place_of",
    "job_logs",
    "judged_history",
    "left_in",
    "left_in_tmp",
    "local_check",
    "mixed_run",
    "no_eth0_on",
    "planned_later",
    "postgres",
    "read_json",
    "real_run",
    "regress",
    "run",
    "sacct_rows",
    "scaling_run",
    "separating",
    "shape",
    "slurm",
    "slurm_stand_ins",
    "slurm_sweep",
    "snapshot",
    "stall_sweep",
    "start_sweep",
    "stop_a_rank",
    "testbed",
    "testbed_machine",
    "unavailable",
    "wait_done",
]


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects and before xdist reads the groups
def pytest_collection_modifyitems(items: list) -> None:
    """The tiers (CONTRIBUTING.md). Every test that uses the testbed is marked `testbed`, and
    `proof` unless it is the default tier's `smoke`: `-m "not proof"` (the default) leaves the
    long testbed proofs out, `-m proof` runs only them. Every testbed test is in one xdist group,
    so that under `-n 2` a single worker brings the one testbed of the machine up; the tests that
    share a sweep are in one group too (shared_groups). Tests marked run_last go to the end,
    keeping their order (a stable sort)."""
    groups = shared_groups(items)
    for item in items:
        if "testbed_machine" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.testbed)
            item.add_marker(pytest.mark.xdist_group("testbed"))
            if item.get_closest_marker("smoke") is None:
                item.add_marker(pytest.mark.proof)
        elif item in groups:
            item.add_marker(pytest.mark.xdist_group(groups[item]))
    items.sort(key=lambda item: item.get_closest_marker("run_last") is not None)


def shared_groups(items: list) -> dict:
    """Test -> xdist group, for the tests that use a module- or session-scoped fixture of this
    directory (a sweep run once and read by many tests). Tests linked through such fixtures, even
    by way of others, are one group, which one worker runs: under -n 2 a worker builds each
    fixture it needs, and two workers would run the same sweep twice, each slowing the other."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent[name] != name:
            name = parent[name]
        return name

    uses = {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)  # pytest's own record of the test's fixtures
        names = []
        for name in getattr(item, "fixturenames", ()):
            defs = info.name2fixturedefs.get(name) if info else None
            if defs and defs[-1].scope in ("module", "session") and _here(defs[-1].func):
                names.append(name)
                parent.setdefault(name, name)
        for other in names[1:]:
            parent[root(other)] = root(names[0])
        if names:
            uses[item] = names[0]
    return {item: f"shared-{root(name)}" for item, name in uses.items()}


def _here(func) -> bool:
    code = getattr(func, "__code__", None)
    return code is not None and Path(code.co_filename).resolve().is_relative_to(ROOT / "tests")
