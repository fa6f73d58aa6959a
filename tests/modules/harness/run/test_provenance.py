"""Which bench measured a run (docs/concepts/provenance.md): recorded in the plan, each result and the
summary, and judged by compare when two runs were measured by different benches."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import subprocess
import sys

import pyarrow.parquet as pq
from conftest import bench, planned_later, regress


def _older_bench(real_run, dst):
    """A copy of `real_run` as a bench before measurement rules were recorded wrote it: no
    `bench` in plan.json, no bench_version or measurement_rules in the results' environments."""
    shutil.copytree(real_run, dst)
    plan = json.loads((dst / "plan.json").read_text())
    del plan["bench"]
    (dst / "plan.json").write_text(json.dumps(plan))
    planned_later(dst)
    for path in dst.glob("jobs/*/*.json"):
        data = json.loads(path.read_text())
        if "environment" in data:
            del data["environment"]["bench_version"], data["environment"]["measurement_rules"]
            path.write_text(json.dumps(data))
    bench("collect", str(dst))
    return dst


def test_which_bench_measured_a_run_is_recorded_and_judged(real_run, tmp_path):
    """docs/concepts/provenance.md: `bench --version`; the bench, torch and Python in plan.json, the
    summary and the history; a comparison across measurement rules refused, then passed with
    --allow-rules-change, saying so."""
    from importlib import metadata

    from harness.collect.summary import run_facts

    def facts(path):
        return run_facts(pq.read_schema(path / "summary.parquet"))[0]

    version = metadata.version("bench-scaling")
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    shown = bench("--version").stdout
    assert shown.startswith(f"bench {version} (commit {head[:12]}") and "measurement rules 2)" in shown, shown
    plan = json.loads((real_run / "plan.json").read_text())
    assert plan["bench"]["version"] == version and plan["bench"]["measurement_rules"] == 2
    assert plan["bench"]["commit"] == head and isinstance(plan["bench"]["modified"], bool)
    env = facts(real_run)
    assert env["measurement_rules"] == ["2"] and env["bench_version"] == [version]
    assert env["bench"] == [f"{version} (commit {head[:12]}{', modified' if plan['bench']['modified'] else ''}; "
                            "measurement rules 2)"]  # fmt: skip
    assert env["torch"] and env["python"] == [sys.version.split()[0]]
    db = tmp_path / "history.sqlite"
    bench("history", "add", str(real_run), "--create", "--cluster", "lab", "--db", str(db))
    with contextlib.closing(sqlite3.connect(db)) as con:
        (stored,) = con.execute("SELECT environment FROM runs").fetchone()
    assert {k: json.loads(stored)[k] for k in env} == env

    old = _older_bench(real_run, tmp_path / "old")
    assert facts(old)["measurement_rules"] == ["1"]
    refused = bench("compare", str(old), str(real_run), check=False)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.describe()
    assert "measurement rules 1 and" in refused.stderr and "--allow-rules-change" in refused.stderr
    judged = bench("compare", str(old), str(real_run), "--allow-rules-change")
    assert "measurement rules: 1 vs 2, judged anyway (--allow-rules-change)" in judged.stdout, judged.describe()
    # the gate too: a history of the older bench's run does not judge tonight's
    other = tmp_path / "db2.sqlite"
    bench("history", "add", str(old), "--create", "--cluster", "lab", "--db", str(other))
    gate = regress(real_run, other, tmp_path / "gate")
    assert gate.returncode == 2 and "--allow-rules-change" in gate.stderr, gate.describe()
    # other rules are another series (docs/guides/fleet.md): shown, not judged, unless across series
    allowed = regress(real_run, other, tmp_path / "gate2", "--allow-rules-change")
    said = " ".join(allowed.stdout.split())
    assert allowed.returncode == 3 and "measurement_rules 1 -> 2" in said, allowed.describe()
    assert regress(real_run, other, tmp_path / "gate3", "--allow-rules-change", "--across-series").returncode == 0
