"""The capstone kernels as configurations: source text, launch geometry and shape checks.

Each configuration turns into a short CUDA source (``#define`` lines, then ``#include`` of the
kernel under ``kernels/capstone/``), so the GPU benchmark (CuPy RawModule) and the CPU
interpreter compile exactly the same file; only the tile parameters differ.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

#: Above this, a launch must raise the kernel's dynamic shared-memory limit first.
DEFAULT_SMEM_LIMIT = 48 * 1024
#: Relative Frobenius error accepted for fp16 output (fp16 rounding of the result dominates).
GEMM_TOL_F16 = 1e-2
#: For fp32 output only the fp32 accumulation order differs from the reference.
GEMM_TOL_F32 = 1e-3


def _source(defines: dict[str, int], include: str) -> str:
    lines = [f"#define {k} {int(v)}" for k, v in defines.items()]
    return "\n".join(lines + [f'#include "{include}"', ""])


def check_whole_tiles(what: str, mnk: tuple[int, int, int], tile: tuple[int, int, int]) -> None:
    """Raise ``ValueError`` (starting with ``what``) unless M, N and K are positive multiples
    of the tile's: the GEMM kernels here have no partial tiles."""
    bad = [f"{name}={v} is not a multiple of {t}" for name, v, t in zip("MNK", mnk, tile)
           if v % t or v <= 0]
    if bad:
        raise ValueError(f"{what}: " + "; ".join(bad))


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
    mainloop: int = 2          # 2: fragments and barrier pipelined across k-steps; 0: plain loop
    split_copies: bool = False  # a k-tile's cp.async spread over the k-steps before it is needed
    persistent: bool = False  # one block per SM (x min_blocks) looping over tiles
    epi_rows: int = 0         # warp-tile rows staged at once in the f16 epilogue (0: all)
    epi_overlap: bool = False  # a tile's stores issue during the next tile's first k-tile
    mma_order: int = 0        # 0: m16 rows outer (A reused); 1: n8 columns outer, rows snake
    l2_prefetch: int = 0      # bytes L2 fetches per cp.async miss (64, 128, 256; 0: no hint)
    split_k: int = 1          # K slices per tile of C, each its own block, reduced in-kernel
    b_col: bool = False       # B stored column-major (N x K) instead of row-major (K x N)
    out_f32: bool = False     # C in fp32 instead of fp16

    kernel_name = "gemm_f16"

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def ring_bytes(self) -> int:
        """The cp.async ring: ``stages`` k-tiles of A and B."""
        return self.stages * (self.bm * self.bk + self.bk * self.bn) * 2

    @property
    def staging_bytes(self) -> int:
        """The epilogue's staging areas, one per warp."""
        wtm, wtn = self.bm // self.warps_m, self.bn // self.warps_n
        rows = 16 if self.out_f32 else (self.epi_rows or wtm)
        return self.warps_m * self.warps_n * rows * wtn * (4 if self.out_f32 else 2)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: the ring, and the staging areas inside it (one tile per
        block) or after it (persistent: the ring is filling for the next tile meanwhile)."""
        if self.persistent:
            return self.ring_bytes + self.staging_bytes
        return max(self.ring_bytes, self.staging_bytes)

    @property
    def label(self) -> str:
        extra = [f"g{self.group_m}" if self.group_m != 8 else "",
                 f"mb{self.min_blocks}" if self.min_blocks != 1 else "",
                 "plain" if self.mainloop != 2 else "", "sc" if self.split_copies else "",
                 "p" if self.persistent else "", f"e{self.epi_rows}" if self.epi_rows else "",
                 "eo" if self.epi_overlap else "", f"o{self.mma_order}" if self.mma_order else "",
                 f"L2p{self.l2_prefetch}" if self.l2_prefetch else "",
                 f"k{self.split_k}" if self.split_k != 1 else ""]
        return (f"{self.bm}x{self.bn}x{self.bk} w{self.warps_m}x{self.warps_n} s{self.stages}"
                + "".join(" " + e for e in extra if e))

    @property
    def variant(self) -> str:
        """Operand layout and output type, e.g. ``B row-major, f16 out``."""
        return (f"B {'col' if self.b_col else 'row'}-major, "
                f"{'f32' if self.out_f32 else 'f16'} out")

    def defines(self) -> dict[str, int]:
        return {"GEMM_BM": self.bm, "GEMM_BN": self.bn, "GEMM_BK": self.bk,
                "GEMM_WARPS_M": self.warps_m, "GEMM_WARPS_N": self.warps_n,
                "GEMM_STAGES": self.stages, "GEMM_GROUP_M": self.group_m,
                "GEMM_MIN_BLOCKS": self.min_blocks, "GEMM_MAINLOOP": self.mainloop,
                "GEMM_SPLIT_COPIES": int(self.split_copies), "GEMM_EPI_ROWS": self.epi_rows,
                "GEMM_PERSISTENT": int(self.persistent),
                "GEMM_EPI_OVERLAP": int(self.epi_overlap), "GEMM_MMA_ORDER": self.mma_order,
                "GEMM_L2_PREFETCH": self.l2_prefetch, "GEMM_SPLIT_K": self.split_k,
                "GEMM_B_COL": int(self.b_col),
                "GEMM_OUT_F32": int(self.out_f32)}

    def source(self) -> str:
        return _source(self.defines(), "capstone/gemm.cu")

    def check_shape(self, m: int, n: int, k: int) -> None:
        """Whole tiles; with split-K, K in whole k-tiles per slice."""
        check_whole_tiles(f"GEMM tile {self.label}", (m, n, k),
                          (self.bm, self.bn, self.bk * self.split_k))

    def tiles(self, m: int, n: int) -> int:
        return (m // self.bm) * (n // self.bn)

    def grid(self, m: int, n: int, sms: int | None = None) -> tuple[int]:
        """One block per tile (per tile and K slice with split-K); persistent: ``min_blocks``
        per SM (``sms`` of them), at most one per tile (without ``sms``, one per tile as well)."""
        tiles = self.tiles(m, n)
        if self.persistent and sms:
            return (min(tiles, sms * self.min_blocks),)
        return (tiles * self.split_k,)

    def scratch(self, m: int, n: int) -> list[tuple[int, str]]:
        """The kernel's arguments after ``M, N, K``, as (element count, numpy dtype name), all
        zero before the first launch: with split-K the fp32 workspace of the partial tiles and
        one counter per tile of C (the kernel leaves them zero); otherwise none."""
        if self.split_k == 1:
            return []
        return [(m * n * self.split_k, "float32"), (self.tiles(m, n), "int32")]

    def replace(self, **changes) -> "GemmConfig":
        return GemmConfig(**{**self.as_dict(), **changes})

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: The large-problem GEMM (chosen by measurement, measure/sweeps/capstone_tuning.md), the one the notebooks
#: show: 128x256x64, 2x4 warps of 64x64, 3 stages, each k-tile's copies spread over the k-steps,
#: tile rows taken 16 at a time, mma.sync in column order (rows snaking), 128-byte L2 prefetch.
#: The benchmark runs ``GEMM_BY_SIZE``'s configuration of each size (below).
GEMM_BEST = GemmConfig(split_copies=True, group_m=16, mma_order=1, l2_prefetch=128)
#: With B column-major the mma order in columns measured 1-2% slower; rows first there, and no
#: L2 prefetch hint (the hints measured within 1% of each other, none of them ahead).
GEMM_BEST_B_COL = GemmConfig(split_copies=True, group_m=16, b_col=True)
#: One 64x64 tile, 128 threads: the same kernel at a size the CPU interpreter runs in seconds.
GEMM_SMALL = GemmConfig(bm=64, bn=64, bk=32, warps_m=2, warps_n=2, stages=2)

#: Every configuration the tile sweep (``python -m ptxlab.bench.tune``) measures, and so every one
#: ``GEMM_BEST`` can become; CI runs each on the CPU model (tests/bench/test_capstone.py).
GEMM_CANDIDATES = (
    GemmConfig(),
    GEMM_BEST,
    GemmConfig(split_copies=True),
    GemmConfig(split_copies=True, mma_order=1),
    GemmConfig(split_copies=True, group_m=16, mma_order=1),
    GemmConfig(split_copies=True, group_m=16, l2_prefetch=128),
    GemmConfig(split_copies=True, l2_prefetch=256),
    GemmConfig(stages=4, epi_rows=16, split_copies=True, group_m=16, mma_order=1, l2_prefetch=128),
    GemmConfig(bk=128, stages=2, epi_rows=16),
    GemmConfig(bk=128, stages=2, epi_rows=16, split_copies=True),
    GemmConfig(persistent=True, split_copies=True),
    GemmConfig(persistent=True, bn=128, warps_n=2, min_blocks=2, epi_rows=16),
    # B column-major (CUTLASS's fastest there has 4 stages)
    GEMM_BEST_B_COL,
    GemmConfig(split_copies=True, b_col=True),
    GemmConfig(stages=4, split_copies=True, b_col=True),
    GemmConfig(split_copies=True, group_m=16, l2_prefetch=128, b_col=True),
    GemmConfig(split_copies=True, group_m=16, l2_prefetch=256, b_col=True),
    GemmConfig(stages=4, split_copies=True, group_m=16, l2_prefetch=256, b_col=True),
    GemmConfig(bk=128, stages=2, epi_rows=16, group_m=16, l2_prefetch=128, b_col=True),
)


def _both_layouts(*configs: GemmConfig) -> tuple[GemmConfig, ...]:
    return tuple(c.replace(b_col=b) for c in configs for b in (False, True))


#: Smaller problems leave most of the 132 SMs idle with 128x256 tiles (1024^3 is 32 of them):
#: smaller block tiles of 4 warps (two blocks an SM where registers and shared memory allow)
#: and split-K (K cut into slices, one block each, reduced in the kernel) fill them.
_SMALL_TILES = (
    GemmConfig(bm=128, bn=128, warps_n=2, stages=4, split_copies=True),
    GemmConfig(bm=128, bn=128, warps_n=2, stages=3, split_copies=True, min_blocks=2),
    GemmConfig(bm=128, bn=128, warps_n=2, stages=4, split_copies=True, split_k=2),
    GemmConfig(bm=64, bn=128, warps_n=2, stages=4, split_copies=True),
    GemmConfig(bm=128, bn=64, warps_n=2, stages=4, split_copies=True),
    GemmConfig(bm=64, bn=128, warps_n=2, stages=4, split_copies=True, min_blocks=2, split_k=2),
    GemmConfig(bm=64, bn=64, warps_n=2, stages=4, split_copies=True, min_blocks=2),
    GEMM_BEST.replace(split_k=4),
)

#: 4096^3 and 8192^3 run at the board's power limit, where every mma.sync GEMM is within a few
#: percent of the others: the committed tiles, 4 stages, 256-byte L2 prefetch (with B
#: column-major a k-tile row of B is 128 bytes, one DRAM burst; the next k-tile's comes along),
#: CUTLASS's BK 32 with 5 stages, and BK 128.
_LARGE = (
    GEMM_BEST, GEMM_BEST.replace(stages=4), GEMM_BEST.replace(l2_prefetch=256),
    GEMM_BEST.replace(bk=32, stages=5),
    GEMM_BEST_B_COL, GEMM_BEST.replace(b_col=True),
    GemmConfig(split_copies=True, group_m=16, l2_prefetch=128, b_col=True),
    GemmConfig(split_copies=True, group_m=16, l2_prefetch=256, b_col=True),
    GemmConfig(split_copies=True, group_m=16, mma_order=1, l2_prefetch=256, b_col=True),
    GemmConfig(stages=4, split_copies=True, group_m=16, l2_prefetch=256, b_col=True),
    GemmConfig(bk=32, stages=5, split_copies=True, group_m=16, b_col=True),
    GemmConfig(bk=128, stages=2, epi_rows=16, group_m=16, l2_prefetch=256, b_col=True),
    # 16 warps of 32x64 or 64x32 warp tiles (128 registers): twice the warps to hide latency,
    # at 0.375 ldmatrix per mma instead of 0.25 (the eighth sweep: 15-20% slower)
    GEMM_BEST.replace(warps_m=4, warps_n=4), GEMM_BEST.replace(warps_n=8),
    GEMM_BEST_B_COL.replace(warps_m=4, warps_n=4), GEMM_BEST_B_COL.replace(warps_n=8),
)

#: What the per-size sweep (``python -m ptxlab.bench.tune --by-size``) measures at each problem
#: size M = N = K, B row- and column-major; CI runs every one on the CPU model.
GEMM_SWEEP: dict[int, tuple[GemmConfig, ...]] = {
    1024: (GEMM_BEST, GEMM_BEST_B_COL) + _both_layouts(*_SMALL_TILES),
    2048: (GEMM_BEST_B_COL,) + _both_layouts(
        GemmConfig(split_copies=True, group_m=16, mma_order=1, l2_prefetch=128),
        GemmConfig(bm=128, bn=128, warps_n=2, stages=3, split_copies=True, min_blocks=2),
        GemmConfig(bm=128, bn=128, warps_n=2, stages=4, split_copies=True),
        GemmConfig(bm=256, bn=128, warps_m=4, warps_n=2, split_copies=True),
        GemmConfig(stages=4, split_copies=True, group_m=16, mma_order=1, l2_prefetch=128),
        GEMM_BEST.replace(bm=64, bn=128, warps_n=2, stages=4, min_blocks=2, group_m=8)) + (
        # B row-major beside CUTLASS's 128x256x64 s3 at the power limit (the second sweep): the
        # column-major entry's choices, and the L2 hint alone, not only both together
        GEMM_BEST_B_COL.replace(b_col=False),
        GemmConfig(split_copies=True, group_m=16, mma_order=1),
        GemmConfig(split_copies=True, group_m=16, l2_prefetch=128)),
    4096: _LARGE,
    8192: _LARGE,
}

#: The configuration the benchmark runs at each problem size, per B layout (``False``:
#: row-major, ``True``: column-major): the fastest correct, not noisy one of ``GEMM_SWEEP`` at
#: that size in the sweeps of ``reports/capstone/sweep_2026-11-26/`` (``tune.fastest_by_size``
#: of their tune.json, the later sweeps ``large/``, ``s3_2048/`` to ``s8_4096/`` for the sizes
#: and layouts they measured; H100). At 1024^3,
#: 64x128 tiles of 4 warps put 128 blocks on the 132 SMs (249 / 246 TFLOP/s there, CUTLASS's
#: best 168 / 164); from 2048^3 on, 128x256 tiles, with every kernel at the board's power limit
#: and ours within 1-2% of CUTLASS's either way.
GEMM_BY_SIZE: dict[int, dict[bool, GemmConfig]] = {
    1024: {False: GemmConfig(bm=64, bn=128, warps_n=2, stages=4, split_copies=True),
           True: GemmConfig(bm=64, bn=128, warps_n=2, stages=4, split_copies=True, b_col=True)},
    2048: {False: GemmConfig(split_copies=True, group_m=16, mma_order=1), True: GEMM_BEST_B_COL},
    4096: {False: GEMM_BEST,
           True: GemmConfig(bk=128, stages=2, epi_rows=16, group_m=16, l2_prefetch=256,
                            b_col=True)},
    8192: {False: GEMM_BEST,
           True: GemmConfig(split_copies=True, group_m=16, l2_prefetch=256, b_col=True)},
}


def gemm_config_for(m: int, n: int, k: int, *, b_col: bool = False,
                    out_f32: bool = False) -> GemmConfig:
    """The configuration of ``GEMM_BY_SIZE`` for an ``m x n x k`` problem: the entry of the
    largest tabled size not above ``min(m, n, k)`` (the smallest entry below that), as f32
    output if asked. Raises ``ValueError`` if that tile does not divide the problem."""
    sizes = sorted(GEMM_BY_SIZE)
    key = max([s for s in sizes if s <= min(m, n, k)], default=sizes[0])
    cfg = GEMM_BY_SIZE[key][b_col]
    if out_f32:
        cfg = cfg.replace(out_f32=True)
    cfg.check_shape(m, n, k)
    return cfg


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

#: The transpose tiles the sweep (``python -m ptxlab.bench.tune --by-size``) measures at every
#: transpose size; CI runs each on the CPU model.
TRANSPOSE_SWEEP = (
    TRANSPOSE_BEST,
    TransposeConfig(threads=128),
    TransposeConfig(tr=128, tc=64),
    TransposeConfig(tr=64, tc=128),
    TransposeConfig(tr=128, tc=128, threads=512),
    TransposeConfig(tr=32, tc=64, threads=128),
)

#: The transpose tile the benchmark runs per square size: the fastest of ``TRANSPOSE_SWEEP``
#: there in the sweep of ``reports/capstone/sweep_2026-11-26/``
#: (``tune.fastest_transpose_by_size``). Every tile was within 8% of the others at every size.
TRANSPOSE_BY_SIZE: dict[int, TransposeConfig] = {
    2048: TransposeConfig(tr=32, tc=64, threads=128),
    4096: TransposeConfig(tr=128, tc=64),
    8192: TransposeConfig(tr=128, tc=128, threads=512),
    16384: TransposeConfig(tr=128, tc=128, threads=512),
}


def transpose_config_for(rows: int, cols: int) -> TransposeConfig:
    """The tile of ``TRANSPOSE_BY_SIZE`` for a ``rows x cols`` transpose: the entry of the
    largest tabled size not above ``min(rows, cols)`` (the smallest entry below that)."""
    sizes = sorted(TRANSPOSE_BY_SIZE)
    key = max([s for s in sizes if s <= min(rows, cols)], default=sizes[0])
    cfg = TRANSPOSE_BY_SIZE[key]
    cfg.check_shape(rows, cols)
    return cfg


def mma_peak_source(chains: int, vary: bool = False) -> str:
    """The mma.sync ceiling kernel; ``vary``: operands that change from one mma to the next."""
    return _source({"MMA_PEAK_CHAINS": chains, "MMA_PEAK_VARY": int(vary)},
                   "capstone/mma_peak.cu")
