"""``%%cuda``: a notebook cell that is a whole CUDA program, run as ``ptxlab run`` runs a file.

``%load_ext ptxlab`` registers it. The first line takes the same choices as the command:
``%%cuda --cpu`` (the CPU model), ``%%cuda --gpu``, and the program's arguments after ``--``
(``%%cuda -- 64 fail``). The program's output, the lab's one line on where it ran, the
compiler's message and any fault report appear in the cell; the exit status is kept in
``ptxlab.run.programs.cell_magic.last_run`` for a notebook that wants it.
"""
from __future__ import annotations

import shlex
import sys
import tempfile
from pathlib import Path

from . import runner, toolchain

__all__ = ["cuda", "register", "last_run"]

#: The last cell's :class:`~.runner.ProgramRun` (``None`` before the first, or after a refusal).
last_run: runner.ProgramRun | None = None


def _options(line: str) -> tuple[str, list[str], str]:
    """``(backend, program args, cell file name)`` from the magic's line."""
    words = shlex.split(line)
    backend, name, args = "auto", "cell.cu", []
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--":
            args = words[i + 1:]
            break
        if w in ("--cpu", "--gpu"):
            backend = w[2:]
        elif w.startswith("--name="):
            name = Path(w.split("=", 1)[1]).name or name
        else:
            raise ValueError(f"%%cuda takes --cpu, --gpu, --name=FILE.cu and, after --, the "
                             f"program's arguments; got {w!r}")
        i += 1
    return backend, args, name


def cuda(line: str, cell: str) -> runner.ProgramRun | None:
    """Build and run the cell as a whole program; everything it prints lands in the cell."""
    global last_run
    last_run = None
    try:
        backend, args, name = _options(line)
    except ValueError as exc:
        print(f"[ptxlab] {exc}", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory(prefix="ptxlab-cell-") as folder:
        path = Path(folder) / name
        path.write_text(cell)
        try:
            last_run = runner.run_program(path, backend, args, stdout=sys.stdout,
                                          stderr=sys.stderr)
        except (toolchain.ToolchainMissing, toolchain.ProgramCompileError) as exc:
            print(f"[ptxlab] {exc}", file=sys.stderr)
            return None
    if last_run.exit_status != 0:
        print(f"[ptxlab] the program exited with status {last_run.exit_status}", file=sys.stderr)
    return None


def register(ipython) -> None:
    """Make ``%%cuda`` a cell magic of this IPython session."""
    ipython.register_magic_function(cuda, magic_kind="cell", magic_name="cuda")
