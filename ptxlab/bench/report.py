"""Turn one benchmark run into report.json, REPORT.md, a terminal table and two PNG plots."""
from __future__ import annotations

import json
from pathlib import Path

GEMM_TARGET_SIZES = (4096, 8192)
#: Sizes at which ours (f16 out, both B layouts) must be at least as fast as CUTLASS.
PEER_TARGET_SIZES = (1024, 2048, 4096, 8192)
TRANSPOSE_TARGET_SIZES = (2048, 4096, 8192, 16384)
TARGET_VS_MMA_PEAK = 0.80
TARGET_VS_CUBLAS = 0.50
TARGET_VS_CUTLASS = 1.0
TARGET_VS_COPY = 0.90
#: A clock this far below the GPU's highest SM clock counts as held down.
CLOCK_HELD = 0.97


def limit_of(rec: dict | None, device: dict) -> str | None:
    """What held the clock while ``rec`` ran, from its NVML samples: "none" (the median clock
    within 3% of the highest SM clock), else "power" (the driver named the power limit in at
    least half of the samples), "thermal", or "clock" (held down for another reason); None
    where NVML was not read."""
    if not rec or rec.get("nvml_sm_clock_mhz") is None:
        return None
    top = device.get("max_sm_clock_mhz")
    if top and rec["nvml_sm_clock_mhz"] >= CLOCK_HELD * top:
        return "none"   # whatever reason the driver named, the clock was not held down
    if (rec.get("nvml_power_capped") or 0) >= 0.5:
        return "power"
    if (rec.get("nvml_thermal_slowdown") or 0) >= 0.5:
        return "thermal"
    return "clock" if top else "none"


def _limit_text(rec: dict | None, device: dict) -> str:
    lim = limit_of(rec, device)
    if lim is None:
        return "-"
    clock = f"{rec['nvml_sm_clock_mhz']:.0f} MHz"
    return {"power": f"power ({rec['nvml_power_capped']:.0%} of samples at the limit, {clock})",
            "thermal": f"thermal ({clock})", "clock": f"clock held at {clock}",
            "none": f"full clock ({clock})"}[lim]


def _noisy(rec: dict | None) -> bool:
    return bool(rec and rec.get("noisy"))


def _peer_best(res: dict) -> dict:
    """CUTLASS's record per (size, variant): the fastest correct configuration of the run."""
    best: dict = {}
    for r in res.get("cutlass", []):
        key = (r["m"], r["variant"])
        if r.get("correct") and r["tflops"] > best.get(key, {}).get("tflops", 0):
            best[key] = r
    return best


