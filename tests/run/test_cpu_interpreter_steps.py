"""The interpreter's step per kind of code entry (``run_flow`` and its ``_STEPS`` table): every
kind has one, and each is exercised through CUDA that needs it: branches that split and
reconverge lanes, loops with lane-dependent trip counts, exits of some lanes, a call to a
function that is not inlined (with an early return inside it), warp-collectives after
divergence, and trap."""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab.run import cpu
from ptxlab.run.in_process import cpu_available
from ptxlab.run.ptx import interpreter, program
from ptxlab.run.ptx.errors import KernelFault

ok, why = cpu_available()
pytestmark = pytest.mark.skipif(not ok, reason=f"CPU model unavailable: {why}")


def test_every_kind_but_a_plain_operation_has_a_step():
    kinds = {name: getattr(program, name) for name in program.__all__ if name.startswith("K_")}
    assert len(kinds) == 8
    for name, kind in kinds.items():
        step = interpreter._STEPS[kind]
        assert (step is None) == (name == "K_OP"), name


def _run(src: str, threads: int = 32, n: int = 32):
    return cpu.run_kernel(src, "k", (1,), (threads,), [np.zeros(n, np.uint32)])[0]


def test_split_and_reconverge_in_nested_branches_and_loops():
    src = r'''extern "C" __global__ void k(unsigned* out) {
        unsigned t = threadIdx.x, acc = 0;
        for (unsigned i = 0; i < t % 5; ++i) {          // lane-dependent trip count
            if (t & 1) acc += i * 3u;
            else if (t & 2) acc ^= i + 7u;
            else { acc += 1u; if (t > 20) continue; acc *= 2u; }
        }
        unsigned all = __ballot_sync(0xffffffffu, acc & 1);  // every lane back together
        out[t] = acc + (all & 0xffu);
    }'''
    t = np.arange(32)
    acc = np.zeros(32, np.int64)
    for lane in t:
        a = 0
        for i in range(lane % 5):
            if lane & 1:
                a += i * 3
            elif lane & 2:
                a ^= i + 7
            else:
                a += 1
                if lane > 20:
                    continue
                a *= 2
        acc[lane] = a
    ballot = sum(1 << int(lane) for lane in t if acc[lane] & 1)
    assert np.array_equal(_run(src), (acc + (ballot & 0xFF)).astype(np.uint32))


def test_some_lanes_exit_early_the_others_go_on():
    src = r'''extern "C" __global__ void k(unsigned* out) {
        unsigned t = threadIdx.x;
        if (t % 3 == 0) return;
        out[t] = t * 11u;
    }'''
    t = np.arange(32)
    assert np.array_equal(_run(src), np.where(t % 3 == 0, 0, t * 11).astype(np.uint32))


def test_a_call_that_is_not_inlined_with_an_early_return():
    src = r'''__device__ __noinline__ unsigned f(unsigned x) {
        if (x & 4) return x + 100u;
        unsigned s = 0;
        for (unsigned i = 0; i < x % 4; ++i) s += i + x;
        return s;
    }
    extern "C" __global__ void k(unsigned* out) {
        unsigned t = threadIdx.x;
        out[t] = t < 24 ? f(t) : 7u;
    }'''
    want = [(x + 100 if x & 4 else sum(i + x for i in range(x % 4))) if x < 24 else 7
            for x in range(32)]
    assert np.array_equal(_run(src), np.array(want, np.uint32))


def test_trap_is_a_located_fault():
    src = r'''extern "C" __global__ void k(unsigned* out) {
        if (threadIdx.x == 5) __trap();
        out[threadIdx.x] = 1u;
    }'''
    with pytest.raises(KernelFault, match="the kernel executed trap") as info:
        _run(src)
    assert info.value.lanes == (5,) and info.value.ptx_line is not None


def test_an_endless_loop_is_stopped_by_the_branch_budget():
    src = r'''extern "C" __global__ void k(unsigned* out) {
        volatile unsigned* flag = out;
        while (flag[0] == 0u) { }
    }'''
    from ptxlab.run.ptx.interpreter import Launch
    from ptxlab.run.ptx.parser import parse_module

    prog = program.Program(parse_module(cpu.compile_ptx(src)), "k")
    run = Launch(prog, (1,), (32,), [np.zeros(32, np.uint32)], branch_budget=1000)
    with pytest.raises(KernelFault, match="more than 1000 branches"):
        run.run()


#: (opcode, CUDA type, constraint): the shifts a kernel may write with an immediate amount.
SHIFTS = [("shl.b16", "unsigned short", "h"), ("shl.b32", "unsigned", "r"),
          ("shl.b64", "unsigned long long", "l"), ("shr.u16", "unsigned short", "h"),
          ("shr.u32", "unsigned", "r"), ("shr.b64", "unsigned long long", "l"),
          ("shr.s16", "short", "h"), ("shr.s32", "int", "r"), ("shr.s64", "long long", "l")]
AMOUNTS = (0, 1, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 200)


