"""Slurm's hostlist syntax (`gpu[001-064,070]`): node names compressed into it and expanded
from it, as `scontrol show hostlistsorted` and `scontrol show hostnames` do (Slurm 22.05, checked
case by case in tests/modules/harness/nodes/test_rounds.py), so that bench needs no Slurm command for it; and what
a node's name and a hostlist may hold.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable

from benchmarks.common import runs

NODE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # what a node's name may hold (Slurm and DNS)
# A hostlist as a user gives it and an #SBATCH line can carry: names, brackets, ranges, commas
HOSTLIST_RE = re.compile(r"[A-Za-z0-9._\[\],-]{1,4096}")


_NAME = re.compile(r"(.*?)(\d+)")


def hostlist(names: Iterable[str]) -> str:
    """Names in Slurm's hostlist syntax, each once, as `scontrol show hostlistsorted` writes them
    (checked against Slurm 22.05.8 for every case of tests/modules/harness/nodes/test_rounds.py): a prefix and its
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
        spans = runs(sorted(numbers))
        text = ",".join(f"{a:0{width}d}" if a == b else f"{a:0{width}d}-{b:0{width}d}" for a, b in spans)
        out.append(f"{prefix}{text}" if len(numbers) == 1 else f"{prefix}[{text}]")
    return ",".join(out + plain)


# More names than a hostlist may expand to: a typing slip (n[1-99999999]) is refused, not expanded.
MAX_HOSTS = 100_000
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def expand_hostlist(text: str, limit: int = MAX_HOSTS) -> list[str]:
    """The names of a Slurm hostlist in order, as `scontrol show hostnames` expands them
    (checked against `scontrol show hostnames` of Slurm 22.05.8 for every case of
    tests/modules/harness/nodes/test_rounds.py), without Slurm: terms apart at the commas outside brackets; in a
    bracket, numbers and ranges apart at commas, each range as wide as its lower bound is written
    (gpu[008-010]: gpu008, gpu009, gpu010; n[9-10]: n9, n10); several brackets in one term, their
    product in order. ValueError says what is wrong."""
    terms, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        if depth not in (0, 1):
            raise ValueError(f"{text!r}: brackets do not pair")
        if c == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"{text!r}: brackets do not pair")
    terms.append(text[start:])
    names: list[str] = []
    for term in filter(None, terms):  # Slurm skips an empty one (a,,b)
        parts = re.split(r"\[([^\]]*)\]", term)  # literal, bracket, literal, bracket, ..., literal
        if len(parts) > 1 and parts[-1]:  # Slurm 22.05: "Invalid hostlist: n[2-3]ib"
            raise ValueError(f"{text!r}: {parts[-1]!r} follows a bracket, which Slurm does not accept")
        choices = [[p] if i % 2 == 0 else _numbers(p, text) for i, p in enumerate(parts)]
        count = math.prod(len(c) for c in choices)
        if len(names) + count > limit:
            raise ValueError(f"{text!r}: more than {limit:,} names")
        names += ["".join(p) for p in itertools.product(*choices)]
    if not names:
        raise ValueError(f"{text!r}: no node name")
    bad = next((n for n in names if not NODE_NAME_RE.fullmatch(n)), None)
    if bad is not None:
        raise ValueError(f"node name {bad!r} is not one bench can pass on (letters, digits, . _ -)")
    return names


def _numbers(bracket: str, text: str) -> list[str]:
    """A bracket's numbers as text, each range at the width of its lower bound."""
    out: list[str] = []
    for item in bracket.split(","):
        m = _RANGE.fullmatch(item)
        if m is None or (m[2] is not None and int(m[2]) < int(m[1])):
            raise ValueError(f"{text!r}: [{bracket}] holds {item!r}, not a number or a range lo-hi")
        low, high = int(m[1]), int(m[2] if m[2] is not None else m[1])
        if high - low >= MAX_HOSTS:
            raise ValueError(f"{text!r}: more than {MAX_HOSTS:,} names")
        out += [f"{v:0{len(m[1])}d}" for v in range(low, high + 1)]
    return out
