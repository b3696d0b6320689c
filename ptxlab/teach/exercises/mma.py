"""Exercises and helpers of the mma.sync notebook.

The notebook shows every variant of ``ptxlab.model.layouts.MMA_VARIANTS`` and runs them through
live kernels; the helpers here turn numpy matrices into the fragments those kernels take and
back (through :mod:`ptxlab.model.layouts` and :mod:`ptxlab.model.emulator`, never through a
hand-written layout). The exercises: the f32/s32 accumulator fragment, the B fragment for every
element width, what the tensor core reads of a tf32 operand, s8 wraparound, the row addresses of
two B n-blocks loaded with one ``ldmatrix.x4.trans``, a kernel computing a 16x8 tile, and a
swapped-register bug.
"""
from __future__ import annotations

import html
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .. import checks, diagnosis, render, tiles
from ...model import emulator, layouts
from ...run.ptx.errors import number_runs
from ..checks import AddressTask, CheckResult, LaneDiff
from . import cases
from .base import AddressExercise, ChoiceExercise, FragmentExercise, FunctionExercise
from .kernel_exercise import KernelExercise, KernelRun, launch_for_check

__all__ = [
    "element_bits", "element_values", "round_to", "fragments", "result_matrix", "emulate_mma",
    "run_mma", "MmaRun", "ulp_distance", "b_pair_placement", "b_pair_table", "tile_inputs",
    "tile_expected", "show_tile", "variants_html", "formats_table", "tf32_read", "S8_C00",
    "accumulator", "b_fragment", "tf32_operand", "s8_wraparound",
    "b_pair_rows", "tile_kernel", "swapped_a_blocks",
]

# ---------------------------------------------------------------------------------------------
# Numbers <-> element bit patterns (type conversions; the layouts stay in ptxlab.model.layouts)
# ---------------------------------------------------------------------------------------------


#: Numbers -> element bit patterns (kept under this name: the notebook and exercises use it).
element_bits = emulator.element_bits


def element_values(bits: npt.ArrayLike, typ: str) -> np.ndarray:
    """Bit patterns of ``typ`` -> numbers (float64 for floats, int64 for integers).

    A ``tf32`` pattern is read whole, as the f32 it is stored as: what the tensor core keeps of
    it is the subject of an exercise, not of this conversion.
    """
    b = np.asarray(bits).astype(np.uint32)
    if typ == "f16":
        return b.astype(np.uint16).view(np.float16).astype(np.float64)
    if typ == "bf16":
        return (b << 16).view(np.float32).astype(np.float64)
    if typ in ("f32", "tf32"):
        return b.view(np.float32).astype(np.float64)
    if typ == "s8":
        return b.astype(np.uint8).view(np.int8).astype(np.int64)
    if typ == "u8":
        return b.astype(np.uint8).astype(np.int64)
    if typ == "s32":
        return b.view(np.int32).astype(np.int64)
    raise ValueError(f"unknown element type {typ!r}")


def round_to(values: npt.ArrayLike, typ: str) -> np.ndarray:
    """The nearest number of type ``typ`` (what a conversion to ``typ`` keeps)."""
    return element_values(element_bits(values, typ), typ)


# ---------------------------------------------------------------------------------------------
# Fragments of whole matrices, the emulator and a live kernel
# ---------------------------------------------------------------------------------------------

#: An mma variant: a :class:`ptxlab.model.layouts.MmaForm` or its
#: (shape, atype, btype, ctype, dtype).
Form = layouts.MmaForm | tuple[str, str, str, str, str]


def _form(form) -> layouts.MmaForm:
    return form if isinstance(form, layouts.MmaForm) else layouts.mma_form(*form)


