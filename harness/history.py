"""The history: runs of each cluster in an SQLite database, and baselines drawn from it.

    runs      one row per added run: cluster, label, when it ran, its environment (JSON)
    data      the run's summary and samples, as Parquet (only the columns comparisons read)
    points    a few key figures per run, for `history plot`: busbw at the largest message
              size per node count, images/s per GPU per training workload

Listing, baseline lookup and plotting read `runs` and `points` only, through indexes, so they
stay fast however many runs are stored; a comparison loads the Parquet of the runs it needs.
A run is identified by a hash of its plan.json (the sweep, the matrix and the time it was
planned): adding the same run twice is refused, whatever its path or label.
"""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .compare import REQUIRED, DataError, Side, read_tables, records, side_from_tables
from .rundir import COMPLETED, RunDir

DEFAULT_DB = Path("results") / "history.sqlite"
DB_VERSION = 1
BUSY_TIMEOUT_S = 5.0
SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    fingerprint TEXT NOT NULL UNIQUE,
    cluster TEXT NOT NULL,
    label TEXT,
    path TEXT NOT NULL,
    sweep TEXT,
    created TEXT NOT NULL,
    added TEXT NOT NULL,
    rows INTEGER NOT NULL,
    environment TEXT NOT NULL
);
CREATE INDEX runs_by_cluster ON runs (cluster, created);
CREATE TABLE data (run_id INTEGER PRIMARY KEY REFERENCES runs (id), summary BLOB NOT NULL, samples BLOB);
CREATE TABLE points (run_id INTEGER NOT NULL REFERENCES runs (id), series TEXT NOT NULL, metric TEXT NOT NULL,
                     value REAL NOT NULL);
