"""The layout-fit rule: can a register<->shared copy be one ldmatrix/stmatrix, and which?

A compiler that lowers a tile copy (TVM's TIRx, CuTe's copy atoms) has two layouts in hand:

- the *register side*, a thread-value layout in CuTe's notation: ``(thread, value) -> element``
  of the tile, 32 threads (one warp) or whole warps (a warpgroup, a block: every warp must fit
  the same form, with its own addresses), ``value`` counting the elements a lane holds, two 16-bit
  (or four 8-bit, or one 32-bit) elements per 32-bit register, lowest value in the low bits;
- the *shared side*: ``element -> offset`` in shared memory, in elements, over the same tile
  (a 1-D element index is split column-major over its shape, as CuTe does).

Their composition says at which shared byte each (lane, value) lives. ldmatrix/stmatrix can do
the copy exactly when that composition is the instruction's own map: each matrix row the
instruction moves is 16 contiguous bytes starting at a 16-byte aligned address, and every lane's
registers hold the bytes the instruction puts there. This module tries every form the model
knows for the element width (widest ``.num`` first, as TVM's ``_try_num`` does), and answers with
the instruction, its per-lane address formula, or the precise reason it declines:

``dtype``      no ldmatrix/stmatrix form moves elements of that width (in that direction),
               and they cannot be moved as 16-bit units either (64-bit, packed 4/6-bit);
``target``     the only forms that would fit need a newer target than the one asked for;
``values``     the values a lane holds do not fill whole registers of any ``.num``;
``register``   the register side is not the fragment pattern: the elements one matrix row of
               the instruction delivers are not neighbours along one axis of the tile;
``contiguous`` the register side is a fragment, but in shared memory its rows are not
               16 contiguous bytes (the copy would need a different stride or the other
               ``.trans``);
``aligned``    the rows are contiguous but a row does not start at a multiple of 16 bytes.

ldmatrix/stmatrix move raw bits, so elements of another width are also tried as 16-bit units
with the ``.b16`` forms without ``.trans`` (:func:`_try_units`): two 8-bit elements that share a
register's 16-bit half and are contiguous in shared memory make one unit; a 32-bit element is two
units (low half first) in one register, contiguous in shared memory. The check is byte by byte:
every byte the instruction moves must be the byte of the element the layouts name. ``.trans`` never
applies to such a copy (it would split 8-bit pairs or an element's halves); a 64-bit element never
fits (its halves sit in two registers, which a ``.b16`` form always fills from bytes a multiple of
16 apart), and packed 4/6-bit elements sit one per byte in registers, too few for a unit.

Offsets are taken from a shared buffer whose element 0 is 16-byte aligned.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from . import layouts, matrix_forms
from .cute_layout import Layout, as_layout

ROW_BYTES = layouts.ROW_BYTES

#: Bits of one element, by the names a learner (or CuTe) gives the element type.
DTYPE_BITS: dict[str, int] = {
    "f16": 16, "bf16": 16, "b16": 16, "s16": 16, "u16": 16, "half": 16,
    "b8": 8, "s8": 8, "u8": 8, "e4m3": 8, "e5m2": 8,
    "b6": 6, "e2m3": 6, "e3m2": 6,
    "b4": 4, "e2m1": 4,
    "f32": 32, "tf32": 32, "b32": 32, "s32": 32, "u32": 32,
    "f64": 64, "b64": 64,
}

#: The PTX ISA version the target check assumes (the newest ptxas 13 knows): only the target
#: decides which forms a copy may use.
_NEWEST_VERSION = "9.0"


#: The element type each ldmatrix/stmatrix ``.type`` (or packed source format) moves, in bits.
_FORM_BITS = {"b16": 16, "b8": 8, "b6x16_p32": 6, "b4x16_p64": 4}


@dataclass(frozen=True)
class CopyForm:
    """One ldmatrix/stmatrix form at every ``.num`` it has; the maps come from
    :mod:`ptxlab.model.matrix_forms`, the one place that builds them.

    ``byte_map(num)[lane, reg, byte]`` is ``(matrix, row, col)`` of the shared-memory row byte
    (for packed sources: element slot, 16 per 16-byte row) that register byte goes to or comes
    from; ``address_rows(num)[lane]`` is the ``(matrix, row)`` whose start address that lane
    supplies, ``(-1, -1)`` where the lane's address is not used.
    """

    opcode: str                 # "ldmatrix" | "stmatrix"
    shape: str                  # "m8n8", "m16n16", "m8n16", "m16n8"
    dtype: str                  # "b16", "b8", "b6x16_p32", "b4x16_p64"
    trans: bool
    nums: tuple[int, ...]       # widest first

    @property
    def elem_bits(self) -> int:
        """Bits of one element as the learner names it (6 and 4 for the packed sources)."""
        return _FORM_BITS[self.dtype]

    @property
    def slot_bytes(self) -> int:
        """Bytes of one element in a register (and of one element slot in a shared row)."""
        return 2 if self.dtype == "b16" else 1

    def matrix_form(self, num: int) -> matrix_forms.MatrixForm:
        return matrix_forms.MatrixForm(self.opcode, self.shape, num, self.trans, self.dtype)

    def instruction(self, num: int) -> str:
        return self.matrix_form(num).ptx

    def byte_map(self, num: int) -> np.ndarray:
        return matrix_forms.byte_map(self.matrix_form(num))

    def address_rows(self, num: int) -> np.ndarray:
        return matrix_forms.address_lanes(self.matrix_form(num))


@lru_cache(maxsize=None)
def copy_forms() -> tuple[CopyForm, ...]:
    """Every ldmatrix/stmatrix form the model has, each with its ``.num`` values."""
    nums: dict[tuple, list[int]] = {}
    for f in matrix_forms.all_forms():
        if f.op in ("ldmatrix", "stmatrix"):
            nums.setdefault((f.op, f.shape, f.dtype, f.trans), []).append(f.num)
    return tuple(CopyForm(op, shape, dtype, trans, tuple(sorted(n, reverse=True)))
                 for (op, shape, dtype, trans), n in nums.items())


# ---------------------------------------------------------------------------------------------
# The answer
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fit:
    """The rule's answer. ``fits``: one instruction form does the copy (``instructions`` of them
    when a lane holds more values than one instruction moves). Otherwise ``reason`` is one of the
    module's reason codes and ``message`` says what to change."""

    fits: bool
    reason: str | None
    message: str
    direction: str
    dtype: str
    form: CopyForm | None = None
    num: int | None = None
    instructions: int = 0
    #: ``(instructions, 32)`` byte addresses, or ``(warps, instructions, 32)`` for several warps
    addresses: np.ndarray | None = field(default=None, repr=False, compare=False)
    address_formula: str | None = None
    warps: int = 1
    #: the copy moves elements of another width as 16-bit units with a ``.b16`` form
    as_units: bool = False

    @property
    def instruction(self) -> str | None:
        return self.form.instruction(self.num) if self.fits else None

    @property
    def trans(self) -> bool | None:
        return self.form.trans if self.fits else None

    def ptx(self) -> str:
        """The instruction with its operands, as inline PTX writes it (one per instruction)."""
        if not self.fits:
            raise ValueError(f"the copy does not lower to ldmatrix/stmatrix: {self.message}")
        regs = ", ".join(f"r{i}" for i in range(self.form.byte_map(self.num).shape[1]))
        return f"{self.instruction} [addr], {{{regs}}};" if self.direction == "store" \
            else f"{self.instruction} {{{regs}}}, [addr];"

    def as_dict(self) -> dict:
        """Plain data for ``--json``."""
        out = {"fits": self.fits, "reason": self.reason, "message": self.message,
               "direction": self.direction, "dtype": self.dtype}
        if self.fits:
            out.update(instruction=self.instruction, num=self.num, trans=self.trans,
                       instructions=self.instructions, warps=self.warps, ptx=self.ptx(),
                       address_formula=self.address_formula, as_16bit_units=self.as_units,
                       addresses=self.addresses.tolist())
        return out

    def __str__(self) -> str:
        if not self.fits:
            return f"does not lower to {_opcode(self.direction)} [{self.reason}]: {self.message}"
        times = f" x {self.instructions} instructions" if self.instructions > 1 else ""
        units = f"\n{_units_note(self.dtype)}" if self.as_units else ""
        return f"{self.ptx()}{times}{units}\n{self.address_formula}"


