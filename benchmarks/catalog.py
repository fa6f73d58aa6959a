"""What the workload library offers: its workloads, collectives, data types and reduction ops.

One record per collective, as nccl-tests keeps one per test (docs/reference/sources.md): its bus
factor, how it lays out its buffers, the torch.distributed call, and the values a correct call
leaves behind. `benchmarks.collectives` measures with these records; the harness validates
sweeps against the same tables. This module imports no torch, so the harness can read it at
start-up: the tensor work is done by the objects the workload passes in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

# The collective microbenchmark and the training workloads: ResNet under DDP on synthetic or
# real images, and a decoder-only transformer under DDP or FSDP; `bench run WORKLOAD`.
COLLECTIVE_WORKLOAD = "allreduce"
TRAINING = ("synthetic", "real", "transformer")
WORKLOADS = (COLLECTIVE_WORKLOAD, *TRAINING)
# Probes of one node's parts that no sweep runs: the node check's matmul (`bench run gemm`,
# `bench nodes`)
PROBES = ("gemm",)
# Several workloads in one launch (benchmarks/sequence.py): the module, and the word between
# one workload's arguments and the next's
SEQUENCE = "benchmarks.sequence"
THEN = "--then"
# What each training workload counts its throughput in: the summary's `<unit>_per_s` and
# `<unit>_per_s_per_gpu` columns (images, or the transformer's tokens)
UNITS = {"synthetic": "images", "real": "images", "transformer": "tokens"}
SCALINGS = ("weak", "strong")

# The transformer workload's parallelisms and model shapes (benchmarks/transformer.py)
PARALLEL = ("ddp", "fsdp")


@dataclass(frozen=True)
class Shape:
    layers: int
    width: int
    heads: int
    seq_len: int
    vocab: int


def decoder_params(shape: Shape) -> int:
    """N of benchmarks.transformer's Decoder, as `counted_parameters` counts it: per block, the
    attention's qkv and output projections (4D^2), the MLP's D x 4D and 4D x D (8D^2) and two
    LayerNorms (4D); the final LayerNorm (2D); the token embedding, tied to the output projection
    (V x D); not the position table, a lookup. For estimates made without torch (harness.run.cost)."""
    d = shape.width
    return shape.layers * (12 * d * d + 4 * d) + 2 * d + shape.vocab * d


def flops_per_token(n_params: int, shape: Shape) -> int:
    """Training FLOPs per token: 6N (forward 2N, backward 4N) plus attention's 12·L·H·Q·T, where
    H·Q is the width (PaLM, appendix B; docs/reference/sources.md). Like PaLM, the causal mask's
    skipped half is counted: the figure is the model's, not a kernel's."""
    return 6 * n_params + 12 * shape.layers * shape.width * shape.seq_len


# Presets. "small" runs on 2 CPU cores; the others are GPT-3's shapes (Brown et al. 2020,
# table 2.1: 125M, 350M, 1.3B, 6.7B), with GPT-2's vocabulary padded to a multiple of 64.
PRESETS = {
    "small": Shape(layers=2, width=128, heads=4, seq_len=128, vocab=2048),
    "125m": Shape(layers=12, width=768, heads=12, seq_len=2048, vocab=50304),
    "350m": Shape(layers=24, width=1024, heads=16, seq_len=2048, vocab=50304),
    "1.3b": Shape(layers=24, width=2048, heads=16, seq_len=2048, vocab=50304),
    "6.7b": Shape(layers=32, width=4096, heads=32, seq_len=2048, vocab=50304),
}
# FSDP2's mixed precision (MixedPrecisionPolicy): the dtype its parameters are all-gathered and
# computed in, and the dtype its gradients are reduce-scattered in (docs/concepts/workloads.md).
# auto takes the parameters' from --amp: bf16 under bf16, fp32 with it off.
PARAM_DTYPES = ("auto", "bf16", "fp32")
REDUCE_DTYPES = ("fp32", "bf16")

DEVICES = ("auto", "cuda", "cpu")
BACKENDS = ("auto", "nccl", "gloo")
AMPS = ("auto", "bf16", "fp16", "off")

# Where a training step went (docs/concepts/breakdown.md): result fields, and summary columns. The four
# fractions add up to the step: compute + imbalance + data wait + exposed communication = 1.
BREAKDOWN = (
    "compute_time_ms",
    "slowest_compute_time_ms",
    "exposed_comm_ms",
    "compute_fraction",
    "imbalance_fraction",
    "step_data_wait_fraction",
    "exposed_comm_fraction",
    "breakdown_note",  # why the breakdown was not judged, or null
)
BREAKDOWN_FRACTIONS = ("compute_fraction", "imbalance_fraction", "step_data_wait_fraction", "exposed_comm_fraction")

# --------------------------------------------------------------------------- defaults
# Each workload parameter's default, written once: the workload's parser (`bench run WORKLOAD`)
# and the sweep's schema (harness/config/spec.py) both read it, so a sweep that names no value runs
# what `bench run` runs with no flag (tests/modules/harness/config/test_spec.py holds the two equal).


@dataclass(frozen=True)
class CollectiveDefaults:
    """benchmarks/collectives.py (the `allreduce` workload): nccl-tests' -b 8 -e 128M -f 2 -n 20
    -w 5 -c 1, and the link probe."""

    min_bytes: int = 8
    max_bytes: int = 128 * 1024**2
    step_factor: int = 2
    iters: int = 20
    warmup_iters: int = 5
    check_iters: int = 1
    dtype: str = "float"
    op: str = "sum"
    collectives: tuple[str, ...] = ("all_reduce",)
    out_of_place: bool = True
    link_bytes: int = 4 * 1024**2  # the pairwise probe's message, 0: off
    link_iters: int = 5


@dataclass(frozen=True)
class TrainingDefaults:
    """benchmarks/training.py, for synthetic and real: ResNet-50 at 224 px, 64 images per GPU."""

    model: str = "resnet50"
    image_size: int = 224
    batch_size: int = 64
    steps: int = 50
    warmup_steps: int = 10
    amp: str = "auto"
    bucket_cap_mb: float = 25.0  # torch's DistributedDataParallel default
    gradient_as_bucket_view: bool = True
    static_graph: bool = False
    sync_free_steps: int = 10  # docs/concepts/breakdown.md
    # real's generated data set and its loader
    workers: int = 4
    data_classes: int = 8
    data_images_per_class: int = 64


@dataclass(frozen=True)
class TransformerDefaults:
    """benchmarks/transformer.py: the small preset under DDP, 4 sequences per GPU."""

    preset: str = "small"
    parallel: str = "ddp"
    batch_size: int = 4
    steps: int = 10
    warmup_steps: int = 3
    sync_free_steps: int = 5  # docs/concepts/breakdown.md
    amp: str = "auto"
    param_dtype: str = "auto"  # fsdp only (PARAM_DTYPES)
    reduce_dtype: str = "fp32"  # fsdp only
    activation_checkpointing: bool = False


COLLECTIVE_DEFAULTS = CollectiveDefaults()
TRAINING_DEFAULTS = TrainingDefaults()
TRANSFORMER_DEFAULTS = TransformerDefaults()


# Which ranks one call of a collective spans (docs/reference/sources.md, "Groups"): every rank; the
# ranks of one node, every node's group at once; or one rank per node, the ranks of one local
# index across nodes, every local index's group at once: the two legs of a hierarchical collective.
WORLD, INTRA, INTER = "world", "intra", "inter"
GROUPS = (WORLD, INTRA, INTER)

OPS = ("sum", "avg", "max", "min")
# Every name `-d/--dtype` and a sweep's `dtype` take, to torch's name of the type: nccl-tests'
# names first (float, half, double, int32, int64, bfloat16), then torch's and the short forms.
DTYPES = {
    "float": "float32",
    "float32": "float32",
    "fp32": "float32",
    "half": "float16",
    "float16": "float16",
    "fp16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "double": "float64",
    "float64": "float64",
    "fp64": "float64",
    "int32": "int32",
    "int": "int32",
    "int64": "int64",
}


@dataclass(frozen=True)
class Buffers:
    """Views of the two preallocated buffers one call reads and writes, in place and out of place."""

    in_place_input: Any
    in_place_output: Any
    oop_input: Any
    oop_output: Any
    # what else one collective's call needs: alltoallv's split sizes, sendrecv's peers, the
    # per-rank views of gather's output and scatter's input
    layout: Any = None


class Values(Protocol):
    """The check pattern, computed by the workload's tensor library."""

    def pattern(self, rank: int, start: int, stop: int) -> Any:
        """Rank `rank`'s input at elements start..stop-1."""

    def reduced(self, start: int, stop: int) -> Any:
        """The reduction op over every rank's pattern at elements start..stop-1."""

    def cat(self, parts: list[Any]) -> Any:
        """The parts end to end."""


