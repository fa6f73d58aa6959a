"""Proofs that `bench regress` and `bench compare` give verdicts a CI gate can trust, on the
Slurm testbed, with links shaped by `testbed shape` (tc tbf on both ends of a node's link):

1. no false alarm: five unshaped runs of sweeps/testbed-regress.yaml in a history; a sixth, of
   three interleaved replicates (--repeat 3), regressed against median:5 with this machine's
   noise margin (NOISE, below), fails no key: it exits 0, or 3 naming exactly the keys whose
   band cannot catch a 25% fall (--must-catch);
2. detection power: the link at about three quarters of its rate is caught on every multi-node
   key whose stated catches is 25% or less, and the others are those said to be too noisy; and
   every node shaped to the rate that halves the unshaped multi-node busbw at
   4M (derived from the unshaped runs), then to 200mbit and a level in between: regress flags
   every multi-node all-reduce size whose band the shaped link cannot reach (a halving leaves
   the band when the runs spread less than 17%, as on a quiet machine), 4M below the halving
   rate and 2M at 200mbit whatever the band, and exits 1; the share flagged per level is printed;
3. a failed multi-node job (bnode4 has no eth0, the interface the profile names): exit 1, and
   junit.xml names the job and its reason;
4. parameter mismatch: a run of batch size 4 against batch size 8: compare refuses (exit 2) with
   one block naming batch_size 8 vs 4; forced, every output says so;
5. --across: two settings sets of one run (eth0, and eth1 shaped to 200mbit) give the same busbw
   verdicts as two one-set runs under the same shaping;
6. one slow node: every report names bnode3 as the straggler, and no other node;
7. a damaged history entry: exit 2 naming it; `history remove` restores regress;
8. the step's breakdown: over a 1 Gbit/s link a 2-node training job's exposed communication
   rises and its compute-only step does not.

16 sweeps of 1, 2 and 4 emulated nodes, seven of them all-reduce only and one training only (CONTRIBUTING.md gives their
time on the 2-vCPU test machine). The
figures each proof measured are printed (pytest -s shows them)."""

from __future__ import annotations

import json
import math
import re
import sqlite3
import xml.etree.ElementTree as ET

import pandas as pd
import pytest
from conftest import SWEEPS, bench, check_breakdown, no_eth0_on, shape, slurm_sweep

pytestmark = pytest.mark.slow

CLUSTER = "testbed"
SLOW = "200mbit"
GBE = "1000mbit"  # the training proof's link: gigabit Ethernet
RATE_GBPS = 200e6 / 8 / 1e9  # busbw is comparable with link speed (nccl-tests' bus factor)
SWEEP = SWEEPS / "testbed-regress.yaml"
ALLREDUCE_ONLY = ("--set", "workloads.synthetic=false")
BUSBW = ("--metric", "busbw_gbps")  # the runs above judged on what they measured


def sweep(out, *args, sweep_file=SWEEP, ok: bool = True) -> None:
    r = slurm_sweep(sweep_file, out, *args)
    assert r.returncode == (0 if ok else 1), r.describe()


def busbw_at(path, nodes: int, size: int = 4 << 20) -> float:
    """A run's busbw on `nodes` nodes at one all-reduce size, 4M unless said."""
    t = pd.read_csv(path / "summary.csv")
    return float(t[(t["size_bytes"] == size) & (t["nodes"] == nodes)]["busbw_gbps"].iloc[0])


