"""``ptxlab grade ASSIGNMENT``: autograde every collected submission, in parallel, resumably.

Run it in the course root (or pass ``--course``). It grades what is not graded yet with
``--workers`` processes (default: one more than the cores available), shows a progress bar, and writes
``grading/<assignment>/grades.csv``, ``summary.md`` and ``scores.png``. Interrupt it at any time:
the next run continues where it stopped. Before anyone is graded, a preflight starts one
sandboxed kernel and one kernel launch as grading will (:mod:`ptxlab.grading.preflight`).
With ``--scheduler ADDRESS`` the submissions are graded on a Dask cluster's workers, each of
which runs that preflight itself (:mod:`ptxlab.grading.dask_pool`); ``--workers`` then does not
apply.
"""
from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable
from pathlib import Path

from ..grading.batch import BatchBusy, GraderDiskFull, grade_batch
from ..grading.options import BatchOptions, BatchResult, default_workers
from ..grading.preflight import run_preflight
from ..grading.report import flagged_students, write_csv, write_plot, write_summary

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("assignment", help="assignment id (a folder of source/ and submitted/<student>/)")
    parser.add_argument("--course", type=Path, default=Path("."),
                        help="course root holding nbgrader_config.py (default: this folder)")
    parser.add_argument("--workers", type=int, default=default_workers(),
                        help=f"parallel grading processes (default: one more than the cores "
                             f"available, {default_workers()})")
    parser.add_argument("--student", action="append", dest="students", metavar="ID",
                        help="grade only this student (repeatable)")
    parser.add_argument("--force", action="store_true",
                        help="regrade students that are already graded")
    parser.add_argument("--retry-failed", action="store_true",
                        help="regrade students whose last attempt timed out or crashed")
    parser.add_argument("--submission-timeout", type=float, default=1800.0, metavar="SECONDS",
                        help="what one notebook's cells may take together; past it the "
                             "running cell is interrupted and the answers that ran before it "
                             "are graded (default 1800)")
    parser.add_argument("--grading-config", type=Path, default=None,
                        help="grading settings loaded before the course's nbgrader_config.py "
                             "(default: autograder/nbgrader_config.py)")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="grade on the workers of this Dask scheduler (tcp://HOST:8786) "
                             "instead of on this machine; this machine keeps the gradebook, the "
                             "ledger and the reports (autograder/README.md, 'Grading on several "
                             "machines')")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--no-preflight", action="store_true",
                        help="skip the check that starts one sandboxed kernel and one kernel "
                             "launch before anyone is graded")


class PreflightFailed(RuntimeError):
    """The grading kernel or its probe launch did not work: nobody is graded."""


def run(args: argparse.Namespace) -> int:
    course = args.course.resolve()
    if not (course / "nbgrader_config.py").exists() and not (course / "source").is_dir():
        print(f"{course} does not look like an nbgrader course root (no nbgrader_config.py, "
              "no source/); pass --course", file=sys.stderr)
        return 2
    if args.workers < 1:
        print(f"--workers must be at least 1, got {args.workers}", file=sys.stderr)
        return 2
    preflight = _preflight_step(course, args)
    opts = BatchOptions(course_root=course, assignment=args.assignment, workers=args.workers,
                        force=args.force, retry_failed=args.retry_failed,
                        submission_timeout_s=args.submission_timeout,
                        grading_config=args.grading_config, students=args.students,
                        progress=None if args.quiet else sys.stderr,
                        before_grading=None if args.no_preflight or args.scheduler else preflight,
                        scheduler=args.scheduler, preflight=not args.no_preflight)
    result, code = _grade_all(opts, args)
    if code is not None:
        return code
    if not result.outcomes:
        print(f"no collected submissions of {args.assignment!r} under {course / 'submitted'} "
              "(run 'nbgrader collect' first)", file=sys.stderr)
        return 1
    if not _write_reports(result, opts, args):
        return 3
    if result.interrupted:
        print("interrupted: run the same command again to grade the rest", file=sys.stderr)
        return 130
    return 0


