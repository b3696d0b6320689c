"""Turn one benchmark run into report.json, REPORT.md, a terminal table and two PNG plots."""
from __future__ import annotations

import json
from pathlib import Path

GEMM_TARGET_SIZES = (4096, 8192)
TRANSPOSE_TARGET_SIZES = (8192, 16384)
TARGET_VS_MMA_PEAK = 0.80
TARGET_VS_CUBLAS = 0.50
TARGET_VS_COPY = 0.80


def summary_rows(res: dict) -> list[dict]:
    """One row per (kernel, size): ours, the ceiling, the ratio, and whether the target holds."""
    rows = []
    peak = res["mma_peak"]["tflops"]
    cublas = {r["m"]: r for r in res["cublas"]}
    for r in res["gemm"]:
        size = r["m"]
        cb = cublas.get(size)
        row = {"what": f"GEMM {r['variant']}", "size": f"{size}^3", "ours": r["tflops"],
               "unit": "TFLOP/s", "correct": r["correct"], "error": r["rel_error_vs_fp32"],
               "mma_peak": peak, "vs_mma_peak": r["tflops"] / peak,
               "cublas": cb["tflops"] if cb else None,
               "vs_cublas": r["tflops"] / cb["tflops"] if cb else None}
        if size in GEMM_TARGET_SIZES:
            row["target_met"] = (row["vs_mma_peak"] >= TARGET_VS_MMA_PEAK and row["vs_cublas"]
                                 is not None and row["vs_cublas"] >= TARGET_VS_CUBLAS
                                 and r["correct"])
        rows.append(row)
    copies = {r["bytes"]: r for r in res["copy"]}
    cupy_t = {r["rows"]: r for r in res["cupy_transpose"]}
    for r in res["transpose"]:
        size = r["rows"]
        cp_ = copies.get(size * r["cols"] * 2)
        ct = cupy_t.get(size)
        row = {"what": f"transpose fp16 ({r['config']})", "size": f"{size}^2", "ours": r["tbps"],
               "unit": "TB/s", "correct": r["correct"], "error": r["mismatches"],
               "copy": cp_["tbps"] if cp_ else None,
               "vs_copy": r["tbps"] / cp_["tbps"] if cp_ else None,
               "cupy_transpose": ct["tbps"] if ct else None,
               "vs_cupy_transpose": r["tbps"] / ct["tbps"] if ct else None}
        if size in TRANSPOSE_TARGET_SIZES:
            row["target_met"] = bool(row["vs_copy"] and row["vs_copy"] >= TARGET_VS_COPY
                                     and r["correct"])
        rows.append(row)
    return rows


def _fmt(x, digits=3) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e-2 else f"{x:.{digits}f}".rstrip("0").rstrip(".")
    return str(x)


def table_lines(res: dict) -> list[str]:
    """The terminal table: ours, the ceiling, the ratio."""
    out = [f"{'kernel':<44} {'size':>7} {'ours':>9} {'ceiling':>22} {'ratio':>6} "
           f"{'2nd ref':>24} {'ratio':>6} {'ok':>3}"]
    for r in summary_rows(res):
        if r["unit"] == "TFLOP/s":
            ceil, ratio = f"mma.sync {r['mma_peak']:.0f} TFLOP/s", r["vs_mma_peak"]
            ref2 = f"cuBLAS {r['cublas']:.0f} TFLOP/s" if r["cublas"] else "-"
            ratio2 = r["vs_cublas"]
            ours = f"{r['ours']:.0f}"
        else:
            ceil = f"copy {r['copy']:.2f} TB/s" if r["copy"] else "-"
            ratio = r["vs_copy"]
            ref2 = f"cupy a.T {r['cupy_transpose']:.3f} TB/s" if r["cupy_transpose"] else "-"
            ratio2 = r["vs_cupy_transpose"]
            ours = f"{r['ours']:.2f}"
        ok = r.get("target_met")
        out.append(f"{r['what']:<44} {r['size']:>7} {ours:>9} {ceil:>22} "
                   f"{_fmt(ratio, 2) if ratio else '-':>6} {ref2:>24} "
                   f"{_fmt(ratio2, 2) if ratio2 else '-':>6} "
                   f"{'' if ok is None else ('yes' if ok else 'NO'):>3}")
    bs = res.get("bank_study", {})
    if bs.get("measured"):
        out.append(f"bank-conflict study: prediction == ncu for every layout: "
                   f"{'yes' if bs['all_agree'] else 'NO'}")
    else:
        out.append(f"bank-conflict study: not measured ({bs.get('reason', 'skipped')})")
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
    by_variant["cuBLAS (cupy.matmul, fp16)"] = [(r["m"], r["tflops"]) for r in res["cublas"]]
    for label, pts in by_variant.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.axhline(res["mma_peak"]["tflops"], color="k", ls="--",
               label=f"mma.sync register-only ceiling ({res['mma_peak']['tflops']:.0f})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M = N = K")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"fp16 GEMM, fp32 accumulate — {res['device']['name']}")
    ax.legend(fontsize=8)
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


