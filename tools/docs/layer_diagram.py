"""Draw the layers of ``ptxlab`` from its imports: ``docs/layers.dot`` and ``docs/layers.svg``.

The graph is import-linter's own (``import-linter drawgraph ptxlab``): one box per subpackage
with its number of modules, one arrow per dependency labelled with the number of imports. The
SVG is rendered by Graphviz's ``dot`` and carries the hash of the DOT text it was drawn from.

    python tools/docs/layer_diagram.py           # regenerate both files
    python tools/docs/layer_diagram.py --check   # exit 1 if either is stale (the test suite runs this)
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOT_FILE = ROOT / "docs" / "layers.dot"
SVG_FILE = ROOT / "docs" / "layers.svg"
_STAMP = "<!-- drawn from docs/layers.dot, sha256 {} -->"


def _tool(name: str) -> str | None:
    """A console script of this interpreter's environment, else one on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def draw_dot() -> str:
    """The DOT text of ptxlab's layer graph, as import-linter draws it from the code now."""
    tool = _tool("import-linter")
    if tool is None:
        raise SystemExit("import-linter is not installed: ./lab setup --dev installs it")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}
    proc = subprocess.run([tool, "drawgraph", "ptxlab", "--show-import-totals",
                           "--show-module-counts"], capture_output=True, text=True, cwd=ROOT,
                          env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"import-linter drawgraph failed:\n{proc.stderr}")
    title = 'digraph {\n    label="ptxlab: subpackages (modules) and imports between them"\n'
    return proc.stdout.replace("digraph {\n", title, 1).rstrip("\n") + "\n"


def _digest(dot: str) -> str:
    return hashlib.sha256(dot.encode()).hexdigest()


def render_svg(dot: str) -> str:
    """``dot`` rendered by Graphviz, stamped with the hash of its source."""
    tool = shutil.which("dot")
    if tool is None:
        raise SystemExit("Graphviz's 'dot' is not installed (apt-get install graphviz)")
    svg = subprocess.run([tool, "-Tsvg"], input=dot, capture_output=True, text=True,
                         check=True).stdout
    head, sep, body = svg.partition("<svg")
    return head + _STAMP.format(_digest(dot)) + "\n" + sep + body


def stale() -> list[str]:
    """What is out of date in docs/, in words (empty when both files match the code)."""
    dot = draw_dot()
    problems = []
    if not DOT_FILE.exists() or DOT_FILE.read_text() != dot:
        problems.append(f"{DOT_FILE.relative_to(ROOT)} differs from the imports of the code")
    if not SVG_FILE.exists() or _STAMP.format(_digest(dot)) not in SVG_FILE.read_text():
        problems.append(f"{SVG_FILE.relative_to(ROOT)} was not drawn from the current graph")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale()
        for p in problems:
            print(f"{p}: run python tools/docs/layer_diagram.py", file=sys.stderr)
        return 1 if problems else 0
    dot = draw_dot()
    DOT_FILE.write_text(dot)
    SVG_FILE.write_text(render_svg(dot))
    print(f"wrote {DOT_FILE.relative_to(ROOT)} and {SVG_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
