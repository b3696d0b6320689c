"""Exercises of the stmatrix notebook: the f16 accumulator fragment, the row addresses that
store it (row-major, and column-major with .trans), a kernel that stores an mma result, and a
bug from the literature.

A kernel that *stores* is checked on the matrix it leaves in memory, not on registers, so this
module also holds :class:`TileRun` / :class:`TileKernelExercise` (the movmatrix notebook uses
them too): every stored cell is compared with what the emulator stores.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .. import checks, diagnosis, tiles
from ...model import emulator, layouts
from ..checks import AddressTask, CheckResult
from . import cases
from .base import AddressExercise, ChoiceExercise, FragmentExercise
from .kernel_exercise import KernelExercise, KernelRun, launch_for_check

#: The mma whose accumulator the notebook stores: f16 in, f16 accumulators.
MMA_F16 = ("m16n8k16", "f16", "f16", "f16", "f16")
#: What the kernels fill shared memory with before storing, so unwritten cells show.
FILL = 0xFFFF

# ---------------------------------------------------------------------------------------------
# Kernels that store a matrix: checked cell by cell against the emulator
# ---------------------------------------------------------------------------------------------


@dataclass
class TileRun(KernelRun):
    """One launch of a kernel that writes a matrix of 16-bit values to ``args[out_index]``.

    A :class:`KernelRun` (the same launch: ``label``, ``args``, ``grid`` ... ``options``) whose
    ``expected`` is the ``(rows, cols)`` matrix the emulator stores, not registers;
    ``describe_value`` names a value (inputs are distinct element ids); ``row_names(r)`` says
    who should have stored row ``r``; ``mistakes`` pairs the matrix a known wrong kernel stores
    with its advice. Its values are never renamed for grading
    (:meth:`KernelRun.with_fresh_values` keeps a subclass's run as it is).
    """

    row_names: Callable[[int], str] | None = None
    cell_source: Callable[[int, int], str] | None = None
    value_source: Callable[[int], str | None] | None = None
    unwritten: int | None = FILL
    mistakes: Sequence[tuple[np.ndarray | None, str]] = ()
    what: str = "tile"


def run_tile_case(source: str, kernel_name: str, run: TileRun, name: str,
                  backend: str = "auto") -> CheckResult:
    """Compile and run once, compare the stored matrix; every failure becomes a result."""
    res = launch_for_check(source, kernel_name, run, name, backend, fault_advice=(
        "a fault names the lane: look at the row address that lane gives (16-byte aligned, "
        "inside the tile, one lane per row)"))
    if isinstance(res, CheckResult):
        return res
    out = np.asarray(res.outputs[run.out_index])
    exp = np.asarray(run.expected)
    if out.nbytes != exp.size * 2:
        return CheckResult(name, False, 0.0, f"output has {out.nbytes} bytes, expected "
                           f"{exp.size * 2}", status="error")
    got = out.view(np.uint16).reshape(exp.shape)
    result = checks.check_tile_outputs(name, got, exp, describe_value=run.describe_value,
                                       what=run.what, row_names=run.row_names,
                                       cell_source=run.cell_source,
                                       value_source=run.value_source,
                                       unwritten=run.unwritten, mistakes=run.mistakes,
                                       backend=res.device)
    result.details.update(backend=res.backend, device=res.device)
    if not result.passed:
        result.message += f" ({run.label})"
    return result


@dataclass(repr=False)
class TileKernelExercise(KernelExercise):
    """A kernel exercise whose runs are :class:`TileRun`: the output is a stored matrix."""

    def run_case(self, answer: str, run: TileRun) -> CheckResult:
        return run_tile_case(answer, self.kernel_name, run, self.title, self.backend)


def value_names(matrix: np.ndarray, label: str) -> Callable[[int], str]:
    """``v -> "D[r][c]"`` for a matrix of distinct 16-bit values; the fill value says so.
    The lookup is built on the first call: only a wrong output names values."""
    kept = np.array(matrix)

    @functools.cache
    def places() -> dict[int, tuple[int, int]]:
        return {int(v): (r, c) for (r, c), v in np.ndenumerate(kept)}

    def name(v: int) -> str:
        where = places()
        if v in where:
            return f"{label}[{where[v][0]}][{where[v][1]}]"
        if v == FILL:
            return "nothing (the fill value: no lane stored there)"
        return f"0x{v:04x} (not an element of {label})"
    return name


def addressing_lane(placement: tiles.Placement, tile_row: int) -> int:
    """The lane whose row address stores tile row ``tile_row`` (its matrix row's address lane)."""
    for i, (r0, _) in enumerate(placement.origins):
        if r0 <= tile_row < r0 + 8:
            return int(layouts.row_address_lanes(placement.num)[i, tile_row - r0])
    raise ValueError(f"row {tile_row} is in none of the matrices of {placement.name}")


def stored_from(placement: tiles.Placement,
                reg_names: Sequence[str]) -> Callable[[int, int], str]:
    """``(row, col) -> "lane 4's d1"``: the lane and register a (non-.trans) stmatrix stores
    tile cell (row, col) from, by the m8n8 fragment layout (element (r, c) of matrix i sits in
    lane 4r + c // 2's register i)."""
    def source(row: int, col: int) -> str:
        for i, (r0, c0) in enumerate(placement.origins):
            if r0 <= row < r0 + 8 and c0 <= col < c0 + 8:
                lane, reg, _ = layouts.stmatrix_fragment(placement.num).owner(
                    i, row - r0, col - c0)
                return f"lane {lane}'s {reg_names[reg]}"
        return "no lane"
    return source


def held_by(regs: np.ndarray, reg_names: Sequence[str],
            verb: str = "from") -> Callable[[int], str | None]:
    """``v -> "from lane 4's d1"``: the lane and register whose 16-bit half held value ``v``
    (the values are distinct; use registers the learner's code cannot change), ``None`` for a
    value no register held. The lookup is built on the first call, as :func:`value_names`."""
    halves = np.array(regs, dtype=np.uint32).view(np.uint16).reshape(
        np.shape(regs)[0], np.shape(regs)[1], 2)

    @functools.cache
    def holders() -> dict[int, str]:
        where: dict[int, str] = {}
        for (lane, reg, _), v in np.ndenumerate(halves):
            where.setdefault(int(v), f"{verb} lane {lane}'s {reg_names[reg]}")
        return where
    return lambda v: holders().get(int(v))


def emulated_store(regs: np.ndarray, placement: tiles.Placement, sld: int, *,
                   trans: bool = False, addrs: np.ndarray | None = None) -> np.ndarray | None:
    """What stmatrix stores into a tile of ``placement``'s shape, rows ``sld`` elements apart,
    first filled with :data:`FILL`; ``None`` where the emulator refuses (fault, undefined)."""
    tile = placement.tile(0, sld * 2)
    smem = np.full(placement.rows * sld, FILL, dtype=np.uint16)
    if addrs is None:
        addrs = placement.expected_addresses(tile)
    try:
        emulator.stmatrix(smem.view(np.uint8), addrs, regs, num=placement.num, trans=trans)
    except emulator.EmulatorError:
        return None
    return smem.reshape(placement.rows, sld)[:, :placement.cols].copy()


# ---------------------------------------------------------------------------------------------
# 1. The f16 accumulator fragment: (lane, reg, half) -> (row, col) of D
# ---------------------------------------------------------------------------------------------

def _cd_cases(which: str) -> list[tuple]:
    form = layouts.mma_form(*MMA_F16)
    return [(getattr(form, which), cases.row_col, ())]


d_fragment = FragmentExercise(
    key="stmatrix.d_fragment",
    title="m16n8k16 f16 accumulator: (lane, reg, half) -> (row, col) of D",
    answer_names=("row", "col"),
    visible=lambda: _cd_cases("d"),
    hidden_cases=lambda: _cd_cases("c"),
    mistakes=(
        (lambda lane, reg, half: (lane // 4 + 8 * (reg // 2), 2 * (lane % 4) + reg % 2),
         "that is the f32 accumulator (four registers, one element each); with f16 "
         "accumulators a register packs two neighbouring columns: col = 2 * (lane % 4) + half"),
        (lambda lane, reg, half: (lane // 4, 2 * (lane % 4) + half + 8 * reg),
         "D is 16 x 8: there are no columns 8-15. Register 1 holds rows 8-15"),
        (lambda lane, reg, half: (lane % 8 + 8 * reg, 2 * (lane // 8) + half),
         "a row of 8 elements is held by four consecutive lanes, so the row is lane // 4 (not "
         "lane % 8) and the column pair is lane % 4"),
    ),
    hints=(
        "Each register holds one 8x8 block in the ldmatrix layout; register 0 is rows 0-7.",
        "Inside a block: four consecutive lanes per row, two neighbouring columns per lane, "
        "half picks one of them. Register 1 adds 8 rows.",
        "Worked example, lane 22, reg 1, half 0: lanes 20-23 share row 5 of the block; lane 22 "
        "is at place 2, so columns 4-5, half 0 is column 4. Register 1 is rows 8-15: (row 13, "
        "col 4).",
    ),
)

# ---------------------------------------------------------------------------------------------
# 2./3. Row addresses that store D: row-major (.x2) and column-major (.x2.trans)
# ---------------------------------------------------------------------------------------------


def _tasks(placement: tiles.Placement, params, trans: bool) -> list[AddressTask]:
    return [AddressTask(placement, b, s, (b, s), trans=trans, instruction="stmatrix")
            for b, s in params]


def _random_tasks(placement: tiles.Placement, trans: bool):
    def make(rng: np.random.Generator) -> list[AddressTask]:
        return [AddressTask(placement, b, s, (b, s), trans=trans, instruction="stmatrix")
                for b, s in
                (cases.random_tile_params(rng, placement) for _ in range(8))]
    return make


def d_column_major() -> tiles.Placement:
    """D stored column-major (as D^T, 8 rows of 16): stmatrix.x2.trans puts matrix i, D's rows
    8i..8i+7 turned around, at columns 8i..8i+7 of those 8 stored rows."""
    return tiles.mirrored(tiles.mma_cd_f16())


d_rows = AddressExercise(
    key="stmatrix.d_rows",
    title="stmatrix .x2: row addresses that store D row-major",
    arg_names=("lane", "base", "stride"),
    visible=lambda: (_tasks(tiles.mma_cd_f16(), ((0, 16), (256, 48)), False)
                     + cases.drawn(_random_tasks(tiles.mma_cd_f16(), False), 1)),
    hidden_cases=_random_tasks(tiles.mma_cd_f16(), False),
    mistakes=(
        (lambda lane, base, stride: base + (lane // 4) * stride,
         "lane // 4 is the row whose *elements* a lane holds, not the row whose *address* it "
         "gives: the address of row r comes from lane r (lanes 0-7 matrix 0, lanes 8-15 "
         "matrix 1)"),
        (lambda lane, base, stride: base + (lane % 8) * stride + (lane // 8) * 16,
         "you put the two matrices side by side; D's register 1 is rows 8-15, so lanes 8-15 "
         "point 8 rows further down, at column 0"),
        (lambda lane, base, stride: base + (lane % 8) * stride,
         "lanes 8-15 point at rows 0-7 again: register 1 (rows 8-15 of D) would overwrite "
         "register 0's rows"),
    ),
    hints=(
        "stmatrix takes its row addresses exactly like ldmatrix: lanes 8i..8i+7 give the rows "
        "of matrix i, and matrix i is register i.",
        "D's register 0 is rows 0-7 and register 1 rows 8-15, one below the other.",
    ),
)

d_trans_rows = AddressExercise(
    key="stmatrix.d_trans_rows",
    title="stmatrix .x2.trans: row addresses that store D column-major",
    arg_names=("lane", "base", "stride"),
    visible=lambda: (_tasks(d_column_major(), ((0, 32), (512, 64)), True)
                     + cases.drawn(_random_tasks(d_column_major(), True), 1)),
    hidden_cases=_random_tasks(d_column_major(), True),
    mistakes=(
        (lambda lane, base, stride: base + (lane % 16) * stride,
         "that is the row-major recipe. Stored column-major there are only 8 stored rows (one "
         "per column of D); with .trans matrix 1 (D's rows 8-15) becomes their right halves: "
         "16 bytes to the right, not 8 rows down"),
        (lambda lane, base, stride: base + (lane % 8) * stride + (lane // 8 % 2) * 8,
         "the right half of a stored row starts 8 elements = 16 bytes in: addresses count bytes"),
    ),
    hints=(
        "With .trans, stored row j of matrix i receives column j of that 8x8 block of D.",
        "So matrix 0 (D rows 0-7) fills columns 0-7 of the 8 stored rows, matrix 1 (D rows "
        "8-15) columns 8-15.",
    ),
)

# ---------------------------------------------------------------------------------------------
# 4. Kernel: D = A * B with f16 accumulators, stored with stmatrix.x2
# ---------------------------------------------------------------------------------------------

STORE_D_KERNEL_NAME = "store_d"


def mma_inputs(perm: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """A = the permutation matrix of ``perm`` (16x16), B = element ids 0..127 (16x8), as f16
    bits: D = A * B is B's rows in the order ``perm``, every value exact and distinct."""
    a = np.eye(16, dtype=np.float16)[list(perm)]
    b = np.arange(128, dtype=np.float16).reshape(16, 8)
    return a.view(np.uint16).reshape(-1), b.view(np.uint16).reshape(-1)


def mma_d_registers(a_bits: np.ndarray, b_bits: np.ndarray) -> np.ndarray:
    """The D fragment ``(32, 2)`` of m16n8k16 f16 for A, B (f16 bits) and C = 0."""
    form = layouts.mma_form(*MMA_F16)
    a = emulator.matrices_to_fragment(a_bits.reshape(1, 16, 16), form.a)
    b = emulator.matrices_to_fragment(b_bits.reshape(1, 16, 8), form.b)
    return emulator.mma("m16n8k16", a, b, np.zeros((32, 2), dtype=np.uint32), atype="f16",
                        btype="f16", ctype="f16", dtype="f16")


def store_d_run(sld: int, perm: Sequence[int] = tuple(range(16))) -> TileRun:
    a_bits, b_bits = mma_inputs(perm)
    d = mma_d_registers(a_bits, b_bits)
    place = tiles.mma_cd_f16()
    d_matrix = emulator.fragment_to_matrices(d, layouts.mma_form(*MMA_F16).d)[0]
    mistakes = diagnosis.Deferred(lambda: (
        (emulated_store(d, place, sld, trans=True),
         "every 8x8 block came out turned around: .trans stores each matrix column by column; "
         "D goes to a row-major tile, so no .trans {proof}"),
        *((s.output, s.cause) for s in diagnosis.store_suspects(
            d, place, sld, trans=False, fill=FILL, reg_names=("d0", "d1"))),
    ))
    return TileRun(label=f"tile row stride {sld} elements",
                   args=[a_bits, b_bits, np.int32(sld), np.zeros(128, dtype=np.uint16)],
                   out_index=3, expected=emulated_store(d, place, sld),
                   shared_mem=16 * sld * 2, describe_value=value_names(d_matrix, "D"),
                   row_names=lambda r: f"D's row {r}, stored through lane "
                                       f"{addressing_lane(place, r)}'s address",
                   cell_source=stored_from(place, ("d0", "d1")),
                   value_source=held_by(d, ("d0", "d1")),
                   mistakes=mistakes)


store_d_kernel = TileKernelExercise(
    key="stmatrix.store_d_kernel",
    title="kernel: store the mma accumulator D with stmatrix.x2",
    kernel_name=STORE_D_KERNEL_NAME,
    visible=lambda: [store_d_run(8), store_d_run(24, tuple(reversed(range(16))))],
    hidden_cases=lambda rng: [store_d_run(s, rng.permutation(16)) for s in (16, 24)],
    advice_for=(
        (lambda src: "stmatrix" not in src, "store the registers with stmatrix"),
        (lambda src: not re.search(r"stmatrix[\w.]*\.x2", src),
         "D is two 8x8 matrices (d0 = rows 0-7, d1 = rows 8-15): use .x2 with {d0, d1}"),
    ),
    hints=(
        "Your d_rows formula gives the address: base = the tile's shared address, stride = "
        "2 * sld bytes.",
        "const unsigned base = (unsigned)__cvta_generic_to_shared(sd); "
        "const unsigned addr = base + (lane % 16) * sld * 2;",
        'asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};" :: '
        '"r"(addr), "r"(d0), "r"(d1) : "memory");',
    ),
)

# ---------------------------------------------------------------------------------------------
# 5. Spot the bug: the holding lane's row used as the addressing lane's row
# ---------------------------------------------------------------------------------------------

holder_row_bug = ChoiceExercise(
    key="stmatrix.holder_row_bug",
    title="spot the bug: s_d + lane / 4",
    correct="b",
    explanations={
        "a": "lane / 4 is the row whose elements a lane *holds*; the address a lane gives is "
             "for a different row: lane t addresses row t (lanes 0-15 for .x2)",
        "b": "the address side was written with the register side's formula. Lanes 0-3 all "
             "name the start of row 0 (the PTX ISA does not say which of their rows is stored "
             "there) and lane 4 onwards "
             "point 2, 4, 6 ... bytes in, breaking the 16-byte alignment rule. The row "
             "address of lane t is s_d + (t % 16) * 8 elements",
        "c": ".x2 reads the addresses of lanes 0-15 only; lanes 16-31 may hold anything",
        "d": ".trans would store each 8x8 block column by column: D is row-major here, so "
             "plain .x2 is right. The addresses are the problem",
    },
    hints=("Which lane gives the address of D's row 5, and which lanes hold its elements?",
           "Work out the byte address lanes 0, 1, 4 and 5 give."),
)
