"""The history: runs of each cluster in an SQLite file or a PostgreSQL database (store.py), and
baselines drawn from the run's own series (series.py).

    runs      one row per added run: cluster, label, when it ran, its environment (JSON), and
              how many of its keys completed
    data      the run's summary and samples, as Parquet (only the columns comparisons read);
              every key keeps its status, so failures are history too
    points    a few key figures per run, for `history plot`: busbw at the largest message
              size per node count, images/s per GPU per training workload

Listing, baseline lookup and plotting read `runs` and `points` only, through indexes; a
comparison loads the Parquet of the runs it needs. A run is identified by a hash of its
plan.json (the sweep, the matrix and the time it was planned): the same run added again adds
nothing, and other figures, cluster or label under its identity are refused unless replaced.

A baseline is built from usable keys only: completed, with a finite positive figure and at
least two usable samples. A key that failed in the newest run is taken from the newest run
where it was usable. The history defends itself against its own content: a damaged entry
stops a command with one line that names it, `history check` finds every such entry, and
`history remove` takes one out.

One file: the tables, the writes that fill them in one transaction, and the queries that draw a
baseline from them are one schema; gate.py and nodehistory.py keep their own tables beside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from itertools import pairwise, repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD, UNITS
from benchmarks.results import read_regular
from harness.analysis import baseline as baseline_rows
from harness.analysis import gate, predicted, series
from harness.analysis.sides import (
    CONFIG,
    KEYS,
    METRICS,
    REQUIRED,
    Entry,
    Side,
    check_samples,
    check_summary,
    grouped_side,
    key_frame,
    key_texts,
    read_tables,
)
from harness.analysis.stats import SPREAD_RUNS, padded, spread_rows, within_spread
from harness.analysis.store import (
    FIRST_YEAR,
    LAST_YEAR,
    SQLITE,
    Connection,
    Location,
    admit_cluster,
    now,
    run_time,
    session,
)
from harness.analysis.store import error as store_error
from harness.collect.summary import run_facts, to_frame, upgraded
from harness.errors import DataError, HistoryError
from harness.run.rundir import COMPLETED, RUN_FILE_LIMIT, RunDir

if TYPE_CHECKING:
    from concurrent.futures import Future

    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

DEFAULT_BASELINE = "median:5"
LOOKBACK = 30  # runs looked at beyond K for keys that failed in the newest ones


_ENTRY = "SELECT id, cluster, label, path, sweep, created, added, rows, keys, failed FROM runs"


def fingerprint(run: RunDir) -> str:
    return hashlib.sha256(read_regular(run.plan_file, RUN_FILE_LIMIT)).hexdigest()


def _parquet(table: pa.Table) -> bytes:
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def _points(rows: pd.DataFrame) -> list[tuple[str, str, float]]:
    """The key figures of a run (completed rows): busbw at the largest size per collective,
    node count, GPUs per node, launcher and settings set; images/s (the transformer's tokens/s)
    per GPU per training row."""
    out: list[tuple[str, str, float]] = []
    coll = rows[(rows["workload"] == COLLECTIVE_WORKLOAD) & (rows["busbw_gbps"] > 0)]
    if len(coll):
        largest = coll.loc[coll.groupby(CONFIG + ["collective", "group"])["size_bytes"].idxmax()]
        out += zip(key_texts(largest, sizes=False), repeat("busbw_gbps"), largest["busbw_gbps"].astype(float))
    for unit in dict.fromkeys(UNITS.values()):
        metric = f"{unit}_per_s_per_gpu"
        train = rows[(rows["workload"] != COLLECTIVE_WORKLOAD) & (rows[metric] > 0)]
        out += zip(key_texts(train, sizes=False), repeat(metric), train[metric].astype(float))
    return out


def _current_series(text: str) -> str:
    """A series as compare.key_texts spells it. Histories written before bench spelled keys one
    way everywhere hold 'all_reduce 4x1 torchrun default' and 'synthetic-weak 4x1 torchrun
    default': their words are names the spec allows (no spaces), so they split back exactly."""
    words = text.split(" ")
    if ", " in text or len(words) != 4:
        return text
    what, shape, launcher, settings = words
    workload, _, scaling = what.rpartition("-")
    what = f"{workload} {scaling}" if workload else f"{COLLECTIVE_WORKLOAD} {what}"
    return f"{what}, {shape}, {launcher}, {settings}"


@dataclass(frozen=True)
class Added:
    entry: Entry
    failed_jobs: list[str]  # "job STATE" of every job with a key that did not complete
    verdict: dict[str, Any] | None  # the gate's (analysis/gate.py), None for a run never judged
    existing: bool = False  # the same run with the same figures was there already: nothing added
    replaced: int | None = None  # the id of the run --replace took out
    predictions: int = 0  # bench predict's predictions kept with it (analysis/predicted.py)
    measured: int = 0  # stored predictions this add gave their measurement
    unkept: str | None = None  # why its predict.json's were not kept


def check_name(flag: str, text: str | None) -> None:
    if text is not None and (not text.strip() or len(text) > 200 or not text.isprintable()):
        raise HistoryError(
            f"{flag} {text!r}: give a name of 1 to 200 printable characters (no control "
            f"characters, which reports and junit.xml cannot carry)"
        )


def add(
    db: Location,
    path: str | Path,
    cluster: str,
    label: str | None = None,
    verdict: Path | None = None,
    replace: bool = False,
    *,
    create: bool = False,
    new_cluster: bool = False,
) -> Added:
    """Store a run, failed keys and all, with the gate's verdict on it: `verdict` (a gate.json
    bench regress wrote), else the run's own regress/gate.json where there is one. Everything
    is checked before the one transaction that writes it.

    A run is identified by its plan (fingerprint). The same run with the same figures, cluster
    and label is there already: nothing is written, and the entry says so. Other figures, or
    another cluster or label, under its identity are refused, unless `replace`, which takes the
    stored run out and this one in, in the same transaction. Two writers adding one run at the
    same moment: the run's identity is unique, so the second finds the first's row.

    Nothing is created or started by mistake: an SQLite history that does not exist is made
    only with `create`, and a cluster the history does not know is taken only as a
    `new_cluster` (store.admit_cluster)."""
    check_name("--cluster", cluster)
    check_name("--label", label)
    run = RunDir(path)
    summary, samples = read_tables(run)
    plan = run.read_plan()
    kept = summary.select(REQUIRED).replace_schema_metadata(summary.schema.metadata)
    rows = to_frame(kept)
    done = (rows["status"] == COMPLETED).to_numpy(dtype=bool, na_value=False)
    keys = rows.drop_duplicates(KEYS)
    not_done = rows[~done].drop_duplicates("job")
    env, _ = run_facts(summary.schema)
    stack = series.of(env, plan.get("cluster"))
    points = _points(rows[done])
    blob = _parquet(kept)
    sblob = _parquet(samples) if samples is not None else None
    fp = fingerprint(run)
    judged = gate.read(verdict or run.path / "regress" / gate.FILE, fp, cluster)
    if verdict is not None and judged is None:
        raise HistoryError(f"--verdict {verdict}: no such file; bench regress writes gate.json in its --out")
    created = plan.get("created")
    if run_time(created) is None:
        raise HistoryError(
            f"{run.path / 'plan.json'}: created {str(created)[:40]!r} is not a time bench writes "
            f"(ISO 8601 with its UTC offset, years {FIRST_YEAR}-{LAST_YEAR}): the history orders runs by it"
        )
    payload = hashlib.sha256(blob + (sblob or b"")).hexdigest()
    spread = samples_spread(samples) if samples is not None else None
    failed_jobs = [f"{j} {s}" for j, s in zip(not_done["job"], not_done["status"])]
    forecast, unkept = predicted.read(run.path, sorted({int(n) for n in rows["nodes"]}))
    replaced = None
    with session(db, create=create) as con, con.transaction():
        held = _held(con, fp, payload, cluster, label, run.path, replace)
        if held is not None and not replace:  # predictions made since it was added are kept now
            new = not con.execute("SELECT 1 FROM predictions WHERE run_id = ? LIMIT 1", (held.id,)).fetchone()
            kept = _keep_predictions(con, db, held, forecast) if new else (0, 0)
            return Added(held, failed_jobs, judged, existing=True, predictions=kept[0], measured=kept[1], unkept=unkept)
        if held is None:
            admit_cluster(con, cluster, "runs", new_cluster, create)
        else:  # --replace: the run of its identity, under its own cluster, goes out
            _remove_rows(con, held.id)
            replaced = held.id
        found = con.execute(
            "INSERT INTO runs (fingerprint, cluster, label, path, sweep, created, added, rows, keys, failed, "
            "environment, payload, stack, stack_fields, spread) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (fingerprint) DO NOTHING RETURNING id",
            (
                fp,
                cluster,
                label,
                str(run.path.resolve()),
                (plan.get("sweep") or {}).get("name"),
                created,
                now(),
                len(rows),
                len(keys),
                int((~done).sum()),
                json.dumps(env),
                payload,
                series.digest(stack),
                json.dumps(stack, sort_keys=True),
                spread,
            ),
        ).fetchone()
        if found is None:  # another writer stored it since this one looked (PostgreSQL)
            held = _held(con, fp, payload, cluster, label, run.path, replace=False)
            assert held is not None, "a conflict on the fingerprint leaves its row"
            return Added(held, failed_jobs, judged, existing=True)
        (run_id,) = found
        con.execute("INSERT INTO data VALUES (?, ?, ?)", (run_id, blob, sblob))
        con.executemany("INSERT INTO points VALUES (?, ?, ?, ?)", [(run_id, *p) for p in points])
        if judged:
            gate.store(con, run_id, judged)
        entry = Entry(*con.execute(_ENTRY + " WHERE id = ?", (run_id,)).fetchone())
        kept, measured = _keep_predictions(con, db, entry, forecast)
        measured += predicted.measure_earlier(con, cluster, str(created), lambda: rows, fp)
    return Added(entry, failed_jobs, judged, replaced=replaced, predictions=kept, measured=measured, unkept=unkept)


def _keep_predictions(
    con: Connection, db: Location, entry: Entry, forecast: list[predicted.Prediction]
) -> tuple[int, int]:
    """In add's transaction: the run's predictions stored, and measured by the runs of its
    cluster stored already that ran after it; (how many stored, how many measured)."""
    if not forecast:
        return 0, 0
    predicted.store(con, entry.id, forecast)
    after = [
        (Entry(*row[:-1]), row[-1])
        for row in con.execute(
            _ENTRY.replace(" FROM", ", fingerprint FROM") + " WHERE cluster = ? AND created > ? ORDER BY created, id",
            (entry.cluster, entry.created),
        ).fetchall()
    ]

    def load(later: tuple[Entry, str]) -> tuple[pd.DataFrame, str]:
        summary, _, _ = _load(con, db, later[0], with_samples=False)
        return to_frame(summary), later[1]

    return len(forecast), predicted.measure_own(con, entry.id, after, load)


def _held(
    con: Connection, fp: str, payload: str, cluster: str, label: str | None, path: Path, replace: bool
) -> Entry | None:
    """The stored run of this identity, if any: returned as it is when it holds the same
    figures, cluster and label (or `replace` is given); refused otherwise."""
    row = con.execute(
        "SELECT id, cluster, label, path, sweep, created, added, rows, keys, failed, payload FROM runs "
        "WHERE fingerprint = ?",
        (fp,),
    ).fetchone()
    if row is None:
        return None
    entry, stored = Entry(*row[:-1]), row[-1]
    if replace or (stored == payload and entry.cluster == cluster and entry.label == label):
        return entry
    differs = "other figures" if stored != payload else f"cluster {cluster}, label {label or '-'}"
    raise HistoryError(
        f"{path}: already in the history as run {entry.id} (cluster {entry.cluster}, label {entry.label or '-'}, "
        f"added from {entry.path}); this one has {differs}: `--replace` stores it in that run's place"
    )


def entries(db: Location, cluster: str | None = None) -> list[Entry]:
    """The runs of the history, or of `cluster`, which it must know (store.admit_cluster): a
    mistyped name is refused, never counted as a cluster without runs."""
    with session(db) as con:
        if cluster:
            admit_cluster(con, cluster, "runs", new=False, create=False)
        cur = con.execute(
            _ENTRY + " WHERE cluster = ? ORDER BY created, id"
            if cluster
            else _ENTRY + " ORDER BY cluster, created, id",
            (cluster,) if cluster else (),
        )
        return [Entry(*r) for r in cur]


def series_of(db: Location, found: list[Entry], cluster: str | None = None) -> dict[int, tuple[str, list[str] | None]]:
    """run id -> (its stack's digest, how it differs from the run before it of its cluster, or None
    where it does not): `history list` shows where a new series starts, and why. `cluster`: the
    one cluster the entries are of, if so."""
    with session(db) as con:
        known = stacks(con, cluster)
    out: dict[int, tuple[str, list[str] | None]] = {}
    before: dict[str, dict[str, Any]] = {}
    for e in sorted(found, key=lambda e: (e.cluster, e.created, e.id)):
        stack = known.get(e.id, {})
        prev = before.get(e.cluster)
        out[e.id] = (series.digest(stack), series.differences(prev, stack) if prev is not None else None)
        before[e.cluster] = stack
    return out


def usable_rows(db: Location, found: list[Entry]) -> Iterator[pd.DataFrame]:
    """Each entry's usable rows (completed, with a time and samples a baseline may use), in
    key_frame's columns, read one entry at a time."""
    with session(db) as con:
        for entry in found:
            summary, _, _ = _load(con, db, entry, with_samples=False)
            yield key_frame(summary)[baseline_rows.usable_rows(summary)]


def points(db: Location, cluster: str) -> pd.DataFrame:
    """DataFrame of (id, label, created, series, metric, value) for every run of a cluster."""
    import pandas as pd

    with session(db) as con:
        rows = con.execute(
            "SELECT r.id, r.label, r.created, p.series, p.metric, p.value FROM runs r JOIN points p "
            "ON p.run_id = r.id WHERE r.cluster = ? ORDER BY r.created, r.id",
            (cluster,),
        ).fetchall()
    for run_id, label, created, key, metric, value in rows:  # the history is untrusted too
        if not (
            isinstance(value, (int, float))
            and value < float("inf")
            and all(isinstance(t, str) for t in (created, key, metric))
            and (label is None or isinstance(label, str))
        ):
            raise HistoryError(
                f"{db}: run {run_id} is damaged (a point of {metric!r:.40} is {value!r:.40}); "
                f"remove it with `bench history remove {run_id}`"
            )
    df = pd.DataFrame(rows, columns=["id", "label", "created", "series", "metric", "value"])
    df["series"] = [_current_series(s) for s in df["series"]]
    return df


def remove(db: Location, run_id: int) -> Entry:
    """Delete one run and everything stored with it, damaged or not."""
    with session(db) as con:
        row = con.execute(_ENTRY + " WHERE id = ?", (run_id,)).fetchone()
        if not row:
            raise HistoryError(f"{db}: no run {run_id} in the history; `bench history list` shows the ids")
        with con.transaction():
            _remove_rows(con, run_id)
        return Entry(*row)


def _remove_rows(con: Connection, run_id: int) -> None:
    """In a transaction: one run and everything stored with it."""
    gate.remove(con, run_id)
    (fp,) = con.execute("SELECT fingerprint FROM runs WHERE id = ?", (run_id,)).fetchone()
    predicted.forget(con, run_id, fp)
    con.execute("DELETE FROM change_points WHERE run_id = ?", (run_id,))
    for table in ("points", "data"):
        con.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
    con.execute("DELETE FROM runs WHERE id = ?", (run_id,))


def accept(db: Location, run_id: int, reason: str) -> Entry:
    """Accept a run's level as its series' new normal (analysis/gate.py): baselines begin at it."""
    check_name("--reason", reason)
    with session(db) as con:
        row = con.execute(_ENTRY + " WHERE id = ?", (run_id,)).fetchone()
        if not row:
            raise HistoryError(f"{db}: no run {run_id} in the history; `bench history list` shows the ids")
        with con.transaction():
            gate.accept(con, run_id, reason)
        return Entry(*row)


def gate_verdicts(db: Location, found: list[Entry]) -> dict[int, tuple[str, int, str | None, str | None]]:
    """The gate's verdict on each entry judged (analysis/gate.py)."""
    with session(db) as con:
        return gate.verdicts(con, [e.id for e in found])


def check(db: Location) -> tuple[int, list[str]]:
    """(entries checked, one line per problem): SQLite's own integrity check, then every entry
    read as a comparison would read it."""
    problems = []
    with session(db) as con:
        if con.kind == SQLITE:  # PostgreSQL checks its own pages and types as it reads them
            verdict = [r[0] for r in con.execute("PRAGMA integrity_check")]
            if verdict != ["ok"]:
                problems.append(f"{db}: SQLite integrity check: {'; '.join(verdict[:5])}")
        found = [Entry(*r) for r in con.execute(_ENTRY + " ORDER BY id")]
        for entry in found:
            try:
                _load(con, db, entry, with_samples=True)
            except HistoryError as exc:
                problems.append(str(exc))
        # a column's type is the type of what it holds in SQLite only (docs: "Datatypes In SQLite")
        untyped = "SELECT DISTINCT run_id FROM points WHERE typeof(value) NOT IN ('real', 'integer') ORDER BY 1"
        for (run_id,) in con.execute(untyped) if con.kind == SQLITE else ():
            problems.append(
                f"{db}: run {run_id} is damaged (a point that is no number); remove it with "
                f"`bench history remove {run_id}`"
            )
    return len(found), problems


def _load(
    con: Connection, db: Location, entry: Entry, with_samples: bool, columns: list[str] | None = None
) -> tuple[pa.Table, pa.Table | None, dict[str, Any]]:
    """(summary, samples or None, environment) of one entry, each checked: a damaged entry is
    a HistoryError naming it. `columns`: only these of the summary (those it has; upgraded()
    adds the rest it knows), its texts dictionary-encoded, checked against its whole schema."""
    return _decode(db, entry, _fetch(con, db, entry, with_samples), columns)


def _fetch(con: Connection, db: Location, entry: Entry, with_samples: bool) -> tuple[bytes, bytes | None, str]:
    """The stored (summary, samples or None, environment) of one entry, as stored."""
    try:
        found = con.execute(
            "SELECT d.summary, "
            + ("d.samples" if with_samples else "NULL")
            + ", r.environment FROM data d JOIN runs r ON r.id = d.run_id WHERE d.run_id = ?",
            (entry.id,),
        ).fetchone()
    except con.errors as exc:
        raise store_error(db, exc, entry.name) from None
    if found is None:
        remedy = f"remove it with `bench history remove {entry.id}`"
        raise HistoryError(f"{db}: {entry.name} is damaged (no stored summary); {remedy}")
    return found


def _decode(
    db: Location,
    entry: Entry,
    found: tuple[bytes, bytes | None, str],
    columns: list[str] | None,
    shared: _Shared | None = None,
) -> tuple[pa.Table, pa.Table | None, dict[str, Any]]:
    """_load's tables and environment of what _fetch found, decoded and checked (no connection:
    a thread may do it). `shared`: columns another entry read stored as the same bytes are taken
    from it rather than decoded again (_Shared); the first entry decoded with it lends its own."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    damaged = f"{db}: {entry.name} is damaged"
    remedy = f"; remove it with `bench history remove {entry.id}`"
    summary_blob, samples_blob, env = found
    try:
        stored = pq.ParquetFile(io.BytesIO(summary_blob))
        schema = stored.schema_arrow
        # its texts as dictionaries: a tenth of the time of decoding each text; in one thread,
        # since a baseline's reads are decoded beside the draw already (_Ahead), and Arrow's pool
        # of threads gained nothing more (docs/guides/fleet.md, "A large run against a month of nights")
        if columns:
            part = [c for c in columns if c in schema.names]
            chunks = _Stored(summary_blob, stored.metadata, schema, part) if shared is not None else None
            same = shared.same(chunks) if shared is not None and chunks is not None else []
            need = [c for c in part if c not in same]
            texts = [c for c in need if schema.field(c).type == pa.string()]
            table = pq.ParquetFile(io.BytesIO(summary_blob), read_dictionary=texts).read(need, use_threads=False)
            if shared is not None and same:
                table = shared.joined(table, part, same)
            elif shared is not None and chunks is not None:
                shared.lend(table, chunks)
            summary = upgraded(table, columns)
        else:
            summary = upgraded(stored.read())
        samples = upgraded(pq.ParquetFile(io.BytesIO(samples_blob)).read()) if samples_blob else None
    except (OSError, TypeError, pa.ArrowException) as exc:
        raise HistoryError(f"{damaged} (its stored tables do not decode: {exc}){remedy}") from None
    try:
        environment = json.loads(env)
        if not isinstance(environment, dict):
            raise ValueError("not a mapping")
    except (TypeError, ValueError) as exc:
        raise HistoryError(f"{damaged} (its environment is not JSON: {exc}){remedy}") from None
    try:
        # a part read is checked as a whole: its schema stands for the columns left unread
        check_summary(upgraded(schema.empty_table()) if columns else summary, f"{entry.name}'s summary")
        if samples is not None:
            check_samples(samples, f"{entry.name}'s samples")
    except DataError as exc:
        raise HistoryError(f"{db}: {exc}{remedy}") from None
    return summary, samples, environment


class _Stored:
    """Some columns of a stored summary as Parquet stores them: per row group its rows, and the
    column's codec, physical type, number of values and bytes. A column stored alike, of the same
    Arrow field, decodes alike. Only a file whose column chunks tile its data, each byte between
    the leading magic and the footer in one chunk, is described (`columns` is None for any
    other): a footer whose offsets said otherwise could make two unlike columns look alike."""

    def __init__(self, blob: bytes, meta: pq.FileMetaData, schema: pa.Schema, names: list[str]):
        self.schema = schema
        data = memoryview(blob)
        chunks: dict[str, list[tuple[Any, ...]]] = {}
        spans = []
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for j in range(group.num_columns):
                c = group.column(j)
                start = c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
                spans.append((start, start + c.total_compressed_size))
                stored = (
                    group.num_rows,
                    c.compression,
                    c.physical_type,
                    c.num_values,
                    data[spans[-1][0] : spans[-1][1]],
                )
                chunks.setdefault(c.path_in_schema, []).append(stored)
        spans.sort()
        footer = len(blob) - meta.serialized_size - 8  # the footer, its length and the closing magic
        tiled = spans and spans[0][0] == 4 and spans[-1][1] == footer and all(a[1] == b[0] for a, b in pairwise(spans))
        self.columns = {n: chunks[n] for n in names if n in chunks} if tiled else None


class _Shared:
    """The columns the first entry a baseline decodes lends to those decoded after it: nightly
    runs of one plan store their keys, states and counts as the same bytes night after night,
    their figures alone differ, and a column stored as the lender's is not decoded again: most
    of a month of nights' thirty reads. Used by one thread."""

    def __init__(self) -> None:
        self.table: pa.Table | None = None
        self.stored: _Stored | None = None

    def lend(self, table: pa.Table, stored: _Stored) -> None:
        if self.table is None and stored.columns is not None:
            self.table, self.stored = table, stored

    def same(self, stored: _Stored) -> list[str]:
        """The columns `stored` holds as the lender stored them, of the same Arrow field."""
        lender = self.stored
        if lender is None or lender.columns is None or stored.columns is None:
            return []
        return [
            name
            for name, chunks in stored.columns.items()
            if chunks == lender.columns.get(name) and stored.schema.field(name).equals(lender.schema.field(name))
        ]

    def joined(self, table: pa.Table, names: list[str], same: list[str]) -> pa.Table:
        """`table`, the columns read, with the lender's `same`, in the order of `names`."""
        import pyarrow as pa

        assert self.table is not None
        lent = set(same)
        columns = [(self.table if name in lent else table).column(name) for name in names]
        fields = [(self.table if name in lent else table).schema.field(name) for name in names]
        return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=table.schema.metadata))