@dataclass(frozen=True, kw_only=True)
class Collective:
    name: str
    bus_factor: Callable[[int], float]  # busbw / algbw over n ranks
    # How many equal parts a message of n ranks divides into: n where it is one chunk per rank,
    # n(n+1)/2 for alltoallv's uneven shares
    parts: Callable[[int], int]
    reduces: bool  # takes a reduction op
    buffers: Callable[[Any, Any, int, int, int], Buffers]  # (inp, out, count, rank, n)
    call: Callable[[Any, Buffers, Any, bool], Callable[[], Any]]  # (dist, buffers, op, in_place)
    # (values, count, rank, n, start, stop): what this rank's output holds at elements
    # start..stop-1 after a correct call, so a check can run a slice at a time; None where this
    # rank has no output to check (not the root of reduce or gather)
    expected: Callable[[Values, int, int, int, int, int], Any]
    # torch.distributed has an in-place form (the headline columns); without one (all_to_all,
    # alltoallv, sendrecv) the headline is the out-of-place call and there are no oop_ columns
    in_place: bool = True
    min_ranks: int = 1  # sendrecv needs a neighbour
    # (size, rank, n): the bytes this rank sends to each other rank in one call of `size` bytes
    # under gloo, which the NIC cross-check expects on the wire (harness/evidence/telemetry.py,
    # docs/concepts/telemetry.md); None where gloo's algorithm is not accounted for
    gloo_sent: Callable[[int, int, int], dict[int, float]] | None = None

    def chunks(self, world_size: int) -> int:
        """How many equal parts a message size must divide into."""
        return self.parts(world_size)


