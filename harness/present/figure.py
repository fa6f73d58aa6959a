"""What every plot of bench is drawn with: seaborn set up once, panels and log axes, titles
that tight_layout leaves room for, names on level lines that never overlap (`settle_names`),
legends that fit, a run's figures drawn side by side (`drawn`), and each figure saved as a PNG
beside the CSV of the points it draws.
present/plot.py draws a run's plots with it, present/compare_plot.py those that set runs
side by side.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import TYPE_CHECKING, Any

from harness.files import inside

if TYPE_CHECKING:
    from collections.abc import Iterable

    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    Made = tuple[Figure, pd.DataFrame]  # a figure and the points it draws
    Maker = Callable[[], Made | None]  # draws a figure, or None when there is nothing to draw

POINT_COLUMNS = ["plot", "panel", "metric", "series", "x", "y"]


def setup_plotting() -> tuple[ModuleType, ModuleType]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    # Labels come from run directories and the command line: `$` is text, never mathtext, whose
    # parser would fail on `a$\frac{x$` at draw time.
    matplotlib.rcParams["text.parse_math"] = False
    return plt, sns


def panel_of(df: pd.DataFrame) -> pd.Series:
    return df["launcher"].astype(str) + " · " + df["nccl_config"].astype(str)


def log2_axis(ax: Axes, values: Iterable[float], formatter: Callable[[int], str]) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log", base=2)
    ticks = sorted({int(v) for v in values})
    if len(ticks) > 12:  # keep labels readable on long size sweeps
        step = -(-len(ticks) // 12)
        ticks = ticks[::step]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: formatter(round(v))))


def log_y(ax: Axes) -> None:
    """A logarithmic y axis labelled in plain numbers (0.2, 1, 50, 2,000). matplotlib's own log
    labels are mathtext, which `text.parse_math = False` (setup_plotting) prints as the raw
    `$\\mathdefault{10^{0}}$`. Call it once the axis's artists are drawn: the labels' steps
    follow the range, 1-2-5 within three decades, since one or two powers of ten say little."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

    if ax.get_yscale() != "log":
        ax.set_yscale("log")
    low, high = ax.get_ylim()
    decades = math.log10(high / low) if 0 < low < high else 0.0
    subs = tuple(range(1, 10)) if decades <= 1 else (1, 2, 5) if decades <= 3 else (1,)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=[float(s) for s in subs]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    # no minor ticks: the theme draws no tick marks, and a log axis's minor ones are objects
    # matplotlib lays out and measures at every draw of every panel
    ax.yaxis.set_minor_locator(NullLocator())


# Panels a figure puts side by side before it starts a new row: three at 6 inches, 18 in all
GRID_COLUMNS = 3


TITLE_INCHES = 0.55  # above the panels, for the figure's title: tight_layout leaves it out


def titled(fig: Figure, text: str) -> None:
    """The figure's title above its panels, never over the first (lay_out)."""
    fig.suptitle(text)
    lay_out(fig)


def lay_out(fig: Figure) -> None:
    """tight_layout, leaving the title's height free at the top: it lays out the axes alone,
    and put the first row of panels under a title it did not see.

    One pass of its measure: `Figure.tight_layout` measures every panel twice when it is given a
    rectangle to fit in, and on many panels the measuring is most of a figure's time. Here the
    panels are laid out on the whole figure, then the top row moves down by the title's room,
    every row shorter by its share so that the gaps between rows stay as measured."""
    title = fig.get_suptitle() if hasattr(fig, "get_suptitle") else getattr(fig, "_suptitle", None)
    room = TITLE_INCHES / fig.get_figheight() if title else 0.0
    try:  # matplotlib's own pass (matplotlib/_tight_layout.py, in every matplotlib pyproject allows)
        from matplotlib import _tight_layout

        specs = _tight_layout.get_subplotspec_list(fig.axes)
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        params = _tight_layout.get_tight_layout_figure(fig, fig.axes, specs, renderer)
    except (ImportError, AttributeError, TypeError):  # a matplotlib that has moved it
        fig.tight_layout(rect=(0.0, 0.0, 1.0, 1.0 - room))
        return
    if not params:  # no layout could fit: left as it was, as tight_layout leaves it (with its warning)
        return
    rows = max(spec.get_gridspec().get_geometry()[0] for spec in specs if spec is not None)
    bottom, top, space = params["bottom"], params["top"], params.get("hspace", 0.0)
    gap = space * (top - bottom) / (rows + (rows - 1) * space)  # hspace is a share of a row's height
    params["top"] = top = top - room
    if rows > 1:
        params["hspace"] = gap / ((top - bottom - (rows - 1) * gap) / rows)
    fig.subplots_adjust(**params)