def fragments(form: Form, A: npt.ArrayLike, B: npt.ArrayLike,
              C: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Matrices (M x K, K x N, M x N numbers) -> the registers ``(32, n)`` each lane passes to
    the instruction, in the fragment layouts of :func:`ptxlab.model.layouts.mma_form`."""
    f = _form(form)
    a = emulator.matrices_to_fragment(element_bits(A, f.atype)[None], f.a)
    b = emulator.matrices_to_fragment(element_bits(B, f.btype)[None], f.b)
    c = emulator.matrices_to_fragment(element_bits(C, f.ctype)[None], f.c)
    return a, b, c


def result_matrix(form: Form, d: npt.ArrayLike) -> np.ndarray:
    """The D registers ``(32, n)`` of a warp -> the M x N matrix of numbers they hold."""
    f = _form(form)
    return element_values(emulator.fragment_to_matrices(np.asarray(d, dtype=np.uint32), f.d)[0],
                          f.dtype)


def emulate_mma(form: Form, A: npt.ArrayLike, B: npt.ArrayLike, C: npt.ArrayLike) -> np.ndarray:
    """D = A*B + C as the emulator computes it, as a matrix of numbers."""
    f = _form(form)
    a, b, c = fragments(f, A, B, C)
    return result_matrix(f, emulator.mma(f.shape, a, b, c, atype=f.atype, btype=f.btype,
                                         ctype=f.ctype, dtype=f.dtype))


def reference_kernel_name(form: Form) -> str:
    """Name of the kernel of ``kernels/reference/mma_ref.cu`` that issues ``form``."""
    f = _form(form)
    return f"mma_{f.shape}_{f.dtype}_{f.atype}_{f.btype}_{f.ctype}_ref"


@dataclass
class MmaRun:
    """One mma.sync executed by a live kernel: the registers in and out, D as numbers."""

    form: layouts.MmaForm
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    d: np.ndarray
    D: np.ndarray
    device: str


def run_mma(form: Form, A: npt.ArrayLike, B: npt.ArrayLike, C: npt.ArrayLike,
            backend: str = "auto") -> MmaRun:
    """Run ``form`` once on a warp (GPU if it can, else the CPU model) with the reference kernel
    of ``kernels/reference/mma_ref.cu``; the fragments are built from the matrices here."""
    from ...run import backends, sources

    f = _form(form)
    a, b, c = fragments(f, A, B, C)
    d = np.zeros((32, f.d.regs), dtype=np.uint32)
    res = backends.launch(sources.read_kernel("reference/mma_ref.cu"), reference_kernel_name(f),
                          grid=(1,), block=(32,), args=[a.ravel(), b.ravel(), c.ravel(),
                                                        d.ravel()], backend=backend)
    d = np.asarray(res.outputs[3], dtype=np.uint32).reshape(32, f.d.regs)
    return MmaRun(f, a, b, c, d, result_matrix(f, d), res.device)


def ulp_distance(x: npt.ArrayLike, y: npt.ArrayLike) -> np.ndarray:
    """How many float32 values lie between ``x`` and ``y`` (0 where they are equal)."""
    def ordered(v):
        i = np.asarray(v, dtype=np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(x) - ordered(y))


def _registers_text(lay: layouts.FragmentLayout) -> str:
    """``4 x 32-bit`` or ``4 (x2 16-bit)``: registers per lane and what each packs."""
    if lay.elems_per_reg == 1:
        return f"{lay.regs} x {lay.elem_bits}-bit"
    return f"{lay.regs} (x{lay.elems_per_reg} {lay.elem_bits}-bit)"


def variants_html() -> render.Html:
    """One row per mma variant the course covers: the instruction and what each lane holds."""
    regs = _registers_text
    rows = []
    for f in layouts.mma_forms():
        rows.append({"ptx": f.ptx, "mnk": f"{f.m}x{f.n}x{f.k}", "a": regs(f.a), "b": regs(f.b),
                     "c": regs(f.c), "d": regs(f.d)})
    cols = [("ptx", "instruction"), ("mnk", "M x N x K"), ("a", "A regs/lane"),
            ("b", "B regs/lane"), ("c", "C regs/lane"), ("d", "D regs/lane")]
    return render.address_table_html(rows, columns=cols, title="the mma.sync variants of the "
                                                               "course (from ptxlab.model.layouts)")


def formats_table(values: Sequence[float]) -> str:
    """How each number survives as f16, bf16, tf32 (as the tensor core reads an f32) and f32."""
    lines = [f"{'value':>14} {'f16':>14} {'bf16':>14} {'tf32 (read)':>14} {'f32':>14}"]
    for v in values:
        f32 = int(element_bits(v, "f32"))
        tf32 = element_values(tf32_read(f32), "f32") if _finite_f32(f32) else float(v)
        with np.errstate(over="ignore"):
            row = [v, round_to(v, "f16"), round_to(v, "bf16"), tf32, round_to(v, "f32")]
        lines.append(" ".join(f"{float(x):>14.8g}" for x in row))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# 1. The f32 / s32 accumulator fragment
# ---------------------------------------------------------------------------------------------

_F32 = ("m16n8k16", "f16", "f16", "f32", "f32")


def _cd_cases(variants, which: str = "d") -> list[tuple]:
    return [(getattr(layouts.mma_form(*v), which), cases.row_col, ()) for v in variants]


accumulator = FragmentExercise(
    key="mma.accumulator",
    title="mma C/D with 32-bit accumulators: (lane, reg) -> (row, col)",
    arg_names=("lane", "reg"),
    answer_names=("row", "col"),
    visible=lambda: _cd_cases((_F32,)),
    hidden_cases=lambda: _cd_cases([v for v in layouts.MMA_VARIANTS if v[3] != "f16"], "c")
    + _cd_cases([("m16n8k32", "s8", "s8", "s32", "s32"), ("m16n8k8", "tf32", "tf32", "f32",
                                                          "f32")]),
    mistakes=(
        (lambda lane, reg: (lane // 4 + 8 * (reg % 2), 2 * (lane % 4) + reg // 2),
         "you swapped what reg % 2 and reg // 2 do: d0 and d1 are neighbours in one row "
         "(columns 2t and 2t+1), d2 and d3 the same columns 8 rows further down"),
        (lambda lane, reg: (lane // 4, 4 * (lane % 4) + reg),
         "the four registers are not four columns of one row: C/D is only 8 columns wide, so a "
         "lane holds two columns of row g and the same two of row g + 8"),
        (lambda lane, reg: (lane % 8 + 8 * (reg // 2), 2 * (lane // 8) + reg % 2),
         "a row of D is shared by four consecutive lanes (a group g = lane // 4), not by lanes "
         "8 apart"),
    ),
    hints=(
        "Split the lane into its group g (lanes 4g..4g+3, g = 0-7) and its place t in the group"
        " (0-3).",
        "d0 and d1 sit in row g, columns 2t and 2t+1; d2 and d3 in row g + 8, the same columns.",
        "Worked example, lane 9, reg 3: g = 2, t = 1; d3 is the second of the pair in row g + "
        "8: (row 10, col 3).",
    ),
)

# ---------------------------------------------------------------------------------------------
# 2. The B fragment for every element width (bits = 8, 16 or 32)
# ---------------------------------------------------------------------------------------------


def _b_cases(variants) -> list[tuple]:
    out = []
    for v in variants:
        b = layouts.mma_form(*v).b
        out.append((b, cases.row_col, (b.elem_bits,)))
    return out


_B_VISIBLE = (("m16n8k16", "f16", "f16", "f32", "f32"), ("m16n8k8", "tf32", "tf32", "f32", "f32"))
_B_HIDDEN = (("m16n8k32", "s8", "s8", "s32", "s32"), ("m16n8k8", "f16", "f16", "f32", "f32"),
             ("m16n8k16", "bf16", "bf16", "f32", "f32"))

b_fragment = FragmentExercise(
    key="mma.b_fragment",
    title="mma B fragment of any element width: (lane, reg, elem, bits) -> (k, n)",
    arg_names=("lane", "reg", "elem", "bits"),
    answer_names=("k", "n"),
    visible=lambda: _b_cases(_B_VISIBLE),
    hidden_cases=lambda: _b_cases(_B_HIDDEN),
    mistakes=(
        (lambda lane, reg, elem, bits: (2 * (lane % 4) + elem + 8 * reg, lane // 4),
         "that is the 16-bit answer for every width: a register holds 32 // bits elements, so "
         "lane t's first k is (32 // bits) * t and each register covers 4 * (32 // bits) "
         "values of k"),
        (lambda lane, reg, elem, bits: ((32 // bits) * (lane % 4) + elem + 8 * reg, lane // 4),
         "the first part is right, but the next register does not always move k by 8: it moves "
         "k past the 4 lanes' elements, 4 * (32 // bits)"),
        (lambda lane, reg, elem, bits: (lane // 4, (32 // bits) * (lane % 4) + elem
                                        + 4 * (32 // bits) * reg),
         "(k, n) is swapped: B is K x N and a group of four lanes shares one column n = "
         "lane // 4"),
    ),
    hints=(
        "Whatever the width, the four lanes of group g (lanes 4g..4g+3) share column n = g, and"
        " every register holds 32 // bits consecutive k of that column.",
        "A lane at place t of its group (0-3) starts at k = (32 // bits) * t; the next register"
        " continues 4 lanes' worth further down: k += 4 * (32 // bits).",
        "Worked example, 8-bit elements (4 per register), lane 6, reg 1, elem 2: group 1, so n "
        "= 1; place 2 starts at k = 8, elem 2 is k = 10; register 1 adds 4 * 4 = 16: (k 26, n "
        "1).",
    ),
)

# ---------------------------------------------------------------------------------------------
# 3. What the tensor core reads of a tf32 operand
# ---------------------------------------------------------------------------------------------

_TF32_FORM = ("m16n8k8", "tf32", "tf32", "f32", "f32")


def tf32_read(bits: int) -> int:
    """The f32 pattern the emulator's tf32 mma computes with for an operand ``bits``: A holds
    it at (0, 0), B is one at (0, 0) and zero elsewhere, C is -0, so D[0][0] is the operand as
    read, exactly (a 19-bit value times one needs no rounding)."""
    f = layouts.mma_form(*_TF32_FORM)
    A = np.zeros((f.m, f.k), dtype=np.uint32)
    A[0, 0] = np.uint32(bits)
    B = element_bits(np.eye(f.k, f.n), "tf32")
    C = np.full((f.m, f.n), 0x80000000, dtype=np.uint32)
    a = emulator.matrices_to_fragment(A[None], f.a)
    b = emulator.matrices_to_fragment(B[None], f.b)
    c = emulator.matrices_to_fragment(C[None], f.c)
    d = emulator.mma(f.shape, a, b, c, atype="tf32", btype="tf32", ctype="f32", dtype="f32")
    return int(emulator.fragment_to_matrices(d, f.d)[0, 0, 0])


def _finite_f32(bits: int) -> bool:
    return (bits >> 23) & 0xFF != 0xFF


def _f32_text(bits: int) -> str:
    return f"{np.uint32(bits).view(np.float32).item():.9g}"


_TF32_VISIBLE = (0x3F800000, 0x3F801800, 0x3F800FFF, 0x40490FDB, 0xBDCCCCCD, 0x7F7FFFFF,
                 0x00001234, 0xC2F6E979)


@dataclass(repr=False)
class BitsExercise(FunctionExercise):
    """A function of 32-bit patterns; wrong answers are shown in hex."""

    def evaluate(self, answer, hidden: bool = False) -> CheckResult:
        res = super().evaluate(answer, hidden)
        for d in res.diffs:
            d.got, d.expected = _hex(d.got), _hex(d.expected)
        return res


def _hex(text: str) -> str:
    try:
        v = int(text)
    except (TypeError, ValueError):
        return text
    return f"0x{v & 0xFFFFFFFF:08x} ({_f32_text(v & 0xFFFFFFFF)})" if 0 <= v < 1 << 32 else text


def _tf32_hidden(rng: np.random.Generator) -> list[tuple]:
    pats = [int(x) for x in rng.integers(0, 1 << 32, 200, dtype=np.uint64)]
    return [(p,) for p in pats if _finite_f32(p) and p != 0x80000000][:60]


tf32_operand = BitsExercise(
    key="mma.tf32_operand",
    title="the bits of a tf32 operand the H100's tensor core computes with",
    arg_names=("bits",),
    reference=tf32_read,
    visible=lambda: [(b,) for b in _TF32_VISIBLE],
    hidden_cases=_tf32_hidden,
    describe=lambda a: f"operand 0x{a[0]:08x} ({_f32_text(a[0])})",
    mistakes=(
        (lambda bits: bits,
         "that is the operand unchanged: an f32 has 23 mantissa bits, tf32 only 10, and the "
         "tensor core ignores the low 13"),
        (lambda bits: bits & 0xFFFF0000,
         "that keeps 16 bits, the width of bf16; tf32 keeps 19: sign, 8 exponent bits and 10 "
         "mantissa bits"),
        (lambda bits: (bits + 0x1000) & 0xFFFFE000,
         "that rounds to nearest (what cvt.rna.tf32.f32 does before the mma); the tensor core "
         "itself just ignores the low bits"),
        (lambda bits: bits >> 13,
         "the kept bits stay where they are: the result is still an f32 pattern, with the low "
         "13 bits zero"),
        (lambda bits: bits & 0x1FFF,
         "those are the 13 bits the tensor core drops; keep the other 19"),
        (lambda bits: bits & 0xFFFFF000,
         "one bit too many: 10 mantissa bits means the low 23 - 10 = 13 bits go"),
    ),
    hints=(
        "tf32 = sign (1 bit) + exponent (8 bits) + mantissa (10 bits), the top 19 bits of the "
        "f32 pattern.",
        "On the H100 the low 32 - 19 = 13 bits are not rounded, just ignored (read as zero); "
        "the PTX ISA does not promise that, which is why code rounds with cvt.rna first.",
    ),
)

# ---------------------------------------------------------------------------------------------
# 4. s8 arithmetic wraps
# ---------------------------------------------------------------------------------------------

#: The numbers of the wraparound question: A row 0 and B column 0 all -128, C[0][0] = C00.
S8_C00 = 2_147_000_000

s8_wraparound = ChoiceExercise(
    key="mma.s8_wraparound",
    title="s8 mma: what D[0][0] holds",
    correct="b",
    explanations={
        "a": "2147483647 is what .satfinite would give (clamp to the largest s32); without it "
             "the 32-bit accumulator wraps around",
        "b": "each product is (-128) * (-128) = 16384, 32 of them make 524288, exact; "
             "2147000000 + 524288 = 2147524288 does not fit in s32 and wraps by 2**32 to "
             "-2147443008",
        "c": "the accumulator is the 32-bit C/D register: the sum cannot be wider than the "
             "register that holds it",
        "d": "8-bit inputs are multiplied into wider integers; 16384 is an ordinary "
             "intermediate value",
    },
    hints=("Add exactly first: 32 products of 16384, plus C.",
           "Is the total above 2**31 - 1? Without .satfinite an s32 wraps modulo 2**32."),
)

# ---------------------------------------------------------------------------------------------
# 5. Two n-blocks of a row-major B with one ldmatrix.x4.trans
# ---------------------------------------------------------------------------------------------


def b_pair_placement(j: int, n_cols: int) -> tiles.Placement:
    """The four 8x8 matrices of ``ldmatrix.x4.trans`` that load the B fragments of n-blocks
    ``j`` and ``j + 1`` from a row-major 16 x ``n_cols`` tile: matrices 0, 1 are B's registers
    for columns 8j..8j+7, matrices 2, 3 for the next 8 columns (from the m16n8k16 B layout)."""
    if j < 0 or 8 * (j + 2) > n_cols:
        raise ValueError(f"n-blocks {j} and {j + 1} do not fit in {n_cols} columns")
    one = tiles.mma_b_row_major()
    origins = tuple((r, c + 8 * (j + p)) for p in (0, 1) for r, c in one.origins)
    return tiles.Placement(f"B n-blocks {j},{j + 1}", origins, one.rows, n_cols,
                           f"B (16x{n_cols}) stored row-major, n-blocks {j} and {j + 1}")


def _pair_task(j: int, n_cols: int, base: int, stride: int) -> AddressTask:
    return AddressTask(b_pair_placement(j, n_cols), base, stride, (j, base, stride), trans=True,
                       label=f".x4.trans, n-blocks {j} and {j + 1} of a 16x{n_cols} B, base "
                             f"{base}, row stride {stride} B")


def _pair_hidden(rng: np.random.Generator) -> list[AddressTask]:
    out = []
    for n_cols in (16, 32, 64, 128):
        for _ in range(3):
            j = int(rng.integers(0, n_cols // 8 - 1))
            base, stride = cases.random_tile_params(rng, b_pair_placement(j, n_cols))
            out.append(_pair_task(j, n_cols, base, stride))
    return out


b_pair_rows = AddressExercise(
    key="mma.b_pair_rows",
    title="ldmatrix .x4.trans: two n-blocks of a row-major B",
    arg_names=("lane", "j", "base", "stride"),
    visible=lambda: [_pair_task(0, 16, 0, 32), _pair_task(1, 32, 256, 80),
                     _pair_task(2, 32, 1024, 64)],
    hidden_cases=_pair_hidden,
    mistakes=(
        (lambda lane, j, base, stride: base + (lane % 16) * stride + (lane // 16) * 16,
         "your addresses ignore j: n-block j starts at column 8j, which is 16 * j bytes to the "
         "right of the tile's start"),
        (lambda lane, j, base, stride: base + (lane % 16) * stride + (j + lane // 16) * 8,
         "a block of 8 columns is 8 elements = 16 bytes wide: addresses count bytes"),
        (lambda lane, j, base, stride: base + (lane % 8) * stride + (j + lane // 8) * 16,
         "you put the four matrices side by side; matrices 0 and 1 are k = 0..7 and k = 8..15 "
         "of the same 8 columns, so lanes 8-15 point 8 rows further down"),
        (lambda lane, j, base, stride: base + (lane % 16) * stride + (2 * j + lane // 16) * 16,
         "j counts blocks of 8 columns (16 bytes each), and the pair is blocks j and j + 1: "
         "add 16 * j, not 32 * j"),
    ),
    hints=(
        "Matrices 0 and 1 are B's b0 and b1 for columns 8j..8j+7: stored rows k = 0..15 "
        "starting at column 8j. Matrices 2 and 3: the same rows at column 8(j + 1).",
        "Lanes 0-15 point at rows 0-15 (one row each); lanes 16-31 at the same rows, one block "
        "to the right.",
    ),
)


def b_pair_table(fn: Callable | None, j: int = 1, n_cols: int = 32, base: int = 0,
                 stride: int = 64) -> render.Html:
    """Per-lane table for :data:`b_pair_rows`: the address each lane must give, the stored row
    it names, and ``fn``'s address with a verdict (red where it differs)."""
    place = b_pair_placement(j, n_cols)
    tile = place.tile(base, stride)
    want = place.expected_addresses(tile)
    if fn is not None:
        try:
            fn(0, j, base, stride)
        except NotImplementedError:
            fn = None
        except Exception:  # reported per lane below
            pass
    rows = []
    for lane in range(layouts.WARP_SIZE):
        m, r = layouts.address_role(lane, place.num)
        k, c = place.row_start(m, r)
        row = {"lane": lane, "address": int(want[lane]), "role":
               f"matrix {m}: row k={k}, columns {c}-{c + 7}"}
        if fn is not None:
            try:
                v = fn(lane, j, base, stride)
            except NotImplementedError:
                v = "not implemented"
            except Exception as exc:  # the learner's bug, shown in the table
                v = f"{type(exc).__name__}"
            row["yours"] = v
            ok = isinstance(v, (int, np.integer)) and int(v) == int(want[lane])
            row["status"] = "ok" if ok else "wrong"
            row["wrong"] = not ok
        rows.append(row)
    cols = [("lane", "lane"), ("address", "address"), ("role", "gives")]
    if fn is not None:
        cols += [("yours", "your formula"), ("status", "")]
    return render.address_table_html(
        rows, columns=cols, title=f"ldmatrix.x4.trans: n-blocks {j}, {j + 1} of a 16x{n_cols} "
                                  f"B, base {base}, row stride {stride} B")


# ---------------------------------------------------------------------------------------------
# 6. Kernel: a warp computes one 16x8 tile, D = A*B + C
# ---------------------------------------------------------------------------------------------

TILE_KERNEL_NAME = "tile_mma"
_TILE_FORM = _F32
#: What D holds before the kernel runs: a cell still holding it was never written.
UNWRITTEN = np.uint32(0x7FBADBAD)


def tile_inputs(seed: int, lo: int = -4, hi: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Small-integer A (16x16 f16), B (16x8 f16) and C (16x8 f32): every partial sum is exact,
    so any GPU and the emulator agree bit for bit."""
    rng = np.random.default_rng(seed)
    A = rng.integers(lo, hi + 1, (16, 16)).astype(np.float16)
    B = rng.integers(lo, hi + 1, (16, 8)).astype(np.float16)
    C = rng.integers(-20, 21, (16, 8)).astype(np.float32)
    return A, B, C


def _tile_smem(A, B, lda: int, ldb: int) -> np.ndarray:
    """The kernel's shared memory (bytes): A in 16 rows of ``lda`` elements, then B in 16 rows
    of ``ldb``."""
    smem = np.zeros(16 * lda + 16 * ldb, dtype=np.uint16)
    smem[: 16 * lda].reshape(16, lda)[:, :16] = np.asarray(A, np.float16).view(np.uint16)
    smem[16 * lda:].reshape(16, ldb)[:, :8] = np.asarray(B, np.float16).view(np.uint16)
    return smem.view(np.uint8)


def _tile_operands(A, B, lda: int, ldb: int, b_trans: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """A and B staged in shared memory as the kernel stages them, loaded with the emulator's
    ldmatrix (A: .x4, B: .x2 with or without .trans) at the addresses the placements give."""
    mem = _tile_smem(A, B, lda, ldb)
    pa, pb = tiles.mma_a(), tiles.mma_b_row_major()
    ra = emulator.ldmatrix(mem, pa.expected_addresses(pa.tile(0, 2 * lda)), num=4)
    b_addrs = pb.expected_addresses(pb.tile(32 * lda, 2 * ldb))
    rb = emulator.ldmatrix(mem, b_addrs, num=2, trans=b_trans)
    return ra, rb


def _d_bits(ra, rb, C) -> np.ndarray:
    f = layouts.mma_form(*_TILE_FORM)
    rc = emulator.matrices_to_fragment(element_bits(C, "f32")[None], f.c)
    d = emulator.mma(f.shape, ra, rb, rc, atype=f.atype, btype=f.btype, ctype=f.ctype,
                     dtype=f.dtype)
    return emulator.fragment_to_matrices(d, f.d)[0]


def tile_expected(A, B, C, lda: int = 16, ldb: int = 8) -> np.ndarray:
    """The D bits (16 x 8 ``uint32``, row-major) of ldmatrix -> mma -> store, by the emulator."""
    ra, rb = _tile_operands(A, B, lda, ldb)
    return _d_bits(ra, rb, C)


def _load_suspects(mem, place: tiles.Placement, base: int, ld: int, name: str,
                   num: int, trans: bool) -> list[tuple[np.ndarray | None, str]]:
    """Registers a wrong address formula of one operand loads, with its cause: the address
    mistakes of :func:`diagnosis.address_suspects` (a row stride written as the tile's width
    among them)."""
    out = [(a, f"{name}: {c}") for a, c in diagnosis.address_suspects(place, base, 2 * ld,
                                                                        f"ld{name[0].lower()}")]
    regs = []
    for addrs, cause in out:
        try:
            regs.append((emulator.ldmatrix(mem, addrs, num=num, trans=trans), cause))
        except emulator.EmulatorError:
            continue
    return regs


def _stored_d(right: np.ndarray, place: Callable[[int, int], int | None]
              ) -> tuple[np.ndarray, Callable[[int, int], str | None]]:
    """D as a kernel leaves it that stores lane l's register ``j`` at flat index
    ``place(l, j)`` of d (``None``: not stored; later registers overwrite earlier ones), and
    which lane and register each cell's value came from."""
    form = layouts.mma_form(*_TILE_FORM)
    out = np.full(right.size, UNWRITTEN, dtype=np.uint32)
    came = {}
    for lane in range(layouts.WARP_SIZE):
        for j in range(form.d.regs):
            at = place(lane, j)
            if at is None:
                continue
            _, r, c = form.d.element(lane, j, 0)
            out[at] = right[r, c]
            came[at] = f"lane {lane}'s d{j}"
    return out.reshape(right.shape), lambda r, c: came.get(r * right.shape[1] + c)


def _d_place(lane: int, j: int) -> tuple[int, int]:
    _, r, c = layouts.mma_form(*_TILE_FORM).d.element(lane, j, 0)
    return r, c


def _reg_order(perm: Sequence[int], name: str) -> str:
    """``perm`` (register ``perm[j]`` where register ``j`` belongs) in words: pairs exchanged,
    else each register's place."""
    moved = [j for j, p in enumerate(perm) if p != j]
    if all(perm[perm[j]] == j for j in moved):
        return ", ".join(f"{name}{j} and {name}{perm[j]} exchanged" for j in moved
                         if j < perm[j])
    return ", ".join(f"{name}{perm[j]} in {name}{j}'s place" for j in moved)


def _tile_mistakes(A, B, C, lda: int, ldb: int) -> list[diagnosis.Suspect]:
    """Whole-output results of the usual mistakes, each with what to change (``{proof}``: the
    cell, lane and register that show it). Computed with the emulator from the layouts: the
    operands' loads and register orders, C read wrong, D stored to the wrong places."""
    ra, rb = _tile_operands(A, B, lda, ldb)
    _, rb_plain = _tile_operands(A, B, lda, ldb, b_trans=False)
    mem = _tile_smem(A, B, lda, ldb)
    right = _d_bits(ra, rb, C)
    S = diagnosis.Suspect
    a_loads = _load_suspects(mem, tiles.mma_a(), 0, lda, "A", 4, False)
    b_loads = _load_suspects(mem, tiles.mma_b_row_major(), 32 * lda, ldb, "B", 2, True)
    first = [
        S(_d_bits(ra, rb_plain, C),
          "your D is what B loaded without .trans gives: B is stored row-major (a row per k), "
          "mma wants each lane to hold a column pair, so the load needs ldmatrix .x2.trans "
          "{proof}"),
        S(_d_bits(ra[:, [0, 2, 1, 3]], rb, C),
          "your D is what A's registers 1 and 2 exchanged give: a1 must hold the lower-left "
          "block (rows 8-15, k 0-7) and a2 the upper-right one, so lanes 8-15 point at rows "
          "8-15 and lanes 16-31 at columns 8-15 {proof}"),
        S(_d_bits(np.concatenate([rb, ra[:, :2]], axis=1), ra[:, 2:], C),
          "your D is what the mma gives with A's and B's registers exchanged in its operand "
          "list: the order is {d0..d3}, {a0..a3}, {b0, b1}, {c0..c3}; B's registers went where "
          "A's belong {proof}"),
        S(_d_bits(ra, rb, np.zeros_like(C)),
          "your D is A*B alone: C was never added. The accumulator rc must hold C's values "
          "(c0, c1 from row g, c2, c3 from row g + 8) when the mma runs; one left unset is "
          "zero on the CPU model and garbage on a GPU {proof}"),
        S(_d_bits(ra, rb, np.concatenate([C[:8], C[:8]])),
          "rows 8-15 of D added rows 0-7 of C: c2, c3 come from row g + 8 of C, not row g "
          "{proof}"),
        S(_d_bits(ra, rb, np.ascontiguousarray(C).ravel().reshape(C.shape[1], -1).T),
          "your D added C read column-major: C is row-major 16 x 8, so c[i] is "
          "c[row * 8 + col] (row g or g + 8, column 2t or 2t + 1), not c[col * 16 + row] "
          "{proof}"),
    ]
    stores = [
        (lambda l, j: _d_place(l, j)[0] % 8 * 8 + _d_place(l, j)[1],
         "rows 8-15 of D were never written and rows 0-7 hold their values: d2, d3 belong "
         "in row g + 8 (g = lane / 4), d0, d1 in row g {proof}"),
        (lambda l, j: (_d_place(l, j)[0] + 8) % 16 * 8 + _d_place(l, j)[1],
         "rows 0-7 and 8-15 of D are exchanged: d0, d1 are row g = lane / 4 and d2, d3 row "
         "g + 8 {proof}"),
        (lambda l, j: _d_place(l, j)[1] * 16 + _d_place(l, j)[0],
         "D came out column-major: store d at row * 8 + col {proof}"),
    ]
    for perm in itertools.permutations(range(4)):
        if list(perm) not in ([0, 1, 2, 3], [2, 3, 0, 1]):
            inv = np.argsort(perm)
            stores.append((lambda l, j, q=inv: _d_place(l, int(q[j]))[0] * 8
                           + _d_place(l, int(q[j]))[1],
                           f"your d has rd's registers in the wrong places ({_reg_order(perm, 'd')}): "
                           "d0, d1 go to row g, columns 2t and 2t + 1, d2, d3 to row g + 8, "
                           "the same columns (g = lane / 4, t = lane % 4) {proof}"))
    moved = []
    for place, cause in stores:
        tile, source = _stored_d(right, place)
        moved.append(S(tile, cause, source))
    # b0, b1 exchanged gives the product of A with its k halves exchanged (a0, a1 with a2, a3)
    regs = [S(_d_bits(ra, rb[:, [1, 0]], C),
              "your D is what b0 and b1 exchanged give (or, the same product, A's k halves: "
              "a0, a1 with a2, a3): b0 holds k 0-7 (lanes 0-7 point at B's rows 0-7), b1 k "
              "8-15, in that order in the mma's operand list {proof}")]
    regs += [S(_d_bits(ra[:, list(p)], rb, C),
               f"your D is what A's registers in the wrong order give ({_reg_order(p, 'a')}): "
               "the mma reads a0 = rows 0-7/k 0-7, a1 = rows 8-15/k 0-7, a2 = rows 0-7/k 8-15, "
               "a3 = rows 8-15/k 8-15 {proof}")
             for p in itertools.permutations(range(4))
             if list(p) not in ([0, 1, 2, 3], [0, 2, 1, 3], [2, 3, 0, 1])]
    regs += [S(_d_bits(ra, rb, emulator.fragment_to_matrices(
                   emulator.matrices_to_fragment(element_bits(C, "f32")[None],
                                                 layouts.mma_form(*_TILE_FORM).c)[:, list(p)],
                   layouts.mma_form(*_TILE_FORM).c)[0].view(np.float32)),
               f"your D added C's registers in the wrong order ({_reg_order(p, 'c')}): c0, c1 "
               "are row g, columns 2t and 2t + 1 of C, c2, c3 row g + 8 {proof}")
             for p in itertools.permutations(range(4)) if list(p) != [0, 1, 2, 3]]
    loads = [*(S(_d_bits(r, rb, C), cause) for r, cause in a_loads),
             *(S(_d_bits(ra, r, C), cause) for r, cause in b_loads)]
    return first + moved + loads + regs


def tile_run(seed: int, lda: int, ldb: int, label: str) -> KernelRun:
    A, B, C = tile_inputs(seed)
    return TileRun(label=f"{label}, A row stride {lda}, B row stride {ldb} elements",
                   args=[A.view(np.uint16).ravel(), B.view(np.uint16).ravel(), C.ravel(),
                         np.int32(lda), np.int32(ldb),
                         np.full(128, UNWRITTEN, dtype=np.uint32).view(np.float32)],
                   out_index=5, expected=tile_expected(A, B, C, lda, ldb),
                   shared_mem=(16 * lda + 16 * ldb) * 2, elem_bits=32,
                   mistakes=diagnosis.Deferred(lambda: _tile_mistakes(A, B, C, lda, ldb)))


@dataclass
class TileRun(KernelRun):
    """A launch whose output is D (16 x 8 f32, row-major), with the outputs of known mistakes."""

    mistakes: list = field(default_factory=list)


def _cell_text(bits: int) -> str:
    if np.uint32(bits) == UNWRITTEN:
        return "nothing (never written)"
    return f"{np.uint32(bits).view(np.float32).item():g}"


def compare_tile(got_bits: np.ndarray, run: TileRun, name: str, device: str = "") -> CheckResult:
    """Compare a kernel's D with the emulator's and recognise a known mistake from the whole
    output. Each wrong cell says which lane and register its right value comes from, and, when
    the mistake was recognised and it moves values, which lane and register the wrong one came
    from."""
    form = layouts.mma_form(*_TILE_FORM)
    got = np.asarray(got_bits, dtype=np.uint32).reshape(16, 8)
    exp = np.asarray(run.expected, dtype=np.uint32)
    on = f" on {device}" if device else ""
    if np.array_equal(got, exp):
        return CheckResult(name, True, 1.0, f"all 128 elements of D right{on}")
    hit = diagnosis.first_match(got, run.mistakes)
    diffs, lanes, regs = [], set(), set()
    for r, c in zip(*np.nonzero(got != exp)):
        lane, reg, _ = form.d.owner(0, int(r), int(c))
        lanes.add(lane)
        regs.add(reg)
        src = hit.source(int(r), int(c)) if hit is not None and hit.source else None
        diffs.append(LaneDiff(-1, _cell_text(got[r, c]) + (f" (from {src})" if src else ""),
                              f"{_cell_text(exp[r, c])} (from lane {lane}'s d{reg})",
                              where=f"D[{r}][{c}]"))
    first = diffs[0]
    proof = f"{first.where}: expected {first.expected}, got {first.got}"
    cause = diagnosis.with_proof(hit.cause, proof) if hit else ""
    advice = [cause] if cause else []
    never = sorted({int(r) for r in np.nonzero((got == UNWRITTEN).all(axis=1))[0]})
    if not advice:
        if np.all(got == UNWRITTEN):
            advice.append("nothing was written to d: store rd[0..3] at the end")
        elif never:
            advice.append(f"rows {number_runs(never)} of D were never written ({proof})")
        elif len(regs) < 4:
            advice.append(f"only cells held in d{', d'.join(str(x) for x in sorted(regs))} are "
                          "wrong: check where those registers go (d0, d1: row g, columns 2t, "
                          f"2t+1; d2, d3: row g + 8) ({proof})")
    n = len(diffs)
    return CheckResult(name, False, 1 - n / 128, f"{n} of 128 elements of D wrong ({run.label})"
                       f"{on}", diffs=diffs, advice=advice, wrong_lanes=sorted(lanes),
                       details={"cause": cause, "diff_unit": "wrong cells" + (
                           f" (rows {number_runs(never)} never written)" if never else "")})


@dataclass(repr=False)
class TileKernelExercise(KernelExercise):
    """A kernel that writes a whole D tile; checked cell by cell against the emulator."""

    def run_case(self, answer: str, run) -> CheckResult:
        res = launch_for_check(answer, self.kernel_name, run, self.title, self.backend)
        if isinstance(res, CheckResult):
            return res
        result = compare_tile(np.asarray(res.outputs[run.out_index]).view(np.uint32), run,
                              self.title, res.device)
        result.details.update(backend=res.backend, device=res.device)
        return result


tile_kernel = TileKernelExercise(
    key="mma.tile_kernel",
    title="kernel: one warp computes a 16x8 tile (ldmatrix -> mma -> store)",
    kernel_name=TILE_KERNEL_NAME,
    visible=lambda: [tile_run(1, 16, 8, "tile 1"), tile_run(4, 56, 40, "tile 4")],
    hidden_cases=lambda rng: [tile_run(int(rng.integers(2, 1 << 30)), 24, 16, "tile 2"),
                              tile_run(int(rng.integers(2, 1 << 30)), 40, 24, "tile 3")],
    advice_for=(
        (lambda src: ".trans" not in src and "x2_trans" not in src and "<true>" not in src,
         "B is stored row-major in sb: its ldmatrix needs .trans"),
    ),
    hints=(
        "A: ldmatrix.x4 with lane l pointing at &sa[(l % 16) * lda + (l / 16) * 8]. B: "
        "ldmatrix.x2.trans with lane l pointing at &sb[(l % 16) * ldb].",
        "C and D: with g = lane / 4, t = lane % 4, c[0], c[1] are C[g][2t], C[g][2t+1] and "
        "c[2], c[3] the same columns of row g + 8 (C and d are row-major 16 x 8).",
        "ptxlab::mma_m16n8k16_f32_f16_f16_f32(rd, ra, rb, rc); then store rd[i] where rc[i] "
        "came from.",
    ),
)

def show_tile(source: str, seed: int = 1, lda: int = 16, ldb: int = 8) -> render.Html:
    """Run a tile kernel once and draw its D coloured by the lane whose registers held each
    element, red where it differs from numpy's ``A @ B + C``. Returns a short message instead
    when the source is unfinished or does not run."""
    from ...run import backends

    if checks.is_unfinished_source(source):
        return render.Html("<i>the kernel is not written yet</i>")
    run = tile_run(seed, lda, ldb, f"tile {seed}")
    A, B, C = tile_inputs(seed)
    try:
        res = backends.launch(source, TILE_KERNEL_NAME, grid=run.grid, block=run.block,
                              args=run.args, shared_mem=run.shared_mem)
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0]
        return render.Html(f"<i>the kernel did not run: {type(exc).__name__}: "
                           f"{html.escape(first)}</i>")
    D = np.asarray(res.outputs[run.out_index], dtype=np.float32).reshape(16, 8)
    want = A.astype(np.float32) @ B.astype(np.float32) + C
    wrong = D.view(np.uint32) != want.view(np.uint32)
    form = layouts.mma_form(*_TILE_FORM)
    verdict = "equal to numpy's A @ B + C" if not wrong.any() else \
        f"{int(wrong.sum())} of 128 elements differ from numpy's A @ B + C (red)"
    return render.side_by_side(
        render.matrix_html(D, form.d.owners[0, ..., 0], wrong=wrong, expected=want,
                           title=f"D from your kernel on {res.device}: {verdict}"),
        render.legend_html(range(0, 32, 4)))


# ---------------------------------------------------------------------------------------------
# 7. Spot the bug: A's blocks loaded in reading order
# ---------------------------------------------------------------------------------------------

swapped_a_blocks = ChoiceExercise(
    key="mma.swapped_a_blocks",
    title="spot the bug: A's blocks loaded in reading order",
    correct="b",
    explanations={
        "a": "mma never looks at where a register came from: a1 is always taken as rows 8-15, "
             "k 0-7 and a2 as rows 0-7, k 8-15",
        "b": "the load puts the upper-right block in a1 and the lower-left one in a2; the mma "
             "reads them the other way round, so it multiplies a matrix whose off-diagonal "
             "blocks are exchanged. Nothing faults: D is silently wrong",
        "c": "a transpose would also turn every 8x8 block around; here each block arrives "
             "intact, just in the wrong register",
        "d": "every address is a valid, 16-byte aligned row start inside the tile: nothing "
             "faults",
    },
    hints=("Which block does each group of 8 lanes point at, and so which register receives "
           "it?",
           "The mma reads a0 = rows 0-7/k 0-7, a1 = rows 8-15/k 0-7, a2 = rows 0-7/k 8-15, "
           "a3 = rows 8-15/k 8-15."),
)
