"""Plots of a run's summary, with seaborn, as PNG, each beside a CSV of the points it draws:
the run's plots are listed once, in RUN_PLOTS (a file, a title and a section of the report
each), which both `plots/` and the HTML report read; a job's timeline and the node check's
heatmap too. present/compare_plot.py sets runs side by side; present/figure.py is what
every plot is drawn with.

Facets: one column per (launcher, NCCL set) where a run has several; the busbw plot has one
row per collective. Only rows with status COMPLETED are drawn.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import BREAKDOWN_FRACTIONS, COLLECTIVE_WORKLOAD, TRAINING, UNITS
from benchmarks.common import format_size
from harness.analysis.sides import measured
from harness.evidence import telemetry
from harness.nodes.rounds import METRICS as NODE_METRICS
from harness.present.figure import (
    GRID_COLUMNS,
    POINT_COLUMNS,
    band,
    draw_into,
    level_line,
    log2_axis,
    log_y,
    nodes_axis,
    panel_of,
    rate_band,
    save,
    settle_names,
    setup_plotting,
    titled,
)
from harness.run.rundir import COMPLETED, RunDir

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from harness.evidence.telemetry import Telemetry
    from harness.nodes.verdict import Finding, Verdict

    Made = tuple[Figure, pd.DataFrame]  # a figure and the points it draws
    Maker = Callable[[], Made | None]  # draws a figure, or None when there is nothing to draw


def _series_label(workload: str, gpus: int) -> str:
    return f"{workload}, {gpus} GPU{'s' if gpus != 1 else ''}/node"


def efficiency_per_node(df: pd.DataFrame, per_gpu: str = "images_per_s_per_gpu") -> pd.Series:
    """Weak-scaling efficiency against one node of the same GPUs per node: images/s per GPU over
    that of the smallest node count of its own series. Efficiency against 1 GPU mixes the losses
    inside a node with those across nodes; this one shows the network's share alone."""
    keys = ["panel", "series", "repeat"] if "repeat" in df else ["panel", "series"]
    first = df.sort_values("nodes").groupby(keys)[per_gpu].transform("first")
    return df[per_gpu] / first


def scaling_figure(summary: pd.DataFrame, scaling: str, unit: str = "images") -> Made | None:
    """(figure, points) for weak or strong scaling of the training workloads that count their
    throughput in `unit` (catalog.UNITS: images, or the transformer's tokens), or None when the
    run has no such rows."""
    import pandas as pd

    per_gpu = f"{unit}_per_s_per_gpu"
    df = summary[
        summary["workload"].isin([w for w in TRAINING if UNITS[w] == unit])
        & (summary["scaling"] == scaling)
        & (summary["status"] == COMPLETED)
        & summary[f"{unit}_per_s"].notna()
    ].copy()
    if df.empty:
        return None
    plt, sns = setup_plotting()
    df["panel"] = panel_of(df)
    df["series"] = [_series_label(w, int(g)) for w, g in zip(df["workload"], df["gpus_per_node"])]
    panels = sorted(df["panel"].unique())
    for metric in (per_gpu, "speedup"):
        rate_band(df, metric, "step_time_ms")
    if scaling == "weak":
        df["efficiency_per_node"] = efficiency_per_node(df, per_gpu)
        metrics = [
            (per_gpu, f"{unit}/s per GPU (p10-p90 band)"),
            ("efficiency", "efficiency against 1 GPU"),
            ("efficiency_per_node", "efficiency against 1 node\nof the same GPUs per node"),
        ]
        title = "Weak scaling: fixed batch per GPU"
    else:
        metrics = [("speedup", "speedup over the smallest world size"), ("efficiency", "strong-scaling efficiency")]
        title = "Strong scaling: fixed global batch"
    name = f"{scaling}_scaling" if unit == "images" else f"transformer_{scaling}_scaling"
    fig, axes = plt.subplots(
        len(metrics),
        len(panels),
        figsize=(max(7.0, 5.2 * len(panels)), 3.8 * len(metrics)),
        squeeze=False,
        sharex="col",
    )
    points = []
    order = sorted(df["series"].unique())
    palette = dict(zip(order, sns.color_palette(n_colors=len(order))))
    for c, panel in enumerate(panels):
        sub = df[df["panel"] == panel].sort_values("nodes")
        for r, (metric, label) in enumerate(metrics):
            ax = axes[r][c]
            sns.lineplot(
                data=sub,
                x="nodes",
                y=metric,
                hue="series",
                hue_order=order,
                palette=palette,
                marker="o",
                estimator=None,
                sort=True,
                ax=ax,
                legend=(r == 0 and c == len(panels) - 1),
            )
            points += band(ax, sub, "nodes", metric, palette, (name, panel))
            points += _ideal(ax, sub, metric, palette, (name, panel))
            nodes_axis(ax, sub)
            ax.set_ylabel(label)
            if r == 0:
                ax.set_title(panel)
            points += [
                (name, panel, metric, s, int(x), float(y)) for s, x, y in zip(sub["series"], sub["nodes"], sub[metric])
            ]
    if axes[0][-1].get_legend():
        sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1.02, 1), title="workload, GPUs per node")
    titled(fig, f"{title} (dashed: ideal)")
    settle_names(fig)
    return fig, pd.DataFrame(points, columns=POINT_COLUMNS)


