"""A history as the dashboard shows it (present/dashboard.py, docs/guides/dashboard.md): each cluster's
nights with the gate's verdict on them, each key's series of figures and bands as the gate
judged them, the change points `history changes --store` kept, and the node checks with their
figures and drain lists. Read from either backend in one pass per cluster.

The series are the gate's: `bench regress` stores, with its verdict, every key it judged with
the band it judged it against (gate_bands). A night added without `bench regress` (the nightly
recipe's first, a run added by hand) has no band and no verdict: its figures are read from its
stored summary, as the gate would have taken them, and drawn as not judged.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD, UNITS
from harness.analysis import gate, history
from harness.analysis.compare import FAILED, ORDER, SAME, SLOWER, UNJUDGED, WORST_FIRST
from harness.analysis.gate import PASSED, REJECTED
from harness.analysis.nodehistory import NodeEntry, entries
from harness.analysis.sides import DEFAULT_METRICS, KEYS, METRICS, key_texts
from harness.analysis.store import Location, run_time, session
from harness.config.hostlists import expand_hostlist
from harness.errors import HistoryError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# The key groups of the index, in its order. Collectives by the regime of their message size:
# small messages are latency's, large ones bandwidth's; where they meet depends on the machine
# (NCCL picks its protocol per size from its own model), so the boundaries are bench's choice
# (docs/guides/dashboard.md, "What it holds").
SMALL, LARGE = 64 << 10, 16 << 20
GROUPS = (
    "collectives < 64 KiB",
    "collectives 64 KiB to 16 MiB",
    "collectives ≥ 16 MiB",
    "training",
    "transformer",
    "node check",
)
NODE_GROUP = GROUPS[-1]
NOT_JUDGED = "not judged"  # a night added without `bench regress`
# The verdicts of a key on a night, worst first, and the code each is stored as here
CODES = (*WORST_FIRST, NOT_JUDGED)


def group_of(key: dict[str, Any]) -> str:
    if key["workload"] == COLLECTIVE_WORKLOAD:
        size = key["size_bytes"]
        return GROUPS[0] if size < SMALL else GROUPS[1] if size < LARGE else GROUPS[2]
    return GROUPS[4] if UNITS.get(key["workload"]) == "tokens" else GROUPS[3]


@dataclass(frozen=True)
class Night:
    """A run of a cluster: when it ran, and the gate's verdict on it (None: never judged)."""

    run: int
    label: str | None
    when: str  # ISO 8601 as recorded
    day: float  # days since 1970-01-01 UTC: where it sits on a time axis
    gate: str | None
    accepted: str | None
    failed_rows: int

    @property
    def date(self) -> str:
        return date_of(self.day)


@dataclass
class Series:
    """One key and metric of one cluster over its judged nights."""

    key: dict[str, Any]  # the KEYS columns
    text: str  # the key in words (sides.key_texts)
    metric: str
    group: str
    at: npt.NDArray[np.intp]  # index of each point's night in Cluster.nights
    value: npt.NDArray[np.float64]  # NaN: no figure (a failed key)
    low: npt.NDArray[np.float64]  # the band, NaN where there was none
    high: npt.NDArray[np.float64]
    verdict: npt.NDArray[np.int8]  # codes into CODES
    catches: npt.NDArray[np.float64]  # the smallest fall its verdict would have flagged, NaN: not said

    @property
    def last(self) -> str:
        return CODES[int(self.verdict[-1])]


@dataclass(frozen=True)
class Change:
    """A stored change point (analysis/changes.py): at `at`, the index of its night or check."""

    metric: str
    key: str
    at: int
    before: float
    after: float
    change: float


