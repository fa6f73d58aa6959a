"""The summary set of a run: its columns and their types, its layout's version and the
columns later versions added (read as null from older runs), the run's facts in its metadata,
and its storage: summary.parquet, summary.csv and samples.parquet committed at once as one
generation (docs/reference/run-directory.md), and read back. harness/collect/gather.py builds the tables.
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import os
import reprlib
import secrets
import stat
import time
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import BREAKDOWN, COLLECTIVE_WORKLOAD, WORLD
from benchmarks.results import open_regular
from harness.errors import RunDirError, one_line
from harness.evidence import transport
from harness.evidence.stragglers import Straggler
from harness.files import inside
from harness.run.rundir import RunDir

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable

    import numpy as np
    import numpy.typing as npt
    import pandas as pd
    import pyarrow as pa

# The transformer's figures (benchmarks/transformer.py; docs/reference/sources.md, "FLOPs per token and
# MFU"): throughput in tokens, the model's size and FLOPs, and MFU against a stated peak
TRANSFORMER_COLUMNS = (
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "n_params",
    "flops_per_token",
    "achieved_tflops_per_gpu",
    "mfu",
    "peak_tflops_per_gpu",
)
# What a training row's synchronised step sends, from its result's `traffic` (docs/concepts/workloads.md,
# "What a step sends"): each collective's bytes as nccl-tests sizes them, and what a rank sends
TRAFFIC_COLUMNS = ("step_all_reduce_bytes", "step_all_gather_bytes", "step_reduce_scatter_bytes", "step_sent_bytes")
# A training or transformer result's figures, each the result's field of the same name, which
# gather.py copies into the job's row (but mfu and its peak, which it works out)
TRAINING_FIGURES = (
    "images_per_s",
    "images_per_s_per_gpu",
    *TRANSFORMER_COLUMNS,
    "step_time_ms",
    "step_time_ms_p10",
    "step_time_ms_p90",
    "compute_images_per_s",
    "data_wait_fraction",
    *BREAKDOWN,
    "batch_size",
    "global_batch",
)
# The columns of summary.csv, in order. Units are in the names.
COLUMNS = [
    "job",
    "config_hash",
    "workload",
    "scaling",
    "collective",
    "group",
    "nodes",
    "gpus_per_node",
    "world_size",
    "launcher",
    "backend",
    "device",
    "nccl_config",
    "status",
    "size_bytes",
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
    "busbw_peak_gbps",
    "busbw_pct_peak",
    "wrong",
    "time_us_p10",
    "time_us_median",
    "time_us_p90",
    "oop_time_us",
    "oop_algbw_gbps",
    "oop_busbw_gbps",
    "oop_wrong",
    *TRAINING_FIGURES,
    *TRAFFIC_COLUMNS,
    "model",
    "dtype",
    "efficiency",
    "speedup",
    "hosts",
    "net",
    "net_devices",
    "gdr",
    "intra_transport",
    "nccl_channels",
    "nccl_warnings",
    "nic_bytes_ratio",
    "nic_check",
    "hardware_faults",
    "reason",
    "log_tail",
    "repeat",
    "params",
    "settings",
    "settings_hash",
    "n_samples",
]
# The summary's own layout, stored in summary.parquet's metadata. 1: no marker (summaries written
# before the reason and log_tail columns); 2: with them; 3: the run's environment and stragglers
# in the metadata too (ENVIRONMENT_KEY, STRAGGLERS_KEY), so comparisons need not reopen results;
# 4: what makes two rows comparable (params, settings, settings_hash), the replicate (repeat)
# and the count of usable samples behind each row (n_samples).
# The transport columns (transport.COLUMNS), the peak columns (PEAK_COLUMNS), the NIC
# cross-check (NIC_COLUMNS), the hardware faults (FAULT_COLUMNS), the step's breakdown
# (catalog.BREAKDOWN), the group and the transformer's columns came later within 4: a summary
# without them reads as null there (upgraded, to_frame; the group as "world"), so histories of
# older runs stay usable.
SUMMARY_VERSION = 4
# busbw against what the profile says the links carry (docs/concepts/expected.md)
PEAK_COLUMNS = ("busbw_peak_gbps", "busbw_pct_peak")
# the collectives' bytes against the NIC counters (docs/concepts/telemetry.md): the worst node's ratio, and
# what was found, in words
NIC_COLUMNS = ("nic_bytes_ratio", "nic_check")
# what the nodes' IB error counters and kernel logs say of each workload (docs/concepts/faults.md)
FAULT_COLUMNS = ("hardware_faults",)
LATER_COLUMNS = (
    *transport.COLUMNS,
    *PEAK_COLUMNS,
    *NIC_COLUMNS,
    *FAULT_COLUMNS,
    *BREAKDOWN,
    *TRANSFORMER_COLUMNS,
    *TRAFFIC_COLUMNS,
)
VERSION_KEY = b"bench_summary_version"
ENVIRONMENT_KEY = b"bench_environment"
STRAGGLERS_KEY = b"bench_stragglers"
SAMPLE_KEYS = ["job", "workload", "scaling", "collective", "group", "size_bytes", "metric"]
INT_COLUMNS = {
    *TRAFFIC_COLUMNS,
    "n_params",
    "flops_per_token",
    "nodes",
    "gpus_per_node",
    "world_size",
    "size_bytes",
    "wrong",
    "oop_wrong",
    "batch_size",
    "global_batch",
    "repeat",
    "n_samples",
    "nccl_channels",
    "nccl_warnings",
}
TEXT_COLUMNS = {
    "job",
    "breakdown_note",
    "config_hash",
    "workload",
    "scaling",
    "collective",
    "group",
    "launcher",
    "backend",
    "device",
    "nccl_config",
    "status",
    "model",
    "dtype",
    "hosts",
    "reason",
    "log_tail",
    "params",
    "settings",
    "settings_hash",
    "net",
    "net_devices",
    "gdr",
    "intra_transport",
    "nic_check",
    "hardware_faults",
}


def arrow_type(name: str) -> pa.DataType:
    import pyarrow as pa

    return pa.string() if name in TEXT_COLUMNS else pa.int64() if name in INT_COLUMNS else pa.float64()


# Arrays made from their buffers, never by pa.array or pa.scalar: pyarrow imports pandas on its
# first conversion of anything that is not already Arrow, a NumPy array included (its pandas shim
# asks whether the object is a Series), and that import is a large part of each process of a
# collect, which needs pandas for nothing (docs/reference/sources.md, "Arrow and pandas").


def numpy_array(values: npt.NDArray[Any], valid: npt.NDArray[np.bool_] | None = None) -> pa.Array:
    """A NumPy array of numbers as an Arrow array of its type over the same memory; `valid`, where
    given, says which values are not null."""
    import numpy as np
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    if values.dtype.kind not in "iuf":
        raise TypeError(f"numpy_array takes numbers, not {values.dtype}")
    bitmap, nulls = _validity(valid)
    return pa.Array.from_buffers(
        pa.from_numpy_dtype(values.dtype), len(values), [bitmap, pa.py_buffer(values)], null_count=nulls
    )


def arrow_array(values: list[Any], arrow: pa.DataType) -> pa.Array:
    """`values` (None as null) as an Arrow array of `arrow`, a summary column's type (arrow_type):
    text, whole numbers or numbers. The values are what such a column holds, as check_columns
    makes sure of a result's: pa.array would refuse others, where NumPy makes numbers of some.
    One pass over the values where none is null: 100,000 scattered floats cost a pass each."""
    import numpy as np
    import pyarrow as pa

    n = len(values)
    if arrow == pa.string():
        distinct = list(dict.fromkeys(values))
        if len(distinct) <= 1:  # one text throughout (a run's dtype), or none
            return pa.repeat(_texts(distinct)[0], n) if distinct and distinct[0] is not None else pa.nulls(n, arrow)
        valid = np.fromiter((v is not None for v in values), dtype=bool, count=n) if None in distinct else None
        if len(distinct) * 4 > n:
            return _texts(values, valid)
        # a few texts over many rows (the catalog's collectives and groups): each encoded once
        place = {v: i for i, v in enumerate(distinct)}
        texts = _texts(distinct, np.array([v is not None for v in distinct]))
        return texts.take(numpy_array(np.fromiter(map(place.__getitem__, values), np.int64, n)))
    dtype = np.int64 if arrow == pa.int64() else np.float64
    try:  # a None: NaN as a float, TypeError as a whole number
        numbers = np.fromiter(values, dtype=dtype, count=n)
        if dtype == np.int64 or not np.isnan(numbers).any():
            return numpy_array(numbers)
    except TypeError:
        numbers = None
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
    if not valid.any():
        return pa.nulls(n, arrow)
    if numbers is None:
        numbers = np.fromiter((0 if v is None else v for v in values), dtype=dtype, count=n)
    return numpy_array(numbers, valid)


def arrow_scalar(value: Any, arrow: pa.DataType) -> pa.Scalar:
    return arrow_array([value], arrow)[0]


def _validity(valid: npt.NDArray[np.bool_] | None) -> tuple[pa.Buffer | None, int]:
    """(Arrow's validity bitmap, a bit a value, least significant first; the count of nulls), or
    no bitmap where nothing is null."""
    import numpy as np
    import pyarrow as pa

    if valid is None:
        return None, 0
    nulls = len(valid) - int(np.count_nonzero(valid))
    return (pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None), nulls


def _texts(values: list[str | None], valid: npt.NDArray[np.bool_] | None = None) -> pa.Array:
    """Texts as a UTF-8 Arrow array: their bytes one after another and where each begins."""
    import numpy as np
    import pyarrow as pa

    data = [b"" if v is None else v.encode() for v in values]
    offsets = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, data), dtype=np.int64, count=len(data)), out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError(f"{offsets[-1]:,} bytes of text, more than an Arrow string column holds")
    bitmap, nulls = _validity(valid)
    return pa.Array.from_buffers(
        pa.string(),
        len(data),
        [bitmap, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(data))],
        null_count=nulls,
    )


# What a value from a result may be in each kind of column, and the largest whole number it may
# be: pa.array refuses anything else when a table is built, which would end the whole collect (a
# bool it would take as 1, so it is refused here too). A float column takes whole numbers up to
# 2**53, those a double holds exactly; None is a null anywhere.
EXACT_IN_DOUBLE = 2**53
NUMBER_TYPES: frozenset[type] = frozenset({float, int, type(None)})
_Kind = tuple[frozenset[type], int, str]
_NUMBER: _Kind = (NUMBER_TYPES, EXACT_IN_DOUBLE, "a number")
_WHOLE: _Kind = (frozenset({int, type(None)}), 2**63 - 1, "a whole number")
_TEXT: _Kind = (frozenset({str, type(None)}), 0, "text")


@functools.lru_cache(maxsize=64)
def _by_kind(names: tuple[str, ...]) -> tuple[tuple[_Kind, tuple[str, ...]], ...]:
    """`names` grouped by what their summary columns hold."""
    kinds: dict[_Kind, list[str]] = {}
    for name in names:
        kind = _TEXT if name in TEXT_COLUMNS else _WHOLE if name in INT_COLUMNS else _NUMBER
        kinds.setdefault(kind, []).append(name)
    return tuple((kind, tuple(group)) for kind, group in kinds.items())


def check_columns(columns: dict[str, list], names: tuple[str, ...]) -> None:
    """Raise ValueError (collect then leaves the result out, with a warning) naming the first of
    the columns `names` given a value its summary column cannot hold: text for a number, a
    boolean, a list, a fraction for a count, a number past the column's range. One set of
    types a kind of column, checked once per result, not once per value."""
    for (holds, most, what), group in _by_kind(names):
        found = set(map(type, itertools.chain.from_iterable(columns[n] for n in group)))
        if found <= holds and (
            int not in found or within(itertools.chain.from_iterable(columns[n] for n in group), most)
        ):
            continue
        for name in group:
            for value in columns[name]:
                if type(value) not in holds:
                    raise ValueError(f"{name} is {_shown(value)}, not {what}")
                if type(value) is int and not -most <= value <= most:
                    raise ValueError(f"{name} is {_shown(value)}, past what its column holds")


def _shown(value: Any) -> str:
    """A value for a warning, cut short (reprlib); a whole number past 64 bits by its size."""
    if type(value) is int and value.bit_length() > 64:  # repr refuses past 4,300 digits
        return f"a whole number of {value.bit_length()} bits"
    return reprlib.repr(value)


def within(values: Iterable[Any], most: int) -> bool:
    """Whether the whole numbers among `values` lie within -most..most."""
    whole = [v for v in values if type(v) is int]
    return -most <= min(whole) and max(whole) <= most


def upgraded(table: pa.Table, wanted: Collection[str] | None = None) -> pa.Table:
    """A summary or samples table collected by an earlier bench of SUMMARY_VERSION, with the
    columns that came later within it, as collect writes them now: the `group` column
    (docs/reference/sources.md, "Groups"), "world" on collective rows and null (summary) or "" (samples)
    on the others; and the summary's LATER_COLUMNS, null: those `wanted` of a table read for
    some of its columns (100,000 rows of a null column cost a millisecond each)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    samples = "values" in table.column_names
    if "group" not in table.column_names and "workload" in table.column_names:
        coll = pc.equal(table.column("workload"), COLLECTIVE_WORKLOAD)
        column = pc.if_else(coll, pa.scalar(WORLD), pa.scalar("" if samples else None, pa.string()))
        at = table.column_names.index("collective") + 1 if "collective" in table.column_names else table.num_columns
        table = table.add_column(at, pa.field("group", pa.string()), column)
    for name in () if samples else LATER_COLUMNS:
        if wanted is not None and name not in wanted:
            continue
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows, type=arrow_type(name)))
    return table


