"""`bench nodes` off the testbed (which tests/proofs/test_nodes_testbed.py uses): a check of emulated
nodes on this machine with real torchrun ranks, its files, judging it again, a run directory
of a check as untrusted data, the Slurm job's two scripts (the step script run by bash, with a
stand-in srun that records its arguments, against hostile values), and the matmul probe."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import sqlite3
import stat
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import HOSTILE_VALUES, ROOT, SWEEPS, bench, left_in, left_in_tmp, read_json

from harness import check_nodes
from harness.analysis import nodehistory
from harness.config.cluster_profile import Rail, load_profile
from harness.errors import RunDirError
from harness.executors.slurm.check_job import check_job, render_check_script, render_step_script
from harness.nodes import rounds as node_rounds
from harness.nodes.driver import FOLDER, Driver, LocalLauncher, Plan
from harness.nodes.judged import judge_check, low_links
from harness.nodes.rounds import SOAK, Options
from harness.nodes.verdict import drain_command
from harness.run.procs import tagged

PROFILE = SWEEPS / "clusters" / "testbed.yaml"


def test_a_local_check_runs_real_ranks_on_each_pair(local_check):
    r, out = local_check
    printed = json.loads(r.stdout)  # --json: the verdict alone on stdout, the rest on stderr
    assert printed == read_json(out / "verdict.json")
    assert "round 1 of 1: 1 step(s)" in r.stderr
    # 2 nodes cannot be told apart: the check says what it could not judge, never clean (0)
    assert r.returncode == 3, r.describe()
    assert not printed["clean"] and "the population takes 3" in printed["not_judged"][0]
    assert printed["hosts"] == ["local0", "local1"] and printed["rounds"] == 1
    assert printed["steps"]["pair-0-1"]["state"] == "COMPLETED" and len(printed["steps"]) == 1
    for metric in ("busbw_gbps", "p2p_gbps"):
        assert list(printed["pair_figures"][metric]) == ["local0 local1"]
        assert printed["pair_figures"][metric]["local0 local1"] > 0
    # each figure is the step's own result, from its median call
    result = read_json(out / "jobs/nodes/steps/pair-0-1.json")
    row = next(x for x in result["rows"] if x["collective"] == "sendrecv")
    assert result["world_size"] == 2 and result["nodes"] == 2 and result["params"]["min_bytes"] == 256 * 1024
    assert printed["pair_figures"]["p2p_gbps"]["local0 local1"] == pytest.approx(
        row["busbw_gbps"] * row["time_us"] / row["time_us_median"]
    )
    assert (out / "jobs/nodes/steps/pair-0-1.log").read_text().count("# collective") == 2
    for name in ("nodes.csv", "pairs.csv", "heatmap.png", "heatmap.csv", "drain.txt", "check.json"):
        assert (out / name).is_file(), name
    assert (out / "pairs.csv").read_text().splitlines()[0] == "node_a,node_b,busbw_gbps,p2p_gbps,named"
    # every node read its hardware's faults before the check and after it: this machine has no IB
    # port and lets root read its kernel log, so nothing is named, and nothing said unread
    for when in ("before", "after"):
        for host in ("local0", "local1"):
            reading = read_json(out / f"jobs/nodes/faults/{when}/{host}.json")
            assert reading["ib_errors"] == {} and reading["kernel_log"] is None and reading["uptime_s"] > 0
    assert printed["not_read"] == [] and not any("hardware" in line for line in printed["not_judged"])


def test_a_port_error_and_an_xid_during_the_check_name_the_node(tmp_path):
    """A local check of 2 emulated nodes whose sysfs (BENCH_SYSFS_ROOT) has an IB port, and whose
    dmesg prints an Xid once the nodes have read their faults before the rounds: as the rounds
    run, the port's symbol_error rises and the Xid is logged. Both nodes (one machine's emulated
    nodes share its hardware) are named for the port and the GPU, exit 1, and drained."""
    import threading
    import time

    sysfs = tmp_path / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters"
    sysfs.mkdir(parents=True)
    for name in faults_counters():
        (sysfs / name).write_text("0\n")
    flag, bin_dir = tmp_path / "logged", tmp_path / "bin"
    bin_dir.mkdir()
    # the kernel's stamp of the Xid: now, in seconds since boot, as the kernel would write it
    line = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
    (bin_dir / "dmesg").write_text(
        f'#!/bin/sh\n[ -e {flag} ] && echo "[$(cut -d" " -f1 /proc/uptime)] {line}"\nexit 0\n'
    )
    (bin_dir / "dmesg").chmod(0o755)
    out = tmp_path / "check"
    before = out / "jobs/nodes/faults/before"

    def fault() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(list(before.glob("*.json"))) < 2:
            time.sleep(0.05)
        (sysfs / "symbol_error").write_text("7\n")
        flag.touch()

    thread = threading.Thread(target=fault, daemon=True)
    thread.start()
    env = {"BENCH_SYSFS_ROOT": str(tmp_path / "sys"), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    r = bench(
        "nodes", "--executor", "local", "--nodes", "2", "--no-gemm", "--bytes", "256K", "--iters", "5",
        "--json", "--out", str(out), check=False, timeout=300, env=env,
    )  # fmt: skip
    thread.join(timeout=5)
    assert r.returncode == 1, r.describe()
    v = json.loads(r.stdout)
    for host in ("local0", "local1"):
        (named,) = [n for n in v["nodes_named"] if n["node"] == host]
        assert named["reasons"] == [
            "hardware fault: mlx5_0/1: symbol_error rose from 0 to 7",
            "hardware fault: GPU 0000:3b:00: Xid 79 (GPU has fallen off the bus.)",
        ], named
    assert v["drain"] == "local[0-1]" and (out / "drain.txt").read_text().startswith("local[0-1]")


def faults_counters() -> list[str]:
    from harness.evidence.faults import IB_ERRORS

    return list(IB_ERRORS)


def test_a_check_is_judged_again_with_another_threshold(local_check, tmp_path):
    _, out = local_check
    copy = tmp_path / "check"
    shutil.copytree(out, copy)
    before = read_json(copy / "verdict.json")
    r = bench("nodes", "--report", str(copy), "--threshold", "20%", "--json", check=False)
    v = json.loads(r.stdout)
    assert r.returncode == 3 and v == read_json(copy / "verdict.json")  # rewritten
    assert before["threshold"] == 0.5 and v["threshold"] == 0.2  # the local default, then the one given
    assert v["pair_figures"] == before["pair_figures"]


def _edit(text: str, **fields) -> str:
    return json.dumps({**json.loads(text), **fields})


def _tamper(tmp_path: Path, source: Path, rel: str, edit) -> Path:
    copy = tmp_path / "check"
    shutil.copytree(source, copy)
    path = copy / rel
    path.write_text(edit(path.read_text()))
    return copy


@pytest.mark.parametrize(
    ("rel", "edit", "words"),
    [
        ("check.json", lambda t: t.replace('"threshold": 0.5', '"threshold": 7'), "threshold must be a fraction"),
        ("check.json", lambda t: t.replace('"iters": 5', '"iters": "5; id"'), "iters must be an integer"),
        ("check.json", lambda t: t.replace('"gpus_per_node"', '"gpus"'), "options: not an object of the check"),
        ("check.json", lambda t: t.replace('"nodes": 2', '"nodes": true'), "nodes must be an integer"),
        ("check.json", lambda t: "[1, 2]", "not a JSON object"),
        ("check.json", lambda t: t.replace('"rails": []', '"rails": [{"hca": "mlx5_0;id"}]'), "rails[0].hca"),
        ("check.json", lambda t: t.replace('"rails": []', '"rails": [{"gpu": 0}]'), "rails must be a list of rails"),
        # a plan of rails whose record has no rail step: its rounds are not the plan's
        ("check.json", lambda t: t.replace('"rails": []', '"rails": [{"ifname": "lo"}]'), "the plan of 2 nodes has 2"),
        ("jobs/nodes/steps.json", lambda t: t.replace('"local1"', '"$(id)"'), "hosts must be a list of node names"),
        ("jobs/nodes/steps.json", lambda t: t.replace('"local1"', '"local0"'), "hosts names a node twice"),
        ("jobs/nodes/steps.json", lambda t: t.replace('"ran": 1', '"ran": 9'), "round_s must be the seconds"),
        ("jobs/nodes/rounds/0.json", lambda t: "{", "not readable JSON"),
        # a record that judged fewer nodes, or other rounds and steps, than its plan: never clean
        ("jobs/nodes/steps.json", lambda t: _edit(t, hosts=[]), "hosts names 0 node(s); the check's plan has 2"),
        ("jobs/nodes/steps.json", lambda t: _edit(t, hosts=["local0"]), "hosts names 1 node(s)"),
        ("jobs/nodes/steps.json", lambda t: _edit(t, rounds=5), "5 rounds, 1 ran; the plan of 2 nodes has 1"),
        ("jobs/nodes/rounds/0.json", lambda t: _edit(t, **{"pair-0-9": {}}), "its rounds record 2 steps"),
        # the round of links measured again (docs/guides/nodes.md, "Measured again")
        ("jobs/nodes/steps.json", lambda t: _edit(t, again=1.0), "again must be 0 or 1"),
        ("jobs/nodes/steps.json", lambda t: _edit(t, again="1; id"), "again must be 0 or 1"),
        ("jobs/nodes/steps.json", lambda t: _edit(t, ran=2, round_s=[1, 1]), "2 rounds ran of 1 planned, 0 after"),
        ("jobs/nodes/rounds/0.json", lambda t: _edit(t, **{"again-0-9": {}}), "step again-0-9 measured again a link"),
        ("jobs/nodes/rounds/0.json", lambda t: _edit(t, **{"againrail0-0-1": {}}), "step againrail0-0-1 measured"),
        # the soak's rounds (docs/guides/nodes.md, "Soak")
        ("check.json", lambda t: t.replace('"soak_s": 0.0', '"soak_s": "60; id"'), "soak_s must be a number"),
        ("check.json", lambda t: t.replace('"soak_s": 0.0', '"soak_s": 1e9'), "soak_s must be a number from 0"),
        ("check.json", lambda t: t.replace('"dcgm": 0', '"dcgm": 9'), "dcgm must be an integer from 0 to 4"),
        ("check.json", lambda t: t.replace('"dcgm": 0', '"dcgm": "1; id"'), "dcgm must be an integer from 0 to 4"),
        ("jobs/nodes/steps.json", lambda t: _edit(t, soak=-1), "soak must be a count of rounds"),
        ("jobs/nodes/rounds/0.json", lambda t: _edit(t, **{"soak1-0-1": {}}), "step soak1-0-1 is of no soak pass"),
        ("jobs/nodes/steps.json", lambda t: _edit(t, ran=2, round_s=[1, 1], soak=1), "nodes/rounds/1.json"),
    ],
)
def test_a_tampered_check_is_one_line_and_exit_2(local_check, tmp_path, rel, edit, words):
    copy = _tamper(tmp_path, local_check[1], rel, edit)
    before = (copy / "verdict.json").read_bytes()
    r = bench("nodes", "--report", str(copy), check=False)
    assert r.returncode == 2, r.describe()
    assert r.stdout == "" and len(r.stderr.splitlines()) == 1 and words in r.stderr, r.stderr
    assert (copy / "verdict.json").read_bytes() == before  # nothing rewritten


@pytest.mark.parametrize("state", ["COMPLETED", "FAILED"])
def test_a_result_with_wrong_elements_fails_its_step(local_check, tmp_path, state):
    """Wrong elements fail a step, named "wrong results": in a result its step completed (written
    before the ranks failed alike), or in the result of the step their exit 1 failed."""
    copy = _tamper(
        tmp_path, local_check[1], "jobs/nodes/steps/pair-0-1.json", lambda t: t.replace('"wrong": 0', '"wrong": 7', 1)
    )
    rounds = copy / "jobs/nodes/rounds/0.json"
    record = json.loads(rounds.read_text())
    record["pair-0-1"].update(state=state, reason=None if state == "COMPLETED" else "exit 1")
    rounds.write_text(json.dumps(record))
    r = bench("nodes", "--report", str(copy), "--json", check=False)
    v = json.loads(r.stdout)
    assert r.returncode == 3 and v["pair_figures"]["busbw_gbps"]["local0 local1"] is None
    said = "pair-0-1: wrong results: all_reduce returned 7 wrong element(s)" if state == "COMPLETED" else (
        "wrong results: 7 elements failed the output check, all_reduce (world) at 1 size")  # fmt: skip
    assert f"1 of 1 pairs failed (first: pair-0-1 {said}" in v["not_judged"][0], v["not_judged"]


def test_a_hostile_reason_or_figure_is_shown_not_obeyed(local_check, tmp_path):
    """A failed step's reason with rich's markup and a terminal's escape sequence is printed as
    text, and a busbw of 1e308 (infinite once weighed by mean over median) fails its step: never
    exit 70, an escape on the terminal, or Infinity in JSON."""
    copy = _tamper(
        tmp_path,
        local_check[1],
        "jobs/nodes/steps/pair-0-1.json",
        lambda t: t.replace('"busbw_gbps": ', '"busbw_gbps": 1e308, "x": ', 1),
    )
    r = bench("nodes", "--report", str(copy), "--json", check=False)
    assert r.returncode == 3 and "Infinity" not in r.stdout, r.describe()
    assert "Infinity" not in (copy / "verdict.json").read_text()
    rounds = copy / "jobs/nodes/rounds/0.json"
    record = json.loads(rounds.read_text())
    record["pair-0-1"].update(state="FAILED", reason="exit 1: [/] [bold red]\x1b[2Jcleared")
    rounds.write_text(json.dumps(record))
    r = bench("nodes", "--report", str(copy), check=False)
    assert r.returncode == 3 and "\x1b" not in r.stdout + r.stderr, r.describe()
    assert "exit 1: [/] [bold red]\\x1b[2Jcleared" in " ".join(r.stdout.split()), r.stdout


@pytest.mark.parametrize(
    "edit", [lambda d: d.update(params=[1]), lambda d: d["params"].update(groups=[1]), lambda d: d.update(rows="x")]
)
def test_a_damaged_step_result_is_judged_not_a_crash(local_check, tmp_path, edit):
    """A result that is not the shape a step writes (params a list ended --report with exit 70):
    judged, never a crash; two nodes are never clean."""
    copy = _tamper(tmp_path, local_check[1], "jobs/nodes/steps/pair-0-1.json", lambda t: json.dumps(_edited(t, edit)))
    r = bench("nodes", "--report", str(copy), "--json", check=False)
    assert r.returncode == 3 and not json.loads(r.stdout)["clean"], r.describe()


def _edited(text: str, edit) -> dict:
    data = json.loads(text)
    edit(data)
    return data


def test_a_pair_that_read_0_is_no_measurement(local_check, tmp_path):
    """Every pair at 0 GB/s is a failed step, not a population of equal nodes: never clean."""
    copy = _tamper(
        tmp_path,
        local_check[1],
        "jobs/nodes/steps/pair-0-1.json",
        lambda t: _edit(t, rows=[{**row, "busbw_gbps": 0} for row in json.loads(t)["rows"]]),
    )
    r = bench("nodes", "--report", str(copy), "--json", check=False)
    v = json.loads(r.stdout)
    assert r.returncode == 3 and not v["clean"] and v["pair_figures"]["busbw_gbps"]["local0 local1"] is None
    assert "busbw_gbps: 0, which is no measurement" in " ".join(v["not_judged"]), v["not_judged"]


def test_history_add_of_a_check_that_judged_nothing_is_not_clean(local_check, tmp_path):
    """A check of 2 nodes judges no population: history add keeps it, says so, and exits 3."""
    db = tmp_path / "h.sqlite"
    r = bench("history", "add", str(local_check[1]), "--create", "--cluster", "lab", "--db", str(db), check=False)
    assert r.returncode == 3 and "named not judged: " in r.stdout, r.describe()
    assert nodehistory.entries(db)[0].named.startswith("not judged: ")


@pytest.mark.parametrize("planted", ["rounds", "steps.json", "steps"])
def test_the_driver_writes_through_no_planted_link(tmp_path, planted):
    """What runs inside the check's job writes its record, logs and results in a shared run
    directory, where links can be planted while the job waits in the queue: a link where the
    driver keeps a directory is refused before any step starts, and one where it keeps a file is
    replaced, never written through."""
    run, outside = tmp_path / "run", tmp_path / "outside"
    (run / FOLDER).mkdir(parents=True)
    outside.mkdir()
    (outside / "keep").write_text("keep me\n")
    (run / FOLDER / planted).symlink_to(outside / ("keep" if planted.endswith(".json") else ""))
    o = Options(gemm=False, device="cpu", backend="gloo")
    driver = Driver(run, FOLDER, ["local0", "local1"], o, LocalLauncher(run, o))
    if planted.endswith(".json"):
        driver.save()
        assert not (run / FOLDER / planted).is_symlink() and json.loads((run / FOLDER / planted).read_text())
    else:
        with pytest.raises(RunDirError, match="a symbolic link"):
            driver.drive()
    assert sorted(p.name for p in outside.iterdir()) == ["keep"] and (outside / "keep").read_text() == "keep me\n"


class _Throttled(LocalLauncher):
    """Real ranks, where the steps named in `slowed` have every process stopped for 95 ms of each
    100 ms once they measure (SIGSTOP, SIGCONT), longer than a call of theirs takes: a link that
    reads low because something else held its ranks, as another job's traffic or a neighbour's
    load does. Held from their start, their import of torch at a twentieth of its pace outlasted
    the step's timeout; so the hold begins when a rank first writes its progress file, at its
    first measured size (benchmarks/progress.py), outside the timed region."""

    def __init__(self, run: Path, options: Options, slowed: set[str]):
        super().__init__(run, options)
        self.slowed, self.threads = slowed, []

    def start(self, step, names, index, log, tag):
        procs = super().start(step, names, index, log, tag)
        if step.name in self.slowed:
            progress = self.run / FOLDER / "steps" / "progress"
            thread = threading.Thread(target=self._throttle, args=(procs, tag, progress, step.name), daemon=True)
            thread.start()
            self.threads.append(thread)
        return procs

    @staticmethod
    def _throttle(procs, tag, progress, name):
        """The step's processes are looked for while those already found are stopped: the look
        reads every process's environment, which under load takes longer than the 5 ms they
        may run. This thread runs at a real-time priority where it may (SCHED_FIFO, sched(7);
        root), so that it wakes when their 5 ms are up however loaded the machine: at a normal
        one, beside two busy processes, its wake-ups came late and the held pair read healthy."""
        with contextlib.suppress(PermissionError):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))  # 0: this thread
        while not any(progress.glob(f"{name}.rank*.json")):
            if all(p.poll() is not None for p in procs):
                return
            time.sleep(0.01)
        pids: set[int] = set()

        def send(sig, to):
            for pid in to:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)

        while any(p.poll() is None for p in procs):
            stopped = time.monotonic()
            send(signal.SIGSTOP, pids)
            found = set(tagged(tag))  # those that exited dropped: never a signal to a pid reused since
            send(signal.SIGSTOP, found - pids)
            pids = found
            time.sleep(max(0.0, 0.095 - (time.monotonic() - stopped)))
            send(signal.SIGCONT, pids)
            time.sleep(0.005)


@pytest.mark.proof  # the machine to itself: see below
def test_a_link_that_reads_low_once_is_measured_again_and_not_named(tmp_path):
    """Four emulated nodes of real gloo ranks; the pair of local1 and local2 held while it runs:
    the round after the plan's measures it again, not held, and its better reading is healthy:
    nothing is named. (A link low both times is named with both readings: test_rounds.py, the
    rail's below, and the testbed's shaped link.) A proof, run alone: beside another test on this
    machine's two cores, the healthy pairs of one round read at a third of another's, and their
    spread (a third of their centre) set the population's bound below the held pair's 0.13 of
    its nodes' medians, so nothing was measured again; held longer, the pair's step outlasts its
    timeout. Judged at 80%, so that a round slowed by the machine names no node."""
    run = tmp_path / "run"
    o = Options(gemm=False, device="cpu", backend="gloo", bytes=8 * 2**20, iters=10)
    plan = Plan("local", o, threshold=0.8, nodes=4)
    (run / FOLDER).mkdir(parents=True)
    plan.write(run)
    launcher, lines = _Throttled(run, o, {"pair-1-2"}), []
    Driver(run, FOLDER, [f"local{i}" for i in range(4)], o, launcher, lambda: low_links(run, plan, None)).drive(
        lines.append
    )
    for thread in launcher.threads:
        thread.join(timeout=10)
    verdict, record = judge_check(run, plan, None)
    figures = [f"{m} {a}-{b} {x}" for m, by in verdict.pair_figures.items() for (a, b), x in by.items()]
    seen = "\n".join([*lines, *figures, *(r for f in verdict.nodes + verdict.links for r in f.reasons)])
    assert record["rounds"] == 3 and record["again"] == 1 and record["ran"] == 4, seen
    assert "round 4, the links that read low, again: 1 step(s)" in lines[-1], lines
    first, second = verdict.again[("local1", "local2")]["p2p_gbps"]
    assert first < second / 2, (first, second)
    assert verdict.pair_figures["p2p_gbps"][("local1", "local2")] == second
    assert not verdict.nodes and ("local1", "local2") not in {f.nodes for f in verdict.links}, verdict


class _Replay:
    """A check's run directory whose steps' results are a real pair's (the local check's),
    each replayed at `factor[step]` times its figures (1 where not given), written round by
    round as the driver writes them."""

    def __init__(self, source: Path, run: Path, plan: Plan, factor: dict[str, float]):
        self.real = (source / "jobs/nodes/steps/pair-0-1.json").read_text()
        self.run, self.plan, self.factor, self.ran = run, plan, factor, 0
        (run / FOLDER / "steps").mkdir(parents=True)
        (run / FOLDER / "rounds").mkdir()
        plan.write(run)

    def round(self, names: list[str], again: int = 0, soak: int = 0) -> None:
        for name in names:
            result = json.loads(self.real)
            for row in result["rows"]:
                row["busbw_gbps"] *= self.factor.get(name, 1.0)
            (self.run / FOLDER / "steps" / f"{name}.json").write_text(json.dumps(result))
        steps = {name: {"state": "COMPLETED", "exit_code": 0, "elapsed_s": 1.0, "reason": None} for name in names}
        (self.run / FOLDER / "rounds" / f"{self.ran}.json").write_text(json.dumps(steps))
        self.ran += 1
        planned = node_rounds.round_count(self.plan.nodes, self.plan.options)
        record = {"format_version": 1, "hosts": [f"local{i}" for i in range(self.plan.nodes)], "rounds": planned}
        record |= {"again": again, "soak": soak, "round_s": [1.0] * self.ran, "ran": self.ran}
        (self.run / FOLDER / "steps.json").write_text(json.dumps(record))


@pytest.mark.parametrize("again", [1.0, 0.1], ids=["healthy-again", "low-again"])
def test_a_rail_s_link_measured_again_is_judged_by_its_better_reading(local_check, tmp_path, again):
    """A check of 4 nodes and one rail, its steps' results a real pair's (the local check's)
    replayed at the figures below: the rail's pair of local0 and local3 at a tenth, measured
    again at `again` times. Healthy again, nothing is named; low again, the link is named on
    that rail with both readings. (A rail's low reading cannot be had on demand here: on
    loopback, the spread of the rail's healthy pairs named a node, whose links then go unjudged.)"""
    run = tmp_path / "run"
    o = Options(gemm=False, device="cpu", backend="gloo", rails=(Rail(hca="mlx5_0", ifname="lo"),))
    plan = Plan("local", o, threshold=0.5, nodes=4)
    factor = {"rail0-0-3": 0.1, "againrail0-0-3": again}
    rounds = [[f"{kind}-{a}-{b}" for a, b in pairs] for pairs in node_rounds.rounds(4) for kind in ("pair", "rail0")]
    replay = _Replay(local_check[1], run, plan, factor)
    for names in rounds:
        replay.round(names)
    assert low_links(run, plan, None) == [("rail0", 0, 3)]  # what the driver measures again
    replay.round(["againrail0-0-3"], again=1)
    verdict, _ = judge_check(run, plan, None)
    rail = verdict.rails["mlx5_0"]
    assert set(rail.again) == {("local0", "local3")} and not verdict.again
    link = ("local0", "local3")
    first, second = rail.again[link]["p2p_gbps"]
    assert second == pytest.approx(first * again / 0.1) and rail.pair_figures["p2p_gbps"][link] == max(first, second)
    assert not verdict.nodes
    named = {f.nodes: f.reasons for f in verdict.links}
    if again == 1.0:
        assert not named, named
    else:
        assert list(named) == [link] and all(why.startswith("rail mlx5_0: ") for why in named[link]), named
        assert "measured again)" in named[link][0]
    r = bench("nodes", "--report", str(run), check=False)  # the terminal counts a rail's link measured again
    assert "13 steps in 6 of 6 rounds and 1 link(s) that read low measured again" in r.stdout, r.describe()


def test_a_local_soak_measures_the_pairs_again_pass_after_pass(tmp_path):
    """Two emulated nodes, one gloo rank each, soaked 30 s (`--soak 0.5`, twice a pass's time on a
    loaded machine, so that a second pass begins): once the check's one
    round has run, the driver runs its pair again in whole passes while the 30 s last, each a
    round of its own; the verdict holds the link's first and last readings and its drift, and
    says that one link's drift cannot be judged (exit 3, as every 2-node check): here one pair's
    readings have fallen by three quarters from one pass to the next, loopback's two rates
    (docs/concepts/noise.md). `--report` judges it again alike."""
    out = tmp_path / "soak"
    check = ("nodes", "--executor", "local", "--nodes", "2", "--no-gemm", "--bytes", "256K", "--iters", "5")
    r = bench(*check, "--soak", "0.5", "--json", "--out", str(out), check=False, timeout=300)
    assert r.returncode == 3, r.describe()
    v = json.loads(r.stdout)
    passes = v["soak"]["passes"]
    assert passes >= 2, r.stderr  # a third pass may not begin in time on a loaded machine
    assert f"the soak: {passes} pass(es) of the pairs in " in r.stderr
    assert read_json(out / "jobs/nodes/steps.json")["soak"] == passes and v["rounds"] == 1
    soaked = [f"{SOAK}{p}-0-1" for p in range(1, passes + 1)]
    assert sorted(v["steps"]) == sorted(["pair-0-1", *soaked]) and {s["state"] for s in v["steps"].values()} == {
        "COMPLETED"
    }
    link = v["soak"]["links"]["busbw_gbps"]["local0 local1"]
    last = read_json(out / f"jobs/nodes/steps/{soaked[-1]}.json")
    row = next(x for x in last["rows"] if x["collective"] == "all_reduce")
    assert link["last"] == pytest.approx(row["busbw_gbps"] * row["time_us"] / row["time_us_median"])
    assert link["first"] == v["pair_figures"]["busbw_gbps"]["local0 local1"] and link["drift"] > 0
    assert "two-node all-reduce, busbw over the soak: 1 link(s) with a reading of every pass; judging" in " ".join(
        v["not_judged"]
    )
    assert v["links_named"] == v["cluster"] == []  # one link's drift is no population's
    again = bench("nodes", "--report", str(out), "--json", check=False)
    assert json.loads(again.stdout)["soak"] == v["soak"], again.describe()


def test_a_link_that_falls_in_the_soak_is_named_with_its_first_and_last_readings(local_check, tmp_path):
    """Four nodes, every pair, soaked 3 passes, every result a real pair's replayed in the
    driver's order: the link local0 - local3 at 0.8, 0.5 and 0.3 of its round's figure pass by
    pass, the others as they were. `--report` names that link for its drift, neither node."""
    run = tmp_path / "run"
    plan = Plan("local", Options(gemm=False, device="cpu", backend="gloo", soak_s=60.0), 0.5, 4)
    falls = {f"{SOAK}{p}-0-3": x for p, x in ((1, 0.8), (2, 0.5), (3, 0.3))}
    replay = _Replay(local_check[1], run, plan, falls)
    planned = [pairs for _, pairs in node_rounds.schedule([f"local{i}" for i in range(4)], plan.options)]
    for pairs in planned:
        replay.round([f"pair-{a}-{b}" for a, b in pairs])
    for p in (1, 2, 3):
        for k, pairs in enumerate(planned):
            replay.round([f"{SOAK}{p}-{a}-{b}" for a, b in pairs], soak=(p - 1) * len(planned) + k + 1)
    r = bench("nodes", "--report", str(run), check=False)
    assert r.returncode == 1, r.describe()
    v = read_json(run / "verdict.json")
    assert v["nodes_named"] == [] and [link["nodes"] for link in v["links_named"]] == [["local0", "local3"]]
    why = " ".join(v["links_named"][0]["reasons"])
    assert "over the soak: 70% lower at its end than at its start, while the links' median moved +0%" in why
    assert v["soak"]["passes"] == 3 and v["soak"]["links"]["p2p_gbps"]["local0 local3"]["drift"] == pytest.approx(0.3)
    assert "the soak, 3 passes: two-node all-reduce, busbw" in r.stdout and "lowest 30% (local0 - local3)" in r.stdout
    # in the history, each link's drift is a series, and each node's median of its links' (docs/guides/nodes.md)
    db = tmp_path / "history.sqlite"
    nodehistory.add(db, run, "lab", None, check_nodes.verdict_of(run), create=True)
    _, frame = nodehistory.series(db, "lab")
    drifts = {
        (m, k): x for m, k, x in frame[frame["metric"].str.endswith("_soak_drift")][["metric", "key", "value"]].values
    }
    assert len(drifts) == 2 * (6 + 4) and drifts["p2p_gbps_soak_drift", "pair local0 local3"] == pytest.approx(0.3)
    assert drifts["p2p_gbps_soak_drift", "node local0"] == pytest.approx(1.0, abs=0.2)  # 2 of its 3 links held
    assert (
        nodehistory.metric_label("p2p_gbps_soak_drift")
        == "point-to-point exchange, per rank, its soak's end over its start"
    )


def test_a_check_of_a_profile_s_leaves_names_the_slow_path_between_them(local_check, tmp_path):
    """Eight nodes under two leaves of the profile, every pair's result a real pair's replayed,
    the pairs across the leaves at a quarter: `bench nodes --report` names the path between the
    leaves, no node and no link, and exits 1; verdict.json and the history say so."""
    run = tmp_path / "run"
    leaves = [{"name": "s0", "nodes": "local[0-3]"}, {"name": "s1", "nodes": "local[4-7]"}]
    plan = Plan(
        "local", Options(gemm=False, device="cpu", backend="gloo"), 0.5, 8, cluster={"name": "lab", "leaves": leaves}
    )
    factor = {f"pair-{a}-{b}": 0.25 for a in range(4) for b in range(4, 8)}
    replay = _Replay(local_check[1], run, plan, factor)
    for pairs in node_rounds.rounds(8):
        replay.round([f"pair-{a}-{b}" for a, b in pairs])
    r = bench("nodes", "--report", str(run), check=False)
    assert r.returncode == 1, r.describe()
    assert "uplink s0 - s1: the path between leaves s0 and s1: two-node all-reduce, busbw: 16 pairs across" in r.stdout
    v = read_json(run / "verdict.json")
    assert v["nodes_named"] == v["links_named"] == [] and v["drain"] == ""
    assert [u["leaves"] for u in v["uplinks_named"]] == [["s0", "s1"]]
    paths = {p["metric"]: (p["leaves"], p["pairs"], p["median_ratio"]) for p in v["paths_judged"]}
    assert {m: (p[0], p[1]) for m, p in paths.items()} == {m: (["s0", "s1"], 16) for m in ("busbw_gbps", "p2p_gbps")}
    assert all(0.24 < ratio < 0.26 for _, _, ratio in paths.values()), paths
    assert "judged healthy" not in r.stdout  # the path named is not also said to be healthy
    assert check_nodes.verdict_of(run).uplinks[0].nodes == ("s0", "s1")
    # without the leaves the same figures name nothing: every node's median is a pair across
    # (exit 3: a replayed check has no readings of the nodes' hardware faults)
    plan_data = read_json(run / "check.json")
    (run / "check.json").write_text(json.dumps({**plan_data, "cluster": None}))
    assert bench("nodes", "--report", str(run), check=False).returncode == 3
    v = read_json(run / "verdict.json")
    assert v["nodes_named"] == v["links_named"] == v["uplinks_named"] == []


def test_three_partners_by_leaf_judge_the_nodes_under_their_leaf_and_the_path_across(local_check, tmp_path):
    """Eight nodes under two leaves, 3 partners each: the rounds go under the leaves, across,
    under (docs/guides/nodes.md, "Pairs by leaf"), every result a real pair's replayed in the
    driver's order, the 4 pairs across at a quarter. `--report` plans the rounds by the leaves
    the plan recorded, as the driver did, and names the path between the leaves from its 4
    pairs across, each node judged by its 2 partners under its leaf: no node, no link."""
    run = tmp_path / "run"
    leaves = [{"name": "s0", "nodes": "local[0-3]"}, {"name": "s1", "nodes": "local[4-7]"}]
    o = Options(gemm=False, device="cpu", backend="gloo", partners=3)
    plan = Plan("local", o, 0.5, 8, cluster={"name": "lab", "leaves": leaves})
    leaf_of = {f"local{i}": "s0" if i < 4 else "s1" for i in range(8)}
    planned = [pairs for _, pairs in node_rounds.schedule([f"local{i}" for i in range(8)], o, leaf_of)]
    assert planned == [
        [(0, 3), (1, 2), (4, 7), (5, 6)],
        [(0, 4), (1, 5), (2, 6), (3, 7)],
        [(1, 3), (0, 2), (5, 7), (4, 6)],
    ]
    replay = _Replay(local_check[1], run, plan, {f"pair-{a}-{a + 4}": 0.25 for a in range(4)})
    for pairs in planned:
        replay.round([f"pair-{a}-{b}" for a, b in pairs])
    r = bench("nodes", "--report", str(run), check=False)
    assert r.returncode == 1, r.describe()
    said = " ".join(r.stdout.split())
    assert "uplink s0 - s1: the path between leaves s0 and s1: two-node all-reduce, busbw: 4 pairs across" in said
    v = read_json(run / "verdict.json")
    assert v["nodes_named"] == v["links_named"] == [] and v["drain"] == "", v
    assert not [line for line in v["not_judged"] if "lea" in line], v[
        "not_judged"
    ]  # every node has pairs under its leaf
    assert [u["leaves"] for u in v["uplinks_named"]] == [["s0", "s1"]]


def test_a_healthy_path_between_two_leaves_is_said_to_be_judged(local_check, tmp_path):
    """Eight nodes under two leaves, every other node under each, every pair at its real figure:
    nothing named, and the path between the leaves is listed as judged, with its pairs across and
    their median over their nodes'; the nodes are written and drawn leaf by leaf."""
    run = tmp_path / "run"
    leaves = [{"name": "s0", "nodes": "local[0,2,4,6]"}, {"name": "s1", "nodes": "local[1,3,5,7]"}]
    plan = Plan(
        "local", Options(gemm=False, device="cpu", backend="gloo"), 0.5, 8, cluster={"name": "lab", "leaves": leaves}
    )
    replay = _Replay(local_check[1], run, plan, {})
    for pairs in node_rounds.rounds(8):
        replay.round([f"pair-{a}-{b}" for a, b in pairs])
    r = bench("nodes", "--report", str(run), check=False)
    assert r.returncode == 3, r.describe()  # nothing named; a replay has no readings of hardware faults
    said = " ".join(r.stdout.split())
    assert "paths between leaves judged healthy by two-node all-reduce, busbw (pairs across, their median over " in said
    assert "s0 - s1 (16 pairs, 100%)" in said, r.stdout
    assert read_json(run / "verdict.json")["uplinks_named"] == []
    rows = [line.split(",")[:2] for line in (run / "nodes.csv").read_text().splitlines()]
    assert rows[0] == ["node", "leaf"]
    assert rows[1:] == [[f"local{i}", "s0"] for i in (0, 2, 4, 6)] + [[f"local{i}", "s1"] for i in (1, 3, 5, 7)]
    assert check_nodes.verdict_of(run).by_leaf() == [r[0] for r in rows[1:]]  # as the heatmap draws them


def test_a_slurm_check_plans_by_the_leaves_of_the_topology_its_profile_names(tmp_path):
    """A profile's `topology:` names a topology.conf (the testbed's, tests/fixtures/topology/): a
    dry run on Slurm reads its leaves, says so, plans the 3 partners' rounds by them, and records
    them in the plan, as `scontrol show topology` would be read on the cluster
    (tests/proofs/test_nodes_testbed.py)."""
    profile = tmp_path / "lab.yaml"
    profile.write_text(f"name: lab\ntopology: {ROOT / 'tests/fixtures/topology/topology.conf'}\n")
    out = tmp_path / "dry"
    check = ("nodes", "--executor", "slurm", "--cluster", str(profile), "--nodelist", "bnode[1-6]", "--dry-run")
    r = bench(*check, "--partners", "3", "--out", str(out))
    assert "topology.conf: leaf1 (4 nodes), leaf2 (2 nodes)" in r.stdout, r.describe()
    # each node's matmul, then 3 rounds by leaf: leaf1's 2 pairs and leaf2's 1; leaf2's 2 nodes each
    # with one of leaf1; leaf1's 2 pairs again (leaf2's only pair has met)
    assert "13 steps in 4 rounds (3 partners per node, by leaf: 2 round(s) under the leaves, 1 across)" in r.stdout
    cluster = read_json(out / "check.json")["cluster"]
    assert cluster["leaves"] == [{"name": "leaf1", "nodes": "bnode[1-4]"}, {"name": "leaf2", "nodes": "bnode[5-8]"}]
    assert cluster["topology"] is None


def test_a_local_dry_run_runs_nothing(tmp_path):
    """64 emulated nodes would start 2,080 steps (2,016 pairs); a dry run plans them and starts none."""
    out = tmp_path / "dry"
    r = bench("nodes", "--executor", "local", "--nodes", "64", "--dry-run", "--out", str(out), timeout=60)
    assert "2080 steps in 64 rounds" in r.stdout and "dry run: nothing ran" in r.stdout, r.describe()
    assert sorted(p.name for p in out.iterdir()) == [".lock", "check.json"] and left_in(out) == []


@pytest.mark.parametrize("value", HOSTILE_VALUES + ["it's", "a\nb"])
def test_the_drain_line_is_quoted_for_a_shell(tmp_path, value):
    """The line an admin pastes, run by a real bash with scontrol a function printing its words:
    the run directory's name arrives as one word, and nothing in it runs."""
    line = drain_command("bnode[1-2,4]", f"bench nodes: check-{value}")
    words = subprocess.run(
        ["bash", "-c", 'scontrol() { printf "%s\\0" "$@"; }; ' + line],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    ).stdout.split("\0")[:-1]
    assert words == ["update", "nodename=bnode[1-2,4]", "state=drain", f"reason=bench nodes: check-{value}"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", ["a;b", "$(id)", "bnode[1-4] x", "n`id`"])
def test_a_hostile_nodelist_is_refused_before_anything_runs(tmp_path, bad):
    out = tmp_path / "out"
    r = bench(
        "nodes",
        "--executor",
        "slurm",
        "--cluster",
        str(PROFILE),
        "--nodelist",
        bad,
        "--dry-run",
        "--out",
        str(out),
        check=False,
    )
    assert r.returncode == 2 and "is not a Slurm hostlist" in r.stderr and len(r.stderr.splitlines()) == 1, r.describe()
    assert not out.exists()


def _dry_check(tmp_path: Path, profile: str, name: str, *args: str):
    """`bench nodes --dry-run` of 64 Slurm nodes named by a hostlist, with no Slurm command on
    PATH: what an admin sees off the cluster."""
    (tmp_path / "p.yaml").write_text(profile)
    return bench(
        "nodes", "--executor", "slurm", "--cluster", str(tmp_path / "p.yaml"), "--nodelist", "gpu[001-064]",
        "--dry-run", "--out", str(tmp_path / name), *args,
        env={**os.environ, "PATH": str(Path(sys.executable).parent)},
    )  # fmt: skip


def test_a_dry_run_plans_and_prices_a_check_off_the_cluster(local_check, tmp_path):
    """The estimate's round time: the profile's, else the cluster's last check in the history,
    else none, said so (docs/guides/nodes.md, "Cost"); the hostlist expanded without scontrol."""
    db = tmp_path / "history.sqlite"
    none = _dry_check(tmp_path, "name: lab\n", "a", "--db", str(db))
    assert "64 nodes x 1 rank(s), 2080 steps in 64 rounds" in none.stdout, none.describe()
    assert "64 rounds: no estimate of their time" in none.stdout and not db.exists()
    assert json.loads((tmp_path / "a" / "check.json").read_text())["nodelist"] == "gpu[001-064]"
    stated = _dry_check(tmp_path, "name: lab\nnode_check_round_s: 30\n", "b", "--db", str(db))
    # by hand: 64 rounds x 30 s = 0.53 h, over 64 nodes 34.1 node-hours
    assert "64 rounds: 0.53 h, 34.1 node-hours, at 30 s a round (the profile's node_check_round_s)" in stated.stdout
    assert (
        bench(
            "history", "add", str(local_check[1]), "--create", "--cluster", "lab", "--db", str(db), check=False
        ).returncode
        == 3
    )
    record = json.loads((local_check[1] / "jobs/nodes/steps.json").read_text())
    median = statistics.median(record["round_s"])
    last = _dry_check(tmp_path, "name: lab\n", "c", "--db", str(db))
    assert f"at {median:g} s a round (the median round of node check 1 of lab in {db}" in last.stdout, last.describe()
    other = _dry_check(tmp_path, "name: elsewhere\n", "d", "--db", str(db))
    assert "no estimate of their time" in other.stdout  # another cluster's check says nothing of this one


def test_a_check_too_short_for_the_warning_asks_for_none_or_is_refused_under_submitit(tmp_path):
    """A 2-minute limit: Slurm's USR2, which may come 60 s early, could come at the job's start
    (signal_lead_s). The sbatch script asks for none; submitit always asks, so it is refused."""
    args = ("--nodelist", "gpu[001-004]", "--time-limit", "2", "--dry-run")
    (tmp_path / "p.yaml").write_text("name: lab\n")
    r = bench(
        "nodes", "--executor", "slurm", "--cluster", str(tmp_path / "p.yaml"), *args, "--out", str(tmp_path / "s")
    )
    script = (tmp_path / "s" / "jobs" / "nodes" / "job.sbatch").read_text()
    assert "#SBATCH --time=00:02:00\n" in script and "#SBATCH --signal" not in script, r.describe()
    out = tmp_path / "t"
    r = bench(
        "nodes", "--executor", "submitit", "--cluster", str(tmp_path / "p.yaml"), *args, "--out", str(out), check=False
    )
    assert r.returncode == 2 and not out.exists(), r.describe()
    assert r.stderr.splitlines() == [
        "bench nodes: error: --time-limit: time_limit_min 2 is too short for the submitit executor, which always asks "
        "for Slurm's time-limit warning: it may come 60 s early and must come after the first 60 s, so the limit "
        "must be over 2 minutes (docs/guides/submitit.md); or use --executor slurm"
    ]


# --------------------------------------------------------------------------- the Slurm job's scripts


def _plan(**kw) -> Plan:
    return Plan("slurm", Options(gemm=False, bytes=4 << 20), 0.1, 4, "bnode[1-4]", **kw)


def test_the_check_is_one_job_of_every_node_running_the_driver():
    profile = load_profile(PROFILE)
    plan = _plan()
    job = check_job(plan)
    script = render_check_script(job, profile, plan)
    assert "#SBATCH --nodes=4\n" in script and "#SBATCH --nodelist=bnode[1-4]\n" in script
    # the time limit: the 3 rounds and the round of links measured again, 2 min each, and 5 to spare
    assert "#SBATCH --job-name=bench-nodes\n" in script and "#SBATCH --time=00:13:00\n" in script
    assert " -m harness.nodesteps jobs/nodes &\n" in script and script.rstrip().endswith('exit "$rc"')
    assert "export GLOO_SOCKET_IFNAME=eth0" in script
    with pytest.raises(ValueError, match="not a Slurm hostlist"):
        render_check_script(job, profile, Plan("slurm", plan.options, 0.1, 4, "a;b"))
    # soaked 30 minutes: those, and the pass begun just before they end (3 rounds at 2 min): 13 + 36
    soaked = Plan("slurm", dataclasses.replace(plan.options, soak_s=1800.0), 0.1, 4, "bnode[1-4]")
    assert "#SBATCH --time=00:49:00\n" in render_check_script(check_job(soaked), profile, soaked)
    # DCGM's diagnostic first: the job's limit adds the level's bound and the minute its step has past it
    diagnosed = Plan("slurm", dataclasses.replace(plan.options, dcgm=2), 0.1, 4, "bnode[1-4]")
    assert "#SBATCH --time=00:44:00\n" in render_check_script(check_job(diagnosed), profile, diagnosed)


@pytest.fixture
def fake_srun(tmp_path):
    """An srun on PATH that writes its arguments and MASTER_ADDR/PORT as JSON, one file per call."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'addr': os.environ['MASTER_ADDR'], 'port': os.environ['MASTER_PORT']}}, "
        f"open({str(tmp_path / 'srun.json')!r}, 'w'))\n"
    )
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, tmp_path / "srun.json"


def _step(tmp_path, env, *args, plan=None):
    script = tmp_path / "step.sh"
    plan = plan or _plan()
    script.write_text(render_step_script(check_job(plan), load_profile(PROFILE), plan))
    return subprocess.run(["bash", str(script), *args], env=env, capture_output=True, text=True, cwd=tmp_path)


def test_a_plain_step_runs_once_a_node_however_many_ranks_a_node_has(tmp_path, fake_srun, monkeypatch):
    """A node check of 4 ranks a node: its pair steps run 4 tasks a node, and the reading of
    each node's faults, a plain step, one: the driver's SrunLauncher says so to the step script
    (BENCH_STEP_TASKS), which refuses a value that is not a number."""
    from harness.nodes.driver import STEP_MINUTES, STEP_TASKS, SrunLauncher
    from harness.nodes.rounds import dcgm_step, fault_step

    env, record = fake_srun
    plan = Plan("slurm", Options(gpus_per_node=4, gemm=False), 0.1, 4, "bnode[1-4]")
    pair = _step(tmp_path, env, "pair-0-1", "bnode1,bnode2", "2", "21234", "benchmarks.allreduce", plan=plan)
    assert pair.returncode == 0, pair.stderr
    argv = json.loads(record.read_text())["argv"]
    assert "--ntasks=8" in argv and "--ntasks-per-node=4" in argv and "--time=00:02:00" in argv  # the step timeout
    monkeypatch.setenv("PATH", env["PATH"])  # the launcher's steps take the driver's environment
    with open(tmp_path / "step.log", "wb") as log:
        (proc,) = SrunLauncher(tmp_path.parent, tmp_path.name, 4242).start(
            fault_step(4, "before", "x"), ["bnode1", "bnode2", "bnode3", "bnode4"], 0, log, "tag"
        )
        assert proc.wait(timeout=30) == 0
    argv = json.loads(record.read_text())["argv"]
    assert "--ntasks=4" in argv and "--ntasks-per-node=1" in argv and argv[-3:-1] == ["harness.telemetry", "faults"]
    for value in ("x", "1 2", "-1", "$(id)"):
        record.unlink(missing_ok=True)
        step = _step(tmp_path, env | {STEP_TASKS: value}, "faults-before", "bnode1", "1", "1", "m", plan=plan)
        assert step.returncode == 2 and f"{STEP_TASKS} must be numbers" in step.stderr and not record.exists()
    # DCGM's diagnostic runs longer than a step: its level's bound and a minute, so that the node ends
    # dcgmi first; the launcher tells the step script (BENCH_STEP_MINUTES), which refuses what is not minutes
    with open(tmp_path / "step.log", "wb") as log:
        (proc,) = SrunLauncher(tmp_path.parent, tmp_path.name, 4242).start(
            dcgm_step(4, 1, "x"), ["bnode1", "bnode2", "bnode3", "bnode4"], 0, log, "tag"
        )
        assert proc.wait(timeout=30) == 0
    argv = json.loads(record.read_text())["argv"]
    assert "--time=11" in argv and argv[-4:] == ["harness.telemetry", "dcgm", "x/dcgm", "1"], argv
    for value in ("x", "1 2", "-1", "$(id)", "1;id"):
        record.unlink(missing_ok=True)
        step = _step(tmp_path, env | {STEP_MINUTES: value}, "dcgm", "bnode1", "1", "1", "m", plan=plan)
        assert step.returncode == 2 and f"{STEP_MINUTES} must be minutes" in step.stderr and not record.exists()


def test_a_step_is_an_srun_step_on_its_nodes(tmp_path, fake_srun):
    env, record = fake_srun
    p = _step(tmp_path, env, "pair-0-3", "bnode1,bnode4", "2", "21234", "benchmarks.allreduce", "--iters=20")
    assert p.returncode == 0, p.stderr
    got = json.loads(record.read_text())
    assert got["addr"] == "bnode1" and got["port"] == "21234"
    argv = got["argv"]
    assert argv[:4] == ["--job-name=pair-0-3", "--nodes=2", "--nodelist=bnode1,bnode4", "--ntasks=2"]
    assert "--time=00:02:00" in argv and "--kill-on-bad-exit=1" in argv
    assert argv[-3:] == ["-m", "benchmarks.allreduce", "--iters=20"]


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_hostile_values_reach_srun_as_words_or_are_refused(tmp_path, fake_srun, value):
    env, record = fake_srun
    p = _step(tmp_path, env, "pair-0-1", value, "2", "21234", "benchmarks.allreduce", value)
    assert p.returncode == 0, p.stderr
    argv = json.loads(record.read_text())["argv"]
    assert f"--nodelist={value}" in argv and argv[-1] == value  # one word each, never run
    for name, nnodes, port in ((value, "2", "1"), ("pair-0-1", value, "1"), ("pair-0-1", "2", value)):
        record.unlink(missing_ok=True)
        p = _step(tmp_path, env, name, "bnode1,bnode2", nnodes, port, "benchmarks.allreduce")
        assert p.returncode == 2 and "bench: step.sh:" in p.stderr and not record.exists(), (name, nnodes, port)


# --------------------------------------------------------------------------- the matmul probe


def test_gemm_measures_every_rank(tmp_path):
    out, tmp = tmp_path / "gemm.json", tmp_path / "tmp"
    tmp.mkdir()
    args = ["run", "gemm", "--nproc", "2", "--size", "256", "--iters", "3", "--json", str(out)]
    bench(*args, timeout=120, env={"TMPDIR": str(tmp)})
    assert left_in_tmp(tmp) == []  # the standalone agent's torchelastic_* tree, without --log-dir
    result = read_json(out)
    assert result["workload"] == "gemm" and result["world_size"] == 2
    assert result["params"] == {"size": 256, "dtype": "float32", "iters": 3}
    assert len(result["tflops_per_rank"]) == 2 and all(x > 0 for x in result["tflops_per_rank"])
    assert result["tflops_min"] == min(result["tflops_per_rank"])
    r = bench("run", "gemm", "--size", "-1", check=False)
    assert r.returncode == 2 and "--size must be at least 0" in r.stderr


# --------------------------------------------------------------------------- the history


def _night(source: Path, dest: Path, k: int, slow: float) -> Path:
    """A copy of a real check as another night's: its rounds' times differ (so it is a check of
    its own), and its all-reduce reads `slow` times what it read."""
    shutil.copytree(source, dest)
    record = dest / "jobs/nodes/steps.json"
    data = json.loads(record.read_text())
    data["round_s"] = [s + k for s in data["round_s"]]
    record.write_text(json.dumps(data))
    path = dest / "jobs/nodes/steps/pair-0-1.json"
    result = json.loads(path.read_text())
    for row in result["rows"]:
        if row["collective"] == "all_reduce":
            row["busbw_gbps"] *= slow
    path.write_text(json.dumps(result))
    return dest


def test_a_link_that_degrades_is_a_change_point_of_the_history(local_check, tmp_path):
    db = tmp_path / "history.sqlite"
    first = _night(local_check[1], tmp_path / "n0", 0, 1.0)
    r = bench("history", "add", str(first), "--create", "--cluster", "lab", "--db", str(db), check=False)
    assert r.returncode == 3 and "as node check 1 of cluster lab: 2 nodes" in r.stdout  # 2 nodes: not judged
    for k in range(1, 8):  # in this process: what the command adds, without its start-up
        night = _night(local_check[1], tmp_path / f"n{k}", k, 1.0 if k < 4 else 0.4)
        check = nodehistory.add(db, night, "lab", f"night{k}", check_nodes.verdict_of(night), create=True)
        assert check.id == k + 1 and check.nodes == 2
    # the same check again adds nothing, and says so, with the check's own status (not judged);
    # under another cluster it is refused
    again = bench("history", "add", str(tmp_path / "n0"), "--create", "--cluster", "lab", "--db", str(db), check=False)
    said = again.stdout.strip()
    assert again.returncode == 3 and said.endswith("as node check 1 of cluster lab with these figures: nothing added")
    other = bench("history", "add", str(tmp_path / "n0"), "--create", "--cluster", "lab2", "--db", str(db), check=False)
    assert other.returncode == 2 and "already in the history as node check 1 (cluster lab, label -" in other.stderr
    r = bench("history", "changes", "--nodes", "--cluster", "lab", "--db", str(db))
    found = {
        line.split(": ")[1].removeprefix("two-node all-reduce, busbw "): line
        for line in r.stdout.splitlines()
        if line.startswith("run ")
    }
    # the pair's all-reduce, and so each node's median, dropped by 60% at the fifth night; the
    # exchange did not move
    assert set(found) == {"node local0", "node local1", "pair local0 local1"}, r.stdout
    assert all(line.startswith("run 5 (night4)") and "(-60.0%" in line for line in found.values()), r.stdout
    assert "8 node checks" in r.stdout
    listed = bench("history", "list", "--db", str(db)).stdout
    assert "Node checks (bench nodes)" in listed and "night7" in listed
    assert listed.strip().splitlines()[-1] == "0 runs"
    counted = bench("history", "list", "--count", "--cluster", "lab", "--db", str(db)).stdout
    assert counted == "0\n"  # what recipes/nightly.sh reads: node checks are no runs of a sweep
    damaged = tmp_path / "damaged.sqlite"
    shutil.copy(db, damaged)
    with sqlite3.connect(damaged) as con:  # a text figure ended `history changes --nodes` with exit 70
        con.execute("UPDATE node_figures SET value = 'x' WHERE check_id = 3 AND metric = 'busbw_gbps'")
    r = bench("history", "changes", "--nodes", "--cluster", "lab", "--db", str(damaged), check=False)
    assert r.returncode == 2 and "node check 3 is damaged" in r.stderr and len(r.stderr.splitlines()) == 1
    removed = bench("history", "remove", "8", "--nodes", "--db", str(db))
    assert "removed node check 8 of cluster lab" in removed.stdout
