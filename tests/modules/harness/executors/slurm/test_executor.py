"""The Slurm executor's state machine against fake sbatch, squeue and sacct that replay Slurm
22.05's replies (tests/fakes/slurm/fake_slurm.py): polling and its back-off, sacct lagging
behind squeue, chains under max_running_jobs, adopting jobs on resume, and tools that fail.
Fast and without root; tests/proofs/test_sweep_slurm.py is the proof on the real testbed."""

from __future__ import annotations

import itertools
import subprocess

import pytest
from conftest import SWEEPS, FakeSlurm

from harness.config.cluster_profile import ClusterProfile
from harness.config.sweepfile import load_sweep
from harness.errors import SlurmError
from harness.executors.slurm.executor import QUERY_TRIES, SBATCH_TRIES, SlurmExecutor
from harness.run.plan import Job, expand
from harness.run.rundir import COMPLETED, FAILED, PENDING, SUBMITTING, JobRecord, RunDir, claim
from harness.sweep import create_run

# Two jobs (1 and 2 nodes of 1 GPU), each running the all-reduce only.
OVERRIDES = ("gpus_per_node=[1]", "workloads.synthetic=false", "workloads.real=false")
FAST = {"poll_min_s": 0.1, "poll_max_s": 0.4}
TRANSIENT = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"
REFUSED = "sbatch: error: Batch job submission failed: Invalid partition name specified"


def _run(tmp_path, profile: ClusterProfile, nodes: str = "[1, 2]") -> tuple[SlurmExecutor, list[Job], RunDir]:
    sweep = load_sweep(SWEEPS / "local.yaml", overrides=(*OVERRIDES, f"nodes={nodes}", "max_nodes=8"))
    jobs = expand(sweep)
    run, created = claim(tmp_path / "run")
    executor = SlurmExecutor(run, sweep.timeout_s, profile)
    create_run(sweep, "local.yaml", executor, jobs, created)
    return executor, jobs, run


def _execute(executor: SlurmExecutor, jobs: list[Job], table: dict[str, JobRecord] | None = None) -> dict:
    table = table if table is not None else executor.run.read_table(jobs)
    history: list[tuple[str, str, str | None]] = []
    executor.execute(jobs, table, lambda rec: history.append((rec.name, rec.state, rec.reason)))
    executor.history = history  # type: ignore[attr-defined]
    return table


def test_jobs_are_followed_from_pending_to_their_final_state(tmp_path, fake_slurm: FakeSlurm):
    fake_slurm.scenario(
        {
            "n1-g1-torchrun-default": {"queue": [["PENDING", "Priority"], ["RUNNING", "None"]], "elapsed": 7},
            "n2-g1-torchrun-default": {"queue": [["RUNNING", "None"]], "state": "FAILED", "exit": "1:0", "nodes": 2},
        }
    )
    executor, jobs, _ = _run(tmp_path, ClusterProfile(name="fake", **FAST))
    table = _execute(executor, jobs)
    one, two = table["n1-g1-torchrun-default"], table["n2-g1-torchrun-default"]
    assert (one.state, one.exit_code, one.elapsed_s, one.attempts) == (COMPLETED, 0, 7.0, 1)
    assert (two.state, two.exit_code, two.node_list, two.attempts) == (FAILED, 1, "bnode[1-2]", 1)
    assert one.job_id == "100" and two.job_id == "101"
    assert (one.started, one.ended) == ("2026-11-22T06:43:20", "2026-11-22T06:43:25")
    # every state the first job passed through was recorded, in order
    states = [s for name, s, _ in executor.history if name == one.name]
    assert states[: states.index(COMPLETED) + 1] == [SUBMITTING, PENDING, PENDING, "RUNNING", COMPLETED]
    # one squeue for all live jobs per poll, and sacct only for jobs that left the queue
    assert all(call[-1] in ("100,101", "100", "101") for call in fake_slurm.calls("squeue"))
    assert executor.calls["sbatch"] == 2


