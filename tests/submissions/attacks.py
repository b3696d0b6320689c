"""Attacks on the grader: submissions of the course's own ``02_ldmatrix`` that try to raise their
score, lower another student's, read what they must not, or stop the class -- beside honest ones.

Each :class:`Attack` starts from the released notebook (``blank``) or the course's solutions
(``solved``) and changes it the way a student would. ``zero`` names the test cells that must get
no points, ``flagged`` those that must be flagged for a person, ``full`` those that must keep
their points; ``files`` adds files (links included) to the submission folder. Used by
``tests/grading/test_grading_attacks.py`` (the class graded by ``ptxlab grade``) and by
``tools/docs/grading_attacks_table.py`` (the same class under stock ``nbgrader autograde``).
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ASSIGNMENT = "02_ldmatrix"
NOTEBOOK = f"{ASSIGNMENT}.ipynb"
TESTS = ("receive_tests", "side_by_side_rows_tests", "a_operand_rows_tests", "a_fragment_tests",
         "a_operand_kernel_tests", "x2_wrapper_bug_tests")
#: The command line a background process of the corpus runs (found by the test if it outlives).
BACKGROUND_MARK = "987654"


@dataclass
class Attack:
    name: str
    what: str
    base: str = "solved"                                  # solved | blank
    edit: Callable[[dict], dict] | None = None
    zero: tuple[str, ...] = ()
    flagged: tuple[str, ...] = ()
    full: tuple[str, ...] | None = None                   # default: every test not in zero
    files: Callable[[Path, Path], None] | None = None     # (submission folder, course root)
    refused: bool = False                                 # the submission is not graded at all
    reason: str = ""                                      # regex the student's reason must match

    @property
    def good(self) -> bool:
        return self.name.startswith("good")

    def must_keep(self) -> tuple[str, ...]:
        if self.full is not None:
            return self.full
        return tuple(t for t in TESTS if t not in self.zero and t not in self.flagged)


def _cell(nb: dict, grade_id: str) -> dict:
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            return cell
    raise KeyError(grade_id)


def _code_cell(source: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": source}


def _after_imports(source: str) -> Callable[[dict], dict]:
    """A new cell right after the notebook's import cell."""
    def edit(nb: dict) -> dict:
        index = next(i for i, c in enumerate(nb["cells"])
                     if c["cell_type"] == "code" and "import ldmatrix as ex" in _text(c))
        nb["cells"].insert(index + 1, _code_cell(source))
        return nb
    return edit


def _at_end(source: str) -> Callable[[dict], dict]:
    def edit(nb: dict) -> dict:
        nb["cells"].append(_code_cell(source))
        return nb
    return edit


def _answer(grade_id: str, source: str) -> Callable[[dict], dict]:
    def edit(nb: dict) -> dict:
        _cell(nb, grade_id)["source"] = source
        return nb
    return edit


