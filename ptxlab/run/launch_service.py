"""A warm launch service: one long-lived process that runs a grading worker's kernel launches.

Isolating every learner launch in a fresh child (:mod:`ptxlab.run.isolation`) costs a process
and a CUDA context per launch -- about a second each, and sixteen grading workers queue for
the one GPU while they create them. The service keeps one warm *executor* (a process holding
one CUDA context and the compile cache) and hands it one launch at a time, with the same
contract as a fresh child: a launch past its time or memory limit, a crash, or a CUDA fault
kills the executor and a fresh one takes over, so the next launch gets a fresh context, and the
failure is one failed check of the learner who caused it.

::

    notebook kernel (sandbox) --Unix socket--> supervisor (sandbox, no CUDA) --pipe--> executor

The supervisor never runs learner code and never unpickles what a client sends: a request is a
JSON header and the arguments' raw bytes, checked field by field, so the learner code that can
reach the socket can only ask for launches, within limits the service was started with. Replies
travel as pickles from the service to the client (the direction the client trusts).

``python -m ptxlab.run.launch_service --socket PATH [--max-timeout-s S] [--max-memory-mb M]``
runs a service; :class:`ServiceProcess` starts and stops one; :func:`launch` is the client, used
by :func:`ptxlab.run.isolation.run_launch_isolated` when ``$PTXLAB_LAUNCH_SERVICE`` names a
socket.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from . import isolation, sources

__all__ = ["SERVICE_ENV", "ServiceUnavailable", "ServiceProcess", "launch", "ping",
           "LaunchServiceServer", "main"]

#: The socket a notebook kernel's launches go to (set by the grader in the kernel's environment).
SERVICE_ENV = isolation.SERVICE_ENV
#: Largest request the supervisor reads: header (the source) and arguments' bytes.
MAX_HEADER_BYTES = 16 * 2**20
MAX_PAYLOAD_BYTES = 1024 * 2**20
#: How long a client waits for a connection, and the supervisor for a fresh executor.
_CONNECT_TIMEOUT_S = 10.0
STARTUP_TIMEOUT_S = 120.0
#: Error types after which the executor's CUDA context is still sound (nothing ran on the GPU).
_CONTEXT_SURVIVES = {"CompileError", "LaunchError", "BackendUnavailable", "KernelArgumentError",
                     "ValueError", "TypeError"}
_BACKENDS = ("auto", "gpu", "cpu")
_FRAME = struct.Struct(">QQ")


class ServiceUnavailable(RuntimeError):
    """The service could not take the launch (not running, not answering, no executor): a fault
    of the machine, never of the learner; the caller runs the launch another way."""


# ---------------------------------------------------------------------------------------------
# Wire format
# ---------------------------------------------------------------------------------------------

def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 4 * 2**20))
        if not chunk:
            raise EOFError("the connection closed mid-message")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _send_frame(sock: socket.socket, header: dict, payload: bytes = b"") -> None:
    head = json.dumps(header).encode()
    sock.sendall(_FRAME.pack(len(head), len(payload)) + head)
    if payload:
        sock.sendall(payload)


def _recv_frame(sock: socket.socket, *, max_header: int = MAX_HEADER_BYTES,
                max_payload: int = MAX_PAYLOAD_BYTES) -> tuple[dict, bytes]:
    n_head, n_payload = _FRAME.unpack(_recv_exact(sock, _FRAME.size))
    if n_head > max_header or n_payload > max_payload:
        raise ValueError(f"message too large ({n_head} + {n_payload} bytes)")
    header = json.loads(_recv_exact(sock, n_head))
    if not isinstance(header, dict):
        raise ValueError("the message header is not a JSON object")
    return header, _recv_exact(sock, n_payload) if n_payload else b""


def _encode_args(args: Sequence) -> tuple[list[dict], bytes]:
    """Each numpy array or scalar as (dtype, shape, bytes): data only, no pickle."""
    specs, blobs = [], []
    for a in args:
        # (ascontiguousarray would make a scalar a 1-element array)
        arr = np.asarray(a) if isinstance(a, np.generic) else np.ascontiguousarray(a)
        if arr.dtype.hasobject or arr.dtype.kind not in "biufc":
            raise TypeError(f"a launch argument of dtype {arr.dtype} cannot be sent to a kernel")
        specs.append({"dtype": arr.dtype.str, "shape": list(arr.shape),
                      "scalar": isinstance(a, np.generic), "nbytes": arr.nbytes})
        blobs.append(arr.tobytes())
    return specs, b"".join(blobs)


def _decode_args(specs: Any, payload: bytes) -> list:
    """The client's arguments, refusing anything but plain numeric arrays and scalars."""
    if not isinstance(specs, list):
        raise ValueError("args must be a list")
    out, offset = [], 0
    for spec in specs:
        if not isinstance(spec, dict):
            raise ValueError("each argument must be described by an object")
        dtype = np.dtype(str(spec.get("dtype", "")))
        if dtype.hasobject or dtype.kind not in "biufc" or dtype.fields is not None:
            raise ValueError(f"argument dtype {dtype} is not a plain number type")
        shape = spec.get("shape")
        if (not isinstance(shape, list) or len(shape) > 8
                or not all(isinstance(d, int) and d >= 0 for d in shape)):
            raise ValueError("argument shape must be a list of non-negative integers")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes != spec.get("nbytes") or offset + nbytes > len(payload):
            raise ValueError("argument sizes do not match the data sent")
        arr = np.frombuffer(payload, dtype=dtype, count=nbytes // dtype.itemsize,
                            offset=offset).reshape(shape).copy()
        offset += nbytes
        out.append(arr[()] if spec.get("scalar") is True and arr.ndim == 0 else arr)
    if offset != len(payload):
        raise ValueError("more data was sent than the arguments describe")
    return out


