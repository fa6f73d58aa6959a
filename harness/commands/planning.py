"""Planning a cluster: `bench predict`, from the nodes a run measured to the nodes planned
(docs/concepts/predict.md)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TYPE_CHECKING, Any

from harness.commands.shared import DB_HELP, history_db
from harness.errors import UsageError
from harness.files import inside, user_files
from harness.run.rundir import RunDir

if TYPE_CHECKING:
    import pandas as pd

    from harness.analysis.pooled import Borrowed

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
    from harness.present.figure import draw_into
    from harness.present.prediction import describe, prediction_figure

    run = RunDir(args.dir)
    out = user_files.check(args.out, "--out")
    summary = read_summary(run)
    if summary.empty:
        raise UsageError(f"{run.path}: the summary has no rows to predict from")
    what_if = None
    if args.set:
        from harness.analysis import whatif

        cluster = run.read_plan().get("cluster")
        stated = cluster.get("hardware") if isinstance(cluster, dict) else None
        what_if = whatif.parse(args.set, stated if isinstance(stated, dict) else None)
    borrowed = _borrowed(args, run, summary)
    rows = borrowed.rows if borrowed else None
    result = predict.predictions(summary, args.nodes, curve=not args.out, what_if=what_if, borrowed=rows)
    curve = result.pop("curve", None)
    result["run"] = str(run.path)
    if borrowed:
        result["history"] = borrowed.stated
    for line in describe(result):
        print(line)
    text = json.dumps(_finite(result), indent=1).encode()
    if out:
        user_files.write(out, text, "--out")
    else:  # inside the run directory: never through a link planted there (harness/files/inside.py)
        out = inside.write(run.path, PREDICT_FILE, text)
    print(f"wrote {out}")
    if curve:  # the figure goes beside the run's other plots, the points borrowed drawn too
        drawn = predict.pooled(summary, rows)
        for path in draw_into(
            run.path, run.plots.name, [("predict", lambda: prediction_figure(drawn, curve, result["nodes"]))]
        ):
            print(f"wrote {path}")
    if not any(row["predictions"] for row in (*result["collectives"], *result["training"])):
        print("predict: nothing could be judged (the reasons are above)", file=sys.stderr)
        return 1
    return 0


def _borrowed(args: argparse.Namespace, run: RunDir, summary: pd.DataFrame) -> Borrowed | None:
    """With --cluster, the cluster's history's points at node counts the run did not measure
    (analysis/pooled.py); the run's stack read as `bench regress` reads it."""
    if not args.cluster:
        if args.db:
            raise UsageError("--db: give --cluster too, the cluster whose runs the fit may take")
        return None
    from harness.analysis import pooled, series
    from harness.analysis.sides import recorded_environment

    environment = recorded_environment(run) or {}
    stack = series.of(environment, run.read_plan().get("cluster"))
    return pooled.borrow(history_db(args), args.cluster, summary, stack)


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
    p.add_argument(
        "--set",
        action="append",
        metavar="FIGURE=[BEFORE:]AFTER",
        help="what if: the same run on other hardware, a profile figure changed (network_gbps_per_node, "
        "nics_per_node, intra_node_gbps_per_gpu, peak_tflops_per_gpu); BEFORE where the run's profile "
        "states none; repeatable",
    )
    p.add_argument(
        "--cluster",
        help="also fit the collectives on what this cluster's history measured at node counts the run did not "
        "(same series, parameters, settings and stack; the newest run of each count)",
    )
    p.add_argument("--db", help=DB_HELP)
    p.set_defaults(func=cmd_predict)
