"""The judge's verdicts of one notebook, kept in a file beside the autograded notebook.

:class:`~ptxlab.grading.judge_steps.JudgeAnswers` writes ``<notebook>.verdicts.json`` into the
autograded folder once the notebook has run and every verdict is known: per graded cell the
verdict, the failing reason (the words the feedback shows), where its kernels ran, the flags and
the mistakes named; per notebook the learner's own cells that failed and a stop at the
submission limit. The worker reads it once per submission (:mod:`ptxlab.grading.outcome`)
instead of parsing the autograded notebook again.

That folder also holds the files the student submitted (nbgrader copies them there), so a file
of this name may be the student's. Each file carries a MAC under a key that exists only in the
memory of the grading process that wrote it, where learner code never runs: a file it did not
write in this process -- submitted, left by an earlier run, made by anything else -- reads as
missing (:class:`VerdictsMissing`), never as the grader's. The file is replaced, never written
through: whatever lies at its name (a link, a folder) is not followed.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..run.errors import UntrustedFile
from ..run.untrusted_files import read_regular
from ..teach.nbgrader_cells import grade_id, is_graded, nbgrader_meta
from .run_limits import CELL_TIMEOUT, SUBMISSION_TIMEOUT, stop_note

__all__ = ["SCHEMA", "SUFFIX", "CellRecord", "JudgeVerdict", "NotebookVerdicts",
           "VerdictsMissing", "notebook_verdicts", "save", "load", "verdicts_path",
           "short_error", "cell_error"]

#: The version of the file's layout; a file of another version reads as missing.
SCHEMA = 1
#: ``<notebook>`` + this, in the autograded folder.
SUFFIX = ".verdicts.json"
#: The largest file read: far above any notebook's verdicts, so a planted giant costs nothing.
MAX_BYTES = 8 << 20
#: How many of the learner's own failed cells a notebook's record keeps (the row shows them).
OTHER_ERRORS = 2
#: This process's key: only a file written here verifies here.
_KEY = secrets.token_bytes(32)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_REASON_CHARS = 300
#: Errors of a cell that are not the learner's own and explain nothing beyond the row's other
#: words: the run lost or stopped earlier, or the client's placeholder in a copy of a test line.
_NOT_OWN_ERRORS = ("KernelDied", "NotRun", SUBMISSION_TIMEOUT, "_PendingVerdict")


class VerdictsMissing(Exception):
    """No verdicts this grading process wrote for a notebook; ``why`` says what was found
    (``"<path> was " + why`` reads as a sentence)."""

    def __init__(self, path: Path, why: str):
        super().__init__(f"{path} was {why}")
        self.path, self.why = path, why


@dataclass(frozen=True)
class JudgeVerdict:
    """What the judge decided of one test cell, as the file keeps it."""

    passed: bool
    flags: tuple[str, ...] = ()          # each flagged line, described
    flagged_cells: tuple[str, ...] = ()  # the answer cells those lines are in
    causes: tuple[str, ...] = ()         # the mistakes its failed checks named


@dataclass(frozen=True)
class CellRecord:
    """One graded code cell of the autograded notebook."""

    grade_id: str
    by: str                              # "grader" (the judge's verdict) or "notebook"
    passed: bool
    points: float
    reason: str = ""                     # why it failed, as the feedback shows it
    backend: str = ""                    # where its kernels ran: gpu, cpu, gpu+cpu or ""
    flags: tuple[str, ...] = ()
    flagged_cells: tuple[str, ...] = ()
    causes: tuple[str, ...] = ()


@dataclass(frozen=True)
class NotebookVerdicts:
    """Everything the grader reads back of one autograded notebook."""

    notebook: str
    cells: dict[str, CellRecord] = field(default_factory=dict)
    other_errors: tuple[str, ...] = ()   # "answer_cell: why", the learner's own failed cells
    run_notes: tuple[str, ...] = ()      # a stop at the submission limit, in words

    def to_json(self) -> dict[str, Any]:
        return {"notebook": self.notebook, "cells": [asdict(c) for c in self.cells.values()],
                "other_errors": list(self.other_errors), "run_notes": list(self.run_notes)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "NotebookVerdicts":
        cells = {}
        for c in data["cells"]:
            c = {**c, **{k: tuple(c[k]) for k in ("flags", "flagged_cells", "causes")}}
            cells[c["grade_id"]] = CellRecord(**c)
        return cls(str(data["notebook"]), cells, tuple(data["other_errors"]),
                   tuple(data["run_notes"]))


def short_error(ename: str, evalue: str) -> str:
    """``"Name: first line of the message"``, without terminal colours, cut to a readable size."""
    text = _ANSI.sub("", f"{ename}: {evalue}".strip() if str(evalue).strip() else ename)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    text = " / ".join(lines[:3])
    return text if len(text) <= _REASON_CHARS else text[:_REASON_CHARS - 3] + "..."


def cell_error(cell: Any) -> str | None:
    """Why a code cell failed, in one line, or ``None`` when it shows no error."""
    outputs = [o for o in cell.get("outputs") or [] if isinstance(o, dict)]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    if not errors:
        return None
    names = {o.get("ename", "") for o in errors}
    worded = [o for o in errors if o.get("ename") == CELL_TIMEOUT]
    last = outputs[-1]
    if last.get("output_type") == "error" and last.get("ename") == "KernelStopped":
        # the grader stopped the sandbox after the cell's own error (a write its full disk
        # refused): the grader's reason, with the limit's figure, says more than the cell's
        return short_error(last.get("ename", ""), last.get("evalue", ""))
    if worded:                         # the grader's words, with the limit's figure
        return _ANSI.sub("", str(worded[0].get("evalue", ""))).strip()[:_REASON_CHARS]
    if "CellTimeoutError" in names or errors[0].get("ename") == "KeyboardInterrupt":
        return "ran past the cell's time limit and was interrupted (an endless loop?)"
    # The first error is the cell's own.
    return short_error(errors[0].get("ename", ""), errors[0].get("evalue", ""))


def _backends(cells: list, launches: Iterable[tuple[Any, list]]) -> dict[str, str]:
    """``grade_id -> "gpu" | "cpu" | "gpu+cpu"`` from the launch records of the grading steps
    (``(grade id or cell index, records)``), the GPU named first."""
    kinds: dict[str, set[str]] = {}
    for where, records in launches:
        if isinstance(where, int):
            where = grade_id(cells[where]) if 0 <= where < len(cells) else None
        found = {r.get("backend") for r in records or [] if isinstance(r, dict)}
        if where:
            kinds.setdefault(where, set()).update(k for k in found if isinstance(k, str) and k)
    return {gid: "+".join(sorted(sorted(k), key=lambda b: b != "gpu"))
            for gid, k in kinds.items() if k}


def _other_errors(cells: list) -> tuple[str, ...]:
    """``"answer_cell: why"`` for the first ungraded code cells that failed (the learner's own
    cells: an endless loop at top level, ``sys.exit()``...), which cost no points by themselves
    but explain a grade."""
    found = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code" or is_graded(cell):
            continue
        why = cell_error(cell)
        if why and not why.startswith(_NOT_OWN_ERRORS):
            found.append(f"{grade_id(cell) or f'cell {index + 1}'}: {why}")
    return tuple(found[:OTHER_ERRORS])


def notebook_verdicts(nb: Any, notebook: str, judged: Mapping[str, JudgeVerdict],
                      launches: Iterable[tuple[Any, list]] = ()) -> NotebookVerdicts:
    """The record of a notebook that has run and been judged (``judged``: the judge's verdict
    per grade id; the other graded cells are decided by their own outputs, as in nbgrader)."""
    cells = list(nb.get("cells") or [])
    backends = _backends(cells, launches)
    records = {}
    for cell in cells:
        gid = grade_id(cell)
        if cell.get("cell_type") != "code" or not is_graded(cell) or gid is None:
            continue
        why = cell_error(cell) or ""
        verdict = judged.get(gid) or JudgeVerdict(passed=not why)
        points = nbgrader_meta(cell).get("points")
        records[gid] = CellRecord(
            gid, by="grader" if gid in judged else "notebook", passed=verdict.passed,
            points=float(points) if isinstance(points, (int, float)) else 0.0, reason=why,
            backend=backends.get(gid, ""), flags=tuple(verdict.flags),
            flagged_cells=tuple(verdict.flagged_cells),
            causes=tuple(c[:_REASON_CHARS] for c in verdict.causes if c))
    note = stop_note(nb)
    return NotebookVerdicts(notebook, records, _other_errors(cells), (note,) if note else ())


def verdicts_path(folder: Path, notebook: str) -> Path:
    return Path(folder) / f"{notebook}{SUFFIX}"


def _mac(body: dict[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hmac.new(_KEY, text.encode(), hashlib.sha256).hexdigest()


def save(folder: Path, record: NotebookVerdicts, *, student: str, assignment: str) -> Path:
    """Write ``record`` as ``folder/<notebook>.verdicts.json``, signed by this process.

    Written to a new file and moved over the name: what lay there (the student's file, a link,
    a folder) is replaced, never written through. A full disk raises, and the submission is then
    not graded (a fault of the machine), rather than graded without its verdicts."""
    body = {"schema": SCHEMA, "student": student, "assignment": assignment,
            **record.to_json()}
    text = json.dumps({**body, "mac": _mac(body)}, indent=1)
    path = verdicts_path(folder, record.notebook)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".verdicts-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return path


def load(folder: Path, notebook: str, *, student: str, assignment: str) -> NotebookVerdicts:
    """The verdicts this process wrote for ``notebook`` of ``student``'s ``assignment``.

    Raises :class:`VerdictsMissing` for anything else: no file, a link or a folder at its name,
    a file this process did not sign (the student's, an earlier run's), another layout."""
    path = verdicts_path(folder, notebook)
    try:
        data = json.loads(read_regular(path, max_bytes=MAX_BYTES))
    except FileNotFoundError:
        raise VerdictsMissing(path, "not found beside the autograded notebook") from None
    except UntrustedFile as exc:
        raise VerdictsMissing(path, f"not read: it {exc.reason}") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise VerdictsMissing(path, f"unreadable ({type(exc).__name__})") from None
    mac = data.pop("mac", None) if isinstance(data, dict) else None
    if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(data)):
        raise VerdictsMissing(path, "not written by this grading run (not signed by the "
                                    "grader: a submitted or stale file is never read)")
    if data.get("schema") != SCHEMA or (data.get("student"), data.get("assignment"),
                                        data.get("notebook")) != (student, assignment, notebook):
        raise VerdictsMissing(path, "written for another notebook or by another version of the grader")
    return NotebookVerdicts.from_json(data)
