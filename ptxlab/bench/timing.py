"""Timing GPU work with CUDA events: warm-up, many repetitions, medians, rotating inputs.

Rotating inputs matter: a matrix that fits in L2 and is reused every repetition measures the
cache, not the kernel, so every timed call takes the next of several buffer sets.

While the timed repetitions run, the SM clock, board power and the reasons the driver gives for
holding the clock down are read through NVML (where ``pynvml`` is importable): two kernels at
the same utilisation but different clocks run at different rates, and a clock held at the power
cap says that power, not scheduling, sets the rate.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

#: NVML clock-event reason bits (nvmlClocksEventReason*): the power cap, and thermal slowdowns.
_POWER_CAP = 0x4
_THERMAL = 0x20 | 0x40


class ClockProbe:
    """Samples of the SM clock, power and clock-event reasons of GPU 0 (NVML), or nothing."""

    def __init__(self):
        self.samples: list[tuple[float, float, int, float]] = []
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self._reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        except Exception:  # no pynvml, or no NVML on this machine: no clock figures
            self._nvml = None

    def sample(self) -> None:
        if self._nvml is None:
            return
        n, h = self._nvml, self._handle
        try:
            self.samples.append((float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                                 n.nvmlDeviceGetPowerUsage(h) / 1000.0, int(self._reasons(h)),
                                 float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))))
        except Exception:
            self._nvml = None

    def summary(self) -> dict | None:
        if not self.samples:
            return None
        clocks, power, reasons, temps = zip(*self.samples)
        return {"nvml_sm_clock_mhz": statistics.median(clocks),
                "nvml_power_w": statistics.median(power),
                "nvml_power_capped": sum(bool(r & _POWER_CAP) for r in reasons) / len(reasons),
                "nvml_thermal_slowdown": sum(bool(r & _THERMAL) for r in reasons) / len(reasons),
                "nvml_temperature_c": statistics.median(temps), "nvml_samples": len(clocks)}


#: Above this spread ((p90 - p10) / median of the samples) a figure is noise, not a result.
NOISY_SPREAD = 0.10


@dataclass(frozen=True)
class Timing:
    """Milliseconds per launch of one measurement: each sample is one timed batch of ``batch``
    launches divided by ``batch`` (and the clock while it ran); ``method`` says how the batch
    was issued."""

    samples_ms: tuple[float, ...]
    clock: dict | None = None
    batch: int = 1
    method: str = "events around each launch"

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: how noisy the repetitions were."""
        s = sorted(self.samples_ms)
        lo, hi = s[len(s) // 10], s[(len(s) * 9) // 10]
        return (hi - lo) / self.median_ms if self.median_ms else 0.0

    @property
    def noisy(self) -> bool:
        """The spread is above :data:`NOISY_SPREAD`: the median is not a result."""
        return self.spread > NOISY_SPREAD

    def as_dict(self) -> dict:
        out = {"median_ms": self.median_ms, "reps": len(self.samples_ms), "spread": self.spread,
               "noisy": self.noisy, "min_ms": min(self.samples_ms),
               "max_ms": max(self.samples_ms), "batch": self.batch, "timing": self.method}
        if self.clock:
            out.update(self.clock)
        return out


def _capture(cp, stream, call: Callable[[int], None], batch: int, sets: int):
    """A CUDA graph of ``batch`` calls (rotating over the buffer sets), or why none was made."""
    try:
        with stream:
            stream.begin_capture()
            try:
                for i in range(batch):
                    call(i % sets)
            finally:
                graph = stream.end_capture()
        graph.upload(stream)
        graph.launch(stream)
        stream.synchronize()
        return graph, None
    except Exception as exc:  # a call that cannot be captured: time plain launches instead
        try:
            if stream.is_capturing():
                stream.end_capture()
        except Exception:
            pass
        cp.cuda.Device().synchronize()
        return None, f"{type(exc).__name__}: {str(exc)[:120]}"


#: Milliseconds a kernel runs before its timed samples: enough to load it and fill the caches.
WARMUP_MS = 50.0
#: The warm-up of each GEMM in ``ptxlab bench`` and the sweeps (their ``--warmup-ms``): a GEMM at
#: the board's power limit needs longer to reach the clock it holds for itself rather than the
#: one its predecessor left.
GEMM_WARMUP_MS = 300.0
#: How interleaved rounds order their jobs (``runs.in_rounds``): ``balanced``
#: (:func:`balanced_orders`) or ``rotate`` (round r starts with job r, the cyclic order kept).
ROUND_ORDERS = ("balanced", "rotate")


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of ``n`` jobs, one per round, in which every job runs once in every position and
    right after every other job equally often (a Williams design: ``n`` orders for even ``n``,
    ``2n`` for odd). A kernel at the power limit runs on the board its predecessor left (its
    temperature, the clock the power controller settled at); with a fixed cyclic order each
    kernel would always follow the same neighbour, and that neighbour's effect would be counted
    as the kernel's own."""
    if n <= 1:
        return [list(range(n))]
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo if len(first) % 2 else hi)
        lo, hi = (lo + 1, hi) if len(first) % 2 == 0 else (lo, hi - 1)
    orders = [[(j + r) % n for j in first] for r in range(n)]
    if n % 2:
        orders += [list(reversed(o)) for o in orders]
    return orders


