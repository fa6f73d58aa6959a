"""Slurm job scripts: golden files for the two launch modes, directive checks over the whole
matrix, bash syntax, hostile profile and sweep values, and the time-limit trap run in bash.

Submission to a real Slurm cluster is tested on the testbed: tests/proofs/test_sweep_slurm.py."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import HOSTILE_VALUES, ROOT, SWEEPS, bench, default_jobs, in_place_of, run

from harness.config.cluster_profile import ClusterProfile, load_profile
from harness.config.sweepfile import load_sweep
from harness.errors import SpecError
from harness.executors.slurm.script import format_time_limit, render_script, sbatch_directives, signal_lead_s
from harness.run.plan import expand

GOLDEN = ROOT / "tests" / "golden"
REGENERATE = "BENCH_REGENERATE_GOLDEN"
EXAMPLE = SWEEPS / "clusters" / "example.yaml"


@pytest.mark.parametrize("name", ["n2-g4-torchrun-ib", "n2-g4-srun-socket"])
def test_golden_scripts(name):
    job = next(j for j in default_jobs() if j.name == name)
    text = render_script(job, load_profile(EXAMPLE), 600)
    path = GOLDEN / f"{name}.sbatch"
    if os.environ.get(REGENERATE):
        path.write_text(text)
    assert path.exists() and text == path.read_text(), (
        f"{path} differs from the rendered script; if the change is intended, regenerate with "
        f"{REGENERATE}=1 python -m pytest tests/modules/harness/executors/slurm/test_script.py and review the diff"
    )


def test_a_gloo_job_exports_the_flight_recorder_s_buffer_and_says_who_dumps_it():
    """A gloo job has no NCCL log: its script exports the flight recorder's buffer alone, under
    words that say each rank dumps it (docs/guides/hangs.md), not NCCL's."""
    job = expand(load_sweep(SWEEPS / "local.yaml"))[0]
    text = render_script(job, load_profile(EXAMPLE), 600)
    head = "# PyTorch's flight recorder of gloo's collectives, which each rank dumps itself on a stall"
    assert job.backend == "gloo" and f"{head}\n" in text and "export TORCH_FR_BUFFER_SIZE=2000" in text
    assert "NCCL's own log" not in text and "NCCL_DEBUG_FILE" not in text


CONTAINERS = {
    "pyxis": """container:
  engine: pyxis
  image: nvcr.io#nvidia/pytorch:24.05-py3
  mounts: [/lustre/datasets:/datasets:ro]
  python: python
  code: /workspace/bench
""",
    "apptainer": """container:
  engine: apptainer
  image: /shared/images/pytorch-24.05.sif
  mounts: [/lustre/datasets:/datasets:ro]
  code: /workspace/bench
  options: [--writable-tmpfs]
""",
}


def container_profile(tmp_path: Path, engine: str, extra: str = "") -> ClusterProfile:
    path = tmp_path / f"{engine}.yaml"
    path.write_text(EXAMPLE.read_text() + CONTAINERS[engine] + extra)
    return load_profile(path)


@pytest.mark.parametrize("engine", sorted(CONTAINERS))
@pytest.mark.parametrize("name", ["n2-g4-torchrun-ib", "n2-g4-srun-socket"])
def test_golden_container_scripts(tmp_path, engine, name):
    job = next(j for j in default_jobs() if j.name == name)
    text = render_script(job, container_profile(tmp_path, engine), 600)
    path = GOLDEN / f"{name}.{engine}.sbatch"
    if os.environ.get(REGENERATE):
        path.write_text(text)
    assert path.exists() and text == path.read_text(), (
        f"{path} differs from the rendered script; if the change is intended, regenerate with "
        f"{REGENERATE}=1 python -m pytest tests/modules/harness/executors/slurm/test_script.py and review the diff"
    )


@pytest.mark.parametrize("engine", sorted(CONTAINERS))
def test_every_step_runs_in_the_container_with_bench_s_variables(tmp_path, engine):
    """Both launch modes, every step: the image, the run directory mounted and the working
    directory, and every variable the script exports kept over the image's own value."""
    profile = container_profile(tmp_path, engine)
    for job in default_jobs(max_nodes=2):
        text = render_script(job, profile, 600)
        path = tmp_path / "job.sbatch"
        path.write_text(text)
        run(["bash", "-n", str(path)])
        exported = {
            w.split("=")[0] for line in text.splitlines() if line.startswith("export ") for w in line.split()[1:]
        }
        exported = {n for n in exported if not n.startswith("APPTAINERENV_")}
        steps = [line for line in text.splitlines() if line.startswith("run_step ")]
        assert len(steps) == 5  # allreduce, synthetic weak and strong, real weak, transformer weak
        for step in steps:
            if engine == "pyxis":
                assert "--container-image='nvcr.io#nvidia/pytorch:24.05-py3'" in step
                assert '--container-mounts="$PWD:$PWD",/lustre/datasets:/datasets:ro --container-workdir="$PWD"' in step
                kept = set(step.split("--container-env=")[1].split()[0].split(","))
                assert kept == exported, kept ^ exported
                assert " env PYTHONPATH=/workspace/bench python -m " in step
            else:
                assert (
                    ' apptainer exec --nv --no-home --bind "$PWD:$PWD" --bind /lustre/datasets:/datasets:ro'
                    ' --pwd "$PWD" --writable-tmpfs /shared/images/pytorch-24.05.sif'
                    " env PYTHONPATH=/workspace/bench python3 -m "
                ) in step
            assert ("torch.distributed.run" in step) == (job.launcher == "torchrun")
        if engine == "apptainer":
            prefixed = {
                w.split("=")[0].removeprefix("APPTAINERENV_")
                for line in text.splitlines()
                if line.startswith("export ")
                for w in line.split()[1:]
                if w.startswith("APPTAINERENV_")
            }
            assert prefixed == exported, prefixed ^ exported
        # the helpers beside the steps (hang watcher, sampler) stay on the host
        assert (
            "python3 -m harness.hangs watch" in text
            and "apptainer exec" not in text.split("run_step() {")[1].split("}")[0]
        )