@pytest.fixture(scope="module")
def runs(testbed, tmp_path_factory):
    """Six unshaped runs (u1..u6), three shaped levels, one slow node, one broken node, and the
    two-set runs; eth1 is shaped to 200mbit throughout (only the two-set runs use it)."""
    root = tmp_path_factory.mktemp("regress")
    out = {}
    shape("--clear")
    try:
        shape("--link", "eth1", "--rate", SLOW)
        for k in range(1, 6):
            out[f"u{k}"] = root / f"u{k}"
            sweep(out[f"u{k}"])
        # The run under test measures each key three times, interleaved (--repeat 3), and is
        # judged by their median: one run in a few here has a key at half speed, a mode of this
        # 2-vCPU machine's scheduling that no band of five runs holds (docs/concepts/noise.md)
        out["u6"] = root / "u6"
        sweep(out["u6"], "--repeat", "3")
        unshaped = min(sorted(busbw_at(out[f"u{k}"], n) for k in range(1, 6))[2] for n in (2, 4))
        # busbw is what each link carries (nccl-tests' bus factor), so a link at half of it
        # halves it: GB/s -> Mbit/s, halved. The lower of the node counts, so both are halved.
        half = f"{int(unshaped * 8e3 / 2)}mbit"
        middle = f"{int(math.sqrt(200 * int(half[:-4])))}mbit"
        # 70% of the rate of the slowest multi-node key (2M or 4M, 2 or 4 nodes, median of
        # u1..u5), so that every such key is pushed down by 30% or more, past the 25% that
        # --must-catch's default asks every gating key to be able to catch (docs/concepts/noise.md). From
        # 4M alone, 2M on 4 nodes sat at the shaped rate already and read 0.94-0.96 of its median.
        slowest = min(
            sorted(busbw_at(out[f"u{k}"], n, size) for k in range(1, 6))[2]
            for n in (2, 4)
            for size in (2 << 20, 4 << 20)
        )
        quarter = f"{int(slowest * 8e3 * 0.7)}mbit"
        # What these runs are judged on is the all-reduce (busbw, and the link probe that names a
        # straggler): no training, whose 47 MB of gradients a step would crawl over the link.
        for name, rate in (("quarter", quarter), ("half", half), ("middle", middle), ("slow", SLOW)):
            shape("--link", "eth0", "--rate", rate)
            out[name] = root / name
            sweep(out[name], *ALLREDUCE_ONLY)
            shape("--clear", "--link", "eth0")
        out["rates"] = {
            "quarter": quarter, "half": half, "middle": middle, "slow": SLOW, "unshaped_gbps": unshaped,
            "slowest_gbps": slowest,
        }  # fmt: skip
        # The step's breakdown over a 1 Gbit/s link (docs/concepts/breakdown.md): the 2-node training job
        # alone, as the unshaped runs ran it
        shape("--link", "eth0", "--rate", GBE)
        out["gbe"] = root / "gbe"
        sweep(out["gbe"], "--set", "nodes=[2]", "--set", "workloads.allreduce=false")
        shape("--clear", "--link", "eth0")
        shape("--link", "eth0", "--rate", SLOW, "--node", "bnode3")
        out["b3"] = root / "b3"
        sweep(out["b3"], *ALLREDUCE_ONLY)
        shape("--clear", "--link", "eth0")
        with no_eth0_on("bnode4"):
            out["broken"] = root / "broken"
            sweep(out["broken"], ok=False)
        out["batch4"] = root / "batch4"
        sweep(out["batch4"], "--set", "workloads.synthetic.batch_size=4", "--set", "workloads.allreduce=false")
        for name, sets in (
            ("both", {"default": {}, "eth1": {"GLOO_SOCKET_IFNAME": "eth1"}}),
            ("eth1", {"eth1": {"GLOO_SOCKET_IFNAME": "eth1"}}),
        ):
            text = SWEEP.read_text().replace("nccl:\n  default: {}\n", "nccl: " + json.dumps(sets) + "\n")
            assert text != SWEEP.read_text()
            (root / f"{name}.yaml").write_text(text)
            out[name] = root / name
            # all-reduce only, as across judges busbw: training over the 200mbit link took 3 min
            sweep(out[name], *ALLREDUCE_ONLY, sweep_file=root / f"{name}.yaml")
    finally:
        shape("--clear")
    db = root / "history.sqlite"
    for k in range(1, 6):
        bench("history", "add", str(out[f"u{k}"]), "--create", "--cluster", CLUSTER, "--label", f"night{k}",
              "--db", str(db))  # fmt: skip
    out["db"] = db
    return out


