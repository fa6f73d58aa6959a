"""The gate's verdict on a run, and what the history keeps of it (docs/concepts/noise.md, "A failed night
never becomes a baseline").

`bench regress` writes gate.json beside its report: the run it judged (its plan's fingerprint),
the cluster and baseline it was judged against, its exit status, the keys that regressed or
failed, what it judged by (the baseline's method and K, the threshold, the provisional margin,
the version of these rules) and each key's band. `bench history add` stores that verdict with
the run:

    gate_runs    one row per judged run: its status, the baseline, what it was judged by, and
                 when someone accepted it (`bench history accept RUN --reason R`) and why
    gate_keys    the keys the gate rejected in it, each as the JSON list of its key columns
    gate_bands   each key's baseline value, band and value in the metric's unit, with its
                 verdict, test and catches: the smallest fall its verdict would have flagged
                 (as Bencher keeps a metric's limits beside it)

A baseline never draws on a rejected key of a run that was not accepted, nor on any key of a run
rejected whole (it failed for what it ran on, a transport mismatch, rather than for a key). So a
regression keeps failing, night after night, until it is fixed or accepted. Accepting a run says
that its level is its series' new normal: from then on, that series' baselines draw on that run
and the runs after it only; another series of the cluster is not moved. The tables are made by
the numbered migrations (store.py); a history whose runs were never judged has no verdicts, and
nothing is rejected.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.results import read_regular
from harness.analysis.compare import BY_RUNS, FAILED, REFERENCE, SLOWER, Comparison
from harness.analysis.sides import KEYS, METRICS
from harness.analysis.store import Connection, now
from harness.errors import HistoryError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd

FILE = "gate.json"
FORMAT = 3  # 1: no method, rules or bands; 2: no catches or must_catch (each read as such)
# The version of the gate's rules: how a baseline is drawn from the history and a key judged
# against it (history.baseline, compare.compare, docs/concepts/noise.md). A verdict stored under other
# rules was reached another way; raise it when they change.
RULES = 1
_BAND_COLUMNS = ("key", "metric", "baseline", "low", "high", "value", "verdict", "test", "catches")
FILE_LIMIT = 64 << 20  # bytes: a 100,000-key run whose every key regressed is about 12 MB
PASSED, REJECTED, UNJUDGED = "passed", "failed", "cannot judge"
_VERDICT_OF = {0: PASSED, 1: REJECTED, 3: UNJUDGED}  # by bench regress's exit status
WHOLE = "*"  # gate_keys' key of a run rejected whole
_INT_KEYS = frozenset({"nodes", "gpus_per_node", "size_bytes"})


def key_strings(df: pd.DataFrame) -> list[str]:
    """Each row's key as stored in gate_keys: the JSON list of its KEYS columns, numbers as
    integers and missing texts as "" (as compare.key_frame makes them joinable)."""
    cols = [
        per_value(df[k].fillna(0), lambda v: str(int(float(v))))
        if k in _INT_KEYS
        else per_value(df[k], lambda v: json.dumps(str(v)), missing='""')
        for k in KEYS
    ]
    # json.dumps(row, separators=(",", ":")) of each row
    return ["[" + ",".join(row) + "]" for row in zip(*cols)]


def per_value(column: pd.Series, encode: Callable[[Any], str], missing: str | None = None) -> list[str]:
    """`encode` of each row of a column of a few distinct values, called once per value;
    `missing`: what a missing value is (None: missing values are encoded as any other)."""
    import numpy as np
    import pandas as pd

    codes, uniques = pd.factorize(column, use_na_sentinel=missing is not None)  # missing: code -1
    encoded = [encode(v) for v in uniques] + ([missing] if missing is not None else [])
    return np.array(encoded, dtype=object)[codes].tolist()


def _numbers(values: npt.NDArray[np.float64]) -> list[float | None]:
    """Floats for JSON, None where not finite."""
    import numpy as np

    out: list[float | None] = np.asarray(values, dtype=float).tolist()
    for i in np.flatnonzero(~np.isfinite(values)):
        out[i] = None
    return out


def document(
    cmp: Comparison, run: str, cluster: str | None, baseline: str, status: int, method: str, k: int
) -> dict[str, Any]:
    """gate.json of a comparison by `bench regress` that ended with `status` (0, 1 or 3), its
    baseline drawn by `method` ("median", "last", ..., "reference") of `k` runs."""
    import numpy as np

    table = cmp.table
    every = key_strings(table)
    keys = sorted({k for k, bad in zip(every, table["verdict"].isin((SLOWER, FAILED)).to_numpy(dtype=bool)) if bad})
    a = table["a"].to_numpy(dtype=float, na_value=np.nan)
    bands = {
        "key": every,
        "metric": per_value(table["metric"], str),
        "baseline": _numbers(a),
        "low": _numbers(a * table["band_low"].to_numpy(dtype=float, na_value=np.nan)),
        "high": _numbers(a * table["band_high"].to_numpy(dtype=float, na_value=np.nan)),
        "value": _numbers(table["b"].to_numpy(dtype=float, na_value=np.nan)),
        "verdict": per_value(table["verdict"], str),
        "test": per_value(table["test"], str),
        "catches": _numbers(table["catches"].to_numpy(dtype=float, na_value=np.nan)),
    }
    return {
        "bench_gate": FORMAT,
        "run": run,
        "cluster": cluster,
        "baseline": baseline,
        "status": status,
        "verdict": _VERDICT_OF[status],
        # a run that failed with no key slower or failed failed for what it ran on (a transport
        # mismatch), and one noisier than its history was measured through the noise: none of
        # their keys can serve
        "rejected": [WHOLE] if (status == 1 and not keys) or cmp.run_noise else keys,
        "method": method,
        "k": k,
        "threshold": cmp.threshold,
        "margin": cmp.margin,
        "must_catch": cmp.must_catch,
        "rules": RULES,
        "comparison": cmp.method,
        "bands": bands,
    }


def encode(doc: dict[str, Any]) -> bytes:
    """gate.json's text: indented, but each list of the bands (an item per key compared, 100,000
    and more) on one line, written by orjson: json's indent takes its Python encoder, most of
    `bench regress` at 100,000 keys, and its C one is ten times orjson's time. orjson
    writes a float as the shortest text that reads back as the same double, as json does, in
    positional notation where json writes an exponent; non-ASCII text as UTF-8."""
    import orjson

    # a member indented as json.dumps(doc, indent=1) has it: JSON text holds no raw newline
    members = [
        f"{json.dumps(k)}: {json.dumps(v, indent=1).replace(chr(10), chr(10) + ' ')}".encode()
        for k, v in doc.items()
        if k != "bands"
    ]
    pieces = [b"{\n ", b",\n ".join(members)]
    if "bands" in doc:  # the bands' lists joined once with the rest: tens of MB at 100,000 keys, one copy
        lists = [json.dumps(k).encode() + b": " + orjson.dumps(v) for k, v in doc["bands"].items()]
        pieces += [b",\n " if members else b"", b'"bands": {\n  ']
        pieces += [piece for i, list_ in enumerate(lists) for piece in ((b",\n  ", list_) if i else (list_,))]
        pieces.append(b"\n }")
    return b"".join([*pieces, b"\n}\n"])


def read(path: Path, run: str, cluster: str) -> dict[str, Any] | None:
    """The verdict in `path` (a run's gate.json), checked to be of this run and of this cluster's
    history; None when there is none. A damaged one, or one of another run, is a HistoryError."""
    try:
        data = read_regular(path, FILE_LIMIT)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise HistoryError(f"{path}: cannot read the gate's verdict ({exc})") from None
    try:
        doc = json.loads(data)
        ok = (
            isinstance(doc, dict)
            and doc.get("bench_gate") in (1, 2, FORMAT)
            and isinstance(doc.get("run"), str)
            and (doc.get("cluster") is None or isinstance(doc.get("cluster"), str))
            and isinstance(doc.get("baseline"), str)
            and doc.get("status") in (0, 1, 3)
            and doc.get("verdict") in (PASSED, REJECTED, UNJUDGED)
            and isinstance(doc.get("rejected"), list)
            and all(isinstance(k, str) and len(k) <= 4096 for k in doc["rejected"])
            and (doc["bench_gate"] == 1 or _judged_by(doc))
        )
    except ValueError:
        ok = False
    if not ok:
        raise HistoryError(
            f"{path}: not a verdict bench regress wrote; judge the run again with `bench regress` "
            f"(it rewrites the file) before adding it"
        )
    if doc["run"] != run:
        raise HistoryError(
            f"{path}: the verdict of another run (its plan differs); judge this run again with `bench regress`"
        )
    if doc["cluster"] is not None and doc["cluster"] != cluster:
        raise HistoryError(
            f"{path}: the run was judged against the history of cluster {doc['cluster']!r}, not {cluster!r}; "
            f"add it to that cluster, or judge it against {cluster!r} first"
        )
    why = _disagreement(doc)
    if why:
        raise HistoryError(
            f"{path}: {why}: not a verdict bench regress wrote; judge the run again with `bench regress` "
            "before adding it"
        )
    if doc["cluster"] is None:  # judged against published figures: never a pass of this cluster's history
        doc = {**doc, "verdict": f"{doc['verdict']} against {REFERENCE} figures"}
    return doc


def _disagreement(doc: dict[str, Any]) -> str | None:
    """Where a verdict's fields disagree with each other, as document() never writes them: its
    word and status, the keys it rejected and the bands' verdicts, a band's verdict and the
    figures it was reached from, a cluster and its method. None where they agree."""
    import math

    if doc["verdict"] != _VERDICT_OF[doc["status"]]:
        return f"its verdict {doc['verdict']!r} is not what status {doc['status']} says"
    if doc["bench_gate"] == 1:
        return None
    if (doc["cluster"] is None) != (doc["method"] == REFERENCE):
        return f"method {doc['method']!r} with cluster {doc['cluster']!r}: only a reference verdict has no cluster"
    bands = doc["bands"]
    bad = sorted({k for k, v in zip(bands["key"], bands["verdict"]) if v in (SLOWER, FAILED)})
    if doc["rejected"] != bad and doc["rejected"] != [WHOLE]:
        return f"it rejects {len(doc['rejected'])} key(s) where its bands fail {len(bad)}"
    threshold = doc["threshold"]
    for key, name, base, low, high, value, verdict, test in zip(*(bands[c] for c in _BAND_COLUMNS[:-1])):
        if verdict in (SLOWER, FAILED, UNJUDGED) or test != BY_RUNS:
            continue
        metric = METRICS.get(name)
        if metric is None:
            return f"a band of metric {name!r}, which bench does not have"
        if not all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in (base, low, high, value)):
            continue
        worse = value < low if metric.higher_is_better else value > high
        perf = value / base if metric.higher_is_better else base / value
        if worse and perf < 1 - threshold:
            return f"key {key} is {verdict!r} though its value {value:g} lies {1 - perf:.0%} worse, beyond its band"
    return None


def _judged_by(doc: dict[str, Any]) -> bool:
    """Whether a format-2 verdict's method, rules and bands are what document() writes."""
    number = (int, float)
    bands = doc.get("bands")
    if not (
        isinstance(doc.get("method"), str)
        and isinstance(doc.get("k"), int)
        and all(isinstance(doc.get(f), number) for f in ("threshold", "margin"))
        and isinstance(doc.get("rules"), int)
        and isinstance(doc.get("comparison"), str)
        and (doc.get("must_catch") is None or isinstance(doc.get("must_catch"), number))
        and isinstance(bands, dict)
        and set(bands) == set(columns := _band_columns(doc))
        and all(isinstance(bands[c], list) for c in columns)
    ):
        return False
    n = len(bands["key"])
    texts = ("key", "metric", "verdict", "test")
    return all(len(bands[c]) == n for c in columns) and all(
        all(isinstance(v, str) and len(v) <= 4096 for v in bands[c])
        if c in texts
        else all(v is None or isinstance(v, number) for v in bands[c])
        for c in columns
    )


def _band_columns(doc: dict[str, Any]) -> tuple[str, ...]:
    """The bands' lists a verdict of its format holds: format 2 had no catches."""
    return _BAND_COLUMNS if doc.get("bench_gate") == FORMAT else _BAND_COLUMNS[:-1]


def store(con: Connection, run_id: int, doc: dict[str, Any]) -> None:
    """In add's transaction: the verdict of the run just inserted, with its bands."""
    con.execute(
        "INSERT INTO gate_runs (run_id, verdict, status, baseline, method, k, threshold, margin, rules, comparison, "
        "must_catch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            doc["verdict"],
            doc["status"],
            doc["baseline"],
            *(doc.get(f) for f in ("method", "k", "threshold", "margin", "rules", "comparison", "must_catch")),
        ),
    )
    con.executemany("INSERT INTO gate_keys VALUES (?, ?)", [(run_id, k) for k in doc["rejected"]])
    bands = doc.get("bands")
    if bands:
        n = len(bands["key"])
        columns = [bands[c] if c in bands else [None] * n for c in _BAND_COLUMNS]  # format 2: no catches
        con.executemany(
            f"INSERT INTO gate_bands (run_id, {', '.join(_BAND_COLUMNS)}) VALUES (?{', ?' * len(_BAND_COLUMNS)})",
            [(run_id, *row) for row in zip(*columns)],
        )


