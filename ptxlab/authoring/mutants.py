"""Mutants of every solution of the course, and which of its checks tells them apart.

A PASSED in the notebook must predict the hidden tests: an answer the visible check accepts and
the hidden tests reject (an *escape*) only shows at grading time, when the learner can no longer
act on it. So the visible cases have to be wide enough to kill the plausible wrong answers. This
module makes such answers from each solution of ``course/text/*.py`` (found by
:func:`ptxlab.authoring.course_cases.solution_cells`, never from a list) by one small change each,
the kind a learner makes:

* Python answers: the solution region's syntax tree with an operator swapped, an integer
  changed (±1, ×2, ÷2, 4/8/16 for one another), ``lane // 8`` for ``lane // 16`` or
  ``lane % 8``, the returned values swapped, one operand of a sum (or of any operator) dropped,
  and a coordinate taken from the absolute address (``base // 128 + row``) instead of relative
  to the tile, or a local sum's one part instead of the whole;
* choice answers: every other option;
* CUDA answers: the same textual changes inside the solution region, plus ``.trans`` toggled,
  registers swapped in a ``{%0, %1, ...}`` list, the arguments of a call swapped, a row off by
  one, and a barrier deleted anywhere in the kernel.

Identical mutants are made once; one that does not compile is *stillborn* (counted, not run).
Each other mutant is run through the exercise's own ``evaluate``: the visible check, then, if it
passes, the hidden cases under the self-study seed and two grading seeds
(:func:`~ptxlab.teach.exercises.base.grading_seed`). Visible rejects: killed, fine. Visible
accepts and hidden rejects: an escape, a defect of the course. Both accept: an equivalent
answer, or a gap in both, listed for a person to judge.

Beside the generated mutants, :data:`NAMED_MISTAKES` holds the realistic wrong kernels learners
write in every kernel exercise of the course, each with the cause its check must name (from
evidence, :mod:`ptxlab.teach.diagnosis`), or its own message for a compile error, a hang or a
race.
"""
from __future__ import annotations

import ast
import contextlib
import copy
import difflib
import random
import re
import signal
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from .course_cases import SolutionCell, solution_cells
from ..teach.exercises.base import ChoiceExercise, grading_seed
from ..teach.exercises.kernel_exercise import KernelExercise

__all__ = ["Mutant", "Outcome", "ExerciseResult", "GRADING_SEEDS", "KERNEL_SAMPLE",
           "kind_of", "make_mutants", "classify", "run_cell", "run_course"]

#: The grading seeds every visible-accepted mutant meets besides the self-study seed: fixed, so
#: a run is reproducible; any grading seed is as good as another.
GRADING_SEEDS = (7_000_001, 7_000_002)
#: Extra grading seeds run on a mutant both checks accept, as evidence that it is equivalent.
EVIDENCE_SEEDS = tuple(range(7_000_101, 7_000_105))
#: Kernel mutants run per kernel exercise: ``None`` runs them all (the course's take about a
#: minute and a half on the 2-core machine, reports/course/MUTANTS.md); a number runs a fixed,
#: seeded sample of that many, for a slower machine.
KERNEL_SAMPLE: int | None = None
#: Seconds one evaluation may take before the mutant counts as rejected (a runaway answer).
TIME_LIMIT_S = 20.0


# ---------------------------------------------------------------------------------------------
# Mutants
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mutant:
    """One changed answer: ``answer`` is the whole mutated cell code (Python) or kernel source
    (CUDA); ``diff`` the changed lines (``- old``, ``+ new``); ``line`` the first changed line
    in the notebook's text form."""

    operator: str
    answer: str
    diff: tuple[str, ...]
    line: int


def kind_of(cell: SolutionCell) -> str:
    """``choice``, ``kernel`` or ``python``: which mutation operators apply."""
    if isinstance(cell.exercise, ChoiceExercise):
        return "choice"
    if isinstance(cell.exercise, KernelExercise) and cell.kernel_source() is not None:
        return "kernel"
    return "python"


def _diff(old: str, new: str) -> tuple[tuple[str, ...], int]:
    """The changed lines (stripped) and the 0-based index of the first one in ``old``."""
    a, b = old.splitlines(), new.splitlines()
    out, first = [], None
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        first = i1 if first is None else first
        out += ["- " + line.strip() for line in a[i1:i2]]
        out += ["+ " + line.strip() for line in b[j1:j2]]
    return tuple(out), first or 0


# ----- Python answers: edits of the solution region's syntax tree ----------------------------

_OPS: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//",
                         ast.Mod: "%", ast.BitXor: "^", ast.BitAnd: "&", ast.BitOr: "|",
                         ast.LShift: "<<", ast.RShift: ">>"}
#: Widths a learner confuses: 8 and 16 rows or lanes, 4 lanes of a group.
_FAMILY = (4, 8, 16)
_ATOMS = (ast.Name, ast.Constant, ast.Call, ast.Subscript, ast.Attribute, ast.Tuple)


def _python_region(code: str) -> range:
    """1-based line numbers strictly between ``### BEGIN SOLUTION`` and ``### END SOLUTION``."""
    lines = code.splitlines()
    begin = next((i for i, l in enumerate(lines) if "### BEGIN SOLUTION" in l), None)
    end = next((i for i, l in enumerate(lines) if "### END SOLUTION" in l), None)
    if begin is None or end is None:
        return range(1, len(lines) + 1)
    return range(begin + 2, end + 1)


def _int(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _binop(left: ast.AST, op: type, right: ast.AST) -> ast.BinOp:
    return ast.BinOp(copy.deepcopy(left), op(), copy.deepcopy(right))


def _scales(func: ast.AST, region: range) -> dict[str, int]:
    """Names multiplied by a constant in the region (``row * 128``): a byte scale per name."""
    out: dict[str, int] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) \
                and getattr(node, "lineno", 0) in region:
            for a, b in ((node.left, node.right), (node.right, node.left)):
                if isinstance(a, ast.Name) and (_int(b) or 0) > 1:
                    out.setdefault(a.id, _int(b))
    return out