ROOT = 0  # the root of reduce, gather, scatter and broadcast, as in nccl-tests' default (-r 0)


def _ring_sent(size: int, rank: int, n: int) -> dict[int, float]:
    """gloo's all_reduce is a ring in rank order (reduce-scatter, then all-gather): 2(n-1)/n x
    size to the next rank (docs/reference/sources.md)."""
    return {(rank + 1) % n: 2 * (n - 1) / n * size}


def _each_sent(size: int, rank: int, n: int) -> dict[int, float]:
    """all_to_all: size/n straight to each other rank."""
    return {p: size / n for p in range(n) if p != rank}


def _shares_sent(size: int, rank: int, n: int) -> dict[int, float]:
    """alltoallv: each other rank its share (`share`) of size in alltoallv_units parts."""
    unit = size / alltoallv_units(n)
    return {p: share(rank, p, n) * unit for p in range(n) if p != rank}


def _next_sent(size: int, rank: int, n: int) -> dict[int, float]:
    """sendrecv: the whole message to the next rank."""
    return {(rank + 1) % n: float(size)}


# Bus factors from nccl-tests' PERFORMANCE.md (docs/reference/sources.md): the share of the message that
# crosses each rank's link, so busbw is comparable with link speed for any n. all_reduce
# 2(n-1)/n; all_gather, reduce_scatter, alltoall, gather and scatter (n-1)/n; broadcast, reduce
# and sendrecv 1. alltoallv's is derived the same way for its shares (docs/reference/sources.md).


def _one(n: int) -> int:
    return 1


def _per_rank(n: int) -> int:
    return n


def alltoallv_units(n: int) -> int:
    """The equal units alltoallv's message of n ranks divides into: each rank's shares (share())
    add up to n(n+1)/2 of them."""
    return n * (n + 1) // 2


