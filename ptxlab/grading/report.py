"""The instructor's view of a graded batch: a per-student CSV and a summary with a histogram.

``grades.csv`` has one row per student (score, status, the checks lost and why);
``summary.md`` gives the score distribution, the checks that failed most often with a typical
reason, and the submissions nbgrader could not grade; ``scores.png`` plots the distribution
when matplotlib is installed.
"""
from __future__ import annotations

import csv
import statistics
from collections import Counter
from pathlib import Path
from typing import Sequence

from .outcome import StudentOutcome

__all__ = ["write_csv", "write_summary", "write_plot", "score_histogram", "most_common_failures",
           "kernel_backend", "CSV_COLUMNS"]

CSV_COLUMNS = ["student", "status", "score", "max_score", "percent", "failed_checks", "reason",
               "kernel_backend", "duration_s", "submitted_at"]


def kernel_backend(o: StudentOutcome) -> str:
    """Where the student's kernels ran: ``gpu``, ``cpu``, ``gpu+cpu`` or ``""`` (none ran)."""
    kinds = {k for c in o.checks for k in c.backend.split("+") if k}
    return "+".join(sorted(kinds, key=lambda k: k != "gpu"))


def _percent(o: StudentOutcome) -> float:
    return 100.0 * o.score / o.max_score if o.max_score else 0.0


