"""Answers that lean on the course's own reference: found by reading the learner's cells.

The course ships its reference implementations (the layouts, the emulator, the exercises'
expected values, the reference kernels): a learner may call them anywhere to explore, but an
answer that computes its result *with* them has not answered the question. The grader reads the
code the learner wrote -- every code cell that is not word for word a cell of the released
notebook -- and flags, for manual grading, each exercise whose answer reaches:

* a name bound to a reference module (``layouts``, ``emulator``, ``ex`` ...) -- except a
  top-level ``ex.<exercise>.check(...)`` or ``.hint()`` line, which the notebook asks for;
* an import of ``ptxlab``, or of modules that reach around Python's names (``importlib``,
  ``os``, ``sys``, ``inspect`` ...), ``exec``/``eval``/``__import__``/``open``/``getattr``,
  or dunder attributes (``__dict__``, ``__globals__`` ...);
* in a CUDA source, an ``#include`` other than the course's instruction headers.

The reading is static and runs in the grader: nothing the notebook does at run time can hide a
line from it. Exercises are flagged, not failed, so a person decides.
"""
from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from ..teach.nbgrader_cells import grade_id

__all__ = ["Finding", "reference_names", "find_reference_use", "flagged_answers",
           "include_findings", "import_statements",
           "ALLOWED_INCLUDES"]

#: Modules whose contents are the course's answers.
_REFERENCE_PREFIXES = ("ptxlab.model", "ptxlab.teach.exercises", "ptxlab.teach.checks",
                       "ptxlab.authoring.course_cases", "ptxlab.teach.answers",
                       "ptxlab.run.reference_cases")
#: Builtins that reach objects by a computed name, run text as code, or read files.
_ESCAPE_CALLS = {"exec", "eval", "compile", "__import__", "globals", "locals", "vars", "open",
                 "getattr", "setattr", "delattr", "breakpoint", "get_ipython", "memoryview"}
#: Modules that do the same.
_ESCAPE_MODULES = {"importlib", "os", "sys", "subprocess", "pathlib", "io", "inspect",
                   "builtins", "ctypes", "shutil", "pickle", "marshal", "types", "gc", "runpy",
                   "code", "codeop", "pkgutil", "glob", "IPython", "dill", "cloudpickle",
                   "traitlets", "socket", "urllib", "requests", "http", "tempfile", "mmap"}
#: Headers a learner's kernel may include: the course's instruction wrappers and CUDA's own.
ALLOWED_INCLUDES = {"ldmatrix.cuh", "stmatrix.cuh", "movmatrix.cuh", "mma.cuh",
                    "capstone/capstone_ptx.cuh", "cuda_fp16.h", "cuda_bf16.h", "stdint.h",
                    "cstdint", "cuda_runtime.h"}
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include\b[ \t]*(.*)$', re.M)
_INCLUDED_FILE = re.compile(r'^[<"]([^>"]*)[>"]\s*(//.*)?$')
_ALLOWED_CALLS = {"check", "hint"}
#: A string that is a module path of the course (``"ptxlab.model.layouts"``), as a computed
#: import would spell it; the C++ namespace ``ptxlab::`` of the course's headers is not one.
_MODULE_PATH = re.compile(r"^\s*ptxlab(\.\w+)*\s*$")


@dataclass
class Finding:
    """One line of learner code that reaches the reference."""

    cell: int               # index of the code cell in the notebook
    cell_name: str          # its grade id, or "cell N"
    line: int
    text: str               # the line itself
    why: str
    grade_id: str | None = None   # the nbgrader id of the cell, where it has one

    def describe(self) -> str:
        return f"{self.cell_name}, line {self.line}: `{self.text.strip()[:100]}` ({self.why})"


def _is_reference_module(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in _REFERENCE_PREFIXES)


def _module_of(target: str) -> str | None:
    """The module an imported ``target`` (``pkg.mod`` or ``pkg.mod:attr``) really lives in."""
    mod_name, _, attr = target.partition(":")
    try:
        obj = importlib.import_module(mod_name)
        if attr:
            obj = getattr(obj, attr)
    except Exception:
        return mod_name if not attr else f"{mod_name}.{attr}"
    return getattr(obj, "__name__", None) if hasattr(obj, "__file__") else \
        getattr(obj, "__module__", None)