def _python_edits(func: ast.FunctionDef, region: range) -> Iterator[tuple[ast.AST, ast.AST, str]]:
    """``(node, replacement, what)`` for every single-step mutation inside the region."""
    nodes = [n for n in ast.walk(func) if getattr(n, "lineno", None) in region
             and getattr(n, "end_lineno", None) in region]
    for node in nodes:
        if isinstance(node, ast.BinOp):
            op = type(node.op)
            for other, text in _OPS.items():
                if other is op or (other is ast.LShift
                                                        and (_int(node.right) or 0) > 64):
                    continue
                yield node, _binop(node.left, other, node.right), f"`{_OPS[op]}` -> `{text}`"
            if op in _OPS:
                yield node, copy.deepcopy(node.left), f"dropped `{_OPS[op]} " \
                                                      f"{ast.unparse(node.right)}`"
                yield node, copy.deepcopy(node.right), f"dropped `{ast.unparse(node.left)} " \
                                                       f"{_OPS[op]}`"
            c = _int(node.right)
            if isinstance(node.left, ast.Name) and op in (ast.FloorDiv, ast.Mod) and c in _FAMILY:
                for other in (ast.FloorDiv, ast.Mod):
                    for c2 in _FAMILY:
                        if (other, c2) != (op, c):
                            new = ast.BinOp(ast.Name(node.left.id), other(), ast.Constant(c2))
                            yield node, new, f"`{ast.unparse(node)}` -> `{ast.unparse(new)}`"
        c = _int(node)
        if c is not None:
            values = [c + 1, c - 1, 2 * c, c // 2] + ([v for v in _FAMILY if v != c]
                                                      if c in _FAMILY else [])
            for v in dict.fromkeys(values):
                if v != c:
                    yield node, ast.Constant(v), f"`{c}` -> `{v}`"
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
            elts = node.value.elts
            for i in range(len(elts)):
                for j in range(i + 1, len(elts)):
                    swapped = list(elts)
                    swapped[i], swapped[j] = swapped[j], swapped[i]
                    yield node.value, ast.Tuple([copy.deepcopy(e) for e in swapped], ast.Load()), \
                        f"swapped returned values {i} and {j}"
    yield from _relative_edits(func, region, nodes)


def _relative_edits(func: ast.FunctionDef, region: range,
                    nodes: list[ast.AST]) -> Iterator[tuple[ast.AST, ast.AST, str]]:
    """Absolute for relative and back: a local ``v = a + b`` used as ``a`` or ``b`` alone (the
    part relative to a block instead of the whole), and, where the function takes a ``base``,
    a coordinate ``x`` taken from the address, ``base // scale + x`` (an answer keyed on
    absolute address bits)."""
    sums: dict[str, ast.BinOp] = {}
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.BinOp) \
                and isinstance(node.value.op, ast.Add):
            sums[node.targets[0].id] = node.value
    params = [a.arg for a in func.args.args]
    bases = [p for p in params if "base" in p]
    scales = _scales(func, region)
    for node in nodes:
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
            continue
        value = sums.get(node.id)
        if value is not None and node.lineno > value.lineno:
            for part in (value.left, value.right):
                yield node, copy.deepcopy(part), f"`{node.id}` -> `{ast.unparse(part)}` " \
                                                 "(relative instead of absolute)"
        for base in bases:
            if node.id == base:
                continue
            k = scales.get(node.id)
            offset = ast.Name(base) if k is None else ast.BinOp(ast.Name(base), ast.FloorDiv(),
                                                                ast.Constant(k))
            new = ast.BinOp(offset, ast.Add(), ast.Name(node.id))
            yield node, new, f"`{node.id}` -> `{ast.unparse(new)}` (absolute instead of relative)"


class _Splicer:
    """Replaces one node's source text by a replacement node's, parenthesised where needed, so
    the rest of the cell keeps its own spelling (and the diff shows one changed line)."""

    def __init__(self, code: str):
        self.code = code.encode()
        self.starts = [0]
        for line in self.code.split(b"\n"):
            self.starts.append(self.starts[-1] + len(line) + 1)

    def _at(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def splice(self, node: ast.AST, new: ast.AST, parent: ast.AST | None) -> str:
        a = self._at(node.lineno, node.col_offset)
        b = self._at(node.end_lineno, node.end_col_offset)
        text = ast.unparse(new)
        wrapped = self.code[a - 1:a] == b"(" and self.code[b:b + 1] == b")"
        if not isinstance(new, _ATOMS) and not isinstance(parent, ast.stmt) and not wrapped:
            text = f"({text})"
        return (self.code[:a] + text.encode() + self.code[b:]).decode()


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _python_mutants(cell: SolutionCell) -> tuple[list[Mutant], int]:
    tree = ast.parse(cell.code)
    func = _function(tree, cell.answer_name)
    if func is None:
        return [], 0
    region = _python_region(cell.code)
    parents = {child: node for node in ast.walk(func) for child in ast.iter_child_nodes(node)}
    splicer = _Splicer(cell.code)
    seen = {ast.dump(tree)}
    out: list[Mutant] = []
    stillborn = 0
    edits = (_choice_edits(cell, func, region) if kind_of(cell) == "choice"
             else _python_edits(func, region))
    for node, new, what in edits:
        code = splicer.splice(node, new, parents.get(node))
        try:
            key = ast.dump(ast.parse(code))
        except SyntaxError:
            stillborn += 1
            continue
        if key in seen:
            continue
        seen.add(key)
        diff, first = _diff(cell.code, code)
        out.append(Mutant(what, code, diff, cell.line + first))
    return out, stillborn


def _choice_edits(cell: SolutionCell, func: ast.FunctionDef,
                  region: range) -> Iterator[tuple[ast.AST, ast.AST, str]]:
    """Every other option in place of the returned one."""
    ex = cell.exercise
    options = sorted(set(ex.explanations) | {ex.correct})
    for node in ast.walk(func):
        if isinstance(node, ast.Constant) and node.value == ex.correct \
                and getattr(node, "lineno", None) in region:
            for option in options:
                if option != ex.correct:
                    yield node, ast.Constant(option), f"option {option!r} instead of " \
                                                      f"{ex.correct!r}"


def _is_check_call(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute)
            and stmt.value.func.attr in ("check", "grade"))


