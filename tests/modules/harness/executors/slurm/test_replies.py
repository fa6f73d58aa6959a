"""The pure parts of Slurm tracking: reading sbatch's, squeue's and sacct's replies, and
holding signals while a job id is saved. The replies are written here because a real cluster
cannot be made to produce each on demand (a federation's `id;cluster`, OUT_OF_MEMORY,
NODE_FAIL); the testbed tests drive the same code against real slurmctld."""

from __future__ import annotations

import signal

import pytest

from harness.errors import SlurmError
from harness.evidence.logs import error_line
from harness.executors.slurm.executor import deferred_signals
from harness.executors.slurm.replies import Accounting, parse_sacct, parse_sbatch_reply, parse_squeue, parse_usage


@pytest.mark.parametrize(
    "stdout, expected",
    [("4242\n", ("4242", None)), ("4242;gpucluster\n", ("4242", "gpucluster")), ("  17  \n", ("17", None))],
)
def test_sbatch_parsable_replies(stdout, expected):
    assert parse_sbatch_reply(stdout) == expected


@pytest.mark.parametrize(
    "stdout, stderr",
    [
        ("", "sbatch: error: Batch job submission failed: Invalid partition name specified"),
        ("Submitted batch job 12\n", ""),  # not --parsable output: refuse rather than guess
        ("12;bad cluster\n", ""),
    ],
)
def test_sbatch_reply_without_an_id_is_an_error_quoting_it(stdout, stderr):
    with pytest.raises(SlurmError) as err:
        parse_sbatch_reply(stdout, stderr)
    message = str(err.value)
    assert message.startswith("sbatch replied without a job id: ")
    assert (stdout.strip() or stderr.strip()) in message and "\n" not in message


def test_squeue_rows_with_pending_reasons():
    text = "CLUSTER: a\n101|PENDING|Dependency\n102|RUNNING|None\n103|COMPLETING|None\n104|PENDING|(null)\n\n"
    assert parse_squeue(text) == {
        "101": ("PENDING", "Dependency"),
        "102": ("RUNNING", None),
        "103": ("COMPLETING", None),
        "104": ("PENDING", None),
    }


def test_sacct_states_exit_codes_and_cancelling_user():
    text = "\n".join(
        [
            "7|COMPLETED|0:0|31|2|bnode[1-2]|2026-11-21T10:00:00|2026-11-21T10:00:31",
            "8|CANCELLED by 1000|0:15|5|1|bnode3|2026-11-21T10:01:00|2026-11-21T10:01:05",
            "9|FAILED|2:0|3|4|bnode[1-4]|2026-11-21T10:02:00|2026-11-21T10:02:03",
            "10|OUT_OF_MEMORY|0:125|9|1|bnode1|2026-11-21T10:03:00|2026-11-21T10:03:09",
            "11|CANCELLED by 0|0:0|0|0|None assigned|Unknown|2026-11-21T10:04:00",
            "12|RUNNING|0:0|4|1|bnode2|2026-11-21T10:05:00|Unknown",
            "12.batch|RUNNING|0:0|4|1|bnode2|2026-11-21T10:05:00|Unknown",  # a step: not a job row
            "garbage line",
        ]
    )
    rows = parse_sacct(text)
    assert sorted(rows, key=int) == ["7", "8", "9", "10", "11", "12"]
    assert rows["7"] == Accounting(
        job_id="7",
        state="COMPLETED",
        by_uid=None,
        exit_code=0,
        signal=0,
        elapsed_s=31.0,
        nodes=2,
        node_list="bnode[1-2]",
        start="2026-11-21T10:00:00",
        end="2026-11-21T10:00:31",
    )
    assert (rows["8"].state, rows["8"].by_uid, rows["8"].signal) == ("CANCELLED", 1000, 15)
    assert (rows["9"].state, rows["9"].exit_code) == ("FAILED", 2)
    assert rows["10"].state == "OUT_OF_MEMORY"
    assert (rows["11"].state, rows["11"].by_uid, rows["11"].start) == ("CANCELLED", 0, None)
    assert (rows["12"].state, rows["12"].end) == ("RUNNING", None)


