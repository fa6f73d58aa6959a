"""The CUDA paths, checked without a GPU: no GPU exists here, so torch.cuda's answers are faked
where a choice depends on them (which GPU a rank takes, what the process group is given), and
the local executor's GPU split is a pure function of the GPUs it sees. Everything else about
CUDA runs only on a GPU machine; README says what to expect there."""

from __future__ import annotations

import pytest
import torch

from benchmarks import runtime
from benchmarks.common import Launch, UsageError
from harness.executors.local import gpus_for
from harness.run.plan import Job


@pytest.mark.parametrize(
    ("local_rank", "local_world", "visible", "index"),
    [
        (3, 4, 4, 3),  # torchrun, or srun without binding: every GPU of the node is visible
        (3, 4, 1, 0),  # srun --gpus-per-task=1: each task sees its own GPU as 0
        (5, 8, 4, 1),  # srun --gpu-bind=closest: each task sees its socket's four
        (1, 2, 8, 1),  # more GPUs than ranks
    ],
)
def test_a_rank_takes_its_gpu_among_those_it_sees(local_rank, local_world, visible, index):
    assert runtime.gpu_index(local_rank, local_world, visible) == index


@pytest.mark.parametrize(("local_world", "visible", "words"), [(8, 3, "do not divide"), (2, 0, "sees no GPU")])
def test_gpus_that_fit_no_binding_are_refused_with_a_line(local_world, visible, words, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2"[: 2 * visible - 1] if visible else "")
    with pytest.raises(UsageError, match=words) as exc:
        runtime.gpu_index(1, local_world, visible)
    assert "CUDA_VISIBLE_DEVICES=" in str(exc.value) and "\n" not in str(exc.value)


def test_the_device_and_the_process_group_get_the_rank_s_gpu(monkeypatch):
    """srun with --gpus-per-task=1: local rank 3 of 4 sees one GPU, so it sets and hands NCCL
    cuda:0 (it asked for cuda:3 before, which does not exist in that task)."""
    set_to, init_kwargs = [], {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", set_to.append)
    monkeypatch.setattr(runtime.dist, "init_process_group", lambda **kw: init_kwargs.update(kw))
    launch = Launch(rank=7, local_rank=3, world_size=8, local_world_size=4, node_rank=1, launcher="srun")
    device = runtime.resolve_device("auto", launch)
    assert device == torch.device("cuda", 0) and set_to == [0]
    runtime.init_process_group(launch, "nccl", device, 60)
    assert init_kwargs["device_id"] == torch.device("cuda", 0) and init_kwargs["rank"] == 7


def _job(device: str, nodes: int, gpus_per_node: int) -> Job:
    return Job(
        name=f"n{nodes}-g{gpus_per_node}",
        config_hash="0",
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        launcher="torchrun",
        nccl_config="default",
        nccl_env=(),
        env=(),
        device=device,
        backend="auto",
        time_limit_min=10.0,
        runs=(),
    )


def test_the_local_executor_never_puts_two_ranks_on_one_gpu():
    """Each emulated node gets GPUs of its own; too few GPUs fail a cuda job and send an auto job
    to the CPU (no GPU visible to it) with a warning, rather than every node on cuda:0."""
    assert gpus_for(_job("auto", 2, 2), ["0", "1", "2", "3"]) == (["0", "1", "2", "3"], None)
    gpus, warning = gpus_for(_job("auto", 2, 1), ["0"])
    assert gpus == [] and "2 ranks and 1 GPUs" in str(warning) and "CPU" in str(warning)
    assert gpus_for(_job("cuda", 2, 1), ["0"]) == (None, "needs 2 GPUs, 1 visible on this machine")
    assert gpus_for(_job("auto", 2, 1), []) == (None, None)  # no GPU: auto is the CPU anyway