def _dims(value: Any, what: str) -> tuple[int, ...]:
    if (not isinstance(value, list) or not 1 <= len(value) <= 3
            or not all(isinstance(d, int) and d >= 1 for d in value)):
        raise ValueError(f"{what} must be 1 to 3 positive integers")
    return tuple(value)


def _launch_request(header: dict, payload: bytes) -> dict:
    """``backends.launch`` keyword arguments from a request, every field checked."""
    source, kernel = header.get("source"), header.get("kernel")
    options, backend = header.get("options", []), header.get("backend", "auto")
    shared_mem = header.get("shared_mem", 0)
    if not isinstance(source, str) or not isinstance(kernel, str):
        raise ValueError("source and kernel must be strings")
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise ValueError("options must be a list of strings")
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}")
    if not isinstance(shared_mem, int) or shared_mem < 0:
        raise ValueError("shared_mem must be a non-negative integer")
    return dict(source=source, kernel=kernel, grid=_dims(header.get("grid"), "grid"),
                block=_dims(header.get("block"), "block"),
                args=_decode_args(header.get("args", []), payload), shared_mem=shared_mem,
                backend=backend, options=tuple(options))


# ---------------------------------------------------------------------------------------------
# Client
# ---------------------------------------------------------------------------------------------

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
        _send_frame(sock, header, payload)
        return _recv_frame(sock, max_header=MAX_HEADER_BYTES, max_payload=2 * MAX_PAYLOAD_BYTES)
    except (OSError, EOFError, ValueError) as exc:
        raise ServiceUnavailable(f"the launch service stopped answering ({type(exc).__name__}: "
                                 f"{exc})") from None
    finally:
        sock.close()


def ping(socket_path: str, timeout_s: float = 30.0, *, warm: bool = False) -> dict:
    """The service's state: ``pid``, ``executor_pid``, ``launches``, ``restarts``, and
    ``executor`` (where it runs launches); ``warm`` first waits for a warm executor."""
    header, _ = _exchange(socket_path, {"op": "ping", "warm": warm}, b"", timeout_s)
    return header


