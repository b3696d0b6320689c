"""What a py-spy profile of many processes says, in a page: samples by kind of process and, for
each kind, the functions most samples were in (inclusive) and ended in (self).

Usage: python measure/benchmarks/profile_summary.py PROFILE.txt [--top 25]

PROFILE.txt is ``py-spy record --subprocesses --format raw`` output: one collapsed stack per
line, ``process PID:"cmdline";...;function (file:line) COUNT``. py-spy samples only threads
that are running (not idle ones) unless ``--idle`` was given, so samples are CPU time.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

from cpu_by_process import kind_of

def _frame(text: str) -> str:
    """``function (path/to/pkg/file.py:123)`` as ``function (pkg/file.py)``: one name per
    function, whichever line of it was running."""
    name, _, where = text.partition(" (")
    if not where:
        return name
    file = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(Path(file).parts[-2:])})"


def summarize(lines: list[str], top: int = 25) -> str:
    by_kind: Counter[str] = Counter()
    inclusive: dict[str, Counter[str]] = defaultdict(Counter)
    own: dict[str, Counter[str]] = defaultdict(Counter)
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        procs = [i for i, f in enumerate(frames) if f.startswith("process ")]
        if not procs:
            continue
        kind = kind_of(frames[procs[-1]])
        calls = [_frame(f) for f in frames[procs[-1] + 1:]]
        by_kind[kind] += n
        for f in set(calls):
            inclusive[kind][f] += n
        if calls:
            own[kind][calls[-1]] += n
    total = sum(by_kind.values()) or 1
    out = [f"{total} samples"]
    for kind, n in by_kind.most_common():
        out += ["", f"## {kind}: {n} samples ({100 * n / total:.0f}%)", "", "inclusive:"]
        out += [f"  {100 * c / n:5.1f}%  {f}" for f, c in inclusive[kind].most_common(top)]
        out += ["self:"]
        out += [f"  {100 * c / n:5.1f}%  {f}" for f, c in own[kind].most_common(top)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    print(summarize(args.profile.read_text(errors="replace").splitlines(), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
