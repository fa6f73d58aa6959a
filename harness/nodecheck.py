"""Planning the cluster-wide node and link check: which pairs of nodes meet in which round, and
the names of nodes in Slurm's hostlist syntax.

Every pair of N nodes is tested in N - 1 rounds (N even; N rounds when odd, one node idle in
each), each round a set of disjoint pairs that run at once: the circle method of a round-robin
tournament, the schedule `benchmarks/allreduce.py`'s link probe follows between ranks. Node N - 1
(N when odd: a phantom whose partner sits out) stays put; in round r it meets node r, and node
r + k meets node r - k (mod N - 1) for k = 1 .. N/2 - 1. So the check takes O(N) rounds, not
O(N^2) jobs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


def rounds(n: int) -> list[list[tuple[int, int]]]:
    """The rounds of a round-robin tournament of nodes 0..n-1: each a list of disjoint pairs
    (low, high); every pair of nodes meets in exactly one round."""
    if n < 2:
        return []
    m = n - 1 + n % 2  # the nodes that rotate; the fixed one is m, a phantom when n is odd
    half = (m + 1) // 2
    out = []
    for r in range(m):
        pairs = [] if m >= n else [(r, m)]
        for k in range(1, half):
            a, b = (r + k) % m, (r - k) % m
            pairs.append((a, b) if a < b else (b, a))
        out.append(pairs)
    return out


_NAME = re.compile(r"(.*?)(\d+)")


def hostlist(names: Iterable[str]) -> str:
    """Names in Slurm's hostlist syntax, each once, as `scontrol show hostlistsorted` writes them
    (checked against Slurm 22.05.8 for every case of tests/test_nodecheck.py): a prefix and its
    numbers in brackets, runs as ranges, leading zeros kept (`gpu[001-004,010]`, `bnode[3,7]`,
    `bnode3` alone); names of other prefixes or widths, or with no number, after a comma."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    numbered = []
    for name in dict.fromkeys(names):
        m = _NAME.fullmatch(name)
        if m is None:
            plain.append(name)
        else:
            numbered.append((m[1], m[2]))
    # A number with leading zeros fixes its width; one without joins a padded group of its own
    # length (gpu099 and gpu100: gpu[099-100]), else the unpadded numbers (node9 and node10: node[9-10]).
    padded = {(prefix, len(digits)) for prefix, digits in numbered if len(digits) > 1 and digits[0] == "0"}
    for prefix, digits in numbered:
        width = len(digits) if (prefix, len(digits)) in padded else 0
        groups.setdefault((prefix, width), []).append(int(digits))
    out = []
    for (prefix, width), numbers in groups.items():
        spans = _spans(sorted(numbers))
        text = ",".join(f"{a:0{width}d}" if a == b else f"{a:0{width}d}-{b:0{width}d}" for a, b in spans)
        out.append(f"{prefix}{text}" if len(numbers) == 1 else f"{prefix}[{text}]")
    return ",".join(out + plain)


def _spans(numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted numbers as runs of consecutive ones: [1, 2, 3, 7] -> [(1, 3), (7, 7)]."""
    spans: list[tuple[int, int]] = []
    for v in numbers:
        if spans and v == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], v)
        else:
            spans.append((v, v))
    return spans
