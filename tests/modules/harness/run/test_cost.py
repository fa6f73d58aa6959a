"""The cost of a sweep before it is submitted (docs/concepts/cost.md), counted by hand for the default
sweep on the example profile."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import SWEEPS, default_jobs

from harness.config.cluster_profile import load_profile
from harness.run import cost

EXAMPLE = SWEEPS / "clusters" / "example.yaml"


def test_the_cost_of_the_default_sweep_on_the_example_profile():
    """By hand: 8 one-node jobs (4 GPU counts x 2 launchers, the default set only) and 24 jobs
    each on 2, 4 and 8 nodes, 30 min each: (8 + 24 x 14) / 2 = 172 node-hours; GPU-hours: the
    one-node jobs hold 2 x (1+2+4+8) = 30 GPUs, the others 6 x 15 x 14 = 1260, so 645."""
    jobs = default_jobs()
    profile = load_profile(EXAMPLE)
    c = cost.estimate(jobs, profile)
    assert (c.jobs, c.bound_node_hours, c.bound_gpu_hours) == (80, 172.0, 645.0)
    # One job by hand, n2-g8-torchrun-default: four steps of 30 s start-up; ResNet-50 at 224 px
    # with AMP at an A100's 2,470 img/s per GPU, unscaled by the profile's peak (docs/concepts/cost.md),
    # 71 steps (10 warmup, 50 measured, 10 sync-free and one
    # untimed) of 64 images (weak, synthetic and real) and of 256 / 16 (strong); the collectives:
    # 28 sizes from 8 B to 1 GiB, 26 calls each, every call 30 us plus size x its bus factor over
    # its peak (docs/concepts/expected.md): the rings over the node's 8 NICs, 400 GB/s (all_reduce
    # 2(16-1)/16; all_gather and reduce_scatter (16-1)/16), all_to_all (15/16) at 93.75 GB/s (half
    # of each rank's S leaves the node, through its NIC's 50). Then each node's 8 ranks over
    # NVLink's 450 GB/s per GPU (factors 2 x 7/8 and 7/8), and the 2 ranks of each local index
    # across nodes, each on its NIC's 50 (factors 1 and 1/2). The transformer, a fifth step: the
    # 1.3b preset's N = 24 x (12 x 2048^2 + 4 x 2048) + 2 x 2048 + 50,304 x 2048 = 1,311,182,848 parameters and
    # 6N + 12 x 24 x 2048 x 2048 = 9,075,056,640 FLOPs per token, at 40% of the profile's stated
    # 989 TFLOP/s: 31 steps (5 warmup, 20 measured, 5 sync-free and one untimed) of 2 x 2048 tokens.
    job = next(j for j in jobs if j.name == "n2-g8-torchrun-default")
    sizes = [8 * 2**k for k in range(28)]
    allreduce = 26 * sum(30e-6 + s * 2 * 15 / 16 / 400e9 for s in sizes)
    others = 2 * 26 * sum(30e-6 + s * 15 / 16 / 400e9 for s in sizes)
    others += 26 * sum(30e-6 + s * 15 / 16 / 93.75e9 for s in sizes)
    intra = 26 * sum(30e-6 + s * 2 * 7 / 8 / 450e9 for s in sizes) + 3 * 26 * sum(
        30e-6 + s * 7 / 8 / 450e9 for s in sizes
    )
    inter = 26 * sum(30e-6 + s * 1 / 50e9 for s in sizes) + 3 * 26 * sum(30e-6 + s / 2 / 50e9 for s in sizes)
    transformer = 30 + 31 * 2 * 2048 / (0.4 * 989e12 / 9_075_056_640)
    gpu = 2470
    by_hand = 4 * 30 + 71 * 64 / gpu * 2 + 71 * 16 / gpu + allreduce + others + intra + inter + transformer
    seconds, sources = cost.job_seconds(job, profile)
    assert seconds == pytest.approx(by_hand, rel=1e-9) and 161 < by_hand < 162
    assert "resnet50 at 224 px, 2,470 img/s per GPU (an A100's, AMP)" in " ".join(sources)
    # the profile's peak moves the transformer's rate, not the ResNet's
    _, plain = cost.job_seconds(job, dataclasses.replace(profile, hardware=None))
    assert "resnet50 at 224 px, 2,470 img/s per GPU (an A100's, AMP)" in " ".join(plain)
    assert "(40% MFU of 312 TFLOP/s, an A100)" in " ".join(plain) and "(40% MFU of 989 TFLOP/s)" in " ".join(sources)
    # The profile's reference (8 GPUs, 1 node, 16,000 img/s weak) sets that job's rate instead.
    one = next(j for j in jobs if j.name == "n1-g8-torchrun-default")
    seconds, sources = cost.job_seconds(one, profile)
    weak = 71 * 64 / (16000 / 8)
    # NVLink: the profile's 450 GB/s per GPU
    inside = 26 * sum(30e-6 + s * 2 * 7 / 8 / 450e9 for s in sizes)
    inside += 3 * 26 * sum(30e-6 + s * 7 / 8 / 450e9 for s in sizes)
    assert seconds == pytest.approx(4 * 30 + weak + 71 * 64 / gpu + 71 * 32 / gpu + inside + transformer, rel=1e-9)
    assert "the profile's reference figures where they apply" in sources
    # A time limit caps every job's estimate.
    capped = cost.estimate([dataclasses.replace(job, time_limit_min=1)], profile)
    assert capped.estimate_node_hours == pytest.approx(2 * 60 / 3600)


def test_a_sweep_to_1024_nodes_of_8_is_planned_and_priced():
    """A user's largest shape: the default sweep to 1,024 nodes, ResNet-50 weak only (256 images
    divide no world past 32 nodes of 8). By hand: 11 node counts x 4 GPU counts x 2 launchers, the
    one-node jobs in the default set only and the rest in all 3: 8 + 10 x 24 = 248 jobs; each to
    its 30 min, (8 + 24 x (2 + 4 + ... + 1024)) / 2 = (8 + 24 x 2046) / 2 = 24,556 node-hours and
    (30 + 6 x 15 x 2046) / 2 = 92,085 GPU-hours. Every job is priced, the peaks of 8,192 ranks
    among them (docs/concepts/expected.md)."""
    from harness.config.sweepfile import load_sweep
    from harness.run.plan import expand

    sweep = load_sweep(SWEEPS / "default.yaml", max_nodes=1024, overrides=("workloads.synthetic.scaling=[weak]",))
    jobs = expand(sweep)
    assert len(jobs) == 248 and max(j.world_size for j in jobs) == 8192
    assert {j.name for j in jobs if j.world_size == 8192} == {
        f"n1024-g8-{launcher}-{nccl}" for launcher in ("torchrun", "srun") for nccl in ("default", "ib", "socket")
    }
    c = cost.estimate(jobs, load_profile(EXAMPLE))
    assert (c.jobs, c.bound_node_hours, c.bound_gpu_hours) == (248, 24556.0, 92085.0)
    largest = max(jobs, key=lambda j: (j.world_size, j.name))
    seconds, _ = cost.job_seconds(largest, load_profile(EXAMPLE))
    assert 0 < seconds < 30 * 60 and 0 < c.estimate_node_hours < c.bound_node_hours
