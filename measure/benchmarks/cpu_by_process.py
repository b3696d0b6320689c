"""Where a machine's CPU time goes while something runs, by kind of process.

Usage: python measure/benchmarks/cpu_by_process.py OUT.json -- COMMAND ...   (or CpuSampler in code)

Samples ``/proc`` a few times a second: the machine's busy and idle ticks, and every process's
own CPU time (user + system), each process put in a kind read from its command line (a
notebook's kernel, the grader's worker, the launch service and its executors, the sandbox,
the compiler ...). A process is counted with the last CPU time seen of it, so one that lives
shorter than the sampling period is missed; ``unsampled_s`` says how much busy time no sampled
process accounts for. Linux only.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

#: (kind, words of which one must be in the command line), the first match wins.
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("notebook kernel", ("kernel_boot", "ipykernel")),
    ("launch service", ("ptxlab.run.launch_server",)),
    ("launch child", ("ptxlab.run.isolation",)),
    ("grading worker", ("ptxlab.grading.grading_worker",)),
    ("sandbox (bwrap)", ("bwrap",)),
    ("compiler", ("nvcc", "cicc", "ptxas", "fatbinary", "cudafe", "gcc", "cc1plus")),
    ("grade driver", ("ptxlab grade", "ptxlab.cli.grade", "bin/ptxlab")),
)
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def kind_of(cmdline: str) -> str:
    """The kind of a process, from its command line."""
    for kind, words in KINDS:
        if any(w in cmdline for w in words):
            return kind
    return "other"


def _machine_ticks() -> tuple[int, int]:
    """(busy, idle) ticks of the whole machine since boot."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, idle


def _process_ticks() -> dict[int, tuple[int, int]]:
    """``{pid: (parent pid, CPU ticks used)}`` of every process now."""
    out: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            out[int(entry.name)] = (int(rest[1]), int(rest[11]) + int(rest[12]))
        except (OSError, IndexError, ValueError):
            continue
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class CpuSampler:
    """A thread that samples ``/proc`` every ``period_s`` between ``start`` and ``stop``,
    counting the processes descended from ``root`` (this process by default), so other work on
    the machine is not put to the run's account (it still shows in the machine's busy share)."""

    def __init__(self, period_s: float = 0.2, root: int | None = None) -> None:
        self.period_s = period_s
        self._members: set[int] = {os.getpid() if root is None else root}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._first: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._kind: dict[int, str] = {}
        self._busy: list[tuple[float, int, int]] = []

    def __enter__(self) -> CpuSampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._first = {pid: t for pid, (_, t) in _process_ticks().items()}  # not the run's
        self._busy.append((time.monotonic(), *_machine_ticks()))
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _sample(self) -> None:
        self._busy.append((time.monotonic(), *_machine_ticks()))
        now = _process_ticks()
        for pid in sorted(now):             # parents are usually older, so smaller
            if pid not in self._members and self._descends(pid, now):
                self._members.add(pid)
            if pid not in self._members:
                continue
            if pid not in self._kind:
                self._kind[pid] = kind_of(_cmdline(pid))
            self._last[pid] = now[pid][1]

    def _descends(self, pid: int, now: dict[int, tuple[int, int]]) -> bool:
        seen = 0
        while pid in now and seen < 64:
            pid, seen = now[pid][0], seen + 1
            if pid in self._members:
                return True
        return False

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def summary(self) -> dict:
        """CPU seconds per kind, the machine's busy share, and the busiest second."""
        by_kind: dict[str, float] = {}
        processes: dict[str, int] = {}
        for pid, ticks in self._last.items():
            used = (ticks - self._first.get(pid, 0)) / TICK
            if used <= 0:
                continue
            kind = self._kind.get(pid, "other")
            by_kind[kind] = by_kind.get(kind, 0.0) + used
            processes[kind] = processes.get(kind, 0) + 1
        (t0, b0, i0), (t1, b1, i1) = self._busy[0], self._busy[-1]
        busy_s = (b1 - b0) / TICK
        total = (b1 - b0) + (i1 - i0)
        shares = [(b - pb) / max(1, (b - pb) + (i - pi))
                  for (_, pb, pi), (_, b, i) in zip(self._busy, self._busy[1:])]
        return {"wall_s": round(t1 - t0, 2), "cpus": os.cpu_count(),
                "busy_cpu_s": round(busy_s, 1),
                "busy_share": round((b1 - b0) / total, 3) if total else 0.0,
                "samples_at_least_90pct_busy": round(
                    sum(s >= 0.9 for s in shares) / max(1, len(shares)), 3),
                "by_kind_cpu_s": {k: round(v, 1) for k, v in
                                  sorted(by_kind.items(), key=lambda kv: -kv[1])},
                "processes_by_kind": processes,
                "unsampled_s": round(busy_s - sum(by_kind.values()), 1)}


def format_summary(s: dict) -> str:
    lines = [f"CPU: {s['busy_cpu_s']} s busy over {s['wall_s']} s on {s['cpus']} CPUs "
             f"({100 * s['busy_share']:.0f}% busy; {100 * s['samples_at_least_90pct_busy']:.0f}% "
             f"of samples at least 90% busy)"]
    for kind, sec in s["by_kind_cpu_s"].items():
        lines.append(f"  {kind:18s} {sec:8.1f} s in {s['processes_by_kind'][kind]} processes")
    lines.append(f"  {'not sampled':18s} {s['unsampled_s']:8.1f} s (processes shorter than a sample)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    with CpuSampler() as sampler:
        rc = subprocess.call(argv[2:])
    s = sampler.summary()
    Path(argv[0]).write_text(json.dumps(s, indent=2) + "\n")
    print(format_summary(s))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
