"""Comparison of two sides (two runs, two settings sets of one run, or a run and a baseline from
the history), key by key.

A key is a point of the matrix: workload, collective, scaling mode, nodes, GPUs per node,
launcher, settings set and message size. Every key A completed or B planned and did not complete
gets one row per metric asked for, with one verdict:

    failed                   B's job for it did not complete it, whether or not A has it (FAILED,
                             WRONG_RESULTS, ...): the row carries B's status and the job's reason
    only in A                A completed the key and B never planned it (another sweep): nothing
                             failed, and nothing was judged
    slower / faster          the change passes the threshold AND the noise test (below)
    cannot judge             the figures cannot carry a verdict: zero, NaN or inf, fewer samples
                             than the test needs, or workload parameters that differ
    no significant change    otherwise

The noise test, per key (stats.py says how):

    between runs   where A holds the values of at least `min_runs` runs (history baselines,
                   replicates from `bench sweep --repeat`), B's value must lie outside the band
                   those runs draw
    within a run   otherwise, the Mann-Whitney test on the per-iteration samples must be
                   significant and its interval must exclude 1; with a `margin` (bench
                   regress: the provisional margin of the first nights, docs/concepts/noise.md), the
                   change must also pass it, since that test cannot see run-to-run noise

Two rows are comparable only when the workload parameters that decide what a figure measures
are equal (collect.COMPARED_PARAMS) and their settings sets hold the same variables (by content,
not by name). Where they differ the key cannot be judged, unless the user asks to compare anyway,
and then every output says so.

A and B are the metric as the summary states it (busbw from the average time, nccl-tests' way).
B/A comes from the estimator its interval does: within a run, the Hodges-Lehmann estimate of the
per-iteration samples' ratio, with its 95% CI; between runs, B over A's value, with A's band. A
verdict speaks of performance: a time that went up is "slower".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchmarks.catalog import COLLECTIVE_WORKLOAD
from harness.analysis import stats
from harness.analysis.sides import (
    CONFIG,
    DEFAULT_METRICS,
    KEYS,
    LIKE,
    METRICS,
    SEEN,
    Metric,
    Side,
    check_rules,
    env_differences,
    key_texts,
    unfinished_beyond,
    usable,
)
from harness.errors import DataError
from harness.run.rundir import COMPLETED

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd

    from harness.analysis.stats import Counts, Mask, Texts, Values

# Axes that `--across` compares inside one run: the configurations a sweep lays side by side.
AXES = ("nccl_config", "launcher")
FAILED, SLOWER, UNJUDGED, SAME, FASTER = "failed", "slower", "cannot judge", "no significant change", "faster"
ONLY_A = "only in A"  # a key B never planned: not a failure ("failed" is a job's), and not judged
WORST_FIRST = (FAILED, SLOWER, UNJUDGED, ONLY_A, SAME, FASTER)  # severity: tables, gates and reports sort by it
ORDER = {v: i for i, v in enumerate(WORST_FIRST)}
VERDICTS = (FAILED, SLOWER, UNJUDGED, ONLY_A, FASTER, SAME)  # the order a summary line counts them in
BY_RUNS, BY_SAMPLES = "between runs", "within run"
REFERENCE = "reference"  # judged against a cluster profile's stated figure (analysis/reference.py)
ABSENT = "absent"  # status_b of a key B never planned
MIN_RUNS = 5
# What a change must pass while A has fewer than MIN_RUNS runs of a key (bench regress): above
# the largest fall measured between two unshaped runs of one key where the link sets the time
# (35%), below a halving (docs/concepts/noise.md, "With fewer than K runs").
PROVISIONAL_MARGIN = 0.40
HELD = "inside the provisional margin"  # in the note of a change that margin held


@dataclass
class Comparison:
    a: Side
    b: Side
    table: pd.DataFrame  # one row per (metric, key), worst first
    new_in_b: pd.DataFrame  # keys B completed and A did not, with A's status
    env_diffs: list[str]
    threshold: float
    min_runs: int
    mismatches: list[str] = field(default_factory=list)  # the differing parameters, one line per kind
    allow_mismatch: bool = False
    across: tuple[str, str, str] | None = None  # (axis, A's value, B's value)
    margin: float = 0.0  # what a change judged within a run must also pass (compare's `margin`)
    must_catch: float | None = None  # the fall every unchanged key could have caught (gating.hold_to)
    gate_min_size: int | None = None  # collective keys below it do not gate (gating.watch_below)
    run_noise: str | None = None  # why B, noisier than its history, was not judged (gating.weigh_run_noise)

    def counts(self) -> dict[str, int]:
        v = self.table["verdict"]
        return {k: int((v == k).sum()) for k in VERDICTS}

    def gate_counts(self) -> dict[str, int]:
        """counts() of the keys that set a gate's exit status: every key but those
        gating.watch_below left out, and every failed key whatever its size (a job failed)."""
        v = self.table["verdict"]
        counted = self.gating() | (v == FAILED).to_numpy(dtype=bool)
        return {k: int(((v == k).to_numpy(dtype=bool) & counted).sum()) for k in VERDICTS}

    def gating(self) -> Mask:
        """Which rows gate: all (no row lacks a verdict), but those gating.watch_below marked."""
        t = self.table
        return t["gating"].to_numpy(dtype=bool) if "gating" in t else t["verdict"].notna().to_numpy()

    @property
    def method(self) -> str:
        used = set(self.table["test"].dropna().unique())  # unique() in Arrow: 100,000 rows, not 100,000 items
        parts = []
        if BY_RUNS in used or not used:
            parts.append(f"between runs (where A has {self.min_runs} or more): {stats.BAND_METHOD}")
        if REFERENCE in used:
            return "against the cluster profile's reference figures: below value x (1 - tolerance) is slower"
        if BY_SAMPLES in used or not used:
            beyond = f"; provisional: a change must pass {self.margin:.0%}" if self.margin > self.threshold else ""
            parts.append(f"within a run (otherwise): {stats.METHOD}, α = {stats.ALPHA}{beyond}")
        return "; ".join(parts)


# --------------------------------------------------------------------------- comparing


def parse_threshold(text: str, option: str = "--threshold", whole: bool = False) -> float:
    """'5%' or '0.05' -> 0.05; below 100%, or up to 100% itself where `whole` is allowed."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"{option} {text!r} is not a percentage like 5%") from None
    if not (0 <= value <= 1 if whole else 0 <= value < 1) or math.isnan(value):
        raise ValueError(f"{option} {text!r} must be at least 0% and {'at most' if whole else 'below'} 100%")
    return value


