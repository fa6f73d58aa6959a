"""What `bench regress` writes, for people and for CI:

    report.md         failed keys, regressions, keys that cannot be judged, improvements, then
                      the count of unchanged keys
    junit.xml         one test case per (metric, configuration), its message sizes inside: a
                      regression or a failed key is a <failure> naming the job and its reason;
                      a key that cannot be judged is an <error> (a <skipped> with
                      --allow-unjudged)
    gate.json         the verdict `bench history add` stores with the run: its status and the
                      keys that regressed or failed (analysis/gate.py)
    benchmark.json    with --benchmark-json: the run's per-key statistics in pytest-benchmark's
                      format (seconds per iteration), for `pytest-benchmark compare`

Why one test case per configuration rather than per message size: a CI server shows a test
case as a line, and 25 lines for one all-reduce curve drown the one that matters; a slow link
shows as one failing configuration that lists its sizes. It also keeps the file small: a
100,000-row sweep gives a few thousand test cases, where one per key gave 25 MB. benchmark.json
is opt-in for the same reason (96 MB at 100,000 keys): the verdicts are in junit.xml, and the
rounds are in samples.parquet and the history.
"""

from __future__ import annotations

import datetime as dt
import functools
import platform
import re
import socket
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD
from benchmarks.common import format_size
from harness.analysis.compare import (
    BY_RUNS,
    FAILED,
    FASTER,
    ONLY_A,
    ORDER,
    REFERENCE,
    SAME,
    SLOWER,
    UNJUDGED,
    WORST_FIRST,
    Comparison,
    verdict_ranks,
)
from harness.analysis.gate import per_value
from harness.analysis.gating import RUN_TOO_NOISY, TOO_NOISY, catch_text, catch_texts
from harness.analysis.sides import KEYS, METRICS, Side, key_texts, records
from harness.files import inside
from harness.present.tables import PRESENTED, markdown, run_mismatches
from harness.run import forked

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    import numpy.typing as npt
    import pandas as pd


