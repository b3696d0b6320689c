"""The warm launch service, server side: runs inside a sandbox of its own, for one grading worker.

Isolating every learner launch in a fresh child costs a process and a CUDA context per launch --
about a second each, and sixteen grading workers queue for the one GPU while they create them.
The service keeps a warm *executor* (a process holding one CUDA context) and hands it one launch
at a time, with the same contract as a fresh child: a launch past its time or memory limit, a
crash, or a CUDA fault kills the executor and a fresh one takes over, and the failure is one
failed check of the learner who caused it.

::

    notebook kernel / grader --Unix socket--> supervisor (sandbox, no CUDA) --pipe--> executor

* The supervisor never runs learner code and never unpickles what a client sends: a request is a
  JSON header and the arguments' raw bytes, checked field by field
  (:mod:`ptxlab.run.launch_wire`), the source's size and the compiler options included.
* **Nothing of one session reaches the next.** Every request names its session (one per graded
  notebook, one per judging of it). When a request of another session comes, the executor is
  cleared before it serves it: every module it loaded is unloaded (no ``__device__`` variable
  carries over), device memory goes back to the driver -- each launch's buffers were zeroed
  before they were freed -- and its folder is emptied. Where the last session's kernels may have
  left what clearing cannot remove -- the device heap of in-kernel ``malloc``, read from the
  PTX (:mod:`ptxlab.run.ptx.context_state`) -- or clearing fails, the new session gets a fresh
  executor instead (a spare one is kept warm). A CUDA context costs the GPU's driver about a
  sixth of a second, one at a time for the whole machine, so a context per student would cap
  sixteen workers at about five students a second
  (``reports/grading_gpu/sessions/SESSIONS.md``).
* Each executor works in a fresh folder of its own (its current folder and ``TMPDIR``), removed
  with it; CuPy keeps its compiled modules in memory only. The CPU model's PTX cache is shared
  by the executors of the service, content-addressed and verified on every read
  (:mod:`ptxlab.run.ptx.nvrtc`).

``python -m ptxlab.run.launch_server --socket PATH [--max-timeout-s S] [--max-memory-mb M]``
runs a service; :class:`ptxlab.run.launch_client.ServiceProcess` starts one.
"""
from __future__ import annotations

import argparse
import os
import pickle
import resource
import shutil
import signal
import socket
import socketserver
import struct
import sys
import tempfile
import traceback
from multiprocessing.connection import Connection
from pathlib import Path

from . import in_process
from .deadline import Deadline
from .errors import RequestRefused
from .isolation import (POLL_S, TAIL_CHARS, ForkedChild, Reply, default_memory_mb,
                        default_timeout_s, describe_exit, over_memory, pickled_exception)
from .launch_client import STARTUP_TIMEOUT_S
from .launch_wire import launch_request, recv_frame, send_frame
from .ptx.context_state import context_state_left
from .untrusted_files import read_tail

__all__ = ["LaunchServiceServer", "serve", "main"]

#: Error types after which the executor's CUDA context is still sound (nothing ran on the GPU).
_CONTEXT_SURVIVES = {"CompileError", "LaunchError", "BackendUnavailable", "KernelArgumentError",
                     "ValueError", "TypeError", "RequestRefused"}
_CONNECT_TIMEOUT_S = 10.0
#: The message that asks an executor to clear itself for the next student, and how long it has.
NEXT_STUDENT = "next_student"
CLEAR_TIMEOUT_S = 10.0
#: Longest session name a request may carry.
_MAX_SESSION_CHARS = 200
#: Largest file an executor writes (its output, a cache entry), and what the service's PTX
#: cache may hold in all.
_EXECUTOR_FILE_BYTES = 64 * 2**20
_PTX_CACHE_MB = 256


# ---------------------------------------------------------------------------------------------
# Executor: the warm process that runs launches
# ---------------------------------------------------------------------------------------------

