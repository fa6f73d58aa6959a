"""Sweep files: the shipped ones load, every kind of bad input is one clear line, exit 2."""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import HOSTILE_VALUES, SWEEPS, bench

from harness.config.sweepfile import load_sweep
from harness.errors import SpecError

MINIMAL = """\
name: t
nodes: [1, 2, 4]
gpus_per_node: [1, 2]
nccl: {default: {}, socket: {NCCL_IB_DISABLE: "1"}}
workloads:
  allreduce: {min_bytes: 1K, max_bytes: 4M}
  synthetic: {model: resnet18, scaling: [weak, strong], global_batch: 16}
"""


def write(tmp_path, text: str, name: str = "sweep.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_shipped_sweeps_load():
    local = load_sweep(SWEEPS / "local.yaml")
    assert local.node_counts == (1, 2)
    assert local.device == "cpu" and local.backend == "gloo"
    default = load_sweep(SWEEPS / "default.yaml")
    assert default.node_counts == (1, 2, 4, 8)
    assert default.gpus_per_node == (1, 2, 4, 8)
    assert default.workloads.synthetic.model == "resnet50"
    assert default.workloads.synthetic.batch_size == 64
    assert default.workloads.allreduce.min_bytes == 8
    assert default.workloads.allreduce.max_bytes == 1024**3
    assert set(default.nccl) == {"default", "ib", "socket"}
    assert default.nccl["ib"] == {"NCCL_IB_DISABLE": "0", "NCCL_NET_GDR_LEVEL": "5"}


def test_sizes_and_types_convert(tmp_path):
    sweep = load_sweep(write(tmp_path, MINIMAL))
    assert sweep.workloads.allreduce.min_bytes == 1024
    assert sweep.workloads.allreduce.max_bytes == 4 * 1024**2
    assert sweep.gpus_per_node == (1, 2)
    assert sweep.workloads.real is None


def test_max_nodes_caps_a_list_and_sets_powers_of_two(tmp_path):
    path = write(tmp_path, MINIMAL)
    assert load_sweep(path, max_nodes=2).node_counts == (1, 2)
    assert load_sweep(path, max_nodes=3).node_counts == (1, 2)
    assert load_sweep(path, overrides=("nodes=powers_of_two",), max_nodes=8).node_counts == (1, 2, 4, 8)


def test_false_turns_a_workload_off_and_empty_means_defaults(tmp_path):
    path = write(tmp_path, MINIMAL + "  real:\n")
    assert load_sweep(path).workloads.real.model == "resnet50"
    off = load_sweep(path, overrides=("workloads.real=false", "workloads.synthetic=false"))
    assert off.workloads.real is None and off.workloads.synthetic is None and off.workloads.allreduce
    with pytest.raises(SpecError, match="no workload"):
        load_sweep(path, overrides=("workloads.real=false", "workloads.synthetic=false", "workloads.allreduce=false"))


def test_set_overrides_scalars_and_lists(tmp_path):
    sweep = load_sweep(
        write(tmp_path, MINIMAL),
        overrides=(
            "workloads.synthetic.steps=7",
            "gpus_per_node=[4]",
            "time_limit_min=2.5",
            "workloads.allreduce.max_bytes=64M",
        ),
    )
    assert sweep.workloads.synthetic.steps == 7
    assert sweep.gpus_per_node == (4,)
    assert sweep.time_limit_min == 2.5
    assert sweep.workloads.allreduce.max_bytes == 64 * 1024**2


def test_set_adds_a_workload_the_sweep_leaves_out_with_its_defaults(tmp_path):
    """The quickstart's sweep leaves the transformer out (sweeps/local.yaml says why); one --set
    puts it in, its other fields at their defaults."""
    sweep = load_sweep(SWEEPS / "local.yaml", overrides=("workloads.transformer.steps=6",))
    assert sweep.workloads.transformer is not None and sweep.workloads.transformer.steps == 6
    assert sweep.workloads.transformer.preset == "small" and sweep.workloads.transformer.parallel == "ddp"
    assert load_sweep(SWEEPS / "local.yaml").workloads.transformer is None


BAD = [
    # (override or YAML replacement, words the one-line error must contain)
    ("workloads.transformer.param_dtype=bf16", ["workloads.transformer.param_dtype", "set parallel: fsdp"]),
    ("workloads.transformer.reduce_dtype=fp16", ["workloads.transformer.reduce_dtype", "fp16", "valid:", "bf16"]),
    ("bogus=1", ["bogus", "unknown key", "valid:", "gpus_per_node"]),
    ("workloads.allreduce.dtype=float128", ["workloads.allreduce.dtype", "float128", "valid:", "bfloat16"]),
    ("workloads.allreduce.bogus=1", ["workloads.allreduce.bogus", "unknown key", "min_bytes"]),
    ("workloads.allreduce.max_bytes=12Q", ["workloads.allreduce.max_bytes", "12Q", "K, M or G"]),
    ("workloads.allreduce.max_bytes=512", ["max_bytes", "below min_bytes"]),
    ("workloads.allreduce.collectives=[all_to_everyone]", ["collectives", "all_to_everyone", "all_reduce"]),
    ("workloads.synthetic.steps=many", ["workloads.synthetic.steps", "integer", "many"]),
    ("workloads.synthetic.steps=0", ["workloads.synthetic.steps", "between 1 and 1,000,000"]),
    ("workloads.synthetic.global_batch=null", ["global_batch", "strong scaling"]),
    ("workloads.synthetic.scaling=[weak, sideways]", ["scaling", "sideways", "weak, strong"]),
    ("workloads.synthetic.amp=fp8", ["amp", "fp8", "bf16"]),
    ("workloads.synthetic.model=resnet50;id", ["model", "resnet50;id"]),
    ("nodes=[]", ["nodes", "empty"]),
    ("nodes=[1, 1]", ["nodes", "repeats"]),
    ("nodes=[0, 1]", ["nodes", "between 1 and"]),
    ("nodes=all", ["nodes", "powers_of_two"]),
    ("nodes=powers_of_two", ["max_nodes", "powers_of_two"]),
    ("gpus_per_node=two", ["gpus_per_node", "list"]),
    ("launchers=[mpirun]", ["launchers", "mpirun", "torchrun, srun"]),
    ("device=tpu", ["device", "tpu", "auto, cuda, cpu"]),
    ("backend=mpi", ["backend", "mpi", "nccl, gloo"]),
    ("time_limit_min=0", ["time_limit_min", "between 0.1 and"]),
    ("max_nodes=0", ["max_nodes", "between 1 and"]),
    ("workloads.reel.workers=1", ["workloads.reel", "not a section"]),
    ("workloads.allreduce.iters.x=1", ["workloads.allreduce.iters", "not a section"]),
    ("name", ["KEY=VALUE"]),
]


@pytest.mark.parametrize("override,words", BAD, ids=[b[0] for b in BAD])
def test_bad_values_name_file_key_and_choices(tmp_path, override, words):
    path = write(tmp_path, MINIMAL)
    with pytest.raises(SpecError) as info:
        load_sweep(path, overrides=(override,))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    for word in words:
        assert word in message, message


@pytest.mark.parametrize("hostile", HOSTILE_VALUES)
@pytest.mark.parametrize(
    "where,key,allowed",
    [
        ("name: t", "name", "use letters, digits, '_', '.', '-' (at most 64)"),
        ("socket:", "nccl.", "is not a valid set name; use letters, digits, '_', '-' (at most 32)"),
    ],
)
def test_hostile_names_are_rejected(tmp_path, hostile, where, key, allowed):
    # A JSON string is a YAML double-quoted scalar: the loader reads the hostile text back
    # exactly, so it is the name allowlist that refuses it, not the YAML parser.
    quoted = json.dumps(hostile)
    text = MINIMAL.replace(where, f"name: {quoted}" if key == "name" else f"{quoted}:")
    with pytest.raises(SpecError) as info:
        load_sweep(write(tmp_path, text))
    message = str(info.value)
    assert f": {key}" in message and allowed in message, message


@pytest.mark.parametrize(
    "text,words",
    [
        ("nccl: {bad: {'1NCCL': '0'}}", ["nccl.bad.1NCCL", "environment variable name"]),
        ("nccl: {bad: {'NCCL X': '0'}}", ["nccl.bad.NCCL X", "environment variable name"]),
        ('env: {NCCL_DEBUG: "INFO\\nrm -rf /"}', ["env.NCCL_DEBUG", "newline"]),
        ("env: {NCCL_DEBUG: true}", ["env.NCCL_DEBUG", "string"]),
        ("nccl: {}", ["nccl", "at least one"]),
    ],
)
def test_bad_environment_sets(tmp_path, text, words):
    body = MINIMAL.replace('nccl: {default: {}, socket: {NCCL_IB_DISABLE: "1"}}', text)
    with pytest.raises(SpecError) as info:
        load_sweep(write(tmp_path, body))
    for word in words:
        assert word in str(info.value)


def test_nccl_on_cpu_is_impossible(tmp_path):
    with pytest.raises(SpecError, match="nccl needs device cuda"):
        load_sweep(write(tmp_path, MINIMAL + "device: cpu\nbackend: nccl\n"))


@pytest.mark.parametrize(
    "text,words",
    [
        ("name: [unclosed\n", ["not valid YAML", "line"]),
        ("- just\n- a list\n", ["mapping"]),
        ("nodes: [1]\nworkloads: {allreduce: {}}\n", ["name", "required"]),
        ("name: t\nworkloads: {}\n", ["workloads", "no workload"]),
    ],
)
def test_malformed_files(tmp_path, text, words):
    with pytest.raises(SpecError) as info:
        load_sweep(write(tmp_path, text))
    for word in words:
        assert word in str(info.value)


def test_a_key_stated_twice_is_refused_at_any_depth_but_a_merge_may_override():
    """YAML's merge key (`<<`) brings keys in to be overridden: that is no duplicate. A key stated
    twice in one mapping is, at the top, in a section, and in a mapping inside a list."""
    from harness.config.fields import DuplicateKey, load_yaml

    merged = load_yaml("base: &b {iters: 5, op: sum}\nrun: {<<: *b, iters: 6}\n")
    assert merged["run"] == {"iters": 6, "op": "sum"}
    assert load_yaml("a: {x: 1}\nb: {x: 2}\n") == {"a": {"x": 1}, "b": {"x": 2}}  # alike keys, two mappings
    for text, key, line, first in (
        ("a: 1\nb: 2\na: 3\n", "a", 3, 1),
        ("w:\n  r:\n    s: 1\n    s: 2\n", "s", 4, 3),
        ("ref:\n  - {size: 4M, nodes: 2, size: 8M}\n", "size", 2, 2),
        ("1: a\n1: b\n", "1", 2, 1),
    ):
        with pytest.raises(DuplicateKey) as info:
            load_yaml(text)
        assert info.value.key == key and info.value.problem_mark.line + 1 == line
        assert f"(first at line {first})" in str(info.value.problem), info.value.problem


def test_missing_file():
    with pytest.raises(SpecError, match="cannot read sweep file"):
        load_sweep("/nonexistent/sweep.yaml")


def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path):
    path = write(tmp_path, MINIMAL.replace("resnet18", "resnet18; rm -rf ~"))
    out = tmp_path / "run"
    r = bench("sweep", str(path), "--executor", "local", "--dry-run", "--out", str(out), check=False)
    assert r.returncode == 2, r.describe()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert str(path) in lines[0] and "workloads.synthetic.model" in lines[0]
    assert not out.exists()