def accepted_since(con: Connection, run_ids: Sequence[int]) -> tuple[str, int] | None:
    """(created, id) of the newest accepted run among these, the runs that may serve a baseline
    (one series' runs, never the run under test): the baseline begins there. An acceptance in
    another series moves nothing here."""
    sql = (
        "SELECT r.created, r.id FROM runs r JOIN gate_runs g ON g.run_id = r.id "
        "WHERE g.accepted IS NOT NULL AND r.id IN ({marks})"
    )
    rows = _by_run(con, sql, run_ids)
    return max((str(created), int(run_id)) for created, run_id in rows) if rows else None


def _by_run(con: Connection, sql: str, run_ids: Sequence[int], first: Sequence[Any] = ()) -> list[tuple]:
    """The rows of `sql` (its "IN ({marks})" filled) for the runs given, asked 500 ids at a time
    (SQLite's bound on a statement's parameters)."""
    if not run_ids:
        return []
    rows: list[tuple] = []
    for start in range(0, len(run_ids), 500):
        part = list(run_ids[start : start + 500])
        rows += con.execute(sql.format(marks=", ".join("?" * len(part))), [*first, *part]).fetchall()
    return rows


def rejected(con: Connection, run_ids: Sequence[int]) -> dict[int, set[str]]:
    """Of these runs, those the gate rejected and nobody accepted: run id -> rejected keys
    (WHOLE among them for a run rejected whole)."""
    out: dict[int, set[str]] = {}
    sql = (
        "SELECT k.run_id, k.key FROM gate_keys k JOIN gate_runs g ON g.run_id = k.run_id "
        "WHERE g.accepted IS NULL AND k.run_id IN ({marks})"
    )
    for run_id, key in _by_run(con, sql, run_ids):
        out.setdefault(int(run_id), set()).add(str(key))
    return out