def time_gpu(call: Callable[[int], None], *, sets: int = 1, warmup_ms: float = WARMUP_MS,
             min_reps: int = 20, target_ms: float = 400.0, max_reps: int = 1000,
             batch_ms: float = 2.0, graph: bool = True) -> Timing:
    """Per-launch samples of ``call(i)`` (``i`` = which buffer set to use), timed with events.

    Warms up for about ``warmup_ms`` (at least 3 calls) and estimates one call. Launches shorter
    than ``batch_ms`` are timed in batches of back-to-back launches (as many as fill about
    ``batch_ms``, a whole number of rotations over the sets): captured once into a CUDA graph
    and replayed (``graph``; the launch gaps of the graph, not the host's launch rate, are then
    what separates them), or, where capture fails, issued one by one with one pair of events
    around the batch. Each sample is one batch's time over its launches; enough samples to fill
    about ``target_ms`` (``min_reps`` at least), sampling the clock (:class:`ClockProbe`) until
    the last one finishes.
    """
    import cupy as cp

    cp.cuda.Device().synchronize()   # the buffers were filled on another stream
    stream = cp.cuda.Stream(non_blocking=True)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    with stream:
        start.record(stream)
        call(0)
        stop.record(stream)
        stop.synchronize()
        first = max(cp.cuda.get_elapsed_time(start, stop), 1e-3)
        for i in range(max(3, int(warmup_ms / first))):
            call(i % sets)
        stream.synchronize()
        # Estimate one call after warm-up, then size the batches and the run.
        start.record(stream)
        for i in range(3):
            call(i % sets)
        stop.record(stream)
        stop.synchronize()
    one = max(cp.cuda.get_elapsed_time(start, stop) / 3, 1e-4)
    batch = 1
    if one < batch_ms:
        batch = -(-int(batch_ms / one) // sets) * sets
    method, g = "events around each launch", None
    if batch > 1:
        method = f"events around {batch} back-to-back launches"
        if graph:
            g, why = _capture(cp, stream, call, batch, sets)
            method = (f"events around a CUDA graph of {batch} launches" if g is not None
                      else f"{method} (no CUDA graph: {why})")
    reps = int(min(max_reps, max(min_reps, target_ms / (one * batch))))

    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
    probe = ClockProbe()
    with stream:
        for r, (a, b) in enumerate(events):
            a.record(stream)
            if g is not None:
                g.launch(stream)
            else:
                for i in range(batch):
                    call((r * batch + i) % sets)
            b.record(stream)
            if batch > 1 or r % 64 == 63:
                probe.sample()
        while not events[-1][1].done:
            probe.sample()
            time.sleep(0.002)
        events[-1][1].synchronize()
    return Timing(tuple(cp.cuda.get_elapsed_time(a, b) / batch for a, b in events),
                  probe.summary(), batch, method)
