"""The reference kernels of ``kernels/reference/`` as test cases: inputs, expected outputs, checks.

Each :class:`ReferenceForm` is one instruction form (``ldmatrix .x4 .trans``, ``mma m16n8k16
f32.f16.f16.f32``...) together with the reference kernel that executes it. This module knows the
kernels' argument conventions (documented at the top of each ``.cu`` file) and nothing about
layouts: inputs are random register bits and random shared-memory images, and the expected
outputs come from :mod:`ptxlab.model.emulator`. The same cases serve three purposes:

* verification against silicon (``measure/gpu/verify_hardware.py``, ``tests/run/test_hardware_gpu.py``);
* the CPU-model-vs-GPU comparison (:func:`kernel_cases`);
* replaying recorded hardware results in CI without a GPU (:func:`replay_vectors`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..model import emulator, layouts
from . import sources
from .backends import KernelCase

__all__ = [
    "ReferenceForm", "FORMS", "form", "case_rng", "MMA_KINDS", "EXACT_KINDS", "SMEM_BYTES",
    "make_inputs", "expected_outputs", "output_index", "compare", "Comparison",
    "kernel_cases", "extract_vectors", "replay_vectors", "vectors_as_kernel_args",
    "ulp_distance", "scaled_error",
]

#: The largest dynamic shared memory a kernel gets without opting in; the verification places
#: rows anywhere in it.
SMEM_BYTES = 48 * 1024
ROW = layouts.ROW_BYTES


@dataclass(frozen=True)
class ReferenceForm:
    """One instruction form and the reference kernel that runs it end to end."""

    family: str                  # "ldmatrix" | "stmatrix" | "movmatrix" | "mma"
    name: str                    # e.g. "ldmatrix.x4.trans", "mma.m16n8k16.f32.f16.f16.f32"
    source_file: str             # under kernels/
    kernel: str
    num: int = 0
    trans: bool = False
    mma: tuple[str, str, str, str, str] | None = None   # (shape, atype, btype, ctype, dtype)

    @property
    def ptx(self) -> str:
        """The instruction as it appears in the emitted PTX."""
        if self.family in ("ldmatrix", "stmatrix"):
            t = ".trans" if self.trans else ""
            return f"{self.family}.sync.aligned.m8n8.x{self.num}{t}.shared.b16"
        if self.family == "movmatrix":
            return "movmatrix.sync.aligned.m8n8.trans.b16"
        return layouts.mma_form(*self.mma).ptx

    @property
    def min_sm(self) -> int:
        if self.family == "stmatrix":
            return 90
        if self.family == "mma":
            shape, atype = self.mma[0], self.mma[1]
            return 75 if (shape, atype) == ("m16n8k8", "f16") else 80
        return 75

    @property
    def kinds(self) -> tuple[str, ...]:
        """The input families generated for this form (see :data:`MMA_KINDS`)."""
        if self.family != "mma":
            return ("random",)
        return MMA_KINDS[self.mma[1]]

    def source(self) -> str:
        return sources.read_kernel(self.source_file)


def _build_forms() -> tuple[ReferenceForm, ...]:
    forms: list[ReferenceForm] = []
    for family in ("ldmatrix", "stmatrix"):
        for num in (1, 2, 4):
            for trans in (False, True):
                t = ".trans" if trans else ""
                forms.append(ReferenceForm(family, f"{family}.x{num}{t}",
                                           f"reference/{family}_ref.cu",
                                           f"{family}_x{num}{'_trans' if trans else ''}_ref",
                                           num=num, trans=trans))
    forms.append(ReferenceForm("movmatrix", "movmatrix.trans", "reference/movmatrix_ref.cu",
                               "movmatrix_trans_ref", num=1, trans=True))
    for shape, atype, btype, ctype, dtype in layouts.MMA_VARIANTS:
        tag = f"{shape}_{dtype}_{atype}_{btype}_{ctype}"
        forms.append(ReferenceForm("mma", f"mma.{shape}.{dtype}.{atype}.{btype}.{ctype}",
                                   "reference/mma_ref.cu", f"mma_{tag}_ref",
                                   mma=(shape, atype, btype, ctype, dtype)))
    return tuple(forms)


#: Input families per mma input type. ``exact``: small integers, every partial sum exact.
#: ``lowbits`` (tf32): exact integers with the 13 low mantissa bits filled with noise, which the
#: tensor core must ignore. ``wrap`` (s8): accumulators near the int32 limits, so sums wrap.
#: ``real``: random real values over several binades, where the tensor core's own rounding
#: (``ptxlab.model.tensorcore``) decides the last bits. ``special``: infinities, NaNs, subnormals,
#: signed zeros and overflowing sums.
MMA_KINDS: dict[str, tuple[str, ...]] = {
    "f16": ("exact", "real", "special"),
    "bf16": ("exact", "real", "special"),
    "tf32": ("exact", "lowbits", "real", "special"),
    "s8": ("exact", "wrap"),
}
#: Kinds whose every bit must match the model: all of them, data movement's "random" included
#: (the ulp distance is still measured and reported for the real-valued kinds).
EXACT_KINDS = ("random", "exact", "lowbits", "wrap", "real", "special")

FORMS: tuple[ReferenceForm, ...] = _build_forms()


def case_rng(seed: int, f: ReferenceForm, kind: str) -> np.random.Generator:
    """The random stream of one (form, kind): independent of which other forms run, so any
    batch can be regenerated exactly from the seed alone."""
    kinds = ("random",) + tuple(k for ks in MMA_KINDS.values() for k in ks)
    return np.random.default_rng([seed, FORMS.index(f), kinds.index(kind)])


def form(name: str) -> ReferenceForm:
    """The form called ``name`` (e.g. ``"ldmatrix.x2.trans"``)."""
    for f in FORMS:
        if f.name == name:
            return f
    raise KeyError(f"no reference form {name!r}; known: {[f.name for f in FORMS]}")


# ---------------------------------------------------------------------------------------------
# Random inputs
# ---------------------------------------------------------------------------------------------

#: 16-bit patterns worth meeting often: zeros of both signs, subnormals, the largest finite
#: values, infinities and NaNs of f16 and of bf16 (quiet, signalling, with payloads).
SPECIAL_B16 = np.array([
    0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x7BFF, 0xFBFF,   # f16 zero/sub/max
    0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0x7D00, 0x7FFF, 0xFFFF,           # f16 inf / NaN
    0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC1, 0x007F, 0x0080, 0x7F7F,           # bf16
], dtype=np.uint16)


def random_b16(rng: np.random.Generator, shape, special_fraction: float = 0.25) -> np.ndarray:
    """Random 16-bit patterns, a fraction of them drawn from :data:`SPECIAL_B16`."""
    bits = rng.integers(0, 1 << 16, size=shape, dtype=np.uint32).astype(np.uint16)
    pick = rng.random(shape) < special_fraction
    bits[pick] = rng.choice(SPECIAL_B16, size=int(pick.sum()))
    return bits


def random_registers(rng: np.random.Generator, shape) -> np.ndarray:
    """Random 32-bit registers, each half a :func:`random_b16` pattern."""
    return emulator.pack_b16(random_b16(rng, shape), random_b16(rng, shape)).astype(np.uint32)


def random_images(rng: np.random.Generator, cases: int, smem_bytes: int) -> np.ndarray:
    """``(cases, smem_bytes)`` uint8 shared-memory images made of :func:`random_b16` patterns."""
    return random_b16(rng, (cases, smem_bytes // 2)).view(np.uint8).reshape(cases, smem_bytes)


def random_row_addresses(rng: np.random.Generator, cases: int, num: int,
                         smem_bytes: int) -> np.ndarray:
    """``(cases, 32)`` uint32 byte offsets: ``8*num`` distinct 16-byte-aligned rows per case,
    anywhere in the buffer, in random order. Lanes an ``.x1``/``.x2`` form ignores repeat the
    lower lanes' addresses (the portable idiom the PTX ISA gives for ``.target sm_75``).
    """
    slots = smem_bytes // ROW
    used = 8 * num
    if slots < used:
        raise ValueError(f"{smem_bytes} bytes hold {slots} rows; .x{num} needs {used} distinct rows")
    rows = np.argsort(rng.random((cases, slots)), axis=1)[:, :used]     # distinct, random order
    lanes = np.arange(32) % used
    return (rows[:, lanes] * ROW).astype(np.uint32)


def _bits_of(values: np.ndarray, typ: str, rng: np.random.Generator | None = None,
             low_noise: bool = False) -> np.ndarray:
    """Element values -> bit patterns of ``typ``; ``low_noise`` fills the 13 low bits of tf32
    elements with noise the tensor core must ignore."""
    bits = emulator.element_bits(values, typ)
    if typ == "tf32" and low_noise:
        bits = (bits & np.uint32(0xFFFFE000)) | rng.integers(0, 1 << 13, size=bits.shape,
                                                             dtype=np.uint32)
    return bits


def _special_values(rng: np.random.Generator, shape, typ: str) -> np.ndarray:
    """Bit patterns of ``typ`` mixing ordinary values with inf, NaN, subnormals and -0."""
    if typ in ("f16", "bf16"):
        ordinary = _bits_of(rng.standard_normal(shape), typ)
        pool = SPECIAL_B16.astype(np.uint32)
    else:  # f32 / tf32
        ordinary = _bits_of(rng.standard_normal(shape), "f32")
        pool = np.array([0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000,
                         0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF,
                         0x7F7FFFFF, 0x00002000], dtype=np.uint32)
    pick = rng.random(shape) < 0.2
    out = ordinary.copy()
    out[pick] = rng.choice(pool, size=int(pick.sum()))
    return out


def _mma_matrices(rng: np.random.Generator, cases: int, mma: tuple, kind: str):
    """Bit patterns of A ``(cases, M, K)``, B ``(cases, K, N)``, C ``(cases, M, N)``."""
    shape, atype, btype, ctype, dtype = mma
    f = layouts.mma_form(*mma)
    sa, sb, sc = (cases, f.m, f.k), (cases, f.k, f.n), (cases, f.m, f.n)
    if atype == "s8":
        a = rng.integers(-128, 128, size=sa)
        b = rng.integers(-128, 128, size=sb)
        if kind == "wrap":   # accumulators close to the int32 limits: sums overflow and wrap
            near = rng.integers(0, 2 ** 19, size=sc)
            c = np.where(rng.random(sc) < 0.5, (2 ** 31 - 1) - near, -(2 ** 31) + near)
        else:
            c = rng.integers(-(2 ** 24), 2 ** 24, size=sc)
        return _bits_of(a, "s8"), _bits_of(b, "s8"), _bits_of(c, "s32")
    if kind in ("exact", "lowbits"):
        # Small integers: every product and partial sum is exact in every format involved.
        lim, clim = (4, 64) if ctype == "f16" else (8, 256)
        a = rng.integers(-lim, lim + 1, size=sa).astype(np.float64)
        b = rng.integers(-lim, lim + 1, size=sb).astype(np.float64)
        c = rng.integers(-clim, clim + 1, size=sc).astype(np.float64)
        noise = kind == "lowbits"
        return (_bits_of(a, atype, rng, noise), _bits_of(b, btype, rng, noise), _bits_of(c, ctype))
    if kind == "real":
        def spread(shape_, lo, hi):
            return rng.standard_normal(shape_) * np.exp2(rng.integers(lo, hi, size=shape_))
        a, b = spread(sa, -3, 3), spread(sb, -3, 3)
        c = spread(sc, -2, 4)
        if atype == "tf32":     # full f32 patterns: the low 13 bits are whatever they are
            return _bits_of(a, "f32"), _bits_of(b, "f32"), _bits_of(c, ctype)
        return _bits_of(a, atype), _bits_of(b, btype), _bits_of(c, ctype)
    if kind == "special":
        return (_special_values(rng, sa, atype), _special_values(rng, sb, btype),
                _special_values(rng, sc, ctype))
    raise ValueError(f"unknown mma input kind {kind!r} for {mma}")


def make_inputs(f: ReferenceForm, rng: np.random.Generator, cases: int,
                smem_bytes: int = SMEM_BYTES, kind: str = "random") -> list:
    """Kernel arguments for ``cases`` random cases of form ``f`` (outputs zero-filled).

    Arrays keep a per-case shape (``(cases, 32, n)``...); the kernels read them flat.
    """
    if f.family == "ldmatrix":
        images = random_images(rng, cases, smem_bytes)
        addrs = random_row_addresses(rng, cases, f.num, smem_bytes)
        out = np.zeros((cases, 32, f.num), dtype=np.uint32)
        return [images, addrs, out, np.uint32(smem_bytes)]
    if f.family == "stmatrix":
        images = random_images(rng, cases, smem_bytes)
        addrs = random_row_addresses(rng, cases, f.num, smem_bytes)
        regs = random_registers(rng, (cases, 32, f.num))
        return [images, addrs, regs, np.zeros_like(images), np.uint32(smem_bytes)]
    if f.family == "movmatrix":
        return [random_registers(rng, (cases, 32)), np.zeros((cases, 32), dtype=np.uint32)]
    lay = layouts.mma_form(*f.mma)
    a, b, c = _mma_matrices(rng, cases, f.mma, kind)
    frag = emulator.matrices_to_fragment
    ra = frag(a[:, None], lay.a).astype(np.uint32)
    rb = frag(b[:, None], lay.b).astype(np.uint32)
    rc = frag(c[:, None], lay.c).astype(np.uint32)
    return [ra, rb, rc, np.zeros((cases, 32, lay.d.regs), dtype=np.uint32)]


# ---------------------------------------------------------------------------------------------
# Expected outputs (from the emulator) and comparison
# ---------------------------------------------------------------------------------------------

def output_index(f: ReferenceForm) -> int:
    """Which kernel argument holds the result."""
    return {"ldmatrix": 2, "stmatrix": 3, "movmatrix": 1, "mma": 3}[f.family]


def expected_outputs(f: ReferenceForm, args: list) -> np.ndarray:
    """What the emulator says the kernel writes into its output argument."""
    if f.family == "ldmatrix":
        images, addrs = args[0], args[1]
        return emulator.ldmatrix(images, addrs.astype(np.int64), num=f.num, trans=f.trans)
    if f.family == "stmatrix":
        images, addrs, regs = args[0], args[1], args[2]
        after = images.copy()
        emulator.stmatrix(after, addrs.astype(np.int64), regs, num=f.num, trans=f.trans)
        return after
    if f.family == "movmatrix":
        return emulator.movmatrix(args[0])
    shape, atype, btype, ctype, dtype = f.mma
    return emulator.mma(shape, args[0], args[1], args[2], atype=atype, btype=btype,
                        ctype=ctype, dtype=dtype)


def _width(f: ReferenceForm) -> int:
    """Bits per output element (16 for packed f16 results, 32 otherwise)."""
    return 16 if f.family == "mma" and f.mma[4] == "f16" else 32


def ulp_distance(a_bits: np.ndarray, b_bits: np.ndarray, width: int = 32) -> np.ndarray:
    """Distance in units in the last place between two float bit patterns (NaN pairs -> 0,
    NaN against a number -> a huge value, +0 vs -0 -> 0)."""
    def ordered(x):
        x = np.asarray(x).astype(np.int64) & ((1 << width) - 1)
        sign = 1 << (width - 1)
        mag = x & (sign - 1)
        return np.where(x & sign, -mag, mag)

    a, b = np.asarray(a_bits), np.asarray(b_bits)
    nan_a, nan_b = _is_nan(a, width), _is_nan(b, width)
    dist = np.abs(ordered(a) - ordered(b))
    dist = np.where(nan_a & nan_b, 0, dist)
    return np.where(nan_a ^ nan_b, np.int64(1) << 40, dist)


def _is_nan(bits: np.ndarray, width: int) -> np.ndarray:
    bits = np.asarray(bits).astype(np.int64)
    if width == 16:
        return ((bits & 0x7C00) == 0x7C00) & ((bits & 0x03FF) != 0)
    return ((bits & 0x7F800000) == 0x7F800000) & ((bits & 0x007FFFFF) != 0)


def _split16(regs: np.ndarray) -> np.ndarray:
    """Packed f16x2 registers -> their 16-bit halves (as the last axis)."""
    return emulator.unpack_b16(regs).astype(np.uint32)


def _values(bits: np.ndarray, typ: str) -> np.ndarray:
    """Bit patterns -> float64 values (tf32 read as the tensor core reads it: top 19 bits)."""
    bits = np.asarray(bits, dtype=np.uint32)
    with np.errstate(invalid="ignore", over="ignore"):
        if typ == "f16":
            return bits.astype(np.uint16).view(np.float16).astype(np.float64)
        if typ == "bf16":
            return (bits << 16).view(np.float32).astype(np.float64)
        if typ == "tf32":
            return (bits & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
        if typ == "f32":
            return bits.view(np.float32).astype(np.float64)
    raise ValueError(typ)


def scaled_error(f: ReferenceForm, args: list, got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """``|got - want|`` per output element, in units of the last place of ``sum |a*b| + |c|``.

    Plain ulps blow up where terms cancel (the result is tiny, the rounding error is not); this
    measures the error against the size of what was summed, which is how the tensor core's
    accumulation error scales. Returns ``(cases, M, N)``; NaN where either side is not finite.
    """
    lay = layouts.mma_form(*f.mma)
    shape, atype, btype, ctype, dtype = f.mma
    A = _values(emulator.fragment_to_matrices(args[0], lay.a)[:, 0], atype)
    B = _values(emulator.fragment_to_matrices(args[1], lay.b)[:, 0], btype)
    C = _values(emulator.fragment_to_matrices(args[2], lay.c)[:, 0], ctype)
    G = _values(emulator.fragment_to_matrices(got, lay.d)[:, 0], dtype)
    W = _values(emulator.fragment_to_matrices(want, lay.d)[:, 0], dtype)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        size = np.einsum("wmk,wkn->wmn", np.abs(A), np.abs(B)) + np.abs(C)
        mant = 11 if dtype == "f16" else 24
        ulp = np.exp2(np.floor(np.log2(np.maximum(size, np.finfo(np.float64).tiny))) - (mant - 1))
        err = np.abs(G - W) / ulp
    return np.where(np.isfinite(G) & np.isfinite(W) & np.isfinite(size), err, np.nan)


@dataclass
class Comparison:
    """How one batch of hardware (or backend) outputs compares with the model."""

    form: str
    kind: str
    cases: int
    mismatched_cases: int
    mismatched_elements: int
    examples: list[str] = field(default_factory=list)
    max_ulp: int | None = None                 # real-valued mma only
    ulp_histogram: dict[str, int] | None = None
    max_scaled_error: float | None = None
    nan_payload_only: int = 0                  # both NaN, different bits

    @property
    def exact(self) -> bool:
        return self.mismatched_elements == 0

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


def _describe_mismatch(f: ReferenceForm, idx: tuple, got, want) -> str:
    if f.family == "stmatrix":
        case, byte = idx
        return f"case {case}, shared byte {byte}: expected 0x{int(want):02x}, got 0x{int(got):02x}"
    if f.family == "movmatrix":
        case, lane = idx
        return f"case {case}, lane {lane}: expected 0x{int(want):08x}, got 0x{int(got):08x}"
    case, lane, reg = idx[:3]
    return (f"case {case}, lane {lane}, register {reg}: expected 0x{int(want):08x}, "
            f"got 0x{int(got):08x}")


def compare(f: ReferenceForm, args: list, got: np.ndarray, kind: str = "random",
            want: np.ndarray | None = None, max_examples: int = 5) -> Comparison:
    """Compare a kernel's output with the model; for real-valued mma also measure ulps."""
    if want is None:
        want = expected_outputs(f, args)
    got = np.asarray(got).reshape(want.shape)
    diff = got != want
    cases = want.shape[0]
    bad_cases = int(diff.reshape(cases, -1).any(axis=1).sum())
    examples = [_describe_mismatch(f, tuple(int(i) for i in idx), got[tuple(idx)], want[tuple(idx)])
                for idx in np.argwhere(diff)[:max_examples]]
    result = Comparison(f.name, kind, cases, bad_cases, int(diff.sum()), examples)
    if f.family == "mma" and f.mma[4] in ("f32", "f16"):
        width = _width(f)
        g, w = (_split16(got), _split16(want)) if width == 16 else (got, want)
        ulps = ulp_distance(g, w, width)
        both_nan = _is_nan(g, width) & _is_nan(w, width)
        result.nan_payload_only = int((both_nan & (g != w)).sum())
        result.max_ulp = int(ulps.max()) if ulps.size else 0
        hist: dict[str, int] = {}
        for label, lo, hi in (("0", 0, 0), ("1", 1, 1), ("2", 2, 2), ("3-15", 3, 15),
                              ("16-255", 16, 255), (">=256", 256, None)):
            sel = (ulps >= lo) if hi is None else ((ulps >= lo) & (ulps <= hi))
            hist[label] = int(sel.sum())
        result.ulp_histogram = hist
        se = scaled_error(f, args, got, want)
        result.max_scaled_error = float(np.nanmax(se)) if np.isfinite(se).any() else 0.0
    return result


