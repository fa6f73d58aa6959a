"""A run's figures for the monitoring systems clusters already run (docs/guides/export.md).

`bench export DIR --format openmetrics` writes the OpenMetrics text format, which node_exporter's
textfile collector reads from a `*.prom` file. `--format influx` writes InfluxDB's line protocol.
Both hold one series per key of the matrix, labelled with the cluster and the matrix point: a
bounded set, the same series night after night (a label per run would start new series every
night). The line protocol carries the run's name as a field. A key's value is the median over
the run's replicates, as `bench compare` reads it. A key that did not complete has no figure; it
has `bench_completed 0`, which is what an alert watches.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable
from typing import Any

from harness.analysis.sides import METRICS, Side
from harness.errors import DataError, one_line

FORMATS = ("openmetrics", "influx")
# The figures exported, with what they are (the summary's columns; docs/reference/summary.md).
HELP = {
    "busbw_gbps": "collective bus bandwidth, GB/s: nccl-tests' busbw, algbw x the bus factor of the collective "
    "the collective label names (2(n-1)/n for all_reduce, (n-1)/n for all_gather, 1 for broadcast, ...)",
    "algbw_gbps": "collective algorithm bandwidth, GB/s",
    "time_us": "collective time per call, microseconds",
    "images_per_s": "training throughput of the whole job, images/s",
    "images_per_s_per_gpu": "training throughput per GPU, images/s",
    "tokens_per_s": "transformer training throughput of the whole job, tokens/s",
    "tokens_per_s_per_gpu": "transformer training throughput per GPU, tokens/s",
    "step_time_ms": "training step time, milliseconds",
}
# The matrix point: every key column, as labels (compare.KEYS), and what says where it ran.
POINT = (
    "workload",
    "collective",
    "group",
    "scaling",
    "size_bytes",
    "nodes",
    "gpus_per_node",
    "launcher",
    "nccl_config",
)
PREFIX = "bench_"


def series(side: Side) -> list[tuple[dict[str, str], dict[str, float], bool]]:
    """(labels of the matrix point, {metric: value}, completed) per key of the run, completed
    keys first, in the summary's order. Labels omit what does not apply (no size for training)."""
    out = []
    for frame, completed in ((side.rows, True), (side.others, False)):
        for row in frame.to_dict("records") if frame is not None else ():
            labels = {k: _label(row.get(k)) for k in POINT if _label(row.get(k))}
            figures = {}
            if completed:
                for name in HELP:
                    value = row.get(name)
                    metric = METRICS[name]
                    if value is None or not math.isfinite(float(value)) or row["workload"] not in metric.workloads:
                        continue
                    if metric.zero_for_one_rank and row["nodes"] * row["gpus_per_node"] == 1:
                        continue  # one rank moves nothing over a bus
                    figures[name] = float(value)
            out.append((labels, figures, completed))
    return out