def test_cli_global_batch_not_divisible_names_both_numbers(tmp_path):
    path = write(tmp_path, MINIMAL.replace("global_batch: 16", "global_batch: 6"))
    r = bench("sweep", str(path), "--executor", "local", "--dry-run", "--out", str(tmp_path / "run"), check=False)
    assert r.returncode == 2
    assert "global_batch 6" in r.stderr and "world size 4" in r.stderr
    assert not (tmp_path / "run").exists()


def test_cli_bad_max_nodes_is_a_parser_error(tmp_path):
    r = bench("sweep", "--max-nodes", "zero", "--dry-run", check=False)
    assert r.returncode == 2 and "--max-nodes" in r.stderr


@pytest.mark.parametrize(
    ("module", "spec", "scaling", "only"),
    [
        ("allreduce", "AllreduceSpec", None, []),
        ("synthetic", "TrainingSpec", "weak", []),
        ("real", "RealSpec", "weak", []),
        ("transformer", "TransformerSpec", "weak", []),
        ("transformer", "TransformerSpec", "weak", ["--parallel", "fsdp"]),
    ],
)
def test_a_sweep_that_names_nothing_runs_what_bench_run_runs(module, spec, scaling, only):
    """Every workload default is written once (benchmarks/catalog.py): the flags a sweep's
    defaults give the workload parse to what its parser gives with no flag at all (or with
    `only`, the flags the sweep names, such as FSDP, whose policy's defaults then apply)."""
    import importlib

    import harness.config.spec

    parser = importlib.import_module(f"benchmarks.{module}").build_parser()
    named = {only[0].lstrip("-"): only[1]} if only else {}
    defaults = getattr(harness.config.spec, spec)(**named)
    args = defaults.args() if scaling is None else defaults.args(scaling)
    given, bare = vars(parser.parse_args(args)), vars(parser.parse_args(only))
    if module == "real":  # a sweep's generated data set lives in its run directory
        given["data_cache"] = bare["data_cache"]
    assert given == bare
    assert len(args) >= 12  # the sweep states its values; it does not lean on the parser's


@pytest.mark.parametrize("data_dir", ["--then", "-data", "/data/train set"])
def test_a_data_dir_stays_its_workloads_value_in_a_shared_launch(data_dir):
    """A gloo job's workloads share one launch, split at each --then (benchmarks/sequence.py):
    a data_dir that begins with "-" is still real's --data-dir, never an option or a split."""
    from benchmarks import real, sequence
    from harness.config.spec import RealSpec

    args = RealSpec(data_dir=data_dir).args("weak")
    (_, first), (_, then) = sequence.steps(["synthetic", "--steps", "2", "--then", "real", *args])
    assert first == ["--steps", "2"] and real.build_parser().parse_args(then).data_dir == data_dir
