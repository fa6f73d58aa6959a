"""Matrix expansion: deterministic, complete, readable names, stable hashes."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest
import yaml
from conftest import SWEEPS, bench, start_sweep

from harness.analysis.compare import parse_across
from harness.config.sweepfile import load_sweep
from harness.errors import SpecError
from harness.executors.slurm.executor import SlurmExecutor
from harness.executors.slurm.script import render_script
from harness.run.plan import Job, PlanError, expand
from harness.run.rundir import PLAN_VERSION, WORKER_JOBS, RunDir, claim
from harness.sweep import create_run


def test_default_sweep_expands_to_the_full_matrix():
    sweep = load_sweep(SWEEPS / "default.yaml")
    jobs = expand(sweep)
    # 4 node counts x 4 GPU counts x 2 launchers x 3 NCCL sets, less the network sets (ib,
    # socket) on one node, which the sweep's exclude rule drops: 96 - 4 x 2 x 2 = 80
    assert len(jobs) == 80
    assert len({j.name for j in jobs}) == len(jobs)
    points = [(j.nodes, j.gpus_per_node, j.launcher, j.nccl_config) for j in jobs]
    assert points == [
        p
        for p in itertools.product((1, 2, 4, 8), (1, 2, 4, 8), ("torchrun", "srun"), ("default", "ib", "socket"))
        if p[0] > 1 or p[3] == "default"
    ]
    assert jobs[0].name == "n1-g1-torchrun-default"
    assert jobs[1].name == "n1-g1-srun-default"
    assert jobs[-1].name == "n8-g8-srun-socket"
    assert {r.key for r in jobs[0].runs} == {
        "allreduce",
        "synthetic-weak",
        "synthetic-strong",
        "real-weak",
        "transformer-weak",
    }
    ib = next(j for j in jobs if j.nccl_config == "ib")
    assert dict(ib.nccl_env) == {"NCCL_IB_DISABLE": "0", "NCCL_NET_GDR_LEVEL": "5"}


def test_expansion_is_deterministic_and_hashes_track_the_configuration():
    sweep = load_sweep(SWEEPS / "default.yaml")
    first, second = expand(sweep), expand(load_sweep(SWEEPS / "default.yaml"))
    assert first == second
    assert [j.config_hash for j in first] == [j.config_hash for j in second]
    assert len({j.config_hash for j in first}) == len(first)
    changed = expand(load_sweep(SWEEPS / "default.yaml", overrides=("workloads.synthetic.steps=51",)))
    assert all(a.config_hash != b.config_hash for a, b in zip(first, changed))
    assert all(a.name == b.name for a, b in zip(first, changed))
    renamed = expand(dataclasses.replace(sweep, name="other"))
    assert [j.config_hash for j in renamed] == [j.config_hash for j in first]
    # The hashes earlier plans and histories hold, the workloads' JSON encoded once a sweep
    # (plan._config_hash): a value with a quote and letters beyond ASCII among them. The default
    # sweep's FSDP transformer states its mixed-precision policy since it has one, which moved
    # its hashes; under DDP, which has none, they are those of every earlier plan.
    assert (first[0].config_hash, first[-1].config_hash) == ("906c7372f4", "000239b60f")
    ddp = expand(load_sweep(SWEEPS / "default.yaml", overrides=("workloads.transformer.parallel=ddp",)))
    assert (ddp[0].config_hash, ddp[-1].config_hash) == ("12e8d6784a", "56fca12517")
    noted = expand(load_sweep(SWEEPS / "default.yaml", overrides=('env.SITE_NOTE="é \\" ü"',)))
    assert noted[0].env == (("SITE_NOTE", 'é " ü'),) and noted[0].config_hash == "1c0a15ad07"


RULES = """
name: r
nodes: [1, 2, 4]
gpus_per_node: [1, 2]
launchers: [torchrun, srun]
nccl: {default: {}, ib: {NCCL_IB_DISABLE: "0"}}
workloads: {allreduce: {}}
"""


def _points(tmp_path, text, *only):
    path = tmp_path / "s.yaml"
    path.write_text(RULES + text)
    return {(j.nodes, j.gpus_per_node, j.launcher, j.nccl_config) for j in expand(load_sweep(path, only=only))}


def test_include_and_exclude_rules_and_only_select_points_of_the_matrix(tmp_path):
    every = set(itertools.product((1, 2, 4), (1, 2), ("torchrun", "srun"), ("default", "ib")))
    assert _points(tmp_path, "") == every
    # exclude: every axis a rule names must match; a scalar is a list of one
    got = _points(tmp_path, "exclude: [{nodes: 1, nccl: ib}, {launcher: srun, gpus_per_node: [2]}]")
    assert got == {p for p in every if not (p[0] == 1 and p[3] == "ib") and not (p[2] == "srun" and p[1] == 2)}
    # include: only the points some rule matches, then exclude takes its share
    got = _points(tmp_path, "include: [{nodes: [2, 4], nccl: ib}, {nodes: 1}]\nexclude: [{gpus_per_node: 2}]")
    assert got == {p for p in every if ((p[0] in (2, 4) and p[3] == "ib") or p[0] == 1) and p[1] == 1}
    # --only cuts on top of the rules; values outside the sweep are errors, not empty selections
    got = _points(tmp_path, "exclude: [{nodes: 1, nccl: ib}]", "nccl=ib", "nodes=1,2")
    assert got == {p for p in every if p[3] == "ib" and p[0] == 2}
    # the summary's and `compare --across`'s name of the settings axis is the same axis here
    assert _points(tmp_path, "", "nccl_config=ib") == _points(tmp_path, "", "nccl=ib")
    assert parse_across("nccl=ib,socket") == parse_across("nccl_config=ib,socket") == ("nccl_config", "ib", "socket")
    for only, words in (
        ("nodes=8", "--only nodes: '8' is not among the sweep's nodes: 1, 2, 4"),
        ("nccl=socket", "'socket' is not among the sweep's nccl: default, ib"),
        ("gpus=1", "expected AXIS=V1,V2 with AXIS one of nodes, gpus_per_node, launcher, nccl"),
    ):
        with pytest.raises(SpecError, match=re.escape(words)):
            _points(tmp_path, "", only)
    with pytest.raises(PlanError, match="leave no job to run"):
        _points(tmp_path, "exclude: [{launcher: [torchrun, srun]}]")


@pytest.mark.parametrize(
    "text,words",
    [
        ("exclude: [{nccl: socket}]", "exclude[0].nccl: 'socket' names no settings set; valid: default, ib"),
        ("include: [{}]", "include[0]: names no axis; valid: nodes, gpus_per_node, launcher, nccl"),
        ("exclude: [{launcher: mpirun}]", "exclude[0].launcher: 'mpirun' is not valid; valid: torchrun, srun"),
        ("exclude: [{nodes: 0}]", "exclude[0].nodes"),
        ("exclude: [{world: 8}]", "exclude[0].world: unknown key; valid: nodes, gpus_per_node, launcher, nccl"),
        ("exclude: [{nodes: []}]", "exclude[0].nodes: is empty"),
        ("only: {nodes: 1}", "only: unknown key"),
    ],
)
def test_bad_rules_are_refused(tmp_path, text, words):
    with pytest.raises(SpecError, match=re.escape(words)):
        _points(tmp_path, text)


def test_strong_scaling_splits_the_global_batch_and_weak_keeps_the_per_gpu_batch():
    job = expand(load_sweep(SWEEPS / "default.yaml"))[0]
    runs = {r.key: r.args for r in job.runs}
    strong, weak = runs["synthetic-strong"], runs["synthetic-weak"]
    assert strong[strong.index("--global-batch") + 1] == "256" and "--batch-size" not in strong
    assert weak[weak.index("--batch-size") + 1] == "64" and "--global-batch" not in weak


def test_global_batch_must_divide_every_world_size():
    sweep = load_sweep(SWEEPS / "local.yaml", overrides=("workloads.synthetic.global_batch=6",))
    with pytest.raises(PlanError, match=r"global_batch 6 is not divisible by the world size 4"):
        expand(sweep)


def test_job_paths_are_relative_and_the_job_round_trips():
    job = expand(load_sweep(SWEEPS / "local.yaml"))[-1]
    args = job.run_args(job.runs[0], 120)
    assert args[args.index("--json") + 1] == f"jobs/{job.name}/allreduce.json"
    assert args[args.index("--timeout") + 1] == "120"
    assert Job.from_dict(job.to_dict()) == job
    real = next(r for r in job.runs if r.workload == "real")
    assert real.args[real.args.index("--data-cache") + 1] == "data"


def test_plan_json_is_json_with_a_version_of_its_own_and_one_job_per_line(tmp_path):
    out = tmp_path / "run"
    bench("sweep", str(SWEEPS / "default.yaml"), "--executor", "slurm", "--dry-run", "--out", str(out))
    text = (out / "plan.json").read_text()
    plan = json.loads(text)
    assert plan["plan_version"] == PLAN_VERSION and "schema_version" not in plan
    jobs = RunDir(out).jobs()
    assert [j.name for j in jobs] == [j.name for j in expand(load_sweep(SWEEPS / "default.yaml"))]
    job_lines = [line for line in text.splitlines() if line.lstrip().startswith('{"name": ')]
    assert len(job_lines) == len(jobs) == 80


def test_a_large_sweeps_job_files_are_each_jobs_own_half_of_them_written_by_a_worker(tmp_path):
    """From WORKER_JOBS jobs on, a forked worker renders and writes the second half of the job
    files while this process writes the first: every job's script is its own, whole, none
    missing, and plan.json lists them all."""
    sweep = load_sweep(
        SWEEPS / "local.yaml",
        overrides=(
            *("nodes=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]", "max_nodes=10", "gpus_per_node=[1, 2, 4, 8]"),
            *("workloads.synthetic=false", "workloads.real=false"),
        ),
    )
    sweep = dataclasses.replace(sweep, nccl={f"set{i}": {"NCCL_MIN_NCHANNELS": str(i + 1)} for i in range(25)})
    jobs = expand(sweep)
    assert len(jobs) == 1_000 >= WORKER_JOBS
    run, created = claim(tmp_path / "run")
    executor = SlurmExecutor(run, sweep.timeout_s)
    create_run(sweep, "local.yaml", executor, jobs, created)
    written = {p.parent.name: p.read_text() for p in (tmp_path / "run" / "jobs").glob("*/job.sbatch")}
    assert written == {job.name: render_script(job, executor.profile, sweep.timeout_s) for job in jobs}
    assert [j.name for j in run.jobs()] == [j.name for j in jobs]


def test_ctrl_c_while_a_large_sweeps_job_files_are_written_leaves_nothing(tmp_path):
    """Ctrl-C while this process and its worker write 10,000 jobs' files: the run directory this
    sweep made is gone, and no process of the sweep (the worker has its command line) is left to
    write on: the worker is ended and reaped before the directory is removed."""
    text = yaml.safe_load((SWEEPS / "local.yaml").read_text())
    text.update(
        nodes=list(range(1, 26)),
        max_nodes=25,
        gpus_per_node=list(range(1, 9)),
        nccl={f"set{i}": {"NCCL_MIN_NCHANNELS": str(i + 1)} for i in range(50)},
        workloads={"allreduce": {}},
    )
    sweep = tmp_path / "big.yaml"
    sweep.write_text(yaml.safe_dump(text))
    out = tmp_path / "run"
    sweeping = start_sweep(sweep, out, "--executor", "slurm", "--dry-run")
    deadline = time.monotonic() + 120
    while not (out / "jobs").is_dir() or len(os.listdir(out / "jobs")) < 20:
        assert sweeping.poll() is None and time.monotonic() < deadline, sweeping.stdout.read()
        time.sleep(0.005)
    assert not (out / "plan.json").exists()
    sweeping.send_signal(signal.SIGINT)
    said = sweeping.communicate(timeout=60)[0]
    assert sweeping.returncode == 130 and said.endswith("bench sweep: interrupted\n"), said
    assert not out.exists()
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if str(out).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                left.append(pid)
    assert left == []


@dataclasses.dataclass(frozen=True)
class _Named:
    name: str


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a worker runs beside only with two cores")
def test_a_worker_killed_part_way_has_its_share_written_here_whole(tmp_path):
    """The worker is killed (the kernel's out-of-memory killer, say) after it wrote some of its
    share: this process writes that share again over what the worker left, and every file is
    whole; O_EXCL there would stop on the first file the worker had made."""
    here = os.getpid()
    jobs = [_Named(f"job{i}") for i in range(WORKER_JOBS)]
    half = WORKER_JOBS // 2

    def files(job: _Named) -> dict[str, str]:
        if os.getpid() != here and job.name == f"job{half + 10}":
            (tmp_path / "killed").touch()
            os.kill(os.getpid(), signal.SIGKILL)  # ten of its jobs' files written
        return {"job.sbatch": f"#!/bin/bash\n# {job.name}\n" + "x" * 5000, "notes.txt": job.name}

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.write_job_files(jobs, files)
    assert (tmp_path / "killed").exists()
    for job in jobs:
        assert (run.job_dir(job.name) / "job.sbatch").read_text() == files(job)["job.sbatch"]
        assert (run.job_dir(job.name) / "notes.txt").read_text() == job.name
    assert len(list(run.path.glob("jobs/*/*"))) == 2 * WORKER_JOBS


def test_a_run_directory_from_before_the_format_versions_is_read(tmp_path):
    """Directories written before plan.json and jobs.json had versions of their own carried the
    result schema_version 1, with the same layout: they are read as version 1."""
    out = tmp_path / "run"
    bench("sweep", str(SWEEPS / "local.yaml"), "--executor", "local", "--dry-run", "--out", str(out))
    run = RunDir(out)
    plan = json.loads(run.plan_file.read_text())
    plan["schema_version"] = 1
    del plan["plan_version"]
    run.plan_file.write_text(json.dumps(plan))
    table = run.read_table(run.jobs())
    run.write_table(table, "local")
    old = json.loads(run.table_file.read_text())
    old["schema_version"] = 1
    del old["table_version"]
    run.table_file.write_text(json.dumps(old))
    r = bench("status", str(out))
    assert f"0 of {len(table)} jobs COMPLETED" in r.stdout, r.describe()
    assert RunDir(out).read_table(run.jobs()).keys() == table.keys()


def test_a_local_plan_says_it_runs_here_and_how_many_ranks(tmp_path):
    """`--executor auto` without sbatch is the local executor: the plan's header says in one line
    that every job runs on this machine, and how many ranks the largest puts on its cores."""
    out = tmp_path / "run"
    r = bench("sweep", "--max-nodes", "8", "--dry-run", "--out", str(out), env={**os.environ, "PATH": str(tmp_path)})
    text = " ".join(r.stdout.split())
    assert "executor: local (no sbatch on PATH)" in text, r.describe()
    host = socket.gethostname()
    more = ", more ranks than cores" if (os.cpu_count() or 1) < 16 else ""
    assert (
        f"local: all 8 jobs run on this machine ({host}), one after another; the largest, n8-g2-torchrun-default, "
        f"puts 16 ranks (8 emulated node(s) x 2) on its {os.cpu_count()} CPU cores{more}." in text
    ), text
