"""The busbw a job's links allow: NCCL's model of where each collective's bytes go.

busbw is nccl-tests' bus bandwidth, algbw x the collective's bus factor (benchmarks/catalog.py),
which makes it "comparable with the hardware link speed whatever n is". What hardware it is
comparable with depends on how NCCL moves the bytes (docs/concepts/expected.md has the derivation, its
sources and the published figures it is checked against):

- **Rings** (all_reduce, all_gather, reduce_scatter, broadcast, reduce). NCCL splits the message
  over its channels, one ring each, and on rail-optimised nodes each channel leaves the node on
  the NIC next to its GPU. Each ring's hops carry bus factor x S / channels, so across nodes
  busbw reaches the sum of the NICs the job's GPUs reach, and no more than one GPU's intra-node
  link (every ring passes through every GPU of the node). One rank per node (the `inter` group)
  has its own NIC's share; inside one node, the intra-node link.
- **Point to point** (all_to_all, alltoallv, gather, scatter, sendrecv). Each rank's bytes go
  straight to their peer: what leaves or enters the node crosses the rank's own share of the
  node's NICs, what stays crosses its intra-node link, both at once, and the slowest rank's time
  is the call's. The peak is the bus factor over that time.

The network is shared by the job's ranks on a node, or by its NICs where there are more NICs
than ranks: each rank's share is network / max(ranks per node, NICs) (a rank uses the NIC
next to it, not its neighbours').
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from benchmarks.catalog import INTER, INTRA, ROOT, WORLD, alltoallv_units, collective, share

RINGS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")


def _all_to_all(src: int, dst: int, n: int) -> float:
    return 1 / n


def _alltoallv(src: int, dst: int, n: int) -> float:
    return share(src, dst, n) / alltoallv_units(n)


def _gather(src: int, dst: int, n: int) -> float:
    return 1 / n if dst == ROOT else 0.0


def _scatter(src: int, dst: int, n: int) -> float:
    return 1 / n if src == ROOT else 0.0


def _sendrecv(src: int, dst: int, n: int) -> float:
    return 1.0 if dst == (src + 1) % n else 0.0


# The share of the message S (nccl-tests' size) that rank src sends rank dst, src != dst, as
# benchmarks/catalog.py lays out each collective's buffers (gather's S is the root's whole output).
TRAFFIC: dict[str, Callable[[int, int, int], float]] = {
    "all_to_all": _all_to_all,
    "alltoallv": _alltoallv,
    "gather": _gather,
    "scatter": _scatter,
    "sendrecv": _sendrecv,
}


@lru_cache(maxsize=4096)
def _heaviest(name: str, ranks: int, per_node: int) -> tuple[float, float]:
    """(off-node, on-node) shares of S through the busiest rank's NIC and intra-node link, sent
    or received, whichever is more, of a point-to-point collective over `ranks` ranks placed
    `per_node` to a node in rank order (as torchrun and srun place them). Each is a separate
    link, full duplex; the busiest rank of each is taken, so the time is bounded below by both."""
    traffic = TRAFFIC[name]
    off_out, off_in = [0.0] * ranks, [0.0] * ranks
    on_out, on_in = [0.0] * ranks, [0.0] * ranks
    for src in range(ranks):
        for dst in range(ranks):
            if src == dst:
                continue
            part = traffic(src, dst, ranks)
            if src // per_node == dst // per_node:
                on_out[src] += part
                on_in[dst] += part
            else:
                off_out[src] += part
                off_in[dst] += part
    return max(off_out + off_in), max(on_out + on_in)


def peak_busbw_gbps(
    *,
    name: str,
    group: str,
    nodes: int,
    gpus_per_node: int,
    network_gbps_per_node: float | None,
    nics_per_node: int | None,
    intra_node_gbps_per_gpu: float | None,
) -> float | None:
    """The busbw a job of `nodes` x `gpus_per_node` ranks can reach with collective `name` over
    `group` (docs/concepts/expected.md), in GB/s; None when it moves nothing over a link, or when the
    link it is bounded by is not stated."""
    # one rank's share of its node's NICs: the NIC next to it, or its part of the ones it shares
    per_rank = (
        network_gbps_per_node / max(gpus_per_node, nics_per_node) if network_gbps_per_node and nics_per_node else None
    )
    intra = intra_node_gbps_per_gpu
    if group == INTRA or nodes == 1:
        ranks, per_node = gpus_per_node, gpus_per_node
    elif group == INTER:
        ranks, per_node = nodes, 1
    elif group == WORLD:
        ranks, per_node = nodes * gpus_per_node, gpus_per_node
    else:
        raise ValueError(f"unknown group {group!r}")
    if ranks < 2:
        return None
    if name in RINGS:
        if per_node == ranks:  # every rank in one node
            return intra
        if per_node == 1:  # one rank per node: each ring hop on that rank's NIC share
            return per_rank
        if per_rank is None:
            return None
        across = per_node * per_rank  # every channel's hop on a NIC of its own
        return min(across, intra) if intra else across
    off, on = _heaviest(name, ranks, per_node)
    factor = collective(name).bus_factor(ranks)
    if off and per_rank is None:
        return None
    if not off and not intra:
        return None
    # seconds per GB of S: the busier of the rank's two links (an unstated intra-node link is
    # taken as no bound: the peak is then the network's, never lower than the truth)
    seconds = max(off / per_rank if off and per_rank else 0.0, on / intra if on and intra else 0.0)
    return factor / seconds
