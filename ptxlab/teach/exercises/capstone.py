"""Exercises of the capstone notebook: the GEMM's swizzled B address, the warp tile's
accumulator index, one warp's k-loop as a kernel, and a missing barrier.

Expected values come from :mod:`ptxlab.model.layouts` (fragments), :mod:`ptxlab.model.emulator`
(what the instructions produce) and the capstone swizzle
(:func:`ptxlab.teach.exercises.banks.gemm_swizzle`, which mirrors ``kernels/capstone/gemm.cu``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .. import checks, tiles
from ...model import emulator, layouts
from ..checks import CheckResult, LaneDiff
from ..mistakes import Mistake, known_mistake
from .banks import (CHUNK_BYTES, SwizzledAddressExercise, SwizzledTask, gemm_swizzle,
                    lane_rows_chunks, swizzled_offset)
from .base import ChoiceExercise, Exercise
from .kernel_exercise import KernelExercise, launch_for_check

MMA_F32 = ("m16n8k16", "f16", "f16", "f32", "f32")


# ---------------------------------------------------------------------------------------------
# 1. The GEMM's B address: ldmatrix.x4.trans of two n8 tiles from the swizzled B tile
# ---------------------------------------------------------------------------------------------

def b_two_tiles() -> tiles.Placement:
    """Row-major B (k x n), 16 k by two n8 tiles: the four matrices of one ldmatrix.x4.trans,
    in register order: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15)."""
    one = tiles.mma_b_row_major()
    origins = one.origins + tuple((r, c + 8) for r, c in one.origins)
    return tiles.Placement("B row-major, two n8 tiles", origins, 16, 16,
                           "16 k of two n8 tiles of B stored row-major")


def _b_task(k0: int, n_chunk: int, chunks: int) -> SwizzledTask:
    return SwizzledTask(chunks, 0, k0, n_chunk, (k0, n_chunk, chunks),
                        label=f"B rows of {chunks} chunks, k0 = {k0}, n_chunk = {n_chunk}")


def _b_hidden(rng: np.random.Generator) -> list[SwizzledTask]:
    out = []
    for chunks in (32, 16):
        for _ in range(4):
            out.append(_b_task(16 * int(rng.integers(0, 4)), 2 * int(rng.integers(0, chunks // 2)),
                               chunks))
    return out


b_trans_offset = SwizzledAddressExercise(
    key="capstone.b_trans_offset",
    title="GEMM: the offset each lane gives ldmatrix.x4.trans for two n8 tiles of B",
    placement=b_two_tiles,
    arg_names=("lane", "k0", "n_chunk", "chunks"),
    visible=lambda: [_b_task(0, 0, 8), _b_task(16, 6, 8), _b_task(32, 10, 16)],
    hidden_cases=_b_hidden,
    mistakes=(
        (lambda lane, k0, n_chunk, chunks: ((k0 + lane % 8 + 8 * (lane // 16)) * chunks
                                           + ((n_chunk + lane // 8 % 2)
                                              ^ ((k0 + lane % 8 + 8 * (lane // 16)) % 8))) * 16,
         "that is the order for B stored column-major (plain ldmatrix): here B is row-major, so "
         "lanes 8-15 give k 8-15 of the first n8 tile and lanes 16-31 the second n8 tile, one "
         "chunk to the right"),
        (lambda lane, k0, n_chunk, chunks: (k0 + lane % 16) * chunks
         + ((n_chunk + lane // 16) ^ ((k0 + lane % 16) % 8)),
         "offsets count bytes: (row * chunks + stored slot) * 16"),
        (lambda lane, k0, n_chunk, chunks: ((k0 + lane % 16) * 8
                                           + ((n_chunk + lane // 16) ^ ((k0 + lane % 16) % 8)))
         * 16,
         "a row of this B tile has `chunks` chunks, not 8: the row starts row * chunks * 16 bytes "
         "in"),
    ),
    hints=(
        "Matrix i of the load is register i: (k 0-7 | k 8-15) of the first n8 tile, then of the "
        "second. Lanes 8i..8i+7 give its 8 rows.",
        "row = k0 + lane % 16 (lanes 16-31 start over at k0), chunk = n_chunk + lane // 16.",
    ),
)


# ---------------------------------------------------------------------------------------------
# 2. The warp tile: which element of C does acc[i][j][e] of a lane hold?
# ---------------------------------------------------------------------------------------------

def acc_expected(lane: int, i: int, j: int, e: int) -> tuple[int, int]:
    """(row, col) in the warp's tile of ``acc[i][j][e]``: the f32 C fragment (layouts) of mma
    tile (i, j), which starts at row 16 i, column 8 j."""
    form = layouts.mma_form(*MMA_F32)
    _, r, c = form.c.element(lane, e, 0)
    return 16 * i + r, 8 * j + c


@dataclass(repr=False)
class WarpTileExercise(Exercise):
    """``fn(lane, i, j, e) -> (row, col)`` for every accumulator of a warp tile of
    ``mt`` x ``nt`` mma tiles (m16 x n8 each)."""

    visible: Sequence[tuple[int, int]] = ((2, 4),)
    hidden: Sequence[tuple[int, int]] = ((4, 8),)
    mistakes: Sequence[Mistake] = ()

    def _one(self, answer, mt: int, nt: int) -> CheckResult:
        keys = [(lane, i, j, e) for lane in range(32) for i in range(mt) for j in range(nt)
                for e in range(4)]
        lv = checks.evaluate_lanes(answer, keys, arity=2)
        exp = [acc_expected(*k) for k in keys]
        got = dict(zip(keys, lv.values))
        diffs, wrong = [], []
        for k, v, prob, x in zip(keys, lv.values, lv.problems, exp):
            if prob or v != x:
                wrong.append(k)
                diffs.append(LaneDiff(k[0], prob or f"(row {v[0]}, col {v[1]})",
                                      f"(row {x[0]}, col {x[1]})",
                                      where=f"acc[{k[1]}][{k[2]}][{k[3]}]"))
        what = f"a {16 * mt} x {8 * nt} warp tile ({mt} x {nt} mma tiles)"
        if not wrong:
            return CheckResult(self.title, True, 1.0, f"all {len(keys)} accumulators placed "
                               f"right ({what})")
        advice = []
        prob = next((p for p in lv.problems if p), "")
        if prob:
            advice.append(f"your function {prob.split(' (line')[0]}; fix that first")
        else:
            known = known_mistake(self.mistakes, keys, lv.values, convert=tuple)
            if known is not None:
                advice.append(known)
            else:
                advice += _warp_tile_advice(keys, got, dict(zip(keys, exp)), wrong)
        return CheckResult(self.title, False, 1 - len(wrong) / len(keys),
                           f"{len(wrong)} of {len(keys)} accumulators wrong ({what})",
                           diffs=diffs, advice=advice, wrong_lanes=sorted({k[0] for k in wrong}))

    def evaluate(self, answer, hidden: bool = False) -> CheckResult:
        if answer is None:
            return checks.not_implemented(self.title)
        if not callable(answer):
            return CheckResult(self.title, False, 0.0, "expected a function of (lane, i, j, e)",
                               status="invalid")
        shapes = list(self.visible) + (list(self.hidden) if hidden else [])
        try:
            results = [self._one(answer, mt, nt) for mt, nt in shapes]
        except checks._Unfinished:
            return checks.not_implemented(self.title)
        return checks.combine(self.title, results)


def _warp_tile_advice(keys, got, exp, wrong) -> list[str]:
    wrong_set = set(wrong)
    out = []
    inside = [k for k in keys if k[1] == 0 and k[2] == 0]
    if not any(k in wrong_set for k in inside):
        out.append("acc[0][0] is right, the other tiles are not: tile (i, j) starts 16 * i rows "
                   "and 8 * j columns into the warp tile")
    elif all(k in wrong_set for k in keys if k[3] >= 2) and not any(k in wrong_set for k in keys
                                                                   if k[3] < 2):
        out.append("e = 0, 1 are right; e = 2, 3 are the same two columns 8 rows further down")
    rows_ok = all(got[k] is not None and got[k][0] == exp[k][0] for k in keys)
    cols_ok = all(got[k] is not None and got[k][1] == exp[k][1] for k in keys)
    if rows_ok and not cols_ok:
        out.append("every row is right; the columns are not: col = 8 j + 2 (lane % 4) + e % 2")
    elif cols_ok and not rows_ok:
        out.append("every column is right; the rows are not: row = 16 i + lane // 4 + 8 (e // 2)")
    return out


acc_position = WarpTileExercise(
    key="capstone.acc_position",
    title="warp tile: the element of C held in acc[i][j][e] of a lane",
    mistakes=(
        (lambda lane, i, j, e: (8 * i + lane // 4 + 8 * (e // 2), 16 * j + 2 * (lane % 4) + e % 2),
         "an mma tile is m16 x n8: i moves 16 rows, j moves 8 columns"),
        (lambda lane, i, j, e: (16 * i + lane // 4 + 8 * (e % 2), 8 * j + 2 * (lane % 4) + e // 2),
         "e = 0, 1 are neighbouring columns of one row; e = 2, 3 the same columns 8 rows down"),
        (lambda lane, i, j, e: (lane // 4 + 8 * (e // 2), 2 * (lane % 4) + e % 2),
         "that is the place inside one 16 x 8 tile; add where tile (i, j) starts in the warp tile"),
        (lambda lane, i, j, e: (16 * j + lane // 4 + 8 * (e // 2), 8 * i + 2 * (lane % 4) + e % 2),
         "i counts m16 tiles down the rows, j counts n8 tiles across the columns"),
    ),
    hints=(
        "Inside one m16n8 tile the f32 accumulators are the C fragment of notebook 6: c0, c1 on"
        " row g of the tile, c2, c3 on row g + 8 (lanes 4g..4g+3 form group g).",
        "Tile (i, j) starts at row 16i and column 8j of the warp's block; inside the tile a "
        "lane at place t of its group has columns 2t and 2t+1, and e picks the row and the "
        "column.",
        "Worked example, lane 9, i 1, j 2, e 3: g = 2, t = 1; c3 is row g + 8 = 10, column 3 of"
        " the tile; tile (1, 2) adds 16 rows and 16 columns: (row 26, col 19).",
    ),
)


# ---------------------------------------------------------------------------------------------
# 3. Kernel: one warp's k-loop over a 64-deep k-tile
# ---------------------------------------------------------------------------------------------

K_LOOP_KERNEL_NAME = "warp_k_loop"
#: The exercise's tiles: A is 16 x 64 (m x k), B is 64 x 64 (k x n), both rows of 8 chunks.
K_TILE, B_COLS, TILE_CHUNKS = 64, 64, 8


def _swizzled_bytes(tile: np.ndarray) -> np.ndarray:
    """The tile as the kernel stores it in shared memory (capstone swizzle), as raw bytes."""
    rows = tile.shape[0]
    r, c = np.meshgrid(np.arange(rows), np.arange(TILE_CHUNKS), indexing="ij")
    out = np.zeros((rows, TILE_CHUNKS, 8), dtype=np.uint16)
    out[r, gemm_swizzle(r, c, TILE_CHUNKS)] = np.asarray(tile).reshape(rows, TILE_CHUNKS, 8)
    return out.reshape(-1).view(np.uint8)


def k_loop_model(a: np.ndarray, b: np.ndarray, n_chunk: int, *, swizzle_reads: bool = True,
                 trans: bool = True, b_regs: tuple = ((0, 1), (2, 3)),
                 steps: int = K_TILE // 16) -> np.ndarray:
    """What the k-loop leaves in ``acc[2][4]`` of every lane (``(32, 8)`` f32 bits), run on the
    emulator from the swizzled shared tiles. The keywords model the usual mistakes: reading
    without the swizzle, loading B without .trans, pairing B's registers wrongly, stopping
    after fewer k-steps."""
    sa, sb = _swizzled_bytes(a), _swizzled_bytes(b)
    form = layouts.mma_form(*MMA_F32)

    def offsets(place, row0, chunk0):
        r, c = lane_rows_chunks(place, row0, chunk0)
        return (swizzled_offset(r, c, TILE_CHUNKS) if swizzle_reads
                else (r * TILE_CHUNKS + c) * CHUNK_BYTES)

    # the two accumulators are independent: one call of the tensor-core model runs both, as
    # two warps would (the same bits as two calls)
    acc = np.zeros((len(b_regs), 32, form.c.regs), dtype=np.uint32)
    pairs = [list(pair) for pair in b_regs]
    for ks in range(steps):
        ra = emulator.ldmatrix(sa, offsets(tiles.mma_a(), 0, 2 * ks), num=4)
        rb = emulator.ldmatrix(sb, offsets(b_two_tiles(), 16 * ks, n_chunk), num=4, trans=trans)
        acc = emulator.mma(MMA_F32[0], np.stack([ra] * len(pairs)),
                           np.stack([rb[:, pair] for pair in pairs]), acc, atype="f16",
                           btype="f16", ctype="f32", dtype="f32")
    return np.concatenate(list(acc), axis=1)


def k_loop_inputs(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Small whole numbers as fp16, so every sum is exact in f32 whatever the order."""
    a = rng.integers(-3, 4, (16, K_TILE)).astype(np.float16).view(np.uint16)
    b = rng.integers(-3, 4, (K_TILE, B_COLS)).astype(np.float16).view(np.uint16)
    return a, b


