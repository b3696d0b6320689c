"""The course on a real JupyterHub: autograder/README.md's server, set up as its steps say, with
real Unix accounts, driven over HTTP with real tokens.

The set-up follows "Setting up the server" step by step, in a temporary folder (``base``,
mode 755) instead of /srv and /etc:

1. the code's environment: ``base/venv`` plays ``/srv/ptxlab/.venv``: a virtual environment
   whose site-packages reach this checkout's ``.venv`` (a ``.pth`` file), so its
   ``etc/jupyter`` is the test's own. Its interpreter is this checkout's Python when every
   account may run it; when not (a pyenv Python under /root, say), a copy of it under
   ``base/python``: the same version, since the installed packages may need it;
2. the accounts (``useradd --create-home -K HOME_MODE=0700``, the grading account
   ``--system``); the course root (``make_course``) the grading account's, mode 700;
3. the exchange, mode 1777, and the course's folder and ``inbound/`` (mode 3733) made for the
   grading account with ``install -d``; ``global_nbgrader_config.py`` as the server-wide
   nbgrader config, in the venv's ``etc/jupyter`` (every account's Jupyter reads it there as
   it reads ``/etc/jupyter``);
4. ``jupyter server extension disable --sys-prefix nbgrader.server_extensions.formgrader``;
6. JupyterHub from the venv, its proxy from npm (``.venv/node``, where ``./lab test``
   installs it, or on PATH), a hub config that picks an authenticator (JupyterHub's
   DummyAuthenticator) and then ``load_subconfig("autograder/jupyterhub_config.py")``, the
   hub started as root with the venv first on its PATH and ``PTXLAB_SPAWNER=local``:
   JupyterHub's LocalProcessSpawner, each server a process of the student's own account.

(Step 5, the GPU's MPS daemon and the systemd timer, needs systemd and a GPU: not here.)

Then a week of the course: two students (one right, one wrong) and one instructor get tokens
from the hub's REST API; the instructor generates and releases ``ps1`` through the formgrader
service (its HTTP API, the instructor's token); each student's
server lists, fetches and submits it through nbgrader's assignment-list handlers, the
notebook being filled in through the server's contents API; the grading account runs
``autograder/grade-assignment.sh`` (collect, ``ptxlab grade``, feedback); each student
fetches their feedback over HTTP. Along the way, what the README promises is tried from a
student's own account: the course root is unreadable, the inbound folder hides each
submission and keeps it in place, the feedback of one is not the other's, a student's server
has no formgrader and the formgrader service (``/services/ptx-matrix-lab/formgrader``)
answers only the instructor.

Needs root (useradd, and a hub that starts servers as other users), Node.js and
configurable-http-proxy; skips with the reason otherwise. Everything it starts is stopped and
every account it made is removed at the end, also on failure.
"""
from __future__ import annotations

import csv
import html
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "fixtures" / "grading"))
import course as fixture_course  # noqa: E402

pytest.importorskip("nbgrader")
pytest.importorskip("jupyterhub")

REPO = fixture_course.REPO
AUTOGRADER = REPO / "autograder"
COURSE_ID = "ptx-matrix-lab"         # the hub config's default: no PTXLAB_COURSE_ID needed
ASSIGNMENT = "ps1"
SERVICE = f"/services/{COURSE_ID}"


def _setup_skip_reason() -> str | None:
    """Why this machine cannot run the hub, or None."""
    if not sys.platform.startswith("linux"):
        return "needs Linux (Unix accounts, setuid)"
    if os.geteuid() != 0:
        return ("needs root: it creates Unix accounts (useradd) and runs a hub that starts "
                "each user's server as that user")
    for tool in ("useradd", "userdel"):
        if not shutil.which(tool):
            return f"needs {tool} to create the test's Unix accounts"
    if not shutil.which("node"):
        return ("needs Node.js for JupyterHub's proxy (configurable-http-proxy); "
                "install nodejs and npm, then ./lab setup --dev")
    if not _proxy():
        return ("needs configurable-http-proxy: npm install --prefix .venv/node "
                "configurable-http-proxy (./lab setup --dev does it)")
    return None


