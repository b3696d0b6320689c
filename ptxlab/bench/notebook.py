"""The capstone as the course notebooks show it: tiling tables, kernel excerpts, a correctness
run at small sizes on whatever backend is here, and performance figures.

Performance is measured afresh (a short run of :mod:`ptxlab.bench.runs`) where a GPU that can run
the kernels is present; everywhere else the committed H100 report (``reports/capstone/``) is shown,
with its device and date, and labelled as committed figures rather than a measurement of this
machine. Notebooks call these functions; none of this logic lives in a notebook.
"""
from __future__ import annotations

import base64
import datetime as _dt
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..teach import render
from ..run import sources
from .kernels import GEMM_BEST, TRANSPOSE_BEST, GemmConfig

__all__ = ["REPORT_DIR", "committed_report", "gemm_tiling", "tiling_html", "warp_map_html",
           "kernel_excerpt", "check_kernels", "performance", "fresh_results",
           "comparison_rows", "bank_study_html", "PerformanceView", "KernelChecks",
           "time_my_gemm", "LearnerGemmView"]

#: The committed benchmark report of the repository (``ptxlab bench`` on an H100).
REPORT_DIR = sources.PROJECT_ROOT / "reports" / "capstone"
_REPORT_ENV = "PTXLAB_CAPSTONE_REPORT"


def _report_dir(folder: Path | str | None) -> Path:
    if folder is not None:
        return Path(folder)
    return Path(os.environ.get(_REPORT_ENV, REPORT_DIR))


def committed_report(folder: Path | str | None = None) -> dict:
    """The committed ``report.json`` (raises ``FileNotFoundError`` naming the folder)."""
    path = _report_dir(folder) / "report.json"
    if not path.exists():
        raise FileNotFoundError(f"no committed capstone report at {path} (it lives in the "
                                "repository's reports/capstone/, not in an installed package)")
    return json.loads(path.read_text())


# ---------------------------------------------------------------------------------------------
# How the GEMM is tiled
# ---------------------------------------------------------------------------------------------

def gemm_tiling(cfg: GemmConfig) -> dict[str, object]:
    """The numbers behind one GEMM configuration, derived from its tile parameters."""
    wtm, wtn = cfg.bm // cfg.warps_m, cfg.bn // cfg.warps_n
    mt, nt, ks = wtm // 16, wtn // 8, cfg.bk // 16
    stage = (cfg.bm * cfg.bk + cfg.bk * cfg.bn) * 2
    chunks = (cfg.bm * cfg.bk + cfg.bk * cfg.bn) // 8
    return {
        "block tile (BM x BN, k-tile BK)": f"{cfg.bm} x {cfg.bn}, BK = {cfg.bk}",
        "warps (M x N) / threads": f"{cfg.warps_m} x {cfg.warps_n} / {cfg.threads}",
        "warp tile": f"{wtm} x {wtn}",
        "mma tiles per warp (m16 x n8)": f"{mt} x {nt} = {mt * nt}",
        "k16 steps per k-tile": ks,
        "mma.sync per warp per k-tile": mt * nt * ks,
        "ldmatrix.x4 per warp per k16 step (A + B)": f"{mt} + {nt // 2}",
        "fp32 accumulators per thread": mt * nt * 4,
        "shared memory per stage": f"{stage // 1024} KiB ({stage} B)",
        "cp.async ring": f"{cfg.ring_bytes // 1024} KiB",
        "epilogue staging (all warps)": f"{cfg.staging_bytes // 1024} KiB"
                                        + ("" if cfg.persistent else " (inside the ring)"),
        # the stages, and the block's whole shared memory (ring + staging)
        "cp.async stages / total": f"{cfg.stages} / {cfg.smem_bytes // 1024} KiB",
        "16-byte cp.async per thread per stage": chunks // cfg.threads,
    }


