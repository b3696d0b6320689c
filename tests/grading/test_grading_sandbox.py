"""The grading sandbox: learner code sees its working copy and nothing of the course.

These tests start real bubblewrap sandboxes; they skip, with the fix, where ``bwrap`` is not
installed (``autograder/install-sandbox.sh`` installs it).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib.metadata import version as md_version
from pathlib import Path

import pytest

from ptxlab.grading import sandbox
from ptxlab.grading.sandbox_account import hand_over, sandbox_account

PROBE = r'''
import json, os, socket, sys
from pathlib import Path
course = Path(sys.argv[1]); work = Path(sys.argv[2])
result = {"uid": os.getuid(), "secret_env": os.environ.get("GRADER_SECRET")}
def attempt(name, fn):
    try:
        fn(); result[name] = "allowed"
    except Exception as exc:
        result[name] = type(exc).__name__
attempt("read_solution", lambda: (course / "source" / "ps1.ipynb").read_text())
attempt("read_gradebook", lambda: (course / "gradebook.db").read_bytes())
attempt("write_gradebook", lambda: (course / "gradebook.db").write_bytes(b"x"))
attempt("read_other_student", lambda: (course / "submitted" / "bob" / "ps1.ipynb").read_text())
attempt("write_outside", lambda: Path("/usr/lib/evil.txt").write_text("x"))
attempt("write_workdir", lambda: (work / "scratch.txt").write_text("ok"))
attempt("write_tmp", lambda: Path("/tmp/scratch").write_text("ok"))
attempt("network", lambda: socket.create_connection(("127.0.0.1", 22), timeout=2))
attempt("import_ptxlab", lambda: __import__("ptxlab.layouts"))
print(json.dumps(result))
'''


def _need_bwrap():
    try:
        return sandbox.bwrap_binary()
    except sandbox.SandboxUnavailable as exc:
        pytest.skip(str(exc))


def _course(tmp: Path) -> tuple[Path, Path]:
    course = tmp / "course"
    (course / "source").mkdir(parents=True)
    (course / "source" / "ps1.ipynb").write_text("SOLUTION")
    (course / "gradebook.db").write_bytes(b"SQLite format 3\x00")
    (course / "submitted" / "bob").mkdir(parents=True)
    (course / "submitted" / "bob" / "ps1.ipynb").write_text("BOB")
    work = course / "autograded" / "alice" / "ps1"
    work.mkdir(parents=True)
    return course, work


def _probe(policy: sandbox.SandboxPolicy, course: Path, work: Path) -> dict:
    hand_over(work, sandbox_account())           # as the kernel manager does
    env = {"PATH": "/usr/bin:/bin", "GRADER_SECRET": "nope"}
    inner_env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    argv = sandbox.sandbox_argv(policy, [sys.executable, "-c", PROBE, str(course), str(work)],
                                env=inner_env)
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_sandbox_blocks_course_and_network(tmp_path):
    _need_bwrap()
    course, work = _course(tmp_path)
    # Mount the course's parent read-only on purpose: the hidden list must still cover it.
    # (Readable by all, as a mounted folder must be for a sandbox that is not the grader's uid.)
    tmp_path.chmod(0o755)
    policy = sandbox.SandboxPolicy(workdir=work, hidden=[course], extra_readonly=[tmp_path],
                                   gpu=False)
    r = _probe(policy, course, work)
    account = sandbox_account()
    assert r["uid"] == (account.uid if account else sandbox.SANDBOX_UID)
    assert r["secret_env"] is None
    for name in ("read_solution", "read_gradebook", "write_gradebook", "read_other_student"):
        assert r[name] in ("FileNotFoundError", "PermissionError", "OSError"), (name, r[name])
    assert r["write_outside"] in ("OSError", "PermissionError", "FileNotFoundError")
    assert r["network"] in ("OSError", "ConnectionRefusedError", "TimeoutError")
    assert r["write_workdir"] == "allowed" and r["write_tmp"] == "allowed"
    assert r["import_ptxlab"] == "allowed"
    assert (work / "scratch.txt").read_text() == "ok"
    assert (course / "gradebook.db").read_bytes().startswith(b"SQLite")   # untouched


def test_checkout_on_path_is_reduced_to_packages(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    (checkout / "pkg").mkdir(parents=True)
    (checkout / "pkg" / "__init__.py").write_text("")
    (checkout / "course" / "source").mkdir(parents=True)
    (checkout / "tool.py").write_text("")
    monkeypatch.syspath_prepend(str(checkout))
    paths = sandbox.python_readonly_paths(tmp_path / "work", [])
    assert checkout / "pkg" in paths and checkout / "tool.py" in paths
    assert checkout not in paths and not any(p == checkout / "course" for p in paths)


def test_hidden_path_inside_mount_gets_covered(tmp_path):
    course, work = _course(tmp_path)
    argv = sandbox.sandbox_argv(sandbox.SandboxPolicy(workdir=work, hidden=[course],
                                                      extra_readonly=[tmp_path], gpu=False),
                                ["true"], bwrap="/usr/bin/bwrap")
    i = argv.index("--tmpfs", argv.index(str(tmp_path)))
    assert argv[i + 1] == str(course)
    # ...and the working copy is mounted after the cover, so it stays visible and writable.
    assert argv.index("--bind") > i and argv[argv.index("--bind") + 1] == str(work)
    assert "--unshare-net" in argv and "--die-with-parent" in argv


def test_missing_bwrap_says_how_to_install(monkeypatch):
    monkeypatch.setenv("PTXLAB_BWRAP", "/nonexistent/bwrap")
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap"):
        sandbox.bwrap_binary()


HOG = r'''
import time
hog = []
try:
    while True:
        hog.append(bytearray(20 * 2**20))
        hog[-1][::4096] = b"x" * len(hog[-1][::4096])   # touch it: resident, not just reserved
        time.sleep(0.01)
except MemoryError:
    print("MemoryError after", len(hog) * 20, "MiB", flush=True)
small = bytearray(2**20)          # the kernel goes on working after the error
print("still working", flush=True)
'''


@pytest.mark.parametrize("mode", ["address_space", "resident"])
def test_kernel_memory_limit_gives_memory_error(tmp_path, mode):
    """kernel_boot's two ways of limiting a kernel's memory (the resident-memory watchdog is
    the one used with a GPU, where CUDA cannot start under an address-space limit)."""
    import os
    (tmp_path / "hog_module.py").write_text(HOG)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).resolve().parents[2])]),
           sandbox.KERNEL_LIMITS_ENV: json.dumps({"memory_mb": 400, "memory_mode": mode})}
    out = subprocess.run([sys.executable, "-m", "ptxlab.grading.kernel_boot", "--", "-m", "hog_module"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "MemoryError after" in out.stdout and "still working" in out.stdout
    held = int(out.stdout.split("MemoryError after")[1].split()[0])
    assert held < 1.5 * 400, out.stdout       # past 1.5x the limit the kernel would be killed


SPARSE_FILLER = r'''
import errno, time
try:
    for n in range(400):                 # 400 files of 8 MiB each that hold no block: the way
        with open(f"f{n}.bin", "wb") as f:   # a compressing file system stores repeated bytes
            f.truncate(8 * 2**20)
        time.sleep(0.01)
    print("never stopped", flush=True)
except OSError as exc:
    print("stopped:", errno.errorcode.get(exc.errno), exc, flush=True)
'''


def test_disk_quota_counts_what_files_hold_not_only_their_blocks(tmp_path):
    """The working folder's quota is reached by files a file system stores in few blocks."""
    import os
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "sparse_filler.py").write_text(SPARSE_FILLER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).resolve().parents[2])]),
           sandbox.KERNEL_LIMITS_ENV: json.dumps({"disk_mb": 32, "max_files": 10000})}
    out = subprocess.run([sys.executable, "-m", "ptxlab.grading.kernel_boot", "--", "-m", "sparse_filler"],
                         capture_output=True, text=True, env=env, cwd=work, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "stopped: EDQUOT [Errno 122] Disk quota exceeded" in out.stdout, out.stdout + out.stderr[-2000:]
    assert len(list(work.iterdir())) < 400


def test_launch_limit_is_at_most_half_the_cell_limit():
    from ptxlab.grading.execute import effective_launch_timeout
    assert effective_launch_timeout(10, 6) == 3          # the corpus's settings
    assert effective_launch_timeout(60, 600) == 60       # the course's: the launch limit stands
    assert effective_launch_timeout(60, None) == 60 and effective_launch_timeout(5, 1) == 1.0


def _copy_distribution(site: Path, target: Path, top_level: str, dist_prefix: str) -> None:
    shutil.copytree(site / top_level, target / top_level,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for extra in site.glob(f"{dist_prefix}*.libs"):
        shutil.copytree(extra, target / extra.name)
    for meta in site.glob(f"{dist_prefix}-*.dist-info"):
        shutil.copytree(meta, target / meta.name)


def test_target_layout_imports_inside_the_sandbox(tmp_path, monkeypatch):
    """A ``pip install --target`` folder on PYTHONPATH: the packages' vendored libraries
    (``pyzmq.libs``), their metadata, namespace packages and extension modules all load."""
    _need_bwrap()
    zmq = pytest.importorskip("zmq")
    site = Path(zmq.__file__).resolve().parents[1]
    if not list(site.glob("pyzmq*.libs")):
        pytest.skip("this pyzmq build vendors no libraries (no pyzmq.libs folder)")
    target = tmp_path / "target"
    target.mkdir()
    _copy_distribution(site, target, "zmq", "pyzmq")
    (target / "nsdemo" / "inner").mkdir(parents=True)            # a namespace package
    (target / "nsdemo" / "inner" / "__init__.py").write_text("VALUE = 7\n")
    ext = next(iter(site.glob("_cffi_backend*.so")), None)       # a top-level extension module
    if ext is not None:
        shutil.copy2(ext, target / ext.name)
    course, work = _course(tmp_path)
    monkeypatch.syspath_prepend(str(target))
    policy = sandbox.SandboxPolicy(workdir=work, hidden=[course], gpu=False)
    code = ("import importlib.metadata as md, zmq, nsdemo.inner as ns; "
            "assert zmq.__file__.startswith(%r), zmq.__file__; "
            "print(zmq.zmq_version(), md.version('pyzmq'), ns.VALUE)" % str(target))
    if ext is not None:
        code += "; import _cffi_backend"
    # -S: no site-packages, so every import below must come from the target folder.
    argv = sandbox.sandbox_argv(policy, [sys.executable, "-S", "-c", code],
                                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(target)})
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[1] == md_version("pyzmq") and out.stdout.split()[2] == "7"
    # ...and the venv layout the grader itself runs from works the same way.
    argv = sandbox.sandbox_argv(policy, [sys.executable, "-c", "import zmq, numpy, ptxlab.layouts"],
                                env={"PATH": "/usr/bin:/bin"})
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]


