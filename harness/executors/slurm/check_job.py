"""The node check on Slurm (docs/guides/nodes.md): one job of every node checked, whose batch shell runs
the check's driver (`python -m harness.nodesteps`), which starts each step as an srun step on
its one or two nodes through the step script rendered here. One allocation for the whole check,
so it waits in the queue once and its rounds follow one another without gaps.

Rendering is pure, as script.py's: node names never reach either script's text. The user's
hostlist goes on an #SBATCH line, held to Slurm's hostlist characters (hostlists.HOSTLIST_RE);
the step script takes the step's nodes, port and workload as arguments and only ever expands
them inside double quotes.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from harness.config.cluster_profile import RAIL_VARIABLES, ClusterProfile
from harness.config.hostlists import HOSTLIST_RE
from harness.executors.slurm.executor import SCRIPT, SlurmExecutor
from harness.executors.slurm.script import (
    _quote,
    container_import_lines,
    env_prefix,
    environment_lines,
    format_time_limit,
    interpreter,
    script_head,
    step_python,
    tasks_and_cpus,
    time_limit_trap,
    warning_comment,
)
from harness.executors.slurm.via_submitit import SubmititExecutor
from harness.nodes.allocation import in_submitit_task
from harness.nodes.driver import FOLDER, JOB, RECORD, STEP_MINUTES, STEP_SCRIPT, STEP_TASKS, Plan
from harness.nodes.rounds import dcgm_step, pair_round_count, round_count
from harness.run.plan import Job, WorkloadRun
from harness.run.rundir import RunDir

SLACK_MIN = 5.0  # the job's time limit beyond its rounds at the step timeout each


def check_job(plan: Plan, time_limit_min: float | None = None) -> Job:
    """The check as one job of the Slurm executor: every node, one task per rank (srun), and
    one "workload", the driver, whose result file is the steps' record (steps.json)."""
    o = plan.options
    rounds = round_count(plan.nodes, o) + 1  # and the round of the links that read low, measured again
    # the soak: its minutes, and the pass begun just before they end (every pair round once more)
    soak = o.soak_s + pair_round_count(plan.nodes, o) * o.step_timeout_s if o.soak_s else 0.0
    diagnosed = (dcgm_step(1, o.dcgm, FOLDER).limit_s or 0.0) if o.dcgm else 0.0  # DCGM's diagnostic
    limit = time_limit_min or (rounds * o.step_timeout_s + soak + diagnosed) / 60 + SLACK_MIN
    return Job(
        name=JOB,
        config_hash="nodecheck",
        nodes=plan.nodes,
        gpus_per_node=o.gpus_per_node,
        launcher="srun",
        nccl_config="default",
        nccl_env=(),
        env=(),
        device=o.device,
        backend=o.backend,
        time_limit_min=limit,
        runs=(WorkloadRun(RECORD.removesuffix(".json"), "", ()),),
        sample_s=0.0,
    )


