"""`bench predict` shown: its table in words (the terminal's, and the report's) and its figure,
the measured points, the predicted curve with its 95% band, and the node counts beyond those
measured shaded (docs/concepts/predict.md)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from benchmarks.common import format_size
from harness.analysis.predict import fitted_on
from harness.present.figure import GRID_COLUMNS, POINT_COLUMNS, log2_axis, setup_plotting, titled
from harness.run.rundir import COMPLETED

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    Made = tuple[Figure, pd.DataFrame]


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:+.0%}"


def _validated(v: dict[str, Any] | None, key: str, what: str) -> str:
    if not v:
        return ""
    if "note" in v:
        return str(v["note"])
    inside = "inside" if v["inside"] else "OUTSIDE"
    error = f"{_pct(v[key])} {what}, {inside} its interval"
    return f"fitted on {fitted_on(v['fitted_nodes'])}, predicted {v['nodes']}: {error}"


def largest(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each collective series' row of its largest message size."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = (row["collective"], row["group"], row["gpus_per_node"], row["launcher"], row["nccl_config"])
        if key not in out or row["size_bytes"] > out[key]["size_bytes"]:
            out[key] = row
    return list(out.values())


def _series(head: str, row: dict[str, Any], cells: list[str], check: str) -> list[str]:
    """A series' lines: its predictions and its validation, or why it has none."""
    if not row["predictions"]:
        return [f"{head} {row['note']}"]
    return [f"{head} {'; '.join(cells)}", *(f"    {x}" for x in (check, row["note"]) if x)]


def describe(result: dict[str, Any]) -> list[str]:
    """The terminal's table: each collective series at its largest message size, each training
    series, and the validation over all of them."""
    lines = [
        f"predict: from {', '.join(map(str, result['measured_nodes']))} node(s) measured to "
        f"{', '.join(map(str, result['nodes']))} (95% prediction intervals; docs/concepts/predict.md)"
    ]
    if borrowed := result.get("history"):
        lines.append(_borrowed(borrowed))
    if what := result.get("what_if"):
        changes = ", ".join(f"{k} {v['before']:g} -> {v['after']:g}" for k, v in what["set"].items())
        lines += [f"what if: {changes}; it assumes {what['assumes']}", *(f"  moved: {m}" for m in what["moved"])]
    collectives = largest(result["collectives"])
    if collectives:
        lines.append("collectives, at each one's largest message:")
    for row in collectives:
        head = (
            f"  {row['collective']} {row['group']} g{row['gpus_per_node']} {row['launcher']} {row['nccl_config']} "
            f"{format_size(row['size_bytes'])}:"
        )
        cells = [
            f"{p['nodes']} nodes {p['busbw_gbps']:.3g} GB/s ({p['busbw_low_gbps']:.3g}-{p['busbw_high_gbps']:.3g})"
            for p in row["predictions"]
        ]
        lines += _series(head, row, cells, _validated(row["validation"], "busbw_error", "busbw"))
    if result["training"]:
        lines.append("training:")
    for row in result["training"]:
        head = f"  {row['workload']} {row['scaling']} g{row['gpus_per_node']} {row['launcher']} {row['nccl_config']}:"
        cells = [
            f"{p['nodes']} nodes step {p['step_time_ms']:.4g} ms ({p['step_low_ms']:.4g}-{p['step_high_ms']:.4g}), "
            f"{p['per_gpu']:.4g} {row['unit']}/s a GPU, efficiency {p['efficiency']:.0%}"
            for p in row["predictions"]
        ]
        lines += _series(head, row, cells, _validated(row["validation"], "step_error", "step time"))
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


def _borrowed(stated: dict[str, Any]) -> str:
    """The line naming the history's runs whose points the collectives were fitted on too."""
    runs = [f"run {r['id']} ({r['label'] or r['created'][:10]}) at {fitted_on(r['nodes'])}" for r in stated["runs"]]
    taken = "; ".join(runs) if runs else f"nothing: {stated.get('note', 'no run lent a point')}"
    return f"from the history ({stated['db']}, cluster {stated['cluster']}): {taken}"


# Panels a figure draws at most: the collectives' world-group series at their largest message
# first, then the training series; the rest are in predict.json
MOST_PANELS = 12
# The report's figure: the collectives training sends most (DDP's gradients, and a mixture of
# experts' tokens), then the training series, and no more panels than this
BRIEF = ("all_reduce", "all_to_all")
BRIEF_PANELS = 4