def parse_across(text: str) -> tuple[str, str, str]:
    """'nccl_config=ib,socket' -> ('nccl_config', 'ib', 'socket'); 'nccl', the sweep's name of
    the axis (`bench sweep --only nccl=...`), is the same axis."""
    axis, _, values = text.partition("=")
    axis = "nccl_config" if axis.strip() == "nccl" else axis.strip()
    parts = [p.strip() for p in values.split(",")]
    if axis not in AXES or len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise ValueError(
            f"--across {text!r} is not valid; give AXIS=A,B with AXIS one of {', '.join(AXES)} (or nccl) and two "
            f"different values, e.g. nccl_config=ib,socket"
        )
    return axis, parts[0], parts[1]


def compare(
    a: Side,
    b: Side,
    metrics: tuple[str, ...] = DEFAULT_METRICS,
    threshold: float = 0.05,
    *,
    min_runs: int = MIN_RUNS,
    allow_mismatch: bool = False,
    across: tuple[str, str, str] | None = None,
    margin: float = 0.0,
    allow_rules_change: bool = False,
) -> Comparison:
    """The comparison of B against A. With `across` = (axis, x, y), A's rows of axis value x
    against B's rows of value y (A and B may be the same run). A key judged within a run (A has
    fewer than `min_runs` runs of it) is slower or faster only when its change also passes
    `margin`: the provisional verdict of a gate's first nights."""
    import numpy as np
    import pandas as pd

    rules = check_rules(a, b, allow_rules_change)
    if across:
        axis, x, y = across
        for side, value in ((a, x), (b, y)):
            if not (side.rows[axis] == value).any():
                have = sorted(set(side.rows[axis].astype(str)))
                why = ""  # the value's rows did not complete: say why (a failed job, a transport mismatch)
                if side.others is not None and axis in side.others:
                    own = side.others[(side.others[axis] == value).to_numpy(dtype=bool)]
                    why = next((f"; its rows are {st}: {r}" for st, r in zip(own["status"], own["reason"]) if r), "")
                raise DataError(
                    f"--across {axis}={x},{y}: {side.source} has no completed row with {axis} {value!r} "
                    f"(it has: {', '.join(have) or 'none'}{why})"
                )
        a, b = a.where(axis, x, f"{x} vs {y}"), b.where(axis, y, f"{x} vs {y}")
    ignore_settings = across is not None and across[0] == "nccl_config"
    aligned = aligned_sides(a, b)
    parts, mismatch_parts, matched = [], [], []
    for name in metrics:
        metric = METRICS[name]
        ra, rb = (_metric_rows(s.rows, metric) for s in (a, b))
        if ra.empty:
            continue
        m, in_b = _joined(ra, rb, [name, "_i", "runs", *LIKE, *SEEN], aligned)
        for lost in (m[~in_b], unfinished_beyond(b, ra, metric).assign(**{f"{name}_a": np.nan, "runs_a": 0})):
            if len(failed := _failed_rows(lost, b, name)):
                parts.append(failed)
        m = m[in_b]
        if metric.zero_for_one_rank:
            m = m[(m["nodes"] * m["gpus_per_node"] > 1).to_numpy(dtype=bool)]
        ia = m["_i_a"].to_numpy(dtype=np.int64)
        vals, counts = a.runs[name]
        by_runs = counts[ia] >= min_runs
        matched.append((metric, m, by_runs, *stats.band(vals[ia], counts[ia])))
    # one floor for every key judged between runs, whatever its metric: run-level noise is
    # shared, and more keys steady its estimate (stats.band_limits)
    spreads = [spread[by_runs] for _, _, by_runs, _, spread in matched]
    floor = stats.spread_floor(np.concatenate(spreads) if spreads else np.zeros(0))
    for metric, m, by_runs, centre, spread in matched:
        judged, mism = _judge(
            m,
            a,
            b,
            metric,
            threshold,
            by_runs,
            stats.band_limits(centre, spread, floor),
            allow_mismatch,
            ignore_settings,
            margin,
        )
        if len(judged):
            parts.append(judged)
        mismatch_parts.append(mism)
    if not parts:
        raise DataError(
            f"{a.source} and {b.source} have no completed key in common for "
            f"{', '.join(metrics)}; compare runs of the same sweep"
        )
    table = worst_first(pd.concat(parts, ignore_index=True))
    table.insert(len(KEYS) + 1, "key", key_texts(table))
    mismatches = _mismatch_lines(pd.concat(mismatch_parts, ignore_index=True))
    # Comparable: a key B has at all (judged, failed with a status, or unjudged for its values),
    # other than one whose parameters differ
    absent = (table["status_b"] == ABSENT).to_numpy(dtype=bool)
    differ = (table["mismatch"].astype("boolean").fillna(False) & (table["verdict"] == UNJUDGED)).to_numpy(dtype=bool)
    if not (~absent & ~differ).any():
        if mismatches:
            raise DataError(
                f"nothing comparable between {a.source} and {b.source}: the workload parameters differ "
                f"on every common key ({'; '.join(mismatches)}); compare anyway with --allow-mismatch"
            )
        raise DataError(
            f"{a.source} and {b.source} have no completed key in common for "
            f"{', '.join(metrics)}; compare runs of the same sweep"
        )
    same_run = a.source == b.source
    return Comparison(
        a,
        b,
        table,
        _new_keys(b, a, aligned),
        ([rules] if rules else []) + ([] if same_run else env_differences(a.environment, b.environment)),
        threshold,
        min_runs,
        mismatches,
        allow_mismatch,
        across,
        margin,
    )


