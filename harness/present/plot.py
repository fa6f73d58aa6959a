"""Plots of a run's summary, with seaborn, as PNG, each beside a CSV of the points it draws:
the run's plots are listed once, in RUN_PLOTS (a file, a title and a section of the report
each), which both `plots/` and the HTML report read. Comparisons, histories, a job's timeline
and the node check's heatmap are drawn here too.

Facets: one column per (launcher, NCCL set) where a run has several; the busbw plot has one
row per collective. Only rows with status COMPLETED are drawn.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import BREAKDOWN_FRACTIONS, COLLECTIVE_WORKLOAD, TRAINING, UNITS
from benchmarks.common import format_size
from harness import inside, nodecheck, telemetry
from harness.analysis.sides import measured
from harness.rundir import COMPLETED, RunDir

if TYPE_CHECKING:
    from collections.abc import Iterable

    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from harness.nodecheck import Verdict
    from harness.telemetry import Telemetry

    Made = tuple[Figure, pd.DataFrame]  # a figure and the points it draws
    Maker = Callable[[], Made | None]  # draws a figure, or None when there is nothing to draw

POINT_COLUMNS = ["plot", "panel", "metric", "series", "x", "y"]


def _setup() -> tuple[ModuleType, ModuleType]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    # Labels come from run directories and the command line: `$` is text, never mathtext, whose
    # parser would fail on `a$\frac{x$` at draw time.
    matplotlib.rcParams["text.parse_math"] = False
    return plt, sns


def _panel(df: pd.DataFrame) -> pd.Series:
    return df["launcher"].astype(str) + " · " + df["nccl_config"].astype(str)


def _log2_axis(ax: Axes, values: Iterable[float], formatter: Callable[[int], str]) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log", base=2)
    ticks = sorted({int(v) for v in values})
    if len(ticks) > 12:  # keep labels readable on long size sweeps
        step = -(-len(ticks) // 12)
        ticks = ticks[::step]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: formatter(round(v))))


def _log_y(ax: Axes) -> None:
    """A logarithmic y axis labelled in plain numbers (0.2, 1, 50, 2,000). matplotlib's own log
    labels are mathtext, which `text.parse_math = False` (_setup) prints as the raw
    `$\\mathdefault{10^{0}}$`. Call it once the axis's artists are drawn: the labels' steps
    follow the range, 1-2-5 within three decades, since one or two powers of ten say little."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if ax.get_yscale() != "log":
        ax.set_yscale("log")
    low, high = ax.get_ylim()
    decades = math.log10(high / low) if 0 < low < high else 0.0
    subs = tuple(range(1, 10)) if decades <= 1 else (1, 2, 5) if decades <= 3 else (1,)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=[float(s) for s in subs]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


# Panels a figure puts side by side before it starts a new row: three at 6 inches, 18 in all
GRID_COLUMNS = 3
TITLE_INCHES = 0.55  # above the panels, for the figure's title: tight_layout leaves it out


def _titled(fig: Figure, text: str) -> None:
    """The figure's title above its panels, never over the first (_layout)."""
    fig.suptitle(text)
    _layout(fig)


def _layout(fig: Figure) -> None:
    """tight_layout, leaving the title's height free at the top: it lays out the axes alone,
    and put the first row of panels under a title it did not see."""
    titled = fig.get_suptitle() if hasattr(fig, "get_suptitle") else getattr(fig, "_suptitle", None)
    top = 1.0 - TITLE_INCHES / fig.get_figheight() if titled else 1.0
    fig.tight_layout(rect=(0.0, 0.0, 1.0, top))


def _save(fig: Figure, points: pd.DataFrame, root: Path, rel: str) -> Path:
    """ROOT/REL.png and its points as ROOT/REL.csv, neither through a link (harness/inside.py)."""
    inside.write(root, f"{rel}.csv", points.to_csv(index=False).encode())
    return inside.write(root, f"{rel}.png", png_bytes(fig))