def _ideal(
    ax: Axes, sub: pd.DataFrame, metric: str, palette: dict[object, tuple[float, float, float]], where: tuple[str, str]
) -> list[tuple[str, str, str, str, int, float]]:
    """Dashed ideal lines, and their points. Efficiency = metric / its ideal value
    (collect.add_scaling), so the ideal is metric / efficiency at every point. Every series of
    a workload in a panel shares its baseline (the smallest world size), so its ideal per-GPU
    throughput is one flat grey line, named; the ideal speedup differs per series at a node count
    (world = nodes x GPUs per node) and is drawn per series, in the series' colour."""
    if metric.startswith("efficiency"):
        ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1)
        return []
    per_gpu = metric.endswith("_per_s_per_gpu")
    if metric != "speedup" and not per_gpu:
        return []
    ideal = (sub[metric] / sub["efficiency"]).astype(float)
    out = []
    if per_gpu:
        # one baseline per workload (collect.SCALING_KEYS): a grey line each, named at its end
        levels = sub.assign(ideal=ideal).groupby("workload")["ideal"].median().sort_values()
        for workload, level in levels.items():
            level_line(ax, float(level), f"ideal: {workload}", "0.4")
            out += [(*where, f"ideal_{metric}", str(workload), int(n), float(level)) for n in sorted(set(sub["nodes"]))]
        return out
    for series, group in sub.assign(ideal=ideal).groupby("series"):
        g = group.sort_values("nodes")
        ax.plot(
            g["nodes"].astype(float).tolist(),
            g["ideal"].tolist(),
            linestyle="--",
            linewidth=1,
            color=palette[series],
            alpha=0.8,
        )
        out += [(*where, "ideal_speedup", str(series), int(x), float(y)) for x, y in zip(g["nodes"], g["ideal"])]
    return out


PEAKS_APART = 1.1  # peaks closer than this ratio share a name (_peak_lines)


