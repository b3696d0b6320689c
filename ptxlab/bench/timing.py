"""Timing GPU work with CUDA events: warm-up, many repetitions, medians, rotating inputs.

Rotating inputs matter: a matrix that fits in L2 and is reused every repetition measures the
cache, not the kernel, so every timed call takes the next of several buffer sets.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Timing:
    """Per-repetition milliseconds of one measurement."""

    samples_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: how noisy the repetitions were."""
        s = sorted(self.samples_ms)
        lo, hi = s[len(s) // 10], s[(len(s) * 9) // 10]
        return (hi - lo) / self.median_ms if self.median_ms else 0.0

    def as_dict(self) -> dict:
        return {"median_ms": self.median_ms, "reps": len(self.samples_ms), "spread": self.spread,
                "min_ms": min(self.samples_ms), "max_ms": max(self.samples_ms)}


def time_gpu(call: Callable[[int], None], *, sets: int = 1, warmup_ms: float = 50.0,
             min_reps: int = 20, target_ms: float = 400.0, max_reps: int = 1000) -> Timing:
    """Median-ready samples of ``call(i)`` (``i`` = which buffer set to use), timed with events.

    Warms up for about ``warmup_ms`` (at least 3 calls), then times each call separately with a
    pair of events, enough calls to fill about ``target_ms`` of GPU time (``min_reps`` at least).
    """
    import cupy as cp

    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    call(0)
    stop.record()
    stop.synchronize()
    first = max(cp.cuda.get_elapsed_time(start, stop), 1e-3)
    for i in range(max(3, int(warmup_ms / first))):
        call(i % sets)
    cp.cuda.Device().synchronize()

    # Estimate one call after warm-up, then size the run.
    start.record()
    for i in range(3):
        call(i % sets)
    stop.record()
    stop.synchronize()
    one = max(cp.cuda.get_elapsed_time(start, stop) / 3, 1e-4)
    reps = int(min(max_reps, max(min_reps, target_ms / one)))

    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
    for i, (a, b) in enumerate(events):
        a.record()
        call(i % sets)
        b.record()
    events[-1][1].synchronize()
    return Timing(tuple(cp.cuda.get_elapsed_time(a, b) for a, b in events))
