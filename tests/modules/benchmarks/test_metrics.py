"""The arithmetic: bus factors, message sizes, statistics, the correctness check, scaling
efficiency and speedup, launch detection and what the environment record keeps."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from benchmarks import collectives
from benchmarks.catalog import COLLECTIVES, WORLD
from benchmarks.collectives import CollectiveRun, Group, GroupCalls, bus_factor, message_sizes
from benchmarks.common import UsageError, captured_variables, detect_launch, format_size, parse_size, percentile
from harness.collect.gather import add_scaling
from harness.collect.summary import COLUMNS


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 64])
def test_bus_factors_follow_nccl_tests(n):
    # nccl-tests PERFORMANCE.md: all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall,
    # gather, scatter (n-1)/n; broadcast, reduce, sendrecv 1.
    assert bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    for name in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        assert bus_factor(name, n) == pytest.approx((n - 1) / n), name
    for name in ("broadcast", "reduce", "sendrecv"):
        assert bus_factor(name, n) == 1.0, name


def test_bus_factor_examples():
    assert bus_factor("all_reduce", 8) == 1.75
    assert bus_factor("all_reduce", 2) == 1.0
    assert bus_factor("all_gather", 4) == 0.75


@pytest.mark.parametrize(
    "text,value",
    [("8", 8), ("1K", 1024), ("64M", 64 * 2**20), ("1G", 2**30), ("128m", 128 * 2**20), ("4KB", 4096), (512, 512)],
)
def test_sizes_are_powers_of_1024(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("bad", ["", "K", "1.5M", "-1", "0", "1T", "ten"])
def test_bad_sizes(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_format_size():
    assert [format_size(n) for n in (8, 1024, 3 * 2**20, 2**30, 1000)] == ["8", "1K", "3M", "1G", "1000"]


def test_message_sizes_round_to_whole_elements_per_rank():
    assert message_sizes(8, 128 * 2**20, 2, 4, 1)[:3] == [8, 16, 32]
    assert message_sizes(8, 128 * 2**20, 2, 4, 1)[-1] == 128 * 2**20
    assert len(message_sizes(8, 128 * 2**20, 2, 4, 1)) == 25  # 2^3 .. 2^27, as nccl-tests -b 8 -e 128M
    # all_gather over 3 ranks of float32: multiples of 12 bytes, duplicates dropped
    assert message_sizes(8, 64, 2, 4, 3) == [12, 24, 60]
    with pytest.raises(UsageError):
        message_sizes(4, 8, 2, 4, 3)
    with pytest.raises(UsageError):
        message_sizes(8, 64, 1, 4, 1)


def test_percentile_matches_linear_interpolation():
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 10) == pytest.approx(1.4)
    assert percentile(values, 90) == pytest.approx(4.6)
    assert math.isnan(percentile([], 50))


ROOTED = ("reduce", "gather")  # only the root has an output to check


def _rank_of_3(name: str, rank: int = 1) -> CollectiveRun:
    count = 3 * 40
    group = Group(WORLD, GroupCalls(None, [0, 1, 2]), rank, 3, [[0, 1, 2]])
    return CollectiveRun(COLLECTIVES[name], None, "sum", count, torch.empty(count), torch.empty(count), group)


def _checked_rank_of_3(name: str) -> CollectiveRun:
    """Rank 1 of 3, or the root where only the root's output is defined."""
    return _rank_of_3(name, 0 if name in ROOTED else 1)


@pytest.mark.parametrize("name", list(COLLECTIVES))
@pytest.mark.parametrize("in_place", [True, False])
@pytest.mark.parametrize("check_slice", [2**20, 7])
def test_the_check_counts_a_wrong_element(name, in_place, check_slice, monkeypatch):
    """Rank 1 of 3 (the root of reduce and gather): give it the right output, then corrupt one
    element, as a bad reduction would. Checked in slices of 7 elements too, which cross
    all_gather's chunks of 40 and alltoallv's shares of 20, 40 and 60 at odd places."""
    monkeypatch.setattr(collectives, "CHECK_SLICE", check_slice)
    coll = _checked_rank_of_3(name)
    target = coll.output(in_place)
    target.copy_(coll.expected(0, target.numel()).to(target.dtype))
    assert coll.wrong(in_place) == 0
    target[5] += 1
    target[-1] += 1
    assert coll.wrong(in_place) == 2


