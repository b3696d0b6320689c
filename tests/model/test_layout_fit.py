"""The layout-fit rule: every copy it accepts is checked by running the instruction it names in
the emulator; every reason it gives for declining has a case that must produce it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ptxlab.cli import main as cli_main
from ptxlab.model import emulator
from ptxlab.model.cute_layout import LayoutSyntaxError, parse_layout
from ptxlab.model.layout_fit import DTYPE_BITS, fit_copy

# (thread, value) -> tile element of the m8n8 fragment in an 8 x 8*num tile (CuTe's column-major
# element index m + 8*n): lane t holds row t//4, columns 2*(t%4)+{0,1} of each 8x8 block.
FRAG = {1: "((4,8),2):((16,1),8)", 2: "((4,8),(2,2)):((16,1),(8,64))",
        4: "((4,8),(2,4)):((16,1),(8,64))"}
# The same fragment when the tile is seen transposed (lane t holds column t//4): the mma B side.
FRAG_T = {1: "((4,8),2):((2,8),1)", 2: "((4,8),(2,2)):((2,16),(1,8))"}  # 8x8, 16x8 tiles


def _run(fit, reg: str, smem: str, seed: int = 0) -> None:
    """Run the fit's instruction(s) in the emulator and compare every lane's values with the
    tile elements the two layouts name."""
    reg_l, smem_l = parse_layout(reg), parse_layout(smem)
    rng = np.random.default_rng(seed)
    # bytes of one element: the form's slot, or the element's own width when a .b16 form moves
    # 8- or 32-bit elements as 16-bit units
    slot = DTYPE_BITS[fit.dtype] // 8 if fit.as_units else fit.form.slot_bytes
    elem = {4: "<u4", 2: "<u2", 1: np.uint8}[slot]
    span = -(-(int(smem_l.offsets().max()) + 1) // 16) * 16      # whole 16-slot rows
    top = 2 ** min(8 * slot, DTYPE_BITS[fit.dtype])   # packed 6/4-bit values fit their bits
    values = rng.integers(0, top, size=span, dtype=np.int64).astype(elem)
    lanes = np.arange(32)[:, None]
    vals = np.arange(reg_l.mode(1).size)[None, :]
    offsets = np.asarray(smem_l(reg_l(lanes + 32 * vals)))        # (32, V) element offsets
    want = values[offsets]
    regs_n = fit.form.byte_map(fit.num).shape[1]
    per = regs_n * 4 // slot
    kw = dict(num=fit.num, trans=fit.trans, shape=fit.form.shape, dtype=fit.form.dtype)
    mem = np.zeros(slot * span + 64, dtype=np.uint8)
    if fit.direction == "load":
        if fit.form.dtype in ("b6x16_p32", "b4x16_p64"):   # 16 elements per 16-byte row
            mem[:span] = emulator.pack_row_elements(values.reshape(-1, 16), fit.form.dtype).ravel()
        else:
            mem[:slot * span] = values.view(np.uint8)
        for i in range(fit.instructions):
            regs = emulator.ldmatrix(mem, fit.addresses[i], **kw)
            got = np.ascontiguousarray(regs, dtype="<u4").view(elem).reshape(32, per)
            np.testing.assert_array_equal(got, want[:, i * per:(i + 1) * per],
                                          err_msg=f"{fit.instruction} instruction {i}")
    else:
        for i in range(fit.instructions):
            chunk = np.ascontiguousarray(want[:, i * per:(i + 1) * per])
            regs = chunk.view("<u4").reshape(32, regs_n)
            emulator.stmatrix(mem, fit.addresses[i], regs, **kw)
        stored = mem[:slot * span].view(elem)
        np.testing.assert_array_equal(stored[offsets], want, err_msg=fit.instruction)


@pytest.mark.parametrize("direction", ["load", "store"])
@pytest.mark.parametrize("reg, smem, num, trans, n_instr", [
    (FRAG[1], "(8,8):(8,1)", 1, False, 1),            # row-major 8x8
    (FRAG[2], "(8,16):(16,1)", 2, False, 1),          # two blocks side by side
    (FRAG[4], "(8,32):(32,1)", 4, False, 1),
    (FRAG[4], "(8,32):(40,1)", 4, False, 1),          # padded rows (80 B pitch, 16-B aligned)
    (FRAG[1], "(8,8):(1,8)", 1, True, 1),             # column-major: .trans
    (FRAG[2], "(8,16):(1,8)", 2, True, 1),
    (FRAG_T[1], "(8,8):(8,1)", 1, True, 1),           # the tile seen transposed
    (FRAG_T[2], "(16,8):(8,1)", 2, True, 1),
    ("((4,8),(2,8)):((16,1),(8,64))", "(8,64):(64,1)", 4, False, 2),   # two x4 per lane
    ("((4,8),(2,2)):((16,1),(8,64))", "(8,(8,2)):(8,(1,128))", 2, False, 1),  # nested shared mode
])
def test_accepted_copies_run_as_the_instruction_named(direction, reg, smem, num, trans, n_instr):
    fit = fit_copy(reg, smem, "f16", direction)
    assert fit.fits, fit.message
    assert (fit.num, fit.trans, fit.instructions) == (num, trans, n_instr)
    op = "ldmatrix" if direction == "load" else "stmatrix"
    assert fit.instruction == f"{op}.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16"
    _run(fit, reg, smem)


# 8-bit tiles. ldmatrix m16n16 .trans: lane t byte b of register r holds stored row 4*(t%4)+b,
# column t//4 + 8*(r%2) of matrix r//2; stored row-major 16x16 bytes, index m + 16*n.
M16N16 = {1: "((4,8),(4,2)):((4,16),(1,128))", 2: "((4,8),(4,2,2)):((4,16),(1,128,256))"}
# stmatrix m16n8 .trans: lane t byte b goes to stored row 2*(t%4)+b%2, column t//4 + 8*(b//2).
M16N8 = {1: "((4,8),(2,2)):((2,8),(1,64))", 4: "((4,8),(2,2,4)):((2,8),(1,64,128))"}
# ldmatrix m8n16 (packed sources): lane t byte b of register r is row t//4, element 4*(t%4)+b.
M8N16 = {1: "((4,8),4):((32,1),8)", 2: "((4,8),(4,2)):((32,1),(8,128))"}


@pytest.mark.parametrize("reg, smem, dtype, direction, instruction", [
    (M16N16[1], "(16,16):(16,1)", "e4m3", "load", "ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8"),
    (M16N16[2], "(16,32):(32,1)", "u8", "load", "ldmatrix.sync.aligned.m16n16.x2.trans.shared.b8"),
    (M16N8[1], "(8,16):(16,1)", "s8", "store", "stmatrix.sync.aligned.m16n8.x1.trans.shared.b8"),
    (M16N8[4], "(8,64):(64,1)", "b8", "store", "stmatrix.sync.aligned.m16n8.x4.trans.shared.b8"),
    (M8N16[1], "(8,16):(16,1)", "e2m1", "load",
     "ldmatrix.sync.aligned.m8n16.x1.shared.b8x16.b4x16_p64"),
    (M8N16[2], "(8,32):(32,1)", "e3m2", "load",
     "ldmatrix.sync.aligned.m8n16.x2.shared.b8x16.b6x16_p32"),
])
def test_blackwell_forms_fit_and_run(reg, smem, dtype, direction, instruction):
    fit = fit_copy(reg, smem, dtype, direction)
    assert fit.fits, fit.message
    assert fit.instruction == instruction
    _run(fit, reg, smem)
    # an sm_90 GPU has none of them: the rule says which target to use instead
    on_hopper = fit_copy(reg, smem, dtype, direction, target="sm_90")
    assert on_hopper.reason == "target" and "sm_100a" in on_hopper.message


# 8- and 32-bit elements moved as 16-bit units by the .b16 forms (tile index m + M*n).
# m16n8k32 s8/e4m3 A fragment: lane t holds row t//4 (+8 for values 4-7), k = 4*(t%4) + v%4 (+16
# for values 8-15): its first two registers (k < 16), then all four.
I8_A_HALF = "((4,8),(4,2)):((64,1),(16,8))"
I8_A = "((4,8),(4,2,2)):((64,1),(16,8,256))"
# m16n8k32 B fragment (K x N, n = t//4, k = 4*(t%4) + v%4 (+16)): the tile stored n-major
I8_B = "((4,8),(4,2)):((4,32),(1,16))"
# m16n8k8 tf32/f32 A fragment: a0 (g, t%4), a1 (g+8, t%4), a2 (g, t%4+4), a3 (g+8, t%4+4)
F32_A = "((4,8),(2,2)):((16,1),(8,64))"
# m16n8k8 f32 B fragment (K x N: b0 (k=t%4, n=g), b1 (k=t%4+4, n=g)), the tile stored n-major
F32_B = "((4,8),2):((1,8),4)"


@pytest.mark.parametrize("direction", ["load", "store"])
@pytest.mark.parametrize("reg, smem, dtype, num, n_instr, formula", [
    (I8_A_HALF, "(16,32):(32,1)", "e4m3", 2, 1, "32 * (lane % 16)"),
    (I8_A, "(16,32):(32,1)", "s8", 4, 1, "32 * (lane % 16) + 16 * (lane / 16)"),
    (I8_A, "(16,32):(48,1)", "u8", 4, 1, "48 * (lane % 16) + 16 * (lane / 16)"),   # padded
    (I8_B, "(32,8):(1,32)", "e5m2", 2, 1, "32 * (lane % 8) + 16 * ((lane / 8) % 2)"),
    (F32_A, "(16,8):(8,1)", "f32", 4, 1, "32 * (lane % 16) + 16 * (lane / 16)"),
    (F32_A, "(16,8):(12,1)", "tf32", 4, 1, "48 * (lane % 16) + 16 * (lane / 16)"),  # padded
    (F32_B, "(8,8):(1,8)", "f32", 2, 1, "32 * (lane % 8) + 16 * ((lane / 8) % 2)"),
    # two x4 per lane: the A fragments of two k-steps side by side
    ("((4,8),(2,2,2)):((16,1),(8,64,128))", "(16,16):(16,1)", "s32", 4, 2, None),
])
def test_other_widths_move_as_16bit_units(direction, reg, smem, dtype, num, n_instr, formula):
    """ldmatrix/stmatrix move raw bits: an 8-bit or 32-bit copy whose 16-bit units line up is a
    .b16 form without .trans; the emulator runs it on random bits and checks every lane."""
    fit = fit_copy(reg, smem, dtype, direction)
    assert fit.fits and fit.as_units, fit.message
    op = "ldmatrix" if direction == "load" else "stmatrix"
    assert fit.instruction == f"{op}.sync.aligned.m8n8.x{num}.shared.b16"
    assert (fit.trans, fit.instructions) == (False, n_instr)
    assert "as 16-bit units" in fit.message and "as 16-bit units" in str(fit)
    if formula:
        assert fit.address_formula == f"addr(lane) = smem + {formula}  (bytes)"
        np.testing.assert_array_equal(_eval_formula(fit.address_formula, np.arange(32)),
                                      fit.addresses[0])
    _run(fit, reg, smem)
    _run(fit, reg, smem, seed=1)
    # an sm_80 target has every .b16 ldmatrix; stmatrix needs sm_90
    on_ampere = fit_copy(reg, smem, dtype, direction, target="sm_80")
    assert on_ampere.fits == (direction == "load"), on_ampere.message
    if direction == "store":
        assert on_ampere.reason == "target"


def test_units_across_warps():
    """A warpgroup loads four stacked int8 A halves: one x2 per warp, warp w 16 rows further."""
    reg = "((4,8,4),(4,2)):((256,1,16),(64,8))"      # tile (64,32) bytes, index m + 64k
    fit = fit_copy(reg, "(64,32):(32,1)", "s8")
    assert fit.fits and fit.as_units and fit.warps == 4 and fit.num == 2, fit.message
    assert fit.address_formula == ("addr(lane) = smem + 32 * (lane % 16) + 512 * warp  "
                                   "(bytes, warp = thread / 32 = 0..3)")
    values = np.random.default_rng(5).integers(0, 256, 64 * 32).astype(np.uint8)
    tile = parse_layout("(64,32):(32,1)")
    for w in range(4):
        regs = emulator.ldmatrix(values.copy(), fit.addresses[w, 0], num=2)
        got = np.ascontiguousarray(regs, dtype="<u4").view(np.uint8).reshape(32, 8)
        t = np.arange(32)[:, None] + 32 * w
        want = values[np.asarray(tile(parse_layout(reg)(t + 128 * np.arange(8)[None, :])))]
        np.testing.assert_array_equal(got, want, err_msg=f"warp {w}")


def test_unit_declines_say_why():
    # the two bytes of a register's high half come from row g+8: not neighbours of the low half
    fit = fit_copy("((4,8),(2,2,2)):((64,1),(16,8,32))", "(16,32):(32,1)", "s8")
    assert fit.reason == "register" and "16-bit units" in fit.message, fit.message
    # a register holds (g,k), (g+8,k), (g,k+2), (g+8,k+2): every other byte of a row is in place
    # (k, k+2, ...), the bytes between are row g+8's; the emulator shows the rows mixed
    fit = fit_copy("((4,8),(2,2)):((64,1),(8,32))", "(16,32):(32,1)", "s8")
    assert fit.reason == "register" and "tile (8,0) after (0,0)" in fit.message, fit.message
    # the f32 accumulator (c0, c1 = columns 2t, 2t+1): a 16-bit-unit row would be columns 0, 2, ..
    fit = fit_copy("((4,8),(2,2)):((32,1),(16,8))", "(16,8):(8,1)", "f32", "store")
    assert fit.reason == "register" and "tile (0,2) after (0,0)" in fit.message, fit.message
    # rows 40 bytes apart
    fit = fit_copy(I8_A, "(16,32):(40,1)", "e4m3")
    assert fit.reason == "aligned" and "byte 40" in fit.message, fit.message
    # a k-major (column-major) tile would need a transpose: .trans splits f32 halves
    fit = fit_copy(F32_A, "(16,8):(1,16)", "f32")
    assert fit.reason == "contiguous" and "transpose" in fit.message, fit.message
    assert "two halves of each 32-bit element would land in two lanes" in fit.message
    # 8-bit with a transpose: the m16n16 .trans .b8 form where the target has it ...
    fit = fit_copy(I8_A_HALF, "(16,32):(1,16)", "e4m3")
    assert fit.fits and not fit.as_units
    assert fit.instruction == "ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8"
    _run(fit, I8_A_HALF, "(16,32):(1,16)")
    # ... which sm_90 lacks, and .trans .b16 would move 2x2 blocks of bytes
    fit = fit_copy(I8_A_HALF, "(16,32):(1,16)", "e4m3", target="sm_90")
    assert fit.reason == "target" and "sm_100a" in fit.message and "2x2 block" in fit.message
    # the same transposed tile misaligned: no b8 form fits either
    fit = fit_copy(I8_A_HALF, "(16,32):(1,20)", "e4m3")
    assert not fit.fits and "transpose" in fit.message, fit.message


@pytest.mark.parametrize("reg, smem", [
    (FRAG[1], "(8,8):(8,1)"), (FRAG[2], "(8,16):(16,1)"), (F32_A, "(16,8):(8,1)"),
    ("((4,8),(2,2)):((2,8),(1,64))", "(8,16):(16,1)"), ("((4,8),4):((1,4),32)", "(32,4):(4,1)"),
])
@pytest.mark.parametrize("direction", ["load", "store"])
def test_64bit_never_fits(reg, smem, direction):
    """A 64-bit element is four 16-bit units in two registers of a lane, but a .b16 form fills a
    lane's registers from bytes a multiple of 16 apart: no layout fits, and the reason is the
    width."""
    fit = fit_copy(reg, smem, "f64", direction)
    assert not fit.fits and fit.reason == "dtype", fit.message
    assert "64-bit" in fit.message and "multiple of 16 apart" in fit.message


def test_random_unit_tiles_fit_exactly_when_every_row_is_aligned():
    """Padded row-major tiles of 8- and 32-bit elements under the m8n8 fragment of their
    16-bit units: they fit (no .trans) exactly when every row starts on 16 bytes, and the
    emulator agrees on random bits."""
    rng = np.random.default_rng(27)
    for _ in range(40):
        num = int(rng.choice([1, 2, 4]))
        ebytes = int(rng.choice([1, 4]))
        per_reg = 4 // ebytes                         # elements in one register: 4 or 1
        width = 4 * per_reg * num                     # elements along a row of the tile
        pad = int(rng.integers(0, 24))
        if rng.integers(0, 2):                        # half of them padded by whole 16 bytes
            pad -= pad % (16 // ebytes)
        pitch = width + pad
        # (thread, value) -> m + 8n over an 8 x width tile: lane t holds row t//4, columns
        # per_reg * (t%4) .. + per_reg - 1 of each block of 4 * per_reg columns
        reg = f"((4,8),({per_reg},{num})):(({8 * per_reg},1),(8,{32 * per_reg}))"
        smem = f"(8,{width}):({pitch},1)"
        dtype = {1: "e4m3", 4: "f32"}[ebytes]
        fit = fit_copy(reg, smem, dtype, str(rng.choice(["load", "store"])))
        if (pitch * ebytes) % 16:
            assert not fit.fits and fit.reason == "aligned", (reg, smem, fit.message)
            continue
        assert fit.fits and fit.as_units and fit.num == num, (reg, smem, fit.message)
        _run(fit, reg, smem, seed=int(rng.integers(1 << 30)))


def test_widest_num_first_and_the_address_formula():
    fit = fit_copy(FRAG[4], "(8,32):(32,1)")
    assert fit.num == 4
    assert fit.address_formula.startswith("addr(lane) = smem + 64 * (lane % 8) + 16 * (lane / 8)")
    # the formula, evaluated, is the address list
    lane = np.arange(32)
    np.testing.assert_array_equal(fit.addresses[0], 64 * (lane % 8) + 16 * (lane // 8))
    x2 = fit_copy(FRAG[2], "(8,16):(16,1)")
    assert "16 * ((lane / 8) % 2)" in x2.address_formula
    # lanes whose address x2 ignores repeat the lower lanes' (valid on sm_75 too)
    np.testing.assert_array_equal(x2.addresses[0][16:], x2.addresses[0][:16])


def test_tile_offset_in_the_formula():
    # the tile starts 4 rows into a 16-row buffer of pitch 64 halves
    reg = FRAG[1]
    fit = fit_copy(reg, "(8,8):(64,1)")
    assert fit.fits and "128 * (lane % 8)" in fit.address_formula


@pytest.mark.parametrize("reg, smem, dtype, direction, target, reason, words", [
    # 32-bit elements as 16-bit units: lane t's registers are columns 2t and 2t+1, but a row of
    # the unit matrix takes one element from each of 4 lanes: columns 0, 2, 4, 6
    (FRAG[2], "(8,16):(16,1)", "f32", "load", None, "register", ["32-bit data as 16-bit units",
                                                                 "fragment pattern"]),
    (FRAG[2], "(8,16):(16,1)", "f64", "store", None, "dtype", ["64-bit", "32-bit halves"]),
    (M8N16[1], "(8,16):(16,1)", "e2m1", "store", None, "dtype", ["4-bit", "one per byte"]),
    (M8N16[1], "(8,16):(16,1)", "e3m2", "store", None, "dtype", ["6-bit"]),
    (F32_A, "(16,8):(8,1)", "f32", "store", "sm_80", "target", ["sm_90", "sm_80"]),
    (FRAG[2], "(8,16):(16,1)", "fp16", "load", None, "dtype", ["unknown element type"]),
    (FRAG[2], "(8,16):(16,1)", "f16", "store", "sm_80", "target", ["sm_90", "sm_80"]),
    ("((4,8),3):((16,1),8)", "(8,24):(24,1)", "f16", "load", None, "values", ["3 value"]),
    ("(16,2):(2,1)", "(8,4):(4,1)", "f16", "load", None, "register", ["whole warps"]),
    # lane t holds elements t and t+32: a register's two halves are 4 columns apart
    ("(32,2):(1,32)", "(8,8):(8,1)", "f16", "load", None, "register", ["fragment pattern"]),
    # a fragment, but rows of the shared tile are 2 elements apart (a 16-byte row read with
    # stride 2 elements): not contiguous
    (FRAG[1], "(8,8):(16,2)", "f16", "load", None, "contiguous", ["16 contiguous bytes", "stride 1"]),
    # row pitch 36 halves = 72 bytes: row 1 starts at byte 72
    (FRAG[4], "(8,32):(36,1)", "f16", "load", None, "aligned", ["byte 72", "multiple of 16"]),
    # column-major with a pitch of 12 halves: .trans rows not 16-byte aligned
    (FRAG[1], "(8,8):(1,12)", "f16", "store", None, "aligned", ["byte 24"]),
    # the second of two tiles 12 elements into 24-element rows: the row stride is a multiple of
    # 8 (what TIRx's shown check tests) but the tile stride is not
    (FRAG[2], "(8,(8,2)):(24,(1,12))", "f16", "load", None, "aligned", ["row 0 of matrix 1",
                                                                        "byte 24"]),
    # the register side names elements the shared tile does not have
    (FRAG[2], "(8,8):(8,1)", "f16", "load", None, "register", ["outside the shared tile"]),
    # rows 8 elements apart in a 16-wide tile: row r's second half is row r+1's first, and a
    # row of stride 0 stores every row at one address: a store the PTX ISA leaves undefined
    (FRAG[2], "(8,16):(8,1)", "f16", "store", None, "overlap", ["both go to shared element 8",
                                                               "undefined"]),
    (FRAG[2], "(8,16):(0,1)", "f16", "store", None, "overlap", ["both go to shared element 0"]),
])
def test_declines_with_the_reason(reg, smem, dtype, direction, target, reason, words):
    fit = fit_copy(reg, smem, dtype, direction, target)
    assert not fit.fits and fit.reason == reason, (fit.reason, fit.message)
    for w in words:
        assert w in fit.message, fit.message
    with pytest.raises(ValueError):
        fit.ptx()


def test_decline_names_the_lane_and_bytes():
    fit = fit_copy(FRAG[1], "(8,8):(16,2)")
    assert "lane 0 value 0 = tile (0,0)" in fit.message
    assert "at byte 0" in fit.message and "at byte 4" in fit.message


@pytest.mark.parametrize("text, shape, stride", [
    ("(8,8):(1,8)", (8, 8), (1, 8)),
    ("32:1", 32, 1),
    ("((4,8),(2,2)):((16,1),(8,64))", ((4, 8), (2, 2)), ((16, 1), (8, 64))),
    ("(_8, _16) : (_16, _1)", (8, 16), (16, 1)),
])
def test_parse(text, shape, stride):
    lay = parse_layout(text)
    assert (lay.shape, lay.stride) == (shape, stride)
    assert parse_layout(str(lay)) == lay


@pytest.mark.parametrize("text", ["(8,8)", "(8,8):(1,8", "(8,8):(1,(8,1))", "(8,0):(1,8)",
                                  "(8,8):(1,8) x", "8:"])
def test_parse_rejects(text):
    with pytest.raises(LayoutSyntaxError):
        parse_layout(text)


def test_evaluation_matches_pycute():
    pycute = pytest.importorskip("pycute")
    for text in ["(8,8):(1,8)", "((4,8),(2,2)):((16,1),(8,64))", "(8,(8,2)):(8,(1,128))",
                 "((8,4),128):((128,0),1)", "((4,8),(16,2,4)):((256,16),(1,128,1024))"]:
        ours = parse_layout(text)
        theirs = pycute.Layout(ours.shape, ours.stride)
        assert [theirs(i) for i in range(ours.size)] == ours.offsets().tolist(), text


def test_cli(capsys):
    assert cli_main(["fit", FRAG[2], "(8,16):(1,8)"]) == 0
    assert "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in capsys.readouterr().out
    assert cli_main(["fit", FRAG[2], "(8,16):(16,1)", "--store", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["instruction"] == "stmatrix.sync.aligned.m8n8.x2.shared.b16"
    assert len(data["addresses"][0]) == 32
    assert cli_main(["fit", FRAG[2], "(8,16):(16,1)", "--dtype", "f64"]) == 1
    assert "[dtype]" in capsys.readouterr().out
    assert cli_main(["fit", I8_A_HALF, "(16,32):(32,1)", "--dtype", "e4m3"]) == 0
    out = capsys.readouterr().out
    assert "ldmatrix.sync.aligned.m8n8.x2.shared.b16" in out and "as 16-bit units" in out
    assert cli_main(["fit", F32_A, "(16,8):(8,1)", "--dtype", "f32", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["as_16bit_units"] and data["instruction"].endswith("m8n8.x4.shared.b16")
    assert cli_main(["fit", FRAG[2], "(8,16"]) == 2
    assert "shape:stride" in capsys.readouterr().err


def test_packed_b6_elements_past_bit_64_survive():
    """A b6x16_p32 row has 96 data bits: elements 10..15 lie past the first 64 (bytes 8..11)."""
    v = np.arange(16, dtype=np.uint8) * 4 + 3            # 3, 7, ..., 63: every bit pattern used
    row = emulator.pack_row_elements(v, "b6x16_p32")
    assert int.from_bytes(bytes(row[:12]), "little") >> 60 & 63 == v[10]
    assert not row[12:].any()
    np.testing.assert_array_equal(emulator.unpack_row_elements(row, "b6x16_p32"), v)


def test_random_tiles_fit_exactly_when_every_row_is_aligned():
    """Padded row- and column-major tiles of every width: the rule picks the widest .num, the
    .trans the storage asks for, and the emulator agrees; a pitch off 8 elements declines."""
    rng = np.random.default_rng(26)
    for _ in range(24):
        num = int(rng.choice([1, 2, 4]))
        width = 8 * num
        col_major = bool(rng.integers(0, 2))
        extent = 8 if col_major else width            # elements along the contiguous axis
        pitch = int(rng.integers(extent, extent + 24))
        smem = f"(8,{width}):(1,{pitch})" if col_major else f"(8,{width}):({pitch},1)"
        fit = fit_copy(FRAG[num], smem, "f16", str(rng.choice(["load", "store"])))
        if pitch % 8:
            assert not fit.fits and fit.reason == "aligned", (smem, fit.message)
            continue
        assert fit.fits and (fit.num, fit.trans) == (num, col_major), (smem, fit.message)
        _run(fit, FRAG[num], smem, seed=int(rng.integers(1 << 30)))


def test_several_warps_each_fit_the_same_form():
    """Four warps (a warpgroup) copy a 32x16 tile, warp w rows 8w..8w+7: one x2 per warp, the
    warp's rows 8 * 32 bytes further on; every warp's registers checked in the emulator."""
    reg = "((4,8,4),(2,2)):((64,1,8),(32,256))"
    fit = fit_copy(reg, "(32,16):(16,1)")
    assert fit.fits and fit.warps == 4 and fit.num == 2 and fit.addresses.shape == (4, 1, 32)
    assert "+ 256 * warp" in fit.address_formula
    values = np.arange(32 * 16, dtype=np.uint16)
    mem = values.view(np.uint8).copy()
    for w in range(4):
        regs = emulator.ldmatrix(mem, fit.addresses[w, 0], num=2)
        got = emulator.unpack_b16(regs).reshape(32, 4)
        t = np.arange(32)[:, None] + 32 * w
        v = np.arange(4)[None, :]
        want = values[np.asarray(parse_layout("(32,16):(16,1)")(parse_layout(reg)(t + 128 * v)))]
        np.testing.assert_array_equal(got, want, err_msg=f"warp {w}")
    # two warps, the second warp's 8 rows placed 4 elements off a 16-byte boundary: that warp
    # is named
    two = "((4,8,2),(2,2)):((32,1,8),(16,128))"
    assert fit_copy(two, "((8,2),16):((16,128),1)").fits
    skew = fit_copy(two, "((8,2),16):((16,132),1)")
    assert not skew.fits and skew.reason == "aligned", skew.message
    assert skew.message.startswith("warp 1 (threads 32-63)"), skew.message


def _eval_formula(formula: str, lane: np.ndarray, i: int = 0, warp: int = 0) -> np.ndarray:
    """The printed formula evaluated for every lane (C's integer '/' is Python's '//')."""
    expr = formula.split("=", 1)[1].split("(bytes")[0].replace("smem +", "").replace("/", "//")
    return eval(expr, {}, {"lane": lane, "i": i, "warp": warp})  # noqa: S307 (our own output)


# x4 A operand of a 16x16 half tile in a padded 72-half pitch: lanes 0-15 name rows 0-15 of
# columns 0-7, lanes 16-31 the same rows of columns 8-15 (the mma A-operand copy).
A_X4 = "((4,8),(2,2,2)):((32,1),(16,8,128))"


@pytest.mark.parametrize("reg, smem, dtype, direction, formula", [
    (A_X4, "(16,16):(72,1)", "f16", "load", "144 * (lane % 16) + 16 * (lane / 16)"),
    (A_X4, "(16,16):(16,1)", "f16", "load", "32 * (lane % 16) + 16 * (lane / 16)"),
    (A_X4, "(16,16):(72,1)", "f16", "store", "144 * (lane % 16) + 16 * (lane / 16)"),
    # column-major tile: .trans, matrices 2 and 3 are the next 8 columns
    (A_X4, "(16,16):(1,72)", "f16", "load",
     "144 * (lane % 8) + 16 * ((lane / 8) % 2) + 1152 * (lane / 16)"),
    # four 8x8 blocks stacked down a column of 16-byte rows: one term
    ("((4,8),(2,4)):((64,1),(32,8))", "(32,8):(8,1)", "f16", "load", "16 * lane"),
    (FRAG[2], "(8,16):(16,1)", "f16", "load", "32 * (lane % 8) + 16 * ((lane / 8) % 2)"),
    (M16N16[2], "(16,32):(32,1)", "u8", "load", "32 * (lane % 16) + 16 * (lane / 16)"),
    (M16N16[1], "(16,16):(48,1)", "u8", "load", "48 * (lane % 16)"),
])
def test_address_formula_is_the_simplest_that_gives_every_lane(reg, smem, dtype, direction,
                                                               formula):
    fit = fit_copy(reg, smem, dtype, direction)
    assert fit.fits, fit.message
    assert fit.address_formula == f"addr(lane) = smem + {formula}  (bytes)"
    lane = np.arange(32)
    np.testing.assert_array_equal(_eval_formula(fit.address_formula, lane), fit.addresses[0])
    _run(fit, reg, smem)


def test_formula_for_several_instructions_and_warps_gives_every_address():
    for reg, smem in (("((4,8),(2,8)):((16,1),(8,64))", "(8,64):(64,1)"),
                      ("((4,8,4),(2,2)):((64,1,8),(32,256))", "(32,16):(16,1)")):
        fit = fit_copy(reg, smem)
        assert fit.fits and "not affine" not in fit.address_formula, fit.address_formula
        addrs = fit.addresses.reshape(fit.warps, fit.instructions, 32)
        for w in range(fit.warps):
            for i in range(fit.instructions):
                np.testing.assert_array_equal(
                    _eval_formula(fit.address_formula, np.arange(32), i, w), addrs[w, i])


def test_a_load_may_read_one_row_twice():
    """What a store may not do, a load may: two rows at one address are read twice."""
    fit = fit_copy(FRAG[2], "(8,16):(0,1)", "f16", "load")
    assert fit.fits, fit.message


def test_an_8bit_decline_leads_with_the_forms_todays_gpus_have():
    """Without a target the reason leads with the m8n8 forms (sm_75 and later); the sm_100a-class
    form's reason follows; with that target named it leads."""
    reg, smem = "((4,8),(4,2)):((64,1),(16,8))", "(16,32):(1,17)"
    default = fit_copy(reg, smem, "e4m3", "load")
    assert not default.fits
    assert default.message.startswith("for ldmatrix.sync.aligned.m8n8"), default.message
    assert "on the sm_100a-class targets that have ldmatrix.sync.aligned.m16n16" in default.message
    newer = fit_copy(reg, smem, "e4m3", "load", target="sm_100a")
    assert newer.message.startswith("for ldmatrix.sync.aligned.m16n16"), newer.message


def test_no_hint_names_a_form_that_does_not_exist():
    """stmatrix.m16n8 of bytes exists with .trans only: its decline offers no form without it."""
    from ptxlab.model.layout_fit import _other_trans_hint, copy_forms

    for form in copy_forms():
        twins = [f for f in copy_forms() if (f.opcode, f.shape, f.dtype) ==
                 (form.opcode, form.shape, form.dtype) and f.trans != form.trans]
        hint = _other_trans_hint(form)
        assert bool(hint) == bool(twins), (form, hint)
    only_trans = [f for f in copy_forms() if f.opcode == "stmatrix" and f.shape == "m16n8"]
    assert only_trans and all(f.trans for f in only_trans)
    assert all(_other_trans_hint(f) == "" for f in only_trans)
