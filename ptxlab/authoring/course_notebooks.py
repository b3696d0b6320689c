"""The course's notebooks as text: build ``.ipynb`` from percent-format ``.py``, check, execute.

The text form (``course/text/<assignment>.py``) is what people edit and what git diffs; the
``.ipynb`` under ``course/source/<assignment>/`` is generated from it, without outputs, with the
nbgrader metadata written from short cell headers:

``# %%``                               an ordinary code cell
``# %% [markdown]``                    a markdown cell (lines start with ``# ``)
``# %% solution id=NAME``              a code cell with a ``### BEGIN/END SOLUTION`` region
``# %% tests id=NAME points=N``        an autograded test cell (locked), may hold hidden tests

The text forms live outside ``source/`` so ``nbgrader generate_assignment`` never copies them
(they contain the solutions).
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..run import sources
from ..teach.nbgrader_cells import is_graded, is_solution, nbgrader_meta

__all__ = ["PercentCell", "percent_cells", "percent_to_notebook", "notebook_to_percent", "build_all", "check_sync",
           "stripped", "execute", "COURSE_DIR", "assignments"]

COURSE_DIR = sources.PROJECT_ROOT / "course"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def _nbformat():
    import nbformat
    return nbformat


def _parse_header(rest: str) -> tuple[str, dict]:
    rest = rest.strip()
    if rest == "[markdown]":
        return "markdown", {}
    if not rest:
        return "code", {}
    words = rest.split()
    kind, opts = words[0], {}
    for w in words[1:]:
        if "=" not in w:
            raise ValueError(f"cell header option {w!r} is not key=value (in '# %% {rest}')")
        k, v = w.split("=", 1)
        opts[k] = v
    if kind not in ("solution", "tests"):
        raise ValueError(f"unknown cell kind {kind!r} in '# %% {rest}'")
    if "id" not in opts:
        raise ValueError(f"'# %% {rest}' needs id=NAME (nbgrader's grade_id)")
    return kind, opts


class PercentCell(NamedTuple):
    """One cell of a text form: its kind (``code``, ``markdown``, ``solution``, ``tests``), its
    header's options, the line of the text where its body starts, and the body as written."""

    kind: str
    options: dict
    line: int
    code: str


def percent_cells(text: str) -> list[PercentCell]:
    """Every cell of the course's percent text, in order (text before the first header is not
    a cell)."""
    heads = list(re.finditer(r"^# %%(?P<rest>.*)$", text, re.M))
    cells = []
    for head, nxt in zip(heads, heads[1:] + [None]):
        kind, opts = _parse_header(head.group("rest"))
        start = head.end() + 1
        cells.append(PercentCell(kind, opts, text.count("\n", 0, start) + 1,
                                 text[start:nxt.start() if nxt else len(text)]))
    return cells


def percent_to_notebook(text: str):
    """Parse the course's percent text into an nbformat v4 notebook (no outputs)."""
    nbf = _nbformat()
    cells = []

    def flush(kind: str, opts: dict, buf: list[str]):
        lines = buf[:]
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if kind == "markdown":
            src = "\n".join(l[2:] if l.startswith("# ") else l.lstrip("#") for l in lines)
            cells.append(nbf.v4.new_markdown_cell(src))
            return
        cell = nbf.v4.new_code_cell("\n".join(lines))
        if kind in ("solution", "tests"):
            grade_id = opts["id"] + ("" if kind == "solution" else "")
            meta = {"grade": kind == "tests", "grade_id": grade_id, "locked": kind == "tests",
                    "schema_version": 3, "solution": kind == "solution", "task": False}
            if kind == "tests":
                meta["points"] = int(opts.get("points", 1))
            cell.metadata["nbgrader"] = meta
        cells.append(cell)

    for cell in percent_cells(text):
        flush(cell.kind, cell.options, cell.code.splitlines())
    for i, c in enumerate(cells):
        c["id"] = f"c{i:03d}"
    nb = nbf.v4.new_notebook(cells=cells)
    nb.metadata = {"kernelspec": dict(KERNELSPEC),
                   "language_info": {"name": "python"}}
    ids = [nbgrader_meta(c)["grade_id"] for c in cells if nbgrader_meta(c)]
    dup = {x for x in ids if ids.count(x) > 1}
    if dup:
        raise ValueError(f"grade ids used twice: {sorted(dup)}")
    return nb


def notebook_to_percent(nb) -> str:
    """The inverse of :func:`percent_to_notebook` (for edits made in JupyterLab)."""
    out = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            out.append("# %% [markdown]")
            out += [("# " + l) if l else "#" for l in cell.source.split("\n")]
        else:
            meta = nbgrader_meta(cell)
            if is_solution(cell):
                out.append(f"# %% solution id={meta['grade_id']}")
            elif is_graded(cell):
                out.append(f"# %% tests id={meta['grade_id']} points={int(meta.get('points', 1))}")
            else:
                out.append("# %%")
            out.append(cell.source)
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def assignments(course_dir: Path = COURSE_DIR) -> list[str]:
    """Assignment names, in course order (from the text forms)."""
    return sorted(p.stem for p in (course_dir / "text").glob("*.py"))


