"""The plots against the points they draw: every line's dashes agree with the legend in every
panel, ideal lines keep one colour each, one rank has no busbw line, the p10-p90 bands come
from the samples' spread, and every scaling plot has nodes on its x axis.

The summaries here are built in the summary's own layout, with collect.add_scaling computing
speedup and efficiency as a collect does, so that the cases (two GPU counts, panels with
different series) need no multi-GPU run."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest

from harness.collect.gather import add_scaling
from harness.present.compare_plot import compare_scaling_figure
from harness.present.plot import STEP_PARTS, breakdown_figure, busbw_figure, latency_figure, scaling_figure

NODES = (1, 2, 4)


def training(scaling: str) -> pd.DataFrame:
    """A training summary: 1 and 2 GPUs per node on 1, 2, 4 nodes, per-GPU rate falling with
    the node count, more with 2 GPUs per node; step times spread +-10% / +-20%."""
    rows = []
    for g in (1, 2):
        for n in NODES:
            per_gpu = 100.0 * (0.9 ** math.log2(n)) * (0.8 if g == 2 else 1.0)
            step = 1000.0 / per_gpu
            rows.append(
                {
                    "job": f"n{n}-g{g}",
                    "workload": "synthetic",
                    "scaling": scaling,
                    "status": "COMPLETED",
                    "nodes": n,
                    "gpus_per_node": g,
                    "world_size": n * g,
                    "launcher": "torchrun",
                    "backend": "gloo",
                    "device": "cpu",
                    "nccl_config": "default",
                    "model": "resnet18",
                    "repeat": 1,
                    "images_per_s": per_gpu * n * g,
                    "images_per_s_per_gpu": per_gpu,
                    "step_time_ms": step,
                    "step_time_ms_p10": step * 0.9,
                    "step_time_ms_p90": step * 1.2,
                }
            )
    columns = {k: [r[k] for r in rows] for k in rows[0]}
    add_scaling(columns)
    return pd.DataFrame(columns)


def test_weak_scaling_has_both_efficiencies_nodes_on_x_and_one_grey_ideal():
    df = training("weak")
    fig, points = scaling_figure(df, "weak")
    by = {(r.metric, r.series, r.x): r.y for r in points.itertuples()}
    # against 1 GPU: the base is 1 GPU on 1 node (100 img/s per GPU); against 1 node: each series' own
    assert by[("efficiency", "synthetic, 2 GPUs/node", 1)] == pytest.approx(0.8)
    assert by[("efficiency_per_node", "synthetic, 2 GPUs/node", 1)] == pytest.approx(1.0)
    assert by[("efficiency_per_node", "synthetic, 2 GPUs/node", 4)] == pytest.approx(0.81)
    assert by[("efficiency_per_node", "synthetic, 1 GPU/node", 2)] == pytest.approx(0.9)
    # the band: per-GPU rate x the median step over the p90 and p10 steps
    assert by[("images_per_s_per_gpu_p10", "synthetic, 1 GPU/node", 1)] == pytest.approx(100 / 1.2)
    assert by[("images_per_s_per_gpu_p90", "synthetic, 1 GPU/node", 1)] == pytest.approx(100 / 0.9)
    # one ideal per-GPU line per workload, grey, at the workload's base
    levels = {round(y, 9) for (m, _, _), y in by.items() if m == "ideal_images_per_s_per_gpu"}
    assert levels == {100.0}
    two = pd.concat([df, df.assign(workload="real", images_per_s_per_gpu=df["images_per_s_per_gpu"] / 2)])
    two["series"] = None  # scaling_figure labels the series itself
    columns = {k: two[k].tolist() for k in two.columns if k not in ("speedup", "efficiency", "series")}
    add_scaling(columns)
    _, both = scaling_figure(pd.DataFrame(columns), "weak")
    ideal = both[both["metric"] == "ideal_images_per_s_per_gpu"]
    assert dict(zip(ideal["series"], ideal["y"].round(9))) == {"synthetic": 100.0, "real": 50.0}
    top = fig.axes[0]
    dashed = [line for line in top.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and dashed[0].get_color() == "0.4"
    assert set(points["x"]) == set(NODES)
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[-1].get_xticklabels()]  # the bottom row carries them
    assert labels == ["1\n(1, 2 GPUs)", "2\n(2, 4 GPUs)", "4\n(4, 8 GPUs)"]


def test_ideal_names_close_together_are_legible_and_inside_the_image():
    """Two workloads whose ideals differ by 2%: their names sit one above the other, neither over
    the other nor cut off by the panel (they once printed on one spot at the frame's edge)."""
    df = training("weak")
    two = pd.concat([df, df.assign(workload="real", images_per_s_per_gpu=df["images_per_s_per_gpu"] * 1.02)])
    columns = {k: two[k].tolist() for k in two.columns if k not in ("speedup", "efficiency")}
    add_scaling(columns)
    fig, _ = scaling_figure(pd.DataFrame(columns), "weak")
    assert legible_names(fig, "ideal: ") == ["ideal: real", "ideal: synthetic"]


def legible_names(fig, prefix: str) -> list[str]:
    """The names of the first panel's levels that start with `prefix`, once each is checked to
    be drawn over no other and inside the panel's frame."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    names = [t for t in ax.texts if t.get_text().startswith(prefix)]
    boxes = [t.get_window_extent(renderer) for t in names]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :]), boxes
    frame = ax.get_window_extent(renderer)
    assert all(frame.y0 <= b.y0 and b.y1 <= frame.y1 and frame.x0 <= b.x0 and b.x1 <= frame.x1 for b in boxes), (
        boxes,
        frame,
    )
    return sorted(t.get_text() for t in names)


def test_peak_names_near_and_far_are_legible_and_inside_the_panel():
    """The stated peaks of one node (NVLink, 150 GB/s) and of 2 and 4 nodes (the network, 25 and
    22 GB/s) over busbw near 1 GB/s: one name per peak, series of one peak share it, and no name
    prints over another or outside the panel (stacked by their order, the top one was cut off
    by the frame)."""
    two = collectives()
    summary = pd.concat([two, two[two["nodes"] == 2].assign(nodes=4, world_size=4)], ignore_index=True)
    peak = {1: 150.0, 2: 25.0, 4: 22.0}
    summary["busbw_peak_gbps"] = [peak[n] for n in summary["nodes"]]
    fig, points = busbw_figure(summary)
    assert legible_names(fig, "peak ") == ["peak 150", "peak 22", "peak 25"]
    peaks = points[points["metric"] == "busbw_peak_gbps"]
    assert sorted(zip(peaks["series"], peaks["y"])) == [
        ("1 node x 2 GPUs", 150.0),
        ("2 nodes x 1 GPU", 25.0),
        ("4 nodes x 1 GPU", 22.0),
    ]


def test_peaks_within_a_tenth_of_each_other_share_one_name():
    """An all-to-all's peak nears the network's rate as nodes are added (docs/concepts/expected.md):
    at 1 to 1,024 nodes, nine peaks, five of them within 6% of 50 GB/s. Those within a tenth of
    the lowest share one name, of their range, and the panel's range stays near its data (eleven
    names stacked once raised its top six decades); every series keeps its point."""
    two = collectives()
    rows = two[two["nodes"] == 2]
    peaks = {1: 450.0, 2: 93.75, 4: 64.58, 8: 56.25, 16: 52.92, 32: 51.41, 64: 50.69, 128: 50.34, 1024: 50.04}
    summary = pd.concat(
        [two[two["nodes"] == 1], *(rows.assign(nodes=n, world_size=n) for n in peaks if n > 1)], ignore_index=True
    )
    summary["busbw_peak_gbps"] = [peaks[n] for n in summary["nodes"]]
    fig, points = busbw_figure(summary)
    assert legible_names(fig, "peak ") == ["peak 450", "peak 50-52.9", "peak 56.25", "peak 64.58", "peak 93.75"]
    assert sorted(points[points["metric"] == "busbw_peak_gbps"]["y"]) == sorted(peaks.values())
    assert fig.axes[0].get_ylim()[1] < 10 * 450


def test_strong_scaling_ideals_keep_one_colour_each():
    """Each series' ideal speedup is world / base world at its own node counts: one line per
    series, in that series' colour over its whole length (an ideal shared on a world-size axis
    used to change colour where one series' points ended and another's began)."""
    fig, points = scaling_figure(training("strong"), "strong")
    ideal = points[points["metric"] == "ideal_speedup"]
    for g, series in ((1, "synthetic, 1 GPU/node"), (2, "synthetic, 2 GPUs/node")):
        got = ideal[ideal["series"] == series].sort_values("x")
        assert list(got["y"]) == pytest.approx([n * g / 1 for n in NODES])
    ax = fig.axes[0]
    solid = {
        tuple(line.get_xydata()[0]): line.get_color()
        for line in ax.get_lines()
        if line.get_linestyle() == "-" and len(line.get_xdata())
    }
    for line in (x for x in ax.get_lines() if x.get_linestyle() == "--" and len(x.get_xdata()) > 1):
        ys = list(line.get_ydata())
        g = 1 if ys == pytest.approx([1, 2, 4]) else 2
        assert ys == pytest.approx([n * g for n in NODES])
        # the same colour as the series' own line, which starts at (1 node, its speedup there)
        first = points[(points["metric"] == "speedup") & (points["x"] == 1)]
        speed = float(first[first["series"].str.contains(f"{g} GPU")]["y"].iloc[0])
        assert line.get_color() == solid[(1.0, speed)]


def collectives() -> pd.DataFrame:
    rows = []
    for n, g in ((1, 1), (1, 2), (2, 1)):
        for size in (2**16, 2**20):
            rows.append(
                {
                    "job": f"n{n}-g{g}",
                    "workload": "allreduce",
                    "status": "COMPLETED",
                    "collective": "all_reduce",
                    "nodes": n,
                    "gpus_per_node": g,
                    "world_size": n * g,
                    "launcher": "torchrun",
                    "nccl_config": "default",
                    "size_bytes": size,
                    "busbw_gbps": 0.0 if n * g == 1 else 1.0,
                    "time_us": 100.0,
                    "time_us_p10": 80.0,
                    "time_us_p90": 125.0,
                }
            )
    return pd.DataFrame(rows)


def test_busbw_leaves_out_one_rank_and_bands_from_the_times():
    fig, points = busbw_figure(collectives())
    assert set(points["series"]) == {"1 node x 2 GPUs", "2 nodes x 1 GPU"}
    by = {(r.metric, r.series, r.x): r.y for r in points.itertuples()}
    assert by[("busbw_gbps_p10", "2 nodes x 1 GPU", 2**20)] == pytest.approx(1.0 * 100 / 125)
    assert by[("busbw_gbps_p90", "2 nodes x 1 GPU", 2**20)] == pytest.approx(1.0 * 100 / 80)
    drawn = {round(float(y), 9) for line in fig.axes[0].get_lines() for y in line.get_ydata()}
    assert 0.0 not in drawn and 1.0 in drawn
    # log axes both ways: small messages are orders of magnitude below large ones, not a line at 0
    assert (fig.axes[0].get_xscale(), fig.axes[0].get_yscale()) == ("log", "log")
    assert y_labels(fig) == ["0.8", "0.9", "1"]


def y_labels(fig) -> list[str]:
    """The y tick labels a reader sees on the first panel: drawn, and inside its range. Each must
    read as a number: a log axis's own labels are mathtext, which the plots turn off (a label
    from a run directory is text), and they were drawn as `$\\mathdefault{10^{0}}$`."""
    fig.canvas.draw()
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    shown = [t.get_text() for t, v in zip(ax.get_yticklabels(), ax.get_yticks()) if low <= v <= high]
    assert len(shown) >= 2 and all(float(s.replace(",", "")) > 0 for s in shown), shown
    return shown


def test_the_latency_plot_draws_each_call_s_time_against_size_on_log_axes():
    summary = collectives()
    fig, points = latency_figure(summary)
    assert (fig.axes[0].get_xscale(), fig.axes[0].get_yscale()) == ("log", "log")
    assert "time per call" in fig.axes[0].get_ylabel()
    assert y_labels(fig) == ["80", "90", "100"]
    drawn = points[points["metric"] == "time_us"]
    rows = summary[(summary["nodes"] * summary["gpus_per_node"] > 1) & (summary["status"] == "COMPLETED")]
    assert sorted(zip(drawn["x"], drawn["y"])) == sorted(zip(rows["size_bytes"], rows["time_us"].astype(float)))
    lines = sorted((x, y) for line in fig.axes[0].get_lines() for x, y in zip(line.get_xdata(), line.get_ydata()))
    assert lines == sorted(zip(drawn["x"].astype(float), drawn["y"]))


def two_runs() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows of two sides: training with 1 and 2 GPUs per node, the all-reduce with 2 only, so
    the all-reduce panel has one series and the training panel two."""
    rows = []
    for n in NODES:
        for g in (1, 2):
            rows.append(
                {
                    "workload": "synthetic",
                    "scaling": "weak",
                    "collective": "",
                    "size_bytes": 0,
                    "nodes": n,
                    "gpus_per_node": g,
                    "launcher": "torchrun",
                    "nccl_config": "default",
                    "images_per_s_per_gpu": 100.0 / g + n,
                    "busbw_gbps": None,
                }
            )
        rows.append(
            {
                "workload": "allreduce",
                "scaling": "",
                "collective": "all_reduce",
                "size_bytes": 2**20,
                "nodes": n,
                "gpus_per_node": 2,
                "launcher": "torchrun",
                "nccl_config": "default",
                "images_per_s_per_gpu": None,
                "busbw_gbps": 1.0 + n,
            }
        )
    a = pd.DataFrame(rows)
    b = a.assign(images_per_s_per_gpu=a["images_per_s_per_gpu"] * 0.9, busbw_gbps=a["busbw_gbps"] * 0.8)
    return a, b


