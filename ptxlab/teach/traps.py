"""The trap clinic: mistakes that articles on these instructions make or invite, each as a small
kernel that runs on the CPU model, beside its fix.

Every trap has a *bad* and a *fixed* kernel. Running one gives an outcome the learner can see:
``refused`` (the compiler or the model rejects it, with the message), ``fault`` (it compiles but
the model stops at the instruction, naming the lane), ``wrong`` (it runs and some lanes get the
wrong values) or ``right``. The expected values come from the layouts, never from a run. What
ptxas 13 says about each bad kernel was measured (``tests/teach/test_traps.py`` re-measures it where
``nvcc`` is installed).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..model import emulator, layouts, matrix_forms
from ..run import backends
from . import render

BLACKWELL_OPTIONS = ("--gpu-architecture=compute_100a",)


def _pack16(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return (lo.astype(np.uint32) & 0xFFFF) | ((hi.astype(np.uint32) & 0xFFFF) << 16)


def _expected_m8n8(num: int, value: Callable[[int, int, int], int]) -> np.ndarray:
    """``out[num*lane + reg]``: what each lane's registers hold after ldmatrix.m8n8.x{num}, where
    ``value(matrix, row, col)`` is the 16-bit value stored at that element."""
    frag = layouts.ldmatrix_fragment(num, False)
    out = np.zeros(32 * num, dtype=np.uint32)
    for lane in range(32):
        for reg in range(num):
            halves = [value(*frag.element(lane, reg, e)) for e in range(2)]
            out[num * lane + reg] = _pack16(np.uint32(halves[0]), np.uint32(halves[1]))
    return out


def _expected_m16n16_b8() -> np.ndarray:
    """``out[2*lane + reg]`` after ldmatrix.m16n16.x1.trans.b8 of a 16x16 byte tile holding
    ``16*row + col`` (from the model's byte map)."""
    bmap = matrix_forms.byte_map(matrix_forms.form("ldmatrix", shape="m16n16", num=1, trans=True,
                                                   dtype="b8"))
    out = np.zeros(64, dtype=np.uint32)
    for lane in range(32):
        for reg in range(2):
            word = 0
            for b in range(4):
                _, row, col = bmap[lane, reg, b]
                word |= ((16 * int(row) + int(col)) & 0xFF) << (8 * b)
            out[2 * lane + reg] = word
    return out


_MMA_A = (np.arange(32 * 8) % 5).astype(np.float16).view(np.uint16)     # small exact values
_MMA_B = (np.arange(32 * 4) % 3).astype(np.float16).view(np.uint16)


def _mma_inputs() -> list[np.ndarray]:
    a = _pack16(_MMA_A[0::2], _MMA_A[1::2])          # (32*4,) registers, lane-major
    b = _pack16(_MMA_B[0::2], _MMA_B[1::2])          # (32*2,)
    return [np.zeros(32 * 4, dtype=np.float32), a, b]


def _expected_mma() -> np.ndarray:
    _, a, b = _mma_inputs()
    d = emulator.mma("m16n8k16", a.reshape(32, 4), b.reshape(32, 2),
                     np.zeros((32, 4), dtype=np.uint32), atype="f16", btype="f16", ctype="f32",
                     dtype="f32")
    return np.asarray(d, dtype=np.uint32).view(np.float32).reshape(-1)


@dataclass(frozen=True)
class Trap:
    """One mistake, the kernel that shows it, and the kernel that fixes it."""

    key: str
    title: str
    claim: str            # what the article says or invites (in our words)
    truth: str            # what the PTX ISA and ptxas say
    ptxas: str | None     # ptxas 13's message for the bad kernel (None: it compiles)
    bad: str
    fixed: str
    inputs: Callable[[], list[np.ndarray]]
    expected: Callable[[], np.ndarray]
    options: tuple[str, ...] = ()
    ptxas_arch: str = "sm_90"

    def source(self, variant: str) -> str:
        if variant not in ("bad", "fixed"):
            raise ValueError(f"variant is 'bad' or 'fixed', got {variant!r}")
        return self.bad if variant == "bad" else self.fixed


@dataclass
class TrapRun:
    """What running one variant of a trap gave."""

    trap: Trap
    variant: str
    outcome: str          # "refused" | "fault" | "wrong" | "right"
    message: str
    backend: str = ""
    wrong_lanes: list[int] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.trap.key} ({self.variant}): {self.outcome}: {self.message}"