def write_csv(outcomes: Sequence[StudentOutcome], path: Path) -> Path:
    """One row per student, sorted by student id."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for o in sorted(outcomes, key=lambda o: o.student):
            w.writerow({
                "student": o.student, "status": o.status,
                "score": f"{o.score:g}" if o.counted else "",
                "max_score": f"{o.max_score:g}" if o.counted else "",
                "percent": f"{_percent(o):.1f}" if o.counted else "",
                "failed_checks": ";".join(c.grade_id for c in o.checks if not c.passed),
                "reason": o.reason, "kernel_backend": kernel_backend(o),
                "duration_s": f"{o.duration_s:.2f}",
                "submitted_at": o.submitted_at,
            })
    return path


def score_histogram(outcomes: Sequence[StudentOutcome], bins: int = 10) -> list[tuple[str, int]]:
    """``(label, count)`` per band of percent score: 0-9, 10-19, ..., 90-100."""
    counts = [0] * bins
    for o in (o for o in outcomes if o.counted):
        counts[min(bins - 1, int(_percent(o) * bins // 100))] += 1
    width = 100 // bins
    return [(f"{i * width}-{(i + 1) * width - 1 if i < bins - 1 else 100}%", n)
            for i, n in enumerate(counts)]


def write_plot(outcomes: Sequence[StudentOutcome], path: Path, title: str) -> Path | None:
    """``scores.png``: the histogram of percent scores; ``None`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    ax.hist([_percent(o) for o in outcomes if o.counted], bins=range(0, 110, 10), color="#4878a8",
            edgecolor="white")
    ax.set_xlabel("score (% of the maximum)")
    ax.set_ylabel("students")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def most_common_failures(outcomes: Sequence[StudentOutcome]) -> list[tuple[tuple[str, str], int, str]]:
    """``((notebook, check), students who failed it, the reason given most often)``, most
    failed first."""
    failing: Counter = Counter()
    reasons: dict[tuple[str, str], Counter] = {}
    for o in outcomes:
        for c in o.checks:
            if not c.passed:
                key = (c.notebook, c.grade_id)
                failing[key] += 1
                reasons.setdefault(key, Counter())[_reason_kind(c.reason)] += 1
    return [(key, n, reasons[key].most_common(1)[0][0]) for key, n in failing.most_common()]


def class_mistakes(outcomes: Sequence[StudentOutcome]) -> list[tuple[tuple[str, str], str, int, str]]:
    """``((notebook, check), cause, students, one of them)``: the mistakes the grader's checks
    named across the class, most common first; what the class misunderstood, by exercise."""
    students: dict[tuple[tuple[str, str], str], list[str]] = {}
    for o in outcomes:
        if not o.counted:
            continue
        for c in o.checks:
            for cause in c.causes:
                students.setdefault(((c.notebook, c.grade_id), cause), []).append(o.student)
    ranked = sorted(students.items(), key=lambda kv: (-len(set(kv[1])), kv[0]))
    return [(key, cause, len(set(who)), sorted(set(who))[0]) for (key, cause), who in ranked]


def _reason_kind(reason: str) -> str:
    """A reason with its lane numbers and values kept: two students with the same mistake
    usually get the same words; only cut it to a readable length."""
    return reason if len(reason) <= 160 else reason[:157] + "..."


#: The words a flagged check's reason carries (written by the judge).
_FLAGGED = "flagged for manual grading"


def flagged_students(outcomes: Sequence[StudentOutcome]) -> list[str]:
    """The students with at least one check flagged for a person."""
    return [o.student for o in outcomes if any(_FLAGGED in c.reason for c in o.checks)]


def write_summary(outcomes: Sequence[StudentOutcome], path: Path, *, assignment: str,
                  wall_s: float | None = None, workers: int | None = None,
                  plot: Path | None = None, graded_on: str | None = None) -> Path:
    """Markdown summary of the batch (``graded_on``: the cluster that graded, instead of the
    number of workers on this machine)."""
    path = Path(path)
    pct = [_percent(o) for o in outcomes if o.counted]
    lines = [f"# Autograding summary: {assignment}", ""]
    status = Counter(o.status for o in outcomes)
    lines.append(f"{len(outcomes)} submissions: " + ", ".join(
        f"{n} {s}" for s, n in sorted(status.items())))
    if wall_s is not None:
        how = f" {graded_on}." if graded_on else (f" with {workers} workers." if workers else ".")
        lines.append(f"\nGraded in {wall_s:.1f} s" + how)
    where = Counter(kernel_backend(o) for o in outcomes if kernel_backend(o))
    if where:
        names = {"gpu": "the GPU", "cpu": "the CPU backend (PTX interpreter)",
                 "gpu+cpu": "the GPU and the CPU backend"}
        lines.append("\nLearner kernels ran on " + ", ".join(
            f"{names.get(k, k)} for {n} student{'s' if n != 1 else ''}"
            for k, n in where.most_common()) + ".")
    if pct:
        lines += ["", "## Scores", "",
                  f"mean {statistics.mean(pct):.1f}%, median {statistics.median(pct):.1f}%, "
                  f"full marks {sum(p >= 100 for p in pct)}, zero {sum(p == 0 for p in pct)}", "",
                  "| score | students | |", "| --- | ---: | --- |"]
        hist = score_histogram(outcomes)
        top = max(n for _, n in hist) or 1
        for label, n in hist:
            lines.append(f"| {label} | {n} | {'#' * round(20 * n / top)} |")
        if plot is not None:
            lines += ["", f"![score distribution]({Path(plot).name})"]
    failing = most_common_failures(outcomes)
    if failing:
        lines += ["", "## Most common failing checks", "",
                  "| check | failed | most common reason |", "| --- | ---: | --- |"]
        for (nb, gid), n, reason in failing[:10]:
            reason = reason.replace("|", "\\|")
            lines.append(f"| {nb}/{gid} | {n} | {reason} |")
    mistakes = class_mistakes(outcomes)
    if mistakes:
        lines += ["", "## What the class got wrong", "",
                  "The mistakes the checks named, by exercise, most common first (each with one "
                  "student who made it):", "",
                  "| check | mistake | students | e.g. |", "| --- | --- | ---: | --- |"]
        for (nb, gid), cause, n, who in mistakes[:15]:
            cause = cause.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {nb}/{gid} | {cause} | {n} | {who} |")
    flagged = [(o, c) for o in outcomes for c in o.checks if _FLAGGED in c.reason]
    if flagged:
        lines += ["", "## Flagged for a person (score 0 until graded by hand: formgrader, "
                  "Manual Grading)", "", "| student | check | why |", "| --- | --- | --- |"]
        for o, c in sorted(flagged, key=lambda oc: (oc[0].student, oc[1].grade_id)):
            why = c.reason.split(_FLAGGED, 1)[-1].lstrip(": ")
            lines.append(f"| {o.student} | {c.notebook}/{c.grade_id} | "
                         f"{why.replace('|', chr(92) + '|')} |")
    problems = [o for o in outcomes if o.status != "graded" and o.counted]
    if problems:
        lines += ["", "## Submissions nbgrader could not grade (zero, flagged for review)", "",
                  "| student | status | reason |", "| --- | --- | --- |"]
        for o in sorted(problems, key=lambda o: o.student):
            lines.append(f"| {o.student} | {o.status} | {o.reason.replace('|', chr(92) + '|')} |")
    not_graded = [o for o in outcomes if not o.counted]
    if not_graded:
        lines += ["", "## Not graded: the machine failed, not the submission (no score written; "
                  "run `ptxlab grade` again to grade them)", "",
                  "| student | reason |", "| --- | --- |"]
        for o in sorted(not_graded, key=lambda o: o.student):
            lines.append(f"| {o.student} | {o.reason.replace('|', chr(92) + '|')} |")
    path.write_text("\n".join(lines) + "\n")
    return path