def _series_label(workload: str, gpus: int) -> str:
    return f"{workload}, {gpus} GPU{'s' if gpus != 1 else ''}/node"


def _nodes_axis(ax: Axes, sub: pd.DataFrame) -> None:
    """The x axis every scaling plot shares: nodes, log2, each tick with the world sizes the
    series have there: `2` over `(2, 4 GPUs)`."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    ax.set_xscale("log", base=2)
    nodes = sorted({int(n) for n in sub["nodes"]})
    worlds = {n: sorted({n * int(g) for g in sub[sub["nodes"] == n]["gpus_per_node"]}) for n in nodes}
    ax.xaxis.set_major_locator(FixedLocator(nodes))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(
        FixedFormatter([f"{n}\n({', '.join(map(str, worlds[n]))} GPU{'s' if worlds[n] != [1] else ''})" for n in nodes])
    )
    ax.set_xlabel("nodes (world size)")


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
    plt, sns = _setup()
    df["panel"] = _panel(df)
    df["series"] = [_series_label(w, int(g)) for w, g in zip(df["workload"], df["gpus_per_node"])]
    panels = sorted(df["panel"].unique())
    for metric in (per_gpu, "speedup"):
        _rate_band(df, metric, "step_time_ms")
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
            points += _band(ax, sub, "nodes", metric, palette, (name, panel))
            points += _ideal(ax, sub, metric, palette, (name, panel))
            _nodes_axis(ax, sub)
            ax.set_ylabel(label)
            if r == 0:
                ax.set_title(panel)
            points += [
                (name, panel, metric, s, int(x), float(y)) for s, x, y in zip(sub["series"], sub["nodes"], sub[metric])
            ]
    if axes[0][-1].get_legend():
        sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1.02, 1), title="workload, GPUs per node")
    _titled(fig, f"{title} (dashed: ideal)")
    _settle_names(fig)
    return fig, pd.DataFrame(points, columns=POINT_COLUMNS)


def _rate_band(df: pd.DataFrame, metric: str, time: str) -> None:
    """Add `<metric>_p10/_p90` to `df`, where it has `<time>_p10/_p90`: a rate scales with
    1 / time, so the times' p90 and p10 over their median bound it."""
    if f"{time}_p10" in df:
        df[f"{metric}_p10"] = df[metric] * df[time] / df[f"{time}_p90"]
        df[f"{metric}_p90"] = df[metric] * df[time] / df[f"{time}_p10"]


def _band(
    ax: Axes,
    sub: pd.DataFrame,
    x: str,
    metric: str,
    palette: dict[object, tuple[float, float, float]],
    where: tuple[str, ...],
) -> list[tuple[Any, ...]]:
    """Each series' p10-p90 band over `x`, shaded in its colour (a bar where it has one x), and
    its points, where the frame has `<metric>_p10/_p90`."""
    if f"{metric}_p10" not in sub:
        return []
    out: list[tuple[Any, ...]] = []
    for series, group in sub.groupby("series"):
        g = group.sort_values(x).dropna(subset=[f"{metric}_p10", f"{metric}_p90"])
        if g.empty:
            continue
        xs, lo, hi = (g[c].astype(float).tolist() for c in (x, f"{metric}_p10", f"{metric}_p90"))
        if len(g) == 1:  # a band over one x has no width: a bar, seen, rather than a stretched y range
            ax.vlines(xs, lo, hi, colors=[palette[series]], alpha=0.35, linewidth=6)
        else:
            ax.fill_between(xs, lo, hi, color=palette[series], alpha=0.18, linewidth=0)
        for q in ("p10", "p90"):
            out += [(*where, f"{metric}_{q}", str(series), int(v), float(y)) for v, y in zip(g[x], g[f"{metric}_{q}"])]
    return out


LEVEL_NAME = "level name"  # the gid of a level's name (_level), which _settle_names places


