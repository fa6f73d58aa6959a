"""`bench predict RUN --history DB --cluster NAME`: the run's collectives fitted together with what
the cluster's history measured at node counts the run did not (docs/concepts/predict.md, "From the
history").

A point is borrowed only where it is the run's own measurement taken elsewhere: the same series
(collective, group, GPUs per node, launcher, settings set), the same workload parameters and
settings hash, a message size within 1% below one the run measured (a collective rounds its
message down to a multiple of its ranks), a run of the same stack (analysis/series.py), and a node
count the run did not measure. Of several runs that measured a count, the newest serves. The
training model is the run's alone: the history keeps no step breakdown.

The borrowed points go into predict.json ("history"), so that `bench report` draws the same fit
without the history.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD
from harness.analysis import history, series
from harness.analysis.collective_fit import SERIES, plain
from harness.analysis.predict import STATED, stated_of
from harness.analysis.store import Location, session
from harness.errors import UsageError
from harness.run.rundir import COMPLETED

if TYPE_CHECKING:
    import pandas as pd

# predict.json's "history" rows: a borrowed point's columns, and the run it came from
COLUMNS = (*SERIES, "nodes", "size_bytes", "time_us", "busbw_gbps")
MOST_ROWS = 100_000  # what predict.json may carry: a history of a thousand nights' sizes


@dataclass(frozen=True)
class Borrowed:
    """The points taken from the history, and what predict.json and the terminal say of them."""

    rows: pd.DataFrame  # the summary's columns: workload, status, COLUMNS
    stated: dict[str, Any]  # predict.json's "history"


def borrow(db: Location, cluster: str, summary: pd.DataFrame, stack: dict[str, Any]) -> Borrowed:
    """The points of `cluster`'s runs on `stack` that extend the run's collective series (its
    `summary`) to node counts it did not measure. The run itself, where the history holds it,
    lends nothing: it measured no other count."""
    import pandas as pd

    found = history.entries(db, cluster)  # a cluster the history does not know is refused
    with session(db) as con:
        known = history.stacks(con, cluster)
    same = [e for e in reversed(found) if series.same(known.get(e.id, {}), stack)]
    wanted = _series(summary)
    taken: dict[tuple[Any, ...], set[int]] = {key: set(s["nodes"]) for key, s in wanted.items()}
    parts, runs = [], []
    for entry, rows in zip(same, history.usable_rows(db, same), strict=True):
        part = _matching(rows, wanted, taken)
        if not part.empty:
            parts.append(part)
            runs.append(
                {
                    "id": entry.id,
                    "label": entry.label,
                    "created": entry.created,
                    "nodes": sorted({int(n) for n in part["nodes"]}),
                }
            )
    stated: dict[str, Any] = {"db": str(db), "cluster": cluster, "runs": runs}
    if not runs:
        stated["note"] = (
            f"no run of the {len(found)} of cluster {cluster} on this run's stack measured its collectives, with "
            "its parameters and settings, at a node count it did not"
            if same or not found
            else f"none of the {len(found)} runs of cluster {cluster} ran on this run's stack (analysis/series.py)"
        )
    rows = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["workload", "status", *COLUMNS])
    stated["rows"] = [dict(zip(COLUMNS, plain(r), strict=True)) for r in rows[list(COLUMNS)].itertuples(index=False)]
    return Borrowed(rows, stated)


def _series(summary: pd.DataFrame) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Each collective series of the run: its key as the run names it, its parameters and
    settings hash (None where its rows disagree), the sizes and node counts it measured."""
    done = summary[(summary["workload"] == COLLECTIVE_WORKLOAD) & (summary["status"] == COMPLETED)]
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key, part in done.groupby(list(SERIES), sort=False, dropna=False):
        out[_key(key)] = {
            "key": tuple(plain(key)),
            "like": tuple(stated_of(part).values()),
            "sizes": sorted({int(s) for s in part["size_bytes"]}),
            "nodes": {int(n) for n in part["nodes"]},
        }
    return out