def _executor_main(conn: Connection) -> None:
    """Warm up (imports, the CUDA context), say ready, then run one launch per message."""
    info: dict = {"backend": "cpu"}
    try:
        chosen, _ = in_process.choose_backend("", "auto")
        if chosen == "gpu":
            from . import gpu
            info = {"backend": "gpu", "device": gpu.warm_up()}
        else:
            in_process.cpu_module()
    except Exception as exc:  # noqa: BLE001 - the launches report it in their own words
        info["warm_up_error"] = f"{type(exc).__name__}: {exc}"
    conn.send(("ready", info))
    ran: set[tuple[str, tuple]] = set()    # (source, options) launched since the last clearing
    while True:
        try:
            kwargs = conn.recv()
        except EOFError:
            return
        if kwargs.get("op") == NEXT_STUDENT:
            conn.send(("cleared", _clear_for_next_student(ran)))
            ran.clear()
            continue
        conn.send(("note", in_process.where_it_runs(kwargs["source"], kwargs["backend"])))
        try:
            reply = Reply(ok=True, value=in_process.run_here(**kwargs))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the client
            reply = Reply(ok=False, value=pickled_exception(exc), type_name=type(exc).__name__,
                          message=str(exc), remote_traceback=traceback.format_exc())
        _release_device_memory()
        if reply.ok or reply.type_name not in ("CompileError", "RequestRefused"):
            ran.add((kwargs["source"], tuple(kwargs.get("options", ()))))
        conn.send(("reply", pickle.dumps(reply)))
        sys.stdout.flush()
        sys.stderr.flush()


def _leaves_state(source: str, options: tuple) -> bool:
    """Whether a kernel of ``source`` may have left in this process what clearing cannot
    remove (the device heap, through in-kernel ``malloc``), read from its PTX (already compiled
    for the CPU model, so from its cache); a PTX that cannot be read counts as yes."""
    try:
        return bool(context_state_left(in_process.cpu_module().compile_ptx(source, options)))
    except Exception:  # noqa: BLE001 - not read: a fresh process for the next student
        return True


def _clear_for_next_student(ran: set[tuple[str, tuple]]) -> bool:
    """Leave nothing of the last student's launches (``ran``) for the next one's: unload the
    modules (their ``__device__`` variables with them) and empty the folder; each launch's
    device memory was zeroed and given back when it ended. ``False`` -- the service then starts
    a fresh executor -- where a kernel that ran may have left what clearing cannot remove, or
    clearing failed."""
    if any(_leaves_state(source, options) for source, options in ran):
        return False
    try:
        if "cupy" in sys.modules:
            from . import gpu

            gpu.unload_modules()
        for entry in os.scandir("."):
            if entry.name not in ("stdout.txt", "stderr.txt"):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
        return True
    except Exception:  # noqa: BLE001 - the service replaces an executor it cannot clear
        traceback.print_exc()
        return False


def _release_device_memory() -> None:
    """Free what the launch allocated back to the driver."""
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            cupy.get_default_memory_pool().free_all_blocks()
            cupy.get_default_pinned_memory_pool().free_all_blocks()
        except Exception:  # noqa: BLE001 - a broken context is replaced after a fault anyway
            pass