@pytest.mark.parametrize("name", [c.name for c in COLLECTIVES.values() if c.reduces])
@pytest.mark.parametrize("in_place", [True, False])
def test_the_check_sees_a_missing_contribution(name, in_place):
    """A rank that contributed nothing to a reduction: every element is wrong."""
    coll = _checked_rank_of_3(name)
    target = coll.output(in_place)
    target.copy_((coll.expected(0, target.numel()) - 1).to(target.dtype))
    assert coll.wrong(in_place) == target.numel()


@pytest.mark.parametrize("name", ROOTED)
def test_only_the_root_of_reduce_and_gather_is_checked(name):
    """Rank 1's buffer after reduce or gather is undefined (NCCL leaves it; gloo may use it as
    scratch), so there is nothing to count; the root's every element is counted."""
    coll = _rank_of_3(name, 1)
    assert coll.expected(0, 10) is None
    coll.output(True).fill_(-7)
    assert coll.wrong(True) == 0
    root = _rank_of_3(name, 0)
    root.output(True).fill_(-7)
    assert root.wrong(True) == root.output(True).numel()


def _world_of(n: int, dtype: torch.dtype, op: str = "sum", count: int = 600) -> CollectiveRun:
    """Rank 0 of an all-reduce over n ranks, with no process group: its check alone."""
    group = Group(WORLD, GroupCalls(None, list(range(n))), 0, n, [list(range(n))])
    buffers = torch.empty(count, dtype=dtype), torch.empty(count, dtype=dtype)
    return CollectiveRun(COLLECTIVES["all_reduce"], None, op, count, *buffers, group)


def _rounded_sum(coll: CollectiveRun) -> torch.Tensor:
    """What a ring gives: each element's sum taken one rank at a time in the dtype, from a
    starting rank that moves with the element, as a ring's chunks start at different ranks."""
    n, count, dtype = coll.n, coll.count, coll.output(True).dtype
    idx = torch.arange(count)
    acc = torch.zeros(count, dtype=dtype)
    for step in range(n):
        ranks = (idx + step) % n
        values = (idx + ranks) % collectives.PATTERN_MAX + 1  # _pattern(rank, idx) for each element's rank
        acc = (acc.to(torch.float32) + values.to(torch.float32)).to(dtype)
    return acc


@pytest.mark.parametrize(
    "dtype,n,want",
    [
        # every sum of the pattern (values 1-5) is a whole number of at most 5n: exact while
        # 5n <= 2**p, p the significand's bits (bf16 8, fp16 11, fp32 24)
        (torch.bfloat16, 51, 0.0),
        (torch.float16, 409, 0.0),
        (torch.float32, 8192, 0.0),
        # past that, gamma(n-1) = (n-1)u / (1 - (n-1)u), u = 2**-p: bf16 at 52 ranks 51/256 / (1 - 51/256)
        (torch.bfloat16, 52, (51 / 256) / (1 - 51 / 256)),
        (torch.float16, 1024, (1023 / 2048) / (1 - 1023 / 2048)),
        # (n-1)u >= 1/2: the bound reaches the value itself, and the check cannot judge
        (torch.bfloat16, 129, None),
        (torch.float16, 1025, None),
    ],
)
def test_the_checks_tolerance_per_dtype(dtype, n, want):
    got = collectives.tolerance(dtype, n, "sum")
    assert got == (None if want is None else pytest.approx(want)), (dtype, n, got)
    assert collectives.tolerance(dtype, n, "max") == collectives.tolerance(dtype, n, None) == 0.0  # nothing rounds


