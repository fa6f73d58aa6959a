"""Tables as text: the comparison, run and plan tables that the terminal, markdown and CSV
outputs, the HTML report and the regress files all share. Rows come from analysis; this module
only turns them into cells and lines.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD, UNITS
from benchmarks.common import format_size
from harness.analysis.compare import (
    BY_RUNS,
    FAILED,
    FASTER,
    HELD,
    ONLY_A,
    REFERENCE,
    SAME,
    SLOWER,
    UNJUDGED,
    VERDICTS,
    WORST_FIRST,
    Comparison,
)
from harness.analysis.gating import catch_texts
from harness.analysis.sides import METRICS, Side, measured, records
from harness.errors import one_line, shown
from harness.evidence.transport import TRANSPORT_MISMATCH
from harness.run.rundir import COMPLETED, PENDING, RUNNING, JobRecord, RunDir

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd
    from rich.console import Console

    from harness.run.plan import Job

# How many keys "only completed in one run" lists name before "...": the terminal, markdown and
# HTML outputs all cut the list here, and say how many more there are.
LISTED = 20


def fmt_value(v: Any, spec: str = ".4g") -> str:
    """A number for a table: `spec` formatted, '-' where missing."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def intervals(t: pd.DataFrame) -> list[str]:
    """The interval each row was judged by: the band of A's runs, or the 95% CI of the samples;
    '-' for a failed key or a CI with an end missing. Column by column, not a dict per row."""
    out = []
    for verdict, test, band_low, band_high, lo, hi in zip(
        _objects(t, "verdict"), _objects(t, "test"), _floats(t, "band_low"), _floats(t, "band_high"),
        _floats(t, "ci_low"), _floats(t, "ci_high"),
    ):  # fmt: skip
        if verdict in (FAILED, ONLY_A):
            out.append("-")
        elif test in (BY_RUNS, REFERENCE):
            out.append(f"band [{band_low:.3f}, {band_high:.3f}]")
        elif lo != lo or hi != hi:  # NaN: an end missing
            out.append("-")
        else:
            out.append(f"[{lo:.3f}, {hi:.3f}]")
    return out


def _floats(t: pd.DataFrame, name: str) -> list[float]:
    """A column as floats, NaN where missing or where the table has no such column."""
    import numpy as np

    return t[name].to_numpy(dtype=float, na_value=np.nan).tolist() if name in t else [math.nan] * len(t)


def _objects(t: pd.DataFrame, name: str) -> list[Any]:
    """A column as Python objects, None where missing or where the table has no such column."""
    # pandas takes None as na_value; pandas-stubs leaves it out of the annotation
    return t[name].to_numpy(dtype=object, na_value=None).tolist() if name in t else [None] * len(t)  # type: ignore[call-overload]


def fmt_ratio(v: Any) -> str:
    return fmt_value(v, ".3f")


def headline(cmp: Comparison) -> str:
    """'1 failed, 2 slower, 0 cannot judge, 0 faster, 11 no significant change, of 14 compared'."""
    c = cmp.counts()
    said = [k for k in VERDICTS if c[k] or k != ONLY_A]  # "only in A" where there is such a key
    return ", ".join(f"{c[k]} {k}" for k in said) + f", of {len(cmp.table)} compared"


MISMATCH_HEADING = "Transport mismatch: a settings set did not run over what it expects (docs/concepts/transport.md)"


def transport_mismatches(frame: pd.DataFrame) -> list[str]:
    """One line per job whose transport facts contradict what its settings set expects."""
    hit = frame[(frame["status"] == TRANSPORT_MISMATCH).to_numpy(dtype=bool)]
    return list(dict.fromkeys(f"{job}: {reason}" for job, reason in zip(hit["job"], hit["reason"])))


def run_mismatches(cmp: Comparison) -> list[str]:
    """The transport mismatches of B, the run `bench regress` judges."""
    return [] if cmp.b.others is None else transport_mismatches(cmp.b.others)


