"""The node check inside its Slurm allocation: `python -m harness.nodesteps FOLDER` (the path the
check's batch script names) runs `main`, and a submitit job's tasks call `in_submitit_task`.
The driver (harness/nodes/driver.py) runs the plan's rounds; once they have run, the verdict
(harness/nodes/verdict.py) says which links read low, and the driver measures them again
(docs/guides/nodes.md, "Measured again").
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from pathlib import Path

from harness.config import hostlists
from harness.config.cluster_profile import ClusterProfile
from harness.config.fields import FieldError, build
from harness.nodes.driver import Driver, SrunLauncher, load_plan
from harness.nodes.judged import low_links
from harness.run.rundir import now


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.nodesteps FOLDER`, from the run directory inside the check's Slurm job."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1 or not re.fullmatch(r"[A-Za-z0-9_./-]+", argv[0]):
        print("usage: python -m harness.nodesteps FOLDER (the check's job folder, relative)", file=sys.stderr)
        return 2
    folder = argv[0]
    run = Path.cwd()
    try:
        plan = load_plan(run)
        profile = build(ClusterProfile, plan.cluster, "cluster") if plan.cluster else None
        names = hostlists.expand_hostlist(os.environ.get("SLURM_JOB_NODELIST", ""))
        job_id = int(os.environ.get("SLURM_JOB_ID", "0"))
    except FieldError as exc:
        print(f"bench nodes: cluster.{exc.key}: {exc}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as exc:
        print(f"bench nodes: {exc}", file=sys.stderr)
        return 1
    launcher = SrunLauncher(run, folder, job_id)
    leaf_of = profile.leaf_of() if profile else {}
    driver = Driver(run, folder, names, plan.options, launcher, lambda: low_links(run, plan, profile), leaf_of)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # scancel: end the steps, keep the record
    with contextlib.suppress(SystemExit):
        driver.drive(lambda line: print(f"{now()} {line}", flush=True))
        return 0
    return 143


def in_submitit_task(folder: str) -> None:
    """What each task of the check's submitit job calls: the first runs the driver (`main`) and
    fails the job when it fails; the others have nothing to do."""
    if os.environ.get("SLURM_PROCID") != "0":
        return
    status = main([folder])
    if status:
        raise RuntimeError(f"bench nodes: the check's driver ended with status {status}")


if __name__ == "__main__":
    sys.exit(main())
