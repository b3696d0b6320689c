"""The client side of the warm launch service: what a notebook kernel and the grader run.

:func:`launch` sends one launch to the service (:mod:`ptxlab.run.launch_server`, running in a
sandbox of its own) and returns the same ``LaunchResult`` a launch in this process would, or
raises the same errors; :func:`ping` asks for its state; :class:`ServiceProcess` is the grader's
handle on one running service (it starts the server's command, never imports it).

Every launch names its *session* (``$PTXLAB_LAUNCH_SESSION``: one per graded notebook, one per
judging of a notebook): the service clears its executor before it serves a new session (or
starts a fresh one where clearing cannot undo what the last session did), so nothing one
student's launches leave behind (compiled modules, files, device memory) is seen by another's.
"""
from __future__ import annotations

import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from . import sources
from .errors import RequestRefused, ServiceUnavailable
from .isolation import TAIL_CHARS, reply_value, stopped_error
from .launch_request import check_options, check_source
from .launch_wire import MAX_HEADER_BYTES, MAX_PAYLOAD_BYTES, encode_args, recv_frame, send_frame
from .untrusted_files import read_tail

__all__ = ["SERVICE_ENV", "SESSION_ENV", "ServiceUnavailable", "ServiceProcess", "launch",
           "ping", "STARTUP_TIMEOUT_S", "SERVER_MODULE"]

#: The socket a notebook kernel's launches go to (set by the grader in the kernel's environment).
SERVICE_ENV = "PTXLAB_LAUNCH_SERVICE"
#: The session the launches of this process belong to (the executor is cleared between sessions).
SESSION_ENV = "PTXLAB_LAUNCH_SESSION"
#: The module the service runs (``python -m``).
SERVER_MODULE = "ptxlab.run.launch_server"
#: How long a client waits for a connection, and the service for a fresh executor.
_CONNECT_TIMEOUT_S = 10.0
STARTUP_TIMEOUT_S = 120.0