def render_check_script(job: Job, profile: ClusterProfile, plan: Plan) -> str:
    """The check's sbatch script: pure."""
    if plan.nodelist is not None and not HOSTLIST_RE.fullmatch(plan.nodelist):
        raise ValueError(f"nodelist {plan.nodelist!r} is not a Slurm hostlist")
    python = shlex.quote(interpreter(profile))
    comments = [
        f"# bench node check: {job.nodes} nodes x {job.gpus_per_node} rank(s), cluster profile {profile.name}",
        "# Every node alone, then every pair in rounds of disjoint pairs, each step an srun step on its",
        "# nodes (docs/guides/nodes.md). Submitted from the run directory, which relative paths are relative to.",
    ]
    nodelist = [f"--nodelist={plan.nodelist}"] if plan.nodelist else []
    lines, _, _ = script_head(job, profile, comments, nodelist)
    lines += container_import_lines(profile)
    lines += [
        "",
        *warning_comment(job, "it would end bash, so a trap notes it instead"),
        "# The driver keeps its record until Slurm ends the job (TIMEOUT). bash runs a trap only once",
        "# the foreground command ends, so the driver runs in the background.",
        time_limit_trap(job, python, "time limit near"),
        f"{python} -m harness.nodesteps {FOLDER} &",
        "driver=$!",
        "while true; do",
        '  rc=0; wait "$driver" || rc=$?',
        '  [ "$rc" -eq 0 ] || ! kill -0 "$driver" 2>/dev/null && break  # still running: the trap woke us',
        "done",
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


def render_step_script(job: Job, profile: ClusterProfile, plan: Plan, overlap: bool = False) -> str:
    """The script of one step: `step.sh NAME NODES NNODES PORT MODULE [ARG...]`: pure. The step
    is named as the check names it (pair-3-5), which sacct shows. `overlap`: the driver runs
    inside a step that holds every CPU of the job (submitit's), which the check's steps share
    (srun --overlap, Slurm 22.05)."""
    _, env, passed = environment_lines(job, profile)
    names = [*env, *passed, "MASTER_ADDR", "MASTER_PORT"]
    container, python = step_python(profile, names)
    tasks, cpus = tasks_and_cpus(job, profile)
    step_limit = format_time_limit(plan.options.step_timeout_s / 60)
    prefix = env_prefix(profile)
    srun = " ".join(
        [
            'srun --job-name="$name" --nodes="$nnodes" --nodelist="$nodes" --ntasks="$ntasks"',
            f'--ntasks-per-node="$tasks" --cpus-per-task={cpus} --kill-on-bad-exit=1 --time="$limit"',
            *(["--overlap"] if overlap else []),
            *(_quote(o) for o in profile.srun_options),
            *container,
        ]
    )
    return (
        "\n".join(
            [
                "#!/bin/bash",
                "# One step of bench's node check, run by harness/nodes/driver.py from the run directory:",
                "#   step.sh NAME NODES NNODES PORT MODULE [ARG...]",
                "# The rendezvous is the step's first node; Slurm ends the step at the step timeout.",
                f"# {STEP_TASKS}, where the driver sets it: tasks a node (1: a program each node runs once);",
                f"# {STEP_MINUTES}: its minutes, where not the step timeout (DCGM's diagnostic).",
                "set -euo pipefail",
                "name=$1 nodes=$2 nnodes=$3 port=$4 module=$5",
                "shift 5",
                f"tasks=${{{STEP_TASKS}:-{tasks}}}",
                f"limit=${{{STEP_MINUTES}:-{step_limit}}}",
                'case "$nnodes:$port:$tasks" in',
                "  *[!0-9:]*|:*|*:|*::*)",
                f'    echo "bench: step.sh: NNODES, PORT and {STEP_TASKS} must be numbers" >&2; exit 2 ;;',
                "esac",
                'case "$limit" in',
                "  ''|*[!0-9:]*)",
                f'    echo "bench: step.sh: {STEP_MINUTES} must be minutes" >&2; exit 2 ;;',
                "esac",
                'case "$name" in',
                '  ""|*[!a-z0-9-]*) echo "bench: step.sh: NAME must be letters, digits and -" >&2; exit 2 ;;',
                "esac",
                "MASTER_ADDR=${nodes%%,*}",
                "MASTER_PORT=$port",
                "# --ntasks itself: the batch shell's SLURM_NTASKS (every node's) would otherwise be srun's.",
                "ntasks=$((10#$nnodes * 10#$tasks))",
                "export MASTER_ADDR MASTER_PORT"
                + (f' {prefix}MASTER_ADDR="$MASTER_ADDR" {prefix}MASTER_PORT="$MASTER_PORT"' if prefix else ""),
                *(
                    [
                        "# A rail step's variables, which the driver sets, into the container too",
                        f"for v in {' '.join(RAIL_VARIABLES)}; do",
                        f'  [ -z "${{!v+x}}" ] || export "{prefix}$v=${{!v}}"',
                        "done",
                    ]
                    if prefix
                    else []
                ),
                f'exec {srun} {python} -m "$module" "$@"',
            ]
        )
        + "\n"
    )


class NodesSubmitit(SubmititExecutor):
    """The submitit executor, submitting the check's one job: every task calls
    `nodesteps.in_submitit_task`, whose first runs the driver (docs/guides/submitit.md)."""

    def __init__(self, run: RunDir, timeout_s: float, profile: ClusterProfile, plan: Plan):
        super().__init__(run, timeout_s, profile)
        self.plan = plan

    def payload(self, job: Job) -> tuple[Callable[[Any], None], Any]:
        return in_submitit_task, FOLDER

    def job_files(self, job: Job) -> dict[str, str]:
        return {**super().job_files(job), STEP_SCRIPT: render_step_script(job, self.profile, self.plan, overlap=True)}


class NodesExecutor(SlurmExecutor):
    """The Slurm executor, submitting and tracking the check's one job."""

    def __init__(self, run: RunDir, timeout_s: float, profile: ClusterProfile, plan: Plan):
        super().__init__(run, timeout_s, profile)
        self.plan = plan

    def job_files(self, job: Job) -> dict[str, str]:
        return {
            SCRIPT: render_check_script(job, self.profile, self.plan),
            STEP_SCRIPT: render_step_script(job, self.profile, self.plan),
        }