def warnings(cmp: Comparison) -> list[tuple[str, list[str]]]:
    """(heading, lines) of everything a reader must see before the table, the transport
    mismatches of either side first."""
    out = []
    listed: set[str] = set()
    for side in (cmp.a, cmp.b):  # both, even of one run: --across splits its rows between them
        lines = [x for x in transport_mismatches(side.others) if x not in listed] if side.others is not None else []
        listed.update(lines)
        if lines:
            out.append((f"{MISMATCH_HEADING}, in {side.label}", lines))
    if cmp.mismatches:
        out.append(
            (
                "Compared despite differing parameters (--allow-mismatch)"
                if cmp.allow_mismatch
                else "Not compared: the workload parameters differ",
                cmp.mismatches,
            )
        )
    if cmp.env_diffs:
        out.append(("The environments differ", cmp.env_diffs))
    if cmp.run_noise:
        out.append(("Not judged: the run is noisier than its history (docs/concepts/noise.md)", [cmp.run_noise]))
    return out


def markdown(cmp: Comparison, title: str, include_same: bool = False) -> str:
    """The comparison as markdown: header, warnings, stragglers, then failed keys, regressions,
    keys that cannot be judged, improvements and the count of unchanged keys (all keys when
    include_same)."""
    t = cmp.table
    lines = [
        f"# {title}",
        "",
        f"- A: `{cmp.a.label}` ({cmp.a.source})",
        f"- B: `{cmp.b.label}` ({cmp.b.source})",
        f"- threshold: {cmp.threshold:.1%}; statistics: {cmp.method}",
        f"- {headline(cmp)} (metric, key) pairs",
    ]
    if cmp.must_catch is not None:
        lines.append(
            f"- must catch: {cmp.must_catch:.0%}: a key whose noise hides a fall that large cannot be judged; "
            f"each key's catches column is the smallest fall its verdict would have flagged (docs/concepts/noise.md)"
        )
    if cmp.gate_min_size is not None:
        lines.append(
            f"- gating: every key but the collectives' below {format_size(cmp.gate_min_size)}, which are watched "
            f"(listed, but only a failed job of them sets the exit status)"
        )
    lines.append("")
    for heading, items in warnings(cmp):
        lines += [f"## Warning: {heading}", ""] + [f"- {d}" for d in items] + [""]
    named = [(side, s) for side in _distinct_sides(cmp) for s in side.stragglers]
    if named:
        lines += ["## Stragglers", ""] + [f"- {side.label}: {s.line()}" for side, s in named] + [""]
    for verdict in WORST_FIRST:
        shown_as, sub = PRESENTED[verdict], t[t["verdict"] == verdict]
        if shown_as.heading is None or not (len(sub) or shown_as.always):
            continue
        lines += [f"## {shown_as.heading}: {len(sub)}", ""]
        if len(sub):
            lines += _md_table(sub) + [""]
    same = t[t["verdict"] == SAME]
    held = same[same["note"].fillna("").str.contains(HELD, regex=False)]
    if len(held):  # listed: the changes a gate's first nights do not count, and how near they came
        lines += [f"## Held by the provisional margin: {len(held)}", ""] + _md_table(held) + [""]
    lines += [f"## No significant change: {len(same)}", ""]
    if include_same and len(same):
        lines += _md_table(same) + [""]
    listed, more = only_in_b(cmp)
    if listed:
        lines += [f"## Only completed in {cmp.b.label}: {len(cmp.new_in_b)}", ""]
        lines += [f"- {item}" for item in listed] + ([f"- ... and {more} more"] if more else []) + [""]
    return "\n".join(lines)


def only_in_b(cmp: Comparison) -> tuple[list[str], int]:
    """The keys completed only in B, the first LISTED of them grouped by their state in A
    ('absent in A: key; key'), and how many more there are."""
    only = cmp.new_in_b
    groups: dict[str, list[str]] = {}
    for r in records(only.head(LISTED)):
        groups.setdefault(r["status"], []).append(r["key"])
    listed = [f"{status} in {cmp.a.label}: {'; '.join(keys)}" for status, keys in groups.items()]
    return listed, max(0, len(only) - LISTED)


