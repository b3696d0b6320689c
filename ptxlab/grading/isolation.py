"""Run one piece of untrusted work (a learner's kernel launch) in a throw-away child process.

A CUDA fault leaves the process's context unusable, a kernel that never finishes blocks its
process, and a crash takes the process down. Running every learner launch in its own child,
with a wall-clock limit and a memory limit, turns each of these into an exception in the
caller -- one failed check -- while the notebook's kernel, its later checks and the next
student carry on untouched.

The child is a fresh interpreter (``python -m ptxlab.grading.isolation --child DIR``): nothing
of the parent's CUDA state is inherited, and the parent never initialises CUDA itself.
Request and reply travel as pickles in a private temporary folder; the child's own stdout and
stderr (device ``printf``, crash dumps) go to files there, so a flood of output cannot block it.
"""
from __future__ import annotations

import importlib
import inspect
import os
import pickle
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "IsolationError", "IsolatedTimeout", "IsolatedMemoryExceeded", "IsolatedCrash",
    "IsolatedError", "run_isolated", "run_launch_isolated", "default_timeout_s",
    "default_memory_mb", "TIMEOUT_ENV", "MEMORY_ENV",
]

#: Environment variables that set the defaults (the grading kernel's environment sets them).
TIMEOUT_ENV = "PTXLAB_ISOLATE_TIMEOUT_S"
MEMORY_ENV = "PTXLAB_ISOLATE_MEMORY_MB"
_DEFAULT_TIMEOUT_S = 30.0
_DEFAULT_MEMORY_MB = 4096
#: How often the parent samples the child's resident memory.
_POLL_S = 0.02
#: Characters of the child's output quoted in an error message.
_TAIL_CHARS = 1500


class IsolationError(RuntimeError):
    """The isolated child did not return a result; the message says why in plain words."""

    def __init__(self, message: str, *, output_tail: str = ""):
        super().__init__(message)
        self.output_tail = output_tail


class IsolatedTimeout(IsolationError):
    """The child ran past its wall-clock limit (a kernel that never finishes, an endless loop)."""


class IsolatedMemoryExceeded(IsolationError):
    """The child's resident memory went over its limit."""


class IsolatedCrash(IsolationError):
    """The child died without a reply (a signal, ``os._exit``, an abort in a driver)."""


class IsolatedError(IsolationError):
    """The work raised an exception that could not be carried back as itself."""

    def __init__(self, message: str, *, type_name: str, remote_traceback: str,
                 output_tail: str = ""):
        super().__init__(message, output_tail=output_tail)
        self.type_name = type_name
        self.remote_traceback = remote_traceback


def default_timeout_s() -> float:
    """Wall-clock limit for one isolated call: ``$PTXLAB_ISOLATE_TIMEOUT_S`` or 30 s."""
    return float(os.environ.get(TIMEOUT_ENV) or _DEFAULT_TIMEOUT_S)


def default_memory_mb() -> int:
    """Resident-memory limit for one isolated call: ``$PTXLAB_ISOLATE_MEMORY_MB`` or 4096."""
    return int(float(os.environ.get(MEMORY_ENV) or _DEFAULT_MEMORY_MB))


@dataclass
class _Reply:
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
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - _TAIL_CHARS))
            return fh.read().decode("utf-8", "replace").strip()
    except FileNotFoundError:
        return ""


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code} before sending a result (os._exit, sys.exit or a crash)"