def _preflight_step(course: Path, args: argparse.Namespace) -> Callable[[], None]:
    """The check the batch runs while its workers start (so it costs no wall time of its own);
    raises :class:`PreflightFailed` so that nobody is graded by a grader that cannot grade."""
    def preflight() -> None:
        """While the workers start: one sandboxed kernel and one launch, as grading does."""
        check = run_preflight(course, args.grading_config, assignment=args.assignment,
                              workers=args.workers)
        if not check.ok:
            raise PreflightFailed(check.problem)
        how = " through the warm launch service" if check.route == "service" else ""
        print(f"preflight: a grading kernel started and ran a probe launch on {check.where}"
              f"{how} in {check.seconds:.1f} s", file=sys.stderr)
        for line in check.limits.splitlines():
            print(f"preflight: {line}", file=sys.stderr)
        if check.warning:
            print(f"preflight warning: {check.warning}", file=sys.stderr)

    return preflight


def _grade_all(opts: BatchOptions, args: argparse.Namespace) -> tuple[BatchResult | None, int | None]:
    """``(the batch's result, None)``, or ``(None, exit status)`` where grading could not start or
    go on: the operator reads one line of why, never a traceback, for what they can fix."""
    try:
        return grade_batch(opts), None
    except PreflightFailed as exc:
        print(f"ptxlab grade: nobody was graded. Preflight: {exc}", file=sys.stderr)
        return None, 2
    except (ValueError, BatchBusy) as exc:
        print(f"ptxlab grade: {exc}", file=sys.stderr)
        return None, 2
    except GraderDiskFull as exc:
        print(f"ptxlab grade: {exc.strerror}", file=sys.stderr)
        return None, 3
    except ImportError as exc:
        if args.scheduler and exc.name and exc.name.split(".")[0] == "distributed":
            print("ptxlab grade: --scheduler needs Dask's distributed package on this machine "
                  "and on every worker: pip install 'ptxlab[cluster]'", file=sys.stderr)
            return None, 2
        raise
    except OSError as exc:
        if args.scheduler:
            print(f"ptxlab grade: cannot reach the Dask scheduler {args.scheduler}: {exc}",
                  file=sys.stderr)
            return None, 2
        raise


def _write_reports(result: BatchResult, opts: BatchOptions, args: argparse.Namespace) -> bool:
    """Write the CSV, plot and summary and say what they hold (and who still needs a person
    or another run); ``False`` where the disk was full: the grades are safe in the gradebook
    and the ledger, so the same command writes the reports later."""
    out = opts.out_dir
    try:
        csv_path = write_csv(result.outcomes, out / "grades.csv")
        plot = write_plot(result.outcomes, out / "scores.png", f"{args.assignment}: scores")
        summary = write_summary(result.outcomes, out / "summary.md", assignment=args.assignment,
                                wall_s=result.wall_s, workers=opts.workers, plot=plot,
                                graded_on=f"on the Dask cluster {args.scheduler}" if args.scheduler else None)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        print(f"ptxlab grade: the disk holding {out} is full: the grades are in the gradebook "
              "and the ledger, but the reports could not be written. Free some space and run "
              "the same command again: it writes them", file=sys.stderr)
        return False
    print(f"graded {result.graded_now} now, {result.skipped} already graded; "
          f"{len(result.outcomes)} students in {csv_path} and {summary}"
          + (f" ({plot.name})" if plot else ""))
    flagged = flagged_students(result.outcomes)
    if flagged:
        print(f"{len(flagged)} flagged for a person ({', '.join(flagged[:10])}"
              f"{' ...' if len(flagged) > 10 else ''}): their reasons are in the summary; grade "
              "them in the formgrader's Manual Grading")
    not_graded = [o.student for o in result.outcomes if not o.counted]
    if not_graded:
        print(f"{len(not_graded)} not graded because the machine failed, not the submission "
              f"({', '.join(not_graded[:10])}{' ...' if len(not_graded) > 10 else ''}): no score "
              "was written for them; run the same command again to grade them", file=sys.stderr)
    return True