def python_answer(code: str, name: str) -> Callable:
    """The answer a (mutated) solution cell defines: the cell run without its ``check`` line."""
    tree = ast.parse(code)
    tree.body = [s for s in tree.body if not _is_check_call(s)]
    namespace: dict = {"np": np, "__name__": "__solution__"}
    exec(compile(tree, "<solution>", "exec"), namespace)  # noqa: S102 - the course's own cells
    return namespace[name]


# ----- CUDA answers: textual edits of the kernel source --------------------------------------

_TOKEN = re.compile(r"""
    (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')
  | (?P<number>0[xX][0-9a-fA-F]+[uUlL]*|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?[uUlLfF]*)
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<op><<=|>>=|->|::|\+\+|--|&&|\|\||<<|>>|[-+*/%&|^!=<>]=|[-+*/%&|^~!=<>?:;,.(){}\[\]\#])
  | (?P<space>\s+)
""", re.X | re.S)

#: Binary operators and their C precedence (smaller binds tighter).
_PREC = {"*": 3, "/": 3, "%": 3, "+": 4, "-": 4, "<<": 5, ">>": 5, "<": 6, ">": 6, "<=": 6,
         ">=": 6, "==": 7, "!=": 7, "&": 8, "^": 9, "|": 10, "&&": 11, "||": 12}
_SWAPPABLE = ("+", "-", "*", "/", "%", "^", "&", "|", "<<", ">>")
_TYPES = {"unsigned", "signed", "short", "int", "long", "char", "float", "double", "void",
          "bool", "const", "volatile", "auto", "u32", "uint4", "size_t", "return", "case",
          "sizeof", "extern", "static", "__shared__", "__device__", "__global__"}
_CASTS = {"static_cast", "reinterpret_cast", "const_cast", "dynamic_cast"}
_STOP = {";", ",", "?", ":", "=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=",
         "return", "{", "}"}
_BARRIERS = ("__syncthreads", "__syncwarp", "block_sync")
#: Words followed by a parenthesis that are not calls whose arguments could be swapped.
_NOT_CALLS = {"asm", "volatile", "if", "for", "while", "switch", "return", "sizeof"}


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    start: int
    end: int


def _tokens(source: str) -> list[_Tok]:
    toks = [_Tok(m.lastgroup, m.group(), m.start(), m.end()) for m in _TOKEN.finditer(source)
            if m.lastgroup not in ("space", "comment")]
    # template brackets of casts are brackets, not comparisons
    for i, t in enumerate(toks[:-1]):
        if t.kind == "ident" and t.text in _CASTS and toks[i + 1].text == "<":
            depth = 0
            for j in range(i + 1, len(toks)):
                if toks[j].text == "<":
                    depth += 1
                elif toks[j].text == ">":
                    depth -= 1
                if depth == 0:
                    toks[i + 1] = _Tok("open", "<", toks[i + 1].start, toks[i + 1].end)
                    toks[j] = _Tok("close", ">", toks[j].start, toks[j].end)
                    break
    return toks


def _ends_operand(t: _Tok) -> bool:
    return (t.kind == "number" or (t.kind == "ident" and t.text not in _TYPES)
            or t.text in (")", "]"))


def _starts_operand(t: _Tok) -> bool:
    return (t.kind in ("number", "ident") and t.text not in _TYPES) or t.text in ("(", "~", "!",
                                                                                  "-")


def _is_binary(toks: list[_Tok], i: int) -> bool:
    return (toks[i].kind == "op" and toks[i].text in _PREC and 0 < i < len(toks) - 1
            and _ends_operand(toks[i - 1]) and _starts_operand(toks[i + 1]))


def _opens(t: _Tok) -> bool:
    return t.text in ("(", "[", "{") or t.kind == "open"


def _closes(t: _Tok) -> bool:
    return t.text in (")", "]", "}") or t.kind == "close"


def _right_end(toks: list[_Tok], i: int) -> int:
    """Index one past the right operand of the binary operator at ``i``."""
    p, depth, j = _PREC[toks[i].text], 0, i + 1
    while j < len(toks):
        t = toks[j]
        if _opens(t):
            depth += 1
        elif _closes(t):
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and (t.text in _STOP or (_is_binary(toks, j) and _PREC[t.text] >= p)):
            break
        j += 1
    return j


def _left_start(toks: list[_Tok], i: int) -> int:
    """Index of the first token of the left operand of the binary operator at ``i``."""
    p, depth, j = _PREC[toks[i].text], 0, i - 1
    while j >= 0:
        t = toks[j]
        if _closes(t):
            depth += 1
        elif _opens(t):
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and (t.text in _STOP or t.text in _TYPES
                             or (_is_binary(toks, j) and _PREC[t.text] > p)):
            break
        j -= 1
    return j + 1


