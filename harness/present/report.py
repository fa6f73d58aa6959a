"""`bench report`: one self-contained HTML file per run. Plots are embedded as data: URIs and
the styles inline, so the file opens offline, from a mail attachment or a CI artifact."""

from __future__ import annotations

import base64
import functools
import html
import math
import re
import secrets
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD
from benchmarks.results import open_regular
from harness import executors
from harness.analysis.compare import SAME, Comparison
from harness.analysis.sides import METRICS, Side, records
from harness.collect.summary import read_summary
from harness.evidence import stragglers, telemetry
from harness.present import compare_plot, figure, plot, prediction
from harness.present.tables import (
    BREAKDOWN_COLUMNS,
    BREAKDOWN_HEAD,
    MISMATCH_HEADING,
    TRAINING_COLUMNS,
    TRAINING_HEAD,
    TRANSFORMER_COLUMNS,
    TRANSFORMER_HEAD,
    breakdown_rows,
    collective_table,
    fmt_ratio,
    fmt_value,
    headline,
    intervals,
    numeric,
    only_in_b,
    training_rows,
    transformer_rows,
    transport_mismatches,
    warnings,
)
from harness.run.rundir import COMPLETED, RunDir

if TYPE_CHECKING:
    import pandas as pd

    from harness.analysis.pooled import Borrowed

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.slower td, tr.failed td { background: #fde2e1; } tr.faster td { background: #e3f6e3; }
tr.cannot-judge td { background: #fff4d6; }
.warn { background: #fff4d6; border-left: 4px solid #e0a800; padding: 0.5em 1em; }
img { max-width: 100%; display: block; margin: 0.5em 0 1.5em; }
pre { background: #f5f5f5; padding: 0.5em; overflow-x: auto; }
"""


def _e(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return html.escape(str(v))


def _table(
    head: list[str], rows: list[list[Any]], numeric: Collection[int] = frozenset(), classes: list[str] | None = None
) -> str:
    """An HTML table; a key-value table's head of empty names draws no header row."""
    out = ["<table>" + ("<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>" if any(head) else "")]
    for i, row in enumerate(rows):
        cls = f' class="{classes[i]}"' if classes and classes[i] else ""
        out.append(
            f"<tr{cls}>"
            + "".join(f"<td{' class=n' if j in numeric else ''}>{_e(v)}</td>" for j, v in enumerate(row))
            + "</tr>"
        )
    return "\n".join(out) + "</table>"


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


class _Figures:
    """The report's figures, each section's put in its place at the end: drawn all at once, so
    that figure.drawn deals every one of them round the cores (a section's few figures drawn
    alone left a core idle). A place is a comment holding this report's own random token, which
    no text taken from a run directory can hold."""

    def __init__(self) -> None:
        self.makers: list[tuple[str, plot.Maker]] = []
        self.token = secrets.token_hex(16)

    def place(self, makers: list[tuple[str, plot.Maker]]) -> str:
        start = len(self.makers)
        self.makers += makers
        return f"<!--figures {self.token} {start} {len(self.makers)}-->"

    def fill(self, text: str) -> str:
        drawn = figure.drawn_at(self.makers)

        def images(m: re.Match[str]) -> str:
            shown = (drawn[i] for i in range(int(m[1]), int(m[2])) if i in drawn)
            return "\n".join(_img(png, alt) for alt, png, _points in shown)

        return re.sub(f"<!--figures {self.token} (\\d+) (\\d+)-->", images, text)


def run_section(run: RunDir, side: Side, figures: _Figures) -> str:
    summary = read_summary(run)
    plan = run.read_plan()
    jobs = run.jobs()
    table = run.read_table(jobs)
    env = side.environment
    mismatched = transport_mismatches(summary)
    parts = (
        [
            f'<div class="warn"><b>{_e(MISMATCH_HEADING)}:</b><ul>'
            + "".join(f"<li>{_e(line)}</li>" for line in mismatched)
            + "</ul></div>"
        ]
        if mismatched
        else []
    )
    parts += [
        "<h2>Environment</h2>",
        _table(["", ""], [[k, ", ".join(v) if isinstance(v, list) else v] for k, v in env.items()]),
        "<h2>Jobs</h2>",
        _table(
            ["job", "state", "exit", "elapsed s", "nodes", "node list", "reason"],
            [
                [r.name, r.state, r.exit_code, fmt_value(r.elapsed_s, ".1f"), r.nodes, r.node_list, r.reason]
                for r in table.values()
            ],
            numeric={2, 3, 4},
            classes=["" if r.state == COMPLETED else "slower" for r in table.values()],
        ),
    ]
    parts.append("<h2>Stragglers</h2>")
    if side.stragglers:
        parts.append("<ul>" + "".join(f"<li>{_e(s.line())}</li>" for s in side.stragglers) + "</ul>")
    else:
        judged = sorted(
            set(
                summary.loc[
                    (summary["status"] == COMPLETED)
                    & (summary["workload"] == COLLECTIVE_WORKLOAD)
                    & (summary["nodes"] >= stragglers.MIN_NODES),
                    "job",
                ]
            )
        )
        if judged:
            parts.append(f"<p>None in {len(judged)} job(s) judged: no node was {_e(stragglers.RULE)}.</p>")
        else:  # "none" would claim a check that never ran
            parts.append(
                f"<p>Not judged: no all-reduce job of {stragglers.MIN_NODES} or more nodes completed, and it "
                f"takes {stragglers.MIN_NODES} nodes to tell which end of a slow pair is slow.</p>"
            )
    ok = summary[summary["status"] == COMPLETED]
    train = ok[ok["workload"] != COLLECTIVE_WORKLOAD].sort_values(
        ["workload", "scaling", "launcher", "nccl_config", "world_size"]
    )
    parts.append("<h2>Scaling</h2>")
    parts.append(figures.place(plot.run_plots(summary, plot.SCALING, titled=True)))
    if rows := training_rows(train):
        parts.append(_table(TRAINING_HEAD, rows, numeric=numeric(TRAINING_COLUMNS)))
    if rows := transformer_rows(train):
        parts.append("<h3>Transformer</h3>")
        parts.append(_table(TRANSFORMER_HEAD, rows, numeric=numeric(TRANSFORMER_COLUMNS)))
    where = breakdown_rows(train)
    if where:
        parts.append("<h2>Where the step went</h2>")
        parts.append(
            "<p>Each training step as the median rank's compute, the slowest rank's lead over it"
            " (imbalance), the wait for data and the communication that computation did not hide,"
            " from steps run with gradient synchronisation skipped (docs/concepts/breakdown.md says what"
            " that assumes).</p>"
        )
        parts.append(figures.place(plot.run_plots(summary, plot.BREAKDOWN, titled=True)))
        parts.append(_table(BREAKDOWN_HEAD, where, numeric=numeric(BREAKDOWN_COLUMNS)))
    coll = ok[ok["workload"] == COLLECTIVE_WORKLOAD]
    parts.append("<h2>Collectives</h2>")
    parts.append(figures.place(plot.run_plots(summary, plot.COLLECTIVES, titled=True)))
    if len(coll):
        coll = coll.sort_values(["job", "collective", "group", "size_bytes"])
        bucket = bucket_bytes(plan)
        few = compact(coll, bucket)
        columns, rows = collective_table(few)
        parts.append(
            f"<p>Per job, the largest message and the one nearest DDP's gradient bucket "
            f"({bucket / 2**20:g} MiB); every size is in the table below and in summary.csv.</p>"
        )
        parts.append(_table(columns, rows, numeric=set(range(2, len(columns)))))
        columns, rows = collective_table(coll)
        parts.append(f"<details><summary>Every message size ({len(coll)} rows)</summary>")
        parts.append(_table(columns, rows, numeric=set(range(2, len(columns)))))
        parts.append("</details>")
    parts += predicted(run, summary, figures)
    parts += timelines(run, [j.name for j in jobs], summary, figures)
    sweep = plan.get("sweep") or {}
    head = [
        f"<p>Run <code>{_e(run.path)}</code>: sweep <b>{_e(sweep.get('name'))}</b> "
        f"({_e(sweep.get('description'))}), executor {_e(plan.get('executor'))}, "
        f"cluster {_e(cluster_name(plan))}, planned {_e(plan.get('created'))}, {len(jobs)} jobs.</p>",
        "<details><summary>The sweep's parameters, as run</summary>",
        f"<pre>{_e(_yaml(sweep))}</pre></details>",
    ]
    if plan.get("cluster"):
        head += [
            "<details><summary>The cluster profile</summary>",
            f"<pre>{_e(_yaml(plan['cluster']))}</pre></details>",
        ]
    return "\n".join(head) + "\n".join(parts)


def _yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)


def cluster_name(plan: dict[str, Any]) -> str:
    """The cluster a run ran on: its profile's name, or the local machine."""
    if executors.runs_here(plan.get("executor")):
        return "this machine (local executor)"
    return str((plan.get("cluster") or {}).get("name") or "no profile")


# DDP's default gradient bucket, torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25): the
# message size its all-reduces run at in training, when the sweep's training sets none.
DDP_BUCKET_MB = 25


def bucket_bytes(plan: dict[str, Any]) -> int:
    """The DDP bucket of the run's training workloads (bucket_cap_mb), else DDP's default."""
    workloads = (plan.get("sweep") or {}).get("workloads") or {}
    caps = [
        w["bucket_cap_mb"]
        for w in workloads.values()
        if isinstance(w, dict) and isinstance(w.get("bucket_cap_mb"), (int, float)) and 0 < w["bucket_cap_mb"] < 2**20
    ]  # plan.json is untrusted: a cap that is no size in MB is DDP's default
    return int((caps[0] if caps else DDP_BUCKET_MB) * 2**20)


def compact(coll: pd.DataFrame, bucket: int) -> pd.DataFrame:
    """Of each job's collective rows, those at its largest size and at the size nearest `bucket`
    (by ratio, as sizes grow by a factor)."""
    keep = []
    for _, rows in coll.groupby(["job", "collective", "group"], sort=False):
        sizes = rows["size_bytes"].astype(float)
        sizes = sizes[sizes > 0]  # no size is 0 or less; a damaged one is not drawn on a log scale
        if sizes.empty:
            continue
        nearest = (sizes.map(math.log) - math.log(bucket)).abs().idxmin()
        keep += [nearest, sizes.idxmax()]
    return coll.loc[sorted(set(keep), key=list(coll.index).index)]


def predicted(run: RunDir, summary: pd.DataFrame, figures: _Figures) -> list[str]:
    """The section of `bench predict` (docs/concepts/predict.md) once it has been run: at the
    node counts the run's predict.json asked for, its figure and its table in words, from the
    summary again, with the points it borrowed from the history; before it, how to have one."""
    from harness.analysis import predict

    stated = asked_nodes(run)
    if stated is None:
        return [
            "<h2>Predicted scale</h2>",
            f"<p>Not predicted: <code>bench predict {_e(run.path)} --nodes 16,32,64</code> predicts node counts "
            "not measured, with intervals and their validation, and adds them here (docs/concepts/predict.md).</p>",
        ]
    asked, borrowed = stated
    rows = borrowed.rows if borrowed else None
    result = predict.predictions(summary, asked, curve=True, borrowed=rows)
    if borrowed is not None:
        result["history"] = borrowed.stated
    summary = predict.pooled(summary, rows)  # the points borrowed drawn too
    if not any(row["predictions"] for row in (*result["collectives"], *result["training"])):
        return [
            "<h2>Predicted scale</h2>",
            "<p>Nothing could be predicted: a fit takes two node counts of two nodes or more "
            "(docs/concepts/predict.md).</p>",
        ]
    maker = functools.partial(prediction.prediction_figure, summary, result["curve"], result["nodes"], brief=True)
    return [
        "<h2>Predicted scale</h2>",
        "<p>From the node counts measured to others, each with its 95% prediction interval and the "
        "error the same method made on the largest count measured (docs/concepts/predict.md; "
        "<code>bench predict</code> writes every figure to predict.json).</p>",
        figures.place([("predicted scale", maker)]),
        f"<pre>{_e(chr(10).join(prediction.describe(result)))}</pre>",
    ]


def asked_nodes(run: RunDir) -> tuple[list[int], Borrowed | None] | None:
    """The node counts the run's predict.json asked for, and the points it borrowed from the
    history (analysis/pooled.py) or None, when it holds a valid list of each."""
    import json

    from harness.analysis import pooled
    from harness.errors import UsageError

    path = run.path / "predict.json"
    try:
        with open_regular(path) as f:
            data = json.loads(f.read(1 << 24))
        nodes, borrowed = data.get("nodes"), pooled.read(data, str(path))
    except (OSError, ValueError, AttributeError, UsageError):
        return None
    valid = isinstance(nodes, list) and 0 < len(nodes) <= 64
    if not valid or not all(type(n) is int and 1 <= n <= 100_000 for n in nodes):
        return None
    return sorted(set(nodes)), borrowed


def timelines(run: RunDir, jobs: list[str], summary: pd.DataFrame, figures: _Figures) -> list[str]:
    """Each job's timeline (docs/concepts/telemetry.md), folded: NIC, CPU and GPU against its workloads,
    what the all-reduce's NIC cross-check found, and each workload's hardware faults."""
    found = {name: tele for name in jobs if (tele := telemetry.read(run.job_dir(name))) is not None}
    if not found:
        return []
    checked = summary[summary["nic_check"].notna()].drop_duplicates("job")
    checks = dict(zip(checked["job"], checked["nic_check"], strict=True))
    faulted = summary[summary["hardware_faults"].notna()].drop_duplicates(["job", "workload", "scaling"])
    faults: dict[str, list[str]] = {}
    for r in faulted.itertuples():
        what = f"{r.workload} {r.scaling if isinstance(r.scaling, str) else ''}".strip()
        faults.setdefault(str(r.job), []).append(f"{what}: {r.hardware_faults}")
    out = [
        "<h2>Timelines</h2>",
        "<p>What each node did while the job ran, sampled by bench (docs/concepts/telemetry.md).</p>",
    ]
    for name, tele in found.items():
        overhead = [h.overhead for h in tele.hosts.values() if h.overhead is not None]
        note = f"{len(tele.hosts)} node(s)" + (
            f", sampler {100 * max(overhead):.2f}% of one core at most" if overhead else ""
        )
        out.append(f"<details><summary>{_e(name)}: {_e(note)}</summary>")
        if checks.get(name):
            out.append(f"<p>NIC cross-check of the all-reduce: {_e(checks[name])}</p>")
        if faults.get(name):  # docs/concepts/faults.md
            items = "".join(f"<li>{_e(x)}</li>" for x in faults[name])
            out.append(f"<p>Hardware faults while it ran:</p><ul>{items}</ul>")
        out.append(figures.place([(f"timeline of {name}", functools.partial(plot.timeline_figure, name, tele))]))
        out.append("</details>")
    return out


def compare_section(cmp: Comparison, figures: _Figures) -> str:
    t = cmp.table
    what = (
        f"{_e(cmp.across[0])} {_e(cmp.across[2])} against {_e(cmp.across[1])}"
        if cmp.across
        else f"{_e(cmp.b.label)} against {_e(cmp.a.label)}"
    )
    parts = [
        f"<h2>Comparison: {what}</h2>",
        f"<p>Threshold {cmp.threshold:.1%}; {_e(cmp.method)}. {_e(headline(cmp))}.</p>",
    ]
    for heading, lines in warnings(cmp):
        parts.append(
            f'<div class="warn"><b>{_e(heading)}:</b><ul>' + "".join(f"<li>{_e(d)}</li>" for d in lines) + "</ul></div>"
        )
    for side in [cmp.a] if cmp.a.source == cmp.b.source else [cmp.a, cmp.b]:
        for s in side.stragglers:
            parts.append(f'<p class="warn">{_e(side.label)}: {_e(s.line())}</p>')
    shown = t[t["verdict"] != SAME]
    if len(shown):
        parts.append(
            _table(
                ["verdict", "metric", "key", "A", "B", "B/A", "interval", "p", "note"],
                [
                    [
                        r["verdict"],
                        METRICS[r["metric"]].label,
                        r["key"],
                        fmt_value(r["a"]),
                        fmt_value(r["b"]),
                        fmt_ratio(r["ratio"]),
                        interval,
                        fmt_value(r["p_value"]),
                        r["note"] or "",
                    ]
                    for r, interval in zip(records(shown), intervals(shown))
                ],
                numeric={3, 4, 5, 7},
                classes=[v.replace(" ", "-") for v in shown["verdict"]],
            )
        )
    parts.append(f"<p>{int((t['verdict'] == SAME).sum())} (metric, key) pairs show no significant change.</p>")
    listed, more = only_in_b(cmp)
    if listed:
        parts.append(
            f"<p>Only completed in {_e(cmp.b.label)} ({len(cmp.new_in_b)}):</p><ul>"
            + "".join(f"<li>{_e(line)}</li>" for line in listed)
            + (f"<li>... and {more} more</li>" if more else "")
            + "</ul>"
        )
    labels = (cmp.a.label, cmp.b.label)
    parts.append(
        figures.place(
            [
                (
                    "busbw of both runs",
                    lambda: compare_plot.compare_busbw_figure(cmp.a.spread(), cmp.b.spread(), labels),
                ),
                (
                    "scaling of both runs",
                    lambda: compare_plot.compare_scaling_figure(cmp.a.spread(), cmp.b.spread(), labels),
                ),
            ]
        )
    )
    return "\n".join(parts)


def render(run: RunDir, side: Side, cmp: Comparison | None) -> str:
    figures = _Figures()
    body = figures.fill(run_section(run, side, figures) + (compare_section(cmp, figures) if cmp is not None else ""))
    title = report_title(run.read_plan())
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{_e(title)}</h1>\n{body}\n</body></html>\n"
    )


def report_title(plan: dict[str, Any]) -> str:
    """`bench report: <sweep> on <cluster>, <date>`: what a reader needs before anything else."""
    created = str(plan.get("created") or "")[:10] or "undated"
    return f"bench report: {(plan.get('sweep') or {}).get('name', '?')} on {cluster_name(plan)}, {created}"


DEFAULT_NAME = "report.html"  # in the run directory, when --out is not given