def _whole(inp: Any, out: Any, count: int, rank: int, n: int) -> Buffers:
    return Buffers(inp[:count], inp[:count], inp[:count], out[:count])


def _separate(inp: Any, out: Any, count: int, rank: int, n: int) -> Buffers:
    """Input and output apart, for the calls torch has no in-place form of."""
    return Buffers(inp[:count], out[:count], inp[:count], out[:count])


def _copy_then(step: Callable[[Any], Any], b: Buffers, in_place: bool) -> Callable[[], Any]:
    """The in-place call, or, out of place, a copy into the output buffer and the in-place call:
    torch has no out-of-place all_reduce, broadcast or reduce, and the copy is what a program pays
    to keep its input."""
    if in_place:
        return lambda: step(b.in_place_input)
    return lambda: (b.oop_output.copy_(b.oop_input), step(b.oop_output))


def _all_reduce_call(dist: Any, b: Buffers, op: Any, in_place: bool) -> Callable[[], Any]:
    return _copy_then(lambda t: dist.all_reduce(t, op=op), b, in_place)


def _broadcast_call(dist: Any, b: Buffers, op: Any, in_place: bool) -> Callable[[], Any]:
    return _copy_then(lambda t: dist.broadcast(t, src=ROOT), b, in_place)


def _reduce_call(dist: Any, b: Buffers, op: Any, in_place: bool) -> Callable[[], Any]:
    return _copy_then(lambda t: dist.reduce(t, dst=ROOT, op=op), b, in_place)


def _all_gather_buffers(inp: Any, out: Any, count: int, rank: int, n: int) -> Buffers:
    chunk = count // n
    # In place: each rank's input is its own slot of the output, as NCCL defines it.
    return Buffers(out[rank * chunk : (rank + 1) * chunk], out[:count], inp[:chunk], out[:count])


def _all_gather_call(dist: Any, b: Buffers, op: Any, in_place: bool) -> Callable[[], Any]:
    i, o = (b.in_place_input, b.in_place_output) if in_place else (b.oop_input, b.oop_output)
    return lambda: dist.all_gather_into_tensor(o, i)


def _reduce_scatter_buffers(inp: Any, out: Any, count: int, rank: int, n: int) -> Buffers:
    chunk = count // n
    return Buffers(inp[:count], inp[rank * chunk : (rank + 1) * chunk], inp[:count], out[:chunk])


def _reduce_scatter_call(dist: Any, b: Buffers, op: Any, in_place: bool) -> Callable[[], Any]:
    i, o = (b.in_place_input, b.in_place_output) if in_place else (b.oop_input, b.oop_output)
    return lambda: dist.reduce_scatter_tensor(o, i, op=op)


def _gather_buffers(inp: Any, out: Any, count: int, rank: int, n: int) -> Buffers:
    """As all_gather's, with the root's output slots for the call (None on other ranks)."""
    chunk = count // n
    slots = [out[r * chunk : (r + 1) * chunk] for r in range(n)] if rank == ROOT else None
    return Buffers(out[rank * chunk : (rank + 1) * chunk], out[:count], inp[:chunk], out[:count], slots)


def _gather_call(dist: Any, b: Buffers, op: Any, in_place: bool) -> Callable[[], Any]:
    i = b.in_place_input if in_place else b.oop_input
    return lambda: dist.gather(i, gather_list=b.layout, dst=ROOT)


def _scatter_buffers(inp: Any, out: Any, count: int, rank: int, n: int) -> Buffers:
    """The root's message in n chunks, chunk r to rank r; in place, each rank's output is its own
    chunk of the input, as NCCL defines it."""
    chunk = count // n
    parts = [inp[r * chunk : (r + 1) * chunk] for r in range(n)] if rank == ROOT else None
    return Buffers(inp[:count], inp[rank * chunk : (rank + 1) * chunk], inp[:count], out[:chunk], parts)


def _scatter_call(dist: Any, b: Buffers, op: Any, in_place: bool) -> Callable[[], Any]:
    o = b.in_place_output if in_place else b.oop_output
    return lambda: dist.scatter(o, scatter_list=b.layout, src=ROOT)


