"""Kernel exercises: the learner writes CUDA with inline PTX; it runs on the GPU (CuPy) or the
CPU backend through :func:`ptxlab.run.backends.launch` and its output is compared with the
emulator's, lane by lane."""
from __future__ import annotations

import contextvars
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .. import checks, diagnosis, tiles
from ..checks import CheckResult
from ...run.failure import Failure, FailureKind
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
    #: Plausible mistakes and what each gives (:mod:`ptxlab.teach.diagnosis`), to name a cause.
    suspects: Sequence[diagnosis.Suspect] = ()
    #: Where an ldmatrix loaded the output from (lanes 8i..8i+7 gave register i's rows), if so.
    loaded_from: tiles.Placement | None = None
    #: compile options, e.g. ``("--gpu-architecture=compute_100a",)`` for the sm_100a-class forms
    options: tuple[str, ...] = ()

    def with_fresh_values(self, rng: np.random.Generator) -> "KernelRun":
        """The same launch with every 16-bit input element renamed by a random permutation
        (and the expected registers renamed alike), so no kernel can write its output from
        memory: it must move the values it is given. Only a run whose kernel moves 16-bit
        elements without computing on them (its values are named by ``describe_value``) is
        renamed; any other run is returned as it is."""
        if type(self) is not KernelRun or self.elem_bits != 16 or self.describe_value is None:
            return self
        perm = rng.permutation(1 << 16).astype(np.uint16)
        inverse = np.empty_like(perm)           # inverse[perm[v]] == v, written in one pass
        inverse[perm] = np.arange(1 << 16, dtype=np.uint16)
        args = [perm[a] if isinstance(a, np.ndarray) and a.dtype == np.uint16 else a
                for a in self.args]
        halves = np.ascontiguousarray(self.expected, dtype=np.uint32).view(np.uint16)
        expected = perm[halves].view(np.uint32).reshape(np.shape(self.expected))
        describe = self.describe_value

        def renamed(words):
            halves = np.ascontiguousarray(words, dtype=np.uint32).view(np.uint16)
            return perm[halves].view(np.uint32).reshape(np.shape(words))
        kept = self.suspects
        suspects = diagnosis.Deferred(lambda: [
            replace(s, output=None if s.output is None else renamed(s.output)) for s in kept])
        return replace(self, args=args, expected=expected, suspects=suspects,
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


def _launch_once(source: str, kernel_name: str, run, name: str, backend: str,
                 fault_advice: str):
    """One launch on ``backend`` (on copies of the run's arrays): the
    :class:`~ptxlab.run.backends.LaunchResult`, a failed :class:`CheckResult` worded for a
    learner, or :class:`_ModelCannotRun` when the CPU model lacks something the kernel uses."""
    try:
        from ...run import backends
    except ImportError as exc:
        return CheckResult(name, False, 0.0, f"no kernel backend is available here: {exc}",
                           status="error")
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in run.args]
    try:
        # The model's diagnostics come back in the result and reach the learner once, in the
        # check's report (_note); shown as warnings too they would repeat, with this file's path.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", backends.KernelDiagnostic)
            return backends.launch(source, kernel_name, grid=run.grid, block=run.block,
                                   args=args, shared_mem=run.shared_mem, backend=backend,
                                   options=tuple(getattr(run, "options", ())))
    except backends.ServiceUnavailable:
        raise                       # a fault of the machine, never a failed check
    except backends.CompileError as exc:
        log = getattr(exc, "log", "") or str(exc)
        return CheckResult(name, False, 0.0, "your kernel does not compile", status="error",
                           advice=["compiler says:\n      " + _first_lines(log)],
                           details={"failure": "compile"})
    except backends.BackendUnavailable as exc:
        if backend == "cpu":
            return _ModelCannotRun(str(exc))
        return CheckResult(name, False, 0.0, f"the kernel cannot run here: {exc}", status="error")
    except backends.KernelFault as exc:
        return _fault_result(name, run.label, source, exc, fault_advice, run=run)
    except Exception as exc:
        return CheckResult(name, False, 0.0, f"launching the kernel failed ({run.label}): "
                           f"{type(exc).__name__}: {exc}", status="error")


