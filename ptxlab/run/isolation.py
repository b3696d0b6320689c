"""Run one piece of untrusted work (a learner's kernel launch) in a throw-away child process.

A CUDA fault leaves the process's context unusable, a kernel that never finishes blocks its
process, and a crash takes the process down. Running every learner launch in its own child,
with a wall-clock limit and a memory limit, turns each of these into an exception in the
caller -- one failed check -- while the notebook's kernel, its later checks and the next
student carry on untouched.

The child is a fresh interpreter (``python -m ptxlab.run.isolation --child DIR``): nothing
of the parent's CUDA state is inherited, and the parent never initialises CUDA itself. Where
the parent provably has no CUDA state (CuPy never imported, no CUDA driver library loaded) the
child is a fork of the parent instead, which skips the interpreter start and the imports
(``PTXLAB_ISOLATE_FORK=0`` turns this off). Request and reply travel as pickles in a private
temporary folder; the child's own stdout and stderr (device ``printf``, crash dumps) go to
files there, so a flood of output cannot block it.
"""
from __future__ import annotations

import importlib
import json
import os
import pickle
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import sources
from .deadline import Deadline
from .errors import (IsolatedCrash, IsolatedError, IsolatedMemoryExceeded, IsolatedTimeout,
                     IsolationError)
from .untrusted_files import read_regular, read_tail

__all__ = [
    "IsolationError", "IsolatedTimeout", "IsolatedMemoryExceeded", "IsolatedCrash",
    "IsolatedError", "run_isolated", "default_timeout_s", "default_memory_mb", "TIMEOUT_ENV",
    "MEMORY_ENV", "stopped_error", "reply_value", "Reply", "write_note", "fork_is_safe",
    "ForkedChild", "over_memory", "describe_exit", "pickled_exception", "TAIL_CHARS", "POLL_S",
]

#: Environment variables that set the defaults (the grading kernel's environment sets them).
TIMEOUT_ENV = "PTXLAB_ISOLATE_TIMEOUT_S"
MEMORY_ENV = "PTXLAB_ISOLATE_MEMORY_MB"
#: Set in the child: its private folder, where it leaves ``note.json`` (where the work runs)
#: before starting the work, so the parent can say so even if the child never replies.
_WORK_ENV = "PTXLAB_ISOLATED_WORK"
#: ``0`` always starts a fresh interpreter for the child; ``auto`` (default) forks when safe.
FORK_ENV = "PTXLAB_ISOLATE_FORK"
_DEFAULT_TIMEOUT_S = 30.0
_DEFAULT_MEMORY_MB = 4096
#: How often the parent samples the child's resident memory.
POLL_S = 0.02
#: Characters of the child's output quoted in an error message.
TAIL_CHARS = 1500
#: Largest note and reply read back from a child's folder (the work may have written there).
_NOTE_MAX_BYTES = 64 * 1024
_REPLY_MAX_BYTES = 4 * 2**30


def default_timeout_s() -> float:
    """Wall-clock limit for one isolated call: ``$PTXLAB_ISOLATE_TIMEOUT_S`` or 30 s."""
    return float(os.environ.get(TIMEOUT_ENV) or _DEFAULT_TIMEOUT_S)


def default_memory_mb() -> int:
    """Resident-memory limit for one isolated call: ``$PTXLAB_ISOLATE_MEMORY_MB`` or 4096."""
    return int(float(os.environ.get(MEMORY_ENV) or _DEFAULT_MEMORY_MB))


@dataclass
class Reply:
    """What the child (or the launch service's executor) sends back."""

    ok: bool
    value: Any = None              # the result, or the pickled exception (bytes) when it pickles
    type_name: str = ""
    message: str = ""
    remote_traceback: str = ""


# ---------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------

def _resident_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants, in MiB (0 once it is gone)."""
    total_kb = 0
    for p in [pid] + _descendants(pid):
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total_kb += int(line.split()[1])
                        break
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total_kb / 1024.0


def _descendants(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            kids = [int(x) for x in fh.read().split()]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    out = list(kids)
    for k in kids:
        out.extend(_descendants(k))
    return out


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass


def _tail(path: Path) -> str:
    """The end of a child's output file, read as a file the work could have replaced."""
    try:
        return read_tail(path, TAIL_CHARS, root=path.parent).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code} before sending a result (os._exit, sys.exit or a crash)"


