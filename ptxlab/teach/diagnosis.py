"""Why a kernel's output is wrong, told from evidence rather than from the text of its source.

A wrong output is compared with what each *plausible mistake* would have produced, every one
computed with the emulator from the layouts: the same instruction at other row addresses (rows
one off, the row stride in elements instead of bytes or doubled), with ``.trans`` toggled, the
registers in another order, the operands of ``mma`` exchanged, and so on. The first suspect
whose output matches the learner's exactly is the cause, said with the lane and register that
show it; when none matches, nothing is claimed (a wrong guess teaches worse than silence).

Pure functions on numpy arrays: nothing here runs a kernel. The exercises build the suspects of
each run (:func:`load_suspects`, :func:`store_suspects`, their own mma suspects) and the checks
call :func:`first_match`, :func:`register_cause` and :func:`with_proof`.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..model import emulator, layouts
from ..run.ptx.errors import lanes_text, number_runs
from .tiles import ELEM_BYTES, Placement

__all__ = ["Suspect", "Deferred", "MAX_CAUSE", "first_match", "with_proof", "row_addresses",
           "address_suspects", "load_suspects", "store_suspects",
           "stored_tile", "register_mapping", "register_proof", "register_cause", "word_names",
           "row_shift_cause"]

#: A cause longer than this is cut: one cause, said in a few lines of a notebook's output (the
#: same bound as a race's or a barrier's, :data:`ptxlab.run.failure.MAX_CAUSE`).
MAX_CAUSE = 400


@dataclass(frozen=True)
class Suspect:
    """One plausible mistake: the output a kernel making it would give (``None`` where the
    hardware would fault or the emulator refuses it, so it cannot match) and the cause in
    words. ``cause`` may hold ``{proof}``, filled with the lane and register that show it.
    ``source(r, c)``, where the mistake moves values rather than computing wrong ones, names the
    lane and register whose value it leaves in cell (r, c) (``"lane 0's d2"``)."""

    output: np.ndarray | None
    cause: str
    source: Callable[[int, int], str | None] | None = None


class Deferred(Sequence):
    """Suspects computed the first time a wrong output asks for them: a right output, the usual
    case (a class of correct submissions in the grader), costs none of their emulation."""

    def __init__(self, make: Callable[[], Iterable]) -> None:
        self._make: Callable[[], Iterable] | None = make
        self._items: list = []

    def _all(self) -> list:
        if self._make is not None:
            self._items, self._make = list(self._make()), None
        return self._items

    def __getitem__(self, index):
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._all())


def first_match(got: np.ndarray, suspects: Sequence[Suspect]) -> Suspect | None:
    """The first suspect whose output equals ``got`` exactly (same shape, same bits)."""
    got = np.asarray(got)
    for s in suspects:
        if s.output is None:
            continue
        out = np.asarray(s.output)
        if out.shape == got.shape and np.array_equal(out.astype(got.dtype), got):
            return s
    return None


def with_proof(cause: str, proof: str = "") -> str:
    """``cause`` with its ``{proof}`` filled (or the proof appended), cut to :data:`MAX_CAUSE`."""
    if "{proof}" in cause:
        text = cause.replace("{proof}", f"({proof})" if proof else "").rstrip()
    else:
        text = cause + (f" ({proof})" if proof else "")
    return text if len(text) <= MAX_CAUSE else text[:MAX_CAUSE - 3].rstrip() + "..."


# ---------------------------------------------------------------------------------------------
# Row addresses a kernel gives, right and wrong
# ---------------------------------------------------------------------------------------------

def row_addresses(placement: Placement, base: int, stride: int, *, shift: int = 0,
                  order: Sequence[int] | None = None, within: bool = False) -> np.ndarray:
    """Per lane, the byte address ldmatrix/stmatrix takes for ``placement`` in a tile at
    ``base`` with rows ``stride`` bytes apart (``-1`` where the lane's address is ignored).

    ``shift`` moves every lane to the tile row ``shift`` further down (wrapping at the tile's
    rows, as ``(lane + 1) % 16`` does); ``order[i]`` makes lanes 8i..8i+7 point at matrix
    ``order[i]``'s rows instead of matrix i's; ``within`` wraps the shift at each matrix's
    8 rows instead (as ``(lane + 1) % 8`` does)."""
    out = np.full(layouts.WARP_SIZE, -1, dtype=np.int64)
    lanes = layouts.row_address_lanes(placement.num)
    for i in range(placement.num):
        r0, c0 = placement.origins[order[i] if order is not None else i]
        for r in range(8):
            row = r0 + (r + shift) % 8 if within else (r0 + r + shift) % placement.rows
            out[lanes[i, r]] = base + row * stride + c0 * ELEM_BYTES
    return out


def address_suspects(placement: Placement, base: int, stride: int,
                     stride_name: str = "sld", natural: int | None = None
                     ) -> list[tuple[np.ndarray, str]]:
    """Row addresses of the usual address mistakes, each with its cause: the row stride taken
    in elements (half the bytes), doubled twice, or written as the tile's width ``natural``
    (default: the placement's columns) where the rows are padded; every row one off (up or
    down); the lanes of one matrix pointing at another matrix's rows."""
    elems = stride // ELEM_BYTES
    natural = placement.cols if natural is None else natural
    out = []
    if stride % (2 * ELEM_BYTES) == 0:
        out.append((row_addresses(placement, base, stride // 2),
                    f"your rows are {stride // 2} bytes apart, half the row stride: a row of "
                    f"this tile is {stride_name} = {elems} elements = {stride} bytes "
                    f"({stride_name} * 2; addresses count bytes) {{proof}}"))
    out.append((row_addresses(placement, base, stride * 2),
                f"your rows are {2 * stride} bytes apart, twice the row stride: {stride_name} "
                f"= {elems} elements is {stride} bytes, so multiply by 2 once {{proof}}"))
    if natural != elems and natural * ELEM_BYTES not in (stride // 2, stride * 2):
        out.append((row_addresses(placement, base, natural * ELEM_BYTES),
                    f"your rows are {natural} elements apart, but this tile's are "
                    f"{stride_name} = {elems} (the rows are padded): use {stride_name}, not "
                    f"{natural} {{proof}}"))
    for k in (1, -1):
        whole = row_addresses(placement, base, stride, shift=k)
        out.append((whole,
                    f"every lane points one tile row {'further down' if k > 0 else 'higher up'}"
                    f" than its own, wrapping at row {placement.rows}: lane 8i + r gives row r "
                    f"of matrix i, counted from 0 (`(lane {'+' if k > 0 else '-'} 1) % "
                    f"{placement.rows}` is one off) {{proof}}"))
        each = row_addresses(placement, base, stride, shift=k, within=True)
        if not np.array_equal(each, whole):
            out.append((each,
                        f"every lane points one row {'further down' if k > 0 else 'higher up'} "
                        "than its own inside its 8x8 matrix, wrapping at the matrix's row 8: "
                        "lane 8i + r gives row r of matrix i, counted from 0 "
                        f"(`(lane {'+' if k > 0 else '-'} 1) % 8` is one off) {{proof}}"))
    for i, j in itertools.permutations(range(placement.num), 2):
        order = list(range(placement.num))
        order[i] = j
        r0, c0 = placement.origins[i]
        out.append((row_addresses(placement, base, stride, order=order),
                    f"lanes {8 * i}-{8 * i + 7} point at the rows of "
                    f"{placement.describe_matrix(j)}, which lanes {8 * j}-{8 * j + 7} already "
                    f"give; theirs are matrix {i}'s rows {r0}-{r0 + 7} at column {c0}: "
                    "lanes 8i..8i+7 give the rows of matrix i {proof}"))
    return out


def _emulated(fn: Callable[[], np.ndarray]) -> np.ndarray | None:
    try:
        return fn()
    except emulator.EmulatorError:
        return None


def load_suspects(smem_u8: np.ndarray, placement: Placement, base: int, stride: int, *,
                  trans: bool, stride_name: str = "sld",
                  trans_cause: str | None = None) -> list[Suspect]:
    """What ldmatrix gives for the usual mistakes, from a tile in ``smem_u8`` (bytes).
    ``trans_cause`` words the ``.trans`` mistake in the exercise's terms."""
    num = placement.num
    right = row_addresses(placement, base, stride)
    wording = trans_cause or ("the load has no .trans, and needs it: every 8x8 block arrived as stored, "
               "not turned around {proof}" if trans else
               "the load has .trans where it must not: every 8x8 block arrived turned around "
               "{proof}")
    out = [Suspect(_emulated(lambda: emulator.ldmatrix(smem_u8, right, num=num, trans=not trans)),
                   wording)]
    for addrs, cause in address_suspects(placement, base, stride, stride_name):
        out.append(Suspect(_emulated(lambda a=addrs: emulator.ldmatrix(smem_u8, a, num=num,
                                                                       trans=trans)), cause))
    return out


def stored_tile(regs: np.ndarray, placement: Placement, stride_elems: int, addrs: np.ndarray,
                *, trans: bool, fill: int, rows: int | None = None) -> np.ndarray | None:
    """The ``(rows, cols)`` tile stmatrix leaves at ``addrs`` (bytes from the tile's start) in
    memory of ``rows`` rows of ``stride_elems`` 16-bit elements filled with ``fill``; ``None``
    where the emulator refuses the store."""
    rows = placement.rows if rows is None else rows
    smem = np.full(rows * stride_elems, fill, dtype=np.uint16)
    try:
        emulator.stmatrix(smem.view(np.uint8), addrs, regs, num=placement.num, trans=trans)
    except emulator.EmulatorError:
        return None
    return smem.reshape(rows, stride_elems)[:placement.rows, :placement.cols].copy()


def store_suspects(regs: np.ndarray, placement: Placement, stride_elems: int, *, trans: bool,
                   fill: int, reg_names: Sequence[str] | None = None,
                   stride_name: str = "sld") -> list[Suspect]:
    """What stmatrix stores for the usual mistakes: ``.trans`` toggled, the registers (or the
    blocks lanes point at) in another order, one register stored twice, then the address
    mistakes of :func:`address_suspects` (registers first: where a register mistake explains
    the output, the addresses are right)."""
    num = placement.num
    stride = stride_elems * ELEM_BYTES
    names = list(reg_names or [f"r{i}" for i in range(num)])
    right = row_addresses(placement, 0, stride)

    def store(addrs, registers=regs, t=trans):
        return stored_tile(registers, placement, stride_elems, addrs, trans=t, fill=fill)

    out = [Suspect(store(right, t=not trans),
                   ("the store has no .trans, and needs it: every 8x8 block was stored as held, "
                    "not turned around {proof}") if trans else
                   ("the store has .trans where it must not: every 8x8 block was stored turned "
                    "around (column by column) {proof}"))]
    for perm in itertools.permutations(range(num)):
        if list(perm) == list(range(num)):
            continue
        moved = [i for i in range(num) if perm[i] != i]
        i = moved[0]
        head = (f"{names[perm[i]]} and {names[i]} traded places" if len(moved) == 2
                else "the 8x8 blocks are stored in the wrong places")
        out.append(Suspect(
            store(right, registers=np.asarray(regs)[:, list(perm)]),
            f"{head}: {names[perm[i]]} went where {names[i]} belongs "
            f"{placement.describe_matrix(i).split(' ', 2)[2]}. Register i "
            "is stored at the rows lanes 8i..8i+7 point at, in the order of the asm's register "
            f"list {{{', '.join(names)}}}: that list, or the rows those lanes point at, is out "
            "of order {proof}"))
    for k in (1, 2):
        if k < num:
            fewer = np.full(placement.rows * stride_elems, fill, dtype=np.uint16)
            try:
                emulator.stmatrix(fewer.view(np.uint8), right, np.asarray(regs)[:, :k], num=k,
                                  trans=trans)
                tile = fewer.reshape(placement.rows, stride_elems)[:, :placement.cols].copy()
            except emulator.EmulatorError:
                tile = None
            out.append(Suspect(
                tile, f"only {', '.join(names[:k])} {'was' if k == 1 else 'were'} stored: the "
                f"store is .x{k}, so {', '.join(names[k:])} never reached memory; use .x{num} "
                f"with {{{', '.join(names)}}} {{proof}}"))
    for i, j in itertools.permutations(range(num), 2):
        twice = list(range(num))
        twice[i] = j
        out.append(Suspect(
            store(right, registers=np.asarray(regs)[:, twice]),
            f"{names[j]} is stored twice and {names[i]} never: {names[j]} went where "
            f"{names[i]} belongs {placement.describe_matrix(i).split(' ', 2)[2]}. The "
            f"addresses are right; the asm's register list {{{', '.join(names)}}} names "
            f"{names[j]} in {names[i]}'s place (register i is stored at the rows lanes "
            "8i..8i+7 point at) {proof}"))
    for addrs, cause in address_suspects(placement, 0, stride, stride_name):
        out.append(Suspect(store(addrs), cause))
    return out


# ---------------------------------------------------------------------------------------------
# Registers: which register holds which
# ---------------------------------------------------------------------------------------------

def word_names(word: int, describe: Callable[[int], str] | None) -> str:
    """The two 16-bit values of a register, named (``A[0][8], A[0][9]``) or in hex."""
    word = int(word)
    if describe is None:
        return f"0x{word:08x}"
    return f"{describe(word & 0xFFFF)}, {describe(word >> 16)}"


def register_mapping(got: np.ndarray, exp: np.ndarray) -> list[int] | None:
    """``m`` with ``got[:, j] == exp[:, m[j]]`` for every register ``j``, where each register
    the kernel gave is, lane for lane, one the emulator gives; ``None`` otherwise or when
    ``m`` is the identity."""
    got, exp = np.asarray(got), np.asarray(exp)
    mapping = []
    for j in range(got.shape[1]):
        same = [k for k in range(exp.shape[1]) if np.array_equal(got[:, j], exp[:, k])]
        if not same:
            return None
        mapping.append(j if j in same else same[0])
    return None if mapping == list(range(got.shape[1])) else mapping


def _first_wrong(got: np.ndarray, exp: np.ndarray) -> tuple[int, int]:
    lane, reg = np.argwhere(np.asarray(got) != np.asarray(exp))[0]
    return int(lane), int(reg)


def register_proof(got: np.ndarray, exp: np.ndarray, describe: Callable[[int], str] | None,
                   unit: str = "reg") -> str:
    """The first wrong register as evidence: what it holds and whose it should be."""
    got, exp = np.asarray(got), np.asarray(exp)
    lane, reg = _first_wrong(got, exp)
    g = int(got[lane, reg])
    text = f"lane {lane} {unit} {reg} holds {word_names(g, describe)}"
    home = np.argwhere(exp == g)
    if len(home):
        l2, r2 = (int(x) for x in home[0])
        return text + f", which belong in lane {l2}'s {unit} {r2}"
    return text + f" where {word_names(int(exp[lane, reg]), describe)} belong"


def register_cause(got: np.ndarray, exp: np.ndarray, suspects: Sequence[Suspect] = (), *,
                   describe: Callable[[int], str] | None = None, unit: str = "reg",
                   loaded_from: Placement | None = None) -> str | None:
    """The cause of a wrong ``(32, n)`` register output, or ``None`` when no evidence names one.

    In order: registers that are the right ones in the wrong order (or one repeated), then the
    first matching suspect, then (``loaded_from``: the registers an ldmatrix loaded from that
    placement, where lanes 8i..8i+7 give register i's rows) the registers alone that are
    wrong."""
    got, exp = np.asarray(got), np.asarray(exp)
    proof = register_proof(got, exp, describe, unit)
    mapping = register_mapping(got, exp)
    lanes_give_rows = loaded_from is not None
    if mapping is not None:
        j = next(j for j, k in enumerate(mapping) if k != j)
        if sorted(mapping) == list(range(len(mapping))):
            if lanes_give_rows and mapping == _reading_order(loaded_from):
                return with_proof(
                    "your registers hold the 8x8 blocks in reading order (left to right, then "
                    f"down); the instruction's order is {_block_order(loaded_from)}: lanes "
                    f"8i..8i+7 must point at block i of that order, and the asm's output list "
                    f"name the registers in order ({proof})")
            where = (" (lanes 8i..8i+7 give register i's rows, the asm's output list "
                     "{%0, %1, ...} names the registers in order, and each is written to its "
                     "own place of the output: one of these is out of order)"
                     if lanes_give_rows else "")
            return with_proof(f"the registers are right but in the wrong order: your {unit} "
                              f"{j} holds what {unit} {mapping[j]} must hold{where}; {proof}")
        twice = mapping[j]
        lanes = (f": lanes {8 * j}-{8 * j + 7} point at the rows of lanes "
                 f"{8 * twice}-{8 * twice + 7}, or {unit} {twice} is written out twice"
                 if lanes_give_rows else "")
        return with_proof(f"your {unit} {j} holds what {unit} {twice} must hold, so {unit} "
                          f"{twice}'s values come out twice{lanes}; {proof}")
    hit = first_match(got, suspects)
    if hit is not None:
        return with_proof(hit.cause, proof)
    if lanes_give_rows:
        bad = sorted({int(r) for r in np.nonzero((got != exp).any(axis=0))[0]})
        if len(bad) < got.shape[1]:
            rows = lanes_text(l for r in bad for l in range(8 * r, 8 * r + 8))
            return with_proof(f"only {unit} {number_runs(bad)} {'is' if len(bad) == 1 else 'are'}"
                              f" wrong; the others are right: look at the rows {rows} point at "
                              f"(lanes 8i..8i+7 give {unit} i's rows); {proof}")
    return None


def _reading_order(placement: Placement) -> list[int]:
    """The matrices of ``placement`` in reading order: by tile row, then by column."""
    return sorted(range(placement.num), key=lambda i: placement.origins[i])


def _block_order(placement: Placement) -> str:
    return ", ".join(f"rows {r}-{r + 7}/columns {c}-{c + 7}" for r, c in placement.origins)


# ---------------------------------------------------------------------------------------------
# Addresses of an address exercise: every row shifted
# ---------------------------------------------------------------------------------------------

def row_shift_cause(rows_got: Sequence[int | None], rows_exp: Sequence[int | None],
                    cols_got: Sequence[int | None], cols_exp: Sequence[int | None],
                    n_rows: int) -> str | None:
    """Every lane pointing ``k`` tile rows from its own, wrapping at ``n_rows`` (the column
    right): the cause with the lane that shows it, else ``None``."""
    pairs = [(i, g, e) for i, (g, e, cg, ce) in enumerate(zip(rows_got, rows_exp, cols_got,
                                                              cols_exp))
             if e is not None]
    if not pairs or any(g is None for _, g, _ in pairs) \
            or any(cols_got[i] != cols_exp[i] for i, _, _ in pairs):
        return None
    shifts = {(g - e) % n_rows for _, g, e in pairs}
    if len(shifts) != 1 or shifts == {0}:
        return None
    k = shifts.pop()
    k = k - n_rows if k > n_rows // 2 else k
    wrap = next(((i, g, e) for i, g, e in pairs if g != e + k), pairs[0])
    lane, g, e = wrap
    return with_proof(f"every lane points {abs(k)} tile row{'s' if abs(k) > 1 else ''} "
                      f"{'further down' if k > 0 else 'higher up'} than its own, wrapping at "
                      f"row {n_rows}: lane {lane} points at row {g} where row {e} belongs. The "
                      "row a lane addresses is its own, counted from 0 (a row of "
                      f"`(lane {'+' if k > 0 else '-'} {abs(k)}) % {n_rows}` is "
                      f"{'one' if abs(k) == 1 else abs(k)} off)")