def run_facts(schema: pa.Schema) -> tuple[dict[str, Any], list[Straggler]]:
    """(environment, stragglers) recorded in a summary's metadata by `collect`."""
    meta = schema.metadata or {}
    env = json.loads(meta.get(ENVIRONMENT_KEY, b"{}"))
    return env, [Straggler(**d) for d in json.loads(meta.get(STRAGGLERS_KEY, b"[]"))]


def summary_version(table: pa.Table) -> int:
    """The layout version of a summary Arrow table (1 when it carries no marker)."""
    raw = (table.schema.metadata or {}).get(VERSION_KEY, b"1")
    try:
        return int(raw)
    except ValueError:
        return 0


def to_frame(table: pa.Table) -> pd.DataFrame:
    """A summary table as a DataFrame: text as pandas strings, counts as nullable integers."""
    import pandas as pd
    import pyarrow as pa

    mapping = {pa.string(): pd.StringDtype(), pa.int64(): pd.Int64Dtype()}
    return upgraded(table).to_pandas(types_mapper=mapping.get)


SUMMARY_FILES = ("summary.parquet", "summary.csv", "samples.parquet")


def write_summary(run: RunDir, summary: pa.Table, samples: pa.Table) -> None:
    """Commit summary.parquet, summary.csv and samples.parquet (Arrow tables) as one set.

    The three are written into a new generation directory under `run.generations`, and one
    rename of the `current` link commits them together; DIR/summary.parquet and its siblings
    are links through `current`. A kill at any moment therefore leaves the old set or the new
    one, never a mix (docs/reference/run-directory.md). The caller holds the run's lock: what an earlier,
    interrupted collect left behind is removed here.
    """
    gens = run.generations.name
    linked = inside.readlink(run.path, f"{gens}/current") is not None and all(
        inside.readlink(run.path, n) in (_link_target(run, n), None) for n in SUMMARY_FILES
    )
    if not linked or any(_plain(run, n) for n in SUMMARY_FILES):
        _adopt_plain_files(run)
    new = f"{gens}/g-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{secrets.token_hex(3)}"
    inside.mkdir(run.path, new)
    for name, data in zip(SUMMARY_FILES, _encoded(summary, samples)):
        inside.write(run.path, f"{new}/{name}", data)
    inside.fsync(run.path, new)
    for name in SUMMARY_FILES:  # no-ops after the first collect
        inside.link(run.path, name, _link_target(run, name))
    inside.link(run.path, f"{gens}/current", new.rsplit("/", 1)[1])  # the commit
    inside.fsync(run.path, gens)
    inside.fsync(run.path)
    clean_generations(run)