def tiling_html(*configs: tuple[str, GemmConfig]) -> render.Html:
    """A table of :func:`gemm_tiling` for named configurations, side by side."""
    table = [(name, gemm_tiling(cfg)) for name, cfg in configs]
    keys = list(table[0][1])
    out = ['<table style="border-collapse:collapse;font-size:12px">',
           '<tr><th style="text-align:left;padding:2px 8px"></th>']
    out += [f'<th style="padding:2px 8px">{render.escape(n)}</th>' for n, _ in table]
    out.append("</tr>")
    for k in keys:
        out.append(f'<tr><td style="text-align:left;padding:2px 8px">{render.escape(k)}</td>')
        out += [f'<td style="padding:2px 8px;text-align:right">{render.escape(t[k])}</td>'
                for _, t in table]
        out.append("</tr>")
    out.append("</table>")
    return render.Html("".join(out))


def warp_map_html(cfg: GemmConfig) -> render.Html:
    """The block tile of C cut into m16 x n8 mma tiles, each labelled with the warp that owns it
    (warp w = wm * WARPS_N + wn, as gemm.cu numbers them)."""
    wtm, wtn = cfg.bm // cfg.warps_m, cfg.bn // cfg.warps_n
    rows, cols = cfg.bm // 16, cfg.bn // 8
    ids = np.zeros((rows, cols), dtype=np.int64)
    tips = np.empty((rows, cols), dtype=object)
    for i in range(rows):
        for j in range(cols):
            wm, wn = (16 * i) // wtm, (8 * j) // wtn
            ids[i, j] = wm * cfg.warps_n + wn
            tips[i, j] = (f"C rows {16 * i}-{16 * i + 15}, cols {8 * j}-{8 * j + 7}: warp "
                          f"{ids[i, j]}, acc[{(16 * i % wtm) // 16}][{(8 * j % wtn) // 8}]")
    return render.id_grid_html(ids, tooltips=tips, row_label="m16", col_label="n8",
                               title=f"{cfg.bm} x {cfg.bn} block tile: the warp that owns each "
                               "16 x 8 mma tile (hover: which acc[i][j])")


# ---------------------------------------------------------------------------------------------
# Kernel source excerpts
# ---------------------------------------------------------------------------------------------

class SourceExcerpt(str):
    """CUDA text that a notebook shows as a highlighted code block."""

    def _repr_markdown_(self) -> str:
        return f"```c++\n{self}\n```"


def kernel_excerpt(relative: str, start: str, end: str | None = None, *,
                   max_lines: int = 40, occurrence: int = 1) -> SourceExcerpt:
    """Lines of ``kernels/<relative>`` from the ``occurrence``-th one containing ``start`` to
    the first later one containing ``end`` (inclusive), at most ``max_lines``: the notebook
    quotes the real kernel, so the quote cannot drift from the code that was measured."""
    lines = sources.read_kernel(relative).splitlines()
    hits = [i for i, line in enumerate(lines) if start in line]
    if len(hits) < occurrence:
        raise ValueError(f"{relative} has {len(hits)} line(s) containing {start!r}, not "
                         f"{occurrence}")
    first = hits[occurrence - 1]
    last = first + max_lines - 1
    if end is not None:
        last = next((i for i in range(first + 1, len(lines)) if end in lines[i]), last)
    chunk = lines[first:min(last, first + max_lines - 1) + 1]
    code = [l for l in chunk if l.strip() and not l.lstrip().startswith("#")]
    indent = min((len(l) - len(l.lstrip()) for l in code), default=0)
    return SourceExcerpt("\n".join(l[min(indent, len(l) - len(l.lstrip())):] for l in chunk))


# ---------------------------------------------------------------------------------------------
# Correctness of the real kernels at small sizes
# ---------------------------------------------------------------------------------------------

@dataclass
class KernelCheck:
    name: str
    device: str
    seconds: float
    problem: str | None

    @property
    def ok(self) -> bool:
        return self.problem is None