@dataclass
class Checks:
    """A cluster's node checks, oldest first, and their figures: (check index, node or pair,
    metric, value) with the node's or pair's name as the check stored it."""

    entries: list[NodeEntry]
    days: list[float]
    figures: list[tuple[int, str, str, float]]
    changes: list[Change]

    def drained(self, i: int) -> list[str]:
        """The nodes check `i` named to drain, expanded from its hostlist."""
        for part in self.entries[i].named.split("; "):
            if part.startswith("drain "):
                try:
                    return expand_hostlist(part[len("drain ") :])
                except ValueError:
                    return [part[len("drain ") :]]
        return []

    def verdict(self, i: int) -> str:
        """Failed where check `i` named a node, link or uplink, cannot judge where part of it
        could not be judged (nodehistory.add writes these parts), else unchanged."""
        parts = self.entries[i].named.split("; ")
        if any(p.startswith(("drain ", "link ", "uplink ")) for p in parts):
            return FAILED
        return UNJUDGED if any(p.startswith("not judged") for p in parts) else SAME

    def first_named(self) -> list[tuple[str, int]]:
        """The latest check's drain list, each node with the check that began its present
        streak of being named (the night it was first named since it was last clean)."""
        if not self.entries:
            return []
        last = len(self.entries) - 1
        named = [set(self.drained(i)) for i in range(last + 1)]
        out = []
        for node in self.drained(last):
            i = last
            while i > 0 and node in named[i - 1]:
                i -= 1
            out.append((node, i))
        return out


@dataclass
class Cluster:
    name: str
    nights: list[Night]
    series: list[Series] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    checks: Checks | None = None

    def last_judged(self) -> int | None:
        """The index of the newest night with figures (judged, or read from its summary), None
        when none has."""
        at = [int(s.at[-1]) for s in self.series if len(s.at)]
        return max(at) if at else None

    def cell(self, group: str) -> tuple[str, int | None]:
        """The group's verdict on the cluster's last judged night (its worst key's), and that
        night's index; a node check's for the node check group (its index among the checks).
        None: the cluster has nothing of the group."""
        if group == NODE_GROUP:
            if not self.checks or not self.checks.entries:
                return "", None
            last = len(self.checks.entries) - 1
            return self.checks.verdict(last), last
        night = self.last_judged()
        found = [s for s in self.series if s.group == group]
        if night is None or not found:
            return "", None
        if self.nights[night].gate is None:
            return NOT_JUDGED, night
        verdicts = [CODES[int(s.verdict[-1])] for s in found if int(s.at[-1]) == night]
        # a key of the group the last night did not judge: it was not planned, or it failed whole
        return (min(verdicts, key=rank) if verdicts else UNJUDGED), night


def rank(verdict: str) -> int:
    """Severity, worst first: the gate's verdicts, then a night never judged, then nothing."""
    return ORDER.get(verdict, len(ORDER) if verdict == NOT_JUDGED else len(ORDER) + 1)


def _day(when: str, added: str) -> float:
    """Days since the epoch of when a run ran (as the Grafana views take it: the plan's time,
    else when it was added, which the history keeps in UTC); a history written before times were
    checked on adding may hold anything (store.run_time)."""
    for text in (when, str(added).replace(" ", "T") + "+00:00"):
        t = run_time(text)
        if t is not None:
            return t.timestamp() / 86400
    return 0.0


def date_of(day: float) -> str:
    """A time in days since the epoch as its UTC date, 2026-11-27."""
    return (dt.datetime(1970, 1, 1) + dt.timedelta(days=day)).strftime("%Y-%m-%d")


def read(db: Location) -> list[Cluster]:
    """Every cluster of the history, by name, with its nights, series, change points and node
    checks."""
    with session(db) as con:
        runs = con.execute(
            "SELECT r.id, r.cluster, r.label, r.created, r.added, r.failed, g.verdict, g.accepted "
            "FROM runs r LEFT JOIN gate_runs g ON g.run_id = r.id"
        ).fetchall()
        stored = con.execute(
            "SELECT cluster, kind, metric, key, coalesce(run_id, check_id), before, after, change FROM change_points"
        ).fetchall()
        by_cluster: dict[str, list[Night]] = {}
        for run, name, label, when, added, failed, gate, accepted in runs:
            night = Night(run, label, when or "", _day(when, added), gate, accepted, int(failed))
            by_cluster.setdefault(name, []).append(night)
        checks = entries(db)
        names = sorted(set(by_cluster) | {e.cluster for e in checks})
        out = []
        for name in names:
            nights = sorted(by_cluster.get(name, []), key=lambda n: (n.day, n.run))
            cluster = Cluster(name, nights)
            if nights:
                cluster.series = _series(con, db, cluster)
            out.append(cluster)
    for c in out:
        mine = [e for e in checks if e.cluster == c.name]
        if mine:
            c.checks = _checks(db, mine)
    # where each run and check sits in its cluster's lists: made once, not per change point
    night_at = {n.run: (c, i) for c in out for i, n in enumerate(c.nights)}
    check_at = {e.id: (c.checks, i) for c in out if c.checks for i, e in enumerate(c.checks.entries)}
    for name, kind, metric, key, at, before, after, change in stored:
        if kind == "runs" and at in night_at and night_at[at][0].name == name:
            c, i = night_at[at]
            c.changes.append(Change(metric, key, i, before, after, change))
        elif kind != "runs" and at in check_at and check_at[at][0].entries[0].cluster == name:
            held, i = check_at[at]
            held.changes.append(Change(metric, key, i, before, after, change))
    for c in out:
        c.changes.sort(key=lambda x: (x.at, x.metric, x.key))
        if c.checks:
            c.checks.changes.sort(key=lambda x: (x.at, x.metric, x.key))
    return out