def _all_to_all_call(dist: Any, b: Buffers, op: Any, in_place: bool) -> Callable[[], Any]:
    return lambda: dist.all_to_all_single(b.oop_output, b.oop_input)


def share(src: int, dst: int, n: int) -> int:
    """alltoallv's uneven shares: rank src sends 1 + (dst - src) mod n units to rank dst. Every
    rank sends n(n+1)/2 units in all, receives as many, and keeps 1 for itself, so one bus
    factor serves every rank, while the largest share a rank sends is n times the smallest."""
    return 1 + (dst - src) % n


def _alltoallv_buffers(inp: Any, out: Any, count: int, rank: int, n: int) -> Buffers:
    unit = count // alltoallv_units(n)
    sends = [share(rank, p, n) * unit for p in range(n)]
    receives = [share(p, rank, n) * unit for p in range(n)]
    return Buffers(inp[:count], out[:count], inp[:count], out[:count], (receives, sends))


def _alltoallv_call(dist: Any, b: Buffers, op: Any, in_place: bool) -> Callable[[], Any]:
    receives, sends = b.layout
    return lambda: dist.all_to_all_single(
        b.oop_output, b.oop_input, output_split_sizes=receives, input_split_sizes=sends
    )


def _sendrecv_buffers(inp: Any, out: Any, count: int, rank: int, n: int) -> Buffers:
    # As nccl-tests' sendrecv: each rank sends to the next and receives from the previous.
    return Buffers(inp[:count], out[:count], inp[:count], out[:count], ((rank + 1) % n, (rank - 1) % n))


