"""The pairwise link probe of the collectives workload (benchmarks/collectives.py, --link-bytes):
pairs of ranks exchange a message once per pass, each pair timed on its own, so a slow link or
NIC shows in the pairs that hold its node and in no other (harness/evidence/stragglers.py names it).
Up to LINK_ROUNDS rounds every pair meets; past them each rank meets that many partners.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import torch
import torch.distributed as dist

from .runtime import Context, gather_at_root


def pair_partner(rank: int, round_: int, world: int) -> int | None:
    """Rank's partner in round `round_` (0 .. rounds(world) - 1) of a round-robin schedule in
    which every pair of ranks meets exactly once (the circle method); None: idle this round
    (odd world sizes, where one rank sits out each round)."""
    n = world + world % 2
    if rank == n - 1:
        partner = round_
    elif rank == round_:
        partner = n - 1
    else:
        partner = (2 * round_ - rank) % (n - 1)
    return None if partner >= world else partner


def pair_rounds(world: int) -> int:
    return world - 1 + world % 2


# The probe's rounds at most. Every pair of up to 32 ranks (four nodes of 8) meets; with more,
# each rank meets this many partners, in rounds spread over the schedule (probe_rounds), so that
# a node's partners are on nodes across the job (round k pairs rank i with 2k - i: the circle
# method, docs/reference/sources.md, "Round-robin pairing"). Every pair would grow as the ranks
# squared, in rounds a pass, each behind a barrier, and in pair times kept (docs/concepts/scale.md,
# "The link probe"). The straggler rule takes a node's median pair (harness/evidence/stragglers.py):
# its ranks x LINK_ROUNDS pairs.
LINK_ROUNDS = 32


def probe_rounds(world: int, most: int = LINK_ROUNDS) -> list[int]:
    """The rounds of the schedule the probe runs, in order: all of them up to `most`, else `most`
    spread evenly over the first half, in which a rank's partners (2k - i) go once round the
    ranks, nearly each on a node of its own; over the whole they would go round twice, two to a
    node."""
    total = pair_rounds(world)
    if total <= most:
        return list(range(total))
    span = total // 2 if total >= 2 * most else total
    return [k * span // most for k in range(most)]


def link_probe(args: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    """Time a two-way exchange of --link-bytes with each partner of the probe's rounds, one pair
    at a time.

    Collective and DDP timings cannot say which node is slow: every rank waits for the slowest,
    so all ranks see the same times. A pairwise exchange can. The pair (i, j) is timed on its
    own (a barrier between rounds), so a slow link or NIC shows in every pair that has the slow
    node in it, and in no other pair."""
    world, rank = ctx.launch.world_size, ctx.launch.rank
    count = max(1, args.link_bytes // 4)
    send = torch.ones(count, dtype=torch.float32, device=ctx.device)
    recv = torch.empty_like(send)
    cuda = ctx.device.type == "cuda"
    partners = [pair_partner(rank, k, world) for k in probe_rounds(world)]
    rounds = len(partners)
    times = [[math.nan] * args.link_iters for _ in range(rounds)]
    for it in range(-1, args.link_iters):  # pass -1 is warmup: connections, first-touch costs
        for k, peer in enumerate(partners):
            dist.barrier()
            if peer is None:
                continue
            t0 = time.perf_counter_ns()
            ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            if cuda:
                torch.cuda.synchronize()
            if it >= 0:
                times[k][it] = (time.perf_counter_ns() - t0) / 1e3
    dist.barrier()
    flat = [-1.0 if p is None else float(p) for p in partners] + [t for row in times for t in row]
    every = gather_at_root(flat, ctx)  # only rank 0 writes them: each other rank gets []
    return {
        "size_bytes": count * 4,
        "iters": args.link_iters,
        "partners": [[None if p < 0 else int(p) for p in r[:rounds]] for r in every],
        "time_us": [
            [r[rounds + k * args.link_iters : rounds + (k + 1) * args.link_iters] for k in range(rounds)] for r in every
        ],
    }