def _proxy() -> str | None:
    """configurable-http-proxy: where ./lab installs it, else on PATH."""
    local = REPO / ".venv" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
    return str(local) if local.is_file() else shutil.which("configurable-http-proxy")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------- Unix accounts

@dataclass
class Account:
    name: str
    uid: int
    gid: int
    home: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {"HOME": str(self.home), "USER": self.name, "LOGNAME": self.name,
                "LANG": "C.UTF-8", **extra}


def _useradd(name: str, *options: str) -> Account:
    import pwd
    subprocess.run(["useradd", "--create-home", "-K", "HOME_MODE=0700", *options, name],
                   check=True, capture_output=True, text=True)
    entry = pwd.getpwnam(name)
    return Account(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


def _as(account: Account, cmd: list[str], *, env: dict[str, str], cwd: Path | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess:
    """``cmd`` as a process of ``account`` (its uid, its group, no other group)."""
    return subprocess.run(cmd, user=account.uid, group=account.gid, extra_groups=[], env=env,
                          cwd=cwd or account.home, capture_output=True, text=True,
                          timeout=timeout, check=False)


PROBE = r"""
import json, os, sys
out = {}
for label, code in json.loads(sys.argv[1]).items():
    try:
        exec(code)
    except PermissionError:
        out[label] = "PermissionError"
    except OSError as e:
        out[label] = type(e).__name__ + ": " + str(e)
    else:
        out[label] = "allowed"
print(json.dumps(out))
"""


def _attempts(account: Account, python: Path, tries: dict[str, str]) -> dict[str, str]:
    """Each snippet of ``tries`` run by a process of ``account``: 'PermissionError',
    'allowed' or the other error."""
    r = _as(account, [str(python), "-S", "-c", PROBE, json.dumps(tries)], env=account.env(),
            timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _kill_processes_of(uids: set[int]) -> None:
    """Stop what is still running under the test's accounts (by pid)."""
    for _ in range(2):
        left = []
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    if proc.stat().st_uid in uids:
                        left.append(int(proc.name))
                except OSError:
                    pass
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not left:
            return
        time.sleep(0.5)


# ---------------------------------------------------------------------------- the venv

def _version_as(probe: Account, python: Path) -> tuple[str | None, str]:
    """The version of ``python`` run by ``probe`` (None if it cannot run it), and why not."""
    code = "import sys; print('.'.join(map(str, sys.version_info[:3])))"
    try:
        r = _as(probe, [str(python), "-S", "-c", code], env=probe.env(), timeout=60)
    except OSError as exc:
        return None, exc.strerror or str(exc)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:120]
    return r.stdout.strip(), ""


def _relocated_interpreter(base: Path) -> Path | None:
    """A copy of this Python under ``base/python`` for an installation other accounts cannot
    reach (a pyenv Python under /root, say): its standard library hard-linked (copied across
    file systems), without its own site-packages and tests, and the executable's library path
    (an absolute RUNPATH into the installation) pointed at the copy's ``lib/``."""
    src = Path(sys.base_prefix).resolve()
    exe = Path(getattr(sys, "_base_executable", "") or sys.executable).resolve()
    stdlib = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    if not (src / "lib" / stdlib / "os.py").is_file() or src not in exe.parents:
        return None
    dest = base / "python"

    def link(s, d):
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src / "lib" / stdlib, dest / "lib" / stdlib, symlinks=True,
                    copy_function=link,
                    ignore=lambda folder, names: {"site-packages", "test"} & set(names)
                    if Path(folder) == src / "lib" / stdlib else set())
    for lib in (src / "lib").glob("libpython*"):
        if lib.is_symlink():
            (dest / "lib" / lib.name).symlink_to(os.readlink(lib))
        elif lib.is_file():
            link(lib, dest / "lib" / lib.name)
    data = exe.read_bytes()
    old, new = str(src / "lib").encode() + b"\0", b"$ORIGIN/../lib\0"
    if data.count(old) == 1 and len(new) <= len(old):
        data = data.replace(old, new + b"\0" * (len(old) - len(new)))
    (dest / "bin").mkdir()
    target = dest / "bin" / exe.name
    target.write_bytes(data)
    target.chmod(0o755)
    return target


def _interpreter_for_all(base: Path, probe: Account) -> tuple[Path, str]:
    """This Python, as an executable that ``probe`` may run, and its version."""
    want = ".".join(map(str, sys.version_info[:3]))
    exe = Path(getattr(sys, "_base_executable", "") or sys.executable)
    version, why = _version_as(probe, exe)
    if version == want:
        return exe, version
    tried = [f"{exe} ({why or version})"]
    copy = _relocated_interpreter(base)
    if copy is not None:
        version, why = _version_as(probe, copy)
        if version == want:
            return copy, version
        tried.append(f"a copy of it, {copy} ({why or version})")
    pytest.skip(f"the Python {want} of this checkout's venv cannot be run by other accounts, "
                f"and the students' servers and the grading account need it: tried "
                f"{'; '.join(tried)}")


def _make_venv(base: Path, probe: Account) -> Path:
    """``base/venv``: this checkout's packages on an interpreter every account can run."""
    import sysconfig
    python, version = _interpreter_for_all(base, probe)
    site = Path(sysconfig.get_paths()["purelib"])
    venv = base / "venv"
    lib = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (venv / "bin").mkdir(parents=True)
    lib.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {python.parent}\n"
                                     "include-system-site-packages = false\n"
                                     f"version = {version}\n")
    (venv / "bin" / "python").symlink_to(python)
    (venv / "bin" / "python3").symlink_to("python")
    (lib / "ptxlab_checkout.pth").write_text(f"import site; site.addsitedir({str(site)!r})\n")
    # The checkout venv's console scripts (jupyterhub, jupyterhub-singleuser, jupyter, nbgrader,
    # ptxlab, ...), run by this venv's interpreter.
    bindir = Path(sys.executable).parent
    for script in bindir.iterdir():
        if not script.is_file() or script.name.startswith(("python", "activate", "Activate")):
            continue
        head = script.read_bytes()[:200]
        if head.startswith(b"#!") and str(bindir).encode() in head.split(b"\n", 1)[0]:
            body = script.read_text().split("\n", 1)[1]
            target = venv / "bin" / script.name
            target.write_text(f"#!{venv / 'bin' / 'python'}\n{body}")
            target.chmod(0o755)
    # Jupyter's sys-prefix config (which server extensions are on) and data (JupyterLab).
    prefix = Path(sys.prefix)
    if (prefix / "etc" / "jupyter").is_dir():
        shutil.copytree(prefix / "etc" / "jupyter", venv / "etc" / "jupyter")
    (venv / "etc" / "jupyter").mkdir(parents=True, exist_ok=True)
    if (prefix / "share").is_dir():
        (venv / "share").symlink_to(prefix / "share")
    for folder, dirs, files in os.walk(venv):          # links (share/) are not followed
        Path(folder).chmod(0o755)
        for name in files:
            path = Path(folder, name)
            if not path.is_symlink():
                path.chmod(0o755 if os.access(path, os.X_OK) else 0o644)
    r = _as(probe, [str(venv / "bin" / "python"), "-c",
                    "import jupyterhub, nbgrader, jupyter_server, ptxlab"],
            env=probe.env(), timeout=120)
    if r.returncode != 0:
        pytest.skip(f"this checkout's packages ({site}, {REPO}) are not readable by other "
                    f"accounts: {r.stderr.strip().splitlines()[-1:]}")
    return venv