def paired_ratios(res: dict, ours: dict, peer: dict | None) -> list[float]:
    """Ours over ``peer`` round by round (``res['gemm_rounds']``: the same size and variant, the
    two configurations of the rows): each round measures both on the board as that round left
    it, so the spread of these ratios is the noise of the comparison itself."""
    if not peer:
        return []
    def rates(kernel: str, rec: dict) -> dict[int, float]:
        return {r["round"]: r["tflops"] for r in res.get("gemm_rounds", [])
                if r.get("kernel") == kernel and r.get("config") == rec.get("config")
                and r.get("variant") == rec.get("variant") and r.get("m") == rec["m"]
                and "tflops" in r and "round" in r}
    mine, theirs = rates("gemm", ours), rates("cutlass", peer)
    return [mine[k] / theirs[k] for k in sorted(mine) if theirs.get(k)]


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free interval for the median of ``values`` (at least ``level`` coverage):
    the k-th smallest and k-th largest value, k the largest with P(Binomial(n, 1/2) < k) at most
    (1 - level) / 2. None for too few values (fewer than 6 at 95%)."""
    from math import comb
    xs, n = sorted(values), len(values)
    k, tail = 0, 0.0
    while k < n and tail + comb(n, k) / 2 ** n <= (1 - level) / 2:
        tail += comb(n, k) / 2 ** n
        k += 1
    return (xs[k - 1], xs[n - k]) if k >= 1 else None


def gemm_rows(res: dict) -> list[dict]:
    """One row per GEMM variant and size: ours, the ceilings, cuBLAS and CUTLASS, the SM clock
    while it ran, and (at the target sizes) whether each target holds."""
    rows = []
    peak = res["mma_peak"]["tflops"]
    vary = (res.get("mma_peak_vary") or {}).get("tflops")
    cublas = {r["m"]: r for r in res["cublas"]}
    peer = _peer_best(res)
    device = res.get("device", {})
    for r in res["gemm"]:
        size = r["m"]
        cb, cu = cublas.get(size), peer.get((size, r["variant"]))
        paired = paired_ratios(res, r, cu)
        noisy = [who for who, x in (("ours", r), ("cuBLAS", cb), ("CUTLASS", cu)) if _noisy(x)]
        row = {"what": f"GEMM {r['variant']}", "size": f"{size}^3", "m": size,
               "variant": r["variant"], "min_ms": r.get("min_ms"),
               "median_ms": r.get("median_ms"), "spread": r.get("spread"), "noisy": noisy,
               "limit": limit_of(r, device), "limit_text": _limit_text(r, device),
               "cutlass_limit": limit_of(cu, device), "cublas_limit": limit_of(cb, device),
               "ours": r["tflops"], "unit": "TFLOP/s", "correct": r["correct"],
               "error": r["rel_error_vs_fp32"], "config": r.get("config"),
               "mma_peak": peak, "vs_mma_peak": r["tflops"] / peak,
               "mma_peak_vary": vary, "vs_mma_peak_vary": r["tflops"] / vary if vary else None,
               "cublas": cb["tflops"] if cb else None,
               "vs_cublas": r["tflops"] / cb["tflops"] if cb else None,
               "cutlass": cu["tflops"] if cu else None,
               "cutlass_config": cu["config"] if cu else None,
               "vs_cutlass": r["tflops"] / cu["tflops"] if cu else None,
               "vs_cutlass_rounds": paired, "vs_cutlass_interval": median_interval(paired),
               "sm_clock_mhz": r.get("nvml_sm_clock_mhz"),
               "tflops_rounds": r.get("tflops_rounds")}
        # A ratio with a noisy figure on either side is no result: its target is not judged.
        if size in GEMM_TARGET_SIZES and not set(noisy) & {"ours", "cuBLAS"}:
            row["target_met"] = (row["vs_mma_peak"] >= TARGET_VS_MMA_PEAK and row["vs_cublas"]
                                 is not None and row["vs_cublas"] >= TARGET_VS_CUBLAS
                                 and r["correct"])
        if size in PEER_TARGET_SIZES and cu and not set(noisy) & {"ours", "CUTLASS"}:
            row["peer_target_met"] = row["vs_cutlass"] >= TARGET_VS_CUTLASS and r["correct"]
            # Below 1.00, but round by round the two are not told apart: the interval of the
            # ratio's median holds 1.00.
            band = row["vs_cutlass_interval"]
            row["peer_level"] = bool(not row["peer_target_met"] and r["correct"] and band
                                     and band[0] <= TARGET_VS_CUTLASS <= band[1])
        rows.append(row)
    return rows


def transpose_rows(res: dict) -> list[dict]:
    rows = []
    copies = {r["bytes"]: r for r in res["copy"]}
    cupy_t = {r["rows"]: r for r in res["cupy_transpose"]}
    for r in res["transpose"]:
        size = r["rows"]
        cp_ = copies.get(size * r["cols"] * 2)
        ct = cupy_t.get(size)
        noisy = [who for who, x in (("ours", r), ("copy", cp_)) if _noisy(x)]
        row = {"what": f"transpose fp16 ({r['config']})", "size": f"{size}^2", "ours": r["tbps"],
               "min_ms": r.get("min_ms"), "median_ms": r.get("median_ms"),
               "spread": r.get("spread"), "noisy": noisy,
               "copy_spread": cp_.get("spread") if cp_ else None, "timing": r.get("timing"),
               "unit": "TB/s", "correct": r["correct"], "error": r["mismatches"],
               "copy": cp_["tbps"] if cp_ else None,
               "vs_copy": r["tbps"] / cp_["tbps"] if cp_ else None,
               "cupy_transpose": ct["tbps"] if ct else None,
               "vs_cupy_transpose": r["tbps"] / ct["tbps"] if ct else None}
        if size in TRANSPOSE_TARGET_SIZES and not noisy:
            row["target_met"] = bool(row["vs_copy"] and row["vs_copy"] >= TARGET_VS_COPY
                                     and r["correct"])
        rows.append(row)
    return rows


def learner_rows(res: dict) -> list[dict]:
    """Per size: the course's exercise-3 k-loop as a whole GEMM, beside our GEMM (B row-major,
    f16 out), CUTLASS's, cuBLAS and the ceiling of the same run."""
    recs = [r for r in res.get("learner", []) if "tflops" in r]
    if not recs:
        return []
    peak = res["mma_peak"]["tflops"]
    cublas = {r["m"]: r["tflops"] for r in res.get("cublas", [])}
    ours = {r["m"]: r["tflops"] for r in res.get("gemm", []) if r["variant"] == recs[0]["variant"]}
    peer = {m: r["tflops"] for (m, v), r in _peer_best(res).items() if v == recs[0]["variant"]}
    return [{"size": f"{r['m']}^3", "m": r["m"], "learner": r["tflops"],
             "correct": r["correct"], "error": r["rel_error_vs_fp32"],
             "ours": ours.get(r["m"]), "cutlass": peer.get(r["m"]),
             "cublas": cublas.get(r["m"]), "mma_peak": peak,
             "vs_ours": r["tflops"] / ours[r["m"]] if r["m"] in ours else None,
             "vs_mma_peak": r["tflops"] / peak} for r in recs]