def launch(socket_path: str, *, source: str, kernel: str, grid=(1,), block=(32,), args=(),
           shared_mem: int = 0, backend: str = "auto", options: Sequence[str] = (),
           timeout_s: float, memory_mb: int, notes: dict | None = None):
    """``backends.launch(...)`` run by the service; returns the ``LaunchResult``.

    Raises what :func:`ptxlab.run.isolation.run_isolated` raises for the same outcome
    (``CompileError``, ``KernelFault``, ``IsolatedTimeout``, ...), or
    :class:`ServiceUnavailable` when the service itself failed. ``notes`` receives where the
    launch ran (``backend``, ``device``, ``where``) and the executor's ``executor_pid``.
    """
    specs, payload = _encode_args(args)
    header = {"op": "launch", "source": source, "kernel": kernel,
              "grid": [int(g) for g in grid], "block": [int(b) for b in block],
              "shared_mem": int(shared_mem), "backend": backend, "options": list(options),
              "args": specs, "timeout_s": float(timeout_s), "memory_mb": int(memory_mb)}
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
        raise ValueError(f"the launch service refused the request: {reply.get('message')}")
    what = f"kernel '{kernel}'"
    output = str(reply.get("output", ""))
    if verdict != "done":
        raise isolation.stopped_error(verdict, what=what, timeout_s=float(reply.get("timeout_s", timeout_s)),
                                      memory_mb=int(reply.get("memory_mb", memory_mb)),
                                      where=note.get("where", ""), output=output,
                                      exit_description=str(reply.get("exit", "")))
    return isolation.reply_value(pickle.loads(body), what=what, output=output)


# ---------------------------------------------------------------------------------------------
# Executor: the warm process that runs launches
# ---------------------------------------------------------------------------------------------