def _level(ax: Axes, y: float, text: str, color: object) -> None:
    """A dashed horizontal line, named just above it at the panel's right edge. The figure's
    names are placed once it is laid out (_settle_names)."""
    ax.axhline(y, color=color, linestyle="--", linewidth=1)
    ax.annotate(
        text,
        (1, y),
        xycoords=("axes fraction", "data"),
        xytext=(-3, 2),
        textcoords="offset points",
        ha="right",
        va="bottom",
        fontsize="small",
        color=color,
        annotation_clip=False,
        gid=LEVEL_NAME,
    )


def _settle_names(fig: Figure) -> None:
    """Place every panel's level names, measured on the laid-out figure: from the lowest level
    up, a name that would print over the one below it moves up above it, and the y range grows
    until the top name is inside the panel. (Stacked by their order alone, names close together
    were legible, but a name far from the one below it still climbed, onto the next level's; a
    range raised by a guessed part of the panel left the top name cut off by the frame.) Each
    pass draws the figure; a raised range moves the levels closer, so it measures again."""
    from matplotlib.text import Annotation

    if not any(n.get_gid() == LEVEL_NAME for ax in fig.axes for n in ax.texts):
        return  # nothing to place: no drawing
    for _ in range(4):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        settled = True
        for ax in fig.axes:
            levels = (n for n in ax.texts if isinstance(n, Annotation) and n.get_gid() == LEVEL_NAME)
            names = sorted(levels, key=lambda n: n.xy[1])
            if not names:
                continue
            floor = -math.inf
            for name in names:
                box = name.get_window_extent(renderer)
                if box.y0 < floor:
                    x, up = name.xyann
                    name.xyann = (x, up + (floor - box.y0) * 72 / fig.dpi)  # pixels to points
                    box = box.translated(0, floor - box.y0)
                floor = box.y1 + 1
            frame = ax.get_window_extent(renderer)
            if floor - 1 > frame.y1 + 0.5:  # the top name is cut off: the range grows by what is missing
                settled = False
                top = names[-1]
                above = floor - 1 - ax.transData.transform((0, top.xy[1]))[1]  # the name's top over its level
                part = min(0.9, max(0.1, (frame.height - above) / frame.height))  # where the level may sit
                low, y = ax.get_ylim()[0], top.xy[1]
                if ax.get_yscale() == "log" and 0 < low < y:
                    ax.set_ylim(low, low * (y / low) ** (1 / part))
                elif ax.get_yscale() != "log":
                    ax.set_ylim(low, low + (y - low) / part)
        if settled:
            return


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
            _level(ax, float(level), f"ideal: {workload}", "0.4")
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


def _peak_lines(
    ax: Axes, sub: pd.DataFrame, palette: dict[object, tuple[float, float, float]], where: tuple[str, str, str]
) -> list[tuple[str, str, str, str, str, int, float]]:
    """A dashed line at each series' peak busbw, where the cluster profile states its link
    speeds (docs/expected.md), and its points: one per series, at the largest size. Series of
    one peak share its line and name, grey when they are several (three series at 25 GB/s once
    printed three names, one over another)."""
    if "busbw_peak_gbps" not in sub:
        return []
    peaks = sub[sub["busbw_peak_gbps"].notna()].drop_duplicates("series")
    for peak, series in peaks.groupby("busbw_peak_gbps")["series"]:
        color = palette[series.iloc[0]] if len(series) == 1 else "0.4"
        _level(ax, float(peak), f"peak {float(peak):g}", color)
    largest = int(sub["size_bytes"].max())
    return [
        (*where, "busbw_peak_gbps", str(series), largest, float(peak))
        for series, peak in zip(peaks["series"], peaks["busbw_peak_gbps"])
    ]


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
    plt, sns = _setup()
    df["panel"] = _panel(df)
    if metric == "busbw_gbps":
        _rate_band(df, "busbw_gbps", "time_us")
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
    for i, (coll, panel) in enumerate(cells):
        ax = flat[i]
        sub = df[(df["collective"] == coll) & (df["panel"] == panel)].sort_values("size_bytes")
        if sub.empty:
            ax.set_visible(False)
            continue
        sns.lineplot(
            data=sub,
            x="size_bytes",
            y=metric,
            hue="series",
            hue_order=order,
            palette=palette,
            marker="o",
            estimator=None,
            sort=True,
            ax=ax,
            legend=i == cols - 1,
        )
        ax.set_yscale("log")  # before the peak's level, which makes room for its name
        points += _band(ax, sub, "size_bytes", metric, palette, (name, coll, panel))
        _log2_axis(ax, sub["size_bytes"], format_size)
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
        _log_y(ax)
    if axes[0][-1].get_legend():
        sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1.02, 1), title="nodes x GPUs per node")
    _titled(fig, f"{title} (in-place where torch has it, worst rank; band: p10-p90)")
    _settle_names(fig)
    return fig, pd.DataFrame(points, columns=["plot", "collective", *POINT_COLUMNS[1:]])


