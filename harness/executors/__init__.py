"""Executors: interchangeable backends that run the jobs of a plan, chosen by name (`--executor`,
plan.json's "executor"). A backend is a class of base.Executor, registered here once; what the
rest of bench needs to know of it is on the class (base.py), and nothing outside this package
tells backends apart by their names (tests/test_layout.py holds that).
"""

from __future__ import annotations

import shutil

from harness.errors import RunDirError
from harness.executors.base import Executor
from harness.executors.local import LocalExecutor
from harness.executors.slurm.check_job import NodesExecutor, NodesSubmitit
from harness.executors.slurm.executor import SlurmExecutor
from harness.executors.slurm.via_submitit import SubmititExecutor

# Each backend that runs a sweep's jobs, by name.
EXECUTORS: dict[str, type[Executor]] = {c.name: c for c in (LocalExecutor, SlurmExecutor, SubmititExecutor)}
# The node check as one batch job, by its backend's name (docs/guides/nodes.md); a backend without one
# runs the check's driver on this machine (harness/nodes/driver.py).
NODE_CHECKS: dict[str, type[NodesExecutor] | type[NodesSubmitit]] = {c.name: c for c in (NodesExecutor, NodesSubmitit)}
AUTO = "auto"  # --executor auto: the batch system where its client is on PATH, else this machine
NAMES = tuple(EXECUTORS)
BATCH = tuple(name for name, kind in EXECUTORS.items() if kind.batch)

__all__ = ["AUTO", "BATCH", "EXECUTORS", "NAMES", "NODE_CHECKS", "Executor", "choose", "get", "runs_here"]


def get(name: str) -> type[Executor]:
    """The backend called `name` (a plan's, or --executor's)."""
    try:
        return EXECUTORS[name]
    except KeyError:
        raise RunDirError(f"executor {name!r} is not available; valid: {', '.join(NAMES)}") from None


def choose(requested: str) -> tuple[type[Executor], str]:
    """(the backend, why): `auto` is Slurm where sbatch is on PATH, this machine otherwise."""
    if requested != AUTO:
        return get(requested), "chosen with --executor"
    if shutil.which("sbatch"):
        return SlurmExecutor, "sbatch found on PATH"
    return LocalExecutor, "no sbatch on PATH"


def runs_here(name: object) -> bool:
    """Whether a plan's executor `name` ran its jobs on this machine rather than on a cluster's
    nodes; False for a name no backend has (a plan is untrusted data)."""
    kind = EXECUTORS.get(name) if isinstance(name, str) else None
    return kind is not None and not kind.batch