# ---------------------------------------------------------------------------------------------
# Cases for the CPU-vs-GPU comparison
# ---------------------------------------------------------------------------------------------

def kernel_cases(rng: np.random.Generator, small: bool = True) -> list[KernelCase]:
    """One :class:`~ptxlab.run.backends.KernelCase` per reference form (and mma input kind that is
    exact), with random inputs; outputs must agree bit for bit between backends.

    ``small=True`` keeps them quick for the CPU model: 2 cases per form in a 1 KiB buffer.
    """
    cases, smem = (2, 1024) if small else (32, SMEM_BYTES)
    out: list[KernelCase] = []
    for f in FORMS:
        for kind in f.kinds:
            if kind not in EXACT_KINDS:
                continue
            args = make_inputs(f, rng, cases, smem, kind)
            shared = smem if f.family in ("ldmatrix", "stmatrix") else 0
            suffix = "" if kind == "random" else f"[{kind}]"
            out.append(KernelCase(name=f"reference {f.name}{suffix}", source=f.source(),
                                  kernel=f.kernel, grid=(cases,), block=(32,), args=args,
                                  shared_mem=shared, compare=(output_index(f),)))
    return out


# ---------------------------------------------------------------------------------------------
# Recorded hardware vectors (tests/vectors/*.npz)
# ---------------------------------------------------------------------------------------------
#
# One file per family. Keys are "<form suffix>__<field>", e.g. "x4.trans__addrs":
#   ldmatrix:  addrs (N,32) u32, rows (N,8*num,16) u8 = the bytes of every row read, out (N,32,num)
#   stmatrix:  addrs, regs (N,32,num), rows (N,8*num,16) u8 = the bytes of every row after the store
#   movmatrix: a (N,32), d (N,32)
#   mma:       "<variant>__<kind>__a/b/c/d" raw fragments; "<variant>__real__max_ulp" and
#              "__max_scaled_error": the model's distance measured over the whole hardware run
# plus "smem_bytes", "device", "date" and "source_commit" for provenance. Only the rows an
# instruction touches are stored, not whole 48 KiB images. For stmatrix the hardware run also
# checked that every other byte kept its value (the report says so).