# The parts of a training step, bottom to top (docs/breakdown.md): the summary's fractions,
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
    plt, sns = _setup()
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
    _titled(fig, "Where each training step went (figures above the bars: scaling efficiency)")
    return fig, pd.DataFrame(points, columns=POINT_COLUMNS)


def figures(makers: list[tuple[str, Maker]]) -> Iterator[tuple[str, Figure, pd.DataFrame]]:
    """(name, figure, points) of each (name, make) whose make has data; each figure is closed
    once the caller has used it."""
    plt, _ = _setup()
    for name, make in makers:
        made = make()
        if made is None:
            continue
        fig, points = made
        try:
            yield name, fig, points
        finally:
            plt.close(fig)


def _draw_into(root: Path, folder: str, makers: list[tuple[str, Maker]]) -> list[Path]:
    """Draw each (name, make) that has data into ROOT/FOLDER/<name>.png, with its CSV; the PNGs
    written."""
    return [_save(fig, points, root, str(PurePosixPath(folder, name))) for name, fig, points in figures(makers)]


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
    # where each training job's step went (docs/breakdown.md)
    RunPlot("step_breakdown", "where each training step went", BREAKDOWN, breakdown_figure),
)


def run_plots(summary: pd.DataFrame, section: str | None = None, *, by: str = "name") -> list[tuple[str, Maker]]:
    """The run's plots of `section` (all with None) as (its name or title, what draws it)."""
    return [(getattr(p, by), functools.partial(p.draw, summary)) for p in RUN_PLOTS if section in (None, p.section)]


def draw_all(run: RunDir, summary: pd.DataFrame) -> list[Path]:
    """Draw every plot the summary has data for; return the PNG paths written."""
    return _draw_into(run.path, run.plots.name, run_plots(summary))


# --------------------------------------------------------------------------- one job's telemetry