def write_all(
    cmp: Comparison,
    root: Path,
    folder: str,
    title: str,
    benchmark_json: bool = False,
    strict: bool = True,
    verdict: Callable[[], bytes] | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> dict[str, Path]:
    """Write the outputs into ROOT/FOLDER: the run directory and `regress`, or the directory
    `--out` named and "". Nothing is written through a link below ROOT (harness/files/inside.py).
    Without benchmark_json an earlier run's benchmark.json is removed, so that a dashboard never
    reads a stale one beside a new junit.xml. `verdict` makes gate.json's text (analysis/gate.py).

    A forked worker makes report.md and the first of junit.xml's test cases while this process
    makes gate.json and the rest (harness/run/forked.py): at 100,000 keys junit.xml is 10 MB, a line
    a key, and report.md as large where it lists most keys. A worker that made junit.xml whole
    saved nothing, its fork and hand-over costing what the overlap saved (docs/guides/fleet.md, "A
    large run against a month of nights"). `meanwhile` is done by this process first, beside the
    worker (regress prints the comparison); what it raises ends the worker, and nothing is written."""
    into = PurePosixPath(folder)
    printed = meanwhile is not None
    with forked.beside(functools.partial(_worker_part, cmp, title, strict, printed)) as worker_part:
        if meanwhile:
            meanwhile()
        root.mkdir(parents=True, exist_ok=True)
        gate_json = verdict() if verdict else b""
        cases, kinds = _share(cmp.table, strict, worker=False, printed=printed)
        report, made, made_kinds = worker_part()
        junit_xml = junit(cmp, strict, made + cases, made_kinds + kinds).encode()
        paths = {
            "report": inside.write(root, into / "report.md", report),
            "junit": inside.write(root, into / "junit.xml", junit_xml),
        }
    if gate_json:
        paths["verdict"] = inside.write(root, into / "gate.json", gate_json)
    if benchmark_json:
        paths["benchmark"] = inside.write(root, into / "benchmark.json", pytest_benchmark(cmp.b))
    else:
        inside.remove(root, into / "benchmark.json")
    return paths


# What making each output costs, in microseconds a row, measured at 100,000 keys on the 2-core
# VM (only their ratios matter): a test case's row of junit.xml, a key's bands in gate.json, a
# key report.md lists (all but those unchanged), and the worker's fork and hand-over; and what
# this process prints beside the worker, where it prints (regress's comparison)
JUNIT_US, GATE_US, LISTED_US, HANDOVER_US, PRINTED_US = 2.9, 1.4, 2.6, 0.5, 0.3


def _worker_fraction(t: pd.DataFrame, printed: bool = False) -> float:
    """The fraction of junit.xml's rows the worker makes beside report.md, so that it and this
    process (gate.json, the rest, and what it prints where `printed`) finish together: 0.66 where
    report.md lists no key, 0.21 where it lists every key (0.71 and 0.26 printed)."""
    n, listed = len(t), int((t["verdict"] != SAME).sum())
    if not n:
        return 0.0
    beside = GATE_US + JUNIT_US - HANDOVER_US + (PRINTED_US if printed else 0.0)
    fraction = (beside * n - LISTED_US * listed) / (2 * JUNIT_US * n)
    return min(max(fraction, 0.0), 1.0)


def _configurations(t: pd.DataFrame) -> pd.Series:
    """Each row's test case: its metric and key without its message size."""
    return t["metric"].astype(str) + "[" + key_texts(t, sizes=False).astype(str) + "]"


def _worker_share(config: pd.Series, fraction: float) -> npt.NDArray[np.bool_]:
    """The rows of the test cases the worker makes: the first cases, in the table's order, up to
    `fraction` of its rows. A case is never split between the two."""
    import numpy as np
    import pandas as pd

    codes, _ = pd.factorize(config)  # test cases in the order they come
    rows = np.cumsum(np.bincount(codes)) if len(codes) else np.zeros(0, dtype=np.int64)
    return codes < np.searchsorted(rows, fraction * len(codes), side="right")


def _share(t: pd.DataFrame, strict: bool, worker: bool, printed: bool) -> tuple[list[str], list[str]]:
    """The test cases and kinds of the worker's share of the table's, or of the rest. Each
    process finds the shares itself, the worker from the start."""
    config = _configurations(t)
    theirs = _worker_share(config, _worker_fraction(t, printed))
    return _testcases(t, strict, config, theirs if worker else ~theirs)


def _worker_part(cmp: Comparison, title: str, strict: bool, printed: bool) -> tuple[bytes, list[str], list[str]]:
    """The worker's part: report.md, and its share of junit.xml's test cases with their kinds."""
    return ((markdown(cmp, title) + "\n").encode(), *_share(cmp.table, strict, worker=True, printed=printed))


_ENTITIES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("\n", "&#10;"))  # "&" first
_XML = str.maketrans(dict(_ENTITIES))


# Characters XML 1.0 cannot hold even escaped (its Char production): C0 controls but tab, newline
# and carriage return, lone surrogates, U+FFFE and U+FFFF. A label or path holding one would make
# the whole junit.xml unreadable, so each becomes U+FFFD.
_NOT_XML = "[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]"
_NOT_XML_RE = re.compile(_NOT_XML)


def _attr(text: str) -> str:
    """Text escaped for an XML attribute or element."""
    return _NOT_XML_RE.sub("\ufffd", text).translate(_XML)