def _connect(socket_path: str, timeout_s: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(_CONNECT_TIMEOUT_S)
    try:
        sock.connect(socket_path)
    except OSError as exc:
        sock.close()
        raise ServiceUnavailable(f"the launch service at {socket_path} does not answer ({exc})") from None
    sock.settimeout(timeout_s)
    return sock


def _exchange(socket_path: str, header: dict, payload: bytes, timeout_s: float) -> tuple[dict, bytes]:
    sock = _connect(socket_path, timeout_s)
    try:
        send_frame(sock, header, payload)
        return recv_frame(sock, max_header=MAX_HEADER_BYTES, max_payload=2 * MAX_PAYLOAD_BYTES)
    except (OSError, EOFError, ValueError) as exc:
        raise ServiceUnavailable(f"the launch service stopped answering ({type(exc).__name__}: "
                                 f"{exc})") from None
    finally:
        sock.close()


def ping(socket_path: str, timeout_s: float = 30.0, *, warm: bool = False) -> dict:
    """The service's state: ``pid``, ``executor_pid``, ``launches``, ``restarts``, ``session``,
    and ``executor`` (where it runs launches); ``warm`` first waits for a warm executor."""
    header, _ = _exchange(socket_path, {"op": "ping", "warm": warm}, b"", timeout_s)
    return header


def launch(socket_path: str, *, source: str, kernel: str, grid=(1,), block=(32,), args=(),
           shared_mem: int = 0, backend: str = "auto", options: Sequence[str] = (),
           timeout_s: float, memory_mb: int, notes: dict | None = None,
           session: str | None = None):
    """``run_here(...)`` run by the service; returns the ``LaunchResult``.

    Raises what a launch in an isolated child raises for the same outcome (``CompileError``,
    ``KernelFault``, ``IsolatedTimeout``, ``RequestRefused`` ...), or
    :class:`~ptxlab.run.errors.ServiceUnavailable` when the service itself failed. ``notes``
    receives where the launch ran (``backend``, ``device``, ``where``) and the executor's
    ``executor_pid``. ``session`` defaults to ``$PTXLAB_LAUNCH_SESSION``.
    """
    check_source(source)                # refused here, never sent
    options = check_options(options)
    specs, payload = encode_args(args)
    header = {"op": "launch", "source": source, "kernel": kernel,
              "grid": [int(g) for g in grid], "block": [int(b) for b in block],
              "shared_mem": int(shared_mem), "backend": backend, "options": list(options),
              "args": specs, "timeout_s": float(timeout_s), "memory_mb": int(memory_mb),
              "session": session if session is not None else os.environ.get(SESSION_ENV, "")}
    # The service may first have to start a fresh executor, then runs the launch to its limit.
    reply, body = _exchange(socket_path, header, payload,
                            timeout_s=float(timeout_s) + STARTUP_TIMEOUT_S + 30.0)
    note = reply.get("note") or {}
    if notes is not None:
        notes.update(note)
        notes["executor_pid"] = reply.get("executor_pid")
    verdict = reply.get("verdict")
    if verdict == "unavailable":
        raise ServiceUnavailable(str(reply.get("message", "the service has no executor")))
    if verdict == "refused":
        if reply.get("kind") == "RequestRefused":
            raise RequestRefused(str(reply.get("message")))
        raise ValueError(f"the launch service refused the request: {reply.get('message')}")
    what = f"kernel '{kernel}'"
    output = str(reply.get("output", ""))
    if verdict != "done":
        raise stopped_error(verdict, what=what, timeout_s=float(reply.get("timeout_s", timeout_s)),
                            memory_mb=int(reply.get("memory_mb", memory_mb)),
                            where=note.get("where", ""), output=output,
                            exit_description=str(reply.get("exit", "")))
    return reply_value(pickle.loads(body), what=what, output=output)


class ServiceProcess:
    """One running service, started by the grader: ``socket_path`` is what kernels connect to.

    ``wrap`` turns the service's command into the command actually run (the grading sandbox's
    ``bwrap`` line), or into a start with files to hand down (``argv`` and ``pass_fds``, closed
    here once the service started); ``env`` is the service's whole environment.
    """

    def __init__(self, *, max_timeout_s: float, max_memory_mb: int,
                 wrap: Callable[[list[str], Path, dict[str, str]], Any] | None = None,
                 env: dict[str, str] | None = None):
        self.folder = Path(tempfile.mkdtemp(prefix="ptxlab-launch-"))
        self.socket_path = str(self.folder / "launch.sock")
        command = [sys.executable, "-m", SERVER_MODULE, "--socket",
                   self.socket_path, "--max-timeout-s", f"{max_timeout_s:g}",
                   "--max-memory-mb", str(int(max_memory_mb))]
        run_env = dict(os.environ if env is None else env)
        # The service imports this very copy of ptxlab, wherever the grader found it.
        paths = [str(sources.PROJECT_ROOT)] + [p for p in run_env.get("PYTHONPATH", "").split(os.pathsep) if p]
        run_env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        start = None
        if wrap is not None:
            start = wrap(command, self.folder, run_env)
            command = list(getattr(start, "argv", start))
        else:      # no sandbox of its own: its temporary files go where stop() removes them
            run_env.setdefault("TMPDIR", str(self.folder))
        self._log = open(self.folder / "service.log", "wb")
        try:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self._log,
                                         stderr=subprocess.STDOUT, env=run_env,
                                         start_new_session=True, close_fds=True,
                                         pass_fds=tuple(getattr(start, "pass_fds", ())),
                                         preexec_fn=_die_with_parent)
        finally:
            if hasattr(start, "close"):
                start.close()

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> dict:
        """Wait until the service answers and its executor is warm; its ``ping`` reply.

        Raises :class:`ServiceUnavailable` with the service's own output when it does not come up.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if os.path.exists(self.socket_path):
                try:
                    state = ping(self.socket_path, timeout_s=max(1.0, deadline - time.monotonic()),
                                 warm=True)
                except ServiceUnavailable:
                    state = {}
                if state.get("executor"):
                    return state
            time.sleep(0.05)
        raise ServiceUnavailable("the launch service did not start: " + self.log_tail())

    def log_tail(self) -> str:
        """The end of the service's own output (its folder is writable inside its sandbox: read
        as an untrusted file)."""
        try:
            return read_tail(self.folder / "service.log", TAIL_CHARS, root=self.folder).decode(
                "utf-8", "replace").strip() or "(no output)"
        except OSError as exc:
            return f"(no output: {exc})"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """Stop the service and everything it started; remove its folder."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()
        self._log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _die_with_parent() -> None:
    """In the child before exec: the service dies with the process that started it (a grading
    worker killed outright must not leave it running; bwrap does the same in the sandbox)."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)     # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
