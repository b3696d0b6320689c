"""ptxlab.backends: choosing a backend, checking arguments, isolation, and the reference cases."""
from __future__ import annotations

import types

import numpy as np
import pytest

from ptxlab import backends, gpu
from ptxlab.cli import status as status_cli
from ptxlab.run import in_process, isolation, reference_cases as rc

STMATRIX_SRC = '#include "stmatrix.cuh"\nextern "C" __global__ void k(unsigned* r) { ptxlab::stmatrix_x1(0u, {r[0]}); }'
PLAIN_SRC = 'extern "C" __global__ void k(int* p) { p[threadIdx.x] += 1; }'


def fake_status(cc=(9, 0), available=True):
    n = 10 * cc[0] + cc[1]
    return gpu.GpuStatus(available, "fake GPU" if available else "no CUDA GPU found",
                         name="Fake GPU" if available else None,
                         compute_capability=cc if available else None,
                         supported={k: n >= v for k, v in gpu.INSTRUCTION_MIN_SM.items()} if available else {},
                         cupy_version="0.0-fake")


class FakeCpu(types.ModuleType):
    """Stands in for ptxlab.cpu: adds 1 to every element of int32 arrays."""

    def __init__(self, ok=True):
        super().__init__("ptxlab.cpu")
        self.ok, self.calls = ok, []

    def available(self):
        return self.ok, "fake CPU model" if self.ok else "fake CPU model missing"

    def run_kernel(self, source, kernel, grid, block, args, shared_mem=0, options=()):
        self.calls.append((kernel, grid, block, shared_mem, options))
        return [a + 1 if isinstance(a, np.ndarray) else a for a in args]


@pytest.fixture
def machine(monkeypatch):
    """Set what this 'machine' has: a GPU of some compute capability, a CPU model or not."""
    def setup(gpu_cc=None, cpu=True):
        st = fake_status(gpu_cc) if gpu_cc else fake_status(available=False)
        monkeypatch.setattr(gpu, "status", lambda refresh=False: st)
        fake = FakeCpu(ok=True) if cpu else None
        monkeypatch.setattr(in_process, "cpu_module", lambda: fake)
        monkeypatch.setattr(in_process, "cpu_available",
                            lambda: fake.available() if fake else (False, "CPU model not installed"))
        monkeypatch.delenv("PTXLAB_ISOLATE", raising=False)
        return fake
    return setup


def test_auto_uses_the_cpu_model_without_a_gpu(machine):
    cpu = machine(gpu_cc=None)
    res = backends.launch(PLAIN_SRC, "k", grid=2, block=32, args=[np.zeros(4, np.int32), np.int32(3)])
    assert res.backend == "cpu" and res.device == backends.CPU_DEVICE
    assert "no CUDA GPU found" in res.reason
    assert np.array_equal(res.outputs[0], np.ones(4, np.int32)) and res.outputs[1] == 3
    assert cpu.calls == [("k", (2,), (32,), 0, ())]


def test_auto_uses_the_gpu_when_it_has_the_instructions(machine, monkeypatch):
    machine(gpu_cc=(9, 0))
    seen = {}

    def run_kernel(source, kernel, grid, block, args, shared_mem=0, options=()):
        seen.update(kernel=kernel, grid=grid, shared_mem=shared_mem)
        return list(args)
    monkeypatch.setattr(gpu, "run_kernel", run_kernel)
    res = backends.launch(STMATRIX_SRC, "k", args=[np.zeros(1, np.uint32)], shared_mem=1024)
    assert res.backend == "gpu" and res.device == "Fake GPU (sm_90)"
    assert seen == {"kernel": "k", "grid": (1,), "shared_mem": 1024}


def test_auto_falls_back_when_the_gpu_lacks_stmatrix(machine):
    machine(gpu_cc=(8, 0))
    res = backends.launch(STMATRIX_SRC, "k", args=[np.zeros(1, np.uint32)])
    assert res.backend == "cpu" and "stmatrix" in res.reason and "sm_90" in res.reason


def test_explicit_gpu_on_a_gpu_too_old_says_why(machine):
    machine(gpu_cc=(8, 0))
    with pytest.raises(backends.BackendUnavailable, match=r"stmatrix.*sm_90"):
        backends.launch(STMATRIX_SRC, "k", args=[np.zeros(1, np.uint32)], backend="gpu")


def test_explicit_gpu_without_a_gpu(machine):
    machine(gpu_cc=None)
    with pytest.raises(backends.BackendUnavailable, match="no CUDA GPU found"):
        backends.launch(PLAIN_SRC, "k", backend="gpu")