def regress(runs, name: str, tmp_path, *args: str):
    r = bench(
        "regress",
        str(runs[name]),
        "--cluster",
        CLUSTER,
        "--db",
        str(runs["db"]),
        "--out",
        str(tmp_path / name),
        *args,
        check=False,
    )
    return r, tmp_path / name


def junit_cases(junit_dir) -> dict[str, ET.Element]:
    suite = ET.parse(junit_dir / "junit.xml").getroot().find("testsuite")
    return {c.get("name"): c for c in suite.findall("testcase")}


def verdicts(junit_dir) -> dict[tuple[str, str], str]:
    """(metric, what) -> verdict of every key, read from the lines inside each test case."""
    out = {}
    for name, case in junit_cases(junit_dir).items():
        metric = name.split("[", 1)[0]
        text = "".join(case.itertext())
        for line in text.splitlines():
            m = re.match(r"(.+?): (slower|faster|no significant change|cannot judge|failed), ", line)
            if m:
                out[(metric, f"{name} {m.group(1)}")] = m.group(2)
    return out


def failures(junit_dir) -> list[str]:
    return [n for n, c in junit_cases(junit_dir).items() if c.find("failure") is not None]


# The change this 2-vCPU testbed's unshaped runs make between themselves, which regress is told
# to leave alone (--threshold). The band of five runs alone is not enough: three that agree
# close it. At 674c88e under CI, 2-node 2M read 0.617, 0.621, 0.507, 0.667 and 0.622 GB/s in
# u1..u5: a MAD of 0.0065 on the log scale, a band of [0.952, 1.050], outside which u3 itself
# lay (0.816); u6's replicates (median 0.914) and the broken run's 2-node job (0.848) were then
# called slower. Those five runs spanned 0.82-1.07 of their median (docs/concepts/noise.md has wider sets).
NOISE = ("--threshold", "25%")
# The dashboard's nights are judged as before what a key can catch was asked (docs/concepts/noise.md): the
# first four have fewer than five runs, and would all read "cannot judge" at --must-catch 25%.
ASK_NOTHING = ("--must-catch", "100%")


def test_no_false_alarm_against_five_runs(runs, tmp_path):
    """u6 against u1..u5: no key fails. A key whose band cannot catch the default --must-catch
    (25%) is "cannot judge" (exit 3), never a pass and never a false alarm; with --must-catch
    100% the run passes whole."""
    r, out = regress(runs, "u6", tmp_path, *NOISE)
    report = (out / "report.md").read_text()
    print(f"\nu6 against median:5 of u1..u5:\n{report}")
    assert r.returncode in (0, 3), r.describe()
    assert failures(out) == [] and "0 regressions, 0 failed keys" in r.stdout + r.stderr
    bands = json.loads((out / "gate.json").read_text())["bands"]
    noisy = {k for k, c in zip(bands["key"], bands["catches"]) if c is not None and c > 0.25}
    said = {k for k, v in zip(bands["key"], bands["verdict"]) if v == "cannot judge"}
    assert said == noisy and (r.returncode == 3) == bool(noisy), (said, noisy)
    assert "between runs" in report and "keys have fewer than" not in r.stdout
    r, out = regress(runs, "u6", tmp_path / "all", *NOISE, "--must-catch", "100%")
    assert r.returncode == 0 and "0 regressions, 0 failed keys, 0 cannot judge" in r.stdout, r.describe()