def test_support_folders_are_mounted_but_not_the_course(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    for d in ("pkg", "vendor.libs", "pkg-1.0.dist-info", "ns/sub", "course/source", "kernels/x"):
        (checkout / d).mkdir(parents=True)
    (checkout / "pkg" / "__init__.py").write_text("")
    (checkout / "ns" / "sub" / "__init__.py").write_text("")
    (checkout / "course" / "nbgrader_config.py").write_text("")
    monkeypatch.syspath_prepend(str(checkout))
    paths = set(sandbox.python_readonly_paths(tmp_path / "work", []))
    assert {checkout / n for n in ("pkg", "vendor.libs", "pkg-1.0.dist-info", "ns")} <= paths
    assert not {checkout / "course", checkout / "kernels", checkout} & paths


def test_editable_installs_mount_their_packages_not_their_checkout(tmp_path, monkeypatch):
    """``pip install -e`` maps imports to source folders off ``sys.path`` (a finder loaded by a
    ``.pth``): the sandbox mounts those package folders, never the checkout holding course/."""
    checkout = tmp_path / "other-project"
    (checkout / "src" / "demo").mkdir(parents=True)
    (checkout / "src" / "demo" / "__init__.py").write_text("")
    (checkout / "course").mkdir()
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "__editable__.demo-1.0.pth").write_text("import __editable___demo_1_0_finder; "
                                                     "__editable___demo_1_0_finder.install()\n")
    (site / "__editable___demo_1_0_finder.py").write_text(
        "import sys\nfrom typing import Dict\n"
        f"MAPPING: Dict[str, str] = {{'demo': {str(checkout / 'src' / 'demo')!r}}}\n"
        "NAMESPACES = {}\n")
    monkeypatch.syspath_prepend(str(site))
    paths = set(sandbox.python_readonly_paths(tmp_path / "work", []))
    assert checkout / "src" / "demo" in paths
    assert not {checkout, checkout / "course", checkout / "src"} & paths
    # A mapping into a hidden folder stays hidden.
    paths = set(sandbox.python_readonly_paths(tmp_path / "work", [checkout / "src" / "demo"]))
    assert checkout / "src" / "demo" not in paths


