"""The layout-fit rule: every copy it accepts is checked by running the instruction it names in
the emulator; every reason it gives for declining has a case that must produce it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ptxlab.cli import main as cli_main
from ptxlab.model import emulator
from ptxlab.model.cute_layout import LayoutSyntaxError, parse_layout
from ptxlab.model.layout_fit import fit_copy

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
    slot = fit.form.slot_bytes
    elem = {2: "<u2", 1: np.uint8}[slot]
    span = -(-(int(smem_l.offsets().max()) + 1) // 16) * 16      # whole 16-slot rows
    top = 2 ** min(8 * slot, fit.form.elem_bits)      # packed 6/4-bit values fit their bits
    values = rng.integers(0, top, size=span).astype(elem)
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


def test_8bit_without_trans_declines():
    """A byte tile read row by row (the fragment of m8n8 with bytes) has no form: 8-bit
    ldmatrix exists only transposed (m16n16 .trans) and m8n16 only for packed sources."""
    reg = "((4,8),(4,2)):((64,1),(8,256))"       # lane t: row t//4, bytes 4*(t%4)..+3
    fit = fit_copy(reg, "(16,16):(16,1)", "u8")
    assert not fit.fits and fit.reason in ("register", "contiguous"), fit.message


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
    (FRAG[2], "(8,16):(16,1)", "f32", "load", None, "dtype", ["32-bit", "16-bit"]),
    (FRAG[2], "(8,16):(16,1)", "f64", "store", None, "dtype", ["64-bit"]),
    (M8N16[1], "(8,16):(16,1)", "e2m1", "store", None, "dtype", ["4-bit"]),   # no packed store
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
    assert cli_main(["fit", FRAG[2], "(8,16):(16,1)", "--dtype", "f32"]) == 1
    assert "[dtype]" in capsys.readouterr().out
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