@pytest.mark.parametrize("max_attempts", [1, 3])
def test_a_job_the_cluster_ended_is_submitted_again_up_to_max_attempts(tmp_path, fake_slurm: FakeSlurm, max_attempts):
    """NODE_FAIL every time (the testbed makes one for real: tests/proofs/test_preemption_testbed.py):
    submitted again until max_attempts have run, each new attempt naming the one before; a job
    that failed by itself (FAILED) is not."""
    fake_slurm.scenario(
        {
            "n1-g1-torchrun-default": {"queue": [["RUNNING", "None"]], "state": "NODE_FAIL", "exit": "0:0"},
            "n2-g1-torchrun-default": {"queue": [["RUNNING", "None"]], "state": "FAILED", "exit": "1:0", "nodes": 2},
        }
    )
    executor, jobs, _ = _run(tmp_path, ClusterProfile(name="fake", max_attempts=max_attempts, **FAST))
    table = _execute(executor, jobs)
    lost, failed = table["n1-g1-torchrun-default"], table["n2-g1-torchrun-default"]
    assert (lost.state, lost.attempts) == ("NODE_FAIL", max_attempts)
    assert (failed.state, failed.attempts) == (FAILED, 1)
    assert executor.calls["sbatch"] == max_attempts + 1
    ended = "Slurm ended the job NODE_FAIL (exit code 0) during allreduce"
    earlier = "attempt 1 was Slurm job 100 (NODE_FAIL on bnode1); attempt 2 was Slurm job 102 (NODE_FAIL on bnode1)"
    assert lost.reason == (ended if max_attempts == 1 else f"{earlier}; attempt 3: {ended}"), lost.reason
    reasons = [r for name, s, r in executor.history if name == lost.name and s == SUBMITTING]
    assert reasons == [None] + [
        f"attempt {k} was Slurm job {ids} (NODE_FAIL on bnode1)"
        for k, ids in zip(range(1, max_attempts), ("100", "102"))
    ]


def test_polling_backs_off_while_nothing_moves_and_never_past_the_maximum(tmp_path, fake_slurm: FakeSlurm):
    fake_slurm.scenario({"n1-g1-torchrun-default": {"queue": [["RUNNING", "None"]], "leave_after": 7}})
    executor, jobs, _ = _run(tmp_path, ClusterProfile(name="fake", poll_min_s=0.2, poll_max_s=0.5), nodes="[1]")
    _execute(executor, jobs)
    times = [call[0] for call in fake_slurm.calls("squeue")]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # 0.2 s after the submission's poll, then x1.5 each quiet poll: 0.3, 0.45, then 0.5 at most
    assert len(gaps) >= 5, gaps
    assert gaps[1] > gaps[0] * 1.2 and gaps[2] > gaps[1] * 1.2, gaps
    assert max(gaps) < 0.5 + 0.25, gaps  # the cap, plus the fake command's own start-up


def test_a_job_that_left_the_queue_waits_for_sacct_to_catch_up(tmp_path, fake_slurm: FakeSlurm):
    """slurmctld tells slurmdbd of a job's end a moment after the job leaves squeue; meanwhile
    sacct still says RUNNING (seen on the testbed). The job is not lost, nor finished early."""
    fake_slurm.scenario({"n1-g1-torchrun-default": {"queue": [["RUNNING", "None"]], "acct_lag": 3}})
    executor, jobs, _ = _run(tmp_path, ClusterProfile(name="fake", **FAST), nodes="[1]")
    table = _execute(executor, jobs)
    assert table["n1-g1-torchrun-default"].state == COMPLETED
    assert (jobs[0].name, "RUNNING", "left the queue; waiting for sacct's final state") in executor.history
    # three answers of RUNNING after the job left squeue, then the final one
    finals = [c for c in fake_slurm.calls("sacct") if "-j" in c]
    assert len(finals) >= 4, finals


def test_the_job_table_keeps_what_sacct_says_the_job_used(tmp_path, fake_slurm: FakeSlurm):
    executor, jobs, run = _run(tmp_path, ClusterProfile(name="fake", **FAST), nodes="[1]")
    table = _execute(executor, jobs)
    run.write_table(table, "slurm")
    rec = run.read_table(jobs)["n1-g1-torchrun-default"]  # as status, resume and report see it
    assert rec.state == COMPLETED
    assert (rec.cpu_s, rec.mem_bytes, rec.mem_efficiency) == (6.873, 495188 * 1024, None)
    assert rec.cpu_efficiency == pytest.approx(6.873 / 16)
    rec.new_attempt(PENDING)  # a rerun starts without them
    assert (rec.cpu_s, rec.cpu_efficiency, rec.mem_bytes) == (None, None, None)


