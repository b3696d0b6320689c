#!/usr/bin/env python3
"""Verify the reference kernels and the emulator against each other on a real GPU.

For every instruction form of ``ptxlab.run.reference_cases.FORMS`` and every input kind, run
``--cases`` random cases through the reference kernel and compare each output bit with
``ptxlab.model.emulator``. Data movement and exact mma inputs must match bit for bit; for random
real mma inputs the distance is measured (ulps, and error relative to the size of the sum). Then
probe what the hardware does with garbage addresses in the lanes an ``.x1``/``.x2``
ldmatrix/stmatrix ignores (each probe in its own process: a fault ruins a CUDA context).

Writes ``REPORT.md`` and ``report.json`` (``--out-dir``, default ``reports/hardware``) and the
compact replay vectors (``--vectors-dir``, default ``tests/vectors``).

    python3 measure/gpu/verify_hardware.py                      # on a GPU machine
    python3 measure/gpu/verify_hardware.py --dry-run            # no GPU: the emulator stands in for
                                                            # the kernels, output to a temp dir
    python3 measure/gpu/verify_hardware.py --backend cpu --cases 4 --no-probe   # the CPU model
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ptxlab.model import emulator, layouts, tensorcore  # noqa: E402
from ptxlab.run import backends, gpu, reference_cases as rc  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Running one batch on a backend
# ---------------------------------------------------------------------------------------------


def run_batch(f: rc.ReferenceForm, args: list, backend: str) -> np.ndarray:
    """The output argument of the reference kernel after one launch over all cases."""
    if backend == "emulator":          # dry run: exercises the harness, proves nothing about HW
        return rc.expected_outputs(f, args)
    cases = args[0].shape[0]
    shared = int(args[-1]) if f.family in ("ldmatrix", "stmatrix") else 0
    res = backends.launch(f.source(), f.kernel, grid=(cases,), block=(32,), args=args,
                          shared_mem=shared, backend=backend)
    return res.outputs[rc.output_index(f)]


# ---------------------------------------------------------------------------------------------
# Probes of the lanes .x1/.x2 ignore (and two controls that must fault)
# ---------------------------------------------------------------------------------------------

PROBE_KINDS = ("misaligned", "out_of_range")
CONTROL_KINDS = ("used_lane_misaligned", "used_lane_out_of_range")


def probe_names() -> list[str]:
    names = [f"{fam}.x{num}{'.trans' if t else ''}:{kind}"
             for fam in ("ldmatrix", "stmatrix") for num in (1, 2) for t in (False, True)
             for kind in PROBE_KINDS]
    names += [f"{fam}.x1:{kind}" for fam in ("ldmatrix", "stmatrix") for kind in CONTROL_KINDS]
    return names


def garbage_addresses(rng: np.random.Generator, addrs: np.ndarray, num: int, kind: str,
                      smem_bytes: int) -> np.ndarray:
    """Copy of ``addrs`` with garbage in the ignored lanes (or, for controls, in lane 3)."""
    out = addrs.copy()
    cases = out.shape[0]
    if kind.startswith("used_lane"):
        lanes = np.array([3])
    else:
        lanes = np.arange(8 * num, 32)
    shape = (cases, lanes.size)
    if kind.endswith("misaligned"):
        bad = rng.integers(0, smem_bytes // 16, size=shape) * 16 + rng.integers(1, 16, size=shape)
    else:  # just past the buffer, or far outside any shared-memory window
        near = smem_bytes + 16 * rng.integers(0, 256, size=shape)
        far = 0x01000000 + 16 * rng.integers(0, 1 << 16, size=shape)
        bad = np.where(rng.random(shape) < 0.5, near, far)
    out[:, lanes] = bad.astype(np.uint32)
    return out


def run_probe(name: str, backend: str, seed: int, cases: int = 256) -> dict:
    """One probe, in this process. Returns a JSON-able record."""
    form_name, kind = name.split(":")
    f = rc.form(form_name)
    rng = np.random.default_rng(seed)
    args = rc.make_inputs(f, rng, cases, rc.SMEM_BYTES)
    args[1] = garbage_addresses(rng, args[1], f.num, kind, rc.SMEM_BYTES)
    record = {"probe": name, "form": f.name, "garbage": kind, "cases": cases}
    try:
        model = rc.expected_outputs(f, args)
        record["model"] = "ignores those lanes"
    except emulator.EmulatorError as exc:
        model = None
        record["model"] = f"raises {type(exc).__name__}: {exc}"
    try:
        got = run_batch(f, args, backend)
    except backends.KernelFault as exc:
        record.update(hardware="faulted", detail=str(exc).split(". A CUDA error")[0])
        return record
    except emulator.EmulatorError as exc:      # the dry run's stand-in refuses like the model
        record.update(hardware="refused (emulator stand-in)", detail=str(exc))
        return record
    record["hardware"] = "ran"
    if model is not None:
        cmp = rc.compare(f, args, got, "probe", want=model, max_examples=3)
        record.update(mismatched_cases=cmp.mismatched_cases, examples=cmp.examples)
    else:
        # A control did not fault: does the hardware round the address down to 16 bytes?
        fixed = list(args)
        fixed[1] = args[1] & np.uint32(0xFFFFFFF0)
        try:
            cmp = rc.compare(f, fixed, got, "probe", max_examples=3)
            record.update(detail="no fault; compared with lane 3's address rounded down to 16 "
                                 "bytes", mismatched_cases=cmp.mismatched_cases,
                          examples=cmp.examples)
        except emulator.EmulatorError as exc:
            record.update(detail=f"no fault; result not comparable ({exc})")
    return record


def run_probes(backend: str, seed: int, parallel: int = 6) -> list[dict]:
    """Every probe in its own child process (controls last, as they are meant to fault)."""
    def child(i_name):
        i, name = i_name
        cmd = [sys.executable, str(Path(__file__).resolve()), "--probe-one", name,
               "--backend", backend, "--seed", str(seed + 1000 + i)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
        except subprocess.TimeoutExpired:
            return {"probe": name, "hardware": "hung (killed after 180 s)"}
        lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
        if proc.returncode == 0 and lines:
            return json.loads(lines[-1])
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"probe": name, "hardware": f"probe process failed (exit {proc.returncode})",
                "detail": " | ".join(tail)}

    names = list(enumerate(probe_names()))
    ordinary = [x for x in names if not x[1].split(":")[1].startswith("used_lane")]
    controls = [x for x in names if x[1].split(":")[1].startswith("used_lane")]
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        results = list(pool.map(child, ordinary))
    results += [child(x) for x in controls]
    return results


# ---------------------------------------------------------------------------------------------
# Provenance
# ---------------------------------------------------------------------------------------------

def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def environment(backend: str) -> dict:
    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "backend": backend,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "sources_sha256": {p: _sha256(ROOT / p) for p in (
            *(Path(m.__file__).relative_to(ROOT).as_posix() for m in (emulator, layouts, tensorcore)),
            "kernels/ldmatrix.cuh",
            "kernels/stmatrix.cuh", "kernels/movmatrix.cuh", "kernels/mma.cuh",
            "kernels/reference/ldmatrix_ref.cu", "kernels/reference/stmatrix_ref.cu",
            "kernels/reference/movmatrix_ref.cu", "kernels/reference/mma_ref.cu")},
    }
    if backend == "gpu":
        st = gpu.status()
        env.update(device=st.name, compute_capability=f"{st.compute_capability[0]}.{st.compute_capability[1]}",
                   cupy=st.cupy_version, cuda_driver_api=st.driver_version,
                   cuda_runtime=st.runtime_version)
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            env["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 else "?"
        except (OSError, subprocess.TimeoutExpired, IndexError):
            env["driver"] = "?"
    elif backend == "cpu":
        env["device"] = backends.CPU_DEVICE
    else:
        env["device"] = "none (dry run: the emulator stands in for the kernels)"
    return env


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------

def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3g}"
    return str(x)


def write_report(out_dir: Path, report: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    env = report["environment"]
    lines = [
        "# Reference kernels and emulator, verified on hardware",
        "",
        "Every reference kernel of `kernels/reference/` run on the device below and compared,",
        "bit for bit, with `ptxlab.model.emulator` on the same inputs. Produced by",
        f"`{report['command']}`.",
        "",
        "| | |", "| --- | --- |",
        f"| date | {env['date']} |",
        f"| device | {env.get('device', '-')} (compute capability {env.get('compute_capability', '-')}) |",
        f"| NVIDIA driver | {env.get('driver', '-')} (CUDA driver API {env.get('cuda_driver_api', '-')}) |",
        f"| CuPy / CUDA runtime | {env.get('cupy', '-')} / {env.get('cuda_runtime', '-')} |",
        f"| Python / numpy | {env['python']} / {env['numpy']} |",
        f"| seed | {report['seed']} |",
        f"| wall time | {report['seconds']:.1f} s |",
        "",
        "## Results per form",
        "",
        "Kinds: `random` = random distinct 16-byte-aligned rows anywhere in a 48 KiB buffer, in",
        "random order, and random register/memory bits with NaN, Inf, subnormal and signed-zero",
        "patterns mixed in; `exact` = small-integer mma inputs (every partial sum exact); `lowbits`",
        "= exact tf32 inputs with noise in the 13 mantissa bits the tensor core ignores; `wrap` =",
        "s8 sums that overflow int32; `real` = random real inputs; `special` = Inf/NaN/subnormal/-0",
        "mma inputs (and sums that overflow). Every kind must match bit for bit: the emulator models",
        "the tensor core's rounding (`ptxlab.model.tensorcore`).",
        "",
        "| form | kind | cases | mismatched cases | mismatched elements | max ulp | max error / ulp(sum of abs) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in report["results"]:
        lines.append(f"| `{r['form']}` | {r['kind']} | {r['cases']} | {r['mismatched_cases']} | "
                     f"{r['mismatched_elements']} | {_fmt(r.get('max_ulp'))} | "
                     f"{_fmt(r.get('max_scaled_error'))} |")
    skipped = report.get("skipped", [])
    if skipped:
        lines += ["", "Not run here: " + "; ".join(skipped)]
    lines += ["", "## Summary", ""]
    s = report["summary"]
    lines += [f"- Bit-exact kinds: {s['exact_batches']} batches, {s['exact_cases']} cases, "
              f"**{s['exact_mismatched_cases']} mismatched cases**.",
              "- Real-valued mma, largest distance between model and hardware per variant: "
              + ", ".join(f"`{k}` {v['max_ulp']} ulp (error/ulp(sum) {_fmt(v['max_scaled_error'])})"
                          for k, v in s["tolerance"].items()) + "."]
    hist_rows = [r for r in report["results"] if r.get("ulp_histogram") and r["kind"] == "real"]
    if hist_rows:
        buckets = list(hist_rows[0]["ulp_histogram"])
        lines += ["", "## Real-valued mma: distribution of the ulp difference (output elements)", "",
                  "| form | " + " | ".join(f"{b} ulp" for b in buckets) + " |",
                  "| --- |" + " ---: |" * len(buckets)]
        for r in hist_rows:
            lines.append(f"| `{r['form']}` | " + " | ".join(str(r["ulp_histogram"][b]) for b in buckets) + " |")
    mism = [r for r in report["results"] if r["examples"]]
    if mism:
        lines += ["", "## First mismatches", ""]
        for r in mism:
            lines.append(f"- `{r['form']}` ({r['kind']}): " + "; ".join(r["examples"][:3]))
    probes = report.get("probes")
    if probes:
        lines += ["", "## Garbage addresses in the lanes .x1/.x2 ignore", "",
                  "Lanes 8*num..31 of an `.x1`/`.x2` ldmatrix/stmatrix given misaligned or",
                  "out-of-range addresses (256 cases each, one process per probe). The controls put",
                  "the garbage in lane 3, whose address is used.", "",
                  "| probe | model | hardware | mismatched cases vs model | detail |",
                  "| --- | --- | --- | ---: | --- |"]
        for p in probes:
            detail = p.get("detail", "") or "; ".join(p.get("examples", [])[:1])
            lines.append(f"| `{p['probe']}` | {p.get('model', '-')} | {p.get('hardware')} | "
                         f"{_fmt(p.get('mismatched_cases'))} | {detail} |".replace("\n", " "))
    vec = report.get("vectors")
    if vec:
        lines += ["", "## Replay vectors", "",
                  f"{vec['cases_per_batch']}, written to `{vec['dir']}` "
                  f"({vec['total_bytes'] / 1e6:.2f} MB in {len(vec['files'])} files) and replayed "
                  "against the emulator by `tests/model/test_hardware_replay.py` in CI."]
    (out_dir / "REPORT.md").write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------

def verify(backend: str, cases: int, vector_cases: int, mma_vector_cases: int, seed: int,
           forms: list[str] | None, probe: bool, command: str) -> tuple[dict, dict[str, dict]]:
    t0 = time.time()
    results, skipped = [], []
    vectors: dict[str, dict] = {"ldmatrix": {}, "stmatrix": {}, "movmatrix": {}, "mma": {}}
    tolerance: dict[str, dict] = {}
    st = gpu.status() if backend == "gpu" else None
    for f in rc.FORMS:
        if forms and f.name not in forms:
            continue
        if st is not None and st.cc_number < f.min_sm:
            skipped.append(f"{f.name} (needs sm_{f.min_sm})")
            continue
        for kind in f.kinds:
            args = rc.make_inputs(f, rc.case_rng(seed, f, kind), cases, rc.SMEM_BYTES, kind)
            t = time.time()
            got = run_batch(f, args, backend)
            cmp = rc.compare(f, args, got, kind)
            row = cmp.to_json()
            row["seconds"] = round(time.time() - t, 3)
            results.append(row)
            flag = "ok" if cmp.exact else ("MISMATCH" if kind in rc.EXACT_KINDS else "differs")
            extra = f" max_ulp={cmp.max_ulp} scaled={_fmt(cmp.max_scaled_error)}" if cmp.max_ulp is not None else ""
            print(f"{f.name:34s} {kind:8s} {cases:5d} cases  {cmp.mismatched_cases:5d} mismatched  "
                  f"[{flag}]{extra}", flush=True)
            for ex in cmp.examples[:2]:
                print(f"    {ex}", flush=True)
            keep = vector_cases if f.family != "mma" else mma_vector_cases
            record = rc.extract_vectors(f, args, got, kind, keep)
            vectors[f.family].update(record)
            if kind == "real":
                tolerance[f.name] = {"max_ulp": cmp.max_ulp, "max_scaled_error": cmp.max_scaled_error}
                suffix = f.name.split(".", 1)[1]
                vectors["mma"][f"{suffix}__real__max_ulp"] = np.int64(cmp.max_ulp)
                vectors["mma"][f"{suffix}__real__max_scaled_error"] = np.float64(cmp.max_scaled_error)
    exact_rows = [r for r in results if r["kind"] in rc.EXACT_KINDS]
    report = {
        "command": command, "seed": seed, "cases_per_batch": cases,
        "environment": environment(backend),
        "results": results, "skipped": skipped,
        "summary": {
            "exact_batches": len(exact_rows),
            "exact_cases": sum(r["cases"] for r in exact_rows),
            "exact_mismatched_cases": sum(r["mismatched_cases"] for r in exact_rows),
            "tolerance": tolerance,
        },
    }
    if probe:
        print("probing .x1/.x2 ignored lanes ...", flush=True)
        report["probes"] = run_probes(backend, seed)
        for p in report["probes"]:
            print(f"  {p['probe']:40s} {p.get('hardware')}  mismatched={p.get('mismatched_cases', '-')}"
                  f"  {p.get('detail', '')[:100]}", flush=True)
    report["seconds"] = time.time() - t0
    return report, vectors


def save_vectors(vectors: dict[str, dict], directory: Path, env: dict, cases: str) -> dict:
    directory.mkdir(parents=True, exist_ok=True)
    files, total = [], 0
    for family, data in vectors.items():
        if not data:
            continue
        path = rc.vectors_path(family, directory)
        meta = {"smem_bytes": np.uint32(rc.SMEM_BYTES), "device": np.str_(env.get("device", "")),
                "date": np.str_(env["date"])}
        np.savez_compressed(path, **meta, **data)
        files.append(path.name)
        total += path.stat().st_size
    try:
        shown = str(directory.resolve().relative_to(ROOT))
    except ValueError:
        shown = str(directory)
    return {"dir": shown, "files": files, "total_bytes": total, "cases_per_batch": cases}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("gpu", "cpu", "emulator"), default="gpu")
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: the emulator stands in for the kernels; writes to a temp dir")
    ap.add_argument("--cases", type=int, default=1000, help="random cases per form and kind")
    ap.add_argument("--vector-cases", type=int, default=200,
                    help="cases kept for replay per data-movement form")
    ap.add_argument("--mma-vector-cases", type=int, default=100,
                    help="cases kept for replay per mma variant and input kind")
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--forms", nargs="*", help="only these forms (e.g. ldmatrix.x4.trans)")
    ap.add_argument("--no-probe", action="store_true", help="skip the .x1/.x2 garbage-address probe")
    ap.add_argument("--out-dir", type=Path)
    ap.add_argument("--vectors-dir", type=Path)
    ap.add_argument("--probe-one", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.dry_run:
        a.backend = "emulator"
    if a.probe_one:
        print(json.dumps(run_probe(a.probe_one, a.backend, a.seed)))
        return 0
    if a.backend == "gpu" and not gpu.status().available:
        print(f"no usable GPU: {gpu.status().message} (use --dry-run to exercise the harness)",
              file=sys.stderr)
        return 2
    if a.backend == "emulator" and (a.out_dir is None or a.vectors_dir is None):
        tmp = Path(tempfile.mkdtemp(prefix="ptxlab-verify-dry-"))
        a.out_dir = a.out_dir or tmp / "report"
        a.vectors_dir = a.vectors_dir or tmp / "vectors"
    out_dir = a.out_dir or ROOT / "reports" / "hardware"
    vec_dir = a.vectors_dir or ROOT / "tests" / "vectors"
    command = "python3 measure/gpu/verify_hardware.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:]))
    report, vectors = verify(a.backend, a.cases, a.vector_cases, a.mma_vector_cases, a.seed, a.forms,
                             probe=not a.no_probe and a.backend != "cpu", command=command.strip())
    report["vectors"] = save_vectors(vectors, vec_dir, report["environment"],
                                     f"{a.vector_cases} per data-movement form, "
                                     f"{a.mma_vector_cases} per mma variant and kind")
    write_report(out_dir, report)
    bad = report["summary"]["exact_mismatched_cases"]
    print(f"\n{report['summary']['exact_cases']} bit-exact cases, {bad} mismatched; "
          f"report: {out_dir / 'REPORT.md'}; vectors: {vec_dir}")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