def _fault_result(name: str, label: str, source: str, exc: Exception, fault_advice: str,
                  run=None):
    """The check's verdict on a launch that failed, decided from the failure's kind and
    fields (a GPU's fault carries only its kind: a fault, of an address or not). ``run``, the
    launch, says how many warps raced and whether there was one block."""
    f = getattr(exc, "failure", None) or Failure(
        FailureKind.UNSUPPORTED if getattr(exc, "unsupported", False) else FailureKind.FAULT,
        str(exc))
    kind = f.kind
    if kind is FailureKind.UNSUPPORTED:
        return _ModelCannotRun(str(exc))
    facts, one_block = _launch_facts(run)
    if kind is FailureKind.RACE:
        # the sanitizer's finding says which accesses raced and, from what it saw, what
        # fixes it (a copy not split by thread wants no barrier)
        advice = _warp_barrier_cause(source, f) or f.advice or RACE_ADVICE
        head = "the kernel" + (f" ({facts})" if facts else "") + " has a "
        head += "" if f.reason.startswith("race ") else "race: "
        return _failed(name, f, _finding_message(f, head, advice, one_block), [advice])
    if kind is FailureKind.BARRIER:
        # the reason names the warps that reached it and those that did not, and mostly the
        # instruction: then its PTX line is said here, not again in the place
        at = f" at PTX line {f.ptx_line}" if _names_instruction(f) else ""
        head = f"barrier{at} reached by only part of the threads: "
        return _failed(name, f, _finding_message(f, head, f.advice, one_block),
                       [f.advice] if f.advice else [])
    if kind is FailureKind.HANG:      # its own message says what hung; address advice would mislead
        return _failed(name, f, f"the kernel did not finish ({label}): {exc}", [])
    if kind is FailureKind.UNDEFINED:  # not a fault: the model will not pick an undefined result
        return _failed(name, f, "the CPU model stopped the kernel at a store whose result the "
                       f"PTX ISA leaves undefined ({label}): {exc}", [_shared_row(f)])
    # address advice only for a fault about an address (not lanes apart at a barrier)
    return _failed(name, f, f"the kernel faulted ({label}): {exc}",
                   [fault_advice] if f.bad_access else [], FailureKind.FAULT)


def _failed(name: str, failure: Failure, message: str, advice: list[str],
            kind: FailureKind | None = None) -> CheckResult:
    """A failed check that carries the failure itself (``details["failure"]`` its kind)."""
    return CheckResult(name, False, 0.0, message, status="error", advice=advice,
                       details={"failure": kind or failure.kind}, failure=failure)


_WARP_BARRIER = re.compile(r"__syncwarp\s*\(|bar\.warp\.sync")
_BLOCK_BARRIER = re.compile(r"__syncthreads\w*\s*\(|\bbar(rier)?\.sync\b|\bbar\.sync")


def _warp_barrier_cause(source: str, race: Failure) -> str | None:
    """A race between two warps with a warp's barrier (``__syncwarp``) and no block barrier
    between its two accesses: that barrier is the cause, said with its line. From the race's
    two accesses, so a ``__syncwarp`` elsewhere in the kernel is not blamed."""
    sides = race.race
    if len(sides) < 2 or sides[0].warp == sides[1].warp or None in (sides[0].line,
                                                                     sides[1].line):
        return None
    lines = source.splitlines()
    lo, hi = min(sides[0].line, sides[1].line), max(sides[0].line, sides[1].line)
    between = lines[lo:hi - 1]       # 1-based: after the first access, before the second
    if any(_BLOCK_BARRIER.search(line) for line in between):
        return None
    at = next((lo + 1 + i for i, line in enumerate(between) if _WARP_BARRIER.search(line)), None)
    if at is None:
        return None
    return (f"the __syncwarp() at line {at} orders the threads of one warp only: use "
            "__syncthreads(), where every thread reaches it")


