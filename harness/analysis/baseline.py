"""Which rows of which history runs a baseline takes, and the parts of the Side they make.

A month of nights is thirty runs of 100,000 keys: 3,000,000 rows, of which a baseline needs a
few columns and, of most rows, only the figures of the metrics it is drawn for. So each run
older than the newest is read as Arrow columns (columns_read), and its rows are matched to the
newest run's keys by position where its key columns are the newest's (a nightly run's plan is
the same matrix: one comparison of Arrow columns), by key hash otherwise. Each key's rows are
chosen as the runs are read, newest first, and the Side's figures are built from the chosen
rows as arrays: only the first chosen row of a key is read whole (its hosts, parameters,
settings), from the runs that give one. Of a run chosen from only its figures are kept: fresh
memory is what a month costs most (900 MB at the peak when all eight metrics of every run were
kept, 534 MB for the three a regress judges by default).

The choice per key (history.baseline says what each --baseline means): the rows a baseline may
use (usable_rows), newest run first and in a run by replicate; median:K takes the first K,
last the newest run's, best the one best figure, label:L its one run's. A key of the newest run
that no run read gives a usable row keeps the newest's row, completed or not: the comparison
finds it failed or without the samples it needs, never left out. Keys of the run under test
that the newest lacks (keys_beyond: the newest a smaller sweep) are drawn from the older runs
that hold them, when asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD
from harness.analysis import gate
from harness.analysis.compare import MIN_RUNS, aligned_sides
from harness.analysis.sides import KEYS, Entry, Side, key_frame, samples_by_row, usable
from harness.analysis.stats import matrix_parts, pool
from harness.run.rundir import COMPLETED

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    import numpy.typing as npt
    import pandas as pd
    import pyarrow as pa

    from harness.analysis.stats import Counts, Values

    # an entry's summary (READ's columns, or None: whole) and its environment
    Reader = Callable[[Entry, list[str] | None], tuple[pa.Table, dict[str, Any]]]
    SampleReader = Callable[[Entry], pa.Table | None]  # an entry's samples

# what a baseline reads of a run other than the newest: its keys, what makes a row usable
# (usable_rows), and then the figures it is drawn for (columns_read)
READ = [*KEYS, "job", "status", "repeat", "n_samples", "time_us", "step_time_ms"]
SCORED = ["busbw_gbps", "images_per_s", "tokens_per_s"]  # what `best` ranks rows by


@dataclass
class _Run:
    """One run as the baseline read it: its usable rows of the newest run's keys, in the order
    the baseline takes them (by replicate), and which of them it took."""

    entry: Entry
    metrics: pa.Table  # the figures of its summary as read; the rest is let go once it is chosen from
    rows: npt.NDArray[np.intp]  # usable rows of wanted keys, by replicate
    keys: npt.NDArray[np.intp]  # each one's key: its place in `wanted`
    taken: npt.NDArray[np.bool_]


@dataclass
class Drawn:
    """A baseline's chosen rows, as sides.grouped_side takes them."""

    rows: pd.DataFrame  # the first chosen row of each key, job names as "ID/job" ("-/job": the newest's)
    codes: npt.NDArray[np.intp]  # each completed row's key: its row in `rows`
    # the completed rows by key, in the order taken (a stable sort of codes); None where that
    # is the parts' matrix read by column (stats.matrix_parts)
    order: npt.NDArray[np.intp] | None
    figures: dict[str, Values]  # each metric drawn for: its value per completed row
    pooled: dict[str, tuple[Values, Counts]]  # samples by key, where the runs are too few for a band
    others: pd.DataFrame  # the newest run's rows that did not complete
    used: list[Entry]  # the runs a chosen row came from, by id
    environments: dict[int, dict[str, Any]]  # of every run read


def columns_read(kind: str, metrics: list[str]) -> list[str]:
    """The columns a baseline of a kind drawn for some metrics reads of each run (READ and the
    metrics; `best` ranks by SCORED too): a comparison of three metrics reads three of eight."""
    return list(dict.fromkeys([*READ, *(SCORED if kind == "best" else []), *metrics]))


