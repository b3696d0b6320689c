"""Exercises of the notebook on the sm_100a-class forms: the row addresses of ldmatrix .m16n16,
which byte each lane receives or stores, which lane gets a packed element, the target/version
gates, and a kernel that runs on the CPU model.

Every expected answer is read from :mod:`ptxlab.model.matrix_forms` (the byte maps and the
gates the emulator and the CPU model use), never written out.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...model import emulator, matrix_forms
from . import cases
from .base import ChoiceExercise, FragmentExercise, FunctionExercise
from .kernel_exercise import KernelExercise, KernelRun

#: Compile options of a kernel using these forms (the CPU model compiles for this target).
BLACKWELL_OPTIONS = ("--gpu-architecture=compute_100a",)


def _form(op: str, shape: str, num: int, dtype: str) -> matrix_forms.MatrixForm:
    return matrix_forms.form(op, shape=shape, num=num, trans=shape != "m8n16", dtype=dtype)


# ---------------------------------------------------------------------------------------------
# 1. Row addresses of ldmatrix.m16n16.x2.trans.b8
# ---------------------------------------------------------------------------------------------

def m16n16_row_address(lane: int, base: int, stride: int, num: int = 2) -> int:
    """The address lane ``lane`` gives to ldmatrix.m16n16.x{num}: a byte tile whose rows start
    ``stride`` bytes apart at ``base``, matrix ``i`` at columns ``16i .. 16i+15`` (lanes whose
    address is not used repeat the lower lanes')."""
    f = _form("ldmatrix", "m16n16", num, "b8")
    m, r = matrix_forms.address_lanes(f)[lane % f.address_lane_count]
    return int(base + r * stride + 16 * m)


def _address_hidden(rng: np.random.Generator) -> list[tuple]:
    return [(lane, int(rng.integers(0, 64)) * 16, int(rng.integers(2, 17)) * 16)
            for lane in range(32) for _ in range(2)]


m16n16_rows = FunctionExercise(
    key="blackwell.m16n16_rows",
    title="ldmatrix.m16n16.x2: the address each lane gives",
    arg_names=("lane", "base", "stride"),
    reference=m16n16_row_address,
    visible=lambda: cases.every_lane(((0, 32), (256, 48))),
    hidden_cases=_address_hidden,
    describe=lambda a: f"lane {a[0]}, base {a[1]}, stride {a[2]}",
    mistakes=(
        (lambda lane, base, stride: base + (lane % 8) * stride + (lane // 8) * 16,
         "an m16n16 matrix has 16 rows: lanes 0-15 give the rows of matrix 0, lanes 16-31 "
         "those of matrix 1 (not 8 lanes per matrix as in m8n8)"),
        (lambda lane, base, stride: base + (lane % 16) * stride + (lane // 16) * 8,
         "matrix 1 starts 16 *bytes* to the right: its 16 columns are 8-bit"),
        (lambda lane, base, stride: base + lane * stride,
         "two matrices side by side: lanes 16-31 name rows 0-15 again, 16 bytes to the right"),
    ),
    hints=(
        "How many rows does one m16n16 matrix have, and so how many lanes give its addresses?",
        "Lane t names row t % 16 of matrix t // 16; matrix 1 sits 16 bytes right of matrix 0.",
    ),
)

# ---------------------------------------------------------------------------------------------
# 2. Which byte of the stored matrix lands in (lane, reg, byte) -- ldmatrix.m16n16 .trans .b8
# ---------------------------------------------------------------------------------------------

received = FragmentExercise(
    key="blackwell.received",
    title="ldmatrix.m16n16.trans.b8: which stored byte is in (lane, reg, byte)",
    arg_names=("lane", "reg", "byte"),
    answer_names=("row", "col"),
    # both .num values in the visible check: a formula right for .x1 only must not pass it
    visible=lambda: [(_form("ldmatrix", "m16n16", n, "b8").fragment, cases.row_col, ())
                     for n in (1, 2)],
    mistakes=(
        (lambda lane, reg, byte: (lane // 4, 4 * (lane % 4) + byte + 8 * (reg % 2)),
         "that is the untransposed picture; .trans is mandatory for m16n16: lane t gets a "
         "*column* of the stored matrix, the four bytes of a register from four rows"),
        (lambda lane, reg, byte: (4 * (lane % 4) + byte, lane // 4),
         "right for r0; the second register of a matrix holds column t // 4 + 8"),
        (lambda lane, reg, byte: (4 * (lane % 4) + byte, lane // 4 + 8 * reg),
         "register 2 (and 3) belong to the second matrix with .x2: column t // 4 + 8 * (reg % 2)"),
    ),
    hints=(
        "With .trans, lane t's register holds part of column t // 4 of the stored matrix.",
        "Byte b of the register comes from row 4 * (t % 4) + b; the matrix's second register is "
        "8 columns further right.",
    ),
)

# ---------------------------------------------------------------------------------------------
# 3. Where stmatrix.m16n8 .trans .b8 writes each register byte
# ---------------------------------------------------------------------------------------------

stored = FragmentExercise(
    key="blackwell.stored",
    title="stmatrix.m16n8.trans.b8: the shared row and byte of (lane, reg, byte)",
    arg_names=("lane", "reg", "byte"),
    answer_names=("row", "col"),
    visible=lambda: [(_form("stmatrix", "m16n8", 1, "b8").fragment, cases.row_col, ())],
    hidden_cases=lambda: [(_form("stmatrix", "m16n8", 4, "b8").fragment, cases.row_col, ())],
    mistakes=(
        (lambda lane, reg, byte: (lane // 4 + 8 * (byte // 2), 2 * (lane % 4) + byte % 2),
         "that is where the byte sits in the 16x8 matrix the registers hold; .trans stores it "
         "transposed: the row and the column trade places"),
        (lambda lane, reg, byte: (2 * (lane % 4) + byte // 2, lane // 4 + 8 * (byte % 2)),
         "bytes 0 and 1 are neighbours in a column of the 16x8 matrix, so after the transpose "
         "they go to neighbouring rows: row 2 * (t % 4) + byte % 2"),
    ),
    hints=(
        "Before the transpose, lane t byte b is element (t // 4 + 8 * (b // 2), 2 * (t % 4) + "
        "b % 2) of the 16x8 matrix (the layout of an mma accumulator, one byte per element).",
        "The store writes the transpose: 8 rows of 16 bytes.",
    ),
)

# ---------------------------------------------------------------------------------------------
# 4. Packed sources: which lane receives element e of row r (ldmatrix.m8n16 ... b4x16_p64)
# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def _m8n16_owner() -> np.ndarray:
    """``owner[row, elem]``: the lane receiving element ``elem`` of row ``row`` (x1), from the
    byte map."""
    bm = matrix_forms.byte_map(_form("ldmatrix", "m8n16", 1, "b4x16_p64"))
    owner = np.full((8, 16), -1, dtype=np.int64)
    for lane in range(32):
        for byte in range(4):
            _, r, c = bm[lane, 0, byte]
            owner[r, c] = lane
    return owner


packed_lane = FunctionExercise(
    key="blackwell.packed_lane",
    title="ldmatrix.m8n16 with 4-bit elements: which lane receives element e of row r",
    arg_names=("row", "elem"),
    reference=lambda row, elem: int(_m8n16_owner()[row, elem]),
    visible=lambda: [(r, e) for r in range(8) for e in range(16)],
    describe=lambda a: f"row {a[0]}, element {a[1]}",
    mistakes=(
        (lambda row, elem: 4 * row + elem // 2,
         "each element is unpacked into a byte of its own: a lane receives 4 elements, not 8"),
        (lambda row, elem: 4 * row + elem // 8,
         "the padding is not in the registers: each 32-bit register holds 4 unpacked elements"),
        (lambda row, elem: 2 * row + elem // 8,
         "four lanes share a row, as in every ldmatrix form"),
    ),
    hints=(
        "A row has 16 elements, unpacked one per byte: 16 bytes, 4 lanes of 4 bytes.",
    ),
)

# ---------------------------------------------------------------------------------------------
# 5. The target / version gates
# ---------------------------------------------------------------------------------------------

GATE_FORM = "ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8"
GATE_OPTIONS = {"a": ("sm_90", "8.6"), "b": ("sm_100", "8.6"), "c": ("sm_100a", "8.6"),
                "d": ("sm_120a", "8.5")}


def gate_verdict(target: str, version: str, instruction: str = GATE_FORM) -> str:
    """What ptxas 13 says of ``instruction`` in a module with this ``.target`` and ``.version``
    (as the CPU model enforces it): ``"accepted"`` or the reason it refuses."""
    try:
        matrix_forms.check_target(matrix_forms.parse_form(instruction), target, version)
    except matrix_forms.FormError as exc:
        return str(exc)
    return "accepted"


def _gate_explanations() -> dict[str, str]:
    return {k: f".target {t}, .version {v}: {gate_verdict(t, v)}"
            for k, (t, v) in GATE_OPTIONS.items()}


def _gate_correct() -> str:
    ok = [k for k, (t, v) in GATE_OPTIONS.items() if gate_verdict(t, v) == "accepted"]
    return ok[0] if len(ok) == 1 else ""


gates = ChoiceExercise(
    key="blackwell.gates",
    title=f"which module compiles {GATE_FORM}?",
    correct=_gate_correct(),
    explanations=_gate_explanations(),
    hints=("Two things must hold: the target has the form, and the PTX ISA version knows it.",
           "The 8-bit forms need an architecture-specific ('a') or family ('f') target of "
           "sm_100 or newer, and .version 8.6 or later."),
)

# ---------------------------------------------------------------------------------------------
# 6. Kernel: load a 16x16 byte tile with ldmatrix.m16n16.x1.trans.b8
# ---------------------------------------------------------------------------------------------

M16N16_KERNEL_NAME = "load_m16n16"


@lru_cache(maxsize=None)
def _m16n16_addresses(sld: int) -> np.ndarray:
    """Every lane's row address of ldmatrix.m16n16.x1 for rows ``sld`` bytes apart
    (read-only, built once per stride)."""
    addresses = np.array([m16n16_row_address(lane, 0, sld, num=1) for lane in range(32)])
    addresses.setflags(write=False)
    return addresses


def m16n16_registers(tile: np.ndarray, sld: int) -> np.ndarray:
    """``(32, 2)``: what ldmatrix.m16n16.x1.trans.b8 gives each lane for a 16x16 byte ``tile``
    staged in shared memory with rows ``sld`` bytes apart (by the emulator)."""
    smem = np.zeros((16, sld), dtype=np.uint8)
    smem[:, :16] = np.asarray(tile, dtype=np.uint8).reshape(16, 16)
    return emulator.ldmatrix(smem.reshape(-1), _m16n16_addresses(sld), num=1, trans=True,
                             shape="m16n16", dtype="b8")


def m16n16_run(sld: int, values: np.ndarray | None = None) -> KernelRun:
    """One launch: the tile (default: byte ``16r + c`` at ``(r, c)``) with rows ``sld`` bytes
    apart; the expected output is the emulator's."""
    tile = (np.arange(256) if values is None else np.asarray(values)).astype(np.uint8)
    return KernelRun(label=f"tile row stride {sld} bytes",
                     args=[tile, np.int32(sld), np.zeros(64, dtype=np.uint32)],
                     out_index=2, expected=m16n16_registers(tile, sld),
                     shared_mem=16 * sld, elem_bits=8, options=BLACKWELL_OPTIONS)


m16n16_kernel = KernelExercise(
    key="blackwell.m16n16_kernel",
    title="kernel: ldmatrix.m16n16.x1.trans.b8 (runs on the CPU model)",
    kernel_name=M16N16_KERNEL_NAME,
    visible=lambda: [m16n16_run(16), m16n16_run(48)],
    hidden_cases=lambda rng: [m16n16_run(16 * int(rng.integers(1, 6)), rng.permutation(256))
                              for _ in range(2)],
    advice_for=(
        (lambda src: "m16n16" not in src,
         "use ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {r0, r1}, [addr]"),
        (lambda src: ".trans" not in src, ".trans is mandatory for m16n16"),
    ),
    hints=(
        "Lane t gives the address of row t % 16: s_tile + (lane % 16) * sld.",
        'asm volatile("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%0, %1}, [%2];\\n" '
        ': "=r"(r0), "=r"(r1) : "r"(addr));',
    ),
)