def test_pyxis_imports_the_image_once_a_job_outside_the_step_limits(tmp_path):
    """docs/guides/containers.md: one srun imports the image on every node before the first timed step
    (the hang watcher's stall limit and a node check step's --time never see the pull); every
    step names the same container, of this job alone, and the job removes it on its way out.
    bash runs the script's lines with srun and enroot standing in, each printing its argv."""
    from harness.executors.slurm.check_job import check_job, render_check_script, render_step_script
    from harness.nodes.driver import Plan
    from harness.nodes.rounds import Options

    profile = container_profile(tmp_path, "pyxis")
    text = render_script(default_jobs(max_nodes=2)[-1], profile, 600)
    lines = text.splitlines()
    imports = [i for i, line in enumerate(lines) if line.startswith("srun ") and line.endswith(" true")]
    steps = [i for i, line in enumerate(lines) if line.startswith("run_step ")]
    assert len(imports) == 1 and imports[0] < steps[0]
    assert all('--container-name=bench-"$SLURM_JOB_ID"' in lines[i] for i in [*imports, *steps])
    script = tmp_path / "job.sh"
    script.write_text(
        'srun() { echo "srun $*" >> said.txt; }\nset -e\nSLURM_JOB_ID=4242 SLURM_NNODES=2\n'
        "stop_sampler() { echo stopped >> said.txt; }\n"
        + "\n".join(lines[imports[0] : imports[0] + 5])
        + '\nrun_step() { shift; "$@"; }\n'
        + lines[steps[0]]
        + "\n"
    )
    run(["bash", str(script)], cwd=tmp_path)
    said = (tmp_path / "said.txt").read_text().splitlines()
    assert said[0].startswith("srun --nodes=2 --ntasks-per-node=1 --container-image=nvcr.io#nvidia/pytorch:24.05-py3")
    assert said[0].endswith("--container-name=bench-4242 --no-container-mount-home true")
    assert "--container-name=bench-4242" in said[1].split()  # the step starts the imported container
    assert said[2:] == ["stopped", "srun --nodes=2 --ntasks-per-node=1 enroot remove -f pyxis_bench-4242"]
    # the node check: imported before the driver starts its steps, each step naming it
    plan = Plan("slurm", Options(gemm=False), 0.1, 4, "bnode[1-4]")
    job = check_job(plan)
    check = render_check_script(job, profile, plan)
    assert check.index("--container-name=bench-") < check.index("-m harness.nodesteps")
    assert '--container-name=bench-"$SLURM_JOB_ID"' in render_step_script(job, profile, plan)
    # Apptainer's image is a file: nothing to import, nothing named
    apptainer = render_script(default_jobs(max_nodes=2)[-1], container_profile(tmp_path, "apptainer"), 600)
    assert "--container-name" not in apptainer and "remove_container" not in apptainer


def test_without_a_code_path_bench_s_workloads_are_mounted_read_only(tmp_path):
    profile = container_profile(tmp_path, "apptainer")
    profile = dataclasses.replace(profile, container=dataclasses.replace(profile.container, code=None))
    text = render_script(default_jobs(max_nodes=1)[0], profile, 600)
    code = ROOT / "benchmarks"
    assert f"--bind {code}:/opt/bench/benchmarks:ro " in text and " env PYTHONPATH=/opt/bench python3 -m " in text


def test_the_container_s_command_line_reaches_the_engine_as_written(tmp_path):
    """bash expands the step as the engine will see it: the run directory, whose name holds a
    blank, a quote and $(...), is one argument, and nothing in it runs."""
    hostile = tmp_path / "run dir 'q' $(touch pwned)"
    hostile.mkdir()
    for engine in sorted(CONTAINERS):
        text = render_script(default_jobs(max_nodes=1)[0], container_profile(tmp_path, engine), 600)
        step = next(line for line in text.splitlines() if line.startswith("run_step "))
        script = tmp_path / "argv.sh"
        # srun and apptainer stand in for the commands that cannot run here: each prints its argv
        script.write_text(
            "srun() { printf '%s\\n' \"$@\"; }\napptainer() { printf '%s\\n' apptainer \"$@\"; }\n"
            'run_step() { shift; "$@"; }\n' + step + "\n"
        )
        argv = run(["bash", str(script)], cwd=hostile).stdout.splitlines()
        if engine == "pyxis":
            assert f"--container-mounts={hostile}:{hostile},/lustre/datasets:/datasets:ro" in argv
            assert f"--container-workdir={hostile}" in argv
        else:
            assert argv[argv.index("--bind") + 1] == f"{hostile}:{hostile}"
            assert argv[argv.index("--pwd") + 1] == str(hostile)
    assert not (tmp_path / "pwned").exists() and not (hostile / "pwned").exists()