def _transport_notes(m: pd.DataFrame, note: Texts) -> Texts:
    """`note` with "transports differ" added where both sides' facts are known and differ: the
    verdict then compares two transports, not two runs over one."""
    import numpy as np

    def seen(side: str, rows: npt.NDArray[np.intp]) -> list[str]:
        net = m[f"net_{side}"].to_numpy(dtype=object)[rows]
        devices = m[f"net_devices_{side}"].iloc[rows]
        devices = devices.astype(object).where(devices.notna(), None)
        return [f"{n} ({d})" if d is not None else str(n) for n, d in zip(net, devices)]

    rows = np.flatnonzero((m["net_a"].notna() & m["net_b"].notna()).to_numpy(dtype=bool))  # both known
    out = note.copy()
    for i, x, y in zip(rows, seen("a", rows), seen("b", rows)):
        if x != y:
            text = f"transports differ: A ran over {x}, B over {y}"
            out[i] = text if not out[i] else f"{out[i]}; {text}"
    return out


def _metric_rows(rows: pd.DataFrame, metric: Metric) -> pd.DataFrame:
    sub = rows[rows["workload"].isin(metric.workloads)]
    return sub.assign(_i=sub.index.to_numpy())


def worst_first(table: pd.DataFrame) -> pd.DataFrame:
    """The rows by verdict, worst first (WORST_FIRST), then by change, smallest first and a
    missing one last; rows alike keep their order. One lexsort of two arrays, which is half the
    work of pandas' sort_values by the two columns."""
    import numpy as np

    rank = verdict_ranks(table["verdict"], np.nan)  # a verdict not in ORDER (or none) goes last
    return table.take(np.lexsort((table["change"].to_numpy(dtype=float), rank))).reset_index(drop=True)


