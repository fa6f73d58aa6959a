"""The `bench` command's own choices, each in a fresh interpreter: which allocator Arrow gets,
and that no process bench starts inherits it. (Its one-line errors: test_bad_inputs.py and
test_fuzz.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# runs ARGV through cli.main and prints what the process is left with: whether the command
# imported pyarrow, the pool pyarrow has (imported now if it was not), the variable
_PROBE = """
import json, os, sys
from harness import cli
status = cli.main(sys.argv[1:])
imported, variable = "pyarrow" in sys.modules, os.environ.get("ARROW_DEFAULT_MEMORY_POOL")
pool = __import__("pyarrow").default_memory_pool().backend_name
print(json.dumps({"status": status, "imported": imported, "pool": pool, "variable": variable}))
"""


def _probe(argv: list[str], tmp_path: Path, **env: str) -> dict[str, object]:
    base = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        cwd=tmp_path,
        env={**base, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


def test_a_table_command_gives_arrow_the_system_allocator_and_leaves_no_variable(tmp_path):
    """history list (on no database: the choice is made before the command runs) reads Arrow
    tables: pyarrow comes up on malloc, and the variable that chose it is gone again."""
    seen = _probe(["history", "list", "--db", str(tmp_path / "none.sqlite")], tmp_path)
    assert seen == {"status": 2, "imported": True, "pool": "system", "variable": None}


def test_the_users_own_pool_stands(tmp_path):
    argv = ["history", "list", "--db", str(tmp_path / "none.sqlite")]
    seen = _probe(argv, tmp_path, ARROW_DEFAULT_MEMORY_POOL="mimalloc")
    assert seen["pool"] == "mimalloc" and seen["variable"] == "mimalloc"


@pytest.mark.parametrize("executor", ["local", "slurm"])
def test_a_dry_run_never_imports_pyarrow(tmp_path, executor):
    """Planning 10,000 jobs is timed with the interpreter (tests/perf/bench_speed.py): Arrow's
    import is no part of it."""
    sweep = ROOT / "harness" / "sweeps" / "local.yaml"
    argv = ["sweep", str(sweep), "--dry-run", "--executor", executor, "--out", str(tmp_path / "run")]
    if executor == "slurm":
        argv += ["--cluster", str(ROOT / "harness" / "sweeps" / "clusters" / "example.yaml")]
    assert _probe(argv, tmp_path) == {"status": 0, "imported": False, "pool": "mimalloc", "variable": None}


def test_each_command_loads_its_own_group_and_help_lists_every_one():
    """commands.GROUPS names the commands each group adds, so that a command loads its own group
    alone (regress: none of the node check's or the sweep's imports); `bench --help`, and a
    command mistyped, build every group's."""
    import argparse
    import importlib

    from benchmarks.common import OneLineParser
    from harness import commands

    for name, added in commands.GROUPS.items():
        sub = OneLineParser(prog="bench").add_subparsers(dest="command")
        importlib.import_module(name).add_parsers(sub)
        assert tuple(sub.choices) == added, name
    probe = "import sys\nfrom harness import cli\ntry:\n    cli.main(sys.argv[1:])\n"
    probe += "finally:\n    print(sorted(sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe, "regress", "--help"], env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    assert "'harness.commands.judging'" in loaded and "'harness.commands.checks'" not in loaded, loaded[-300:]
    assert "'harness.commands.running'" not in loaded and "'harness.check_nodes'" not in loaded
    everything = commands.build_parser("regres")._subparsers._group_actions[0]  # type: ignore[union-attr]
    assert isinstance(everything, argparse._SubParsersAction)
    assert list(everything.choices) == [c for added in commands.GROUPS.values() for c in added]
