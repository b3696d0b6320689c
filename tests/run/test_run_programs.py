"""Whole CUDA programs as printed (`ptxlab run`, `%%cuda`): the CPU model prints what the H100
printed.

The programs are ``tests/programs/*.cu`` (``manifest.json`` says how each is run and what it
must end in). ``reports/programs/outputs-gpu.json`` holds what each printed on the H100
(``measure/benchmarks/bench_programs.py``, run there); here every one runs on the CPU model and must print
the same bytes and exit with the same status.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ptxlab.run.programs import runner, toolchain

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "programs"
MANIFEST = json.loads((PROGRAMS / "manifest.json").read_text())
#: What the H100 printed; ``$PTXLAB_PROGRAM_OUTPUTS`` names another record (the GPU run itself).
H100 = json.loads(Path(os.environ.get("PTXLAB_PROGRAM_OUTPUTS") or
                       ROOT / "reports" / "programs" / "outputs-gpu.json").read_text())
HANG_LIMIT_S = 3.0


def _have_toolchain() -> str:
    try:
        toolchain.find_toolchain()
    except toolchain.ToolchainMissing as exc:
        return str(exc)
    return ""


pytestmark = pytest.mark.skipif(bool(_have_toolchain()), reason=f"no nvcc: {_have_toolchain()}")


def _run(path: Path, backend: str = "cpu", args=(), limit: float | None = None):
    out, err = io.StringIO(), io.StringIO()
    res = runner.run_program(path, backend, list(args), stdout=out, stderr=err,
                             kernel_time_limit_s=limit or runner.DEFAULT_KERNEL_TIME_LIMIT_S)
    return res, out.getvalue(), err.getvalue()


RUNNABLE = [e for e in MANIFEST if e["expect"] != "compile_error"]


def key(entry: dict) -> str:
    """The record's name for a manifest entry (as measure/benchmarks/bench_programs.py writes it)."""
    args = entry.get("args") or []
    return entry["file"] + (" -- " + " ".join(args) if args else "")


@pytest.mark.parametrize("entry", RUNNABLE, ids=[key(e) for e in RUNNABLE])
def test_the_model_prints_what_the_h100_printed(entry):
    limit = HANG_LIMIT_S if entry["expect"] == "hang" else None
    res, out, err = _run(PROGRAMS / entry["file"], "cpu", entry.get("args", []), limit)
    assert res.backend == "cpu"
    if entry["exit_status"] is not None:
        assert res.exit_status == entry["exit_status"], err
    if entry.get("gpu", True):
        h100 = H100["programs"][key(entry)]
        assert h100["backend"] == "gpu"
        assert out == h100["stdout"], f"model:\n{out}\nH100:\n{h100['stdout']}\n{err}"
        assert res.exit_status == h100["exit_status"]
    if entry["expect"] in ("fault", "hang"):
        assert res.faults, err
    else:
        assert not res.faults, err


def _gpu_here() -> bool:
    from ptxlab.run import gpu

    return gpu.status().available


GPU_RUNNABLE = [e for e in RUNNABLE if e.get("gpu", True)]


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_here(), reason="no GPU here: the GPU path is checked on the H100")
@pytest.mark.parametrize("entry", GPU_RUNNABLE, ids=[key(e) for e in GPU_RUNNABLE])
def test_the_gpu_path_prints_what_the_record_says(entry):
    res, out, err = _run(PROGRAMS / entry["file"], "gpu", entry.get("args", []))
    assert res.backend == "gpu"
    assert out == H100["programs"][key(entry)]["stdout"], err
    assert res.exit_status == entry["exit_status"]


def test_every_program_of_the_manifest_was_run_on_the_h100():
    for entry in MANIFEST:
        if entry.get("gpu", True):
            assert key(entry) in H100["programs"], key(entry)
    assert "H100" in H100["machine"]


def test_a_fault_is_reported_with_kernel_block_warp_lane_and_lines():
    entry = next(e for e in MANIFEST if e["expect"] == "fault")
    res, out, err = _run(PROGRAMS / entry["file"])
    report = res.faults[0]
    for part in ("kernel ", "block (", "warp ", "lane ", "PTX line ", f"CUDA source {entry['file']}:"):
        assert part in report, report
    assert "an illegal memory access was encountered" in out
    assert report in err


def test_an_endless_kernel_stops_with_its_report():
    entry = next(e for e in MANIFEST if e["expect"] == "hang")
    res, out, err = _run(PROGRAMS / entry["file"], limit=HANG_LIMIT_S)
    assert res.faults and "endless loop" in res.faults[0]
    assert "the launch timed out and was terminated" in out + err or res.exit_status != 0


def test_the_articles_half_bug_names_half_and_its_header():
    entry = next(e for e in MANIFEST if e["expect"] == "compile_error")
    with pytest.raises(toolchain.ProgramCompileError) as info:
        _run(PROGRAMS / entry["file"])
    text = str(info.value)
    assert "half" in text and "cuda_fp16.h" in text
    assert 'identifier "half" is undefined' in info.value.log  # nvcc's own message, with its line
    assert any("cuda_fp16.h" in h for h in info.value.hints)