TMP_HOG = r'''
import time
n = 0
try:
    while True:
        with open(f"/tmp/f{n}", "wb") as fh:
            fh.write(b"x" * (20 * 2**20))
        n += 1
        time.sleep(0.02)
except (MemoryError, OSError) as exc:
    print("stopped after", n * 20, "MiB", type(exc).__name__, flush=True)
'''


def test_files_in_the_sandbox_tmp_count_against_the_kernel_memory(tmp_path):
    """The sandbox's /tmp is a tmpfs (memory): a kernel with a 300 MiB limit cannot fill it
    with more (bwrap's --size where it has one, else the kernel's own watchdog)."""
    _need_bwrap()
    course, work = _course(tmp_path)
    (work / "tmp_hog.py").write_text(TMP_HOG)
    repo = str(Path(__file__).resolve().parents[2])
    policy = sandbox.SandboxPolicy(workdir=work, hidden=[course], gpu=False, tmp_size_mb=300)
    limits = {"memory_mb": 300, "memory_mode": "address_space", "watch_tmp": True}
    argv = sandbox.sandbox_argv(
        policy, [sys.executable, "-m", "ptxlab.grading.kernel_boot", "--", "-m", "tmp_hog"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{work}:{repo}",
             sandbox.KERNEL_LIMITS_ENV: json.dumps(limits)})
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert "stopped after" in out.stdout, (out.returncode, out.stdout, out.stderr[-2000:])
    held = int(out.stdout.split("stopped after")[1].split()[0])
    assert held <= 1.5 * 300, out.stdout


