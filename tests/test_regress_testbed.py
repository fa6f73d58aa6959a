"""The issue-4 proofs on the Slurm testbed, with links shaped by `testbed shape` (tc tbf on both
ends of each node's link):

1. two unshaped sweeps: `bench regress` raises no false alarm;
2. every node at 200 Mbit/s: `bench regress` exits 1 and lists the multi-node rows only;
3. `bench compare` finds the multi-node all-reduce ratio close to 200 Mbit/s over the unshaped busbw;
4. only bnode3 shaped: every report names bnode3 as the straggler, and no other node.

Four sweeps of sweeps/testbed-regress.yaml (3 jobs each: 1, 2 and 4 nodes), about 7 minutes."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from conftest import SLURM_ENV, SWEEPS, TESTBED, bench, run

pytestmark = pytest.mark.slow

RATE = "200mbit"
RATE_GBPS = 200e6 / 8 / 1e9   # busbw is comparable with link speed (nccl-tests' bus factor)
CLUSTER = "testbed"
# Run-to-run noise on this 2-vCPU machine, whose CPUs the four emulated nodes share, is large:
# two unshaped sweeps differed by up to 34% at 256K-4M (busbw ratio 0.66, not significant) and
# by 10% in single-node images/s (significant). A real cluster is steadier; set the threshold
# from its own noise. 200mbit costs 64-96% here.
THRESHOLD = "50%"


def sweep(out) -> None:
    r = bench("sweep", str(SWEEPS / "testbed-regress.yaml"), "--executor", "slurm",
              "--cluster", str(SWEEPS / "clusters" / "testbed.yaml"), "--out", str(out), check=False, timeout=900,
              env=SLURM_ENV)
    assert r.returncode == 0, r.describe()


@pytest.fixture(scope="module")
def runs(testbed, tmp_path_factory):
    """Runs a, b (unshaped), slow (every node at RATE) and b3 (bnode3 at RATE)."""
    root = tmp_path_factory.mktemp("regress")
    out = {name: root / name for name in ("a", "b", "slow", "b3")}
    run([str(TESTBED), "shape", "--clear"])
    sweep(out["a"])
    sweep(out["b"])
    try:
        run([str(TESTBED), "shape", "--rate", RATE])
        sweep(out["slow"])
        run([str(TESTBED), "shape", "--clear"])
        run([str(TESTBED), "shape", "--rate", RATE, "--node", "bnode3"])
        sweep(out["b3"])
    finally:
        run([str(TESTBED), "shape", "--clear"])
    db = root / "history.sqlite"
    bench("history", "add", str(out["a"]), "--cluster", CLUSTER, "--label", "baseline", "--db", str(db))
    return out, db


def regress(runs, name: str, tmp_path):
    out, db = runs
    r = bench("regress", str(out[name]), "--cluster", CLUSTER, "--db", str(db), "--baseline", "label:baseline",
              "--threshold", THRESHOLD, "--out", str(tmp_path / name), check=False)
    return r, tmp_path / name


def failures(junit_dir) -> list[str]:
    suite = ET.parse(junit_dir / "junit.xml").getroot().find("testsuite")
    return [c.get("name") for c in suite.findall("testcase") if c.find("failure") is not None]


def test_no_false_alarm_between_two_unshaped_runs(runs, tmp_path):
    r, out = regress(runs, "b", tmp_path)
    assert r.returncode == 0, r.describe()
    assert failures(out) == []
    assert "0 regressions" in r.stdout
    assert "straggler" not in r.stdout.lower()


def test_a_degraded_interconnect_is_caught(runs, tmp_path):
    r, out = regress(runs, "slow", tmp_path)
    assert r.returncode == 1, r.describe()
    failed = failures(out)
    # every multi-node all-reduce size regressed; no single-node row did (it has no network)
    for nodes in (2, 4):
        for size in ("256K", "1M", "4M"):
            assert f"busbw_gbps[allreduce all_reduce {size}, {nodes}x1, torchrun, default]" in failed, failed
    assert not [f for f in failed if ", 1x1," in f], failed
    assert "images_per_s[synthetic weak, 4x1, torchrun, default]" in failed, failed
    report = (out / "report.md").read_text()
    assert "## Slower (regressions): " in report and "allreduce all_reduce 4M, 4x1" in report


def test_compare_finds_the_shaped_rate(runs, tmp_path):
    out, _ = runs
    csv = tmp_path / "c.csv"
    r = bench("compare", str(out["a"]), str(out["slow"]), "--labels", "unshaped,200mbit", "--csv", str(csv),
              "--threshold", THRESHOLD)
    assert "Mann-Whitney" in r.stdout
    t = pd.read_csv(csv)
    for nodes in (2, 4):
        row = t[(t["metric"] == "busbw_gbps") & (t["nodes"] == nodes) & (t["size_bytes"] == 4 << 20)].iloc[0]
        expected = RATE_GBPS / row["a"]
        assert row["verdict"] == "slower" and row["p_value"] < 0.05 and row["ci_high"] < 1, row.to_dict()
        # tbf and TCP take a little of the link: the shaped busbw is 60-100% of the rate
        assert 0.6 * expected < row["ratio"] < 1.05 * expected, (row.to_dict(), expected)
        assert row["ci_low"] <= row["ratio"] * 1.2 and row["ci_high"] >= row["ratio"] / 1.2


def test_one_slow_node_is_named(runs, tmp_path):
    out, db = runs
    lines = r"(bnode\d) is \d+% slower than the median node"
    for name in ("a", "b", "slow"):   # even links, slow or fast: nobody is named
        assert not re.findall(lines, bench("compare", str(out["a"]), str(out[name])).stdout)
    r = bench("compare", str(out["a"]), str(out["b3"]))
    assert set(re.findall(lines, r.stdout)) == {"bnode3"}, r.stdout
    reg, reg_out = regress(runs, "b3", tmp_path)
    assert set(re.findall(lines, (reg_out / "report.md").read_text())) == {"bnode3"}
    html = tmp_path / "b3.html"
    bench("report", str(out["b3"]), "--out", str(html))
    assert set(re.findall(lines, html.read_text())) == {"bnode3"}
    ranks = json.loads((out["b3"] / "jobs" / "n4-g1-torchrun-default" / "allreduce.ranks.json").read_text())
    assert ranks["hosts"] == ["bnode1", "bnode2", "bnode3", "bnode4"]