def draw(
    found: list[Entry],
    kind: str,
    k: int,
    read: Reader,
    read_samples: SampleReader,
    refused: dict[int, set[str]],
    metrics: list[str],
    also: pd.DataFrame | None = None,
) -> Drawn:
    """The baseline's rows from the entries (newest first), for `metrics` (figures holds those
    alone); `refused`: run id -> keys the gate rejected (gate.rejected), never a baseline.
    `also`: keys (KEYS columns) wanted beyond the newest run's, drawn from the older runs that
    hold them: the run under test's, where the newest run was a smaller sweep."""
    import numpy as np
    import pandas as pd

    columns = columns_read(kind, metrics)
    newest, environment = read(found[0], None)
    environments = {found[0].id: environment}
    expected = key_frame(newest)  # the newest run says which keys are expected
    expected_keys = key_hash(expected)
    reference = read(found[0], columns)[0] if len(found) > 1 else newest  # its keys, as the others are read
    # each newest row's key: its place in wanted. One sort gives both, a tenth of the time of
    # np.unique alone (hashing) and a search of each key in its result
    extra = key_hash(also) if also is not None and len(also) else expected_keys[:0]
    wanted, newest_at = np.unique(np.concatenate([expected_keys, extra]), return_inverse=True)
    newest_at = newest_at.reshape(-1)[: len(expected_keys)]
    # a night of the newest's keys whose rows are all usable, one a key, shares these two arrays
    # rather than making its own (fresh memory is what a month of nights costs most)
    every = np.arange(len(newest_at))
    newest_at.flags.writeable = every.flags.writeable = False
    counted = np.zeros(len(wanted), dtype=np.int64)  # per wanted key: the usable rows read so far
    # of a night whose every row is usable, in the newest's order: its rows per key and each
    # row's replicates before it, worked out once
    newest_counts = np.bincount(newest_at, minlength=len(wanted))
    newest_once = _occurrence(newest_at) if kind == "median" else None
    choice = _Choice(kind, k, len(wanted))
    steady = _Steady(reference, every)
    runs: list[_Run] = []
    for rank, entry in enumerate(found):
        table = newest
        if rank:
            table, environments[entry.id] = read(entry, columns)
        same = rank == 0 or _same_keys(table, reference)  # the newest's keys, row by row
        if same:
            at, ok = newest_at, steady.usable(table)
        else:
            hashes = key_hash(_frame(table))
            at = np.searchsorted(wanted, hashes)
            known = at < len(wanted)  # an empty newest run wants nothing
            at[~known] = 0
            ok = usable_rows(table) & known
            ok[known] &= wanted[at[known]] == hashes[known]
        if entry.id in refused:
            ok &= gate.kept(expected if rank == 0 else _frame(table), refused[entry.id])
        rows = every if len(ok) == len(every) and ok.all() else np.flatnonzero(ok)
        rows = steady.by_replicate(table, rows) if same else _by_replicate(table, rows)
        keys = at if rows is every else at[rows]
        once = newest_once if keys is newest_at else _occurrence(keys) if kind == "median" else None
        taken = choice.take(rank, table, keys, rows, counted, once)
        run = _Run(entry, table.select(metrics), rows, keys, taken)
        del table  # its keys' and states' columns, for the next night's read to reuse
        runs.append(run)
        counted += newest_counts if keys is newest_at else np.bincount(keys, minlength=len(wanted))
        # every expected key with K usable rows (1 for "last") among the runs read so far
        if kind in ("median", "last") and bool((counted >= (k if kind == "median" else 1)).all()):
            break
    if kind == "best":
        choice.settle(runs)

    never = counted[newest_at] == 0
    failed_at = (expected["status"] != COMPLETED).to_numpy(dtype=bool, na_value=True) | never
    failed = expected[failed_at].assign(job="-/" + expected.loc[failed_at, "job"])
    failed_done = (failed["status"] == COMPLETED).to_numpy(dtype=bool, na_value=False)  # never usable, yet completed

    # the completed rows in the order the baseline takes them, run by run: the chosen rows, then
    # the newest's never usable ones
    done = failed[failed_done]
    chosen = [r for r in runs if r.taken.any()]
    parts = [(r.keys, r.rows) if r.taken.all() else (r.keys[r.taken], r.rows[r.taken]) for r in chosen]
    parts.append((newest_at[failed_at][failed_done], np.arange(len(done))))

    def keys_of(run: _Run) -> pd.DataFrame:
        return expected if run.entry is found[0] else key_frame(read(run.entry, None)[0])

    codes, pieces, groups = _coded(parts, chosen, keys_of, done, len(wanted))
    code = np.concatenate(codes)
    # nights of one plan: the order is their matrix read by column, as stats.pool_columns reads
    # it, with no order of a month's millions of rows built and none scattered
    order = (
        None if matrix_parts(code, groups) else _by_key(code, _places([keys for keys, _ in parts], len(wanted)), groups)
    )

    figures = {
        name: _figures(name, [(r.metrics, rows) for r, (_, rows) in zip(chosen, parts)], done) for name in metrics
    }

    # a key with fewer chosen rows than a band needs: their median against the run's value, their
    # samples pooled for the within-run test, provisionally (docs/concepts/noise.md, "With fewer than K runs")
    chosen_codes = codes[: len(chosen)]
    n_chosen = np.bincount(code[: len(code) - len(done)], minlength=groups)  # `done` comes last
    within = n_chosen < (k if kind == "median" else MIN_RUNS)
    taken_rows = [(run, rows, c) for run, (_, rows), c in zip(chosen, parts, chosen_codes)]
    return Drawn(
        rows=pd.concat(pieces, ignore_index=True) if pieces else expected.iloc[:0],
        codes=code,
        order=order,
        figures=figures,
        pooled=_pooled(taken_rows, within, groups, lambda entry: read(entry, columns)[0], read_samples),
        others=failed[~failed_done],
        used=sorted((r.entry for r in chosen), key=lambda e: e.id),
        environments=environments,
    )