def _peak_lines(
    ax: Axes, sub: pd.DataFrame, palette: dict[object, tuple[float, float, float]], where: tuple[str, str, str]
) -> list[tuple[str, str, str, str, str, int, float]]:
    """A dashed line at each series' peak busbw, where the cluster profile states its link
    speeds (docs/concepts/expected.md), and its points: one per series, at the largest size. Series of
    one peak share its line and name, grey when they are several (three series at 25 GB/s once
    printed three names, one over another). Peaks within PEAKS_APART of the lowest of them share
    one name, of their range: a point-to-point peak nears the network's rate as nodes are added,
    and the names of close peaks, stacked above their lines, pushed the panel's range up until
    its data was a sliver (docs/concepts/scale.md, "The collective figures")."""
    if "busbw_peak_gbps" not in sub:
        return []
    peaks = sub[sub["busbw_peak_gbps"].notna()].drop_duplicates("series")
    levels = peaks.groupby("busbw_peak_gbps")["series"].agg(list)
    group: list[float] = []
    for peak in [*levels.index.astype(float), math.inf]:  # ascending; inf ends the last group
        if group and peak <= group[0] * PEAKS_APART:
            group.append(peak)
            continue
        if group:
            series = [s for level in group for s in levels[level]]
            color = palette[series[0]] if len(series) == 1 else "0.4"
            for level in group[1:]:
                ax.axhline(level, color=color, linestyle="--", linewidth=1)
            level_line(ax, group[0], _peak_name(group[0], group[-1]), color)
        group = [peak]
    largest = int(sub["size_bytes"].max())
    return [
        (*where, "busbw_peak_gbps", str(series), largest, float(peak))
        for series, peak in zip(peaks["series"], peaks["busbw_peak_gbps"])
    ]


def _peak_name(low: float, high: float) -> str:
    """`peak 93.75`, or of a range `peak 50-52.9`: four significant figures for one level, three
    for a range, more where they would print its ends alike."""
    if low == high:
        return f"peak {low:.4g}"
    digits = 3
    while f"{low:.{digits}g}" == f"{high:.{digits}g}" and digits < 12:
        digits += 1
    return f"peak {low:.{digits}g}-{high:.{digits}g}"


def busbw_figure(summary: pd.DataFrame) -> Made | None:
    """busbw against message size, both axes logarithmic: 8 B moves a million times less than
    8 MB, and a linear axis draws the small sizes as a flat line at 0."""
    return _collective_figure(summary, "busbw_gbps")


def latency_figure(summary: pd.DataFrame) -> Made | None:
    """The time of one call against message size, log-log: the latency end, which the busbw plot
    cannot show (nccl-tests prints both columns)."""
    return _collective_figure(summary, "time_us")


# What each collective plot draws: its file's name, the axis label, the title
_COLLECTIVE_PLOTS = {
    "busbw_gbps": ("allreduce_busbw", "bus bandwidth (GB/s, 1e9, log)", "Collective bus bandwidth vs message size"),
    "time_us": ("allreduce_time", "time per call (µs, log)", "Collective time per call vs message size"),
}