def test_the_command_says_where_it_ran_and_returns_the_programs_status(tmp_path):
    entry = next(e for e in MANIFEST if e["file"].startswith("args") and e["exit_status"] == 3)
    cmd = [sys.executable, "-m", "ptxlab.cli", "run", "--cpu", str(PROGRAMS / entry["file"]),
           "--", *entry["args"]]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == entry["exit_status"], done.stderr
    assert done.stderr.startswith("[ptxlab] running ") and "on the CPU model" in done.stderr
    assert done.stdout == H100["programs"][key(entry)]["stdout"]


def test_a_cell_magic_runs_a_whole_program_in_the_cell(capsys):
    ipython = pytest.importorskip("IPython.core.interactiveshell")
    shell = ipython.InteractiveShell.instance()
    if "ptxlab" not in shell.extension_manager.loaded:
        shell.run_line_magic("load_ext", "ptxlab")
    from ptxlab.run.programs import cell_magic

    entry = next(e for e in MANIFEST if e["file"].startswith("ldmatrix"))
    shell.run_cell_magic("cuda", "--cpu", (PROGRAMS / entry["file"]).read_text())
    got = capsys.readouterr()
    assert got.out == H100["programs"][key(entry)]["stdout"]
    assert "[ptxlab] running cell.cu on the CPU model" in got.err
    assert cell_magic.last_run.exit_status == 0
    shell.run_cell_magic("cuda", "--cpu", "int main() { return undefined_name; }")
    got = capsys.readouterr()
    assert "cell.cu(1): error" in got.err and "undefined_name" in got.err