def _launch_facts(run) -> tuple[str, bool]:
    """What of a launch a race or a barrier depends on, in words (``4 warps``, ``2 blocks of
    4 warps``; empty where the launch is not known), and whether it is one block."""
    if run is None:
        return "", False

    def size(dims) -> int:
        return int(np.prod([int(d) for d in np.atleast_1d(dims)]))

    blocks, threads = size(getattr(run, "grid", 1)), size(getattr(run, "block", 32))
    warps = -(-threads // 32)
    text = f"{warps} warp" + ("s" if warps != 1 else "")
    return (text if blocks == 1 else f"{blocks} blocks of {text}"), blocks == 1


def _finding_message(f: Failure, head: str, advice: str, one_block: bool) -> str:
    """A race's or a barrier's finding as a check says it: ``head`` (what failed, on what
    launch), the model's reason, then where, less what says nothing there (the block of a
    one-block launch, a quoted line's comment, what the head names). The model's place clips
    the quoted CUDA line to the room the head and ``advice`` leave, so message and advice fit
    in :data:`~ptxlab.run.failure.MAX_CAUSE` characters."""
    said = replace(f, reason=head + f.reason, advice=advice,
                   block=None if one_block else f.block, cuda_text=_code_of(f.cuda_text))
    return said.render()


def _names_instruction(f: Failure) -> bool:
    """Whether the failure's reason names the instruction of its PTX line (``bar.sync``)."""
    op = f.ptx_text.split()[0] if f.ptx_line is not None and f.ptx_text.strip() else ""
    return bool(op) and re.search(r"(?<![\w.])" + re.escape(op) + r"(?!\w)",
                                  f.reason) is not None


def _code_of(line: str) -> str:
    """A quoted source line without its trailing ``//`` comment (a remark, not the code); as
    it is where the ``//`` may be inside a string."""
    code, sep, _ = line.partition("//")
    return code.rstrip() if sep and code.strip() and code.count('"') % 2 == 0 else line


def _shared_row(store: Failure) -> str:
    """The cause of a stmatrix the CPU model refused because several lanes name one row (the
    PTX ISA does not say whose row lands there), from the lanes and the address it names."""
    lanes = sorted(store.lanes)
    named = (", ".join(map(str, lanes[:-1])) + f" and {lanes[-1]}"
             + (" both" if len(lanes) == 2 else " all"))
    return (f"lanes {named} give address {store.address}: two lanes of "
            "one stmatrix name the same row, and the PTX ISA does not say whose row is stored "
            "there (the H100 kept the lower lane's), so the CPU model refuses to pick one. "
            "Each lane 8i + r must give its own row, row r of matrix i")


@dataclass
class _ModelCannotRun:
    """The CPU model cannot run this kernel (not installed, or an instruction it lacks)."""

    why: str


#: Notes about the launches of one check (what the CPU model noticed, where the GPU differed),
#: collected by :meth:`KernelExercise.evaluate` whichever subclass compares the outputs.
_NOTES: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "ptxlab_launch_notes", default=None)


def _noticed(diagnostic: str) -> str:
    """A diagnostic of the CPU model's run, as the learner reads it."""
    return f"the CPU model noticed: {diagnostic}"


def _same_kind(text: str) -> str:
    """A note without its numbers (lane, address, line): the same mistake met in several cases
    or at several instructions is one note."""
    return re.sub(r"0x[0-9a-fA-F]+|\d+", "#", text)


def _note(text: str) -> None:
    notes = _NOTES.get()
    if notes is not None and _same_kind(text) not in {_same_kind(n) for n in notes}:
        notes.append(text)


def _gpu_also_runs(source: str, backend: str) -> bool:
    """Whether the GPU runs this kernel too: asked for, or ``auto`` with a GPU that has every
    instruction the kernel uses."""
    if backend == "cpu":
        return False
    from ...run import backends

    try:
        return backends.choose_backend(source, backend)[0] == "gpu"
    except backends.BackendError:
        return backend == "gpu"     # asked for a GPU that is not here: the launch says why