def _key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A series key as both sides can match it: no group is "" (the history's), GPUs a whole number."""
    collective, group, gpus, launcher, nccl = plain(key)
    group = "" if group is None or (isinstance(group, float) and math.isnan(group)) else str(group)
    return (str(collective), group, int(gpus), str(launcher), str(nccl))


def _matching(
    rows: pd.DataFrame, wanted: dict[tuple[Any, ...], dict[str, Any]], taken: dict[tuple[Any, ...], set[int]]
) -> pd.DataFrame:
    """One history run's rows that extend a wanted series to a node count none has given yet,
    in the run's own names and sizes; the counts they give are marked taken."""
    import pandas as pd

    coll = rows[(rows["workload"] == COLLECTIVE_WORKLOAD) & (rows["status"] == COMPLETED)]
    out = []
    for key, part in coll.groupby(list(SERIES), sort=False, dropna=False):
        want = wanted.get(_key(key))
        if want is None or None in want["like"]:
            continue
        alike = (part[list(STATED)].astype(str) == list(want["like"])).all(axis=1)
        new = part[alike & ~part["nodes"].astype(int).isin(taken[_key(key)])]
        sizes = [_named(int(s), want["sizes"]) for s in new["size_bytes"]]
        new = new[[s is not None for s in sizes]]
        if new.empty:
            continue
        frame = pd.DataFrame({c: [v] * len(new) for c, v in zip(SERIES, want["key"], strict=True)})
        frame["workload"], frame["status"] = COLLECTIVE_WORKLOAD, COMPLETED
        frame["nodes"] = new["nodes"].astype(int).to_numpy()
        frame["size_bytes"] = new["size_bytes"].astype(int).to_numpy()
        frame["time_us"] = new["time_us"].astype(float).to_numpy()
        frame["busbw_gbps"] = new["busbw_gbps"].astype(float).to_numpy()
        out.append(frame)
        taken[_key(key)] |= set(frame["nodes"])
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def _named(size: int, sizes: list[int]) -> int | None:
    """The run's size that `size` was asked as: within 1% below it, else None."""
    return next((s for s in sizes if s * 0.99 <= size <= s), None)


def read(data: dict[str, Any], path: str) -> Borrowed | None:
    """The borrowed points predict.json states ("history"), for the report to fit as predict
    did; None where it was not asked to borrow. A file that states them wrongly is a UsageError
    naming it."""
    import pandas as pd

    stated = data.get("history")
    if stated is None:
        return None
    rows = stated.get("rows") if isinstance(stated, dict) else None
    if not isinstance(rows, list) or len(rows) > MOST_ROWS:
        raise UsageError(f"{path}: history.rows must be a list of at most {MOST_ROWS:,} points")
    for row in rows:
        if not (
            isinstance(row, dict)
            and set(row) == set(COLUMNS)
            and all(isinstance(row[c], str) for c in ("collective", "launcher", "nccl_config"))
            and (row["group"] is None or isinstance(row["group"], str))
            and all(isinstance(row[c], int) and row[c] > 0 for c in ("gpus_per_node", "nodes", "size_bytes"))
            and all(isinstance(row[c], (int, float)) and math.isfinite(row[c]) for c in ("time_us", "busbw_gbps"))
        ):
            raise UsageError(f"{path}: history.rows holds {str(row)[:80]!r}, not a point bench predict borrowed")
    runs = stated.get("runs")
    if not isinstance(runs, list) or not all(_run(r) for r in runs):
        raise UsageError(f"{path}: history.runs must list the runs borrowed from, each an id, label, created and nodes")
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["workload"], frame["status"] = COLLECTIVE_WORKLOAD, COMPLETED
    return Borrowed(frame, stated)


def _run(r: object) -> bool:
    return (
        isinstance(r, dict)
        and isinstance(r.get("id"), int)
        and isinstance(r.get("created"), str)
        and (r.get("label") is None or isinstance(r.get("label"), str))
        and isinstance(r.get("nodes"), list)
        and all(isinstance(n, int) for n in r["nodes"])
    )
