"""The sm_100a-class ldmatrix/stmatrix forms in the model: maps, emulator and CPU backend.

The lane<->byte maps themselves are checked against CuTe in tests/model/test_cute_sm100.py and the
gates against ptxas in tests/model/test_matrix_gates.py; here: every map is one-to-one, the emulator
moves the bytes its map says (reference loops written independently of the vectorised code),
the packed sources unpack as documented, errors name the lane, and a learner's CUDA with these
instructions in inline asm runs on the CPU backend.
"""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab.model import emulator, matrix_forms
from ptxlab.model.emulator import BadOperand, MisalignedAddress, UndefinedResult

NEW_FORMS = [f for f in matrix_forms.all_forms() if f.blackwell]
RNG = np.random.default_rng(26)


def _ids(forms):
    return [f.ptx for f in forms]


@pytest.mark.parametrize("f", matrix_forms.all_forms(), ids=_ids(matrix_forms.all_forms()))
def test_byte_map_is_one_to_one(f):
    bm = matrix_forms.byte_map(f).reshape(-1, 3)
    keys = {tuple(int(v) for v in x) for x in bm}
    assert len(keys) == len(bm)
    if f.op != "movmatrix":
        cols = 16                      # every 16-byte row (or 16 packed elements) is covered
        assert len(keys) == f.num * f.rows_per_matrix * cols
        roles = matrix_forms.address_lanes(f)
        used = {(int(m), int(r)) for m, r in roles if m >= 0}
        assert used == {(int(m), int(r)) for m, r, _ in bm}


