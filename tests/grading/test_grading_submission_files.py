"""A submission's files are data: links are never followed or written through, a bad timestamp
costs its own student a readable reason and never the class its batch.

Graded with every notebook kernel started on demand (no spare kernels), the case in which a
kernel used to work inside ``autograded/<student>/<assignment>`` itself.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "fixtures" / "grading"))
sys.path.insert(0, str(HERE / "submissions"))

import cases as corpus  # noqa: E402
import course as fixture_course  # noqa: E402

pytest.importorskip("nbgrader")

VICTIM = "s00_victim"


def _relink(target: str):
    """Learner code that replaces its own notebook with a link to ``target`` while it runs."""
    code = ("import os\n"
            "if os.path.lexists('ps1.ipynb'):\n    os.remove('ps1.ipynb')\n"
            f"os.symlink({target!r}, 'ps1.ipynb')\n")
    return corpus.Case("relink", "", mutate=lambda nb: _append(nb, code))


def _append(nb: dict, code: str) -> dict:
    cell = corpus._cell(nb, "address_formula")
    src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    cell["source"] = src + "\n" + code
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = fixture_course.make_course(tmp_path_factory.mktemp("files") / "course")
    env = fixture_course.grading_env(PTXLAB_PRESTART_KERNELS="0", PTXLAB_CELL_TIMEOUT_S="60")
    gen = fixture_course.nbgrader(["generate_assignment", "ps1"], root, env)
    assert gen.returncode == 0, gen.stderr[-3000:]
    good = {c.name: c for c in corpus.CASES}
    course = str(root.resolve())
    corpus.write_submission(root, VICTIM, good["good_a"])
    corpus.write_submission(root, "s01_aims_at_gradebook", _relink(f"{course}/gradebook.db"))
    corpus.write_submission(root, "s02_aims_at_victim",
                            _relink(f"{course}/submitted/{VICTIM}/ps1/ps1.ipynb"))
    linked = corpus.write_submission(root, "s03_link_in_submission", good["good_b"])
    (linked / "notes.txt").symlink_to(root / "source" / "ps1" / "ps1.ipynb")
    bytes_ts = corpus.write_submission(root, "s04_timestamp_bytes", good["good_a"])
    (bytes_ts / "timestamp.txt").write_bytes(b"\xff\xfe2026-11-20")
    corpus.write_submission(root, "s05_timestamp_garbage", good["good_a"], timestamp="next tuesday")
    corpus.write_submission(root, "s06_last", good["good_b"])
    victim_nb = root / "submitted" / VICTIM / "ps1" / "ps1.ipynb"
    before = hashlib.sha256(victim_nb.read_bytes()).hexdigest()
    run = fixture_course.ptxlab_grade(["ps1", "--workers", "1", "--submission-timeout", "300"],
                                      root, env)
    from ptxlab.grading.batch import Ledger
    outcomes = Ledger(root / "grading" / "ps1" / "ledger.jsonl").load()
    return root, run, outcomes, before


def test_the_batch_finishes_with_a_row_for_everyone(graded):
    root, run, outcomes, _ = graded
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(outcomes) == 7, sorted(outcomes)


def test_links_written_by_learner_code_reach_nothing(graded):
    root, run, outcomes, before = graded
    victim_nb = root / "submitted" / VICTIM / "ps1" / "ps1.ipynb"
    assert hashlib.sha256(victim_nb.read_bytes()).hexdigest() == before, "the victim's only copy changed"
    full = outcomes[VICTIM].max_score
    for student in (VICTIM, "s01_aims_at_gradebook", "s02_aims_at_victim", "s06_last"):
        assert outcomes[student].status == "graded", (student, outcomes[student].reason)
        assert outcomes[student].score == outcomes["s06_last"].score, (student, outcomes[student].reason)
        graded_nb = root / "autograded" / student / "ps1" / "ps1.ipynb"
        assert graded_nb.is_file() and not graded_nb.is_symlink()
    assert full and outcomes["s06_last"].score > 0
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", fixture_course.COURSE_ID) as gb:
        assert len(gb.find_assignment("ps1").submissions) == 7


def test_a_link_in_the_submission_is_not_followed(graded):
    root, run, outcomes, _ = graded
    o = outcomes["s03_link_in_submission"]
    assert o.status == "failed" and o.score == 0
    assert "symbolic links (notes.txt)" in o.reason and "submit again" in o.reason
    copied = root / "autograded" / "s03_link_in_submission" / "ps1"
    assert not (copied / "notes.txt").exists(), "the link was followed into autograded/"


@pytest.mark.parametrize("student,says", [
    ("s04_timestamp_bytes", r"timestamp.txt is not text (byte 0xff at position 0)"),
    ("s05_timestamp_garbage", "timestamp.txt holds no date nbgrader can read: 'next tuesday'"),
])
def test_a_bad_timestamp_costs_only_its_student_a_reason(graded, student, says):
    root, run, outcomes, _ = graded
    o = outcomes[student]
    assert o.status == "failed" and o.score == 0 and says in o.reason, o.reason
    assert "collect the submission again" in o.reason


def test_nbgraders_wrapper_gives_way_to_the_cause():
    from ptxlab.grading.grading_worker import _nbgrader_error

    log = ("[AutogradeApp | ERROR] There was an error processing assignment\n"
           "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
           "RuntimeError: Inconsistent checksums for cell test_address_hidden\n"
           "[AutogradeApp | ERROR] Please see the error log\n"
           "nbgrader.apps.baseapp.NbGraderException: Please see the above traceback\n")
    said = _nbgrader_error(log)
    assert "test_address_hidden" in said and "fetch the assignment again" in said, said
    assert "Please see the above traceback" not in said


def test_edited_nbgrader_metadata_is_said_as_such_not_as_the_wrapper():
    """nbgrader reports a notebook whose nbgrader metadata no longer validates with qualified
    exception names only; the row names the cause, not nbgrader's closing wrapper."""
    from ptxlab.grading.grading_worker import _nbgrader_error

    log = ("[ERROR] Traceback (most recent call last):\n"
           "    jsonschema.exceptions.ValidationError: 'database is locked' is not of type "
           "'number'\n"
           "[ERROR] Notebook failed to validate; the nbgrader metadata may be corrupted.\n"
           "    jsonschema.exceptions.ValidationError: Notebook failed to validate; the nbgrader "
           "metadata may be corrupted.\n"
           "[ERROR] Please see the the above traceback for details\n"
           "nbgrader.converters.base.NbGraderException: Please see the the above traceback\n")
    said = _nbgrader_error(log)
    assert "nbgrader metadata was edited" in said and "fetch the assignment again" in said, said
    assert "Please see" not in said