def timeline_figure(job: str, tele: Telemetry) -> Made | None:
    """What each node of one job did over time (docs/telemetry.md): the bytes it sent on its
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
    plt, sns = _setup()
    fig, axes = plt.subplots(len(metrics), 1, figsize=(10, 2.4 * len(metrics)), sharex=True, squeeze=False)
    for ax, metric in zip(axes[:, 0], metrics, strict=True):
        sub = points[points["metric"] == metric]
        many = sub["series"].nunique() > 8
        sns.lineplot(data=sub, x="x", y="y", hue="series", ax=ax, legend=not many, linewidth=1.2)
        ax.set_ylabel(metric)
        if metric.endswith("%"):  # a share reads against all of it: 0 to 100, not 98.5 to 100
            ax.set_ylim(0, max(100.0, float(sub["y"].max()) * 1.02))
        if not many and ax.get_legend() is not None:
            ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1))
        for k, (key, (start, end)) in enumerate(sorted(tele.phases.items(), key=lambda p: p[1][0])):
            stop = end if end is not None else sub["x"].max() + t0
            ax.axvspan(start - t0, stop - t0, color=("#dde8f5" if k % 2 == 0 else "#f3e6d3"), zorder=0)
            if ax is axes[0, 0]:
                ax.text(start - t0, 1.01, key, transform=ax.get_xaxis_transform(), fontsize="small", va="bottom")
    axes[-1, 0].set_xlabel("seconds since the first sample")
    _titled(fig, f"{job}: each node while its workloads ran")
    points.insert(0, "panel", job)
    points.insert(0, "plot", "timeline")
    return fig, points[POINT_COLUMNS]


# --------------------------------------------------------------------------- two runs


def _fit_legend(fig: Figure, ax: Axes) -> None:
    """Lay the figure out, then widen it until the panel `ax` is no narrower than the legend
    beside it (a legend of long settings-set names once dwarfed its panel). Measured, not
    guessed: each pass draws the figure and scales its width by what is missing."""
    import warnings

    with warnings.catch_warnings():  # a legend wider than the panels cannot be laid out until widened
        warnings.filterwarnings("ignore", "Tight layout not applied")
        _layout(fig)
    legend = ax.get_legend()
    if legend is None:
        return
    for _ in range(4):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        want, have = legend.get_window_extent(renderer).width, ax.get_window_extent(renderer).width
        if have >= want:
            return
        fig.set_figwidth(fig.get_figwidth() * (1 + (want - max(have, 1.0)) / max(have, 1.0) * 1.1))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Tight layout not applied")
            _layout(fig)


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
    bands = _band(
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
    plt, sns = _setup()
    df["series"] = measured(df) + " · " + df["gpus_per_node"].astype(str) + " GPU/node · " + _panel(df)
    _rate_band(df, "busbw_gbps", "time_us")
    nodes = sorted(df["nodes"].unique())
    styles = sorted(df["series"].unique())
    fig, axes = plt.subplots(1, len(nodes), figsize=(max(7.0, 5.5 * len(nodes)), 4.4), squeeze=False)
    points = []
    for c, n in enumerate(nodes):
        ax = axes[0][c]
        sub = df[df["nodes"] == n].sort_values("size_bytes")
        where = ("compare_busbw", f"{int(n)} nodes")
        points += _two_runs(sns, ax, sub, "size_bytes", "busbw_gbps", labels, (c == len(nodes) - 1), styles, where)
        _log2_axis(ax, sub["size_bytes"], format_size)
        _log_y(ax)
        ax.tick_params(axis="x", labelrotation=45)
        ax.set_xlabel("message size")
        ax.set_ylabel("bus bandwidth (GB/s, log)")
        ax.set_title(f"{int(n)} node{'s' if n != 1 else ''}")
    if axes[0][-1].get_legend():
        sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(f"Bus bandwidth: {labels[0]} vs {labels[1]}")
    _fit_legend(fig, axes[0][-1])
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
        _rate_band(coll, "busbw_gbps", "time_us")
    _rate_band(train, "per_gpu", "step_time_ms")
    panels = [
        (f"{w} ({s})", train[(train["workload"] == w) & (train["scaling"] == s)], "per_gpu", f"{UNITS[w]}/s per GPU")
        for w, s in sorted(set(zip(train["workload"], train["scaling"])))
    ]
    if len(coll):
        panels.append(("all-reduce at the largest size", coll, "busbw_gbps", "bus bandwidth (GB/s)"))
    if not panels:
        return None
    plt, sns = _setup()

    def series(rows: pd.DataFrame) -> pd.Series:
        return rows["gpus_per_node"].astype(str) + " GPU/node · " + _panel(rows)

    styles = sorted({s for _, rows, _, _ in panels for s in series(rows)})
    fig, axes = plt.subplots(1, len(panels), figsize=(max(7.0, 5.0 * len(panels)), 4.2), squeeze=False)
    points = []
    for c, (title, rows, metric, ylabel) in enumerate(panels):
        ax = axes[0][c]
        sub = rows.assign(series=series(rows)).sort_values("nodes")
        points += _two_runs(
            sns, ax, sub, "nodes", metric, labels, (c == len(panels) - 1), styles, ("compare_scaling", title)
        )
        _nodes_axis(ax, sub)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    if axes[0][-1].get_legend():
        sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(f"Scaling: {labels[0]} vs {labels[1]}")
    _fit_legend(fig, axes[0][-1])
    return fig, pd.DataFrame(points, columns=POINT_COLUMNS)


def png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def draw_compare(out: Path, a: pd.DataFrame, b: pd.DataFrame, labels: tuple[str, str]) -> list[Path]:
    """compare_busbw.png and compare_scaling.png (each with its CSV) in `out`, the directory the
    user named, made when missing."""
    out.mkdir(parents=True, exist_ok=True)
    return _draw_into(
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
    plt, _ = _setup()
    fig, frame = history_made(points, cluster)
    try:
        return png_bytes(fig), frame.to_csv(index=False).encode()
    finally:
        plt.close(fig)


def history_made(points: pd.DataFrame, cluster: str) -> Made:
    """(figure, points) of a cluster's key figures over time: busbw at the largest message size
    per configuration, and images/s per GPU per training workload (history.points)."""
    import pandas as pd

    plt, sns = _setup()
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
    _titled(fig, f"History of {cluster}")
    return fig, pd.DataFrame(points_out, columns=POINT_COLUMNS)


def _ink(rgba: tuple[float, ...]) -> str:
    """Black on a light cell, white on a dark one: by the cell's relative luminance (WCAG 2.1,
    "relative luminance", with sRGB's linearisation), whichever contrasts more with it."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    # contrast with black (L + 0.05) / 0.05 against white's 1.05 / (L + 0.05): equal at L = 0.179
    return "black" if luminance > 0.179 else "white"


