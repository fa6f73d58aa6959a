"""What `bench predict` predicted from a run, kept in the history with the run, and how each
prediction fared once a later run of the cluster measured its key (docs/concepts/predict.md,
"Predictions in the history").

`history add` reads the run's predict.json (bench predict writes it), checks it, and stores one
row per key, node count and metric (busbw of a collective at one size; a training workload's
step time and throughput per GPU) with its 95% interval. Then, in the same transaction:

- the run's completed keys measure the cluster's earlier predictions of them that no run has
  measured yet: the first later run to measure a key is the one its prediction is judged by;
- the run's own predictions are measured by the runs of the cluster stored already that ran
  after it, oldest first (a run added out of order).

A prediction of other hardware (`bench predict --set`) is not kept: no run of this cluster
could measure it. A sweep's cost estimate takes its training rates from what is kept (rates(),
harness/run/cost.py, docs/concepts/cost.md).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD, UNITS
from benchmarks.results import NotARegularFile, read_regular
from harness.analysis.predict import STATED
from harness.analysis.sides import KEYS, key_texts
from harness.analysis.store import SQLITE, Connection, Location, admit_cluster, located, session
from harness.errors import HistoryError
from harness.run.cost import KnownRate
from harness.run.rundir import COMPLETED, RUN_FILE_LIMIT

if TYPE_CHECKING:
    import pandas as pd

FILE = "predict.json"  # in the run directory, as bench predict writes it
BUSBW = "busbw_gbps"
STEP = "step_time_ms"
# predict.json's names of a training prediction's figure and its bounds, by the metric stored
TRAINING_FIGURES = {STEP: ("step_time_ms", "step_low_ms", "step_high_ms")}
PER_GPU = ("per_gpu", "per_gpu_low", "per_gpu_high")
# A collective's size as measured is the size asked, rounded down to whole elements for each
# rank (benchmarks/common.py, message_sizes): at most this fraction below it
SIZE_ROUNDING = 0.01


@dataclass(frozen=True)
class Prediction:
    key: str  # as sides.key_texts words it, node count and size included
    series: str  # the key without its size (key_texts' sizes=False)
    size_bytes: int  # the size asked (0: a training workload's)
    nodes: int
    like: tuple[str | None, str | None]  # the run's params and settings_hash of the series (predict.STATED)
    metric: str
    value: float
    low: float | None
    high: float | None


def read(run: Path, measured_nodes: list[int]) -> tuple[list[Prediction], str | None]:
    """The predictions of the run directory's predict.json, and why none are kept where that is
    so (no file, or a what-if's); a file that is not bench predict's of this run's summary is a
    HistoryError naming it and what is wrong."""
    path = run / FILE
    try:
        data = json.loads(read_regular(path, RUN_FILE_LIMIT))
    except FileNotFoundError:
        return [], None
    except (OSError, NotARegularFile, ValueError) as exc:
        raise _bad(path, f"cannot be read as JSON ({str(exc)[:80]})") from None
    if not isinstance(data, dict):
        raise _bad(path, "is not an object")
    if data.get("what_if") is not None:
        return [], f"{path}: predicts other hardware (bench predict --set): not kept"
    if data.get("measured_nodes") != measured_nodes:
        raise _bad(
            path,
            f"was made from runs of {_text(data.get('measured_nodes'))} nodes, and this run measured "
            f"{_text(measured_nodes)}: run `bench predict {run}` again",
        )
    rows: list[dict[str, Any]] = []
    for c in _list(data, "collectives", path):
        keys = {k: _word(c, k, path) for k in ("collective", "group", "launcher", "nccl_config")}
        where = {
            "workload": COLLECTIVE_WORKLOAD,
            "scaling": "",
            **keys,
            "gpus_per_node": _whole(c, "gpus_per_node", path),
            **_like(c, path),
        }
        size = _whole(c, "size_bytes", path)
        for p in _list(c, "predictions", path):
            rows.append(
                {**where, "size_bytes": size, **_figures(p, BUSBW, (BUSBW, "busbw_low_gbps", "busbw_high_gbps"), path)}
            )
    for t in _list(data, "training", path):
        workload = _word(t, "workload", path)
        if workload not in UNITS:
            raise _bad(path, f"names workload {workload[:40]!r}, which bench does not train")
        where = {
            "workload": workload,
            "collective": "",
            "group": "",
            **{k: _word(t, k, path) for k in ("scaling", "launcher", "nccl_config")},
            "gpus_per_node": _whole(t, "gpus_per_node", path),
            "size_bytes": 0,
            **_like(t, path),
        }
        for p in _list(t, "predictions", path):
            rows.append({**where, **_figures(p, STEP, TRAINING_FIGURES[STEP], path)})
            rows.append({**where, **_figures(p, f"{UNITS[workload]}_per_s_per_gpu", PER_GPU, path)})
    if not rows:
        return [], None
    import pandas as pd

    frame = pd.DataFrame(rows)
    return [
        Prediction(
            k,
            s,
            int(r.size_bytes),
            int(r.nodes),
            (r.params, r.settings_hash),
            r.metric,
            r.value,
            _bound(r.low),
            _bound(r.high),
        )
        for k, s, r in zip(key_texts(frame), key_texts(frame, sizes=False), frame.itertuples())
        if math.isfinite(r.value) and r.value > 0
    ], None


def store(con: Connection, run_id: int, predictions: list[Prediction]) -> None:
    con.executemany(
        "INSERT INTO predictions (run_id, key, series, size_bytes, nodes, params, settings, metric, value, low, high) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (run_id, p.key, p.series, p.size_bytes, p.nodes, *p.like, p.metric, p.value, p.low, p.high)
            for p in predictions
        ],
    )


@dataclass(frozen=True)
class Measured:
    """What one run measured of the metrics predictions hold, (series, params, settings_hash,
    metric) -> {size: figure}, and the node counts of its keys."""

    figures: dict[tuple[str, str, str, str], dict[int, float]]
    nodes: list[int]

    def at(self, series: str, like: tuple[str, str], metric: str, size: int) -> float | None:
        """The figure of `series`, with its params and settings hash `like`, at the size asked
        `size`: at the measured size nearest it, within SIZE_ROUNDING of it."""
        sizes = self.figures.get((series, *like, metric), {})
        near = [s for s in sizes if abs(s - size) <= size * SIZE_ROUNDING]
        return sizes[min(near, key=lambda s: abs(s - size))] if near else None


def measured(rows: pd.DataFrame) -> Measured:
    """A run's summary rows as Measured: its completed rows with a finite positive figure, the
    median where a key has several (a run of replicates has a row per key and replicate)."""
    done = rows[(rows["status"] == COMPLETED).to_numpy(dtype=bool, na_value=False)]
    if not len(done):
        return Measured({}, [])
    series = key_texts(done[KEYS], sizes=False)
    like = list(zip(done["params"].astype(str), done["settings_hash"].astype(str)))
    training = (done["workload"] != COLLECTIVE_WORKLOAD).to_numpy(dtype=bool)
    sizes = done["size_bytes"].to_numpy(dtype=float, na_value=0.0)
    sizes[training] = 0
    found: dict[tuple[str, str, str, str], dict[int, list[float]]] = {}
    metrics = [BUSBW, STEP, *(f"{u}_per_s_per_gpu" for u in dict.fromkeys(UNITS.values()))]
    for metric in (m for m in metrics if m in done.columns):
        values = done[metric].to_numpy(dtype=float, na_value=math.nan)
        for text, (params, settings), size, value in zip(series, like, sizes, values):
            if math.isfinite(value) and value > 0:
                found.setdefault((text, params, settings, metric), {}).setdefault(int(size), []).append(float(value))
    nodes = sorted({int(n) for n in done["nodes"]})
    figures = {k: {size: statistics.median(v) for size, v in by_size.items()} for k, by_size in found.items()}
    return Measured(figures, nodes)


def measure(con: Connection, of: Measured, fingerprint: str, where: str, params: tuple) -> int:
    """Record what the run `fingerprint` measured as the measurement of the predictions no run
    has measured yet, of the runs `where` selects (SQL on runs r, with `params`); how many were."""
    if not of.figures:
        return 0
    found = con.execute(
        "SELECT p.run_id, p.series, p.size_bytes, p.params, p.settings, p.metric FROM predictions p "
        "JOIN runs r ON r.id = p.run_id WHERE p.measured_by IS NULL AND p.params IS NOT NULL "
        f"AND p.settings IS NOT NULL AND p.nodes IN ({', '.join('?' * len(of.nodes))}) AND {where}",
        (*of.nodes, *params),
    ).fetchall()
    done = [
        (value, fingerprint, run_id, series, size, metric)
        for run_id, series, size, params, settings, metric in found
        if (value := of.at(series, (params, settings), metric, size)) is not None
    ]
    con.executemany(
        "UPDATE predictions SET measured = ?, measured_by = ? WHERE run_id = ? AND series = ? AND size_bytes = ? "
        "AND metric = ? AND measured_by IS NULL",
        done,
    )
    return len(done)


def measure_earlier(
    con: Connection, cluster: str, created: str, rows: Callable[[], pd.DataFrame], fingerprint: str
) -> int:
    """The cluster's predictions made from runs before `created` that the run's summary `rows`
    measures; its rows are read only when some such prediction is still open."""
    where = "r.cluster = ? AND r.created < ?"
    if not con.execute(
        f"SELECT 1 FROM predictions p JOIN runs r ON r.id = p.run_id WHERE p.measured_by IS NULL AND {where} LIMIT 1",
        (cluster, created),
    ).fetchone():
        return 0
    return measure(con, measured(rows()), fingerprint, where, (cluster, created))


def forget(con: Connection, run_id: int, fingerprint: str) -> None:
    """In a transaction: a run's predictions, and its measurements of others' (which a later
    run added may then measure)."""
    con.execute("DELETE FROM predictions WHERE run_id = ?", (run_id,))
    con.execute("UPDATE predictions SET measured = NULL, measured_by = NULL WHERE measured_by = ?", (fingerprint,))


@dataclass(frozen=True)
class Judged:
    """A stored prediction as `history predictions` lists it."""

    run_id: int
    label: str | None
    key: str
    metric: str
    value: float
    low: float | None
    high: float | None
    measured: float | None
    measured_by: tuple[int, str | None] | None  # the measuring run's id and label

    @property
    def error(self) -> float | None:
        """The prediction's error relative to what was measured: +0.05 predicted 5% high."""
        return None if self.measured is None else self.value / self.measured - 1

    @property
    def inside(self) -> bool | None:
        if self.measured is None:
            return None
        return (self.low is None or self.low <= self.measured) and (self.high is None or self.measured <= self.high)


def judged(db: Location, cluster: str) -> list[Judged]:
    """Every stored prediction of the cluster's runs, measured or not, oldest run first; the
    cluster must be one the history knows (store.admit_cluster)."""
    with session(db) as con:
        admit_cluster(con, cluster, "runs", new=False, create=False)
        rows = con.execute(
            "SELECT p.run_id, r.label, p.key, p.metric, p.value, p.low, p.high, p.measured, m.id, m.label "
            "FROM predictions p JOIN runs r ON r.id = p.run_id LEFT JOIN runs m ON m.fingerprint = p.measured_by "
            "WHERE r.cluster = ? ORDER BY r.created, r.id, p.metric, p.nodes, p.key",
            (cluster,),
        ).fetchall()
    out = []
    for run_id, label, key, metric, value, low, high, got, by, by_label in rows:  # the history is untrusted too
        if not (isinstance(key, str) and isinstance(metric, str) and _figure(value) and value > 0) or not all(
            v is None or _figure(v) for v in (low, high, got)
        ):
            raise HistoryError(
                f"{db}: run {run_id} is damaged (a prediction of {str(metric)[:40]!r} is {value!r:.40}); "
                f"remove it with `bench history remove {run_id}`"
            )
        out.append(
            Judged(run_id, label, key, metric, value, low, high, got, (by, by_label) if by is not None else None)
        )
    return out


def rates(db: Location, cluster: str) -> list[KnownRate]:
    """Each training series' rate per GPU at each node count the cluster's runs predicted, newest
    predicting run first: what the first later run measured where one has, else the prediction.
    Nothing from a history that does not exist (nothing is created to say so) or does not know
    the cluster: the cost estimate then takes its defaults."""
    db = located(db)
    if db.kind == SQLITE and not db.path.is_file():
        return []
    with session(db) as con:
        if not con.execute("SELECT 1 FROM runs WHERE cluster = ? LIMIT 1", (cluster,)).fetchone():
            return []
        rows = con.execute(
            "SELECT p.series, p.nodes, p.params, p.value, p.measured, r.id, r.label FROM predictions p "
            "JOIN runs r ON r.id = p.run_id WHERE r.cluster = ? AND p.metric IN (?, ?) AND p.params IS NOT NULL "
            "ORDER BY r.created DESC, r.id DESC",
            (cluster, *(f"{u}_per_s_per_gpu" for u in dict.fromkeys(UNITS.values()))),
        ).fetchall()
    out = []
    for series, nodes, params, value, measured, run_id, label in rows:
        parts = series.split(", ") if isinstance(series, str) else []
        what, shape = (parts[0].split(" "), parts[1].split("x")) if len(parts) == 4 else ([], [])
        figure = measured if measured is not None else value
        if len(what) != 2 or len(shape) != 2 or not all(s.isdigit() for s in shape) or not _figure(figure):
            continue  # not a training series bench words, or a damaged figure: no rate is better than a wrong one
        try:
            stated = json.loads(params)
        except (TypeError, ValueError):
            continue
        run = f"run {run_id}" + (f" ({label})" if label else "")
        source = (
            f"measured at {nodes} nodes, as {run} predicted"
            if measured is not None
            else f"predicted at {nodes} nodes by {run}"
        )
        out.append(
            KnownRate(
                what[0],
                what[1],
                int(nodes),
                int(shape[1]),
                parts[2],
                parts[3],
                stated,
                float(figure),
                f"({source} of cluster {cluster})",
            )
        )
    return out


def _figure(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def measure_own(con: Connection, run_id: int, after: list[Any], load: Callable[[Any], tuple[pd.DataFrame, str]]) -> int:
    """The run's own predictions measured by the runs stored already that ran after it
    (`after`, oldest first, each loaded as its summary rows and fingerprint) until each is."""
    done = 0
    for entry in after:
        if not con.execute(
            "SELECT 1 FROM predictions WHERE run_id = ? AND measured_by IS NULL LIMIT 1", (run_id,)
        ).fetchone():
            break
        rows, fingerprint = load(entry)
        done += measure(con, measured(rows), fingerprint, "r.id = ?", (run_id,))
    return done


def _bad(path: Path, what: str) -> HistoryError:
    return HistoryError(f"{path} {what}; it is bench predict's output, which `history add` keeps with the run")


def _text(nodes: object) -> str:
    return ", ".join(map(str, nodes))[:60] if isinstance(nodes, list) else repr(nodes)[:40]


def _list(obj: dict, key: str, path: Path) -> list[dict[str, Any]]:
    value = obj.get(key)
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise _bad(path, f"has no list of objects {key!r}")
    return value


def _word(obj: dict, key: str, path: Path) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value or len(value) > 200 or not value.isprintable():
        raise _bad(path, f"has {key} {str(value)[:40]!r} where a name was expected")
    return value


def _whole(obj: dict, key: str, path: Path) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**53:
        raise _bad(path, f"has {key} {str(value)[:40]!r} where a whole number was expected")
    return value


def _like(obj: dict, path: Path) -> dict[str, str | None]:
    """A row's STATED (harness/analysis/predict.py): text, or null where its runs disagreed."""
    out = {}
    for key in STATED:
        if key not in obj or not (obj[key] is None or isinstance(obj[key], str)):
            raise _bad(path, f"has no {key} (text or null) in a row: run bench predict of this bench again")
        out[key] = obj[key]
    return out


def _figures(p: dict, metric: str, names: tuple[str, str, str], path: Path) -> dict[str, Any]:
    """One prediction's node count, figure and bounds (null: none), as read() stores them."""
    figures = [p.get(n) for n in names]
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in figures):
        raise _bad(path, f"has {names[0]} {str(figures[0])[:40]!r} where a number or null was expected")
    value, low, high = (math.nan if v is None else float(v) for v in figures)
    return {"nodes": _whole(p, "nodes", path), "metric": metric, "value": value, "low": low, "high": high}


def _bound(value: float) -> float | None:
    return value if math.isfinite(value) else None
