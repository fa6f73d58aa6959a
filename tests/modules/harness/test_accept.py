"""`bench accept` (docs/guides/accept.md) off the testbed: the acceptance sweep narrowed to the keys the
profile's references name, and what is refused before anything runs. The acceptance itself runs
on the Slurm testbed (tests/proofs/test_nodes_testbed.py)."""

from __future__ import annotations

from conftest import SWEEPS, bench

from harness.accept import narrowing
from harness.config.cluster_profile import Reference
from harness.config.sweepfile import load_sweep
from harness.run.plan import expand


def test_the_sweep_is_narrowed_to_the_references_keys():
    refs = (
        Reference(workload="allreduce", size=4 << 20, nodes=2, gpus_per_node=8, busbw_gbps=370),
        Reference(workload="allreduce", size=1 << 30, nodes=16, gpus_per_node=8, group="inter", busbw_gbps=46),
        Reference(workload="synthetic", scaling="weak", nodes=1, gpus_per_node=8, images_per_s=16000),
    )
    sets = narrowing(refs)
    assert sets == (
        "nodes=[1, 2, 16]",
        "max_nodes=16",
        "gpus_per_node=[8]",
        "workloads.real=false",
        "workloads.transformer=false",
        "workloads.allreduce.collectives=[all_reduce]",
        "workloads.allreduce.groups=[inter, world]",
        f"workloads.allreduce.min_bytes={4 << 20}",
        f"workloads.allreduce.max_bytes={1 << 30}",
        "workloads.synthetic.scaling=[weak]",
    )
    jobs = expand(load_sweep(SWEEPS / "accept.yaml", overrides=sets))
    assert [(j.nodes, j.gpus_per_node) for j in jobs] == [(1, 8), (2, 8), (16, 8)]
    args = " ".join(jobs[-1].runs[0].args)
    assert "-b 4194304 -e 1073741824" in args and "--collective all_reduce" in args and "--groups inter,world" in args
    assert [r.key for r in jobs[0].runs] == ["allreduce", "synthetic-weak"]


def test_a_reference_with_no_gpu_count_leaves_the_sweep_s():
    refs = (Reference(workload="allreduce", size=1 << 20, nodes=4, busbw_gbps=1),)
    assert not any(s.startswith("gpus_per_node") for s in narrowing(refs))
    assert "workloads.synthetic=false" in narrowing(refs)


def test_a_profile_without_references_is_refused_before_anything_runs(tmp_path, slurm_stand_ins):
    (tmp_path / "p.yaml").write_text("name: lab\n")
    out = tmp_path / "acc"
    r = bench("accept", "--executor", "slurm", "--cluster", str(tmp_path / "p.yaml"), "--out", str(out), check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
    assert f"{tmp_path / 'p.yaml'}: states no reference figures" in r.stderr and not out.exists()
    assert slurm_stand_ins.calls() == []


def test_a_sweep_the_executor_cannot_run_is_refused_before_the_node_check(tmp_path, slurm_stand_ins):
    """submitit always asks for Slurm's time-limit warning, which a 2-minute limit leaves no room
    for (docs/guides/submitit.md): refused before the node check takes the cluster's time, not after."""
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "name: lab\ntime_limit_min: 2\nreference:\n"
        "  - {workload: allreduce, size: 1G, nodes: 2, gpus_per_node: 8, busbw_gbps: 370, tolerance: 0.1}\n"
    )
    out = tmp_path / "acc"
    r = bench("accept", "--executor", "submitit", "--cluster", str(profile), "--out", str(out), check=False)
    assert r.returncode == 2 and not out.exists(), r.describe()
    assert r.stderr.splitlines() == [
        "bench accept: error: cluster profile lab: time_limit_min 2 is too short for the submitit executor, which "
        "always asks for Slurm's time-limit warning: it may come 60 s early and must come after the first 60 s, so "
        "the limit must be over 2 minutes (docs/guides/submitit.md); or use --executor slurm"
    ]
    assert slurm_stand_ins.calls() == []


def test_a_node_check_that_wrote_no_record_is_not_accepted(tmp_path, fake_slurm):
    """The node check's job completes (sacct says so) without writing its record (steps.json):
    bench accept exits 3, NOT ACCEPTED, with its verdict.json and report.html and the reason,
    never a bare exit 2 with nothing to sign (docs/guides/accept.md)."""
    import json

    profile = tmp_path / "p.yaml"
    profile.write_text(
        "name: lab\nreference:\n"
        "  - {workload: allreduce, size: 1M, nodes: 2, gpus_per_node: 1, busbw_gbps: 1, tolerance: 0.1}\n"
    )
    out = tmp_path / "acc"
    r = bench("accept", "--executor", "slurm", "--cluster", str(profile), "--nodelist", "bnode[1-2]",
              "--out", str(out), "--yes", check=False)  # fmt: skip
    assert r.returncode == 3, r.describe()
    assert "wrote no steps.json" in r.stdout and "NOT ACCEPTED" in r.stdout, r.describe()
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["accepted"] is False and verdict["status"] == 3 and (out / "report.html").is_file(), verdict
    assert "the node check could not judge every node and link" in verdict["reasons"]
    assert fake_slurm.calls("sbatch"), "the check's job was submitted"