def test_a_cells_output_is_capped_in_bytes():
    """nbgrader's LimitOutput counts lines; a few huge images pass it. LimitOutputBytes cuts."""
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from ptxlab.grading.limit_output import LimitOutputBytes

    image = new_output("display_data", data={"image/png": "A" * 3_000_000})
    text = new_output("stream", name="stdout", text="y" * 500_000)
    nb = new_notebook(cells=[new_code_cell("show()", outputs=[text, image, image]),
                             new_code_cell("small()", outputs=[new_output("stream", name="stdout",
                                                                           text="ok\n")])])
    out, _ = LimitOutputBytes(max_bytes_per_cell=1_000_000).preprocess(nb, {})
    big, small = out.cells
    assert sum(len(json.dumps(o)) for o in big.outputs) <= 1_000_000
    assert big.outputs[0].text == "y" * 500_000            # what fits stays
    assert "this cell's output was 6.5 MB" in big.outputs[-1].text
    assert small.outputs[0].text == "ok\n"


def _naive_within(path: Path, other: Path) -> bool:
    try:
        path.relative_to(other)
        return True
    except ValueError:
        return False


def test_path_checks_agree_with_the_plain_definition_on_random_trees():
    """The mounts and covers of a kernel are decided in time proportional to a path's depth (a
    class hides hundreds of folders at every kernel start); the answers are the plain ones."""
    import random

    rng = random.Random(7)
    names = ["a", "b", "ab", "c"]

    def random_path() -> Path:
        return Path("/", *(rng.choice(names) for _ in range(rng.randint(1, 5))))

    for _ in range(200):
        paths = [random_path() for _ in range(rng.randint(0, 12))]
        probe = random_path()
        got = sandbox._dedupe_nested(paths)
        unique = sorted(set(paths), key=lambda p: len(p.parts))
        want: list[Path] = []
        for p in unique:
            if not any(_naive_within(p, k) for k in want):
                want.append(p)
        assert sorted(got) == sorted(want)
        ps = sandbox._PathSet(paths)
        assert ps.holds(probe) == any(_naive_within(probe, p) for p in paths)
        assert ps.inside(probe) == any(_naive_within(p, probe) for p in paths)