@pytest.mark.parametrize(
    "dtype,n", [(torch.bfloat16, 51), (torch.bfloat16, 128), (torch.float16, 409), (torch.float16, 1024)]
)
def test_rounding_of_bf16_and_fp16_sums_is_not_called_wrong(dtype, n):
    """A sum rounded in the dtype at every step of a ring passes at every size the check judges;
    a rank's output that never received the others' (its own values) is wrong at every element,
    and, where sums are exact, so is one contribution missing."""
    coll = _world_of(n, dtype)
    target = coll.output(True)
    target.copy_(_rounded_sum(coll))
    exact = coll.expected(0, coll.count)
    assert (coll.tolerance == 0) == torch.equal(target.to(torch.float64), exact), "exact where said, rounded elsewhere"
    assert coll.wrong(True) == 0
    target.copy_(collectives._pattern(0, torch.arange(coll.count)).to(dtype))
    assert coll.wrong(True) == coll.count
    if coll.tolerance == 0:
        target.copy_((exact - collectives._pattern(n - 1, torch.arange(coll.count))).to(dtype))
        assert coll.wrong(True) == coll.count


# Bytes each rank sends over its link for a message of S bytes, counted by hand:
# all_to_all: S/n to each of the n-1 others; alltoallv: all but its 1 unit of n(n+1)/2 units;
# gather and scatter: the root receives or sends S/n from or to each of n-1 others; reduce: the
# root receives S (a ring or tree moves S over each link); sendrecv: S to the next rank.
HAND = {
    2: {"all_to_all": 1 / 2, "alltoallv": 2 / 3, "gather": 1 / 2, "scatter": 1 / 2, "reduce": 1, "sendrecv": 1},
    4: {"all_to_all": 3 / 4, "alltoallv": 9 / 10, "gather": 3 / 4, "scatter": 3 / 4, "reduce": 1, "sendrecv": 1},
}


@pytest.mark.parametrize("n", [2, 4])
def test_the_new_bus_factors_are_the_bytes_counted_by_hand(n):
    for name, share in HAND[n].items():
        assert bus_factor(name, n) == pytest.approx(share), name
    assert bus_factor("alltoallv", 1) == bus_factor("all_to_all", 1) == 0


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_alltoallv_sends_what_its_peers_expect_and_its_bus_factor_is_what_leaves_a_rank(n):
    count = n * (n + 1) // 2 * 5
    layouts = [
        COLLECTIVES["alltoallv"].buffers(torch.empty(count), torch.empty(count), count, r, n).layout for r in range(n)
    ]
    for r, (receives, sends) in enumerate(layouts):
        assert sum(sends) == sum(receives) == count
        assert [layouts[p][1][r] for p in range(n)] == receives  # what p sends r is what r takes from p
        assert (count - sends[r]) / count == pytest.approx(bus_factor("alltoallv", n))
        assert max(sends) == n * min(sends)  # uneven: the largest share n times the smallest


def scaled(rows: list[dict]) -> pd.DataFrame:
    columns = {c: [r[c] for r in rows] for c in COLUMNS}
    add_scaling(columns)
    return pd.DataFrame(columns).set_index("job").astype({"speedup": float, "efficiency": float})


def _training_row(**kw):
    row = dict.fromkeys(COLUMNS)
    row.update(
        workload="synthetic",
        launcher="torchrun",
        backend="gloo",
        device="cpu",
        nccl_config="default",
        model="resnet18",
        status="COMPLETED",
    )
    row.update(kw)
    return row


def test_weak_scaling_efficiency_is_per_gpu_throughput_over_the_smallest_world_size():
    rows = [
        _training_row(job="a", scaling="weak", nodes=1, gpus_per_node=1, world_size=1, images_per_s=100.0),
        _training_row(job="b", scaling="weak", nodes=1, gpus_per_node=2, world_size=2, images_per_s=190.0),
        _training_row(job="c", scaling="weak", nodes=2, gpus_per_node=2, world_size=4, images_per_s=360.0),
        _training_row(
            job="d", scaling="weak", nodes=4, gpus_per_node=2, world_size=8, images_per_s=None, status="FAILED"
        ),
        _training_row(
            job="e", workload="allreduce", scaling="", nodes=1, gpus_per_node=1, world_size=1, busbw_gbps=1.0
        ),
    ]
    df = scaled(rows)
    assert df.loc["a", "efficiency"] == 1.0
    assert df.loc["b", "efficiency"] == pytest.approx(0.95)  # 95 per GPU / 100
    assert df.loc["c", "efficiency"] == pytest.approx(0.90)  # 90 per GPU / 100
    assert df.loc["c", "speedup"] == pytest.approx(3.6)
    assert math.isnan(df.loc["d", "efficiency"]) and math.isnan(df.loc["e", "efficiency"])


