"""How the collectives benchmark times its calls (benchmarks/collectives.py): one size's
back-to-back calls, and the soak, the same call timed window after window for as long as asked
(`--soak SECONDS`, docs/guides/accept.md, "Soak"), so that a fabric that slows once warm shows
as a drift of the windows' bus bandwidth."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from .runtime import Context, worst_of_ranks

# The soak keeps at most about this many windows, whatever its length: each window lasts at least
# its seconds over MAX_WINDOWS, so that a soak of a week writes a result of the same size as one of
# a minute.
MAX_WINDOWS = 500


def time_calls(call: Callable[[], Any], iters: int, warmup: int, device: torch.device) -> tuple[float, list[float]]:
    """(average microseconds per call, per-call microseconds) on this rank."""
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        call()
    sync()
    dist.barrier()
    sync()
    if cuda:
        events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
        t0 = time.perf_counter_ns()
        events[0].record()
        for i in range(iters):
            call()
            events[i + 1].record()
        sync()
        t1 = time.perf_counter_ns()
        samples = [events[i].elapsed_time(events[i + 1]) * 1e3 for i in range(iters)]
    else:
        stamps = [0] * (iters + 1)
        t0 = stamps[0] = time.perf_counter_ns()
        for i in range(iters):
            call()
            stamps[i + 1] = time.perf_counter_ns()
        t1 = time.perf_counter_ns()
        samples = [(stamps[i + 1] - stamps[i]) / 1e3 for i in range(iters)]
    return (t1 - t0) / iters / 1e3, samples


def soak(
    call: Callable[[], Any], seconds: float, size: int, bus_factor: float, iters: int, ctx: Context
) -> dict[str, Any]:
    """Time `call` (one collective of `size` bytes, whose busbw is its algbw x `bus_factor`)
    window after window until the windows' time reaches `seconds`. Each window is a run of calls
    timed as one (time_calls), its time the slowest rank's: every rank then holds the same figure,
    so every rank sizes the next window alike (to about seconds / MAX_WINDOWS, `iters` calls the
    first) and stops after the same window, with no message of its own. Returns the windows as
    [seconds since the soak began, calls, busbw in GB/s]."""
    target = seconds / MAX_WINDOWS
    calls, spent = iters, 0.0
    windows: list[list[float]] = []
    while spent < seconds:
        ctx.progress(f"soak {len(windows)}")
        avg_us, _ = time_calls(call, calls, 0, ctx.device)
        (worst_us,) = worst_of_ranks([avg_us], ctx.device)
        spent += worst_us * calls / 1e6
        windows.append([spent, calls, size / (worst_us * 1e-6) / 1e9 * bus_factor])
        # the next window's calls, from the window every rank has the same figure of
        calls = max(1, min(4 * calls, round(target / (worst_us / 1e6)))) if worst_us > 0 else calls
    return {"seconds": seconds, "windows": windows}
