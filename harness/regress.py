"""What `bench regress` writes, for people and for CI:

    report.md         regressions, then improvements, then the count of unchanged keys
    junit.xml         one test case per compared (metric, key); a regression is a failure
    benchmark.json    the run's samples in pytest-benchmark's format (seconds per iteration),
                      so `pytest-benchmark compare` and CI dashboards can read it
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import socket
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from benchmarks.common import format_size
from benchmarks.results import atomic_write_text

from .compare import FASTER, METRICS, SLOWER, Comparison, Side, fmt_ci, fmt_value, key_text, markdown


def write_all(cmp: Comparison, out: Path, title: str) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"report": out / "report.md", "junit": out / "junit.xml", "benchmark": out / "benchmark.json"}
    atomic_write_text(paths["report"], markdown(cmp, title) + "\n")
    atomic_write_text(paths["junit"], junit(cmp))
    atomic_write_text(paths["benchmark"], json.dumps(pytest_benchmark(cmp.b), indent=1) + "\n")
    return paths


def _case_name(r: dict[str, Any]) -> str:
    return f"{r['metric']}[{key_text(r)}]"


def junit(cmp: Comparison) -> str:
    t = cmp.table
    counts = cmp.counts()
    suites = ET.Element("testsuites", name="bench regress", tests=str(len(t)), failures=str(counts[SLOWER]))
    suite = ET.SubElement(suites, "testsuite", name=f"bench regress {cmp.b.label} vs {cmp.a.label}",
                          tests=str(len(t)), failures=str(counts[SLOWER]), errors="0", skipped="0",
                          timestamp=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                          hostname=socket.gethostname())
    props = ET.SubElement(suite, "properties")
    for name, value in (("baseline", cmp.a.source), ("run", cmp.b.source), ("threshold", f"{cmp.threshold:.4g}"),
                        ("statistics", cmp.method)):
        ET.SubElement(props, "property", name=name, value=value)
    for r in t.to_dict("records"):
        case = ET.SubElement(suite, "testcase", classname=f"bench.{r['workload']}", name=_case_name(r), time="0")
        text = (f"{METRICS[r['metric']].label}: {fmt_value(r['a'])} -> {fmt_value(r['b'])}, B/A {r['ratio']:.3f}, "
                f"95% CI {fmt_ci(r['ci_low'], r['ci_high'])}, p {fmt_value(r['p_value'])}")
        if r["verdict"] == SLOWER:
            ET.SubElement(case, "failure", message=f"regression: {r['change']:+.1%}", type="regression").text = text
        else:
            ET.SubElement(case, "system-out").text = f"{r['verdict']}: {text}"
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _quartiles(v: list[float]) -> tuple[float, float]:
    if len(v) < 2:
        return v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], q[2]


def pytest_benchmark(side: Side) -> dict[str, Any]:
    """The run in pytest-benchmark's JSON layout: one benchmark per key with samples, its
    per-iteration times in seconds as the rounds."""
    benches = []
    for metric_name, (values, counts) in side.samples.items():
        workload_is_coll = metric_name == "time_us"
        rows = side.rows
        scale = 1e-6 if metric_name == "time_us" else 1e-3
        for i, r in enumerate(rows.to_dict("records")):
            if (r["workload"] == "allreduce") != workload_is_coll or counts[i] < 1:
                continue
            data = [float(x) * scale for x in values[i, :counts[i]]]
            mean = statistics.fmean(data)
            sd = statistics.stdev(data) if len(data) > 1 else 0.0
            q1, q3 = _quartiles(data)
            iqr = q3 - q1
            lo = min((x for x in data if x >= q1 - 1.5 * iqr), default=min(data))
            hi = max((x for x in data if x <= q3 + 1.5 * iqr), default=max(data))
            params = {k: (int(r[k]) if k in ("nodes", "gpus_per_node", "size_bytes") else str(r[k]))
                      for k in ("workload", "collective", "scaling", "nodes", "gpus_per_node", "launcher",
                                "nccl_config", "size_bytes")}
            what = (f"{r['collective']}-{format_size(int(r['size_bytes']))}" if workload_is_coll
                    else f"{r['workload']}-{r['scaling']}")
            name = f"{what}[{int(r['nodes'])}x{int(r['gpus_per_node'])}-{r['launcher']}-{r['nccl_config']}]"
            benches.append({
                "group": r["workload"], "name": name, "fullname": f"bench::{name}", "params": params,
                "param": f"{int(r['nodes'])}x{int(r['gpus_per_node'])}-{r['launcher']}-{r['nccl_config']}",
                "extra_info": {k: (None if v != v else float(v)) for k, v in r.items()
                               if k in METRICS and v is not None},
                "options": {"disable_gc": False, "timer": "perf_counter", "min_rounds": len(data),
                            "max_time": 0, "min_time": 0, "warmup": False},
                "stats": {"min": min(data), "max": max(data), "mean": mean, "stddev": sd, "rounds": len(data),
                          "median": statistics.median(data), "iqr": iqr, "q1": q1, "q3": q3,
                          "iqr_outliers": sum(x < q1 - 1.5 * iqr or x > q3 + 1.5 * iqr for x in data),
                          "stddev_outliers": sum(abs(x - mean) > sd for x in data),
                          "outliers": "", "ld15iqr": lo, "hd15iqr": hi,
                          "ops": 1 / mean if mean else 0.0, "total": sum(data), "data": data, "iterations": 1},
            })
    return {
        "machine_info": {"node": socket.gethostname(), "processor": platform.processor(), "machine": platform.machine(),
                         "python_compiler": platform.python_compiler(),
                         "python_implementation": platform.python_implementation(),
                         "python_implementation_version": platform.python_version(),
                         "python_version": platform.python_version(), "python_build": list(platform.python_build()),
                         "release": platform.release(), "system": platform.system(), "cpu": {},
                         "bench_environment": side.environment},
        "commit_info": {"id": "unversioned", "time": None, "author_time": None, "dirty": False,
                        "project": "bench", "branch": "(unknown)"},
        "benchmarks": benches,
        "datetime": dt.datetime.now(dt.timezone.utc).isoformat(),
        "version": "4.0.0",
    }


def summary_line(cmp: Comparison) -> str:
    c = cmp.counts()
    return (f"{c[SLOWER]} regression{'s' if c[SLOWER] != 1 else ''}, {c[FASTER]} improvement"
            f"{'s' if c[FASTER] != 1 else ''}, {len(cmp.table) - c[SLOWER] - c[FASTER]} unchanged "
            f"of {len(cmp.table)} compared")
