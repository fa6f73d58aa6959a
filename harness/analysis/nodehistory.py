"""Node checks in the history database (docs/guides/nodes.md), beside the runs of sweeps:

    node_checks    one row per added check: cluster, label, when it ran, its nodes, what it named
    node_figures   its figures: per node ("node bnode3") its matmul, its all-reduce and, of each
                   pair figure, the median over its partners; per pair ("pair bnode3 bnode5")
                   each pair figure; a failed step's figure is NULL. A soaked check adds each
                   pair figure's drift over the soak (metric "busbw_gbps_soak_drift"), per link
                   and, the median of its links', per node

`bench history changes --nodes` searches each (metric, node or pair) series for change points
as it does a sweep's keys, so a node that degrades over weeks is seen. The tables are made by the
numbered migrations (store.py); a check is identified by a hash of its plan and record, so the
same check added again adds nothing (add says why it refuses another cluster or label).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.results import read_regular
from harness.analysis.store import (
    FIRST_YEAR,
    LAST_YEAR,
    SQLITE,
    Connection,
    Location,
    admit_cluster,
    located,
    now,
    run_time,
    session,
)
from harness.errors import HistoryError
from harness.nodes.driver import FOLDER, PLAN, RECORD, read_record
from harness.nodes.rounds import METRICS
from harness.nodes.verdict import Verdict
from harness.run.rundir import RUN_FILE_LIMIT

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class NodeEntry:
    id: int
    cluster: str
    label: str | None
    path: str
    created: str
    added: str
    nodes: int
    named: str  # the drain list and the links named, when it was added
    existing: bool = False  # add found this check there already, with its cluster and label: nothing added


_ENTRY = "SELECT id, cluster, label, path, created, added, nodes, named FROM node_checks"


def is_check(path: Path) -> bool:
    """Whether `path` holds a node check (check.json) rather than a sweep (plan.json)."""
    return (path / PLAN).is_file() and not (path / "plan.json").exists()


# The check's own row among its figures: the median seconds of its rounds, which the next check's
# estimate takes (`bench nodes`, docs/guides/nodes.md "Cost"); not a metric, so no change is searched in it.
ROUND_S = ("check", "round_s")
# A pair figure's drift over the soak (harness/nodes/soak.py), stored as a metric of its own: a link
# that warms worse check after check is a series for `bench history changes --nodes` too.
DRIFT = "_soak_drift"
SERIES_METRICS = (*METRICS, *(m + DRIFT for m, (_, _, kind) in METRICS.items() if kind == "pair"))


def rows(v: Verdict) -> list[tuple[str, str, float | None]]:
    """(series, metric, value) of every figure of a check's verdict: per node its own figures
    and its score (median over its partners) of each pair figure, per pair each pair figure."""
    out: list[tuple[str, str, float | None]] = []
    for by_node in (v.node_figures, v.node_scores):
        for metric, figures in by_node.items():
            out += [(f"node {n}", metric, x) for n, x in figures.items()]
    for metric, by_pair in v.pair_figures.items():
        out += [(f"pair {a} {b}", metric, x) for (a, b), x in by_pair.items()]
    for metric, links in v.soak.items():
        out += [(f"pair {a} {b}", metric + DRIFT, drift) for (a, b), (_, _, drift) in links.items()]
        drifts: dict[str, list[float]] = {}
        for pair, (_, _, drift) in links.items():
            for n in pair:
                drifts.setdefault(n, []).append(drift)
        out += [(f"node {n}", metric + DRIFT, statistics.median(d)) for n, d in drifts.items()]
    return out


def add(
    db: Location,
    path: Path,
    cluster: str,
    label: str | None,
    v: Verdict,
    *,
    create: bool = False,
    new_cluster: bool = False,
) -> NodeEntry:
    """Store the check in `path`, judged as `v`: its figures, and what it named. A check is
    known by its plan and its steps' record, figures and all: the same check again, with the
    same cluster and label, adds nothing (the entry says so); under another cluster or label it
    is refused. Two writers adding one check at once: the second finds the first's row. The
    history and the cluster are made or started only as history.add makes them."""
    named = "; ".join(
        [
            *([f"drain {v.drain}"] if v.drain else []),
            *(f"link {a}-{b}" for a, b in (f.nodes for f in v.links)),
            *(f"uplink {'-'.join(f.nodes)}" for f in v.uplinks),
            *([f"not judged: {v.unjudged[0]}"] if v.unjudged else []),  # never stored as clean
        ]
    )
    digest = hashlib.sha256()
    for part in (path / PLAN, path / FOLDER / RECORD):
        digest.update(read_regular(part, RUN_FILE_LIMIT))
    fp = digest.hexdigest()
    created = _created(path)
    round_s = _median_round_s(path)
    with session(db, create=create) as con:
        with con.transaction():
            held = _held(con, fp, cluster, label, path)
            if held is not None:
                return held
            admit_cluster(con, cluster, "node_checks", new_cluster, create)
            found = con.execute(
                "INSERT INTO node_checks (fingerprint, cluster, label, path, created, added, nodes, named) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (fingerprint) DO NOTHING RETURNING id",
                (fp, cluster, label, str(path.resolve()), created, now(), len(v.names), named),
            ).fetchone()
            if found is None:  # another writer stored it since this one looked (PostgreSQL)
                held = _held(con, fp, cluster, label, path)
                assert held is not None, "a conflict on the fingerprint leaves its row"
                return held
            (check_id,) = found
            figures = rows(v) + [(*ROUND_S, round_s)] if round_s else rows(v)
            con.executemany("INSERT INTO node_figures VALUES (?, ?, ?, ?)", [(check_id, *r) for r in figures])
        return NodeEntry(*con.execute(_ENTRY + " WHERE id = ?", (check_id,)).fetchone())


def _held(con: Connection, fp: str, cluster: str, label: str | None, path: Path) -> NodeEntry | None:
    """The stored check of this identity, marked existing, if it has this cluster and label;
    None if there is none; refused if it has another cluster or label."""
    row = con.execute(_ENTRY + " WHERE fingerprint = ?", (fp,)).fetchone()
    if row is None:
        return None
    entry = replace(NodeEntry(*row), existing=True)
    if (entry.cluster, entry.label) != (cluster, label):
        raise HistoryError(
            f"{path}: already in the history as node check {entry.id} (cluster {entry.cluster}, label "
            f"{entry.label or '-'}, added from {entry.path}); this one has cluster {cluster}, label {label or '-'}"
        )
    return entry


def _median_round_s(path: Path) -> float | None:
    """The median seconds of a check's rounds that ran, from its record (steps.json: the rounds'
    step records, which the verdict has read, are not read again); None without one."""
    try:
        seconds = read_record(path / FOLDER, with_rounds=False)["round_s"]
    except ValueError:
        return None
    return float(statistics.median(seconds)) if seconds else None


def last_round_s(db: Location, cluster: str) -> tuple[float, NodeEntry] | None:
    """The median round of the newest check of `cluster` that recorded one, and that check;
    None when the history holds none (or is an SQLite file that does not exist: nothing is
    created to say so)."""
    db = located(db)
    if db.kind == SQLITE and not db.path.is_file():
        return None
    with session(db) as con:
        row = con.execute(
            "SELECT f.value, c.id FROM node_figures f JOIN node_checks c ON c.id = f.check_id "
            "WHERE c.cluster = ? AND f.series = ? AND f.metric = ? AND f.value > 0 "
            "ORDER BY c.created DESC, c.id DESC LIMIT 1",
            (cluster, *ROUND_S),
        ).fetchone()
        if row is None:
            return None
        return float(row[0]), NodeEntry(*con.execute(_ENTRY + " WHERE id = ?", (row[1],)).fetchone())


def _created(path: Path) -> str:
    """When the check ran: its record's time, as the file system keeps it (ISO 8601, UTC)."""
    record = path / FOLDER / RECORD
    stamp = record.stat().st_mtime
    try:
        created = dt.datetime.fromtimestamp(stamp, dt.timezone.utc).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        created = ""
    if run_time(created) is None:
        raise HistoryError(
            f"{record}: modified at a time outside years {FIRST_YEAR}-{LAST_YEAR}; "
            "the history orders checks by it (touch the file to date it now)"
        )
    return created


