"""Each workload with 2 real gloo ranks started by `bench run ... --nproc 2` (torchrun
standalone): the figures are positive and consistent with each other, and bad input is one
line with exit status 2."""

from __future__ import annotations

import pytest
from conftest import bench, check_breakdown, read_json

from benchmarks.catalog import COLLECTIVES
from benchmarks.collectives import bus_factor

pytestmark = pytest.mark.slow
SECRET = "hunter2-do-not-record"
TRAIN = ["--model", "resnet18", "--image-size", "32", "--steps", "4", "--warmup-steps", "1", "--device", "cpu"]


def test_allreduce_two_ranks(tmp_path):
    out = tmp_path / "ar.json"
    r = bench(
        "run",
        "allreduce",
        "-b",
        "4K",
        "-e",
        "1M",
        "-f",
        "4",
        "-n",
        "6",
        "-w",
        "2",
        "-c",
        "2",
        "--collective",
        ",".join(COLLECTIVES),
        "--nproc",
        "2",
        "--json",
        str(out),
        env={"NCCL_TEST_TOKEN": SECRET, "NCCL_DEBUG": "WARN", "UNRELATED_VARIABLE": "x"},
    )
    assert "# Avg bus bandwidth" in r.stdout
    res = read_json(out)
    assert res["schema_version"] == 1 and res["workload"] == "allreduce"
    assert res["world_size"] == 2 and res["backend"] == "gloo" and res["device"] == "cpu"
    sizes = [4096, 16384, 65536, 262144, 1048576]
    for coll in COLLECTIVES:
        rows = [row for row in res["rows"] if row["collective"] == coll]
        # alltoallv's message is 3 units of 2 ranks' shares: multiples of 12 bytes
        assert [row["size_bytes"] for row in rows] == ([s // 12 * 12 for s in sizes] if coll == "alltoallv" else sizes)
        for row in rows:
            assert row["count"] == row["size_bytes"] // 4
            assert row["time_us"] > 0
            assert row["algbw_gbps"] == pytest.approx(row["size_bytes"] / (row["time_us"] * 1e-6) / 1e9)
            assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * bus_factor(coll, 2))
            assert row["wrong"] == 0
            if COLLECTIVES[coll].in_place:
                assert row["oop_time_us"] > 0 and row["oop_wrong"] == 0
                assert row["oop_busbw_gbps"] == pytest.approx(row["oop_algbw_gbps"] * bus_factor(coll, 2))
            else:  # the headline is the out-of-place call; nothing else to measure
                assert "oop_time_us" not in row
            assert len(row["samples_us"]) == 6 and "rank_samples_us" not in row
            assert all(s > 0 for s in row["samples_us"])
            assert row["time_us_p10"] <= row["time_us_median"] <= row["time_us_p90"]
    # each rank's own time of each row lives beside the result; the row's time is the worst of them
    ranks = read_json(tmp_path / "ar.ranks.json")
    assert res["per_rank_file"] == "ar.ranks.json" and len(ranks["hosts"]) == 2
    assert len(ranks["rows"]) == len(res["rows"])
    for row, per_rank in zip(res["rows"], ranks["rows"]):
        assert (per_rank["collective"], per_rank["group"]) == (row["collective"], row["group"])
        assert per_rank["size_bytes"] == row["size_bytes"] and len(per_rank["time_us"]) == 2
        assert row["time_us"] == max(per_rank["time_us"]) and min(per_rank["time_us"]) > 0
        assert "samples_us" not in per_rank
    # the link probe's pair times in a file of their own, which the straggler analysis reads
    links = read_json(tmp_path / "ar.links.json")
    assert res["links_file"] == "ar.links.json" and "links" not in ranks and len(links["hosts"]) == 2
    assert links["links"]["partners"] == [[1], [0]] and len(links["links"]["time_us"][0][0]) == links["links"]["iters"]
    env = res["environment"]
    assert [r["rank"] for r in env["ranks"]] == [0, 1]
    assert env["torch"] and env["launcher"] == "torchrun-standalone"
    assert env["variables"]["NCCL_TEST_TOKEN"] == "<redacted>"
    assert env["variables"]["NCCL_DEBUG"] == "WARN"
    assert "UNRELATED_VARIABLE" not in env["variables"]
    assert SECRET not in out.read_text()


# Every collective on 4 real ranks, and on groups of 2, is checked against hand-counted bus factors
# in tests/modules/benchmarks/test_groups.py, on the shared sweep `mixed_run` (tests/conftest.py).


def test_sendrecv_on_one_rank_is_skipped_and_said(tmp_path):
    out = tmp_path / "one.json"
    r = bench("run", "allreduce", "-b", "4K", "-e", "4K", "--collective", "sendrecv,all_reduce", "--nproc", "1",
              "--json", str(out))  # fmt: skip
    assert "# collective sendrecv: needs 2 ranks or more, skipped on 1" in r.stdout
    assert {row["collective"] for row in read_json(out)["rows"]} == {"all_reduce"}


def test_synthetic_weak_and_strong(tmp_path):
    weak, strong = tmp_path / "weak.json", tmp_path / "strong.json"
    bench("run", "synthetic", *TRAIN, "--batch-size", "4", "--nproc", "2", "--json", str(weak))
    bench("run", "synthetic", *TRAIN, "--global-batch", "12", "--nproc", "2", "--json", str(strong))
    for path, batch, scaling in ((weak, 4, "weak"), (strong, 6, "strong")):
        res = read_json(path)
        assert res["scaling"] == scaling and res["batch_size"] == batch and res["global_batch"] == batch * 2
        assert res["images_per_s"] == pytest.approx(batch * 2 * 4 / res["measured_time_s"])
        assert res["images_per_s_per_gpu"] == pytest.approx(res["images_per_s"] / 2)
        steps = res["samples"]["step_time_ms"]
        assert len(steps) == 4 and len(res["warmup"]["step_time_ms"]) == 1
        assert res["step_time_ms_p10"] <= res["step_time_ms"] <= res["step_time_ms_p90"]
        # the measured time is the slowest rank's total
        per_rank = read_json(path.with_name(res["per_rank_file"]))["step_time_ms"]
        assert len(per_rank) == 2 and all(len(r) == 4 for r in per_rank)
        assert res["measured_time_s"] == pytest.approx(max(sum(r) for r in per_rank) / 1e3)
        assert steps == pytest.approx([max(step) for step in zip(*per_rank)])  # the worst rank's, step by step
        assert res["params"]["model"] == "resnet18" and res["params"]["amp"] == "off"
        # DDP all-reduces ResNet-18's 11,689,512 gradients (torchvision's documentation) in fp32,
        # each rank sending 2(p-1)/p of them by ring
        assert res["traffic"]["all_reduce_bytes"] == 4 * 11_689_512 == res["traffic"]["sent_bytes_per_rank"]
        # where the step went: 10 sync-free steps by default, among the 4 measured
        # (docs/concepts/breakdown.md), whose shares add up to the step
        assert res["params"]["sync_free_steps"] == 10
        check_breakdown(res)


def test_real_with_a_generated_image_folder(tmp_path, data_cache):
    out = tmp_path / "real.json"
    bench(
        "run",
        "real",
        *TRAIN,
        "--batch-size",
        "4",
        "--workers",
        "1",
        "--data-cache",
        str(data_cache),
        "--data-classes",
        "3",
        "--data-images-per-class",
        "8",
        "--nproc",
        "2",
        "--json",
        str(out),
    )
    res = read_json(out)
    assert res["data"]["images"] == 24 and res["data"]["classes"] == 3 and res["data"]["generated"]
    assert res["images_per_s"] == pytest.approx(4 * 2 * 4 / res["measured_time_s"])
    assert res["compute_images_per_s"] >= res["images_per_s"]
    assert 0 <= res["data_wait_fraction"] < 1
    assert len(res["samples"]["data_wait_ms"]) == 4
    # the sync-free steps reuse the last batch: compute only, the data wait taken out of the step
    wait = sorted(res["samples"]["data_wait_ms"])
    median_wait = (wait[1] + wait[2]) / 2
    if check_breakdown(res, median_wait):
        assert res["step_data_wait_fraction"] == pytest.approx(median_wait / res["step_time_ms"], rel=1e-5)
    # generated once, deterministic: a second build finds it complete and changes nothing
    from benchmarks.imagefolder import ensure_imagefolder

    path = ensure_imagefolder(data_cache, 3, 8, 36)
    before = {p: p.read_bytes() for p in path.rglob("*.jpg")}
    assert len(before) == 24
    assert ensure_imagefolder(data_cache, 3, 8, 36) == path
    assert {p: p.read_bytes() for p in path.rglob("*.jpg")} == before


def test_generated_images_are_deterministic(tmp_path):
    from benchmarks.imagefolder import ensure_imagefolder

    a = ensure_imagefolder(tmp_path / "a", 2, 3, 32, seed=7)
    b = ensure_imagefolder(tmp_path / "b", 2, 3, 32, seed=7)
    files = sorted(p.relative_to(a) for p in a.rglob("*.jpg"))
    assert len(files) == 6
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    assert not list((tmp_path / "a").glob(".building-*"))


@pytest.mark.parametrize(
    "args,words",
    [
        (["synthetic", "--global-batch", "5", "--nproc", "2"], ["--global-batch 5", "world size 2"]),
        (["real", "--data-dir", "/nonexistent/imagenet"], ["--data-dir /nonexistent/imagenet", "no such directory"]),
        (["allreduce", "-b", "1M", "-e", "1K"], ["below"]),
        (["allreduce", "--collective", "all_to_everyone"], ["all_to_everyone", "all_reduce"]),
        (["allreduce", "-b", "12Q"], ["12Q"]),
        (["synthetic", "--nproc", "0"], ["--nproc"]),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, words):
    r = bench("run", *args, check=False, timeout=60)
    assert r.returncode == 2, r.describe()
    assert "Traceback" not in r.stderr
    for word in words:
        assert word in r.stderr, r.stderr


@pytest.mark.parametrize(
    "args,words",
    [
        (["--collective", "sendrecv", "--nproc", "1"], "--collective sendrecv: nothing to measure on 1 rank(s)"),
        (["-b", "1", "-e", "2"], "no message size between 1 and 2 bytes holds a whole element"),
        (["--groups", "intra", "--nproc", "2", "-b", "1M", "-e", "1M"], "nothing to measure on 2 rank(s)"),
        (["--op", "avg", "-b", "1M", "-e", "1M"], "--op avg is supported by nccl only"),
        (["--device", "cuda"], "--device cuda: no CUDA device is available"),
    ],
)
def test_a_usage_error_only_the_ranks_see_is_one_line(args, words):
    """Real torchrun ranks find it; rank 0 relays its line, and bench run says it alone with exit
    2, not beside torchrun's 35-line report of a failed child with exit 1."""
    r = bench("run", "allreduce", *args, check=False, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("bench run allreduce: error: "), r.describe()
    assert words in lines[0]


def test_empty_data_dir_is_a_clear_error(tmp_path):
    (tmp_path / "class_a").mkdir()
    r = bench("run", "real", "--data-dir", str(tmp_path), check=False, timeout=60)
    assert r.returncode == 2 and "no images in class folders" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_bad_launch_environment_names_the_variable():
    r = bench(
        "run",
        "allreduce",
        check=False,
        timeout=60,
        env={"RANK": "zero", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"},
    )
    assert r.returncode == 2
    assert r.stderr.strip() == "bench run allreduce: error: environment variable RANK='zero' is not an integer"


@pytest.mark.parametrize(
    ("capability", "want"),
    [((7, 0), "fp16"), ((7, 5), "fp16"), ((8, 0), "bf16"), ((8, 6), "bf16"), ((9, 0), "bf16"), ((10, 0), "bf16")],
    ids=["V100", "T4", "A100", "A10", "H100", "B200"],
)
def test_amp_auto_takes_bf16_only_where_the_gpu_computes_it(capability, want, monkeypatch):
    """No GPU here: torch.cuda.get_device_capability answers as each GPU's would (NVIDIA's
    compute capability table), for the device the rank was given."""
    import torch

    from benchmarks.training import choose_amp

    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: asked.append(device) or capability)
    gpu = torch.device("cuda", 3)
    assert choose_amp("auto", gpu) == want and asked == [gpu]
    assert choose_amp("auto", torch.device("cpu")) == "off"
    assert [choose_amp(a, gpu) for a in ("bf16", "fp16", "off")] == ["bf16", "fp16", "off"]