def _kernel_regions(source: str) -> list[tuple[int, int]]:
    """Character spans of the source between ``// BEGIN SOLUTION`` and ``// END SOLUTION``."""
    spans = []
    for begin in re.finditer(r"//\s*BEGIN SOLUTION[^\n]*\n", source):
        end = source.find("// END SOLUTION", begin.end())
        spans.append((begin.end(), end if end >= 0 else len(source)))
    return spans or [(0, len(source))]


def _kernel_edits(source: str) -> Iterator[tuple[int, int, str, str]]:
    """``(start, end, replacement, what)`` for every single textual mutation."""
    toks = _tokens(source)
    regions = _kernel_regions(source)

    def inside(t: _Tok) -> bool:
        return any(a <= t.start and t.end <= b for a, b in regions)

    for i, t in enumerate(toks):
        if t.kind == "ident" and t.text in _BARRIERS and toks[i + 1].text == "(":
            j = i + 1
            while j < len(toks) and toks[j].text != ";":
                j += 1
            yield t.start, toks[j].end, "", f"deleted `{source[t.start:toks[j].end]}`"
        if not inside(t):
            continue
        if t.kind == "string":
            yield from _string_edits(t)
        if t.kind == "ident" and re.fullmatch(r"(ld|st)matrix_x[124](_trans)?", t.text):
            other = t.text[:-6] if t.text.endswith("_trans") else t.text + "_trans"
            yield t.start, t.end, other, f"`{t.text}` -> `{other}`"
        if _is_binary(toks, i) and t.text in _SWAPPABLE:
            for other in _SWAPPABLE:
                if other != t.text:
                    yield t.start, t.end, other, f"`{t.text}` -> `{other}`"
            r = _right_end(toks, i)
            left = _left_start(toks, i)
            yield toks[i - 1].end, toks[r - 1].end, "", \
                f"dropped `{source[t.start:toks[r - 1].end]}`"
            yield toks[left].start, toks[i + 1].start, "", \
                f"dropped `{source[toks[left].start:t.end]}`"
        if t.kind == "number" and re.fullmatch(r"\d+[uU]?", t.text):
            digits = t.text.rstrip("uU")
            suffix = t.text[len(digits):]
            c = int(digits)
            values = [c + 1, c - 1, 2 * c, c // 2] + ([v for v in _FAMILY if v != c]
                                                      if c in _FAMILY else [])
            for v in dict.fromkeys(values):
                if v != c and v >= 0:
                    yield t.start, t.end, f"{v}{suffix}", f"`{t.text}` -> `{v}{suffix}`"
        if (t.kind == "ident" and i + 2 < len(toks) and toks[i + 1].text in ("/", "%")
                and toks[i + 2].kind == "number" and toks[i + 2].text.rstrip("uU").isdigit()):
            c = int(toks[i + 2].text.rstrip("uU"))
            end = toks[i + 2].end
            here = source[t.start:end]
            if c in _FAMILY:
                for op in ("/", "%"):
                    for c2 in _FAMILY:
                        new = f"{t.text} {op} {c2}"
                        if (op, c2) != (toks[i + 1].text, c):
                            yield t.start, end, new, f"`{here}` -> `{new}`"
            yield t.start, end, f"({here} + 1)", f"off by one: `{here}` -> `{here} + 1`"
        if t.kind == "ident" and i + 1 < len(toks) and toks[i + 1].text == "(" \
                and t.text not in _CASTS and t.text not in _NOT_CALLS:
            yield from _argument_swaps(source, toks, i + 1)


def _string_edits(t: _Tok) -> Iterator[tuple[int, int, str, str]]:
    """``.trans`` toggled and registers swapped inside an inline-PTX string."""
    text = t.text
    for m in re.finditer(r"\.trans", text):
        yield t.start + m.start(), t.start + m.end(), "", "removed `.trans`"
    for m in re.finditer(r"(ld|st)matrix\.sync\.aligned\.m8n8\.x[124](?!\.trans)", text):
        yield t.start + m.end(), t.start + m.end(), ".trans", "added `.trans`"
    for m in re.finditer(r"\{(\s*%\d+\s*(?:,\s*%\d+\s*)+)\}", text):
        regs = [r.strip() for r in m.group(1).split(",")]
        for i in range(len(regs)):
            for j in range(i + 1, len(regs)):
                swapped = list(regs)
                swapped[i], swapped[j] = swapped[j], swapped[i]
                yield (t.start + m.start(), t.start + m.end(), "{" + ", ".join(swapped) + "}",
                       f"swapped `{regs[i]}` and `{regs[j]}` in `{m.group()}`")


def _argument_swaps(source: str, toks: list[_Tok], open_i: int) -> Iterator[tuple[int, int, str, str]]:
    """Two arguments of a call traded (row for column, one register for another)."""
    depth, args, start = 0, [], open_i + 1
    for j in range(open_i, len(toks)):
        t = toks[j]
        if _opens(t):
            depth += 1
        elif _closes(t):
            depth -= 1
            if depth == 0:
                if j > start:
                    args.append((start, j))
                break
        elif t.text == "," and depth == 1:
            args.append((start, j))
            start = j + 1
    if not 2 <= len(args) <= 4:
        return
    texts = [source[toks[a].start:toks[b - 1].end] for a, b in args]
    lo, hi = toks[args[0][0]].start, toks[args[-1][1] - 1].end
    for i in range(len(args)):
        for j in range(i + 1, len(args)):
            swapped = list(texts)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            pieces = []
            for k, (a, b) in enumerate(args):
                pieces.append(swapped[k])
                if k + 1 < len(args):
                    pieces.append(source[toks[b - 1].end:toks[args[k + 1][0]].start])
            yield lo, hi, "".join(pieces), f"swapped arguments `{texts[i]}` and `{texts[j]}`"