def markdown(res: dict, plots: list[str]) -> str:
    d = res["device"]
    lines = [
        "# Capstone benchmark report",
        "",
        f"- command: `{res['command']}`",
        f"- date (UTC): {res['date']}",
        f"- device: {d['name']} ({d['sm']}, {d['multiprocessors']} SMs), CUDA driver "
        f"{d['cuda_driver']}, runtime {d['cuda_runtime']}, CuPy {d['cupy']}",
        "- timing: CUDA events around each call, warm-up first, median over the repetitions "
        "(count in report.json), inputs rotated over several buffer sets; ours and the ceilings "
        "measured in this same run.",
        "",
        "## Results",
        "",
        "| kernel | size | ours | ceiling | ratio | second reference | ratio | correct | target |",
        "| --- | --- | ---: | --- | ---: | --- | ---: | --- | --- |",
    ]
    for r in summary_rows(res):
        if r["unit"] == "TFLOP/s":
            ceil, ratio = f"mma.sync {r['mma_peak']:.0f} TFLOP/s", r["vs_mma_peak"]
            ref2 = f"cuBLAS {r['cublas']:.0f} TFLOP/s" if r["cublas"] else "-"
            ratio2, ours = r["vs_cublas"], f"{r['ours']:.0f} TFLOP/s"
            correct = f"{'yes' if r['correct'] else 'NO'} (rel. err {r['error']:.1e})"
        else:
            ceil = f"copy {r['copy']:.2f} TB/s" if r["copy"] else "-"
            ratio = r["vs_copy"]
            ref2 = (f"cupy a.T {r['cupy_transpose']:.3f} TB/s" if r["cupy_transpose"] else "-")
            ratio2, ours = r["vs_cupy_transpose"], f"{r['ours']:.2f} TB/s"
            correct = f"{'yes' if r['correct'] else 'NO'} ({r['error']} mismatches)"
        tgt = r.get("target_met")
        lines.append(f"| {r['what']} | {r['size']} | {ours} | {ceil} | "
                     f"{ratio:.2f} | {ref2} | {ratio2:.2f} | {correct} | "
                     f"{'' if tgt is None else ('met' if tgt else '**missed**')} |"
                     if ratio and ratio2 else
                     f"| {r['what']} | {r['size']} | {ours} | {ceil} | - | {ref2} | - | {correct} | |")
    mp = res["mma_peak"]
    lines += ["", f"mma.sync ceiling: {mp['tflops']:.1f} TFLOP/s, best of {len(mp['trials'])} "
              f"launch shapes ({mp['best']['chains']} independent accumulator chains per warp, "
              f"{mp['best']['threads']} threads x {mp['best']['blocks']} blocks"
              + (f", SM clock {mp['best']['sm_clock_mhz']:.0f} MHz as the kernel measured it"
                 if mp["best"].get("sm_clock_mhz") else "") + ").",
              "", "Targets: GEMM at 4096^3 and 8192^3 >= 80% of the mma.sync ceiling and >= 50% "
              "of cuBLAS; transpose at 8192^2 and 16384^2 >= 80% of copy bandwidth.", ""]
    for p in plots:
        lines.append(f"![{p}]({p})")
    gp = res.get("gemm_profile")
    if gp is not None:
        from .gemm_profile import summary_lines
        lines += ["", f"## What limits the GEMM (Nsight Compute, {gp.get('config', '')} at "
                  f"{gp.get('size', '')}^3)", ""] + summary_lines(gp)
    lines += ["", "## Bank-conflict study (ptxlab.model.banks prediction vs Nsight Compute)", ""]
    bs = res.get("bank_study", {})
    if bs.get("measured"):
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
        lines += ["", f"Every layout agrees exactly: {'yes' if bs['all_agree'] else 'NO'}. "
                  "Raw counters: `ncu_bank_study.csv`."]
    else:
        lines.append(f"Not measured: {bs.get('reason', 'skipped')}")
    notes = res.get("notes")
    if notes:
        lines += ["", "## Notes", "", notes]
    return "\n".join(lines) + "\n"


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
