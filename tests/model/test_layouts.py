"""The layout tables: one-to-one, and agreeing with the PTX ISA's formulas written independently."""
import pytest

from ptxlab import layouts


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_fragment_matches_isa_formula(num, trans):
    lay = layouts.ldmatrix_fragment(num, trans)
    assert lay.regs == num and lay.elems_per_reg == 2
    for lane in range(32):
        for reg in range(num):
            for elem in range(2):
                m, r, c = lay.element(lane, reg, elem)
                # ISA figure: thread t holds row t/4, elements 2*(t%4) and 2*(t%4)+1.
                exp = (lane // 4, 2 * (lane % 4) + elem)
                if trans:
                    exp = exp[::-1]
                assert (m, r, c) == (reg, *exp)


def test_owner_is_inverse_of_element():
    lay = layouts.ldmatrix_fragment(4, False)
    for m in range(4):
        for r in range(8):
            for c in range(8):
                assert lay.element(*lay.owner(m, r, c)) == (m, r, c)
    assert lay.lanes_holding_row(0, 3) == [12, 13, 14, 15]


def test_address_roles():
    assert layouts.address_role(0, 1) == (0, 0)
    assert layouts.address_role(9, 1) is None
    assert layouts.address_role(9, 2) == (1, 1)
    assert layouts.address_role(31, 4) == (3, 7)
    assert layouts.row_address_lanes(2).tolist() == [list(range(8)), list(range(8, 16))]
    with pytest.raises(ValueError, match="x1, x2, x4"):
        layouts.address_role(0, 3)


def _g_t(lane):
    return lane // 4, lane % 4


def test_mma_m16n8k16_f16_fragments_match_isa():
    f = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")
    assert (f.m, f.n, f.k) == (16, 8, 16)
    assert (f.a.regs, f.b.regs, f.c.regs, f.d.regs) == (4, 2, 4, 4)
    for lane in range(32):
        g, t = _g_t(lane)
        for i in range(8):  # the ISA numbers A's elements a0..a7, two per register
            row = g if (i < 2 or 4 <= i < 6) else g + 8
            col = t * 2 + (i & 1) + (8 if i >= 4 else 0)
            assert f.a.element(lane, i // 2, i % 2) == (0, row, col)
        for i in range(4):
            krow = t * 2 + (i & 1) + (8 if i >= 2 else 0)
            assert f.b.element(lane, i // 2, i % 2) == (0, krow, g)
            row = g if i < 2 else g + 8
            assert f.c.element(lane, i, 0) == (0, row, t * 2 + (i & 1))
    assert f.ptx == "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"


def test_mma_f16_accumulator_fragment():
    f = layouts.mma_form("m16n8k16", "f16", "f16", "f16", "f16")
    assert f.c.regs == 2
    for lane in range(32):
        g, t = _g_t(lane)
        for i in range(4):
            row = g if i < 2 else g + 8
            assert f.c.element(lane, i // 2, i % 2) == (0, row, 2 * t + (i & 1))


def test_mma_tf32_and_s8_fragments_match_isa():
    f = layouts.mma_form("m16n8k8", "tf32", "tf32", "f32", "f32")
    s = layouts.mma_form("m16n8k32", "s8", "s8", "s32", "s32")
    for lane in range(32):
        g, t = _g_t(lane)
        for i in range(4):
            row = g if i % 2 == 0 else g + 8
            col = t if i < 2 else t + 4
            assert f.a.element(lane, i, 0) == (0, row, col)
        for i in range(2):
            assert f.b.element(lane, i, 0) == (0, t + 4 * i, g)
        for i in range(16):  # s8 A: a0..a15, four per register
            row = g if (i < 4 or 8 <= i < 12) else g + 8
            col = t * 4 + (i & 3) + (16 if i >= 8 else 0)
            assert s.a.element(lane, i // 4, i % 4) == (0, row, col)
        for i in range(8):
            krow = t * 4 + (i & 3) + (16 if i >= 4 else 0)
            assert s.b.element(lane, i // 4, i % 4) == (0, krow, g)


def test_every_form_is_one_to_one_and_listed():
    forms = layouts.mma_forms()
    assert len(forms) == len(layouts.MMA_VARIANTS) == 6
    for f in forms:
        for lay in (f.a, f.b, f.c, f.d):
            owners = lay.owners
            assert (owners >= 0).all()
            assert lay.regs * lay.elems_per_reg * 32 == lay.rows * lay.cols * lay.matrices


def test_unknown_mma_variant_is_a_clear_error():
    with pytest.raises(ValueError, match="not modelled"):
        layouts.mma_form("m16n8k16", "f16", "f16", "f16", "f32")


@pytest.mark.parametrize("spoil, why", [
    (lambda c: c.__setitem__((5, 0, 0), c[4, 0, 0]), "an element held twice"),
    (lambda c: c.__setitem__((5, 0, 0, 2), 8), "a column past the matrix"),
    (lambda c: c.__setitem__((5, 0, 0, 1), -1), "a negative row"),
    (lambda c: c.__setitem__((5, 0, 0, 0), 1), "a matrix the fragment does not have"),
])
def test_a_layout_that_is_not_one_to_one_is_refused(spoil, why):
    """The check every layout passes when it is built: one holder per element, each inside the
    matrix (a layout that held one element twice and another not at all would otherwise give a
    wrong picture and a wrong emulator)."""
    good = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32").c
    assert layouts._check_bijective(good) is good
    coords = good.coords.copy()
    spoil(coords)
    bad = layouts.FragmentLayout("spoilt", good.matrices, good.rows, good.cols,
                                 good.elem_bits, coords)
    with pytest.raises(AssertionError, match="not one-to-one"):
        layouts._check_bijective(bad)