def test_no_backend_at_all_names_both_reasons(machine):
    machine(gpu_cc=None, cpu=False)
    with pytest.raises(backends.BackendUnavailable, match=r"GPU: no CUDA GPU found; CPU: .*not installed"):
        backends.launch(PLAIN_SRC, "k")


@pytest.mark.parametrize("kwargs, message", [
    ({"args": [5]}, r"argument 0 is a Python int.*np.int32\(5\)"),
    ({"args": [np.zeros(2, np.int32), 2.5]}, "argument 1 is a Python float"),
    ({"grid": (0,)}, "grid must be"),
    ({"block": (1, 2, 3, 4)}, "block must be"),
    ({"backend": "tpu"}, "backend must be one of"),
    ({"shared_mem": -1}, "shared_mem"),
])
def test_bad_launch_arguments(machine, kwargs, message):
    machine(gpu_cc=None)
    with pytest.raises(backends.LaunchError, match=message):
        backends.launch(PLAIN_SRC, "k", **kwargs)


def test_isolate_runs_the_launch_in_a_child(machine, monkeypatch):
    """Isolated, with no launch service: the backends' own launch, in a child of this process."""
    machine(gpu_cc=None)
    received = {}

    def run_isolated(target, args=(), kwargs=None, **limits):
        received.update(kwargs, target=target, **limits)
        return backends.LaunchResult([], "cpu", "isolated", "child")
    monkeypatch.setattr(isolation, "run_isolated", run_isolated)
    monkeypatch.delenv("PTXLAB_LAUNCH_SERVICE", raising=False)
    monkeypatch.setenv("PTXLAB_ISOLATE", "1")
    res = backends.launch(PLAIN_SRC, "k", grid=3, args=[np.zeros(2, np.int32)], timeout_s=7)
    assert res.device == "isolated"
    assert received["target"] == "ptxlab.run.backends:launch_in_child"
    assert received["kernel"] == "k" and received["grid"] == (3,) and received["backend"] == "auto"
    assert received["timeout_s"] == 7
    res = backends.launch(PLAIN_SRC, "k", args=[np.zeros(2, np.int32)], isolate=False)
    assert res.backend == "cpu", "isolate=False wins over the environment"


def test_the_child_runs_the_launch_in_process(machine):
    cpu = machine(gpu_cc=None)
    res = backends.launch_in_child(source=PLAIN_SRC, kernel="k", grid=(1,), block=(32,),
                                   args=[np.zeros(2, np.int32)], backend="auto")
    assert res.backend == "cpu" and cpu.calls


def test_kernel_case_launches_copies(machine):
    machine(gpu_cc=None)
    data = np.zeros(4, np.int32)
    case = backends.KernelCase("add one", PLAIN_SRC, "k", (1,), (32,), [data], compare=(0,))
    res = case.launch()
    assert np.array_equal(res.outputs[0], np.ones(4)) and not data.any()


@pytest.mark.parametrize("st_cc, cpu, expected", [
    ((9, 0), True, "kernels run on the GPU: Fake GPU (sm_90), CuPy 0.0-fake"),
    ((8, 0), True, "stmatrix need a newer GPU and fall back to the CPU model"),
    (None, True, "kernels run on the CPU model (PTX interpreter): no CUDA GPU found"),
    (None, False, "no backend can run kernels here"),
])
def test_describe_is_one_line(machine, st_cc, cpu, expected):
    machine(gpu_cc=st_cc, cpu=cpu)
    line = backends.describe()
    assert expected in line and "\n" not in line


def test_status_command_prints_the_support_table(machine, capsys):
    machine(gpu_cc=(8, 6))
    assert status_cli.run(types.SimpleNamespace(json=False)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("kernels run on the GPU")
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in out[3:]}
    assert rows["stmatrix"] == ["sm_90", "CPU model"] and rows["ldmatrix"] == ["sm_75", "GPU"]
    assert len(rows) == len(gpu.INSTRUCTION_MIN_SM)


@pytest.mark.parametrize("log, where", [
    ('/tmp/tmpab12/kern.cu(12): error: identifier "x" is undefined\n', ("kern.cu", 12, 'identifier "x" is undefined')),
    ("/work/main/kernels/ldmatrix.cuh(40): error: expected a \";\"", ("ldmatrix.cuh", 40, 'expected a ";"')),
    ("ptxas application ptx input, line 45; error   : Feature 'stmatrix' requires .target sm_90 or higher",
     ("PTX", 45, "Feature 'stmatrix' requires .target sm_90 or higher")),
    ("nvrtc: error: invalid value for --gpu-architecture (-arch)", (None, None, "nvrtc: error: invalid value for --gpu-architecture (-arch)")),
])
def test_first_compile_error(log, where):
    assert backends.first_compile_error(log) == where