#: Mistakes the k-loop check recognises: model keywords -> what to tell the learner.
K_LOOP_MISTAKES: tuple[tuple[dict, str], ...] = (
    ({"trans": False}, "B is stored row-major (a row per k) but mma wants it column by column: "
                       "load B with ldmatrix...x4.trans"),
    ({"swizzle_reads": False}, "your loads read the tiles as if they were not swizzled: use "
                               "tile_offset(row, chunk) for the ldmatrix addresses too"),
    ({"b_regs": ((0, 2), (1, 3))}, "b[0], b[1] are k 0-7 and k 8-15 of the first n8 tile and "
                                   "b[2], b[3] those of the second: pass (b[0], b[1]) to the "
                                   "first mma and (b[2], b[3]) to the second"),
    ({"steps": 1}, "only the first k16 step was accumulated: the k-tile is 64 deep, loop ks "
                   "over 0..3 and move both A (2 chunks) and B (16 rows) each step"),
)


@dataclass
class KLoopRun:
    """One launch of the k-loop kernel: small-integer A and B, the C columns ``n_chunk`` picks."""

    n_chunk: int
    a: np.ndarray
    b: np.ndarray
    label: str
    args: list
    grid: tuple = (1,)
    block: tuple = (32,)
    shared_mem: int = 0
    out_index: int = 3