def _gpu_lacks(source: str, backend: str) -> str:
    """Why a GPU that is here cannot run ``source`` (an instruction newer than the GPU), in
    words, or ``""``."""
    if backend == "cpu":
        return ""
    from ...run import gpu

    try:
        st = gpu.status()
        need, uses = gpu.required_compute_capability(source)
    except Exception:
        return ""
    if not st.available or st.cc_number >= need:
        return ""
    return (f"this GPU ({st.device_label}) cannot run the kernel: it uses {', '.join(uses)}, "
            f"which needs sm_{need} or newer")


def _compared_outputs(run) -> tuple[int, ...]:
    """The arguments whose contents the kernel defines, so both machines must agree on them."""
    return tuple(getattr(run, "compare", None) or (run.out_index,))


def _differing_words(model, hardware, run) -> int:
    """How many 32-bit words of the compared outputs differ between the two launches."""
    n = 0
    for i in _compared_outputs(run):
        a = np.ascontiguousarray(model.outputs[i]).view(np.uint8)
        b = np.ascontiguousarray(hardware.outputs[i]).view(np.uint8)
        if a.shape != b.shape:
            return max(a.size, b.size) // 4
        n += int(np.count_nonzero((a != b).reshape(-1, 4).any(axis=1))) if a.size % 4 == 0 \
            else int(np.count_nonzero(a != b))
    return n


def launch_for_check(source: str, kernel_name: str, run, name: str, backend: str = "auto",
                     fault_advice: str = FAULT_ADVICE):
    """Run ``run`` through the sanitizing CPU model and, where there is a GPU, on the GPU too.

    The CPU model decides: its sanitizer (races between warps, faults, address spaces) and
    its outputs are the same on every machine, so a verdict never depends on which machine
    checked the kernel. The GPU's run is a cross-check: when its compared outputs differ from
    the model's, or it faults where the model did not, the learner is told (the kernel depends
    on timing or on memory it never wrote). Only when the CPU model cannot run the kernel at
    all does the GPU alone decide, and the result says so.

    Returns the model's :class:`~ptxlab.run.backends.LaunchResult` (its ``device`` names both
    machines when both ran and agreed), or a failed :class:`CheckResult` that words the compile
    error, race, fault or refused launch for a learner: never a traceback.
    """
    model = _launch_once(source, kernel_name, run, name, "cpu", fault_advice)
    if isinstance(model, _ModelCannotRun):
        if backend == "cpu" or not _gpu_also_runs(source, backend):
            return CheckResult(name, False, 0.0, f"the kernel cannot run here: {model.why}",
                               status="error")
        _note(f"only the GPU checked this kernel: {model.why}")
        return _launch_once(source, kernel_name, run, name, backend, fault_advice)
    if isinstance(model, CheckResult):
        return model
    for text in model.diagnostics:
        _note(_noticed(text))
    if not _gpu_also_runs(source, backend):
        lacking = _gpu_lacks(source, backend)
        if lacking:
            _note(f"{lacking}: the CPU model ran it")
        return model
    hardware = _launch_once(source, kernel_name, run, name, "gpu", fault_advice)
    if isinstance(hardware, CheckResult):
        _note(f"on the GPU, {hardware.message[0].lower()}{hardware.message[1:]}; the CPU "
              "model ran it without a fault. The verdict is the CPU model's (the same on every "
              "machine); a kernel that faults on a GPU is still wrong: "
              + "; ".join(hardware.advice or [fault_advice]))
        return model
    differ = _differing_words(model, hardware, run)
    if differ:
        _note(f"on the GPU ({hardware.device}) {differ} output word(s) came out different "
              "from the CPU model's run: the kernel's result depends on something the two do "
              "not share (which warp runs first, memory it reads but never wrote, an undefined "
              "operation). The verdict is the CPU model's (the same on every machine)")
        return model
    return replace(model, device=f"{hardware.device} and the {model.device}",
                   backend="gpu+cpu")


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
                                         backend=getattr(res, "device", ""),
                                         suspects=getattr(run, "suspects", ()),
                                         loaded_from=getattr(run, "loaded_from", None))
    result.details["backend"] = getattr(res, "backend", "")
    result.details["device"] = getattr(res, "device", "")
    if _NOTES.get() is None:       # a check collects them for all its runs (evaluate)
        result.advice += [_noticed(d) for d in getattr(res, "diagnostics", [])]
    if not result.passed:
        result.message += f" ({run.label})"
    return result