def test_a_quarter_slower_link_is_caught_where_the_gate_said_it_could(runs, tmp_path):
    """The link at 70% of the slowest multi-node key's rate, which pushes every multi-node key
    down by 30% or more: with the defaults (--must-catch 25%), every multi-node busbw key the
    report says catches 25% or less is slower, and every one it did not flag is one the report
    said could not catch 25%. The unshaped night before it (u6) failed none
    (test_no_false_alarm_against_five_runs), so the false-alarm count of both is 0."""
    r, out = regress(runs, "quarter", tmp_path, *BUSBW)
    report = (out / "report.md").read_text()
    rates = runs["rates"]
    print(f"\nquarter ({rates['quarter']}, slowest key {rates['slowest_gbps']:.3f} GB/s) against median:5 of u1..u5:")
    print(report)
    bands = json.loads((out / "gate.json").read_text())["bands"]
    multi = [
        (k, v, c, b / a if a and b else None)
        for k, v, c, a, b in zip(bands["key"], bands["verdict"], bands["catches"], bands["baseline"], bands["value"])
        if json.loads(k)[4] > 1  # nodes, the fifth of the key's columns (sides.KEYS)
    ]
    for key, verdict, catches, ratio in multi:
        print(f"{key}: {verdict}, catches {catches}, B/A {ratio}")
    assert multi, bands["key"]
    assert all(v == "slower" for _, v, c, _ in multi if c is not None and c <= 0.25), multi
    assert all(c is not None and c > 0.25 for _, v, c, _ in multi if v != "slower"), multi
    assert r.returncode == (1 if any(v == "slower" for _, v, _, _ in multi) else 3), r.describe()


def link_gbps(rate: str) -> float:
    return int(rate.removesuffix("mbit")) * 1e6 / 8 / 1e9


def required(level: str, runs, lines: str) -> list[str]:
    """The sizes a shaped level must flag on one all-reduce curve (its junit lines).

    busbw is what each link carries (nccl-tests' bus factor), so a shaped link caps it at its
    rate; a quarter is allowed for tc's bucket. A size must be flagged where that cap lies
    below the bottom of its band, the band the five unshaped runs draw. A key noisy between runs
    has a wide band, and a rate inside it is rightly not called a change: over one set of five
    runs here 2-node 1M spread 0.17-0.40 GB/s and 2-node 4M 0.43-0.78, a band down to 0.21 of
    the median, which a halving does not leave. Beyond the band, 4M below the halving rate
    always (the cap is under a fifth of its unshaped busbw), and 2M at 200mbit (under a tenth)."""
    sizes = {"4M"} if level != "half" else set()
    sizes |= {"2M"} if level == "slow" else set()
    cap = 1.25 * link_gbps(runs["rates"][level])
    # "4M: no significant change, busbw GB/s 0.5896 -> 0.186, B/A 0.315, band [0.212, 4.720]":
    # the band as ratios to A
    for m in re.finditer(r"^(\d+[KM]): [a-z ]+, \D+ ([\d.]+) -> [\d.]+, B/A [\d.]+, band \[([\d.]+), ", lines, re.M):
        if cap < float(m.group(2)) * float(m.group(3)):
            sizes.add(m.group(1))
    return sorted(sizes)


def test_shaped_links_are_caught_at_every_level(runs, tmp_path):
    table = []
    for name in ("half", "middle", "slow"):
        r, out = regress(runs, name, tmp_path, *BUSBW)
        failed = failures(out)
        cases = junit_cases(out)
        needed = False
        for nodes in (2, 4):
            name_ = f"busbw_gbps[allreduce all_reduce, {nodes}x1, srun, default]"
            lines = "".join(cases[name_].itertext())  # every size's verdict, band and values
            sizes = required(name, runs, lines)
            print(f"\n{name} ({runs['rates'][name]}), {name_}, must flag {sizes or 'nothing'}:\n{lines}")
            if not sizes:
                continue
            needed = True
            assert name_ in failed, (name, failed, lines)
            message = cases[name_].find("failure").get("message")
            assert all(re.search(rf"\b{s} -\d", message) for s in sizes), (name, message, lines)
        assert r.returncode == 1 or not needed, r.describe()
        assert not [f for f in failed if ", 1x1," in f], (name, failed)
        rows = verdicts(out)
        multi = [v for (metric, key), v in rows.items() if metric == "busbw_gbps"]
        ratio = busbw_at(runs[name], 4) / pd.Series([busbw_at(runs[f"u{k}"], 4) for k in range(1, 6)]).median()
        table.append(
            (
                runs["rates"][name],
                multi.count("slower"),
                len(multi),
                list(rows.values()).count("slower"),
                len(rows),
                ratio,
            )
        )
    print(
        f"\nunshaped 4M busbw (median of u1..u5, the lower of 2 and 4 nodes): {runs['rates']['unshaped_gbps']:.3f} GB/s"
    )
    print(
        "rate       busbw keys flagged   all keys flagged   4-node 4M busbw / unshaped  (keys compared: "
        "multi-node busbw and every training row)"
    )
    for rate, bf, bn, af, an, ratio in table:
        print(f"{rate:>10} {bf:>3} of {bn:<3} ({bf / bn:4.0%})   {af:>3} of {an:<3} ({af / an:4.0%})   {ratio:.3f}")