def notebook_path(name: str, course_dir: Path = COURSE_DIR) -> Path:
    return course_dir / "source" / name / f"{name}.ipynb"


def _dumps(nb) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def build_all(course_dir: Path = COURSE_DIR) -> list[Path]:
    """Write every ``source/<a>/<a>.ipynb`` from ``text/<a>.py``; returns the paths written."""
    written = []
    for name in assignments(course_dir):
        nb = percent_to_notebook((course_dir / "text" / f"{name}.py").read_text())
        path = notebook_path(name, course_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = _dumps(nb)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


def check_sync(course_dir: Path = COURSE_DIR) -> list[str]:
    """Problems: notebooks that differ from their text form, or that carry outputs."""
    problems = []
    for name in assignments(course_dir):
        path = notebook_path(name, course_dir)
        if not path.exists():
            problems.append(f"{path} is missing: run tools/course/course_build.py")
            continue
        want = _dumps(percent_to_notebook((course_dir / "text" / f"{name}.py").read_text()))
        if path.read_text() != want:
            problems.append(f"{path} differs from text/{name}.py: run tools/course/course_build.py")
        problems += [f"{path}: {p}" for p in stripped(json.loads(path.read_text()))]
    return problems


def stripped(nb: dict) -> list[str]:
    """What keeps a notebook from being output-free (empty list: clean)."""
    out = []
    for i, c in enumerate(nb.get("cells", [])):
        if c.get("outputs"):
            out.append(f"cell {i} has outputs")
        if c.get("execution_count") is not None:
            out.append(f"cell {i} has an execution count")
    return out


@dataclass
class ExecutionReport:
    """What executing one notebook did."""

    name: str
    ok: bool
    seconds: float
    error: str
    grade_cells: dict          # grade_id -> "ok" or the error's first line
    backend: str
    outputs: object            # the executed notebook


def _first_error(cell) -> str | None:
    for o in cell.get("outputs", []):
        if o.get("output_type") == "error":
            return f"{o.get('ename')}: {o.get('evalue', '')}".splitlines()[0][:300]
    return None


def _backend_of(nb) -> str:
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            text = o.get("text", "") if o.get("output_type") == "stream" else ""
            m = re.search(r"(kernels run on .+|no backend can run kernels here.*)", text)
            if m:
                return m.group(1).strip()
    return ""


def execute(path: Path, *, timeout: int = 600, allow_errors: bool = False, cwd: Path | None = None,
            env: dict | None = None) -> ExecutionReport:
    """Run a notebook top to bottom with nbclient; grade cells are reported one by one."""
    import nbclient
    nbf = _nbformat()
    nb = nbf.read(str(path), as_version=4)
    start = time.perf_counter()
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     allow_errors=allow_errors,
                                     resources={"metadata": {"path": str(cwd or path.parent)}})
    error = ""
    import os
    run_env = dict(os.environ if env is None else env)
    # The kernel imports ptxlab from this checkout even where it is not installed.
    root = str(COURSE_DIR.parent)
    run_env["PYTHONPATH"] = os.pathsep.join(p for p in (root, run_env.get("PYTHONPATH", "")) if p)
    run_env.setdefault("PYTHONUNBUFFERED", "1")
    try:
        client.execute(env=run_env)
    except Exception as exc:  # CellExecutionError and timeouts
        if getattr(exc, "ename", None):
            error = f"{exc.ename}: {exc.evalue}"
        else:
            error = f"{type(exc).__name__}: {str(exc)[-1500:]}"
        error = _ANSI.sub("", error)
    seconds = time.perf_counter() - start
    grades = {}
    for cell in nb.cells:
        if is_graded(cell):
            err = _first_error(cell)
            ran = err is None and cell.get("outputs") is not None
            grades[nbgrader_meta(cell)["grade_id"]] = "ok" if ran else err
    return ExecutionReport(path.stem, not error, seconds, error, grades, _backend_of(nb), nb)


def generate_release(course_root: Path, names: list[str] | None = None) -> dict[str, Path]:
    """Run nbgrader's generate_assignment (in this process) for ``names`` in ``course_root``
    and return the released notebook of each. ``course_root`` should be a scratch copy: nbgrader
    writes its gradebook and ``release/`` there."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config

    course_root = Path(course_root)
    names = names or assignments(course_root)
    cfg = Config()
    cfg.CourseDirectory.root = str(course_root)
    cfg.CourseDirectory.course_id = "ptx-matrix-lab"
    cfg.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".*",
                                  "*.py"]
    api = NbGraderAPI(config=cfg)
    out = {}
    for name in names:
        result = api.generate_assignment(name, force=True)
        if not result.get("success"):
            raise RuntimeError(f"nbgrader generate_assignment {name} failed:\n"
                               f"{result.get('error') or result.get('log')}")
        out[name] = course_root / "release" / name / f"{name}.ipynb"
    return out


def solution_lines(nb) -> list[str]:
    """Non-blank lines inside solution and hidden-test regions (they must never be released)."""
    lines, inside = [], False
    for cell in nb.cells:
        for line in cell.source.split("\n"):
            if "BEGIN SOLUTION" in line or "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END SOLUTION" in line or "END HIDDEN TESTS" in line:
                inside = False
            elif inside and line.strip():
                lines.append(line.strip())
    return lines