def draw_heatmap(root: Path, v: Verdict) -> Path | None:
    """ROOT/heatmap.png and ROOT/heatmap.csv of a node check's verdict, or None without pairs."""
    made = heatmap_figure(v)
    return None if made is None else _save(*made, root, "heatmap")


def heatmap_figure(v: Verdict) -> Made | None:
    """The node check's pair matrix, one panel per pair metric: each cell a pair's figure (its
    value written in it up to 16 nodes), white where its step failed or a pair was not measured,
    the diagonal empty; named nodes' labels in red and named links' cells outlined (docs/nodes.md)."""
    import numpy as np
    import pandas as pd

    plt, _ = _setup()
    metrics = [m for m, figs in v.pair_figures.items() if figs]
    if not metrics:
        return None
    n = len(v.names)
    index = {name: i for i, name in enumerate(v.names)}
    side = min(14.0, 2.5 + 0.35 * n)
    fig, axes = plt.subplots(1, len(metrics), figsize=(side * len(metrics), side * 0.85), squeeze=False)
    named = {f.nodes[0] for f in v.nodes}
    points = []
    for ax, metric in zip(axes[0], metrics, strict=True):
        label, unit, _ = nodecheck.METRICS[metric]
        grid = np.full((n, n), np.nan)
        for (a, b), value in v.pair_figures[metric].items():
            grid[index[a], index[b]] = grid[index[b], index[a]] = np.nan if value is None else value
            points.append(("heatmap", label, metric, f"{a} {b}", a, b, value))
        cmap = plt.get_cmap("viridis").copy()
        cmap.set_bad("white")
        image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=unit)
        ax.set_title(label)
        ax.set_xticks(range(n), v.names, rotation=90, fontsize=8)
        ax.set_yticks(range(n), v.names, fontsize=8)
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
    fig.tight_layout()
    frame = pd.DataFrame(points, columns=["plot", "panel", "metric", "series", "node_a", "node_b", "value"])
    return fig, frame
