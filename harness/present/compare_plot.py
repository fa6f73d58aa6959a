"""Plots that set runs side by side: two runs' busbw and scaling on one set of axes, and a
key's figure over the runs of a cluster's history (`bench history plot`). Each is a PNG beside
the CSV of the points it draws (present/figure.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD, TRAINING, UNITS
from benchmarks.common import format_size
from harness.analysis.sides import measured
from harness.present.figure import (
    POINT_COLUMNS,
    band,
    draw_into,
    fit_legend,
    log2_axis,
    log_y,
    nodes_axis,
    panel_of,
    png_bytes,
    rate_band,
    setup_plotting,
    titled,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    Made = tuple[Figure, pd.DataFrame]  # a figure and the points it draws
    Maker = Callable[[], Made | None]  # draws a figure, or None when there is nothing to draw


def _both(a: pd.DataFrame, b: pd.DataFrame, labels: tuple[str, str]) -> pd.DataFrame:
    import pandas as pd

    return pd.concat([a.assign(run=labels[0]), b.assign(run=labels[1])], ignore_index=True)


def _two_runs(
    sns: ModuleType,
    ax: Axes,
    sub: pd.DataFrame,
    x: str,
    y: str,
    labels: tuple[str, str],
    legend: bool,
    styles: list[str],
    where: tuple[str, ...],
) -> list[tuple[Any, ...]]:
    """One panel of a two-run plot: colour tells the runs apart, the line style the series.
    `styles` is every series of the figure, in one order for all panels: seaborn gives each
    panel's series their dashes in the order it is given, and the legend comes from one panel,
    so without it the legend and the other panels could disagree on which dash is which.
    Each run's series gets its p10-p90 band in the run's colour, where the rows have one
    (Side.spread). Returns the points drawn, bands first, each series named `<run> · <series>`."""
    palette = dict(zip(labels, sns.color_palette(n_colors=2), strict=True))
    bands = band(
        ax,
        sub.assign(series=sub["run"] + " · " + sub["series"]),
        x,
        y,
        {f"{r} · {s}": palette[r] for r, s in zip(sub["run"], sub["series"])},
        where,
    )
    sns.lineplot(
        data=sub,
        x=x,
        y=y,
        hue="run",
        hue_order=list(labels),
        palette=palette,
        style="series",
        style_order=styles,
        marker="o",
        estimator=None,
        sort=True,
        ax=ax,
        legend=legend,
    )
    return bands + [
        (*where, y, f"{r} · {s}", int(v), float(w)) for r, s, v, w in zip(sub["run"], sub["series"], sub[x], sub[y])
    ]


def compare_busbw_figure(a: pd.DataFrame, b: pd.DataFrame, labels: tuple[str, str]) -> Made | None:
    """busbw vs message size, both runs on one axis per node count (completed rows of each)."""
    import pandas as pd

    df = _both(a, b, labels)
    df = df[(df["workload"] == COLLECTIVE_WORKLOAD) & (df["busbw_gbps"] > 0)].copy()
    if df.empty:
        return None
    plt, sns = setup_plotting()
    df["series"] = measured(df) + " · " + df["gpus_per_node"].astype(str) + " GPU/node · " + panel_of(df)
    rate_band(df, "busbw_gbps", "time_us")
    nodes = sorted(df["nodes"].unique())
    styles = sorted(df["series"].unique())
    fig, axes = plt.subplots(1, len(nodes), figsize=(max(7.0, 5.5 * len(nodes)), 4.4), squeeze=False)
    points = []
    for c, n in enumerate(nodes):
        ax = axes[0][c]
        sub = df[df["nodes"] == n].sort_values("size_bytes")
        where = ("compare_busbw", f"{int(n)} nodes")
        points += _two_runs(sns, ax, sub, "size_bytes", "busbw_gbps", labels, (c == len(nodes) - 1), styles, where)
        log2_axis(ax, sub["size_bytes"], format_size)
        log_y(ax)
        ax.tick_params(axis="x", labelrotation=45)
        ax.set_xlabel("message size")
        ax.set_ylabel("bus bandwidth (GB/s, log)")
        ax.set_title(f"{int(n)} node{'s' if n != 1 else ''}")
    if axes[0][-1].get_legend():
        sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(f"Bus bandwidth: {labels[0]} vs {labels[1]}")
    fit_legend(fig, axes[0][-1])
    return fig, pd.DataFrame(points, columns=POINT_COLUMNS)


def compare_scaling_figure(a: pd.DataFrame, b: pd.DataFrame, labels: tuple[str, str]) -> Made | None:
    """Both runs' scaling curves: images/s per GPU of each training workload, and busbw at the
    largest message size, against the node count."""
    import pandas as pd

    df = _both(a, b, labels)
    # each workload's throughput per GPU in its own unit (catalog.UNITS): images, or tokens
    train = df[df["workload"].isin(TRAINING)].copy()
    tokens = train["tokens_per_s_per_gpu"] if "tokens_per_s_per_gpu" in train else float("nan")
    train["per_gpu"] = train["images_per_s_per_gpu"].where(train["workload"] != "transformer", tokens)
    train = train[train["per_gpu"] > 0]
    # the all-reduce over every rank, as the panel's title says: other collectives and groups
    # would share its series
    coll = df[
        (df["workload"] == COLLECTIVE_WORKLOAD)
        & (df["busbw_gbps"] > 0)
        & (df["collective"] == "all_reduce")
        & (measured(df) == "all_reduce")
    ]
    if len(coll):
        coll = coll.loc[
            coll.groupby(["run", "nodes", "gpus_per_node", "launcher", "nccl_config"])["size_bytes"].idxmax()
        ].copy()
        rate_band(coll, "busbw_gbps", "time_us")
    rate_band(train, "per_gpu", "step_time_ms")
    panels = [
        (f"{w} ({s})", train[(train["workload"] == w) & (train["scaling"] == s)], "per_gpu", f"{UNITS[w]}/s per GPU")
        for w, s in sorted(set(zip(train["workload"], train["scaling"])))
    ]
    if len(coll):
        panels.append(("all-reduce at the largest size", coll, "busbw_gbps", "bus bandwidth (GB/s)"))
    if not panels:
        return None
    plt, sns = setup_plotting()

    def series(rows: pd.DataFrame) -> pd.Series:
        return rows["gpus_per_node"].astype(str) + " GPU/node · " + panel_of(rows)

    styles = sorted({s for _, rows, _, _ in panels for s in series(rows)})
    fig, axes = plt.subplots(1, len(panels), figsize=(max(7.0, 5.0 * len(panels)), 4.2), squeeze=False)
    points = []
    for c, (title, rows, metric, ylabel) in enumerate(panels):
        ax = axes[0][c]
        sub = rows.assign(series=series(rows)).sort_values("nodes")
        points += _two_runs(
            sns, ax, sub, "nodes", metric, labels, (c == len(panels) - 1), styles, ("compare_scaling", title)
        )
        nodes_axis(ax, sub)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    if axes[0][-1].get_legend():
        sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(f"Scaling: {labels[0]} vs {labels[1]}")
    fit_legend(fig, axes[0][-1])
    return fig, pd.DataFrame(points, columns=POINT_COLUMNS)


def draw_compare(out: Path, a: pd.DataFrame, b: pd.DataFrame, labels: tuple[str, str]) -> list[Path]:
    """compare_busbw.png and compare_scaling.png (each with its CSV) in `out`, the directory the
    user named, made when missing."""
    out.mkdir(parents=True, exist_ok=True)
    return draw_into(
        out,
        "",
        [
            ("compare_busbw", lambda: compare_busbw_figure(a, b, labels)),
            ("compare_scaling", lambda: compare_scaling_figure(a, b, labels)),
        ],
    )


HISTORY_LABEL_INCHES = 1.0  # the width a history tick's label takes at 8 points


def _run_label(run: str) -> str:
    """'2026-11-26 10:30 #12' as two short lines: '2026-11-26' over '10:30 #12'."""
    day, _, rest = run.partition(" ")
    return f"{day}\n{rest}" if rest else run


def history_figure(points: pd.DataFrame, cluster: str) -> tuple[bytes, bytes]:
    """(PNG, CSV of its points) of a cluster's key figures over time (history_made)."""
    plt, _ = setup_plotting()
    fig, frame = history_made(points, cluster)
    try:
        return png_bytes(fig), frame.to_csv(index=False).encode()
    finally:
        plt.close(fig)


