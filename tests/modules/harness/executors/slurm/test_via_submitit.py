"""The submitit executor without a cluster: the profile as submitit's parameters, checked through
submitit's own batch-script writer against the sbatch script's directives; the commands each
task runs, against the sbatch script's steps; and what the executor refuses.

On the Slurm testbed it runs sweeps/testbed.yaml, and jobs that fail, time out and are
cancelled: tests/proofs/test_sweep_slurm.py."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from pathlib import Path

import pytest
import submitit
from conftest import SWEEPS, bench
from submitit.slurm.slurm import _make_sbatch_string

from harness.config.cluster_profile import load_profile
from harness.config.sweepfile import load_sweep
from harness.executors.slurm import submitit_task
from harness.executors.slurm.script import render_script, sbatch_directives, step_command, step_launch
from harness.executors.slurm.via_submitit import parameters, task
from harness.run.plan import expand

SITE = """name: site
partition: gpu
account: proj-42
qos: high
constraint: a100&ib
exclusive: true
gpu_request: gres
gpu_type: a100
cpus_per_gpu: 6
modules: [cuda/12.4, nccl/2.21]
setup: [source /shared/venvs/bench/bin/activate]
env: {NCCL_SOCKET_IFNAME: ib0}
sbatch_options:
  - --exclude=gpu[001-004,010]
  - --reservation=bench
  - --requeue