_WORDS = {2: "two", 4: "four"}


def _units_note(dtype: str) -> str:
    """How a ``.b16`` form moves elements of another width (the line printed under it)."""
    bits = DTYPE_BITS[dtype]
    if bits < 16:
        how = (f"each 16-bit unit is {_WORDS[16 // bits]} neighbouring elements, contiguous in "
               f"shared memory and in one 16-bit half of a register, the lower value in the low "
               f"byte")
    else:
        how = (f"each element is {_WORDS[bits // 16]} 16-bit units, low half first, contiguous "
               f"in shared memory and in one register")
    return f"moves {bits}-bit data ({dtype}) as 16-bit units: {how}"


def _opcode(direction: str) -> str:
    return "ldmatrix" if direction == "load" else "stmatrix"


@dataclass
class _Attempt:
    stage: int              # 0 register, 1 contiguous, 2 aligned, 3 fits
    message: str
    form: CopyForm
    num: int
    bases: np.ndarray | None = None   # row start bytes: (instructions, matrices, rows) of one
    #                                   warp in _try, (warps, ...) once every warp fitted
    units: bool = False               # elements of another width moved as 16-bit units
    transposed: bool = False          # (units) the shared tile runs along another axis
    reason: str | None = None         # the decline's reason when not its stage's


_STAGE_REASON = {0: "register", 1: "contiguous", 2: "aligned"}