def test_strong_scaling_speedup_and_efficiency():
    rows = [
        _training_row(job="a", scaling="strong", nodes=1, gpus_per_node=2, world_size=2, images_per_s=200.0),
        _training_row(job="b", scaling="strong", nodes=2, gpus_per_node=2, world_size=4, images_per_s=300.0),
        _training_row(job="c", scaling="strong", nodes=4, gpus_per_node=2, world_size=8, images_per_s=400.0),
        # another NCCL set is another configuration with its own baseline
        _training_row(
            job="d", scaling="strong", nodes=1, gpus_per_node=2, world_size=4, images_per_s=50.0, nccl_config="socket"
        ),
    ]
    df = scaled(rows)
    assert df.loc["b", "speedup"] == pytest.approx(1.5)
    assert df.loc["b", "efficiency"] == pytest.approx(0.75)  # 1.5 / (4 / 2)
    assert df.loc["c", "speedup"] == pytest.approx(2.0)
    assert df.loc["c", "efficiency"] == pytest.approx(0.5)
    assert df.loc["d", "speedup"] == 1.0


def test_launch_detection():
    assert detect_launch({}) is None
    # The batch shell has SLURM_PROCID but is not a step: not a launch.
    assert detect_launch({"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "7"}) is None
    torchrun = detect_launch(
        {
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "1",
            "MASTER_ADDR": "h",
            "MASTER_PORT": "1",
            "TORCHELASTIC_RUN_ID": "x",
        }
    )
    assert (torchrun.rank, torchrun.local_rank, torchrun.node_rank, torchrun.launcher) == (3, 1, 1, "torchrun")
    srun = detect_launch(
        {
            "SLURM_PROCID": "5",
            "SLURM_NTASKS": "8",
            "SLURM_LOCALID": "1",
            "SLURM_NODEID": "2",
            "SLURM_NNODES": "4",
            "SLURM_STEP_ID": "0",
            "MASTER_ADDR": "h",
            "MASTER_PORT": "1",
        }
    )
    assert (srun.rank, srun.world_size, srun.local_rank, srun.local_world_size, srun.node_rank, srun.launcher) == (
        5,
        8,
        1,
        2,
        2,
        "srun",
    )


@pytest.mark.parametrize(
    "env,words",
    [
        ({"RANK": "abc", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, ["RANK", "'abc'"]),
        ({"RANK": "0", "WORLD_SIZE": "-2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, ["WORLD_SIZE", "negative"]),
        ({"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, ["rank 4", "world size 4"]),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1"}, ["MASTER_ADDR"]),
        (
            {"SLURM_PROCID": "0", "SLURM_STEP_ID": "1", "SLURM_LOCALID": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
            ["SLURM_NTASKS"],
        ),
    ],
)
def test_bad_launch_environment_names_the_variable(env, words):
    with pytest.raises(UsageError) as info:
        detect_launch(env)
    for word in words:
        assert word in str(info.value)


def test_environment_record_keeps_only_launch_facts_and_redacts_secrets():
    env = {
        "NCCL_IB_HCA": "mlx5_0",
        "NCCL_SOCKET_IFNAME": "ib0",
        "SLURM_JOB_ID": "42",
        "GLOO_SOCKET_IFNAME": "eth0",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "OMP_NUM_THREADS": "4",
        "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "NCCL_API_TOKEN": "tok",
        "SLURM_DB_PASSWORD": "pw",
        "TORCH_HUB_KEY": "k",
        "PATH": "/bin",
        "WANDB_API_KEY": "w",
    }
    got = captured_variables(env)
    assert got == {
        "NCCL_IB_HCA": "mlx5_0",
        "NCCL_SOCKET_IFNAME": "ib0",
        "SLURM_JOB_ID": "42",
        "GLOO_SOCKET_IFNAME": "eth0",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "OMP_NUM_THREADS": "4",
        "NCCL_API_TOKEN": "<redacted>",
        "SLURM_DB_PASSWORD": "<redacted>",
        "TORCH_HUB_KEY": "<redacted>",
    }
