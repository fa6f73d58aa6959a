"""`bench history copy FROM TO`: every run, figure, verdict, change point and node check of one
history into another, SQLite or PostgreSQL either way (docs/guides/fleet.md, "Moving a history").

Both histories are at this bench's schema. The copy is one transaction on TO, so a failure
leaves TO as it was. Ids are TO's own: a run gets the next id there, and what refers to it
(its data, points, verdict, bands, predictions, change points) is copied with the new id. A run or node check
is known by its fingerprint (its plan, or its check's): one TO holds already is not copied
again, and neither is anything that refers to it, so a second copy adds nothing. One TO holds
with other figures, cluster or label is refused, naming both, and nothing is copied.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.store import SCHEMA_VERSION, SQLITE, Connection, Location, session
from harness.errors import HistoryError

# Each stored thing: its table, and the tables that hang on it by (table, its reference column).
# The table names are these constants, never values from a history.
RUNS = ("runs", ("data", "points", "gate_runs", "gate_keys", "gate_bands", "predictions"), "run_id")
CHECKS = ("node_checks", ("node_figures",), "check_id")
CHANGE_POINTS = "change_points"  # refers to a run or a node check
_SAME = {"runs": ("payload", "cluster", "label"), "node_checks": ("cluster", "label", "named")}


@dataclass
class Copied:
    counts: dict[str, int] = field(default_factory=dict)  # table -> rows copied
    held: dict[str, int] = field(default_factory=dict)  # "runs"/"node_checks" -> there already

    def add(self, table: str, n: int = 1) -> None:
        self.counts[table] = self.counts.get(table, 0) + n


def _columns(con: Connection, table: str) -> list[str]:
    cur = con.execute(f"SELECT * FROM {table} WHERE 1 = 0")
    return [d[0] for d in cur.description]


_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")  # the names bench's migrations give columns


def _schema_columns(src: Connection, dst: Connection, table: str, source: Location) -> list[str]:
    """The columns of `table` as the target has them (bench's schema, made by its migrations),
    never as the source names them: a name from a file never reaches SQL. A source whose columns
    are not those is refused: a name is text for SQLite and a statement for PostgreSQL, whose
    comments nest where SQLite's end at the first */."""
    ours, theirs = _columns(dst, table), _columns(src, table)
    if sorted(theirs) != sorted(ours) or not all(_NAME.match(c) for c in ours):
        odd = [c for c in theirs if c not in ours] or [c for c in ours if c not in theirs]
        shown = ", ".join(repr(c[:60]) for c in odd[:3])
        raise HistoryError(
            f"history copy: table {table} of {source} has columns bench's schema {SCHEMA_VERSION} does not have or "
            f"lacks ({shown}); nothing copied. Copy from a history bench made"
        )
    return ours


def _rows(con: Connection, table: str, columns: list[str], where: str = "", params: tuple = ()) -> Iterator[tuple]:
    yield from con.execute(f"SELECT {', '.join(columns)} FROM {table}{where}", params)


def _insert(table: str, columns: list[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


def copy(source: Location, target: Location) -> Copied:
    """Copy `source` into `target`, in one transaction on the target."""
    if (source.kind, source.given) == (target.kind, target.given) or (
        source.kind == target.kind == SQLITE and source.path.resolve() == target.path.resolve()
    ):
        raise HistoryError(f"history copy: {source} is both FROM and TO; name two histories")
    done = Copied()
    with session(source) as src, session(target, create=True) as dst, dst.transaction():
        ids: dict[str, dict[int, int]] = {
            "runs": {},
            "node_checks": {},
        }  # source id -> target id, of what was copied now
        for table, dependents, ref in (RUNS, CHECKS):
            columns = _schema_columns(src, dst, table, source)
            kept = [c for c in columns if c != "id"]
            dep_columns = {d: _schema_columns(src, dst, d, source) for d in dependents}
            for row in list(_rows(src, table, columns, " ORDER BY id")):
                stored = dict(zip(columns, row))
                if _held(dst, table, stored, source, target):
                    done.held[table] = done.held.get(table, 0) + 1
                    continue
                (new_id,) = dst.execute(_insert(table, kept) + " RETURNING id", [stored[c] for c in kept]).fetchone()
                ids[table][stored["id"]] = new_id
                done.add(table)
                for dep, cols in dep_columns.items():
                    at = cols.index(ref)
                    rows = [
                        (*r[:at], new_id, *r[at + 1 :])
                        for r in _rows(src, dep, cols, f" WHERE {ref} = ?", (stored["id"],))
                    ]
                    dst.executemany(_insert(dep, cols), rows)
                    done.add(dep, len(rows))
        cols = _schema_columns(src, dst, CHANGE_POINTS, source)
        run_at, check_at = cols.index("run_id"), cols.index("check_id")
        rows = []
        for r in _rows(src, CHANGE_POINTS, cols):
            run, check = r[run_at], r[check_at]
            if (run is not None and run in ids["runs"]) or (check is not None and check in ids["node_checks"]):
                new = list(r)
                new[run_at] = ids["runs"].get(run) if run is not None else None
                new[check_at] = ids["node_checks"].get(check) if check is not None else None
                rows.append(tuple(new))
        dst.executemany(_insert(CHANGE_POINTS, cols), rows)
        done.add(CHANGE_POINTS, len(rows))
    return done


def _held(dst: Connection, table: str, stored: dict[str, Any], source: Location, target: Location) -> bool:
    """Whether the target holds this run (node check) already, the same; refused when it holds
    it with other figures, cluster or label."""
    same = _SAME[table]
    found = dst.execute(
        f"SELECT id, {', '.join(same)} FROM {table} WHERE fingerprint = ?", (stored["fingerprint"],)
    ).fetchone()
    if found is None:
        return False
    if tuple(found[1:]) == tuple(stored[c] for c in same):
        return True
    what = "run" if table == "runs" else "node check"
    raise HistoryError(
        f"history copy: {what} {stored['id']} of {source} (cluster {stored['cluster']}, label "
        f"{stored['label'] or '-'}) is in {target} as {what} {found[0]} with other "
        f"{'figures, ' if table == 'runs' else ''}cluster or label; nothing copied. Remove one of them "
        f"(`bench history remove`) and copy again"
    )
