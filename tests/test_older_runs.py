"""What a newer bench owes the run directories an older one wrote: the module paths their job
scripts name still run, and a run interrupted before harness/ moved into packages is resumed and
collected after (docs/concepts/architecture.md, "Paths job scripts name")."""

from __future__ import annotations

import json
import shutil
import sys

import pandas as pd
import pytest
from conftest import ROOT, bench, read_json, run

# A run directory of the bench of commit dc6b74a, the last before the packages: a two-job local
# sweep (`bench sweep SWEEP --executor local`, one node of one and of two gloo ranks) stopped by
# Ctrl-C while its second job ran, as it left it (its README says how it was made).
BEFORE = ROOT / "tests" / "fixtures" / "rundir" / "before-packages"


@pytest.mark.parametrize(
    ("old", "new", "args"),
    [
        ("harness.telemetry", "harness.evidence.telemetry", ["mark", "telemetry", "allreduce", "start"]),
        ("harness.hangs", "harness.evidence.hangs", ["--help"]),
        ("harness.inside", "harness.files.inside", ["append", "log.txt"]),
        ("harness.nodesteps", "harness.nodes.allocation", ["jobs/nodes"]),
    ],
)
def test_each_path_a_job_script_names_runs_its_module(tmp_path, old, new, args):
    """Each old path runs its module as `python -m` runs the module itself: the same status, the
    same output and the same files (a mark in phases.jsonl, a line appended to a log, the
    driver's refusal of a folder with no check's plan)."""
    seen = []
    for i, module in enumerate((old, new)):
        cwd = tmp_path / str(i)
        cwd.mkdir()
        r = run([sys.executable, "-m", module, *args], cwd=cwd, stdin="a line\n", check=False, timeout=60)
        files = {p.relative_to(cwd).as_posix(): p.read_text() for p in sorted(cwd.rglob("*")) if p.is_file()}
        files = {k: v.split('"t":')[0] for k, v in files.items()}  # all but a mark's time
        seen.append((r.returncode, r.stdout, r.stderr.replace(str(cwd), "CWD"), files))
    assert seen[0] == seen[1]
    status, out, err, files = seen[0]
    assert {
        "harness.telemetry": status == 0 and list(files) == ["telemetry/phases.jsonl"],
        "harness.hangs": status == 0 and "{watch,probe}" in out,
        "harness.inside": status == 0 and files == {"log.txt": "a line\n"},
        "harness.nodesteps": status == 1 and err.startswith("bench nodes: ") and "check.json" in err,
    }[old], seen[0]


@pytest.mark.slow
def test_a_run_written_before_the_packages_is_resumed_and_collected(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(BEFORE, run)
    (run / "README.md").unlink()
    before = read_json(run / "jobs.json")["jobs"]
    assert {k: v["state"] for k, v in before.items()} == {
        "n1-g1-torchrun-default": "COMPLETED",
        "n1-g2-torchrun-default": "CANCELLED",
    }
    result = (run / "jobs" / "n1-g1-torchrun-default" / "allreduce.json").read_bytes()

    r = bench("sweep", "--resume", str(run), timeout=300)
    assert "resuming" in r.stdout and "1 of 2 jobs to run" in r.stdout, r.describe()
    jobs = read_json(run / "jobs.json")["jobs"]
    assert {k: (v["state"], v["attempts"]) for k, v in jobs.items()} == {
        "n1-g1-torchrun-default": ("COMPLETED", 1),
        "n1-g2-torchrun-default": ("COMPLETED", 2),
    }
    assert (run / "jobs" / "n1-g1-torchrun-default" / "allreduce.json").read_bytes() == result  # not run again
    df = pd.read_csv(run / "summary.csv")
    assert set(df["job"]) == set(jobs) and (df["status"] == "COMPLETED").all()
    assert set(df["size_bytes"]) == {1024, 2048, 4096}
    # the older job's rows are the figures its file holds
    rows = {r["size_bytes"]: r["time_us"] for r in json.loads(result)["rows"] if r["group"] == "world"}
    mine = df[(df["job"] == "n1-g1-torchrun-default") & (df["group"] == "world")]
    assert dict(zip(mine["size_bytes"], mine["time_us"])) == pytest.approx(rows)