def k_loop_run(n_chunk: int, rng: np.random.Generator) -> KLoopRun:
    a, b = k_loop_inputs(rng)
    return KLoopRun(n_chunk, a, b, f"n_chunk = {n_chunk} (C columns {8 * n_chunk}-"
                    f"{8 * n_chunk + 15})", [a, b, np.int32(n_chunk), np.zeros(256, np.float32)])


def _k_loop_runs(chunks: Sequence[int], rng: np.random.Generator) -> list[KLoopRun]:
    return [k_loop_run(n, rng) for n in chunks]


@dataclass(repr=False)
class KLoopExercise(KernelExercise):
    """The k-loop kernel: every accumulator of every lane equal to the emulator's."""

    kernel_name: str = K_LOOP_KERNEL_NAME
    visible: Callable[[], list] = lambda: _k_loop_runs((0, 6), np.random.default_rng(1))
    hidden_cases: Callable[[np.random.Generator], list] = lambda rng: _k_loop_runs((2, 4), rng)

    def run_case(self, answer: str, run: KLoopRun) -> CheckResult:
        a, b, n_chunk, label = run.a, run.b, run.n_chunk, run.label
        res = launch_for_check(answer, self.kernel_name, run, self.title, self.backend)
        if isinstance(res, CheckResult):
            return res
        got = np.asarray(res.outputs[3]).view(np.uint32).reshape(32, 8)
        exp = k_loop_model(a, b, n_chunk)
        bad = np.argwhere(got != exp)
        if not len(bad):
            return CheckResult(self.title, True, 1.0, f"all 256 accumulators match the emulator "
                               f"({label}) on {res.device}",
                               details={"device": res.device, "backend": res.backend})
        form = layouts.mma_form(*MMA_F32)
        gf, ef = got.view(np.float32), exp.view(np.float32)
        diffs = []
        for lane, w in bad:
            j, e = divmod(int(w), 4)
            _, r, c = form.c.element(int(lane), e, 0)
            diffs.append(LaneDiff(int(lane), f"{gf[lane, w]:g}", f"{ef[lane, w]:g}",
                                  where=f"acc[{j}][{e}] (C[{r}][{8 * n_chunk + 8 * j + c}])"))
        advice = []
        for change, text in K_LOOP_MISTAKES:
            if np.array_equal(got, k_loop_model(a, b, n_chunk, **change)):
                advice.append(text)
                break
        if not advice and np.all(got == 0):
            advice.append("every accumulator is 0: the mma results never reached acc (are the "
                          "mma calls inside the loop, accumulating into acc[0] and acc[1]?)")
        return CheckResult(self.title, False, 1 - len(bad) / got.size,
                           f"{len(bad)} of {got.size} accumulators differ from the emulator "
                           f"({label}) on {res.device}", diffs=diffs, advice=advice,
                           wrong_lanes=sorted({int(l) for l in bad[:, 0]}))


