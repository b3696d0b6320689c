"""CuTe side by side: our ldmatrix/stmatrix/movmatrix/mma layouts against CuTe's atoms.

The atoms' layouts in ``ptxlab.model.cute_atoms`` are transcriptions; this test re-reads them
from the CuTe headers that ``nvidia-cutlass`` installs, evaluates them with pycute (CuTe's own
Python layout algebra) and compares every (thread, value) with our layouts. Each atom's
instruction and (for SM100's ``LDSM_T``) its byte reorder after the instruction are re-read from
the ``cute/arch/copy_sm*.hpp`` header that issues it."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from ptxlab.model import cute_atoms

pycute = pytest.importorskip("pycute")
cutlass_library = pytest.importorskip("cutlass_library")

INCLUDE = Path(cutlass_library.__file__).parent / "source" / "include"


def _tuple_text(cpp: str) -> str:
    """``Shape <Shape <_8,_4>,_128>`` -> ``((8,4),128)``."""
    s = re.sub(r"\s+", "", cpp)
    s = re.sub(r"(Shape|Stride)<", "(", s).replace(">", ")").replace("_", "")
    return s


def _split_top(s: str) -> tuple[str, str]:
    depth = 0
    for i, ch in enumerate(s):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            return s[:i], s[i + 1:]
    raise AssertionError(f"no top-level comma in {s!r}")


def _layout_text(cpp: str, header: str) -> str:
    cpp = re.sub(r"\s+", "", cpp)
    alias = re.fullmatch(r"typenameCopy_Traits<(\w+)>::(\w+)", cpp)
    if alias:
        return _header_layouts(alias.group(1), header)[alias.group(2)]
    if re.fullmatch(r"\w+", cpp):       # a named layout such as SM80_16x8_Row
        text = (INCLUDE / header).read_text()
        m = re.search(rf"using\s+{cpp}\s*=\s*(Layout<.*?>>)\s*;", text, re.S)
        return _layout_text(m.group(1), header)
    inner = cpp[len("Layout<"):-1]
    shape, stride = _split_top(inner)
    return f"{_tuple_text(shape)}:{_tuple_text(stride)}"


def _header_layouts(name: str, header: str) -> dict[str, str]:
    """The layouts of ``Copy_Traits<name>`` / ``MMA_Traits<name>``, following inheritance."""
    for file in (header, cute_atoms.COPY_SM75):
        text = (INCLUDE / file).read_text()
        m = re.search(rf"struct (?:Copy|MMA)_Traits<{name}>\s*(:\s*MMA_Traits<(\w+)>)?\s*\{{(.*?)\n\}};",
                      text, re.S)
        if m:
            break
    assert m, f"{name} not found in {header}"
    found = {k: v for k, v in re.findall(r"using\s+(\w+Layout)\s*=\s*(.*?);", m.group(3), re.S)
             if k != "RefLayout"}
    out = _header_layouts(m.group(2), header) if m.group(2) else {}
    out.update({k: _layout_text(v, file) for k, v in found.items()})
    return out


def _pycute_table(text: str) -> np.ndarray:
    lay = pycute.Layout(*_parse_pair(text))
    threads = pycute.size(pycute.Layout(lay.shape[0], lay.stride[0]))
    values = pycute.size(lay) // threads
    return np.array([[lay(t + threads * v) for v in range(values)] for t in range(threads)])


def _parse_pair(text: str):
    """``"((8,4),128):((128,0),1)"`` as Python tuples (read independently of ptxlab's parser)."""
    return tuple(ast.literal_eval(part.replace(")", ",)")) for part in text.split(":"))


@pytest.mark.parametrize("atom", cute_atoms.ALL_COPY_ATOMS, ids=lambda a: a.name)
def test_copy_atom_transcribed_from_the_header(atom):
    header = _header_layouts(atom.name, atom.header)
    assert header["SrcLayout"] == atom.src
    assert header["DstLayout"] == atom.dst


@pytest.mark.parametrize("atom", cute_atoms.MMA_ATOMS, ids=lambda a: a.name)
def test_mma_atom_transcribed_from_the_header(atom):
    header = _header_layouts(atom.name, atom.header)
    assert (header["ALayout"], header["BLayout"], header["CLayout"]) == (atom.a, atom.b, atom.c)


M8N8 = cute_atoms.COPY_ATOMS
SM100 = cute_atoms.SM100_COPY_ATOMS


def _arch_struct(atom) -> str:
    text = (INCLUDE / atom.arch_header).read_text()
    m = re.search(rf"struct {atom.name}\s*\{{(.*?)\n\}};", text, re.S)
    assert m, f"{atom.name} not found in {atom.arch_header}"
    return m.group(1)


def _header_reorder(body: str) -> tuple[tuple[int, int], ...]:
    """``uchar4 dst0_{tmp0_.x, tmp0_.y, tmp1_.x, tmp1_.y};`` ... as ((0, 0), (0, 1), (1, 0), ...)."""
    out = []
    for d in re.finditer(r"uchar4 dst(\d+)_\{([^}]*)\}", body):
        assert int(d.group(1)) == len(out) // 4
        for item in d.group(2).split(","):
            tm = re.fullmatch(r"tmp(\d+)_\.([xyzw])", item.strip())
            out.append((int(tm.group(1)), "xyzw".index(tm.group(2))))
    return tuple(out)


@pytest.mark.parametrize("atom", cute_atoms.ALL_COPY_ATOMS, ids=lambda a: a.name)
def test_copy_atom_issues_the_instruction_in_the_header(atom):
    from ptxlab.model import matrix_forms
    body = _arch_struct(atom)
    opcode = re.search(r'asm\s+volatile\s*\(\s*"\s*([\w.:]+)', body).group(1)
    assert matrix_forms.parse_form(opcode).ptx == atom.instruction, (
        f"{atom.name} issues {opcode}, the entry says {atom.instruction}")
    assert _header_reorder(body) == atom.reorder


@pytest.mark.parametrize("atom", M8N8, ids=lambda a: a.name)
def test_copy_atom_agrees_with_our_layouts(atom):
    ours = cute_atoms.register_bits(atom.opcode, atom.num, atom.trans)
    theirs = _pycute_table(atom.register_side)
    assert theirs.shape == ours.shape
    bad = np.argwhere(theirs != ours)
    assert not len(bad), f"{atom.name}: lane {bad[0][0]} value {bad[0][1]}: CuTe bit " \
                         f"{theirs[tuple(bad[0])]}, ours {ours[tuple(bad[0])]}"
    # our evaluator reads the same strings the same way
    np.testing.assert_array_equal(cute_atoms.evaluate(atom.register_side), theirs)
    if atom.shared_side is not None:
        np.testing.assert_array_equal(_pycute_table(atom.shared_side), cute_atoms.shared_bits(atom.num))
    else:  # movmatrix: the same register bits on both sides
        assert atom.src == atom.dst


@pytest.mark.parametrize("atom", SM100, ids=lambda a: a.name)
def test_sm100_atom_agrees_with_our_byte_map(atom):
    """Our byte map of the instruction the atom issues, its bytes reordered as the atom does and
    its rows placed where the atom's shared side puts them, is the atom's register layout."""
    from ptxlab.model import matrix_forms
    form = atom.form
    shared = _pycute_table(atom.shared_side)
    assert shared.shape == (32, 128)
    for lane in range(32):     # each lane's address names one 16-byte row, whole
        np.testing.assert_array_equal(shared[lane], shared[lane, 0] + np.arange(128))
    first = {}
    for lane in range(32):     # a row named twice: the second lane's address is ignored
        first.setdefault(int(shared[lane, 0]), lane)
    roles = matrix_forms.address_lanes(form)
    assert sorted(first.values()) == [ln for ln in range(32) if roles[ln, 0] >= 0], \
        f"{atom.name}: the lanes whose addresses are used differ"
    theirs = _pycute_table(atom.register_side)
    ours = cute_atoms.atom_register_bits(atom, shared)
    assert theirs.shape == ours.shape == (32, 32 * form.regs)
    bad = np.argwhere(theirs != ours)
    assert not len(bad), f"{atom.name} ({atom.instruction}): lane {bad[0][0]} value " \
                         f"{bad[0][1]}: CuTe bit {theirs[tuple(bad[0])]}, ours {ours[tuple(bad[0])]}"
    np.testing.assert_array_equal(cute_atoms.evaluate(atom.register_side), theirs)


def test_every_sm100_ldsm_stsm_atom_is_named():
    text = (INCLUDE / cute_atoms.COPY_SM100).read_text()
    in_header = set(re.findall(r"struct Copy_Traits<(SM100_\w+_(?:LDSM|STSM)_\w+)>", text))
    assert {a.name for a in SM100} == in_header
    assert all(a.shape == "m8n8" and a.dtype == "b16" for a in M8N8)
    assert cute_atoms.ALL_COPY_ATOMS == M8N8 + SM100
    assert len({a.instruction for a in SM100}) == len(SM100)


def test_an_sm100_atom_without_its_reorder_disagrees():
    """The reorder matters: SM100_U8x8_LDSM_T read as if the instruction's bytes stayed put."""
    import dataclasses
    atom = cute_atoms.copy_atom("ldmatrix", 1, True, shape="m16n16", dtype="b8")
    plain = dataclasses.replace(atom, reorder=())
    assert not np.array_equal(cute_atoms.atom_register_bits(plain),
                              _pycute_table(atom.register_side))


@pytest.mark.parametrize("atom", cute_atoms.MMA_ATOMS, ids=lambda a: a.name)
@pytest.mark.parametrize("operand", ["A", "B", "C"])
def test_mma_atom_agrees_with_our_layouts(atom, operand):
    ours = cute_atoms.mma_elements(*atom.form, operand)
    theirs = _pycute_table({"A": atom.a, "B": atom.b, "C": atom.c}[operand])
    np.testing.assert_array_equal(theirs, ours, err_msg=f"{atom.name} {operand}")


def test_a_wrong_layout_is_caught():
    """The comparison can fail: a transposed atom against the plain fragment."""
    t = cute_atoms.copy_atom("ldmatrix", 1, True)
    assert not np.array_equal(_pycute_table(t.register_side),
                              cute_atoms.register_bits("ldmatrix", 1, False))


def test_lookup_and_caption():
    from ptxlab.model import matrix_forms
    assert cute_atoms.copy_atom("stmatrix", 4, True).name == "SM90_U16x8_STSM_T"
    for text, name in (
            ("ldmatrix.sync.aligned.m16n16.x2.trans.shared::cta.b8", "SM100_U8x16_LDSM_T"),
            ("ldmatrix.sync.aligned.m8n16.x2.shared.b8x16.b6x16_p32", "SM100_SU6_DU8x16_x2_LDSM_N"),
            ("stmatrix.sync.aligned.m16n8.x1.trans.shared.b8", "SM100_U8x4_STSM_T"),
            ("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "SM75_U16x8_LDSM_T"),
            ("movmatrix.sync.aligned.m8n8.trans.b16", "SM75_U32x1_MOVM_T")):
        assert cute_atoms.copy_atom_for(matrix_forms.parse_form(text)).name == name
    assert cute_atoms.copy_atom_for(matrix_forms.parse_form(
        "ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8x16.b4x16_p64")) is None
    lines = cute_atoms.caption_lines(cute_atoms.copy_atom("ldmatrix", 2, True, shape="m16n16",
                                                          dtype="b8"))
    assert "ldmatrix.sync.aligned.m16n16.x2.trans.shared.b8" in lines[0]
    assert "r3 = {r2.b2, r2.b3, r3.b2, r3.b3}" in lines[-1]
    assert cute_atoms.copy_atom("ldmatrix", 2, False).name == "SM75_U32x2_LDSM_N"
    assert "SM80_16x8x16_F32F16F16F32_TN" in cute_atoms.caption(
        cute_atoms.mma_atom("m16n8k16", "f16", "f16", "f32", "f32"))


def test_fragment_map_names_the_cute_atom():
    widgets = pytest.importorskip("ptxlab.teach.widgets")
    pytest.importorskip("ipywidgets")
    html = widgets.FragmentMap(num=2, trans=False).html()
    atom = cute_atoms.copy_atom("ldmatrix", 2, False)
    assert atom.name in html and atom.register_side in html
    assert "SM90_U32x2_STSM_N" in html
    mma = widgets.FragmentMap(kind="mma operand B").html()
    assert "SM80_16x8x16_F32F16F16F32_TN" in mma


def test_lane_players_name_the_cute_atom():
    widgets = pytest.importorskip("ptxlab.teach.widgets")
    pytest.importorskip("ipywidgets")
    assert "SM75_U16x4_LDSM_T" in widgets.LanePlayer.rows(num=2, trans=True).html()
    assert "SM90_U32x4_STSM_N" in widgets.LanePlayer.rows(num=4, instruction="stmatrix").html()
    assert "SM75_U32x1_MOVM_T" in widgets.LanePlayer.movmatrix().html()
    assert "SM80_16x8x16_F32F16F16F32_TN" in widgets.LanePlayer.mma().html()
    assert "SM80_16x8x32_S32S8S8S32_TN" in widgets.LanePlayer.mma(
        ("m16n8k32", "s8", "s8", "s32", "s32")).html()


def test_every_mma_variant_of_the_course_has_its_atom():
    from ptxlab.model import layouts
    assert {a.form for a in cute_atoms.MMA_ATOMS} == set(layouts.MMA_VARIANTS)