def _executor_main(conn: Connection) -> None:
    """Warm up (imports, the CUDA context), say ready, then run one launch per message."""
    from . import backends

    info: dict = {"backend": "cpu"}
    try:
        chosen, _ = backends.choose_backend("", "auto")
        if chosen == "gpu":
            from . import gpu
            cupy = gpu._import_cupy()
            cupy.zeros(1, dtype=cupy.uint32).get()       # creates the context now, not mid-launch
            info = {"backend": "gpu", "device": gpu.status().device_label}
        else:
            backends._cpu_module()
    except Exception as exc:  # noqa: BLE001 - the launches report it in their own words
        info["warm_up_error"] = f"{type(exc).__name__}: {exc}"
    conn.send(("ready", info))
    while True:
        try:
            kwargs = conn.recv()
        except EOFError:
            return
        conn.send(("note", _where_it_runs(backends, kwargs)))
        try:
            reply = isolation.Reply(ok=True, value=backends.launch(isolate=False, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the client
            reply = isolation.Reply(ok=False, value=isolation.pickled_exception(exc),
                                    type_name=type(exc).__name__, message=str(exc),
                                    remote_traceback=traceback.format_exc())
        _release_device_memory()
        conn.send(("reply", pickle.dumps(reply)))
        sys.stdout.flush()
        sys.stderr.flush()


def _where_it_runs(backends, kwargs: dict) -> dict:
    try:
        chosen, reason = backends.choose_backend(kwargs["source"], kwargs["backend"])
    except Exception:  # the launch raises the same error with its own message
        return {}
    if chosen == "gpu":
        from . import gpu
        device = gpu.status().device_label
    else:
        device = getattr(backends, "CPU_DEVICE", "CPU model")
    return {"backend": chosen, "device": device, "reason": reason,
            "where": isolation.where_text(chosen, device)}


def _release_device_memory() -> None:
    """Free what the launch allocated, so the next learner's kernel finds none of its data."""
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            cupy.get_default_memory_pool().free_all_blocks()
            cupy.get_default_pinned_memory_pool().free_all_blocks()
        except Exception:  # noqa: BLE001 - a broken context is replaced after a fault anyway
            pass


class _Executor:
    """The supervisor's handle on one executor: a fork of the supervisor (which has no CUDA
    state), in its own session, with its output in files of the service's folder."""

    def __init__(self, folder: Path, number: int):
        self.stdout = folder / f"executor-{number}.out"
        self.stderr = folder / f"executor-{number}.err"
        parent, child = socket.socketpair()
        out_fd = os.open(self.stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err_fd = os.open(self.stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the executor
            try:
                parent.close()
                os.setsid()
                os.dup2(out_fd, 1)
                os.dup2(err_fd, 2)
                sys.stdout = open(1, "w", buffering=1, closefd=False)
                sys.stderr = open(2, "w", buffering=1, closefd=False)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                _executor_main(Connection(child.detach()))
            except BaseException:  # noqa: BLE001 - never return into the supervisor's code
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
        os.close(out_fd)
        os.close(err_fd)
        child.close()
        self.proc = isolation.ForkedChild(pid)
        self.conn = Connection(parent.detach())
        self.ready = False
        self.info: dict = {}

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output_sizes(self) -> tuple[int, int]:
        return tuple(p.stat().st_size if p.exists() else 0 for p in (self.stdout, self.stderr))  # type: ignore[return-value]

    def output_since(self, sizes: tuple[int, int]) -> str:
        parts = []
        for path, start in zip((self.stdout, self.stderr), sizes):
            try:
                with open(path, "rb") as fh:
                    fh.seek(start)
                    parts.append(fh.read()[-isolation.TAIL_CHARS:].decode("utf-8", "replace").strip())
            except OSError:
                pass
        return "\n".join(p for p in parts if p)

    def wait_ready(self, timeout_s: float) -> bool:
        if self.ready:
            return True
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.conn.poll(0.05):
                try:
                    kind, info = self.conn.recv()
                except (EOFError, OSError):
                    return False
                self.ready, self.info = kind == "ready", info
                return self.ready
            if self.proc.poll() is not None:
                return False
        return False

    def stop(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.conn.close()
        for path in (self.stdout, self.stderr):
            path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# Supervisor
# ---------------------------------------------------------------------------------------------

class LaunchServiceServer(socketserver.UnixStreamServer):
    """Serves one request at a time on a Unix socket; owns the executor and its limits."""

    def __init__(self, socket_path: str, *, max_timeout_s: float, max_memory_mb: int):
        self.folder = Path(tempfile.mkdtemp(prefix="ptxlab-executor-"))
        self.max_timeout_s = float(max_timeout_s)
        self.max_memory_mb = int(max_memory_mb)
        self.launches = 0
        self.restarts = 0
        self._number = 0
        self.executor: _Executor | None = None
        super().__init__(socket_path, _Handler)
        self._start_executor()

    def _start_executor(self) -> None:
        self._number += 1
        self.executor = _Executor(self.folder, self._number)

    def replace_executor(self) -> None:
        """Kill the executor (a fault, a hang, a crash) and start its successor warming up."""
        if self.executor is not None:
            self.executor.stop()
        self.restarts += 1
        self._start_executor()

    def ready_executor(self) -> _Executor | None:
        """A warm executor, starting a new one once if the current one died while warming."""
        for _ in range(2):
            ex = self.executor
            if ex is not None and ex.proc.poll() is None and ex.wait_ready(STARTUP_TIMEOUT_S):
                return ex
            self.replace_executor()
        return None

    def server_close(self) -> None:
        super().server_close()
        if self.executor is not None:
            self.executor.stop()
            self.executor = None
        try:
            self.folder.rmdir()
        except OSError:
            pass


class _Handler(socketserver.BaseRequestHandler):
    server: LaunchServiceServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(_CONNECT_TIMEOUT_S)
        try:
            header, payload = _recv_frame(sock)
        except (OSError, EOFError, ValueError, struct.error) as exc:
            self._reply({"verdict": "refused", "message": f"unreadable request ({exc})"})
            return
        if header.get("op") == "ping":
            ex = self.server.ready_executor() if header.get("warm") is True else self.server.executor
            self._reply({"verdict": "done", "pid": os.getpid(),
                         "executor_pid": ex.pid if ex else None, "launches": self.server.launches,
                         "restarts": self.server.restarts,
                         "executor": ex.info if ex else {}})
            return
        try:
            kwargs = _launch_request(header, payload)
            timeout_s = min(float(header.get("timeout_s", self.server.max_timeout_s)),
                            self.server.max_timeout_s)
            memory_mb = min(int(header.get("memory_mb", self.server.max_memory_mb)),
                            self.server.max_memory_mb)
            if timeout_s <= 0 or memory_mb <= 0:
                raise ValueError("limits must be positive")
        except (ValueError, TypeError) as exc:
            self._reply({"verdict": "refused", "message": str(exc)})
            return
        self._reply(*self._run(kwargs, timeout_s, memory_mb))

    def _reply(self, header: dict, body: bytes = b"") -> None:
        try:
            _send_frame(self.request, header, body)
        except OSError:  # the client went away (its kernel was stopped): nothing to tell
            pass

    def _run(self, kwargs: dict, timeout_s: float, memory_mb: int) -> tuple[dict, bytes]:
        server = self.server
        ex = server.ready_executor()
        if ex is None:
            return {"verdict": "unavailable",
                    "message": "the launch service could not start a process for launches"}, b""
        server.launches += 1
        base = {"timeout_s": timeout_s, "memory_mb": memory_mb, "executor_pid": ex.pid}
        sizes = ex.output_sizes()
        try:
            ex.conn.send(kwargs)
        except OSError:
            server.replace_executor()
            return {**base, "verdict": "unavailable", "message": "the executor was gone"}, b""
        note: dict = {}
        deadline = time.monotonic() + timeout_s
        verdict, body = "crash", b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                verdict = "timeout"
                break
            try:
                if ex.conn.poll(min(isolation.POLL_S, left)):
                    kind, value = ex.conn.recv()
                    if kind == "note":
                        note = value
                        continue
                    verdict, body = "done", value
                    break
            except (EOFError, OSError):
                verdict = "crash"
                break
            if ex.proc.poll() is not None:
                verdict = "crash"
                break
            if isolation.over_memory(ex.pid, memory_mb):
                verdict = "memory"
                break
        header = {**base, "verdict": verdict, "note": note}
        if verdict != "done":
            if verdict == "crash":
                ex.proc.wait()
                header["exit"] = isolation.describe_exit(ex.proc.returncode or 0)
            header["output"] = ex.output_since(sizes)
            server.replace_executor()
            return header, b""
        header["output"] = ex.output_since(sizes)
        reply = pickle.loads(body)
        if not reply.ok and reply.type_name not in _CONTEXT_SURVIVES:
            server.replace_executor()      # a CUDA fault leaves the context unusable
        return header, body


def serve(socket_path: str, *, max_timeout_s: float, max_memory_mb: int) -> None:
    """Run the service until SIGTERM (or its parent's death, in the sandbox)."""
    server = LaunchServiceServer(socket_path, max_timeout_s=max_timeout_s,
                                 max_memory_mb=max_memory_mb)

    def _stop(signum, frame):  # noqa: ARG001
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _stop)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        try:
            os.unlink(socket_path)
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------
# The grader's handle
# ---------------------------------------------------------------------------------------------

class ServiceProcess:
    """One running service, started by the grader: ``socket_path`` is what kernels connect to.

    ``wrap`` turns the service's command into the command actually run (the grading sandbox's
    ``bwrap`` line); ``env`` is the service's whole environment.
    """

    def __init__(self, *, max_timeout_s: float, max_memory_mb: int,
                 wrap: Callable[[list[str], Path, dict[str, str]], list[str]] | None = None,
                 env: dict[str, str] | None = None):
        self.folder = Path(tempfile.mkdtemp(prefix="ptxlab-launch-"))
        self.socket_path = str(self.folder / "launch.sock")
        command = [sys.executable, "-m", "ptxlab.run.launch_service", "--socket",
                   self.socket_path, "--max-timeout-s", f"{max_timeout_s:g}",
                   "--max-memory-mb", str(int(max_memory_mb))]
        run_env = dict(os.environ if env is None else env)
        # The service imports this very copy of ptxlab, wherever the grader found it.
        paths = [str(sources.PROJECT_ROOT)] + [p for p in run_env.get("PYTHONPATH", "").split(os.pathsep) if p]
        run_env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        if wrap is not None:
            command = wrap(command, self.folder, run_env)
        self._log = open(self.folder / "service.log", "wb")
        self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=run_env,
                                     start_new_session=True, close_fds=True,
                                     preexec_fn=_die_with_parent)

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
        try:
            return (self.folder / "service.log").read_bytes()[-isolation.TAIL_CHARS:].decode(
                "utf-8", "replace").strip() or "(no output)"
        except OSError:
            return "(no output)"

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="path of the Unix socket to listen on")
    parser.add_argument("--max-timeout-s", type=float, default=isolation.default_timeout_s(),
                        help="no launch runs longer than this, whatever a client asks")
    parser.add_argument("--max-memory-mb", type=int, default=isolation.default_memory_mb(),
                        help="no launch's process holds more host memory than this, MiB")
    args = parser.parse_args(argv)
    serve(args.socket, max_timeout_s=args.max_timeout_s, max_memory_mb=args.max_memory_mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
