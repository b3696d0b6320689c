"""The attack corpus under stock ``nbgrader autograde`` and under ``ptxlab grade``, side by side.

Usage: python tools/docs/grading_attacks_table.py [--corpus attacks|exploits] [--out reports/grading_attacks]

``--corpus exploits`` grades ``tests/submissions/exploits.py`` instead (the exploits of the
judge: stack walks, the reference under other names, late rebinding, str-subclass sources,
lookup tables), writing ``EXPLOITS.md`` and ``exploits.json``.

Builds a course with the course's own ``02_ldmatrix``, writes the class of
``tests/submissions/attacks.py`` (attacks and honest work), and grades two copies of it: one
with stock ``nbgrader autograde`` (the course root's config holds nothing of this project's
grading settings), one with ``ptxlab grade --workers 2``. For each attack it says what happened
in each: points the cheat got, what was read, what was destroyed, what was left behind.
Writes ``ATTACKS.md`` and ``attacks.json`` to ``--out``.

Stock nbgrader runs the notebooks as the grader, outside any sandbox: run this on a machine
you do not mind them writing to (``/tmp`` fills by 1.6 GB for a moment; the script removes what
they leave and stops the process one of them starts).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
for extra in (REPO / "tests" / "fixtures" / "grading", REPO / "tests" / "submissions"):
    sys.path.insert(0, str(extra))

import attacks  # noqa: E402
import course as fixture_course  # noqa: E402
import exploits  # noqa: E402

#: The class graded (``--corpus``).
CORPUS: list = attacks.ATTACKS

A = attacks.ASSIGNMENT
NB = attacks.NOTEBOOK


def _stock_config(root: Path) -> None:
    (root / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(root.resolve())!r}\n"
        f"c.CourseDirectory.course_id = {fixture_course.COURSE_ID!r}\n")


def _scores(root: Path) -> dict[str, dict[str, tuple[float, bool]]] | str:
    """``{student: {test: (score, needs a person)}}`` from the gradebook, or why it cannot be
    read."""
    from nbgrader.api import Gradebook

    out: dict[str, dict[str, tuple[float, bool]]] = {}
    try:
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
            for student in gb.students:
                try:
                    nb = gb.find_submission_notebook(NB[:-6], A, student.id)
                except Exception:
                    continue
                out[student.id] = {g.name: (float(g.score or 0), bool(g.needs_manual_grade))
                                   for g in nb.grades}
    except Exception as exc:
        return f"gradebook unreadable ({str(exc).splitlines()[0][:80]})"
    return out


def _outputs(root: Path, student: str) -> str:
    path = root / "autograded" / student / A / NB
    if not path.exists():
        return ""
    nb = json.loads(path.read_text())
    return "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                   for o in c.get("outputs", []))


def _measure(root: Path, mode: str, extra: dict, scores=None) -> dict[str, str]:
    """One line per attack saying what it achieved in this run."""
    scores = scores if scores is not None else _scores(root)
    reasons = {}
    csv_path = root / "grading" / A / "grades.csv"
    if csv_path.exists():
        import csv
        with open(csv_path) as fh:
            reasons = {r["student"]: r["reason"] for r in csv.DictReader(fh)}
    out = {}
    for attack in CORPUS:
        name = attack.name
        if isinstance(scores, str):
            got = None
        else:
            got = scores.get(name)
        cheated = tuple(attack.zero) + tuple(attack.flagged)
        notes = []
        if got is None:
            notes.append("no grades (" + (scores if isinstance(scores, str) else "not graded")
                         + ")")
        else:
            total = sum(s for s, _ in got.values())
            flagged = [t for t in attack.flagged if got.get(t, (0, False))[1]]
            won = sum(got.get(t, (0, False))[0] for t in cheated)
            if attack.good:
                notes.append(f"{total:g}/12")
            elif cheated:
                notes.append(f"{total:g}/12, {won:g} points from the cheat"
                             + (f", {len(flagged)} flagged for a person" if flagged else ""))
            else:
                notes.append(f"{total:g}/12")
        if name == "look_for_reference":
            text = _outputs(root, name)
            found = next((l for l in text.splitlines() if l.startswith(exploits.REFERENCE_MARK)),
                         "?")
            notes.append(f"reference found: {found[len(exploits.REFERENCE_MARK):].strip()}")
        if name == "read_solutions":
            text = _outputs(root, name)
            leaked = next((l for l in text.splitlines() if l.startswith("LEAKED")), "LEAKED ?")
            notes.append(f"files of others read: {leaked.split()[-1]} of 4")
        if attack.refused and mode == "ptxlab":
            notes = [f"refused, 0/12, reason: {reasons.get(name, '')[:90]}"]
        elif attack.refused and got is not None:
            notes = [f"{sum(s for s, _ in got.values()):g}/12 (the submission was graded as it "
                     "came)"]
        if name == "link_to_solutions":
            copied = root / "autograded" / name / A / "notes.txt"
            notes.append("the instructor's notebook copied into the student's graded folder"
                         if copied.exists() and "BEGIN SOLUTION" in copied.read_text(errors="replace")
                         else "nothing copied")
        if name == "huge_images":
            path = root / "autograded" / name / A / NB
            if path.exists():
                notes.append(f"graded notebook {path.stat().st_size / 2**20:.1f} MiB")
        if name == "write_through_to_gradebook" and name not in extra:
            notes.append("gradebook intact" if not isinstance(_scores(root), str) else
                         "gradebook destroyed: every student's grades lost")
        if name in extra:
            notes.append(extra[name])
        out[name] = "; ".join(notes)
    return out


def _background_left() -> bool:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return f"sleep {attacks.BACKGROUND_MARK}" in ps


def _clean_machine() -> None:
    subprocess.run(["pkill", "-f", f"sleep {attacks.BACKGROUND_MARK}"], check=False)
    for n in range(8):
        Path(f"/tmp/fill{n}").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "grading_attacks")
    parser.add_argument("--corpus", choices=("attacks", "exploits"), default="attacks")
    args = parser.parse_args(argv)
    global CORPUS
    CORPUS = attacks.ATTACKS if args.corpus == "attacks" else exploits.EXPLOITS
    env = fixture_course.grading_env(PTXLAB_KERNEL_MEMORY_MB="1024", PTXLAB_CELL_TIMEOUT_S="60")
    base = Path(tempfile.mkdtemp(prefix="ptxlab-attacks-"))
    results: dict[str, dict] = {}
    try:
        template = fixture_course.make_course(base / "template", assignment=A)
        r = fixture_course.nbgrader(["generate_assignment", A], template, env)
        if r.returncode:
            raise SystemExit(r.stderr[-3000:])
        for mode in ("stock", "ptxlab"):
            root = base / mode
            shutil.copytree(template, root, symlinks=True)
            cfg = root / "nbgrader_config.py"
            cfg.write_text(cfg.read_text().replace(str(template.resolve()), str(root.resolve())))
            if mode == "stock":
                _stock_config(root)
            attacks.write_class(root, CORPUS)
            print(f"grading {len(CORPUS)} submissions with {mode} ...", flush=True)
            t0 = time.monotonic()
            if mode == "stock":
                # Once without the submission that destroys the gradebook, so the others'
                # outcomes can be read; then that one alone, after them.
                wrecker = "write_through_to_gradebook"
                run = fixture_course.nbgrader(
                    ["autograde", A, f"--CourseDirectory.student_id_exclude={wrecker}"], root,
                    env, timeout=3600)
                saved = _scores(root)
                fixture_course.nbgrader(["autograde", A, "--student", wrecker], root, env,
                                        timeout=3600)
            else:
                run = fixture_course.ptxlab_grade([A, "--workers", "2"], root, env,
                                                  timeout=3600)
            wall = time.monotonic() - t0
            extra = {}
            if _background_left():
                extra["background_process"] = "its process still running after the batch"
            else:
                extra["background_process"] = "nothing left running"
            fills = sum(Path(f"/tmp/fill{n}").exists() for n in range(8))
            extra["tmp_fill"] = (f"{fills} files of 200 MB left in the machine's /tmp"
                                 if fills else "nothing left in the machine's /tmp")
            _clean_machine()
            if mode == "stock" and isinstance(_scores(root), str):
                extra["write_through_to_gradebook"] = ("graded last, it left the gradebook "
                                                       f"unreadable: {_scores(root)}")
            results[mode] = {"exit": run.returncode, "seconds": round(wall, 1),
                             "lines": _measure(root, mode, extra,
                                               saved if mode == "stock" else None)}
            print(f"  {mode}: exit {run.returncode}, {wall:.0f} s", flush=True)
    finally:
        _clean_machine()
        shutil.rmtree(base, ignore_errors=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    lines = [f"# The {args.corpus} corpus: stock nbgrader vs ptxlab grade ({stamp})", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
             f"{platform.python_version()}; assignment `{A}`, "
             f"{len(CORPUS)} submissions ({sum(not a.good for a in CORPUS)} "
             "attacks, the rest honest). Generated by `tools/docs/grading_attacks_table.py`.", "",
             f"Stock `nbgrader autograde`: exit {results['stock']['exit']}, "
             f"{results['stock']['seconds']} s. `ptxlab grade --workers 2`: exit "
             f"{results['ptxlab']['exit']}, {results['ptxlab']['seconds']} s.", "",
             "| submission | what it does | stock nbgrader | ptxlab grade |",
             "| --- | --- | --- | --- |"]
    for attack in CORPUS:
        lines.append(f"| `{attack.name}` | {attack.what} | {results['stock']['lines'][attack.name]} "
                     f"| {results['ptxlab']['lines'][attack.name]} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.corpus.upper()}.md").write_text("\n".join(lines) + "\n")
    (args.out / f"{args.corpus}.json").write_text(json.dumps({"date": stamp, **results}, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
