"""A learner's workspace: the student version of every notebook, kept across course updates.

The course's notebooks in ``course/source/`` hold the solutions and hidden tests. A learner
works on what a class receives instead: nbgrader's own ``generate_assignment`` output
(solutions replaced by stubs, hidden tests removed), copied into a folder of their own
(``workspace/`` of the checkout by default). A newer course (after ``git pull``) adds the
notebooks the workspace lacks and replaces a notebook the learner never changed; a notebook
the learner did change is never overwritten: the new version goes beside it
(``<name>.upstream.ipynb``) and a note at its top lists the cells that changed upstream.

What the learner was last given is kept in ``<workspace>/.ptxlab/released/``, so "never
changed" and "changed upstream" are decided against it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..run import sources
from ..teach.nbgrader_cells import grade_id

__all__ = ["WorkspaceReport", "prepare_workspace", "default_course_dir", "STATE_DIR",
           "UPSTREAM_NOTE_KEY"]

STATE_DIR = ".ptxlab"
#: Metadata key of the note cell that lists the cells changed upstream.
UPSTREAM_NOTE_KEY = "upstream_note"
#: Files of the course that never go to a learner.
_NOT_RELEASED = (".ipynb_checkpoints", "__pycache__", "*.pyc", ".*", "*.py", "feedback")


def default_course_dir() -> Path:
    """``course/`` of this checkout (the instructor's notebooks live in its ``source/``)."""
    return sources.PROJECT_ROOT / "course"


@dataclass
class WorkspaceReport:
    """What :func:`prepare_workspace` did, notebook by notebook (paths relative to it)."""

    workspace: Path
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    kept_with_upstream: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = []
        if self.added:
            parts.append(f"{len(self.added)} new")
        if self.updated:
            parts.append(f"{len(self.updated)} updated from the course")
        if self.kept_with_upstream:
            parts.append(f"{len(self.kept_with_upstream)} with your answers kept and a newer "
                         f"version beside them ({', '.join(self.kept_with_upstream)})")
        if self.unchanged:
            parts.append(f"{len(self.unchanged)} as you left them")
        return f"workspace {self.workspace}: " + (", ".join(parts) or "no notebooks")


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and ".ipynb_checkpoints" not in path.parts:
            h.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _generate_student_versions(course: Path, out: Path) -> Path:
    """nbgrader's ``generate_assignment`` for every assignment of ``course/source``, in a
    scratch course root (the checkout's course folder is not written); returns its
    ``release/`` folder."""
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    scratch = out / "course"
    shutil.copytree(course / "source", scratch / "source",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    cfg = Config()
    cfg.CourseDirectory.root = str(scratch)
    cfg.CourseDirectory.db_url = f"sqlite:///{out / 'gradebook.db'}"
    cfg.CourseDirectory.ignore = list(_NOT_RELEASED)
    course_config = course / "nbgrader_config.py"
    if course_config.is_file():   # the stubs a learner sees are the course's own
        from traitlets.config.loader import PyFileConfigLoader

        loaded = PyFileConfigLoader(course_config.name, path=str(course)).load_config()
        for key in ("ClearSolutions",):
            if key in loaded:
                cfg[key] = loaded[key]
    api = NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)
    # A new gradebook asks the `alembic` command (beside this Python) for its schema version.
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), path])
    try:
        results = {a: api.generate_assignment(a, force=True)
                   for a in sorted(p.name for p in (scratch / "source").iterdir() if p.is_dir())}
    finally:
        os.environ["PATH"] = path
    for assignment, result in results.items():
        if not result["success"]:
            raise RuntimeError(f"the student version of {assignment} could not be made:\n"
                               f"{result.get('error') or result.get('log')}")
    return scratch / "release"


def _cell_name(cell: dict, index: int) -> str:
    gid = grade_id(cell)
    if gid:
        return f"`{gid}`"
    first = next((line.strip("# ").strip() for line in "".join(cell.get("source", "")).splitlines()
                  if line.strip()), "")
    return f"cell {index + 1}" + (f" ({first[:50]})" if first else "")


def _cell_key(cell: dict, index: int) -> str:
    return grade_id(cell) or cell.get("id") or f"#{index}"