def test_max_running_jobs_submits_chains_of_dependent_jobs(tmp_path, fake_slurm: FakeSlurm):
    executor, jobs, _ = _run(tmp_path, ClusterProfile(name="fake", max_running_jobs=2, **FAST), nodes="[1, 2, 4, 8]")
    table = _execute(executor, jobs)
    assert all(r.state == COMPLETED for r in table.values())
    after = {job["name"]: job["after"] for job in fake_slurm.jobs().values()}
    ids = {job["name"]: i for i, job in fake_slurm.jobs().items()}
    # two chains: job k waits for job k-2 (afterany), the first two wait for nothing
    names = [f"bench-{j.name}" for j in jobs]
    assert [after[n] for n in names] == [None, None, ids[names[0]], ids[names[1]]]


def test_a_passing_sbatch_failure_is_retried(tmp_path, fake_slurm: FakeSlurm):
    fake_slurm.scenario({}, fail={"sbatch": [[1, TRANSIENT]]})
    executor, jobs, _ = _run(tmp_path, ClusterProfile(name="fake", **FAST), nodes="[1]")
    table = _execute(executor, jobs)
    assert table[jobs[0].name].state == COMPLETED and executor.calls["sbatch"] == 2


def test_a_first_job_sbatch_never_takes_stops_the_sweep_before_anything_runs(tmp_path, fake_slurm: FakeSlurm):
    fake_slurm.scenario({}, fail={"sbatch": [[1, TRANSIENT]] * SBATCH_TRIES})
    executor, jobs, run = _run(tmp_path, ClusterProfile(name="fake", **FAST))
    table = run.read_table(jobs)
    with pytest.raises(SlurmError, match=r"the first job of the sweep, so nothing was submitted: .*Socket timed out"):
        _execute(executor, jobs, table)
    assert executor.calls["sbatch"] == SBATCH_TRIES and fake_slurm.jobs() == {}
    assert all(r.state == PENDING and r.job_id is None for r in table.values())


def test_a_refused_job_after_the_first_is_failed_with_sbatchs_words(tmp_path, fake_slurm: FakeSlurm):
    # the first job is taken; the second is refused for good (not a passing error: no retry)
    fake_slurm.scenario({}, fail={})
    executor, jobs, _ = _run(tmp_path, ClusterProfile(name="fake", **FAST))
    table = executor.run.read_table(jobs)
    original = executor._call

    def refuse_second(tool, args):
        if tool == "sbatch" and executor.calls["sbatch"] == 1:
            fake_slurm.scenario({}, fail={"sbatch": [[1, REFUSED]]})
        return original(tool, args)

    executor._call = refuse_second  # type: ignore[method-assign]
    _execute(executor, jobs, table)
    first, second = (table[j.name] for j in jobs)
    assert first.state == COMPLETED
    assert second.state == FAILED and second.reason == f"sbatch refused the job: {REFUSED}"
    assert executor.calls["sbatch"] == 2


def test_squeue_failing_again_and_again_stops_the_sweep_with_its_words(tmp_path, fake_slurm: FakeSlurm):
    error = "squeue: error: Unable to contact slurm controller (connect failure)"
    fake_slurm.scenario({}, fail={"squeue": [[1, error]] * QUERY_TRIES})
    executor, jobs, run = _run(tmp_path, ClusterProfile(name="fake", **FAST), nodes="[1]")
    table = run.read_table(jobs)
    with pytest.raises(SlurmError, match=rf"squeue failed {QUERY_TRIES} times in a row .*Unable to contact"):
        _execute(executor, jobs, table)
    # the job's id was saved before the sweep stopped: a resume tracks it rather than resubmit
    assert table[jobs[0].name].job_id == "100"


def test_a_few_squeue_failures_are_ridden_out(tmp_path, fake_slurm: FakeSlurm):
    error = "squeue: error: Unable to contact slurm controller (connect failure)"
    fake_slurm.scenario({}, fail={"squeue": [[1, error]] * (QUERY_TRIES - 1)})
    executor, jobs, _ = _run(tmp_path, ClusterProfile(name="fake", **FAST), nodes="[1]")
    assert _execute(executor, jobs)[jobs[0].name].state == COMPLETED