def entries(db: Location, cluster: str | None = None) -> list[NodeEntry]:
    """The node checks of the history, or of `cluster`, which it must know (as history.entries)."""
    with session(db) as con:
        if cluster:
            admit_cluster(con, cluster, "node_checks", new=False, create=False)
        where, args = (" WHERE cluster = ?", (cluster,)) if cluster else ("", ())
        return [NodeEntry(*r) for r in con.execute(_ENTRY + where + " ORDER BY created, id", args)]


def remove(db: Location, check_id: int) -> NodeEntry:
    with session(db) as con:
        row = con.execute(_ENTRY + " WHERE id = ?", (check_id,)).fetchone()
        if not row:
            raise HistoryError(f"{db}: no node check {check_id}; `bench history list` shows the ids")
        with con.transaction():
            con.execute("DELETE FROM change_points WHERE check_id = ?", (check_id,))
            con.execute("DELETE FROM node_figures WHERE check_id = ?", (check_id,))
            con.execute("DELETE FROM node_checks WHERE id = ?", (check_id,))
        return NodeEntry(*row)


def series(db: Location, cluster: str) -> tuple[list[NodeEntry], pd.DataFrame]:
    """(the cluster's checks oldest first, DataFrame of metric, key, entry, value): each
    measured figure of each node and pair, by the index of its check in the list."""
    import pandas as pd

    found = entries(db, cluster)
    if not found:
        raise HistoryError(f"{db}: no node check of cluster {cluster!r}; add one with `bench history add DIR`")
    index = {e.id: i for i, e in enumerate(found)}
    with session(db) as con:
        rows = con.execute(
            "SELECT check_id, series, metric, value FROM node_figures WHERE check_id IN "
            "(SELECT id FROM node_checks WHERE cluster = ?) AND (value IS NULL OR value > 0)",
            (cluster,),
        ).fetchall()
    # a figure is a number or NULL (a failed step); anything else is damage, named with its check
    for check_id, key, metric, value in rows:
        if not (value is None or (isinstance(value, (int, float)) and value < float("inf"))):
            raise HistoryError(
                f"{db}: node check {check_id} is damaged ({metric} of {key!r:.60} is {value!r:.40}, not a number); "
                f"remove it with `bench history remove {check_id} --nodes`"
            )
    rows = [r for r in rows if r[3] is not None]
    frame = pd.DataFrame(rows, columns=["check", "key", "metric", "value"])
    frame["entry"] = frame["check"].map(index)
    return found, frame[frame["metric"].isin(SERIES_METRICS)][["metric", "key", "entry", "value"]]


def metric_label(metric: str) -> str:
    if metric.endswith(DRIFT):
        return f"{METRICS[metric.removesuffix(DRIFT)][0]}, its soak's end over its start"
    return METRICS[metric][0]