def _suffix(f: ReferenceForm) -> str:
    return f.name.split(".", 1)[1]


def extract_vectors(f: ReferenceForm, args: list, got: np.ndarray, kind: str,
                    limit: int) -> dict[str, np.ndarray]:
    """The compact record of the first ``limit`` cases of a batch (inputs and hardware outputs)."""
    n = min(limit, got.shape[0])
    p = f"{_suffix(f)}__"
    if f.family in ("ldmatrix", "stmatrix"):
        addrs = args[1][:n].astype(np.uint32)
        used = addrs[:, : 8 * f.num].astype(np.int64)
        image = args[0][:n] if f.family == "ldmatrix" else np.asarray(got)[:n]
        idx = used[..., None] + np.arange(ROW)
        rows = np.take_along_axis(image, idx.reshape(n, -1), axis=1).reshape(n, 8 * f.num, ROW)
        rec = {p + "addrs": addrs, p + "rows": rows.astype(np.uint8)}
        if f.family == "ldmatrix":
            rec[p + "out"] = np.asarray(got)[:n].astype(np.uint32)
        else:
            rec[p + "regs"] = args[2][:n].astype(np.uint32)
        return rec
    if f.family == "movmatrix":
        return {p + "a": args[0][:n].astype(np.uint32), p + "d": np.asarray(got)[:n].astype(np.uint32)}
    p = f"{_suffix(f)}__{kind}__"
    return {p + "a": args[0][:n], p + "b": args[1][:n], p + "c": args[2][:n],
            p + "d": np.asarray(got)[:n].astype(np.uint32)}