def test_a_program_built_for_the_model_says_how_to_run_it(tmp_path):
    src = tmp_path / "tiny.cu"
    src.write_text("__global__ void k(int* p) { p[0] = 1; }\n"
                   "int main() { int* d; cudaMalloc(&d, 4); k<<<1, 1>>>(d); return 0; }\n")
    build = toolchain.build_for_model(src, tmp_path / "build")
    env = {k: v for k, v in os.environ.items() if k != "PTXLAB_MODEL_FD"}
    done = subprocess.run([str(build.executable)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode != 0 and "ptxlab run --cpu" in done.stderr


def test_an_api_the_model_lacks_is_named_with_the_way_out(tmp_path):
    src = tmp_path / "managed.cu"
    src.write_text("#include <cuda_runtime.h>\nint main() { int* p; "
                   "cudaMallocManaged(&p, 4); return 0; }\n")
    with pytest.raises(toolchain.ProgramCompileError) as info:
        _run(src)
    assert "cudaMallocManaged" in str(info.value) and "--gpu" in str(info.value)


def test_module_variables_and_symbols_live_across_launches(tmp_path):
    src = tmp_path / "symbols.cu"
    src.write_text(r'''#include <cstdio>
__constant__ int scale[4];
__device__ int total;
__global__ void add(const int* x) { atomicAdd(&total, x[threadIdx.x] * scale[threadIdx.x % 4]); }
int main() {
  int h[32], s[4] = {1, 2, 3, 4}, zero = 0, got = 0;
  for (int i = 0; i < 32; ++i) h[i] = i;
  int* d; cudaMalloc(&d, sizeof h);
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  cudaMemcpyToSymbol(scale, s, sizeof s);
  cudaMemcpyToSymbol(total, &zero, sizeof zero);
  for (int r = 0; r < 3; ++r) add<<<1, 32>>>(d);
  cudaMemcpyFromSymbol(&got, total, sizeof got);
  printf("%d\n", got);
  return 0;
}
''')
    expected = 3 * sum(i * (1 + i % 4) for i in range(32))
    res, out, err = _run(src)
    assert out == f"{expected}\n", err


def test_a_missing_host_compiler_is_one_sentence_with_the_way_to_get_it(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(toolchain.ToolchainMissing) as info:
        toolchain._check_host_compiler()
    assert "g++" in str(info.value) and "install" in str(info.value)


def test_the_nvcc_of_nvidias_wheels_builds_a_program_for_the_model(monkeypatch, tmp_path):
    """A laptop's path: no CUDA toolkit, only the wheels the README's setup installs."""
    wheels = toolchain._wheel_nvcc()
    if not wheels:
        pytest.skip("NVIDIA's nvcc wheels are not installed here")
    monkeypatch.setenv("PTXLAB_NVCC", wheels[0])
    monkeypatch.setenv("PTXLAB_CACHE_DIR", str(tmp_path / "cache"))
    toolchain.find_toolchain.cache_clear()
    try:
        assert toolchain.find_toolchain().nvcc == wheels[0]
        entry = next(e for e in MANIFEST if e["file"].startswith("movmatrix"))
        res, out, err = _run(PROGRAMS / entry["file"])
        assert out == H100["programs"][key(entry)]["stdout"], err
    finally:
        toolchain.find_toolchain.cache_clear()


def test_a_cuda_cell_prints_into_the_notebook_not_the_kernels_terminal(tmp_path):
    """Executed in a real kernel, the program's output is the cell's output."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    entry = next(e for e in MANIFEST if e["file"].startswith("ldmatrix"))
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%load_ext ptxlab"),
        nbformat.v4.new_code_cell("%%cuda --cpu\n" + (PROGRAMS / entry["file"]).read_text())])
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    streams = {o.get("name"): o.get("text", "") for o in nb.cells[1].outputs
               if o.get("output_type") == "stream"}
    printed = "".join(o.get("text", "") for o in nb.cells[1].outputs
                      if o.get("name") == "stdout")
    assert printed == H100["programs"][key(entry)]["stdout"], streams
    assert "on the CPU model" in streams.get("stderr", "")


def test_a_graded_notebook_has_the_magic_but_runs_nothing(capsys):
    """In a grading run the sandbox client stands for ``ptxlab``: ``%load_ext ptxlab`` works,
    and a ``%%cuda`` cell says the runs are off instead of failing."""
    from ptxlab.grading import sandbox_client

    class Shell:
        magics: dict = {}

        def register_magic_function(self, fn, magic_kind, magic_name):
            self.magics[(magic_kind, magic_name)] = fn

    shell = Shell()
    sandbox_client.load_ipython_extension(shell)
    sandbox_client.Off._noted = False
    shell.magics[("cell", "cuda")]("--cpu", "int main() { return 1; }")
    assert "off while the notebook is graded" in capsys.readouterr().out


def test_a_failed_device_assert_stops_the_kernel_as_on_a_gpu(tmp_path):
    src = tmp_path / "asserts.cu"
    src.write_text(r'''#include <cstdio>
#include <cassert>
__global__ void check(const int* v) { assert(v[threadIdx.x] < 40); }
int main() {
  int h[64];
  for (int i = 0; i < 64; ++i) h[i] = i;
  int* d;
  cudaMalloc(&d, sizeof h);
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  check<<<1, 64>>>(d);
  printf("%s\n", cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
''')
    res, out, err = _run(src)
    assert out == "device-side assert triggered\n"
    assert "thread: [40,0,0] Assertion `v[threadIdx.x] < 40` failed." in res.faults[0]
    assert "warp 1, lanes 8-31" in res.faults[0]


def test_the_headers_tutorials_include_work_on_the_model(tmp_path):
    src = tmp_path / "headers.cu"
    src.write_text(r'''#include <cstdint>
#include <cstdio>
#include <iostream>
#include <cfloat>
#include <cassert>
#include <assert.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
__global__ void convert(float* out) {
  int i = threadIdx.x;
  half h = __float2half(1.0f + i / 4.0f);
  __nv_bfloat16 b = __float2bfloat16(2.5f * i);
  assert(i < 32);
  out[i] = __half2float(h) + __bfloat162float(b) + (FLT_MAX > 1e38f ? 1.0f : 0.0f);
}
int main() {
  float* d; float h[8];
  cudaMalloc(&d, sizeof h);
  convert<<<1, 8>>>(d);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  for (float v : h) std::cout << v << " ";
  std::cout << std::endl;
  return 0;
}
''')
    res, out, err = _run(src)
    expected = " ".join(f"{1 + i / 4 + 2.5 * i + 1:g}" for i in range(8)) + " \n"
    assert out == expected, err


def test_status_says_how_whole_programs_are_built(capsys):
    from ptxlab.cli import status as status_cli

    ok, line = status_cli.whole_programs()
    assert ok and "nvcc" in line
    status_cli.run(type("Args", (), {"json": False})())
    assert line in capsys.readouterr().out


def test_memcpy_default_tells_device_from_host_pointers(tmp_path):
    src = tmp_path / "default_copy.cu"
    src.write_text(r'''#include <cstdio>
int main() {
  int h[8], g[8], k[8];
  for (int i = 0; i < 8; ++i) h[i] = 3 * i;
  int *a, *b;
  cudaMalloc(&a, sizeof h);
  cudaMalloc(&b, sizeof h);
  cudaMemcpy(a, h, sizeof h, cudaMemcpyDefault);
  cudaMemcpy(b, a, sizeof h, cudaMemcpyDefault);
  cudaMemcpy(g, b, sizeof h, cudaMemcpyDefault);
  cudaMemcpy(k, g, sizeof h, cudaMemcpyDefault);
  cudaError_t past = cudaMemcpy(g, b + 4, sizeof h, cudaMemcpyDefault);
  printf("%d %d %s\n", k[7], k[1], cudaGetErrorString(past));
  return 0;
}
''')
    res, out, err = _run(src)
    assert out == "21 3 invalid argument\n", err
