"""`bench sweep` end to end on the local executor, with real torchrun agents and gloo ranks:
the summary, statuses and plots of a whole sweep; failures, time limits, Ctrl-C and resume;
hostile values that must stay inert."""

from __future__ import annotations

import itertools
import json
import math
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, bench, check_breakdown, left_in, left_in_tmp, read_json, run
from PIL import Image

from benchmarks.collectives import bus_factor
from harness.analysis.sides import records
from harness.evidence import telemetry

pytestmark = [pytest.mark.slow, pytest.mark.e2e]  # whole local sweeps, a minute or more each

# The shipped local sweep, shortened: same matrix and workloads, fewer steps and sizes.
FAST = [
    "--set",
    "workloads.allreduce.max_bytes=256K",
    "--set",
    "workloads.allreduce.groups=[world]",  # the groups have their own sweep: tests/modules/benchmarks/test_groups.py
    "--set",
    "workloads.allreduce.iters=5",
    "--set",
    "workloads.synthetic.steps=3",
    "--set",
    "workloads.real.steps=3",
    "--set",
    "workloads.synthetic.sync_free_steps=1",
    "--set",
    "workloads.real.sync_free_steps=1",
]


def small_sweep(tmp_path: Path, body: str, name: str = "t") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        name: {name}
        device: cpu
        backend: gloo
        env: {{OMP_NUM_THREADS: "1"}}
        timeout_s: 60
        """)
        + textwrap.dedent(body)
    )
    return path


def rec_nodes(job_name: str) -> int:
    return int(job_name.split("-")[0][1:])


@pytest.fixture(scope="module")
def sweep_tmp(tmp_path_factory):
    """The TMPDIR of local_run's sweep, and so of its agents and ranks."""
    return tmp_path_factory.mktemp("tmpdir")


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, sweep_tmp):
    out = tmp_path_factory.mktemp("sweep") / "run"
    args = ["sweep", "--max-nodes", "2", "--executor", "local", "--out", str(out), *FAST]
    return out, bench(*args, timeout=900, env={"TMPDIR": str(sweep_tmp)})


def test_a_sweep_leaves_nothing_in_tmp(local_run, sweep_tmp):
    """Nothing outside the run directory is left: a torchrun agent given no --log-dir leaves an
    empty torchelastic_* tree in TMPDIR, one per agent and launch (docs/reference/sources.md)."""
    assert left_in_tmp(sweep_tmp) == []


def test_sweep_completes_every_job(local_run):
    out, r = local_run
    assert r.stdout.splitlines()[0] == "executor: local (chosen with --executor)"
    table = read_json(out / "jobs.json")["jobs"]
    assert list(table) == [
        "n1-g1-torchrun-default",
        "n1-g2-torchrun-default",
        "n2-g1-torchrun-default",
        "n2-g2-torchrun-default",
    ]
    for name, rec in table.items():
        assert rec["state"] == "COMPLETED" and rec["exit_code"] == 0 and rec["attempts"] == 1
        assert set(rec["runs"].values()) == {"COMPLETED"}
        assert rec["job_id"].startswith("local-") and rec["job_id"].endswith(f"-{name}-1")  # unique to the job
    assert f"summary: {out}/summary.csv" in r.stdout


def test_a_gloo_jobs_workloads_run_in_one_launch(local_run):
    """A job's ranks are started once and run its workloads in turn (benchmarks/sequence.py): the
    same pids in every result of the job, one agent per node in its commands.sh, and each
    workload's phase after the one before it."""
    out, _ = local_run
    keys = ["allreduce", "synthetic-weak", "synthetic-strong", "real-weak"]
    for name in read_json(out / "jobs.json")["jobs"]:
        pids = {
            k: [r["pid"] for r in read_json(out / "jobs" / name / f"{k}.json")["environment"]["ranks"]] for k in keys
        }
        assert len({tuple(p) for p in pids.values()}) == 1, (name, pids)
        commands = (out / "jobs" / name / "commands.sh").read_text()
        assert commands.count("-m benchmarks.sequence allreduce ") == rec_nodes(name), commands
        assert commands.count(" --then ") == 3 * rec_nodes(name)
        phases = telemetry.read(out / "jobs" / name).phases
        spans = [phases[k] for k in keys]
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans


