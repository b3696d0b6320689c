"""Where a learner's progress is kept: one JSON file in their workspace, exercise by exercise.

Every ``ex.<exercise>.check(...)`` run in a learner's workspace (the folder ``ptxlab open``
made) writes what it said into the workspace's ``.ptxlab/progress.json``
(``$PTXLAB_PROGRESS_FILE`` names another file; outside a workspace nothing is written), and a
revealed solution is marked there. This module only stores: it knows exercises by their keys,
never by their classes, so the exercises can write to it without importing anything that
imports them.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["record", "mark_revealed", "progress_file", "load_entries", "notebook_of",
           "NOTEBOOK_OF_MODULE", "PROGRESS_FILE_ENV", "PASSED", "ATTEMPTED", "NOT_STARTED"]

PROGRESS_FILE_ENV = "PTXLAB_PROGRESS_FILE"
#: Exercise module (``ptxlab.exercises.<name>``, the first part of an exercise's key) -> the
#: notebook that teaches it.
NOTEBOOK_OF_MODULE = {
    "basics": "01_warps_lanes_smem", "ldmatrix": "02_ldmatrix",
    "ldmatrix_trans": "03_ldmatrix_trans", "stmatrix": "04_stmatrix",
    "movmatrix": "05_movmatrix", "mma": "06_mma", "banks": "07_banks", "capstone": "08_capstone",
    "blackwell": "09_blackwell_forms", "layout_fit": "10_layout_fit",
}
PASSED, ATTEMPTED, NOT_STARTED = "passed", "attempted", "not started"


def notebook_of(key: str) -> str | None:
    """The notebook of the exercise whose key is ``key`` (``"ldmatrix.receive"``)."""
    return NOTEBOOK_OF_MODULE.get(key.split(".", 1)[0])


def progress_file(start: Path | None = None) -> Path | None:
    """The progress file of the workspace holding ``start`` (the current folder), if any."""
    chosen = os.environ.get(PROGRESS_FILE_ENV)
    if chosen:
        return Path(chosen)
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".ptxlab" / "course-digest").is_file():      # made by ptxlab open
            return folder / ".ptxlab" / "progress.json"
    return None


def _load(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def load_entries(path: Path | None = None) -> dict[str, dict]:
    """Exercise key -> what was recorded for it (empty without a workspace)."""
    entries = _load(path or progress_file()).get("exercises", {})
    return entries if isinstance(entries, dict) else {}


def _save(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".progress-")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _update(key: str, change: Callable[[dict], None]) -> None:
    """Apply ``change`` to one exercise's entry; progress never breaks a check."""
    try:
        path = progress_file()
        if path is None:
            return
        data = _load(path)
        entry = data.setdefault("exercises", {}).setdefault(key, {})
        change(entry)
        _save(path, data)
    except OSError:
        pass


def record(key: str, passed: bool) -> None:
    """What a check of exercise ``key`` said (a pass is never undone by a later attempt)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S")

    def change(entry: dict) -> None:
        entry["attempts"] = entry.get("attempts", 0) + 1
        entry["last"] = now
        if passed:
            entry.setdefault("first_passed", now)
        entry["status"] = PASSED if passed or entry.get("status") == PASSED else ATTEMPTED

    _update(key, change)


def mark_revealed(key: str) -> None:
    """The solution of exercise ``key`` was shown."""
    _update(key, lambda entry: entry.update(revealed=True))