def test_a_slower_link_shows_as_exposed_communication_not_as_compute(runs):
    """ResNet-18 under DDP on 2 nodes (docs/concepts/breakdown.md): over a 1 Gbit/s link the step's
    exposed communication rises against the five unshaped runs, and the compute-only step (the
    sync-free steps, which send nothing) stays where it was."""

    def row(run):
        t = pd.read_csv(run / "summary.csv")
        return t[(t["workload"] == "synthetic") & (t["nodes"] == 2)].iloc[0]

    base = pd.DataFrame([row(runs[f"u{k}"]) for k in range(1, 6)])
    shaped = row(runs["gbe"])
    cols = ["step_time_ms", "compute_time_ms", "slowest_compute_time_ms", "exposed_comm_fraction", "imbalance_fraction"]
    print(f"\n2-node synthetic, unshaped u1..u5:\n{base[cols].to_string(index=False)}\nover {GBE}:\n{shaped[cols]}")
    # every row's four shares add up to its step, or it says it was not judged (docs/concepts/breakdown.md);
    # the shaped run's is judged
    judged = [check_breakdown(r) for r in base.to_dict("records")]
    print(f"unshaped breakdowns judged: {sum(judged)} of {len(judged)}")
    assert check_breakdown(shaped.to_dict())
    assert shaped["exposed_comm_fraction"] >= base["exposed_comm_fraction"].max() + 0.1
    assert shaped["step_time_ms"] > 1.3 * base["step_time_ms"].median()
    # What the link added went to the exposed communication, not to the compute-only step: that
    # rose by a small part of the step's rise. Sent over the link, it would rise as much as the
    # step. A bound on its ratio to the unshaped compute alone failed when the machine was slow
    # while the shaped run ran, and only then.
    step_rise = shaped["step_time_ms"] - base["step_time_ms"].median()
    compute_rise = shaped["compute_time_ms"] - base["compute_time_ms"].median()
    assert compute_rise < 0.25 * step_rise, (compute_rise, step_rise)


def test_a_failed_multi_node_job_fails_the_gate(runs, tmp_path):
    r, out = regress(runs, "broken", tmp_path, *NOISE)
    assert r.returncode == 1 and "REGRESSION:" in r.stderr, r.describe()
    cases = junit_cases(out)
    case = cases["busbw_gbps[allreduce all_reduce, 4x1, srun, default]"]
    failure = case.find("failure")
    print(f"\njunit failure: {failure.get('message')}")
    assert failure.get("type") == "failed"
    assert "n4-g1-srun-default FAILED" in failure.get("message") and "eth0" in failure.get("message")
    assert cases["images_per_s[synthetic weak, 4x1, srun, default]"].find("failure") is not None
    # the failed job is named where it failed alone; the 2-node job ran, and its figures are judged as
    # any night's (a loaded hour has read them 40% low: a run-level noise the gate cannot yet tell)
    two = cases["busbw_gbps[allreduce all_reduce, 2x1, srun, default]"].find("failure")
    assert two is None or two.get("type") != "failed", two.attrib


