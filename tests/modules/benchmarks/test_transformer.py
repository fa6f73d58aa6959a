"""The transformer workload (benchmarks/transformer.py): its FLOPs per token and MFU against hand
counts, and real gloo ranks under DDP and FSDP2 on 1, 2 and 4 ranks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SWEEPS, bench, check_breakdown, read_json, run

from benchmarks import memory
from benchmarks.catalog import PRESETS, decoder_params
from benchmarks.transformer import Decoder, Shape, counted_parameters, flops_per_token, mfu
from harness.analysis.sides import records

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
    assert decoder_params(SMALL) == 26_944  # the count the cost estimate makes without torch


def test_the_torch_free_count_agrees_with_the_model_for_the_small_preset_and_a_preset_by_hand():
    assert decoder_params(PRESETS["small"]) == counted_parameters(Decoder(PRESETS["small"]))
    # GPT-3 125M's shape (12 x 768, GPT-2's vocabulary padded to 50,304): 85.0M in the blocks,
    # 38.6M in the tied embedding, 123.6M in all
    assert decoder_params(PRESETS["125m"]) == 12 * (12 * 768**2 + 4 * 768) + 2 * 768 + 50_304 * 768 == 123_606_528


def test_mfu_against_a_hand_computation_and_null_without_a_peak():
    # 1,000 tokens/s per GPU x 173,952 FLOPs = 1.73952e8 FLOP/s, against a stated 0.5 TFLOP/s
    assert mfu(1000.0, 173_952, 0.5) == pytest.approx(1.73952e8 / 0.5e12)
    assert mfu(1000.0, 173_952, None) is None


# FSDP on 2 and 4 ranks runs in the sweep below (`mixed_run`: 1 and 2 nodes of 2 ranks), whose
# tests check the same hand counts and MFU against a stated peak
@pytest.mark.slow
@pytest.mark.parametrize(("parallel", "ranks"), [("ddp", 1), ("ddp", 2), ("ddp", 4), ("fsdp", 1)])
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
    check_breakdown(res)
    assert len(res["samples"]["step_time_ms"]) == 3
    # what a step sends (test_what_fsdp_sends_is_what_gloo_was_given counts it by hand): DDP
    # all-reduces the 27,456 parameters' fp32 gradients, the position table's too; FSDP on one
    # rank all-gathers both blocks twice and the root once in fp32 (--amp off), reduce-scatters
    # every unit once, and sends none of it
    traffic = res["traffic"]
    if parallel == "ddp":
        assert traffic["all_reduce_bytes"] == 4 * 27_456 and traffic["policy"] is None
        assert traffic["sent_bytes_per_rank"] == round(2 * (ranks - 1) / ranks * 4 * 27_456)
    else:
        assert traffic["policy"] == {"param_dtype": "fp32", "reduce_dtype": "fp32"}
        assert (traffic["all_gather_bytes"], traffic["reduce_scatter_bytes"]) == (4 * 52_288, 4 * 27_456)
        assert traffic["sent_bytes_per_rank"] == 0


@pytest.mark.slow
def test_without_a_peak_mfu_is_null_and_one_rank_exposes_no_communication(tmp_path):
    """One rank communicates nothing: its breakdown is all compute by construction, with no
    sync-free step run (docs/concepts/breakdown.md); a one-rank job once showed 18.6% exposed."""
    out = tmp_path / "t.json"
    bench(
        "run", "transformer", *SMALL_ARGS, "--steps", "2", "--warmup-steps", "0", "--sync-free-steps", "3",
        "--nproc", "1", "--json", str(out),
    )  # fmt: skip
    res = read_json(out)
    assert res["mfu"] is None and res["params"]["peak_tflops"] is None and res["achieved_tflops_per_gpu"] > 0
    assert res["compute_time_ms"] == res["slowest_compute_time_ms"] == res["step_time_ms"]
    assert (res["exposed_comm_ms"], res["exposed_comm_fraction"], res["imbalance_fraction"]) == (0, 0, 0)
    assert res["compute_fraction"] == 1 and res["breakdown_note"] is None


TRAFFIC_RANKS = Path(__file__).with_name("fsdp_traffic_ranks.py")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("ranks", "param", "reduce", "gathered", "scattered"),
    [
        # A block is 12,416 parameters, the root (token and position tables, final norm) 2,624;
        # a step all-gathers each block twice and the root once, 52,288, and reduce-scatters
        # each once, 27,456
        (2, "bf16", "fp32", 2 * 52_288, 4 * 27_456),
        (2, "fp32", "fp32", 4 * 52_288, 4 * 27_456),
        # Over 3 ranks each parameter's first dimension is padded to a multiple of 3: a block's
        # output projection 33 x 32, MLP 129 x 32 and 33 x 128, norms 4 x 33, qkv 96 x 32 as it is,
        # 12,612; the root's tables 66 x 32 and 18 x 32 and its norm 2 x 33, 2,754
        (3, "fp32", "bf16", 4 * (4 * 12_612 + 2_754), 2 * (2 * 12_612 + 2_754)),
    ],
)
def test_what_fsdp_sends_is_what_gloo_was_given(ranks, param, reduce, gathered, scattered):
    """The bytes a result states for an FSDP step (step_traffic) against what the step asked
    gloo to carry, summed from torch's profiler (fsdp_traffic_ranks.py), and against a hand
    count: the fp32 policy all-gathers twice the bf16 one's bytes."""
    r = run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
         str(TRAFFIC_RANKS), param, reduce],
        env={"PYTHONPATH": str(ROOT)}, timeout=300,
    )  # fmt: skip
    out = json.loads(next(line for line in r.stdout.splitlines() if line.startswith("{")))
    seen, stated = out["seen"], out["expected"]
    assert (seen["all_gather_bytes"], seen["reduce_scatter_bytes"]) == (gathered, scattered), seen["calls"]
    assert (stated["all_gather_bytes"], stated["reduce_scatter_bytes"]) == (gathered, scattered)
    assert stated["sent_bytes_per_rank"] == round((ranks - 1) / ranks * (gathered + scattered))


