"""Replay inputs and outputs recorded on a real GPU against the emulator, without a GPU.

``tests/vectors/*.npz`` come from ``measure/gpu/verify_hardware.py`` on the H100 (see
``reports/hardware/REPORT.md``). Every recorded output must be reproduced bit for bit: data
movement, exact and wrapping integer mma, and real-valued mma with its special values, whose
rounding ``ptxlab.tensorcore`` models (``tests/vectors/mma_rounding.npz`` holds the inputs chosen
to expose that rounding).
"""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab.run import reference_cases as rc

FAMILIES = ("ldmatrix", "stmatrix", "movmatrix", "mma")


@pytest.fixture(scope="module")
def vectors() -> dict:
    loaded = {}
    for family in FAMILIES:
        path = rc.vectors_path(family)
        assert path.exists(), (f"{path} is missing: record it on a GPU with "
                               "`python3 measure/gpu/verify_hardware.py`")
        with np.load(path) as data:
            loaded[family] = {k: data[k] for k in data.files}
    return loaded


def test_vectors_come_from_real_hardware(vectors):
    for family, data in vectors.items():
        device = str(data["device"])
        assert device and "dry run" not in device and "CPU" not in device, (family, device)


def test_vectors_are_compact(vectors):
    total = sum(rc.vectors_path(f).stat().st_size for f in FAMILIES)
    assert total < 6_000_000, f"tests/vectors holds {total / 1e6:.1f} MB; keep it to a few MB"


def _cases():
    for f in rc.FORMS:
        for kind in f.kinds:
            yield pytest.param(f, kind, id=f"{f.name}[{kind}]")


@pytest.mark.parametrize("f, kind", list(_cases()))
def test_emulator_reproduces_hardware(vectors, f: rc.ReferenceForm, kind: str):
    data = vectors[f.family]
    assert kind in rc.vector_kinds(f, data), f"no recorded {kind} cases for {f.name}"
    result = rc.replay_vectors(f, data, kind)
    assert result.cases >= 50
    assert result.mismatched_elements == 0, (
        f"{f.name} ({kind}): {result.mismatched_cases} of {result.cases} recorded hardware "
        f"cases differ from the emulator; first: {result.examples}")


@pytest.mark.parametrize("family", FAMILIES)
def test_replay_notices_a_flipped_bit(vectors, family):
    """The replay is not vacuous: one flipped output bit in the recording is reported."""
    f = next(x for x in rc.FORMS if x.family == family)
    kind = rc.vector_kinds(f, vectors[family])[0]
    args, hw = rc.vectors_as_kernel_args(f, vectors[family], kind)
    corrupted = hw.copy()
    corrupted.reshape(-1)[corrupted.size // 3] ^= 1 << 3
    result = rc.compare(f, args, corrupted, kind)
    assert result.mismatched_elements == 1 and result.examples


ROUNDING_FORMATS = {   # variant -> (input format, accumulator format, output format)
    "m16n8k16.f16.f16.f16.f16": ("f16", "f16", "f16"),
    "m16n8k16.f32.f16.f16.f32": ("f16", "f32", "f32"),
    "m16n8k16.f32.bf16.bf16.f32": ("bf16", "f32", "f32"),
    "m16n8k8.f32.f16.f16.f32": ("f16", "f32", "f32"),
    "m16n8k8.f32.tf32.tf32.f32": ("tf32", "f32", "f32"),
}


@pytest.fixture(scope="module")
def rounding():
    path = rc.vectors_path("mma_rounding")
    assert path.exists(), f"{path} is missing: record it with measure/gpu/collect_mma_rounding.py"
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


@pytest.mark.parametrize("variant", list(ROUNDING_FORMATS))
def test_tensor_core_rounding_is_reproduced_bit_for_bit(rounding, variant):
    """Inputs chosen to expose the accumulation's rounding (cancellation, one dominant term,
    a huge or tiny accumulator, wide exponent ranges): every recorded output bit."""
    from ptxlab import emulator, layouts

    shape = variant.split(".")[0]
    dtype, atype, btype, ctype = variant.split(".")[1:]
    form = layouts.mma_form(shape, atype, btype, ctype, dtype)
    dists = sorted({k.split("__")[1] for k in rounding if k.startswith(variant + "__")})
    assert len(dists) >= 6, dists
    for dist in dists:
        a, b, c, d = (rounding[f"{variant}__{dist}__{x}"] for x in "abcd")
        frag = emulator.matrices_to_fragment
        got = emulator.mma(shape, frag(a[:, None], form.a), frag(b[:, None], form.b),
                           frag(c[:, None], form.c), atype=atype, btype=btype, ctype=ctype,
                           dtype=dtype)
        got = emulator.fragment_to_matrices(got, form.d)[:, 0]
        bad = np.argwhere(got != d)
        assert bad.size == 0, (f"{variant} ({dist}): {len(bad)} of {d.size} elements differ; "
                               f"first at {tuple(bad[0])}: hardware 0x{int(d[tuple(bad[0])]):x}, "
                               f"model 0x{int(got[tuple(bad[0])]):x}")


def test_round_to_nearest_would_not_reproduce_the_hardware(rounding):
    """The replay can fail: plain IEEE round-to-nearest of the exact sum misses many bits."""
    variant = "m16n8k16.f32.f16.f16.f32"
    a, b, c, d = (rounding[f"{variant}__normal__{x}"] for x in "abcd")
    A = a.astype(np.uint16).view(np.float16).astype(np.float64)
    B = b.astype(np.uint16).view(np.float16).astype(np.float64)
    C = c.view(np.float32).astype(np.float64)
    naive = (A @ B + C).astype(np.float32).view(np.uint32)
    assert (naive != d).mean() > 0.2
