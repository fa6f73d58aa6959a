"""The harness's own share of a Slurm sweep's wall time, on the testbed.

    tests/testbed/testbed up --nodes 4 && eval "$(tests/testbed/testbed env)"
    python tests/perf/slurm_overhead.py [--out DIR] [--set KEY=VALUE ...]

Runs `bench sweep sweeps/testbed.yaml --max-nodes 4` on the testbed profile, whose jobs run one
at a time, then prints: the sweep's wall time (interpreter start, submission, tracking,
collection and plots included); the sum of the jobs' elapsed times from sacct; the time from the
first job's start to the last job's end; the squeue/sacct/sbatch calls made; and the harness's
share, (wall - sum of elapsed) / wall.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="run directory (default: a new temporary one)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="slurm-overhead-")) / "run"
    cmd = [
        sys.executable,
        "-m",
        "harness.cli",
        "sweep",
        str(ROOT / "sweeps" / "testbed.yaml"),
        "--max-nodes",
        "4",
        "--executor",
        "slurm",
        "--cluster",
        str(ROOT / "sweeps" / "clusters" / "testbed.yaml"),
        "--out",
        str(out),
        *(a for o in args.overrides for a in ("--set", o)),
    ]
    start = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - start
    if r.returncode not in (0, 1):
        print(r.stdout[-2000:], r.stderr[-2000:], sep="\n", file=sys.stderr)
        return r.returncode
    jobs = json.loads((out / "jobs.json").read_text())["jobs"].values()
    ids = ",".join(j["job_id"] for j in jobs if j["job_id"])
    acct = subprocess.run(
        ["sacct", "-X", "-P", "-n", "-j", ids, "--format=ElapsedRaw,Start,End"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    rows = [line.split("|") for line in acct]
    elapsed = sum(int(e) for e, _, _ in rows)
    span = _seconds(max(end for _, _, end in rows)) - _seconds(min(start for _, start, _ in rows))
    calls = re.search(r"Slurm commands: (.*)", r.stdout)
    states = sorted({j["state"] for j in jobs})
    print(f"run directory:             {out}")
    print(f"jobs:                      {len(rows)} ({', '.join(states)})")
    print(f"sweep wall time:           {wall:.1f} s")
    print(f"sum of sacct elapsed:      {elapsed} s")
    print(f"first start to last end:   {span} s")
    print(f"Slurm calls:               {calls.group(1) if calls else '?'}")
    print(f"harness share:             {(wall - elapsed) / wall:.1%} of the wall time")
    return 0


def _seconds(stamp: str) -> int:
    return int(time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")))


if __name__ == "__main__":
    sys.exit(main())
