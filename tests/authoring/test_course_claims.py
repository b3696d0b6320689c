"""The course's statements of fact stay true: no claim the PTX ISA, ptxas or the committed H100
reports contradict comes back, and every H100 figure the capstone text quotes is the report's."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ptxlab.model import banks
from ptxlab.teach.exercises import banks as bank_exercises
from ptxlab.teach.exercises import basics

ROOT = Path(__file__).resolve().parents[2]
PROSE = sorted((ROOT / "course" / "text").glob("*.py")) + sorted((ROOT / "docs").glob("*.md")) \
    + [ROOT / "README.md"] + sorted((ROOT / "ptxlab").glob("[mt]*/**/*.py"))
CAPSTONE_REPORT = ROOT / "reports" / "capstone" / "report.json"

#: Claims found false, each with why: (pattern, reason).
FALSE_CLAIMS = [
    (r"not even valid CUDA", "nvcc compiles <<<132>>>: the block size defaults to 1"),
    (r"since Turing", "movmatrix needs PTX ISA 7.8 (CUDA 11.8); Turing is its oldest target"),
    (r"f32 D does not fit", "the capstone stores f32 D with stmatrix.b16 as pairs of halves"),
    (r"93-95% of copy", "the report has 0.93-0.96 from 4096^2 up and 0.15 at 2048^2"),
    (r"\b662(\.\d)? TFLOP", "the committed report's mma.sync ceiling is 657.1 TFLOP/s"),
    (r"no registers for the operands", "wgmma's A operand may come from registers"),
    (r"which (one|of them) wins is\s+(\"\s*\"\s*)?undefined",
     "the PTX ISA says nothing about it; say what is known"),
    (r"on\s+`?sm_75`? and older|sm_75 and older need",
     "the rule is about .target sm_75, not the GPU"),
    (r"Every GEMM (of the report|ran) at the board's power limit",
     "board power was recorded at 8192^3 only"),
    (r"rows r and \"?\s*\"?r \+ chunks start in the same banks",
     "rows r and r + 8 // chunks start in the same banks"),
]


def _text(path: Path) -> str:
    # Python string literals split over lines join up: drop the quote-newline-quote seams.
    return re.sub(r'"\s*\n\s*"', "", path.read_text())


@pytest.mark.parametrize("pattern,why", FALSE_CLAIMS, ids=[p for p, _ in FALSE_CLAIMS])
def test_false_claim_is_gone(pattern: str, why: str) -> None:
    hits = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for p in PROSE
            for m in re.finditer(pattern, re.sub(r"\n#\s*", " ", _text(p)))]
    assert not hits, f"{why}; still said in: {hits}"


def test_capstone_figures_are_the_reports() -> None:
    report = json.loads(CAPSTONE_REPORT.read_text())
    text = re.sub(r"\n#\s*", " ", (ROOT / "course" / "text" / "08_capstone.py").read_text())
    ceiling = round(report["mma_peak"]["tflops"])
    for m in re.finditer(r"(\d{3}) TFLOP/s ceiling|ceiling \((\d{3}) TFLOP/s", text):
        assert int(m.group(1) or m.group(2)) == ceiling
    copy = {c["bytes"]: c["tbps"] for c in report["copy"]}
    ratio = {t["rows"]: t["tbps"] / copy[t["rows"] * t["cols"] * 2] for t in report["transpose"]}
    big = [r for n, r in ratio.items() if n >= 4096]
    quoted = re.search(r"transpose runs at (\d+)-(\d+)% of copy bandwidth from (\d+)² up", text)
    assert quoted, "the capstone text quotes the transpose's share of copy with its sizes"
    lo, hi, size = map(int, quoted.groups())
    assert (lo, hi) == (round(100 * min(big)), round(100 * max(big))) and size == 4096
    small = re.search(r"at (\d+)², \d+ MiB of data, (\d+)%", text)
    assert small and round(100 * ratio[int(small.group(1))]) == int(small.group(2))
    # Ours over CUTLASS's mma.sync GEMM (f16 out, both B layouts): the range quoted from 2048^3
    # up, and the one at 1024^3.
    best: dict = {}
    for r in report["cutlass"]:
        key = (r["m"], r["variant"])
        if r.get("correct") and r["tflops"] > best.get(key, 0):
            best[key] = r["tflops"]
    vs = {(g["m"], g["variant"]): g["tflops"] / best[(g["m"], g["variant"])]
          for g in report["gemm"] if (g["m"], g["variant"]) in best}
    level = re.search(r"GEMM \(the best of its sweep\) from (\d+)³ up \((\d\.\d\d)-(\d\.\d\d)",
                      text)
    assert level, "the capstone text quotes ours over CUTLASS from some size up"
    above = [v for (m, _), v in vs.items() if m >= int(level.group(1))]
    assert (level.group(2), level.group(3)) == (f"{min(above):.2f}", f"{max(above):.2f}")
    # The course's own answer as a whole GEMM (exercise 3's k-loop), from some size up.
    learner = re.search(r"landed on the H100: (\d+)-(\d+) TFLOP/s from (\d+)³ up, "
                        r"(\d\.\d\d)-(\d\.\d\d) of the capstone GEMM", text)
    assert learner, "the capstone text quotes where the course's own answer landed"
    rows = [r for r in report["learner"] if r["m"] >= int(learner.group(3))]
    ours = {g["m"]: g["tflops"] for g in report["gemm"] if g["variant"] == "B row-major, f16 out"}
    rates = [r["tflops"] for r in rows]
    shares = [r["tflops"] / ours[r["m"]] for r in rows]
    assert (int(learner.group(1)), int(learner.group(2))) == (round(min(rates)),
                                                              round(max(rates)))
    assert (learner.group(4), learner.group(5)) == (f"{min(shares):.2f}", f"{max(shares):.2f}")
    small_gemm = re.search(r"(\d\.\d\d)-(\d\.\d\d)x it at (\d+)³", text)
    assert small_gemm
    at = [v for (m, _), v in vs.items() if m == int(small_gemm.group(3))]
    assert (small_gemm.group(1), small_gemm.group(2)) == (f"{min(at):.2f}", f"{max(at):.2f}")


@pytest.mark.parametrize("chunks", [2, 4])
def test_swizzle_mistake_names_the_rows_the_bank_model_finds(chunks: int) -> None:
    """The advice for `chunk ^ (row % chunks)` names the rows the bank model says collide."""
    fn, advice = bank_exercises.swizzle.mistakes[1]
    for chunk in range(chunks):
        addrs = np.array([(r * chunks + fn(r, chunk, chunks)) * 16 for r in range(8)])
        first_bank = banks.bank_of(addrs)
        colliding = {(a, b) for a in range(8) for b in range(a + 1, 8)
                     if first_bank[a] == first_bank[b]}
        assert colliding == {(r, r + 4) for r in range(4)}
    assert "rows r and r + 4" in advice and "r + 8 // chunks start in the same banks" in advice


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_one_argument_launch_defaults_the_block_size_to_one(tmp_path: Path) -> None:
    """What notebook 1's exercise 4 says nvcc makes of <<<132>>>: block size 1."""
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(int* p) { p[0] = 1; }\n"
                   "void launch(int* p) { k<<<132>>>(p); }\n")
    out = subprocess.run(["nvcc", "-cuda", str(src), "-o", str(tmp_path / "k.ii")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "k.ii").read_text(errors="replace")
    assert "__cudaPushCallConfiguration(132))" in text
    assert re.search(r"__cudaPushCallConfiguration\(dim3 gridDim, dim3 blockDim = 1\b", text)
    assert "block size defaulting to 1" in basics.launch_132_bug.explanations["c"]
