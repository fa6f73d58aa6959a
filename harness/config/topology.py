"""A fabric's leaf switches as Slurm states them (docs/guides/nodes.md, "Leaves"), for a cluster
profile's `topology:`: a topology.conf of the topology/tree plugin (topology.conf(5): lines of
`SwitchName=NAME Nodes=HOSTLIST` or `SwitchName=NAME Switches=NAMES`), or what `scontrol show
topology` prints of the running controller's tree (one line a switch, `SwitchName=leaf1 Level=0
LinkSpeed=1 Nodes=bnode[1-4]`, Slurm 22.05.8; tests/fixtures/topology/). A leaf is a switch with
nodes below it and no switch: Level=0 where the line states a level.
"""

from __future__ import annotations

from harness.config.cluster_profile import Leaf
from harness.config.fields import FieldError


def leaves_of(text: str) -> tuple[Leaf, ...]:
    """The leaf switches `text` states, in its order. ValueError names the line and what is
    wrong: a line that is not a switch's, a switch stated twice, a hostile name or a hostlist
    that does not expand, topology/block's blocks (read by no check yet), or no leaf at all."""
    leaves: list[Leaf] = []
    seen: set[str] = set()
    for number, line in _lines(text):
        fields = _fields(line, number)
        name = fields.get("switchname")
        if name is None:
            if "blockname" in fields:
                raise ValueError(f"line {number}: topology/block's BlockName is not read; state leaves in the profile")
            raise ValueError(f"line {number}: {_short(line)!r} states no SwitchName=")
        if name in seen:
            raise ValueError(f"line {number}: switch {_short(name)!r} is stated twice")
        seen.add(name)
        level = fields.get("level")
        if level is not None and not level.isdigit():
            raise ValueError(f"line {number}: Level={_short(level)!r} is not a number")
        leaf = "nodes" in fields and (level == "0" if level is not None else "switches" not in fields)
        if leaf:
            try:
                leaves.append(Leaf(name=name, nodes=fields["nodes"]))
            except FieldError as exc:
                raise ValueError(f"line {number}: {exc}") from None
    if not leaves:
        raise ValueError("no leaf switch (SwitchName=NAME Nodes=HOSTLIST); is the topology plugin topology/tree?")
    return tuple(leaves)


def leaf_in_address(address: str, pattern: str, host: str) -> str:
    """The leaf switch above `host` in its job step's SLURM_TOPOLOGY_ADDR (`spine.leaf1.bnode3`),
    read by SLURM_TOPOLOGY_ADDR_PATTERN (`switch.switch.node`): the switch the node hangs from.
    ValueError says what does not fit: parts that do not pair, a last part that is not this
    node, no switch above it, or a hostile switch name."""
    parts, kinds = address.split("."), pattern.split(".")
    if len(parts) != len(kinds) or len(kinds) < 2 or kinds[-2:] != ["switch", "node"]:
        raise ValueError(
            f"SLURM_TOPOLOGY_ADDR {_short(address)!r} by pattern {_short(pattern)!r}: no switch above a node"
        )
    if parts[-1] != host:
        raise ValueError(f"SLURM_TOPOLOGY_ADDR {_short(address)!r} ends in another node than {host}")
    try:
        return Leaf(name=parts[-2], nodes=host).name
    except FieldError as exc:
        raise ValueError(f"SLURM_TOPOLOGY_ADDR {_short(address)!r}: {exc}") from None


def _lines(text: str) -> list[tuple[int, str]]:
    """(number of its first line, text) of each statement: comments (`#` on) dropped, a line
    that ends in a backslash joined to the next, blank ones skipped."""
    out: list[tuple[int, str]] = []
    pending, first = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            first = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.strip():
            out.append((first, line))
    if pending.strip():
        out.append((first, pending))
    return out


def _fields(line: str, number: int) -> dict[str, str]:
    """KEY=VALUE words of a line, keys in lower case (Slurm's keys ignore case)."""
    fields: dict[str, str] = {}
    for word in line.split():
        key, eq, value = word.partition("=")
        if not eq or not key or not value:
            raise ValueError(f"line {number}: {_short(word)!r} is not KEY=VALUE")
        if key.lower() in fields:
            raise ValueError(f"line {number}: {_short(key)} is stated twice")
        fields[key.lower()] = value
    return fields


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."