def _pooled(
    taken: list[tuple[_Run, npt.NDArray[np.intp], npt.NDArray[np.intp]]],
    within: npt.NDArray[np.bool_],
    groups: int,
    read: Callable[[Entry], pa.Table],
    read_samples: SampleReader,
) -> dict[str, tuple[Values, Counts]]:
    """The samples of every row taken (run, rows, their codes) of the runs that gave a key
    judged within runs, pooled by key; their keys read again (a run's READ columns are not
    kept, and a key judged within runs is the exception)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    frames, samples, row_codes = [], [], []
    for run, rows, codes in taken:
        if not within[codes].any():
            continue
        s = read_samples(run.entry)
        if s is None or not s.num_rows:
            continue
        table = read(run.entry)
        frame = _frame(table.take(pa.array(rows)).select([c for c in READ if c in table.column_names]))
        frames.append(frame.assign(job=f"{run.entry.id}/" + frame["job"]))
        row_codes.append(codes)
        jobs = pc.binary_join_element_wise(pa.scalar(f"{run.entry.id}/"), s.column("job"), "")
        samples.append(s.set_column(s.column_names.index("job"), "job", jobs))
    if not frames:
        return {}
    rows_all, at = pd.concat(frames, ignore_index=True), np.concatenate(row_codes)
    out = {}
    for name, (vals, counts) in samples_by_row(pa.concat_tables(samples), rows_all).items():
        mask = (np.arange(vals.shape[1])[None, :] < counts[:, None]) & usable(vals)
        out[name] = pool(at, vals, mask, groups)
    return out


class _Choice:
    """Which of each run's usable rows a baseline takes, run by run (best: once all are read)."""

    def __init__(self, kind: str, k: int, keys: int):
        import numpy as np

        self.kind, self.k = kind, k
        self.first_rank = np.full(keys, -1, dtype=np.int64)  # last: the run each key is taken from
        self.best = np.full(keys, -np.inf)  # best: each key's best score so far, its run and row
        self.best_run = np.full(keys, -1, dtype=np.int64)
        self.best_at = np.zeros(keys, dtype=np.int64)

    def take(
        self,
        rank: int,
        table: pa.Table,
        keys: npt.NDArray[np.intp],
        rows: npt.NDArray[np.intp],
        counted: npt.NDArray[np.int64],
        once: npt.NDArray[np.int64] | None,
    ) -> npt.NDArray[np.bool_]:
        """`once`: median's, each row's replicates before it in the run (_occurrence)."""
        import numpy as np

        if self.kind == "median":  # a key's first K usable rows, whichever runs hold them
            assert once is not None
            return counted[keys] + once < self.k
        if self.kind == "last":  # the newest run where the key is usable, with all its replicates
            first = self.first_rank[keys]
            self.first_rank[keys[first < 0]] = rank
            return (first < 0) | (first == rank)
        if self.kind == "best":  # the one row of the best figure: the first of equals
            score = np.where(
                _texts_equal(table, "workload", COLLECTIVE_WORKLOAD),
                _floats(table, "busbw_gbps"),
                np.where(np.isnan(s := _floats(table, "images_per_s")), _floats(table, "tokens_per_s"), s),
            )[rows]
            score = np.where(np.isnan(score), -np.inf, score)
            order = np.lexsort((np.arange(len(keys)), -score, keys))  # per key, best first, then the first
            lead = order[np.r_[True, keys[order][1:] != keys[order][:-1]]] if len(keys) else order
            better = (self.best_run[keys[lead]] < 0) | (score[lead] > self.best[keys[lead]])
            won = lead[better]
            self.best[keys[won]], self.best_run[keys[won]], self.best_at[keys[won]] = score[won], rank, won
            return np.zeros(len(keys), dtype=bool)
        return np.ones(len(keys), dtype=bool)  # label: its one run, every usable row

    def settle(self, runs: list[_Run]) -> None:
        """best: mark the rows that stayed best."""
        for rank, run in enumerate(runs):
            run.taken[self.best_at[self.best_run == rank]] = True