class KernelChecks(list):
    """:class:`KernelCheck` rows; shows as a table, ``bool()`` says whether all passed."""

    def __bool__(self) -> bool:
        return bool(len(self)) and all(c.ok for c in self)

    def _repr_html_(self) -> str:
        out = ['<table style="border-collapse:collapse;font-size:12px">',
               "<tr>" + "".join(f'<th style="padding:2px 8px;text-align:left">{h}</th>'
                                for h in ("kernel", "ran on", "seconds", "result")) + "</tr>"]
        for c in self:
            colour = "#1a7f37" if c.ok else "#c00000"
            out.append(f'<tr><td style="padding:2px 8px">{render.escape(c.name)}</td>'
                       f'<td style="padding:2px 8px">{render.escape(c.device)}</td>'
                       f'<td style="padding:2px 8px;text-align:right">{c.seconds:.1f}</td>'
                       f'<td style="padding:2px 8px;color:{colour}">'
                       f'{render.escape("correct" if c.ok else c.problem)}</td></tr>')
        out.append("</table>")
        return "".join(out)

    def __str__(self) -> str:
        return "\n".join(f"{'ok ' if c.ok else 'BAD'} {c.name} [{c.device}, {c.seconds:.1f} s]"
                         + ("" if c.ok else f": {c.problem}") for c in self)


def check_kernels(backend: str = "auto", *, small: bool = True, seed: int = 0,
                  only: str | None = None) -> KernelChecks:
    """Run every capstone kernel variant (:func:`ptxlab.bench.cases.kernel_cases`) once on
    ``backend`` and compare with the reference (fp64 product, exact transpose). ``only``
    keeps the cases whose name contains it."""
    from . import cases

    out = KernelChecks()
    for case in cases.kernel_cases(np.random.default_rng(seed), small=small):
        if only and only not in case.name:
            continue
        start = time.perf_counter()
        try:
            res = case.launch(backend)
            problem = cases.check_output(case, res.outputs[case.compare[0]])
            device = res.device
        except Exception as exc:  # a missing backend or a fault becomes a row, not a traceback
            problem, device = f"{type(exc).__name__}: {exc}", "-"
        out.append(KernelCheck(case.name, device, time.perf_counter() - start, problem))
    return out


# ---------------------------------------------------------------------------------------------
# Performance: fresh on a GPU, committed otherwise
# ---------------------------------------------------------------------------------------------

def comparison_rows(res: dict) -> list[dict]:
    """One row per measured kernel and size: ours against its references, from results in the
    ``report.json`` format (the committed report or :func:`fresh_results`)."""
    rows = []
    cublas = {r["m"]: r["tflops"] for r in res.get("cublas", [])}
    peak = (res.get("mma_peak") or {}).get("tflops")
    peer: dict = {}
    for r in res.get("cutlass", []):   # CUTLASS's fastest configuration per size and variant
        key = (r["m"], r["variant"])
        if r.get("correct") and r["tflops"] > peer.get(key, {}).get("tflops", 0):
            peer[key] = r
    for r in res.get("gemm", []):
        cb = cublas.get(r["m"])
        cu = peer.get((r["m"], r["variant"]))
        rows.append({
            "what": f"GEMM {r['variant']}", "size": f"{r['m']}^3",
            "ours": f"{r['tflops']:.0f} TFLOP/s",
            "ref1": f"cuBLAS {cb:.0f} TFLOP/s" if cb else "-",
            "ratio1": r["tflops"] / cb if cb else None,
            "ref2": f"mma.sync ceiling {peak:.0f} TFLOP/s" if peak else "-",
            "ratio2": r["tflops"] / peak if peak else None,
            "ref3": f"CUTLASS {cu['tflops']:.0f} TFLOP/s" if cu else "-",
            "ratio3": r["tflops"] / cu["tflops"] if cu else None,
            "correct": bool(r.get("correct")),
        })
    copies = {r["bytes"]: r["tbps"] for r in res.get("copy", [])}
    cupy_t = {r["rows"]: r["tbps"] for r in res.get("cupy_transpose", [])}
    for r in res.get("transpose", []):
        cp_ = copies.get(r["rows"] * r["cols"] * 2)
        ct = cupy_t.get(r["rows"])
        rows.append({
            "what": f"transpose fp16 ({r['config']})", "size": f"{r['rows']}^2",
            "ours": f"{r['tbps']:.2f} TB/s",
            "ref1": f"copy {cp_:.2f} TB/s" if cp_ else "-",
            "ratio1": r["tbps"] / cp_ if cp_ else None,
            "ref2": f"cupy a.T {ct:.3f} TB/s" if ct else "-",
            "ratio2": r["tbps"] / ct if ct else None,
            "correct": bool(r.get("correct")),
        })
    return rows


