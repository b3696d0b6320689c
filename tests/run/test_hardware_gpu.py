"""On a real GPU: every reference kernel agrees with the emulator over >= 1,000 random cases.

Every kind (data movement, exact, wrapping, real-valued and special mma inputs) must match bit
for bit. A seed of its own adds cases beyond the ones ``measure/gpu/verify_hardware.py`` recorded.
Skipped with the reason where no usable GPU is present (tests/conftest.py).
"""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab import backends, gpu
from ptxlab.run import reference_cases as rc

pytestmark = pytest.mark.gpu

CASES = 1000
EXACT_SEED = 7_202_611


def _run(f: rc.ReferenceForm, args: list) -> np.ndarray:
    shared = int(args[-1]) if f.family in ("ldmatrix", "stmatrix") else 0
    res = backends.launch(f.source(), f.kernel, grid=(args[0].shape[0],), block=(32,),
                          args=args, shared_mem=shared, backend="gpu")
    assert res.backend == "gpu"
    return res.outputs[rc.output_index(f)]


def _needs(f: rc.ReferenceForm) -> None:
    st = gpu.status()
    if st.cc_number < f.min_sm:
        pytest.skip(f"{f.name} needs sm_{f.min_sm}; this GPU is {st.device_label}")


def _exact_params():
    for f in rc.FORMS:
        for kind in f.kinds:
            if kind in rc.EXACT_KINDS:
                yield pytest.param(f, kind, id=f"{f.name}[{kind}]")


@pytest.mark.parametrize("f, kind", list(_exact_params()))
def test_reference_kernel_matches_emulator_bit_for_bit(f: rc.ReferenceForm, kind: str):
    _needs(f)
    args = rc.make_inputs(f, rc.case_rng(EXACT_SEED, f, kind), CASES, rc.SMEM_BYTES, kind)
    result = rc.compare(f, args, _run(f, args), kind)
    assert result.cases == CASES
    assert result.mismatched_elements == 0, (
        f"{f.name} ({kind}): {result.mismatched_cases} of {CASES} cases differ; "
        f"first: {result.examples}")


def test_stmatrix_leaves_every_other_byte_alone():
    """A full 48 KiB image comes back: only the 32 stored rows may change."""
    f = rc.form("stmatrix.x4.trans")
    _needs(f)
    rng = np.random.default_rng(5)
    args = rc.make_inputs(f, rng, 64, rc.SMEM_BYTES)
    after = _run(f, args)
    before = args[0]
    rows = args[1][:, :32].astype(np.int64)
    touched = np.zeros_like(before, dtype=bool)
    idx = (rows[..., None] + np.arange(16)).reshape(64, -1)
    np.put_along_axis(touched, idx, True, axis=1)
    assert np.array_equal(after[~touched], before[~touched])


LAYOUT = r'''
extern "C" __global__ void layout(unsigned* out) {
    __shared__ __align__(16) unsigned char st[48];
    extern __shared__ __align__(16) unsigned char dyn[];
    st[threadIdx.x % 48] = 1; dyn[threadIdx.x] = 2;
    out[0] = (unsigned)__cvta_generic_to_shared(st);
    out[1] = (unsigned)__cvta_generic_to_shared(dyn);
}'''


def test_shared_variables_sit_where_the_cpu_model_puts_them():
    """The .shared address of static and dynamic shared memory, GPU vs CPU model."""
    got = {b: backends.launch(LAYOUT, "layout", args=[np.zeros(2, np.uint32)], shared_mem=64,
                              backend=b).outputs[0].tolist() for b in ("gpu", "cpu")}
    assert got["gpu"] == got["cpu"], got
