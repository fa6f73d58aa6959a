"""What the workload library offers: its workloads, collectives, data types and reduction ops.

One record per collective, as nccl-tests keeps one per test (docs/reference.md): its bus
factor, how it lays out its buffers, the torch.distributed call, and the values a correct call
leaves behind. `benchmarks.allreduce` measures with these records; the harness validates
sweeps against the same tables. This module imports no torch, so the harness can read it at
start-up: the tensor work is done by the objects the workload passes in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

# The collective microbenchmark and the two DDP training workloads; `bench run WORKLOAD`.
COLLECTIVE_WORKLOAD = "allreduce"
TRAINING = ("synthetic", "real")
WORKLOADS = (COLLECTIVE_WORKLOAD, *TRAINING)
SCALINGS = ("weak", "strong")
DEVICES = ("auto", "cuda", "cpu")
BACKENDS = ("auto", "nccl", "gloo")
AMPS = ("auto", "bf16", "fp16", "off")

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
    split: bool  # the message is n equal chunks, one per rank
    reduces: bool  # takes a reduction op
    buffers: Callable[[Any, Any, int, int, int], Buffers]  # (inp, out, count, rank, n)
    call: Callable[[Any, Buffers, Any, bool], Callable[[], Any]]  # (dist, buffers, op, in_place)
    # (values, count, rank, n, start, stop): what this rank's output holds at elements
    # start..stop-1 after a correct call, so a check can run a slice at a time
    expected: Callable[[Values, int, int, int, int, int], Any]

    def chunks(self, world_size: int) -> int:
        """How many equal parts a message size must divide into."""
        return world_size if self.split else 1


# Bus factors from nccl-tests' PERFORMANCE.md (docs/reference.md): all_reduce moves 2(n-1)/n of
# the data over each rank's link, all_gather and reduce_scatter (n-1)/n, broadcast 1, so busbw
# is comparable with link speed for any n.


def _whole(inp: Any, out: Any, count: int, rank: int, n: int) -> Buffers:
    return Buffers(inp[:count], inp[:count], inp[:count], out[:count])


def _all_reduce_call(dist: Any, b: Buffers, op: Any, in_place: bool) -> Callable[[], Any]:
    if in_place:
        return lambda: dist.all_reduce(b.in_place_input, op=op)
    # torch has no out-of-place all_reduce: the copy is what a program pays to keep its input.
    return lambda: (b.oop_output.copy_(b.oop_input), dist.all_reduce(b.oop_output, op=op))


def _broadcast_call(dist: Any, b: Buffers, op: Any, in_place: bool) -> Callable[[], Any]:
    if in_place:
        return lambda: dist.broadcast(b.in_place_input, src=0)
    return lambda: (b.oop_output.copy_(b.oop_input), dist.broadcast(b.oop_output, src=0))


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


def _gathered(v: Values, count: int, rank: int, n: int, start: int, stop: int) -> Any:
    """all_gather's output at start..stop-1: rank r's chunk of the pattern sits at r * chunk."""
    chunk = count // n
    parts = [
        v.pattern(r, max(start, r * chunk) - r * chunk, min(stop, (r + 1) * chunk) - r * chunk)
        for r in range(start // chunk, -(-stop // chunk))
    ]
    return v.cat(parts)


COLLECTIVES = {
    c.name: c
    for c in (
        Collective(
            name="all_reduce",
            bus_factor=lambda n: 2 * (n - 1) / n,
            split=False,
            reduces=True,
            buffers=_whole,
            call=_all_reduce_call,
            expected=lambda v, count, rank, n, start, stop: v.reduced(start, stop),
        ),
        Collective(
            name="all_gather",
            bus_factor=lambda n: (n - 1) / n,
            split=True,
            reduces=False,
            buffers=_all_gather_buffers,
            call=_all_gather_call,
            expected=_gathered,
        ),
        Collective(
            name="reduce_scatter",
            bus_factor=lambda n: (n - 1) / n,
            split=True,
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
            split=False,
            reduces=False,
            buffers=_whole,
            call=_broadcast_call,
            expected=lambda v, count, rank, n, start, stop: v.pattern(0, start, stop),
        ),
    )
}


def collective(name: str) -> Collective:
    try:
        return COLLECTIVES[name]
    except KeyError:
        raise ValueError(f"unknown collective {name!r}; valid: {', '.join(COLLECTIVES)}") from None