def test_compile_error_message_leads_with_the_line():
    err = backends.CompileError('/tmp/x/kern.cu(3): error: identifier "y" is undefined\n1 error',
                                backend="NVRTC", source_name="kern.cu")
    assert str(err) == 'NVRTC compile error: line 3: identifier "y" is undefined'
    err = backends.CompileError("/k/mma.cuh(9): error: too few arguments", backend="NVRTC")
    assert "mma.cuh line 9" in str(err)


# ---------------------------------------------------------------------------------------------
# Reference cases for the CPU-vs-GPU comparison
# ---------------------------------------------------------------------------------------------

def test_kernel_cases_cover_every_form_with_consistent_arguments():
    cases = rc.kernel_cases(np.random.default_rng(0), small=True)
    names = {c.name.split()[1].split("[")[0] for c in cases}
    assert names == {f.name for f in rc.FORMS}
    for case in cases:
        f = next(f for f in rc.FORMS if f.kernel == case.kernel)
        assert case.compare == (rc.output_index(f),)
        assert case.grid == (2,) and case.block == (32,)
        assert all(isinstance(a, (np.ndarray, np.generic)) for a in case.args)
        if f.family in ("ldmatrix", "stmatrix"):
            assert case.shared_mem == int(case.args[-1]) == case.args[0].shape[1]
        # the emulator can predict every case (so a backend can be checked against it)
        want = rc.expected_outputs(f, case.args)
        assert want.shape == case.args[rc.output_index(f)].shape


def test_row_addresses_are_distinct_aligned_and_in_range():
    rng = np.random.default_rng(1)
    for num in (1, 2, 4):
        a = rc.random_row_addresses(rng, 500, num, rc.SMEM_BYTES)
        used = a[:, : 8 * num]
        assert (a % 16 == 0).all() and (a + 16 <= rc.SMEM_BYTES).all()
        assert all(len(set(row)) == 8 * num for row in used)
        assert np.array_equal(a[:, 8 * num:], a[:, np.arange(8 * num, 32) % (8 * num)])
    assert rc.random_row_addresses(rng, 2000, 4, rc.SMEM_BYTES).max() > 40_000


def test_exact_mma_inputs_are_exact_in_the_model():
    """'exact' inputs must keep every partial sum representable (else the kind is misnamed)."""
    for f in (f for f in rc.FORMS if f.family == "mma" and "exact" in f.kinds):
        args = rc.make_inputs(f, np.random.default_rng(2), 50, kind="exact")
        if f.mma[1] == "s8":
            continue
        err = rc.scaled_error(f, args, rc.expected_outputs(f, args), rc.expected_outputs(f, args))
        assert np.nanmax(err) == 0
        from ptxlab import emulator, layouts
        lay = layouts.mma_form(*f.mma)
        d = rc._values(emulator.fragment_to_matrices(rc.expected_outputs(f, args), lay.d)[:, 0], f.mma[4])
        assert np.array_equal(d, np.round(d)), f"{f.name}: exact inputs gave a non-integer sum"


def test_ulp_distance():
    f32 = lambda x: np.array([x], np.float32).view(np.uint32)  # noqa: E731
    assert rc.ulp_distance(f32(1.0), f32(np.nextafter(np.float32(1), np.float32(2))))[0] == 1
    assert rc.ulp_distance(f32(-0.0), f32(0.0))[0] == 0
    assert rc.ulp_distance(f32(np.float32(-1e-45)), f32(np.float32(1e-45)))[0] == 2
    assert rc.ulp_distance(np.uint32([0x7FC00000]), np.uint32([0x7FFFFFFF]))[0] == 0
    assert rc.ulp_distance(np.uint32([0x7FC00000]), f32(1.0))[0] > 1 << 30