def test_a_different_batch_size_is_refused_then_stated(runs, tmp_path):
    r = bench("compare", str(runs["u1"]), str(runs["batch4"]), check=False)
    print(f"\n{r.stderr}")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert "synthetic weak: batch_size 8 vs 4 (3 keys)" in r.stderr
    md, csv = tmp_path / "c.md", tmp_path / "c.csv"
    r = bench(
        "compare", str(runs["u1"]), str(runs["batch4"]), "--allow-mismatch", "--markdown", str(md), "--csv", str(csv)
    )
    assert "Compared despite differing parameters (--allow-mismatch)" in r.stdout
    assert "batch_size 8 vs 4" in md.read_text() and "compared despite differing parameters" in csv.read_text()
    r, out = regress(runs, "batch4", tmp_path, "--allow-mismatch", "--allow-unjudged")
    assert "parameters differ, compared anyway" in (out / "junit.xml").read_text()


def test_across_one_run_matches_two_runs(runs, tmp_path):
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    across = ("--across", "nccl_config=default,eth1", "--threshold", "50%", *BUSBW)
    bench("compare", str(runs["both"]), *across, "--csv", str(one))
    bench("compare", str(runs["u6"]), str(runs["eth1"]), *across, "--csv", str(two))
    a, b = (pd.read_csv(p).set_index(["metric", "key"]) for p in (one, two))
    print(f"\nacross one run:\n{a[['a', 'b', 'ratio', 'verdict']]}\ntwo runs:\n{b[['a', 'b', 'ratio', 'verdict']]}")
    assert sorted(a.index) == sorted(b.index)
    b = b.loc[a.index]
    # A key whose interval holds the threshold's edge (ratio 0.5 here) is a coin toss between two
    # measurements: a key whose unshaped busbw is near twice the shaped link's could sit there.
    # Every other key must get the same verdict either way.
    edge = 1 - 0.5
    torn = ((a["ci_low"] <= edge) & (a["ci_high"] >= edge)) | ((b["ci_low"] <= edge) & (b["ci_high"] >= edge))
    print(f"not required to agree, their intervals holding {edge}: {list(a.index[torn])}")
    assert len(a) == 2 * 2  # 2 and 4 nodes, 2M and 4M
    assert torn.sum() <= 2 and (~torn).sum() >= 2
    assert (a["verdict"][~torn] == b["verdict"][~torn]).all()
    multi = a[
        a.index.get_level_values("key").str.contains(r", [24]x1, ")
        & (a.index.get_level_values("metric") == "busbw_gbps")
    ]
    # Off the edge, every multi-node busbw crosses the shaped link and reads slower; on it, the
    # honest verdict is "no significant change", and never faster.
    assert (multi["verdict"][~torn.loc[multi.index]] == "slower").all()
    assert multi["verdict"].isin(["slower", "no significant change"]).all()
    row = a.loc[("busbw_gbps", "allreduce all_reduce 4M, 2x1, srun, default vs eth1")]
    assert row["b"] < 1.05 * RATE_GBPS, row.to_dict()  # the eth1 set really ran over the shaped link


def test_one_slow_node_is_named(runs, tmp_path):
    lines = r"(bnode\d) is \d+% slower than the median node"
    for name in ("u2", "slow"):  # even links, slow or fast: nobody is named
        assert not re.findall(lines, bench("compare", str(runs["u1"]), str(runs[name]), *BUSBW).stdout)
    r = bench("compare", str(runs["u1"]), str(runs["b3"]), *BUSBW)
    assert set(re.findall(lines, r.stdout)) == {"bnode3"}, r.stdout
    _reg, out = regress(runs, "b3", tmp_path, *BUSBW)
    assert set(re.findall(lines, (out / "report.md").read_text())) == {"bnode3"}
    html = tmp_path / "b3.html"
    bench("report", str(runs["b3"]), "--out", str(html))
    assert set(re.findall(lines, html.read_text())) == {"bnode3"}
    ranks = json.loads((runs["b3"] / "jobs" / "n4-g1-srun-default" / "allreduce.ranks.json").read_text())
    assert ranks["hosts"] == ["bnode1", "bnode2", "bnode3", "bnode4"]