BASELINE_HELP = "median:K | last | best | label:L"


def parse_baseline(how: str) -> tuple[str, int]:
    """(kind, K) of a --baseline value; K is 1 for last, best and label."""
    kind, _, arg = how.partition(":")
    if kind not in ("last", "best", "label", "median") or (kind in ("label", "median")) != bool(arg):
        raise HistoryError(f"--baseline {how!r} is not valid; valid: {BASELINE_HELP}")
    if kind == "median":
        if not (arg.isdigit() and 3 <= int(arg) <= 1000):
            raise HistoryError(
                f"--baseline {how!r}: K must be a whole number of runs from 3 (a band needs three) to 1000"
            )
        return kind, int(arg)
    return kind, 1


def baseline(
    db: Location,
    cluster: str,
    how: str = DEFAULT_BASELINE,
    exclude: str | None = None,
    stack: dict[str, Any] | None = None,
    metrics: Collection[str] | None = None,
    also: pd.DataFrame | None = None,
) -> Side:
    """The baseline a new run is judged against, from the cluster's runs in the history.

    median:K  per key, the values of the K most recent runs where the key is usable (a run
              with replicates gives several); the comparison judges B against the band they
              draw. A key with fewer than K takes all of them, and is judged by the within-run
              test on their pooled samples, provisionally (compare's `margin`)
    last      per key, the newest run where the key is usable
    best      per key, the run with the best value (busbw, images/s)
    label:L   the most recent run labelled L

    The keys expected of the run under test are those planned in the newest run considered,
    and `also` (KEYS columns), drawn from the older runs that hold them: the run's own keys that
    the newest lacks (a smaller sweep), judged rather than listed as the run's alone.
    `exclude`: the fingerprint of the run under test, never its own baseline. `stack`: the run
    under test's (analysis/series.py): only runs of its series serve; None takes every run of
    the cluster (`bench regress --across-series`). `metrics`: the figures the baseline is drawn
    for, the Side's rows and runs holding those alone (None: every metric)."""
    kind, k = parse_baseline(how)
    label = how.partition(":")[2] if kind == "label" else None
    with session(db) as con:
        q = (
            _ENTRY
            + " WHERE cluster = ?"
            + (" AND fingerprint != ?" if exclude else "")
            + (" AND label = ?" if label else "")
            + " ORDER BY created DESC, id DESC"
        )
        params = [cluster] + ([exclude] if exclude else []) + ([label] if label else [])
        found = [Entry(*r) for r in con.execute(q, params)]
        if stack is not None and found:
            found = _of_series(con, db, cluster, found, stack)
        # an accepted run of the series is its new normal: nothing before it serves, and the
        # accepted run itself always does (the run under test is never among `found`)
        since = gate.accepted_since(con, [e.id for e in found]) if kind != "label" else None
        if since is not None:
            found = [e for e in found if (e.created, e.id) >= since]
        if (
            not found
            and exclude
            and not label
            and con.execute("SELECT 1 FROM runs WHERE cluster = ? AND fingerprint = ?", (cluster, exclude)).fetchone()
        ):
            raise HistoryError(
                f"{db}: the only run of cluster {cluster!r} in the history is the run under test; "
                f"add an earlier run as baseline"
            )
        if not found:
            clusters = [r[0] for r in con.execute("SELECT DISTINCT cluster FROM runs ORDER BY 1")]
            what = f"labelled {label!r} " if label else ""
            raise HistoryError(
                f"{db}: no run {what}of cluster {cluster!r} to use as baseline "
                f"(clusters in the history: {', '.join(clusters) or 'none'})"
            )
        if kind == "label":
            found = found[:1]
        elif kind != "best":
            found = found[: k + LOOKBACK]
        return _baseline(con, db, found, kind, k, how, list(METRICS if metrics is None else metrics), also)