# ---------------------------------------------------------------------------------------------
# Nothing readable that is not the learner's
# ---------------------------------------------------------------------------------------------

def _course_root_with_instructor_files(tmp: Path) -> Path:
    course, _ = _course(tmp)
    (course / "nbgrader_config.py").write_text("c.CourseDirectory.course_id = 'SECRET'\n")
    (course / "answer_key.py").write_text("ANSWERS = 'SECRET'\n")
    (course / "solutions").mkdir()
    (course / "solutions" / "__init__.py").write_text("KEY = 'SECRET'\n")
    return course


def test_the_graders_working_folder_gives_the_sandbox_nothing(tmp_path, monkeypatch):
    """``ptxlab grade`` runs in the course root, and ``python -m`` puts that folder on
    ``sys.path``: its ``nbgrader_config.py`` and any instructor module beside it were mounted
    into every sandbox as "importable children"."""
    course = _course_root_with_instructor_files(tmp_path)
    instructor = {course / "nbgrader_config.py", course / "answer_key.py", course / "solutions"}
    monkeypatch.chdir(course)
    monkeypatch.syspath_prepend(str(course))
    work = tmp_path / "work"
    paths = set(sandbox.python_readonly_paths(work, []))
    assert not instructor & paths and course not in paths
    # ...nor where the course root is on the path without being the working folder
    monkeypatch.chdir(tmp_path)
    paths = set(sandbox.python_readonly_paths(work, [course]))
    assert not instructor & paths and course not in paths


def test_a_sandboxed_process_cannot_read_the_course_roots_files(tmp_path, monkeypatch):
    _need_bwrap()
    course = _course_root_with_instructor_files(tmp_path)
    work = course / "autograded" / "alice" / "ps1"
    monkeypatch.chdir(course)
    monkeypatch.syspath_prepend(str(course))
    policy = sandbox.SandboxPolicy(workdir=work, hidden=[course], gpu=False)
    out = _started(policy, "import os, sys\n"
                           "for name in ('nbgrader_config.py', 'answer_key.py', 'solutions'):\n"
                           "    print(name, os.path.exists(os.path.join(sys.argv[1], name)))\n",
                   str(course))
    assert out.split() == ["nbgrader_config.py", "False", "answer_key.py", "False",
                           "solutions", "False"], out


def _started(policy: sandbox.SandboxPolicy, code: str, *args: str) -> str:
    """Run ``code`` in a sandbox started as the kernel manager starts one (the working folder
    handed to the sandbox's account, bwrap's options on a file descriptor); its output."""
    hand_over(policy.workdir, sandbox_account())
    repo = str(Path(__file__).resolve().parents[2])
    start = sandbox.sandbox_launch(policy, [sys.executable, "-c", code, *args],
                                   env={"PATH": "/usr/bin:/bin", "PYTHONPATH": repo})
    try:
        out = subprocess.run(start.argv, pass_fds=start.pass_fds, capture_output=True,
                             text=True, env={"PATH": "/usr/bin:/bin"}, timeout=60)
    finally:
        start.close()
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_the_sandboxs_first_process_shows_no_option(tmp_path):
    """bwrap is the sandbox's PID 1, and its command line was readable there: every mount,
    every hidden path covered, every ``--setenv`` value."""
    _need_bwrap()
    course, work = _course(tmp_path)
    exchange = tmp_path / "exchange-of-the-class"
    exchange.mkdir()
    tmp_path.chmod(0o755)
    policy = sandbox.SandboxPolicy(workdir=work, hidden=[course, exchange],
                                   extra_readonly=[tmp_path], gpu=False)
    seen = _started(policy, "print(open('/proc/1/cmdline', 'rb').read().decode())")
    words = seen.split("\0")
    assert exchange.name not in seen and str(course / "source") not in seen, seen
    assert "--ro-bind" not in words and "--tmpfs" not in words, seen
    assert words[1:3] == ["--args", words[2]] and words[2].isdigit(), seen
    assert "PYTHONPATH" not in seen


