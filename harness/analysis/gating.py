"""What a gate asks of a comparison beyond its verdicts (docs/concepts/noise.md, "What a key can catch"):
that a key it calls unchanged could have caught the fall the site needs caught (`hold_to`,
`bench regress --must-catch`), that the run is no noisier than its history (`weigh_run_noise`),
and which keys set its exit status (`watch_below`, `--gate-min-size`). Each key's catches, the
smallest fall its verdict would have flagged, is worked out where it is judged (stats.catches);
`catch_text` says it to a reader."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from benchmarks.catalog import COLLECTIVE_WORKLOAD
from benchmarks.common import format_size
from harness.analysis.compare import FASTER, ONLY_A, SAME, SLOWER, UNJUDGED, Comparison, worst_first

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt

    from harness.analysis.stats import Mask

# The fall `bench regress` must be able to catch on a key to call it unchanged: a quarter of a
# link, which a real cluster's large messages are steady enough to catch from their fifth night
# (docs/concepts/noise.md, "What a key can catch"); 100% asks nothing.
MUST_CATCH = 0.25
TOO_NOISY = "too noisy to catch"  # in the note of a key that could not have caught MUST_CATCH
# A run whose samples spread more than NOISY_RUN times as wide as its history's, wider than any
# of its runs and than the fall the gate must catch, on the median key, is not judged;
# MIN_SPREADS runs are the least that shows a history's spread (docs/concepts/noise.md, "A run noisier
# than its history")
NOISY_RUN = 2.5
MIN_SPREADS = 3
RUN_TOO_NOISY = "the run is noisier than its history"


def hold_to(cmp: Comparison, must_catch: float) -> None:
    """A gate's rule that a key it could not have judged is not a pass: each key with no
    significant change whose catches (the smallest fall its verdict would have flagged) is
    larger than `must_catch` becomes "cannot judge", its note saying how large a fall it could
    catch. A key found slower, faster or failed keeps its verdict: it was caught."""
    import numpy as np

    t = cmp.table
    cmp.must_catch = must_catch
    caught = t["catches"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        hit = (t["verdict"] == SAME).to_numpy(dtype=bool) & (caught > must_catch)
    if not hit.any():
        return
    said = f"{TOO_NOISY} {must_catch:.0%}"
    _not_judged(cmp, hit, [f"{said} (catches {c})" for c in catch_texts(caught[hit])])


def weigh_run_noise(cmp: Comparison, own: float, read_history: Callable[[], list[float]], must_catch: float) -> None:
    """A run noisier than its history is not judged (docs/concepts/noise.md, "A run noisier than its
    history"). The run's within-run spread (stats.within_spread, ln(p90/p10) on its median key)
    is too wide when it is more than NOISY_RUN times the median of its history's newest runs,
    wider than every one of them, and wider than the fall the gate must catch, so that the
    run's own noise could make or hide that fall. Then each key found unchanged, slower or
    faster becomes "cannot judge", its note saying so; a failed job still fails. A history of
    fewer than MIN_SPREADS such runs shows too little to say; `must_catch` 100% asks nothing,
    and the history's spreads (`read_history`) are not read for it."""
    import numpy as np

    if own != own or must_catch >= 1:
        return
    history = read_history()
    if len(history) < MIN_SPREADS:
        return
    usual, widest = float(np.median(history)), max(history)
    if not (own > NOISY_RUN * usual and own > widest and own > -math.log(1 - must_catch)):
        return
    cmp.run_noise = (
        f"{RUN_TOO_NOISY}: its samples' p90/p10 is x{math.exp(own):.3g} on its median key, against "
        f"x{math.exp(usual):.3g} in the newest {len(history)} runs of its history (x{math.exp(widest):.3g} the "
        f"widest), and wider than the {must_catch:.0%} fall the gate must catch; a busy machine or a shared "
        f"link spreads a run so, and a fall or a pass read through it would be the noise's"
    )
    hit = cmp.table["verdict"].isin((SAME, SLOWER, FASTER)).to_numpy(dtype=bool)
    _not_judged(cmp, hit, [RUN_TOO_NOISY] * int(hit.sum()))


def _not_judged(cmp: Comparison, hit: Mask, why: list[str]) -> None:
    """The rows `hit` become "cannot judge", each note led by its `why` (one per row hit)."""
    import numpy as np

    t = cmp.table
    notes = t["note"].to_numpy(dtype=object).copy()
    notes[hit] = [w + (f"; {n}" if n else "") for w, n in zip(why, notes[hit])]
    t["verdict"] = np.where(hit, UNJUDGED, t["verdict"].to_numpy(dtype=object))
    t["note"] = notes
    cmp.table = worst_first(t)


def catch_text(fall: float) -> str:
    """A key's catches as said to a reader: '≥ 30%' for 0.2946, rounded up so that every fall it
    names is caught; '> 99%' where nothing short of a total loss is; '-' where nothing was judged."""
    if fall != fall:
        return "-"
    return "> 99%" if fall > 0.99 else f"≥ {math.ceil(round(fall * 100, 6))}%"


def catch_texts(falls: npt.ArrayLike) -> list[str]:
    """catch_text of each of many falls, the words of each whole percent made once (catch_text
    rounds up to one): 102 texts for 100,000 keys."""
    import numpy as np

    fall = np.asarray(falls, dtype=float)
    with np.errstate(invalid="ignore"):
        percent = np.clip(np.ceil(np.round(fall * 100, 6)), 0, 100)
    words = np.array(["-", *(catch_text(p / 100) for p in range(101))], dtype=object)
    return list(words[np.where(np.isnan(fall), 0, percent + 1).astype(np.int64)])


def watch_below(cmp: Comparison, size: int) -> None:
    """Collective keys of messages smaller than `size` are watched: judged and listed as every
    key is, but they do not set a gate's exit status (Comparison.gate_counts) unless their job
    failed, and the note of each one not found unchanged or faster says so. The table's
    `gating` column marks the others."""
    t = cmp.table
    cmp.gate_min_size = size
    watched = ((t["workload"] == COLLECTIVE_WORKLOAD) & (t["size_bytes"] < size)).to_numpy(dtype=bool)
    t["gating"] = ~watched
    said = watched & t["verdict"].isin((SLOWER, UNJUDGED, ONLY_A)).to_numpy(dtype=bool)
    if said.any():
        notes = t["note"].to_numpy(dtype=object).copy()
        text = f"watched, not gating (below --gate-min-size {format_size(size)})"
        notes[said] = [f"{n}; {text}" if n else text for n in notes[said]]
        t["note"] = notes