def changed_cells(old: dict, new: dict) -> list[str]:
    """The cells of ``new`` that differ from ``old`` (added, changed or removed), by name."""
    before = {_cell_key(c, i): (c, i) for i, c in enumerate(old.get("cells", []))}
    after = {_cell_key(c, i): (c, i) for i, c in enumerate(new.get("cells", []))}
    names = []
    for key, (cell, i) in after.items():
        if key not in before:
            names.append(_cell_name(cell, i) + " (new)")
        elif (before[key][0].get("source"), before[key][0].get("cell_type")) != (
                cell.get("source"), cell.get("cell_type")):
            names.append(_cell_name(cell, i))
    names += [_cell_name(c, i) + " (removed)" for key, (c, i) in before.items() if key not in after]
    return names


def _note_changes(notebook: Path, upstream_name: str, names: list[str]) -> None:
    """Put (or replace) a note at the top of the learner's notebook naming what changed."""
    nb = json.loads(notebook.read_text())
    cells = [c for c in nb.get("cells", [])
             if not c.get("metadata", {}).get("ptxlab", {}).get(UPSTREAM_NOTE_KEY)]
    listed = "\n".join(f"- {name}" for name in names[:30])
    more = f"\n- ... and {len(names) - 30} more" if len(names) > 30 else ""
    cells.insert(0, {
        "cell_type": "markdown", "metadata": {"ptxlab": {UPSTREAM_NOTE_KEY: True}},
        "source": ("**The course has a newer version of this notebook.** Your answers here are "
                   f"kept as they are; the new version is `{upstream_name}` beside this file. "
                   f"Cells that changed:\n\n{listed}{more}\n\n"
                   "Copy what you need from it, then delete this note."),
    })
    if nb.get("nbformat", 4) >= 4 and nb.get("nbformat_minor", 0) >= 5:
        cells[0]["id"] = "ptxlab-upstream-note"
    nb["cells"] = cells
    notebook.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def prepare_workspace(workspace: Path, course: Path | None = None) -> WorkspaceReport:
    """Create or bring up to date the learner's ``workspace`` from ``course``'s notebooks."""
    course = Path(course or default_course_dir())
    workspace = Path(workspace)
    if not (course / "source").is_dir():
        raise FileNotFoundError(f"no course notebooks in {course / 'source'}: the student "
                                "versions are made from a checkout of the course")
    state = workspace / STATE_DIR
    released_dir = state / "released"
    report = WorkspaceReport(workspace)
    digest = _digest(course / "source")
    stamp = state / "course-digest"
    # Nothing new upstream: the student versions last made are the release, nothing to make.
    regenerate = not (stamp.exists() and stamp.read_text() == digest and released_dir.is_dir())
    with tempfile.TemporaryDirectory(prefix="ptxlab-workspace-") as tmp:
        release = (_generate_student_versions(course, Path(tmp)) if regenerate
                   else released_dir)
        for new in sorted(p for p in release.rglob("*") if p.is_file()):
            rel = new.relative_to(release)
            dest, base = workspace / rel, released_dir / rel
            name = rel.as_posix()
            if not dest.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(new, dest)
                report.added.append(name)
            elif base.exists() and base.read_bytes() == new.read_bytes():
                report.unchanged.append(name)
                continue
            elif base.exists() and dest.read_bytes() == base.read_bytes():
                shutil.copy2(new, dest)                # never touched: take the new version
                report.updated.append(name)
            elif new.suffix == ".ipynb":
                upstream = dest.with_name(dest.stem + ".upstream.ipynb")
                shutil.copy2(new, upstream)
                old = json.loads(base.read_text()) if base.exists() else {"cells": []}
                _note_changes(dest, upstream.name, changed_cells(old, json.loads(new.read_text())))
                report.kept_with_upstream.append(name)
            else:
                shutil.copy2(new, dest.with_name(dest.name + ".upstream"))
                report.kept_with_upstream.append(name)
            if regenerate:
                base.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(new, base)
    state.mkdir(parents=True, exist_ok=True)
    stamp.write_text(digest)
    return report