def spreads(db: Location, entries: list[Entry], n: int = SPREAD_RUNS) -> list[float]:
    """The within-run spread of each of the newest `n` of a baseline's runs that have one: what
    its history shows of a run's own noise, for gating.weigh_run_noise. Stored when a run is
    added; a run added before (migration 10) has it worked out from its samples."""
    import math

    newest = sorted(entries, key=lambda e: (e.created, e.id), reverse=True)
    if not newest:
        return []
    out = []
    with session(db) as con:
        marks = ", ".join("?" * len(newest))
        stored = dict(con.execute(f"SELECT id, spread FROM runs WHERE id IN ({marks})", [e.id for e in newest]))
        for entry in newest:
            spread = stored.get(entry.id)
            if spread is None:
                samples = _load(con, db, entry, True, ["job"])[1]
                spread = samples_spread(samples) if samples is not None else None
            if spread is not None and not math.isnan(spread):
                out.append(float(spread))
            if len(out) == n:
                break
    return out


def samples_spread(samples: pa.Table) -> float | None:
    """stats.within_spread of a run's samples table, the rows it reads alone made a matrix;
    None where no row has enough samples."""
    import pyarrow.compute as pc

    metric = samples.column("metric")  # each row's sampled time: time_us or step_time_ms
    parts = []
    for name in pc.unique(metric):
        values = samples.filter(pc.equal(metric, name)).column("values")
        lengths = pc.list_value_length(values).fill_null(0).to_numpy()
        parts.append(padded(values.take(spread_rows(lengths))))
    spread, rows = within_spread(parts)
    return spread if rows else None


