"""Which rows of which history runs a baseline takes (harness/analysis/baseline.py): each
--baseline's choice per key, over runs read by position and by key, with replicates, a failed
key, a key never usable and a run the gate rejected a key of."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from harness.analysis import baseline, gate
from harness.analysis.sides import METRICS, Entry, grouped_side, key_frame
from harness.collect.summary import COLUMNS, SUMMARY_VERSION, VERSION_KEY, arrow_type

SIZES = {"a": 1 << 20, "b": 2 << 20, "c": 4 << 20, "d": 8 << 20}


def _row(run: int, key: str, repeat: int = 0, status: str = "COMPLETED") -> dict:
    """One all_reduce row; its time names its run, key and replicate: 100 x run + 10 x key + repeat."""
    time = 100 * run + 10 * (list(SIZES).index(key) + 1) + repeat
    return {
        "job": f"n1-g8-{key}", "workload": "allreduce", "collective": "all_reduce", "group": "world",
        "nodes": 1, "gpus_per_node": 8, "launcher": "torchrun", "nccl_config": "default", "status": status,
        "size_bytes": SIZES[key], "time_us": float(time), "busbw_gbps": 1e5 / time, "algbw_gbps": 1e5 / time,
        "repeat": repeat, "n_samples": 1 if key == "c" else 20, "hosts": "n1", "params": "{}",
    }  # fmt: skip


def _table(rows: list[dict]) -> pa.Table:
    columns = {c: pa.array([r.get(c) for r in rows], type=arrow_type(c)) for c in COLUMNS}
    return pa.table(columns).replace_schema_metadata({VERSION_KEY: str(SUMMARY_VERSION).encode()})


def _entry(run: int) -> Entry:
    return Entry(run, "lab", None, f"/runs/{run}", "s", f"2026-11-0{run}", "", 5, 4, 0)


# newest first. Run 4: b failed, d's replicates listed second before first; run 3: its rows in
# the other order, so it is matched by key, not by position; run 2: the gate rejected its a.
RUNS = {
    4: [_row(4, "a"), _row(4, "b", status="FAILED"), _row(4, "c"), _row(4, "d", 1), _row(4, "d", 0)],
    3: [_row(3, "d", 1), _row(3, "d", 0), _row(3, "c"), _row(3, "b"), _row(3, "a")],
    2: [_row(2, "a"), _row(2, "b"), _row(2, "c"), _row(2, "d", 0), _row(2, "d", 1)],
    1: [_row(1, "a"), _row(1, "b"), _row(1, "c"), _row(1, "d", 0), _row(1, "d", 1)],
}


def _drawn(kind: str, k: int, runs: dict[int, list[dict]] | None = None, metrics: list[str] | None = None):
    runs = RUNS if runs is None else runs
    tables = {run: _table(rows) for run, rows in runs.items()}
    read, reads = [], []

    def reader(entry: Entry, columns: list[str] | None):
        read.append((entry.id, columns is None))
        reads.append(columns)
        table = tables[entry.id]
        if columns is not None:  # as history reads a part: its texts as dictionaries
            part = table.select(columns)
            table = pa.table(
                [c.dictionary_encode() if c.type == pa.string() else c for c in part.columns], names=part.column_names
            ).replace_schema_metadata(table.schema.metadata)
        return table, {"bench": [f"b{entry.id}"]}

    refused = {2: {gate.key_strings(key_frame(tables[2]))[0]}} if runs is RUNS else {}  # run 2's a
    drawn = baseline.draw([_entry(r) for r in runs], kind, k, reader, lambda e: None, refused, metrics or list(METRICS))
    side = grouped_side(
        drawn.rows, drawn.codes, drawn.figures, drawn.pooled, drawn.others, kind, "h", order=drawn.order
    )
    if metrics is not None:
        return side, reads
    values, counts = side.runs["time_us"]
    by_key = {
        key: [float(v) for v in values[i, : counts[i]]]
        for key, size in SIZES.items()
        for i in side.rows.index[side.rows["size_bytes"] == size]
    }
    return drawn, side, by_key, read


def test_median_takes_each_keys_first_k_usable_rows_newest_first():
    drawn, side, by_key, read = _drawn("median", 3)
    # a: run 2's was rejected by the gate; b: failed in the newest; d: the newest's replicates in
    # their order, then run 3's first
    assert by_key == {"a": [410.0, 310.0, 110.0], "b": [320.0, 220.0, 120.0], "c": [430.0], "d": [440.0, 441.0, 340.0]}
    rows = side.rows.set_index("size_bytes")
    # c never had two samples: the newest's row stays, to be found without the samples a test needs
    assert rows.loc[SIZES["c"], "job"] == "-/n1-g8-c" and rows.loc[SIZES["a"], "job"] == "4/n1-g8-a"
    assert rows.loc[SIZES["b"], "job"] == "3/n1-g8-b" and rows.loc[SIZES["b"], "failed_runs"] == 1
    assert rows.loc[SIZES["d"], "runs"] == 3 and rows.loc[SIZES["a"], "time_us"] == 310.0
    assert [e.id for e in drawn.used] == [1, 2, 3, 4] and drawn.environments[1] == {"bench": ["b1"]}
    # the older runs' columns are read, and a run whole only where a key's first row is in it
    assert read == [(4, True), (4, False), (3, False), (2, False), (1, False), (3, True)]


def test_last_takes_the_newest_usable_run_of_each_key_with_its_replicates():
    drawn, _, by_key, _ = _drawn("last", 1)
    assert by_key == {"a": [410.0], "b": [320.0], "c": [430.0], "d": [440.0, 441.0]}
    assert [e.id for e in drawn.used] == [3, 4]


def test_best_takes_each_keys_one_best_row():
    drawn, _, by_key, _ = _drawn("best", 1)
    # the busbw is best where the time is least: run 1's, but for a rejected row
    assert by_key == {"a": [110.0], "b": [120.0], "c": [430.0], "d": [140.0]}
    assert [e.id for e in drawn.used] == [1]


@pytest.mark.parametrize("kind", ["median", "last", "best"])
def test_a_run_matched_by_key_gives_what_the_same_run_in_order_gives(kind):
    """Run 3 sorted back into the newest's order is matched by position: the same baseline."""
    _, _, by_key, _ = _drawn(kind, 3)
    order = {(r["size_bytes"], r["repeat"]): r for r in RUNS[3]}
    saved = RUNS[3]
    try:
        RUNS[3] = [order[(r["size_bytes"], r["repeat"])] for r in RUNS[4]]
        assert _drawn(kind, 3)[2] == by_key
    finally:
        RUNS[3] = saved