# ---------------------------------------------------------------------------- HTTP

class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


@dataclass
class Reply:
    status: int
    headers: Message                 # case-insensitive
    body: bytes

    def json(self):
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def _http(method: str, url: str, token: str | None = None, body=None,
          timeout: float = 120) -> Reply:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", f"token {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return Reply(resp.status, resp.headers, resp.read())
    except urllib.error.HTTPError as err:
        return Reply(err.code, err.headers, err.read())


# ---------------------------------------------------------------------------- the hub

@dataclass
class Hub:
    base: Path
    venv: Path
    url: str
    course: Path
    exchange: Path
    grader: Account
    instructor: Account
    students: dict[str, Account]          # role ('right', 'wrong') -> account
    tokens: dict[str, str] = field(default_factory=dict)
    log: Path | None = None
    results: dict = field(default_factory=dict)

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log and self.log.exists() else ""

    def api(self, method: str, path: str, token: str, body=None) -> Reply:
        return _http(method, f"{self.url}/hub/api{path}", token, body)

    def user(self, account: Account, method: str, path: str, body=None,
             token: str | None = None) -> Reply:
        """A request to ``account``'s own server, with its own token unless told."""
        return _http(method, f"{self.url}/user/{account.name}{path}",
                     token or self.tokens[account.name], body)

    def grader_env(self, **extra: str) -> dict[str, str]:
        return self.grader.env(PATH=f"{self.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
                               PTXLAB_EXCHANGE=str(self.exchange), PYTHONUNBUFFERED="1",
                               **extra)


HUB_CONFIG = """\
# The hub's own configuration (/etc/jupyterhub/jupyterhub_config.py on the server).
c = get_config()  # noqa: F821
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.pid_file = "{hubdir}/proxy.pid"
c.JupyterHub.db_url = "sqlite:///{hubdir}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{hubdir}/cookie_secret"
c.JupyterHub.pid_file = "{hubdir}/jupyterhub.pid"
c.JupyterHub.authenticator_class = "dummy"
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 120

load_subconfig("{subconfig}")  # noqa: F821

# The test's own client of the REST API: it hands out each user's token.
c.JupyterHub.services.append({{"name": "e2e-admin", "api_token": "{admin_token}"}})
c.JupyterHub.load_roles.append({{"name": "e2e-admin", "services": ["e2e-admin"],
                                "scopes": ["admin:users", "admin:servers", "tokens"]}})
"""


def _wait(what: str, check, timeout: float, alive=None, log=lambda: ""):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise AssertionError(f"{what}: the hub exited\n{log()}")
        try:
            value = check()
        except OSError as exc:           # not listening yet
            value, last = None, exc
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:.0f} s ({last})\n{log()}")