def _device_text(dev: dict) -> str:
    extra = [x for x in (dev.get("sm"), f"{dev['multiprocessors']} SMs"
                         if dev.get("multiprocessors") else None) if x]
    return f"{dev.get('name', '?')}" + (f" ({', '.join(extra)})" if extra else "")


@dataclass
class PerformanceView:
    """Figures to show: measured now, or the committed report (``measured_now`` False)."""

    measured_now: bool
    device: str
    date: str
    rows: list[dict]
    note: str
    images: list[Path] = field(default_factory=list)

    def _ratio(self, x) -> str:
        return "-" if x is None else f"{x:.2f}"

    def __str__(self) -> str:
        lines = [self.note, ""]
        lines.append(f"{'kernel':<46} {'size':>8} {'ours':>14}  {'reference':<22} {'ratio':>5}  "
                     f"{'second reference':<30} {'ratio':>5}  {'mma.sync peer':<22} {'ratio':>5}")
        for r in self.rows:
            lines.append(f"{r['what']:<46} {r['size']:>8} {r['ours']:>14}  {r['ref1']:<22} "
                         f"{self._ratio(r['ratio1']):>5}  {r['ref2']:<30} "
                         f"{self._ratio(r['ratio2']):>5}  {r.get('ref3', '-'):<22} "
                         f"{self._ratio(r.get('ratio3')):>5}"
                         + ("" if r["correct"] else "  WRONG"))
        if self.images:
            lines.append("plots: " + ", ".join(str(p) for p in self.images))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.measured_now else "#8a5a00"
        note = re.sub(r"`([^`]*)`", r"<code>\1</code>", render.escape(self.note))
        out = [f'<p style="color:{colour};font-weight:600">{note}</p>',
               '<table style="border-collapse:collapse;font-size:12px">', "<tr>"]
        out += [f'<th style="padding:2px 8px;text-align:left">{h}</th>' for h in
                ("kernel", "size", "ours", "reference", "ratio", "second reference", "ratio",
                 "mma.sync peer (CUTLASS)", "ratio", "correct")]
        out.append("</tr>")
        for r in self.rows:
            cells = (r["what"], r["size"], r["ours"], r["ref1"], self._ratio(r["ratio1"]),
                     r["ref2"], self._ratio(r["ratio2"]), r.get("ref3", "-"),
                     self._ratio(r.get("ratio3")), "yes" if r["correct"] else "NO")
            out.append("<tr>" + "".join(f'<td style="padding:2px 8px">{render.escape(c)}</td>'
                                        for c in cells) + "</tr>")
        out.append("</table>")
        for p in self.images:
            data = base64.b64encode(Path(p).read_bytes()).decode()
            out.append(f'<img style="max-width:640px;margin:6px" alt="{render.escape(p.name)}" '
                       f'src="data:image/png;base64,{data}">')
        return "".join(out)


def _committed_peer_config(folder: Path | str | None = None):
    """CUTLASS's fastest correct configuration (B row-major) in the committed report, or the
    first of its sweep when there is no report."""
    from .cutlass_peer import PEER_SWEEP, PeerConfig

    try:
        records = committed_report(folder).get("cutlass", [])
    except FileNotFoundError:
        records = []
    best = [r for r in records if r.get("correct") and r["variant"] == PEER_SWEEP[0].variant]
    if not best:
        return PEER_SWEEP[0]
    return PeerConfig(**max(best, key=lambda r: (r["m"], r["tflops"]))["params"])