CREATE INDEX points_by_run ON points (run_id);
"""


class HistoryError(DataError):
    """An unusable history database: not ours, of another version, locked, or without the run asked for."""


@dataclass(frozen=True)
class Entry:
    id: int
    cluster: str
    label: str | None
    path: str
    sweep: str | None
    created: str
    added: str
    rows: int


_ENTRY = "SELECT id, cluster, label, path, sweep, created, added, rows FROM runs"


def _connect(db: Path, create: bool) -> sqlite3.Connection:
    if not create and not db.exists():
        raise HistoryError(f"{db}: no history database; add a run first with `bench history add RUN --cluster NAME`")
    if create:
        db.parent.mkdir(parents=True, exist_ok=True)
    try:
        con = sqlite3.connect(db, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        con.execute("PRAGMA foreign_keys = ON")
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.OperationalError as exc:
        raise _locked(db, exc) from None
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{db}: not a bench history database ({exc})") from None
    if not tables:
        if not create:
            con.close()
            raise HistoryError(f"{db}: the history is empty; add a run first with `bench history add RUN --cluster NAME`")
        return con
    if "meta" not in tables or "runs" not in tables:
        con.close()
        raise HistoryError(f"{db}: not a bench history database (tables: {', '.join(sorted(tables))})")
    row = con.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
    if not row or row[0] != str(DB_VERSION):
        con.close()
        raise HistoryError(f"{db}: history version {row[0] if row else None}, this bench reads {DB_VERSION}")
    return con


def _locked(db: Path, exc: sqlite3.OperationalError) -> HistoryError:
    if "locked" in str(exc) or "busy" in str(exc):
        return HistoryError(f"{db}: the history database is locked by another process (waited {BUSY_TIMEOUT_S:.0f} s); "
                            f"try again when it is done")
    return HistoryError(f"{db}: {exc}")


def fingerprint(run: RunDir) -> str:
    return hashlib.sha256(run.plan_file.read_bytes()).hexdigest()


def _parquet(table: Any) -> bytes:
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def _points(rows: Any) -> list[tuple[str, str, float]]:
    """The key figures of a run (completed rows): busbw at the largest size per collective,
    node count, GPUs per node, launcher and settings set; images/s per GPU per training row."""
    out: list[tuple[str, str, float]] = []
    coll = rows[(rows["workload"] == "allreduce") & (rows["busbw_gbps"] > 0)]
    if len(coll):
        largest = coll.loc[coll.groupby(["collective", "nodes", "gpus_per_node", "launcher", "nccl_config"])["size_bytes"].idxmax()]
        for r in records(largest):
            out.append((f"{r['collective']} {r['nodes']}x{r['gpus_per_node']} {r['launcher']} {r['nccl_config']}",
                        "busbw_gbps", float(r["busbw_gbps"])))
    train = rows[(rows["workload"] != "allreduce") & (rows["images_per_s_per_gpu"] > 0)]
    for r in records(train):
        out.append((f"{r['workload']}-{r['scaling']} {r['nodes']}x{r['gpus_per_node']} {r['launcher']} {r['nccl_config']}",
                    "images_per_s_per_gpu", float(r["images_per_s_per_gpu"])))
    return out


def add(db: Path, path: str | Path, cluster: str, label: str | None = None) -> Entry:
    """Store a run; everything is checked before the one transaction that writes it."""
    from .collect import run_facts, to_frame

    if not cluster.strip():
        raise HistoryError("--cluster must name the cluster, found an empty name")
    run = RunDir(path)
    summary, samples = read_tables(run)
    plan = run.read_plan()
    kept = summary.select(REQUIRED).replace_schema_metadata(summary.schema.metadata)
    rows = to_frame(kept)
    done = rows["status"] == COMPLETED
    if not done.any():
        raise DataError(f"{run.path}: no completed row in the summary; nothing to add")
    env, _ = run_facts(summary)
    points = _points(rows[done])
    blob = _parquet(kept)
    sblob = _parquet(samples) if samples is not None else None
    fp = fingerprint(run)
    created = plan.get("created") or ""
    with closing(_connect(db, create=True)) as con:
        try:
            con.execute("BEGIN IMMEDIATE")
            try:
                if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone():
                    for statement in filter(str.strip, SCHEMA.split(";")):
                        con.execute(statement)
                    con.execute("INSERT INTO meta VALUES ('version', ?)", (str(DB_VERSION),))
                dup = con.execute("SELECT id, cluster, label, path FROM runs WHERE fingerprint = ?", (fp,)).fetchone()
                if dup:
                    raise HistoryError(f"{run.path}: already in the history as run {dup[0]} "
                                       f"(cluster {dup[1]}, label {dup[2] or '-'}, added from {dup[3]})")
                cur = con.execute(
                    "INSERT INTO runs (fingerprint, cluster, label, path, sweep, created, added, rows, environment) "
                    "VALUES (?, ?, ?, ?, ?, ?, datetime('now'), ?, ?)",
                    (fp, cluster, label, str(run.path.resolve()), (plan.get("sweep") or {}).get("name"), created,
                     len(rows), json.dumps(env)))
                run_id = cur.lastrowid
                con.execute("INSERT INTO data VALUES (?, ?, ?)", (run_id, blob, sblob))
                con.executemany("INSERT INTO points VALUES (?, ?, ?, ?)", [(run_id, *p) for p in points])
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            return Entry(*con.execute(_ENTRY + " WHERE id = ?", (run_id,)).fetchone())
        except sqlite3.OperationalError as exc:
            raise _locked(db, exc) from None


def entries(db: Path, cluster: str | None = None) -> list[Entry]:
    with closing(_connect(db, create=False)) as con:
        try:
            cur = con.execute(_ENTRY + " WHERE cluster = ? ORDER BY created, id" if cluster
                              else _ENTRY + " ORDER BY cluster, created, id", (cluster,) if cluster else ())
            return [Entry(*r) for r in cur]
        except sqlite3.OperationalError as exc:
            raise _locked(db, exc) from None


def points(db: Path, cluster: str) -> Any:
    """DataFrame of (id, label, created, series, metric, value) for every run of a cluster."""
    import pandas as pd

    with closing(_connect(db, create=False)) as con:
        try:
            return pd.read_sql_query(
                "SELECT r.id, r.label, r.created, p.series, p.metric, p.value FROM runs r JOIN points p "
                "ON p.run_id = r.id WHERE r.cluster = ? ORDER BY r.created, r.id", con, params=(cluster,))
        except sqlite3.OperationalError as exc:
            raise _locked(db, exc) from None


def _load(con: sqlite3.Connection, entry: Entry) -> Side:
    import pyarrow.parquet as pq

    summary_blob, samples_blob, env = con.execute(
        "SELECT d.summary, d.samples, r.environment FROM data d JOIN runs r ON r.id = d.run_id WHERE d.run_id = ?",
        (entry.id,)).fetchone()
    summary = pq.read_table(io.BytesIO(summary_blob))
    samples = pq.read_table(io.BytesIO(samples_blob)) if samples_blob else None
    return side_from_tables(summary, samples, entry.label or f"run {entry.id}", f"history run {entry.id} ({entry.path})",
                            json.loads(env))


BASELINE_HELP = "last | best | label:L | median:K"


def baseline(db: Path, cluster: str, how: str, exclude: str | None = None) -> Side:
    """The baseline a new run is judged against, from the cluster's runs in the history.

    last      the most recent run
    best      per key, the run with the best value (busbw, images/s) and its samples
    label:L   the most recent run labelled L
    median:K  per key, the median of the last K runs' values, their samples pooled

    `exclude`: the fingerprint of the run under test, never its own baseline."""
    kind, _, arg = how.partition(":")
    if kind not in ("last", "best", "label", "median") or (kind in ("label", "median")) != bool(arg):
        raise HistoryError(f"--baseline {how!r} is not valid; valid: {BASELINE_HELP}")
    if kind == "median" and not (arg.isdigit() and int(arg) >= 1):
        raise HistoryError(f"--baseline {how!r}: K must be a whole number of runs, at least 1")
    with closing(_connect(db, create=False)) as con:
        try:
            q = (_ENTRY + " WHERE cluster = ?"
                 + (" AND fingerprint != ?" if exclude else "")
                 + (" AND label = ?" if kind == "label" else "") + " ORDER BY created DESC, id DESC")
            params = [cluster] + ([exclude] if exclude else []) + ([arg] if kind == "label" else [])
            found = [Entry(*r) for r in con.execute(q, params)]
            if not found and exclude and con.execute("SELECT 1 FROM runs WHERE cluster = ? AND fingerprint = ?",
                                                     (cluster, exclude)).fetchone() and kind != "label":
                raise HistoryError(f"{db}: the only run of cluster {cluster!r} in the history is the run under test; "
                                   f"add an earlier run as baseline")
            if not found:
                clusters = [r[0] for r in con.execute("SELECT DISTINCT cluster FROM runs ORDER BY 1")]
                what = f"labelled {arg!r} " if kind == "label" else ""
                raise HistoryError(f"{db}: no run {what}of cluster {cluster!r} to use as baseline "
                                   f"(clusters in the history: {', '.join(clusters) or 'none'})")
            if kind in ("last", "label"):
                return _load(con, found[0])
            chosen = found[: int(arg)] if kind == "median" else found
            sides = [_load(con, e) for e in chosen]
        except sqlite3.OperationalError as exc:
            raise _locked(db, exc) from None
    return _combine(sides, kind, how)


def _combine(sides: list[Side], kind: str, how: str) -> Side:
    """One Side from several: per key the median value with the samples pooled, or the values
    and samples of the run with the best value (busbw for collectives, images/s for training)."""
    import numpy as np
    import pandas as pd

    from .compare import KEYS, METRICS
    from .stats import padded

    if len(sides) == 1:
        s = sides[0]
        s.label = f"{how} ({s.label})"
        return s
    members = pd.concat([s.rows.assign(_side=k, _row=np.arange(len(s.rows))) for k, s in enumerate(sides)],
                        ignore_index=True)
    members["_score"] = members["busbw_gbps"].where(members["workload"] == "allreduce", members["images_per_s"])
    if kind == "best":
        chosen = members.sort_values("_score", ascending=False, na_position="last", kind="stable")
        chosen = chosen.drop_duplicates(KEYS).reset_index(drop=True)
        rows = chosen.drop(columns=["_side", "_row", "_score"])
        picks = [[(sd, r)] for sd, r in zip(chosen["_side"], chosen["_row"])]
    else:
        groups = members.groupby(KEYS, sort=False, dropna=False)
        rows = groups.head(1).drop(columns=list(METRICS) + ["_side", "_row", "_score"]).reset_index(drop=True)
        rows = rows.merge(groups[list(METRICS)].median().reset_index(), on=KEYS, how="left")
        keyed = members.merge(rows[KEYS].assign(_k=np.arange(len(rows))), on=KEYS, how="left")
        picks = [[] for _ in range(len(rows))]
        for k, sd, r in zip(keyed["_k"], keyed["_side"], keyed["_row"]):
            picks[k].append((sd, r))
    samples: dict[str, tuple[Any, Any]] = {}
    for sm in {m for s in sides for m in s.samples}:
        lists = []
        for members_of_key in picks:
            values: list[float] = []
            for sd, r in members_of_key:
                if sm in sides[sd].samples:
                    vals, counts = sides[sd].samples[sm]
                    values.extend(vals[r, :counts[r]].tolist())
            lists.append(values)
        samples[sm] = padded(lists)
    label = f"{how} of {len(sides)} runs"
    return Side(label=label, source=f"history ({label})", rows=rows.reset_index(drop=True), samples=samples,
                environment=sides[0].environment)