def _read_only(run):
    """``run`` with every array it holds (directly or in a list or tuple) made read-only."""
    for value in vars(run).values():
        for item in (value if isinstance(value, (list, tuple)) else (value,)):
            if isinstance(item, np.ndarray):
                item.setflags(write=False)
    return run


@dataclass(repr=False)
class KernelExercise(Exercise):
    """CUDA source with a ``kernel_name`` kernel, checked on ``visible`` (and hidden) runs."""

    kernel_name: str = ""
    visible: Callable[[], list[KernelRun]] = list
    hidden_cases: Callable[[np.random.Generator], list[KernelRun]] = lambda rng: []
    advice_for: Sequence[tuple[Callable[[str], bool], str]] = field(default_factory=tuple)
    backend: str = "auto"
    _visible_runs: list | None = field(default=None, init=False, repr=False, compare=False)

    def source_problem(self, answer) -> CheckResult | None:
        """A result for an answer that is not (yet) a kernel source to run, else ``None``."""
        if checks.is_unfinished_source(answer):
            return checks.not_implemented(self.title)
        if not isinstance(answer, str):
            # a recorded answer that was not data (or a text over the size the grader reads)
            # carries its own description
            got = str(getattr(answer, "text", "") or type(answer).__name__)[:300]
            return CheckResult(self.title, False, 0.0, f"expected CUDA source as a string, got "
                               f"{got}", status="invalid")
        if f"{self.kernel_name}(" not in answer.replace(" (", "("):
            return CheckResult(self.title, False, 0.0, f"the source has no kernel named "
                               f"{self.kernel_name}; keep the given signature", status="invalid")
        return None

    def run_case(self, answer: str, run) -> CheckResult:
        """Launch one run and compare its output; subclasses compare other kinds of output."""
        return run_kernel_case(answer, self.kernel_name, run, self.title, self.backend)

    def visible_runs(self) -> list:
        """The visible launches, built once: their expected values come from the emulator
        and the layout rules, which cost more than the launch itself, and a check is run again
        and again while a learner works. Their arrays are read-only, so no check can change
        what the next one expects (each launch copies its arguments)."""
        if self._visible_runs is None:
            self._visible_runs = [_read_only(run) for run in self.visible()]
        return list(self._visible_runs)

    def runs(self, hidden: bool = False) -> list:
        """The launches a check makes; when graded, with values drawn for this grading run
        (so no kernel can have its output written in)."""
        runs = self.visible_runs()
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
        notes: list[str] = []
        token = _NOTES.set(notes)
        try:
            for run in runs:
                results.append(self.run_case(answer, run))
                if not results[-1].passed:
                    break
        finally:
            _NOTES.reset(token)
        combined = checks.combine(self.title, results)
        has_cause = bool(combined.advice)
        combined.advice += [n for n in notes if n not in combined.advice]
        device = results[-1].details.get("device", "") if results else ""
        if device:
            combined.details["device"] = device
            combined.details["backend"] = results[-1].details.get("backend", "")
            if combined.passed and device not in combined.message:
                combined.message += f" on {device}"
        last = results[-1].details if results else {}
        if not combined.passed and last.get("failure") not in ("compile", "hang") \
                and not last.get("cause") and not has_cause:
            # what the source lacks, where the evidence named no cause: one cause, the first
            # that applies; never after a compile error or a hang, which their own message
            # explains, nor after a race or a fault, whose report names its own
            for test, text in self.advice_for:
                try:
                    if test(answer):
                        combined.advice.insert(0, text)
                        break
                except Exception:
                    continue
        return combined
