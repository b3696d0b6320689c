"""Before anyone is graded: start one notebook kernel and one kernel launch exactly as grading will.

The notebook kernel starts in the grading sandbox with the client-only ``ptxlab`` and hands back
a reply as the judge will ask for it; the probe kernel is launched where the judge launches
kernel answers (the grader's isolated launch path). Where the notebooks' own test cells decide
(``PTXLAB_VERDICTS=notebook``), the probe is launched inside the notebook kernel instead.

A sandbox that cannot start a kernel (a library folder it does not mount, a missing ``bwrap``), or
a kernel in which no launch can run, would otherwise give every student of the class a 0 with an
opaque reason. ``ptxlab grade`` runs this first and stops, writing nothing, with the reason and
the fix. It also says where learner kernels will run (the GPU or the CPU model).
"""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..run.in_process import where_text
from ..run.includes import preprocessor
from ..run.launch_log import LAUNCH_LOG_ENV
from . import disk_share, sandbox
from .sandbox_account import describe_account, sandbox_account
from .launch_service_pool import WORKERS_ENV, shutdown_launch_services, wants_service

__all__ = ["PreflightResult", "sandbox_problem", "run_preflight", "PROBE_SOURCE"]

#: The probe's kernel: every lane writes one word the grader can check.
PROBE_SOURCE = ('extern "C" __global__ void preflight(unsigned* o) '
                '{ o[threadIdx.x] = 3u * threadIdx.x + 1u; }')
_MARK = "PTXLAB-PREFLIGHT"
_PROBE_CELL = f'''import json, os
import numpy as np
from ptxlab import backends
_r = backends.launch({PROBE_SOURCE!r}, "preflight", args=[np.zeros(32, np.uint32)])
assert (_r.outputs[0] == 3 * np.arange(32) + 1).all(), _r.outputs[0]
_log = os.environ.get("{LAUNCH_LOG_ENV}", "")
_route = json.loads(open(_log).read().splitlines()[-1]).get("route", "") if _log and os.path.exists(_log) else ""
print("{_MARK}", _r.backend, "|", _r.device, "|", _route)
'''
_CLIENT_CELL = f'''import ptxlab
assert getattr(ptxlab, "GRADING_CLIENT", False), "the notebook's ptxlab is not the grading client"
answer = lambda lane: 3 * lane + 1
ptxlab.hand_back(get_ipython().user_ns, '[{{"key": "k", "answer": "answer", "questions": [{{"key": "q", "args": [2]}}]}}]', "t")
print("PTXLAB-CLIENT ok")
'''
_FIX = ("autograder/README.md (the sandbox) says how to set it up; PTXLAB_SANDBOX=none grades "
        "without the sandbox (trusted notebooks only)")


@dataclass
class PreflightResult:
    """What the probe found: ``problem`` is empty when grading can start."""

    problem: str = ""
    backend: str = ""       # where the probe's launch ran: "gpu" or "cpu"
    device: str = ""
    warning: str = ""       # a reason to look, not to stop (a GPU the launch did not use)
    route: str = ""         # how the launch was isolated: "service" (warm) or "child ..."
    seconds: float = 0.0
    limits: str = ""        # who enforces the kernels' memory, process and CPU limits

    @property
    def ok(self) -> bool:
        return not self.problem

    @property
    def where(self) -> str:
        """``the GPU (NVIDIA H100 ...)`` or ``the CPU model (PTX interpreter)``."""
        return where_text(self.backend, self.device)


#: What every notebook kernel imports before its first cell (ipykernel and what it stands on).
KERNEL_MODULES = ("ipykernel", "IPython", "jupyter_client", "zmq", "traitlets", "tornado",
                  "numpy", "pygments", "prompt_toolkit")


def compile_own_package() -> None:
    """Compile the package ``ptxlab`` runs from, where this user may write to it: the grader's
    own modules (what a kernel imports of it is the client, compiled when it is built)."""
    import compileall

    from ..run import sources

    if os.access(sources.PACKAGE_DIR, os.W_OK):
        compileall.compile_dir(str(sources.PACKAGE_DIR), quiet=2)


def modules_without_bytecode(names: tuple[str, ...] = KERNEL_MODULES) -> dict[str, str]:
    """``{module: folder to compile}`` for the kernel's modules whose source has no ``.pyc``
    beside it."""
    import importlib.util

    missing: dict[str, str] = {}
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        origin = spec.origin if spec else None
        if not origin or not origin.endswith(".py"):
            continue
        if not os.path.exists(importlib.util.cache_from_source(origin)):
            missing[name] = str(Path(origin).parent.parent)
    return missing