def _coded(
    parts: list[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]],
    chosen: list[_Run],
    keys_of: Callable[[_Run], pd.DataFrame],
    done: pd.DataFrame,
    wanted: int,
) -> tuple[list[npt.NDArray[np.intp]], list[pd.DataFrame], int]:
    """Each part's rows (their keys' places among the `wanted` keys, and their rows) coded by
    key, a key's code the order it first comes in; and the first row of each key, in code order:
    from its run's key columns (`keys_of`, job names as "ID/job") for a part of `chosen`, from
    `done` for the last part, the newest's never usable rows. Returns the codes of each part,
    those first rows and how many keys there are."""
    import numpy as np

    code_of = np.full(wanted, -1, dtype=np.intp)
    codes, pieces, groups = [], [], 0
    for i, (keys, rows) in enumerate(parts):
        new = np.flatnonzero(code_of[keys] < 0)
        if len(new):  # the keys this part gives first, in the order they come: their first rows
            new = new[np.sort(np.unique(keys[new], return_index=True)[1])]
            code_of[keys[new]] = np.arange(groups, groups + len(new))
            groups += len(new)
            if i < len(chosen):
                piece = keys_of(chosen[i]).iloc[rows[new]]
                pieces.append(piece.assign(job=f"{chosen[i].entry.id}/" + piece["job"]))
            else:
                pieces.append(done.iloc[rows[new]])
        codes.append(code_of[keys])
    return codes, pieces, groups


