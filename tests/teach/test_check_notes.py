"""What the CPU model notices in a learner's kernel is said once, in the check's report, and
never as a Python warning that shows the package's own files."""
from __future__ import annotations

import warnings

from ptxlab.teach.exercises import ldmatrix as ex

GENERIC_KERNEL = r"""
extern "C" __global__ void load_a_operand(const unsigned short* a, int sld, unsigned* out)
{
    extern __shared__ __align__(16) unsigned short tile[];
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 256; i += 32)
        tile[(i / 16) * sld + i % 16] = a[i];
    __syncwarp();
    unsigned r0, r1, r2, r3;
    const unsigned short* row = tile + (lane % 16) * sld + (lane / 16) * 8;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "l"(row));
    out[lane * 4 + 0] = r0;
    out[lane * 4 + 1] = r1;
    out[lane * 4 + 2] = r2;
    out[lane * 4 + 3] = r3;
}
"""


def test_a_generic_pointer_is_named_once_without_a_path(capsys):
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        result = ex.a_operand_kernel.check(GENERIC_KERNEL)
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert result is not None and result.passed
    assert not [w for w in shown if "generic" in str(w.message)], \
        [f"{w.filename}:{w.lineno}" for w in shown]
    assert printed.count("generic address") == 1, printed
    assert "ptxlab/" not in printed and "site-packages" not in printed
    assert "__cvta_generic_to_shared" in printed