def prediction_figure(
    summary: pd.DataFrame, curve: dict[str, Any], asked: list[int], brief: bool = False
) -> Made | None:
    """(figure, points) of `curve` (predictions() at many node counts, unvalidated): one panel
    per series, busbw or throughput a GPU against nodes, ticked at the counts measured and
    `asked`; `brief`, the report's few (BRIEF); None when nothing was predicted."""
    import pandas as pd

    panels = _panels(curve, brief)
    if not panels:
        return None
    plt, sns = setup_plotting()
    measured_max = max(curve["measured_nodes"])
    columns = min(GRID_COLUMNS, len(panels))
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.8 * rows), squeeze=False)
    colour = sns.color_palette("colorblind", 2)
    points: list[tuple[Any, ...]] = []
    for ax, (title, metric, label, row, measured) in zip(axes.flat, panels, strict=False):
        xs = [p["nodes"] for p in row["predictions"]]
        ys, low, high = ([p[k] for p in row["predictions"]] for k in (metric, *_BAND[metric]))
        ax.fill_between(xs, low, high, color=colour[0], alpha=0.2, linewidth=0, label="95% interval")
        ax.plot(xs, ys, color=colour[0], label="predicted")
        got = _measured(summary, row, measured)
        ax.plot(got["nodes"], got[measured], "o", color=colour[1], label="measured")
        ax.axvspan(measured_max, max(xs), color="0.5", alpha=0.12, label="beyond the nodes measured")
        log2_axis(ax, sorted({*asked, *got["nodes"]}), str)
        ax.set_xlabel("nodes")
        ax.set_ylabel(label)
        ax.set_title(title, fontsize=9)
        points += [("predict", title, metric, "predicted", x, y) for x, y in zip(xs, ys, strict=True)]
        points += [("predict", title, metric, "measured", x, y) for x, y in zip(got["nodes"], got[measured])]
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7, loc="best")
    titled(fig, f"Predicted from {fitted_on(curve['measured_nodes'])} measured (shaded: beyond them)")
    return fig, pd.DataFrame(points, columns=POINT_COLUMNS)


_BAND = {"busbw_gbps": ("busbw_low_gbps", "busbw_high_gbps"), "per_gpu": ("per_gpu_low", "per_gpu_high")}


def _panels(curve: dict[str, Any], brief: bool) -> list[tuple[str, str, str, dict[str, Any], str]]:
    """(title, predicted metric, axis label, row, measured column) of each panel."""
    out = [
        (f"{r['collective']} {format_size(r['size_bytes'])}, g{r['gpus_per_node']} {r['launcher']} {r['nccl_config']}",
         "busbw_gbps", "busbw (GB/s)", r, "busbw_gbps")
        for r in largest(curve["collectives"])
        if r["group"] == "world" and r["predictions"] and (r["collective"] in BRIEF or not brief)
    ]  # fmt: skip
    out += [
        (f"{r['workload']} {r['scaling']}, g{r['gpus_per_node']} {r['launcher']} {r['nccl_config']}",
         "per_gpu", f"{r['unit']}/s a GPU", r, f"{r['unit']}_per_s_per_gpu")
        for r in curve["training"]
        if r["predictions"]
    ]  # fmt: skip
    return out[: BRIEF_PANELS if brief else MOST_PANELS]


def _measured(summary: pd.DataFrame, row: dict[str, Any], column: str) -> pd.DataFrame:
    """The summary's completed rows of a panel's series, nodes and `column`."""
    ok = summary[(summary["status"] == COMPLETED) & (summary["gpus_per_node"] == row["gpus_per_node"])]
    ok = ok[(ok["launcher"] == row["launcher"]) & (ok["nccl_config"] == row["nccl_config"])]
    if "collective" in row:
        named = ok["size_bytes"] >= row["size_bytes"] * 0.99
        ok = ok[
            (ok["collective"] == row["collective"])
            & (ok["group"] == "world")
            & named
            & (ok["size_bytes"] <= row["size_bytes"])
        ]
    else:
        ok = ok[(ok["workload"] == row["workload"]) & (ok["scaling"] == row["scaling"])]
    # one rank moves nothing over a bus: a collective's one-node busbw is no point of its curve
    return ok[ok[column].notna() & (ok["nodes"] >= (2 if "collective" in row else 1))][["nodes", column]]