def test_a_damaged_history_entry_is_named_and_removed(runs, tmp_path):
    db = tmp_path / "history.sqlite"
    db.write_bytes(runs["db"].read_bytes())
    con = sqlite3.connect(db)
    con.execute("UPDATE data SET summary = ? WHERE run_id = 3", (b"PAR1 damaged",))
    con.commit()
    con.close()
    args = ["regress", str(runs["u6"]), "--cluster", CLUSTER, "--db", str(db), "--out", str(tmp_path / "o")]
    r = bench(*args, check=False)
    assert r.returncode == 2 and "run 3 (night3) is damaged" in r.stderr, r.describe()
    assert len(r.stderr.strip().splitlines()) == 1
    bench("history", "remove", "3", "--db", str(db))
    r = bench(*args, check=False)
    # four runs left: fewer than median:5 asks, so the keys are judged provisionally against their median,
    # and can catch no fall under the margin's 40%: "cannot judge" at the default --must-catch of 25%
    assert r.returncode in (0, 1, 3) and "keys have fewer than 5 usable runs" in r.stdout, r.describe()


# The dashboard's nights: four healthy, then the link shaped to half rate from night 5 on, for six
# nights (the shaped run each night: the same link, the same rate), each judged and added as the
# nightly recipe does, one a day from 1 November 2026. Six: E-divisive's permutation test (on log
# figures) over 4 + 6 nights of these keys' figures gave p 0.011-0.018 over 30 seeds; 4 + 5 gave
# up to 0.028, and the three shaped levels mixed up to 0.048, next to its 0.05.
DASHBOARD_NIGHTS = ("half",) * 6
FOUR_M = ("allreduce all_reduce 4M, 2x1, srun, default", "allreduce all_reduce 4M, 4x1, srun, default")


