"""`bench predict --set KEY=NEW`: the same sweep on other hardware (docs/concepts/predict.md,
"What if"). A profile figure the model uses is changed, and each term it moves is scaled:

- a link's rate (network_gbps_per_node, nics_per_node, intra_node_gbps_per_gpu) moves the bytes
  terms of each collective by its peak busbw before over after (harness/config/peak.py), at each
  node count: the collective is taken to reach the same share of its peak on the new links;
- the GPU's peak (peak_tflops_per_gpu) moves the transformer's compute at the same MFU, and not
  a ResNet's, which eager PyTorch does not run at the tensor cores' peak (docs/concepts/cost.md).

Latencies, data wait and the hidden communication stay as fitted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.config.cluster_profile import Hardware
from harness.config.fields import FieldError
from harness.errors import UsageError

FIGURES = ("network_gbps_per_node", "nics_per_node", "intra_node_gbps_per_gpu", "peak_tflops_per_gpu")
# The workloads whose compute follows the GPU's peak FLOP/s
PEAK_BOUND = ("transformer",)


@dataclass(frozen=True)
class WhatIf:
    before: Hardware
    after: Hardware
    changed: dict[str, tuple[float, float]]  # figure -> (before, after)

    def rate_scale(self, name: str, group: str, g: int) -> Callable[[int], float]:
        """The factor a collective series' bytes terms take at n nodes: its peak before over
        after, 1 where either is not bounded by a stated link."""

        def scale(nodes: int) -> float:
            old, new = (h.peak_busbw_gbps(nodes, g, group, name) for h in (self.before, self.after))
            return old / new if old and new else 1.0

        return scale

    def moved(self, name: str, group: str, g: int, scale: Callable[[int], float], targets: list[int]) -> list[str]:
        """What a collective series' change is, in words, where it moves: its bytes terms' factor
        at the node counts asked."""
        factors = [scale(n) for n in targets]
        if all(f == 1 for f in factors):
            return []
        at = ", ".join(f"x{f:.3g} at {n}" for f, n in zip(factors, targets, strict=True))
        return [f"{name} over {group}, {g} GPU(s) a node: bytes terms {at} nodes"]

    def compute_scale(self, workload: str) -> float:
        """The factor a training workload's compute takes."""
        old, new = self.before.peak_tflops_per_gpu, self.after.peak_tflops_per_gpu
        return old / new if workload in PEAK_BOUND and old and new else 1.0

    def describe(self) -> dict[str, Any]:
        return {
            "set": {k: {"before": a, "after": b} for k, (a, b) in self.changed.items()},
            "assumes": "each collective reaches the same share of its peak busbw on the new links, and the "
            "transformer the same MFU on the new GPUs; latencies, data wait and hidden communication as fitted; "
            "the validation is of the fit on the hardware measured",
        }


def parse(sets: list[str], stated: dict[str, Any] | None) -> WhatIf:
    """WhatIf from `--set KEY=NEW` or `KEY=OLD:NEW` against the run's profile's hardware
    (`stated`, the plan's), or a UsageError naming the value."""
    before: dict[str, Any] = {k: v for k, v in (stated or {}).items() if k in FIGURES}
    after = dict(before)
    changed = {}
    for text in sets:
        key, _, value = text.partition("=")
        if key not in FIGURES:
            raise UsageError(f"--set {text!r}: the figure must be one of {', '.join(FIGURES)}")
        old_text, _, new_text = value.rpartition(":")
        old, new = (_number(text, x) for x in (old_text or None, new_text))
        if old is None:
            old = before.get(key)
        if old is None or new is None:
            raise UsageError(
                f"--set {text}: the run's cluster profile states no {key} to change; give {key}=BEFORE:AFTER"
            )
        before[key], after[key] = old, new
        changed[key] = (old, new)
    try:
        return WhatIf(_hardware(before), _hardware(after), changed)
    except FieldError as exc:
        raise UsageError(f"--set: {exc.key} {exc}") from None


def _number(text: str, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"--set {text!r}: {value!r} is not a number") from None
    if not math.isfinite(number) or number <= 0:
        raise UsageError(f"--set {text!r}: {value!r} must be a finite number above 0")
    return int(number) if number.is_integer() else number


def _hardware(figures: dict[str, Any]) -> Hardware:
    fields = {f.name for f in dataclasses.fields(Hardware)}
    return Hardware(**{k: v for k, v in figures.items() if k in fields})
