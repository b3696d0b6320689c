"""One typed failure record from the launch to the check: made where the model fails, carried
unchanged through the backends (in this process and in an isolated child), and the verdict of a
check decided from its fields, never from the words of a message."""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab.run import backends
from ptxlab.run.failure import Failure, FailureKind, RaceSide
from ptxlab.teach.exercises.kernel_exercise import _fault_result

OUT_OF_BOUNDS = r'''extern "C" __global__ void k(int* p) {
  if (threadIdx.x == 3) p[1 << 20] = 1;
}'''
RACE = r'''extern "C" __global__ void k(int* out) {
  __shared__ int s[64];
  s[threadIdx.x] = threadIdx.x;
  out[threadIdx.x] = s[(threadIdx.x + 32) % 64];
}'''
SPIN = r'''extern "C" __global__ void k(volatile int* flag) {
  while (flag[0] == 0) { }
}'''
SAME_ROW = r'''extern "C" __global__ void k(unsigned* out) {
  __shared__ __align__(16) unsigned short tile[64];
  unsigned addr = (unsigned)__cvta_generic_to_shared(tile) + 16 * (threadIdx.x % 8 / 2);
  unsigned r = threadIdx.x;
  asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};" :: "r"(addr), "r"(r));
  __syncwarp();
  out[threadIdx.x] = tile[threadIdx.x];
}'''


def _failure_of(source: str, block=(32,), arg=None, **kw) -> backends.KernelFault:
    arg = np.zeros(64, np.int32) if arg is None else arg
    with pytest.raises(backends.KernelFault) as info:
        backends.launch(source, "k", grid=(1,), block=block, args=[arg], backend="cpu", **kw)
    assert isinstance(info.value.failure, Failure)
    return info.value


def test_a_fault_is_a_record_of_its_place():
    exc = _failure_of(OUT_OF_BOUNDS)
    f = exc.failure
    assert f.kind is FailureKind.FAULT and f.bad_access
    assert f.block == (0, 0, 0) and f.warp == 0 and f.lanes == (3,) and f.lane == 3
    assert f.ptx_line is not None and f.cuda_line == "kernel.cu:2"
    assert str(exc) == f.render() and f.render().startswith(f.reason)


def test_a_race_carries_both_accesses():
    f = _failure_of(RACE, block=(64,)).failure
    assert f.kind is FailureKind.RACE and f.sanitizer == "racecheck" and f.advice
    assert len(f.race) == 2 and {s.warp for s in f.race} == {0, 1}
    assert all(s.line in (3, 4) for s in f.race) and f.address is not None


def test_a_kernel_that_never_ends_is_a_hang():
    from ptxlab.run import cpu
    from ptxlab.run.ptx.errors import Deadlock
    from ptxlab.run.ptx.interpreter import Launch

    run = Launch(cpu.program_for(SPIN, "k"), (1,), (32,), [np.zeros(1, np.int32)],
                 branch_budget=2000)
    with pytest.raises(Deadlock) as info:
        run.run()
    f = info.value.failure
    assert f.kind is FailureKind.HANG and f.lanes == tuple(range(32)) and f.cuda_line


def test_a_store_the_isa_leaves_undefined_names_its_lanes_and_address():
    f = _failure_of(SAME_ROW, arg=np.zeros(32, np.uint32)).failure
    assert f.kind is FailureKind.UNDEFINED
    assert len(f.lanes) >= 2 and f.address is not None


def test_the_record_crosses_into_an_isolated_child_unchanged():
    here = _failure_of(OUT_OF_BOUNDS).failure
    there = _failure_of(OUT_OF_BOUNDS, isolate=True).failure
    assert there == here


def _fault(failure: Failure) -> backends.KernelFault:
    exc = backends.KernelFault(failure.render())
    exc.failure = failure
    return exc


@pytest.mark.parametrize("kind, says", [
    (FailureKind.RACE, "has a race"), (FailureKind.BARRIER, "reached by only part"),
    (FailureKind.HANG, "did not finish"), (FailureKind.UNDEFINED, "leaves undefined"),
    (FailureKind.FAULT, "faulted")])
def test_the_verdict_comes_from_the_kind_not_the_words(kind, says):
    """Any wording of the model's message gives the same verdict: the kind decides."""
    failure = Failure(kind, "reworded: nothing here names what happened", lanes=(1, 5),
                      address=64, race=(RaceSide("write", 0, 1), RaceSide("read", 1, 2)))
    res = _fault_result("t", "run", "", _fault(failure), "address advice")
    assert not res.passed and says in res.message
    assert res.details["failure"] == kind and res.failure is failure


def test_address_advice_only_for_a_fault_of_an_address():
    plain = _fault_result("t", "run", "", _fault(Failure(FailureKind.FAULT, "x")), "ADDR")
    bad = _fault_result("t", "run", "", _fault(Failure(FailureKind.FAULT, "x", bad_access=True)),
                        "ADDR")
    assert plain.advice == [] and bad.advice == ["ADDR"]
