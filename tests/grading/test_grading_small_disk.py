"""Disk sized to the disk, end to end: the grader's scratch space on a 400 MB file system (the
sandboxes' /tmp and /dev/shm live there) and the default 512 MiB quota per submission. One
submission writes until something stops it; the good students graded beside it keep full marks
and none is left "not graded" or "failed" for the machine's full disk.

Needs root (it mounts a sized tmpfs for the scratch space) and the grading sandbox.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "fixtures" / "grading"))
sys.path.insert(0, str(HERE / "submissions"))

import attacks  # noqa: E402
import course as fixture_course  # noqa: E402
from attacks import ASSIGNMENT, TESTS, Attack, _at_end  # noqa: E402

pytest.importorskip("nbgrader")

_FILL_TMP = ("chunk = b'x' * (8 << 20)\n"
             "for n in range(100):      # 800 MiB into /tmp, twice the file system\n"
             "    with open(f'/tmp/fill{n}.bin', 'wb') as f:\n"
             "        f.write(chunk)\n"
             "print('NOT STOPPED', flush=True)\n")
CLASS = [
    Attack("d01_fill_tmp", "800 MiB written into the sandbox's /tmp, on a 400 MB scratch disk",
           edit=_at_end(_FILL_TMP), full=(), reason="Disk quota exceeded"),
    *[Attack(f"d0{i}_good", "the course's solutions, graded beside it") for i in range(2, 6)],
]


@pytest.fixture(scope="module")
def small_scratch(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("mounting a sized scratch file system needs root")
    folder = tmp_path_factory.mktemp("scratch400")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400m,mode=1777", "tmpfs",
                              str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.fixture(scope="module")
def graded(small_scratch, tmp_path_factory):
    env = fixture_course.grading_env(PTXLAB_CELL_TIMEOUT_S="60", TMPDIR=str(small_scratch))
    env.pop("PTXLAB_KERNEL_DISK_MB", None)              # the default 512 MiB
    root = fixture_course.released_course(tmp_path_factory.mktemp("small_disk") / "course",
                                          ASSIGNMENT, env)
    attacks.write_class(root, CLASS)
    run, rows = fixture_course.grade_class(root, ASSIGNMENT, env)
    return {"root": root, "rows": rows, "stderr": run.stderr}


def test_the_quota_is_sized_to_the_scratch_disk_and_said(graded):
    line = next(ln for ln in graded["stderr"].splitlines() if "disk: each submission" in ln)
    assert "would promise more than" in line and "shared by 2 workers" in line, line


def test_the_filler_is_stopped_at_its_quota(graded):
    row = graded["rows"]["d01_fill_tmp"]
    assert row["status"] == "graded", row
    assert "Disk quota exceeded" in row["reason"], row["reason"]


@pytest.mark.parametrize("student", [a.name for a in CLASS[1:]])
def test_every_good_student_beside_it_keeps_full_marks(graded, student):
    row = graded["rows"][student]
    assert row["status"] == "graded", row
    grades = attacks.gradebook_grades(graded["root"], student)
    for test in TESTS:
        score, max_score, _ = grades[test]
        assert score == max_score, (test, grades[test], row["reason"])