def _collective_figure(summary: pd.DataFrame, metric: str) -> Made | None:
    import pandas as pd

    name, ylabel, title = _COLLECTIVE_PLOTS[metric]
    df = summary[
        (summary["workload"] == COLLECTIVE_WORKLOAD)
        & (summary["status"] == COMPLETED)
        & (summary[metric] > 0)
        & (summary["nodes"] * summary["gpus_per_node"] > 1)  # one rank moves nothing over a bus
    ].copy()
    if df.empty:
        return None
    plt, sns = setup_plotting()
    df["panel"] = panel_of(df)
    if metric == "busbw_gbps":
        rate_band(df, "busbw_gbps", "time_us")
    df["series"] = [
        f"{int(n)} node{'s' if n != 1 else ''} x {int(g)} GPU{'s' if g != 1 else ''}"
        for n, g in zip(df["nodes"], df["gpus_per_node"])
    ]
    panels = sorted(df["panel"].unique())
    df["collective"] = measured(df)  # one row of panels per collective and group
    collectives = sorted(df["collective"].unique())
    order = (df.drop_duplicates("series").sort_values(["nodes", "gpus_per_node"])["series"]).tolist()
    palette = dict(zip(order, sns.color_palette("viridis", n_colors=len(order))))
    # one panel per collective and group, side by side: a row per collective with a column per
    # configuration, or, of one configuration, the collectives in rows of up to GRID_COLUMNS
    cells = [(coll, panel) for coll in collectives for panel in panels]
    cols = len(panels) if len(panels) > 1 else min(GRID_COLUMNS, len(collectives))
    rows = -(-len(cells) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(8.0, 6.0 * cols), 4.2 * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[len(cells) :]:
        ax.set_visible(False)
    points = []
    shown = []
    for i, (coll, panel) in enumerate(cells):
        ax = flat[i]
        sub = df[(df["collective"] == coll) & (df["panel"] == panel)].sort_values("size_bytes")
        if sub.empty:
            ax.set_visible(False)
            continue
        shown.append(ax)
        # each series' points joined in size order, drawn by matplotlib itself: seaborn's lineplot
        # would draw the same lines, at many times the cost, for each of a sweep's dozens of panels
        for series, line in sub.groupby("series", sort=False):
            ax.plot(line["size_bytes"].astype(float), line[metric].astype(float), marker="o", color=palette[series])
        ax.set_yscale("log")  # before the peak's level, which makes room for its name
        points += band(ax, sub, "size_bytes", metric, palette, (name, coll, panel))
        log2_axis(ax, sub["size_bytes"], format_size)
        ax.tick_params(axis="x", labelrotation=45)
        ax.set_xlabel("message size (bytes, K/M/G = 2^10/2^20/2^30)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{coll} · {panel}")
        points += [
            (name, coll, panel, metric, s, int(x), float(y))
            for s, x, y in zip(sub["series"], sub["size_bytes"], sub[metric])
        ]
        if metric == "busbw_gbps":
            points += _peak_lines(ax, sub, palette, (name, coll, panel))
        log_y(ax)
    _series_legend(shown[min(cols, len(shown)) - 1], order, palette)
    titled(fig, f"{title} (in-place where torch has it, worst rank; band: p10-p90)")
    settle_names(fig)
    return fig, pd.DataFrame(points, columns=["plot", "collective", *POINT_COLUMNS[1:]])


def _series_legend(ax: Axes, order: list[str], palette: dict[object, tuple[float, float, float]]) -> None:
    """One legend for every panel of a figure, beside the last panel of its first row: each
    series in its colour, in the order of nodes and GPUs per node."""
    from matplotlib.lines import Line2D

    keys = [Line2D([], [], color=palette[s], marker="o") for s in order]
    ax.legend(keys, order, loc="upper left", bbox_to_anchor=(1.02, 1), title="nodes x GPUs per node")


# The parts of a training step, bottom to top (docs/concepts/breakdown.md): the summary's fractions,
# which add up to the step
STEP_PARTS = tuple(
    zip(
        BREAKDOWN_FRACTIONS,
        ("compute (median rank)", "rank imbalance", "waiting for data", "exposed communication"),
        strict=True,
    )
)


def breakdown_figure(summary: pd.DataFrame) -> Made | None:
    """(figure, points): where each training job's step went, one stacked bar per job, jobs in
    order of nodes and GPUs per node, one panel per workload and scaling mode, the job's
    scaling efficiency above its bar; None when no row has the breakdown (a row whose breakdown
    was not judged has none)."""
    import pandas as pd

    df = summary[
        summary["workload"].isin(TRAINING) & (summary["status"] == COMPLETED) & summary["compute_fraction"].notna()
    ].copy()
    if df.empty:
        return None
    plt, sns = setup_plotting()
    df["panel"] = df["workload"].astype(str) + " · " + df["scaling"].astype(str)
    df = df.sort_values(["panel", "nodes", "gpus_per_node", "launcher", "nccl_config", "job"])
    panels = list(dict.fromkeys(df["panel"]))
    colours = sns.color_palette("colorblind", len(STEP_PARTS))
    width = max((df["panel"] == p).sum() for p in panels)
    fig, axes = plt.subplots(1, len(panels), figsize=(max(7.0, (1.2 + 0.6 * width) * len(panels)), 5.2), squeeze=False)
    points = []
    for ax, panel in zip(axes[0], panels, strict=True):
        rows = df[df["panel"] == panel]
        x = range(len(rows))
        bottom = [0.0] * len(rows)
        for (part, label), colour in zip(STEP_PARTS, colours, strict=True):
            heights = rows[part].astype(float).tolist()
            ax.bar(x, heights, bottom=bottom, color=colour, label=label, width=0.7)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
            points += [
                ("step_breakdown", panel, part, job, float(n), h)
                for job, n, h in zip(rows["job"], rows["nodes"], heights, strict=True)
            ]
        for i, eff in enumerate(rows["efficiency"]):
            if pd.notna(eff):
                ax.text(i, bottom[i] + 0.02, f"{float(eff):.2f}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(x), [str(j) for j in rows["job"]], rotation=60, ha="right", fontsize=8)
        ax.set_ylim(0, max(1.1, max(bottom) + 0.12))
        ax.set_ylabel("share of the step (median step, slowest rank)")
        ax.set_title(panel, fontsize=10)
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="step part")
    titled(fig, "Where each training step went (figures above the bars: scaling efficiency)")
    return fig, pd.DataFrame(points, columns=POINT_COLUMNS)


@dataclass(frozen=True)
class RunPlot:
    """One plot of a run's summary: plots/<name>.png, its title in the HTML report and the
    report's section it sits in (present/report.py), and what draws it from the summary."""

    name: str
    title: str
    section: str  # SCALING, BREAKDOWN or COLLECTIVES
    draw: Callable[[pd.DataFrame], Made | None]


SCALING, BREAKDOWN, COLLECTIVES = "scaling", "breakdown", "collectives"
RUN_PLOTS = (
    # images/s per GPU, efficiency against 1 GPU and against 1 node, vs nodes
    RunPlot("weak_scaling", "weak scaling", SCALING, lambda s: scaling_figure(s, "weak")),
    # speedup and efficiency vs nodes, ideal lines
    RunPlot("strong_scaling", "strong scaling", SCALING, lambda s: scaling_figure(s, "strong")),
    # the same for the transformer, in tokens/s
    RunPlot(
        "transformer_weak_scaling", "transformer: weak scaling", SCALING, lambda s: scaling_figure(s, "weak", "tokens")
    ),
    RunPlot(
        "transformer_strong_scaling",
        "transformer: strong scaling",
        SCALING,
        lambda s: scaling_figure(s, "strong", "tokens"),
    ),
    # busbw vs message size, log-log, one line per node count
    RunPlot("allreduce_busbw", "bus bandwidth vs message size", COLLECTIVES, busbw_figure),
    # time per call vs message size, log-log: the latency end
    RunPlot("allreduce_time", "time per call vs message size", COLLECTIVES, latency_figure),
    # where each training job's step went (docs/concepts/breakdown.md)
    RunPlot("step_breakdown", "where each training step went", BREAKDOWN, breakdown_figure),
)


def run_plots(summary: pd.DataFrame, section: str | None = None, *, titled: bool = False) -> list[tuple[str, Maker]]:
    """The run's plots of `section` (all with None) as (its file name, or its title, what draws it)."""
    return [
        (p.title if titled else p.name, functools.partial(p.draw, summary))
        for p in RUN_PLOTS
        if section in (None, p.section)
    ]


def draw_all(run: RunDir, summary: pd.DataFrame) -> list[Path]:
    """Draw every plot the summary has data for; return the PNG paths written."""
    return draw_into(run.path, run.plots.name, run_plots(summary))


# Lines a timeline panel draws one by one, each named; past them a panel draws the median of all
# and their range, second by second, which reads alike at any count of nodes (their points stay in
# the CSV, node by node)
TIMELINE_LINES = 8


def timeline_figure(job: str, tele: Telemetry) -> Made | None:
    """What each node of one job did over time (docs/concepts/telemetry.md): the bytes it sent on its
    interfaces but loopback, CPU busy and, where nvidia-smi ran, GPU SM utilisation, with each
    workload's span shaded and named."""
    import pandas as pd

    rows: list[tuple[str, str, float, float]] = []  # metric, series, x, y
    starts = [h.samples[0]["t"] for h in tele.hosts.values() if h.samples]
    if not starts:
        return None
    t0 = min(starts)
    for name, host in sorted(tele.hosts.items()):
        s = telemetry.series(host)
        for t, cpu, nic in zip(s["t"], s["cpu_pct"], s["nic_sent_mbps"], strict=True):
            rows += [("CPU busy %", name, t - t0, cpu), ("NIC sent MB/s", name, t - t0, nic)]
        for g in host.gpus:
            if isinstance(g.get("sm"), (int, float)):
                rows.append(("GPU SM %", f"{name} gpu{g['gpu']}", g["t"] - t0, g["sm"]))
    if not rows:
        return None
    points = pd.DataFrame(rows, columns=["metric", "series", "x", "y"])
    points = points[points["y"].notna()]
    metrics = [m for m in ("NIC sent MB/s", "CPU busy %", "GPU SM %") if (points["metric"] == m).any()]
    plt, sns = setup_plotting()
    fig, axes = plt.subplots(len(metrics), 1, figsize=(10, 2.4 * len(metrics)), sharex=True, squeeze=False)
    for ax, metric in zip(axes[:, 0], metrics, strict=True):
        sub = points[points["metric"] == metric]
        lines = sub["series"].nunique()
        many = lines > TIMELINE_LINES
        if many:  # the median and the range of every node's samples, second by second
            by_second = sub.groupby(sub["x"].round())["y"]
            low, mid, high = by_second.min(), by_second.median(), by_second.max()
            ax.fill_between(mid.index, low, high, color="#9ecae1", alpha=0.6, linewidth=0, label=f"all {lines}")
            ax.plot(mid.index, mid, color="#08519c", linewidth=1.2, label=f"median of {lines}")
            ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1))
        else:  # a line a node, in the theme's colours, in the order the nodes came
            colours = sns.color_palette(n_colors=lines)
            for (series, unsorted), colour in zip(sub.groupby("series", sort=False), colours, strict=True):
                line = unsorted.sort_values("x")
                ax.plot(line["x"], line["y"], color=colour, linewidth=1.2, label=series)
            ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1))
        ax.set_ylabel(metric)
        if metric.endswith("%"):  # a share reads against all of it: 0 to 100, not 98.5 to 100
            ax.set_ylim(0, max(100.0, float(sub["y"].max()) * 1.02))
        for k, (key, (start, end)) in enumerate(sorted(tele.phases.items(), key=lambda p: p[1][0])):
            stop = end if end is not None else sub["x"].max() + t0
            ax.axvspan(start - t0, stop - t0, color=("#dde8f5" if k % 2 == 0 else "#f3e6d3"), zorder=0)
            if ax is axes[0, 0]:
                ax.text(start - t0, 1.01, key, transform=ax.get_xaxis_transform(), fontsize="small", va="bottom")
    axes[-1, 0].set_xlabel("seconds since the first sample")
    titled(fig, f"{job}: each node while its workloads ran")
    points.insert(0, "panel", job)
    points.insert(0, "plot", "timeline")
    return fig, points[POINT_COLUMNS]