def fresh_results(gemm_sizes=(2048, 4096), transpose_sizes=(4096, 8192), *,
                  runs=None, peer: bool = True, log=print) -> dict:
    """A short benchmark on this GPU in the ``report.json`` format: the mma.sync ceiling, our
    GEMM (the benchmarked configuration, B row-major, f16 out), cuBLAS and, where nvcc and
    CUTLASS's headers are here, CUTLASS's GEMM in the committed report's fastest configuration;
    our transpose against a device copy and ``cupy.ascontiguousarray(a.T)``. Each kernel is
    checked before it is timed."""
    if runs is None:
        from . import runs
    res: dict = {"device": runs.device_info(),
                 "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
                 "gemm": [], "cublas": [], "cutlass": [], "transpose": [], "copy": [],
                 "cupy_transpose": []}
    res["mma_peak"] = runs.mma_peak_run(chains_options=(12,), threads_options=(128,),
                                        blocks_per_sm_options=(8,))
    kernels = []
    if peer:
        log("building CUTLASS's mma.sync GEMM for this GPU (once; later runs reuse it) ...")
        kernels, res["peer"] = runs.peer_kernels([_committed_peer_config()], log=log)
    else:
        res["peer"] = {"measured": False, "reason": "not asked for"}
    for n in gemm_sizes:
        res["cublas"].append(runs.cublas_run(n, n, n, sets=2))
        res["gemm"].append(runs.gemm_run(GEMM_BEST, n, n, n, sets=2))
        res["cutlass"] += [runs.peer_run(k, n, n, n, sets=2) for k in kernels]
    for n in transpose_sizes:
        res["copy"].append(runs.copy_run(n * n * 2))
        res["cupy_transpose"].append(runs.cupy_transpose_run(n, n))
        res["transpose"].append(runs.transpose_run(TRANSPOSE_BEST, n, n))
    return res


def _committed_view(folder: Path | str | None, why: str) -> PerformanceView:
    try:
        res = committed_report(folder)
    except FileNotFoundError as exc:
        return PerformanceView(False, "-", "-", [], f"{why}; and {exc}")
    where = _report_dir(folder)
    images = [where / p for p in ("gemm_tflops.png", "transpose_bandwidth.png")
              if (where / p).exists()]
    device = _device_text(res["device"])
    note = (f"Committed figures, not measured on this machine: {device}, "
            f"{res['date']} UTC, `{res['command'].strip()}` (reports/capstone/REPORT.md). "
            f"Shown because {why}.")
    return PerformanceView(False, device, res["date"], comparison_rows(res), note, images)


def performance(*, fresh: bool | None = None, gemm_sizes=(2048, 4096),
                transpose_sizes=(4096, 8192), folder: Path | str | None = None) -> PerformanceView:
    """Performance of the capstone kernels: measured now when a GPU that runs them is here
    (``fresh=None``: decide automatically), else, and always while the grader runs the notebook,
    the committed H100 report, labelled so."""
    from ..teach.graded import graded_outside
    from .collect import gpu_problem

    if fresh is False:
        return _committed_view(folder, "a fresh measurement was not asked for")
    if graded_outside():   # a shared grading GPU times nobody's notebook
        return _committed_view(folder, "the grader runs this notebook")
    problem = gpu_problem()
    if problem is not None:
        return _committed_view(folder, f"there is no GPU to measure on here ({problem})")
    res = fresh_results(gemm_sizes, transpose_sizes)
    device = _device_text(res["device"])
    note = (f"Measured now on {device}, {res['date']} UTC: a short run (medians of CUDA-event "
            "timings); `ptxlab bench` measures more sizes and variants.")
    if not res["peer"].get("measured"):
        note += f" CUTLASS's GEMM was not built here: {res['peer'].get('reason', '?')}."
    return PerformanceView(True, device, res["date"], comparison_rows(res), note)


def bank_study_html(folder: Path | str | None = None) -> render.Html:
    """The bank-conflict study: the bank model's prediction, recomputed now, against the
    Nsight Compute counters committed from the H100 run."""
    from . import bank_study

    predicted = {p["layout"]: p for p in bank_study.predictions()}
    try:
        res = committed_report(folder)
        rows = res.get("bank_study", {}).get("rows", [])
        when = f"{_device_text(res['device'])}, {res['date']} UTC"
    except FileNotFoundError:
        rows, when = [], "not available in this installation"
    head = ("layout", "ldmatrix wavefronts: model / ncu", "ldmatrix conflicts: model / ncu",
            "16-byte fill wavefronts: model / ncu", "agree")
    out = [f'<table style="border-collapse:collapse;font-size:12px">'
           f'<caption style="text-align:left;font-weight:600">ptxlab.model.banks (computed now) vs '
           f'Nsight Compute ({render.escape(when)})</caption><tr>']
    out += [f'<th style="padding:2px 8px;text-align:left">{h}</th>' for h in head]
    out.append("</tr>")
    measured = {r["layout"]: r.get("measured") or {} for r in rows}
    for name, p in predicted.items():
        m = measured.get(name, {})
        keys = ("ld_wavefronts", "ld_conflicts", "st_wavefronts")
        agree = all(m.get(k) == p[k] for k in keys if k in m) if m else None
        cells = (name, *(f"{p[k]} / {m.get(k, '-')}" for k in keys),
                 "-" if agree is None else ("yes" if agree else "NO"))
        out.append("<tr>" + "".join(f'<td style="padding:2px 8px">{render.escape(c)}</td>'
                                    for c in cells) + "</tr>")
    out.append("</table>")
    return render.Html("".join(out))


