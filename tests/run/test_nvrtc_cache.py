"""The PTX cache's cheap first hit: a new process names NVRTC without loading it when this cache
saw that library load before, and a toolkit's headers are signed by their folders.

Each test starts as a new process would (no compiler loaded, nothing in memory) with a cache
folder of its own.
"""
from __future__ import annotations

import json
import time

import pytest

from ptxlab.run.ptx import nvrtc

pytestmark = pytest.mark.skipif(not nvrtc.compiler_status()[0], reason="no CUDA compiler here")

SOURCE = "__global__ void k(int *p) { p[threadIdx.x] = %d; }\n"


@pytest.fixture
def fresh_process(tmp_path, monkeypatch):
    """A cache folder of the test's own; the compiler and the memory cache as a new process
    has them (empty), put back afterwards."""
    monkeypatch.setenv("PTXLAB_CACHE_DIR", str(tmp_path))
    _new_process(monkeypatch)
    return tmp_path


def _new_process(monkeypatch):
    monkeypatch.setattr(nvrtc, "_COMPILER", None)
    monkeypatch.setattr(nvrtc, "_NAMED", None)
    monkeypatch.setattr(nvrtc, "_MEMORY_CACHE", {})


def test_a_cached_kernel_needs_no_compiler_loaded(fresh_process, monkeypatch):
    first = nvrtc.compile_to_ptx(SOURCE % 1)
    loaded = nvrtc.find_compiler()
    if loaded.kind != "nvrtc":
        pytest.skip("nvcc compiles here: nothing to load")
    known = json.loads((fresh_process / nvrtc._LOADED_FILE).read_text())
    assert known[loaded.path][2] == loaded.version

    _new_process(monkeypatch)
    assert nvrtc.compiler_status()[0] and nvrtc._COMPILER is None   # the backend choice
    named = nvrtc.named_compiler()
    assert (named.kind, named.path, named.version, named.lib) == ("nvrtc", loaded.path,
                                                                  loaded.version, None)
    assert nvrtc.compile_to_ptx(SOURCE % 1) == first
    assert nvrtc._COMPILER is None, "a cache hit loaded NVRTC"
    assert ".entry" in nvrtc.compile_to_ptx(SOURCE % 2)          # a miss loads and compiles
    assert nvrtc._COMPILER is not None and nvrtc._COMPILER.lib is not None


def test_a_stale_note_of_the_library_still_finds_the_right_ptx(fresh_process, monkeypatch):
    """A note whose version is not the library's (an upgrade in place, say) keys the lookup
    wrongly once; the loaded compiler's own key then finds the entry, and the note is mended."""
    ptx = nvrtc.compile_to_ptx(SOURCE % 3)
    loaded = nvrtc.find_compiler()
    if loaded.kind != "nvrtc":
        pytest.skip("nvcc compiles here: nothing to load")
    path = fresh_process / nvrtc._LOADED_FILE
    known = json.loads(path.read_text())
    known[loaded.path][2] = "0.0"
    path.write_text(json.dumps(known))

    _new_process(monkeypatch)
    assert nvrtc.named_compiler().version == "0.0"
    assert nvrtc.compile_to_ptx(SOURCE % 3) == ptx
    assert json.loads(path.read_text())[loaded.path][2] == loaded.version


def test_a_changed_library_is_not_named_from_the_note(fresh_process, monkeypatch):
    nvrtc.compile_to_ptx(SOURCE % 4)
    loaded = nvrtc.find_compiler()
    if loaded.kind != "nvrtc":
        pytest.skip("nvcc compiles here: nothing to load")
    path = fresh_process / nvrtc._LOADED_FILE
    known = json.loads(path.read_text())
    known[loaded.path][1] += 1                      # the file's time is not the noted one
    path.write_text(json.dumps(known))
    _new_process(monkeypatch)
    assert nvrtc.named_compiler().lib is not None   # loaded, not named from the note


def test_a_toolkit_signature_follows_its_folders(tmp_path):
    """An added, removed or replaced header anywhere below changes it (pauses longer than a
    coarse file clock's tick between the changes)."""
    sign = nvrtc._toolkit_signature.__wrapped__
    (tmp_path / "crt").mkdir()
    (tmp_path / "cuda" / "std").mkdir(parents=True)
    (tmp_path / "cuda_fp16.h").write_text("// one")
    before = sign(str(tmp_path))
    assert sign(str(tmp_path)) == before
    time.sleep(0.05)
    (tmp_path / "cuda" / "std" / "new_header").write_text("// added deep down")
    after_add = sign(str(tmp_path))
    assert after_add != before
    time.sleep(0.05)
    (tmp_path / "cuda" / "std" / "new_header").unlink()
    assert sign(str(tmp_path)) != after_add
    (tmp_path / "crt" / "mma.h").write_text("// old version")
    signed = sign(str(tmp_path))
    time.sleep(0.05)
    replaced = tmp_path / "crt" / "mma.h.tmp"
    replaced.write_text("// new version")
    replaced.replace(tmp_path / "crt" / "mma.h")       # how an installer replaces a file
    assert sign(str(tmp_path)) != signed


@pytest.mark.parametrize("source, reaches", [
    ('extern "C" __global__ void k(int* a) { a[0] = 1; }', False),
    ('#include <cuda_fp16.h>\n__global__ void k() {}', True),
    ('#  include "mine.h"\n__global__ void k() {}', True),
    ('#inc\\\nlude <cstdint>\n__global__ void k() {}', True),        # lines joined first
    ('#inc\\\r\nlude <cstdint>\n__global__ void k() {}', True),
    ('#if __has_include(<cuda_bf16.h>)\n#endif\n__global__ void k() {}', True),
])
def test_a_source_that_includes_nothing_keys_without_the_header_folders(source, reaches,
                                                                        monkeypatch):
    """Signing the toolkit's header folders is the first compile's largest cost; NVRTC reads
    a header only where the source says so (or an option pre-includes one), and nvcc always
    does: only then is the signature part of the key."""
    signed = []
    monkeypatch.setattr(nvrtc, "_include_signature", lambda opts: signed.append(opts) or "sig")
    opts = ("--gpu-architecture=compute_90", "-I/usr/local/cuda/include")
    nvrtc_compiler = nvrtc.Compiler("nvrtc", "libnvrtc.so", "13.0")
    nvrtc.cache_key(source, opts, "k.cu", nvrtc_compiler)
    assert bool(signed) is reaches
    signed.clear()
    nvrtc.cache_key(source, opts + ("-include=pre.h",), "k.cu", nvrtc_compiler)
    assert signed
    signed.clear()
    nvrtc.cache_key(source, opts, "k.cu", nvrtc.Compiler("nvcc", "nvcc", "13.0"))
    assert signed


def test_a_header_edit_changes_the_key_of_a_source_that_includes_it(tmp_path):
    folder = tmp_path / "inc"
    folder.mkdir()
    (folder / "mine.h").write_text("#define N 1\n")
    opts = (f"-I{folder}",)
    compiler = nvrtc.Compiler("nvrtc", "libnvrtc.so", "13.0")
    with_include = '#include "mine.h"\n__global__ void k(int* a) { a[0] = N; }'
    without = '__global__ void k(int* a) { a[0] = 1; }'
    before = [nvrtc.cache_key(s, opts, "k.cu", compiler) for s in (with_include, without)]
    time.sleep(0.01)
    (folder / "mine.h").write_text("#define N 22\n")
    after = [nvrtc.cache_key(s, opts, "k.cu", compiler) for s in (with_include, without)]
    assert before[0] != after[0] and before[1] == after[1]
