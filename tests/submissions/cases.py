"""The bad-submission corpus: each case is the fixture assignment's solution notebook with one
thing broken the way students (or a curious one) break it, plus what grading must say about it.

A case is materialised as ``submitted/<student>/ps1/ps1.ipynb`` (and ``timestamp.txt``) of a
temporary course by :func:`write_submission`. ``expect`` says which tests must pass
(``passes``), and for the others a regular expression the reason must match (``reasons``);
``status`` is what the batch runner reports. Kernel cases depend on a kernel backend (the GPU
or the CPU model); where none is installed their reason is the backend's own "cannot run" line.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "grading" / "source" / "ps1" / "ps1.ipynb"
TESTS = {"test_address_visible": 2.0, "test_address_hidden": 3.0, "test_kernel": 5.0}
ADDRESS_TESTS = ("test_address_visible", "test_address_hidden")

GOOD_FORMULA = ("def ldmatrix_x4_address(lane, row_stride_bytes):\n"
                "    matrix, row = divmod(lane, 8)\n"
                "    return (8 * (matrix % 2) + row) * row_stride_bytes + 16 * (matrix // 2)\n")


@dataclass
class Case:
    name: str
    what: str                                   # one line for the corpus README/test ids
    mutate: Callable[[dict], dict | bytes] | None = None
    passes: tuple[str, ...] = tuple(TESTS)      # tests that must get full points
    reasons: dict[str, str] = field(default_factory=dict)   # grade_id -> regex of the reason
    status: str = "graded"
    kernel: bool = False                        # reasons that need a kernel backend
    submission_reason: str | None = None        # regex for a submission nbgrader cannot grade
    backend_named: bool = True                  # the row names where test_kernel's kernel ran

    @property
    def good(self) -> bool:
        return self.name.startswith("good")


def _cell(nb: dict, grade_id: str) -> dict:
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            return cell
    raise KeyError(grade_id)


def _set_source(grade_id: str, text: str) -> Callable[[dict], dict]:
    def mutate(nb: dict) -> dict:
        _cell(nb, grade_id)["source"] = text
        return nb
    return mutate


def _formula(body: str) -> Callable[[dict], dict]:
    return _set_source("address_formula", body)


def _kernel_edit(old: str, new: str) -> Callable[[dict], dict]:
    def mutate(nb: dict) -> dict:
        cell = _cell(nb, "kernel_source")
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        assert old in src, f"fixture kernel no longer contains {old!r}"
        cell["source"] = src.replace(old, new)
        return nb
    return mutate


def _delete_cell(grade_id: str) -> Callable[[dict], dict]:
    def mutate(nb: dict) -> dict:
        nb["cells"] = [c for c in nb["cells"]
                       if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") != grade_id]
        return nb
    return mutate


def _copy_cells(*grade_ids: str) -> Callable[[dict], dict]:
    """Each cell pasted again right below itself, nbgrader metadata and all (as Jupyter copies)."""
    def mutate(nb: dict) -> dict:
        for grade_id in grade_ids:
            at = nb["cells"].index(_cell(nb, grade_id))
            copy = json.loads(json.dumps(nb["cells"][at]))
            copy.pop("id", None)
            nb["cells"].insert(at + 1, copy)
        return nb
    return mutate


def _append_to_formula(code: str) -> Callable[[dict], dict]:
    return _formula(GOOD_FORMULA + code)


_SNOOP = r'''
import os, sqlite3
from pathlib import Path
root = Path("__COURSE_ROOT__")  # the real course root, written in by write_submission
def list_course_root():
    seen = set(os.listdir(root)) & {"source", "submitted", "release", "gradebook.db"}
    if not seen:
        raise FileNotFoundError("the course root shows nothing of the course")
    return seen

attempts = {
    "read solution": lambda: (root / "source" / "ps1" / "ps1.ipynb").read_text()[:50],
    "list course root": list_course_root,
    "read other submission": lambda: next((root / "submitted").glob("*/ps1/ps1.ipynb")).read_text()[:50],
    "read other graded notebook": lambda: next((root / "autograded").glob("*/ps1/ps1.ipynb")).read_text()[:50],
    "read gradebook": lambda: (root / "gradebook.db").read_bytes()[:16],
    "write gradebook": lambda: sqlite3.connect(root / "gradebook.db").execute(
        "UPDATE grade SET auto_score = 100").connection.commit(),
    "read exchange": lambda: os.listdir("/srv/nbgrader/exchange"),
}
LEAKED = []
for what, attempt in attempts.items():
    try:
        attempt()
        LEAKED.append(what)
        print("SNOOP OK", what)
    except Exception as exc:
        print("SNOOP BLOCKED", what, type(exc).__name__)

def ldmatrix_x4_address(lane, row_stride_bytes):
    # Full marks only if something leaked: the corpus test requires zero.
    if not LEAKED:
        return -1
    matrix, row = divmod(lane, 8)
    return (8 * (matrix % 2) + row) * row_stride_bytes + 16 * (matrix // 2)
'''

_KERNEL_ADDR = "unsigned addr = base + (8 * (matrix % 2) + row) * 32 + 16 * (matrix / 2);"


def _replace_launch_log(make: str) -> Callable[[dict], dict]:
    """The answer cell swaps the launch log the grader reads after each cell (the notebook's
    sandbox can write it) for something else, which ``make`` builds at ``log``."""
    return _append_to_formula("import os\n"
                              "log = os.environ.get('PTXLAB_LAUNCH_LOG', '')\n"
                              "if log:\n"
                              "    if os.path.lexists(log):\n"
                              "        os.remove(log)\n"
                              f"    {make}\n")


#: What the grader says of a launch log that is not a plain file of its own size.
_LOG_REFUSED = r"launch log .*not read any more"

CASES: list[Case] = [
    Case("good_a", "the reference solution"),
    Case("good_b", "a correct formula written differently", _formula(GOOD_FORMULA)),
    Case("good_c", "correct, with bit operations",
         _formula("def ldmatrix_x4_address(lane, row_stride_bytes):\n"
                  "    return ((lane & 7) + ((lane >> 3) & 1) * 8) * row_stride_bytes + (lane >> 4) * 16\n")),
    Case("bad_deleted_test_cell", "the hidden test cell deleted", _delete_cell("test_address_hidden"),
         passes=("test_address_visible", "test_kernel"),
         reasons={"test_address_hidden": r"missing|did not pass|not run"}),
    Case("bad_edited_test_cell", "the visible test replaced by 'pass' (nbgrader restores it)",
         _set_source("test_address_visible", "pass  # tests are for other people")),
    Case("bad_edited_hidden_points", "test cell metadata edited to 100 points (restored)",
         lambda nb: (_cell(nb, "test_address_hidden")["metadata"]["nbgrader"].update(points=100), nb)[1]),
    Case("bad_renamed_function", "the function renamed",
         _formula(GOOD_FORMULA.replace("ldmatrix_x4_address", "ldm_address")),
         passes=("test_kernel",), reasons={t: r"NameError.*ldmatrix_x4_address" for t in ADDRESS_TESTS}),
    Case("bad_syntax_error", "a syntax error in the answer cell",
         _formula("def ldmatrix_x4_address(lane, row_stride_bytes)\n    return lane * 16\n"),
         passes=("test_kernel",), reasons={t: r"NameError" for t in ADDRESS_TESTS}),
    Case("bad_returns_float", "returns a float",
         _formula("def ldmatrix_x4_address(lane, row_stride_bytes):\n    return float(lane * row_stride_bytes)\n"),
         passes=("test_kernel",), reasons={t: r"lane 0: got 0\.0 \(float\)" for t in ADDRESS_TESTS}),
    Case("bad_returns_negative", "returns negative addresses",
         _formula("def ldmatrix_x4_address(lane, row_stride_bytes):\n    return -16 * lane - 1\n"),
         passes=("test_kernel",), reasons={t: r"negative address" for t in ADDRESS_TESTS}),
    Case("bad_returns_nan", "returns NaN",
         _formula("def ldmatrix_x4_address(lane, row_stride_bytes):\n    return float('nan')\n"),
         passes=("test_kernel",), reasons={t: r"NaN" for t in ADDRESS_TESTS}),
    Case("bad_wrong_length", "returns a list of addresses instead of one",
         _formula("def ldmatrix_x4_address(lane, row_stride_bytes):\n    return [lane * 16] * 2\n"),
         passes=("test_kernel",), reasons={t: r"\(list\), expected an int" for t in ADDRESS_TESTS}),
    Case("bad_raises", "raises an exception",
         _formula("def ldmatrix_x4_address(lane, row_stride_bytes):\n    raise ValueError('no idea')\n"),
         passes=("test_kernel",), reasons={t: r"raised ValueError: no idea" for t in ADDRESS_TESTS}),
    Case("bad_wrong_formula", "matrices 1 and 2 swapped",
         _formula("def ldmatrix_x4_address(lane, row_stride_bytes):\n"
                  "    m, r = divmod(lane, 8)\n"
                  "    return (8 * (m // 2) + r) * row_stride_bytes + 16 * (m % 2)\n"),
         passes=("test_kernel",), reasons={t: r"lane 8 .*expected \d+, got \d+" for t in ADDRESS_TESTS}),
    Case("bad_infinite_loop_in_function", "the formula never returns",
         _formula("def ldmatrix_x4_address(lane, row_stride_bytes):\n    while True:\n        pass\n"),
         passes=("test_kernel",), reasons={t: r"ran past the cell limit of \d+ s and was interrupted"
                                               for t in ADDRESS_TESTS}),
    Case("bad_infinite_loop_top_level", "an endless loop in the answer cell itself",
         _formula(GOOD_FORMULA + "while True:\n    pass\n"),
         passes=("test_address_visible", "test_address_hidden", "test_kernel"),
         submission_reason=r"all tests passed .*address_formula: ran past the cell limit of \d+ s"),
    Case("copied_cells", "the intro text and a test cell copied and pasted (each graded as its "
         "first copy)", _copy_cells("intro", "test_address_visible"),
         submission_reason=r"all tests passed .*cell intro appears 2 times; the first copy was "
                           r"graded; cell test_address_visible appears 2 times"),
    Case("bad_print_million_lines", "prints a million lines",
         _append_to_formula("for i in range(1_000_000):\n    print(i)\n")),
    Case("bad_sys_exit", "sys.exit() in the answer cell", _append_to_formula("import sys\nsys.exit(3)\n"),
         submission_reason=r"address_formula: SystemExit"),
    Case("bad_os_exit", "os._exit() in the answer cell", _append_to_formula("import os\nos._exit(3)\n"),
         submission_reason=r"address_formula: ExitBlocked: os\._exit\(3\) is not allowed"),
    Case("bad_segfault", "crashes the notebook's kernel (segfault through ctypes)",
         _append_to_formula("import ctypes\nctypes.string_at(0)\n"), passes=(),
         reasons={t: r"KernelDied|NotRun|kernel was lost" for t in TESTS}),
    Case("bad_memory_hog", "allocates memory without end",
         _append_to_formula("hog = []\nwhile True:\n    hog.append(bytearray(50_000_000))\n"),
         submission_reason=r"address_formula: MemoryError"),
    Case("bad_snoop", "tries to read the solution, other submissions, the gradebook and the exchange, "
         "and to write the gradebook", _formula(_SNOOP),
         passes=("test_kernel",), reasons={t: r"negative address -1" for t in ADDRESS_TESTS}),
    Case("bad_corrupted_json", "the notebook file cut in half (invalid JSON)",
         lambda nb: json.dumps(nb).encode()[: len(json.dumps(nb)) // 2],
         passes=(), status="failed", submission_reason=r"ps1\.ipynb is not a valid notebook"),
    Case("bad_kernel_compile_error", "the kernel does not compile (missing semicolon)",
         _kernel_edit("int matrix = lane / 8, row = lane % 8;", "int matrix = lane / 8, row = lane % 8"),
         passes=ADDRESS_TESTS, kernel=True,
         reasons={"test_kernel": r"CompileError.*(line \d+|\(\d+\))"}),
    Case("bad_kernel_wrong_address", "the kernel loads the tile with matrices 1 and 2 swapped",
         _kernel_edit(_KERNEL_ADDR, "unsigned addr = base + (8 * (matrix / 2) + row) * 32 + 16 * (matrix % 2);"),
         passes=ADDRESS_TESTS, kernel=True,
         reasons={"test_kernel": r"lane \d+ register \d+: expected 0x[0-9a-f]+, got 0x[0-9a-f]+"}),
    Case("bad_kernel_misaligned", "a misaligned ldmatrix row address (faults)",
         _kernel_edit(_KERNEL_ADDR, _KERNEL_ADDR.replace(";", " + 2;")),
         passes=ADDRESS_TESTS, kernel=True,
         reasons={"test_kernel": r"KernelFault|misaligned|Misaligned|illegal|crash"}),
    Case("bad_kernel_illegal_address", "the kernel stores 4 GB past the end of its output "
         "(an illegal address: on a GPU it breaks the CUDA context)",
         _kernel_edit("out[4 * lane + 0] = r0;", "out[4 * lane + 0 + (1u << 30)] = r0;"),
         passes=ADDRESS_TESTS, kernel=True,
         reasons={"test_kernel": r"KernelFault|illegal|past the end|out of bounds|crash"}),
    Case("bad_kernel_trap", "the kernel executes trap",
         _kernel_edit("unsigned r0, r1, r2, r3;", 'asm volatile("trap;");\n    unsigned r0, r1, r2, r3;'),
         passes=ADDRESS_TESTS, kernel=True, reasons={"test_kernel": r"KernelFault|trap|illegal|crash"}),
    # The launch log: read by the grader, written by the notebook's sandbox. Whatever it is
    # replaced by, the grader never blocks, follows a link or reads past its limit; the checks
    # keep their points (the log only says where kernels ran, which the row then cannot name)
    # and the row says why.
    Case("bad_launch_log_fifo", "the launch log replaced by a FIFO (an open() that would block)",
         _replace_launch_log("os.mkfifo(log)"), submission_reason=_LOG_REFUSED,
         backend_named=False),
    Case("bad_launch_log_to_ledger", "the launch log replaced by a link to the course's ledger",
         _replace_launch_log("os.symlink('__COURSE_ROOT__/grading/ps1/ledger.jsonl', log)"),
         submission_reason=_LOG_REFUSED, backend_named=False),
    Case("bad_launch_log_dev_zero", "the launch log replaced by a link to /dev/zero",
         _replace_launch_log("os.symlink('/dev/zero', log)"), submission_reason=_LOG_REFUSED,
         backend_named=False),
    Case("bad_launch_log_huge", "the launch log made a 64 MiB file (sparse), past what the grader "
         "reads of it",
         _replace_launch_log("open(log, 'wb').truncate(64 << 20)"),
         submission_reason=_LOG_REFUSED, backend_named=False),
    # Volatile loads of global memory: the GPU compiler removes a spin on a local variable,
    # even a volatile one, and the kernel then finishes with full marks.
    Case("bad_kernel_hang", "the kernel never finishes (it spins on loads of global memory)",
         _kernel_edit("unsigned r0, r1, r2, r3;",
                      "volatile unsigned* flag = out; while (flag[0] == flag[0]) { }\n"
                      "    unsigned r0, r1, r2, r3;"),
         passes=ADDRESS_TESTS, kernel=True,
         reasons={"test_kernel": r"did not finish within|IsolatedTimeout|KernelFault"}),
]

NO_BACKEND = r"no backend can run this kernel|BackendUnavailable|cannot run"
#: Replaced by the course root's path when a submission is written (the snooping case aims at
#: the real folders, not at a guess).
COURSE_ROOT_MARK = b"__COURSE_ROOT__"


def notebook_for(case: Case) -> bytes:
    """The submitted notebook file of ``case``, as bytes."""
    nb = json.loads(FIXTURE.read_text())
    result = case.mutate(nb) if case.mutate else nb
    if isinstance(result, bytes):
        return result
    return json.dumps(result, indent=1).encode()


def write_submission(course_root: Path, student: str, case: Case, assignment: str = "ps1",
                     timestamp: str = "2026-11-20 10:00:00.000000 UTC") -> Path:
    folder = Path(course_root) / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    data = notebook_for(case).replace(COURSE_ROOT_MARK, str(Path(course_root).resolve()).encode())
    (folder / f"{assignment}.ipynb").write_bytes(data)
    (folder / "timestamp.txt").write_text(timestamp)
    return folder


def reason_matches(pattern: str, text: str) -> bool:
    return re.search(pattern, text, re.IGNORECASE | re.DOTALL) is not None