def _kernel_mutants(cell: SolutionCell) -> list[Mutant]:
    source = cell.kernel_source() or ""
    offset = cell.code.find(source)
    base_line = cell.line + cell.code.count("\n", 0, max(offset, 0))
    seen = {re.sub(r"\s+", " ", source)}
    out = []
    for a, b, new, what in _kernel_edits(source):
        text = source[:a] + new + source[b:]
        key = re.sub(r"\s+", " ", text)
        if key in seen:
            continue
        seen.add(key)
        diff, first = _diff(source, text)
        out.append(Mutant(what, text, diff, base_line + first))
    return out


def make_mutants(cell: SolutionCell) -> tuple[list[Mutant], int]:
    """The distinct mutants of a solution and how many edits did not even parse (Python;
    a kernel's compile errors are found when it is run)."""
    if kind_of(cell) == "kernel":
        return _kernel_mutants(cell), 0
    return _python_mutants(cell)


# ---------------------------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What the checks said of one mutant. ``hidden`` is ``None`` when it was not asked (the
    visible check rejected, or the mutant is stillborn); ``hidden_says`` is the first failing
    hidden run's report; ``evidence`` counts further grading seeds a both-accepted mutant
    passed."""

    operator: str
    diff: tuple[str, ...]
    line: int
    stillborn: bool = False
    visible: bool = False
    hidden: bool | None = None
    hidden_says: str = ""
    evidence: int | None = None

    @property
    def escape(self) -> bool:
        return self.visible and self.hidden is False

    @property
    def both_accept(self) -> bool:
        return self.visible and self.hidden is True


class _TimeLimit(BaseException):
    """Raised in a runaway evaluation (a BaseException, so the per-lane guards let it pass)."""


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise _TimeLimit()

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _verdict(exercise, answer, hidden: bool, seed: int | None) -> tuple[bool, str]:
    """``(passed, report)`` of one evaluation; an exception or a runaway is a rejection."""
    try:
        with _time_limit(TIME_LIMIT_S), warnings.catch_warnings(), \
                (grading_seed(seed) if seed is not None else contextlib.nullcontext()):
            warnings.simplefilter("ignore")     # the CPU model's notes on a mutant's kernel
            res = exercise.evaluate(answer, hidden)
    except _TimeLimit:
        return False, f"the check ran over {TIME_LIMIT_S:g} s"
    except Exception as exc:
        return False, f"the check raised {type(exc).__name__}: {exc}"
    return bool(res.passed), res.report(max_lines=2)


def _stillborn_kernel(exercise: KernelExercise, source: str) -> bool:
    """Whether the CPU model's compiler refuses the source (or it lost its kernel)."""
    from ..run import cpu
    from ..run.ptx.errors import CompileError, LaunchError

    try:
        cpu.program_for(source, exercise.kernel_name)
    except (CompileError, LaunchError):
        return True
    return False


def classify(cell: SolutionCell, mutant: Mutant, evidence: bool = True) -> Outcome:
    """Run one mutant through the visible check and, if it passes, the hidden cases under the
    self-study seed and every grading seed of :data:`GRADING_SEEDS`."""
    out = Outcome(mutant.operator, mutant.diff, mutant.line)
    ex = cell.exercise
    if kind_of(cell) == "kernel":
        answer = mutant.answer
        if _stillborn_kernel(ex, answer):
            out.stillborn = True
            return out
    else:
        try:
            answer = python_answer(mutant.answer, cell.answer_name)
        except Exception:
            out.stillborn = True
            return out
    out.visible, _ = _verdict(ex, answer, False, None)
    if not out.visible:
        return out
    if not cell.hidden_tested:       # no hidden test: what the visible check says stands
        out.hidden = True
    else:
        out.hidden = True
        for seed in (None, *GRADING_SEEDS):
            ok, report = _verdict(ex, answer, True, seed)
            if not ok:
                where = "self-study seed" if seed is None else f"grading seed {seed}"
                out.hidden, out.hidden_says = False, f"({where}) {report}"
                break
    if out.hidden and evidence and cell.hidden_tested:
        out.evidence = sum(_verdict(ex, answer, True, s)[0] for s in EVIDENCE_SEEDS)
    return out


@dataclass
class ExerciseResult:
    """The mutants of one solution and what became of them. ``made`` counts the distinct
    mutants; ``run`` those run (a kernel exercise's fixed sample); ``stillborn`` those of the
    run that did not compile (Python: of all made, plus edits that did not parse)."""

    notebook: str
    cell_id: str
    key: str
    kind: str
    made: int
    run: int
    stillborn: int
    killed: int
    escapes: list[Outcome] = field(default_factory=list)
    both_accept: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def sampled(self) -> bool:
        return self.run < self.made

    def as_dict(self) -> dict:
        d = asdict(self)
        d["sampled"] = self.sampled
        return d


def _family(operator: str) -> str:
    """The kind of change a mutant makes, for sampling: ``+ -> ^`` and ``* -> +`` are one kind,
    a changed constant another, a deleted barrier a third, and so on."""
    words = re.sub(r"`[^`]*`", "`", operator)
    if re.fullmatch(r"`\d+u?` -> `\d+u?`", operator):
        return "constant"
    if re.fullmatch(r"`[^`\w]+` -> `[^`\w]+`", operator):
        return "operator"
    return words


def _sample(cell: SolutionCell, mutants: list[Mutant], size: int | None) -> list[Mutant]:
    """At most ``size`` mutants, the same every run (seeded by the exercise's key), taken in
    turn from each kind of change so that every kind is run (a barrier, ``.trans``, a register
    swap as well as the many operator swaps); returned in the order they were made."""
    if size is None or len(mutants) <= size:
        return mutants
    rng = random.Random(zlib.crc32(cell.exercise.key.encode()))
    groups: dict[str, list[int]] = {}
    for i, m in enumerate(mutants):
        groups.setdefault(_family(m.operator), []).append(i)
    for members in groups.values():
        rng.shuffle(members)
    keep: set[int] = set()
    while len(keep) < size:
        for members in groups.values():
            if members and len(keep) < size:
                keep.add(members.pop())
    return [m for i, m in enumerate(mutants) if i in keep]