def test_compare_scaling_dashes_agree_with_the_legend_in_every_panel():
    a, b = two_runs()
    fig, points = compare_scaling_figure(a, b, ("A", "B"))
    legend = fig.axes[-1].get_legend()
    dashes = {t.get_text(): h._unscaled_dash_pattern for h, t in zip(legend.legend_handles, legend.get_texts())}
    where = {(round(float(r.x), 6), round(float(r.y), 6)): r.series.split(" · ", 1)[1] for r in points.itertuples()}
    checked = 0
    for ax in fig.axes:
        for line in ax.get_lines():
            xy = [(round(float(x), 6), round(float(y), 6)) for x, y in line.get_xydata()]
            if not xy or xy[0] not in where:
                continue
            series = where[xy[0]]
            assert line._unscaled_dash_pattern == dashes[series], (ax.get_title(), series)
            checked += 1
    assert checked == 3 * 2  # two series x two runs in the training panel, one x two in the other
    assert all(ax.get_xlabel() == "nodes (world size)" for ax in fig.axes)


def test_comparison_plots_draw_each_run_s_p10_p90_band_from_its_pooled_samples():
    """Side.spread takes the p10 and p90 of a key's pooled per-iteration times; the comparison
    plots turn them into a band of the rate, in the run's own colour."""
    import matplotlib.colors as mcolors
    import numpy as np

    from harness.analysis.sides import Side
    from harness.present.compare_plot import compare_busbw_figure

    rows = pd.DataFrame(
        {
            "workload": ["allreduce", "allreduce"],
            "scaling": ["", ""],
            "collective": ["all_reduce", "all_reduce"],
            "size_bytes": [2**20, 2**20],
            "nodes": [2, 4],
            "gpus_per_node": [1, 1],
            "launcher": ["torchrun", "torchrun"],
            "nccl_config": ["default", "default"],
            "busbw_gbps": [2.0, 1.0],
            "time_us": [100.0, 200.0],
            "images_per_s_per_gpu": [None, None],
        }
    )
    # iterations of the 2-node key pooled over its runs; none for the 4-node key
    times = np.array([[100.0, 80.0, 125.0, 90.0, 110.0], [np.nan] * 5])
    a = Side("A", "a", rows, {"time_us": (times, np.array([5, 0]))})
    spread = a.spread()
    assert spread.loc[0, "time_us_p10"] == pytest.approx(np.percentile([80, 90, 100, 110, 125], 10))
    assert spread.loc[0, "time_us_p90"] == pytest.approx(np.percentile([80, 90, 100, 110, 125], 90))
    assert np.isnan(spread.loc[1, "time_us_p10"]) and "time_us_p10" not in rows  # rows are left as they were
    slower = rows.assign(busbw_gbps=rows["busbw_gbps"] / 2, time_us=rows["time_us"] * 2)
    b = Side("B", "b", slower, {"time_us": (times * 2, np.array([5, 0]))})
    fig, points = compare_busbw_figure(a.spread(), b.spread(), ("A", "B"))
    band = points[points["metric"].str.endswith(("_p10", "_p90"))]
    assert set(band["panel"]) == {"2 nodes"}  # no samples, no band
    by = {(r.metric, r.series.split(" · ")[0]): r.y for r in band.itertuples()}
    p10, p90 = spread.loc[0, "time_us_p10"], spread.loc[0, "time_us_p90"]
    assert by[("busbw_gbps_p10", "A")] == pytest.approx(2.0 * 100 / p90)
    assert by[("busbw_gbps_p90", "A")] == pytest.approx(2.0 * 100 / p10)
    assert by[("busbw_gbps_p10", "B")] == pytest.approx(1.0 * 100 / p90)  # B: half the rate, twice the times
    ax = fig.axes[0]
    lines = {line.get_label(): line.get_color() for line in ax.get_lines()}
    line_colours = {mcolors.to_hex(c) for c in lines.values()}
    # one size per panel: each band is a bar at it, drawn, in its run's colour (a fill over one x
    # has no width: it stretched the y range and showed nothing)
    bars = [c for c in ax.collections if len(c.get_paths())]
    colours = [mcolors.to_hex(c.get_edgecolor()[0][:3]) for c in bars]
    assert len(bars) == 2 and set(colours) <= line_colours and colours[0] != colours[1]
    assert all(p.get_extents().height > 0 for c in bars for p in c.get_paths())
    low, high = ax.get_ylim()
    assert low <= by[("busbw_gbps_p10", "B")] and high >= by[("busbw_gbps_p90", "A")]