def stacks(con: Connection, cluster: str | None) -> dict[int, dict[str, Any]]:
    """run id -> the stack it ran on (analysis/series.py), for a cluster's runs or all."""
    sql = "SELECT id, stack_fields, environment FROM runs" + (" WHERE cluster = ?" if cluster else "")
    return {int(i): series.recorded(f, env) for i, f, env in con.execute(sql, (cluster,) if cluster else ())}


def _of_series(con: Connection, db: Location, cluster: str, found: list[Entry], stack: dict[str, Any]) -> list[Entry]:
    """The entries (newest first) of the run under test's series; none is a HistoryError that
    says how the newest run's stack differs."""
    known = stacks(con, cluster)
    kept = [e for e in found if series.same(known[e.id], stack)]
    if not kept:
        raise NewSeries(found[0], series.differences(known[found[0].id], stack), series.digest(stack))
    return kept


class NewSeries(HistoryError):
    """No run of the cluster ran on the run's stack: it starts a new series."""

    def __init__(self, newest: Entry, differences: list[str], stack: str):
        self.newest, self.differences, self.stack = newest, differences, stack
        super().__init__(
            f"no run of this cluster ran on this run's stack {stack}; the newest, {newest.name}, differs in "
            f'{"; ".join(differences)}: this run starts a new series (docs/guides/fleet.md, "What a series is")'
        )