def run_cell(cell: SolutionCell, kernel_sample: int | None = KERNEL_SAMPLE,
             evidence: bool = True) -> ExerciseResult:
    """Make and classify every mutant of one solution."""
    t0 = time.perf_counter()
    made, stillborn = make_mutants(cell)
    kind = kind_of(cell)
    chosen = _sample(cell, made, kernel_sample) if kind == "kernel" else made
    outcomes = [classify(cell, m, evidence) for m in chosen]
    stillborn += sum(o.stillborn for o in outcomes)
    return ExerciseResult(
        cell.notebook, cell.cell_id, cell.exercise.key, kind, len(made), len(chosen), stillborn,
        killed=sum(1 for o in outcomes if not o.stillborn and not o.visible),
        escapes=[o for o in outcomes if o.escape],
        both_accept=[o for o in outcomes if o.both_accept],
        seconds=time.perf_counter() - t0)


def _run_by_id(notebook: str, cell_id: str, kernel_sample: int | None,
               evidence: bool) -> ExerciseResult:
    """Pool task: find the cell again in this process (exercises do not pickle) and run it."""
    cell = next(c for c in solution_cells() if (c.notebook, c.cell_id) == (notebook, cell_id))
    return run_cell(cell, kernel_sample, evidence)


def run_course(cells: Sequence[SolutionCell] | None = None, *, workers: int = 2,
               kernel_sample: int | None = KERNEL_SAMPLE, evidence: bool = True,
               progress: Callable[[str], None] | None = print) -> list[ExerciseResult]:
    """Every solution of the course (or ``cells``), in course order. With ``workers > 1`` the
    course's cells run in a process pool, kernel exercises first (they take longest)."""
    from_course = cells is None
    cells = list(solution_cells() if cells is None else cells)
    order = sorted(range(len(cells)), key=lambda i: kind_of(cells[i]) != "kernel")
    results: dict[int, ExerciseResult] = {}

    def done(i: int, res: ExerciseResult) -> None:
        results[i] = res
        if progress:
            progress(f"[{len(results):>2}/{len(cells)}] {res.key:<36} {res.run:>4} mutants, "
                     f"{len(res.escapes)} escapes, {len(res.both_accept)} both accept "
                     f"({res.seconds:.1f} s)")

    if workers > 1 and from_course:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_run_by_id, cells[i].notebook, cells[i].cell_id,
                                   kernel_sample, evidence): i for i in order}
            for fut in as_completed(futures):
                done(futures[fut], fut.result())
    else:
        for i in order:
            done(i, run_cell(cells[i], kernel_sample, evidence))
    return [results[i] for i in range(len(cells))]


# ---------------------------------------------------------------------------------------------
# Named mistakes: a learner's realistic wrong kernels, and the cause each check must name
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NamedMistake:
    """A wrong kernel a learner writes, made from an exercise's solution by replacing ``old``
    with ``new`` (every occurrence), and a phrase the check's report must hold: the cause it
    names (the evidence of :mod:`ptxlab.teach.diagnosis`), or its own message for a compile
    error, a hang or a race. ``alone``: the report says nothing else (no advice after a compile
    error or a hang)."""

    key: str
    kind: str
    old: str
    new: str
    says: str
    alone: bool = False

    def source(self, solution: str) -> str:
        if self.old not in solution:
            raise ValueError(f"{self.key}: {self.old!r} is not in the solution")
        return solution.replace(self.old, self.new)


_A, _B = "ldmatrix.a_operand_kernel", "ldmatrix_trans.b_operand_kernel"
_BC, _BL = "ldmatrix_trans.b_col_major_kernel", "ldmatrix_trans.block_load_kernel"
_ST, _TR, _MMA = "stmatrix.store_d_kernel", "movmatrix.transpose_kernel", "mma.tile_kernel"
_SW, _KL = "banks.swizzle_roundtrip", "capstone.k_loop_kernel"
_BW, _LF = "blackwell.m16n16_kernel", "layout_fit.x2_kernel"
_MMA_SWAPPED_OPERANDS = (
    'asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, '
    '{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\\n" : "=f"(rd[0]), "=f"(rd[1]), '
    '"=f"(rd[2]), "=f"(rd[3]) : "r"(rb[0]), "r"(rb[1]), "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), '
    '"r"(ra[3]), "f"(rc[0]), "f"(rc[1]), "f"(rc[2]), "f"(rc[3]));')