def test_the_step_breakdown_stacks_each_job_s_parts_in_the_bars_it_draws():
    """Each job's step (docs/concepts/breakdown.md): the four shares the summary holds, which add up to
    the step, stacked; a row not judged (noise) is not drawn. The 4-node, 2-GPU job: compute
    0.6, imbalance 0.05, data wait 0.15, exposed 0.2."""
    df = training("weak")
    df["compute_fraction"] = 0.6
    df["imbalance_fraction"] = 0.05
    df["step_data_wait_fraction"] = 0.15
    df["exposed_comm_fraction"] = 0.2
    df.loc[df["job"] == "n1-g1", "compute_fraction"] = None  # not judged: not drawn
    fig, points = breakdown_figure(df)
    by = {(r.metric, r.series): r.y for r in points.itertuples()}
    assert "n1-g1" not in set(points["series"])
    assert by[("compute_fraction", "n4-g2")] == 0.6
    assert by[("imbalance_fraction", "n4-g2")] == 0.05 and by[("exposed_comm_fraction", "n4-g2")] == 0.2
    assert by[("step_data_wait_fraction", "n4-g2")] == 0.15
    # the bars carry those heights, part by part, bottom to top, in order of nodes and GPUs
    (ax,) = fig.axes
    jobs = [t.get_text() for t in ax.get_xticklabels()]
    assert jobs == ["n1-g2", "n2-g1", "n2-g2", "n4-g1", "n4-g2"]
    bars = [patch for container in ax.containers for patch in container]
    assert len(bars) == len(STEP_PARTS) * len(jobs)
    for k, (part, _) in enumerate(STEP_PARTS):
        heights = [bars[k * len(jobs) + i].get_height() for i in range(len(jobs))]
        assert heights == pytest.approx([by[(part, j)] for j in jobs]), part
    # and nothing to draw without the breakdown
    assert breakdown_figure(df.assign(compute_fraction=None)) is None