def _series(con: Any, db: Location, cluster: Cluster) -> list[Series]:
    """The cluster's bands, a Series per key and metric, sorted by group, then key, then metric."""
    import numpy as np
    import pandas as pd

    rows = con.execute(
        "SELECT b.run_id, b.key, b.metric, b.low, b.high, b.value, b.verdict, b.catches FROM gate_bands b "
        "JOIN runs r ON r.id = b.run_id WHERE r.cluster = ?",
        (cluster.name,),
    ).fetchall()
    judged = {r[0] for r in rows}
    metrics = sorted({r[2] for r in rows}) or list(DEFAULT_METRICS)
    rows += _figures(db, cluster, [n.run for n in cluster.nights if n.run not in judged], metrics)
    if not rows:
        return []
    df = pd.DataFrame(rows, columns=["run", "key", "metric", "low", "high", "value", "verdict", "catches"])
    night = {n.run: i for i, n in enumerate(cluster.nights)}
    at = df["run"].map(night).to_numpy(dtype=np.intp)
    keys, key_names = pd.factorize(df["key"])
    metrics, metric_names = pd.factorize(df["metric"])
    sid = keys.astype(np.int64) * len(metric_names) + metrics
    order = np.lexsort((at, sid))
    sid, at = sid[order], at[order]
    numbers = {c: df[c].to_numpy(dtype=float, na_value=np.nan)[order] for c in ("value", "low", "high", "catches")}
    verdict = pd.Categorical(df["verdict"], categories=CODES).codes[order]
    verdict = np.where(verdict < 0, CODES.index(UNJUDGED), verdict).astype(np.int8)
    parsed = [_key(db, cluster.name, text) for text in key_names]
    texts = list(key_texts(pd.DataFrame(parsed, columns=KEYS)))
    starts = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]])
    ends = np.r_[starts[1:], len(sid)]
    out = []
    for a, b in zip(starts, ends):
        k, m = divmod(int(sid[a]), len(metric_names))
        key = dict(zip(KEYS, parsed[k]))
        out.append(
            Series(
                key,
                texts[k],
                str(metric_names[m]),
                group_of(key),
                at[a:b],
                numbers["value"][a:b],
                numbers["low"][a:b],
                numbers["high"][a:b],
                verdict[a:b],
                numbers["catches"][a:b],
            )
        )
    out.sort(key=lambda s: (GROUPS.index(s.group), s.text, s.metric))
    return out


def _figures(db: Location, cluster: Cluster, runs: list[int], metrics: list[str]) -> list[tuple]:
    """Rows as gate_bands holds them for the nights no gate judged (a cluster's first night in
    the nightly recipe, a run added by hand): each key's figure the median of its usable rows,
    as the gate takes a run's, no band, and the verdict NOT_JUDGED. Their Parquet is read; a
    judged night's never is."""
    import numpy as np
    import pandas as pd

    wanted = set(runs)
    found = [e for e in history.entries(db, cluster.name) if e.id in wanted]
    out: list[tuple] = []
    for entry, df in zip(found, history.usable_rows(db, found)):
        if not len(df):
            continue
        keys = np.array(gate.key_strings(df), dtype=object)
        for metric in metrics:
            if metric not in df.columns or metric not in METRICS:
                continue
            v = df[metric].to_numpy(dtype=float, na_value=np.nan)
            ok = df["workload"].isin(METRICS[metric].workloads).to_numpy(dtype=bool) & (v > 0)
            median = pd.Series(v[ok]).groupby(keys[ok]).median()
            out += [(entry.id, k, metric, None, None, float(x), NOT_JUDGED, None) for k, x in median.items()]
    return out