def sandbox_problem(sandbox_mode: str) -> str | None:
    """Why ``bwrap`` cannot start here, or ``None`` when it can (or the sandbox is off)."""
    if sandbox_mode != "bwrap":
        return None
    try:
        bwrap = sandbox.bwrap_binary()
    except sandbox.SandboxUnavailable as exc:
        return str(exc)
    probe = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-user", "--unshare-pid",
                            "--unshare-net", "--proc", "/proc", "--dev", "/dev",
                            "--die-with-parent", "--", "/bin/true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return (f"bwrap cannot start the grading sandbox here ({probe.stderr.strip()[:300]}); "
                + _FIX)
    return None


def _outputs_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        if cell.get("source", "").startswith(f"# {_MARK}"):     # the grader's own probe
            parts.append(cell["source"][2:])
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(out.get("text", ""))
            elif out.get("output_type") == "error":
                parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    return "".join(parts)


class _GraderProbeFailed(RuntimeError):
    """The probe kernel, launched where the judge launches kernel answers, failed."""


def _grader_probe(cfg, work: Path) -> str:
    """Launch the probe where the judge launches kernel answers; the line the notebook probe
    would have printed (``MARK backend | device | route``), as a cell's source to read back."""
    import json

    import numpy as np

    from ..run import backends
    from .judge_steps import grader_launches

    log = work / "grader-launches.jsonl"
    try:
        with grader_launches(cfg, log):
            result = backends.launch(PROBE_SOURCE, "preflight", args=[np.zeros(32, np.uint32)])
    except Exception as exc:  # noqa: BLE001 - the launch's own error, quoted
        raise _GraderProbeFailed(f"{type(exc).__name__}: {str(exc)[:1000]}") from None
    if not (result.outputs[0] == 3 * np.arange(32) + 1).all():
        raise _GraderProbeFailed(f"wrong output {result.outputs[0]!r}")
    route = ""
    if log.exists():
        lines = log.read_text().splitlines()
        route = json.loads(lines[-1]).get("route", "") if lines else ""
    line = f"{_MARK} {result.backend} | {result.device} | {route}"
    return f"# {line}\n"


def _judged_by_the_grader(course: Path, assignment: str | None) -> bool:
    """Whether ``assignment``'s notebooks grade answers through exercises (so the judge judges
    them and their kernels get the client); unknown assignment: yes."""
    if not assignment:
        return True
    import nbformat

    from . import judge

    notebooks = sorted((Path(course) / "source" / assignment).glob("*.ipynb"))
    for path in notebooks:
        try:
            nb = nbformat.read(str(path), as_version=4)
        except Exception:  # noqa: BLE001 - an unreadable source is nbgrader's error to report
            continue
        if judge.answer_slots(nb, judge.exercise_aliases(judge.code_sources(nb))):
            return True
    return not notebooks


def run_preflight(course: Path, grading_config: Path | None = None, *,
                  timeout_s: float = 180.0, assignment: str | None = None,
                  workers: int = 1) -> PreflightResult:
    """Start one notebook kernel as grading does and launch the probe kernel where grading
    will: in the notebook's kernel for notebooks whose test cells decide, where the judge
    launches kernel answers for notebooks it judges (``assignment`` says which; default: the
    judge's)."""
    from .kernel_manager import SandboxedKernelManager
    from .grading_worker import load_grading_config

    t0 = time.monotonic()
    cfg = load_grading_config(course, grading_config)
    settings = SandboxedKernelManager(config=cfg)      # the settings grading's kernels get
    limits, problem = _sandbox_limits(settings, course, workers)
    if problem is not None:
        return PreflightResult(problem=problem, seconds=time.monotonic() - t0)
    judged_outside = (bool(cfg.get("SandboxedExecute", {}).get("verdicts_by_grader", True))
                      and _judged_by_the_grader(course, assignment))
    text, problem = _run_probe_notebook(cfg, judged_outside, timeout_s)
    if problem is not None:
        return PreflightResult(problem=problem, seconds=time.monotonic() - t0)
    line = next((ln for ln in text.splitlines() if ln.startswith(_MARK)), "")
    if not line:
        return PreflightResult(problem=f"the probe cell printed nothing it should: {text[-500:]!r}",
                               seconds=time.monotonic() - t0)
    backend, device, route = (line[len(_MARK):].strip().split(" | ") + ["", ""])[:3]
    result = PreflightResult(backend=backend, device=device, route=route,
                             seconds=time.monotonic() - t0, limits=limits)
    result.warning = "; ".join(_preflight_warnings(settings, backend, device, route))
    return result