def test_collect_copies_links_as_links(tmp_path):
    """A link in the exchange's inbound folder reaches submitted/ as a link (then refused with a
    reason), not as the course's source notebook it points at."""
    import os

    exchange = tmp_path / "exchange"
    root = fixture_course.make_course(tmp_path / "course", exchange=exchange)
    env = fixture_course.grading_env()
    source_nb = root / "source" / "ps1" / "ps1.ipynb"
    inbound = exchange / fixture_course.COURSE_ID / "inbound"
    sub = inbound / "mallory+ps1+2026-11-20 10:00:00.000000 UTC"
    sub.mkdir(parents=True)
    (sub / "ps1.ipynb").symlink_to(source_nb)
    (sub / "timestamp.txt").write_text("2026-11-20 10:00:00.000000 UTC")
    whole = inbound / "trudy+ps1+2026-11-20 10:00:00.000000 UTC"
    whole.symlink_to(root / "source" / "ps1", target_is_directory=True)
    r = fixture_course.nbgrader(["collect", "ps1", "--CollectApp.check_owner=False"], root, env)
    assert r.returncode == 0, r.stderr[-3000:]
    got = root / "submitted" / "mallory" / "ps1" / "ps1.ipynb"
    assert got.is_symlink() and os.readlink(got) == str(source_nb)
    trudy = root / "submitted" / "trudy" / "ps1"
    assert not (trudy / "ps1.ipynb").exists() and list(trudy.iterdir())[0].is_symlink()
    from ptxlab.grading.submission_files import submission_problems
    assert "symbolic links (ps1.ipynb)" in submission_problems(got.parent)[0]