@pytest.mark.parametrize("op,ctype,c", SHIFTS)
def test_a_shift_by_an_immediate_is_the_shift_by_a_register(op, ctype, c):
    """The decoder clamps an immediate amount once; the result must be the register form's
    for every amount, past the width included (0, or the sign for a signed shr)."""
    lines = "\n".join(
        f'    asm("{op} %0, %1, {k};" : "={c}"(r) : "{c}"(x)); out[t * {2 * len(AMOUNTS)} + '
        f'{2 * j}] = (long long)r;\n'
        f'    asm("{op} %0, %1, %2;" : "={c}"(r) : "{c}"(x), "r"({k}u + 0u * t)); '
        f'out[t * {2 * len(AMOUNTS)} + {2 * j + 1}] = (long long)r;'
        for j, k in enumerate(AMOUNTS))
    src = (f'extern "C" __global__ void k(const {ctype}* in, long long* out) {{\n'
           f'    unsigned t = threadIdx.x; {ctype} x = in[t], r;\n{lines}\n}}')
    bits = 8 * np.dtype({"h": np.int16, "r": np.int32, "l": np.int64}[c]).itemsize
    rng = np.random.default_rng(bits)
    dt = {"short": np.int16, "int": np.int32, "long long": np.int64}.get(
        ctype, {16: np.uint16, 32: np.uint32, 64: np.uint64}[bits])
    x = rng.integers(0, 2**63, 32, dtype=np.uint64).view(np.int64).astype(dt)
    x[:2] = (-1, 1) if np.dtype(dt).kind == "i" else (np.iinfo(dt).max, 1)
    out = cpu.run_kernel(src, "k", (1,), (32,), [x, np.zeros(32 * 2 * len(AMOUNTS), np.int64)])[1]
    got = out.reshape(32, len(AMOUNTS), 2)
    assert np.array_equal(got[..., 0], got[..., 1])
    lane0 = [int(v) for v in got[0, :, 0]]                  # x = -1 or the largest value
    if op.startswith("shr.s"):
        assert lane0 == [-1] * len(AMOUNTS)
    elif op.startswith("shl"):
        assert lane0[AMOUNTS.index(bits)] == 0 and lane0[AMOUNTS.index(200)] == 0


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64, np.int16, np.int32,
                                   np.int64])
def test_integer_div_and_rem_round_toward_zero(dtype):
    """div/rem as PTX defines them: the quotient rounded toward zero, the remainder with the
    dividend's sign, and by zero a quotient of all ones and the dividend as remainder; the
    usual operands (no zero, no negative) take a shorter path that must agree."""
    from ptxlab.run.ptx.instructions.integer import _divmod_trunc
    info = np.iinfo(dtype)
    rng = np.random.default_rng(info.bits)
    signed = info.min < 0
    for trial in range(40):
        low = 0 if trial % 2 else info.min          # every other trial: no negative operand
        x = rng.integers(low, info.max, 32, dtype=dtype, endpoint=True)
        y = rng.integers(low, info.max, 32, dtype=dtype, endpoint=True) >> rng.integers(
            0, info.bits - 1, 32).astype(dtype)
        if trial % 4 == 3:
            y[rng.integers(32)] = 0
        if trial % 4 == 2:
            y = (y & dtype(info.max)) | dtype(1)      # positive divisors, dividends of any sign
        if trial % 4 == 0 and signed:
            x[0], y[0] = info.min, -1                # overflows: wraps to info.min, rem 0
        q, r = _divmod_trunc(x, y, signed)
        assert q.dtype == r.dtype == np.dtype(dtype)
        for a, b, gq, gr in zip(x.tolist(), y.tolist(), q.tolist(), r.tolist()):
            if b == 0:
                want_q, want_r = (-1 if signed else info.max), a
            else:
                want_q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
                want_r = a - want_q * b
                if signed:
                    want_q = (want_q - info.min) % (1 << info.bits) + info.min
            assert (gq, gr) == (want_q, want_r), (a, b)


def test_a_value_loaded_from_a_call_parameter_keeps_its_value_when_the_parameter_is_reused():
    """Hand-written PTX may declare a call's return parameter once and use it for two calls;
    the register loaded from it after the first call must keep that value when the second
    call writes the parameter again (a register is its own copy, not a view of the
    parameter's bytes)."""
    from ptxlab.run.ptx.interpreter import Launch
    from ptxlab.run.ptx.parser import parse_module

    ptx = r"""
.version 8.0
.target sm_90
.address_size 64
.func (.param .b32 ret) triple_plus_one(.param .b32 x)
{
    .reg .b32 %r<3>;
    ld.param.b32 %r1, [x];
    mad.lo.s32 %r2, %r1, 3, 1;
    st.param.b32 [ret], %r2;
    ret;
}
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .param .b32 arg;
    .param .b32 result;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    st.param.b32 [arg], %r1;
    call.uni (result), triple_plus_one, (arg);
    ld.param.b32 %r2, [result];
    add.s32 %r3, %r1, 100;
    st.param.b32 [arg], %r3;
    call.uni (result), triple_plus_one, (arg);
    ld.param.b32 %r4, [result];
    mul.wide.u32 %rd3, %r1, 8;
    add.s64 %rd3, %rd2, %rd3;
    st.global.v2.u32 [%rd3], {%r2, %r4};
    ret;
}
"""
    prog = program.Program(parse_module(ptx), "k")
    out = Launch(prog, (1,), (32,), [np.zeros(64, np.uint32)]).run()[0].reshape(32, 2)
    lane = np.arange(32, dtype=np.uint32)
    assert np.array_equal(out[:, 0], lane * 3 + 1)
    assert np.array_equal(out[:, 1], (lane + 100) * 3 + 1)