def test_summary_rows_and_values(local_run):
    out, _ = local_run
    df = pd.read_csv(out / "summary.csv")
    assert (df["status"] == "COMPLETED").all()
    assert set(df["nodes"]) == {1, 2} and set(df["world_size"]) == {1, 2, 4}
    ar = df[df["workload"] == "allreduce"]
    sizes = [1024, 4096, 16384, 65536, 262144]
    for (job, coll, group), rows in ar.groupby(["job", "collective", "group"]):
        assert sorted(rows["size_bytes"]) == sizes, (job, coll, group)
    for job, rows in ar.groupby("job"):
        assert set(zip(rows["collective"], rows["group"])) == {("all_reduce", "world"), ("all_to_all", "world")}, job
    factor = [bus_factor(c, n) for c, n in zip(ar["collective"], ar["world_size"], strict=True)]
    # results keep 7 significant digits (benchmarks.common.json_safe), each rounded on its own
    assert ((ar["busbw_gbps"] - ar["algbw_gbps"] * factor).abs() <= 1e-6 * ar["busbw_gbps"]).all()
    assert (ar["wrong"] == 0).all()
    multi = ar[ar["world_size"] > 1]
    assert (multi["busbw_gbps"] > 0).all() and (multi["time_us"] > 0).all()
    # all_to_all has no in-place form: its headline is out of place, and no oop_ columns
    assert ar[ar["collective"] == "all_to_all"]["oop_time_us"].isna().all()
    assert (ar[ar["collective"] == "all_reduce"]["oop_time_us"] > 0).all()

    train = df[df["workload"] != "allreduce"]
    assert sorted(train.groupby(["workload", "scaling"]).size().items()) == [
        (("real", "weak"), 4),
        (("synthetic", "strong"), 4),
        (("synthetic", "weak"), 4),
    ]
    assert (train["images_per_s"] > 0).all()
    # the breakdown's columns (docs/concepts/breakdown.md) on every training row, none on the collectives'
    for row in records(train):
        check_breakdown(row)
    assert ar[["compute_time_ms", "exposed_comm_fraction", "imbalance_fraction"]].isna().all().all()
    # one rank communicates nothing: no exposed communication, by construction
    one = train[train["world_size"] == 1]
    assert len(one) == 3 and (one["exposed_comm_fraction"] == 0).all() and (one["imbalance_fraction"] == 0).all()
    assert (
        (train["images_per_s_per_gpu"] * train["world_size"] - train["images_per_s"]).abs()
        <= 1e-6 * train["images_per_s"]
    ).all()
    strong = train[train["scaling"] == "strong"]
    assert ((strong["batch_size"] * strong["world_size"]) == 16).all()
    # efficiency and speedup recomputed from the throughput column
    for _, rows in train.groupby(["workload", "scaling"]):
        base = rows.sort_values(["world_size", "nodes"]).iloc[0]
        assert base["world_size"] == 1 and base["efficiency"] == 1.0
        for row in rows.itertuples():
            speedup = row.images_per_s / base["images_per_s"]
            assert row.speedup == pytest.approx(speedup)
            assert row.efficiency == pytest.approx(speedup / row.world_size)
    parquet = pd.read_parquet(out / "summary.parquet")
    assert len(parquet) == len(df) and list(parquet.columns) == list(df.columns)
    samples = pd.read_parquet(out / "samples.parquet")
    ar_samples = samples[samples["workload"] == "allreduce"]
    assert len(ar_samples) == len(ar) and all(len(v) == 5 for v in ar_samples["values"])
    assert len(samples[samples["metric"] == "step_time_ms"]) == len(train)


