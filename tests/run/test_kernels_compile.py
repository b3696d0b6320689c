"""Every CUDA source under kernels/ compiles for sm_90 and emits the PTX instructions it claims.

A ``.cu`` file declares what it must emit with lines ``// expect-ptx: <instruction>``; the
reference kernels must declare at least one. nvcc (front end to PTX) and ptxas (PTX to cubin)
are run for every file, so a typo in an inline-asm string fails here, on a machine without a GPU.
The wrapper headers must also compile on their own, with nvcc and with NVRTC (the compiler
CuPy uses at run time), since learners include them one at a time.
"""
from __future__ import annotations

import ctypes
import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ptxlab.sources import kernels_dir

ROOT = Path(__file__).resolve().parents[2]

KERNELS = kernels_dir()
CU_FILES = sorted(KERNELS.rglob("*.cu"))
HEADERS = ["ldmatrix.cuh", "stmatrix.cuh", "movmatrix.cuh", "mma.cuh"]
NVCC = shutil.which("nvcc")
PTXAS = shutil.which("ptxas")
INSTRUCTION = re.compile(r"\b(?:ldmatrix|stmatrix|movmatrix|mma)\.sync\.aligned[.a-z0-9]*")

needs_nvcc = pytest.mark.skipif(NVCC is None or PTXAS is None,
                                reason="nvcc/ptxas not on PATH (install the CUDA toolkit)")


def expected_instructions(path: Path) -> list[str]:
    return re.findall(r"//\s*expect-ptx:\s*(\S+)", path.read_text())


def emitted_instructions(ptx: str) -> set[str]:
    return set(INSTRUCTION.findall(ptx))


def _extra_includes(source: Path) -> list[str]:
    """CUTLASS's headers for the peer GEMM (kernels/cutlass_peer), which ptxlab bench builds on
    the GPU machine; skipped with the reason where no copy of them is found."""
    if source.parent.name != "cutlass_peer":
        return []
    from ptxlab.bench import cutlass_peer

    include, why = cutlass_peer.find_headers()
    if include is None:
        pytest.skip(f"{_rel(source)} needs CUTLASS's headers: {why}")
    return ["--expt-relaxed-constexpr", f"-I{include}"]


def nvcc_ptx(source: Path, out_dir: Path) -> str:
    ptx = out_dir / (source.stem + ".ptx")
    proc = subprocess.run(
        [NVCC, "-std=c++17", "-arch=sm_90", "-ptx", f"-I{KERNELS}", *_extra_includes(source),
         str(source), "-o", str(ptx)],
        capture_output=True, text=True)
    assert proc.returncode == 0, f"nvcc failed on {source}:\n{proc.stderr}"
    return ptx.read_text()


def _rel(path: Path) -> str:
    return str(path.relative_to(KERNELS))


def test_reference_kernels_exist_for_every_family():
    names = {p.name for p in CU_FILES if p.parent.name == "reference"}
    assert {"ldmatrix_ref.cu", "stmatrix_ref.cu", "movmatrix_ref.cu", "mma_ref.cu"} <= names