def test_nights_of_one_plan_pool_each_key_across_the_runs():
    """Four nights, each key once in the same order (a month of one plan: the order the band
    reads is the runs' matrix by column); then one night's rows reversed, matched by key."""
    nights = {run: [{**_row(run, key), "n_samples": 20} for key in SIZES] for run in (4, 3, 2, 1)}
    want = {key: [100.0 * run + 10 * (i + 1) for run in (4, 3, 2, 1)] for i, key in enumerate(SIZES)}
    assert _drawn("median", 4, nights)[2] == want
    nights[2] = nights[2][::-1]
    assert _drawn("median", 4, nights)[2] == want


def test_nights_of_the_newests_keys_each_take_their_own_replicates_order():
    """Nights whose keys are the newest's row by row share what is worked out once of the newest
    (baseline._Steady), but for what their own columns say: run 2 lists d's replicates the other
    way round, and is taken by replicate still; and where the newest's two rows of d leave room
    for one more, one is taken of run 3, not both."""
    nights = {
        4: [_row(4, "a"), _row(4, "d", 0), _row(4, "d", 1)],
        3: [_row(3, "a"), _row(3, "d", 0), _row(3, "d", 1)],
        2: [_row(2, "a"), _row(2, "d", 1), _row(2, "d", 0)],
        1: [_row(1, "a"), _row(1, "d", 0), _row(1, "d", 1)],
    }
    assert _drawn("median", 3, nights)[2] == {"a": [410.0, 310.0, 210.0], "d": [440.0, 441.0, 340.0]}
    assert _drawn("median", 8, nights)[2] == {
        "a": [410.0, 310.0, 210.0, 110.0],
        "d": [440.0, 441.0, 340.0, 341.0, 240.0, 241.0, 140.0, 141.0],
    }


@pytest.mark.parametrize("kind", ["median", "best"])
def test_a_baseline_drawn_for_one_metric_reads_and_holds_that_one_alone(kind):
    """regress draws for the metrics it judges: busbw's runs and medians are those of a baseline
    of every metric, and no other figure is read or left in the rows (the first chosen row's
    algbw would pass for a median)."""
    whole, _ = _drawn(kind, 3, metrics=list(METRICS))
    side, reads = _drawn(kind, 3, metrics=["busbw_gbps"])
    assert list(side.runs) == ["busbw_gbps"]
    (values, counts), (whole_values, whole_counts) = side.runs["busbw_gbps"], whole.runs["busbw_gbps"]
    assert counts.tolist() == whole_counts.tolist()
    assert np.array_equal(values, whole_values, equal_nan=True)
    assert side.rows["busbw_gbps"].tolist() == whole.rows["busbw_gbps"].tolist()
    assert not {"algbw_gbps", "images_per_s", "tokens_per_s_per_gpu"} & set(side.rows.columns)
    parts = [c for c in reads if c is not None]
    assert parts and all("algbw_gbps" not in c and "busbw_gbps" in c and "time_us" in c for c in parts)
    # best ranks training rows by images/s and tokens/s, so reads them; median does not
    assert all(("images_per_s" in c) == (kind == "best") for c in parts)


def test_texts_compared_by_their_dictionaries_are_those_compared_row_by_row():
    """usable_rows finds completed rows by the dictionary of a part read (history's texts): a
    null row is not one, whatever its slot's index, and a dictionary may name a text twice."""
    plain = pa.array(["COMPLETED", None, "FAILED", "COMPLETED", None, "x"])
    chunks = [
        plain[:3].dictionary_encode(),
        plain[3:].dictionary_encode(),
        pa.array([], pa.string()).dictionary_encode(),
    ]
    twice = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 2]), pa.array(["COMPLETED", "FAILED", "COMPLETED"]))
    want = [True, False, False, True, False, False]
    assert baseline._texts_equal(pa.table({"s": plain}), "s", "COMPLETED").tolist() == want
    assert baseline._texts_equal(pa.table({"s": pa.chunked_array(chunks)}), "s", "COMPLETED").tolist() == want
    assert baseline._texts_equal(pa.table({"s": twice}), "s", "COMPLETED").tolist() == [True, False, False, True]
