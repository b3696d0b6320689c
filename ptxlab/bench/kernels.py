"""The capstone kernels as configurations: source text, launch geometry and shape checks.

Each configuration turns into a short CUDA source (``#define`` lines, then ``#include`` of the
kernel under ``kernels/capstone/``), so the GPU benchmark (CuPy RawModule) and the CPU
interpreter compile exactly the same file; only the tile parameters differ.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

#: Above this, a launch must raise the kernel's dynamic shared-memory limit first.
DEFAULT_SMEM_LIMIT = 48 * 1024


def _source(defines: dict[str, int], include: str) -> str:
    lines = [f"#define {k} {int(v)}" for k, v in defines.items()]
    return "\n".join(lines + [f'#include "{include}"', ""])


@dataclass(frozen=True)
class GemmConfig:
    """Tile configuration of ``kernels/capstone/gemm.cu`` (kernel ``gemm_f16``)."""

    bm: int = 128
    bn: int = 256
    bk: int = 64
    warps_m: int = 2
    warps_n: int = 4
    stages: int = 3
    group_m: int = 8
    min_blocks: int = 1
    frag_pipe: bool = False   # double-buffer ldmatrix fragments across k-steps
    b_col: bool = False       # B stored column-major (N x K) instead of row-major (K x N)
    out_f32: bool = False     # C in fp32 instead of fp16

    kernel_name = "gemm_f16"

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: the cp.async ring, or the epilogue staging if larger."""
        ring = self.stages * (self.bm * self.bk + self.bk * self.bn) * 2
        wtm, wtn = self.bm // self.warps_m, self.bn // self.warps_n
        warps = self.warps_m * self.warps_n
        epilogue = warps * (16 * wtn * 4 if self.out_f32 else wtm * wtn * 2)
        return max(ring, epilogue)

    @property
    def label(self) -> str:
        return (f"{self.bm}x{self.bn}x{self.bk} w{self.warps_m}x{self.warps_n} s{self.stages}"
                f"{' g' + str(self.group_m) if self.group_m != 8 else ''}"
                f"{' mb' + str(self.min_blocks) if self.min_blocks != 1 else ''}"
                f"{' fp' if self.frag_pipe else ''}")

    @property
    def variant(self) -> str:
        """Operand layout and output type, e.g. ``B row-major, f16 out``."""
        return (f"B {'col' if self.b_col else 'row'}-major, "
                f"{'f32' if self.out_f32 else 'f16'} out")

    def defines(self) -> dict[str, int]:
        return {"GEMM_BM": self.bm, "GEMM_BN": self.bn, "GEMM_BK": self.bk,
                "GEMM_WARPS_M": self.warps_m, "GEMM_WARPS_N": self.warps_n,
                "GEMM_STAGES": self.stages, "GEMM_GROUP_M": self.group_m,
                "GEMM_MIN_BLOCKS": self.min_blocks, "GEMM_FRAG_PIPE": int(self.frag_pipe),
                "GEMM_B_COL": int(self.b_col),
                "GEMM_OUT_F32": int(self.out_f32)}

    def source(self) -> str:
        return _source(self.defines(), "capstone/gemm.cu")

    def check_shape(self, m: int, n: int, k: int) -> None:
        bad = [f"{name}={v} is not a multiple of {t}" for name, v, t in
               (("M", m, self.bm), ("N", n, self.bn), ("K", k, self.bk)) if v % t or v <= 0]
        if bad:
            raise ValueError(f"GEMM tile {self.label}: " + "; ".join(bad))

    def grid(self, m: int, n: int) -> tuple[int]:
        return ((m // self.bm) * (n // self.bn),)

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: The configuration the benchmark reports (chosen by measurement, notes/capstone_tuning.md).
GEMM_BEST = GemmConfig()
#: One 64x64 tile, 128 threads: the same kernel at a size the CPU interpreter runs in seconds.
GEMM_SMALL = GemmConfig(bm=64, bn=64, bk=32, warps_m=2, warps_n=2, stages=2)


@dataclass(frozen=True)
class TransposeConfig:
    """Tile configuration of ``kernels/capstone/transpose.cu`` (kernel ``transpose_b16``)."""

    tr: int = 64
    tc: int = 64
    threads: int = 256
    movmatrix: bool = False   # ldmatrix + movmatrix instead of ldmatrix .trans
    min_blocks: int = 1

    kernel_name = "transpose_b16"

    @property
    def smem_bytes(self) -> int:
        return 2 * self.tr * self.tc * 2     # input tile + output tile

    @property
    def label(self) -> str:
        return (f"{self.tr}x{self.tc} t{self.threads}"
                f"{' movmatrix' if self.movmatrix else ' ldmatrix.trans'}")

    def defines(self) -> dict[str, int]:
        return {"TRANSPOSE_TR": self.tr, "TRANSPOSE_TC": self.tc,
                "TRANSPOSE_THREADS": self.threads, "TRANSPOSE_MOVMATRIX": int(self.movmatrix),
                "TRANSPOSE_MIN_BLOCKS": self.min_blocks}

    def source(self) -> str:
        return _source(self.defines(), "capstone/transpose.cu")

    def check_shape(self, rows: int, cols: int) -> None:
        if rows % self.tr or cols % self.tc or rows <= 0 or cols <= 0:
            raise ValueError(f"transpose tile {self.label}: a {rows}x{cols} matrix is not made "
                             f"of whole {self.tr}x{self.tc} tiles")

    def grid(self, rows: int, cols: int) -> tuple[int]:
        return ((rows // self.tr) * (cols // self.tc),)

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


TRANSPOSE_BEST = TransposeConfig()
TRANSPOSE_SMALL = TransposeConfig(tr=32, tc=32, threads=128)


def mma_peak_source(chains: int) -> str:
    return _source({"MMA_PEAK_CHAINS": chains}, "capstone/mma_peak.cu")