def _places(parts: list[npt.NDArray[np.intp]], wanted: int) -> list[npt.NDArray[np.int64]]:
    """Each part's rows' places among the rows of their key (given as its place among the
    `wanted` keys) in all the parts before and in it."""
    import numpy as np

    before = np.zeros(wanted, dtype=np.int64)
    places = []
    for keys in parts:
        places.append(before[keys] + _occurrence(keys))
        before += np.bincount(keys, minlength=wanted)
    return places


def _by_key(code: npt.NDArray[np.intp], places: list[npt.NDArray[np.int64]], groups: int) -> npt.NDArray[np.intp]:
    """The rows of all parts (their codes, and each part's rows' places among their key's rows)
    in key order: a stable sort of the codes, by where each row goes."""
    import numpy as np

    starts = np.concatenate([[0], np.cumsum(np.bincount(code, minlength=groups))[:-1]]).astype(np.int64)
    at = np.concatenate(places)
    at += starts[code]
    order = np.empty(len(code), dtype=np.intp)
    order[at] = np.arange(len(code))
    return order


def _occurrence(keys: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
    """How many times each value came before in `keys` (a key's replicates in one run)."""
    import numpy as np

    if not len(keys) or np.bincount(keys).max() <= 1:
        return np.zeros(len(keys), dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    out = np.empty(len(keys), dtype=np.int64)
    out[order] = np.arange(len(keys)) - np.repeat(starts, np.diff(np.r_[starts, len(keys)]))
    return out


def _same_keys(table: pa.Table, reference: pa.Table) -> bool:
    """The same key columns, row by row, read the same way (their dictionaries too)."""
    return table.num_rows == reference.num_rows and all(table.column(c).equals(reference.column(c)) for c in KEYS)


def _frame(table: pa.Table) -> pd.DataFrame:
    """key_frame of a table read with its texts as dictionaries: decoded first, so that its
    keys hash as the newest run's do."""
    import pyarrow as pa

    plain = [pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in table.schema]
    return key_frame(table.cast(pa.schema(plain, metadata=table.schema.metadata)))


def _figures(name: str, taken: list[tuple[pa.Table, npt.NDArray[np.intp]]], done: pd.DataFrame) -> Values:
    """One metric's value per completed row: the rows taken of each table, then `done`'s. A
    metric no table and no row of `done` holds (a collective sweep's images/s: most metrics of
    most rows) is one NaN seen as many, not 24 MB of them at 3,000,000 rows."""
    import numpy as np

    last = done[name].to_numpy(dtype=float, na_value=np.nan)
    total = sum(len(rows) for _, rows in taken) + len(last)
    if all(t.column(name).null_count == t.num_rows for t, _ in taken) and not np.isfinite(last).any():
        return np.broadcast_to(np.float64(np.nan), (total,))
    out, at = np.empty(total), 0
    for table, rows in taken:
        np.take(_floats(table, name), rows, out=out[at : at + len(rows)])
        at += len(rows)
    out[at:] = last
    return out


def _floats(table: pa.Table, name: str) -> Values:
    import numpy as np

    return np.asarray(table.column(name).to_numpy(), dtype=float)  # nulls are NaN


def _texts_equal(table: pa.Table, name: str, text: str) -> npt.NDArray[np.bool_]:
    """Rows whose text is `text`, false where null. A dictionary-encoded column (READ's texts)
    is compared entry by entry of its dictionaries, its rows looked up: a few distinct texts,
    not a comparison of each row."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    column = table.column(name)
    if not pa.types.is_dictionary(column.type):
        return pc.equal(column, text).fill_null(False).to_numpy()
    parts = [np.zeros(0, dtype=bool)]
    for chunk in column.chunks:
        equal = pc.equal(chunk.dictionary, text).fill_null(False).to_numpy(zero_copy_only=False)
        indices = chunk.indices.fill_null(-1) if chunk.null_count else chunk.indices
        parts.append(np.append(equal, False)[indices.to_numpy()])  # a null's -1: the False appended
    return np.concatenate(parts)


def usable_rows(table: pa.Table) -> npt.NDArray[np.bool_]:
    """Rows a baseline may use: completed, with a finite positive time and two usable samples."""
    collective, settled = _settled(table)
    return settled & _timed(table, collective)


def _settled(table: pa.Table) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """What of usable_rows the figures leave alone: (the collectives' rows, those completed
    with two samples)."""
    samples = table.column("n_samples").fill_null(0).to_numpy()
    return _texts_equal(table, "workload", COLLECTIVE_WORKLOAD), _texts_equal(table, "status", COMPLETED) & (
        samples >= 2
    )


def _timed(table: pa.Table, collective: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Rows with a finite positive time: a collective's time_us, a training step's time."""
    import numpy as np

    time = np.where(collective, _floats(table, "time_us"), _floats(table, "step_time_ms"))
    with np.errstate(invalid="ignore"):
        return np.isfinite(time) & (time > 0)


def _by_replicate(table: pa.Table, rows: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """`rows` in the order a baseline takes them: by replicate, stably."""
    import numpy as np

    repeat = table.column("repeat").fill_null(np.iinfo(np.int64).max).to_numpy()[rows]
    if len(repeat) and (repeat[1:] < repeat[:-1]).any():  # replicates listed out of order
        return rows[np.argsort(repeat, kind="stable")]
    return rows


class _Steady:
    """What of usable_rows and of the replicates' order the draw works out once for the nights
    whose columns hold what the reference's (the newest night's) hold: nightly runs of one plan
    store their workloads, states, sample counts and replicates alike (history._Shared lends the
    first night's to the others), and their figures alone differ night by night. An Arrow column
    lent is the same memory, and equal at once."""

    SETTLED = ("workload", "status", "n_samples")

    def __init__(self, reference: pa.Table, every: npt.NDArray[np.intp]):
        self.reference, self.every = reference, every
        self.settled: tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]] | None = None
        self.ordered: npt.NDArray[np.intp] | None = None  # `every` by replicate

    def _alike(self, table: pa.Table, names: tuple[str, ...]) -> bool:
        return all(table.column(n).equals(self.reference.column(n)) for n in names)

    def usable(self, table: pa.Table) -> npt.NDArray[np.bool_]:
        """usable_rows of a table of the reference's keys, row by row."""
        if not self._alike(table, self.SETTLED):
            return usable_rows(table)
        if self.settled is None:
            self.settled = _settled(self.reference)
        collective, settled = self.settled
        return settled & _timed(table, collective)

    def by_replicate(self, table: pa.Table, rows: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
        """_by_replicate of a table of the reference's keys, row by row."""
        if rows is not self.every or not self._alike(table, ("repeat",)):
            return _by_replicate(table, rows)
        if self.ordered is None:
            self.ordered = _by_replicate(self.reference, rows)
            self.ordered.flags.writeable = False
        return self.ordered


def keys_beyond(b: Side, a: Side) -> pd.DataFrame:
    """The keys (KEYS columns) B planned, completed or not, that A has no row of: those a
    baseline drawn from the history's newest run lacks when that run was a smaller sweep."""
    import numpy as np
    import pandas as pd

    def keys(side: Side) -> pd.DataFrame:
        return pd.concat([side.rows[KEYS], *([side.others[KEYS]] if side.others is not None else [])])

    if (b.others is None or not len(b.others)) and aligned_sides(a, b):
        return b.rows[KEYS].iloc[:0]  # a night of the newest's plan, every key completed
    mine = keys(b)
    new = ~np.isin(key_hash(mine), key_hash(keys(a)))
    return mine[new].drop_duplicates().reset_index(drop=True)


def key_hash(df: pd.DataFrame) -> npt.NDArray[np.uint64]:
    """One 64-bit hash per row of its key columns: set operations on keys without tuples. Every
    frame hashed comes through sides.key_frame, so equal keys have equal dtypes and hashes."""
    import pandas as pd

    return pd.util.hash_pandas_object(df[KEYS], index=False).to_numpy()