def _text(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _both(*edits: Callable[[dict], dict]) -> Callable[[dict], dict]:
    def edit(nb: dict) -> dict:
        for e in edits:
            nb = e(nb)
        return nb
    return edit


def _lookup_table_kernel() -> str:
    """A kernel with the visible case's registers written in: no ldmatrix, no input read."""
    from ptxlab.teach.exercises.ldmatrix import a_operand_expected

    table = ", ".join(str(int(v)) for v in np.asarray(a_operand_expected(16)).ravel())
    return ('A_KERNEL = r"""\n'
            'extern "C" __global__ void load_a_operand(const unsigned short* a, int sld, '
            'unsigned* out)\n{\n'
            f'    const unsigned table[128] = {{{table}}};\n'
            '    const unsigned lane = threadIdx.x % 32;\n'
            '    for (int k = 0; k < 4; ++k) out[lane * 4 + k] = table[lane * 4 + k];\n'
            '}\n"""\nex.a_operand_kernel.check(A_KERNEL);\n')


def _solution_kernel_with(line: str) -> Callable[[dict], dict]:
    def edit(nb: dict) -> dict:
        cell = _cell(nb, "a_operand_kernel")
        cell["source"] = _text(cell).replace('A_KERNEL = r"""\n', f'A_KERNEL = r"""\n{line}\n', 1)
        return nb
    return edit


def _link(name: str, target: Callable[[Path, Path], Path]) -> Callable[[Path, Path], None]:
    def add(folder: Path, root: Path) -> None:
        path = folder / name
        if path.exists() or path.is_symlink():
            path.unlink()
        os.symlink(target(folder, root), path)
    return add


#: What a sandboxed notebook must not find: the course root's own files (the grader works in
#: it), the sandbox's options on its first process's command line (bwrap is PID 1 there), and
#: the machine's /etc beyond what a kernel reads (its accounts, keys, host names).
_LOOK_AROUND = """import os
found = []
for path in ['@ROOT@/nbgrader_config.py', '/etc/shadow', '/etc/ssl', '/etc/ssh',
             '/etc/crontab', '/etc/jupyter']:
    if os.path.exists(path):
        found.append(path)
words = open('/proc/1/cmdline', 'rb').read().split(b'\\0')
if any(w.startswith(b'--') and w not in (b'--', b'--args') for w in words[:words.index(b'--')]):
    found.append('options of /proc/1/cmdline')
if len(open('/etc/passwd').read().splitlines()) != 1:
    found.append("the machine's accounts")
print('LOOKED AROUND', len(found), found)
"""
#: A stop note that passes the notebook's own end off as the machine's, then the kernel killed.
_FORGED_NOTE = """import os, signal
note = os.path.join(os.path.dirname(__import__('ipykernel').get_connection_file()),
                    'kernel-stopped.txt')
with open(note, 'w') as fh:
    fh.write('not graded (infrastructure): the grading machine ran out of disk space')
os.kill(os.getpid(), signal.SIGKILL)
"""


def _bad_timestamp(folder: Path, root: Path) -> None:
    (folder / "timestamp.txt").write_bytes(b"\xff\xfe\x00garbage")


ATTACKS: list[Attack] = [
    # -- the checker, patched three ways, and the cells that call it ---------------------------
    Attack("patch_grade_method", "Exercise.grade replaced by a function that passes everything",
           base="blank", edit=_after_imports(
               "import ptxlab.exercises.base as b\n"
               "b.Exercise.grade = lambda self, answer, hidden=False: None\n"),
           zero=TESTS),
    Attack("patch_evaluate", "every exercise's evaluate() made to return a passing result",
           base="blank", edit=_after_imports(
               "from ptxlab.checks import CheckResult\n"
               "for _e in vars(ex).values():\n"
               "    if hasattr(_e, 'evaluate'):\n"
               "        type(_e).evaluate = lambda self, a, hidden=False: "
               "CheckResult('x', True, 1.0, 'ok')\n"),
           zero=TESTS),
    Attack("rebind_ex", "the exercise object `ex` rebound to an object that accepts anything",
           base="blank", edit=_after_imports(
               "class _Anything:\n"
               "    def __getattr__(self, name):\n"
               "        return self\n"
               "    def __call__(self, *args, **kwargs):\n"
               "        return None\n"
               "ex = _Anything()\n"),
           zero=TESTS),
    Attack("input_transformer", "an IPython input transformer that blanks every test cell",
           base="blank", edit=_after_imports(
               "get_ipython().input_transformers_cleanup.append(\n"
               "    lambda lines: [] if any('.grade(' in l for l in lines) else lines)\n"),
           zero=TESTS),
    Attack("patch_numpy", "numpy's comparisons made to say 'equal' to everything",
           base="blank", edit=_after_imports(
               "np.array_equal = lambda *a, **k: True\n"
               "np.all = lambda *a, **k: True\n"),
           zero=TESTS),
    Attack("forged_answers", "the answers display forged by the notebook itself",
           base="blank", edit=_at_end(
               "from IPython.display import display\n"
               "display({'application/x-ptxlab-answers+json': "
               "{'seed': 1, 'answers': {}}}, raw=True)\n"),
           zero=TESTS),
    # -- the course's reference as the answer --------------------------------------------------
    Attack("reference_layouts", "`receive` answered by the course's layout tables",
           edit=_answer("receive", "def receive(lane, reg, half):\n"
                                   "    return layouts.ldmatrix_fragment(4).element(lane, reg, half)\n"
                                   "ex.receive.check(receive);\n"),
           flagged=("receive_tests",)),
    Attack("reference_expectations", "`a_operand_rows` answered from the exercise's own cases",
           edit=_answer("a_operand_rows",
                        "def a_operand_rows(lane, base, stride):\n"
                        "    task = ex.a_operand_rows.visible()[0]\n"
                        "    return int(task.placement.expected_addresses(\n"
                        "        task.placement.tile(base, stride))[lane])\n"
                        "ex.a_operand_rows.check(a_operand_rows);\n"),
           flagged=("a_operand_rows_tests",)),
    Attack("reference_hidden_import", "`a_fragment` through an import spelled at run time",
           edit=_answer("a_fragment",
                        "def a_fragment(lane, reg, half):\n"
                        "    lay = __import__('ptx' + 'lab').layouts\n"
                        "    m, r, c = lay.mma_form('m16n8k16', 'f16', 'f16', 'f32', 'f32')"
                        ".a.element(lane, reg, half)\n"
                        "    return r, c\n"
                        "ex.a_fragment.check(a_fragment);\n"),
           flagged=("a_fragment_tests",)),
    Attack("lookup_table_kernel", "a kernel that writes the visible case's registers from a table",
           edit=_answer("a_operand_kernel", _lookup_table_kernel()),
           zero=("a_operand_kernel_tests",)),
    Attack("include_reference_kernel", "a kernel that includes the course's reference kernel",
           edit=_solution_kernel_with('#include "reference/ldmatrix_ref.cu"'),
           flagged=("a_operand_kernel_tests",)),
    # -- other students, the gradebook, the solutions ------------------------------------------
    Attack("write_through_to_gradebook", "the notebook replaces itself with a link to the "
           "gradebook while it runs (the first submission of a worker)",
           edit=_at_end("import os\n"
                        "os.remove('02_ldmatrix.ipynb')\n"
                        "os.symlink('../../../gradebook.db', '02_ldmatrix.ipynb')\n"
                        "open('../../../gradebook.db', 'wb').write(b'garbage')\n"),
           flagged=()),
    Attack("link_to_neighbour", "the submitted notebook is a link to another student's",
           files=_link(NOTEBOOK, lambda folder, root: root / "submitted" / "good_solution" /
                       ASSIGNMENT / NOTEBOOK),
           zero=TESTS, refused=True, reason="link"),
    Attack("link_to_solutions", "a file of the submission that is a link to the instructor's "
           "source notebook (copied beside the notebook, it can be printed into the feedback)",
           files=_link("notes.txt", lambda folder, root: root / "source" / ASSIGNMENT / NOTEBOOK),
           zero=TESTS, refused=True, reason="link"),
    Attack("read_solutions", "the notebook reads the source notebook, the gradebook and the "
           "other submissions by their absolute paths",
           edit=_at_end("found = []\n"
                        "for path in ['@ROOT@/source/02_ldmatrix/02_ldmatrix.ipynb',\n"
                        "             '@ROOT@/gradebook.db',\n"
                        "             '@ROOT@/submitted/good_solution/02_ldmatrix/02_ldmatrix.ipynb',\n"
                        "             '@ROOT@/release/02_ldmatrix/02_ldmatrix.ipynb']:\n"
                        "    try:\n"
                        "        found.append(len(open(path, 'rb').read()))\n"
                        "    except OSError:\n"
                        "        pass\n"
                        "print('LEAKED', len(found))\n")),
    Attack("look_around", "the notebook looks for the course root's files, the sandbox's "
           "options on its first process's command line, and the machine's /etc",
           edit=_at_end(_LOOK_AROUND)),
    Attack("forged_stop_note", "the kernel's stop note says the machine failed, then the "
           "kernel is killed", edit=_at_end(_FORGED_NOTE), reason="notebook's own words"),
    # -- faults of one student that must stay theirs --------------------------------------------
    Attack("bad_timestamp", "timestamp.txt holds bytes that are not text",
           files=lambda folder, root: _bad_timestamp(folder, root),
           zero=TESTS, refused=True, reason="timestamp"),
    Attack("edited_test_cells", "every test cell rewritten to print 'passed'",
           base="blank", edit=lambda nb: _edit_tests(nb, "print('passed')\n"),
           zero=TESTS),
    Attack("tmp_fill", "fills the sandbox's /tmp (a folder under the kernel's disk quota) "
           "past the quota",
           edit=_at_end("chunk = b'x' * (50 << 20)\n"
                        "for n in range(8):       # files under the file-size limit, 1.6 GB in all\n"
                        "    with open(f'/tmp/fill{n}', 'wb') as f:\n"
                        "        for _ in range(4):\n"
                        "            f.write(chunk)\n"),
           full=(), reason="memory|died|space|stopped|disk quota"),
    Attack("huge_images", "output of a few huge images (the graded notebook must stay small)",
           edit=_at_end("from IPython.display import display\n"
                        "import base64\n"
                        "for _ in range(4):\n"
                        "    display({'image/png': base64.b64encode(bytes(8 << 20)).decode()},"
                        " raw=True)\n")),
    Attack("background_process", "starts a process meant to outlive the notebook",
           edit=_at_end("import subprocess\n"
                        f"subprocess.Popen(['sleep', '{BACKGROUND_MARK}'], start_new_session=True)\n")),
    # -- honest work ---------------------------------------------------------------------------
    Attack("good_solution", "the course's solutions"),
    Attack("good_own_words", "right answers written differently, with a widget cell added",
           edit=_both(
               _answer("receive", "def receive(lane, reg, half):\n"
                                  "    return reg, lane >> 2, ((lane & 3) << 1) | half\n"
                                  "ex.receive.check(receive);\n"),
               _after_imports("widgets.FragmentMap(num=4, lane=3)\n"))),
    Attack("good_blank", "the notebook as released, nothing answered", base="blank",
           zero=TESTS),
    # -- honest students whose ids a careless grader would mangle ---------------------------------
    Attack("good_jos\u00e9", "the course's solutions, an id with a precomposed accent (NFC)"),
    Attack("good_jose\u0301", "the course's solutions, the same id decomposed (NFD)"),
    Attack("good_\u674e\u96f7", "the course's solutions, an id in Chinese characters"),
    Attack("good_o'brien", "the course's solutions, an id with an apostrophe"),
    Attack("good_ann-marie", "the course's solutions, an id with a hyphen"),
    Attack("good_x y", "the course's solutions, an id with a space"),
]


def _edit_tests(nb: dict, source: str) -> dict:
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            cell["source"] = source
    return nb


def notebooks(course_root: Path) -> tuple[dict, dict]:
    """``(released, solved)`` notebooks of the assignment in a course whose release exists."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "grading"))
    import course as fixture_course

    released = json.loads((course_root / "release" / ASSIGNMENT / NOTEBOOK).read_text())
    source = json.loads((course_root / "source" / ASSIGNMENT / NOTEBOOK).read_text())
    return released, fixture_course.answered(released, source)


def write_class(course_root: Path, attacks: list[Attack] = ATTACKS,
                timestamp: str = "2026-11-23 09:00:00.000000 UTC") -> list[str]:
    """Write one submission per attack (the student is named after it); returns the students.
    Links are made after every notebook exists, so they point at real files."""
    released, solved = notebooks(course_root)
    students = []
    for attack in attacks:
        nb = json.loads(json.dumps(solved if attack.base == "solved" else released))
        if attack.edit is not None:
            nb = attack.edit(nb)
        folder = course_root / "submitted" / attack.name / ASSIGNMENT
        folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps(nb).replace("@ROOT@", str(Path(course_root).resolve()))
        (folder / NOTEBOOK).write_text(text)
        (folder / "timestamp.txt").write_text(timestamp)
        students.append(attack.name)
    for attack in attacks:
        if attack.files is not None:
            attack.files(course_root / "submitted" / attack.name / ASSIGNMENT, course_root)
    return students


def gradebook_grades(root: Path, student: str) -> dict[str, tuple[float, float, bool]]:
    """``{test id: (score, max score, needs manual grade)}`` of ``student``'s graded notebook,
    read from the course's gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(NOTEBOOK[:-6], ASSIGNMENT, student)
        return {g.name: (float(g.score or 0), float(g.max_score), bool(g.needs_manual_grade))
                for g in nb.grades}


def assert_scores(attack: "Attack", grades: dict, reason: str) -> None:
    """What the attack aimed at scores 0 (and is flagged where it should be), what it did not
    touch keeps full marks; ``reason`` is the student's row, shown when it does not hold."""
    for test in attack.zero:
        assert grades[test][0] == 0, (test, grades[test], reason)
    for test in attack.flagged:
        score, _, manual = grades[test]
        assert score == 0 and manual, (test, grades[test])
        assert "flagged for manual grading" in reason, reason
    for test in attack.must_keep():
        score, max_score, _ = grades[test]
        assert score == max_score, (test, grades[test], reason)