def test_collect_takes_only_what_the_student_made(tmp_path):
    """A folder in the inbound folder named for another student (a later time, so that stock
    collect takes it over theirs) is not collected; the student's own latest one is."""
    import getpass
    import os
    import pwd

    me = getpass.getuser()
    exchange = tmp_path / "exchange"
    root = fixture_course.make_course(tmp_path / "course", exchange=exchange)
    env = fixture_course.grading_env()
    inbound = exchange / fixture_course.COURSE_ID / "inbound"

    def submit(name: str, when: str, text: str):
        folder = inbound / f"{name}+ps1+2026-11-20 {when}.000000 UTC"
        folder.mkdir(parents=True)
        (folder / "ps1.ipynb").write_text(text)
        (folder / "timestamp.txt").write_text(f"2026-11-20 {when}.000000 UTC")
        return folder

    submit(me, "10:00:00", "my own work")
    submit("bob", "10:00:00", "made by me in bob's name")
    if os.geteuid() == 0:                       # a later one in my name, made by another account
        nobody = pwd.getpwnam("nobody")
        forged = submit(me, "11:00:00", "forged by nobody")
        for path in [forged, *forged.iterdir()]:
            os.lchown(path, nobody.pw_uid, nobody.pw_gid)
    r = fixture_course.nbgrader(["collect", "ps1"], root, env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (root / "submitted" / me / "ps1" / "ps1.ipynb").read_text() == "my own work"
    assert not (root / "submitted" / "bob").exists()
    assert f"claims to be submitted by bob but was made by {me}: not collected" in r.stderr
    if os.geteuid() == 0:
        assert f"claims to be submitted by {me} but was made by nobody" in r.stderr


def test_release_feedback_refuses_links(tmp_path):
    """A feedback folder holding a link (a page, or any file) releases nothing to that student;
    the others' feedback goes out as usual."""
    exchange = tmp_path / "exchange"
    exchange.mkdir(mode=0o777)
    exchange.chmod(0o777)
    root = fixture_course.make_course(tmp_path / "course", exchange=exchange)
    env = fixture_course.grading_env()
    for student, link in (("alice", False), ("mallory", True), ("oscar", False)):
        folder = root / "feedback" / student / "ps1"
        folder.mkdir(parents=True)
        (folder / "timestamp.txt").write_text("2026-11-20 10:00:00.000000 UTC")
        (folder / "submission_secret.txt").write_text(f"secret-{student}")
        if link:
            (folder / "ps1.html").symlink_to(root / "source" / "ps1" / "ps1.ipynb")
        else:
            (folder / "ps1.html").write_text(f"<html>feedback of {student}</html>")
    r = fixture_course.nbgrader(["release_feedback", "ps1"], root, env)
    assert r.returncode == 0, r.stderr[-3000:]
    released = list((exchange / fixture_course.COURSE_ID / "feedback").glob("*.html"))
    texts = sorted(p.read_text() for p in released)
    assert texts == ["<html>feedback of alice</html>", "<html>feedback of oscar</html>"], texts
    assert "holds links" in r.stderr and "mallory" in r.stderr


def test_timestamps_read_as_nbgrader_reads_them_without_importing_it(tmp_path):
    """The batch's head reads every timestamp before its workers start: as nbgrader would, but
    without the seconds importing nbgrader costs."""
    import subprocess
    import sys as _sys

    from nbgrader.utils import parse_utc as nbgrader_parse

    from ptxlab.grading.submission_files import parse_utc
    for text in ("2026-11-23 09:00:00.000000 UTC", "2026-11-23 09:00:00 +0100",
                 "2026-11-23T09:00:00Z", "2026-11-23 09:00:00.5 America/New_York"):
        assert parse_utc(text) == nbgrader_parse(text), text
    sub = tmp_path / "submitted" / "alice" / "ps1"
    sub.mkdir(parents=True)
    (sub / "timestamp.txt").write_text("2026-11-23 09:00:00.000000 UTC")
    code = ("import sys; from ptxlab.grading.batch import discover_submissions; "
            f"print(discover_submissions({str(tmp_path)!r}, 'ps1')); "
            "print('nbgrader' in sys.modules)")
    out = subprocess.run([_sys.executable, "-c", code], capture_output=True, text=True,
                         env=fixture_course.grading_env(), check=True).stdout.split("\n")
    assert "alice" in out[0] and out[1] == "False", out