def _spawn_and_wait(hub: Hub, accounts: list[Account], alive) -> None:
    for account in accounts:
        r = hub.api("POST", f"/users/{account.name}/server", hub.tokens[account.name])
        assert r.status in (201, 202), (r.status, r.text, hub.log_tail())
    for account in accounts:
        def ready(account=account):
            model = hub.api("GET", f"/users/{account.name}", hub.tokens[account.name]).json()
            server = model.get("servers", {}).get("")
            return server and server.get("ready")
        _wait(f"{account.name}'s server", ready, 240, alive, hub.log_tail)


def _stop_hub(hub_proc: subprocess.Popen, hubdir: Path) -> None:
    if hub_proc.poll() is None:
        hub_proc.send_signal(signal.SIGTERM)      # the hub stops servers, services and proxy
        try:
            hub_proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            hub_proc.kill()
            hub_proc.wait(timeout=10)
    pid_file = hubdir / "proxy.pid"
    if pid_file.exists():
        try:
            pid = int(pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"configurable-http-proxy" in cmdline:
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass


# ---------------------------------------------------------------------------- the week

def _answer(released: dict, source: dict, right: bool) -> dict:
    """The released notebook answered with the solutions; the wrong student swaps the
    address formula's block row and column (as tests/grading/test_grading_cycle.py does)."""
    nb = fixture_course.answered(released, source)
    if not right:
        for cell in nb["cells"]:
            if cell["metadata"].get("nbgrader", {}).get("grade_id") == "address_formula":
                text = "".join(cell["source"])
                assert "16 * (matrix // 2)" in text
                cell["source"] = text.replace("16 * (matrix // 2)", "16 * (matrix % 2)")
    return nb


def _assignment_call(hub: Hub, account: Account, action: str) -> list[dict]:
    """POST /assignments/<action> on the student's server; the assignment list it answers."""
    r = hub.user(account, "POST", f"/assignments/{action}",
                 {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT})
    assert r.status == 200, (action, r.status, r.text[:2000])
    reply = r.json()
    assert reply["success"], (action, reply)
    return reply["value"]


def _listing(hub: Hub, account: Account) -> list[dict]:
    r = hub.user(account, "GET", f"/assignments?course_id={COURSE_ID}")
    assert r.status == 200, (r.status, r.text[:2000])
    reply = r.json()
    assert reply["success"], reply
    return reply["value"]


def _plain(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def _week(hub: Hub) -> None:
    res = hub.results
    right, wrong = hub.students["right"], hub.students["wrong"]

    # The instructor's side: generate and release through the formgrader service, over HTTP
    # with the instructor's own token (the formgrader runs as the grading account).
    for step in ("assign", "release"):
        r = _http("POST", f"{hub.url}{SERVICE}/formgrader/api/assignment/{ASSIGNMENT}/{step}",
                  hub.tokens[hub.instructor.name], {})
        assert r.status == 200, (step, r.status, r.text[:2000], hub.log_tail())
        reply = r.json()
        assert reply["success"], (step, reply)
        res.setdefault("released_by", {})[step] = reply
    released = hub.exchange / COURSE_ID / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    res["outbound_owner"] = released.stat().st_uid

    # Each student: the course list, the assignment list, fetch.
    for account in hub.students.values():
        r = hub.user(account, "GET", "/courses")
        assert r.status == 200 and r.json() == {"success": True, "value": [COURSE_ID]}, r.text
        listed = _listing(hub, account)
        assert [(a["assignment_id"], a["status"]) for a in listed] == [(ASSIGNMENT, "released")]
        fetched = _assignment_call(hub, account, "fetch")
        assert [(a["assignment_id"], a["status"]) for a in fetched] == [(ASSIGNMENT, "fetched")]
        res.setdefault("fetched", {})[account.name] = fetched[0]

    # Each student fills the notebook in through their server's contents API, then submits.
    source = json.loads((hub.course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text())
    for role, account in hub.students.items():
        nb_path = next(n["path"] for n in res["fetched"][account.name]["notebooks"])
        assert nb_path == f"{COURSE_ID}/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
        r = hub.user(account, "GET", f"/api/contents/{urllib.parse.quote(nb_path)}?content=1")
        assert r.status == 200, (r.status, r.text[:1000])
        released = r.json()["content"]
        r = hub.user(account, "PUT", f"/api/contents/{urllib.parse.quote(nb_path)}",
                     {"type": "notebook", "format": "json",
                      "content": _answer(released, source, right=(role == "right"))})
        assert r.status in (200, 201), (r.status, r.text[:1000])
        submitted = _assignment_call(hub, account, "submit")
        res.setdefault("submitted", {})[account.name] = submitted
        owner = (account.home / nb_path).stat().st_uid
        assert owner == account.uid              # the server wrote as the student

    inbound = hub.exchange / COURSE_ID / "inbound"
    res["inbound_mode"] = inbound.stat().st_mode
    subs = {p.name.split("+")[0]: p for p in inbound.iterdir()}
    res["submission_owners"] = {name: p.stat().st_uid for name, p in subs.items()}
    theirs = subs[right.name]
    res["wrong_tries_before_grading"] = _attempts(wrong, hub.venv / "bin" / "python", {
        "list the course root": f"os.listdir({str(hub.course)!r})",
        "read the source notebook": f"open({str(hub.course / 'source' / ASSIGNMENT / f'{ASSIGNMENT}.ipynb')!r}).read()",
        "list the inbound folder": f"os.listdir({str(inbound)!r})",
        "rename the other's submission": f"os.rename({str(theirs)!r}, {str(theirs) + '-gone'!r})",
        "remove the other's submission": f"os.rmdir({str(theirs)!r})",
        "replace the other's submission": (
            f"os.makedirs({str(inbound / 'x')!r}, exist_ok=True); "
            f"os.rename({str(inbound / 'x')!r}, {str(theirs)!r})"),
        "list the other's home": f"os.listdir({str(right.home)!r})",
        "write their own submission": (
            f"open({str(inbound / (wrong.name + '+probe'))!r}, 'w').close(); "
            f"os.unlink({str(inbound / (wrong.name + '+probe'))!r})"),
    })
    shutil.rmtree(inbound / "x", ignore_errors=True)

    # The grading account: collect, ptxlab grade, feedback (the nightly job's script).
    script = AUTOGRADER / "grade-assignment.sh"
    r = _as(hub.grader, ["bash", str(script), ASSIGNMENT, "--workers", "2"],
            env=hub.grader_env(PTXLAB_COURSE_ROOT=str(hub.course),
                               PTXLAB_PYTHON=str(hub.venv / "bin" / "python"),
                               PTXLAB_CELL_TIMEOUT_S="60"),
            cwd=hub.course, timeout=600)
    res["grade_output"] = r.stdout + r.stderr
    assert r.returncode == 0, f"grade-assignment.sh:\n{r.stdout[-3000:]}\n{r.stderr[-4000:]}"
    with open(hub.course / "grading" / ASSIGNMENT / "grades.csv") as fh:
        res["grades"] = {row["student"]: row for row in csv.DictReader(fh)}

    # Each student fetches their feedback over HTTP and reads it through their server.
    for account in hub.students.values():
        listed = _assignment_call(hub, account, "fetch_feedback")
        submitted = [a for a in listed if a["status"] == "submitted"]
        assert submitted, listed
        subs = submitted[0]["submissions"]
        paths = [s["local_feedback_path"] for s in subs if s.get("local_feedback_path")]
        assert len(paths) == 1, subs
        pages = []
        for nb in subs[0]["notebooks"]:
            rel = f"{paths[0]}/{nb['notebook_id']}.html"
            r = hub.user(account, "GET", f"/api/contents/{urllib.parse.quote(rel)}?content=1&type=file&format=text")
            assert r.status == 200, (rel, r.status, r.text[:500])
            pages.append(r.json()["content"])
        res.setdefault("feedback", {})[account.name] = {"path": paths[0], "pages": pages}

    feedback_of_right = right.home / res["feedback"][right.name]["path"]
    res["wrong_tries_after_feedback"] = _attempts(wrong, hub.venv / "bin" / "python", {
        "list the released feedback": f"os.listdir({str(hub.exchange / COURSE_ID / 'feedback')!r})",
        "read the other's feedback": (
            f"open({str(feedback_of_right / (ASSIGNMENT + '.html'))!r}).read()"),
        "read the other's submission secret": (
            f"os.listdir({str(right.home / '.local' / 'share' / 'jupyter')!r})"),
    })
    # Over HTTP: a student's token opens no other student's server.
    res["cross_server"] = hub.user(right, "GET", f"/api/contents/{COURSE_ID}",
                                   token=hub.tokens[wrong.name]).status
    res["cross_feedback"] = hub.user(
        right, "GET", f"/api/contents/{urllib.parse.quote(res['feedback'][right.name]['path'])}",
        token=hub.tokens[wrong.name]).status

    # The formgrader: the hub service for the instructor only; no student server has one.
    for account in [*hub.students.values(), hub.instructor]:
        for page in ("formgrader", "formgrader/manage_assignments", "formgrader/api/assignments"):
            res.setdefault(page, {})[account.name] = _http(
                "GET", f"{hub.url}{SERVICE}/{page}", hub.tokens[account.name])
    res["student_server_formgrader"] = hub.user(wrong, "GET", "/formgrader").status


@pytest.fixture(scope="module")
def hub():
    reason = _setup_skip_reason()
    if reason:
        pytest.skip(reason)
    tag = "px" + secrets.token_hex(3)
    accounts: list[Account] = []
    base = Path(tempfile.mkdtemp(prefix="ptxlab-e2e-", dir="/tmp"))
    base.chmod(0o755)
    hub_proc = None
    hubdir = base / "hub"
    log_file = None
    try:
        # Accounts: the grading account (README, step 2), two students and an instructor.
        def new_account(name: str, *options: str) -> Account:
            accounts.append(_useradd(f"{tag}-{name}", *options))
            return accounts[-1]

        grader = new_account("grader", "--system")
        students = {"right": new_account("ada"), "wrong": new_account("ben")}
        instructor = new_account("prof")

        # 1. The code's environment.
        venv = _make_venv(base, students["wrong"])

        # 2. The course root: the grading account's, nobody else's.
        course = fixture_course.make_course(
            base / "course", extra_config=f"c.CourseDirectory.course_id = {COURSE_ID!r}")
        subprocess.run(["chown", "-R", f"{grader.name}:", str(course)], check=True)
        course.chmod(0o700)

        # 3. The exchange: everyone writes; the course's inbound is sticky (and unlistable).
        exchange = base / "exchange"
        subprocess.run(["mkdir", "-p", str(exchange)], check=True)
        subprocess.run(["chmod", "1777", str(exchange)], check=True)
        subprocess.run(["install", "-d", "-o", grader.name, "-g", grader.name, "-m", "755",
                        str(exchange / COURSE_ID)], check=True)
        subprocess.run(["install", "-d", "-o", grader.name, "-g", grader.name, "-m", "3733",
                        str(exchange / COURSE_ID / "inbound")], check=True)
        subprocess.run(["install", "-D", "-m", "644", str(AUTOGRADER / "global_nbgrader_config.py"),
                        str(venv / "etc" / "jupyter" / "nbgrader_config.py")], check=True)

        # 4. Students get the assignment list, not the formgrader.
        r = subprocess.run([str(venv / "bin" / "jupyter"), "server", "extension", "disable",
                            "--sys-prefix", "nbgrader.server_extensions.formgrader"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        for path in (venv / "etc" / "jupyter").rglob("*"):     # whatever root's umask
            path.chmod(0o755 if path.is_dir() else 0o644)

        # 6. JupyterHub: the site's config loads autograder/jupyterhub_config.py.
        hubdir.mkdir(mode=0o700)
        port, admin_token = _free_port(), secrets.token_hex(32)
        (hubdir / "jupyterhub_config.py").write_text(HUB_CONFIG.format(
            port=port, hub_port=_free_port(), proxy_api_port=_free_port(), hubdir=hubdir,
            subconfig=AUTOGRADER / "jupyterhub_config.py", admin_token=admin_token))
        proxy_dir = str(Path(_proxy()).parent)
        node_dir = str(Path(shutil.which("node")).parent)
        env = {
            "PATH": os.pathsep.join([str(venv / "bin"), proxy_dir, node_dir,
                                     "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": "/root", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
            "PTXLAB_HOME": str(REPO), "PTXLAB_COURSE_ROOT": str(course),
            "PTXLAB_GRADER_USER": grader.name,
            "PTXLAB_STUDENTS": ",".join(a.name for a in students.values()),
            "PTXLAB_INSTRUCTORS": instructor.name,
            "PTXLAB_FORMGRADER_PORT": str(_free_port()),
            "PTXLAB_FORMGRADER_TOKEN": secrets.token_hex(32),
            "PTXLAB_SPAWNER": "local", "PTXLAB_GPU_SHARING": "none",
            "PTXLAB_EXCHANGE": str(exchange),
        }
        log_file = open(hubdir / "hub.log", "w")
        hub_proc = subprocess.Popen([str(venv / "bin" / "jupyterhub"), "-f",
                                     str(hubdir / "jupyterhub_config.py")],
                                    cwd=hubdir, env=env, stdout=log_file,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        state = Hub(base=base, venv=venv, url=f"http://127.0.0.1:{port}", course=course,
                    exchange=exchange, grader=grader, instructor=instructor, students=students,
                    log=hubdir / "hub.log")

        def alive() -> bool:
            return hub_proc.poll() is None

        _wait("the hub's REST API",
              lambda: _http("GET", f"{state.url}/hub/api/", timeout=5).status == 200,
              120, alive, state.log_tail)
        for account in [*students.values(), instructor]:
            r = state.api("POST", f"/users/{account.name}/tokens", admin_token,
                          {"note": "test_server_e2e", "expires_in": 3600})
            assert r.status in (200, 201), (r.status, r.text, state.log_tail())
            state.tokens[account.name] = r.json()["token"]
        _spawn_and_wait(state, list(students.values()), alive)
        _wait("the formgrader service",
              lambda: _http("GET", f"{state.url}{SERVICE}/formgrader/manage_assignments",
                            state.tokens[instructor.name], timeout=10).status == 200,
              180, alive, state.log_tail)
        _week(state)
        yield state
    finally:
        if hub_proc is not None:
            _stop_hub(hub_proc, hubdir)
        if log_file is not None:
            log_file.close()
        _kill_processes_of({a.uid for a in accounts})
        for account in accounts:
            subprocess.run(["userdel", "--remove", account.name], check=False,
                           capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------- the checks

def test_students_fetch_fill_in_and_submit_through_their_servers(hub):
    # The instructor released through the formgrader, which wrote as the grading account.
    assert hub.results["outbound_owner"] == hub.grader.uid
    for account in hub.students.values():
        fetched = hub.results["fetched"][account.name]
        assert fetched["course_id"] == COURSE_ID
        submitted = [a for a in hub.results["submitted"][account.name]
                     if a["status"] == "submitted"]
        assert submitted and submitted[0]["submissions"], hub.results["submitted"][account.name]
    # Each submission in the exchange belongs to its student's own account.
    owners = hub.results["submission_owners"]
    assert owners == {a.name: a.uid for a in hub.students.values()}


def test_the_grading_account_grades_what_was_collected(hub):
    grades = hub.results["grades"]
    right, wrong = hub.students["right"].name, hub.students["wrong"].name
    assert set(grades) == {right, wrong}, hub.results["grade_output"][-3000:]
    assert float(grades[right]["score"]) == 10, grades[right]
    assert float(grades[wrong]["score"]) == 5, grades[wrong]     # the address tests lost
    submitted = hub.course / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == sorted([right, wrong])


def test_each_student_gets_their_own_feedback_over_http(hub):
    fb = hub.results["feedback"]
    right, wrong = hub.students["right"], hub.students["wrong"]
    right_page = _plain(fb[right.name]["pages"][0])
    wrong_page = _plain(fb[wrong.name]["pages"][0])
    assert "16 * (matrix // 2)" in right_page and "16 * (matrix % 2)" not in right_page
    assert "16 * (matrix % 2)" in wrong_page and "16 * (matrix // 2)" not in wrong_page
    assert re.search(r"Score:\s*10(\.0)?\s*/\s*10", right_page), right_page[:500]
    assert re.search(r"Score:\s*5(\.0)?\s*/\s*10", wrong_page), wrong_page[:500]


def test_a_student_cannot_reach_the_other_students_feedback(hub):
    tries = hub.results["wrong_tries_after_feedback"]
    assert tries == {k: "PermissionError" for k in tries}, tries
    # Their token opens no other student's server (403), feedback folder included.
    assert hub.results["cross_server"] == 403
    assert hub.results["cross_feedback"] == 403


def test_course_root_and_inbound_hold_against_a_student(hub):
    tries = dict(hub.results["wrong_tries_before_grading"])
    assert tries.pop("write their own submission") == "allowed"
    assert tries == {k: "PermissionError" for k in tries}, tries
    assert hub.course.stat().st_mode & 0o777 == 0o700
    assert hub.exchange.stat().st_mode & 0o7777 == 0o1777
    assert hub.results["inbound_mode"] & 0o1000, oct(hub.results["inbound_mode"])   # sticky


def test_formgrader_only_for_instructors(hub):
    for account in hub.students.values():
        for page in ("formgrader", "formgrader/manage_assignments"):
            reply = hub.results[page][account.name]
            assert reply.status == 403, (page, account.name, reply.status, reply.headers)
            assert "not authorized to access the formgrader" in reply.text, reply.text[-500:]
            assert ASSIGNMENT not in _plain(reply.text)
        reply = hub.results["formgrader/api/assignments"][account.name]
        assert reply.status == 403 and ASSIGNMENT not in reply.text, (reply.status, reply.text[:300])
    entry = hub.results["formgrader"][hub.instructor.name]
    assert entry.status == 302, entry.status
    assert (entry.headers.get("Location") or "").endswith(f"{SERVICE}/formgrader/manage_assignments")
    mine = hub.results["formgrader/manage_assignments"][hub.instructor.name]
    assert mine.status == 200 and "Manage Assignments" in mine.text, (mine.status, mine.text[:300])
    api = hub.results["formgrader/api/assignments"][hub.instructor.name]
    assert api.status == 200, api.text[:300]
    (assignment,) = api.json()
    assert assignment["name"] == ASSIGNMENT and assignment["num_submissions"] == 2
    # A student's own server has no formgrader (README, step 4).
    assert hub.results["student_server_formgrader"] == 404