def _sendrecv_call(dist: Any, b: Buffers, op: Any, in_place: bool) -> Callable[[], Any]:
    to, from_ = b.layout

    def call() -> None:
        ops = [dist.P2POp(dist.isend, b.oop_input, to), dist.P2POp(dist.irecv, b.oop_output, from_)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    return call


def _assembled(v: Values, pieces: list[tuple[int, int, int]], start: int, stop: int) -> Any:
    """An output made of pieces end to end, each (source rank, offset in its input, length),
    at elements start..stop-1."""
    parts, at = [], 0
    for src, offset, length in pieces:
        lo, hi = max(start, at), min(stop, at + length)
        if lo < hi:
            parts.append(v.pattern(src, offset + lo - at, offset + hi - at))
        at += length
    return v.cat(parts)


def _gathered(v: Values, count: int, rank: int, n: int, start: int, stop: int) -> Any:
    """all_gather's output: rank r's chunk of the pattern sits at r * chunk."""
    return _assembled(v, [(r, 0, count // n) for r in range(n)], start, stop)


def _gathered_at_root(v: Values, count: int, rank: int, n: int, start: int, stop: int) -> Any:
    return _gathered(v, count, rank, n, start, stop) if rank == ROOT else None


def _reduced_at_root(v: Values, count: int, rank: int, n: int, start: int, stop: int) -> Any:
    return v.reduced(start, stop) if rank == ROOT else None


def _scattered(v: Values, count: int, rank: int, n: int, start: int, stop: int) -> Any:
    chunk = count // n
    return v.pattern(ROOT, rank * chunk + start, rank * chunk + stop)


def _exchanged(v: Values, count: int, rank: int, n: int, start: int, stop: int) -> Any:
    """all_to_all's output: from each rank p, in rank order, p's chunk for this rank."""
    chunk = count // n
    return _assembled(v, [(p, rank * chunk, chunk) for p in range(n)], start, stop)


def _exchanged_unevenly(v: Values, count: int, rank: int, n: int, start: int, stop: int) -> Any:
    """alltoallv's output: from each rank p, in rank order, p's share for this rank, which sits in
    p's input after its shares for the ranks before this one."""
    unit = count // alltoallv_units(n)
    pieces = [(p, sum(share(p, q, n) for q in range(rank)) * unit, share(p, rank, n) * unit) for p in range(n)]
    return _assembled(v, pieces, start, stop)


COLLECTIVES = {
    c.name: c
    for c in (
        Collective(
            name="all_reduce",
            bus_factor=lambda n: 2 * (n - 1) / n,
            parts=_one,
            reduces=True,
            buffers=_whole,
            call=_all_reduce_call,
            expected=lambda v, count, rank, n, start, stop: v.reduced(start, stop),
            gloo_sent=_ring_sent,
        ),
        Collective(
            name="all_gather",
            bus_factor=lambda n: (n - 1) / n,
            parts=_per_rank,
            reduces=False,
            buffers=_all_gather_buffers,
            call=_all_gather_call,
            expected=_gathered,
        ),
        Collective(
            name="reduce_scatter",
            bus_factor=lambda n: (n - 1) / n,
            parts=_per_rank,
            reduces=True,
            buffers=_reduce_scatter_buffers,
            call=_reduce_scatter_call,
            expected=lambda v, count, rank, n, start, stop: v.reduced(
                rank * (count // n) + start, rank * (count // n) + stop
            ),
        ),
        Collective(
            name="broadcast",
            bus_factor=lambda n: 1.0,
            parts=_one,
            reduces=False,
            buffers=_whole,
            call=_broadcast_call,
            expected=lambda v, count, rank, n, start, stop: v.pattern(ROOT, start, stop),
        ),
        Collective(
            name="all_to_all",
            bus_factor=lambda n: (n - 1) / n,
            parts=_per_rank,
            reduces=False,
            buffers=_separate,
            call=_all_to_all_call,
            expected=_exchanged,
            in_place=False,
            gloo_sent=_each_sent,
        ),
        Collective(
            name="alltoallv",
            bus_factor=lambda n: 1 - 1 / alltoallv_units(n),
            parts=alltoallv_units,
            reduces=False,
            buffers=_alltoallv_buffers,
            call=_alltoallv_call,
            expected=_exchanged_unevenly,
            in_place=False,
            gloo_sent=_shares_sent,
        ),
        Collective(
            name="reduce",
            bus_factor=lambda n: 1.0,
            parts=_one,
            reduces=True,
            buffers=_whole,
            call=_reduce_call,
            expected=_reduced_at_root,
        ),
        Collective(
            name="gather",
            bus_factor=lambda n: (n - 1) / n,
            parts=_per_rank,
            reduces=False,
            buffers=_gather_buffers,
            call=_gather_call,
            expected=_gathered_at_root,
        ),
        Collective(
            name="scatter",
            bus_factor=lambda n: (n - 1) / n,
            parts=_per_rank,
            reduces=False,
            buffers=_scatter_buffers,
            call=_scatter_call,
            expected=_scattered,
        ),
        Collective(
            name="sendrecv",
            bus_factor=lambda n: 1.0,
            parts=_one,
            reduces=False,
            buffers=_sendrecv_buffers,
            call=_sendrecv_call,
            expected=lambda v, count, rank, n, start, stop: v.pattern((rank - 1) % n, start, stop),
            in_place=False,
            min_ranks=2,
            gloo_sent=_next_sent,
        ),
    )
}


def node_groups(node_of: list[int]) -> tuple[dict[str, list[list[int]]], dict[str, str]]:
    """The subgroups of ranks whose nodes are `node_of` (node of rank r at index r), by kind:
    INTRA, each node's ranks; INTER, the i-th rank of each node, for every i. Both need two or
    more nodes of two or more ranks each, one count on every node: on one node INTRA is the
    world, with one rank per node INTER is. Returns (groups by kind, why each kind is left out)."""
    nodes: dict[int, list[int]] = {}
    for rank, node in enumerate(node_of):
        nodes.setdefault(node, []).append(rank)
    members = list(nodes.values())
    counts = sorted({len(m) for m in members})
    why = (
        "one node: the world's ranks"
        if len(members) < 2
        else "one rank per node: the world's ranks"
        if counts == [1]
        else f"nodes hold {' or '.join(map(str, counts))} ranks, not one count"
        if len(counts) > 1
        else None
    )
    if why:
        return {}, {INTRA: why, INTER: why}
    return {INTRA: members, INTER: [list(column) for column in zip(*members)]}, {}


def collective(name: str) -> Collective:
    try:
        return COLLECTIVES[name]
    except KeyError:
        raise ValueError(f"unknown collective {name!r}; valid: {', '.join(COLLECTIVES)}") from None