def test_the_sandboxs_etc_holds_only_what_a_kernel_reads(tmp_path):
    """The machine's whole /etc was mounted: its accounts, its host names, its keys."""
    from ptxlab.grading import sandbox_etc

    _need_bwrap()
    course, work = _course(tmp_path)
    policy = sandbox.SandboxPolicy(workdir=work, hidden=[course], gpu=False)
    code = ("import json, os, pwd\n"
            "print(json.dumps({'etc': sorted(os.listdir('/etc')), "
            "'passwd': open('/etc/passwd').read(), 'hosts': open('/etc/hosts').read(), "
            "'me': pwd.getpwuid(os.getuid()).pw_name, 'home': os.path.expanduser('~')}))\n")
    seen = json.loads(_started(policy, code).splitlines()[-1])
    allowed = {"passwd", "group", "hosts", "hostname", "nsswitch.conf", *(
        Path(p).name for pattern in sandbox_etc.ETC_KEPT for p in Path("/etc").glob(pattern))}
    assert set(seen["etc"]) <= allowed, set(seen["etc"]) - allowed
    assert not {"shadow", "ssh", "ssl", "crontab", "jupyter", "hosts.allow"} & set(seen["etc"])
    lines = seen["passwd"].splitlines()
    account = sandbox_account()
    uid = account.uid if account else sandbox.SANDBOX_UID
    assert len(lines) == 1 and lines[0].split(":")[2] == str(uid), lines
    assert seen["me"] == "sandbox"
    assert "localhost" in seen["hosts"] and len(seen["hosts"].splitlines()) == 3


WHO = r'''
import json, os
with open("written-inside.txt", "w") as fh:
    fh.write("x")
caps = {line.split(":")[0]: int(line.split()[1], 16) for line in open("/proc/self/status")
        if line.startswith(("CapEff", "CapPrm", "CapAmb"))}
try:
    os.setuid(0)
    regained = True
except OSError:
    regained = False
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
                  "caps": caps, "regained": regained}))
'''


def test_a_root_grader_runs_the_sandbox_as_a_uid_of_its_own(tmp_path):
    """Started by root, bwrap mapped the sandbox's ``nobody`` to root: what the notebook wrote
    was root's. Now the sandbox is set up as root and runs as an unprivileged uid of its own,
    with no capability left."""
    _need_bwrap()
    account = sandbox_account()
    if account is None:
        pytest.skip("the grader is not root here: bwrap maps the sandbox to this account")
    course, work = _course(tmp_path)
    policy = sandbox.SandboxPolicy(workdir=work, hidden=[course], gpu=False)
    seen = json.loads(_started(policy, WHO).splitlines()[-1])
    written = (work / "written-inside.txt").stat()
    assert (written.st_uid, written.st_gid) == (account.uid, account.gid) != (0, 0)
    assert (seen["uid"], seen["gid"], seen["groups"]) == (account.uid, account.gid, [])
    assert seen["caps"] == {"CapPrm": 0, "CapEff": 0, "CapAmb": 0} and not seen["regained"]


def test_an_unprivileged_grader_says_the_sandbox_is_its_own_account():
    """Without root (and without subordinate ids) nothing can map the sandbox elsewhere: the
    grader says so where it reports how its limits are enforced."""
    from ptxlab.grading.sandbox_account import SandboxAccount, describe_account

    text = describe_account(None)
    assert "grading account" in text and "subordinate ids" in text
    assert "uid 60000" in describe_account(SandboxAccount(60000, 60000))
