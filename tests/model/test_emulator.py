"""The emulator against independent numpy reasoning, its error messages, and its batch forms."""
import numpy as np
import pytest

from ptxlab import emulator, layouts
from ptxlab.emulator import AddressOutOfRange, BadOperand, MisalignedAddress, UndefinedResult

rng = np.random.default_rng(1234)


def smem_with_rows(rows: dict[int, np.ndarray], size: int = 4096) -> np.ndarray:
    mem = rng.integers(0, 256, size, dtype=np.uint8)
    for addr, vals in rows.items():
        mem[addr:addr + 16] = np.asarray(vals, dtype="<u2").view(np.uint8)
    return mem


def tile_in_smem(tile: np.ndarray, base: int, stride_bytes: int, size: int = 8192) -> np.ndarray:
    """A row-major tile of uint16 placed at ``base`` with ``stride_bytes`` between rows."""
    mem = np.zeros(size, dtype=np.uint8)
    for r in range(tile.shape[0]):
        a = base + r * stride_bytes
        mem[a:a + 2 * tile.shape[1]] = tile[r].astype("<u2").view(np.uint8)
    return mem


def test_ldmatrix_x1_lane_receives_its_row_pieces():
    rows = {16 * (7 - r): np.arange(8) + 100 * r for r in range(8)}   # rows stored in reverse order
    mem = smem_with_rows(rows)
    addrs = np.zeros(32, dtype=np.int64)
    addrs[:8] = [16 * (7 - r) for r in range(8)]
    addrs[8:] = 4000 * 16  # ignored lanes may hold anything (sm_90)
    out = emulator.ldmatrix(mem, addrs, num=1)
    assert out.shape == (32, 1) and out.dtype == np.uint32
    for lane in range(32):
        r, c = lane // 4, 2 * (lane % 4)
        assert out[lane, 0] == (100 * r + c) | ((100 * r + c + 1) << 16)