def run_trap(trap: Trap | str, variant: str = "bad", backend: str = "cpu") -> TrapRun:
    """Compile and run one variant of a trap (on the CPU model unless told otherwise) and say
    what happened; a refused or faulting kernel is an outcome here, not an exception."""
    t = TRAPS[trap] if isinstance(trap, str) else trap
    source = t.source(variant)
    args = t.inputs()
    try:
        result = backends.launch(source, "trap", args=args, backend=backend, options=t.options)
    except backends.CompileError as exc:
        return TrapRun(t, variant, "refused", _first_line(str(exc)), backend)
    except backends.KernelFault as exc:
        return TrapRun(t, variant, "fault", _first_line(str(exc)), backend)
    got = np.asarray(result.outputs[0])
    want = t.expected()
    per = got.size // 32
    bad = np.nonzero((got.reshape(32, per) != want.reshape(32, per)).any(axis=1))[0]
    if len(bad):
        lane = int(bad[0])
        msg = (f"{len(bad)} of 32 lanes got wrong values; lane {lane}: expected "
               f"{_words(want.reshape(32, per)[lane])}, got {_words(got.reshape(32, per)[lane])}")
        return TrapRun(t, variant, "wrong", msg, result.backend, [int(x) for x in bad])
    return TrapRun(t, variant, "right", f"all 32 lanes hold what the layout says "
                                        f"({result.device})", result.backend)


def _words(row: np.ndarray) -> str:
    """A lane's output words: floats as numbers, registers as their 16-bit halves (low, high),
    which in these kernels are the stored elements' indices."""
    if row.dtype == np.float32:
        return "[" + ", ".join(f"{float(x):g}" for x in row) + "]"
    return "[" + ", ".join(f"({int(x) & 0xFFFF}, {int(x) >> 16})" for x in row) + "] as halves"