# ---------------------------------------------------------------------------------------------
# A learner's k-loop as a whole GEMM, in the same table
# ---------------------------------------------------------------------------------------------

@dataclass
class LearnerGemmView:
    """A learner's GEMM beside the capstone's: ``rows`` are ``(name, where, {size: TFLOP/s})``,
    ``where`` saying whether a figure was measured now or comes from the committed report."""

    note: str
    rows: list[tuple[str, str, dict]] = field(default_factory=list)
    sizes: tuple[int, ...] = ()
    ok: bool = True

    def _repr_pretty_(self, printer, cycle: bool) -> None:   # plain-text outputs, exports
        printer.text(str(self))

    def __str__(self) -> str:
        lines = [self.note]
        if self.rows:
            lines.append("")
            lines.append(f"{'GEMM (fp16 in, fp32 accumulate, fp16 out)':<44} {'figures':<26}"
                         + "".join(f"{f'{n}^3':>10}" for n in self.sizes))
            for name, where, vals in self.rows:
                lines.append(f"{name:<44} {where:<26}" + "".join(
                    f"{vals[n]:>10.0f}" if n in vals else f"{'-':>10}" for n in self.sizes))
            lines.append(f"{'':<70}TFLOP/s")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.ok else "#b42318"
        note = re.sub(r"`([^`]*)`", r"<code>\1</code>", render.escape(self.note))
        out = [f'<p style="color:{colour};font-weight:600;white-space:pre-wrap">{note}</p>']
        if not self.rows:
            return "".join(out)
        top = max((v for _, _, vals in self.rows for v in vals.values()), default=1.0) or 1.0
        out.append('<table style="border-collapse:collapse;font-size:12px"><tr>'
                   '<th style="padding:2px 8px;text-align:left">GEMM (where the figures are '
                   'from)</th>'
                   + "".join(f'<th style="padding:2px 8px;text-align:left">{n}³ (TFLOP/s)</th>'
                             for n in self.sizes) + "</tr>")
        for i, (name, where, vals) in enumerate(self.rows):
            bar = "#1f6feb" if i == 0 else "#8c959f"
            cells = []
            for n in self.sizes:
                if n not in vals:
                    cells.append('<td style="text-align:left;padding:2px 8px">-</td>')
                    continue
                width = int(120 * vals[n] / top)
                cells.append(f'<td style="text-align:left;padding:2px 8px"><span style="'
                             f'display:inline-block;width:{width}px;height:9px;'
                             f'background:{bar}"></span> {vals[n]:.0f}</td>')
            weight = "font-weight:600;" if i == 0 else ""
            out.append(f'<tr><td style="text-align:left;padding:2px 8px;{weight}">'
                       f'{render.escape(name)}<br>'
                       f'<span style="color:#57606a;font-size:11px;font-weight:400">'
                       f'{render.escape(where)}</span></td>' + "".join(cells) + "</tr>")
        out.append("</table>")
        return "".join(out)


#: The rows of the learner's table, by the report's key for their figures.
_GEMM_ROWS = {"learner": "the course's answer to exercise 3, as a GEMM",
              "gemm": "the capstone GEMM (GEMM_BEST)",
              "cutlass": "CUTLASS mma.sync GEMM (best of its sweep)",
              "cublas": "cuBLAS (cupy.matmul, wgmma)",
              "mma_peak": "mma.sync ceiling (registers only)"}