def _baseline(
    con: Connection,
    db: Location,
    found: list[Entry],
    kind: str,
    k: int,
    how: str,
    metrics: list[str],
    also: pd.DataFrame | None,
) -> Side:
    """Choose each key's runs from the entries, newest first (analysis/baseline.py), then build
    one Side of them. The chosen rows' job names carry their entry's id, so that their samples
    stay apart."""

    def read_samples(entry: Entry) -> pa.Table | None:
        return _load(con, db, entry, with_samples=True, columns=["job"])[1]

    refused = gate.rejected(con, [e.id for e in found])
    with _Ahead(con, db, found, baseline_rows.columns_read(kind, metrics)) as read:
        drawn = baseline_rows.draw(found, kind, k, read, read_samples, refused, metrics, also)
    used, environment = drawn.used, drawn.environments[found[0].id]
    # the rules and benches of every run the baseline draws on, not the newest's alone: one run
    # of other rules among them makes the comparison one across rules (docs/concepts/provenance.md)
    for key, default in (("measurement_rules", ["1"]), ("bench", [])):
        seen = {str(v) for e in used for v in drawn.environments[e.id].get(key) or default}
        environment = {**environment, key: sorted(seen)} if seen else environment
    source = "history " + (
        f"run {used[0].id} ({used[0].path})" if len(used) == 1 else f"runs {', '.join(str(e.id) for e in used)}"
    )
    label = (found[0].label or how) if kind == "label" else f"{how} of {len(used)} run{'s' if len(used) != 1 else ''}"
    side = grouped_side(
        drawn.rows,
        drawn.codes,
        drawn.figures,
        drawn.pooled,
        drawn.others,
        label,
        source,
        environment,
        order=drawn.order,
    )
    side.entries = used
    return side


