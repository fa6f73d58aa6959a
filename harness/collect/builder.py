"""The summary built a result at a time, as Arrow tables: each column one value per add or, for
a collective's figures, row by row (harness/collect/gather.py reads the results it is built from).
Arrays are made from their buffers (harness/collect/summary.py, `arrow_array`): no pandas."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD
from harness.collect.summary import COLUMNS, SAMPLE_KEYS, arrow_array, arrow_scalar, arrow_type, numpy_array

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa


class Builder:
    """The summary built an add at a time (a result's rows, or a row where no result is): each
    column is one value per add, repeated over the add's rows in C, unless the add gives it row
    by row (a collective's figures): a result's rows are one add of a few lists, not a row of
    60 columns each."""

    def __init__(self) -> None:
        self.counts: list[int] = []  # rows per add
        self.consts: list[dict[str, Any]] = []
        self.per_row: list[dict[str, list]] = []
        self.row_wise: set[str] = set()  # the columns some add gives row by row
        self.values: list[list[float]] = []
        self.sample_rows: list[int] = []  # the summary row of each entry of `values`
        self.rows = 0
        # columns as whole lists, made when asked for (the row-wise ones, n_samples): name -> list
        self.columns = _WholeColumns(self.counts, self.consts, self.per_row)
        self._flat: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]] | None = None

    def add(
        self, n: int, const: dict[str, Any], per_row: dict[str, list] | None = None, values: Sequence[list[float]] = ()
    ) -> None:
        """`n` rows: `per_row`'s columns row by row, the others `const`'s value (or null); the
        sample lists `values` belong to the first len(values) of them. `const` is kept, not
        copied: the caller does not change it after."""
        self.sample_rows.extend(range(self.rows, self.rows + len(values)))
        self.rows += n
        self.counts.append(n)
        self.consts.append(const)
        self.per_row.append(per_row or {})
        self.row_wise.update(per_row or ())
        self.values.extend(values)

    def table(self) -> pa.Table:
        """The summary's rows as a typed Arrow table, converted in C (None becomes null), with no
        speedup or efficiency yet (_scaled) and none of its metadata."""
        import numpy as np
        import pyarrow as pa

        n_samples = self.columns["n_samples"]
        for row, count in zip(self.sample_rows, usable_counts(*self.flat())):
            n_samples[row] = count
        repeated = numpy_array(np.repeat(np.arange(len(self.counts)), self.counts))
        arrays = {}
        for name in COLUMNS:
            if name in self.row_wise or name == "n_samples":
                arrays[name] = arrow_array(self.columns[name], arrow_type(name))
            else:
                arrays[name] = _repeated([c.get(name) for c in self.consts], arrow_type(name), repeated)
        return pa.table(arrays)

    def flat(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """(each list's length, all the sample values in one array), a null sample (a result
        writes a non-finite one as null: json_safe) as NaN, which no test uses: never a null in
        samples.parquet, which would read as damage (sides.check_samples)."""
        import numpy as np

        if self._flat is None:
            lengths = np.fromiter(map(len, self.values), dtype=np.int64, count=len(self.values))
            # in C, without a list of them all first; a None (_checked_samples lets only numbers
            # and None through) becomes NaN, as np.array makes it
            flat = np.fromiter(itertools.chain.from_iterable(self.values), dtype=float, count=int(lengths.sum()))
            self._flat = lengths, flat
        return self._flat

    def samples(self, summary: pa.Table) -> pa.Table:
        """One row per summary row with samples: its keys (the summary's, where a training row
        has "" for collective and group and 0 for size), the metric, the values as a list."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        keys = summary.select(SAMPLE_KEYS[:-1]).take(numpy_array(np.array(self.sample_rows, dtype=np.int64)))
        text = pa.string()
        # is_in: false, never null, where the workload is null (fill_null would make a scalar)
        collective = pc.is_in(keys.column("workload"), value_set=arrow_array([COLLECTIVE_WORKLOAD], text))
        lengths, flat = self.flat()
        offsets = numpy_array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        return pa.table(
            {
                **{k: keys.column(k) for k in SAMPLE_KEYS[:3]},
                "collective": pc.if_else(collective, keys.column("collective"), arrow_scalar("", text)),
                "group": pc.if_else(collective, keys.column("group"), arrow_scalar("", text)),
                "size_bytes": pc.if_else(collective, keys.column("size_bytes"), arrow_scalar(0, pa.int64())),
                "metric": pc.if_else(collective, arrow_scalar("time_us", text), arrow_scalar("step_time_ms", text)),
                # the list type given, so that its field is named as pa.array names it ("item")
                "values": pa.ListArray.from_arrays(offsets, numpy_array(flat), type=pa.list_(pa.float64())),
            }
        )


def _repeated(values: list, arrow: pa.DataType, repeated: pa.Array) -> pa.Array:
    """A column of one value per add, each repeated over its add's rows (`repeated`: each row's
    add). One value throughout (a run's device, or null for every collective row's images/s)
    is repeated without a gather of every row."""
    import pyarrow as pa

    first = values[0] if values else None
    if values.count(first) == len(values):
        return pa.nulls(len(repeated), arrow) if first is None else pa.repeat(arrow_scalar(first, arrow), len(repeated))
    return arrow_array(values, arrow).take(repeated)


class _WholeColumns(dict):
    """A Builder's columns as whole lists, each made on first use (the row-wise ones, n_samples).
    It holds the builder's lists, not the builder: a cycle would keep every row alive until
    the cycle collector walked them all."""

    def __init__(self, counts: list[int], consts: list[dict[str, Any]], per_row: list[dict[str, list]]) -> None:
        super().__init__()
        self.adds = counts, consts, per_row

    def __missing__(self, name: str) -> list:
        column: list = []
        for n, const, per_row in zip(*self.adds):
            if name in per_row:
                column.extend(per_row[name])
            else:
                column.extend(repeat(const.get(name), n))
        self[name] = column
        return column


def usable_counts(lengths: npt.NDArray[np.int64], flat: npt.NDArray[np.float64]) -> list[int]:
    """How many of each list's samples a test can use: finite, positive times. One pass over
    all of them (Builder.flat: the lists' lengths, and their values with a null as NaN)."""
    import numpy as np

    with np.errstate(invalid="ignore"):
        usable = np.concatenate([[0], np.cumsum((flat > 0) & np.isfinite(flat))])
    ends = np.cumsum(lengths)
    return (usable[ends] - usable[ends - lengths]).tolist()
