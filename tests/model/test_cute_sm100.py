"""The sm_100a-class ldmatrix/stmatrix byte maps agree with CuTe's SM100 copy atoms.

No GPU we can use runs these forms, so the model's lane<->byte maps are checked against an
independent source: the ``Copy_Traits`` of every ``SM100_*_LDSM_*``/``SM100_*_STSM_*`` atom in
CuTe (``cute/atom/copy_traits_sm100.hpp``, shipped by the ``nvidia-cutlass`` package), evaluated
with CuTe's own layout algebra (``pycute``). Everything is parsed from the installed headers:
the layouts, the PTX instruction each atom issues (``cute/arch/copy_sm100.hpp``) and the byte
reordering CuTe's ``LDSM_T`` atoms apply to the registers after the instruction, which is undone
here so that the comparison is with what the instruction itself delivers.

How a traits layout reads: ``SrcLayout``/``DstLayout`` map ``(thread, bit)`` to a bit of a
common reference tensor. On the shared-memory side each thread that gives an address owns 128
contiguous reference bits (its 16-byte row); on the register side bit ``32*r + 8*b + i`` of a
thread is bit ``i`` of byte ``b`` of register ``r``. A register byte therefore names a reference
row (hence the lane whose address gave it) and a byte within that row.
"""
from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from ptxlab.model import matrix_forms

pycute = pytest.importorskip("pycute", reason="pycute ships with the nvidia-cutlass package "
                                              "(the dev extra)")