def _packed_element(row: np.ndarray, i: int, bits: int) -> int:
    """Element ``i`` of a packed row, bit by bit (the documented little-endian order)."""
    v = 0
    for k in range(bits):
        bit = bits * i + k
        v |= ((int(row[bit // 8]) >> (bit % 8)) & 1) << k
    return v


def _reference_ldmatrix(smem, addrs, f):
    bm, roles = matrix_forms.byte_map(f), matrix_forms.address_lanes(f)
    lane_of = {(int(m), int(r)): lane for lane, (m, r) in enumerate(roles) if m >= 0}
    out = np.zeros((32, f.regs), np.uint32)
    for lane in range(32):
        for reg in range(f.regs):
            for byte in range(4):
                m, r, c = (int(x) for x in bm[lane, reg, byte])
                a = int(addrs[lane_of[(m, r)]])
                if f.packed:
                    bits = matrix_forms.PACKED_FORMATS[f.dtype][0]
                    v = _packed_element(smem[a:a + 16], c, bits)
                else:
                    v = int(smem[a + c])
                out[lane, reg] |= np.uint32(v << (8 * byte))
    return out


def _scattered_rows(n_lanes: int) -> np.ndarray:
    """Row addresses in random order, 16-byte aligned, not contiguous; ignored lanes garbage."""
    rows = RNG.permutation(64)[:32] * 16 + 64
    rows[n_lanes:] = 3                 # ignored lanes: not even aligned
    return rows


@pytest.mark.parametrize("f", [f for f in NEW_FORMS if f.op == "ldmatrix"],
                         ids=_ids([f for f in NEW_FORMS if f.op == "ldmatrix"]))
def test_ldmatrix_new_forms_move_the_bytes_of_their_map(f):
    smem = RNG.integers(0, 256, 2048).astype(np.uint8)
    addrs = _scattered_rows(f.address_lane_count)
    got = emulator.ldmatrix(smem, addrs, num=f.num, trans=f.trans, shape=f.shape, dtype=f.dtype)
    assert got.shape == (32, f.regs)
    np.testing.assert_array_equal(got, _reference_ldmatrix(smem, addrs, f))
    # a batch of warps gives each warp's answer
    other = addrs.copy()
    other[:f.address_lane_count] = addrs[:f.address_lane_count][::-1]
    both = emulator.ldmatrix(smem, np.stack([addrs, other]), num=f.num, trans=f.trans,
                             shape=f.shape, dtype=f.dtype)
    np.testing.assert_array_equal(both[0], got)
    np.testing.assert_array_equal(both[1], _reference_ldmatrix(smem, other, f))


def test_m16n16_trans_lane0_gets_column0_of_rows_0_to_3():
    """The map in words: ldmatrix.m16n16.x1.trans.b8, lane t, register h, byte b holds byte
    ``t//4 + 8h`` of the row whose address lane ``4*(t%4) + b`` gave."""
    smem = np.arange(256, dtype=np.int64).astype(np.uint8)        # row i = bytes 16i .. 16i+15
    regs = emulator.ldmatrix(smem, np.arange(32) * 16 % 256, num=1, trans=True, shape="m16n16",
                             dtype="b8")
    assert regs[0, 0] == 0x30_20_10_00          # column 0 of rows 0, 1, 2, 3
    assert regs[0, 1] == 0x38_28_18_08          # column 8
    assert regs[5, 0] == 0x71_61_51_41          # lane 5: column 1 of rows 4..7


@pytest.mark.parametrize("dtype, bits, data_bytes", [("b4x16_p64", 4, 8), ("b6x16_p32", 6, 12)])
def test_packed_rows_unpack_low_bits_first_and_ignore_padding(dtype, bits, data_bytes):
    elems = RNG.integers(0, 1 << bits, (8, 16)).astype(np.uint8)
    rows = emulator.pack_row_elements(elems, dtype)
    assert rows.shape == (8, 16) and not rows[:, data_bytes:].any()
    np.testing.assert_array_equal(emulator.unpack_row_elements(rows, dtype), elems)
    if bits == 4:
        assert emulator.unpack_row_elements(np.array([0x21] + [0] * 15, np.uint8), dtype)[:2] \
            .tolist() == [1, 2]
    smem = np.zeros(1024, np.uint8)
    smem[:128] = rows.reshape(-1)
    clean = emulator.ldmatrix(smem, np.arange(32) * 16 % 128, num=1, shape="m8n16", dtype=dtype)
    smem.reshape(-1, 16)[:8, data_bytes:] = 0xFF                       # garbage in the padding
    dirty = emulator.ldmatrix(smem, np.arange(32) * 16 % 128, num=1, shape="m8n16", dtype=dtype)
    np.testing.assert_array_equal(clean, dirty)
    as_bytes = clean.view(np.uint8).reshape(32, 4)
    assert (as_bytes < (1 << bits)).all()                               # unused bits are zero
    np.testing.assert_array_equal(as_bytes.reshape(8, 16), elems)       # lane t: row t//4


@pytest.mark.parametrize("num", [1, 2, 4])
def test_stmatrix_m16n8_trans_writes_the_bytes_of_its_map(num):
    f = matrix_forms.form("stmatrix", shape="m16n8", num=num, trans=True, dtype="b8")
    regs = RNG.integers(0, 2**32, (32, num), dtype=np.uint64).astype(np.uint32)
    addrs = _scattered_rows(f.address_lane_count)
    smem = np.zeros(2048, np.uint8)
    emulator.stmatrix(smem, addrs, regs, num=num, trans=True, shape="m16n8", dtype="b8")
    want = np.zeros(2048, np.uint8)
    bm, roles = matrix_forms.byte_map(f), matrix_forms.address_lanes(f)
    lane_of = {(int(m), int(r)): lane for lane, (m, r) in enumerate(roles) if m >= 0}
    for lane in range(32):
        for reg in range(num):
            for byte in range(4):
                m, r, c = (int(x) for x in bm[lane, reg, byte])
                want[addrs[lane_of[(m, r)]] + c] = (int(regs[lane, reg]) >> (8 * byte)) & 0xFF
    np.testing.assert_array_equal(smem, want)


def test_stmatrix_m16n8_is_the_transpose_of_an_accumulator_like_fragment():
    """Register r of lane t, byte b is A[t//4 + 8*(b//2)][2*(t%4) + b%2] of a 16x8 byte matrix;
    .trans stores A transposed, 8 rows of 16 bytes."""
    A = RNG.integers(0, 256, (16, 8)).astype(np.uint8)
    regs = np.zeros((32, 1), np.uint32)
    for t in range(32):
        for b in range(4):
            regs[t, 0] |= np.uint32(int(A[t // 4 + 8 * (b // 2), 2 * (t % 4) + b % 2]) << (8 * b))
    smem = np.zeros(128, np.uint8)
    emulator.stmatrix(smem, np.arange(32) * 16 % 128, regs, num=1, trans=True, shape="m16n8",
                      dtype="b8")
    np.testing.assert_array_equal(smem.reshape(8, 16), A.T)


def test_errors_name_the_lane_and_the_fix():
    smem = np.zeros(1024, np.uint8)
    addrs = np.arange(32) * 16
    addrs[17] += 4
    with pytest.raises(MisalignedAddress, match="lane 17.*row 1 of matrix 1"):
        emulator.ldmatrix(smem, addrs, num=2, trans=True, shape="m16n16", dtype="b8")
    emulator.ldmatrix(smem, addrs, num=1, trans=True, shape="m16n16", dtype="b8")  # 17 unused
    with pytest.raises(UndefinedResult, match=r"lanes \[0, 3\]"):
        rows = np.arange(32) * 16
        rows[3] = 0
        emulator.stmatrix(smem, rows, np.zeros((32, 1), np.uint32), num=1, trans=True,
                          shape="m16n8", dtype="b8")
    with pytest.raises(BadOperand, match="write ldmatrix.sync.aligned.m16n16.x2.trans"):
        emulator.ldmatrix(smem, addrs, num=2, shape="m16n16", dtype="b8")
    with pytest.raises(BadOperand, match="needs 2 register"):
        emulator.stmatrix(smem, np.arange(32) * 16, np.zeros((32, 1), np.uint32), num=2,
                          trans=True, shape="m16n8", dtype="b8")


KERNEL = r'''
extern "C" __global__ void k(const unsigned char* in, unsigned* out) {
    __shared__ __align__(16) unsigned char s[1024];
    for (int i = threadIdx.x; i < 1024; i += 32) s[i] = in[i];
    __syncwarp();
    unsigned base = (unsigned)__cvta_generic_to_shared(s);
    unsigned a = base + ((threadIdx.x * 5) % 32) * 16;          // rows in a scrambled order
    unsigned r0, r1, r2, r3, p0, p1, p2, p3;
    asm volatile("ldmatrix.sync.aligned.m16n16.x2.trans.shared.b8 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
    asm volatile("ldmatrix.sync.aligned.m8n16.x4.shared::cta.b8x16.b6x16_p32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(p0), "=r"(p1), "=r"(p2), "=r"(p3) : "r"(a));
    unsigned* o = out + threadIdx.x * 8;
    o[0] = r0; o[1] = r1; o[2] = r2; o[3] = r3; o[4] = p0; o[5] = p1; o[6] = p2; o[7] = p3;
    __syncwarp();
    asm volatile("stmatrix.sync.aligned.m16n8.x4.trans.shared.b8 [%0], {%1, %2, %3, %4};"
                 :: "r"(base + 512 + threadIdx.x * 16), "r"(r0), "r"(r1), "r"(r2), "r"(r3));
    __syncwarp();
    for (int i = threadIdx.x; i < 512; i += 32) ((unsigned char*)(out + 256))[i] = s[512 + i];
}'''


def test_learner_cuda_with_the_new_forms_runs_on_the_cpu_backend():
    from ptxlab.run import cpu

    data = RNG.integers(0, 256, 1024).astype(np.uint8)
    out = cpu.run_kernel(KERNEL, "k", (1,), (32,), [data, np.zeros(256 + 128, np.uint32)],
                         options=("--gpu-architecture=compute_100a",))[1]
    addrs = (np.arange(32) * 5 % 32) * 16
    r = emulator.ldmatrix(data[:512], addrs, num=2, trans=True, shape="m16n16", dtype="b8")
    p = emulator.ldmatrix(data[:512], addrs, num=4, shape="m8n16", dtype="b6x16_p32")
    np.testing.assert_array_equal(out[:256].reshape(32, 8), np.concatenate([r, p], axis=1))
    stored = np.zeros(512, np.uint8)
    emulator.stmatrix(stored, np.arange(32) * 16, r, num=4, trans=True, shape="m16n8", dtype="b8")
    np.testing.assert_array_equal(out[256:].view(np.uint8), stored)


def test_compiled_for_sm_90_the_new_forms_are_refused_with_the_fix():
    from ptxlab.run import backends

    with pytest.raises(backends.CompileError, match=r"sm_90.*-arch=sm_100a"):
        backends.launch(KERNEL, "k", args=[np.zeros(1024, np.uint8), np.zeros(384, np.uint32)],
                        backend="cpu", isolate=False)


OLD_FORMS = [f for f in matrix_forms.all_forms() if f.dtype == "b16" and f.op != "movmatrix"]


@pytest.mark.parametrize("f", OLD_FORMS, ids=_ids(OLD_FORMS))
def test_byte_map_path_equals_the_m8n8_path(f):
    """The CPU interpreter runs every form through the byte map; for the m8n8 .b16 forms that
    must equal the emulator's own (H100-verified) path."""
    smem = RNG.integers(0, 256, 2048).astype(np.uint8)
    addrs = _scattered_rows(8 * f.num)
    if f.op == "ldmatrix":
        np.testing.assert_array_equal(emulator.ldmatrix_form(smem, addrs, f),
                                      emulator.ldmatrix(smem, addrs, num=f.num, trans=f.trans))
    else:
        regs = RNG.integers(0, 2**32, (32, f.num), dtype=np.uint64).astype(np.uint32)
        a, b = np.zeros(2048, np.uint8), np.zeros(2048, np.uint8)
        emulator.stmatrix_form(a, addrs, regs, f)
        emulator.stmatrix(b, addrs, regs, num=f.num, trans=f.trans)
        np.testing.assert_array_equal(a, b)