PNG_DPI = 110


def png_bytes(fig: Figure) -> bytes:
    """The figure as a PNG, cropped to what it draws as savefig's bbox_inches="tight" crops it,
    with the crop measured here: given "tight", savefig draws the whole figure unseen before it
    measures it, which only a layout engine, run by a draw, needs (bench's figures are laid out
    once, by lay_out or tight_layout, and keep none)."""
    from matplotlib import rcParams
    from matplotlib.layout_engine import PlaceHolderLayoutEngine  # what tight_layout leaves: runs nothing

    buf = io.BytesIO()
    if not isinstance(fig.get_layout_engine(), (type(None), PlaceHolderLayoutEngine)):
        fig.savefig(buf, format="png", dpi=PNG_DPI, bbox_inches="tight")
        return buf.getvalue()
    dpi = fig.get_dpi()
    fig.set_dpi(PNG_DPI)  # measured at the dpi it is drawn at, as savefig measures it
    try:
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        crop = fig.get_tightbbox(renderer).padded(rcParams["savefig.pad_inches"])
        fig.savefig(buf, format="png", dpi=PNG_DPI, bbox_inches=crop)
    finally:
        fig.set_dpi(dpi)
    return buf.getvalue()


def save(fig: Figure, points: pd.DataFrame, root: Path, rel: str) -> Path:
    """ROOT/REL.png and its points as ROOT/REL.csv, neither through a link (harness/files/inside.py)."""
    return _write(png_bytes(fig), points, root, rel)


def _write(png: bytes, points: pd.DataFrame, root: Path, rel: str) -> Path:
    inside.write(root, f"{rel}.csv", points.to_csv(index=False).encode())
    return inside.write(root, f"{rel}.png", png)


Drawn = tuple[str, bytes, "pd.DataFrame"]  # a figure's name, its PNG, and the points it draws


def _drawn(makers: list[tuple[str, Maker]], share: Iterable[int]) -> list[tuple[int, Drawn]]:
    """The figures of `share` (indices into makers) that have data, each drawn and closed."""
    plt, _ = setup_plotting()
    out = []
    for i in share:
        name, make = makers[i]
        made = make()
        if made is None:
            continue
        fig, points = made
        try:
            out.append((i, (name, png_bytes(fig), points)))
        finally:
            plt.close(fig)
    return out


def _worker(makers: list[tuple[str, Maker]], share: range) -> tuple[list, list[tuple[int, Drawn]]]:
    return [], _drawn(makers, share)


def drawn(makers: list[tuple[str, Maker]]) -> list[Drawn]:
    """(name, PNG, points) of each (name, make) that has data, in the makers' order (drawn_at)."""
    return [figure for _, figure in sorted(drawn_at(makers).items())]


def drawn_at(makers: list[tuple[str, Maker]]) -> dict[int, Drawn]:
    """(name, PNG, points) of each (name, make) that has data, by its index in `makers`. A figure
    of many panels takes seconds to lay out and draw, and figures share nothing: the makers are
    dealt round forked workers, one a core (harness/run/forked.py), while this process draws
    its own share; a worker that leaves nothing whole has its share drawn here."""
    from harness.run import forked

    setup_plotting()  # matplotlib's and seaborn's imports made once, before the workers are forked
    ways = forked.usable(len(makers))
    shares = [range(k, len(makers), ways) for k in range(ways)]
    workers: list[tuple[range, forked.Worker | None]] = []
    try:
        for share in shares[1:]:
            try:
                workers.append((share, forked.Worker(functools.partial(_worker, makers, share))))
            except OSError:  # no process or memory to fork with
                workers.append((share, None))
        out = _drawn(makers, shares[0])
        for share, worker in workers:
            made = worker.result() if worker else None
            out += made[1] if made else _drawn(makers, share)
    finally:
        for _, worker in workers:
            if worker:
                worker.end()
    return dict(out)