def kept(df: pd.DataFrame, keys: set[str]) -> npt.NDArray[np.bool_]:
    """Rows of df (one run's) that the gate did not reject."""
    import numpy as np

    if WHOLE in keys:
        return np.zeros(len(df), dtype=bool)
    return np.fromiter((k not in keys for k in key_strings(df)), dtype=bool, count=len(df))


def verdicts(con: Connection, run_ids: Iterable[int]) -> dict[int, tuple[str, int, str | None, str | None]]:
    """run id -> (verdict, rejected keys or -1 for a run rejected whole, accepted, reason), for
    `history list`."""
    sql = (
        "SELECT g.run_id, g.verdict, CASE WHEN EXISTS (SELECT 1 FROM gate_keys k WHERE k.run_id = g.run_id "
        "AND k.key = ?) THEN -1 ELSE (SELECT count(*) FROM gate_keys k WHERE k.run_id = g.run_id) END, "
        "g.accepted, g.reason FROM gate_runs g WHERE g.run_id IN ({marks})"
    )
    return {
        int(run_id): (str(verdict), int(n), accepted, reason)
        for run_id, verdict, n, accepted, reason in _by_run(con, sql, list(run_ids), [WHOLE])
    }


def accept(con: Connection, run_id: int, reason: str) -> None:
    """In a transaction: mark a run accepted, with the reason; a run never judged is given a
    verdict row saying so, so that the acceptance is kept."""
    found = con.execute("SELECT accepted FROM gate_runs WHERE run_id = ?", (run_id,)).fetchone()
    if found is None:
        con.execute(
            "INSERT INTO gate_runs (run_id, verdict, status, baseline) VALUES (?, 'not judged', -1, '-')", (run_id,)
        )
    con.execute("UPDATE gate_runs SET accepted = ?, reason = ? WHERE run_id = ?", (now(), reason, run_id))


def remove(con: Connection, run_id: int) -> None:
    con.execute("DELETE FROM gate_bands WHERE run_id = ?", (run_id,))
    con.execute("DELETE FROM gate_keys WHERE run_id = ?", (run_id,))
    con.execute("DELETE FROM gate_runs WHERE run_id = ?", (run_id,))