class _Ahead:
    """A baseline's reads of its entries' summaries. The draw reads the same columns of each
    entry in turn, newest first: those are fetched here and decoded and checked by one thread
    a few entries ahead of the draw, since Arrow's Parquet reader lets go of the interpreter's
    lock while the draw chooses rows (docs/guides/fleet.md, "A large run against a month of
    nights"). An entry's error is raised when the
    draw reads it, as without the thread; one never read is never raised. The newest entry's
    read of every column is done by the thread too, first; any other read is done here.
    Leaving the block ends the thread: a process with a thread never forks (harness/run/forked.py)."""

    AHEAD = 4  # entries decoded before the draw asks for them

    def __init__(self, con: Connection, db: Location, found: list[Entry], columns: list[str]):
        from concurrent.futures import ThreadPoolExecutor

        self.con, self.db, self.found, self.columns = con, db, found, columns
        self.at = {e.id: i for i, e in enumerate(found)}
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="bench-baseline")
        self.shared = _Shared()  # in the thread alone
        self.decoding: dict[int, Future[tuple[pa.Table, pa.Table | None, dict[str, Any]]]] = {}
        self.submitted = 0
        # the newest entry read whole, first: the draw begins with it (its keys are those expected),
        # and it is decoded here while pandas is imported for it
        self.whole = None
        if found:
            with contextlib.suppress(HistoryError):  # said when the draw reads it, by _load
                self.whole = self.pool.submit(_decode, db, found[0], _fetch(con, db, found[0], False), None)
        self._submit(self.AHEAD)

    def _submit(self, upto: int) -> None:
        from concurrent.futures import Future

        for entry in self.found[self.submitted : upto + 1]:
            try:
                blobs = _fetch(self.con, self.db, entry, with_samples=False)
            except HistoryError as exc:  # said when the draw reads the entry, if it does
                self.decoding[entry.id] = Future()
                self.decoding[entry.id].set_exception(exc)
                continue
            self.decoding[entry.id] = self.pool.submit(_decode, self.db, entry, blobs, self.columns, self.shared)
        self.submitted = max(self.submitted, min(upto + 1, len(self.found)))

    def __call__(self, entry: Entry, columns: list[str] | None) -> tuple[pa.Table, dict[str, Any]]:
        decoding = None
        if columns is None and self.whole is not None and entry is self.found[0]:
            decoding, self.whole = self.whole, None
        elif columns == self.columns and entry.id in self.at:
            self._submit(self.at[entry.id] + self.AHEAD)
            decoding = self.decoding.pop(entry.id, None)  # None: read once already
        summary, _, env = decoding.result() if decoding else _load(self.con, self.db, entry, False, columns)
        return summary, env

    def __enter__(self) -> _Ahead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