def _distinct_sides(cmp: Comparison) -> list[Side]:
    return [cmp.a] if cmp.a.source == cmp.b.source else [cmp.a, cmp.b]


def _md_table(t: pd.DataFrame) -> list[str]:
    out = [
        "| metric | key | A | B | B/A | interval | p | runs A | catches | verdict | note |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---|---|",
    ]

    # column by column: a dict per row of all the table's columns costs most of the table
    def numbers(name: str, spec: str = ".4g") -> list[str]:  # fmt_value over a float column
        return ["-" if v != v else format(v, spec) for v in _floats(t, name)]

    notes = [(n or "").replace("|", "\\|").replace("\n", " ") for n in _objects(t, "note")]
    runs = [fmt_value(v, "d") for v in _objects(t, "runs_a")]
    for metric, key, a, b, ratio, interval, p, n, catch, verdict, note in zip(
        _objects(t, "metric"), _objects(t, "key"), numbers("a"), numbers("b"), numbers("ratio", ".3f"), intervals(t),
        numbers("p_value"), runs, catch_texts(_floats(t, "catches")), _objects(t, "verdict"), notes,
    ):  # fmt: skip
        out.append(
            f"| {metric} | {key} | {a} | {b} | {ratio} | {interval} | {p} | {n} | {catch} | {verdict} | {note} |"
        )
    return out