def import_statements(sources: Iterable[str]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every ``import`` and ``from ... import`` of the cells (a cell that does not parse has
    none)."""
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        yield from (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))


def reference_names(sources: Iterable[str]) -> dict[str, str]:
    """``{name: module}`` for every name the cells bind to a reference module of the course."""
    names: dict[str, str] = {}
    for node in import_statements(sources):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ptxlab"):
            for alias in node.names:
                module = _module_of(f"{node.module}.{alias.name}") or ""
                if not _is_reference_module(module):
                    module = _module_of(f"{node.module}:{alias.name}") or ""
                if _is_reference_module(module):
                    names[alias.asname or alias.name] = module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("ptxlab"):
                    names[(alias.asname or alias.name).split(".")[0]] = alias.name
    return names


def _allowed_statement(stmt: ast.stmt, ref: dict[str, str]) -> bool:
    """``ex.<exercise>.check(answer)`` / ``.hint()`` as a line of its own."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    func = stmt.value.func
    return (isinstance(func, ast.Attribute) and func.attr in _ALLOWED_CALLS
            and isinstance(func.value, ast.Attribute) and isinstance(func.value.value, ast.Name)
            and func.value.value.id in ref)


def _scan(tree: ast.AST, ref: dict[str, str]) -> list[tuple[int, str]]:
    """``(line, why)`` of every use of the reference or of an escape hatch under ``tree``."""
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name) and node.id in ref:
            found.append((line, f"uses `{node.id}`, the course's {ref[node.id]}"))
        elif isinstance(node, ast.Name) and node.id in _ESCAPE_CALLS:
            found.append((line, f"uses `{node.id}`, which can reach code by a computed name"))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""])
            for mod in mods:
                top = mod.split(".")[0]
                if top == "ptxlab":
                    found.append((line, f"imports {mod}: an answer may not import the course"))
                elif top in _ESCAPE_MODULES:
                    found.append((line, f"imports {mod}, which can reach around the notebook"))
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__") \
                and node.attr.endswith("__"):
            found.append((line, f"reaches `{node.attr}`"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _MODULE_PATH.match(node.value):
                found.append((line, f"names the course's module {node.value.strip()!r} in a "
                                    "string"))
            found += [(line + ln - 1, why) for ln, why in include_findings(node.value)]
    return found


def include_findings(cuda_source: str) -> list[tuple[int, str]]:
    """``(line, why)`` for each ``#include`` of a CUDA source that is not an allowed header."""
    found = []
    for m in _INCLUDE.finditer(cuda_source):
        target = m.group(1).strip()
        name = _INCLUDED_FILE.match(target)
        if name is None or name.group(1).strip() not in ALLOWED_INCLUDES:
            line = cuda_source[:m.start()].count("\n") + 1
            found.append((line, f"the kernel includes {target[:60]}: only the course's "
                                "instruction headers may be included"))
    return found


def find_reference_use(source: str, ref: dict[str, str]) -> list[tuple[int, str]]:
    """``(line, why)`` for one cell of learner code."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []                 # it does not run, so it answers nothing
    found = []
    for stmt in tree.body:
        if _allowed_statement(stmt, ref):
            call = stmt.value                                   # type: ignore[attr-defined]
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                found += _scan(arg, ref)
            continue
        found += _scan(stmt, ref)
    return sorted(set(found))


def _defined_names(tree: ast.AST) -> set[str]:
    names = set()
    for stmt in getattr(tree, "body", []):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        for node in ast.walk(stmt) if isinstance(stmt, (ast.Assign, ast.AnnAssign,
                                                        ast.AugAssign, ast.For, ast.With,
                                                        ast.Import, ast.ImportFrom)) else ():
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[0])
    return names


def _used_names(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


@dataclass
class _Cell:
    index: int
    name: str
    source: str
    tree: ast.AST | None
    defines: set[str] = field(default_factory=set)
    uses: set[str] = field(default_factory=set)


def flagged_answers(cells: Sequence[dict], trusted_sources: set[str], ref: dict[str, str],
                    answers: dict[str, int]) -> dict[str, list[Finding]]:
    """``{answer name: findings}`` for the answers that reach the reference.

    ``cells`` are the notebook's cells; a code cell whose source is in ``trusted_sources`` (the
    released notebook's own) is not the learner's. ``answers`` maps each answer name to the index
    of the test cell that grades it: a flagged cell that defines no answer (and nothing an answer
    uses) is charged to the first test cell after it."""
    parsed = []
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        try:
            tree = ast.parse(source)
        except SyntaxError:
            tree = None
        gid = grade_id(cell)
        c = _Cell(i, f"cell '{gid}'" if gid else f"code cell {i + 1}", source, tree)
        if tree is not None:
            c.defines, c.uses = _defined_names(tree), _used_names(tree)
        parsed.append(c)
    findings: dict[int, list[Finding]] = {}
    for c in parsed:
        if c.source in trusted_sources:
            continue
        hits = find_reference_use(c.source, ref)
        lines = c.source.splitlines()
        if hits:
            gid = grade_id(cells[c.index])
            findings[c.index] = [Finding(c.index, c.name, ln,
                                         lines[ln - 1] if 0 < ln <= len(lines) else "", why,
                                         gid)
                                 for ln, why in hits]
    if not findings:
        return {}
    out: dict[str, list[Finding]] = {}
    answer_cells = sorted(set(answers.values()))
    for index, hits in findings.items():
        # What leans on this cell: the names it defines, and those of cells using them.
        tainted = set(next(c for c in parsed if c.index == index).defines)
        changed = True
        while changed:
            changed = False
            for c in parsed:
                if c.uses & tainted and not c.defines <= tainted:
                    tainted |= c.defines
                    changed = True
        reached = [a for a in answers if a in tainted]
        if not reached:          # feeds no answer: charged to the exercise graded next
            later = [t for t in answer_cells if t > index]
            reached = [a for a, t in answers.items() if later and t == later[0]]
        for answer in reached:
            out.setdefault(answer, []).extend(hits)
    return out
