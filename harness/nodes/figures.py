"""A node check's figures, read back from its run directory (harness/nodes/driver.py writes
them): every step's result by the record of its rounds, the links measured again, the soak's
passes, each read as untrusted data, as harness/nodes/verdict.py takes them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.results import load_result, wrong_results
from harness.nodes import rounds as node_rounds
from harness.nodes.driver import FOLDER, RECORD, Plan, read_record
from harness.nodes.rounds import Options, Step
from harness.run.rundir import COMPLETED

# (a, b) -> metric -> its two readings, of the links measured again; the pairs' figures hold the better
Readings = dict[tuple[str, str], dict[str, tuple[float, float]]]


@dataclass
class RailFigures:
    """What one rail's steps measured: its pairs' figures, its failures and the readings of its
    links measured again, as in Figures."""

    pairs: dict[str, dict[tuple[str, str], float | None]]
    failures: dict[str, str]
    again: Readings = dataclasses.field(default_factory=dict)


@dataclass
class Figures:
    """What a check's steps measured, as `harness.nodes.verdict.judge` takes it."""

    names: list[str]
    nodes: dict[str, dict[str, float | None]]  # metric -> node -> figure, None: its step failed
    pairs: dict[str, dict[tuple[str, str], float | None]]  # metric -> (a, b) -> figure
    failures: dict[str, str]  # "a" or "a b" -> why its step has no figure
    never: int  # steps the record has no end for: the check was cut short
    record: dict[str, Any]
    rails: dict[str, RailFigures] = dataclasses.field(default_factory=dict)  # rail name -> its pairs
    again: Readings = dataclasses.field(default_factory=dict)  # the links measured again
    # the soak's readings: metric -> (a, b) -> pass -> figure (None: its step failed), and why
    # each link's first failed step failed (docs/guides/nodes.md, "Soak")
    soak: dict[str, dict[tuple[str, str], dict[int, float | None]]] = dataclasses.field(default_factory=dict)
    soak_failures: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    soak_passes: int = 0  # the soak's whole passes: every pair of the plan once each


def gather(run: Path, plan: Plan, leaf_of: Mapping[str, str] | None = None) -> Figures:
    """Every step's figures from the check in `run`, planned by the leaves `leaf_of` as its
    driver planned it: its record and each completed step's result, read as untrusted data;
    ValueError for a record that cannot be read. A result that does not hold its figures fails
    its step only."""
    folder = run / FOLDER
    record = read_record(folder)
    names: list[str] = record["hosts"]
    out = Figures(names, {}, {}, {}, 0, record)
    where = folder / RECORD
    # the record must be of the check the plan asked for: a record that judged fewer nodes, or
    # other rounds and steps, would pass what was never checked (docs/guides/nodes.md, "Fail closed")
    if len(names) != plan.nodes or len(names) < 2:
        raise ValueError(f"{where}: hosts names {len(names)} node(s); the check's plan has {plan.nodes}")
    try:
        rounds = node_rounds.schedule(names, plan.options, leaf_of)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if record["rounds"] != len(rounds):
        raise ValueError(
            f"{where}: {record['rounds']} rounds, {record['ran']} ran; the plan of {len(names)} nodes has {len(rounds)}"
        )
    planned = 0
    for round_ in rounds:
        for step in node_rounds.steps(round_, plan.options, FOLDER):
            planned += 1
            rec = record["steps"].get(step.name)
            if rec is None or rec.get("state") in (None, "RUNNING"):
                out.never += 1
                continue
            nodes = tuple(names[i] for i in step.nodes)
            into = out.rails.setdefault(step.rail, RailFigures({}, {})) if step.rail else out
            figures, why = _figures(folder, step, rec)
            for metric in node_rounds.step_metrics(step):
                value = None if figures is None else figures[metric]
                if len(nodes) == 1:
                    out.nodes.setdefault(metric, {})[nodes[0]] = value
                else:
                    into.pairs.setdefault(metric, {})[(nodes[0], nodes[1])] = value
            if figures is None:
                into.failures[" ".join(nodes)] = f"{step.name} {why}"
    again = _measured_again(folder, record, plan.options, out)
    soaked = _soaked(folder, record, plan.options, out)
    out.soak_passes = record["soak"] // max(1, sum(kind == "pair" for kind, _ in rounds))
    if len(record["steps"]) > planned - out.never + again + soaked:
        raise ValueError(f"{where}: its rounds record {len(record['steps'])} steps; the plan has {planned}")
    return out