def _key(db: Location, cluster: str, text: str) -> list[Any]:
    """A gate key (gate.key_strings: the JSON list of the KEYS columns), checked."""
    try:
        key = json.loads(text)
    except ValueError:
        key = None
    ints = (4, 5, 8)  # nodes, gpus_per_node, size_bytes
    if not (
        isinstance(key, list)
        and len(key) == len(KEYS)
        and all(isinstance(key[i], int) and not isinstance(key[i], bool) for i in ints)
        and all(isinstance(v, str) for i, v in enumerate(key) if i not in ints)
    ):
        raise HistoryError(
            f"{db}: a gate band of cluster {cluster!r:.60} is damaged (key {text!r:.80}); find its run with "
            f"`bench history check` and remove it with `bench history remove ID`"
        )
    return key


def _checks(db: Location, found: list[NodeEntry]) -> Checks:
    ids = {e.id: i for i, e in enumerate(found)}
    with session(db) as con:
        rows = con.execute(
            "SELECT check_id, series, metric, value FROM node_figures WHERE value IS NOT NULL AND check_id IN "
            "(SELECT id FROM node_checks WHERE cluster = ?)",
            (found[0].cluster,),
        ).fetchall()
    figures = sorted(
        (ids[c], s, m, float(v)) for c, s, m, v in rows if isinstance(v, (int, float)) and v == v and v > 0
    )
    return Checks(found, [_day(e.created, e.added) for e in found], figures, [])


def regressions(clusters: list[Cluster]) -> list[tuple[Cluster, int, list[Series]]]:
    """Every judged night the gate failed or that had a key slower or failed: (cluster, night,
    the keys), newest first."""
    import numpy as np

    out = []
    for c in clusters:
        bad: dict[int, list[Series]] = {}
        for s in c.series:
            for i in np.flatnonzero(s.verdict <= CODES.index(SLOWER)).tolist():
                bad.setdefault(int(s.at[i]), []).append(s)
        for i, n in enumerate(c.nights):
            if n.gate == REJECTED or i in bad:
                out.append((c, i, bad.get(i, [])))
    out.sort(key=lambda x: (-x[0].nights[x[1]].day, x[0].name, -x[1]))
    return out


def healthy(cluster: Cluster, before: int) -> int | None:
    """The newest night before `before` the gate passed."""
    for i in range(before - 1, -1, -1):
        if cluster.nights[i].gate == PASSED:
            return i
    return None


def efficiency(cluster: Cluster, night: int) -> dict[tuple, dict[int, float]]:
    """Scaling efficiency on a night, per training configuration (workload, scaling, launcher,
    NCCL set, metric): {GPUs: throughput per GPU over that of the fewest GPUs}, as collect/gather.py
    defines it (speedup over ideal speedup), from the figures the gate judged."""
    import numpy as np

    rates: dict[tuple, dict[int, float]] = {}
    for s in cluster.series:
        if s.group not in GROUPS[3:5] or s.metric not in ("images_per_s", "tokens_per_s"):
            continue
        hit = np.flatnonzero(s.at == night)
        if not len(hit) or not s.value[hit[0]] > 0:
            continue
        k = s.key
        config = (k["workload"], k["scaling"], k["launcher"], k["nccl_config"], s.metric)
        gpus = int(k["nodes"]) * int(k["gpus_per_node"])
        rates.setdefault(config, {})[gpus] = float(s.value[hit[0]]) / gpus
    out = {}
    for config, per_gpu in sorted(rates.items()):
        base = per_gpu[min(per_gpu)]
        out[config] = {g: per_gpu[g] / base for g in sorted(per_gpu)}
    return out
