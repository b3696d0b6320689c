"""Small correctness cases of the capstone kernels, runnable on either backend.

The same ``kernels/capstone/*.cu`` files as the benchmark, in configurations a CPU interpreter
runs in seconds (one or a few 64x64 GEMM tiles of 128 threads; 32x32 transpose tiles), with
random inputs and a poisoned output. :func:`reference_output` gives what each case must produce.
"""
from __future__ import annotations

import numpy as np

from ..run.backends import KernelCase
from .kernels import (GEMM_BEST, GEMM_BY_SIZE, GEMM_CANDIDATES, GEMM_SMALL, GEMM_SWEEP,
                      GEMM_TOL_F16, GEMM_TOL_F32, TRANSPOSE_SMALL, TRANSPOSE_SWEEP, GemmConfig,
                      TransposeConfig)

#: Bits written into every output element before a launch; a kernel that skips one is caught.
POISON_F16 = 0x7E00        # fp16 NaN
POISON_F32 = 0x7FC00000    # fp32 NaN


def _fp16_bits(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float16).view(np.uint16)


def gemm_case(rng: np.random.Generator, cfg: GemmConfig, m: int, n: int, k: int,
              sms: int | None = None) -> KernelCase:
    """``cfg`` at ``m x n x k``; a persistent ``cfg`` gets ``sms`` blocks (or one per tile)."""
    cfg.check_shape(m, n, k)
    a = _fp16_bits(rng, (m, k))
    b = _fp16_bits(rng, (n, k) if cfg.b_col else (k, n))
    c = (np.full((m, n), POISON_F32, dtype=np.uint32) if cfg.out_f32
         else np.full((m, n), POISON_F16, dtype=np.uint16))
    grid = cfg.grid(m, n, sms)
    scratch = [np.zeros(count, dtype=dtype) for count, dtype in cfg.scratch(m, n)]
    return KernelCase(name=f"capstone GEMM {m}x{n}x{k} {cfg.label} ({cfg.variant}) "
                           f"{grid[0]} blocks",
                      source=cfg.source(), kernel=cfg.kernel_name, grid=grid,
                      block=(cfg.threads,),
                      args=[a, b, c, np.int32(m), np.int32(n), np.int32(k), *scratch],
                      shared_mem=cfg.smem_bytes, compare=(2,))


def transpose_case(rng: np.random.Generator, cfg: TransposeConfig, rows: int,
                   cols: int) -> KernelCase:
    cfg.check_shape(rows, cols)
    src = rng.integers(0, 1 << 16, (rows, cols), dtype=np.uint16)
    dst = np.full((cols, rows), 0xFFFF, dtype=np.uint16)
    return KernelCase(name=f"capstone transpose {rows}x{cols} {cfg.label}", source=cfg.source(),
                      kernel=cfg.kernel_name, grid=cfg.grid(rows, cols), block=(cfg.threads,),
                      args=[src, dst, np.int32(rows), np.int32(cols)],
                      shared_mem=cfg.smem_bytes, compare=(1,))


def kernel_cases(rng: np.random.Generator, small: bool = True) -> list[KernelCase]:
    """One case per capstone kernel variant (GEMM: B row/column-major x f16/f32 out;
    transpose: ldmatrix.trans and movmatrix). ``small``: one GEMM tile and two k-tiles;
    otherwise a 2x2 grid of tiles and four k-tiles."""
    m = n = 64 if small else 128
    k = 64 if small else 128
    cases = []
    for b_col in (False, True):
        for out_f32 in (False, True):
            cfg = GemmConfig(**{**GEMM_SMALL.as_dict(), "b_col": b_col, "out_f32": out_f32})
            cases.append(gemm_case(rng, cfg, m, n, k))
    rows, cols = (64, 32) if small else (96, 64)
    for movmatrix in (False, True):
        cfg = TransposeConfig(**{**TRANSPOSE_SMALL.as_dict(), "movmatrix": movmatrix})
        cases.append(transpose_case(rng, cfg, rows, cols))
    return cases


def candidate_configs() -> list[GemmConfig]:
    """Every GEMM configuration the benchmark and the sweeps can run, each once:
    :data:`GEMM_CANDIDATES`, every size's :data:`GEMM_SWEEP`, the B column-major and
    f32-output forms of ``GEMM_BEST`` and of the first candidate (the tile the sweep is judged
    against), and every configuration of :data:`GEMM_BY_SIZE` with its f32-output form (the
    benchmark reports it)."""
    bases = [GEMM_BEST] + ([GEMM_CANDIDATES[0]] if GEMM_CANDIDATES[0] != GEMM_BEST else [])
    configs = list(GEMM_CANDIDATES) + [c for size in sorted(GEMM_SWEEP) for c in GEMM_SWEEP[size]]
    configs += [c.replace(**v) for c in bases for v in ({"b_col": True}, {"out_f32": True})]
    configs += [c.replace(out_f32=f) for size in sorted(GEMM_BY_SIZE)
                for c in GEMM_BY_SIZE[size].values() for f in (False, True)]
    return list(dict.fromkeys(configs))