def junit(cmp: Comparison, strict: bool = True, cases: list[str] | None = None, kinds: list[str] | None = None) -> str:
    """JUnit XML, written as text: thousands of test cases through ElementTree take seconds.
    `cases` and their `kinds`: the table's test cases made already (write_all's shares)."""
    if cases is None or kinds is None:
        cases, kinds = _testcases(cmp.table, strict)
    cases, kinds = list(cases), list(kinds)
    for line in run_mismatches(cmp):  # failed whatever the baseline holds: fail closed
        job, why = line.split(": ", 1)
        cases.append(
            f'    <testcase classname="bench.transport" name="{_attr(f"transport[{job}]")}" time="0">\n'
            f'      <failure type="transport mismatch" message="{_attr(why)}">{_attr(why)}</failure>\n'
            "    </testcase>"
        )
        kinds.append("failure")
    stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    n, failures, errors, skipped = len(cases), kinds.count("failure"), kinds.count("error"), kinds.count("skipped")
    lines = [
        '<?xml version="1.0" encoding="utf-8"?>',
        f'<testsuites name="bench regress" tests="{n}" failures="{failures}" errors="{errors}" skipped="{skipped}">',
        f'  <testsuite name="{_attr(f"bench regress {cmp.b.label} vs {cmp.a.label}")}" tests="{n}" '
        f'failures="{failures}" errors="{errors}" skipped="{skipped}" timestamp="{stamp}" '
        f'hostname="{_attr(socket.gethostname())}">',
        "    <properties>",
    ]
    props = [
        ("baseline", cmp.a.source),
        ("run", cmp.b.source),
        ("threshold", f"{cmp.threshold:.4g}"),
        ("statistics", cmp.method),
    ]
    props += [("parameters differ" + (", compared anyway" if cmp.allow_mismatch else ""), m) for m in cmp.mismatches]
    props += [("environments differ", d) for d in cmp.env_diffs]
    for name, value in props:
        lines.append(f'      <property name="{_attr(name)}" value="{_attr(value)}"/>')
    lines.append("    </properties>")
    lines.extend(cases)
    lines += ["  </testsuite>", "</testsuites>", ""]
    return "\n".join(lines)