def test_the_memory_estimate_by_hand():
    """The small shape of tests/conftest.py's mixed_run, batch 2, one rank, fp32 (docs: the
    estimate in benchmarks/memory.py). N = 2 x (12 x 32² + 4 x 32) + 2 x 32 + 64 x 32 = 26,944,
    and the position table 16 x 32 = 512: 27,456 parameters, 20 bytes each under DDP (weights,
    gradients, AdamW's two moments, DDP's buckets) 549,120. s·b·h = 16 x 2 x 32 = 1,024:
    per layer 80 x 1,024 + the log-sum-exp 4 x 4 x 16 x 2 = 81,920 + 512 = 82,432, x 2 layers
    164,864; the backward's 9 x 1,024 x 4 = 36,864; the final norm's 2 x 1,024 x 4 = 8,192;
    logits 18 x 2 x 16 x 64 = 36,864. In all 795,904. Under FSDP over 4 ranks the state is a
    quarter of 16 bytes, 109,824, and the root and two blocks (here all of it) 8 x 27,456 =
    219,648. Under autocast the state is 22 bytes, 604,032, a layer 44 x 1,024 + 512 = 45,568,
    the backward's 18,432. No s x s scores: scaled_dot_product_attention never holds them."""
    shape = Shape(layers=2, width=32, heads=4, seq_len=16, vocab=64)
    rest = 164_864 + 36_864 + 8_192 + 36_864
    assert memory.transformer_bytes(shape, 2, 1, fsdp=False, half=False) == 549_120 + rest == 795_904
    assert memory.transformer_bytes(shape, 2, 4, fsdp=True, half=False) == 109_824 + 219_648 + rest
    assert memory.transformer_bytes(shape, 2, 1, fsdp=False, half=True) == 604_032 + 91_136 + 18_432 + 8_192 + 36_864