class _Decline(Exception):
    """A copy no form lowers: ``reason`` (one of the module's reason codes) and ``message``."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class _Forms:
    """The forms a copy of ``bits``-bit elements may use: the width's own (``native``) and the
    ``.b16`` forms that move it as 16-bit units of ``ebytes``-byte elements (``units``);
    ``refusals`` says, per form the target lacks, why."""

    op: str
    dtype: str
    bits: int
    ebytes: int | None
    native: list[CopyForm]
    units: list[CopyForm]
    refusals: dict[CopyForm, str]


@dataclass
class _Composed:
    """The two layouts composed: per warp, lane and value, the tile coordinates
    (``coords``, ``(warps, 32, values, rank)``) and the shared offset in elements
    (``offset``, ``(warps, 32, values)``)."""

    warps: int
    values: int
    coords: np.ndarray
    offset: np.ndarray


@dataclass
class _Attempts:
    """Every form/num tried: the width's own forms the target has (``native``), those it
    lacks (``blocked``, to say so when one would fit) and the 16-bit-unit forms (``units``)."""

    native: list[_Attempt]
    blocked: list[_Attempt]
    units: list[_Attempt]


def fit_copy(reg: Layout | str, smem: Layout | str, dtype: str = "f16",
             direction: str = "load", target: str | None = None) -> Fit:
    """Decide whether the copy between ``reg`` (thread-value layout) and ``smem`` (tile layout,
    in elements) is one ldmatrix (``direction="load"``) or stmatrix (``"store"``) form.

    ``target`` (e.g. ``"sm_90"``) leaves out forms that target lacks. Layout strings are read
    with :func:`ptxlab.model.cute_layout.parse_layout`; a malformed one raises
    ``LayoutSyntaxError``.
    """
    if direction not in ("load", "store"):
        raise ValueError(f"direction is 'load' (ldmatrix) or 'store' (stmatrix), got {direction!r}")
    reg_l, smem_l = as_layout(reg), as_layout(smem)
    try:
        forms = _forms_for(_opcode(direction), dtype, target)
        comp = _compose(reg_l, smem_l, direction)
        tried = _Attempts(*_native_attempts(forms, comp, smem_l),
                          _unit_attempts(forms, comp, smem_l))
        fitted = next((a for a in tried.native + tried.units if a.stage == 3), None)
        if fitted is not None:
            return _fit_of(fitted, dtype, direction, comp.warps)
        raise _Decline(*_why_not(forms, tried, comp.values, target))
    except _Decline as d:
        return Fit(False, d.reason, d.message, direction, dtype)


def _forms_for(op: str, dtype: str, target: str | None) -> _Forms:
    """The forms that could move ``dtype`` elements with ``op``, and which ``target`` lacks;
    declines ("dtype", "target") when there are none."""
    bits = DTYPE_BITS.get(dtype)
    if bits is None:
        raise _Decline("dtype", f"unknown element type {dtype!r}; known: {', '.join(DTYPE_BITS)}")
    native = [f for f in copy_forms() if f.opcode == op and f.elem_bits == bits]
    ebytes = _unit_bytes(bits)
    # elements of another width, moved as 16-bit units by the .b16 forms without .trans
    units = [f for f in copy_forms() if f.opcode == op and f.dtype == "b16" and not f.trans] \
        if ebytes else []
    if not native and not units:
        widths = sorted({f.elem_bits for f in copy_forms() if f.opcode == op}, reverse=True)
        raise _Decline("dtype", f"no {op} form moves {bits}-bit elements ({dtype}); the model "
                                f"has {op} forms for {', '.join(f'{w}-bit' for w in widths)} "
                                f"elements only, and {_no_units_reason(bits)}")
    refusals: dict[CopyForm, str] = {}
    if target is not None:
        for f in native + units:
            try:
                matrix_forms.check_target(f.matrix_form(f.nums[-1]), target, _NEWEST_VERSION)
            except matrix_forms.FormError as exc:
                refusals[f] = str(exc)
        if all(f in refusals for f in native + units):
            raise _Decline("target", next(iter(refusals.values())))
    return _Forms(op, dtype, bits, ebytes, native, units, refusals)


def _compose(reg_l: Layout, smem_l: Layout, direction: str) -> _Composed:
    """Compose the register side with the shared side; declines ("register", "overlap") when
    the register side is not over whole warps, leaves the tile, or a store would write one
    shared element twice."""
    threads = reg_l.mode(0).size if reg_l.rank == 2 else 0
    if reg_l.rank != 2 or threads % layouts.WARP_SIZE:
        raise _Decline("register", f"the register side must be a (thread, value) layout over "
                                   f"whole warps ({layouts.WARP_SIZE}, 64, ... threads), got "
                                   f"{reg_l} ({reg_l.rank} mode(s), {reg_l.mode(0).size} "
                                   f"threads)")
    warps = threads // layouts.WARP_SIZE
    values = reg_l.mode(1).size
    thread_ix = np.arange(threads)[:, None]
    val_ix = np.arange(values)[None, :]
    element = np.asarray(reg_l(thread_ix + threads * val_ix), dtype=np.int64)
    if element.min() < 0 or element.max() >= smem_l.size:
        t, val = np.argwhere((element < 0) | (element >= smem_l.size))[0]
        raise _Decline("register", f"thread {t} value {val} is tile element {element[t, val]}, "
                                   f"outside the shared tile {smem_l} of {smem_l.size} elements")
    coords = np.stack(np.broadcast_arrays(*smem_l.coords(element)), axis=-1)  # (T, V, rank)
    offset = np.asarray(smem_l(element), dtype=np.int64)
    if direction == "store":
        shared = _shared_store_address(offset, coords, smem_l)
        if shared is not None:
            raise _Decline("overlap", shared)
    return _Composed(warps, values, coords.reshape(warps, layouts.WARP_SIZE, values, -1),
                     offset.reshape(warps, layouts.WARP_SIZE, values))


def _native_attempts(forms: _Forms, comp: _Composed,
                     smem: Layout) -> tuple[list[_Attempt], list[_Attempt]]:
    """Every ``.num`` of the width's own forms whose registers the lane's values fill:
    ``(attempts the target has, attempts it lacks)``."""
    attempts: list[_Attempt] = []
    blocked: list[_Attempt] = []
    for form in forms.native:
        per_reg = 4 // form.slot_bytes
        for num in form.nums:
            regs = form.byte_map(num).shape[1]
            if comp.values % (regs * per_reg):
                continue
            a = _try_warps(_try, form, num, per_reg, comp.values, comp.coords, comp.offset,
                           smem)
            (blocked if form in forms.refusals else attempts).append(a)
    return attempts, blocked


def _unit_attempts(forms: _Forms, comp: _Composed, smem: Layout) -> list[_Attempt]:
    """Every ``.num`` of the ``.b16`` forms the target has whose registers the lane's values,
    as 16-bit units, fill."""
    out: list[_Attempt] = []
    for form in forms.units:
        if form in forms.refusals:
            continue
        for num in form.nums:
            if comp.values * forms.ebytes % (form.byte_map(num).shape[1] * 4):
                continue
            out.append(_try_warps(_try_units, form, num, forms.ebytes, comp.values, comp.coords,
                                  comp.offset, smem))
    return out


def _fit_of(a: _Attempt, dtype: str, direction: str, warps: int) -> Fit:
    """The answer for an attempt that fits: the form, its addresses and their formula."""
    addrs, formula = _addresses(a)
    note = f", {_units_note(dtype)}" if a.units else ""
    return Fit(True, None, f"{a.form.instruction(a.num)} fits{note}", direction, dtype,
               a.form, a.num, int(a.bases.shape[1]), addrs, formula, warps, a.units)


def _why_not(forms: _Forms, tried: _Attempts, values: int,
             target: str | None) -> tuple[str, str]:
    """``(reason, message)`` for a copy no attempt fits: a form the target lacks would fit,
    the width cannot be moved, the value count fills no form, or the furthest attempt's
    reason."""
    op, bits, refusals = forms.op, forms.bits, forms.refusals
    as_units = _units_summary(bits, tried.units)
    for a in tried.blocked:
        if a.stage == 3:
            return "target", (f"{refusals[a.form]} (the layouts fit "
                              f"{a.form.instruction(a.num)}){as_units}")
    if tried.units and forms.ebytes > 4:
        return "dtype", (f"no {op} form moves {bits}-bit elements ({forms.dtype}), and "
                         f"{_no_units_reason(bits)}")
    if not tried.native and not tried.units:
        return _no_attempt(forms, tried, values, as_units)
    return _furthest(forms, tried, target, as_units)


def _no_attempt(forms: _Forms, tried: _Attempts, values: int,
                as_units: str) -> tuple[str, str]:
    """Why no form was even tried: the target lacks the forms, or no form's registers hold a
    whole number of the lane's values."""
    native, units, refusals = forms.native, forms.units, forms.refusals
    if tried.blocked or (native and all(f in refusals for f in native) and not units):
        return "target", next(iter(refusals.values())) + as_units
    ebytes = forms.ebytes
    sizes = sorted({f.byte_map(n).shape[1] * (4 // f.slot_bytes)
                    for f in native if f not in refusals for n in f.nums}
                   | {f.byte_map(n).shape[1] * 4 // ebytes
                      for f in units if f not in refusals for n in f.nums
                      if f.byte_map(n).shape[1] * 4 % ebytes == 0})
    return "values", (f"each lane holds {values} value(s); one {forms.op} moves "
                      f"{' or '.join(map(str, sizes))} {forms.bits}-bit values per lane, "
                      f"so the value count must be a multiple of one of these")


def _furthest(forms: _Forms, tried: _Attempts, target: str | None,
              as_units: str) -> tuple[str, str]:
    """The reason of the attempt that got furthest (the first of them), leading with the forms
    today's GPUs have where no target is named, with a word on the other ways out."""
    op, bits = forms.op, forms.bits
    everything = tried.native + tried.units
    best = max(everything, key=lambda a: a.stage)  # first of the furthest
    message = best.message
    common = [a for a in everything if not _newer_than_hopper(a)]
    newer = None
    if target is None and _newer_than_hopper(best) and common:
        # where no target is named, lead with the forms today's GPUs have; the sm_100a-class
        # form's reason follows
        newer = best
        best = max(common, key=lambda a: a.stage)
        message = (f"{best.message}; on the sm_100a-class targets that have "
                   f"{newer.form.instruction(newer.num)}: {newer.message}")
    if best.units and best.transposed and bits == 8 and newer is None:
        b8 = [f for f in copy_forms() if f.opcode == op and f.elem_bits == 8]
        names = " / ".join(sorted({f"{op}.{f.shape}.trans.b8" for f in b8}))
        message += (f"; {names} transposes bytes, but "
                    + ("this target lacks it" if any(f in forms.refusals for f in b8)
                       else "it does not fit this register side either"))
    elif not best.units and tried.units and bits != 16:
        message += as_units
    return best.reason or _STAGE_REASON[best.stage], message


def _newer_than_hopper(a: _Attempt) -> bool:
    """Whether ``a``'s form needs a newer target than sm_90 (the sm_100a-class 8-bit forms)."""
    try:
        matrix_forms.check_target(a.form.matrix_form(a.num), "sm_90", _NEWEST_VERSION)
    except matrix_forms.FormError:
        return True
    return False


def _unit_bytes(bits: int) -> int | None:
    """Bytes of one element in a register when elements of ``bits`` can be moved as 16-bit units
    (8, 32 and 64 bits: whole bytes; 4- and 6-bit elements sit one per byte in registers, so a
    16-bit half holds two of them, not a unit's worth), else None (16 bits needs no units)."""
    return bits // 8 if bits != 16 and bits % 8 == 0 else None


def _no_units_reason(bits: int) -> str:
    """Why elements of ``bits`` cannot be moved as 16-bit units by a .b16 form."""
    if bits > 32:
        return (f"they cannot be moved as 16-bit units either: a {bits}-bit element is "
                f"{bits // 16} units in {bits // 32} registers of one lane, but every register a "
                f".b16 form fills holds the same 4 bytes (4 * (lane % 4)) of a 16-byte aligned "
                f"row, so a lane's registers always hold bytes a multiple of 16 apart, never the 4 "
                f"bytes that separate the element's 32-bit halves")
    if bits < 8:
        return (f"they cannot be moved as 16-bit units: registers hold {bits}-bit elements one "
                f"per byte (as the m8n16 loads unpack them), two to a 16-bit half, not the whole "
                f"16 bits of packed elements a unit needs")
    return "no 16-bit reinterpretation applies"


def _units_summary(bits: int, unit_attempts: list[_Attempt]) -> str:
    """``; as 16-bit units: <why not>`` from the furthest .b16 attempt, or ``""``."""
    if not unit_attempts:
        return ""
    best = max(unit_attempts, key=lambda a: a.stage)
    return f"; moved as 16-bit units instead: {best.message}"


def _try_warps(try_one, form: CopyForm, num: int, per_reg: int, values: int,
               coords: np.ndarray, offset: np.ndarray, smem: Layout) -> _Attempt:
    """Every warp must fit the same form and ``.num`` (each gives its own addresses); the
    answer is the first warp that fails, or all of them with ``bases (warps, groups, m, r)``."""
    per_warp = []
    for w in range(coords.shape[0]):
        a = try_one(form, num, per_reg, values, coords[w], offset[w], smem)
        if a.stage < 3:
            if coords.shape[0] > 1:
                a.message = f"warp {w} (threads {32 * w}-{32 * w + 31}): {a.message}"
            return a
        per_warp.append(a.bases)
    return _Attempt(3, "", form, num, np.stack(per_warp), units=a.units)


def _shared_store_address(offset: np.ndarray, coords: np.ndarray, smem: Layout) -> str | None:
    """Why a store over this tile is not one (two register values land on one shared element:
    one overwrites the other, and within one stmatrix the PTX ISA leaves which undefined; the
    emulator refuses it), or ``None``. A load may read one element twice."""
    flat = offset.reshape(-1)
    order = np.argsort(flat, kind="stable")
    same = np.flatnonzero(np.diff(flat[order]) == 0)
    if not same.size:
        return None
    i, j = (int(order[same[0]]), int(order[same[0] + 1]))
    values = offset.shape[-1]
    crd = coords.reshape(-1, coords.shape[-1])

    def who(k: int) -> str:
        return f"thread {k // values} value {k % values} (tile {_crd(crd[k])})"

    return (f"{who(i)} and {who(j)} both go to shared element {int(flat[i])} of {smem}: a store "
            "would write one over the other (within one stmatrix the PTX ISA leaves which one "
            "undefined), so no stmatrix form lowers it; give every element of the tile an "
            "address of its own")


@lru_cache(maxsize=256)
def _slot_owners(form: CopyForm, num: int, per_reg: int, values: int) -> np.ndarray:
    """``(group, matrix, row, col, 2)``: the (lane, value) of the element whose first byte
    lands at each slot of each matrix row, over the instructions (groups) a thread's
    ``values`` take. It depends on the form only, not on the layouts tried: built once
    (read-only), where the search tries it for every warp of every candidate."""
    bmap = form.byte_map(num)
    regs = bmap.shape[1]
    per_instr = regs * per_reg
    groups = values // per_instr
    matrices = int(bmap[..., 0].max()) + 1
    rows = int(bmap[..., 1].max()) + 1
    cols = int(bmap[..., 2].max()) + 1
    at = np.full((groups, matrices, rows, cols // form.slot_bytes, 2), -1, dtype=np.int64)
    for lane in range(layouts.WARP_SIZE):
        for reg in range(regs):
            for slot in range(per_reg):
                m, r, c = bmap[lane, reg, slot * 4 // per_reg]
                for g in range(groups):
                    at[g, m, r, c // form.slot_bytes] = (lane, g * per_instr + reg * per_reg + slot)
    at.flags.writeable = False
    return at


def _try(form: CopyForm, num: int, per_reg: int, values: int, coords: np.ndarray,
         offset: np.ndarray, smem: Layout) -> _Attempt:
    """Check one form/num against the composed layouts; how far it gets and why it stops."""
    at = _slot_owners(form, num, per_reg, values)
    groups = at.shape[0]
    name = form.instruction(num)
    lane_v = at[..., 0], at[..., 1]
    crd = coords[lane_v]                     # (g, m, r, c, rank)
    off = offset[lane_v] * form.slot_bytes   # byte address of each slot
    step = np.diff(crd, axis=3)              # along a row
    unit = (np.abs(step).sum(axis=-1) == 1) & (step.max(axis=-1) == 1)
    same_axis = (np.argmax(step, axis=-1) == np.argmax(step[:, :, :, :1], axis=-1))
    register_ok = unit & same_axis
    contiguous = np.diff(off, axis=3) == form.slot_bytes
    starts = off[..., 0]
    aligned = starts % ROW_BYTES == 0

    def where(mask_bad) -> tuple[int, ...]:
        return tuple(int(x) for x in np.argwhere(mask_bad)[0])

    if contiguous.all() and aligned.all():
        return _Attempt(3, "", form, num, starts)

    def describe(g, m, r) -> str:
        who = ", ".join(f"lane {int(at[g, m, r, c, 0])} value {int(at[g, m, r, c, 1])} "
                        f"= tile {_crd(crd[g, m, r, c])}" for c in range(min(3, at.shape[3])))
        grp = f" of instruction {g}" if groups > 1 else ""
        return f"row {r} of matrix {m}{grp} ({who}, ...)"

    if not register_ok.all():
        g, m, r, c = where(~register_ok)
        return _Attempt(0, f"the register side is not the {form.shape} fragment pattern of {name}: "
                           f"{describe(g, m, r)} must be neighbours along one axis of the tile, "
                           f"one step apart, but element {c + 1} of that row is tile "
                           f"{_crd(crd[g, m, r, c + 1])} after {_crd(crd[g, m, r, c])}",
                        form, num)
    if not contiguous.all():
        g, m, r, c = where(~contiguous)
        axis = int(np.argmax(step[g, m, r, 0]))
        return _Attempt(1, f"for {name}, {describe(g, m, r)} must be {ROW_BYTES} contiguous bytes "
                           f"in shared memory, but tile {_crd(crd[g, m, r, c])} is at byte "
                           f"{off[g, m, r, c]} and the next element of the row, tile "
                           f"{_crd(crd[g, m, r, c + 1])}, at byte {off[g, m, r, c + 1]}: mode "
                           f"{axis} of the shared layout {smem} must have stride 1 along the "
                           f"row{_other_trans_hint(form)}", form, num)
    g, m, r = where(~aligned)
    return _Attempt(2, f"for {name}, {describe(g, m, r)} starts at byte {starts[g, m, r]}, "
                       f"not a multiple of {ROW_BYTES}: every row address must be {ROW_BYTES}-byte "
                       f"aligned (a row stride or tile offset of a multiple of "
                       f"{ROW_BYTES // form.slot_bytes} elements)", form, num)


def _try_units(form: CopyForm, num: int, ebytes: int, values: int, coords: np.ndarray,
               offset: np.ndarray, smem: Layout) -> _Attempt:
    """Check a ``.b16`` form without ``.trans`` against elements of ``ebytes`` bytes moved as
    16-bit units, byte by byte: the instruction puts register byte ``p`` of a lane (``4 * reg +
    byte``, counted on over its instructions) in some row byte; that is byte ``p % ebytes`` of the
    lane's value ``p // ebytes``, which must sit at that row byte in shared memory."""
    at = _unit_row_bytes(form.byte_map(num), values, ebytes)
    lane_v = at[..., 0], at[..., 1]
    addr = offset[lane_v] * ebytes + at[..., 2]        # the shared byte each row byte must be
    starts = addr[..., 0]
    contiguous = np.diff(addr, axis=3) == 1
    aligned = starts % ROW_BYTES == 0
    if contiguous.all() and aligned.all():
        return _Attempt(3, "", form, num, starts, units=True)
    rows = _UnitRows(form, num, ebytes, at, coords[lane_v])
    if ebytes <= 4:
        wrong = rows.register_mismatch()
        if wrong is not None:
            return wrong
    if not contiguous.all():
        return rows.not_contiguous(_where(~contiguous), offset, smem)
    g, m, r = _where(~aligned)
    return _Attempt(2, f"for {rows.what}, {rows.describe(g, m, r)} starts at byte "
                       f"{starts[g, m, r]}, not a multiple of {ROW_BYTES}: every row address "
                       f"must be {ROW_BYTES}-byte aligned (a row stride or tile offset of a "
                       f"multiple of {max(ROW_BYTES // ebytes, 1)} elements)", form, num,
                    units=True)


def _where(mask_bad: np.ndarray) -> tuple[int, ...]:
    """The index of the first True of ``mask_bad``."""
    return tuple(int(x) for x in np.argwhere(mask_bad)[0])


def _unit_row_bytes(bmap: np.ndarray, values: int, ebytes: int) -> np.ndarray:
    """``(group, matrix, row, byte) -> (lane, value, byte of the value)``: where a ``.b16``
    form (byte map ``bmap``) puts each register byte of a lane, over every instruction
    (group) the lane's values need."""
    regs = bmap.shape[1]
    per_instr = regs * 4                       # register bytes of a lane per instruction
    groups = values * ebytes // per_instr
    matrices = int(bmap[..., 0].max()) + 1
    rows = int(bmap[..., 1].max()) + 1
    cols = int(bmap[..., 2].max()) + 1
    at = np.full((groups, matrices, rows, cols, 3), -1, dtype=np.int64)
    for lane in range(layouts.WARP_SIZE):
        for reg in range(regs):
            for byte in range(4):
                m, r, c = bmap[lane, reg, byte]
                for g in range(groups):
                    p = g * per_instr + 4 * reg + byte
                    at[g, m, r, c] = (lane, p // ebytes, p % ebytes)
    return at


class _UnitRows:
    """The rows a ``.b16`` form moves, seen element by element (every ``ebytes``-th byte), for
    saying why elements moved as 16-bit units do not fit."""

    def __init__(self, form: CopyForm, num: int, ebytes: int, at: np.ndarray,
                 byte_crd: np.ndarray):
        self.form, self.num, self.ebytes, self.at = form, num, ebytes, at
        self.bits = 8 * ebytes
        self.groups, self.cols = at.shape[0], at.shape[3]
        self.what = f"{form.instruction(num)} moving {self.bits}-bit data as 16-bit units"
        self.step_bytes = min(ebytes, 4)       # a row's elements: every ebytes-th byte
        self.first = np.arange(0, self.cols, self.step_bytes)
        self.crd = byte_crd[:, :, :, self.first]   # (g, m, r, elements of the row, rank)
        self.ev = at[:, :, :, self.first]
        self.step = np.diff(self.crd, axis=3)

    def describe(self, g: int, m: int, r: int) -> str:
        ev, crd = self.ev, self.crd
        who = ", ".join(f"lane {int(ev[g, m, r, j, 0])} value {int(ev[g, m, r, j, 1])} "
                        f"= tile {_crd(crd[g, m, r, j])}" for j in range(min(3, len(self.first))))
        grp = f" of instruction {g}" if self.groups > 1 else ""
        return f"row {r} of matrix {m}{grp} ({who}, ...)"

    def register_mismatch(self) -> _Attempt | None:
        """Stage 0 when a row's elements are not neighbours along one axis of the tile, one
        step apart, in order (elements of at most 4 bytes); else None."""
        step, crd, ebytes = self.step, self.crd, self.ebytes
        in_order = (self.at[..., 2] == np.arange(self.cols) % ebytes).all(axis=-1)  # (g, m, r)
        unit = (np.abs(step).sum(axis=-1) == 1) & (step.max(axis=-1) == 1)
        same_axis = np.argmax(step, axis=-1) == np.argmax(step[:, :, :, :1], axis=-1)
        register_ok = unit & same_axis & in_order[..., None]
        if register_ok.all():
            return None
        g, m, r, j = _where(~register_ok)
        per_row = self.cols // ebytes
        return _Attempt(0, f"the register side is not the {self.form.shape} fragment pattern of "
                           f"{self.what}: {self.describe(g, m, r)}, {per_row} elements, must be "
                           f"neighbours along one axis of the tile, one step apart, but "
                           f"element {j + 1} of that row is tile {_crd(crd[g, m, r, j + 1])} "
                           f"after {_crd(crd[g, m, r, j])}", self.form, self.num, units=True)

    def not_contiguous(self, bad: tuple[int, ...], offset: np.ndarray,
                       smem: Layout) -> _Attempt:
        """Stage 1: the row at ``bad`` (g, m, r, byte) is not 16 contiguous bytes in shared
        memory; ``transposed`` when the tile runs along another mode there."""
        g, m, r, c = bad
        at, crd, first, ebytes = self.at, self.crd, self.first, self.ebytes
        j = c // self.step_bytes
        here, there = (int(offset[tuple(at[g, m, r, k, :2])] * ebytes) for k in (c, c + 1))
        msg = (f"for {self.what}, {self.describe(g, m, r)} must be {ROW_BYTES} contiguous bytes "
               f"in shared memory, but tile {_crd(crd[g, m, r, j])} is at byte {here} and the "
               f"next element of the row, tile {_crd(crd[g, m, r, min(j + 1, len(first) - 1)])}, "
               f"at byte {there}")
        transposed = False
        if ebytes <= 4 and len(first) > 1:
            axis = int(np.argmax(self.step[g, m, r, 0]))
            other = _contiguous_axis(smem, crd[g, m, r, 0], axis)
            if other is not None:
                transposed = True
                msg += self._transpose_note(other, axis)
            else:
                msg += f": mode {axis} of the shared layout {smem} must have stride 1 along the row"
        a = _Attempt(1, msg, self.form, self.num, units=True)
        a.transposed = transposed
        return a

    def _transpose_note(self, other: int, axis: int) -> str:
        """Why the copy would need a transpose that ``.trans`` cannot give 16-bit units."""
        bits = self.bits
        return (f": the shared tile is contiguous along mode {other}, not along the row "
                f"(mode {axis}), so the copy would need a transpose, and .trans does not "
                f"apply to {bits}-bit data moved as 16-bit units: "
                + ("it moves whole 16-bit units, two bytes that neighbour each other along "
                   "the stored row, so each register would get a 2x2 block of bytes, not "
                   f"4 neighbours along mode {axis}" if self.ebytes == 1 else
                   "it hands the 16-bit units of one shared row to different lanes, so "
                   f"the two halves of each {bits}-bit element would land in two lanes"))


def _contiguous_axis(smem: Layout, crd: np.ndarray, axis: int) -> int | None:
    """A mode other than ``axis`` along which the shared tile is contiguous (offset + 1) at
    ``crd``, or None."""
    c = [int(x) for x in np.atleast_1d(crd)]
    if smem.rank < 2:
        return None
    here = int(smem(*c))
    for b in range(smem.rank):
        if b == axis or c[b] + 1 >= smem.mode(b).size:
            continue
        nxt = list(c)
        nxt[b] += 1
        if int(smem(*nxt)) - here == 1:
            return b
    return None


def _other_trans_hint(form: CopyForm) -> str:
    """The other transposition as a way out, where that form exists (``stmatrix.m16n8`` of
    bytes has only ``.trans``)."""
    other = [f for f in copy_forms() if (f.opcode, f.shape, f.dtype) ==
             (form.opcode, form.shape, form.dtype) and f.trans != form.trans]
    if not other:
        return ""
    return " (or the register side must match the form with" + \
        ("out .trans)" if form.trans else " .trans)")


def _crd(c: np.ndarray) -> str:
    vals = [int(x) for x in np.atleast_1d(c)]
    return f"({','.join(map(str, vals))})" if len(vals) > 1 else str(vals[0])


def _addresses(a: _Attempt) -> tuple[np.ndarray, str]:
    """Per-lane byte addresses ``(instructions, 32)`` (``(warps, instructions, 32)`` for several
    warps) and the simplest affine formula that gives every one of them.

    Lanes whose address the instruction ignores get the address of the lane ``num * rows``
    below (the PTX ISA asks for valid addresses there for .target sm_75)."""
    rows_of = a.form.address_rows(a.num)
    bases = a.bases                                   # (warps, groups, matrices, rows)
    warps, groups, _, _ = bases.shape
    span = int((rows_of[:, 0] >= 0).sum())
    addrs = np.zeros((warps, groups, layouts.WARP_SIZE), dtype=np.int64)
    for lane in range(layouts.WARP_SIZE):
        m, r = rows_of[lane % span]
        addrs[:, :, lane] = bases[:, :, m, r]
    out = addrs[0] if warps == 1 else addrs
    lane_terms = _lane_formula(addrs[0, 0, :span] - addrs[0, 0, 0], span)
    b0 = int(addrs[0, 0, 0])
    dg = int(addrs[0, 1, 0] - b0) if groups > 1 else 0
    dw = int(addrs[1, 0, 0] - b0) if warps > 1 else 0
    w, g = np.meshgrid(np.arange(warps), np.arange(groups), indexing="ij")
    per_lane = addrs - addrs[:, :, :1]
    if lane_terms is None or not (
            np.array_equal(addrs[:, :, 0], b0 + dw * w + dg * g)
            and (per_lane == per_lane[0, 0]).all()):
        table = "; ".join(f"warp {i} instruction {j}: {addrs[i, j].tolist()}"
                          for i in range(warps) for j in range(groups))
        return out, f"addresses (bytes, lane 0..31) are not affine in the lane: {table}"
    terms = [str(b0)] if b0 else []
    terms += lane_terms
    if dg:
        terms.append(f"{dg} * i")
    if dw:
        terms.append(f"{dw} * warp")
    expr = " + ".join(terms) or "0"
    notes = ["bytes"]
    if groups > 1:
        notes.append(f"instruction i = 0..{groups - 1}")
    if warps > 1:
        notes.append(f"warp = thread / 32 = 0..{warps - 1}")
    return out, f"addr(lane) = smem + {expr}  ({', '.join(notes)})"


def _lane_splits(span: int) -> list[tuple[int, ...]]:
    """Every way to split the lanes 0..span-1 into mixed-radix digits (``lane % 8``,
    ``(lane / 8) % 2``, ``lane / 16`` ...), each radix a power of two: the row groupings of
    x1/x2/x4 (8 lanes per matrix) and of m16n16 (16 per matrix) are among them."""
    if span == 1:
        return [()]
    out = []
    r = 2
    while r <= span:
        out += [(r, *rest) for rest in _lane_splits(span // r)]
        r *= 2
    return out


def _lane_formula(rel: np.ndarray, span: int) -> list[str] | None:
    """The fewest ``c * digit`` terms whose sum is ``rel[lane]`` for every lane below ``span``
    (lanes at or above it repeat the lanes ``span`` below), or None when no split of the lane
    is affine. Ties go to the split whose first digit is a matrix's row (lane % 8 or % 16)."""
    lanes = np.arange(span)
    best = None
    for radices in _lane_splits(span):
        coef, digits, place = [], [], 1
        for r in radices:
            digits.append((lanes // place) % r)
            coef.append(int(rel[place]) if place < span else 0)
            place *= r
        if not np.array_equal(sum(c * d for c, d in zip(coef, digits)), rel):
            continue
        terms, place = [], 1
        for c, r in zip(coef, radices):
            if c:
                terms.append(f"{c} * {_digit(place, r, span)}")
            place *= r
        key = (len(terms), radices[0] not in (8, 16), len(radices))
        if best is None or key < best[0]:
            best = (key, terms)
    return None if best is None else best[1]


def _digit(place: int, radix: int, span: int) -> str:
    """The PTX/C expression of one lane digit (lanes at or above ``span`` wrap)."""
    top = place * radix == layouts.WARP_SIZE
    if place == 1:
        return "lane" if top else f"(lane % {radix})"
    div = f"(lane / {place})"
    return div if top else f"({div} % {radix})"
