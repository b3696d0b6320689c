"""Replay inputs and outputs recorded on a real GPU against the emulator, without a GPU.

``tests/vectors/*.npz`` come from ``scripts/verify_hardware.py`` on the H100 (see
``reports/hardware/REPORT.md``). Data movement and exact mma inputs must reproduce every bit;
random real mma inputs must stay within the tolerance measured over the whole hardware run;
for special values (Inf/NaN/subnormal/-0) the model must not do worse than when recorded.
"""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab import reference_cases as rc

FAMILIES = ("ldmatrix", "stmatrix", "movmatrix", "mma")


@pytest.fixture(scope="module")
def vectors() -> dict:
    loaded = {}
    for family in FAMILIES:
        path = rc.vectors_path(family)
        assert path.exists(), (f"{path} is missing: record it on a GPU with "
                               "`python3 scripts/verify_hardware.py`")
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


@pytest.mark.parametrize("f, kind", _cases())
def test_emulator_reproduces_hardware(vectors, f: rc.ReferenceForm, kind: str):
    data = vectors[f.family]
    assert kind in rc.vector_kinds(f, data), f"no recorded {kind} cases for {f.name}"
    result = rc.replay_vectors(f, data, kind)
    assert result.cases >= 50
    suffix = f.name.split(".", 1)[1]
    if kind in rc.EXACT_KINDS:
        assert result.mismatched_elements == 0, (
            f"{f.name} ({kind}): {result.mismatched_cases} of {result.cases} recorded hardware "
            f"cases differ from the emulator; first: {result.examples}")
    elif kind == "real":
        max_ulp = int(data[f"{suffix}__real__max_ulp"])
        max_scaled = float(data[f"{suffix}__real__max_scaled_error"])
        assert result.max_ulp <= max_ulp, (f.name, result.max_ulp, max_ulp)
        assert result.max_scaled_error <= max_scaled * (1 + 1e-9), (f.name, result.max_scaled_error)
    else:  # special values: no worse than when the vectors were recorded
        known = int(data[f"{suffix}__special__mismatched_elements"])
        assert result.mismatched_elements <= known, (
            f"{f.name} (special): {result.mismatched_elements} elements now differ from the "
            f"hardware, {known} did when recorded; first: {result.examples}")


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