def test_each_job_was_sampled_while_its_workloads_ran(local_run):
    """The local executor's sampler (docs/concepts/telemetry.md): one host file per job, each workload's
    start and end marked inside the sampled span; loopback is not a NIC, so nothing is judged."""
    out, _ = local_run
    summary = pd.read_csv(out / "summary.csv")
    for job in summary["job"].unique():
        tele = telemetry.read(out / "jobs" / job)
        assert tele is not None and len(tele.hosts) == 1, job
        (host,) = tele.hosts.values()
        assert set(tele.phases) == {"allreduce", "synthetic-weak", "synthetic-strong", "real-weak"}
        for start, end in tele.phases.values():
            assert end is not None and telemetry.bracket(host.samples, start, end) is not None
    checks = summary[summary["workload"] == "allreduce"]["nic_check"]
    assert set(checks) <= {"not judged: one node: no traffic crosses a NIC"} and len(checks)


def test_plots_exist_and_hold_the_plotted_points(local_run):
    out, _ = local_run
    df = pd.read_csv(out / "summary.csv")
    for name in ("weak_scaling", "strong_scaling", "allreduce_busbw", "allreduce_time", "step_breakdown"):
        with Image.open(out / "plots" / f"{name}.png") as img:
            img.verify()
        with Image.open(out / "plots" / f"{name}.png") as img:
            assert img.size[0] > 400 and img.size[1] > 300
    weak = pd.read_csv(out / "plots" / "weak_scaling.csv")
    per_gpu = weak[weak["metric"] == "images_per_s_per_gpu"]
    expected = df[(df["scaling"] == "weak")][["nodes", "images_per_s_per_gpu"]]  # nodes on x, as everywhere
    assert sorted(zip(per_gpu["x"], per_gpu["y"].round(6))) == sorted(
        zip(expected["nodes"], expected["images_per_s_per_gpu"].round(6))
    )
    busbw = pd.read_csv(out / "plots" / "allreduce_busbw.csv")
    busbw = busbw[busbw["metric"] == "busbw_gbps"]
    ar = df[(df["workload"] == "allreduce") & (df["world_size"] > 1)]  # one rank has no bus to measure
    assert len(busbw) == len(ar)
    assert sorted(zip(busbw["x"], busbw["y"].round(9))) == sorted(zip(ar["size_bytes"], ar["busbw_gbps"].round(9)))

    # the figure itself carries those points, one row of panels per collective (and group, where
    # a run has several: tests/modules/benchmarks/test_groups.py), one line per (nodes x GPUs) series
    from harness.present.plot import busbw_figure

    fig, points = busbw_figure(pd.read_parquet(out / "summary.parquet"))
    points = points[points["metric"] == "busbw_gbps"]
    for ax, coll in zip(fig.axes, ("all_reduce", "all_to_all"), strict=True):
        assert ax.get_title().startswith(coll)
        drawn = {(float(x), round(float(y), 9)) for line in ax.lines for x, y in zip(*line.get_data())}
        mine = points[points["collective"] == coll]
        assert len(mine) and {(float(x), round(y, 9)) for x, y in zip(mine["x"], mine["y"])} <= drawn


def test_collect_rebuilds_the_summary_and_skips_a_corrupt_result(local_run, tmp_path):
    out, _ = local_run
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(out), str(copy)], check=True)
    before = pd.read_csv(copy / "summary.csv")
    (copy / "summary.csv").unlink()
    (copy / "summary.parquet").unlink()
    bench("collect", str(copy))
    after = pd.read_csv(copy / "summary.csv")
    pd.testing.assert_frame_equal(before, after)

    victim = copy / "jobs" / "n1-g2-torchrun-default" / "synthetic-weak.json"
    victim.write_text(victim.read_text()[:200])  # a partial write, as a crash might leave
    r = bench("collect", str(copy))
    assert f"warning: skipping {victim}" in " ".join(r.stderr.split())
    df = pd.read_csv(copy / "summary.csv")
    row = df[(df["job"] == "n1-g2-torchrun-default") & (df["workload"] == "synthetic") & (df["scaling"] == "weak")]
    assert list(row["status"]) == ["MISSING"] and math.isnan(row["images_per_s"].iloc[0])
    bench("plot", str(copy))
    assert (copy / "plots" / "weak_scaling.png").exists()

    status = bench("status", str(copy))
    assert "4 of 4 jobs COMPLETED" in status.stdout


