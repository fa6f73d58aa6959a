"""The transformer workload (benchmarks/transformer.py): its FLOPs per token and MFU against hand
counts, and real gloo ranks under DDP and FSDP2 on 1, 2 and 4 ranks."""

from __future__ import annotations

import pytest
from conftest import bench, read_json

from benchmarks.transformer import Decoder, Shape, counted_parameters, flops_per_token, mfu

# One small shape, counted by hand. Per block: qkv 3D^2 and the output projection D^2, the MLP's
# D x 4D and 4D x D (8D^2), two LayerNorms of 2D: 12D^2 + 4D = 12,416 for D = 32. Two blocks
# 24,832, the final LayerNorm 64, the tied token embedding V x D = 2,048 (it is the output
# projection's matmul); the position table (T x D) is a lookup and left out: N = 26,944.
# FLOPs per token: 6N = 161,664, and attention's 12 x L x D x T = 12 x 2 x 32 x 16 = 12,288:
# 173,952.
SMALL = Shape(layers=2, width=32, heads=4, seq_len=16, vocab=64)
SMALL_ARGS = ["--layers", "2", "--width", "32", "--heads", "4", "--seq-len", "16", "--vocab", "64"]


def test_flops_per_token_against_a_hand_count():
    model = Decoder(SMALL)
    assert counted_parameters(model) == 26_944
    assert sum(p.numel() for p in model.parameters()) == 26_944 + 16 * 32  # with the position table
    assert flops_per_token(26_944, SMALL) == 173_952


def test_mfu_against_a_hand_computation_and_null_without_a_peak():
    # 1,000 tokens/s per GPU x 173,952 FLOPs = 1.73952e8 FLOP/s, against a stated 0.5 TFLOP/s
    assert mfu(1000.0, 173_952, 0.5) == pytest.approx(1.73952e8 / 0.5e12)
    assert mfu(1000.0, 173_952, None) is None


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_real_ranks_report_tokens_flops_and_mfu(tmp_path, parallel, ranks):
    out = tmp_path / "t.json"
    bench(
        "run", "transformer", *SMALL_ARGS, "--parallel", parallel, "--batch-size", "2", "--steps", "3",
        "--warmup-steps", "0", "--sync-free-steps", "1", "--peak-tflops", "0.5", "--nproc", str(ranks),
        "--json", str(out),
    )  # fmt: skip
    res = read_json(out)
    assert res["workload"] == "transformer" and res["world_size"] == ranks and res["params"]["parallel"] == parallel
    assert res["n_params"] == 26_944 and res["flops_per_token"] == 173_952
    tokens = 2 * 16 * ranks * 3  # sequences x tokens x ranks x steps
    assert res["tokens_per_s"] > 0
    assert res["tokens_per_s"] == pytest.approx(tokens / res["measured_time_s"], rel=1e-6)
    assert res["tokens_per_s_per_gpu"] == pytest.approx(res["tokens_per_s"] / ranks, rel=1e-6)
    assert res["mfu"] == pytest.approx(res["tokens_per_s_per_gpu"] * 173_952 / 0.5e12, rel=1e-6)
    assert res["achieved_tflops_per_gpu"] == pytest.approx(res["mfu"] * 0.5, rel=1e-6)
    # the breakdown: a compute-only step from the sync-free steps, and what the step lost
    assert 0 < res["compute_time_ms"] <= res["slowest_compute_time_ms"]
    # results keep 7 significant digits (benchmarks.common.json_safe), each rounded on its own
    exposed = max(0.0, res["step_time_ms"] - res["slowest_compute_time_ms"])
    assert res["exposed_comm_ms"] == pytest.approx(exposed, rel=1e-5, abs=1e-3)
    assert 0 <= res["exposed_comm_fraction"] < 1 and 0 <= res["imbalance_fraction"] < 1
    assert len(res["samples"]["step_time_ms"]) == 3


@pytest.mark.slow
def test_without_a_peak_mfu_is_null_and_without_sync_free_steps_no_breakdown(tmp_path):
    out = tmp_path / "t.json"
    bench(
        "run", "transformer", *SMALL_ARGS, "--steps", "2", "--warmup-steps", "0", "--sync-free-steps", "0",
        "--nproc", "1", "--json", str(out),
    )  # fmt: skip
    res = read_json(out)
    assert res["mfu"] is None and res["params"]["peak_tflops"] is None and res["achieved_tflops_per_gpu"] > 0
    assert res["compute_time_ms"] is None and res["exposed_comm_fraction"] is None


@pytest.mark.parametrize(
    "args,words",
    [
        (["--width", "30", "--heads", "4"], "--width 30 is not divisible by --heads 4"),
        (["--layers", "0"], "--layers must be at least 1, found 0"),
        (["--peak-tflops", "-3"], "--peak-tflops must be a positive number of TFLOP/s, found -3.0"),
        (["--parallel", "fsdp", "--amp", "fp16"], "--amp fp16 with --parallel fsdp needs a sharded gradient scaler"),
        (["--global-batch", "3", "--nproc", "2"], "--global-batch 3 is not divisible by the world size 2"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, words):
    r = bench("run", "transformer", *args, check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.describe()