def table_csv(table: pd.DataFrame) -> bytes:
    """The comparison table as CSV, with Arrow's C++ writer (pandas' is 10x slower)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    buf = io.BytesIO()
    pacsv.write_csv(pa.Table.from_pandas(table, preserve_index=False), buf)
    return buf.getvalue()


COLLECTIVE_HEAD = ["job", "collective", "size", "time us", "algbw GB/s", "busbw GB/s", "#wrong"]
PEAK_HEAD = "% of peak"  # where the cluster profile states its link speeds (docs/concepts/expected.md)
# The summary's transport columns the collective tables show, and their heads (docs/concepts/transport.md)
TRANSPORT_HEAD = {"net": "net", "net_devices": "net devices", "gdr": "GDR"}


@dataclass(frozen=True)
class Presented:
    """How a verdict is shown: the heading of its section in the markdown report (None: it has
    none; `always`: the section is there when empty too), its colour in the terminal, and what
    a JUnit test case of it is (element and type; None: passed). Each verdict of
    analysis/compare.py has one (tests/modules/harness/analysis/test_compare.py)."""

    heading: str | None
    colour: str | None = None
    junit: tuple[str, str] | None = None
    always: bool = True


PRESENTED = {
    FAILED: Presented("Failed (planned in B, its job failed)", "red", ("failure", "failed"), always=False),
    SLOWER: Presented("Slower (regressions)", "red", ("failure", "regression")),
    UNJUDGED: Presented("Cannot judge", "yellow", ("error", "cannot-judge"), always=False),
    ONLY_A: Presented("Only in A (never planned in B: not judged)", "yellow", ("error", "only-in-a"), always=False),
    FASTER: Presented("Faster (improvements)", "green"),
    SAME: Presented(None),
}


@dataclass(frozen=True)
class Column:
    """One column of a table of summary rows: its head, its cell from a row, and whether it is
    a number (right-aligned in the HTML report)."""

    head: str
    cell: Callable[[dict[str, Any]], str]
    numeric: bool = True


def _text(field: str) -> Column:
    return Column(field, lambda r: str(r[field]), numeric=False)


def _value(head: str, field: str, spec: str) -> Column:
    return Column(head, lambda r: fmt_value(r[field], spec))


_GPUS = Column("GPUs", lambda r: str(r["world_size"]))
_STEP = _value("step ms (p50)", "step_time_ms", ".1f")
_SCALING_COLUMNS = (_value("speedup", "speedup", ".2f"), _value("efficiency", "efficiency", ".1%"))
TRAINING_COLUMNS = (
    _text("workload"),
    _text("scaling"),
    _text("job"),
    _GPUS,
    _value("images/s", "images_per_s", ".1f"),
    _value("per GPU", "images_per_s_per_gpu", ".1f"),
    _STEP,
    *_SCALING_COLUMNS,
)
# The transformer's: MFU only where a peak was stated (docs/reference/sources.md, "FLOPs per token and MFU")
TRANSFORMER_COLUMNS = (
    _text("scaling"),
    _text("job"),
    _GPUS,
    _text("model"),
    _value("tokens/s", "tokens_per_s", ",.0f"),
    _value("per GPU", "tokens_per_s_per_gpu", ",.0f"),
    _value("TFLOP/s per GPU", "achieved_tflops_per_gpu", ".4g"),
    _value("MFU", "mfu", ".1%"),
    _STEP,
    *_SCALING_COLUMNS,
)


def _share(head: str, field: str, noise: str = "") -> Column:
    """A share of the step (docs/concepts/breakdown.md); `noise` in place of a row's share whose
    compute-only step was longer than its step."""
    return Column(head, lambda r: noise if r["breakdown_note"] else fmt_value(r[field], ".1%"))


BREAKDOWN_COLUMNS = (
    _text("workload"),
    _text("scaling"),
    _text("job"),
    _GPUS,
    _value("step ms", "step_time_ms", ".1f"),
    _value("compute ms", "compute_time_ms", ".1f"),
    _share("exposed comm", "exposed_comm_fraction", "not judged (noise)"),
    _share("imbalance", "imbalance_fraction"),
    _share("data wait", "step_data_wait_fraction"),
    _value("efficiency", "efficiency", ".1%"),
)
TRAINING_HEAD = [c.head for c in TRAINING_COLUMNS]
TRANSFORMER_HEAD = [c.head for c in TRANSFORMER_COLUMNS]
BREAKDOWN_HEAD = [c.head for c in BREAKDOWN_COLUMNS]


def numeric(columns: tuple[Column, ...]) -> set[int]:
    """The indices of the columns that hold numbers."""
    return {i for i, c in enumerate(columns) if c.numeric}


def _cells(columns: tuple[Column, ...], rows: Iterable[dict[str, Any]]) -> list[list[str]]:
    return [[c.cell(r) for c in columns] for r in rows]


def breakdown_rows(train: pd.DataFrame) -> list[list[str]]:
    """Where each training row's step went (BREAKDOWN_COLUMNS; docs/concepts/breakdown.md), for the rows
    that measured a compute-only step."""
    return _cells(BREAKDOWN_COLUMNS, (r for r in records(train) if r["compute_time_ms"] is not None))


def training_rows(train: pd.DataFrame) -> list[list[str]]:
    """The training throughput table's cells (TRAINING_COLUMNS), one row per summary row of the
    workloads that count images."""
    return _cells(TRAINING_COLUMNS, (r for r in records(train) if UNITS.get(r["workload"]) == "images"))


def transformer_rows(train: pd.DataFrame) -> list[list[str]]:
    """The transformer table's cells (TRANSFORMER_COLUMNS), one row per transformer row."""
    return _cells(TRANSFORMER_COLUMNS, (r for r in records(train) if r["workload"] == "transformer"))


