"""What `bench regress` writes, for people and for CI:

    report.md         regressions, then improvements, then the count of unchanged keys
    junit.xml         one test case per compared (metric, key); a regression is a failure
    benchmark.json    the run's per-key statistics in pytest-benchmark's format (seconds per
                      iteration), so `pytest-benchmark compare` and CI dashboards can read it
"""

from __future__ import annotations

import datetime as dt
import platform
import socket
from pathlib import Path
from typing import Any

from benchmarks.common import format_size
from benchmarks.results import atomic_write_bytes, atomic_write_text

from .compare import FASTER, METRICS, SLOWER, Comparison, Side, markdown, records


def write_all(cmp: Comparison, out: Path, title: str) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"report": out / "report.md", "junit": out / "junit.xml", "benchmark": out / "benchmark.json"}
    atomic_write_text(paths["report"], markdown(cmp, title) + "\n")
    atomic_write_text(paths["junit"], junit(cmp))
    atomic_write_bytes(paths["benchmark"], pytest_benchmark(cmp.b))
    return paths


_ENTITIES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("\n", "&#10;"))  # "&" first
_XML = str.maketrans(dict(_ENTITIES))


def _attr(text: str) -> str:
    """Text escaped for an XML attribute or element."""
    return text.translate(_XML)


def junit(cmp: Comparison) -> str:
    """JUnit XML, written as text: 100,000 test cases through ElementTree take seconds."""
    t = cmp.table
    counts = cmp.counts()
    stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    lines = ['<?xml version="1.0" encoding="utf-8"?>',
             f'<testsuites name="bench regress" tests="{len(t)}" failures="{counts[SLOWER]}">',
             f'  <testsuite name="{_attr(f"bench regress {cmp.b.label} vs {cmp.a.label}")}" tests="{len(t)}" '
             f'failures="{counts[SLOWER]}" errors="0" skipped="0" timestamp="{stamp}" hostname="{_attr(socket.gethostname())}">',
             "    <properties>"]
    for name, value in (("baseline", cmp.a.source), ("run", cmp.b.source), ("threshold", f"{cmp.threshold:.4g}"),
                        ("statistics", cmp.method)):
        lines.append(f'      <property name="{name}" value="{_attr(value)}"/>')
    lines.append("    </properties>")
    lines.extend(_testcases(t))
    lines += ["  </testsuite>", "</testsuites>", ""]
    return "\n".join(lines)