def test_a_comparison_panel_is_no_narrower_than_its_legend():
    """Long settings-set names make a long legend beside the last panel: the figure makes room for
    it rather than squeeze the panel (it was once narrower than its legend)."""
    from harness.present.compare_plot import compare_busbw_figure

    rows = pd.DataFrame(
        {
            "workload": ["allreduce"] * 4,
            "scaling": [""] * 4,
            "collective": ["all_reduce"] * 4,
            "size_bytes": [2**20, 2**22, 2**20, 2**22],
            "nodes": [2, 2, 2, 2],
            "gpus_per_node": [8] * 4,
            "launcher": ["torchrun"] * 4,
            "nccl_config": ["infiniband_with_gpudirect_rdma"] * 2 + ["tcp_sockets_over_the_frontend"] * 2,
            "busbw_gbps": [10.0, 20.0, 1.0, 2.0],
            "time_us": [100.0, 200.0, 1000.0, 2000.0],
        }
    )
    fig, _ = compare_busbw_figure(
        rows, rows.assign(busbw_gbps=rows["busbw_gbps"] * 0.9), ("nightly-20261124", "nightly-20261125")
    )
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[-1]
    legend = ax.get_legend().get_window_extent(renderer)
    assert ax.get_window_extent(renderer).width >= legend.width, (ax.get_window_extent(renderer), legend)
    # busbw from 0.9 to 20 GB/s: two decades, labelled in 1-2-5 steps
    assert y_labels(fig) == ["1", "2", "5", "10", "20"]


