"""``ptxlab grade`` on the CPU path, the code now against the code of another checkout, and the
CPU model's share of the grading.

Usage: python measure/benchmarks/bench_grading_versions.py --baseline TREE
           [--class 02_ldmatrix:100 --class 06_mma:40] [--rounds 2] [--workers K]
           [--profile] [--out reports/grading]

For each class (a course assignment and a number of submissions: solutions, blanks and, for
``02_ldmatrix``, the usual wrong answers), the same submissions are graded ``--rounds`` times by
each code, the two alternating (now, before, before, now, ...) so a slow spell of a shared
machine, and the first grading of a round (which runs slower), fall on both alike. Each grading is a fresh course root; ``PYTHONPATH`` names the checkout
whose ``ptxlab`` every process of it imports (the grader, its workers, the sandboxed kernels
and the launch services). Recorded: wall time, the CPU time of the grading's processes, each
grading step's mean time per submission (the ledger's ``steps_s``: where a change comes from),
and that both codes gave every student the same score.

``--profile`` grades each class once more with the code now under ``py-spy record
--subprocesses`` and counts the samples whose stack is inside the CPU model (``ptxlab/run/ptx``,
``ptxlab/model``): the model's CPU seconds, against the CPU time of the whole grading (the
best run of the code now), is the model's share of grading.

Writes ``VERSIONS.md`` and ``versions.json`` under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_grading import (COURSE_MIX, REPO, _course_notebook, clean_env, cpu_model,  # noqa: E402
                           fixture_course, load_average, scores, write_config)

#: Every other assignment's class: (kind, how many in every 10 students).
PLAIN_MIX = [("solution", 8), ("blank", 2)]
#: py-spy's samples per second of each process.
SPY_RATE = 100
#: Frames of the CPU model in a py-spy stack.
MODEL_FRAME = re.compile(r"ptxlab/(run/ptx|model)/")


def build_class(assignment: str, n: int, base: Path, env: dict[str, str]) -> tuple[Path, dict]:
    """A course root with ``assignment`` generated and ``n`` submissions of it; the mix."""
    root = base / f"{assignment}-template"
    (root / "source").mkdir(parents=True)
    shutil.copytree(REPO / "course" / "source" / assignment, root / "source" / assignment)
    write_config(root)
    done = fixture_course.nbgrader(["generate_assignment", assignment], root, env)
    if done.returncode:
        raise SystemExit(f"nbgrader generate_assignment failed:\n{done.stderr[-3000:]}")
    notebook = f"{assignment}.ipynb"
    released = json.loads((root / "release" / assignment / notebook).read_text())
    source = json.loads((root / "source" / assignment / notebook).read_text())
    solved = fixture_course.answered(released, source)
    mix = COURSE_MIX if assignment == "02_ldmatrix" else PLAIN_MIX
    cycle = [kind for kind, weight in mix for _ in range(weight)]
    roster = [(f"s{i:03d}", cycle[(i * 7) % len(cycle)]) for i in range(n)]
    for student, kind in roster:
        folder = root / "submitted" / student / assignment
        folder.mkdir(parents=True)
        nb = (_course_notebook(kind, released, solved) if mix is COURSE_MIX
              else json.loads(json.dumps(released if kind == "blank" else solved)))
        (folder / notebook).write_text(json.dumps(nb))
        (folder / "timestamp.txt").write_text("2026-11-23 09:00:00.000000 UTC")
    return root, {k: sum(kind == k for _, kind in roster) for k, _ in mix}


def _grade_command(assignment: str, workers: int) -> list[str]:
    return [sys.executable, "-m", "ptxlab.cli", "grade", assignment, "--quiet",
            "--workers", str(workers)]


def grade_once(template: Path, dest: Path, assignment: str, tree: Path, workers: int,
               env: dict[str, str]) -> dict:
    """Grade a fresh copy of ``template`` with the ``ptxlab`` of ``tree``."""
    shutil.copytree(template, dest)
    write_config(dest)
    env = dict(env, PYTHONPATH=str(tree))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    done = subprocess.run(_grade_command(assignment, workers), cwd=dest, env=env,
                          capture_output=True, text=True)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"grading with {tree} failed ({done.returncode}):\n"
                         f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "steps_s": step_means(dest, assignment), "scores": scores(dest, assignment)}


def step_means(course: Path, assignment: str) -> dict[str, float]:
    """Each grading step's mean seconds per submission, from the ledger's ``steps_s`` (the
    worker's clock of one submission: where a change of the grading's time comes from)."""
    totals: Counter[str] = Counter()
    graded = 0
    ledger = course / "grading" / assignment / "ledger.jsonl"
    for line in ledger.read_text().splitlines() if ledger.exists() else []:
        row = json.loads(line)
        if isinstance(row.get("steps_s"), dict):
            graded += 1
            totals.update({k: float(v) for k, v in row["steps_s"].items()})
    return {k: round(v / graded, 4) for k, v in totals.most_common()} if graded else {}


def _step_lines(runs: list[dict]) -> list[str]:
    """Mean seconds per submission of each grading step, now and before, over the rounds."""
    mean: dict[str, dict[str, float]] = {}
    for code in ("now", "before"):
        steps = [r.get("steps_s") or {} for r in runs if r["code"] == code]
        for k in {k for st in steps for k in st}:
            mean.setdefault(k, {})[code] = sum(st.get(k, 0.0) for st in steps) / len(steps)
    if not mean:
        return []
    lines = ["", "Each grading step, mean seconds per submission over the rounds (the "
             "worker's clock of one submission; where workers share the cores, a step's time "
             "includes waiting for one). The CPU model runs in *judge* (the grader's runs "
             "of every kernel answer); the notebook in the sandbox holds only the client.", "",
             "| step | before | now | change (+: faster now) |", "| --- | ---: | ---: | ---: |"]
    for k, v in sorted(mean.items(), key=lambda kv: -kv[1].get("before", 0.0)):
        was, now = v.get("before", 0.0), v.get("now", 0.0)
        change = f"{(was - now) / was:+.0%}" if was else ""
        lines.append(f"| {k} | {was:.3f} s | {now:.3f} s | {change} |")
    return lines


def model_share_of_steps(runs: list[dict], code: str = "before") -> float | None:
    """The CPU model's share of a submission's grading under ``code``: its *judge* step (where
    the model runs every kernel answer) over the sum of all steps, means over the rounds."""
    steps = [r.get("steps_s") or {} for r in runs if r["code"] == code]
    total = sum(sum(st.values()) for st in steps)
    return sum(st.get("judge", 0.0) for st in steps) / total if total else None


def share_lines(runs: list[dict]) -> list[str]:
    """The model's share of grading under the code before, and whether the code now grades
    faster than before by at least that share (best and mean wall time)."""
    share = model_share_of_steps(runs)
    if share is None:
        return []
    now = [r["wall_s"] for r in runs if r["code"] == "now"]
    was = [r["wall_s"] for r in runs if r["code"] == "before"]
    best = (min(was) - min(now)) / min(was)
    mean = (sum(was) / len(was) - sum(now) / len(now)) / (sum(was) / len(was))
    met = "met" if min(best, mean) >= share else "not met"
    return [f"- The CPU model's share of grading under the code before: its *judge* step is "
            f"**{share:.1%}** of the steps' time per submission. Faster than before by at least "
            f"that share: best wall {best:+.1%}, mean {mean:+.1%}: **{met}**.", ""]


def _alive(pid: int) -> bool:
    """Running, not exited (a zombie its parent has not reaped yet counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _stop_when_graded(spying: subprocess.Popen) -> None:
    """py-spy records until every process it sampled is gone, and a process it holds stopped
    while the grader kills it can outlive the grading: once the grader (py-spy's child) has
    exited, give py-spy a few seconds, then ask it to stop (it writes the profile on SIGINT)."""
    children = Path(f"/proc/{spying.pid}/task/{spying.pid}/children")
    grader = None
    while spying.poll() is None and grader is None:
        try:
            pids = children.read_text().split()
        except OSError:
            pids = []
        grader = int(pids[0]) if pids else None
        time.sleep(0.2)
    while grader is not None and spying.poll() is None and _alive(grader):
        time.sleep(0.5)
    try:
        spying.wait(timeout=10)
    except subprocess.TimeoutExpired:
        spying.send_signal(signal.SIGINT)
        spying.wait(timeout=60)


def model_share(template: Path, dest: Path, assignment: str, workers: int, tree: Path,
                env: dict[str, str]) -> dict:
    """Grade once under py-spy; the samples inside the CPU model against all samples."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise SystemExit("--profile needs py-spy (python -m pip install py-spy)")
    shutil.copytree(template, dest)
    write_config(dest)
    raw = dest.parent / f"{dest.name}.spy.txt"
    spying = subprocess.Popen([spy, "record", "--subprocesses", "--format", "raw", "--rate",
                               str(SPY_RATE), "--output", str(raw), "--",
                               *_grade_command(assignment, workers)],
                              cwd=dest, env=dict(env, PYTHONPATH=str(tree)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _stop_when_graded(spying)
    if not raw.exists():
        raise SystemExit(f"py-spy wrote no profile ({spying.returncode}): "
                         f"{(spying.stderr.read() if spying.stderr else '')[-2000:]}")
    by_kind: Counter[str] = Counter()
    total = model = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        if MODEL_FRAME.search(stack):
            model += int(count)
            by_kind[stack.split(";", 1)[0][:80]] += int(count)
    return {"samples": total, "model_samples": model, "model_s": round(model / SPY_RATE, 2),
            "model_by_process": dict(by_kind.most_common(5))}


def grade_classes(classes: list[tuple[str, int]], baseline: Path, now: Path, rounds: int,
                  workers: int, env: dict[str, str], profile: bool = False) -> list[dict]:
    """Each class graded ``rounds`` times by each code, the two alternating: per class its mix,
    every run's wall and CPU time and step means, and whether every student got the same
    score (with ``profile``, the CPU model's share under py-spy too)."""
    entries = []
    with tempfile.TemporaryDirectory(prefix="ptxlab-grading-versions-") as scratch:
        base = Path(scratch)
        for assignment, n in classes:
            template, mix = build_class(assignment, n, base, env)
            runs, seen = [], {}
            for rnd in range(rounds):
                order = [("now", now), ("before", baseline)]
                for code, tree in (order if rnd % 2 == 0 else order[::-1]):
                    got = grade_once(template, base / f"{assignment}-{code}-{rnd}", assignment,
                                     tree, workers, env)
                    seen[code] = got.pop("scores")
                    runs.append({"round": rnd + 1, "code": code, **got})
                    print(f"{assignment} x{n} round {rnd + 1} {code:6s} wall {got['wall_s']:6.1f} s"
                          f"  cpu {got['cpu_s']:6.1f} s", flush=True)
            differ = {s: (seen["before"].get(s), seen["now"].get(s))
                      for s in sorted(set(seen["before"]) | set(seen["now"]))
                      if seen["before"].get(s) != seen["now"].get(s)}
            entry = {"assignment": assignment, "submissions": n, "mix": mix, "runs": runs,
                     "rounds": rounds, "scores_agree": not differ, "score_differences": differ}
            if profile:
                entry["model"] = model_share(template, base / f"{assignment}-profile",
                                             assignment, workers, now, env)
                print(f"{assignment} model {entry['model']['model_s']} s", flush=True)
            entries.append(entry)
    return entries


def class_lines(c: dict, rounds: int) -> list[str]:
    """One class's section: every grading's times, the gain, each step, the CPU model's
    share and the target it sets, and whether the scores agree."""
    lines = [f"## {c['assignment']}, {c['submissions']} submissions, "
             f"{c.get('rounds', rounds)} rounds", "",
             "Class: " + ", ".join(f"{v} {k}" for k, v in c["mix"].items()) + ".", "",
             "| round | code | wall | per submission | CPU |",
             "| ---: | --- | ---: | ---: | ---: |"]
    for r in c["runs"]:
        lines.append(f"| {r['round']} | {r['code']} | {r['wall_s']:.1f} s | "
                     f"{r['wall_s'] / c['submissions']:.3f} s | {r['cpu_s']:.1f} s |")
    lines.append("")
    for key, name in (("wall_s", "wall"), ("cpu_s", "CPU")):
        now = [r[key] for r in c["runs"] if r["code"] == "now"]
        was = [r[key] for r in c["runs"] if r["code"] == "before"]
        best = (min(was) - min(now)) / min(was)
        mean = (sum(was) / len(was) - sum(now) / len(now)) / (sum(was) / len(was))
        lines.append(f"- {name}: best before {min(was):.1f} s, now {min(now):.1f} s "
                     f"(**{best:+.1%}**); mean before {sum(was) / len(was):.1f} s, now "
                     f"{sum(now) / len(now):.1f} s (**{mean:+.1%}**); + is faster now.")
    lines += _step_lines(c["runs"]) + [""]
    lines += share_lines(c["runs"])
    lines.append(f"- Every student the same score under both codes: "
                 f"**{'yes' if c['scores_agree'] else 'NO'}**"
                 + ("" if c["scores_agree"] else f" ({c['score_differences']})") + ".")
    if c.get("model"):
        s = c["model"]
        cpu_now = min(r["cpu_s"] for r in c["runs"] if r["code"] == "now")
        lines.append(f"- The CPU model's share of grading (code now): py-spy found the model "
                     f"on the stack in {s['model_samples']} samples of the grading's "
                     f"processes at {SPY_RATE} a second, {s['model_s']:.2f} s, against "
                     f"{cpu_now:.1f} s of CPU for the whole grading: **at most "
                     f"{s['model_s'] / cpu_now:.1%}** (sampling slows what it samples, so "
                     "this overstates it).")
    lines.append("")
    return lines


def markdown(result: dict) -> str:
    m = result["meta"]
    lines = [f"# `ptxlab grade` on the CPU path: the code now and before ({m['date']})", "",
             f"Machine: {m['machine']}. Command: `{m['command']}`. Before: the code of "
             f"{m['baseline']}." + (f" Now: the code of {m['now']}." if m.get("now") else "")
             + " Each class is graded the same number of times by each code, the "
             "two alternating (the first grading of a round runs slower, so an even number of "
             "rounds lets each code go first as often); *CPU* is the user and system time the "
             "kernel counts for the grading's processes once they are reaped (the grader, its "
             "workers, the sandboxed notebook kernels, the launch services).", ""]
    for c in result["classes"]:
        lines += class_lines(c, m["rounds"])
    return "\n".join(lines)


def _described(tree: Path) -> str:
    """``tree``'s commit and its date, or ``""`` where it is not a git checkout."""
    return subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h %cs"],
                          capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, required=True,
                    help="a checkout of the code before (e.g. a git worktree of an older commit)")
    ap.add_argument("--class", dest="classes", action="append", default=None,
                    help="ASSIGNMENT:N, a class to grade (default 02_ldmatrix:100 and 06_mma:40)")
    ap.add_argument("--now", type=Path, default=REPO,
                    help="the checkout of the code now (default this one; a worktree of it keeps "
                         "edits made while the benchmark runs out of the measurement)")
    ap.add_argument("--rounds", type=int, default=4,
                    help="gradings by each code (even: each code goes first as often)")
    ap.add_argument("--workers", type=int, default=max(1, len(os.sched_getaffinity(0))))
    ap.add_argument("--profile", action="store_true",
                    help="also grade under py-spy and report the CPU model's share")
    ap.add_argument("--out", type=Path, default=REPO / "reports" / "grading")
    ns = ap.parse_args(argv)
    classes = [(a, int(n)) for a, n in (c.split(":") for c in
                                        (ns.classes or ["02_ldmatrix:100", "06_mma:40"]))]
    env = clean_env()
    baseline = ns.baseline.resolve()
    described = _described(baseline)
    result = {"meta": {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cores ({cpu_model()})",
        "command": "python measure/benchmarks/bench_grading_versions.py "
                   + " ".join(argv if argv is not None else sys.argv[1:]),
        "baseline": f"{baseline} ({described or 'not a git checkout'})",
        "now": f"{ns.now.resolve()} ({_described(ns.now.resolve()) or 'not a git checkout'})",
        "rounds": ns.rounds, "workers": ns.workers, "load_before": load_average()}}
    result["classes"] = grade_classes(classes, baseline, ns.now.resolve(), ns.rounds,
                                      ns.workers, env, profile=ns.profile)
    result["meta"]["load_after"] = load_average()
    ns.out.mkdir(parents=True, exist_ok=True)
    (ns.out / "versions.json").write_text(json.dumps(result, indent=1) + "\n")
    (ns.out / "VERSIONS.md").write_text(markdown(result))
    print(f"wrote {ns.out / 'VERSIONS.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
