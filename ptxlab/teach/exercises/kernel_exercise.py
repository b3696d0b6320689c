"""Kernel exercises: the learner writes CUDA with inline PTX; it runs on the GPU (CuPy) or the
CPU backend through :func:`ptxlab.run.backends.launch` and its output is compared with the
emulator's, lane by lane."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .. import checks
from ..checks import CheckResult
from .base import Exercise, fresh_rng, hidden_rng


@dataclass
class KernelRun:
    """One launch of a learner's kernel and what its output must be.

    ``args`` are passed to ``launch`` (arrays are copied per run); ``out_index`` names the
    output argument; ``expected`` is what the emulator says it must hold afterwards, viewed as
    ``(32, n)`` words per warp; ``describe_value`` names a 16-bit value (inputs are filled with
    distinct element ids, so a wrong value says which element it is).
    """

    label: str
    args: list
    out_index: int
    expected: np.ndarray
    grid: tuple = (1,)
    block: tuple = (32,)
    shared_mem: int = 0
    describe_value: Callable[[int], str] | None = None
    elem_bits: int = 16
    unit: str = "reg"

    def with_fresh_values(self, rng: np.random.Generator) -> "KernelRun":
        """The same launch with every 16-bit input element renamed by a random permutation
        (and the expected registers renamed alike), so no kernel can write its output from
        memory: it must move the values it is given. Only a run whose kernel moves 16-bit
        elements without computing on them (its values are named by ``describe_value``) is
        renamed; any other run is returned as it is."""
        if type(self) is not KernelRun or self.elem_bits != 16 or self.describe_value is None:
            return self
        perm = rng.permutation(1 << 16).astype(np.uint16)
        inverse = np.argsort(perm).astype(np.uint16)
        args = [perm[a] if isinstance(a, np.ndarray) and a.dtype == np.uint16 else a
                for a in self.args]
        halves = np.ascontiguousarray(self.expected, dtype=np.uint32).view(np.uint16)
        expected = perm[halves].view(np.uint32).reshape(np.shape(self.expected))
        describe = self.describe_value
        return replace(self, args=args, expected=expected,
                       describe_value=lambda v: describe(int(inverse[int(v) & 0xFFFF])))


def _first_lines(text: str, n: int = 8) -> str:
    lines = [l for l in str(text).splitlines() if l.strip()]
    keep = [l for l in lines if "error" in l.lower()] or lines
    return "\n      ".join(keep[:n])


#: What a fault usually means in the course's kernels.
FAULT_ADVICE = ("a fault usually means an address outside shared memory or not 16-byte aligned; "
                "check your row addresses")


#: What a race means: the warps that write shared memory and the warps that read it are not
#: separated by a barrier. A GPU may give the right answer anyway, by timing; that is luck.
RACE_ADVICE = ("one warp reads (or overwrites) shared memory another warp writes, with no "
               "__syncthreads() between them: on a GPU the answer depends on which warp runs "
               "first. Put __syncthreads() after the writes and before the reads")


def launch_for_check(source: str, kernel_name: str, run, name: str, backend: str = "auto",
                     fault_advice: str = FAULT_ADVICE):
    """Compile and launch ``run`` once (on copies of its arrays).

    Returns the :class:`~ptxlab.run.backends.LaunchResult`, or a failed :class:`CheckResult` that
    words the compile error, fault or refused launch for a learner: never a traceback.
    """
    try:
        from ...run import backends
    except ImportError as exc:
        return CheckResult(name, False, 0.0, f"no kernel backend is available here: {exc}",
                           status="error")
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in run.args]
    try:
        return backends.launch(source, kernel_name, grid=run.grid, block=run.block, args=args,
                               shared_mem=run.shared_mem, backend=backend)
    except backends.CompileError as exc:
        log = getattr(exc, "log", "") or str(exc)
        return CheckResult(name, False, 0.0, "your kernel does not compile", status="error",
                           advice=["compiler says:\n      " + _first_lines(log)])
    except backends.KernelFault as exc:
        if str(exc).startswith("race in shared memory"):
            return CheckResult(name, False, 0.0, f"the kernel has a race ({run.label}): {exc}",
                               status="error", advice=[RACE_ADVICE])
        return CheckResult(name, False, 0.0, f"the kernel faulted ({run.label}): {exc}",
                           status="error", advice=[fault_advice])
    except Exception as exc:
        return CheckResult(name, False, 0.0, f"launching the kernel failed ({run.label}): "
                           f"{type(exc).__name__}: {exc}", status="error")


def run_kernel_case(source: str, kernel_name: str, run: KernelRun, name: str,
                    backend: str = "auto") -> CheckResult:
    """Compile and run once; every failure mode becomes a result, never a traceback."""
    res = launch_for_check(source, kernel_name, run, name, backend)
    if isinstance(res, CheckResult):
        return res
    out = np.asarray(res.outputs[run.out_index])
    exp = np.asarray(run.expected)
    if out.size * out.itemsize != exp.size * 4:
        return CheckResult(name, False, 0.0, f"output has {out.nbytes} bytes, expected "
                           f"{exp.size * 4}", status="error")
    got = out.view(np.uint32).reshape(exp.shape)
    result = checks.check_kernel_outputs(name, got, exp, describe_value=run.describe_value,
                                         unit=run.unit, elem_bits=run.elem_bits,
                                         backend=getattr(res, "device", ""))
    result.details["backend"] = getattr(res, "backend", "")
    result.details["device"] = getattr(res, "device", "")
    result.advice += [f"the CPU model noticed: {d}" for d in getattr(res, "diagnostics", [])]
    if not result.passed:
        result.message += f" ({run.label})"
    return result


@dataclass(repr=False)
class KernelExercise(Exercise):
    """CUDA source with a ``kernel_name`` kernel, checked on ``visible`` (and hidden) runs."""

    kernel_name: str = ""
    visible: Callable[[], list[KernelRun]] = list
    hidden_cases: Callable[[np.random.Generator], list[KernelRun]] = lambda rng: []
    advice_for: Sequence[tuple[Callable[[str], bool], str]] = field(default_factory=tuple)
    backend: str = "auto"

    def source_problem(self, answer) -> CheckResult | None:
        """A result for an answer that is not (yet) a kernel source to run, else ``None``."""
        if checks.is_unfinished_source(answer):
            return checks.not_implemented(self.title)
        if not isinstance(answer, str):
            return CheckResult(self.title, False, 0.0, f"expected CUDA source as a string, got "
                               f"{type(answer).__name__}", status="invalid")
        if f"{self.kernel_name}(" not in answer.replace(" (", "("):
            return CheckResult(self.title, False, 0.0, f"the source has no kernel named "
                               f"{self.kernel_name}; keep the given signature", status="invalid")
        return None

    def run_case(self, answer: str, run) -> CheckResult:
        """Launch one run and compare its output; subclasses compare other kinds of output."""
        return run_kernel_case(answer, self.kernel_name, run, self.title, self.backend)

    def runs(self, hidden: bool = False) -> list:
        """The launches a check makes; when graded, with values drawn for this grading run
        (so no kernel can have its output written in)."""
        runs = list(self.visible())
        if hidden:
            runs += self.hidden_cases(hidden_rng())
        fresh = fresh_rng()
        if fresh is not None:
            runs = [run.with_fresh_values(fresh) if hasattr(run, "with_fresh_values") else run
                    for run in runs]
        return runs

    def evaluate(self, answer, hidden: bool = False) -> CheckResult:
        problem = self.source_problem(answer)
        if problem is not None:
            return problem
        runs = self.runs(hidden)
        results = []
        for run in runs:
            results.append(self.run_case(answer, run))
            if not results[-1].passed:
                break
        combined = checks.combine(self.title, results)
        device = results[-1].details.get("device", "") if results else ""
        if device:
            combined.details["device"] = device
            combined.details["backend"] = results[-1].details.get("backend", "")
            if combined.passed and device not in combined.message:
                combined.message += f" on {device}"
        if not combined.passed:
            for test, text in self.advice_for:
                try:
                    if test(answer):
                        combined.advice.append(text)
                except Exception:
                    continue
        return combined