def _title_clear_of_panels(fig) -> None:
    """The figure's title lies above every drawn panel's top edge, titles included."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    title = fig.get_suptitle() and fig._suptitle.get_window_extent(renderer)
    assert title is not None and fig.get_suptitle()
    for ax in fig.axes:
        if ax.get_visible():
            assert ax.get_tightbbox(renderer).y1 <= title.y0 + 0.5, (ax.get_title(), ax.get_tightbbox(renderer), title)


def test_six_collectives_of_one_configuration_are_a_grid_under_a_clear_title():
    """One configuration's six collectives once made one column 2,718 px tall, its first panel
    under the title: now rows of three, 8.4 inches in all, the title above them."""
    names = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "sendrecv"]
    summary = pd.concat([collectives().assign(collective=c) for c in names], ignore_index=True)
    for make in (busbw_figure, latency_figure):
        fig, _ = make(summary)
        shown = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
        assert len(shown) == 6 and fig.get_size_inches()[1] == pytest.approx(2 * 4.2)
        rows = {round(ax.get_position().y0, 3) for ax in shown}
        assert len(rows) == 2  # two rows of three
        _title_clear_of_panels(fig)
    fig, _ = scaling_figure(training("weak"), "weak")
    _title_clear_of_panels(fig)
    fig, _ = breakdown_figure(
        training("weak").assign(
            compute_fraction=0.6, imbalance_fraction=0.1, step_data_wait_fraction=0.1, exposed_comm_fraction=0.2
        )
    )
    _title_clear_of_panels(fig)


def test_heatmap_figures_are_black_on_light_cells_and_white_on_dark_ones():
    """Grey on viridis read poorly on both ends: each figure's ink now contrasts with its cell."""
    from harness.nodes.verdict import judge
    from harness.present.plot import heatmap_figure

    names = [f"bnode{i}" for i in range(1, 5)]
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    figures = {"p2p_gbps": {p: (0.1 if "bnode1" in p else 1.0) for p in pairs}}
    fig, _ = heatmap_figure(judge(names, {}, figures, 0.1, {}))
    inks = {t.get_text(): t.get_color() for t in fig.axes[0].texts}
    assert inks == {"0.1": "white", "1": "black"}  # viridis' dark purple low, its yellow high