def _fmt(values: npt.ArrayLike, spec: str) -> list[str]:
    """printf-formatted numbers, '-' where not finite (Python's % over a list: numpy's char.mod
    calls it per element too, at 2.5 times the cost)."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    text = [spec % x for x in v.tolist()]
    for i in np.flatnonzero(~np.isfinite(v)):
        text[i] = "-"
    return text


# How a configuration's worst verdict shows in JUnit: (element, type); None passes.
_OUTCOME = {verdict: p.junit for verdict, p in PRESENTED.items() if p.junit}


def _testcases(
    t: pd.DataFrame, strict: bool, config: pd.Series | None = None, rows: npt.NDArray[np.bool_] | None = None
) -> tuple[list[str], list[str]]:
    """One <testcase> per (metric, configuration), its sizes inside, built column-wise: the
    per-row text is a few array operations however many rows there are. `config`: each row's
    case (_configurations); `rows`: those of the cases to make, every row of each."""
    import numpy as np
    import pandas as pd

    config = _configurations(t) if config is None else config
    if rows is not None:
        t, config = t[rows].reset_index(drop=True), config[rows].reset_index(drop=True)
    if not len(t):
        return [], []
    labels = t["metric"].map({m: METRICS[m].label for m in METRICS}).astype(str)
    by_runs = t["test"].isin([BY_RUNS, REFERENCE]).to_numpy()  # both judged by a band of ratios
    # judged by a band: its limits; within a run: the samples' ratio and its 95% CI
    low = _fmt(np.where(by_runs, t["band_low"], t["ci_low"]), "%.3f")
    high = _fmt(np.where(by_runs, t["band_high"], t["ci_high"]), "%.3f")
    words = {True: ("B/A", "band"), False: ("B/A (Hodges-Lehmann of the samples)", "95% CI")}
    size = t["size_bytes"].map({int(v): format_size(int(v)) for v in t["size_bytes"].unique()}).astype(str)
    what = size.where(t["workload"] == COLLECTIVE_WORKLOAD, t["workload"].astype(str) + " " + t["scaling"].astype(str))
    note = t["note"].fillna("").astype(str)

    def escaped(column: pd.Series) -> list[str]:  # each distinct text once; the numbers need none
        return per_value(column.astype(str), _attr)

    catches = t["catches"].to_numpy(dtype=float) if "catches" in t else np.full(len(t), np.nan)
    caught = [", catches " + c if c != "-" else "" for c in catch_texts(catches)]
    text = [
        f"{w}: {v}, {label} {a} -&gt; {b}, {words[band][0]} {r}, {words[band][1]} [{lo}, {hi}]"
        + c + (f"; {n}" if n else "")
        for w, v, label, a, b, band, r, lo, hi, c, n in zip(
            escaped(what), escaped(t["verdict"]), escaped(labels), _fmt(t["a"], "%.4g"),
            _fmt(t["b"], "%.4g"), by_runs.tolist(), _fmt(t["ratio"], "%.3f"), low, high, caught, escaped(note),
        )
    ]  # fmt: skip
    codes, names = pd.factorize(config)  # configurations in the table's order
    order = np.argsort(codes, kind="stable")
    starts = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=len(names)))])
    rank = verdict_ranks(t["verdict"], ORDER[SAME])
    if "gating" in t:  # a watched key's verdict is shown, but only a failed job of it sets the case's outcome
        watched = ~t["gating"].to_numpy(dtype=bool) & (t["verdict"] != FAILED).to_numpy(dtype=bool)
        rank[watched] = np.maximum(rank[watched], ORDER[SAME])
    rank = rank[order]
    worst = np.minimum.reduceat(rank, starts[:-1]).astype(int)
    # the case's weakest key: the largest fall one of its sizes could have missed
    with np.errstate(invalid="ignore"):
        weakest = np.fmax.reduceat(catches[order], starts[:-1]) if len(t) else np.zeros(0)
    body = [text[i] for i in order]
    workload = t["workload"].astype(str).to_numpy()[order]
    what, verdicts = what.to_numpy(dtype=object)[order], t["verdict"].to_numpy(dtype=object)[order]
    notes, change = note.to_numpy(dtype=object)[order], t["change"].to_numpy(dtype=float)[order]
    cases, kinds = [], []
    for g, name in enumerate(names):
        lo, hi = starts[g], starts[g + 1]
        head = f'    <testcase classname="bench.{_attr(workload[lo])}" name="{_attr(name)}" time="0">'
        if weakest[g] == weakest[g]:  # JUnit's properties of a test case (its catches)
            head += f'<properties><property name="catches" value="{catch_text(weakest[g])}"/></properties>'
        text_g = "\n".join(body[lo:hi])
        verdict = WORST_FIRST[int(worst[g])]
        outcome = _OUTCOME.get(verdict)
        if outcome and verdict in (UNJUDGED, ONLY_A) and not strict:
            outcome = ("skipped", outcome[1])
        if outcome is None:
            cases.append(f"{head}<system-out>{text_g}</system-out></testcase>")
            kinds.append("passed")
            continue
        hit = [i for i in range(lo, hi) if verdicts[i] == verdict and rank[i] == worst[g]]
        if verdict == SLOWER:
            message = "regression: " + ", ".join(f"{what[i]} {change[i] * 100:+.1f}%" for i in hit)
        else:
            message = f"{verdict}: " + "; ".join(
                dict.fromkeys(f"{what[i]}: {notes[i]}" if len(hit) == 1 else notes[i] for i in hit)
            )
            if len(hit) > 1:
                message += f" ({', '.join(what[i] for i in hit)})"
        element, kind = outcome
        cases.append(f'{head}<{element} message="{_attr(message)}" type="{kind}">{text_g}</{element}></testcase>')
        kinds.append(element)
    return cases, kinds


def _row_stats(data: npt.NDArray[np.float64]) -> dict[str, npt.NDArray[np.float64]]:
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
    return {
        "min": data.min(axis=1),
        "max": data.max(axis=1),
        "mean": mean,
        "stddev": sd,
        "median": median,
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": (~inside).sum(axis=1),
        "stddev_outliers": (np.abs(data - mean[:, None]) > sd[:, None]).sum(axis=1),
        "ld15iqr": np.where(data >= low, data, np.inf).min(axis=1),
        "hd15iqr": np.where(data <= high, data, -np.inf).max(axis=1),
        "total": data.sum(axis=1),
    }


def pytest_benchmark(side: Side) -> bytes:
    """The run in pytest-benchmark's JSON layout: one benchmark per key with samples, its
    per-iteration times in seconds as the rounds. The rounds themselves ("data") are left out,
    as pytest-benchmark leaves them out of saved runs without --benchmark-save-data: a
    100,000-key run would write 120 MB. They are in samples.parquet and in the history."""
    import numpy as np
    import orjson

    rows = side.rows
    keys, configs = key_texts(rows).tolist(), key_texts(rows, sizes=False).tolist()
    params = records(rows[KEYS])
    extra = records(rows[list(METRICS)])
    groups = rows["workload"].astype(str).tolist()
    benches: list[tuple[int, dict[str, Any]]] = []
    for metric_name, (values, counts) in side.samples.items():
        coll = metric_name == "time_us"
        scale = 1e-6 if coll else 1e-3
        wanted = (rows["workload"] == COLLECTIVE_WORKLOAD).to_numpy() == coll
        for c in np.unique(counts[wanted & (counts > 0)]):
            idx = np.flatnonzero(wanted & (counts == c))
            st = _row_stats(values[idx, :c] * scale)
            st["ops"] = np.where(st["mean"] > 0, 1 / np.where(st["mean"] > 0, st["mean"], 1), 0.0)
            names = list(st) + ["rounds", "iterations", "outliers"]
            options = {
                "disable_gc": False,
                "timer": "perf_counter",
                "min_rounds": int(c),
                "max_time": 0,
                "min_time": 0,
                "warmup": False,
            }
            outliers = [f"{a};{b}" for a, b in zip(st["stddev_outliers"].tolist(), st["iqr_outliers"].tolist())]
            for i, values_i, out_i in zip(idx.tolist(), zip(*(v.tolist() for v in st.values())), outliers):
                benches.append(
                    (
                        i,
                        {
                            "group": groups[i],
                            "name": keys[i],
                            "fullname": f"bench::{metric_name}[{keys[i]}]",
                            "params": params[i],
                            "param": configs[i],
                            "extra_info": extra[i],
                            "options": options,
                            "stats": dict(zip(names, (*values_i, int(c), 1, out_i))),
                        },
                    )
                )
    benches.sort(key=lambda b: b[0])
    doc = {
        "machine_info": {
            "node": socket.gethostname(),
            "processor": platform.processor(),
            "machine": platform.machine(),
            "python_compiler": platform.python_compiler(),
            "python_implementation": platform.python_implementation(),
            "python_implementation_version": platform.python_version(),
            "python_version": platform.python_version(),
            "python_build": list(platform.python_build()),
            "release": platform.release(),
            "system": platform.system(),
            "cpu": {},
            "bench_environment": side.environment,
        },
        "commit_info": {
            "id": "unversioned",
            "time": None,
            "author_time": None,
            "dirty": False,
            "project": "bench",
            "branch": "(unknown)",
        },
        "benchmarks": [b for _, b in benches],
        "datetime": dt.datetime.now(dt.timezone.utc).isoformat(),
        "version": "4.0.0",
    }
    return orjson.dumps(doc) + b"\n"


def summary_line(cmp: Comparison) -> str:
    """What the gate found among the keys that gate, then what it found among those watched."""
    import numpy as np

    c, every = cmp.gate_counts(), cmp.counts()
    plural = lambda n, word: f"{n} {word}{'s' if n != 1 else ''}"  # noqa: E731
    mismatched = len(run_mismatches(cmp))
    t, gating = cmp.table, cmp.gating()
    noisy = int(
        (gating & (t["verdict"] == UNJUDGED).to_numpy(dtype=bool) & t["note"].fillna("").str.startswith(TOO_NOISY))
        .to_numpy(dtype=bool)
        .sum()
    )
    watched = int((~gating).sum())
    seen = {k: every[k] - c[k] for k in (SLOWER, UNJUDGED, ONLY_A)}
    return (
        f"{plural(c[SLOWER], 'regression')}, {plural(c[FAILED], 'failed key')}, {c[UNJUDGED]} cannot judge"
        + (f" ({noisy} {TOO_NOISY} {cmp.must_catch:.0%})" if noisy and cmp.must_catch is not None else "")
        + (f" ({RUN_TOO_NOISY})" if cmp.run_noise else "")
        + ", "
        + (f"{c[ONLY_A]} only in the baseline (never planned in the run), " if c[ONLY_A] else "")
        + f"{plural(c[FASTER], 'improvement')}, {c[SAME]} unchanged of {int(np.sum(gating))} "
        + ("compared" if cmp.gate_min_size is None else "gating")
        + (
            f"; {watched} watched below {format_size(cmp.gate_min_size)}: {seen[SLOWER]} slower, "
            f"{seen[UNJUDGED]} cannot judge" + (f", {seen[ONLY_A]} only in the baseline" if seen[ONLY_A] else "")
            if cmp.gate_min_size is not None
            else ""
        )
        + (f"; {plural(mismatched, 'job')} with a transport mismatch" if mismatched else "")
    )
