"""Run a whole CUDA program as printed, on the GPU or with every launch on the CPU model.

The one entry point of ``ptxlab run`` and of the ``%%cuda`` cell magic. It picks where the
program runs (the GPU when one is usable and has every matrix instruction the program names,
else the CPU model), says so in one line, builds the program (:mod:`.toolchain`), and runs it:
on the GPU as itself; on the CPU model with its host code native and its device requests
answered by :class:`~.device_model.DeviceModel` over a socket. The program's stdout is its own
(device printf included); the lab's lines go to stderr, prefixed ``[ptxlab]``.
"""
from __future__ import annotations

import codecs
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Sequence

from . import toolchain
from .device_model import DeviceModel, LaunchRecord

__all__ = ["ProgramRun", "run_program", "choose_where", "BACKENDS"]

BACKENDS = ("auto", "gpu", "cpu")
#: How long one launch may run on the CPU model before it is stopped as an endless loop.
DEFAULT_KERNEL_TIME_LIMIT_S = 120.0


@dataclass
class ProgramRun:
    """What happened: where it ran, the program's exit status, its launches on the model."""

    backend: str                       # "gpu" or "cpu"
    reason: str                        # the one line that says why there
    exit_status: int
    build_s: float = 0.0
    run_s: float = 0.0
    launches: list[LaunchRecord] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)


def choose_where(source_text: str, backend: str = "auto") -> tuple[str, str]:
    """``(backend, line)``: the GPU when asked or usable for this program, else the CPU model."""
    from .. import gpu

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "cpu":
        return "cpu", "on the CPU model (--cpu): host code native, every launch bit-exact on the model"
    fit = gpu.fit_for(source_text)
    st, need, uses = fit.status, fit.need, fit.uses
    if st.available:
        if fit.ok:
            return "gpu", f"on the GPU: {st.device_label}"
        if backend == "gpu":
            raise toolchain.ToolchainMissing(
                f"this program uses {', '.join(uses)}, which needs sm_{need}; this GPU is "
                f"{st.device_label}: run it with --cpu")
        return "cpu", (f"on the CPU model: this program uses {', '.join(uses)} (sm_{need}), "
                       f"newer than this GPU ({st.device_label})")
    if backend == "gpu":
        raise toolchain.ToolchainMissing(f"no GPU to run on: {st.message}")
    return "cpu", f"on the CPU model (no GPU here: {st.message})"


@functools.lru_cache(maxsize=512)
def demangle(name: str) -> str:
    """A C++ kernel's name as written (``ldmatrix_x4(unsigned short*)``), else as given."""
    tool = shutil.which("c++filt")
    if not tool or not name.startswith("_Z"):
        return name
    try:
        out = subprocess.run([tool, name], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or name
    except (OSError, subprocess.TimeoutExpired):
        return name


def _say(err: IO[str], line: str) -> None:
    err.write(f"[ptxlab] {line}\n")
    err.flush()


def run_program(source: str | Path, backend: str = "auto", args: Sequence[str] = (), *,
                stdout: IO[str] | None = None, stderr: IO[str] | None = None,
                kernel_time_limit_s: float | None = DEFAULT_KERNEL_TIME_LIMIT_S,
                quiet: bool = False) -> ProgramRun:
    """Build and run ``source``; the program's output goes to ``stdout``/``stderr`` (the
    process's own by default; a notebook passes its streams). Raises
    :class:`toolchain.ToolchainMissing` or :class:`toolchain.ProgramCompileError`."""
    path = Path(source)
    err = stderr or sys.stderr
    text = path.read_text(errors="replace")
    where, line = choose_where(text, backend)
    if not quiet:
        _say(err, f"running {path.name} {line}")
    work = toolchain.scratch_dir()
    try:
        t0 = time.perf_counter()
        build = (toolchain.build_for_model(path, work) if where == "cpu"
                 else toolchain.build_for_gpu(path, work))
        build_s = time.perf_counter() - t0
        for note in build.notes:
            _say(err, f"note: {note}")
        t1 = time.perf_counter()
        if where == "gpu":
            status = _run_child([str(build.executable), *args], stdout, stderr)
            result = ProgramRun("gpu", line, status, build_s, time.perf_counter() - t1)
        else:
            model = DeviceModel(build.ptx, path.name, text, time_limit_s=kernel_time_limit_s,
                                demangle=demangle)
            status = _run_on_model(build.executable, args, model, stdout, stderr)
            result = ProgramRun("cpu", line, status, build_s, time.perf_counter() - t1,
                                model.launches, model.faults)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _closing_line(result, err)
    return result


def _closing_line(run: ProgramRun, err: IO[str]) -> None:
    if run.exit_status < 0 or run.exit_status > 128:
        sig = -run.exit_status if run.exit_status < 0 else run.exit_status - 128
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        _say(err, f"the program was killed by {name}")
    if run.faults:
        _say(err, f"the program exited with status {run.exit_status} after "
                  f"{len(run.faults)} kernel fault(s) on the CPU model (report above)")


def _pump(src: IO[bytes], dst: IO[str]) -> None:
    """Copy a child's output to a text stream as it comes (a notebook's cell output); a UTF-8
    character split between two reads is decoded whole."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for chunk in iter(lambda: src.read1(1 << 14), b""):
        dst.write(decoder.decode(chunk))
        dst.flush()
    dst.write(decoder.decode(b"", final=True))


def _popen(argv: list[str], stdout, stderr, **kw) -> tuple[subprocess.Popen, list[threading.Thread]]:
    """Start the program; its output straight to ours, or pumped into the given streams."""
    # a stream given is always pumped: a notebook's stream may have a descriptor (ipykernel
    # hands out its terminal's), and output written there would miss the cell
    pipe_out = stdout is not None
    pipe_err = stderr is not None
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE if pipe_out else stdout,
                            stderr=subprocess.PIPE if pipe_err else stderr, **kw)
    pumps = []
    for flag, src, dst in ((pipe_out, proc.stdout, stdout), (pipe_err, proc.stderr, stderr)):
        if flag:
            t = threading.Thread(target=_pump, args=(src, dst), daemon=True)
            t.start()
            pumps.append(t)
    return proc, pumps


def _finish(proc: subprocess.Popen, pumps: list[threading.Thread]) -> int:
    try:
        status = proc.wait()
    except KeyboardInterrupt:
        proc.kill()
        proc.wait()
        raise
    for t in pumps:
        t.join()
    return status


def _run_child(argv: list[str], stdout, stderr) -> int:
    proc, pumps = _popen(argv, stdout, stderr)
    return _finish(proc, pumps)


def _run_on_model(exe: Path, args: Sequence[str], model: DeviceModel, stdout, stderr) -> int:
    """The program with its device requests answered by ``model`` on a socket pair."""
    ours, theirs = socket.socketpair()
    env = dict(os.environ, PTXLAB_MODEL_FD=str(theirs.fileno()))
    try:
        proc, pumps = _popen([str(exe), *args], stdout, stderr, env=env,
                             pass_fds=(theirs.fileno(),))
    finally:
        theirs.close()
    try:
        model.serve(ours)
    except KeyboardInterrupt:
        proc.kill()
        raise
    finally:
        ours.close()
    return _finish(proc, pumps)