#: Filler of the unwritten bytes when replaying stmatrix (any value not produced by a store
#: would do: the check is that no byte outside the stored rows changes).
_SENTINEL = 0xA5


def vectors_as_kernel_args(f: ReferenceForm, data, kind: str = "random",
                           smem_bytes: int | None = None) -> tuple[list, np.ndarray]:
    """Rebuild full kernel arguments from recorded vectors: ``(args, hardware_output)``.

    For ldmatrix the rows go back to their addresses in a zeroed buffer; for stmatrix the
    buffer starts filled with 0xA5 and the expected image is that buffer with the hardware's
    rows written in. Useful to replay the vectors through any backend.
    """
    if smem_bytes is None:
        smem_bytes = int(data["smem_bytes"])
    p = f"{_suffix(f)}__"
    if f.family in ("ldmatrix", "stmatrix"):
        addrs = np.asarray(data[p + "addrs"], dtype=np.uint32)
        rows = np.asarray(data[p + "rows"], dtype=np.uint8)
        n = addrs.shape[0]
        used = addrs[:, : 8 * f.num].astype(np.int64)
        idx = (used[..., None] + np.arange(ROW)).reshape(n, -1)
        if f.family == "ldmatrix":
            images = np.zeros((n, smem_bytes), dtype=np.uint8)
            np.put_along_axis(images, idx, rows.reshape(n, -1), axis=1)
            out = np.zeros((n, 32, f.num), dtype=np.uint32)
            return [images, addrs, out, np.uint32(smem_bytes)], np.asarray(data[p + "out"])
        images = np.full((n, smem_bytes), _SENTINEL, dtype=np.uint8)
        after = images.copy()
        np.put_along_axis(after, idx, rows.reshape(n, -1), axis=1)
        regs = np.asarray(data[p + "regs"], dtype=np.uint32)
        return [images, addrs, regs, np.zeros_like(images), np.uint32(smem_bytes)], after
    if f.family == "movmatrix":
        a = np.asarray(data[p + "a"], dtype=np.uint32)
        return [a, np.zeros_like(a)], np.asarray(data[p + "d"])
    p = f"{_suffix(f)}__{kind}__"
    a, b, c = (np.asarray(data[p + x], dtype=np.uint32) for x in "abc")
    d = np.asarray(data[p + "d"], dtype=np.uint32)
    return [a, b, c, np.zeros_like(d)], d


def vector_kinds(f: ReferenceForm, data) -> list[str]:
    """The input kinds recorded for form ``f`` in a vectors file."""
    if f.family != "mma":
        return ["random"] if f"{_suffix(f)}__addrs" in data or f"{_suffix(f)}__a" in data else []
    return [k for k in f.kinds if f"{_suffix(f)}__{k}__d" in data]


def replay_vectors(f: ReferenceForm, data, kind: str = "random") -> Comparison:
    """Run the emulator on recorded inputs and compare with the recorded hardware outputs."""
    args, hw = vectors_as_kernel_args(f, data, kind)
    return compare(f, args, hw, kind)


def vectors_path(family: str, directory: Path | None = None) -> Path:
    """``tests/vectors/<family>.npz`` (or under ``directory``)."""
    base = directory if directory is not None else sources.PROJECT_ROOT / "tests" / "vectors"
    return Path(base) / f"{family}.npz"