def history_made(points: pd.DataFrame, cluster: str) -> Made:
    """(figure, points) of a cluster's key figures over time: busbw at the largest message size
    per configuration, and images/s per GPU per training workload (history.points)."""
    import pandas as pd

    plt, sns = setup_plotting()
    df = points.sort_values(["created", "id"], kind="stable")
    df["run"] = df["created"].str.slice(0, 16).str.replace("T", " ") + " #" + df["id"].astype(str)
    order = list(dict.fromkeys(df["run"]))
    pos = {run: i for i, run in enumerate(order)}
    metrics = [
        (m, label)
        for m, label in (
            ("busbw_gbps", "busbw at the largest size (GB/s)"),
            ("images_per_s_per_gpu", "images/s per GPU"),
        )
        if (df["metric"] == m).any()
    ]
    fig, axes = plt.subplots(
        len(metrics), 1, figsize=(max(8.0, 0.35 * len(order) + 6), 4.0 * len(metrics)), squeeze=False
    )
    points_out = []
    for r, (metric, label) in enumerate(metrics):
        ax = axes[r][0]
        sub = df[df["metric"] == metric].assign(x=lambda d: d["run"].map(pos))
        sns.lineplot(data=sub, x="x", y="value", hue="series", marker="o", estimator=None, sort=True, ax=ax)
        # upright labels of two short lines (the day, the time and id), every `step`-th run's, so
        # that each has its width: rotated full timestamps once took half the figure's height
        step = max(1, math.ceil(HISTORY_LABEL_INCHES / (fig.get_figwidth() / max(len(order), 1))))
        ax.set_xticks(range(len(order)))
        ax.set_xticklabels(
            [_run_label(o) if i % step == 0 else "" for i, o in enumerate(order)], rotation=0, fontsize=8
        )
        ax.set_xlabel("run (when it was planned, history id)")
        ax.set_ylabel(label)
        if ax.get_legend():
            sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1), fontsize="small")
        points_out += [
            ("history", cluster, metric, s, int(x), float(y)) for s, x, y in zip(sub["series"], sub["x"], sub["value"])
        ]
    titled(fig, f"History of {cluster}")
    return fig, pd.DataFrame(points_out, columns=POINT_COLUMNS)
