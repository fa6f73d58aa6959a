"""The collectives microbenchmark, in the manner of nccl-tests' `*_perf` tests, on
torch.distributed: ten collectives (benchmarks/catalog.py), each on the world and on the groups
of a node's ranks and of one rank per node. Its workload is called `allreduce` in sweeps,
results and `bench run`, its first and default collective (benchmarks/allreduce.py).

    bench run allreduce -b 8 -e 128M -f 2 --nproc 2                   # starts 2 local ranks
    torchrun --nproc-per-node 8 -m benchmarks.allreduce -b 8 -e 1G -f 2 --json out.json
    srun --ntasks-per-node 8 python -m benchmarks.allreduce -b 1M -e 1G  # MASTER_ADDR/PORT set

For every message size and collective:
- `time_us`: the nccl-tests way: warmup, barrier, n back-to-back calls, one device sync,
  elapsed / n, and the worst rank's figure (a collective is as slow as its slowest member).
- `algbw_gbps` = size / time, `busbw_gbps` = algbw x the collective's bus factor, GB = 1e9
  (factors from nccl-tests' PERFORMANCE.md, kept in benchmarks/catalog.py; docs/reference/sources.md).
- `wrong`: elements that failed the check (-c iterations, buffers filled with rank-dependent
  values so a missing, duplicated or mis-ordered contribution shows), summed over ranks.
- per-iteration samples (each call timed on its own: CUDA events on GPU, host clock on CPU,
  where gloo calls are blocking), worst rank per iteration, with p10/median/p90.
- in the per-rank file beside it, each rank's own `time_us` of each row: whose the worst time is.

The headline columns are the in-place call where torch.distributed has one (what DDP does with
its gradient buckets), as NCCL defines it for all_gather, reduce_scatter, gather and scatter (the
input is the rank's own chunk of the output, or the other way round). `oop_*` columns are
out-of-place: a real out-of-place call for all_gather, reduce_scatter, gather and scatter; torch
has none for all_reduce, broadcast and reduce, so there it is a copy into the output buffer plus
the in-place call, the cost a PyTorch program pays to keep its input. all_to_all, alltoallv
(all_to_all_single with uneven splits) and sendrecv have no in-place form: the headline is their
out-of-place call and the `oop_*` columns stay empty. reduce, gather, scatter and broadcast use
root 0; sendrecv sends to the next rank and receives from the previous, and needs two ranks.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from . import memory
from .catalog import COLLECTIVE_DEFAULTS as D
from .catalog import COLLECTIVES, DTYPES, GROUPS, OPS, WORLD, Buffers, Collective, collective, node_groups
from .common import (
    LINKS,
    PER_RANK,
    OneLineParser,
    UsageError,
    add_common_args,
    format_size,
    message_sizes,
    size_arg,
    size_or_zero_arg,
    spread,
)
from .linkprobe import link_probe
from .results import wrong_count, wrong_results
from .runtime import Context, Workload, exit_rank, gather_at_root, gather_rows, worst_of_ranks
from .runtime import main as run_main
from .timing import soak, time_calls


def bus_factor(name: str, world_size: int) -> float:
    """busbw / algbw for collective `name` over `world_size` ranks (benchmarks/catalog.py)."""
    return collective(name).bus_factor(world_size)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="bench run allreduce",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-b",
        "--min-bytes",
        "--minbytes",
        dest="min_bytes",
        type=size_arg,
        default=D.min_bytes,
        help=f"smallest message, K/M/G = powers of 1024 (default {format_size(D.min_bytes)})",
    )
    p.add_argument(
        "-e",
        "--max-bytes",
        "--maxbytes",
        dest="max_bytes",
        type=size_arg,
        default=D.max_bytes,
        help=f"largest message (default {format_size(D.max_bytes)})",
    )
    p.add_argument(
        "-f",
        "--step-factor",
        "--stepfactor",
        dest="step_factor",
        type=int,
        default=D.step_factor,
        help="multiplication factor between sizes (default %(default)s)",
    )
    p.add_argument("-n", "--iters", type=int, default=D.iters, help="timed iterations per size (default %(default)s)")
    p.add_argument(
        "-w",
        "--warmup-iters",
        "--warmup_iters",
        dest="warmup_iters",
        type=int,
        default=D.warmup_iters,
        help="untimed warmup iterations per size (default %(default)s)",
    )
    p.add_argument(
        "-c",
        "--check",
        type=int,
        default=D.check_iters,
        metavar="N",
        help="correctness-check iterations per size, 0 to skip (default %(default)s)",
    )
    p.add_argument(
        "-d",
        "--dtype",
        "--datatype",
        dest="dtype",
        choices=sorted(DTYPES),
        default=D.dtype,
        help="element type of the buffers (default %(default)s)",
    )
    p.add_argument("-o", "--op", choices=OPS, default=D.op, help="reduction op (avg needs nccl)")
    p.add_argument(
        "--collective",
        default=",".join(D.collectives),
        help=f"comma-separated collectives among {', '.join(COLLECTIVES)} (default %(default)s)",
    )
    p.add_argument(
        "--groups",
        default=",".join(GROUPS),
        help="comma-separated groups each collective runs on: world (every rank), intra (each node's ranks, "
        "all nodes at once), inter (one rank per node, every local rank's group at once); a group the job's "
        f"layout does not have is skipped (default {','.join(GROUPS)})",
    )
    p.add_argument(
        "--out-of-place",
        action=argparse.BooleanOptionalAction,
        default=D.out_of_place,
        help="also measure out-of-place calls",
    )
    p.add_argument(
        "--link-bytes",
        type=size_or_zero_arg,
        default=D.link_bytes,
        metavar="SIZE",
        help="message size of the pairwise link probe that names slow nodes, 0 to skip "
        f"(default {format_size(D.link_bytes)})",
    )
    p.add_argument("--link-iters", type=int, default=D.link_iters, help="link probe passes (default %(default)s)")
    p.add_argument(
        "--soak",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="after the sizes, time the first collective on the world at the largest size, window after window, "
        "this long (default 0: no soak)",
    )
    add_common_args(p)
    return p


def _names(flag: str, text: str, valid: Collection[str]) -> list[str]:
    """A comma-separated list of `valid` names, each once, in the order given."""
    names = [c.strip() for c in text.split(",") if c.strip()]
    for name in names:
        if name not in valid:
            raise UsageError(f"{flag} {name!r} is not one of {', '.join(valid)}")
    if not names:
        raise UsageError(f"{flag} is empty; valid: {', '.join(valid)}")
    return list(dict.fromkeys(names))


def _collectives(text: str) -> list[str]:
    return _names("--collective", text, COLLECTIVES)


def _groups(text: str) -> list[str]:
    return _names("--groups", text, GROUPS)


def check_args(args: argparse.Namespace, world_size: int | None) -> None:
    _collectives(args.collective)
    if WORLD not in _groups(args.groups) and args.soak:
        raise UsageError(f"--soak: --groups {args.groups} has no world group, where the soak runs; add world")
    for flag, value, low in (
        ("--iters", args.iters, 1),
        ("--warmup-iters", args.warmup_iters, 0),
        ("--check", args.check, 0),
        ("--link-iters", args.link_iters, 1),
        ("--link-bytes", args.link_bytes, 0),
        ("--soak", args.soak, 0),
    ):
        if value < low:
            raise UsageError(f"{flag} must be at least {low}, found {value}")
    message_sizes(args.min_bytes, args.max_bytes, args.step_factor, 1, 1)


# --------------------------------------------------------------------------- measurement


PATTERN_MAX = 5  # the largest value of the check pattern


def _pattern(rank: int, idx: torch.Tensor) -> torch.Tensor:
    """Rank r's value at element i: ((r + i) mod 5) + 1, small integers exact in every dtype."""
    return ((idx + rank) % PATTERN_MAX + 1).to(torch.float64)