@pytest.mark.proof  # a sweep of its own, stopped or failed on purpose: the default tier has no room
def test_a_failing_workload_fails_its_job_and_the_sweep_goes_on(tmp_path):
    empty = tmp_path / "empty [red]imagenet[/]"  # rich markup in a path must print as written
    (empty / "class_a").mkdir(parents=True)
    path = small_sweep(
        tmp_path,
        f"""\
        nodes: [1, 2]
        gpus_per_node: [1]
        workloads:
          allreduce: {{min_bytes: 1K, max_bytes: 4K, iters: 2, warmup_iters: 1}}
          real: {{model: resnet18, image_size: 32, batch_size: 2, steps: 1, warmup_steps: 0, workers: 0,
                  data_dir: {json.dumps(str(empty))}}}
        """,
    )
    out = tmp_path / "run"
    r = bench("sweep", str(path), "--executor", "local", "--out", str(out), check=False, timeout=300)
    assert r.returncode == 1, r.describe()
    table = read_json(out / "jobs.json")["jobs"]
    for name in ("n1-g1-torchrun-default", "n2-g1-torchrun-default"):
        rec = table[name]
        assert rec["state"] == "FAILED" and rec["exit_code"] != 0
        assert rec["runs"] == {"allreduce": "COMPLETED", "real-weak": "FAILED"}
        agents = ", ".join(["1"] * rec_nodes(name))
        assert rec["reason"].startswith(
            f"real-weak failed (agent exit codes [{agents}]): bench run real: error: --data-dir"
        )
        assert "no images in class folders" in rec["reason"] and rec["log_tail"]
    df = pd.read_csv(out / "summary.csv")
    assert set(df[df["workload"] == "allreduce"]["status"]) == {"COMPLETED"}
    assert list(df[df["workload"] == "real"]["status"]) == ["FAILED", "FAILED"]
    assert "no images in class folders" in r.stdout
    assert f"--data-dir {empty}: no images" in " ".join(r.stdout.split())
    assert "2 of 2 jobs did not complete" in r.stdout


@pytest.mark.proof  # a sweep of its own, stopped or failed on purpose: the default tier has no room
def test_a_job_past_its_time_limit_is_killed_and_recorded_timeout(tmp_path):
    path = small_sweep(
        tmp_path,
        """\
        nodes: [2]
        gpus_per_node: [1]
        time_limit_min: 0.25
        workloads:
          synthetic: {model: resnet18, image_size: 32, batch_size: 2, steps: 100000, warmup_steps: 0}
        """,
        name="slow",
    )
    out = tmp_path / "run"
    start = time.monotonic()
    r = bench("sweep", str(path), "--executor", "local", "--out", str(out), check=False, timeout=300)
    assert r.returncode == 1
    assert time.monotonic() - start < 120
    rec = read_json(out / "jobs.json")["jobs"]["n2-g1-torchrun-default"]
    assert rec["state"] == "TIMEOUT" and "time limit" in rec["reason"]
    assert 15 <= rec["elapsed_s"] < 60
    assert left_in(out) == []  # no agent or worker of the job is left