def _first_line(text: str) -> str:
    """The error itself without the PTX listing the backends append."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.startswith("  ")][:2]
    return " ".join(keep) if keep else text.strip()


def trap_html(trap: Trap | str, runs: tuple[TrapRun, TrapRun] | None = None) -> render.Html:
    """One trap for the notebook: the claim, the truth, both kernels' differing lines and what
    running each gave on the CPU model."""
    t = TRAPS[trap] if isinstance(trap, str) else trap
    runs = runs or (run_trap(t, "bad"), run_trap(t, "fixed"))
    colour = {"right": "#1a7f37", "wrong": "#c00000", "fault": "#c00000", "refused": "#c00000"}
    parts = [f"<h4 style='margin:6px 0'>{render.escape(t.title)}</h4>",
             f"<p><b>The trap:</b> {render.escape(t.claim)}<br><b>In fact:</b> "
             f"{render.escape(t.truth)}</p>"]
    if t.ptxas:
        parts.append(f"<p><b>ptxas 13 ({t.ptxas_arch}):</b> <code>{render.escape(t.ptxas)}</code></p>")
    for run in runs:
        lines = _changed_lines(t, run.variant)
        parts.append(
            f"<div><b>{run.variant}</b>: <pre style='margin:2px 0'>{render.escape(lines)}</pre>"
            f"<span style='color:{colour[run.outcome]}'><b>{run.outcome}</b>: "
            f"{render.escape(run.message)}</span></div>")
    return render.Html("\n".join(parts))


def _changed_lines(t: Trap, variant: str) -> str:
    mine = t.source(variant).splitlines()
    other = set(t.source("fixed" if variant == "bad" else "bad").splitlines())
    return "\n".join(ln.strip() for ln in mine if ln not in other)


# ---------------------------------------------------------------------------------------------
# The traps
# ---------------------------------------------------------------------------------------------

_LOAD_TWO_REGISTERS = r"""
extern "C" __global__ void trap(unsigned* out) {
  // NOTE
  __shared__ __align__(16) ELEM smem[COUNT];
  for (int i = threadIdx.x; i < COUNT; i += 32) smem[i] = i;
  __syncthreads();
  const unsigned lane = threadIdx.x;
  ADDRESS
  unsigned r0, r1;
  asm volatile("ldmatrix.sync.aligned.FORM {%0, %1}, [%2];\n"
               : "=r"(r0), "=r"(r1) : "r"(addr));
  out[2 * lane] = r0;
  out[2 * lane + 1] = r1;
}
"""


def _load_two_registers(note: str, elem: str, count: str, address: str, form: str) -> str:
    """A kernel where the warp fills a shared tile of ``count`` ``elem`` values (value = index),
    each lane computes ``addr`` (the ``address`` line), one ``ldmatrix.sync.aligned.<form>``
    loads two registers per lane and lane t writes them to out[2t], out[2t + 1]."""
    return (_LOAD_TWO_REGISTERS.replace("NOTE", note).replace("ELEM", elem)
            .replace("COUNT", count).replace("FORM", form).replace("ADDRESS", address))


#: An 8x16 tile loaded with .x2; ADDRESS is the trap's address line.
_X2_TILE = _load_two_registers(
    "an 8 x 16 tile of 16-bit values, row-major: element (r, c) at smem[16*r + c], value 16r+c",
    "unsigned short", "8 * 16",
    "// matrix 0 = columns 0-7, matrix 1 = columns 8-15\n  ADDRESS", "m8n8.x2.shared.b16")

#: Two 8x8 tiles side by side in rows of 24 elements, the second at column TILE.
_X2_PADDED = _load_two_registers(
    "rows of 24 16-bit values (value = index); tile 0 at columns 0-7, tile 1 at column TILE",
    "unsigned short", "8 * 24",
    "unsigned addr = (unsigned)__cvta_generic_to_shared(smem + (lane % 8) * 24\n"
    "                                                     + ((lane / 8) % 2) * TILE);",
    "m8n8.x2.shared.b16")
#: Where the fixed kernel of the tile-stride trap puts its second tile (elements).
TILE_FIXED = 16

_X1 = r"""
extern "C" __global__ void trap(unsigned* out) {
  __shared__ __align__(16) unsigned short smem[SIZE];
  for (int i = threadIdx.x; i < 64; i += 32) smem[OFFSET + i] = i;
  __syncthreads();
  const unsigned lane = threadIdx.x;
  ADDRESS
  unsigned r;
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.QUALS {%0}, [%1];\n" : "=r"(r) : "r"(addr));
  out[lane] = r;
}
"""


def _x1(quals: str = "shared.b16", offset: int = 0, address: str | None = None) -> str:
    address = address or (f"unsigned addr = (unsigned)__cvta_generic_to_shared(smem + {offset} "
                          f"+ (lane % 8) * 8);")
    return (_X1.replace("QUALS", quals).replace("SIZE", str(offset + 64))
            .replace("OFFSET", str(offset)).replace("ADDRESS", address))


_REG_SCOPE = r"""
__device__ __forceinline__ unsigned shared_address(const void* p) {
  unsigned a;
  ASM
  return a;
}