def verdict_ranks(verdicts: pd.Series, missing: float) -> npt.NDArray[np.float64]:
    """Each row's verdict's place in WORST_FIRST, `missing` for none or one not there: the
    distinct verdicts looked up once, not each row's as Series.map would."""
    import numpy as np
    import pandas as pd

    codes, seen = pd.factorize(verdicts)
    return np.array([ORDER.get(v, missing) for v in seen] + [missing], dtype=float)[codes]


def _failed_rows(m: pd.DataFrame, b: Side, name: str) -> pd.DataFrame:
    """Rows for keys A completed and B did not: failed, with B's status and reason, or only in
    A where B never planned the key."""
    import numpy as np

    out = m[KEYS].reset_index(drop=True)
    if not len(out):
        return out
    out = _status_of(out, b)
    status = out["status"].astype(object).where(out["status"].notna(), None)
    notes = []
    for st, reason, job in zip(status, out["reason"].astype(object), out["job"].astype(object)):
        if st is None:
            notes.append(f"never planned in {b.label}")
        else:
            why = f": {reason}" if isinstance(reason, str) and reason else ""
            notes.append(f"{job} {st} in {b.label}{why}")
    status_b = [ABSENT if st is None else st for st in status]
    out = out[KEYS].copy()
    out.insert(0, "metric", name)
    # the columns of a judged row (_judge), in its order: nothing measured in B, nothing tested
    out["a"] = m[f"{name}_a"].to_numpy(dtype=float)
    for col in ("b", "ratio", "ci_low", "ci_high", "p_value", "band_low", "band_high"):
        out[col] = np.nan
    never = np.array([st is None for st in status], dtype=bool)
    out["change"] = np.where(never, np.nan, -np.inf)  # a failed key's change is total; an absent one has none
    out["catches"] = np.nan
    out["runs_a"], out["runs_b"] = m["runs_a"].to_numpy(), 0
    out["n_a"], out["n_b"] = 0, 0
    out["test"] = None
    out["verdict"] = np.where(never, ONLY_A, FAILED).astype(object)
    out["note"] = notes
    out["status_b"] = status_b
    out["mismatch"] = False
    return out