def _escape_all(values: Any) -> Any:
    """_attr over a whole column, in Arrow's C++ (str.translate per row takes seconds at 100,000)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = pa.array(values.astype(str).tolist(), type=pa.string())
    for char, entity in _ENTITIES:
        arr = pc.replace_substring(arr, char, entity)
    return pd.Series(arr.to_pylist(), index=values.index, dtype=object)


def _fmt(values: Any, spec: str) -> Any:
    """printf-formatted numbers as a string array, '-' where missing (numpy's C loop)."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    return np.where(np.isnan(v), "-", np.char.mod(spec, np.nan_to_num(v)))


def _testcases(t: Any) -> list[str]:
    """One <testcase> line per compared row, built column-wise: 100,000 rows in a fraction of
    a second, where a loop over rows takes seconds."""
    import numpy as np
    import pandas as pd

    labels = t["metric"].map({m: METRICS[m].label for m in METRICS}).astype(str)
    ci = np.where(np.isnan(t["ci_low"].to_numpy(dtype=float)), "no samples",
                  np.char.add(np.char.add(np.char.add("[", _fmt(t["ci_low"], "%.3f")), ", "),
                              np.char.add(_fmt(t["ci_high"], "%.3f"), "]")))
    text = (labels + ": " + _fmt(t["a"], "%.4g") + " -> " + _fmt(t["b"], "%.4g") + ", B/A " + _fmt(t["ratio"], "%.3f")
            + ", 95% CI " + pd.Series(ci, index=t.index) + ", p " + _fmt(t["p_value"], "%.4g"))
    text = _escape_all(text)
    name = _escape_all(t["metric"].astype(str) + "[" + t["key"].astype(str) + "]")
    head = '    <testcase classname="bench.' + _escape_all(t["workload"]) + '" name="' + name + '" time="0">'
    slower = t["verdict"] == SLOWER
    change = pd.Series(np.char.mod("%+.1f", t["change"].to_numpy(dtype=float) * 100), index=t.index)
    failure = '<failure message="regression: ' + change + '%" type="regression">' + text + "</failure>"
    other = "<system-out>" + t["verdict"].astype(str) + ": " + text + "</system-out>"
    return (head + failure.where(slower, other) + "</testcase>").tolist()


def _row_stats(data: Any) -> dict[str, Any]:
    """pytest-benchmark's statistics of each row of `data` (rows of equal length), vectorised.
    Quartiles by linear interpolation, as statistics.quantiles(method='inclusive') and
    pytest-benchmark compute them."""
    import numpy as np

    n = data.shape[1]
    mean = data.mean(axis=1)
    sd = data.std(axis=1, ddof=1) if n > 1 else np.zeros(len(data))
    q1, median, q3 = np.quantile(data, [0.25, 0.5, 0.75], axis=1)
    iqr = q3 - q1
    low, high = (q1 - 1.5 * iqr)[:, None], (q3 + 1.5 * iqr)[:, None]
    inside = (data >= low) & (data <= high)
    return {"min": data.min(axis=1), "max": data.max(axis=1), "mean": mean, "stddev": sd, "median": median,
            "iqr": iqr, "q1": q1, "q3": q3, "iqr_outliers": (~inside).sum(axis=1),
            "stddev_outliers": (np.abs(data - mean[:, None]) > sd[:, None]).sum(axis=1),
            "ld15iqr": np.where(data >= low, data, np.inf).min(axis=1),
            "hd15iqr": np.where(data <= high, data, -np.inf).max(axis=1),
            "total": data.sum(axis=1)}


def pytest_benchmark(side: Side) -> bytes:
    """The run in pytest-benchmark's JSON layout: one benchmark per key with samples, its
    per-iteration times in seconds as the rounds. The rounds themselves ("data") are left out,
    as pytest-benchmark leaves them out of saved runs without --benchmark-save-data: a
    100,000-key run would write 120 MB. They are in samples.parquet and in the history."""
    import numpy as np
    import orjson

    rows = side.rows
    conf = (rows["nodes"].astype(str) + "x" + rows["gpus_per_node"].astype(str) + "-" + rows["launcher"].astype(str)
            + "-" + rows["nccl_config"].astype(str)).tolist()
    sizes = {int(v): format_size(int(v)) for v in rows["size_bytes"].unique()}
    coll_what = (rows["collective"].astype(str) + "-" + rows["size_bytes"].map(sizes).astype(str)).tolist()
    train_what = (rows["workload"].astype(str) + "-" + rows["scaling"].astype(str)).tolist()
    params = records(rows[["workload", "collective", "scaling", "nodes", "gpus_per_node", "launcher", "nccl_config",
                           "size_bytes"]])
    extra = records(rows[list(METRICS)])
    groups = rows["workload"].astype(str).tolist()
    benches: list[tuple[int, dict[str, Any]]] = []
    for metric_name, (values, counts) in side.samples.items():
        coll = metric_name == "time_us"
        what = coll_what if coll else train_what
        scale = 1e-6 if coll else 1e-3
        wanted = (rows["workload"] == "allreduce").to_numpy() == coll
        for c in np.unique(counts[wanted & (counts > 0)]):
            idx = np.flatnonzero(wanted & (counts == c))
            st = _row_stats(values[idx, :c] * scale)
            st["ops"] = np.where(st["mean"] > 0, 1 / np.where(st["mean"] > 0, st["mean"], 1), 0.0)
            names = list(st) + ["rounds", "iterations", "outliers"]
            options = {"disable_gc": False, "timer": "perf_counter", "min_rounds": int(c), "max_time": 0,
                       "min_time": 0, "warmup": False}
            outliers = [f"{a};{b}" for a, b in zip(st["stddev_outliers"].tolist(), st["iqr_outliers"].tolist())]
            for i, values_i, out_i in zip(idx.tolist(), zip(*(v.tolist() for v in st.values())), outliers):
                name = f"{what[i]}[{conf[i]}]"
                benches.append((i, {
                    "group": groups[i], "name": name, "fullname": f"bench::{name}", "params": params[i],
                    "param": conf[i], "extra_info": extra[i], "options": options,
                    "stats": dict(zip(names, (*values_i, int(c), 1, out_i))),
                }))
    benches.sort(key=lambda b: b[0])
    doc = {
        "machine_info": {"node": socket.gethostname(), "processor": platform.processor(), "machine": platform.machine(),
                         "python_compiler": platform.python_compiler(),
                         "python_implementation": platform.python_implementation(),
                         "python_implementation_version": platform.python_version(),
                         "python_version": platform.python_version(), "python_build": list(platform.python_build()),
                         "release": platform.release(), "system": platform.system(), "cpu": {},
                         "bench_environment": side.environment},
        "commit_info": {"id": "unversioned", "time": None, "author_time": None, "dirty": False,
                        "project": "bench", "branch": "(unknown)"},
        "benchmarks": [b for _, b in benches],
        "datetime": dt.datetime.now(dt.timezone.utc).isoformat(),
        "version": "4.0.0",
    }
    return orjson.dumps(doc) + b"\n"


def summary_line(cmp: Comparison) -> str:
    c = cmp.counts()
    return (f"{c[SLOWER]} regression{'s' if c[SLOWER] != 1 else ''}, {c[FASTER]} improvement"
            f"{'s' if c[FASTER] != 1 else ''}, {len(cmp.table) - c[SLOWER] - c[FASTER]} unchanged "
            f"of {len(cmp.table)} compared")