def _cute_include() -> Path | None:
    """CuTe's headers as the nvidia-cutlass package installs them, or None."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    inc = Path(list(spec.submodule_search_locations)[0]) / "source" / "include" / "cute"
    return inc if (inc / "atom" / "copy_traits_sm100.hpp").is_file() else None


INC = _cute_include()
pytestmark = pytest.mark.skipif(INC is None, reason="CuTe headers not found: pip install "
                                "nvidia-cutlass (the dev extra)")


def _cpp_layout(text: str) -> "pycute.Layout":
    """``Layout<Shape<...>, Stride<...>>`` in C++ -> a pycute Layout."""
    inner = text.strip()
    inner = re.sub(r"\b(?:Shape|Stride)\s*<", "(", inner)
    inner = re.sub(r"_(\d+)", r"\1", inner).replace(">", ",)")
    shape, stride = ast.literal_eval(" ".join(inner.split()))
    return pycute.Layout(shape[0] if len(shape) == 1 else shape,
                         stride[0] if len(stride) == 1 else stride)


def _traits(inc: Path) -> dict[str, dict[str, "pycute.Layout"]]:
    text = (inc / "atom" / "copy_traits_sm100.hpp").read_text()
    out = {}
    for m in re.finditer(r"struct Copy_Traits<(SM100_\w+_(?:LDSM|STSM)_\w+)>\s*\{(.*?)\n\};",
                         text, re.S):
        body = m.group(2)
        layouts = {}
        for name in ("SrcLayout", "DstLayout"):
            lm = re.search(name + r"\s*=\s*Layout<(.*?)>;", body, re.S)
            layouts[name] = _cpp_layout(lm.group(1))
        ref = re.search(r"RefLayout\s*=\s*(\w+);", body).group(1)
        layouts["RefLayout"] = layouts[ref]
        out[m.group(1)] = layouts
    return out


def _atoms(inc: Path) -> dict[str, tuple[str, dict[tuple[int, int], tuple[int, int]]]]:
    """atom -> (PTX opcode, {(dst reg, dst byte): (instruction reg, instruction byte)})."""
    text = (inc / "arch" / "copy_sm100.hpp").read_text()
    out = {}
    for m in re.finditer(r"struct (SM100_\w+_(?:LDSM|STSM)_\w+)\s*\{(.*?)\n\};", text, re.S):
        body = m.group(2)
        ptx = re.search(r'asm volatile\s*\(\s*"([^"]*?)\s*(?:\{|\[)', body).group(1).strip()
        shuffle = {}
        for d in re.finditer(r"uchar4 dst(\d+)_\{([^}]*)\};", body):
            for k, item in enumerate(x.strip() for x in d.group(2).split(",")):
                tm = re.fullmatch(r"tmp(\d+)_\.([xyzw])", item)
                shuffle[(int(d.group(1)), k)] = (int(tm.group(1)), "xyzw".index(tm.group(2)))
        out[m.group(1)] = (ptx, shuffle)
    return out


def _sources():
    return _traits(INC), _atoms(INC)


def _map_from_cute(mem_side: "pycute.Layout", reg_side: "pycute.Layout", regs: int,
                   shuffle: dict) -> tuple[np.ndarray, dict[int, int]]:
    """CuTe's ``(32, regs, 4)`` -> (address lane, byte in row), in instruction registers."""
    row_lane: dict[int, int] = {}
    for lane in range(32):
        start = mem_side(lane, 0)
        assert start % 128 == 0
        assert all(mem_side(lane, v) == start + v for v in range(128)), "rows are 16 bytes"
        row_lane.setdefault(start // 128, lane)          # a duplicate address is an ignored one
    out = np.full((32, regs, 4, 2), -1, dtype=np.int64)
    for lane in range(32):
        for d in range(regs):
            for k in range(4):
                bits = [reg_side(lane, 32 * d + 8 * k + i) for i in range(8)]
                assert bits == list(range(bits[0], bits[0] + 8)), "whole bytes move"
                reg, byte = shuffle.get((d, k), (d, k))
                out[lane, reg, byte] = (row_lane[bits[0] // 128], (bits[0] % 128) // 8)
    return out, row_lane


def _all_atoms() -> list[str]:
    return sorted(_traits(INC)) if INC is not None else []


@pytest.mark.parametrize("atom", _all_atoms())
def test_model_map_agrees_with_cute_sm100_atom(atom):
    traits, atoms = _sources()
    ptx, shuffle = atoms[atom]
    form = matrix_forms.parse_form(ptx)                   # the instruction the atom issues
    t = traits[atom]
    if form.op == "ldmatrix":
        mem_side, reg_side = t["SrcLayout"], t["DstLayout"]
    else:
        mem_side, reg_side = t["DstLayout"], t["SrcLayout"]
        assert not shuffle
    assert t["RefLayout"] is reg_side          # CuTe's reference is the register side
    assert pycute.size(reg_side) == 32 * 32 * form.regs
    cute, row_lane = _map_from_cute(mem_side, reg_side, form.regs, shuffle)

    ours = matrix_forms.byte_map(form)                    # (32, regs, 4, (matrix, row, col))
    roles = matrix_forms.address_lanes(form)
    used = sorted(row_lane.values())
    assert used == [lane for lane in range(32) if roles[lane, 0] >= 0], \
        f"{atom}: the lanes whose addresses are used differ"
    role_to_lane = {tuple(int(x) for x in roles[lane]): lane for lane in used}
    for lane in range(32):
        for reg in range(form.regs):
            for byte in range(4):
                m, r, c = (int(x) for x in ours[lane, reg, byte])
                want = tuple(int(x) for x in cute[lane, reg, byte])
                got = (role_to_lane[(m, r)], c)
                assert got == want, (f"{atom} ({form.ptx}): lane {lane} reg {reg} byte {byte}: "
                                     f"model says row of lane {got[0]}, byte {got[1]}; CuTe says "
                                     f"row of lane {want[0]}, byte {want[1]}")


def test_every_sm100_ldsm_stsm_atom_is_checked():
    """The header's atoms cover every shape and .num CuTe offers; a new atom there is a new case
    here, and these are the forms CuTe offers today."""
    traits, atoms = _sources()
    forms = {matrix_forms.parse_form(atoms[a][0]).ptx for a in traits}
    assert {"ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8",
            "ldmatrix.sync.aligned.m16n16.x2.trans.shared.b8",
            "ldmatrix.sync.aligned.m8n16.x4.shared.b8x16.b6x16_p32",
            "stmatrix.sync.aligned.m16n8.x4.trans.shared.b8"} <= forms
    assert len(traits) == 11 and set(traits) == set(atoms)


def test_ldsm_t_reorder_is_accounted_for():
    """CuTe's LDSM_T atoms shuffle bytes after the instruction (so that their register layout
    matches STSM_T's); without undoing it the maps would not agree."""
    traits, atoms = _sources()
    ptx, shuffle = atoms["SM100_U8x8_LDSM_T"]
    assert shuffle and any(k != v for k, v in shuffle.items())
    form = matrix_forms.parse_form(ptx)
    t = traits["SM100_U8x8_LDSM_T"]
    raw, _ = _map_from_cute(t["SrcLayout"], t["DstLayout"], form.regs, {})
    fixed, _ = _map_from_cute(t["SrcLayout"], t["DstLayout"], form.regs, shuffle)
    assert not np.array_equal(raw, fixed)


def _table(lay: "pycute.Layout") -> np.ndarray:
    threads = pycute.size(lay.shape[0]) if isinstance(lay.shape, tuple) else 1
    return np.array([[lay(t, v) for v in range(pycute.size(lay) // threads)]
                     for t in range(threads)])


def test_named_sm100_atoms_are_the_headers():
    """Every SM100 atom the course names (``cute_atoms.SM100_COPY_ATOMS``) is in the header with the
    same layouts (compared as pycute tables), issues the instruction the entry says, and
    reorders the bytes as the entry says; and every header atom is named."""
    from ptxlab.model import cute_atoms
    traits, atoms = _sources()
    named = {a.name: a for a in cute_atoms.SM100_COPY_ATOMS}
    assert set(named) == set(traits)
    for name, atom in named.items():
        ptx, shuffle = atoms[name]
        assert matrix_forms.parse_form(ptx).ptx == atom.instruction, name
        assert dict(zip(((d, k) for d in range(atom.form.regs) for k in range(4)),
                        atom.reorder)) == shuffle, name
        for side, text in (("SrcLayout", atom.src), ("DstLayout", atom.dst)):
            shape, stride = (ast.literal_eval(part.replace(")", ",)")) for part in text.split(":"))
            np.testing.assert_array_equal(_table(pycute.Layout(shape, stride)),
                                          _table(traits[name][side]), err_msg=f"{name} {side}")