def test_the_7b_class_preset_fits_eight_80_gb_gpus_under_fsdp_and_not_under_ddp(tmp_path):
    """GPT-3 6.7B's shape: 32 x (12 x 4,096² + 4 x 4,096) + 2 x 4,096 + 50,304 x 4,096 =
    6,649,028,608 parameters. Under FSDP over 8 ranks, a sequence of 2,048 tokens per rank under
    bf16 autocast, the estimate is 45.5 GB a rank (16 bytes a parameter sharded, the root and two
    blocks gathered, autocast's copies, the activations): an 80 GB GPU holds it, and with
    activation checkpointing 4 sequences. Under DDP every rank holds all 20 bytes a parameter,
    133 GB, and it is refused. A sweep of it plans on the example profile's 8-GPU nodes."""
    shape = PRESETS["6.7b"]
    assert decoder_params(shape) == 6_649_028_608
    assert memory.transformer_bytes(shape, 1, 8, fsdp=True, half=True) == 45_462_683_648 < 80e9
    assert memory.transformer_bytes(shape, 4, 8, fsdp=True, half=True, checkpointed=True) < 80e9
    assert memory.transformer_bytes(shape, 4, 8, fsdp=True, half=True) > 80e9
    assert memory.transformer_bytes(shape, 1, 8, fsdp=False, half=True) > 20 * 6_649_028_608 > 80e9
    r = bench(
        "sweep", "--executor", "slurm", "--cluster", str(SWEEPS / "clusters" / "example.yaml"), "--dry-run",
        "--set", "workloads.transformer.preset=6.7b", "--set", "workloads.transformer.parallel=fsdp",
        "--set", "workloads.transformer.batch_size=1", "--set", "nodes=[1]", "--set", "gpus_per_node=[8]",
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert "a decoder of 6649.0M parameters" in r.stdout, r.describe()
    script = next((tmp_path / "run" / "jobs").glob("*/job.sbatch")).read_text()
    assert "--preset 6.7b --parallel fsdp" in script and "--param-dtype auto --reduce-dtype fp32" in script


def test_attention_scores_are_not_counted():
    """A long sequence: 4,096 tokens, 32 heads, width 1,024, batch 8, two layers, autocast.
    Korthikanti's 5·a·s²·b bytes a layer, the scores and softmax a plain attention holds, would
    be 40 GiB; scaled_dot_product_attention's fused kernels hold none of it, so the estimate,
    4.5 GiB, grows with s, not s²: doubling s less than doubles it."""
    short, long = (Shape(layers=2, width=1024, heads=32, seq_len=s, vocab=512) for s in (4096, 8192))
    once, twice = (memory.transformer_bytes(x, 8, 1, fsdp=False, half=True) for x in (short, long))
    assert 4 * 2**30 < once < 5 * 2**30 and twice < 2 * once


@pytest.mark.parametrize(
    "args,words",
    [
        (["allreduce", "-b", "64G", "-e", "64G"], "--max-bytes 64G needs about 128.0 GiB per rank, more than the"),
        (["transformer", "--width", "16384", "--layers", "64"], "lower --batch-size, --seq-len, --width or --layers"),
        (["gemm", "--size", "65536"], "gemm of 65536x65536 float32 needs about 52.0 GiB per rank, more than the"),
    ],
)
def test_what_cannot_fit_is_refused_before_it_allocates(args, words):
    """Found by the allocator, it was a 50-line traceback per rank, or the OOM killer."""
    r = bench("run", *args, check=False, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and words in lines[0], r.describe()


@pytest.mark.parametrize(
    "args,words",
    [
        (["--width", "30", "--heads", "4"], "--width 30 is not divisible by --heads 4"),
        (["--layers", "0"], "--layers must be at least 1, found 0"),
        (["--peak-tflops", "-3"], "--peak-tflops -3: give the CPU's peak dense TFLOP/s, from 0.001"),
        (["--peak-tflops", "1e-320"], "give the CPU's peak dense TFLOP/s, from 0.001"),
        (["--device", "cuda", "--peak-tflops", "0.5"], "--peak-tflops 0.5: give the GPU's peak dense TFLOP/s, from 1"),
        (["--lr", "nan"], "--lr: 'nan': give a finite number above 0"),
        (["--timeout", "0"], "--timeout: '0': give a finite number above 0"),
        (["--parallel", "fsdp", "--amp", "fp16"], "--amp fp16 with --parallel fsdp needs a sharded gradient scaler"),
        (["--global-batch", "3", "--nproc", "2"], "--global-batch 3 is not divisible by the world size 2"),
        (["--param-dtype", "bf16"], "--param-dtype is FSDP's mixed-precision policy; with --parallel ddp"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, words):
    r = bench("run", "transformer", *args, check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.describe()


@pytest.fixture
def sweep_run(mixed_run):
    """The transformer as a sweep's workload, run as a user runs a sweep (tests/conftest.py,
    `mixed_run`): 1 and 2 emulated nodes of 2 gloo ranks, FSDP2, weak and strong scaling, the
    small shape counted by hand above, beside the collectives."""
    return mixed_run


@pytest.mark.slow
def test_a_sweep_s_transformer_rows_scale_by_tokens(sweep_run):
    out, r = sweep_run
    assert "Transformer throughput" in r.stdout
    import pandas as pd

    t = pd.read_csv(out / "summary.csv")
    t = t[t["workload"] == "transformer"]
    assert (t["status"] == "COMPLETED").all()
    assert set(zip(t["scaling"], t["nodes"])) == {("weak", 1), ("weak", 2), ("strong", 1), ("strong", 2)}
    assert (t["n_params"] == 26_944).all() and (t["flops_per_token"] == 173_952).all()
    assert (t["tokens_per_s"] > 0).all() and t["images_per_s"].isna().all()
    assert t["mfu"].isna().all() and t["peak_tflops_per_gpu"].isna().all()  # no peak stated, none guessed
    # weak: 2 sequences per rank, on 2 and 4 ranks; strong: 4 sequences over the world
    assert sorted(t["global_batch"]) == [4, 4, 4, 8]
    # speedup and efficiency from tokens/s against the one-node row of each scaling mode
    for _, rows in t.groupby("scaling"):
        base = rows[rows["nodes"] == 1].iloc[0]
        two = rows[rows["nodes"] == 2].iloc[0]
        assert two["speedup"] == pytest.approx(two["tokens_per_s"] / base["tokens_per_s"], rel=1e-6)
        assert two["efficiency"] == pytest.approx(two["speedup"] / 2, rel=1e-6)
    # the breakdown of each step, as for ResNet
    for row in records(t):
        check_breakdown(row)
    # what a step sends, in the summary: FSDP in fp32 (amp off), no padding on 2 or 4 ranks, of
    # which a rank sends 1/2 and 3/4 (test_what_fsdp_sends_is_what_gloo_was_given)
    assert (t["step_all_gather_bytes"] == 4 * 52_288).all() and (t["step_reduce_scatter_bytes"] == 4 * 27_456).all()
    assert (t["step_all_reduce_bytes"] == 0).all()
    assert sorted(zip(t["world_size"], t["step_sent_bytes"])) == [(2, 159_488)] * 2 + [(4, 239_232)] * 2
    points = pd.read_csv(out / "plots" / "transformer_weak_scaling.csv")
    per_gpu = points[points["metric"] == "tokens_per_s_per_gpu"]
    weak = t[t["scaling"] == "weak"]
    assert sorted(zip(per_gpu["x"], per_gpu["y"].round(3))) == sorted(
        zip(weak["nodes"], weak["tokens_per_s_per_gpu"].round(3))
    )
    assert (out / "plots" / "transformer_strong_scaling.png").exists()
    assert not (out / "plots" / "weak_scaling.png").exists()  # no workload counts images


@pytest.mark.slow
def test_mfu_against_the_profile_s_stated_peak_and_the_report_and_comparison(sweep_run, tmp_path):
    import dataclasses
    import json
    import shutil

    import pandas as pd

    from harness.config.cluster_profile import load_profile

    out, _ = sweep_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    (tmp_path / "p.yaml").write_text(
        "name: lab\nhardware: {peak_tflops_per_gpu: 0.5}\nreference:\n"
        "  - {workload: transformer, scaling: weak, nodes: 2, tokens_per_s: 1.0, tolerance: 0.1}\n"
        "  - {workload: transformer, scaling: strong, nodes: 2, tokens_per_s: 1000000000, tolerance: 0.1}\n"
    )
    plan = json.loads((copy / "plan.json").read_text())
    plan["cluster"] = dataclasses.asdict(load_profile(tmp_path / "p.yaml"))
    (copy / "plan.json").write_text(json.dumps(plan))
    bench("collect", str(copy))
    t = pd.read_csv(copy / "summary.csv")
    t = t[t["workload"] == "transformer"]
    # by hand: achieved TFLOP/s per GPU = tokens/s per GPU x 173,952 FLOPs / 1e12, over 0.5
    assert t["mfu"].tolist() == pytest.approx((t["tokens_per_s_per_gpu"] * 173_952 / 1e12 / 0.5).tolist(), rel=1e-5)
    assert (t["peak_tflops_per_gpu"] == 0.5).all()
    bench("report", str(copy), "--out", str(tmp_path / "r.html"))
    html = (tmp_path / "r.html").read_text()
    assert "<h3>Transformer</h3>" in html and "TFLOP/s per GPU" in html and "MFU" in html
    c = bench("compare", str(out), str(copy), "--metric", "tokens_per_s", "--csv", str(tmp_path / "c.csv"))
    assert "of 4 compared" in c.stdout
    assert set(pd.read_csv(tmp_path / "c.csv")["metric"]) == {"tokens_per_s"}
    # references in tokens/s: one met by far, one a CPU cannot reach, which fails the gate
    g = bench("regress", str(copy), "--baseline", "reference", "--out", str(tmp_path / "rg"), check=False)
    assert g.returncode == 1, g.describe()
    assert "1 regression, 0 failed keys, 0 cannot judge, 1 improvement, 0 unchanged of 2 compared" in g.stderr