def tolerance(dtype: torch.dtype, n: int, op: str | None) -> float | None:
    """How far, relative to the exact value, a correct call's output may be from it: `op` the
    reduction of n ranks' pattern values, or None for a collective that only moves them (exact).
    0 where every partial sum of the pattern is a whole number the dtype holds exactly; else
    the bound on rounding of a sum of n non-negative terms in any order, gamma(n-1) =
    (n-1)u / (1 - (n-1)u), u the dtype's unit roundoff, one rounding more for avg's division;
    None where that bound reaches the value itself and no wrong element could be told from
    rounding: the check cannot judge (docs/reference/sources.md, "The output check")."""
    if op is None or op in ("max", "min") or not dtype.is_floating_point:
        return 0.0
    info = torch.finfo(dtype)
    if op == "sum" and PATTERN_MAX * n * info.eps <= 2:  # every sum at most 2**p, p = the significand's bits
        return 0.0
    roundings = n - 1 + (op == "avg")
    bound = roundings * info.eps / 2
    return bound / (1 - bound) if bound < 0.5 else None


# Elements filled or checked at once: the float64 temporaries of one slice (the pattern, the
# reduction, the difference, the tolerance) take a few times 8 MiB, whatever the message size.
CHECK_SLICE = 2**20


def slices(count: int) -> list[tuple[int, int]]:
    """(start, stop) of consecutive slices of CHECK_SLICE elements covering 0..count-1."""
    return [(start, min(start + CHECK_SLICE, count)) for start in range(0, count, CHECK_SLICE)]


