"""The hints lead up to a solution without giving it: ``reveal()`` is the only way to see it,
and it marks the exercise as revealed. The last hint may work one lane through; no hint gives
any part of the answer's formula, however it is spaced, bracketed or ordered."""
from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize
from pathlib import Path

import pytest

from ptxlab.teach import progress_report, reveal

COURSE = Path(__file__).resolve().parents[2] / "course"
EXERCISES = [(notebook, attribute, ex)
             for notebook, found in progress_report._exercises_by_notebook().items()
             for attribute, ex in found if ex.hints]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


class _Canonical(ast.NodeTransformer):
    """One spelling per expression: ``/`` as ``//`` (C's integer division), the operands of
    ``+``, ``*``, ``^``, ``|``, ``&`` in a fixed order."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Div):
            node.op = ast.FloorDiv()
        if isinstance(node.op, (ast.Add, ast.Mult, ast.BitXor, ast.BitOr, ast.BitAnd)):
            a, b = sorted((node.left, node.right), key=ast.dump)
            node.left, node.right = a, b
        return node


def _canonical(text: str) -> str | None:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError):
        return None
    return ast.dump(_Canonical().visit(tree).body)


def _components(solution: str) -> list[str]:
    """Every expression the solution's function returns, a tuple taken apart, and each name
    it returns replaced by what was assigned to it: the parts of the answer."""
    try:
        tree = ast.parse(textwrap.dedent(solution))
    except SyntaxError:
        return []
    assigned = {t.id: node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            parts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for part in parts:
                seen = 0
                while isinstance(part, ast.Name) and part.id in assigned and seen < 4:
                    part, seen = assigned[part.id], seen + 1
                if isinstance(part, (ast.BinOp, ast.Call)):       # a formula, not a name
                    out.append(ast.unparse(part))
    return out


def _hint_expressions(hint: str, longest: int) -> set[str]:
    """Every run of up to ``longest`` tokens of ``hint`` that parses as an expression, in its
    canonical form (``/`` read as ``//``, as in a CUDA hint)."""
    try:
        toks = [t.string for t in tokenize.generate_tokens(io.StringIO(hint).readline)
                if t.type in (tokenize.NAME, tokenize.NUMBER, tokenize.OP)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        toks = re.findall(r"\w+|//|<<|>>|\S", hint)
    found = set()
    for i in range(len(toks)):
        for j in range(i + 3, min(len(toks), i + longest) + 1):
            c = _canonical(" ".join(toks[i:j]))
            if c is not None:
                found.add(c)
    return found


def _token_count(expr: str) -> int:
    return len(list(tokenize.generate_tokens(io.StringIO(expr).readline)))


@pytest.mark.parametrize("notebook,attribute,ex", EXERCISES,
                         ids=[ex.key for _, _, ex in EXERCISES])
def test_no_hint_is_the_solution(notebook, attribute, ex):
    solution = reveal.solution_text(attribute, notebook, COURSE)
    assert solution, f"{ex.key}: no solution cell found in the course's source"
    parts = _components(solution)
    if parts:          # a function: no part of its formula is in any hint
        longest = max(_token_count(p) for p in parts) + 6
        for hint in ex.hints:
            said = _hint_expressions(hint, longest)
            given = [p for p in parts if _canonical(p) in said]
            assert not given, f"{ex.key}: a hint gives {given}: {hint!r}"
    else:              # a kernel (or a choice): most of its statements are the answer
        hints = _squash(" ".join(ex.hints))
        lines = [_squash(line) for line in solution.splitlines()
                 if len(_squash(line)) > 12 and not line.strip().startswith(("//", "#"))]
        given = [line for line in lines if line in hints]
        assert len(given) <= max(1, len(lines) // 3), \
            f"{ex.key}: the hints give {len(given)} of the solution's {len(lines)} lines"


def test_the_check_sees_a_formula_however_it_is_written():
    # the audit's example: a_fragment's formula given as two assignments in a hint
    parts = _components("def f(lane, reg, half):\n    row = lane // 4 + 8 * (reg % 2)\n"
                        "    return row, 2 * (lane % 4) + half + 8 * (reg // 2)\n")
    hint = "row = (reg % 2) * 8 + lane / 4, col = 2*(lane%4) + half + 8*(reg//2)"
    said = _hint_expressions(hint, 30)
    assert all(_canonical(p) in said for p in parts), parts
    worked = "lane 5, reg 3, half 1: row 1 + 8 * 1 = 9, col 2 * 1 + 1 + 8 * 1 = 11"
    assert not any(_canonical(p) in _hint_expressions(worked, 30) for p in parts)
