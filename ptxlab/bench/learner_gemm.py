"""A learner's k-loop as a whole GEMM, checked and placed in the capstone's table.

Exercise 3 of the capstone notebook is one warp's k-loop: four k16 steps of `ldmatrix.x4`,
`ldmatrix.x4.trans` and two `mma.sync` on swizzled shared tiles. :func:`gemm_from_k_loop` keeps
the learner's source whole (their ``tile_offset`` and helpers included) and adds a GEMM kernel
whose every warp runs *their* loop body: blocks of ``16 * warps_m`` x 64, ``4 * warps_m`` warps of
16x16, k-tiles of 64 copied with ``cp.async`` through a two-slot ring swizzled by their
``tile_offset``. :func:`check` runs it against a float64 product on whatever backend is here
(the CPU model without a GPU) and names the lane and accumulator of a wrong element;
``runs.gemm_run`` times it on a GPU like any other GEMM of the benchmark.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .kernels import GEMM_TOL_F16, check_whole_tiles

__all__ = ["LearnerGemm", "LearnerGemmError", "GemmCheck", "k_loop_body", "gemm_from_k_loop",
           "course_solution", "check", "UNANSWERED_MARKS"]

#: The exercise whose answer becomes the GEMM.
K_LOOP_EXERCISE = "capstone.k_loop_kernel"

#: Text a released notebook has where the learner has not written the answer yet.
UNANSWERED_MARKS = ("raise NotImplementedError", "YOUR CODE HERE")

_LOOP = re.compile(r"for\s*\(\s*int\s+ks\s*=\s*0\s*;\s*ks\s*<\s*4\s*;\s*(?:\+\+ks|ks\+\+)\s*\)\s*")


class LearnerGemmError(ValueError):
    """The source cannot be made into a GEMM; the message says what to change."""


def _matching_brace(text: str, start: int) -> int:
    """Index of the ``}`` closing the ``{`` at ``start``, skipping comments and literals."""
    depth, i = 0, start
    while i < len(text):
        two = text[i:i + 2]
        if two == "//":
            i = text.find("\n", i)
            if i < 0:
                break
            continue
        if two == "/*":
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
            continue
        ch = text[i]
        if ch in "\"'":
            j = i + 1
            while j < len(text) and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise LearnerGemmError("the k-loop `for (int ks = 0; ks < 4; ++ks) { ... }` has no closing "
                           "brace: does the kernel compile in exercise 3?")


def k_loop_body(source: str) -> tuple[str, int]:
    """The braced body of exercise 3's ``for (int ks = 0; ks < 4; ++ks)`` loop in ``source``,
    and the line of ``source`` it starts on."""
    found = _LOOP.search(source)
    if found is None or not source[found.end():].startswith("{"):
        raise LearnerGemmError(
            "exercise 3's loop `for (int ks = 0; ks < 4; ++ks) { ... }` is not in this source: "
            "the GEMM is built around that loop, so keep it as the exercise gives it and write "
            "your k-step inside its braces")
    end = _matching_brace(source, found.end())
    return source[found.end():end + 1], source.count("\n", 0, found.end()) + 1


_TEMPLATE = r"""
// ---- a whole GEMM around the k-loop body above (ptxlab.bench.learner_gemm) ----------------
namespace learner_gemm_ {
constexpr int WM = __WARPS_M__;            // warps down the block tile; 4 across it
constexpr int BM = 16 * WM, BN = 64, BK = 64, THREADS = 32 * 4 * WM;
constexpr int STAGE = (BM + BK) * 128;     // bytes of one slot: BM rows of A, then BK rows of B
}  // namespace learner_gemm_

// k-tile k0 of the block's A rows and B columns into the slot at `slot`, rows of 8 chunks
// swizzled by the learner's tile_offset, as in exercise 3.
__device__ __forceinline__ void learner_gemm_copy_(u32 slot, const unsigned short* A,
                                                   const unsigned short* B, int m0, int n0,
                                                   int k0, int N, int K) {
    using namespace learner_gemm_;
    for (int q = threadIdx.x; q < BM * 8; q += THREADS)
        cp_async_16(slot + tile_offset(q / 8, q % 8),
                    A + (unsigned long long)(m0 + q / 8) * K + k0 + (q % 8) * 8);
    for (int q = threadIdx.x; q < BK * 8; q += THREADS)
        cp_async_16(slot + BM * 128 + tile_offset(q / 8, q % 8),
                    B + (unsigned long long)(k0 + q / 8) * N + n0 + (q % 8) * 8);
}

extern "C" __global__ void __launch_bounds__(learner_gemm_::THREADS)
learner_gemm(const unsigned short* A, const unsigned short* B, unsigned short* C, int M, int N,
             int K) {
    using namespace learner_gemm_;
    __shared__ __align__(128) unsigned char ring_[2 * STAGE];
    const int tiles_n = N / BN;
    const int m0 = (int)(blockIdx.x / tiles_n) * BM, n0 = (int)(blockIdx.x % tiles_n) * BN;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int n_chunk = 2 * (warp % 4);    // the warp's 16 columns start at chunk n_chunk
    const u32 ring = smem_addr(ring_);
    const int KT = K / BK;
    float acc[2][4] = {};
    learner_gemm_copy_(ring, A, B, m0, n0, 0, N, K);
    cp_async_commit();
    for (int kt = 0; kt < KT; ++kt) {
        if (kt + 1 < KT)
            learner_gemm_copy_(ring + ((kt + 1) % 2) * STAGE, A, B, m0, n0, (kt + 1) * BK, N, K);
        cp_async_commit();
        cp_async_wait<1>();
        block_sync();                      // k-tile kt is in its slot for every warp
        const u32 sA = ring + (kt % 2) * STAGE + (warp / 4) * 16 * 128;  // the warp's 16 rows
        const u32 sB = ring + (kt % 2) * STAGE + BM * 128;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
__BODY__
        block_sync();                      // every warp is done with the slot refilled next
    }
    // acc[j][e] is row lane/4 + 8(e/2), column 8j + 2(lane%4) + e%2 of the warp's 16x16 block.
    const int row = m0 + (warp / 4) * 16 + lane / 4, col = n0 + 8 * n_chunk + 2 * (lane % 4);
    for (int j = 0; j < 2; ++j)
        for (int h = 0; h < 2; ++h)
            st_global_u32(C + (unsigned long long)(row + 8 * h) * N + col + 8 * j,
                          pack_f16x2(acc[j][2 * h], acc[j][2 * h + 1]));
}
"""


@dataclass(frozen=True)
class LearnerGemm:
    """A GEMM kernel ``kernel(A, B, C, M, N, K)`` (fp16 row-major A and B, fp16 C) and its
    launch: one block of ``threads`` per ``bm x bn`` tile of C, a 1-D grid. It answers the
    same questions as :class:`.kernels.GemmConfig`, so the benchmark times it the same way."""

    text: str
    kernel_name: str = "learner_gemm"
    bm: int = 64
    bn: int = 64
    bk: int = 64
    threads: int = 512
    label: str = "exercise 3's k-loop as a GEMM"
    b_col: bool = False
    out_f32: bool = False
    smem_bytes: int = 0
    variant: str = "B row-major, f16 out"

    def source(self) -> str:
        """The CUDA source of the kernel (the learner's, then the GEMM around it)."""
        return self.text

    def check_shape(self, m: int, n: int, k: int) -> None:
        check_whole_tiles(f"{self.label} ({self.bm}x{self.bn} blocks, k-tiles of {self.bk})",
                          (m, n, k), (self.bm, self.bn, self.bk))

    def grid(self, m: int, n: int, sms: int | None = None) -> tuple[int]:
        return ((m // self.bm) * (n // self.bn),)

    def scratch(self, m: int, n: int) -> list[tuple[int, str]]:
        """No arguments after ``M, N, K``."""
        return []

    def as_dict(self) -> dict:
        return {"bm": self.bm, "bn": self.bn, "bk": self.bk, "threads": self.threads,
                "kernel": self.kernel_name}

    def warp_and_lane(self, row: int, col: int) -> tuple[int, int, int, int]:
        """``(block, warp, lane, accumulator)`` that computes C[row, col] in the generated
        kernel (``accumulator`` as ``4 * j + e`` of ``acc[j][e]``)."""
        block = (row // self.bm, col // self.bn)
        r, c = row % 16, col % 16
        warp = ((row % self.bm) // 16) * 4 + (col % self.bn) // 16
        lane = 4 * (r % 8) + (c % 8) // 2
        return block, warp, lane, 4 * (c // 8) + 2 * (r // 8) + c % 2


def gemm_from_k_loop(source: str, warps_m: int = 4) -> LearnerGemm:
    """Exercise 3's kernel ``source`` (the learner's whole cell) with a GEMM built around its
    k-loop body. Raises :class:`LearnerGemmError` if the exercise is not answered yet or its
    loop is not there."""
    if any(mark in source for mark in UNANSWERED_MARKS):
        raise LearnerGemmError("exercise 3 is not answered yet: write the k-step (two ldmatrix "
                               "and two mma.sync) in its loop, run its check, then come back")
    if warps_m < 1 or warps_m > 8:
        raise ValueError("warps_m must be 1..8 (blocks of 4 * warps_m warps)")
    body, line = k_loop_body(source)
    head, rest = _TEMPLATE.replace("__WARPS_M__", str(int(warps_m))).split("__BODY__")
    # #line: a compiler message or a fault in the copy of the body names the learner's line.
    text = source + head + f"#line {line}\n" + body + "\n"
    text += f"#line {text.count(chr(10)) + 2}\n" + rest
    return LearnerGemm(text=text, bm=16 * warps_m, threads=128 * warps_m)


def course_solution() -> LearnerGemm:
    """The course's own answer to exercise 3 as a GEMM (read from the notebook's text form):
    what a learner's correct loop gives, measured by ``ptxlab bench``."""
    from ..authoring import course_cases

    for _, exercise, source in course_cases.solution_kernels():
        if exercise.key == K_LOOP_EXERCISE:
            return gemm_from_k_loop(source)
    raise LearnerGemmError(f"no solution of {K_LOOP_EXERCISE} in {course_cases.TEXT_DIR}")


@dataclass
class GemmCheck:
    """What :func:`check` found: ``problem`` is ``None`` when every element is right."""

    shape: tuple[int, int, int]
    device: str
    problem: str | None

    @property
    def ok(self) -> bool:
        return self.problem is None


def _first_wrong(gemm: LearnerGemm, got: np.ndarray, ref: np.ndarray) -> str | None:
    vals = got.view(np.float16).astype(np.float64)
    tol = GEMM_TOL_F16
    finite = np.isfinite(vals)
    if finite.all():
        err = np.linalg.norm(vals - ref) / np.linalg.norm(ref)
        if err <= tol:
            return None
        worst = np.abs(vals - ref)
        bad = np.argwhere(worst > 0.05 * (np.abs(ref) + 1))
        r, c = bad[0] if len(bad) else np.unravel_index(np.argmax(worst), ref.shape)
        summary = f"relative error {err:.2e} (more than {tol:g}), {len(bad)} elements off"
    else:
        r, c = np.argwhere(~finite)[0]
        summary = f"{int((~finite).sum())} elements never written (still NaN) or overflowed"
    if gemm.kernel_name == "learner_gemm":
        (bi, bj), warp, lane, accu = gemm.warp_and_lane(int(r), int(c))
        where = (f"; C[{r},{c}] is block tile ({bi},{bj}), warp {warp}, lane {lane}, "
                 f"acc[{accu // 4}][{accu % 4}]")
    else:
        where = f"; first at C[{r},{c}]"
    return (f"{summary}{where}: expected {ref[r, c]:.4f}, got {vals[r, c]:.4f}")


def check(gemm: LearnerGemm, backend: str = "auto", m: int | None = None,
          n: int | None = None, k: int | None = None, seed: int = 0) -> GemmCheck:
    """Run ``gemm`` once on ``backend`` (a 2x2 grid of blocks over two k-tiles by default:
    every ring slot, both block coordinates) with random fp16 inputs and a NaN-poisoned C, and
    compare with the float64 product. Compile errors and faults become the ``problem``."""
    from ..run.backends import KernelCase

    m, n, k = m or 2 * gemm.bm, n or 2 * gemm.bn, k or 2 * gemm.bk
    gemm.check_shape(m, n, k)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.full((m, n), 0x7E00, dtype=np.uint16)
    case = KernelCase(name=f"{gemm.label} {m}x{n}x{k}", source=gemm.source(),
                      kernel=gemm.kernel_name, grid=gemm.grid(m, n), block=(gemm.threads,),
                      args=[a.view(np.uint16), b.view(np.uint16), c, np.int32(m), np.int32(n),
                            np.int32(k)], shared_mem=gemm.smem_bytes, compare=(2,))
    try:
        res = case.launch(backend)
    except Exception as exc:  # a compile error or a fault is the learner's answer, reported
        return GemmCheck((m, n, k), "-", f"{type(exc).__name__}: {exc}")
    ref = a.astype(np.float64) @ b.astype(np.float64)
    return GemmCheck((m, n, k), res.device, _first_wrong(gemm, res.outputs[2], ref))
