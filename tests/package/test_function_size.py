"""No function in ptxlab is longer than a reader can hold in view: at most 80 lines each
(decorators not counted; a nested function counts on its own and within its parent)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "ptxlab"
MAX_LINES = 80


def _long_functions(root: Path = ROOT, limit: int = MAX_LINES) -> list[str]:
    """``file:line name length`` for every function under ``root`` longer than ``limit``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} "
                                 f"{length}")
    return found


def test_no_function_is_longer_than_80_lines():
    long = _long_functions()
    assert not long, (f"{len(long)} function(s) longer than {MAX_LINES} lines; split them:\n"
                      + "\n".join(long))


def test_the_check_sees_a_long_function(tmp_path):
    pkg = tmp_path / "ptxlab"
    pkg.mkdir()
    (pkg / "m.py").write_text("def f():\n" + "    x = 1\n" * 90 + "\n\ndef g():\n    pass\n")
    assert _long_functions(pkg) == ["ptxlab/m.py:1 f 91"]