srun_options: [--mpi=pmix, --cpu-bind=cores]
"""

# Directives one writer has and the other has not, by design (docs/guides/submitit.md): the logs'
# paths, submitit's wckey, append mode and working directory, and the signal (B:USR2 to the
# batch shell for the sbatch script, USR2 to the step's tasks for submitit).
OWN = {"--output", "--error", "--signal", "--wckey", "--open-mode", "--chdir"}


@pytest.fixture(autouse=True)
def srun_on_path(tmp_path, monkeypatch):
    """submitit's Slurm executor looks for srun on PATH when it is made; nothing here runs it."""
    stub = tmp_path / "stub-bin"
    stub.mkdir()
    (stub / "srun").write_text("#!/bin/sh\nexit 1\n")
    (stub / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{stub}:{os.environ['PATH']}")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    path = tmp_path_factory.mktemp("site") / "site.yaml"
    path.write_text(SITE)
    return load_profile(path)


def _jobs():
    return expand(load_sweep(SWEEPS / "default.yaml", max_nodes=4))


def _submitit_script(params: dict, folder: Path) -> str:
    """The batch script submitit writes for these parameters, through its own AutoExecutor."""
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    executor.update_parameters(**params)
    return _make_sbatch_string(
        command="python -u -m submitit.core._submit FOLDER", folder=folder, **executor._executor.parameters
    )


def _directives(lines: list[str]) -> dict[str, str]:
    out = {}
    for line in lines:
        key, _, value = line.partition("=")
        out[key] = shlex.split(value)[0] if value else ""
    return out


@pytest.mark.parametrize("name", ["n1-g1-torchrun-default", "n2-g4-torchrun-ib", "n4-g4-srun-socket"])
def test_submitit_asks_slurm_for_what_the_sbatch_script_asks(site, tmp_path, name):
    job = dataclasses.replace(next(j for j in _jobs() if j.name == name), time_limit_min=45.5)
    text = _submitit_script(parameters(job, site, tmp_path), tmp_path / "submitit")
    theirs = _directives([line.removeprefix("#SBATCH ") for line in text.splitlines() if line.startswith("#SBATCH ")])
    ours = _directives(sbatch_directives(job, site))
    assert {k: v for k, v in theirs.items() if k not in OWN} == {k: v for k, v in ours.items() if k not in OWN}
    assert theirs["--chdir"] == str(tmp_path) and theirs["--signal"] == "USR2@120"
    assert ours["--time"] == "00:45:30" and ours["--exclude"] == "gpu[001-004,010]" and ours["--requeue"] == ""
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    cpus = ours["--cpus-per-task"]
    assert f" --cpus-per-task={cpus} --kill-on-bad-exit=1 --mpi=pmix --cpu-bind=cores python " in srun
    # before srun, the sbatch script's own lines up to its steps: modules, setup, exports, the port
    setup = text[text.index("# setup\n") : text.index("# command\n")]
    assert setup.index("module load cuda/12.4\nmodule load nccl/2.21\nsource /shared/venvs/bench/bin/activate\n") > 0
    script = render_script(job, site, 600)
    block = script[script.index("module load cuda/12.4") : script.index("export MASTER_ADDR MASTER_PORT")]
    assert block.replace(f"BENCH_LAUNCHER=slurm-{job.launcher}", f"BENCH_LAUNCHER=submitit-{job.launcher}") in setup
    assert setup.startswith("# setup\nset -euo pipefail\nmodule load")
    requeue = "# Requeued by Slurm"  # after the set-up, whose environment holds the python it runs
    assert setup.index(requeue) > setup.index("MASTER_PORT") and " -m harness.inside clear " in setup


@pytest.mark.parametrize("name", ["n2-g4-torchrun-ib", "n2-g4-srun-socket"])
def test_each_task_runs_the_sbatch_script_s_steps(site, name):
    """Per workload, the task's command and variables are the sbatch step's, with the batch
    shell's variables given their values."""
    job = next(j for j in _jobs() if j.name == name)
    script = render_script(job, site, 600)
    env = {"SLURM_NNODES": "2", "MASTER_ADDR": "gpu011", "MASTER_PORT": "21234", "SLURM_JOB_ID": "1234", "X": "1"}
    t = task(job, 600, set())
    assert [s.key for s in t.steps] == [r.key for r in job.runs]
    for run, step in zip(job.runs, t.steps, strict=True):
        words = submitit_task.command(t, step, env)[1:]  # the interpreter is the task's own
        line = next(line for line in script.splitlines() if line.startswith(f"run_step {run.key} "))
        sbatch = step_command(job, run, 600, step_launch(job, site))
        assert line.endswith(sbatch)
        expanded = sbatch
        for k, v in env.items():
            expanded = expanded.replace(f"${k}", v)
        assert shlex.join(words) in expanded.replace('"', ""), (words, sbatch)
    assert t.world_size == job.world_size and t.launcher == job.launcher and t.gpus_per_node == job.gpus_per_node


def test_the_dry_run_records_what_submitit_is_given(site, tmp_path):
    profile = tmp_path / "site.yaml"
    profile.write_text(SITE + "confirm_above_node_hours: 0\n")
    out = tmp_path / "run"
    r = bench(
        "sweep", str(SWEEPS / "default.yaml"), "--executor", "submitit", "--cluster", str(profile), "--dry-run",
        "--max-nodes", "2", "--out", str(out),
    )  # fmt: skip
    assert "executor: submitit (chosen with --executor)" in r.stdout and "if each runs to its" in r.stdout
    jobs = sorted(p.name for p in (out / "jobs").iterdir())
    assert len(jobs) == 32 and not list(out.rglob("*.sbatch"))
    record = json.loads((out / "jobs" / "n2-g4-srun-ib" / "submitit.json").read_text())
    assert record["parameters"]["name"] == "bench-n2-g4-srun-ib" and record["parameters"]["tasks_per_node"] == 4
    assert record["parameters"]["slurm_additional_parameters"]["chdir"] == str(out.resolve())
    assert [s["key"] for s in record["task"]["steps"]] == [
        "allreduce",
        "synthetic-weak",
        "synthetic-strong",
        "real-weak",
        "transformer-weak",
    ]
    assert json.loads((out / "plan.json").read_text())["executor"] == "submitit"


def test_a_container_profile_is_refused_before_anything_is_written(tmp_path):
    profile = tmp_path / "pyxis.yaml"
    profile.write_text("name: c\ncontainer: {engine: pyxis, image: nvcr.io#nvidia/pytorch:24.05-py3}\n")
    out = tmp_path / "run"
    r = bench("sweep", "--executor", "submitit", "--cluster", str(profile), "--dry-run", "--out", str(out), check=False)
    assert r.returncode == 2 and not out.exists()
    assert r.stderr.strip().splitlines() == [
        f"bench sweep: error: {profile}: container: the submitit executor cannot run a job in a container "
        "(submitit starts its own Python in each task, outside the image); use --executor slurm"
    ]


@pytest.mark.parametrize(("minutes", "signal"), [(3, "USR2@60"), (2.5, "USR2@30"), (2.02, "USR2@2")])
def test_a_short_limit_asks_for_the_warning_after_the_tasks_have_started(site, tmp_path, minutes, signal):
    """Slurm may warn 60 s before it was asked (docs/reference/sources.md): the lead leaves the tasks
    60 s to start. 2.02 minutes is 122 s rounded up, so a lead of 122 - 60 - 60 = 2 s."""
    job = dataclasses.replace(_jobs()[0], time_limit_min=minutes)
    text = _submitit_script(parameters(job, site, tmp_path), tmp_path / "submitit")
    assert f"#SBATCH --signal={signal}\n" in text


@pytest.mark.parametrize("where", ["sweep", "profile"])
def test_a_limit_too_short_for_the_warning_is_refused_before_anything_is_written(tmp_path, where):
    """submitit always asks for the warning: at 2 minutes it could come at the job's start,
    which killed a task on the testbed before it had set its handler."""
    profile, sweep = tmp_path / "p.yaml", tmp_path / "s.yaml"
    profile.write_text("name: short\n" + ("time_limit_min: 2\n" if where == "profile" else ""))
    text = (SWEEPS / "local.yaml").read_text().replace("time_limit_min: 10 ", "#")
    sweep.write_text(text + ("time_limit_min: 2\n" if where == "sweep" else ""))
    out = tmp_path / "run"
    args = ("--executor", "submitit", "--cluster", str(profile), "--dry-run", "--out", str(out))
    r = bench("sweep", str(sweep), *args, check=False)
    assert r.returncode == 2 and not out.exists(), r.stdout
    named = str(sweep) if where == "sweep" else "cluster profile short"
    assert r.stderr.strip().splitlines() == [
        f"bench sweep: error: {named}: time_limit_min 2 is too short for the submitit executor, which always asks "
        "for Slurm's time-limit warning: it may come 60 s early and must come after the first 60 s, so the limit "
        "must be over 2 minutes (docs/guides/submitit.md); or use --executor slurm"
    ]
    # the Slurm executor asks for no warning instead, and writes the job
    r = bench("sweep", str(sweep), *args[2:], "--executor", "slurm", check=False)
    assert r.returncode == 0, r.stderr
    script = next(out.glob("jobs/*/job.sbatch")).read_text()
    assert "#SBATCH --signal" not in script and "#SBATCH --time=00:02:00\n" in script


def test_the_task_description_pickles_by_reference():
    """submitit pickles the function and its Task; both must load where bench's code is installed."""
    import pickle

    job = _jobs()[0]
    t = task(job, 600, set())
    assert pickle.loads(pickle.dumps(t)) == t
    assert pickle.dumps(submitit_task.run) == pickle.dumps(submitit_task.run)  # a module function, by name
    assert dataclasses.is_dataclass(t) and t.steps[0].env == job.debug_env(job.runs[0], set())