k_loop_kernel = KLoopExercise(
    key="capstone.k_loop_kernel",
    title="kernel: one warp's k-loop (ldmatrix A, ldmatrix.trans B, two mma per k16 step)",
    hints=(
        "Per k16 step ks: A is chunks 2ks, 2ks+1 of rows 0-15; B is rows 16ks..16ks+15, chunks "
        "n_chunk and n_chunk+1. Both through tile_offset(row, chunk).",
        "A: row = lane % 16, chunk = 2 * ks + lane / 16 (ldmatrix.x4). B: row = 16 * ks + "
        "lane % 16, chunk = n_chunk + lane / 16 (ldmatrix.x4.trans), your b_trans_offset.",
        "mma_f16_f32(acc[0], a, b[0], b[1]); mma_f16_f32(acc[1], a, b[2], b[3]);",
    ),
)


# ---------------------------------------------------------------------------------------------
# 4. Spot the bug: no barrier between cp.async.wait_group and ldmatrix
# ---------------------------------------------------------------------------------------------

missing_barrier = ChoiceExercise(
    key="capstone.missing_barrier",
    title="spot the bug: cp.async.wait_group without a barrier",
    correct="b",
    explanations={
        "a": "cp.async.wait_group is per thread: it waits for the groups *this thread* "
             "committed, not for the whole block",
        "b": "each thread waits only for its own copies, but the ldmatrix of a warp reads rows "
             "that other threads (other warps) copied. Without bar.sync (__syncthreads) after "
             "the wait, a warp can read a row before it has landed; the barrier also keeps a "
             "fast warp from refilling a ring slot another warp is still reading. The error "
             "depends on timing, so it comes and goes",
        "c": "ldmatrix reads shared memory whoever wrote it; cp.async writes shared memory "
             "directly, that is the point of it",
        "d": "the prologue commits STAGES - 1 groups, so at tile kt allowing STAGES - 2 "
             "groups in flight is exactly what guarantees tile kt has arrived (for this "
             "thread)",
    },
    hints=("Whose copies does cp.async.wait_group wait for?",
           "Which threads copied the rows that one warp's ldmatrix reads?"),
)
