"""Row addresses of ldmatrix/stmatrix on the CPU model: only the lanes whose address the
instruction uses are checked (lanes 0-7 for .x1, 0-15 for .x2); the others may hold anything,
a generic pointer or no pointer at all, as on the GPU. A diagnostic a kernel check reports is
said once, as the check's note, and never as a warning with the check's own file and line."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from ptxlab.model import emulator
from ptxlab.run import backends, cpu
from ptxlab.run.in_process import cpu_available

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "sanitizer"))
from block_load import block_load_b  # noqa: E402

ok, why = cpu_available()
pytestmark = pytest.mark.skipif(not ok, reason=f"CPU model unavailable: {why}")

#: One warp loads (ldmatrix) or stores (stmatrix) with .xNUM; lanes past 8*NUM give IGNORED.
SOURCE = r'''
extern "C" __global__ void k(unsigned* out, const unsigned long long* junk) {
    __shared__ __align__(16) unsigned short tile[256];
    int t = threadIdx.x;
    for (int i = t; i < 256; i += 32) tile[i] = (unsigned short)(5 * i + 3);
    __syncwarp();
    unsigned r[4] = {0u, 0u, 0u, 0u};
    bool used = t < 8 * NUM;
    ADDRESS
    asm volatile(INSTRUCTION);
    for (int j = 0; j < NUM; ++j) out[t * 4 + j] = r[j];
}'''

FORMS = {
    # a .shared instruction: lanes in use give a shared address, the others a 64-bit pointer
    "shared": ("unsigned long long a = used ? (unsigned long long)__cvta_generic_to_shared("
               "&tile[(t % 32) * 8]) : junk[t];", "l"),
    # the generic form (no .shared): lanes in use give a generic pointer, the others junk
    "generic": ("unsigned long long a = used ? (unsigned long long)&tile[(t % 32) * 8] "
                ": junk[t];", "l"),
}


def _ldmatrix(form: str, num: int) -> str:
    space = ".shared" if form == "shared" else ""
    regs = ", ".join(f"%{i}" for i in range(num))
    outs = ", ".join(f'"=r"(r[{i}])' for i in range(num))
    inst = (f'"ldmatrix.sync.aligned.m8n8.x{num}{space}.b16 {{{regs}}}, [%{num}];" : {outs} : '
            f'"{FORMS[form][1]}"(a)')
    return (SOURCE.replace("ADDRESS", FORMS[form][0]).replace("INSTRUCTION", inst)
            .replace("NUM", str(num)))


def _stmatrix(form: str, num: int) -> str:
    space = ".shared" if form == "shared" else ""
    regs = ", ".join(f"%{i + 1}" for i in range(num))
    ins = ", ".join(f'"r"(0x00010001u * (unsigned)(t + {i}))' for i in range(num))
    inst = (f'"stmatrix.sync.aligned.m8n8.x{num}{space}.b16 [%0], {{{regs}}};" :: '
            f'"{FORMS[form][1]}"(a), {ins}')
    body = SOURCE.replace("ADDRESS", FORMS[form][0]).replace("INSTRUCTION", inst)
    body = body.replace("for (int j = 0; j < NUM; ++j) out[t * 4 + j] = r[j];",
                        "__syncwarp(); for (int j = 0; j < 4; ++j) out[t * 4 + j] = "
                        "((unsigned*)tile)[t * 4 + j];")
    return body.replace("NUM", str(num))


def _launch(src: str, junk: np.ndarray):
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # no diagnostic: nothing the instruction uses is wrong
        return cpu.run_kernel(src, "k", (1,), (32,), [np.zeros(128, np.uint32), junk])[0]


#: What lanes 8*num-31 hold: a generic shared pointer's high bits, a global-looking pointer,
#: zero (null), all ones.
JUNK = np.array([0x7F00_0000_0400, 0x7FFF_DEAD_BEE0, 0, 0xFFFF_FFFF_FFFF_FFFF] * 8, np.uint64)


@pytest.mark.parametrize("form", ["shared", "generic"])
@pytest.mark.parametrize("num", [1, 2])
def test_ldmatrix_checks_only_the_lanes_whose_address_it_uses(form, num):
    out = _launch(_ldmatrix(form, num), JUNK).reshape(32, 4)
    tile = ((5 * np.arange(256) + 3) & 0xFFFF).astype(np.uint16)
    smem = np.zeros(1024 + 512, np.uint8)
    smem[1024:] = tile.view(np.uint8)
    want = emulator.ldmatrix(smem, 1024 + np.arange(32) * 16, num=num)
    assert np.array_equal(out[:, :num], want)


@pytest.mark.parametrize("form", ["shared", "generic"])
@pytest.mark.parametrize("num", [1, 2])
def test_stmatrix_checks_only_the_lanes_whose_address_it_uses(form, num):
    out = _launch(_stmatrix(form, num), JUNK)
    assert out.any()


def test_a_lane_in_use_is_still_checked():
    """The generic form still refuses a row address outside shared memory in a lane it uses."""
    junk = JUNK.copy()
    src = _ldmatrix("generic", 2).replace("bool used = t < 8 * 2;", "bool used = t < 8 * 2 "
                                           "&& t != 9;")
    with pytest.raises(Exception, match=r"generic address 0x7fffdeadbee0 is not in shared "
                                        r"memory") as info:
        cpu.run_kernel(src, "k", (1,), (32,), [np.zeros(128, np.uint32), junk])
    assert "lane 9" in str(info.value)
    # and a 64-bit pointer handed to the .shared form in a lane in use is still noticed
    src = _ldmatrix("shared", 1).replace("__cvta_generic_to_shared(&tile[(t % 32) * 8])",
                                         "&tile[(t % 32) * 8]")
    res = backends.launch(src, "k", args=[np.zeros(128, np.uint32), junk], backend="cpu",
                          isolate=False)
    (note,) = res.diagnostics
    assert "lane 0 gave the generic address 0x7f" in note


def test_a_kernel_check_says_a_diagnostic_once_without_warnings():
    from ptxlab.teach.exercises import ldmatrix_trans as ex

    src = block_load_b(generic_row_address=True)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        res = ex.block_load_kernel.evaluate(src)
    assert res.passed
    notes = [a for a in res.advice if "generic address" in a]
    assert len(notes) == 1 and "__cvta_generic_to_shared" in notes[0], res.advice
    assert "(PTX line" in notes[0] and "kernel.cu:12)" in notes[0], notes[0]
    assert not [w for w in shown if issubclass(w.category, backends.KernelDiagnostic)]