def _learner_lines(res: dict) -> list[str]:
    recs = res.get("learner")
    if not recs:
        return []
    out = ["", "## A learner's GEMM: exercise 3's k-loop as a whole GEMM", ""]
    rows = learner_rows(res)
    if not rows:
        why = "; ".join(r.get("reason") or r.get("error", "?") for r in recs)
        return out + [f"Not measured: {why}"]
    out += ["The course's answer to the capstone notebook's exercise 3 (one warp's k-loop: per "
            "k16 step one `ldmatrix.x4`, one `ldmatrix.x4.trans` and two `mma.sync`), built "
            "into a whole GEMM by `ptxlab.bench.learner_gemm`: 64x64 block tiles of 16 warps of "
            "16x16, k-tiles of 64 through a two-slot `cp.async` ring. A learner's own loop is "
            "timed the same way by `time_my_gemm` in the notebook. Measured once per size in "
            "this run, B row-major, f16 out.", "",
            "| size | exercise 3 as a GEMM | correct | our GEMM | / ours | CUTLASS | cuBLAS "
            "| ceiling | / ceiling |",
            "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        out.append(f"| {r['size']} | {r['learner']:.0f} | {'yes' if r['correct'] else 'NO'} "
                   f"({r['error']:.1e}) | {_f(r['ours'], '{:.0f}')} | {_f(r['vs_ours'])} "
                   f"| {_f(r['cutlass'], '{:.0f}')} | {_f(r['cublas'], '{:.0f}')} "
                   f"| {r['mma_peak']:.0f} | {_f(r['vs_mma_peak'])} |")
    return out


def summary_rows(res: dict) -> list[dict]:
    """Every row of the report: the GEMM rows, then the transpose rows."""
    return gemm_rows(res) + transpose_rows(res)


