"""A sweep file in, with the command line's `--set`, `--only`, `--max-nodes` and `--repeat`
applied, a checked `Sweep` (harness/config/spec.py) out; every error names the file."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from benchmarks.catalog import WORKLOADS
from harness.config.fields import DuplicateKey, build, load_yaml, read_mapping
from harness.config.spec import AXIS_ALIASES, MATRIX_AXES, MatrixRule, Sweep
from harness.errors import SpecError


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `--set key.path=value` to the raw mapping; the value is read as YAML."""
    if "=" not in assignment:
        raise SpecError(f"--set {assignment!r}: expected KEY=VALUE, e.g. workloads.synthetic.steps=20")
    path, _, raw = assignment.partition("=")
    keys = path.strip().split(".")
    if not all(keys):
        raise SpecError(f"--set {assignment!r}: empty key in {path!r}")
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except DuplicateKey as exc:  # a value meant as YAML, which would lose the first
        raise SpecError(f"--set {path}: {exc.problem}") from None
    except yaml.YAMLError:
        value = raw
    if isinstance(value, dict):
        raise SpecError(f"--set {path}: sets scalars and lists, not mappings; edit the sweep file instead")
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        # a section left empty (`real:`) is still a section; and a workload the sweep leaves out
        # is one --set adds (`workloads.transformer.steps=6`), with its defaults for the rest
        if child is None and (key in node or (keys[:i] == ["workloads"] and key in WORKLOADS)):
            child = node[key] = {}
        if not isinstance(child, dict):
            raise SpecError(f"--set {path}: {'.'.join(keys[: i + 1])} is not a section of this sweep")
        node = child
    node[keys[-1]] = value


def only_rule(sweep: Sweep, selections: tuple[str, ...]) -> MatrixRule:
    """The rule `--only AXIS=V1,V2 [--only ...]` states, each value checked against the sweep's
    own values on that axis, so that a typo is an error rather than an empty selection."""
    chosen: dict[str, tuple[Any, ...]] = {}
    for text in selections:
        axis, sep, raw = (part.strip() for part in text.partition("="))
        axis = AXIS_ALIASES.get(axis, axis)
        if not sep or axis not in MATRIX_AXES:
            raise SpecError(f"--only {text!r}: expected AXIS=V1,V2 with AXIS one of {', '.join(MATRIX_AXES)}")
        present = {
            "nodes": sweep.node_counts,
            "gpus_per_node": tuple(sorted(sweep.gpus_per_node)),
            "launcher": sweep.launchers,
            "nccl": tuple(sweep.nccl),
        }[axis]
        values = [v.strip() for v in raw.split(",") if v.strip()]
        missing = [v for v in values if v not in {str(p) for p in present}]
        if not values or missing:
            what = f"{missing[0]!r} is not" if missing else "names no value; list values"
            raise SpecError(f"--only {axis}: {what} among the sweep's {axis}: {', '.join(map(str, present))}")
        if axis in chosen:
            raise SpecError(f"--only {axis} is given twice; list the values once, e.g. {axis}=A,B")
        chosen[axis] = tuple(p for p in present if str(p) in values)
    return MatrixRule(**chosen)


def load_sweep(
    path: str | Path,
    *,
    max_nodes: int | None = None,
    repeat: int | None = None,
    overrides: tuple[str, ...] = (),
    only: tuple[str, ...] = (),
) -> Sweep:
    """Read, override and check a sweep file. Errors name the file: `SpecError('FILE: key: ...')`."""
    path = Path(path)
    data = read_mapping(path, "sweep")
    try:
        for assignment in overrides:
            apply_override(data, assignment)
        for flag, key, value in (("--max-nodes", "max_nodes", max_nodes), ("--repeat", "repeat", repeat)):
            if value is not None:
                if value < 1:
                    raise SpecError(f"{flag} must be at least 1, found {value}")
                data[key] = value
        sweep = build(Sweep, data, "")
        if not sweep.node_counts:
            raise SpecError(f"nodes: no node count of {list(sweep.nodes)} is within max_nodes {sweep.max_nodes}")
        if only:
            sweep = dataclasses.replace(sweep, only=only_rule(sweep, only))
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None
    return sweep