def test_history_labels_stand_upright_and_leave_the_panel_its_height():
    """The history's rotated timestamps took half its figure (the timeline's percentages from 0:
    tests/modules/harness/evidence/test_telemetry.py)."""
    from harness.present.compare_plot import history_made

    runs = 30
    points = pd.DataFrame(
        {
            "id": list(range(1, runs + 1)),
            "label": [None] * runs,
            "created": [f"2026-11-{1 + i % 28:02d}T03:00:00" for i in range(runs)],
            "series": ["all_reduce 2x1"] * runs,
            "metric": ["busbw_gbps"] * runs,
            "value": [0.5 + 0.01 * i for i in range(runs)],
        }
    )
    fig, _ = history_made(points, "lab")
    fig.canvas.draw()
    (ax,) = fig.axes
    shown = [t for t in ax.get_xticklabels() if t.get_text()]
    assert shown and all(t.get_rotation() == 0 for t in shown)
    assert shown[0].get_text() == "2026-11-01\n03:00 #1"
    renderer = fig.canvas.get_renderer()
    widths = [t.get_window_extent(renderer) for t in shown]
    assert all(a.x1 < b.x0 for a, b in itertools.pairwise(widths))  # none over its neighbour
    # the labels take a sliver of the figure's height: rotated, they took a quarter and more
    tallest = max(w.height for w in widths)
    assert tallest < 0.1 * fig.get_figheight() * fig.dpi, (tallest, fig.get_figheight() * fig.dpi)