def _committed_gemm_rows(res: dict, sizes) -> dict[str, tuple[str, str, dict]]:
    """The report's figures at ``sizes`` (B row-major, f16 out), by :data:`_GEMM_ROWS` key:
    the course's own exercise-3 GEMM, ours, CUTLASS's best, cuBLAS and the ceiling."""
    device = res["device"].get("name", "?").replace("NVIDIA ", "")
    where = f"committed, {device} {res['date'][:10]}"
    wanted = {"cublas": ("cupy.matmul fp16, B row-major", "cublasGemmEx fp16, B row-major")}
    rows = {}
    for kind, name in _GEMM_ROWS.items():
        if kind == "mma_peak":
            peak = (res.get("mma_peak") or {}).get("tflops")
            vals = {n: peak for n in sizes} if peak else {}
        else:
            vals = {}
            for r in res.get(kind, []):
                if (r.get("m") in sizes and "tflops" in r
                        and r.get("variant") in wanted.get(kind, ("B row-major, f16 out",))
                        and (kind != "cutlass" or r.get("correct"))):
                    vals[r["m"]] = max(vals.get(r["m"], 0.0), r["tflops"])
        if vals:
            rows[kind] = (name, where, vals)
    return rows


def time_my_gemm(k_loop_source: str, sizes=(2048, 4096), *, warps_m: int = 4,
                 folder: Path | str | None = None) -> LearnerGemmView:
    """Exercise 3's k-loop (the learner's kernel source) as a whole GEMM: checked against a
    float64 product on this notebook's backend, then, with a GPU, timed at ``sizes`` beside our
    GEMM and cuBLAS measured now, and CUTLASS's GEMM and the ceiling from the committed report.
    Without a GPU it is checked but not timed; while the grader runs the notebook, neither."""
    from ..teach.graded import graded_outside
    from . import learner_gemm
    from .collect import gpu_problem

    if graded_outside():   # the grades come from the exercises; nothing here is scored
        return LearnerGemmView("Not checked or timed while the grader runs this notebook.")
    try:
        gemm = learner_gemm.gemm_from_k_loop(k_loop_source, warps_m=warps_m)
    except (learner_gemm.LearnerGemmError, ValueError) as exc:
        return LearnerGemmView(str(exc), ok=False)
    found = learner_gemm.check(gemm)
    shape = "x".join(map(str, found.shape))
    if not found.ok:
        what = (f"Your k-loop as a GEMM ({gemm.bm}x{gemm.bn} blocks of {gemm.threads // 32} "
                f"warps of 16x16)")
        if found.device == "-":
            return LearnerGemmView(f"{what} did not run at {shape}: {found.problem}", ok=False)
        return LearnerGemmView(f"{what} is wrong at {shape} on {found.device}: {found.problem}",
                               ok=False)
    checked = f"Your k-loop as a GEMM is right at {shape} on {found.device}."
    try:
        committed = _committed_gemm_rows(committed_report(folder), sizes)
    except FileNotFoundError as exc:
        committed = {}
        checked += f" ({exc})"
    problem = gpu_problem()
    if problem is not None:
        return LearnerGemmView(f"{checked} Timing it needs a GPU ({problem}); the committed "
                               "H100 figures are below.", list(committed.values()), tuple(sizes))
    from . import runs

    mine, ours, cublas = {}, {}, {}
    for n in sizes:
        rec = runs.gemm_run(gemm, n, n, n, sets=2, kind="learner")
        if not rec["correct"]:
            return LearnerGemmView(f"Your k-loop as a GEMM is wrong at {n}^3 on the GPU: relative "
                                   f"error {rec['rel_error_vs_fp32']:.2e}.", ok=False)
        mine[n] = rec["tflops"]
        ours[n] = runs.gemm_run(GEMM_BEST, n, n, n, sets=2)["tflops"]
        cublas[n] = runs.cublas_run(n, n, n, sets=2)["tflops"]
    now = f"measured now, {runs.device_info()['name'].replace('NVIDIA ', '')}"
    rows = [("your k-loop as a GEMM", now, mine), (_GEMM_ROWS["gemm"], now, ours),
            (_GEMM_ROWS["cublas"], now, cublas)]
    rows += [committed[k] for k in ("learner", "cutlass", "mma_peak") if k in committed]
    return LearnerGemmView(checked + " Timed with CUDA events (median).", rows, tuple(sizes))