def test_a_run_directory_a_container_cannot_mount_is_refused(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text(EXAMPLE.read_text() + CONTAINERS["pyxis"])
    for name in ("a,b", "a:b"):
        out = tmp_path / name
        args = ["--executor", "slurm", "--cluster", str(profile), "--dry-run", "--max-nodes", "1", "--out", str(out)]
        r = bench("sweep", str(SWEEPS / "default.yaml"), *args, check=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.describe()
        assert f"the container would mount {out}, and container engines read ',' and ':'" in r.stderr
        assert not out.exists()


def _directives(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH "):
            key, _, value = line[len("#SBATCH ") :].partition("=")
            out[key] = value
    return out


def test_directives_over_the_whole_matrix():
    profile = load_profile(EXAMPLE)
    jobs = default_jobs()
    assert len(jobs) == 80
    for job in jobs:
        text = render_script(job, profile, 600)
        d = _directives(text)
        assert d["--job-name"] == f"bench-{job.name}" and d["--nodes"] == str(job.nodes)
        assert d["--gres"] == f"gpu:{job.gpus_per_node}" and d["--signal"] == "B:USR2@120"
        assert d["--time"] == "00:30:00" and d["--partition"] == "gpu" and "--exclusive" in d
        assert d["--output"] == d["--error"] == f"jobs/{job.name}/slurm-%j.out"
        steps = [line for line in text.splitlines() if line.startswith("run_step ")]
        assert [s.split()[1] for s in steps] == [r.key for r in job.runs]
        if job.launcher == "torchrun":
            # one agent per node starting G workers, never G tasks x G workers
            assert d["--ntasks-per-node"] == "1" and d["--cpus-per-task"] == str(8 * job.gpus_per_node)
            assert all(
                f"--nproc-per-node={job.gpus_per_node}" in s
                and "--rdzv-backend=c10d" in s
                and "--ntasks-per-node=1 " in s
                for s in steps
            )
        else:
            assert d["--ntasks-per-node"] == str(job.gpus_per_node) and d["--cpus-per-task"] == "8"
            assert all("torch.distributed.run" not in s and "--nproc-per-node" not in s for s in steps)
        assert all("--kill-on-bad-exit=1" in s and f"--cpus-per-task={d['--cpus-per-task']}" in s for s in steps)
        for line in text.splitlines():
            if line.startswith("#SBATCH "):
                # nothing Slurm's directive parser or a shell would interpret
                assert not any(c in line[len("#SBATCH ") :] for c in " \t'\"\\#$;`"), line


def test_every_script_is_valid_bash(tmp_path):
    profile = load_profile(EXAMPLE)
    for job in default_jobs(max_nodes=2):
        path = tmp_path / f"{job.name}.sbatch"
        path.write_text(render_script(job, profile, 600))
        run(["bash", "-n", str(path)])


def test_constraint_operators_are_accepted():
    job = default_jobs(max_nodes=1)[0]
    profile = ClusterProfile(name="c", constraint="[rack1*2&rack2*2]|(a100&ib)")
    assert "--constraint=[rack1*2&rack2*2]|(a100&ib)" in sbatch_directives(job, profile)


def test_gpu_request_styles_and_time_format():
    job = next(j for j in default_jobs() if j.name == "n4-g8-torchrun-default")
    typed = ClusterProfile(name="c", gpu_type="a100", gpu_request="gpus-per-node")
    assert "--gpus-per-node=a100:8" in sbatch_directives(job, typed)
    assert "--gres=gpu:a100:8" in sbatch_directives(job, ClusterProfile(name="c", gpu_type="a100"))
    none = sbatch_directives(job, ClusterProfile(name="c", gpu_request="none"))
    assert not any(d.startswith(("--gres", "--gpus")) for d in none)
    assert [format_time_limit(m) for m in (0.25, 30, 90.5, 1500)] == ["00:00:15", "00:30:00", "01:30:30", "1-01:00:00"]


def test_the_warning_never_comes_in_a_jobs_first_minute():
    """Asked for L s before a limit of T s, Slurm's USR2 comes between T - L - 60 and T - L
    (docs/reference/sources.md): L is 120 where T - 120 - 60 >= 60, T - 120 below that, and no warning
    where that leaves under 1 s. 2.02 minutes is 121.2 s, given as 122."""
    minutes = [30, 4, 3, 2.5, 2.02, 2, 1, 0.1]
    assert [signal_lead_s(m) for m in minutes] == [120, 120, 60, 30, 2, None, None, None]
    for m in minutes:
        job = dataclasses.replace(default_jobs()[0], time_limit_min=m)
        lead = signal_lead_s(m)
        text = render_script(job, ClusterProfile(name="c"), 60)
        asked = [line for line in text.splitlines() if line.startswith("#SBATCH --signal")]
        assert asked == ([f"#SBATCH --signal=B:USR2@{lead}"] if lead else []), m
        assert ("# No time-limit warning:" in text) == (lead is None)
        if lead:
            earliest = int(-(-m * 60 // 1)) - lead - 60
            assert earliest >= 60, m


# '*' is constraint syntax ([rack1*2&rack2*2]) and inert on an #SBATCH line: not hostile there.
@pytest.mark.parametrize(
    "key,hostile",
    [
        (key, hostile)
        for key in ("partition", "account", "qos", "constraint", "gpu_type")
        for hostile in HOSTILE_VALUES + ["q'uote", 'd"q', "new\nline"]
        if (key, hostile) != ("constraint", "*")
    ],
)
def test_hostile_sbatch_values_are_rejected(tmp_path, key, hostile):
    path = tmp_path / "c.yaml"
    path.write_text(f"name: c\n{key}: {json.dumps(hostile)}\n")
    with pytest.raises(SpecError) as info:
        load_profile(path)
    assert f"{key}: " in str(info.value) and "#SBATCH" in str(info.value)


@pytest.mark.parametrize(
    "text,words",
    [
        ("sbatch_options: ['--reservation=a b']", ["sbatch_options", "--reservation=a b"]),
        ("sbatch_options: ['--partition=other']", ["sbatch_options", "--partition is set by bench"]),
        # getopt_long takes unambiguous abbreviations, so these would reach --output and --partition
        ("sbatch_options: ['--outp=/x']", ["sbatch_options", "reads --outp as --output"]),
        ("sbatch_options: ['--parti=debug']", ["sbatch_options", "reads --parti as --partition"]),
        ("sbatch_options: ['--uid=0']", ["sbatch_options", "--uid is set by bench"]),
        ("sbatch_options: ['-p gpu']", ["sbatch_options"]),
        ("sbatch_options: ['--time=10']", ["--time is set by bench", "use the profile's time_limit_min key"]),
        ("srun_options: ['--ntasks=2']", ["srun_options", "--ntasks is set by bench"]),
        ("srun_options: ['--cpus=2']", ["srun_options", "srun reads --cpus as --cpus-per-task"]),
        ("srun_options: ['--chdir=/']", ["srun_options", "--chdir is set by bench"]),
        ("srun_options: ['--mpi pmix']", ["srun_options", "plain --option[=value]"]),
        ("time_limit_min: 0", ["time_limit_min", "between 0.1 and"]),
        ("confirm_above_node_hours: -1", ["confirm_above_node_hours", "0 (always ask) or more"]),
        ("container: {engine: docker, image: x}", ["container.engine", "pyxis, apptainer, singularity"]),
        ("container: {engine: pyxis}", ["container.image", "required key is missing"]),
        ("container: {engine: pyxis, image: 'a b'}", ["container.image", "not an image reference"]),
        ("container: {engine: pyxis, image: x, mounts: ['/a']}", ["container.mounts", "SRC:DST"]),
        ("container: {engine: pyxis, image: x, mounts: ['a:/b']}", ["container.mounts", "absolute"]),
        ("container: {engine: pyxis, image: x, mounts: ['/a:/b:rx']}", ["container.mounts", "ro|rw"]),
        ("container: {engine: pyxis, image: x, mounts: ['/a,/c:/b']}", ["container.mounts"]),
        ("container: {engine: pyxis, image: x, code: rel/path}", ["container.code", "absolute path"]),
        ("container: {engine: pyxis, image: x, workdir: '/a b'}", ["container.workdir", "absolute path"]),
        ("container: {engine: pyxis, image: x, python: 'py; id'}", ["container.python", "plain program"]),
        ("container: {engine: pyxis, image: x, nv: false}", ["container.nv", "Apptainer/Singularity option"]),
        ("container: {engine: pyxis, image: x, options: [--container-image=y]}", ["container.options", "set by bench"]),
        ("container: {engine: pyxis, image: x, options: [--container-m=/a:/b]}", ["reads --container-m as"]),
        ("container: {engine: apptainer, image: x, options: [--cleanenv]}", ["container.options", "--cleanenv"]),
        ("container: {engine: apptainer, image: x, options: [--containall]}", ["container.options", "--containall"]),
        ("container: {engine: apptainer, image: x, options: ['-e']}", ["container.options", "plain --option"]),
        ("python: 'python3; id'", ["python", "plain program path"]),
        ('setup: ["source x\\nrm -rf ~"]', ["setup", "newline"]),
        ("env: {'BAD NAME': x}", ["env.BAD NAME", "environment variable name"]),
        ("gpu_request: mig", ["gpu_request", "gres, gpus-per-node, none"]),
        ("cpus_per_gpu: 0", ["cpus_per_gpu", "at least 1"]),
        ("max_running_jobs: 0", ["max_running_jobs", "at least 1"]),
        ("max_running_jobs: two", ["max_running_jobs", "an integer"]),
        ("poll_min_s: 0.01", ["poll_min_s", "0.1 <= poll_min_s"]),
        ("poll_max_s: 1", ["poll_min_s 2 and poll_max_s 1"]),
        ("bogus: 1", ["bogus", "unknown key", "partition"]),
    ],
)
def test_bad_profiles(tmp_path, text, words):
    path = tmp_path / "c.yaml"
    path.write_text(f"name: c\n{text}\n")
    with pytest.raises(SpecError) as info:
        load_profile(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    "key,hostile",
    [
        (key, f"{option}={hostile}")
        for key, option in (("sbatch_options", "--reservation"), ("srun_options", "--mpi"))
        for hostile in HOSTILE_VALUES + ["q'uote", 'd"q', "new\nline", "a]b$(id)"]
    ],
)
def test_hostile_option_values_are_rejected(tmp_path, key, hostile):
    path = tmp_path / "c.yaml"
    path.write_text(f"name: c\n{key}: [{json.dumps(hostile)}]\n")
    with pytest.raises(SpecError) as info:
        load_profile(path)
    assert f"{key}: " in str(info.value) and "plain --option[=value]" in str(info.value)


EVERY_KEY = """name: site
partition: gpu
sbatch_options:
  - --exclude=gpu[001-004,010]
  - --nodelist=gpu[020-021]
srun_options: [--mpi=pmix, --cpu-bind=cores, --network=single]
time_limit_min: 45
confirm_above_node_hours: 0
setup: [source /shared/venvs/bench/bin/activate]
"""


def test_a_profile_with_every_site_key_passes_a_dry_run(tmp_path):
    """Hostlists on #SBATCH lines, srun options on every step, the profile's time limit, and the
    interpreter the setup lines leave on the PATH; a sweep's own time limit wins."""
    profile = tmp_path / "site.yaml"
    profile.write_text(EVERY_KEY)
    out = tmp_path / "run"
    args = ["sweep", str(SWEEPS / "default.yaml"), "--executor", "slurm", "--cluster", str(profile), "--dry-run"]
    r = bench(*args, "--max-nodes", "2", "--out", str(out))
    assert "if each runs to its 45-min time limit" in r.stdout  # the cost, shown even for a dry run
    text = (out / "jobs" / "n2-g4-srun-ib" / "job.sbatch").read_text()
    d = _directives(text)
    assert d["--time"] == "00:45:00" and d["--exclude"] == "gpu[001-004,010]" and d["--nodelist"] == "gpu[020-021]"
    steps = [line for line in text.splitlines() if line.startswith("run_step ")]
    assert len(steps) == 5 and all(
        "--kill-on-bad-exit=1 --mpi=pmix --cpu-bind=cores --network=single python3 -m benchmarks." in s for s in steps
    )
    assert "source /shared/venvs/bench/bin/activate\n" in text
    run(["bash", "-n", str(out / "jobs" / "n2-g4-srun-ib" / "job.sbatch")])
    r = bench(*args, "--max-nodes", "1", "--set", "time_limit_min=20", "--out", str(tmp_path / "own"))
    assert (
        _directives((tmp_path / "own" / "jobs" / "n1-g1-torchrun-default" / "job.sbatch").read_text())["--time"]
        == "00:20:00"
    )


def test_the_interpreter_follows_the_profile():
    job = default_jobs(max_nodes=1)[0]
    text = render_script(job, ClusterProfile(name="c"), 60)
    step = next(line for line in text.splitlines() if line.startswith("run_step "))
    assert f" {sys.executable} -m torch.distributed.run" in step  # nothing set up: bench's own, on a shared path
    for profile, python in (
        (ClusterProfile(name="c", setup=("conda activate bench",)), "python3"),
        (ClusterProfile(name="c", setup=("conda activate bench",), python="/opt/py/bin/python"), "/opt/py/bin/python"),
    ):
        text = render_script(job, profile, 60)
        assert f"srun --ntasks-per-node=1 --cpus-per-task=4 --kill-on-bad-exit=1 {python} -m torch" in text
        assert f"{python} -m harness.hangs watch" in text and f"{python} -m harness.telemetry sample" in text


def test_hostile_environment_values_are_quoted_in_the_body(tmp_path):
    canary = tmp_path / "pwned"
    hostile = f"$(touch {canary}); `touch {canary}` ; rm -rf ~ 'q' \"dq\" \\ #x"
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        (SWEEPS / "local.yaml")
        .read_text()
        .replace("  default: {}", f"  default: {{NCCL_DEBUG_SUBSYS: {json.dumps(hostile)}}}")
    )
    job = expand(load_sweep(sweep))[0]
    text = render_script(job, ClusterProfile(name="c", env={"NCCL_SOCKET_IFNAME": hostile}), 60)
    exports = "\n".join(line for line in text.splitlines() if line.startswith("export "))
    got = run(["bash", "-c", exports + '\nprintf "%s|%s" "$NCCL_DEBUG_SUBSYS" "$NCCL_SOCKET_IFNAME"'])
    assert got.stdout == f"{hostile}|{hostile}" and not canary.exists()


def _trap_harness(tmp_path: Path, steps: str) -> Path:
    """The script's own trap and run_step, followed by `steps`, as a runnable bash file."""
    job = expand(load_sweep(SWEEPS / "local.yaml"))[0]
    text = render_script(job, ClusterProfile(name="c"), 60)
    start = text.index("step=none")
    end = text.index("}\n", text.index("run_step() {", start)) + 2
    (tmp_path / "jobs" / job.name).mkdir(parents=True)
    path = tmp_path / "trap.sh"
    path.write_text("set -euo pipefail\n" + text[start:end] + steps)
    return path


def test_usr2_is_noted_and_the_step_runs_on(tmp_path):
    """What Slurm does 120 s before the limit: USR2 to the batch shell. The step in progress
    must not be cut by it, and the note must say which step it was."""
    script = _trap_harness(tmp_path, "run_step synthetic-weak sleep 3\necho finished $?\n")
    proc = subprocess.Popen(["bash", str(script)], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    time.sleep(1)
    proc.send_signal(signal.SIGUSR2)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.strip() == "finished 0"
    note = next((tmp_path / "jobs").glob("*/time-limit.txt")).read_text()
    assert "time limit near during synthetic-weak" in note


def _planted(tmp_path: Path) -> tuple[Path, Path, str, str]:
    """A run directory whose job folder holds a result and a telemetry/ planted as a link to a
    folder outside it holding a telemetry file and time-limit.txt as a link to a file outside:
    (run directory, outside, the job's name, its script)."""
    job = dataclasses.replace(expand(load_sweep(SWEEPS / "local.yaml"))[0], sample_s=1.0)  # marks its phases
    text = render_script(job, ClusterProfile(name="c"), 60)
    run_dir, outside = tmp_path / "run", tmp_path / "outside"
    folder = run_dir / "jobs" / job.name
    folder.mkdir(parents=True)
    outside.mkdir()
    (outside / "node1.samples.jsonl").write_text("theirs\n")
    (outside / "notes.txt").write_text("theirs\n")
    (folder / "telemetry").symlink_to(outside)
    (folder / "time-limit.txt").symlink_to(outside / "notes.txt")
    return run_dir, outside, job.name, text


def _lines(text: str, first: str, last: str) -> str:
    start = text.index(first)
    return text[start : text.index(last, start) + len(last)]


def test_a_requeued_job_removes_nothing_through_a_link(tmp_path):
    """Slurm runs a requeued job's script again with SLURM_RESTART_COUNT set; its clean-up once
    ran `rm -f -- jobs/J/telemetry/*.jsonl ...`, which deleted through a telemetry/ replaced by a
    link while the job waited. Now the link fails the job, one line naming it, and nothing
    outside the run directory goes; without a link the earlier attempt's files go as before."""
    run_dir, outside, name, text = _planted(tmp_path)
    clean = "set -euo pipefail\n" + _lines(text, 'if [ -n "${SLURM_RESTART_COUNT:-}" ]', "\nfi\n") + "echo cleared\n"
    env = {**os.environ, "SLURM_RESTART_COUNT": "1"}
    r = run(["bash", "-c", clean], cwd=run_dir, env=env, check=False)
    assert r.returncode == 2 and not r.stdout, r.describe()
    assert r.stderr.count("\n") == 1 and "telemetry: a symbolic link where bench keeps a directory" in r.stderr
    assert sorted(p.name for p in outside.iterdir()) == ["node1.samples.jsonl", "notes.txt"]
    (run_dir / "jobs" / name / "telemetry").unlink()
    (run_dir / "jobs" / name / "telemetry").mkdir()
    (run_dir / "jobs" / name / "telemetry" / "node1.samples.jsonl").write_text("earlier\n")
    (run_dir / "jobs" / name / "progress").mkdir()
    (run_dir / "jobs" / name / "progress" / "allreduce.rank0").write_text("earlier\n")
    r = run(["bash", "-c", clean], cwd=run_dir, env=env)
    assert r.stdout == "cleared\n" and (outside / "notes.txt").read_text() == "theirs\n"
    left = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*"))
    assert left == ["jobs", f"jobs/{name}", f"jobs/{name}/progress", f"jobs/{name}/telemetry"], left


def test_the_job_s_notes_are_appended_through_no_link(tmp_path):
    """The time-limit note and the workloads' phase marks were `>>` appends, which follow a
    link: each now goes through the run directory's descriptors, and a planted link is left
    alone (the mark never fails the job; the note's trap says why it wrote nothing)."""
    run_dir, outside, name, text = _planted(tmp_path)
    start = text.index("step=none")
    harness = "set -euo pipefail\n" + text[start : text.index("\n}\n", text.index("run_step() {", start)) + 3]
    steps = "run_step synthetic-weak sleep 2\nmark synthetic-weak end\necho finished $?\n"
    proc = subprocess.Popen(
        ["bash", "-c", harness + steps], cwd=run_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(1)
    proc.send_signal(signal.SIGUSR2)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.strip() == "finished 0", (out, err)
    assert "time-limit.txt: a symbolic link where bench keeps a file" in err, err
    assert (outside / "notes.txt").read_text() == "theirs\n"
    assert sorted(p.name for p in outside.iterdir()) == ["node1.samples.jsonl", "notes.txt"]
    (run_dir / "jobs" / name / "telemetry").unlink()
    (run_dir / "jobs" / name / "time-limit.txt").unlink()
    proc = subprocess.Popen(["bash", "-c", harness + steps], cwd=run_dir, stdout=subprocess.PIPE, text=True)
    time.sleep(1)
    proc.send_signal(signal.SIGUSR2)
    out, _ = proc.communicate(timeout=60)
    assert out.strip() == "finished 0"
    assert "time limit near during synthetic-weak" in (run_dir / "jobs" / name / "time-limit.txt").read_text()
    phases = (run_dir / "jobs" / name / "telemetry" / "phases.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in phases] == ["start", "end", "end"], phases


def test_a_failing_step_fails_the_script_with_its_status(tmp_path):
    script = _trap_harness(tmp_path, "run_step allreduce bash -c 'exit 3'\necho not reached\n")
    r = run(["bash", str(script)], cwd=tmp_path, check=False)
    assert r.returncode == 3 and "not reached" not in r.stdout


@pytest.mark.parametrize(
    ("profile", "said"),
    [
        # the system's Python, which has no bench: nothing of bench's would run on the nodes
        (
            "python: /usr/bin/python3\n",
            "warning: the profile's python /usr/bin/python3 cannot import bench (ModuleNotFoundError: No module "
            "named 'harness'): the hang watcher, the telemetry sampler and the node check's driver will not run, "
            "nor any workload",
        ),
        (
            "python: /nonexistent/bin/python\n",
            "warning: the profile's python '/nonexistent/bin/python' is not an executable here",
        ),
        (
            "setup: ['source \"$HOME/venvs/bench/bin/activate\"']\n",
            "warning: the nodes' Python (python3) is what the profile's setup and modules leave there, not checked",
        ),
        (f"python: {sys.executable}\n", None),  # bench's own: it imports bench, nothing to say
    ],
)
def test_a_dry_run_looks_at_the_nodes_python(tmp_path, profile, said):
    (tmp_path / "p.yaml").write_text("name: lab\n" + profile)
    r = bench(
        "sweep", str(SWEEPS / "testbed.yaml"), "--executor", "slurm", "--cluster", str(tmp_path / "p.yaml"),
        "--dry-run", "--out", str(tmp_path / "run"),
    )  # fmt: skip
    warned = [line for line in r.stdout.splitlines() if "python" in line.lower() and line.startswith("warning")]
    assert warned == ([] if said is None else [warned[0]]) and (said is None or warned[0].startswith(said)), r.stdout


@pytest.mark.parametrize(
    ("container", "said"),
    [
        ("", "warning: the profile's python {} cannot import bench (ModuleNotFoundError: No module named 'torch')"),
        ("container: {engine: pyxis, image: nvcr.io#nvidia/pytorch:24.05-py3}\n", None),  # the image has its own
    ],
)
def test_a_dry_run_finds_what_the_workloads_need_unless_an_image_brings_it(tmp_path, container, said):
    """A Python with bench's code and PyYAML but no torch: on the nodes the host's parts of bench
    would run and the workloads would not, which a dry run says, without importing torch."""
    import yaml

    venv, only = tmp_path / "venv", tmp_path / "only"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    only.mkdir()
    (only / "yaml").symlink_to(Path(yaml.__file__).parent)
    (next(venv.glob("lib/python*/site-packages")) / "bench.pth").write_text(f"{ROOT}\n{only}\n")
    python = venv / "bin" / "python"
    (tmp_path / "p.yaml").write_text(f"name: lab\npython: {python}\n{container}")
    r = bench(
        "sweep", str(SWEEPS / "testbed.yaml"), "--executor", "slurm", "--cluster", str(tmp_path / "p.yaml"),
        "--dry-run", "--out", str(tmp_path / "run"),
    )  # fmt: skip
    warned = [line for line in r.stdout.splitlines() if line.startswith("warning") and "python" in line]
    assert warned == ([] if said is None else [warned[0]]), r.stdout
    assert said is None or warned[0].startswith(said.format(python)), r.stdout


def test_cli_slurm_dry_run_writes_every_script(tmp_path):
    out = tmp_path / "run"
    r = bench(
        "sweep",
        str(SWEEPS / "default.yaml"),
        "--executor",
        "slurm",
        "--cluster",
        str(EXAMPLE),
        "--max-nodes",
        "2",
        "--dry-run",
        "--out",
        str(out),
    )
    assert r.stdout.splitlines()[0] == "executor: slurm (chosen with --executor)"
    scripts = sorted(out.glob("jobs/*/job.sbatch"))
    assert len(scripts) == 4 * 2 + 4 * 2 * 3  # the network settings sets only on 2 nodes
    plan = json.loads((out / "plan.json").read_text())
    assert plan["executor"] == "slurm" and plan["cluster"]["name"] == "example"
    # the recorded profile is what a resume rebuilds
    from harness.config.fields import build

    assert build(ClusterProfile, plan["cluster"], "cluster") == load_profile(EXAMPLE)
    # resuming a dry run submits the whole sweep: its cost is confirmed as a new sweep's is
    empty = tmp_path / "bin"
    empty.mkdir()
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    r = bench("sweep", "--resume", str(out), env={"PATH": str(empty)}, check=False)
    assert r.returncode == 2 and r.stderr == (
        "bench sweep: error: 32 job(s), up to 28.0 node-hours is above the profile's confirm_above_node_hours (4); "
        "no terminal to ask, so nothing was submitted: add --yes to submit, or narrow the sweep (--only, --max-nodes)\n"
    )
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    # where Slurm's commands are missing, resuming says so and the run stays resumable
    r = bench("sweep", "--resume", str(out), "--yes", env={"PATH": str(empty)}, check=False)
    assert (
        r.returncode == 2
        and r.stderr
        == "bench sweep: error: sbatch not found on PATH; the Slurm executor needs Slurm's client commands\n"
    )
    table = json.loads((out / "jobs.json").read_text())["jobs"]
    assert len(table) == len(scripts) and {(t["state"], t["job_id"]) for t in table.values()} == {("PENDING", None)}


def test_cli_slurm_misuse_exits_2_and_writes_nothing(tmp_path):
    out = tmp_path / "run"
    empty = tmp_path / "bin"
    empty.mkdir()
    r = bench("sweep", "--executor", "slurm", "--out", str(out), env={"PATH": str(empty)}, check=False)
    assert r.returncode == 2 and "sbatch not found on PATH" in r.stderr and not out.exists()
    r = bench("sweep", "--executor", "local", "--cluster", str(EXAMPLE), "--dry-run", "--out", str(out), check=False)
    assert r.returncode == 2 and "--cluster" in r.stderr and not out.exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: c\npartition: 'gpu; rm -rf ~'\n")
    r = bench("sweep", "--executor", "slurm", "--cluster", str(bad), "--dry-run", "--out", str(out), check=False)
    assert r.returncode == 2 and f"{bad}: partition:" in r.stderr and not out.exists()
    assert len(r.stderr.strip().splitlines()) == 1


def _port_lines(tmp_path: Path) -> str:
    """The script's lines from MASTER_ADDR to their export, with scontrol stubbed out."""
    job = expand(load_sweep(SWEEPS / "local.yaml"))[0]
    text = render_script(job, ClusterProfile(name="c"), 60)
    start = text.index("MASTER_ADDR=")
    end = text.index("export MASTER_ADDR MASTER_PORT")
    return (
        "set -euo pipefail\nSLURM_JOB_NODELIST=bnode1\nscontrol() { echo bnode1; }\n"
        + text[start:end]
        + 'echo "$MASTER_PORT"\n'
    )


def test_master_port_arithmetic_never_runs_a_command(tmp_path):
    """bash evaluates a variable named in $(( )) as an expression, array subscripts and the
    command substitutions in them included. A hostile SLURM_JOB_ID (any set variable serves as
    the array) must stop the script before the arithmetic, not run the command."""
    canary = tmp_path / "pwned"
    script = _port_lines(tmp_path)
    hostile = f"OMP_NUM_THREADS[$(touch {canary})]"
    r = run(
        ["bash", "-c", script],
        env={**os.environ, "OMP_NUM_THREADS": "1", "SLURM_JOB_ID": hostile},
        cwd=tmp_path,
        check=False,
    )
    assert not canary.exists()
    assert r.returncode == 1 and "SLURM_JOB_ID is not a number" in r.stderr
    ok = run(["bash", "-c", script], env={**os.environ, "SLURM_JOB_ID": "0012345"}, cwd=tmp_path)
    assert ok.stdout.strip() == "32345"  # 10#: a leading zero is not octal


@pytest.mark.parametrize(
    "name",
    [
        "SLURM_JOB_ID",
        "MASTER_PORT",
        "RANK",
        "LOCAL_RANK",
        "BENCH_JOB",
        "TORCHELASTIC_RUN_ID",
        "PYTHON_EXEC",
        "IFS",
        "BASH_ENV",
        "SBATCH_PARTITION",
    ],
)
def test_reserved_variables_cannot_be_set(tmp_path, name):
    for where, text in (
        ("env", f"env: {{{name}: '1'}}\n"),
        ("nccl.x", f"nccl: {{x: {{{name}: '1'}}}}\n"),
        ("env_passthrough", f"env_passthrough: [{name}]\n"),
    ):
        sweep = tmp_path / "s.yaml"
        sweep.write_text(in_place_of((SWEEPS / "local.yaml").read_text(), text))
        with pytest.raises(SpecError) as info:
            load_sweep(sweep)
        assert f"{where}" in str(info.value) and f"{name} is set by bench" in str(info.value)
    profile = tmp_path / "c.yaml"
    profile.write_text(f"name: c\nenv: {{{name}: '1'}}\n")
    with pytest.raises(SpecError, match=f"env.{name}: {name} is set by bench"):
        load_profile(profile)


def test_a_run_directory_private_to_this_machine_is_recognised(tmp_path):
    """/proc/self/mounts as Linux writes it (fstab(5) fields, octal escapes for blanks): the
    longest mount point above the path decides the filesystem."""
    from harness.executors.slurm.script import looks_local

    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/vda / ext4 rw,relatime 0 0\n"
        "tmpfs /run tmpfs rw,nosuid,nodev,size=4934712k,mode=755 0 0\n"
        "nfs01:/export/home /home/my\\040lab nfs4 rw,relatime,vers=4.2 0 0\n"
        "tmpfs /home/my\\040lab/scratch tmpfs rw,relatime 0 0\n"
    )
    assert looks_local(Path("/run/results/x"), mounts) == "it is on tmpfs (/run), which only this machine sees"
    assert looks_local(Path("/home/my lab/results"), mounts) is None
    assert "on tmpfs (/home/my lab/scratch)" in looks_local(Path("/home/my lab/scratch/r"), mounts)
    assert looks_local(Path("/runner/results"), mounts) is None  # a prefix is not a parent
    assert looks_local(Path("/tmp/results"), mounts) == "it is under /tmp, which is usually each node's own"
    assert looks_local(Path("/srv/results"), tmp_path / "no-such-file") is None