def _f(x, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def _yes(x) -> str:
    return "" if x is None else ("met" if x else "**missed**")


def table_lines(res: dict) -> list[str]:
    """The terminal table: ours, the ceiling, cuBLAS and CUTLASS, with ratios."""
    out = [f"{'kernel':<30} {'size':>7} {'ours':>6} {'/ceil':>6} {'cuBLAS':>7} {'/cuBLAS':>7} "
           f"{'CUTLASS':>8} {'/CUTLASS':>8} {'MHz':>5} {'ok':>3} {'80%':>4} {'>=CU':>4} "
           f"{'spread':>6} limit"]
    for r in gemm_rows(res):
        out.append(f"{r['what']:<30} {r['size']:>7} {r['ours']:>6.0f} {_f(r['vs_mma_peak']):>6} "
                   f"{_f(r['cublas'], '{:.0f}'):>7} {_f(r['vs_cublas']):>7} "
                   f"{_f(r['cutlass'], '{:.0f}'):>8} {_f(r['vs_cutlass']):>8} "
                   f"{_f(r['sm_clock_mhz'], '{:.0f}'):>5} {'yes' if r['correct'] else 'NO':>3} "
                   f"{_yes(r.get('target_met')).strip('*'):>4} "
                   f"{'level' if r.get('peer_level') else _yes(r.get('peer_target_met')).strip('*'):>4} "
                   f"{_spread(r['spread']):>6} "
                   f"{r['limit'] or '-'}"
                   + (f" NOISY: {', '.join(r['noisy'])}" if r["noisy"] else ""))
    for r in transpose_rows(res):
        out.append(f"{r['what']:<44} {r['size']:>7} {r['ours']:.2f} TB/s "
                   f"(spread {_spread(r['spread'])}), copy {_f(r['copy'])} "
                   f"({_f(r['vs_copy'])}), cupy a.T {_f(r['cupy_transpose'], '{:.3f}')}"
                   f" ({_f(r['vs_cupy_transpose'])}) "
                   f"{'' if r.get('target_met') is None else _yes(r['target_met'])}"
                   + (f" NOISY: {', '.join(r['noisy'])}" if r["noisy"] else ""))
    for r in learner_rows(res):
        out.append(f"{'exercise 3 k-loop as a GEMM':<30} {r['size']:>7} {r['learner']:>6.0f} "
                   f"{_f(r['vs_mma_peak']):>6} {_f(r['cublas'], '{:.0f}'):>7}  ours "
                   f"{_f(r['ours'], '{:.0f}')} ({_f(r['vs_ours'])} of it) "
                   f"{'yes' if r['correct'] else 'NO'}")
    bs = res.get("bank_study", {})
    if bs.get("measured"):
        out.append(f"bank-conflict study: prediction == ncu for every layout: "
                   f"{'yes' if bs['all_agree'] else 'NO'}")
    else:
        out.append(f"bank-conflict study: not measured ({bs.get('reason', 'skipped')})")
    peer = res.get("peer", {})
    if not peer.get("measured", False):
        out.append(f"CUTLASS: not measured ({peer.get('reason', 'skipped')})")
    return out


def plot(res: dict, out_dir: Path) -> list[str]:
    """TFLOP/s vs size and TB/s vs size, PNG files; returns their names."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    by_variant: dict[str, list] = {}
    for r in res["gemm"]:
        by_variant.setdefault(f"ours: {r['variant']}", []).append((r["m"], r["tflops"]))
    for (m, variant), r in sorted(_peer_best(res).items()):
        by_variant.setdefault(f"CUTLASS (best of sweep): {variant}", []).append((m, r["tflops"]))
    by_variant["cuBLAS (cublasGemmEx, fp16)"] = [(r["m"], r["tflops"]) for r in res["cublas"]]
    for label, pts in by_variant.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label,
                ls="--" if label.startswith("CUTLASS") else "-")
    ax.axhline(res["mma_peak"]["tflops"], color="k", ls="--",
               label=f"mma.sync register-only ceiling ({res['mma_peak']['tflops']:.0f})")
    if res.get("mma_peak_vary"):
        ax.axhline(res["mma_peak_vary"]["tflops"], color="grey", ls=":",
                   label="mma.sync ceiling, random operands "
                         f"({res['mma_peak_vary']['tflops']:.0f})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M = N = K")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"fp16 GEMM, fp32 accumulate — {res['device']['name']}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_dir / "gemm_tflops.png", dpi=110)
    plt.close(fig)
    names.append("gemm_tflops.png")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = {
        "ours: ldmatrix.trans + stmatrix": [(r["rows"], r["tbps"]) for r in res["transpose"]],
        "device-to-device copy": [(int((r["bytes"] // 2) ** 0.5), r["tbps"]) for r in res["copy"]],
        "cupy.ascontiguousarray(a.T)": [(r["rows"], r["tbps"]) for r in res["cupy_transpose"]],
    }
    for label, pts in series.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (N x N fp16 matrix)")
    ax.set_ylabel("TB/s (bytes read + written)")
    ax.set_title(f"fp16 transpose — {res['device']['name']}")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_dir / "transpose_bandwidth.png", dpi=110)
    plt.close(fig)
    names.append("transpose_bandwidth.png")
    return names


def _not_judged(noisy) -> str:
    return "not judged: noisy" if noisy else ""


def _spread(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def _figure(value: float, fmt: str, noisy: list[str], who: str = "ours") -> str:
    """``value`` formatted, or flagged as noise where ``who``'s spread is above the limit."""
    return f"({fmt.format(value)}: noisy)" if who in noisy else fmt.format(value)


def _gemm_table(res: dict) -> list[str]:
    lines = ["| kernel | size | config | ours | min / median ms (spread) | / ceiling "
             "| / random-operand ceiling | cuBLAS | / cuBLAS | CUTLASS (best of sweep) "
             "| / CUTLASS | what held the clock | correct | >= 80% of ceiling | >= CUTLASS |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- "
             "| --- | --- | --- |"]
    peer_measured = (res.get("peer") or {}).get("measured", False)
    for r in gemm_rows(res):
        cutlass = (_figure(r["cutlass"], "{:.0f}", r["noisy"], "CUTLASS")
                   + f" ({r['cutlass_config']})" if r["cutlass"] else
                   "-" if peer_measured or r["what"].endswith("f32 out") else
                   "not measured (why: below)")
        timing = (f"{r['min_ms']:.4f} / {r['median_ms']:.4f} ({_spread(r['spread'])})"
                  if r.get("median_ms") else "-")
        big = r["m"] in GEMM_TARGET_SIZES
        noisy_vs = {"cuBLAS": bool(set(r["noisy"]) & {"ours", "cuBLAS"}),
                    "CUTLASS": bool(set(r["noisy"]) & {"ours", "CUTLASS"}) and r["cutlass"]}
        lines.append(
            f"| {r['what']} | {r['size']} | `{r['config']}` | "
            f"{_figure(r['ours'], '{:.0f}', r['noisy'])} | {timing} | {r['vs_mma_peak']:.2f} | "
            f"{_f(r['vs_mma_peak_vary'])} | "
            f"{_figure(r['cublas'], '{:.0f}', r['noisy'], 'cuBLAS') if r['cublas'] else '-'} | "
            f"{_f(r['vs_cublas'])} | {cutlass} | {_f(r['vs_cutlass'])} | {r['limit_text']} | "
            f"{'yes' if r['correct'] else 'NO'} ({r['error']:.1e}) | "
            f"{_yes(r.get('target_met')) or _not_judged(noisy_vs['cuBLAS'] and big)} "
            f"| {_peer_verdict(r) or _not_judged(noisy_vs['CUTLASS'])} |")
    return lines


def _peer_verdict(r: dict) -> str:
    """met, missed, or level: below 1.00 with 1.00 inside the round-by-round interval."""
    if r.get("peer_level"):
        lo, hi = r["vs_cutlass_interval"]
        return f"level within noise ({lo:.3f} - {hi:.3f} round by round)"
    return _yes(r.get("peer_target_met"))


def ratio_rows(res: dict) -> list[dict]:
    """Per size and B layout (f16 out): ours over CUTLASS, cuBLAS and the two ceilings, and
    what held the clock of each (the README quotes this table)."""
    return [r for r in gemm_rows(res) if r["variant"].endswith("f16 out")]


def _order_text(res: dict) -> str:
    if res.get("order") == "balanced":
        return ("in a balanced order (every kernel in every position, and right after every "
                "other kernel equally often, over each cycle of rounds)")
    return "in turn, round r starting with the r-th kernel"


def _rounds_text(r: dict) -> str:
    ratios, band = r.get("vs_cutlass_rounds"), r.get("vs_cutlass_interval")
    if not ratios:
        return "-"
    import statistics
    inside = f"95% interval {band[0]:.3f} - {band[1]:.3f}, " if band else ""
    return (f"{statistics.median(ratios):.3f} ({inside}lowest {min(ratios):.3f}, highest "
            f"{max(ratios):.3f}, {len(ratios)} rounds)")


def _ratio_table(res: dict) -> list[str]:
    lines = ["| size | B | ours / CUTLASS | round by round: median (interval of the median) "
             "| ours / cuBLAS | ours / mma.sync ceiling "
             "| ours / random-operand ceiling | clock held by (ours / CUTLASS / cuBLAS) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    def ratio(x, r, peer: str) -> str:
        noisy = [who for who in ("ours", peer) if who in r["noisy"]]
        return _f(x) + (f" (noisy: {', '.join(noisy)})" if noisy and x is not None else "")

    for r in sorted(ratio_rows(res), key=lambda r: (r["m"], r["variant"])):
        lim = " / ".join(x or "-" for x in (r["limit"], r["cutlass_limit"], r["cublas_limit"]))
        lines.append(f"| {r['size']} | {r['variant'].split(',')[0][2:]} | "
                     f"{ratio(r['vs_cutlass'], r, 'CUTLASS')} | "
                     f"{_rounds_text(r)} | "
                     f"{ratio(r['vs_cublas'], r, 'cuBLAS')} | {r['vs_mma_peak']:.2f} | "
                     f"{_f(r['vs_mma_peak_vary'])} | {lim} |")
    return lines


def _transpose_table(res: dict) -> list[str]:
    lines = ["| kernel | size | ours | min / median ms (spread) | copy (spread) | / copy "
             "| cupy a.T | / cupy a.T | correct | >= 90% of copy |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in transpose_rows(res):
        timing = (f"{r['min_ms']:.4f} / {r['median_ms']:.4f} ({_spread(r['spread'])})"
                  if r.get("median_ms") else "-")
        copy = (_figure(r["copy"], "{:.2f} TB/s", r["noisy"], "copy")
                + f" ({_spread(r['copy_spread'])})" if r["copy"] else "-")
        target = _yes(r.get("target_met")) or ("not judged: noisy" if r["noisy"] else "")
        lines.append(f"| {r['what']} | {r['size']} | "
                     f"{_figure(r['ours'], '{:.2f} TB/s', r['noisy'])} | {timing} | {copy} "
                     f"| {_f(r['vs_copy'])} | {_f(r['cupy_transpose'], '{:.3f}')} TB/s | "
                     f"{_f(r['vs_cupy_transpose'])} | {'yes' if r['correct'] else 'NO'} "
                     f"({r['error']} mismatches) | {target} |")
    return lines


def _ceiling_line(name: str, peak: dict) -> str:
    b = peak["best"]
    nvml = (f"; NVML: {b['nvml_sm_clock_mhz']:.0f} MHz, {b['nvml_power_w']:.0f} W, at the power "
            f"limit in {b['nvml_power_capped']:.0%} of the samples"
            if b.get("nvml_sm_clock_mhz") else "")
    clock = (f", SM clock {b['sm_clock_mhz']:.0f} MHz as the kernel measured it"
             if b.get("sm_clock_mhz") else "")
    return (f"- {name}: {peak['tflops']:.1f} TFLOP/s, best of {len(peak['trials'])} launch shapes "
            f"({b['chains']} independent accumulator chains per warp, {b['threads']} threads x "
            f"{b['blocks']} blocks{clock}{nvml}).")


def _clock_lines(res: dict) -> list[str]:
    """SM clock and power while each kernel ran (NVML), at the largest size."""
    size = max((r["m"] for r in res["gemm"]), default=None)
    recs = [("ours", r) for r in res["gemm"] if r["m"] == size]
    recs += [("CUTLASS", r) for (m, _), r in sorted(_peer_best(res).items()) if m == size]
    recs += [("cuBLAS", r) for r in res["cublas"] if r["m"] == size]
    recs = [(who, r) for who, r in recs if r.get("nvml_sm_clock_mhz")]
    if not recs:
        return ["NVML was not readable in this run: no clock or power figures."]
    lines = ["NVML read every few milliseconds while each kernel's timed repetitions ran (medians of "
             "the samples, then of the rounds): the SM clock, the board power (NVML's own "
             "running average, which lags a run of well under a second) and the share of samples "
             "in which the driver named the power limit as a reason for holding the clock down.",
             "", f"| kernel at {size}^3 | TFLOP/s | SM clock (NVML) | board power (NVML) | "
             "samples at the power limit |", "| --- | ---: | ---: | ---: | ---: |"]
    for who, r in recs:
        lines.append(f"| {who} {r.get('config') or ''} ({r.get('variant', '')}) | "
                     f"{r['tflops']:.0f} | {r['nvml_sm_clock_mhz']:.0f} MHz | "
                     f"{r['nvml_power_w']:.0f} W | {r['nvml_power_capped']:.0%} |")
    for name, key in (("ceiling", "mma_peak"), ("ceiling, random operands", "mma_peak_vary")):
        b = (res.get(key) or {}).get("best", {})
        if b.get("nvml_sm_clock_mhz"):
            lines.append(f"| mma.sync {name} (kernel-measured clock "
                         f"{b.get('sm_clock_mhz') or 0:.0f} MHz) | {res[key]['tflops']:.0f} | "
                         f"{b['nvml_sm_clock_mhz']:.0f} MHz | {b['nvml_power_w']:.0f} W | "
                         f"{b['nvml_power_capped']:.0%} |")
    return lines


def _sweep_lines(res: dict) -> list[str]:
    peer = res.get("peer", {})
    if not peer.get("measured"):
        return [f"Not measured: {peer.get('reason', 'skipped')}"]
    sizes = sorted({r["m"] for r in res.get("cutlass_sweep", [])})
    lines = [f"CUTLASS {peer.get('cutlass_version')} (headers: {peer.get('headers_from')}), "
             f"`cutlass::gemm::device::Gemm` with `arch::OpClassTensorOp`, `arch::Sm80`, "
             f"`GemmShape<16, 8, 16>` (mma.sync.m16n8k16), fp16 in, fp32 accumulate, fp16 out, "
             f"row-major A and C, `GemmIdentityThreadblockSwizzle<8>`; built with nvcc "
             f"{peer.get('nvcc_version')} (`{peer.get('flags')}`) from `{peer.get('source')}` in "
             f"{peer.get('build_s', 0):.0f} s. Each configuration once per size (the sweep), then "
             "the fastest per size and B layout in the interleaved rounds of the table above.",
             "", "| configuration | variant | " + " | ".join(f"{s}^3" for s in sizes) + " |",
             "| --- | --- |" + " ---: |" * len(sizes)]
    by: dict = {}
    for r in res.get("cutlass_sweep", []):
        by.setdefault((r.get("config"), r.get("variant")), {})[r["m"]] = r
    for (cfg, variant), recs in by.items():
        cells = []
        for s in sizes:
            r = recs.get(s)
            cells.append("-" if r is None else ("failed" if "error" in r else
                                                f"{r['tflops']:.0f}" + ("" if r["correct"]
                                                                         else " (WRONG)")))
        lines.append(f"| {cfg} | {variant} | " + " | ".join(cells) + " |")
    if peer.get("build_failed"):
        lines += ["", "Not built: " + "; ".join(f"{k}: {v[:200]}"
                                                for k, v in peer["build_failed"].items())]
    return lines


def _fixed_cost_lines(res: dict) -> list[str]:
    fc = res.get("fixed_cost")
    if not fc or "fixed_ms" not in fc:
        return []
    times = ", ".join(f"{k}: {t:.3f} ms" for k, t in zip(fc["ks"], fc["ms"]))
    share = fc["share"]
    return ["", "### The prologue and epilogue's share (a K sweep)", "",
            f"`{fc['config']}` ({fc['variant']}) at M = N = {fc['m']} and K = "
            f"{', '.join(map(str, fc['ks']))}: {times} (correct: "
            f"{'yes' if fc['correct'] else 'NO'}). A straight line through them, t = "
            f"{fc['fixed_ms'] * 1e3:.1f} us + K x {fc['per_k_ms'] * 1e6:.2f} ns (largest "
            f"residual {fc['max_residual_ms'] * 1e3:.1f} us): what does not grow with K (filling "
            "the ring before the first mma, the epilogue's stmatrix and stores, the launch) is "
            + ", ".join(f"{share[i]:.1%} of the time at K = {fc['ks'][i]}" for i in (0, -1))
            + "."]


def markdown(res: dict, plots: list[str]) -> str:
    """REPORT.md: the run's setting, then GEMM, ceilings, CUTLASS's sweep, profiles, transpose,
    the bank-conflict study and the notes, each section from its part of ``res``."""
    lines = _header_lines(res) + _gemm_section(res) + _ceiling_section(res, plots)
    lines += _learner_lines(res)
    lines += ["", "## CUTLASS's GEMM, the sweep", ""] + _sweep_lines(res)
    gp = res.get("gemm_profile")
    if gp is not None:
        from .gemm_profile import summary_lines
        lines += ["", "## What limits the GEMM (Nsight Compute, one launch each)", ""]
        lines += summary_lines(gp)
    lines += _fixed_cost_lines(res)
    lines += _transpose_section(res) + _bank_study_section(res.get("bank_study", {}))
    notes = res.get("notes")
    if notes:
        lines += ["", "## Notes", "", notes]
    return "\n".join(lines) + "\n"


def _header_lines(res: dict) -> list[str]:
    """The title and the run's setting: command, date, device, clocks, configurations and how
    every figure was timed."""
    d = res["device"]
    rounds = res.get("rounds", 1)
    return [
        "# Capstone benchmark report",
        "",
        f"- command: `{res['command']}`",
        f"- date (UTC): {res['date']}",
        f"- device: {d['name']} ({d['sm']}, {d['multiprocessors']} SMs), CUDA driver "
        f"{d['cuda_driver']}, runtime {d['cuda_runtime']}, CuPy {d['cupy']}",
        f"- clocks: highest SM clock {_f(d.get('max_sm_clock_mhz'), '{:.0f} MHz')}, board power "
        f"limit {_f(d.get('power_limit_w'), '{:.0f} W')} (NVML; the card's settings as found), "
        f"driver {d.get('driver', '-')}",
        "- our GEMM, per size (`GEMM_BY_SIZE` in `ptxlab.bench.kernels`): "
        + "; ".join(f"{size}^3 `{c['row']}`, B column-major `{c['col']}`"
                    for size, c in sorted((int(k), v) for k, v in
                                          (res.get("gemm_configs") or {}).items())),
        "- timing: every kernel checked first against an fp32 product of fresh random inputs "
        "(the transpose bit for bit), its output poisoned first. Then warm-up and CUDA events: "
        "a launch shorter than 2 ms is timed in batches of back-to-back launches captured "
        "into one CUDA graph and replayed (events around each replay, its time over its "
        "launches), a longer one launch by launch; inputs rotated over buffer sets that "
        "together exceed twice the L2 cache. Each figure is the median per launch, with the "
        "min and the spread ((p90 - p10) / median of the samples); a figure whose spread is "
        "above 10% is marked noisy and no target is judged on it. "
        f"GEMMs: {rounds} interleaved rounds per size (cuBLAS, our three variants, CUTLASS's "
        f"fastest configuration per B layout), {_order_text(res)}, each kernel warmed up for "
        f"{res.get('warmup_ms', 50):.0f} ms before its samples; the median round shown; SM "
        "clock and board power read through NVML while each ran. Ceilings and peers measured "
        "in this same run.",
    ]


def _gemm_section(res: dict) -> list[str]:
    """The GEMM table, the targets and how a miss is told from noise, and the ratio table."""
    return [
        "",
        "## GEMM",
        "",
    ] + _gemm_table(res) + [
        "",
        f"Targets: at 4096^3 and 8192^3, >= {TARGET_VS_MMA_PEAK:.0%} of the mma.sync ceiling "
        f"(and >= {TARGET_VS_CUBLAS:.0%} of cuBLAS); at every size, at least as fast as "
        "CUTLASS's mma.sync GEMM (the fastest configuration of its sweep, same B layout, f16 "
        "out): met at a ratio of medians of 1.00 or more. Below that, a cell whose ratio, "
        "taken round by round, has 1.00 inside the 95% interval of its median (the k-th "
        "lowest to the k-th highest round, from the binomial distribution) is \"level within "
        "noise\": this run cannot tell the two apart there; only an interval wholly below 1.00 "
        "is missed.",
        "",
        "### Ratios",
        "",
        "Ours over CUTLASS's mma.sync GEMM, cuBLAS and the two mma.sync ceilings of this run "
        "(B row- and column-major, f16 out), and what held each kernel's SM clock while it ran: "
        "power (the driver named the board's power limit in at least half of the NVML samples), "
        "thermal, clock (held below "
        f"{CLOCK_HELD:.0%} of the highest SM clock for another reason) or none (full clock).",
        "",
    ] + _ratio_table(res)


def _ceiling_section(res: dict, plots: list[str]) -> list[str]:
    """The mma.sync ceilings, the clock and power lines, and the plots."""
    lines = [
        "",
        "## Ceilings, clock and power",
        "",
        _ceiling_line("mma.sync ceiling (register-only, each lane repeating one operand value)",
                      res["mma_peak"]),
    ]
    if res.get("mma_peak_vary"):
        lines.append(_ceiling_line("mma.sync ceiling with operands that change every mma and "
                                   "hold random normal f16 values", res["mma_peak_vary"]))
    lines += [""] + _clock_lines(res) + [""]
    for p in plots:
        lines.append(f"![{p}]({p})")
    return lines


def _transpose_section(res: dict) -> list[str]:
    """The transpose table and its target."""
    return ["", "## Transpose", ""] + _transpose_table(res) + [
        "", f"Target: transpose >= {TARGET_VS_COPY:.0%} of the device-to-device copy's bandwidth "
        "(cudaMemcpyAsync, timed the same way) at "
        + ", ".join(f"{s}^2" for s in TRANSPOSE_TARGET_SIZES) + ". Transpose tile per size: "
        "`TRANSPOSE_BY_SIZE` in `ptxlab.bench.kernels`."]


def _bank_study_section(bs: dict) -> list[str]:
    """The bank-conflict study: prediction against Nsight Compute, layout by layout."""
    lines = ["", "## Bank-conflict study (ptxlab.model.banks prediction vs Nsight Compute)", ""]
    if not bs.get("measured"):
        return lines + [f"Not measured: {bs.get('reason', 'skipped')}"]
    lines += [f"ncu command: `{bs['command']}`", "",
              "| layout | ldmatrix instr. | wavefronts pred. / ncu | conflicts pred. / ncu "
              "| fill st.shared.v4 wavefronts pred. / ncu | agree |",
              "| --- | ---: | ---: | ---: | ---: | --- |"]
    for row in bs["rows"]:
        p, m = row["predicted"], row["measured"]
        lines.append(
            f"| {row['layout']} | {p['ldsm_instructions']} / {m.get('ldsm_instructions', '-')}"
            f" | {p['ld_wavefronts']} / {m.get('ld_wavefronts', '-')}"
            f" | {p['ld_conflicts']} / {m.get('ld_conflicts', '-')}"
            f" | {p['st_wavefronts']} / {m.get('st_wavefronts', '-')}"
            f" | {'yes' if all(row['agree'].values()) else 'NO'} |")
    return lines + ["", f"Every layout agrees exactly: {'yes' if bs['all_agree'] else 'NO'}. "
                    "Raw counters: `ncu_bank_study.csv`."]


def write(res: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = plot(res, out_dir)
    bs = res.get("bank_study", {})
    written = []
    if bs.get("ncu_csv"):
        (out_dir / "ncu_bank_study.csv").write_text(bs["ncu_csv"])
        written.append(out_dir / "ncu_bank_study.csv")
    slim = dict(res)
    slim["bank_study"] = {k: v for k, v in bs.items() if k != "ncu_csv"}
    (out_dir / "report.json").write_text(json.dumps(slim, indent=1, default=str) + "\n")
    (out_dir / "REPORT.md").write_text(markdown(res, plots))
    written += [out_dir / "report.json", out_dir / "REPORT.md"] + [out_dir / p for p in plots]
    return written
