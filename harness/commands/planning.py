"""Planning a cluster: `bench predict`, from the nodes a run measured to the nodes planned
(docs/concepts/predict.md)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from harness.errors import UsageError
from harness.files import inside, user_files
from harness.run.rundir import RunDir

PREDICT_FILE = "predict.json"
MOST_NODES = 100_000


def node_counts(text: str) -> list[int]:
    """--nodes 16,32,64: whole node counts from 1 to MOST_NODES, each once, in order."""
    try:
        counts = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give node counts separated by commas, e.g. 16,32,64") from None
    if not counts or counts[0] < 1 or counts[-1] > MOST_NODES:
        raise argparse.ArgumentTypeError(f"{text!r}: each node count must be from 1 to {MOST_NODES:,}")
    return counts


def cmd_predict(args: argparse.Namespace) -> int:
    from harness.analysis import predict
    from harness.collect.summary import read_summary

    run = RunDir(args.dir)
    out = user_files.check(args.out, "--out")
    summary = read_summary(run)
    measured = sorted({int(n) for n in summary["nodes"]})
    if not measured:
        raise UsageError(f"{run.path}: the summary has no rows to predict from")
    targets = args.nodes or [measured[-1] * k for k in (2, 4, 8)]
    fits = predict.fit_all(predict.collective_series(summary))
    collectives = predict.predict_collectives(predict.collective_series(summary), targets)
    training = predict.predict_training(summary, fits, targets)
    result = {
        "run": str(run.path),
        "measured_nodes": measured,
        "nodes": targets,
        "level": predict.LEVEL,
        "method": predict.METHOD,
        "collectives": collectives,
        "training": training,
        "validation": {
            "collectives_busbw": predict.summarise(collectives, "busbw_error"),
            "collectives_time": predict.summarise(collectives, "time_error"),
            "training_step": predict.summarise(training, "step_error"),
        },
    }
    for line in describe(result):
        print(line)
    text = json.dumps(_finite(result), indent=1).encode()
    if out:
        user_files.write(out, text, "--out")
    else:  # inside the run directory: never through a link planted there (harness/files/inside.py)
        out = inside.write(run.path, PREDICT_FILE, text)
    print(f"wrote {out}")
    if not any(row["predictions"] for row in (*collectives, *training)):
        print("predict: nothing could be judged (the reasons are above)", file=sys.stderr)
        return 1
    return 0


def _finite(value: Any) -> Any:
    """JSON has no NaN: a figure that could not be computed is null."""
    if hasattr(value, "item") and not isinstance(value, (dict, list)):  # a numpy scalar
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:+.0%}"


def _size(n: int) -> str:
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


def _validated(v: dict[str, Any] | None, key: str, what: str) -> str:
    from harness.analysis.predict import fitted_on

    if not v:
        return ""
    if "note" in v:
        return str(v["note"])
    inside = "inside" if v["inside"] else "OUTSIDE"
    error = f"{_pct(v[key])} {what}, {inside} its interval"
    return f"fitted on {fitted_on(v['fitted_nodes'])}, predicted {v['nodes']}: {error}"


def describe(result: dict[str, Any]) -> list[str]:
    """The terminal's table: each collective series at its largest message size, each training
    series, and the validation over all of them."""
    lines = [
        f"predict: from {', '.join(map(str, result['measured_nodes']))} node(s) measured to "
        f"{', '.join(map(str, result['nodes']))} (95% prediction intervals; docs/concepts/predict.md)"
    ]
    largest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in result["collectives"]:
        key = (row["collective"], row["group"], row["gpus_per_node"], row["launcher"], row["nccl_config"])
        if key not in largest or row["size_bytes"] > largest[key]["size_bytes"]:
            largest[key] = row
    if largest:
        lines.append("collectives, at each one's largest message:")
    for (name, group, g, launcher, nccl), row in largest.items():
        head = f"  {name} {group} g{g} {launcher} {nccl} {_size(row['size_bytes'])}:"
        if not row["predictions"]:
            lines.append(f"{head} {row['note']}")
            continue
        cells = [
            f"{p['nodes']} nodes {p['busbw_gbps']:.3g} GB/s ({p['busbw_low_gbps']:.3g}-{p['busbw_high_gbps']:.3g})"
            for p in row["predictions"]
        ]
        lines.append(f"{head} {'; '.join(cells)}")
        if check := _validated(row["validation"], "busbw_error", "busbw"):
            lines.append(f"    {check}")
        if row["note"]:
            lines.append(f"    {row['note']}")
    if result["training"]:
        lines.append("training:")
    for row in result["training"]:
        head = f"  {row['workload']} {row['scaling']} g{row['gpus_per_node']} {row['launcher']} {row['nccl_config']}:"
        if not row["predictions"]:
            lines.append(f"{head} {row['note']}")
            continue
        cells = [
            f"{p['nodes']} nodes step {p['step_time_ms']:.4g} ms ({p['step_low_ms']:.4g}-{p['step_high_ms']:.4g}), "
            f"{p['per_gpu']:.4g} {row['unit']}/s a GPU, efficiency {p['efficiency']:.0%}"
            for p in row["predictions"]
        ]
        lines.append(f"{head} {'; '.join(cells)}")
        if check := _validated(row["validation"], "step_error", "step time"):
            lines.append(f"    {check}")
    v = result["validation"]
    for label, part, what in (
        ("collectives", v["collectives_busbw"], "busbw"),
        ("training", v["training_step"], "step time"),
    ):
        if part["validated"]:
            lines.append(
                f"validation, {label}: median |{what} error| {part['median_abs_error']:.1%} over {part['validated']} "
                f"predictions of a measured node count, {part['inside']} inside their interval"
            )
    return lines


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The group's subcommands, on `sub`."""
    p = sub.add_parser(
        "predict",
        help="predict collectives and training at node counts not measured, with intervals and their validation",
    )
    p.add_argument("dir", help="run directory, collected")
    p.add_argument(
        "--nodes",
        type=node_counts,
        help="node counts to predict, e.g. 16,32,64 (default: 2, 4 and 8 times the largest measured)",
    )
    p.add_argument("--out", metavar="FILE", help="JSON file to write (default DIR/predict.json)")
    p.set_defaults(func=cmd_predict)