#: Every kernel exercise of the course with the mistakes learners make there, each kind
#: (register order, block order, .trans, stride in elements or doubled, rows one off, a block
#: loaded twice, operands exchanged, C missing or from the wrong rows, rows never written,
#: compile errors, hangs, races) in its own version per exercise.
NAMED_MISTAKES: tuple[NamedMistake, ...] = (
    NamedMistake(_A, "output registers listed out of order", "{%0, %1, %2, %3}",
                 "{%1, %0, %2, %3}", "right but in the wrong order: your reg 0 holds what reg 1"),
    NamedMistake(_A, "blocks addressed in reading order", "(lane % 16) * sld * 2 + (lane / 16) * 16",
                 "((lane / 16) * 8 + lane % 8) * sld * 2 + ((lane / 8) % 2) * 16",
                 "blocks in reading order"),
    NamedMistake(_A, "row stride in elements", "(lane % 16) * sld * 2", "(lane % 16) * sld",
                 "half the row stride"),
    NamedMistake(_A, "row one off", "(lane % 16) * sld * 2", "((lane + 1) % 16) * sld * 2",
                 "one tile row further down"),
    NamedMistake(_A, ".trans where none belongs", ".x4.shared", ".x4.trans.shared",
                 "has .trans where it must not"),
    NamedMistake(_A, "column offset missing", " + (lane / 16) * 16", "",
                 "your reg 2 holds what reg 0 must hold, so reg 0's values come out twice"),
    NamedMistake(_A, "column offset in elements", "(lane / 16) * 16", "(lane / 16) * 8",
                 "not 16-byte aligned"),
    NamedMistake(_A, "compile error", "const unsigned addr =",
                 "const unsigned addr = undeclared +", "does not compile", alone=True),
    NamedMistake(_A, "endless loop", "    // END SOLUTION",
                 "    while (lane < 64) { }\n    // END SOLUTION", "did not finish", alone=True),
    NamedMistake(_B, ".trans missing", ".trans", "", "the load needs .trans"),
    NamedMistake(_B, "output registers listed out of order", "{%0, %1}", "{%1, %0}",
                 "right but in the wrong order"),
    NamedMistake(_B, "row one off", "(lane % 16) * sld * 2", "((lane + 15) % 16) * sld * 2",
                 "one tile row higher up"),
    NamedMistake(_B, "row stride doubled", "sld * 2", "sld * 4", "outside shared memory"),
    NamedMistake(_BC, ".trans where none belongs", ".x2.shared", ".x2.trans.shared",
                 "uses .trans where it must not"),
    NamedMistake(_BC, "row one off", "(lane % 8) * sld * 2", "((lane + 1) % 8) * sld * 2",
                 "one tile row further down"),
    NamedMistake(_BC, "second block's offset missing", " + (lane / 8 % 2) * 16", "",
                 "so reg 0's values come out twice"),
    NamedMistake(_BC, "output registers listed out of order", "{%0, %1}", "{%1, %0}",
                 "right but in the wrong order"),
    NamedMistake(_BL, ".trans missing", ".trans", "", "the load needs .trans"),
    NamedMistake(_BL, "barrier missing", "__syncthreads();", "", "has a race"),
    NamedMistake(_BL, "copy loop not split between the warps",
                 "for (unsigned i = threadIdx.x; i < 128; i += blockDim.x)",
                 "for (unsigned i = lane; i < 128; i += 32)",
                 "the copy is not split by thread"),
    NamedMistake(_BL, "output registers stored out of order", "out[2 * lane] = b0;",
                 "out[2 * lane] = b1;\n    if (lane < 99) { out[2 * lane + 1] = b0; return; }",
                 "right but in the wrong order"),
    NamedMistake(_BL, "one register stored twice", "out[2 * lane + 1] = b1;",
                 "out[2 * lane + 1] = b0;", "reg 0's values come out twice"),
    NamedMistake(_ST, "registers of the store swapped", '"r"(d0), "r"(d1)', '"r"(d1), "r"(d0)',
                 "d1 and d0 traded places"),
    NamedMistake(_ST, "lanes 0-7 at the lower half", "(lane % 16) * sld * 2",
                 "((lane + 8) % 16) * sld * 2", "d1 and d0 traded places"),
    NamedMistake(_ST, ".trans where none belongs", "m8n8.x2.shared.b16 [%0]",
                 "m8n8.x2.trans.shared.b16 [%0]", "turned around"),
    NamedMistake(_ST, "row one off", "(lane % 16) * sld * 2", "((lane + 1) % 16) * sld * 2",
                 "one tile row further down"),
    NamedMistake(_ST, "row stride in elements", "(lane % 16) * sld * 2", "(lane % 16) * sld",
                 "not 16-byte aligned"),
    NamedMistake(_TR, "registers of the store swapped", '"r"(r0), "r"(r1), "r"(r2)',
                 '"r"(r1), "r"(r0), "r"(r2)', "r1 and r0 traded places"),
    NamedMistake(_TR, "blocks stored where they were loaded",
                 "(lane % 8 + 8 * (lane / 16)) * sld * 2 + (lane / 8 % 2) * 16",
                 "(lane % 16) * sld * 2 + (lane / 16) * 16", "still in its old place"),
    NamedMistake(_TR, "row one off inside each block", "(lane % 8 + 8 * (lane / 16))",
                 "((lane + 1) % 8 + 8 * (lane / 16))", "inside its 8x8 matrix"),
    NamedMistake(_TR, "movmatrix missing", "movmatrix.sync.aligned.m8n8.trans.b16 %0, %0;",
                 "mov.b32 %0, %0;", "not turned around"),
    NamedMistake(_MMA, "C never loaded (uninitialised accumulator)",
                 "for (int i = 0; i < 4; ++i) rc[i] = c[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];",
                 "", "C was never added"),
    NamedMistake(_MMA, "c2, c3 taken from row g", "rc[i] = c[(g + 8 * (i / 2)) * 8",
                 "rc[i] = c[g * 8", "rows 8-15 of D added rows 0-7 of C"),
    NamedMistake(_MMA, "d2, d3 stored to row g", "d[(g + 8 * (i / 2)) * 8", "d[g * 8",
                 "rows 8-15 of D were never written"),
    NamedMistake(_MMA, "A and B exchanged in the mma's operands",
                 "ptxlab::mma_m16n8k16_f32_f16_f16_f32(rd, ra, rb, rc);", _MMA_SWAPPED_OPERANDS,
                 "A's and B's registers exchanged"),
    NamedMistake(_MMA, ".trans missing on B", "ldmatrix_x2_trans", "ldmatrix_x2",
                 "without .trans"),
    NamedMistake(_MMA, "A's blocks in reading order", "&sa[(lane % 16) * lda + (lane / 16) * 8]",
                 "&sa[((lane / 16) * 8 + lane % 8) * lda + ((lane / 8) % 2) * 8]",
                 "registers 1 and 2 exchanged"),
    NamedMistake(_MMA, "A's row stride hard-coded", "(lane % 16) * lda", "(lane % 16) * 16",
                 "use lda, not 16"),
    NamedMistake(_MMA, "B's row one off", "&sb[(lane % 16) * ldb]", "&sb[((lane + 1) % 16) * ldb]",
                 "B: every lane points one tile row further down"),
    NamedMistake(_MMA, "compile error", "rd, ra, rb, rc);", "rd, ra, rb);", "does not compile",
                 alone=True),
    NamedMistake(_A, "row stride hard-coded", "(lane % 16) * sld * 2", "(lane % 16) * 16 * 2",
                 "use sld, not 16"),
    NamedMistake(_BL, "__syncwarp for a block barrier", "__syncthreads();", "__syncwarp();",
                 "the __syncwarp() at line 10 orders the threads of one warp only"),
    NamedMistake(_BL, "barrier inside a branch on the warp", "__syncthreads();",
                 "const unsigned warp = threadIdx.x / 32;\n    if (warp == 0) __syncthreads();",
                 "kernel.cu:11: if (warp == 0) __syncthreads();"),
    NamedMistake(_ST, "one register stored twice", '"r"(d0), "r"(d1)', '"r"(d1), "r"(d1)',
                 "d1 is stored twice and d0 never: d1 went where d0 belongs (tile rows 0-7, "
                 "columns 0-7). The addresses are right"),
    NamedMistake(_ST, "two lanes give one row", "(lane % 16) * sld * 2", "(lane % 8) * sld * 2",
                 "the PTX ISA leaves undefined"),
    NamedMistake(_TR, "one movmatrix missing",
                 'asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %0;\\n" : "+r"(r2));',
                 "", "r2 was stored as it was loaded, not transposed"),
    NamedMistake(_MMA, "b0 and b1 exchanged in the mma's operands",
                 "ptxlab::mma_m16n8k16_f32_f16_f16_f32(rd, ra, rb, rc);",
                 _MMA_SWAPPED_OPERANDS.replace(
                     '"r"(rb[0]), "r"(rb[1]), "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3])',
                     '"r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[1]), "r"(rb[0])'),
                 "b0 and b1 exchanged"),
    NamedMistake(_MMA, "B's lanes 8-15 at rows 0-7", "&sb[(lane % 16) * ldb]",
                 "&sb[(lane % 8) * ldb]", "B: lanes 8-15 point at the rows of matrix 0"),
    NamedMistake(_MMA, "C read column-major", "rc[i] = c[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2]",
                 "rc[i] = c[(2 * t + i % 2) * 16 + g + 8 * (i / 2)]", "C read column-major"),
    NamedMistake(_MMA, "d0, d1 halves exchanged", "d[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2]",
                 "d[(g + 8 * (i / 2)) * 8 + 2 * t + 1 - i % 2]",
                 "d0 and d1 exchanged, d2 and d3 exchanged"),
    NamedMistake(_SW, "swizzle wraps at 4 rows", "(chunk ^ (row % 8)) * 16",
                 "(chunk ^ (row % 4)) * 16", "takes 2 wavefronts instead of 1"),
    NamedMistake(_SW, "no swizzle", "(chunk ^ (row % 8)) * 16", "chunk * 16",
                 "takes 8 wavefronts instead of 1"),
    NamedMistake(_SW, "XOR into the wrong address bits",
                 "return row * 128 + (chunk ^ (row % 8)) * 16;",
                 "return (row * 128 + chunk * 16) ^ ((row % 8) << 7);",
                 "two (row, chunk) pairs get the same offset"),
    NamedMistake(_KL, ".trans missing on B", ".x4.trans.shared", ".x4.shared",
                 "load B with ldmatrix...x4.trans"),
    NamedMistake(_BW, "output registers listed out of order", "{%0, %1}", "{%1, %0}",
                 "right but in the wrong order"),
    NamedMistake(_BW, ".trans missing", ".x1.trans.shared", ".x1.shared", "requires .trans",
                 alone=True),
    NamedMistake(_LF, "column offset in elements", "((lane / 8) % 2) * 16", "((lane / 8) % 2) * 8",
                 "is not 16-byte aligned"),
    NamedMistake(_LF, "matrices stacked instead of side by side",
                 "(lane % 8) * ld * 2 + ((lane / 8) % 2) * 16", "(lane % 16) * ld * 2",
                 "outside shared memory"),
    NamedMistake(_MMA, "D stored column-major", "d[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = rd[i]",
                 "d[(2 * t + i % 2) * 16 + g + 8 * (i / 2)] = rd[i]", "column-major"),
)


def named_mistake_result(cell: SolutionCell, mistake: NamedMistake):
    """The visible check's :class:`~ptxlab.teach.checks.CheckResult` of one named mistake's
    kernel."""
    source = mistake.source(cell.kernel_source() or "")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # the CPU model's notes on the wrong kernel
        return cell.exercise.evaluate(source)


def named_causes(cells: Sequence[SolutionCell] | None = None) -> list[dict]:
    """What the checks say of every named mistake: its exercise, kind, the cause the report
    gives first (its first advice line, else its message) and whether the expected phrase is
    in the report."""
    by_key = {c.exercise.key: c for c in (solution_cells() if cells is None else cells)}
    out = []
    for m in NAMED_MISTAKES:
        res = named_mistake_result(by_key[m.key], m)
        report = res.report(max_lines=2)
        # a kernel that ran: its cause; one that did not: what stopped it
        said = res.advice[0] if res.advice and res.status == "checked" else res.message
        out.append({"key": m.key, "kind": m.kind, "says": m.says, "cause": said,
                    "named": (not res.passed) and m.says in report})
    return out