@needs_nvcc
@pytest.mark.parametrize("source", CU_FILES, ids=_rel)
def test_cu_compiles_for_sm90_and_emits_expected_ptx(source: Path, tmp_path: Path):
    expected = expected_instructions(source)
    if source.parent.name == "reference":
        assert expected, f"{_rel(source)} declares no '// expect-ptx:' instruction"
    ptx = nvcc_ptx(source, tmp_path)
    emitted = emitted_instructions(ptx)
    missing = [e for e in expected if e not in emitted]
    assert not missing, (f"{_rel(source)}: PTX lacks {missing}; it emits {sorted(emitted)}")
    proc = subprocess.run([PTXAS, "-arch=sm_90", str(tmp_path / (source.stem + ".ptx")),
                           "-o", str(tmp_path / (source.stem + ".cubin"))],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"ptxas rejected the PTX of {_rel(source)}:\n{proc.stderr}"


@needs_nvcc
def test_reference_kernels_emit_exactly_the_declared_instructions(tmp_path: Path):
    """No reference kernel issues a form it does not declare (the '.x2 that issues .x4' trap)."""
    for source in (p for p in CU_FILES if p.parent.name == "reference"):
        emitted = emitted_instructions(nvcc_ptx(source, tmp_path))
        assert emitted == set(expected_instructions(source)), _rel(source)


@needs_nvcc
@pytest.mark.parametrize("header", HEADERS)
def test_header_compiles_on_its_own_with_nvcc(header: str, tmp_path: Path):
    tu = tmp_path / f"only_{Path(header).stem}.cu"
    tu.write_text(f'#include "{header}"\nextern "C" __global__ void unused_kernel() {{}}\n')
    nvcc_ptx(tu, tmp_path)


# ---------------------------------------------------------------------------------------------
# NVRTC: the run-time compiler CuPy uses. Found in the nvidia-cuda-nvrtc wheel or the system.
# ---------------------------------------------------------------------------------------------

def _find_nvrtc() -> ctypes.CDLL | None:
    candidates: list[str] = []
    try:
        import nvidia  # namespace package of the NVIDIA wheels
        for base in nvidia.__path__:
            candidates += sorted(glob.glob(os.path.join(base, "*", "lib", "libnvrtc.so*")))
    except ImportError:
        pass
    candidates += ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"]
    for name in candidates:
        if "builtins" in name or ".alt." in name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


NVRTC = _find_nvrtc()


def nvrtc_ptx(source: str, name: str, options: list[str]) -> str:
    lib = NVRTC
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None) == 0
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        status = lib.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        assert status == 0, f"NVRTC failed on {name}:\n{log.value.decode(errors='replace')}"
        lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
        ptx = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(prog, ptx)
        return ptx.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


needs_nvrtc = pytest.mark.skipif(NVRTC is None, reason="no libnvrtc found (pip install nvidia-cuda-nvrtc-cu12)")
NVRTC_OPTIONS = ["-std=c++17", "-arch=compute_90", f"-I{KERNELS}"]


@needs_nvrtc
@pytest.mark.parametrize("header", HEADERS)
def test_header_compiles_on_its_own_with_nvrtc(header: str):
    nvrtc_ptx(f'#include "{header}"\nextern "C" __global__ void unused_kernel() {{}}\n',
              f"only_{header}.cu", NVRTC_OPTIONS)


@needs_nvrtc
@pytest.mark.parametrize("source", [p for p in CU_FILES if p.parent.name == "reference"], ids=_rel)
def test_reference_kernel_compiles_with_nvrtc(source: Path):
    ptx = nvrtc_ptx(source.read_text(), source.name, NVRTC_OPTIONS)
    assert emitted_instructions(ptx) == set(expected_instructions(source))


def test_the_wheel_lists_every_subpackage_and_ships_the_kernels():
    """pyproject.toml names the packages one by one (kernels/ travels as ptxlab._kernels):
    a new subpackage must be added there, or an installed ptxlab would lack it."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11+")
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(ROOT).parts)
               for p in (ROOT / "ptxlab").rglob("__init__.py")}
    kernel_dirs = {".".join(("ptxlab", "_kernels") + p.relative_to(ROOT / "kernels").parts)
                   for p in [ROOT / "kernels", *(ROOT / "kernels").rglob("*")] if p.is_dir()}
    assert on_disk | kernel_dirs == set(cfg["packages"])
    assert cfg["package-dir"]["ptxlab._kernels"] == "kernels"
    shipped = set()
    for package, globs in cfg["package-data"].items():
        folder = ROOT.joinpath("kernels", *package.split(".")[2:])
        shipped |= {p for g in globs for p in folder.glob(g)}
    assert shipped == {p for p in (ROOT / "kernels").rglob("*") if p.is_file()}
