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

from benchmarks.catalog import INTER, INTRA, WORLD, collective

RINGS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")


def _nodes(ranks: int, per_node: int) -> tuple[int, int]:
    """(largest, smallest) count of ranks on a node, `ranks` placed `per_node` to a node in rank
    order: every node full but perhaps the last."""
    largest = min(per_node, ranks)
    return largest, ranks - per_node * ((ranks - 1) // per_node)


def _all_to_all(ranks: int, largest: int, smallest: int) -> tuple[int, int, int]:
    # S/n to each other rank: the rank on the smallest node sends the most off it
    return ranks - smallest, largest - 1, ranks


def _gather(ranks: int, largest: int, smallest: int) -> tuple[int, int, int]:
    # the root takes S/n from each other rank, its own node's (the first, a full one) on-node
    return ranks - largest, largest - 1, ranks


def _sendrecv(ranks: int, largest: int, smallest: int) -> tuple[int, int, int]:
    # all of S to the next rank: off a node whenever there are two, on it whenever one holds two
    return int(largest < ranks), int(largest > 1), 1


def _alltoallv(ranks: int, largest: int, smallest: int) -> tuple[int, int, int]:
    """Rank src sends 1 + (dst - src) mod n units of n(n+1)/2 to dst (catalog.share): (n-1)(n+2)/2
    to the others in all. On a node of m ranks, the one at place i sends (m-1) + (m-1-i)(m-i)/2 +
    i n - i(i+1)/2 of them on the node, which grows by n - m with each place: the last place sends
    the most on the node, (m-1)(n + 1 - m/2), and the first the most off it, the rest less its
    on-node (m-1)(m+2)/2. What a rank receives mirrors it (place j receives what place m-1-j
    sends). On-node grows and off-node shrinks with m, so the largest node holds the busiest
    on-node rank and the smallest the busiest off-node one (docs/concepts/expected.md)."""
    n = ranks
    off = (n - 1) * (n + 2) // 2 - (smallest - 1) * (smallest + 2) // 2
    on = (largest - 1) * (2 * n + 2 - largest) // 2
    return off, on, n * (n + 1) // 2


# For each point-to-point collective, (off-node, on-node, units): the busiest rank's shares of
# the message S (nccl-tests' size) in units of S / units, as benchmarks/catalog.py lays out each
# collective's buffers (gather's S is the root's whole output), for ranks `ranks` with nodes of
# at most `largest` and at least `smallest` of them. scatter is gather turned round.
POINT_TO_POINT: dict[str, Callable[[int, int, int], tuple[int, int, int]]] = {
    "all_to_all": _all_to_all,
    "alltoallv": _alltoallv,
    "gather": _gather,
    "scatter": _gather,
    "sendrecv": _sendrecv,
}


def heaviest(name: str, ranks: int, per_node: int) -> tuple[float, float]:
    """(off-node, on-node) shares of S through the busiest rank's NIC and intra-node link, sent
    or received, whichever is more, of a point-to-point collective over `ranks` ranks placed
    `per_node` to a node in rank order (as torchrun and srun place them). Each is a separate
    link, full duplex; the busiest rank of each is taken, so the time is bounded below by both."""
    off, on, units = POINT_TO_POINT[name](ranks, *_nodes(ranks, per_node))
    return off / units, on / units


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
    off, on = heaviest(name, ranks, per_node)
    factor = collective(name).bus_factor(ranks)
    if off and per_rank is None:
        return None
    if not off and not intra:
        return None
    # seconds per GB of S: the busier of the rank's two links (an unstated intra-node link is
    # taken as no bound: the peak is then the network's, never lower than the truth)
    seconds = max(off / per_rank if off and per_rank else 0.0, on / intra if on and intra else 0.0)
    return factor / seconds
