"""Which matrix-instruction forms ``ptxas`` accepts for which ``.target``/``.version``, and the
CPU model's answer for the same PTX.

A probe is one small PTX module holding one ``ldmatrix``/``stmatrix``/``movmatrix``: ptxas
assembles it (``ptxas -arch <target>``) and the CPU model decodes it (:class:`Program`, which
checks every instruction's form and gates). ``measure/gpu/ptxas_matrix_gates.py`` records ptxas's
answers in ``tests/fixtures/ptxas_matrix_gates.json``; ``tests/model/test_matrix_gates.py`` checks the
model against that table, and against ptxas itself where it is installed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import PtxSyntaxError
from .parser import parse_module
from .program import Program


@dataclass(frozen=True)
class Probe:
    """One case: the instruction (opcode and operands), the module's target and version."""

    instruction: str
    target: str
    version: str


def probe_ptx(p: Probe) -> str:
    """The PTX module of one probe: a kernel whose registers and shared buffer the instruction
    may use (``%r0..%r7`` data, ``%r10`` a 32-bit shared address)."""
    return (f".version {p.version}\n.target {p.target}\n.address_size 64\n\n"
            ".visible .entry k()\n{\n"
            "\t.reg .b32 %r<12>;\n"
            "\t.shared .align 16 .b8 buf[1024];\n"
            "\tmov.u32 %r10, buf;\n"
            "\tmov.u32 %r0, 0;\n\tmov.u32 %r1, 0;\n\tmov.u32 %r2, 0;\n\tmov.u32 %r3, 0;\n"
            f"\t{p.instruction}\n"
            "\tret;\n}\n")


def operands_for(opcode: str, regs: int) -> str:
    """``opcode`` with ``regs`` data registers and the shared address, as ptxas expects them."""
    vec = "{" + ", ".join(f"%r{i}" for i in range(regs)) + "}"
    if opcode.startswith("stmatrix"):
        return f"{opcode} [%r10], {vec};"
    if opcode.startswith("movmatrix"):
        return f"{opcode} %r1, %r0;"
    return f"{opcode} {vec}, [%r10];"


def find_ptxas() -> str | None:
    """The ``ptxas`` on PATH (or under ``$CUDA_HOME/bin``), or None."""
    exe = shutil.which("ptxas")
    if exe is None and os.environ.get("CUDA_HOME"):
        cand = Path(os.environ["CUDA_HOME"]) / "bin" / "ptxas"
        exe = str(cand) if cand.is_file() else None
    return exe


def ptxas_version(exe: str) -> str:
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    return out.strip().splitlines()[-1] if out.strip() else "?"


def ptxas_verdict(p: Probe, exe: str) -> tuple[bool, str]:
    """(accepted, ptxas's error lines) for one probe."""
    arch = p.target.split(",")[0].strip()
    with tempfile.TemporaryDirectory(prefix="ptxlab-gates-") as tmp:
        src = Path(tmp) / "probe.ptx"
        src.write_text(probe_ptx(p))
        proc = subprocess.run([exe, "-arch", arch, str(src), "-o", str(Path(tmp) / "probe.o")],
                              capture_output=True, text=True, timeout=60)
    lines = [ln.split("error   :", 1)[-1].strip() if "error" in ln else ln.strip()
             for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    return proc.returncode == 0, "; ".join(lines)


def model_verdict(p: Probe) -> tuple[bool, str]:
    """(accepted, the CPU model's message) for one probe: the PTX is parsed and decoded as a
    learner's kernel would be."""
    try:
        Program(parse_module(probe_ptx(p)), "k")
    except PtxSyntaxError as exc:
        return False, str(exc)
    return True, ""