@pytest.mark.parametrize("nodes", [3, 12])
def test_a_timeline_of_many_nodes_draws_their_median_and_range(tmp_path, nodes):
    """This machine's own sampler, its file copied as each node's: up to TIMELINE_LINES a panel
    draws a line a node, named; past them the median of all and their range, whatever the count,
    while the CSV keeps every node's points."""
    import json
    import signal
    import socket
    import subprocess
    import sys
    import time

    from harness.evidence import telemetry
    from harness.present.plot import TIMELINE_LINES, timeline_figure

    folder = tmp_path / "jobs" / "j" / "telemetry"
    sample = [sys.executable, "-m", "harness.telemetry", "sample", str(folder), "--interval-s", "0.2"]
    sampler = subprocess.Popen(sample)
    path = telemetry.host_file(folder, socket.gethostname())
    assert telemetry.wait_for_first_sample(path)
    time.sleep(1.5)
    sampler.send_signal(signal.SIGTERM)
    assert sampler.wait(timeout=20) == 0
    lines = path.read_text().splitlines()
    host = json.loads(lines[0])["host"]
    path.unlink()
    for i in range(nodes):
        (folder / f"n{i:02d}.samples.jsonl").write_text("\n".join(lines).replace(f'"{host}"', f'"n{i:02d}"') + "\n")
    tele = telemetry.read(tmp_path / "jobs" / "j")
    assert tele is not None and len(tele.hosts) == nodes
    made = timeline_figure("j", tele)
    assert made is not None
    fig, points = made
    cpu = next(ax for ax in fig.axes if ax.get_ylabel() == "CPU busy %")
    assert points[points["metric"] == "CPU busy %"]["series"].nunique() == nodes
    drawn = [line for line in cpu.get_lines() if len(line.get_xdata()) > 1]  # not the legend's keys
    if nodes <= TIMELINE_LINES:
        assert len(drawn) == nodes
    else:
        assert len(drawn) == 1 and len(cpu.collections) == 1
        assert [t.get_text() for t in cpu.get_legend().get_texts()] == [f"all {nodes}", f"median of {nodes}"]