def test_resume_adopts_a_job_slurm_took_while_the_harness_was_dying(tmp_path, fake_slurm: FakeSlurm):
    """The harness was killed after sbatch answered but before the id was saved: the row says
    SUBMITTING. Resume finds the job by name and working directory, and submits nothing."""
    _executor, jobs, run = _run(tmp_path, ClusterProfile(name="fake", **FAST), nodes="[1]")
    job = jobs[0]
    rec = run.read_table(jobs)[job.name]
    rec.new_attempt(SUBMITTING)
    rec.submitted = "2026-11-22T06:43:00+00:00"
    # the fake controller took it: sbatch ran from the run directory
    fake_slurm.scenario({})
    subprocess.run(
        ["sbatch", "--parsable", f"jobs/{job.name}/job.sbatch"], cwd=run.path, check=True, capture_output=True
    )
    resumed = SlurmExecutor(run, 60, ClusterProfile(name="fake", **FAST))
    table = _execute(resumed, jobs, resumed.resume({job.name: rec}))
    assert table[job.name].job_id == "100" and table[job.name].state == COMPLETED
    assert table[job.name].attempts == 1
    assert resumed.calls["sbatch"] == 0 and len(fake_slurm.jobs()) == 1
    assert resumed.history[0] == (job.name, PENDING, "found in Slurm after the harness stopped while submitting it")


def test_resume_submits_a_job_slurm_never_took(tmp_path, fake_slurm: FakeSlurm):
    _executor, jobs, run = _run(tmp_path, ClusterProfile(name="fake", **FAST), nodes="[1]")
    job = jobs[0]
    rec = run.read_table(jobs)[job.name]
    rec.new_attempt(SUBMITTING)
    rec.submitted = "2026-11-22T06:43:00+00:00"
    resumed = SlurmExecutor(run, 60, ClusterProfile(name="fake", **FAST))
    table = _execute(resumed, jobs, resumed.resume({job.name: rec}))
    assert table[job.name].state == COMPLETED and resumed.calls["sbatch"] == 1
    assert table[job.name].attempts == 1


def test_cancelled_by_a_user_says_who(tmp_path, fake_slurm: FakeSlurm):
    fake_slurm.scenario({"n1-g1-torchrun-default": {"queue": [["PENDING", "Priority"]], "leave_after": 100}})
    executor, jobs, run = _run(tmp_path, ClusterProfile(name="fake", **FAST), nodes="[1]")
    table = run.read_table(jobs)
    original = executor._call

    def cancel_on_third_poll(tool, args):
        if tool == "squeue" and executor.calls["squeue"] == 2:
            original("scancel", ["100"])
        return original(tool, args)

    executor._call = cancel_on_third_poll  # type: ignore[method-assign]
    _execute(executor, jobs, table)
    rec = table[jobs[0].name]
    assert rec.state == "CANCELLED" and rec.reason == "cancelled by root before it started"


@pytest.mark.parametrize(
    ("note", "said"),
    [
        # warned before the first step started: the note cannot say which step the limit cut
        ("time limit near during none", "allreduce"),
        # warned while a step ran that then finished: the results on disk say what was cut
        ("time limit near during synthetic-weak", "allreduce"),
        # no warning (a limit too short to ask for one)
        (None, "allreduce"),
    ],
)
def test_a_timeout_names_the_step_without_a_result(tmp_path, fake_slurm: FakeSlurm, note, said):
    fake_slurm.scenario({"n1-g1-torchrun-default": {"queue": [["RUNNING", "None"]], "state": "TIMEOUT"}})
    executor, jobs, run = _run(tmp_path, ClusterProfile(name="fake", **FAST), nodes="[1]")
    original = executor._call

    def warned_while_running(tool, args):  # the trap's line, once the job runs (sbatch clears it before)
        if tool == "squeue" and note is not None:
            (run.job_dir(jobs[0]) / "time-limit.txt").write_text(f"2026-11-28T07:00:01+00:00 {note}\n")
        return original(tool, args)

    executor._call = warned_while_running  # type: ignore[method-assign]
    rec = _execute(executor, jobs)[jobs[0].name]
    assert (rec.state, rec.reason) == ("TIMEOUT", f"time limit of 00:10:00 reached during {said}")
    assert rec.runs == {"allreduce": "TIMEOUT"}