def test_an_acceptance_on_this_machine_writes_the_report_to_sign(tmp_path):
    """`bench accept --executor local --nodes 4`: the node check of 4 emulated nodes and the sweep
    of sweeps/clusters/local.yaml's two references, on real gloo ranks; a verdict and a report
    anyone can open (docs/guides/accept.md, "Try it on this machine")."""
    import json

    out = tmp_path / "acc"
    r = bench("accept", "--executor", "local", "--nodes", "4", "--iters", "5", "--out", str(out), check=False)
    assert r.returncode == 0, r.describe()
    assert r.stdout.splitlines()[-2:] == [
        "bench accept: ACCEPTED",
        f"report to sign: {out / 'report.html'} (verdict.json beside it)",
    ]
    v = json.loads((out / "verdict.json").read_text())
    assert v["accepted"] and v["cluster"] == "local" and v["nodes"]["asked"] == "local[0-3]"
    assert v["nodes"]["hosts"] == ["local0", "local1", "local2", "local3"] and v["nodes"]["clean"]
    assert [(j["job"], j["state"]) for j in v["jobs"]] == [("n4-g1-torchrun-default", "COMPLETED")]
    measured = {ref["key"]: (ref["reference"], ref["measured"]) for ref in v["references"]}
    keys = {"allreduce all_reduce 4M, 4x1, torchrun, default", "synthetic weak, 4x1, torchrun, default"}
    assert set(measured) == keys
    assert all(m >= ref / 2 for ref, m in measured.values()), measured
    page = (out / "report.html").read_text()
    assert "<b>ACCEPTED</b>" in page and "4: local[0-3]" in page and "Checked by" in page
    assert "<img" in page and "<tr><th></th>" not in page  # the check's heatmap; no empty header row


def test_a_local_acceptance_on_fewer_nodes_than_its_references_is_refused(tmp_path):
    out = tmp_path / "acc"
    r = bench("accept", "--executor", "local", "--nodes", "2", "--out", str(out), check=False)
    assert r.returncode == 2 and not out.exists(), r.describe()
    assert r.stderr.splitlines()[-1].endswith("has a reference on 4 nodes; give --nodes 4 or more"), r.describe()


def test_the_collective_is_soaked_on_real_ranks_and_judged_by_its_drift(tmp_path):
    """`bench accept --soak`'s job after the sweep (harness/accept.py): sweeps/local-accept.yaml's
    all_reduce at its largest size on the 4 emulated nodes its references name, real gloo ranks,
    2 s of windows; judged, then its own windows replayed falling, too few and unreadable."""
    import io
    import json

    from rich.console import Console

    from harness import accept, executors, sweep
    from harness.config.cluster_profile import load_profile
    from harness.present import acceptance
    from harness.present.acceptance import Outcome
    from harness.run import provenance

    profile = load_profile(SWEEPS / "clusters" / "local.yaml")
    path = SWEEPS / "local-accept.yaml"
    spec = load_sweep(path, overrides=narrowing(profile.reference))
    soak = accept._soak_sweep(path, spec, profile.reference, profile, 2.0)
    console = Console(file=io.StringIO(), width=200)
    assert sweep.start(soak, path, executors.get("local"), profile, tmp_path, console) == 0, console.file.getvalue()

    def judged() -> Outcome:
        outcome = Outcome(0, {})
        accept._judge_soak(outcome, tmp_path, 0.5)
        return outcome

    measured = judged()
    s = measured.soak
    assert s is not None and s["what"] == "all_reduce 4M on 4 node(s)" and s["seconds"] == 2.0, s
    assert s["windows"] >= 3 and 0 < s["p10"] <= s["median"] <= s["p90"], s
    fell = [f"the soak of all_reduce 4M on 4 node(s) read {1 - s['drift']:.0%} lower at its end than at its start"]
    data = acceptance.as_json(measured, profile, provenance.record(), "local[0-3]")  # the page to sign says it
    assert data["soak"] == s and f"all_reduce 4M on 4 node(s): {s['windows']} windows over 2 s" in (
        acceptance.render(tmp_path, data)
    )
    assert [r.split(" (")[0] for r in measured.reasons] == ([] if s["drift"] >= 0.5 else fell), measured.reasons
    result = tmp_path / "jobs" / "n4-g1-torchrun-default" / "allreduce.json"
    data = json.loads(result.read_text())
    windows = data["soak"]["windows"]
    assert windows[-1][0] >= 2.0 and all(calls >= 1 and busbw > 0 for _, calls, busbw in windows), windows
    assert len(windows) == s["windows"] and [w[0] for w in windows] == sorted(w[0] for w in windows)

    def replayed(found: object) -> Outcome:
        result.write_text(json.dumps({**data, "soak": found}))
        return judged()

    n = len(windows)  # the last third of the windows at 30% of the first's figure: a drift of 0.3
    falling = [[t, c, 1.0 if i < n - n // 3 else 0.3] for i, (t, c, _) in enumerate(windows)]
    outcome = replayed({**data["soak"], "windows": falling})
    assert (
        outcome.reasons
        == [
            "the soak of all_reduce 4M on 4 node(s) read 70% lower at its end than at its start (busbw 1 GB/s over"
            " its first third, 0.3 over its last)"
        ]
        and not outcome.unjudged
    ), outcome.reasons
    outcome = replayed({**data["soak"], "windows": windows[:2]})
    assert outcome.unjudged and outcome.reasons[0].startswith("the soak: 2 window(s)"), outcome.reasons
    outcome = replayed({**data["soak"], "windows": "falling"})
    assert outcome.unjudged and outcome.reasons[0].startswith(f"the soak's result {result} cannot be read"), outcome