class CheckValues:
    """The check pattern and what a correct call makes of it (catalog.Values), in float64."""

    def __init__(self, op: str, n: int, device: torch.device):
        self.op, self.n, self.device = op, n, device

    def pattern(self, rank: int, start: int, stop: int) -> torch.Tensor:
        return _pattern(rank, torch.arange(start, stop, device=self.device))

    def reduced(self, start: int, stop: int) -> torch.Tensor:
        idx = torch.arange(start, stop, device=self.device)
        acc = _pattern(0, idx)
        for r in range(1, self.n):
            v = _pattern(r, idx)
            if self.op in ("sum", "avg"):
                acc = acc + v
            elif self.op == "max":
                acc = torch.maximum(acc, v)
            else:
                acc = torch.minimum(acc, v)
        return acc / self.n if self.op == "avg" else acc

    def cat(self, parts: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(parts)


class GroupCalls:
    """torch.distributed's calls on one process group, for the catalog's call functions: they
    name roots and peers by their rank in the group, which this translates to the global rank
    that torch.distributed's `src`, `dst` and `peer` take (torch 2.3 and later)."""

    isend, irecv = staticmethod(dist.isend), staticmethod(dist.irecv)
    batch_isend_irecv = staticmethod(dist.batch_isend_irecv)

    def __init__(self, group: Any, ranks: list[int]):
        self.group, self.ranks = group, ranks

    def P2POp(self, op: Any, tensor: torch.Tensor, peer: int) -> Any:
        return dist.P2POp(op, tensor, self.ranks[peer], self.group)

    def all_reduce(self, t: torch.Tensor, op: Any) -> Any:
        return dist.all_reduce(t, op=op, group=self.group)

    def broadcast(self, t: torch.Tensor, src: int) -> Any:
        return dist.broadcast(t, src=self.ranks[src], group=self.group)

    def reduce(self, t: torch.Tensor, dst: int, op: Any) -> Any:
        return dist.reduce(t, dst=self.ranks[dst], op=op, group=self.group)

    def all_gather_into_tensor(self, out: torch.Tensor, inp: torch.Tensor) -> Any:
        return dist.all_gather_into_tensor(out, inp, group=self.group)

    def reduce_scatter_tensor(self, out: torch.Tensor, inp: torch.Tensor, op: Any) -> Any:
        return dist.reduce_scatter_tensor(out, inp, op=op, group=self.group)

    def gather(self, t: torch.Tensor, gather_list: Any, dst: int) -> Any:
        return dist.gather(t, gather_list=gather_list, dst=self.ranks[dst], group=self.group)

    def scatter(self, t: torch.Tensor, scatter_list: Any, src: int) -> Any:
        return dist.scatter(t, scatter_list=scatter_list, src=self.ranks[src], group=self.group)

    def all_to_all_single(self, out: torch.Tensor, inp: torch.Tensor, **splits: Any) -> Any:
        return dist.all_to_all_single(out, inp, group=self.group, **splits)


@dataclass(frozen=True)
class Group:
    """The group a collective runs on, as this rank sees it: its kind (catalog.GROUPS), the
    calls on it, this rank's place in it and its size, and every group of the kind (global ranks)."""

    kind: str
    calls: GroupCalls
    rank: int
    size: int
    members: list[list[int]]


def job_groups(kinds: list[str], ctx: Context) -> tuple[list[Group], dict[str, str]]:
    """The groups of `kinds` this job's layout has, and why any other was left out. Every rank
    must call it: creating a group is a collective call (dist.new_subgroups_by_enumeration)."""
    world, rank = ctx.launch.world_size, ctx.launch.rank
    everyone = list(range(world))
    out, skipped = [], {}
    if WORLD in kinds:
        out.append(Group(WORLD, GroupCalls(None, everyone), rank, world, [everyone]))
    subs: dict[str, list[list[int]]] = {}
    if set(kinds) - {WORLD}:
        node_of = [int(r[0]) for r in gather_rows([float(ctx.launch.node_rank)], ctx.device, world)]
        subs, why = node_groups(node_of)
        skipped = {k: v for k, v in why.items() if k in kinds}
    for kind in kinds:
        if kind in subs:
            mine, _ = dist.new_subgroups_by_enumeration(subs[kind])
            ranks = next(m for m in subs[kind] if rank in m)
            out.append(Group(kind, GroupCalls(mine, ranks), ranks.index(rank), len(ranks), subs[kind]))
    return out, skipped


class CollectiveRun:
    """One collective at one message size: its buffers, calls and check."""

    def __init__(
        self, coll: Collective, op: Any, op_name: str, count: int, inp: torch.Tensor, out: torch.Tensor, group: Group
    ):
        self.coll, self.op, self.count, self.group = coll, op, count, group
        self.rank, self.n = group.rank, group.size  # ranks within the group, as the catalog counts them
        self.name = coll.name
        self.buffers: Buffers = coll.buffers(inp, out, count, self.rank, self.n)
        self.values = CheckValues(op_name, self.n, inp.device)
        self.tolerance = tolerance(inp.dtype, self.n, op_name if coll.reduces else None)

    def call(self, in_place: bool) -> Callable[[], Any]:
        return self.coll.call(self.group.calls, self.buffers, self.op, in_place)

    def fill(self, in_place: bool) -> None:
        """Zero the output, then write this rank's pattern into the input: an output slot the
        call never wrote reads 0, not what an earlier call left (in place, all_gather's and
        gather's input is one slot of the output; reduce_scatter's output is part of its input)."""
        b = self.buffers
        self.output(in_place).zero_()
        target = b.in_place_input if in_place else b.oop_input
        for start, stop in slices(target.numel()):
            target[start:stop].copy_(self.values.pattern(self.rank, start, stop).to(target.dtype))

    def expected(self, start: int, stop: int) -> torch.Tensor | None:
        """What this rank's output holds at elements start..stop-1 after a correct call, in
        float64; None where this rank has no output (not the root of reduce or gather)."""
        return self.coll.expected(self.values, self.count, self.rank, self.n, start, stop)

    def output(self, in_place: bool) -> torch.Tensor:
        return self.buffers.in_place_output if in_place else self.buffers.oop_output

    def wrong(self, in_place: bool) -> int:
        """Elements of this rank's output that differ from the expected values, checked a slice
        at a time: the float64 temporaries of a whole 1 GiB message would take about 12 GiB."""
        out = self.output(in_place)
        wrong = 0
        for start, stop in slices(out.numel()):
            expected = self.expected(start, stop)
            if expected is None:
                return 0
            diff = (out[start:stop].to(torch.float64) - expected).abs()
            if self.tolerance:
                wrong += int((diff > expected.abs() * self.tolerance).sum().item())
            else:
                wrong += int((diff != 0).sum().item())
        return wrong


def _measure_mode(
    coll: CollectiveRun, in_place: bool, args: argparse.Namespace, ctx: Context, size: int
) -> dict[str, Any]:
    coll.fill(in_place)
    avg_us, samples = time_calls(coll.call(in_place), args.iters, args.warmup_iters, ctx.device)
    time_us, *worst = worst_of_ranks([avg_us, *samples], ctx.device)
    wrong = 0
    checks = args.check if coll.tolerance is not None else 0  # the same on every rank: one group size
    for _ in range(checks):
        coll.fill(in_place)
        coll.call(in_place)()
        if ctx.device.type == "cuda":
            torch.cuda.synchronize()
        wrong += coll.wrong(in_place)
    if checks:
        w = torch.tensor([wrong], dtype=torch.int64, device=ctx.device)
        dist.all_reduce(w)
        wrong = int(w.item())
    algbw = size / (time_us * 1e-6) / 1e9
    stats = spread(worst)
    return {
        "time_us": time_us,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * coll.coll.bus_factor(coll.n),
        "wrong": wrong if checks else None,
        "time_us_p10": stats["p10"],
        "time_us_median": stats["median"],
        "time_us_p90": stats["p90"],
        "samples_us": worst,
        "rank_time_us": avg_us,  # this rank's own: measure() gathers them once, for the per-rank file
    }


def measure(args: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    world = ctx.launch.world_size
    dtype = getattr(torch, DTYPES[args.dtype])
    if args.op == "avg" and ctx.backend != "nccl":
        raise UsageError(f"--op avg is supported by nccl only, not {ctx.backend}; use sum")
    op = {
        "sum": dist.ReduceOp.SUM,
        "avg": getattr(dist.ReduceOp, "AVG", None),
        "max": dist.ReduceOp.MAX,
        "min": dist.ReduceOp.MIN,
    }[args.op]
    element = torch.empty((), dtype=dtype).element_size()
    groups, skipped = job_groups(_groups(args.groups), ctx)
    for why in dict.fromkeys(skipped.values()):
        ctx.log(f"# {', '.join(k for k, w in skipped.items() if w == why)}: skipped, {why}")
    plan: dict[tuple[str, str], tuple[Group, list[int]]] = {}
    for c in _collectives(args.collective):
        record = collective(c)
        for g in groups:
            if g.size < record.min_ranks:
                ctx.log(f"# collective {c}: needs {record.min_ranks} ranks or more, skipped on {g.size}")
            else:
                sizes = message_sizes(args.min_bytes, args.max_bytes, args.step_factor, element, record.chunks(g.size))
                plan[c, g.kind] = (g, sizes)
    if not plan:
        raise UsageError(f"--collective {args.collective}: nothing to measure on {world} rank(s)")
    max_count = max(max(sizes) for _, sizes in plan.values()) // element
    memory.check(
        memory.collective_bytes(max_count * element, args.link_bytes if world > 1 else 0),
        ctx.device,
        ctx.launch.local_world_size,
        f"--max-bytes {format_size(max_count * element)}",
        "--max-bytes (or --link-bytes)",
    )
    inp = torch.empty(max_count, dtype=dtype, device=ctx.device)
    out = torch.empty(max_count, dtype=dtype, device=ctx.device)

    rows: list[dict[str, Any]] = []
    own_us: list[float] = []  # this rank's time of each row's headline call
    for (name, kind), (group, sizes) in plan.items():
        spans = "" if kind == WORLD else f"  {len(group.members)} groups of {group.size} ranks"
        ctx.log(
            f"# collective {name}  group {kind}{spans}  dtype {DTYPES[args.dtype]}  op {args.op}  world size {world}  "
            f"device {ctx.device.type}  backend {ctx.backend}  iters {args.iters}  warmup {args.warmup_iters}"
        )
        if args.check and collective(name).reduces and tolerance(dtype, group.size, args.op) is None:
            ctx.log(
                f"# check: not run: rounding of {DTYPES[args.dtype]} sums over {group.size} ranks may reach the values"
                " themselves, and a wrong element could not be told from it (#wrong N/A; -d float checks them)"
            )
        if collective(name).in_place:
            ctx.log(f"# {'':>41}in-place{'':>31}out-of-place")
        else:  # no in-place form: the headline block is the out-of-place call
            ctx.log(f"# {'':>41}out-of-place (no in-place form)")
        ctx.log(
            f"# {'size':>12} {'count':>12} {'type':>8} {'redop':>5}"
            f" {'time(us)':>10} {'algbw(GB/s)':>11} {'busbw(GB/s)':>11} {'#wrong':>6}"
            f" {'time(us)':>10} {'algbw(GB/s)':>11} {'busbw(GB/s)':>11} {'#wrong':>6}"
        )
        for size in sizes:
            ctx.progress(f"{name} {format_size(size)}" + ("" if kind == WORLD else f" {kind}"))
            count = size // element
            coll = CollectiveRun(collective(name), op, args.op, count, inp, out, group)
            row: dict[str, Any] = {
                "collective": name,
                "group": kind,
                "size_bytes": size,
                "count": count,
                "dtype": DTYPES[args.dtype],
                "op": args.op,
            }
            row.update(_measure_mode(coll, coll.coll.in_place, args, ctx, size))
            own_us.append(row.pop("rank_time_us"))
            if args.out_of_place and coll.coll.in_place:
                oop = _measure_mode(coll, False, args, ctx, size)
                row.update({f"oop_{k}": v for k, v in oop.items() if k != "rank_time_us"})
            rows.append(row)
            ctx.log(_format_row(row))
        mine = [r["busbw_gbps"] for r in rows if (r["collective"], r["group"]) == (name, kind)]
        where = "" if kind == WORLD else f", {kind}"
        ctx.log(f"# Avg bus bandwidth (in-place, {name}{where}): {sum(mine) / len(mine):.4f} GB/s")
    if args.check:  # nccl-tests' footer line, and its rule: a wrong element fails the run (failed, below)
        wrong = sum(wrong_count(r) for r in rows)
        ctx.log(f"# Out of bounds values : {wrong} {'FAILED' if wrong else 'OK'}")
    soaked = _soak(args, ctx, plan, op, inp, out) if args.soak else None
    links = None
    if args.link_bytes and world > 1:
        ctx.log(
            f"# link probe: {format_size(args.link_bytes)} both ways between pairs of ranks, {args.link_iters} passes"
        )
        ctx.progress("link probe")
        links = link_probe(args, ctx)
    per_rank = per_rank_rows(rows, gather_at_root(own_us, ctx))
    return {
        "params": {
            "min_bytes": args.min_bytes,
            "max_bytes": args.max_bytes,
            "step_factor": args.step_factor,
            "iters": args.iters,
            "warmup_iters": args.warmup_iters,
            "check_iters": args.check,
            "dtype": DTYPES[args.dtype],
            "op": args.op,
            "collectives": list(dict.fromkeys(name for name, _ in plan)),
            # every group measured, by kind, in global ranks (the NIC accounting reads them)
            "groups": {g.kind: g.members for g in groups if any(kind == g.kind for _, kind in plan)},
            "out_of_place": args.out_of_place,
            "link_bytes": args.link_bytes,
            "link_iters": args.link_iters,
            "timing": "worst rank; per-call samples "
            + ("from CUDA events" if ctx.device.type == "cuda" else "from the host clock"),
        },
        "rows": rows,
        **({"soak": soaked} if soaked else {}),
        PER_RANK: {"rows": per_rank},
        **({LINKS: links} if links else {}),
    }


def _soak(args: argparse.Namespace, ctx: Context, plan: dict, op: Any, inp: torch.Tensor, out: torch.Tensor) -> dict:
    """The soak of the first collective measured on the world, at its largest size (benchmarks/timing.py)."""
    world = [(name, group, max(sizes)) for (name, kind), (group, sizes) in plan.items() if kind == WORLD]
    if not world:
        raise UsageError(f"--soak: no collective of --collective {args.collective} runs on the world group to soak")
    name, group, size = world[0]
    coll = CollectiveRun(collective(name), op, args.op, size // inp.element_size(), inp, out, group)
    coll.fill(coll.coll.in_place)
    found = soak(coll.call(coll.coll.in_place), args.soak, size, coll.coll.bus_factor(coll.n), args.iters, ctx)
    busbw = [w[2] for w in found["windows"]]
    ctx.log(f"# soak: {name} {format_size(size)} on the world, {args.soak:g} s: {len(busbw)} windows, busbw first"
            f" {busbw[0]:.4f} last {busbw[-1]:.4f} GB/s")  # fmt: skip
    return {"collective": name, "group": WORLD, "size_bytes": size, **found}


def per_rank_rows(rows: list[dict[str, Any]], ranks_us: list[list[float]]) -> list[dict[str, Any]]:
    """The per-rank file's rows: each row's keys and its time on each rank (gather_at_root's)."""
    keys = ("collective", "group", "size_bytes")
    return [{**{k: r[k] for k in keys}, "time_us": list(us)} for r, us in zip(rows, zip(*ranks_us))]


def _format_row(row: dict[str, Any]) -> str:
    def block(prefix: str) -> str:
        if f"{prefix}time_us" not in row:
            return f" {'-':>10} {'-':>11} {'-':>11} {'-':>6}"
        wrong = row[f"{prefix}wrong"]
        return (
            f" {row[f'{prefix}time_us']:>10.1f} {row[f'{prefix}algbw_gbps']:>11.4f}"
            f" {row[f'{prefix}busbw_gbps']:>11.4f} {'N/A' if wrong is None else wrong:>6}"
        )

    return (
        f"  {row['size_bytes']:>12} {row['count']:>12} {row['dtype']:>8} {row['op']:>5}"
        + block("")
        + block("oop_")
        + f"   # {format_size(row['size_bytes'])}"
    )


def failed(body: dict[str, Any]) -> str | None:
    """Why a measured result fails its run: elements its output check found wrong."""
    return wrong_results(body["rows"])


WORKLOAD = Workload("allreduce", build_parser, measure, check_args, failed)


def main(argv: list[str] | None = None) -> int:
    return run_main(WORKLOAD, argv)


if __name__ == "__main__":
    exit_rank(main())