def _label(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "" or str(value) == "<NA>":
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and value == 0:
        return ""  # no size: a training key
    return str(value)


# What no label of either format may hold: line breaks end a sample, and the other controls are
# not text (OpenMetrics escapes only the newline, InfluxDB's line protocol none of them).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _checked(labels: dict[str, str], form: str) -> dict[str, str]:
    """`labels`, or DataError naming the first whose value holds a control character: the labels
    come from the run directory (its name, its summary), which is data."""
    for key, value in labels.items():
        if _CONTROL.search(value):
            raise DataError(
                f"label {key}={one_line(value)!r} holds a control character, which {form} cannot carry; "
                f"rename what it came from (the run directory, a settings set)"
            )
    return labels


def _number(value: float) -> str:
    return repr(float(value))


# ---------------------------------------------------------------- OpenMetrics


def _om_escape(value: str) -> str:
    """A label value as OpenMetrics quotes it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# The verdict of `bench regress` on the run (its exit status's meaning), read back from the
# junit.xml it wrote: bench's own first line, `<testsuites name="bench regress" tests=... ...>`.
_JUNIT_COUNTS = re.compile(r'<testsuites name="bench regress" tests="(\d+)" failures="(\d+)" errors="(\d+)"')
VERDICT_HELP = (
    "bench regress's verdict on the run, as its exit status: 0 nothing regressed, 1 a key regressed or failed, "
    "3 a key could not be judged"
)


def regress_verdict(junit_head: str) -> int | None:
    """0, 1 or 3 from the head of a junit.xml `bench regress` wrote; None when it is not one."""
    m = _JUNIT_COUNTS.search(junit_head)
    if m is None:
        return None
    return 1 if int(m[2]) else 3 if int(m[3]) else 0


def openmetrics(
    side: Side, run_labels: dict[str, str], started: dt.datetime | None = None, verdict: int | None = None
) -> str:
    """The OpenMetrics text of a run: a gauge family per figure, bench_completed, the run's start
    as bench_run_start_timestamp_seconds (a value: node_exporter's textfile collector refuses
    samples that carry a timestamp), bench_verdict where the run was judged, then EOF."""
    rows = series(side)
    lines: list[str] = []

    def family(name: str, help_: str, samples: Iterable[tuple[dict[str, str], float]]) -> None:
        samples = list(samples)
        if not samples:
            return
        lines.extend([f"# TYPE {PREFIX}{name} gauge", f"# HELP {PREFIX}{name} {help_}"])
        for labels, value in samples:
            named = _checked({**run_labels, **labels}, "OpenMetrics")
            text = ",".join(f'{k}="{_om_escape(v)}"' for k, v in named.items())
            lines.append(f"{PREFIX}{name}{{{text}}} {_number(value)}")

    for name, help_ in HELP.items():
        family(name, help_, ((labels, figures[name]) for labels, figures, _ in rows if name in figures))
    family(
        "completed",
        "1 when the key completed in the run, 0 when its job failed, timed out or was cancelled",
        ((labels, 1.0 if done else 0.0) for labels, _, done in rows),
    )
    if started is not None:
        family("run_start_timestamp_seconds", "when the run was planned, Unix time", [({}, started.timestamp())])
    if verdict is not None:
        family("verdict", VERDICT_HELP, [({}, float(verdict))])
    return "\n".join([*lines, "# EOF"]) + "\n"


# ---------------------------------------------------------------- InfluxDB line protocol

MEASUREMENT = "bench"
# A timestamp is a signed 64-bit count of nanoseconds since 1970 (InfluxDB's line protocol
# reference, "Timestamp"): from 1677-09-21T00:12:43.145224194Z to 2262-04-11T23:47:16.854775806Z.
INFLUX_FIRST = dt.datetime(1677, 9, 21, 0, 12, 44, tzinfo=dt.timezone.utc)
INFLUX_LAST = dt.datetime(2262, 4, 11, 23, 47, 16, tzinfo=dt.timezone.utc)


def _tag(text: str) -> str:
    """A tag key or value in line protocol: comma, equals sign and blank escaped with a backslash.
    A backslash is written as it is (InfluxDB's line protocol reference: only those three are
    escaped in tags), so one before an escaped character or at the end would be misread."""
    if re.search(r"\\(?=[,= ]|$)", text):
        raise DataError(
            f"{text!r}: a backslash before ',', '=', ' ' or at the end cannot be written as an InfluxDB tag"
        )
    return re.sub(r"([,= ])", r"\\\1", text)


def _string_field(text: str) -> str:
    """A string field value in line protocol: double-quoted, with backslash and double quote
    escaped (InfluxDB's line protocol reference, "Special characters")."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def influx(side: Side, run_labels: dict[str, str], when: dt.datetime, run: str | None = None) -> str:
    """InfluxDB line protocol: one line per key, measurement `bench`, the cluster and the matrix
    point as tags (sorted, as InfluxDB stores them), the figures, `completed` and the run's name
    (`run`, a field: not indexed, no new series each night) as fields, at the run's start in
    nanoseconds."""
    try:
        utc = when.astimezone(dt.timezone.utc)
    except (OverflowError, ValueError):  # a naive time at the ends of datetime's range
        utc = None
    if utc is None or not INFLUX_FIRST <= utc <= INFLUX_LAST:
        raise DataError(
            f"the run's start {when.isoformat()} is outside the times InfluxDB can store "
            f"({INFLUX_FIRST.isoformat()} to {INFLUX_LAST.isoformat()}, a signed 64-bit count of nanoseconds)"
        )
    stamp = int(when.timestamp()) * 1_000_000_000
    out = []
    for labels, figures, done in series(side):
        named = _checked({**run_labels, **labels}, "the line protocol")
        tags = ",".join(f"{_tag(k)}={_tag(v)}" for k, v in sorted(named.items()))
        fields = [*(f"{k}={_number(v)}" for k, v in figures.items()), f"completed={'true' if done else 'false'}"]
        if run is not None:
            fields.append(f"run={_string_field(_checked({'run': run}, 'the line protocol')['run'])}")
        out.append(f"{MEASUREMENT},{tags} {','.join(fields)} {stamp}")
    return "".join(line + "\n" for line in out)