def _ink(rgba: tuple[float, ...]) -> str:
    """Black on a light cell, white on a dark one: by the cell's relative luminance (WCAG 2.1,
    "relative luminance", with sRGB's linearisation), whichever contrasts more with it."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    # contrast with black (L + 0.05) / 0.05 against white's 1.05 / (L + 0.05): equal at L = 0.179
    return "black" if luminance > 0.179 else "white"


def _leaf_blocks(ax: Axes, plt: Any, blocks: dict[str, list[int]], uplinks: list[Finding]) -> None:
    """Each leaf's block of the matrix bounded and named above it; the blocks of a named path
    (its two leaves' rows and columns, both ways) or of a leaf named for its own uplink (its
    rows and columns against every other leaf) outlined in red."""
    if not blocks:
        return
    ax.set_title(ax.get_title(), pad=16)  # room for the leaves' names above the matrix
    for leaf, (first, last) in blocks.items():
        if first > 0:  # between two blocks; the frame bounds the outer ones
            ax.axhline(first - 0.5, color="black", linewidth=1.5)
            ax.axvline(first - 0.5, color="black", linewidth=1.5)
        ax.text((first + last) / 2, -0.6, leaf, ha="center", va="bottom", fontsize=9, clip_on=False)
    for finding in uplinks:
        leaves = [leaf for leaf in finding.nodes if leaf in blocks]
        others = leaves[1:] if len(leaves) == 2 else [leaf for leaf in blocks if leaf not in leaves]
        for one in leaves[:1]:
            for other in others:
                (a0, a1), (b0, b1) = blocks[one], blocks[other]
                for r0, r1, c0, c1 in ((a0, a1, b0, b1), (b0, b1, a0, a1)):
                    corner, width, height = (c0 - 0.42, r0 - 0.42), c1 - c0 + 0.84, r1 - r0 + 0.84  # inside the lines
                    box = plt.Rectangle(corner, width, height, fill=False, edgecolor="red", linewidth=2.5, zorder=3)
                    ax.add_patch(box)


def draw_heatmap(root: Path, v: Verdict) -> Path | None:
    """ROOT/heatmap.png and ROOT/heatmap.csv of a node check's verdict, or None without pairs."""
    made = heatmap_figure(v)
    return None if made is None else save(*made, root, "heatmap")