def collective_table(coll: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The collective table's head and cells, one row per summary row; busbw as % of the
    links' peak too, where the profile stated it for any row; and what NCCL ran over (net, its
    devices, GPUDirect RDMA; docs/concepts/transport.md), where any row's log said, since a comparison of
    IB and sockets is about exactly that."""
    peak = "busbw_pct_peak" in coll and bool(coll["busbw_pct_peak"].notna().any())
    facts = [c for c in TRANSPORT_HEAD if c in coll and bool(coll[c].notna().any())]
    coll = coll.assign(**{c: coll[c].astype(object).where(coll[c].notna(), None) for c in facts})
    rows = [
        [
            r["job"],
            r["_measured"],
            format_size(int(r["size_bytes"])),
            fmt_value(r["time_us"], ".1f"),
            fmt_value(r["algbw_gbps"], ".4f"),
            fmt_value(r["busbw_gbps"], ".4f"),
            *([fmt_value(r["busbw_pct_peak"], ".1f")] if peak else []),
            fmt_value(r["wrong"], ".0f"),
            *(_fact(r[c]) for c in facts),
        ]
        for r in records(coll.assign(_measured=measured(coll)))
    ]
    head = [*COLLECTIVE_HEAD[:6], *([PEAK_HEAD] if peak else []), COLLECTIVE_HEAD[6]]
    return [*head, *(TRANSPORT_HEAD[c] for c in facts)], rows


def _fact(value: object) -> str:
    if value is None:
        return "-"
    text = str(value)  # a bool, or numpy's, from the summary's gdr column
    return {"True": "yes", "False": "no"}.get(text, text)


# --------------------------------------------------------------------------- terminal


def print_comparison(console: Console, cmp: Comparison, top: int) -> None:
    """Warnings, stragglers, the `top` worst rows and the headline, as `bench compare` and
    `bench regress` print them."""
    from rich.table import Table

    for heading, lines in warnings(cmp):
        console.print(f"[yellow]warning: {shown(heading)}:[/]", soft_wrap=True)
        for line in lines:
            console.print(f"[yellow]  {shown(line)}[/]", soft_wrap=True)
    for side in _distinct_sides(cmp):
        for s in side.stragglers:
            console.print(f"[yellow]straggler in {shown(side.label)}:[/] {shown(s.line())}", soft_wrap=True)
    t = Table(
        title=f"{shown(cmp.b.label)} against {shown(cmp.a.label)} (worst first; threshold "
        f"{cmp.threshold:.1%}; {shown(cmp.method)})",
        title_justify="left",
    )
    head = cmp.table.head(top)
    worst = records(head)
    notes = any(r.get("note") for r in worst)
    for col in ("verdict", "metric", "key", "A", "B", "B/A", "interval", "p", "catches") + (("note",) if notes else ()):
        t.add_column(col, justify="right" if col in ("A", "B", "B/A", "p", "catches") else "left")
    style = {v: p.colour for v, p in PRESENTED.items() if p.colour}
    for r, interval, catch in zip(worst, intervals(head), catch_texts(_floats(head, "catches"))):
        t.add_row(
            r["verdict"],
            METRICS[r["metric"]].label,
            shown(r["key"]),
            fmt_value(r["a"]),
            fmt_value(r["b"]),
            fmt_ratio(r["ratio"]),
            interval,
            fmt_value(r.get("p_value")),
            catch,
            *((shown(r.get("note") or ""),) if notes else ()),
            style=style.get(r["verdict"]),
        )
    console.print(t)
    if len(cmp.table) > top:
        console.print(f"... {len(cmp.table) - top} more rows (--top, --csv, --markdown)")
    listed, more = only_in_b(cmp)
    if listed:
        n = len(cmp.new_in_b)
        console.print(
            f"only completed in {shown(cmp.b.label)}: {n} key{'s' if n != 1 else ''}: "
            f"{shown(' | '.join(listed))}{f' | ... and {more} more' if more else ''}",
            soft_wrap=True,
        )
    console.print(headline(cmp), soft_wrap=True)


def plan_table(jobs: list[Job]) -> str:
    """The plan as an aligned plain-text table, one job per line, as squeue prints: quick for
    10,000 jobs and easy to grep."""
    header = ("JOB", "CONFIG", "NODES", "GPUS/NODE", "WORLD", "LAUNCHER", "NCCL", "WORKLOADS")
    rows = [
        (
            j.name,
            j.config_hash,
            str(j.nodes),
            str(j.gpus_per_node),
            str(j.world_size),
            j.launcher,
            j.nccl_config,
            " ".join(r.key for r in j.runs),
        )
        for j in jobs
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    numeric = {2, 3, 4}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([line(header), *map(line, rows)])


def print_plan(console: Console, sweep_path: Path, jobs: list[Job], run: RunDir) -> None:
    console.print(f"plan: {len(jobs)} jobs from {sweep_path} -> {run.path}", markup=False)
    console.file.write(plan_table(jobs) + "\n")
    console.file.flush()


def _used(amount: float | None, share: float | None, unit: str) -> str:
    """ "6.9 s (43%)", "484 MiB", or "-"."""
    if amount is None:
        return "-"
    text = f"{amount:.1f} s" if unit == "s" else f"{amount / (1 << 20):.0f} MiB"
    return text + (f" ({share:.0%})" if share is not None else "")


def print_jobs(console: Console, table: dict[str, JobRecord], title: str) -> None:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    # sacct's figures, where the executor had them (docs/concepts/telemetry.md): CPU time and its share of
    # the allocated CPUs over the elapsed time, memory and its share of the allocation
    usage = any(rec.cpu_s is not None or rec.mem_bytes is not None for rec in table.values())
    for col in ("job", "id", "state", "exit", "elapsed", "nodes", "tries", *(("cpu", "mem") if usage else ())):
        t.add_column(col)
    t.add_column("workloads")
    for rec in table.values():
        style = "green" if rec.state == COMPLETED else ("yellow" if rec.state in (PENDING, RUNNING) else "red")
        state = rec.shown_state  # PENDING means queued in Slurm; a job never submitted says so
        used = (_used(rec.cpu_s, rec.cpu_efficiency, "s"), _used(rec.mem_bytes, rec.mem_efficiency, "B"))
        t.add_row(  # a job table is data (jobs.json): every text cell is shown, never obeyed
            shown(rec.name),
            shown(rec.job_id or "-"),
            f"[{style}]{shown(state)}[/]",
            "-" if rec.exit_code is None else str(rec.exit_code),
            "-" if rec.elapsed_s is None else f"{rec.elapsed_s:.1f} s",
            str(rec.nodes),
            str(rec.attempts),
            *(used if usage else ()),
            shown(" ".join(f"{k}:{v}" for k, v in rec.runs.items())),
        )
    console.print(t)
    for rec in table.values():
        if rec.state not in (COMPLETED, PENDING) and (rec.reason or rec.log_tail):
            console.print(f"[red]{shown(rec.name)} {shown(rec.state)}[/]: {shown(rec.reason or '')}")
            if rec.log_tail:
                tail = [one_line(line) for line in rec.log_tail.splitlines()[-8:]]
                console.print("  " + "\n  ".join(tail), markup=False, highlight=False)


def print_results(console: Console, summary: pd.DataFrame) -> None:
    """The run's training throughput and its collectives at the largest message size."""
    from rich.table import Table

    ok = summary[summary["status"] == COMPLETED]
    train = ok[ok["workload"] != COLLECTIVE_WORKLOAD].sort_values(
        ["workload", "scaling", "launcher", "nccl_config", "world_size"]
    )
    for title, head, rows in (
        ("Training throughput", TRAINING_HEAD, training_rows(train)),
        ("Transformer throughput", TRANSFORMER_HEAD, transformer_rows(train)),
    ):
        if not rows:
            continue
        t = Table(title=title, title_justify="left")
        for col in head:
            t.add_column(col, justify="left" if col in ("workload", "scaling", "job", "model") else "right")
        for row in rows:
            t.add_row(*map(shown, row))
        console.print(t)
    coll = ok[ok["workload"] == COLLECTIVE_WORKLOAD]
    if not coll.empty:
        largest = coll.loc[coll.groupby(["job", "collective", "group"])["size_bytes"].idxmax()]
        t = Table(title="Collectives at the largest message size", title_justify="left")
        head, rows = collective_table(largest)
        for col in head:
            t.add_column(col, justify="left" if col in ("job", "collective") else "right")
        for row in rows:
            t.add_row(*map(shown, row))
        console.print(t)