def test_ldmatrix_x4_of_a_16x16_tile_is_the_mma_a_fragment():
    A = rng.integers(0, 65536, (16, 16), dtype=np.uint16)
    base, stride = 256, 64
    mem = tile_in_smem(A, base, stride)
    lane = np.arange(32)
    # lanes 0-15 point at rows 0-15, column 0; lanes 16-31 at rows 0-15, column 8
    addrs = base + (lane % 16) * stride + (lane // 16) * 16
    regs = emulator.ldmatrix(mem, addrs, num=4)
    form = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")
    assert np.array_equal(regs, emulator.matrices_to_fragment(A[None], form.a))


def test_ldmatrix_trans_of_row_major_b_is_the_mma_b_fragment():
    B = rng.integers(0, 65536, (16, 8), dtype=np.uint16)   # K x N, row-major in memory
    mem = tile_in_smem(B, 0, 16)
    lane = np.arange(32)
    addrs = (lane % 16) * 16                                # x2: lanes 0-15 give rows k = 0..15
    regs = emulator.ldmatrix(mem, addrs, num=2, trans=True)
    form = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")
    assert np.array_equal(regs, emulator.matrices_to_fragment(B[None], form.b))


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix_is_the_inverse_of_ldmatrix(num, trans):
    slots = rng.permutation(256)[: 8 * num] * 16
    addrs = np.zeros(32, dtype=np.int64)
    addrs[: 8 * num] = slots
    regs = rng.integers(0, 2**32, (32, num), dtype=np.uint64).astype(np.uint32)
    mem = rng.integers(0, 256, 4096, dtype=np.uint8)
    before = mem.copy()
    emulator.stmatrix(mem, addrs, regs, num=num, trans=trans)
    assert np.array_equal(emulator.ldmatrix(mem, addrs, num=num, trans=trans), regs)
    touched = np.zeros(4096, bool)
    for a in slots:
        touched[a:a + 16] = True
    assert np.array_equal(mem[~touched], before[~touched])


def test_movmatrix_equals_ldmatrix_trans_of_the_same_rows():
    mem = rng.integers(0, 256, 128, dtype=np.uint8)
    addrs = np.arange(32) % 8 * 16
    plain = emulator.ldmatrix(mem, addrs, num=1)[:, 0]
    trans = emulator.ldmatrix(mem, addrs, num=1, trans=True)[:, 0]
    assert np.array_equal(emulator.movmatrix(plain), trans)
    assert np.array_equal(emulator.movmatrix(emulator.movmatrix(plain)), plain)


def test_movmatrix_moves_nan_and_inf_bits_untouched():
    a = np.full(32, 0x7C01FC00, dtype=np.uint32)   # signalling-NaN half + -Inf half
    assert np.array_equal(np.sort(emulator.unpack_b16(emulator.movmatrix(a)).ravel()),
                          np.sort(emulator.unpack_b16(a).ravel()))


def _mma_case(form, A, B, C, enc):
    a = emulator.matrices_to_fragment(enc(A, form.atype)[None], form.a)
    b = emulator.matrices_to_fragment(enc(B, form.btype)[None], form.b)
    c = emulator.matrices_to_fragment(enc(C, form.ctype)[None], form.c)
    d = emulator.mma(form.shape, a, b, c, atype=form.atype, btype=form.btype,
                     ctype=form.ctype, dtype=form.dtype)
    return emulator.fragment_to_matrices(d, form.d)[0]


def _enc(x, typ):
    if typ == "f16":
        return x.astype(np.float16).view(np.uint16).astype(np.uint32)
    if typ == "bf16":
        return (x.astype(np.float32).view(np.uint32) >> 16)
    if typ in ("f32", "tf32"):
        return x.astype(np.float32).view(np.uint32)
    if typ == "s8":
        return x.astype(np.int8).view(np.uint8).astype(np.uint32)
    if typ == "s32":
        return x.astype(np.int32).view(np.uint32)
    raise AssertionError(typ)


@pytest.mark.parametrize("variant", layouts.MMA_VARIANTS)
def test_mma_small_integers_are_exact(variant):
    form = layouts.mma_form(*variant)
    lo, hi = (-128, 128) if form.atype == "s8" else (-8, 9)
    A = rng.integers(lo, hi, (form.m, form.k))
    B = rng.integers(lo, hi, (form.k, form.n))
    C = rng.integers(-100, 100, (form.m, form.n))
    got = _mma_case(form, A, B, C, _enc)
    exp = A @ B + C
    if form.dtype == "f16":
        got = got.astype(np.uint16).view(np.float16).astype(np.int64)
    elif form.dtype == "f32":
        got = got.astype(np.uint32).view(np.float32).astype(np.int64)
    else:
        got = got.astype(np.uint32).view(np.int32).astype(np.int64)
    assert np.array_equal(got, exp)


def test_mma_s8_wraps_like_the_hardware():
    form = layouts.mma_form("m16n8k32", "s8", "s8", "s32", "s32")
    A = np.full((16, 32), -128)
    B = np.full((32, 8), -128)
    C = np.full((16, 8), 2**31 - 1)
    got = _mma_case(form, A, B, C, _enc).astype(np.uint32).view(np.int32)
    assert (got == np.int32((2**31 - 1 + 32 * 2**14) - 2**32)).all()


def test_tf32_ignores_the_low_13_bits():
    form = layouts.mma_form("m16n8k8", "tf32", "tf32", "f32", "f32")
    A = np.ones((16, 8), np.float32)
    bits = A.view(np.uint32) | 0x1FFF          # garbage below the tf32 mantissa
    a = emulator.matrices_to_fragment(bits[None], form.a)
    b = emulator.matrices_to_fragment(_enc(np.ones((8, 8)), "f32")[None], form.b)
    c = np.zeros((32, 4), np.uint32)
    d = emulator.mma("m16n8k8", a, b, c, atype="tf32", btype="tf32", ctype="f32", dtype="f32")
    assert (d.view(np.float32) == 8.0).all()


def test_batched_forms_match_one_warp_at_a_time():
    W = 50
    mem = rng.integers(0, 256, 48 * 1024, dtype=np.uint8)
    addrs = rng.integers(0, 48 * 1024 // 16, (W, 32)) * 16
    out = emulator.ldmatrix(mem, addrs, num=4, trans=True)
    assert out.shape == (W, 32, 4)
    for w in range(0, W, 7):
        assert np.array_equal(out[w], emulator.ldmatrix(mem, addrs[w], num=4, trans=True))
    per_warp = rng.integers(0, 256, (W, 1024), dtype=np.uint8)
    small = rng.integers(0, 64, (W, 32)) * 16
    out2 = emulator.ldmatrix(per_warp, small, num=2)
    for w in range(0, W, 9):
        assert np.array_equal(out2[w], emulator.ldmatrix(per_warp[w], small[w], num=2))
    a = rng.integers(0, 2**32, (W, 32), dtype=np.uint64).astype(np.uint32)
    assert np.array_equal(emulator.movmatrix(a)[3], emulator.movmatrix(a[3]))


def test_misaligned_address_names_lane_and_address():
    addrs = np.arange(32) * 16
    addrs[5] = 88
    with pytest.raises(MisalignedAddress, match=r"lane 5: .*88 .*not 16-byte aligned") as e:
        emulator.ldmatrix(np.zeros(1024, np.uint8), addrs, num=4)
    assert e.value.lane == 5 and e.value.address == 88


def test_out_of_range_address_names_lane():
    addrs = np.arange(32) * 16
    addrs[30] = 1024
    with pytest.raises(AddressOutOfRange, match="lane 30"):
        emulator.ldmatrix(np.zeros(1024, np.uint8), addrs, num=4)
    # with .x2 lane 30's address is ignored
    emulator.ldmatrix(np.zeros(1024, np.uint8), addrs, num=2)


def test_bad_operands_are_clear():
    mem = np.zeros(1024, np.uint8)
    with pytest.raises(BadOperand, match="one address per lane"):
        emulator.ldmatrix(mem, np.zeros(16, int))
    with pytest.raises(BadOperand, match="uint8"):
        emulator.ldmatrix(mem.view(np.uint16), np.zeros(32, int))
    with pytest.raises(BadOperand, match="x1/x2/x4"):
        emulator.ldmatrix(mem, np.zeros(32, int), num=3)
    with pytest.raises(BadOperand, match="needs 4 register"):
        emulator.stmatrix(mem, np.arange(32) * 16, np.zeros((32, 2), np.uint32), num=4)
    with pytest.raises(BadOperand, match="raw register bits"):
        emulator.movmatrix(np.zeros(32, np.float32))
    with pytest.raises(BadOperand, match="requires .trans"):
        emulator.ldmatrix(mem, np.zeros(32, int), num=1, shape="m16n16", dtype="b8")
    with pytest.raises(BadOperand, match="m8n8 loads .b16"):
        emulator.ldmatrix(mem, np.zeros(32, int), shape="m8n8", dtype="b8")
    with pytest.raises(BadOperand, match="needs 4 register"):
        emulator.mma("m16n8k16", np.zeros((32, 2), np.uint32), np.zeros((32, 2), np.uint32),
                     np.zeros((32, 4), np.uint32))


def test_stmatrix_to_one_row_twice_is_undefined():
    addrs = np.arange(32) * 16
    addrs[3] = addrs[6]
    with pytest.raises(UndefinedResult, match=r"lanes \[3, 6\]"):
        emulator.stmatrix(np.zeros(1024, np.uint8), addrs, np.zeros((32, 4), np.uint32))


def test_batched_stmatrix_matches_one_warp_at_a_time():
    W = 6
    mem = rng.integers(0, 256, (W, 2048), dtype=np.uint8)
    ref = mem.copy()
    addrs = np.stack([rng.permutation(128)[:32] * 16 for _ in range(W)])
    regs = rng.integers(0, 2**32, (W, 32, 4), dtype=np.uint64).astype(np.uint32)
    emulator.stmatrix(mem, addrs, regs, num=4, trans=True)
    for w in range(W):
        emulator.stmatrix(ref[w], addrs[w], regs[w], num=4, trans=True)
    assert np.array_equal(mem, ref)