def heatmap_figure(v: Verdict) -> Made | None:
    """The node check's pair matrix, one panel per pair metric: each cell a pair's figure (its
    value written in it up to 16 nodes), white where its step failed or a pair was not measured,
    the diagonal empty; named nodes' labels in red and named links' cells outlined (docs/guides/nodes.md).
    Judged by leaves, the nodes are drawn leaf by leaf, each leaf's block bounded and named, and
    the block of a path named between two leaves outlined."""
    import numpy as np
    import pandas as pd

    plt, _ = setup_plotting()
    metrics = [m for m, figs in v.pair_figures.items() if figs]
    if not metrics:
        return None
    order = v.by_leaf()
    n = len(order)
    index = {name: i for i, name in enumerate(order)}
    blocks: dict[str, list[int]] = {}  # leaf -> [first, last] index
    for i, node in enumerate(order):
        if node in v.leaf_of:
            blocks.setdefault(v.leaf_of[node], [i, i])[1] = i
    side = min(14.0, 2.5 + 0.35 * n)
    fig, axes = plt.subplots(1, len(metrics), figsize=(side * len(metrics), side * 0.85), squeeze=False)
    named = {f.nodes[0] for f in v.nodes}
    points = []
    for ax, metric in zip(axes[0], metrics, strict=True):
        label, unit, _ = NODE_METRICS[metric]
        grid = np.full((n, n), np.nan)
        for (a, b), value in v.pair_figures[metric].items():
            grid[index[a], index[b]] = grid[index[b], index[a]] = np.nan if value is None else value
            points.append(("heatmap", label, metric, f"{a} {b}", a, b, value))
        cmap = plt.get_cmap("viridis").with_extremes(bad="white")  # a copy (matplotlib 3.4 and later)
        image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=unit)
        ax.set_title(label)
        ax.set_xticks(range(n), order, rotation=90, fontsize=8)
        ax.set_yticks(range(n), order, fontsize=8)
        ax.grid(False)
        for tick in [*ax.get_xticklabels(), *ax.get_yticklabels()]:
            if tick.get_text() in named:
                tick.set_color("red")
        if n <= 16:  # few enough cells to read each figure, and to say which failed
            for (a, b), value in v.pair_figures[metric].items():
                text = "failed" if value is None else f"{value:.3g}"
                ink = "red" if value is None else _ink(cmap(image.norm(value)))
                for r, c in ((index[a], index[b]), (index[b], index[a])):
                    ax.text(c, r, text, ha="center", va="center", fontsize=7, color=ink)
        for f in v.links:
            i, j = index[f.nodes[0]], index[f.nodes[1]]
            for r, c in ((i, j), (j, i)):
                ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
        _leaf_blocks(ax, plt, blocks, v.uplinks)
    fig.tight_layout()
    frame = pd.DataFrame(points, columns=["plot", "panel", "metric", "series", "node_a", "node_b", "value"])
    return fig, frame