class _Executor:
    """The supervisor's handle on one executor: a fork of the supervisor (which has no CUDA
    state), in its own session, working in a fresh folder of its own, with its output in files
    there."""

    def __init__(self, folder: Path, number: int, session: str | None):
        self.session = session
        self.workdir = folder / f"executor-{number}"
        self.workdir.mkdir(mode=0o700)
        self.stdout = self.workdir / "stdout.txt"
        self.stderr = self.workdir / "stderr.txt"
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
                os.chdir(self.workdir)
                # Output a launch writes (device printf, the CPU model's) stops at a cap
                # instead of filling the service's memory-backed /tmp.
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (_EXECUTOR_FILE_BYTES,
                                                           _EXECUTOR_FILE_BYTES))
                os.environ.update({"TMPDIR": str(self.workdir), "CUPY_CACHE_IN_MEMORY": "1"})
                tempfile.tempdir = None
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
        self.proc = ForkedChild(pid)
        self.conn = Connection(parent.detach())
        self.ready = False
        self.launches = 0
        self.info: dict = {}

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output_sizes(self) -> tuple[int, int]:
        sizes = []
        for path in (self.stdout, self.stderr):
            try:
                sizes.append(os.lstat(path).st_size)
            except OSError:
                sizes.append(0)
        return tuple(sizes)  # type: ignore[return-value]

    def output_since(self, sizes: tuple[int, int]) -> str:
        parts = []
        for path, start in zip((self.stdout, self.stderr), sizes):
            try:
                data = read_tail(path, TAIL_CHARS, root=self.workdir, offset=start)
            except OSError:
                continue
            parts.append(data.decode("utf-8", "replace").strip())
        return "\n".join(p for p in parts if p)

    def wait_ready(self, timeout_s: float) -> bool:
        if self.ready:
            return True
        for wait_s in Deadline(timeout_s).waits(0.05):
            if self.conn.poll(wait_s):
                try:
                    kind, info = self.conn.recv()
                except (EOFError, OSError):
                    return False
                self.ready, self.info = kind == "ready", info
                return self.ready
            if self.proc.poll() is not None:
                return False
        return False

    def clear_for_next_student(self, timeout_s: float = CLEAR_TIMEOUT_S) -> bool:
        """Ask the executor to leave nothing of its launches for the next student's; whether
        it could, in time (an executor that could not is replaced)."""
        try:
            self.conn.send({"op": NEXT_STUDENT})
            if not self.conn.poll(timeout_s):
                return False
            kind, ok = self.conn.recv()
        except (EOFError, OSError):
            return False
        return kind == "cleared" and ok is True

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
        shutil.rmtree(self.workdir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Supervisor
# ---------------------------------------------------------------------------------------------

class LaunchServiceServer(socketserver.UnixStreamServer):
    """Serves one request at a time on a Unix socket; owns the executors and their limits."""

    def __init__(self, socket_path: str, *, max_timeout_s: float, max_memory_mb: int):
        self.folder = Path(tempfile.mkdtemp(prefix="ptxlab-executor-"))
        # The CPU model's PTX cache: shared by this service's executors, verified on read.
        os.environ.setdefault("PTXLAB_CACHE_DIR", str(self.folder / "ptx-cache"))
        os.environ.setdefault("PTXLAB_CACHE_MAX_MB", str(_PTX_CACHE_MB))
        self.max_timeout_s = float(max_timeout_s)
        self.max_memory_mb = int(max_memory_mb)
        self.launches = 0
        self.restarts = 0
        self.handovers = 0          # sessions that followed another in a cleared executor
        self._number = 0
        self.executor: _Executor | None = None
        self.spare: _Executor | None = None
        super().__init__(socket_path, _Handler)
        self.executor = self._new_executor(None)

    def _new_executor(self, session: str | None) -> _Executor:
        self._number += 1
        return _Executor(self.folder, self._number, session)

    def replace_executor(self) -> None:
        """Kill the executor (a fault, a hang, a crash) and start its successor warming up,
        for the same session."""
        session = self.executor.session if self.executor is not None else None
        if self.executor is not None:
            self.executor.stop()
        self.restarts += 1
        self.executor = self._new_executor(session)

    def executor_for(self, session: str) -> _Executor | None:
        """A warm executor for ``session``: the running one, cleared for the new session when it
        served another; a fresh one (the spare, warmed meanwhile) where the other session's
        launches may have left something clearing cannot remove, or clearing failed."""
        ex = self.executor
        if ex is not None and ex.session not in (None, session):
            if not ex.clear_for_next_student():
                ex.stop()
                ex, self.executor = None, None
            else:
                self.handovers += 1
        if ex is None:
            if self.spare is not None and self.spare.proc.poll() is None:
                self.executor, self.spare = self.spare, None
            else:
                if self.spare is not None:        # died while it waited
                    self.spare.stop()
                    self.spare = None
                self.executor = self._new_executor(None)
            self.restarts += 1
        self.executor.session = session
        ready = self.ready_executor()
        if self.spare is None:
            self.spare = self._new_executor(None)
        return ready

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
        for ex in (self.executor, self.spare):
            if ex is not None:
                ex.stop()
        self.executor = self.spare = None
        shutil.rmtree(self.folder, ignore_errors=True)


class _Handler(socketserver.BaseRequestHandler):
    server: LaunchServiceServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(_CONNECT_TIMEOUT_S)
        try:
            header, payload = recv_frame(sock)
        except (OSError, EOFError, ValueError, struct.error) as exc:
            self._reply({"verdict": "refused", "message": f"unreadable request ({exc})"})
            return
        if header.get("op") == "ping":
            ex = self.server.ready_executor() if header.get("warm") is True else self.server.executor
            self._reply({"verdict": "done", "pid": os.getpid(),
                         "executor_pid": ex.pid if ex else None, "launches": self.server.launches,
                         "restarts": self.server.restarts,
                         "handovers": self.server.handovers,
                         "session": ex.session if ex else None,
                         "executor": ex.info if ex else {}})
            return
        try:
            kwargs = launch_request(header, payload)
            session = header.get("session", "")
            if not isinstance(session, str) or len(session) > _MAX_SESSION_CHARS:
                raise ValueError("session must be a short string")
            timeout_s = min(float(header.get("timeout_s", self.server.max_timeout_s)),
                            self.server.max_timeout_s)
            memory_mb = min(int(header.get("memory_mb", self.server.max_memory_mb)),
                            self.server.max_memory_mb)
            if timeout_s <= 0 or memory_mb <= 0:
                raise ValueError("limits must be positive")
        except RequestRefused as exc:
            self._reply({"verdict": "refused", "kind": "RequestRefused", "message": str(exc)})
            return
        except (ValueError, TypeError) as exc:
            self._reply({"verdict": "refused", "message": str(exc)})
            return
        self._reply(*self._run(kwargs, session, timeout_s, memory_mb))

    def _reply(self, header: dict, body: bytes = b"") -> None:
        try:
            send_frame(self.request, header, body)
        except OSError:  # the client went away (its kernel was stopped): nothing to tell
            pass

    def _run(self, kwargs: dict, session: str, timeout_s: float,
             memory_mb: int) -> tuple[dict, bytes]:
        server = self.server
        ex = server.executor_for(session)
        if ex is None:
            return {"verdict": "unavailable",
                    "message": "the launch service could not start a process for launches"}, b""
        server.launches += 1
        ex.launches += 1
        base = {"timeout_s": timeout_s, "memory_mb": memory_mb, "executor_pid": ex.pid}
        sizes = ex.output_sizes()
        try:
            ex.conn.send(kwargs)
        except OSError:
            server.replace_executor()
            return {**base, "verdict": "unavailable", "message": "the executor was gone"}, b""
        note: dict = {}
        verdict, body = "timeout", b""   # unless the loop below ends before the deadline
        for wait_s in Deadline(timeout_s).waits(POLL_S):
            try:
                if ex.conn.poll(wait_s):
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
            if over_memory(ex.pid, memory_mb):
                verdict = "memory"
                break
        header = {**base, "verdict": verdict, "note": note}
        if verdict != "done":
            if verdict == "crash":
                ex.proc.wait()
                header["exit"] = describe_exit(ex.proc.returncode or 0)
            header["output"] = ex.output_since(sizes)
            server.replace_executor()
            return header, b""
        header["output"] = ex.output_since(sizes)
        reply = pickle.loads(body)
        if not reply.ok and reply.type_name not in _CONTEXT_SURVIVES:
            server.replace_executor()      # a CUDA fault leaves the context unusable
        return header, body


def _import_cupy_without_cuda() -> None:
    """Import CuPy here, once, so that every executor forked from this process starts with it
    loaded (each student's executor would otherwise spend a good part of a second importing it).
    Importing CuPy does not initialise CUDA -- it does that on first use -- so the forks still
    create CUDA contexts of their own; this process never touches the GPU."""
    from .gpu import DISABLE_ENV

    if os.environ.get(DISABLE_ENV, "") == "1":
        return
    try:
        import cupy  # noqa: F401
    except Exception:  # noqa: BLE001 - no CuPy (a CPU machine): the executors use the CPU model
        pass


def serve(socket_path: str, *, max_timeout_s: float, max_memory_mb: int) -> None:
    """Run the service until SIGTERM (or its parent's death, in the sandbox)."""
    in_process.cpu_module()     # imported once here (no CUDA), not by every executor
    _import_cupy_without_cuda()
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="path of the Unix socket to listen on")
    parser.add_argument("--max-timeout-s", type=float, default=default_timeout_s(),
                        help="no launch runs longer than this, whatever a client asks")
    parser.add_argument("--max-memory-mb", type=int, default=default_memory_mb(),
                        help="no launch's process holds more host memory than this, MiB")
    args = parser.parse_args(argv)
    serve(args.socket, max_timeout_s=args.max_timeout_s, max_memory_mb=args.max_memory_mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
