#!/usr/bin/env python3
"""Mutants of every solution of the course: does a PASSED in the notebook predict the hidden
tests?

Each solution of ``course/text/*.py`` is changed in small ways a learner might (an operator, a
constant, ``lane // 8`` for ``lane % 8``, rows and columns swapped, a term dropped, an absolute
address for a relative one, ``.trans`` toggled, registers swapped, a barrier deleted: see
``ptxlab.authoring.mutants``), and every mutant goes through the exercise's own checks. An *escape*
(the visible check accepts, the hidden tests reject) is a defect of the course; *both accept* is
listed with its diff, and with a judgement where one was made. The report ends with what the
checks say of the named mistakes (``mutants.NAMED_MISTAKES``): the cause each one gets.

    python3 tools/course/course_mutants.py                  # writes reports/course/MUTANTS.md + .json
    python3 tools/course/course_mutants.py --kernel-sample 0     # every kernel mutant, not a sample

Exit status 1 when a mutant escapes.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ptxlab.authoring import mutants  # noqa: E402

#: Judgements of mutants both checks accept, each made by reading the mutants it matches:
#: ``(exercise key, operator, mutant's new line, judgement)`` patterns (an empty pattern matches
#: anything); the first rule that matches applies.
JUDGEMENTS: tuple[tuple[str, str, str, str], ...] = (
    (r"a_operand_kernel|b_operand_kernel|b_col_major_kernel|block_load_kernel|"
     r"swizzle_roundtrip|k_loop_kernel", r"dropped `(base|tile|sA|tile_base) \+`|`\+` -> `[|^]`",
     r"(?:= |\b)(?:base|tile|sA|tile_base) [|^] |= \(lane|= swizzled_offset|= tile_offset",
     "a gap in both checks: the tile is the kernel's only shared memory, so it sits at the "
     "same shared address in every run, and no offset of the exercise reaches a set bit of "
     "it: adding, OR-ing or XOR-ing the base (or, at address 0, leaving it out) give the same "
     "address; a larger tile, or one placed after other shared memory, needs the base added"),
    (r"", r"deleted `__syncwarp\(\);`", r"",
     "a gap in both checks: the CPU model orders the accesses of one warp by its program "
     "order, so it never sees a __syncwarp() missing between lanes of one warp; on Volta and "
     "newer GPUs the lanes can run apart and the barrier is what orders them"),
    (r"k_loop_kernel", r"deleted `block_sync\(\);`", r"",
     "a gap in both checks: the exercise launches one warp, whose cp.async.wait_group covers "
     "the copies of every lane it reads; with more warps the barrier is needed (the "
     "missing-barrier question of the same notebook)"),
    (r"block_load_kernel", r"`32` -> `64`", r"",
     "equivalent in what it writes: warp 1 loads the same fragment and writes the same "
     "values to the same places as warp 0"),
    (r"block_load_kernel", r"`\+` -> `[|^]`", r"out\[2 \* lane",
     "equivalent: 2 * lane is even, so | 1 and ^ 1 add 1"),
    (r"", r"`\+` -> `[|^]`", r"",
     "equivalent on the exercise's whole domain: the two operands never have a set bit in "
     "common (a multiple of 8 or 16 and a number below it, an aligned base and an offset "
     "within its alignment), so OR and XOR add"),
    (r"b_row_major_rows|d_rows|b_operand_kernel|store_d_kernel|block_load_kernel|"
     r"tile_kernel", r"dropped `% 16`|`16` -> `(17|32)`", r"",
     "equivalent: an .x2 takes the row addresses of lanes 0-15 only, where lane % 16, "
     "lane % 17, lane % 32 and lane are the same"),
    (r"b_col_major|d_trans_rows", r"dropped `% 2`|`2` -> `[34]`", r"",
     "equivalent: an .x2 takes the row addresses of lanes 0-15 only, where lane // 8 is 0 "
     "or 1 already"),
    (r"", r"`lane` -> `base \+ lane`", r"",
     "equivalent: a row address is 16-byte aligned, so base % 16 = 0 and (base + lane) % 8, "
     "% 16 and // 8 % 2 are lane's"),
    (r"swizzled_a_rows|b_trans_offset", r"`row` -> `lane % 16`", r"",
     "equivalent on the domain: a block starts on a multiple of 16 rows (row0, k0), so "
     "(row0 + lane % 16) % 8 = (lane % 16) % 8"),
    (r"swizzled_a_rows", r"`8` -> `7`", r"",
     "equivalent on the domain: col0 is 0, 16, 32 or 48 (a 16-column block of a 64-column "
     "row), and col0 // 7 = col0 // 8 for each"),
    (r"stored_position", r"relative instead of absolute", r"",
     "equivalent: row % 8 = (lane // 4) % 8, the rest of the row being 8 * (reg % 2), and "
     "col // 8 does not depend on half, since 2 * (lane % 4) + half < 8"),
    (r"bank_group", r"`16` -> `17`", r"",
     "equivalent on the domain: a chunk index is below 16 in rows of up to 256 bytes and "
     "row * row_bytes is a multiple of 16, so 17 * chunk // 16 adds the same as 16 * chunk"),
    (r"banks\.swizzle$", r"`8` -> `(9|7|16)`", r"",
     "equivalent: rows of 8 chunks get chunk ^ (row % 8) from either branch, and "
     "9 // chunks = 8 // chunks for 2 and 4 chunks"),
    (r"mma\.b_fragment", r"`32` -> `33`", r"",
     "equivalent: 33 // bits = 32 // bits for 8, 16 and 32 bits"),
    (r"tile_kernel", r"`4` -> `(5|8|16)`", r"",
     "undefined behaviour: rc and rd have 4 elements, and the compiled loop does no step "
     "past 4 (the CPU model faults on a store past the end of d, and none happens), so the "
     "output is the solution's; no input can tell"),
    (r"tile_kernel", r"`\*` -> `/`", r"",
     "undefined behaviour (8 / (i / 2) divides by zero for i < 2) that the compiler folds "
     "to the solution's value; no input can tell"),
)


def judgement(key: str, outcome: dict) -> str:
    """The judgement of a both-accepted mutant, or ``""`` where none was made."""
    new = " ".join(d for d in outcome["diff"] if d.startswith("+"))
    for k, op, line, text in JUDGEMENTS:
        if re.search(k, key) and re.search(op, outcome["operator"]) and re.search(line, new):
            return text
    return ""


def _code(diff: list[str]) -> str:
    return "<br>".join(f"`{d}`" for d in diff) or "(whitespace only)"


def markdown(data: dict) -> str:
    ex = data["exercises"]
    tot = {k: sum(e[k] for e in ex) for k in ("made", "run", "stillborn", "killed")}
    escapes = sum(len(e["escapes"]) for e in ex)
    both = sum(len(e["both_accept"]) for e in ex)
    sample = data["kernel_sample"]
    lines = [
        "# Mutants of the course's solutions",
        "",
        "Does a PASSED in the notebook predict the hidden tests? Every solution of "
        "`course/text/*.py` is changed once in each of the small ways `ptxlab.authoring.mutants` "
        "knows (an operator or a constant, `lane // 8` for `lane // 16` or `lane % 8`, returned "
        "values swapped, one operand dropped, a coordinate taken from the absolute address or a "
        "sum's part used for the whole; for kernels also `.trans` toggled, registers swapped in "
        "a `{%0, ...}` list, call arguments swapped, a row off by one, a barrier deleted; for a "
        "choice every other option), and each distinct mutant is run through the exercise's "
        "own `evaluate`: the visible check, then, where it passes, the hidden cases under the "
        "self-study seed and the grading seeds "
        + ", ".join(str(s) for s in data["grading_seeds"]) + ".",
        "",
        "- **escape**: the visible check accepts, the hidden tests reject (a defect of the "
        "course: none may be left);",
        "- **both accept**: listed with a judgement where one was made (an equivalent answer, "
        "or a gap in both checks); *seeds* counts how many of "
        f"{len(data['evidence_seeds'])} further grading seeds it passed too;",
        "- **stillborn**: the mutant does not parse or compile (counted, not run).",
        "",
        f"- date (UTC): {data['date']}",
        f"- machine: {data['machine']}, Python {data['python']}, {data['workers']} worker "
        f"processes",
        f"- kernels: {data['backend']}",
        f"- wall time: {data['seconds']:.1f} s",
        ("- kernel exercises: every mutant run" if sample is None else
         f"- kernel exercises: a fixed sample of at most {sample} mutants each (seeded by the "
         "exercise's key), so the harness fits the test suite's time; `--kernel-sample 0` runs "
         "them all"),
        f"- result: {len(ex)} exercises, {tot['made']} mutants made, {tot['run']} run, "
        f"{tot['stillborn']} stillborn, {tot['killed']} killed by the visible check, "
        f"**{escapes} escapes**, {both} accepted by both",
        "",
        "| notebook | exercise | kind | mutants | run | stillborn | killed by visible | "
        "escapes | both accept | seconds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in ex:
        lines.append(f"| {e['notebook']} | `{e['key']}` | {e['kind']} | {e['made']} | "
                     f"{e['run']} | {e['stillborn']} | {e['killed']} | {len(e['escapes'])} | "
                     f"{len(e['both_accept'])} | {e['seconds']:.1f} |")
    lines += ["", "## Escapes", ""]
    if not escapes:
        lines.append("None: every mutant the hidden tests reject is rejected by the visible "
                     "check already.")
    for e in ex:
        for o in e["escapes"]:
            says = o["hidden_says"].replace("\n", "<br>")
            lines.append(f"- `{e['key']}`, course/text/{e['notebook']}.py line {o['line']}, "
                         f"{o['operator']}: {_code(o['diff'])}<br>hidden: {says}")
    lines += ["", "## Accepted by both checks", ""]
    for e in ex:
        if not e["both_accept"]:
            continue
        lines += [f"### `{e['key']}` ({e['notebook']})", "",
                  "| line | mutant | diff | seeds | judgement |", "| --- | --- | --- | --- | --- |"]
        for o in e["both_accept"]:
            seeds = "" if o["evidence"] is None else f"{o['evidence']}/{len(data['evidence_seeds'])}"
            lines.append(f"| {o['line']} | {o['operator'].replace('|', chr(92) + '|')} | "
                         f"{_code(o['diff']).replace('|', chr(92) + '|')} | {seeds} | "
                         f"{judgement(e['key'], o) or 'not judged'} |")
        lines.append("")
    named = data.get("named", [])
    if named:
        lines += ["", "## What the checks say of named mistakes", "",
                  "Realistic wrong kernels of every kernel exercise of the course "
                  "(`mutants.NAMED_MISTAKES`); the cause is the report's first advice line, "
                  "named from evidence (`ptxlab.teach.diagnosis`), or the report's own message "
                  f"for a compile error, a hang or a race. {sum(n['named'] for n in named)} of "
                  f"{len(named)} get the cause they must.", "",
                  "| exercise | mistake | named | what the check says first |",
                  "| --- | --- | --- | --- |"]
        for n in named:
            said = n["cause"].replace("|", chr(92) + "|").replace("\n", " ")
            lines.append(f"| `{n['key']}` | {n['kind']} | {'yes' if n['named'] else '**no**'} "
                         f"| {said} |")
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", type=Path, default=ROOT / "reports" / "course")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--kernel-sample", type=int, default=mutants.KERNEL_SAMPLE or 0,
                    help="mutants run per kernel exercise, a fixed sample (0: all)")
    args = ap.parse_args()
    from ptxlab.run import backends

    sample = args.kernel_sample or None
    t0 = time.perf_counter()
    results = mutants.run_course(workers=args.workers, kernel_sample=sample)
    seconds = time.perf_counter() - t0
    data = {
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "machine": f"{platform.machine()}, {platform.system()}",
        "python": platform.python_version(), "backend": backends.describe(),
        "workers": args.workers, "kernel_sample": sample, "seconds": round(seconds, 1),
        "grading_seeds": list(mutants.GRADING_SEEDS),
        "evidence_seeds": list(mutants.EVIDENCE_SEEDS),
        "exercises": [r.as_dict() for r in results],
        "named": mutants.named_causes(),
    }
    for e in data["exercises"]:
        for o in e["both_accept"]:
            o["judgement"] = judgement(e["key"], o)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "mutants.json").write_text(json.dumps(data, indent=1) + "\n")
    (args.out_dir / "MUTANTS.md").write_text(markdown(data))
    escapes = sum(len(r.escapes) for r in results)
    print(f"{len(results)} exercises, {sum(r.run for r in results)} mutants run, {escapes} "
          f"escapes, in {seconds:.1f} s; wrote {args.out_dir / 'MUTANTS.md'}")
    return 1 if escapes else 0


if __name__ == "__main__":
    sys.exit(main())