extern "C" __global__ void trap(unsigned* out) {
  __shared__ unsigned short smem[128];
  // two calls: the asm string is pasted into the kernel twice
  unsigned a = shared_address(smem + threadIdx.x);
  unsigned b = shared_address(smem + 64 + threadIdx.x);
  out[threadIdx.x] = b - a;    // 64 halves further on: 128 bytes
}
"""

_ASM_UNSCOPED = (r'asm volatile(".reg .u64 smem_ptr64;\n\tcvta.to.shared.u64 smem_ptr64, %1;\n\t"'
                 r'"cvt.u32.u64 %0, smem_ptr64;\n" : "=r"(a) : "l"(p));')
_ASM_SCOPED = (r'asm volatile("{\n\t.reg .u64 smem_ptr64;\n\tcvta.to.shared.u64 smem_ptr64, %1;\n\t"'
               r'"cvt.u32.u64 %0, smem_ptr64;\n\t}\n" : "=r"(a) : "l"(p));')

#: A 16x16 byte tile loaded with ldmatrix.m16n16.x1.trans; TYPE is the trap's element type.
_M16N16 = _load_two_registers(
    "a 16 x 16 tile of bytes, row-major: byte (r, c) at smem[16*r + c], value 16r+c",
    "unsigned char", "16 * 16",
    "unsigned addr = (unsigned)__cvta_generic_to_shared(smem + (lane % 16) * 16);",
    "m16n16.x1.trans.shared.TYPE")

_MMA = r"""
extern "C" __global__ void trap(float* out, const unsigned* a, const unsigned* b) {
  const unsigned lane = threadIdx.x;
  CODE
}
"""
_MMA_BAD = r"""double d0, d1, d2, d3, z = 0.0;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f64.f16.f16.f64 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
               : "=d"(d0), "=d"(d1), "=d"(d2), "=d"(d3)
               : "r"(a[4*lane]), "r"(a[4*lane+1]), "r"(a[4*lane+2]), "r"(a[4*lane+3]),
                 "r"(b[2*lane]), "r"(b[2*lane+1]), "d"(z));
  out[4*lane] = d0; out[4*lane+1] = d1; out[4*lane+2] = d2; out[4*lane+3] = d3;"""
_MMA_FIXED = r"""float d0, d1, d2, d3, z = 0.0f;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
               : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
               : "r"(a[4*lane]), "r"(a[4*lane+1]), "r"(a[4*lane+2]), "r"(a[4*lane+3]),
                 "r"(b[2*lane]), "r"(b[2*lane+1]), "f"(z));
  out[4*lane] = d0; out[4*lane+1] = d1; out[4*lane+2] = d2; out[4*lane+3] = d3;"""


def _one(words: int) -> Callable[[], list[np.ndarray]]:
    return lambda: [np.zeros(words, dtype=np.uint32)]


_TRAP_LIST = (
    Trap("stride", "A 16-byte row read with the wrong stride",
         "An article's x2 example stores its two 8x8 matrices one after the other and computes "
         "row addresses as (lane % 8) * 8 halves plus 64 halves per matrix; reused on an 8x16 "
         "tile stored row by row, that formula reads the wrong rows.",
         "Each lane names the start of one 16-byte row; the formula must follow the tile's own "
         "layout: rows 16 halves (32 bytes) apart, matrix 1 starting 8 halves into the row. "
         "ptxlab fit '((4,8),(2,2)):((16,1),(8,64))' '(8,16):(16,1)' prints it.",
         None,
         _X2_TILE.replace("ADDRESS", "unsigned addr = (unsigned)__cvta_generic_to_shared("
                                     "smem + (lane % 8) * 8 + ((lane / 8) % 2) * 64);"),
         _X2_TILE.replace("ADDRESS", "unsigned addr = (unsigned)__cvta_generic_to_shared("
                                     "smem + (lane % 8) * 16 + ((lane / 8) % 2) * 8);"),
         _one(64), lambda: _expected_m8n8(2, lambda m, r, c: 16 * r + 8 * m + c)),
    Trap("dtype", "A data type where ldmatrix wants a bit width",
         "The matrices hold f16 values, so the instruction is written with .f16.",
         "ldmatrix/stmatrix move bits, not numbers: the type is .b16 (or .b8 on sm_100a-class "
         "GPUs). ptxas refuses .f16.",
         "Unexpected instruction types specified for 'ldmatrix'",
         _x1("shared.f16"), _x1("shared.b16"),
         _one(32), lambda: _expected_m8n8(1, lambda m, r, c: 8 * r + c)),
    Trap("mma_f64", "An accumulator type the shape does not have",
         "An article lists .f64, .f32 and .f16 as the D and C types of mma.m16n8k16 with f16 "
         "inputs.",
         "With .f16 inputs, m16n8k16 accumulates in .f16 or .f32 only; .f64 belongs to the f64 "
         "shapes (m8n8k4 and others). ptxas refuses the mix at compile time, and so does the CPU "
         "model, with the same reason.",
         "Unexpected instruction types specified for 'mma'",
         _MMA.replace("CODE", _MMA_BAD), _MMA.replace("CODE", _MMA_FIXED),
         _mma_inputs, _expected_mma),
    Trap("cta", "What ::cta means",
         "An article says the .shared{::cta} qualifier is for thread-block clusters and "
         "distributed shared memory, so one might write .shared::cluster to read a neighbour "
         "block's tile.",
         ".shared::cta is the executing block's own shared memory, exactly what plain .shared "
         "means (PTX ISA 7.8 added the spelling). ldmatrix cannot read another block's shared "
         "memory: ptxas refuses .shared::cluster.",
         "State space incorrect for instruction 'ldmatrix'",
         _x1("shared::cluster.b16"), _x1("shared::cta.b16"),
         _one(32), lambda: _expected_m8n8(1, lambda m, r, c: 8 * r + c)),
    Trap("reg_scope", "A .reg declared in inline asm without { }",
         "An article converts a pointer with asm(\".reg .u64 smem_ptr64; cvta.to.shared.u64 "
         "smem_ptr64, %0;\"): fine once, but the declaration lands in the function's scope.",
         "When the helper is inlined twice the PTX function declares smem_ptr64 twice and "
         "ptxas refuses it; braces give each copy its own scope (or use "
         "__cvta_generic_to_shared).",
         "Duplicate definition of variable 'smem_ptr64'",
         _REG_SCOPE.replace("ASM", _ASM_UNSCOPED), _REG_SCOPE.replace("ASM", _ASM_SCOPED),
         _one(32), lambda: np.full(32, 128, dtype=np.uint32)),
    Trap("misaligned", "A tile that does not start on a 16-byte boundary",
         "The row stride is right (8 halves = 16 bytes), so any starting offset should do.",
         "Every row address must be 16-byte aligned; a tile 4 halves (8 bytes) into the buffer "
         "breaks every row. ptxas cannot see it; the GPU faults or reads garbage; the CPU model "
         "stops and names the lane.",
         None,
         _x1(offset=4), _x1(offset=8),
         _one(32), lambda: _expected_m8n8(1, lambda m, r, c: 8 * r + c)),
    Trap("tile_stride", "Rows aligned, tiles not",
         "A compiler article says its multiple-of-8 checks on the row stride keep every tile "
         "16-byte aligned; so two 8x8 tiles side by side in 24-element rows, the second 12 "
         "elements in, should be fine.",
         "The row stride is not the only stride: every row of every tile is addressed by its "
         "own lane, so the tile stride must be a multiple of 8 elements (16 bytes) as well. "
         "ptxas cannot see it; the CPU model stops at the first misaligned row.",
         None,
         _X2_PADDED.replace("TILE", "12"), _X2_PADDED.replace("TILE", str(TILE_FIXED)),
         _one(64), lambda: _expected_m8n8(2, lambda m, r, c: 24 * r + TILE_FIXED * m + c)),
    Trap("m16n16_b8", "16x16 matrices of 64-bit elements?",
         "The PTX ISA's own example comments call ldmatrix.m16n16 ... .b8 a load of \"16x16 "
         "matrices of 64-bit elements\".",
         "The elements are 8-bit: two 32-bit registers x 32 lanes = 256 bytes = 16 x 16 bytes. "
         "Writing .b64 is refused; .b8 on an sm_100a-class target is the form.",
         "Unexpected instruction types specified for 'ldmatrix'",
         _M16N16.replace("TYPE", "b64"), _M16N16.replace("TYPE", "b8"),
         _one(64), _expected_m16n16_b8, BLACKWELL_OPTIONS, "sm_100a"),
)

TRAPS: dict[str, Trap] = {t.key: t for t in _TRAP_LIST}
