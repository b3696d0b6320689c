#!/usr/bin/env python3
"""Record how the GPU's tensor cores round real-valued ``mma.sync``, for modelling it exactly.

For every floating-point mma variant of the course, run the reference kernel on several input
distributions chosen to expose the accumulation's rounding (random values over a wide exponent
range, sums that cancel, one large term beside many small ones, an accumulator far larger or
smaller than the products) and save A, B, C (as matrices of raw bits) and the hardware's D.

    python3 measure/gpu/collect_mma_rounding.py --out DIR [--cases 500] [--report DIR]
                                            [--vectors tests/vectors/mma_rounding.npz]

Writes ``DIR/mma_rounding_<variant>.npz`` (every case), a report of how many output elements
the emulator gets wrong per variant and distribution (``--report``: ``MMA_ROUNDING.md`` and
``mma_rounding.json``), and a compact subset for CI (``--vectors``, replayed by
``tests/model/test_hardware_replay.py``).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ptxlab.model import emulator, layouts  # noqa: E402
from ptxlab.run import backends, gpu, reference_cases as rc  # noqa: E402

DISTRIBUTIONS = ("normal", "wide", "cancel", "dominant", "big_c", "small_c")


def matrices(rng: np.random.Generator, dist: str, cases: int, form: layouts.MmaForm):
    """Real-valued A (cases, M, K), B (cases, K, N), C (cases, M, N) of one distribution."""
    m, n, k = form.m, form.n, form.k
    sa, sb, sc = (cases, m, k), (cases, k, n), (cases, m, n)
    lo, hi = (-10, 10) if form.atype == "f16" else (-30, 30)

    def spread(shape, a, b):
        return rng.standard_normal(shape) * np.exp2(rng.integers(a, b, size=shape))

    if dist == "normal":
        return spread(sa, -3, 3), spread(sb, -3, 3), spread(sc, -2, 4)
    if dist == "wide":
        return spread(sa, lo // 2, hi // 2), spread(sb, lo // 2, hi // 2), spread(sc, lo, hi)
    if dist == "cancel":
        a = spread(sa, -2, 2)
        b = spread(sb, -2, 2)
        # pair up products so they (nearly) cancel, and let C cancel the rest
        half = k // 2
        a[:, :, half:2 * half] = -a[:, :, :half] * (1 + rng.standard_normal((cases, m, half)) * 2.0**-8)
        b[:, half:2 * half, :] = b[:, :half, :]
        c = -(a @ b) * (1 + rng.standard_normal(sc) * 2.0**-12)
        return a, b, c
    if dist == "dominant":
        a = spread(sa, -6, -2)
        b = spread(sb, -2, 2)
        col = rng.integers(0, k, size=(cases, m))
        np.put_along_axis(a, col[..., None], rng.standard_normal((cases, m, 1)) * 2.0**6, axis=2)
        return a, b, spread(sc, -4, 0)
    if dist == "big_c":
        return spread(sa, -3, 1), spread(sb, -3, 1), spread(sc, 8, 14)
    if dist == "small_c":
        return spread(sa, -1, 3), spread(sb, -1, 3), spread(sc, -20, -10)
    raise ValueError(dist)


def collect(form_name: str, cases: int, seed: int, backend: str = "gpu",
            counts: dict | None = None) -> dict:
    """Every case of one variant: ``<dist>__a/b/c`` (matrices of bits) and ``<dist>__d``."""
    f = rc.form(form_name)
    form = layouts.mma_form(*f.mma)
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    frag = emulator.matrices_to_fragment
    for dist in DISTRIBUTIONS:
        a, b, c = matrices(rng, dist, cases, form)
        with np.errstate(over="ignore", invalid="ignore"):
            ab = emulator.element_bits(a, form.atype)
            bb = emulator.element_bits(b, form.btype)
            cb = emulator.element_bits(c, form.ctype)
        if form.atype == "tf32":      # random low bits too: the tensor core must ignore them
            ab |= rng.integers(0, 1 << 13, size=ab.shape, dtype=np.uint32)
            bb |= rng.integers(0, 1 << 13, size=bb.shape, dtype=np.uint32)
        args = [frag(ab[:, None], form.a).astype(np.uint32), frag(bb[:, None], form.b).astype(np.uint32),
                frag(cb[:, None], form.c).astype(np.uint32),
                np.zeros((cases, 32, form.d.regs), dtype=np.uint32)]
        res = backends.launch(f.source(), f.kernel, grid=(cases,), block=(32,), args=args,
                              backend=backend)
        d = emulator.fragment_to_matrices(res.outputs[3], form.d)[:, 0]
        model = emulator.fragment_to_matrices(
            emulator.mma(form.shape, args[0], args[1], args[2], atype=form.atype,
                         btype=form.btype, ctype=form.ctype, dtype=form.dtype), form.d)[:, 0]
        out[f"{dist}__a"], out[f"{dist}__b"], out[f"{dist}__c"] = ab, bb, cb
        out[f"{dist}__d"] = d.astype(np.uint32)
        diff = int((d != model).sum())
        if counts is not None:
            counts[(form_name, dist)] = {"elements": int(d.size), "mismatched": diff}
        print(f"{form_name:34s} {dist:9s} {cases} cases: {diff} of {d.size} elements differ "
              "from the current model", flush=True)
    return out


def write_report(out: Path, counts: dict, cases: int, seed: int, device: str) -> None:
    """``MMA_ROUNDING.md`` and ``mma_rounding.json``: model-vs-hardware element counts."""
    out.mkdir(parents=True, exist_ok=True)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows = [{"form": k[0], "distribution": k[1], **v} for k, v in counts.items()]
    (out / "mma_rounding.json").write_text(json.dumps(
        {"date": date, "device": device, "cases_per_distribution": cases, "seed": seed,
         "rows": rows}, indent=2) + "\n")
    total = sum(r["elements"] for r in rows)
    bad = sum(r["mismatched"] for r in rows)
    lines = ["# The tensor core's rounding: emulator against hardware", "",
             f"{device}, {date}. `python3 measure/gpu/collect_mma_rounding.py` ran {cases} random "
             f"cases (seed {seed}) per variant and input distribution through the reference "
             "kernels and compared every output element with `ptxlab.model.emulator.mma` "
             "(`ptxlab.model.tensorcore`).", "",
             "Distributions: `normal` (a few binades), `wide` (inputs over 20-60 binades), "
             "`cancel` (sums that cancel to a few bits), `dominant` (one product far larger than "
             "the rest), `big_c` / `small_c` (accumulator far larger / smaller than the products).",
             "", "| form | distribution | output elements | mismatched |", "| --- | --- | ---: | ---: |"]
    lines += [f"| `{r['form']}` | {r['distribution']} | {r['elements']} | {r['mismatched']} |"
              for r in rows]
    lines += ["", f"**{bad} of {total} output elements differ.**", ""]
    (out / "MMA_ROUNDING.md").write_text("\n".join(lines))


def save_vectors(path: Path, everything: dict, keep: int, device: str) -> None:
    """The first ``keep`` cases of every variant and distribution, for the CI replay."""
    out = {"device": np.str_(device),
           "date": np.str_(_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"))}
    for variant, data in everything.items():
        for key, arr in data.items():
            out[f"{variant}__{key}"] = arr[:keep]
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cases", type=int, default=500)
    ap.add_argument("--seed", type=int, default=2026_11_23)
    ap.add_argument("--report", type=Path, help="write MMA_ROUNDING.md and mma_rounding.json here")
    ap.add_argument("--vectors", type=Path, help="write the compact CI subset to this .npz")
    ap.add_argument("--vector-cases", type=int, default=24)
    ap.add_argument("--backend", choices=("gpu", "cpu"), default="gpu",
                    help="cpu: exercise the harness on the CPU model (proves nothing)")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    forms = [f.name for f in rc.FORMS if f.family == "mma" and "real" in f.kinds]
    counts: dict = {}
    everything = {}
    for i, name in enumerate(forms):
        data = collect(name, a.cases, a.seed + i, a.backend, counts)
        variant = name.split(".", 1)[1]
        everything[variant] = data
        np.savez_compressed(a.out / f"mma_rounding_{variant}.npz", **data)
    device = gpu.status().device_label if a.backend == "gpu" else "CPU model (harness test)"
    if a.report:
        write_report(a.report, counts, a.cases, a.seed, device)
    if a.vectors:
        save_vectors(a.vectors, everything, a.vector_cases, device)
    bad = sum(v["mismatched"] for v in counts.values())
    print(f"{bad} of {sum(v['elements'] for v in counts.values())} output elements differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