def _judge(
    m: pd.DataFrame,
    a: Side,
    b: Side,
    metric: Metric,
    threshold: float,
    by_runs: Mask,
    limits: tuple[Values, Values],
    allow_mismatch: bool,
    ignore_settings: bool,
    margin: float = 0.0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Verdicts for keys both sides completed, and the rows whose parameters differ. `by_runs`
    marks the rows judged between runs, within the band `limits` (low, high values); the others
    must pass `margin` too."""
    import numpy as np

    name = metric.name
    ia, ib = m["_i_a"].to_numpy(dtype=np.int64), m["_i_b"].to_numpy(dtype=np.int64)
    value_a = m[f"{name}_a"].to_numpy(dtype=float)
    value_b = m[f"{name}_b"].to_numpy(dtype=float)
    # between runs: B's value against the band of A's per-run values
    runs_a = a.runs[name][1][ia]
    lo, hi = limits
    with np.errstate(all="ignore"):
        band_low, band_high = lo / value_a, hi / value_a
    worse = (value_b < lo) if metric.higher_is_better else (value_b > hi)
    better = (value_b > hi) if metric.higher_is_better else (value_b < lo)
    # within a run: the samples' rank test, where the rows are not judged between runs
    (sa, ca), (sb, cb) = _samples(a, metric, ia), _samples(b, metric, ib)
    testable = np.zeros(len(m), dtype=bool)  # asked of the rows judged within a run only
    testable[~by_runs] = stats.can_reject(ca[~by_runs], cb[~by_runs])
    need = ~by_runs & testable
    shift = stats.rate_shift(sa, sb, np.where(need, ca, 0), np.where(need, cb, 0))
    # B/A from the estimator its interval comes from: within a run the samples' Hodges-Lehmann
    # ratio beside its CI (the summary's figures, from mean times, can differ: 1.559 once stood
    # beside [1.038, 1.117]); between runs B over A's value, the centre of A's band
    within = need & np.isfinite(shift.ratio)
    with np.errstate(all="ignore"):
        ratio = np.where(within, shift.ratio if metric.higher_is_better else 1 / shift.ratio, value_b / value_a)
    perf = ratio if metric.higher_is_better else 1 / ratio
    low, high = shift.low, shift.high
    ci_low, ci_high = (low, high) if metric.higher_is_better else (1 / high, 1 / low)
    significant = shift.p_value < stats.ALPHA
    gate = np.where(by_runs, threshold, max(threshold, margin))
    with np.errstate(invalid="ignore"):
        slower = np.where(by_runs, worse, significant & (high < 1)) & (perf < 1 - gate)
        faster = np.where(by_runs, better, significant & (low > 1)) & (perf > 1 + gate)
        # changes the within-run test calls slower or faster, held by the provisional margin
        held = ~by_runs & significant & ((high < 1) & (perf < 1 - threshold) | (low > 1) & (perf > 1 + threshold))
    verdict = np.full(len(m), SAME, dtype=object)
    verdict[faster], verdict[slower] = FASTER, SLOWER
    note = np.full(len(m), "", dtype=object)
    held &= ~slower & ~faster
    if held.any():
        note = np.where(
            held,
            np.asarray(
                [
                    f"{p - 1:+.0%} is {HELD} of {margin:.0%}, which holds while A "
                    f"has fewer runs of the key than a band needs ({k})"
                    for p, k in zip(perf, runs_a)
                ],
                dtype=object,
            ),
            note,
        )
    differ = _differ(m, "params")
    if not ignore_settings:
        differ |= _differ(m, "settings_hash")
    diff_text = _diff_texts(m, differ, ignore_settings)  # of the rows that differ, in order
    # why a key cannot be judged: of the reasons that apply, the one listed last (a figure that
    # cannot be judged outranks too few samples), worded for the rows it applies to only
    bad_a, bad_b = ~usable(value_a), ~usable(value_b)
    few = ~by_runs & ~testable
    note = note.copy()
    for cond, text in (
        (few, lambda i: f"too few samples for the test: {ca[i]} in A, {cb[i]} in B"),
        (bad_b, lambda i: f"{metric.label} is {value_b[i]:g} in B"),
        (bad_a, lambda i: f"{metric.label} is {value_a[i]:g} in A"),
    ):
        verdict = np.where(cond, UNJUDGED, verdict)
        at = np.flatnonzero(cond)
        note[at] = [text(i) for i in at]
    said = "compared despite differing parameters" if allow_mismatch else "parameters differ"
    if not allow_mismatch:
        verdict = np.where(differ, UNJUDGED, verdict)
    note[differ] = [f"{said}: {t}" for t in diff_text]
    note = _transport_notes(m, note)
    # B completed the key, but another of its runs did not: a failure, whatever the values say
    lost = b.rows["failed_runs"].to_numpy()[ib] if "failed_runs" in b.rows else np.zeros(len(m), dtype=np.int64)
    status_b = np.full(len(m), COMPLETED, dtype=object)
    if lost.any():
        failed = lost > 0
        why = [
            f"{k} of {k + n} runs failed in {b.label}: {w}"
            for k, n, w in zip(lost, m["runs_b"].to_numpy(), b.rows["failed_note"].to_numpy()[ib])
        ]
        verdict = np.where(failed, FAILED, verdict)
        note = np.where(failed, np.asarray(why, dtype=object), note)
        status_b = np.where(failed, b.rows["failed_status"].to_numpy()[ib], status_b)
    part = m[KEYS].copy()
    part.insert(0, "metric", name)
    part["a"], part["b"], part["ratio"] = value_a, value_b, ratio
    part["ci_low"], part["ci_high"], part["p_value"] = ci_low, ci_high, shift.p_value
    part["band_low"] = np.where(by_runs, band_low, np.nan)
    part["band_high"] = np.where(by_runs, band_high, np.nan)
    part["change"] = perf - 1
    caught = stats.catches(by_runs, band_low if metric.higher_is_better else 1 / band_high, shift, threshold, margin)
    part["catches"] = np.where(np.isin(verdict, (SAME, SLOWER, FASTER)), caught, np.nan)  # of a judged key only
    part["runs_a"], part["runs_b"] = runs_a, m["runs_b"].to_numpy()
    part["n_a"], part["n_b"] = ca, cb
    part["test"] = np.where(by_runs, BY_RUNS, BY_SAMPLES)
    part["verdict"] = verdict
    part["note"] = note
    part["status_b"] = status_b
    part["mismatch"] = differ
    mism = m.loc[differ, ["workload", "scaling", "collective"]].assign(diff=diff_text)
    return part, mism


def _samples(side: Side, metric: Metric, idx: npt.NDArray[np.int64]) -> tuple[Values, Counts]:
    import numpy as np

    if metric.samples not in side.samples:
        return np.full((len(idx), 1), np.nan), np.zeros(len(idx), dtype=np.int64)
    vals, counts = side.samples[metric.samples]
    return vals[idx], counts[idx]


def _differ(m: pd.DataFrame, name: str) -> Mask:
    """Rows whose `name` differs between A and B, as Python's != finds of their objects. Where
    neither side misses a value, compared as the columns' own arrays, with no Python object
    made for each value."""
    a, b = m[f"{name}_a"], m[f"{name}_b"]
    if a.hasnans or b.hasnans:
        return a.to_numpy(dtype=object) != b.to_numpy(dtype=object)
    return (a != b).to_numpy(dtype=bool)


def _diff_texts(m: pd.DataFrame, differ: Mask, ignore_settings: bool) -> list[str]:
    """For each row where `differ`, in order, what differs between A's and B's parameters
    ('batch_size 8 vs 4'), worked out once per distinct pair."""
    import numpy as np

    cache: dict[tuple, str] = {}
    out = []
    rows = m.iloc[np.flatnonzero(differ)]  # those alone made objects of
    cols = [
        rows[c].to_numpy(dtype=object)
        for c in ("params_a", "params_b", "settings_a", "settings_b", "settings_hash_a", "settings_hash_b")
    ]
    for pair in zip(*cols):
        if pair not in cache:
            pa_, pb, sa, sb, ha, hb = pair
            cache[pair] = _diff_text(pa_, pb, sa, sb, ha, hb, ignore_settings)
        out.append(cache[pair])
    return out


def _diff_text(pa_: object, pb: object, sa: object, sb: object, ha: object, hb: object, ignore_settings: bool) -> str:
    da, db = _params(pa_), _params(pb)
    diffs = [
        f"{k} {_show(da.get(k))} vs {_show(db.get(k))}" for k in sorted(set(da) | set(db)) if da.get(k) != db.get(k)
    ]
    if not ignore_settings and ha != hb:
        diffs.append(f"settings {sa or '(none)'} vs {sb or '(none)'}")
    return ", ".join(diffs) or "parameters not recorded"


def _params(text: object) -> dict[str, Any]:
    try:
        value = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _show(v: object) -> str:
    return "-" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def _mismatch_lines(mism: pd.DataFrame | None) -> list[str]:
    """One line per (workload, difference): 'synthetic weak: batch_size 8 vs 4 (3 keys)'."""
    if mism is None or not len(mism):
        return []
    what = (
        mism["workload"].astype(str)
        + " "
        + mism["scaling"].astype(str).where(mism["workload"] != COLLECTIVE_WORKLOAD, mism["collective"].astype(str))
    )
    counts = mism.assign(_what=what.str.strip()).groupby(["_what", "diff"], sort=True).size()
    return [f"{w}: {d} ({n} key{'s' if n != 1 else ''})" for (w, d), n in counts.items()]


def _status_of(keys: pd.DataFrame, side: Side) -> pd.DataFrame:
    """`keys` with the side's status, reason and job for each (None where the side never
    planned it). A workload that failed before it measured anything has one summary row with
    no collective and no size: it stands for every size of that job."""
    cols = ["status", "reason", "job"]
    others = side.others if side.others is not None else None
    if others is None or not len(others):
        return keys.assign(**dict.fromkeys(cols))
    out = keys.merge(others[KEYS + cols], on=KEYS, how="left")
    whole = others[(others["collective"] == "") & (others["size_bytes"] == 0)].drop_duplicates(CONFIG)
    if len(whole) and out["status"].isna().any():
        fill = keys.merge(whole[CONFIG + cols], on=CONFIG, how="left")
        for c in cols:
            out[c] = out[c].astype(object).where(out[c].notna(), fill[c].astype(object))
    return out


def aligned_sides(a: Side, b: Side) -> bool:
    """Whether A's and B's rows are the same keys in the same order: a run against a baseline of
    nights of its own plan, or against a run of it. Then a join of their rows is the two side by
    side (_joined), and B has no key A has not."""
    return len(a.rows) == len(b.rows) and a.rows[KEYS].equals(b.rows[KEYS])


def _joined(ra: pd.DataFrame, rb: pd.DataFrame, columns: list[str], aligned: bool) -> tuple[pd.DataFrame, Mask]:
    """A's rows with B's of the same key, `columns` of each suffixed _a and _b (a left join on
    KEYS), and which rows B has. Rows `aligned` are put side by side: the join's frame without
    pandas' merge of every key, for each metric."""
    import numpy as np
    import pandas as pd

    left, right = ra[KEYS + columns], rb[KEYS + columns]
    if not aligned:
        m = left.merge(right, on=KEYS, how="left", suffixes=("_a", "_b"), indicator=True)
        return m, (m.pop("_merge") == "both").to_numpy()
    left, right = left.reset_index(drop=True), right[columns].reset_index(drop=True)
    m = pd.concat([left, right.add_suffix("_b")], axis=1).rename(columns={c: f"{c}_a" for c in columns})
    return m, np.ones(len(m), dtype=bool)


def _new_keys(b: Side, a: Side, aligned: bool = False) -> pd.DataFrame:
    """Keys B completed and A did not, with A's status where A ran the key."""
    m = b.rows[KEYS].assign(_in=1) if aligned else b.rows[KEYS].merge(a.rows[KEYS].assign(_in=1), on=KEYS, how="left")
    only = _status_of(m[m["_in"].isna()][KEYS].reset_index(drop=True), a)
    only["status"] = only["status"].astype(object).where(only["status"].notna(), ABSENT)
    only["key"] = key_texts(only)
    return only