def _figures(folder: Path, step: Step, rec: dict[str, Any]) -> tuple[dict[str, float] | None, str]:
    """A step's figures from its result, or None and why it has none."""
    why = str(rec.get("reason") or rec.get("state"))
    if rec.get("state") == COMPLETED:
        try:
            return node_rounds.step_figures(step, load_result(folder / step.result)), why
        except ValueError as exc:  # FigureError and ResultError are ValueErrors
            return None, str(exc)
    # a collective that returned wrong elements fails its ranks, and its result says so
    return None, _wrong_results(folder / step.result) or why


def _measured_again(folder: Path, record: dict[str, Any], options: Options, out: Figures) -> int:
    """The links measured again after the plan's rounds (Driver._measure_again), on the whole
    node or on a rail, folded into `out` or its rail's figures: each metric's better reading in
    `pairs`, both in `again`. A second reading that failed leaves the first. How many steps the
    record has of them; ValueError for a step that names no link the plan measured with a figure."""
    steps = [name for name in record["steps"] if name.startswith(node_rounds.AGAIN)]
    for name in steps:
        found = _link_of(name, options, out)
        if found is None:
            raise ValueError(f"{folder / RECORD}: step {name} measured again a link the plan has no figure of")
        step, pair, into = found
        first = {m: by_pair[pair] for m, by_pair in into.pairs.items()}
        figures, _ = _figures(folder, step, record["steps"][name])
        if figures is not None:
            into.again[pair] = {m: (v, figures[m]) for m, v in first.items() if v is not None}
            for m, v in into.again[pair].items():
                into.pairs[m][pair] = max(v)
    return len(steps)


def _soaked(folder: Path, record: dict[str, Any], options: Options, out: Figures) -> int:
    """The soak's steps (Driver._soak), `soak<p>-A-B`, folded into `out.soak` by pass; how many
    steps the record has of them. ValueError for a step of a pass the record does not count, or
    of a link the plan did not measure on the whole node."""
    measured = {pair for by_pair in out.pairs.values() for pair in by_pair}
    count = 0
    for name, rec in record["steps"].items():
        match = re.fullmatch(rf"{node_rounds.SOAK}(\d+)-(\d+)-(\d+)", name)
        if not match:
            continue
        p, a, b = int(match[1]), int(match[2]), int(match[3])
        if not (1 <= p <= record["soak"] and a < b < len(out.names)) or (out.names[a], out.names[b]) not in measured:
            raise ValueError(f"{folder / RECORD}: step {name} is of no soak pass of a link the plan measured")
        count += 1
        if rec.get("state") in (None, "RUNNING"):  # cut short: no reading, and no failure
            continue
        step = node_rounds.steps((f"{node_rounds.SOAK}{p}", [(a, b)]), options, FOLDER)[0]
        figures, why = _figures(folder, step, rec)
        pair = (out.names[a], out.names[b])
        for metric in node_rounds.KIND_METRICS["pair"]:
            out.soak.setdefault(metric, {}).setdefault(pair, {})[p] = None if figures is None else figures[metric]
        if figures is None:
            out.soak_failures.setdefault(pair, f"{step.name} {why}")
    return count


def _link_of(name: str, options: Options, out: Figures) -> tuple[Step, tuple[str, str], Figures | RailFigures] | None:
    """The step a record names `again-A-B` or `againrail<r>-A-B`, its link, and the figures of
    the round it first ran in; None unless each of the link's figures was measured there."""
    match = re.fullmatch(rf"({node_rounds.AGAIN}(?:{node_rounds.RAIL}(\d+))?)-(\d+)-(\d+)", name)
    if not match:
        return None
    kind, rail, a, b = match[1], match[2], int(match[3]), int(match[4])
    if not a < b < len(out.names) or (rail is not None and int(rail) >= len(options.rails)):
        return None
    into = out if rail is None else out.rails.get(options.rails[int(rail)].name)
    pair = (out.names[a], out.names[b])
    if into is None or not into.pairs or any(by_pair.get(pair) is None for by_pair in into.pairs.values()):
        return None
    return node_rounds.steps((kind, [(a, b)]), options, FOLDER)[0], pair, into


def _wrong_results(path: Path) -> str | None:
    """What a failed step's result, where it wrote one, says its output check found wrong."""
    if not path.exists():
        return None
    try:
        rows = load_result(path).get("rows")
    except ValueError:
        return None
    return wrong_results(r for r in rows if isinstance(r, dict)) if isinstance(rows, list) else None