def run_isolated(target: str, args: tuple = (), kwargs: dict | None = None, *, timeout_s: float | None = None,
                 memory_mb: int | None = None, env: dict[str, str] | None = None,
                 what: str = "the isolated call", notes: dict | None = None) -> Any:
    """Call ``"package.module:function"(*args, **kwargs)`` in a fresh child process and return its result.

    The child's exception comes back as itself when it pickles (``CompileError`` and
    ``KernelFault`` of the backends do), else as :class:`IsolatedError`. A child past
    ``timeout_s`` seconds or ``memory_mb`` MiB of resident memory is killed with its whole
    process group and :class:`IsolatedTimeout` / :class:`IsolatedMemoryExceeded` is raised; a
    child that dies without replying raises :class:`IsolatedCrash`. ``what`` names the work in
    those messages (e.g. "kernel 'load_tile'"). ``notes``, when given, receives what the child
    said about the work before starting it (for a launch: ``backend``, ``device``, ``where``),
    also when the child never replies.
    """
    timeout_s = default_timeout_s() if timeout_s is None else float(timeout_s)
    memory_mb = default_memory_mb() if memory_mb is None else int(memory_mb)
    if timeout_s <= 0 or memory_mb <= 0:
        raise ValueError(f"limits must be positive, got timeout_s={timeout_s}, memory_mb={memory_mb}")
    module_name, _, func_name = target.partition(":")
    if not module_name or not func_name:
        raise ValueError(f"target must look like 'package.module:function', got {target!r}")

    with tempfile.TemporaryDirectory(prefix="ptxlab-isolated-") as tmp:
        work = Path(tmp)
        request = (module_name, func_name, tuple(args), dict(kwargs or {}))
        env_changes = dict(env or {})
        # The child must run the work itself, not hand it to yet another child.
        env_changes.update({"PTXLAB_ISOLATE": "0", "PTXLAB_ISOLATED_CHILD": "1",
                            _WORK_ENV: str(work)})
        if fork_is_safe():
            proc = _fork_child(work, request, env_changes)
        else:
            proc = _exec_child(work, request, env_changes)
        verdict = _watch(proc, timeout_s, memory_mb)
        output = "\n".join(x for x in (_tail(work / "stdout.txt"), _tail(work / "stderr.txt")) if x)
        note = _read_note(work)
        if notes is not None:
            notes.update(note)
        if verdict != "done" or not (work / "reply.pkl").exists():
            raise stopped_error(verdict if verdict != "done" else "crash", what=what,
                                timeout_s=timeout_s, memory_mb=memory_mb,
                                where=note.get("where", ""), output=output,
                                exit_description=describe_exit(proc.returncode or 0))
        reply: Reply = pickle.loads(read_regular(work / "reply.pkl", max_bytes=_REPLY_MAX_BYTES,
                                                 root=work))
    return reply_value(reply, what=what, output=output)


def stopped_error(verdict: str, *, what: str, timeout_s: float, memory_mb: int, where: str = "",
                  output: str = "", exit_description: str = "") -> IsolationError:
    """The error for work that was stopped (``"timeout"``, ``"memory"``) or died (``"crash"``)."""
    where = f" on {where}" if where else ""
    if verdict == "timeout":
        return IsolatedTimeout(
            f"{what} did not finish within {timeout_s:g} s{where} and was stopped "
            "(a kernel that never finishes, or an endless loop?)", output_tail=output)
    if verdict == "memory":
        return IsolatedMemoryExceeded(
            f"{what} used more than {memory_mb} MiB of memory{where} and was stopped",
            output_tail=output)
    msg = f"{what}{where} {exit_description or 'died without sending a result'}"
    if output:
        msg += f"; its last output:\n{output}"
    return IsolatedCrash(msg, output_tail=output)


def reply_value(reply: Reply, *, what: str, output: str = "") -> Any:
    """The work's result, or its exception raised as itself (else as :class:`IsolatedError`)."""
    if reply.ok:
        return reply.value
    if reply.value is not None:
        try:
            exc = pickle.loads(reply.value)
        except Exception:  # pickled in the child but not rebuildable here
            exc = None
        if isinstance(exc, BaseException):
            raise exc
    raise IsolatedError(f"{what} raised {reply.type_name}: {reply.message}",
                        type_name=reply.type_name, remote_traceback=reply.remote_traceback,
                        output_tail=output)