@pytest.mark.proof  # a sweep of its own, stopped or failed on purpose: the default tier has no room
def test_ctrl_c_leaves_a_consistent_run_that_resumes_without_rerunning(tmp_path):
    path = small_sweep(
        tmp_path,
        """\
        nodes: [1, 2]
        gpus_per_node: [1, 2]
        workloads:
          allreduce: {min_bytes: 1K, max_bytes: 64K, iters: 3, warmup_iters: 1}
        """,
        name="resume",
    )
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "sweep", str(path), "--executor", "local", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def wait_for(first: str, second: str) -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                jobs = json.loads((out / "jobs.json").read_text())["jobs"]
            except (OSError, ValueError):
                jobs = {}
            if (
                jobs.get("n1-g1-torchrun-default", {}).get("state") == first
                and jobs.get("n1-g2-torchrun-default", {}).get("state") == second
            ):
                return
            time.sleep(0.1)
        pytest.fail(f"the sweep never reached n1-g1 {first}, n1-g2 {second}")

    try:
        wait_for("RUNNING", "PENDING")
        # another harness may not drive the same run meanwhile
        busy = bench("sweep", "--resume", str(out), check=False, timeout=60)
        assert busy.returncode == 2 and "in use by another bench process" in busy.stderr
        # a job lasts several seconds (torchrun alone takes ~5 s to start): interrupt it mid-run
        wait_for("COMPLETED", "RUNNING")
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output
    assert f"bench sweep --resume {out}" in " ".join(output.split())
    jobs = read_json(out / "jobs.json")["jobs"]
    assert jobs["n1-g1-torchrun-default"]["state"] == "COMPLETED"
    assert jobs["n1-g2-torchrun-default"]["state"] == "CANCELLED"
    assert jobs["n2-g2-torchrun-default"]["state"] == "PENDING"
    # on screen, a job that never started is not "PENDING", which reads as queued in Slurm
    rows = {line.split()[1]: line for line in bench("status", str(out)).stdout.splitlines() if "-torchrun-" in line}
    assert "NOT_SUBMITTED" in rows["n2-g2-torchrun-default"] and "CANCELLED" in rows["n1-g2-torchrun-default"], rows
    assert left_in(out) == []

    r = bench("sweep", "--resume", str(out), timeout=300)
    assert "resuming" in r.stdout and "3 of 4 jobs to run" in r.stdout
    jobs = read_json(out / "jobs.json")["jobs"]
    assert {name: (rec["state"], rec["attempts"]) for name, rec in jobs.items()} == {
        "n1-g1-torchrun-default": ("COMPLETED", 1),
        "n1-g2-torchrun-default": ("COMPLETED", 2),
        "n2-g1-torchrun-default": ("COMPLETED", 1),
        "n2-g2-torchrun-default": ("COMPLETED", 1),
    }
    df = pd.read_csv(out / "summary.csv")
    assert set(df["job"]) == set(jobs) and (df["status"] == "COMPLETED").all()


def test_resume_and_out_misuse(tmp_path):
    r = bench("sweep", "--resume", str(tmp_path), check=False)
    assert r.returncode == 2 and "not a run directory" in r.stderr
    out = tmp_path / "run"
    bench("sweep", "--executor", "local", "--dry-run", "--out", str(out))
    r = bench("sweep", "--executor", "local", "--dry-run", "--out", str(out), check=False)
    assert r.returncode == 2 and "already holds a run" in r.stderr
    r = bench("sweep", "--resume", str(out), "--max-nodes", "4", check=False)
    assert r.returncode == 2 and "takes no sweep file" in r.stderr
    r = bench(
        "sweep",
        str(ROOT / "sweeps" / "default.yaml"),
        "--executor",
        "local",
        "--dry-run",
        "--out",
        str(tmp_path / "other"),
        check=False,
    )
    assert r.returncode == 2 and "srun" in r.stderr and not (tmp_path / "other").exists()


def test_hostile_values_stay_inert(tmp_path):
    canary = tmp_path / "pwned"
    hostile = f"$(touch {canary}); `touch {canary}` ; rm -rf ~ 'q' \"dq\" \\ #x"
    path = small_sweep(
        tmp_path,
        f"""\
        nodes: [2]
        gpus_per_node: [1]
        nccl:
          hostile: {{NCCL_DEBUG_SUBSYS: {json.dumps(hostile)}}}
        workloads:
          allreduce: {{min_bytes: 1K, max_bytes: 4K, iters: 2, warmup_iters: 1}}
        """,
    )
    out = tmp_path / "out dir with 'quotes' and $(x) ;"
    bench("sweep", str(path), "--executor", "local", "--out", str(out), timeout=300)
    assert not canary.exists()
    result = read_json(out / "jobs" / "n2-g1-torchrun-hostile" / "allreduce.json")
    assert result["environment"]["variables"]["NCCL_DEBUG_SUBSYS"] == hostile
    # the human-readable command file quotes it: bash reads back the exact value
    commands = out / "jobs" / "n2-g1-torchrun-hostile" / "commands.sh"
    export = next(line for line in commands.read_text().splitlines() if line.startswith("export NCCL_DEBUG_SUBSYS"))
    got = run(["bash", "-c", f'{export}\nprintf %s "$NCCL_DEBUG_SUBSYS"'], cwd=tmp_path)
    assert got.stdout == hostile and not canary.exists()
    run(["bash", "-n", str(commands)])