def _encoded(summary: pa.Table, samples: pa.Table) -> list[bytes]:
    """The bytes of SUMMARY_FILES, encoded side by side, a thread a core: Arrow's Parquet and CSV
    writers let go of the interpreter's lock. The CSV, the largest of the three, is written as two
    halves, the second without the header, which put together are the same bytes, so that both
    cores share it too."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    def encode(table: pa.Table, write: Callable[..., None], *options: Any) -> bytes:
        buf = io.BytesIO()
        write(table, buf, *options)
        return buf.getvalue()

    half = summary.num_rows // 2
    with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
        parts = [
            pool.submit(encode, summary, pq.write_table),
            pool.submit(encode, summary.slice(0, half), pacsv.write_csv),
            pool.submit(encode, summary.slice(half), pacsv.write_csv, pacsv.WriteOptions(include_header=False)),
            pool.submit(encode, samples, pq.write_table),
        ]
        parquet, head, tail, samples_parquet = (p.result() for p in parts)
    return [parquet, head + tail, samples_parquet]  # in the order of SUMMARY_FILES


def _link_target(run: RunDir, name: str) -> str:
    return f"{run.generations.name}/current/{name}"


def _plain(run: RunDir, name: str) -> bool:
    """Whether DIR/NAME is a plain file (not bench's link into the generations)."""
    try:
        return stat.S_ISREG((run.path / name).lstat().st_mode)
    except OSError:
        return False


def _adopt_plain_files(run: RunDir) -> None:
    """Move a run collected by an older bench (plain files) to generations without a moment of
    mixed content: the plain files are hard-linked into a first generation, `current` names it,
    and only then does each plain file become a link to the same bytes. Whatever `.summary`
    held is not read while the plain files are (a copy made with the links followed), so it
    goes; a link there is removed, never followed."""
    gens = run.generations.name
    inside.remove(run.path, gens)
    first = f"{gens}/g-adopted-{os.getpid()}-{secrets.token_hex(3)}"
    inside.mkdir(run.path, first)
    adopted = []
    with inside.directory(run.path) as top, inside.directory(run.path, first) as into:
        for name in SUMMARY_FILES:
            if _plain(run, name):
                try:
                    os.link(name, name, src_dir_fd=top, dst_dir_fd=into, follow_symlinks=False)
                except OSError:  # a file system without hard links
                    with open_regular(run.path / name) as f:
                        inside.write(run.path, f"{first}/{name}", f.read())
                adopted.append(name)
    inside.fsync(run.path, first)
    inside.link(run.path, f"{gens}/current", first.rsplit("/", 1)[1])
    for name in adopted:
        inside.link(run.path, name, _link_target(run, name))


def clean_generations(run: RunDir) -> list[str]:
    """Remove what interrupted collects left: generations `current` does not name, and temporary
    files of the summary. Only under the run's lock, and only inside the run directory: a link
    among them is removed, never followed. Returns the names removed."""
    removed = []
    gens = run.generations.name
    keep = inside.readlink(run.path, f"{gens}/current")
    for name in inside.listing(run.path, gens):
        if name not in ("current", keep):
            inside.remove(run.path, f"{gens}/{name}")
            removed.append(f"{gens}/{name}")
    for name in inside.listing(run.path):  # temporaries of a write that was interrupted
        if name.startswith(tuple(f".{n}." for n in SUMMARY_FILES)) and name.endswith(".tmp"):
            inside.remove(run.path, name)
            removed.append(name)
    return removed


def read_summary(run: RunDir) -> pd.DataFrame:
    """The run's summary.parquet as a DataFrame."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = run.summary_set()["summary_parquet"]
    if not path.exists():
        raise RunDirError(f"{run.path}: no summary.parquet; run `bench collect {run.path}` first")
    try:
        with open_regular(path) as f:
            return to_frame(pq.read_table(f))
    except (OSError, pa.ArrowException) as exc:
        raise RunDirError(
            f"{run.summary_parquet}: unreadable ({one_line(str(exc))}); run `bench collect {run.path}` again"
        ) from None
