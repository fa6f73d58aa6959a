"""One table per fact: the sweep spec, the workload's flags and the measurement all take their
collectives, data types and ops from benchmarks/catalog.py, so what one accepts the others do."""

from __future__ import annotations

import argparse

import pytest
import torch
from conftest import SWEEPS

from benchmarks import catalog, collectives, training
from benchmarks.imagefolder import ensure_imagefolder
from harness.config.sweepfile import load_sweep
from harness.run.plan import expand


def _choices(parser, dest: str) -> tuple:
    return next(a.choices for a in parser._actions if a.dest == dest)


@pytest.mark.parametrize("dtype", list(catalog.DTYPES))
def test_every_dtype_the_workload_takes_a_sweep_takes(dtype):
    sweep = load_sweep(SWEEPS / "local.yaml", overrides=(f"workloads.allreduce.dtype={dtype}",))
    assert sweep.workloads.allreduce.dtype == dtype
    args = collectives.build_parser().parse_args(["-d", dtype])
    assert getattr(torch, catalog.DTYPES[args.dtype]).is_floating_point == (not dtype.startswith("int"))
    # and the job runs it with that flag
    job = next(j for j in expand(sweep) if any(r.workload == "allreduce" for r in j.runs))
    run_args = next(r.args for r in job.runs if r.workload == "allreduce")
    assert run_args[run_args.index("-d") + 1] == dtype


def test_the_workload_flags_offer_exactly_the_catalog():
    parser = collectives.build_parser()
    assert set(_choices(parser, "dtype")) == set(catalog.DTYPES)
    assert tuple(_choices(parser, "op")) == catalog.OPS
    assert tuple(_choices(parser, "device")) == catalog.DEVICES
    assert tuple(_choices(parser, "backend")) == catalog.BACKENDS
    train = argparse.ArgumentParser()
    training.add_training_args(train)
    assert tuple(_choices(train, "amp")) == catalog.AMPS


@pytest.mark.parametrize("name", list(catalog.COLLECTIVES))
def test_every_collective_a_sweep_takes_is_measured(name):
    sweep = load_sweep(SWEEPS / "local.yaml", overrides=(f"workloads.allreduce.collectives=[{name}]",))
    assert sweep.workloads.allreduce.collectives == (name,)
    record = catalog.collective(name)
    per_rank = ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter")
    assert record.name == name and record.chunks(4) == (4 if name in per_rank else 10 if name == "alltoallv" else 1)


def test_an_unknown_collective_names_the_valid_ones():
    valid = (
        "all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, alltoallv, reduce, gather, scatter, sendrecv"
    )
    with pytest.raises(ValueError, match=valid):
        catalog.collective("hypercube")


def test_image_sets_with_different_seeds_do_not_share_a_directory(tmp_path):
    a = ensure_imagefolder(tmp_path, classes=1, per_class=2, size=16, seed=0)
    b = ensure_imagefolder(tmp_path, classes=1, per_class=2, size=16, seed=1)
    assert a != b
    first = sorted((a / "class_000").iterdir())[0].read_bytes()
    assert first != sorted((b / "class_000").iterdir())[0].read_bytes()
    assert ensure_imagefolder(tmp_path, classes=1, per_class=2, size=16, seed=0) == a


@pytest.mark.parametrize(
    ("node_of", "groups", "why"),
    [
        # 2 nodes x 2 ranks, node-major as torchrun numbers them
        ([0, 0, 1, 1], {"intra": [[0, 1], [2, 3]], "inter": [[0, 2], [1, 3]]}, None),
        # ranks of a node need not be contiguous (srun's cyclic distribution)
        ([0, 1, 0, 1, 0, 1], {"intra": [[0, 2, 4], [1, 3, 5]], "inter": [[0, 1], [2, 3], [4, 5]]}, None),
        ([0, 0, 0, 0], {}, "one node: the world's ranks"),
        ([0, 1, 2], {}, "one rank per node: the world's ranks"),
        ([0, 0, 1, 1, 1], {}, "nodes hold 2 or 3 ranks, not one count"),
    ],
)
def test_node_groups(node_of, groups, why):
    got, skipped = catalog.node_groups(node_of)
    assert got == groups
    assert skipped == ({} if why is None else {"intra": why, "inter": why})