def _exec_child(work: Path, request: tuple, env_changes: dict[str, str]) -> subprocess.Popen:
    """A fresh interpreter that reads the request from ``work`` (no state of the parent)."""
    with open(work / "request.pkl", "wb") as fh:
        pickle.dump(request, fh)
    child_env = dict(os.environ)
    child_env.update(env_changes)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    # The child imports this very copy of ptxlab, wherever the parent found it.
    package_root = str(sources.PROJECT_ROOT)
    paths = [package_root] + [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    child_env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    with open(work / "stdout.txt", "wb") as out, open(work / "stderr.txt", "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "ptxlab.run.isolation", "--child", str(work)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=child_env,
            start_new_session=True, close_fds=True,
        )


def fork_is_safe() -> bool:
    """Whether a fork of this process may run the work: never once CUDA may be initialised
    here (a forked child cannot use the parent's CUDA state), and not where it is turned off."""
    if os.environ.get(FORK_ENV, "auto").strip().lower() in ("0", "no", "false", "off"):
        return False
    if not hasattr(os, "fork") or "cupy" in sys.modules:
        return False
    try:
        with open("/proc/self/maps") as fh:
            maps = fh.read()
    except OSError:
        return False
    return "libcuda." not in maps and "libcudart" not in maps


class ForkedChild:
    """The few ``Popen`` methods :func:`_watch` uses, for a child made by ``os.fork``."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._pidfd = None

    def _reap(self, flags: int) -> bool:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:
            self.returncode = self.returncode if self.returncode is not None else -1
            return True
        if pid == 0:
            return False
        self.returncode = os.waitstatus_to_exitcode(status)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return True

    def poll(self) -> int | None:
        if self.returncode is None:
            self._reap(os.WNOHANG)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        # With a pidfd, select wakes up as the child ends; without, a short sleep at a time.
        for wait_s in Deadline(timeout).waits(None if self._pidfd is not None else 0.005):
            if self._reap(os.WNOHANG):
                return self.returncode  # type: ignore[return-value]
            if self._pidfd is not None:
                import select
                select.select([self._pidfd], [], [], wait_s)
            else:
                time.sleep(wait_s)  # type: ignore[arg-type]
        if self._reap(os.WNOHANG):  # as Popen.wait: a child that has ended is never late
            return self.returncode  # type: ignore[return-value]
        raise subprocess.TimeoutExpired(str(self.pid), timeout)

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


def _fork_child(work: Path, request: tuple, env_changes: dict[str, str]) -> ForkedChild:
    """A fork of this process that runs the request and leaves; nothing of it returns here."""
    out_fd = os.open(work / "stdout.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err_fd = os.open(work / "stderr.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    sys.stdout.flush()
    sys.stderr.flush()
    import warnings
    with warnings.catch_warnings():
        # Python 3.12 warns about forking a process with threads: the child touches none of
        # the threads' state (it swaps stdout/stderr for plain files first and never returns).
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid:
        for fd in (out_fd, err_fd, null_fd):
            os.close(fd)
        return ForkedChild(pid)
    try:  # the child
        os.setsid()
        os.dup2(null_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        import faulthandler
        if faulthandler.is_enabled():   # crash dumps into this child's own stderr file
            faulthandler.enable(file=sys.stderr)
        os.environ.update(env_changes)
        _serve(work, *request)
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - nothing may escape into the parent's code
        try:
            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
        os._exit(70)
    os._exit(0)


def _watch(proc: subprocess.Popen | ForkedChild, timeout_s: float, memory_mb: int) -> str:
    """Wait for the child; ``"done"``, or ``"timeout"``/``"memory"`` after killing its group.

    No helper thread: the caller may be a kernel whose memory a learner has used up, where a
    new thread cannot start.
    """
    verdict = "timeout"           # unless the loop below ends before the deadline
    try:
        for wait_s in Deadline(timeout_s).waits(POLL_S):
            try:
                proc.wait(timeout=wait_s)
                verdict = "done"
                break
            except subprocess.TimeoutExpired:
                pass
            if over_memory(proc.pid, memory_mb):
                verdict = "memory"
                break
    except BaseException:
        # Interrupted while waiting (a notebook cell's own time limit sends KeyboardInterrupt):
        # the child must not live on, spinning, under the cells that follow.
        _kill_group(proc)
        _reap_after_interrupt(proc)
        raise
    if verdict != "done":
        _kill_group(proc)
        proc.wait()
    # Whatever the child left behind in its group (helpers it started) goes with it.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return verdict


def _reap_after_interrupt(proc: subprocess.Popen | ForkedChild) -> None:
    """Collect a killed child after an interrupt, never blocking on ``Popen``'s own lock.

    The interrupt may have landed inside ``Popen.wait`` just after it took its internal
    ``_waitpid_lock`` and before the ``try`` that releases it; a blocking ``wait()`` would then
    wait for that lock forever. A ``wait`` with a timeout only tries the lock; past it the
    child is collected directly.
    """
    try:
        proc.wait(timeout=2.0)
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        os.waitpid(proc.pid, 0)
    except ChildProcessError:      # collected after all
        pass


def over_memory(pid: int, memory_mb: int) -> bool:
    """Whether the child and its descendants hold more than ``memory_mb`` MiB of their own.

    Resident memory first (cheap); only above the limit is it confirmed with the memory the
    processes do not share (a forked child shares the parent's pages until it writes them).
    """
    if _resident_mb(pid) <= memory_mb:
        return False
    return _private_mb(pid) > memory_mb


def _private_mb(pid: int) -> float:
    total_kb = 0
    for p in [pid] + _descendants(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith(("Private_Clean:", "Private_Dirty:")):
                        total_kb += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        except OSError:  # no smaps_rollup (old kernels): count resident memory instead
            return _resident_mb(pid)
    return total_kb / 1024.0


# ---------------------------------------------------------------------------------------------
# Notes: what the child says about the work before starting it
# ---------------------------------------------------------------------------------------------

def _read_note(work: Path) -> dict:
    try:
        return json.loads(read_regular(work / "note.json", max_bytes=_NOTE_MAX_BYTES, root=work))
    except (OSError, ValueError):
        return {}


def write_note(note: dict) -> None:
    """Child side: tell the parent about the work before starting it (for a launch: where it
    runs), so the parent can say so even if the child never replies."""
    work = os.environ.get(_WORK_ENV)
    if not work:
        return
    tmp = Path(work) / "note.json.part"
    tmp.write_text(json.dumps(note))
    tmp.rename(Path(work) / "note.json")


# ---------------------------------------------------------------------------------------------
# Child side
# ---------------------------------------------------------------------------------------------

def pickled_exception(exc: BaseException) -> bytes | None:
    """The exception as a pickle the parent can rebuild, or ``None`` (then it goes as text)."""
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
        return data
    except Exception:
        return None


def _child_main(work: Path) -> None:
    with open(work / "request.pkl", "rb") as fh:
        module_name, func_name, args, kwargs = pickle.load(fh)
    _serve(work, module_name, func_name, args, kwargs)


def _serve(work: Path, module_name: str, func_name: str, args: tuple, kwargs: dict) -> None:
    """Child side: run the work and leave the reply in ``work``."""
    # A parent that limited its own address space (the grading kernel does) must not pass the
    # limit on: CUDA reserves far more virtual memory than it uses. Resident memory is what the
    # parent watches.
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        reply = Reply(ok=True, value=func(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
        reply = Reply(ok=False, value=pickled_exception(exc), type_name=type(exc).__name__,
                       message=str(exc), remote_traceback=traceback.format_exc())
    try:
        payload = pickle.dumps(reply)
    except Exception:  # the result does not pickle: say so instead
        reply = Reply(ok=False, type_name="TypeError",
                       message=f"the result of {module_name}.{func_name} cannot be pickled")
        payload = pickle.dumps(reply)
    tmp = work / "reply.pkl.part"
    tmp.write_bytes(payload)
    tmp.rename(work / "reply.pkl")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        # Through the package, so the reply pickles as ptxlab.run.isolation.Reply.
        from . import isolation as _module
        _module._child_main(Path(sys.argv[2]))
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip interpreter teardown: a broken CUDA context can hang or crash in its destructor
        # after the reply is safely written.
        os._exit(0)
    print("usage: python -m ptxlab.run.isolation --child DIR (internal)", file=sys.stderr)
    sys.exit(2)