def run_isolated(target: str, args: tuple = (), kwargs: dict | None = None, *, timeout_s: float | None = None,
                 memory_mb: int | None = None, env: dict[str, str] | None = None,
                 what: str = "the isolated call") -> Any:
    """Call ``"package.module:function"(*args, **kwargs)`` in a fresh child process and return its result.

    The child's exception comes back as itself when it pickles (``CompileError`` and
    ``KernelFault`` of the backends do), else as :class:`IsolatedError`. A child past
    ``timeout_s`` seconds or ``memory_mb`` MiB of resident memory is killed with its whole
    process group and :class:`IsolatedTimeout` / :class:`IsolatedMemoryExceeded` is raised; a
    child that dies without replying raises :class:`IsolatedCrash`. ``what`` names the work in
    those messages (e.g. "kernel 'load_tile'").
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
        with open(work / "request.pkl", "wb") as fh:
            pickle.dump((module_name, func_name, tuple(args), dict(kwargs or {})), fh)
        child_env = dict(os.environ)
        child_env.update(env or {})
        # The child must run the work itself, not hand it to yet another child.
        child_env["PTXLAB_ISOLATE"] = "0"
        child_env["PTXLAB_ISOLATED_CHILD"] = "1"
        child_env.setdefault("PYTHONUNBUFFERED", "1")
        # The child imports this very copy of ptxlab, wherever the parent found it.
        package_root = str(Path(__file__).resolve().parents[2])
        paths = [package_root] + [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p]
        child_env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        with open(work / "stdout.txt", "wb") as out, open(work / "stderr.txt", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ptxlab.grading.isolation", "--child", str(work)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=child_env,
                start_new_session=True, close_fds=True,
            )
        verdict = _watch(proc, timeout_s, memory_mb)
        output = "\n".join(x for x in (_tail(work / "stdout.txt"), _tail(work / "stderr.txt")) if x)
        if verdict == "timeout":
            raise IsolatedTimeout(
                f"{what} did not finish within {timeout_s:g} s and was stopped "
                "(a kernel that never finishes, or an endless loop?)", output_tail=output)
        if verdict == "memory":
            raise IsolatedMemoryExceeded(
                f"{what} used more than {memory_mb} MiB of memory and was stopped",
                output_tail=output)
        reply_path = work / "reply.pkl"
        if not reply_path.exists():
            msg = f"{what} {_describe_exit(proc.returncode)}"
            if output:
                msg += f"; its last output:\n{output}"
            raise IsolatedCrash(msg, output_tail=output)
        with open(reply_path, "rb") as fh:
            reply: _Reply = pickle.load(fh)
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


def _watch(proc: subprocess.Popen, timeout_s: float, memory_mb: int) -> str:
    """Wait for the child; ``"done"``, or ``"timeout"``/``"memory"`` after killing its group."""
    deadline = time.monotonic() + timeout_s
    verdict = ["done"]
    stop = threading.Event()

    def sample_memory() -> None:
        while not stop.is_set():
            if _resident_mb(proc.pid) > memory_mb:
                verdict[0] = "memory"
                _kill_group(proc)
                return
            stop.wait(_POLL_S)

    sampler = threading.Thread(target=sample_memory, daemon=True)
    sampler.start()
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        if verdict[0] == "done":
            verdict[0] = "timeout"
        _kill_group(proc)
        proc.wait()
    finally:
        stop.set()
        sampler.join()
    # Whatever the child left behind in its group (helpers it started) goes with it.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return verdict[0]


# ---------------------------------------------------------------------------------------------
# Kernel launches
# ---------------------------------------------------------------------------------------------

def _launch_in_child(**launch_kwargs):
    """Runs inside the child: the backends' own launch, never isolated again."""
    from ptxlab import backends

    params = inspect.signature(backends.launch).parameters
    if "isolate" in params:
        launch_kwargs["isolate"] = False
    return backends.launch(**launch_kwargs)


def run_launch_isolated(source: str, kernel: str, grid=(1,), block=(32,), args=(),
                        shared_mem: int = 0, backend: str = "auto", *,
                        timeout_s: float | None = None, memory_mb: int | None = None,
                        **launch_kwargs):
    """``ptxlab.backends.launch(...)`` in an isolated child; returns the same ``LaunchResult``.

    Takes ``launch``'s own arguments. ``CompileError`` and ``KernelFault`` come back as
    themselves; a launch that hangs, runs out of memory or kills its process raises an
    :class:`IsolationError` whose message names the kernel and the limit it broke.
    """
    kwargs = dict(source=source, kernel=kernel, grid=grid, block=block, args=list(args),
                  shared_mem=shared_mem, backend=backend, **launch_kwargs)
    return run_isolated("ptxlab.grading.isolation:_launch_in_child", kwargs=kwargs,
                        timeout_s=timeout_s, memory_mb=memory_mb, what=f"kernel '{kernel}'")


# ---------------------------------------------------------------------------------------------
# Child side
# ---------------------------------------------------------------------------------------------

def _pickled_exception(exc: BaseException) -> bytes | None:
    """The exception as a pickle the parent can rebuild, or ``None`` (then it goes as text)."""
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
        return data
    except Exception:
        return None


def _child_main(work: Path) -> None:
    # A parent that limited its own address space (the grading kernel does) must not pass the
    # limit on: CUDA reserves far more virtual memory than it uses. Resident memory is what the
    # parent watches.
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    with open(work / "request.pkl", "rb") as fh:
        module_name, func_name, args, kwargs = pickle.load(fh)
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        reply = _Reply(ok=True, value=func(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
        reply = _Reply(ok=False, value=_pickled_exception(exc), type_name=type(exc).__name__,
                       message=str(exc), remote_traceback=traceback.format_exc())
    try:
        payload = pickle.dumps(reply)
    except Exception:  # the result does not pickle: say so instead
        reply = _Reply(ok=False, type_name="TypeError",
                       message=f"the result of {module_name}.{func_name} cannot be pickled")
        payload = pickle.dumps(reply)
    tmp = work / "reply.pkl.part"
    tmp.write_bytes(payload)
    tmp.rename(work / "reply.pkl")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        # Through the package, so the reply pickles as ptxlab.grading.isolation._Reply.
        from ptxlab.grading import isolation as _module
        _module._child_main(Path(sys.argv[2]))
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip interpreter teardown: a broken CUDA context can hang or crash in its destructor
        # after the reply is safely written.
        os._exit(0)
    print("usage: python -m ptxlab.grading.isolation --child DIR (internal)", file=sys.stderr)
    sys.exit(2)