def _sandbox_limits(settings, course: Path, workers: int) -> tuple[str, str | None]:
    """``(limits, None)``: the limits grading's kernels will run under, worded; or ``("", why)``
    where the sandbox cannot give them (checked before any kernel starts: that is quicker and
    says more than a kernel's failed start)."""
    problem = sandbox_problem(settings.sandbox_mode)
    if problem:
        return "", problem
    try:
        limits = settings.enforcement().describe()
    except (RuntimeError, ValueError) as exc:
        return "", str(exc)
    # the disk every worker's kernels write to: the submissions' folders and the scratch space
    disk = settings._shared_quota([course, Path(tempfile.gettempdir())],
                                  {WORKERS_ENV: str(workers)})
    sized = settings.sandbox_mode == "bwrap" and disk_share.can_mount_scratch()
    limits += "\n" + disk.describe(sized_scratch=sized)
    if settings.sandbox_mode == "bwrap":       # whom the notebooks run as, outside
        try:
            limits += "\n" + describe_account(sandbox_account())
        except (sandbox.SandboxUnavailable, ValueError) as exc:
            return "", str(exc)
    return limits, None


def _run_probe_notebook(cfg, judged_outside: bool, timeout_s: float) -> tuple[str, str | None]:
    """``(what the probe notebook printed, None)`` once it ran in a sandboxed kernel as grading's
    notebooks run (then the grader's own probe launch, for notebooks the judge judges); or
    ``("", why)`` where a step failed. Leaves no kernel, launch service or folder behind."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from .kernel_manager import SandboxedKernelManager

    work = Path(tempfile.mkdtemp(prefix="ptxlab-preflight-"))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        _CLIENT_CELL if judged_outside else _PROBE_CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    client = NotebookClient(nb, kernel_manager_class=SandboxedKernelManager, config=cfg,
                            timeout=int(timeout_s), kernel_name="python3",
                            resources={"metadata": {"path": str(work)}})
    try:
        client.km = client.create_kernel_manager()
        client.km.graded_outside = judged_outside
        client.execute()
        if judged_outside:
            nb.cells.append(nbformat.v4.new_code_cell(_grader_probe(cfg, work)))
    except CellExecutionError:
        detail = _outputs_text(nb).strip()[-1500:]
        return "", (f"the notebook kernel started, but "
                    f"{'its grading client' if judged_outside else 'the probe kernel launch'} "
                    f"failed in it:\n{detail}")
    except _GraderProbeFailed as exc:
        return "", (f"the probe kernel launch failed where the grader launches "
                    f"kernel answers: {exc}")
    except Exception as exc:  # noqa: BLE001 - a dead kernel, a timeout, a failed start alike
        return "", (f"a notebook kernel could not start in the grading sandbox "
                    f"({type(exc).__name__}: {str(exc).strip()[-1500:]}); {_FIX}")
    finally:
        # A kernel that never started leaves nbclient's exit hook with nothing to clean up.
        atexit.unregister(client._cleanup_kernel)
        # The workers start their own launch services; none idles in the head. Stopped before
        # the probe's folder is removed: one still writing there would leave it behind.
        shutdown_launch_services()
        shutil.rmtree(work, ignore_errors=True)
    return _outputs_text(nb), None


def _preflight_warnings(settings, backend: str, device: str, route: str) -> list[str]:
    """What works but slower than it could (the CPU model on a GPU machine, no warm launch
    service, packages without bytecode, no C preprocessor): grading runs, the operator is
    told. Compiles the package's own bytecode on the way (the sandbox cannot)."""
    warnings = []
    if backend != "gpu" and settings.gpu and sandbox.gpu_device_nodes():
        warnings.append("this machine has an NVIDIA GPU, but learner kernels run on the CPU "
                        f"model ({device}); verdicts are the same, grading is slower. "
                        "`ptxlab status` inside the grading environment says why")
    if wants_service(settings.launch_service, settings.gpu) and route != "service":
        warnings.append(f"the warm launch service is not in use ({route or 'no launch record'}): "
                        "every launch starts a process of its own; verdicts are the same, "
                        "grading is slower")
    compile_own_package()
    uncompiled = modules_without_bytecode()
    if uncompiled:
        warnings.append(
            f"the Python packages a notebook kernel imports have no compiled bytecode "
            f"({', '.join(sorted(uncompiled))}; installed with --no-compile, or by another "
            "user): the sandbox is read-only, so every kernel compiles them again, about a "
            "second of CPU per submission; compile them once with `python -m compileall -q "
            + " ".join(sorted(set(uncompiled.values()))) + "`")
    if preprocessor() is None:
        warnings.append("no C preprocessor (cpp) here: a kernel's includes are not checked on "
                        "its preprocessed source, only kept out by the launch service's "
                        "sandbox, which holds no reference kernel (apt-get install cpp)")
    return warnings