def test_cpu_model_errors_arrive_as_backend_errors(machine):
    """Callers catch backends.CompileError/KernelFault whichever backend ran."""
    cpu = machine(gpu_cc=None)

    from ptxlab.run.failure import Failure, FailureKind

    class CompileError(Exception):            # shaped like the CPU model's own classes:
        def __init__(self, message, log=""):  # each carries its typed failure record
            super().__init__(message + "\n" + log)
            self.log = log
            self.failure = Failure(FailureKind.COMPILE, message)

    class KernelFault(Exception):
        lane, block, ptx_line = 5, (0, 0, 0), 17
        failure = Failure(FailureKind.FAULT, "misaligned ldmatrix row address", block=(0, 0, 0),
                          lanes=(5,), ptx_line=17)

    def raise_(exc):
        def run_kernel(*a, **k):
            raise exc
        return run_kernel
    cpu.run_kernel = raise_(CompileError("compiling failed", '/t/kern.cu(4): error: bad thing\n'))
    with pytest.raises(backends.CompileError) as info:
        backends.launch(PLAIN_SRC, "k")
    assert info.value.line == 4 and info.value.first_error == "bad thing"
    cpu.run_kernel = raise_(KernelFault("misaligned ldmatrix row address"))
    with pytest.raises(backends.KernelFault, match="misaligned") as info:
        backends.launch(PLAIN_SRC, "k")
    assert info.value.lane == 5 and info.value.ptx_line == 17
    cpu.run_kernel = raise_(ZeroDivisionError("a bug"))
    with pytest.raises(ZeroDivisionError):
        backends.launch(PLAIN_SRC, "k")


def test_asking_where_kernels_run_does_not_load_the_cpu_model(fresh_python):
    """A graded notebook's kernel says where kernels run and chooses a backend for every check,
    but its launches run in the launch service: the CPU model (interpreter, parser, decoder) is
    loaded by the first launch run in the process, never by the questions before it."""
    code = ("import sys, numpy as np\n"
            "from ptxlab import backends\n"
            f"src = {PLAIN_SRC!r}\n"
            "backends.describe(); backends.cpu_available()\n"
            "from ptxlab.run import in_process\n"
            "backends.choose_backend(src, 'auto'); in_process.where_it_runs(src, 'cpu')\n"
            "model = ('ptxlab.run.cpu', 'ptxlab.run.ptx.interpreter', 'ptxlab.run.ptx.parser')\n"
            "print(any(m in sys.modules for m in model))\n"
            "if backends.cpu_available()[0]:\n"
            "    backends.launch(src, 'k', args=[np.zeros(32, np.int32)], backend='cpu')\n"
            "    print(all(m in sys.modules for m in model))\n")
    printed = fresh_python(code)
    assert printed[0] == "False"
    assert printed[1:] in ([], ["True"])


def test_a_cpu_model_that_cannot_be_loaded_is_an_unavailable_backend(monkeypatch):
    monkeypatch.setattr(in_process, "cpu_available", lambda: (True, "compiler found"))
    monkeypatch.setattr(in_process, "cpu_module", lambda: None)
    monkeypatch.delenv("PTXLAB_ISOLATE", raising=False)
    with pytest.raises(backends.BackendUnavailable, match="cannot be loaded"):
        backends.launch(PLAIN_SRC, "k", args=[np.zeros(2, np.int32)], backend="cpu")


def test_a_cpu_model_that_fails_to_import_names_the_import_error(monkeypatch):
    """An install whose model is there but breaks on import says why, in the import's words."""
    import sys
    monkeypatch.setattr(in_process, "cpu_available", lambda: (True, "compiler found"))
    monkeypatch.delenv("PTXLAB_ISOLATE", raising=False)
    monkeypatch.setitem(sys.modules, "ptxlab.run.cpu", None)    # the import now fails
    import ptxlab.run as run_package
    if hasattr(run_package, "cpu"):
        monkeypatch.delattr(run_package, "cpu")
    with pytest.raises(backends.BackendUnavailable,
                       match=r"cannot be loaded \(ModuleNotFoundError: .*ptxlab\.run\.cpu"):
        backends.launch(PLAIN_SRC, "k", args=[np.zeros(2, np.int32)], backend="cpu")


def test_a_first_check_loads_no_library_it_does_not_use(tmp_path, fresh_python):
    """A notebook's first check pays for every module it loads: numpy.ma (which np.unique
    loads) and ctypes.util (which looks for a compiler library) cost it 17 ms and 4 ms, and
    neither is needed for a check whose PTX is cached."""
    from ptxlab.authoring.course_cases import exercise_home, solution_kernels
    found = {ex.key: (ex, src) for _, ex, src in solution_kernels()}
    ex, src = found["mma.tile_kernel"]
    module, name = exercise_home(ex)
    (tmp_path / "k.cu").write_text(src)
    code = ("import importlib, io, contextlib, sys\n"
            f"ex = getattr(importlib.import_module({module!r}), {name!r})\n"
            f"src = open({str(tmp_path / 'k.cu')!r}).read()\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    ex.check(src)\n"
            "print(sorted(m for m in ('numpy.ma', 'ctypes.util') if m in sys.modules))\n")
    fresh_python(code)      # the second process surely finds its PTX in the cache
    assert fresh_python(code)[-1] == "[]"