def candidate_cases(rng: np.random.Generator) -> list[KernelCase]:
    """:func:`candidate_configs` at their own tile sizes on the smallest problem: one tile of
    one k-tile, or, persistent, one block that computes two such tiles (its ring runs from the
    first tile into the second). The ring's wrap-around, k-tile boundaries and every option on
    bigger grids are in :func:`feature_cases`, at the small tile."""
    return [gemm_case(rng, cfg, (2 if cfg.persistent else 1) * cfg.bm, cfg.bn,
                      cfg.bk * cfg.split_k, sms=1 if cfg.persistent else None)
            for cfg in candidate_configs()]


def feature_cases(rng: np.random.Generator) -> list[KernelCase]:
    """The small 128-thread GEMM with each kernel option on (plain loop, split copies,
    persistent blocks, staged rows, overlapped stores, mma order), over 2x2 tiles and 3 k-tiles (the
    2-stage ring wraps), with fewer blocks than tiles where persistent."""
    opts = [{"mainloop": 0}, {"split_copies": True}, {"persistent": True},
            {"persistent": True, "epi_rows": 16}, {"persistent": True, "epi_overlap": True},
            {"persistent": True, "epi_overlap": True, "split_copies": True, "b_col": True},
            {"persistent": True, "out_f32": True, "mainloop": 0, "b_col": True},
            {"persistent": True, "mma_order": 1, "split_copies": True}]
    out = [gemm_case(rng, GEMM_SMALL.replace(**o), 128, 128, 96, sms=3) for o in opts]
    # split-K: 2 or 3 slices of 2 k-tiles per tile of C (the 2-stage ring wraps in each)
    out += [gemm_case(rng, GEMM_SMALL.replace(**o), 128, 128, 64 * o["split_k"])
            for o in ({"split_k": 2}, {"split_k": 3, "b_col": True, "split_copies": True},
                      {"split_k": 2, "out_f32": True, "mma_order": 1})]
    return out


def transpose_sweep_cases(rng: np.random.Generator) -> list[KernelCase]:
    """Every tile of :data:`TRANSPOSE_SWEEP` on a matrix of 2 x 2 of its tiles."""
    return [transpose_case(rng, cfg, 2 * cfg.tr, 2 * cfg.tc) for cfg in TRANSPOSE_SWEEP]


def reference_output(case: KernelCase) -> np.ndarray:
    """What the compared output of ``case`` must hold: ``A @ B`` in float64 (then compared
    with a tolerance, see :func:`check_output`) or the exact transpose."""
    if case.kernel == TransposeConfig.kernel_name:
        return case.args[0].T.copy()
    a = case.args[0].view(np.float16).astype(np.float64)
    b = case.args[1].view(np.float16).astype(np.float64)
    if "B col-major" in case.name:
        b = b.T
    return a @ b


def check_output(case: KernelCase, got: np.ndarray) -> str | None:
    """``None`` if ``got`` is right for ``case``, else a message naming the first bad element."""
    ref = reference_output(case)
    if case.kernel == TransposeConfig.kernel_name:
        bad = np.argwhere(got != ref)
        if len(bad):
            r, c = bad[0]
            return (f"{case.name}: {len(bad)} wrong elements; out[{r},{c}] expected "
                    f"0x{int(ref[r, c]):04x}, got 0x{int(got[r, c]):04x}")
        return None
    vals = (got.view(np.float32) if got.dtype == np.uint32 else got.view(np.float16))
    vals = vals.astype(np.float64)
    if not np.isfinite(vals).all():
        r, c = np.argwhere(~np.isfinite(vals))[0]
        return f"{case.name}: C[{r},{c}] is {vals[r, c]} (never written, or overflow)"
    tol = GEMM_TOL_F32 if got.dtype == np.uint32 else GEMM_TOL_F16
    err = np.linalg.norm(vals - ref) / np.linalg.norm(ref)
    if err > tol:
        r, c = np.unravel_index(np.argmax(np.abs(vals - ref)), ref.shape)
        return (f"{case.name}: relative error {err:.2e} > {tol}; worst C[{r},{c}] expected "
                f"{ref[r, c]:.4f}, got {vals[r, c]:.4f}")
    return None