def test_the_dashboard_shows_a_shaped_link_from_night_5_and_the_slow_node(runs, testbed, tmp_path, browser):
    """Real nights on the dashboard: `bench dashboard`, opened in chromium, shows the cluster
    slower from night 5, the change point of the 4M multi-node keys at night 5, and the node that
    a node check with its link shaped named, in the drain list; nothing before night 5 slower."""
    import shutil

    from harness.analysis import overview, store
    from harness.present import dashboard

    def by_4m(name):  # how far each multi-node 4M figure is from the unshaped runs' median
        return max(abs(busbw_at(runs[name], n) / median[n] - 1) for n in (2, 4))

    unshaped = [f"u{k}" for k in range(1, 7)]
    median = {n: sorted(busbw_at(runs[u], n) for u in unshaped)[3] for n in (2, 4)}
    # the healthy week: the four unshaped runs that agree best, as a quiet cluster's nights would
    # (this machine has one run in a few with a key at half speed, docs/concepts/noise.md; the gate's
    # immunity to it is test_no_false_alarm_against_five_runs's)
    healthy = sorted(unshaped, key=by_4m)[:4]
    db, name = str(tmp_path / "history.sqlite"), "shaped-from-night-5"
    for night, source in enumerate([*sorted(healthy), *DASHBOARD_NIGHTS], start=1):
        path = tmp_path / f"night{night}"
        shutil.copytree(runs[source], path, ignore=shutil.ignore_patterns("regress"))
        plan = json.loads((path / "plan.json").read_text())
        (path / "plan.json").write_text(json.dumps({**plan, "created": f"2026-11-{night:02d}T02:00:00+00:00"}))
        verdict = []
        if night > 1:  # the recipe's first night has nothing to be judged against
            r = bench(
                "regress",
                str(path),
                "--cluster",
                name,
                "--db",
                db,
                "--out",
                str(path / "regress"),
                *BUSBW,
                *NOISE,
                *ASK_NOTHING,
                check=False,
            )
            assert r.returncode == (1 if night >= 5 else 0), f"night {night} ({source}): {r.describe()}"
            verdict = ["--verdict", str(path / "regress" / "gate.json")]
        bench("history", "add", str(path), "--create", "--cluster", name, "--label", source, "--db", db, *verdict)
    r = bench("history", "changes", "--cluster", name, "--metric", "busbw_gbps", "--store", "--db", db)
    print(r.stdout)
    # node checks of the four nodes, as test_nodes_testbed.py runs them: clean, then bnode3's link shaped
    check = ("nodes", "--executor", "slurm", "--cluster", str(SWEEPS / "clusters" / "testbed.yaml"))
    check += ("--device", "cpu", "--bytes", "4M", "--iters", "20", "--threshold", "50%", "--yes")
    r = bench(*check, "--out", str(tmp_path / "clean"), check=False, env=testbed)
    assert r.returncode == 0, r.describe()
    shape("--link", "eth0", "--rate", "1gbit", "--node", "bnode3")
    try:
        r = bench(*check, "--out", str(tmp_path / "bnode3"), check=False, env=testbed)
    finally:
        shape("--clear", "--link", "eth0")
    assert r.returncode == 1 and "bnode3" in r.stdout, r.describe()
    for c in ("clean", "bnode3"):
        bench("history", "add", str(tmp_path / c), "--create", "--cluster", name, "--db", db)
    site = tmp_path / "site"
    r = bench("dashboard", "--db", db, "--out", str(site))
    assert r.returncode == 0, r.describe()

    (cluster,) = overview.read(store.Location(db))
    slower = overview.CODES.index(overview.SLOWER)
    for key in FOUR_M:
        s = next(s for s in cluster.series if s.text == key and s.metric == "busbw_gbps")
        assert s.at.tolist() == list(range(10))
        assert [int(v) == slower for v in s.verdict] == [False] * 4 + [True] * 6, (key, s.verdict)
        (change,) = [c for c in cluster.changes if c.key == key]
        assert cluster.nights[change.at].date == "2026-11-05" and change.change < -0.4, change
    browser.open((site / "index.html").as_uri())
    cells = browser.evaluate(
        "[...document.querySelectorAll('table.matrix tr')].slice(1).map(r => [...r.children].map(c => c.innerText))"
    )
    assert cells[0][0] == name and cells[0][2] == "slower\n2026-11-10", cells  # 2M and 4M: 64 KiB to 16 MiB
    assert cells[0][6].startswith("failed\n"), cells  # the node check named bnode3
    browser.screenshot(tmp_path / "index.png")
    browser.open((site / dashboard.slug("cluster", name)).as_uri())
    paragraphs = browser.evaluate(
        "[...document.querySelectorAll('h3.key')].map(h => [h.innerText, h.nextElementSibling.innerText])"
    )
    shown = {h.split(" · ")[0]: p for h, p in paragraphs if h.endswith("busbw GB/s")}
    for key in FOUR_M:
        assert shown[key].startswith("slower on 2026-11-10: "), shown[key]
        assert "; change 2026-11-05: \u2212" in shown[key], shown[key]
    browser.screenshot(tmp_path / "cluster.png")
    feed = ET.parse(site / "feed.xml").getroot()
    atom = "{http://www.w3.org/2005/Atom}"
    dates = [e.findtext(f"{atom}title").split(" run ")[0] for e in feed.findall(f"{atom}entry")]
    assert dates[:6] == [f"{name}: 2026-11-{d:02d}" for d in range(10, 4, -1)], dates  # nights 10 to 5, newest first
    browser.open((site / dashboard.slug("nodes", name)).as_uri())
    drain = browser.evaluate("[...document.querySelectorAll('table')[0].rows].slice(1).map(r => r.innerText)")
    assert len(drain) == 1 and drain[0].startswith("bnode3\t") and drain[0].endswith("\t1"), drain
    asked = browser.requests()
    assert all(u.startswith(site.as_uri() + "/") for u in asked), asked
    print(f"nights: {[*sorted(healthy), *DASHBOARD_NIGHTS]}; regressed: {dates}")
    print(f"screenshots: {tmp_path / 'index.png'} {tmp_path / 'cluster.png'}")