def test_signals_wait_until_the_job_id_is_saved():
    """Ctrl-C while sbatch runs is held until the id is in the table, then acted on. The test
    sets SIGINT's handler itself: a process started in the background by a shell without job
    control inherits SIGINT ignored (POSIX, "Asynchronous Lists"), as this suite's workers did
    when .ci/run was started with `&`, and deferred_signals rightly keeps what it found."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        steps = []
        with pytest.raises(KeyboardInterrupt):
            with deferred_signals():
                signal.raise_signal(signal.SIGINT)
                steps.append("id saved")
            steps.append("not reached")
        assert steps == ["id saved"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_signalled_rank_is_named_in_the_failure():
    torchrun = (
        "Fatal Python error: Segmentation fault\n  traceback : Signal 11 (SIGSEGV) received by PID 9844\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "srun: error: bnode1: task 0: Exited with exit code 1\n"
    )
    assert error_line(torchrun) == "Signal 11 (SIGSEGV) received by PID 9844"
    assert error_line("srun: error: bnode2: task 1: Segmentation fault\n") == "bnode2: task 1: Segmentation fault"
    assert error_line("srun: error: bnode2: task 1: Exited with exit code 3\n") is None


# From a 4-node job on the testbed whose bnode4 had no eth0 (torch 2.14.1, gloo): bnode4's rank
# failed, srun stopped the other agents, and each of them raised SignalException afterwards.
STOPPED_AGENTS_LOG = """\
    backend_class = ProcessGroupGloo(
                    ^^^^^^^^^^^^^^^^^
RuntimeError: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] ifa != nullptr. Unable to find address for: eth0
E1122 06:43:27.185000 19477 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 19524) of binary: /work/main/.venv/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
srun: error: bnode4: task 3: Exited with exit code 1
slurmstepd-bnode1: error: *** STEP 4.0 ON bnode1 CANCELLED AT 2026-11-22T06:43:28 ***
W1122 06:43:28.665000 19476 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, shutting down workers
torch.distributed.elastic.multiprocessing.api.SignalException: Process 19476 got signal: 15
torch.distributed.elastic.multiprocessing.api.SignalException: Process 19481 got signal: 15
srun: error: bnode1: task 0: Exited with exit code 1
"""


def test_the_failing_rank_is_the_reason_not_the_agents_stopped_after_it():
    assert error_line(STOPPED_AGENTS_LOG).endswith("Unable to find address for: eth0")
    alone = "\n".join(line for line in STOPPED_AGENTS_LOG.splitlines() if "SignalException" in line)
    assert error_line(alone) == "SignalException: Process 19481 got signal: 15"  # nothing else: still said


# From a local 2-node job on this machine (torch 2.14.1, gloo) whose rank 1 called its fifth
# all-reduce with half the tensor (tests/modules/harness/evidence/test_hangs.py): gloo aborted
# rank 1 in std::terminate, and rank 0 then read its connection reset. Paths shortened.
SIZE_MISMATCH_LOG = """\
terminate called after throwing an instance of 'gloo::EnforceNotMet'
  what():  [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:464] \
op.preamble.length <= op.nbytes. 262144 vs 131072. Received data size doesn't match expected size. \
Is there a distributed collective mismatch in your code?
[rank0]: Traceback (most recent call last):
[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error \
[127.0.0.1]:6059: Connection reset by peer. This is typically caused by a remote worker hanging or bugs in \
the application. Check the logs of the remote worker before reporting an error. GLHF!
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
  traceback : Signal 6 (SIGABRT) received by PID 11788
"""


def test_the_aborted_rank_s_own_line_is_the_reason_not_its_peer_s_reset_connection():
    assert error_line(SIZE_MISMATCH_LOG) == (
        "gloo::EnforceNotMet: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:464] "
        "op.preamble.length <= op.nbytes. 262144 vs 131072. Received data size doesn't match expected size. "
        "Is there a distributed collective mismatch in your code?"
    )
    reset_alone = "\n".join(line for line in SIZE_MISMATCH_LOG.splitlines() if "what()" not in line)
    said = error_line(reset_alone)  # nothing else: the reset connection is still said
    assert said is not None and said.endswith(
        "Connection reset by peer. This is typically caused by a remote worker "
        "hanging or bugs in the application. Check the logs of the remote "
        "worker before reporting an error. GLHF!"
    )


def test_usage_is_reckoned_as_seff_does():
    """sacct's rows for one job as Slurm 22.05.8 printed them on the testbed (jobacct_gather/linux;
    memory is not a consumable there, so AllocTRES has no mem), and a job on a cluster that
    allocates memory (the same TRES string format, with mem=): CPU efficiency is TotalCPU over
    Elapsed x AllocCPUS; memory is the largest step's TRESUsageInTot mem, the sum of its tasks'
    peaks, over AllocTRES's mem (contribs/seff/seff)."""
    text = "\n".join(
        [
            "1|00:06.873|4|4|billing=4,cpu=4,node=2|",
            "1.batch|00:00.035|4|2|cpu=2,mem=0,node=1|cpu=00:00:00,energy=0,fs/disk=58114,mem=12580K,pages=2,vmem=287776K",
            "1.0|00:06.833|3|4|cpu=4,mem=0,node=2|cpu=00:00:03,energy=0,fs/disk=3371674,mem=495188K,pages=15,vmem=501888K",
            "1.1|00:00.004|1|2|cpu=2,mem=0,node=2|energy=0",
            "2|1-02:03:04.100|100000|64|billing=64,cpu=64,gres/gpu=8,mem=500G,node=2|",
            "2.0|1-02:03:04|99990|64|cpu=64,gres/gpu=8,mem=500G,node=2|cpu=1-02:03:04,mem=100G",
            "2.1|00:00.100|5|64|cpu=64,gres/gpu=8,mem=500G,node=2|cpu=00:00:00,mem=10G",  # a smaller step after
            "3|INVALID|10|4|cpu=4,node=1|",  # sacct printing nothing usable: no figures, no error
        ]
    )
    used = parse_usage(text)
    assert used["1"].cpu_s == pytest.approx(6.873)
    assert used["1"].cpu_efficiency == pytest.approx(6.873 / (4 * 4))
    assert used["1"].mem_bytes == 495188 * 1024 and used["1"].mem_efficiency is None
    assert used["2"].cpu_s == pytest.approx(93784.1) and used["2"].cpu_efficiency == pytest.approx(93784.1 / 6.4e6)
    assert used["2"].mem_bytes == 100 << 30 and used["2"].mem_efficiency == pytest.approx(0.2)
    assert used["3"].cpu_s is None and used["3"].cpu_efficiency is None and used["3"].mem_bytes is None