def draw_into(root: Path, folder: str, makers: list[tuple[str, Maker]]) -> list[Path]:
    """Draw each (name, make) that has data into ROOT/FOLDER/<name>.png, with its CSV (`save`);
    the PNGs written."""
    return [_write(png, points, root, str(PurePosixPath(folder, name))) for name, png, points in drawn(makers)]


def nodes_axis(ax: Axes, sub: pd.DataFrame) -> None:
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


def rate_band(df: pd.DataFrame, metric: str, time: str) -> None:
    """Add `<metric>_p10/_p90` to `df`, where it has `<time>_p10/_p90`: a rate scales with
    1 / time, so the times' p90 and p10 over their median bound it."""
    if f"{time}_p10" in df:
        df[f"{metric}_p10"] = df[metric] * df[time] / df[f"{time}_p90"]
        df[f"{metric}_p90"] = df[metric] * df[time] / df[f"{time}_p10"]


def band(
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
    from matplotlib.collections import PolyCollection

    out: list[tuple[Any, ...]] = []
    shapes, colours = [], []  # the bands of every series, as one collection: a panel has dozens
    for series, group in sub.groupby("series"):
        g = group.sort_values(x).dropna(subset=[f"{metric}_p10", f"{metric}_p90"])
        if g.empty:
            continue
        xs, lo, hi = (g[c].astype(float).tolist() for c in (x, f"{metric}_p10", f"{metric}_p90"))
        if len(g) == 1:  # a band over one x has no width: a bar, seen, rather than a stretched y range
            ax.vlines(xs, lo, hi, colors=[palette[series]], alpha=0.35, linewidth=6)
        else:  # the polygon fill_between draws: along the p10s, back along the p90s
            shapes.append([*zip(xs, lo), *reversed(list(zip(xs, hi)))])
            colours.append(palette[series])
        for q in ("p10", "p90"):
            out += [(*where, f"{metric}_{q}", str(series), int(v), float(y)) for v, y in zip(g[x], g[f"{metric}_{q}"])]
    if shapes:
        ax.add_collection(PolyCollection(shapes, facecolors=colours, alpha=0.18, linewidths=0), autolim=True)
        ax.autoscale_view()
    return out


LEVEL_NAME = "level name"  # the gid of a level's name (level_line), which settle_names places


def level_line(ax: Axes, y: float, text: str, color: object) -> None:
    """A dashed horizontal line, named just above it at the panel's right edge. The figure's
    names are placed once it is laid out (settle_names)."""
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


def settle_names(fig: Figure) -> None:
    """Place every panel's level names, measured on the laid-out figure: from the lowest level
    up, a name that would print over the one below it moves up above it, and the y range grows
    until the top name is inside the panel. (Stacked by their order alone, names close together
    were legible, but a name far from the one below it still climbed, onto the next level's; a
    range raised by a guessed part of the panel left the top name cut off by the frame.) Each
    pass measures the laid-out figure without drawing it (a name's box follows from its panel's
    place and range, and its text); a raised range moves the levels closer, so it measures
    again."""
    from matplotlib.text import Annotation

    if not any(n.get_gid() == LEVEL_NAME for ax in fig.axes for n in ax.texts):
        return  # nothing to place
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for _ in range(4):
        for ax in fig.axes:
            ax.apply_aspect()
            ax.get_ylim()  # brings the range up to date with what was plotted since it was set
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


def fit_legend(fig: Figure, ax: Axes) -> None:
    """Lay the figure out, then widen it until the panel `ax` is no narrower than the legend
    beside it (a legend of long settings-set names once dwarfed its panel). Measured, not
    guessed: each pass draws the figure and scales its width by what is missing."""
    import warnings

    with warnings.catch_warnings():  # a legend wider than the panels cannot be laid out until widened
        warnings.filterwarnings("ignore", "Tight layout not applied")
        lay_out(fig)
    legend = ax.get_legend()
    if legend is None:
        return
    for _ in range(4):
        fig.draw_without_rendering()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        want, have = legend.get_window_extent(renderer).width, ax.get_window_extent(renderer).width
        if have >= want:
            return
        fig.set_figwidth(fig.get_figwidth() * (1 + (want - max(have, 1.0)) / max(have, 1.0) * 1.1))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Tight layout not applied")
            lay_out(fig)
