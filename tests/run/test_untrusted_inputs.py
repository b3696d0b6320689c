"""What a learner controls never reaches the grader as more than data: files it could have
replaced are read as regular files only, launch requests are checked before anything compiles,
includes are decided from the preprocessed source, and compile caches are verified on read.

Each class of attack has several variants; the grading-level versions (the same attacks in
submissions graded by ``ptxlab grade`` beside good students) are in
``tests/grading/test_grading_resource_exploits.py``.
"""
from __future__ import annotations

import os
import socket
import threading

import numpy as np
import pytest

from ptxlab.run import backends, includes, launch_log, launch_request
from ptxlab.run.errors import RequestRefused, ServiceUnavailable, UntrustedFile
from ptxlab.run.untrusted_files import read_regular, read_tail

SRC = 'extern "C" __global__ void k(unsigned* o) { o[threadIdx.x] = threadIdx.x * 3u; }'


def _out() -> list:
    return [np.zeros(32, np.uint32)]


# --------------------------------------------------------------------------------------------
# Files a learner could replace
# --------------------------------------------------------------------------------------------

@pytest.fixture
def folder(tmp_path):
    (tmp_path / "secret.jsonl").write_text('{"student": "alice", "score": 12}\n')
    (tmp_path / "work").mkdir()
    return tmp_path


def _within(seconds: float, fn):
    """``fn()`` in a thread; fails the test when it does not return in time (a FIFO open)."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"the read blocked for more than {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.mark.parametrize("make, says", [
    (lambda w, f: os.symlink(f / "secret.jsonl", w / "launches.jsonl"), "symbolic link"),
    (lambda w, f: os.symlink("/dev/zero", w / "launches.jsonl"), "symbolic link"),
    (lambda w, f: os.symlink("../secret.jsonl", w / "launches.jsonl"), "symbolic link"),
    (lambda w, f: os.mkfifo(w / "launches.jsonl"), "FIFO"),
    (lambda w, f: (w / "launches.jsonl").mkdir(), "folder"),
])
def test_a_replaced_launch_log_is_refused_with_a_reason(folder, make, says):
    work = folder / "work"
    make(work, folder)
    with pytest.raises(UntrustedFile, match=says):
        _within(5, lambda: launch_log.read_launch_log(work / "launches.jsonl"))


def test_a_unix_socket_and_a_linked_folder_are_refused(folder):
    work = folder / "work"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(work / "launches.jsonl"))
    try:
        with pytest.raises(UntrustedFile, match="socket"):
            _within(5, lambda: read_regular(work / "launches.jsonl", max_bytes=100, root=work))
    finally:
        sock.close()
    os.symlink(folder, work / "up")
    with pytest.raises(UntrustedFile, match="symbolic link"):
        read_regular(work / "up" / "secret.jsonl", max_bytes=100, root=work)


def test_an_oversize_file_is_refused_before_it_is_read(folder):
    work = folder / "work"
    big = work / "launches.jsonl"
    with open(big, "wb") as fh:
        fh.truncate(launch_log.MAX_LOG_BYTES + 1)     # sparse: no disk used
    with pytest.raises(UntrustedFile, match="more than"):
        launch_log.read_launch_log(big)
    assert len(read_tail(big, 100, root=work)) == 100


def test_a_plain_log_still_reads(folder, monkeypatch):
    log = folder / "work" / "launches.jsonl"
    monkeypatch.setenv(launch_log.LAUNCH_LOG_ENV, str(log))
    launch_log.append_launch_record({"kernel": "k", "outcome": "ok"})
    records, offset = launch_log.read_launch_log(log)
    assert records == [{"kernel": "k", "outcome": "ok"}] and offset == log.stat().st_size


def test_the_launch_log_is_never_appended_through_a_link(folder, monkeypatch):
    log = folder / "work" / "launches.jsonl"
    os.symlink(folder / "secret.jsonl", log)
    monkeypatch.setenv(launch_log.LAUNCH_LOG_ENV, str(log))
    launch_log.append_launch_record({"kernel": "k", "outcome": "ok"})
    assert (folder / "secret.jsonl").read_text() == '{"student": "alice", "score": 12}\n'


# --------------------------------------------------------------------------------------------
# Launch requests: size and compiler options
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("isolate", [False, True])
@pytest.mark.parametrize("source", [
    SRC + "\n//" + "x" * (17 * 2**20),                              # 17 MB of comment
    SRC + "\nconst unsigned t[] = {" + "1," * (launch_request.MAX_SOURCE_BYTES // 2) + "1};",
    SRC + "\n/*" + "\u00e9" * (launch_request.MAX_SOURCE_BYTES // 2 + 1) + "*/",  # UTF-8 bytes
], ids=["17MB-comment", "1MiB-table", "utf8-bytes-over"])
def test_an_oversize_source_is_refused_never_compiled(source, isolate, monkeypatch, tmp_path):
    log = tmp_path / "launches.jsonl"
    monkeypatch.setenv(launch_log.LAUNCH_LOG_ENV, str(log))
    with pytest.raises(RequestRefused, match=r"MiB; sources over 1 MiB are not compiled"):
        backends.launch(source, "k", args=_out(), isolate=isolate)
    assert not log.exists(), "nothing was launched, so nothing was logged"


@pytest.mark.parametrize("option", [
    "--time=/tmp/ptxlab-cache/ptx/0000.ptx", "-time=x.csv", "-I/", "-I../kernels/reference",
    "--include-path=/srv", "--pre-include=/etc/passwd", "-include", "--pch-dir=/tmp/x",
    "--create-pch=/tmp/y.pch", "-MF", "--dependency-output=/tmp/d", "-o", "--fdevice-time-trace=t",
    "-Dok -I/", "-DX=1\n-I/", "", "--gpu-architecture=/tmp/x",
])
def test_compiler_options_that_name_files_are_refused(option):
    with pytest.raises(RequestRefused, match="is not allowed"):
        backends.launch(SRC, "k", args=_out(), options=[option])


def test_ordinary_compiler_options_still_work():
    res = backends.launch(SRC.replace("3u", "SCALE"), "k", args=_out(),
                          options=["-DSCALE=5u", "-std=c++17", "-lineinfo", "--use_fast_math",
                                   "-ftz=true", "-maxrregcount=64", "-UNDEBUG"])
    assert (res.outputs[0] == 5 * np.arange(32)).all()


# --------------------------------------------------------------------------------------------
# Includes decided from the preprocessed source
# --------------------------------------------------------------------------------------------

needs_cpp = pytest.mark.skipif(includes.preprocessor() is None, reason="no C preprocessor here")


@needs_cpp
@pytest.mark.parametrize("spelling", [
    '%:include "reference/ldmatrix_ref.cu"',                       # digraph
    '#\\\ninclude "reference/ldmatrix_ref.cu"',                    # line splice
    '# \\\n  inc\\\nlude "reference/mma_ref.cu"',                  # splices inside the word
    '#define R "reference/mma_ref.cu"\n#include R',               # macro-built name
    '#define CAT(a, b) a##b\n#define S(x) #x\n#define Q(x) S(x)\n#include Q(reference/CAT(mma,_ref).cu)',
    '%:define R <reference/movmatrix_ref.cu>\n%:include R',
    '#if __has_include("reference/stmatrix_ref.cu")\n#include "reference/stmatrix_ref.cu"\n#endif',
    '#include "../kernels/reference/ldmatrix_ref.cu"',
    '#include "capstone/gemm.cu"',
    '#include "/etc/hostname"',
    '#ifdef __CUDACC_RTC__\n#include "reference/mma_ref.cu"\n#endif',
])
def test_reference_code_is_found_in_the_preprocessed_source(spelling):
    with pytest.raises(RequestRefused, match="the kernel includes|could not be resolved"):
        includes.check_includes(spelling + "\n" + SRC)


@needs_cpp
@pytest.mark.parametrize("spelling", [
    '#include "ldmatrix.cuh"', '%:include "mma.cuh"', '#\\\ninclude "stmatrix.cuh"',
    '#include <cuda_fp16.h>', '#include "capstone/capstone_ptx.cuh"',
    '#if __has_include("reference/none.cu")\n#include "reference/none.cu"\n#endif',
])
def test_public_headers_pass_the_include_check(spelling):
    includes.check_includes(spelling + "\n" + SRC)


@needs_cpp
def test_nvrtc_builtin_headers_still_pass_after_the_temporary_folder_is_emptied():
    """A warm launch executor empties its temporary folder between students: the stand-ins for
    NVRTC's own headers are made again, so the next student's <cstdint> is no missing file."""
    import shutil

    includes.check_includes("#include <cstdint>\n" + SRC)
    shutil.rmtree(includes._builtin_stub_dir())
    includes.check_includes("#include <cstdint>\n// the next student\n" + SRC)


@needs_cpp
def test_the_include_check_guards_every_launch_where_it_is_on(monkeypatch):
    monkeypatch.setenv(includes.CHECK_ENV, "1")
    with pytest.raises(RequestRefused, match="reference/ldmatrix_ref.cu"):
        backends.launch('%:include "reference/ldmatrix_ref.cu"\n' + SRC, "k", args=_out())
    assert (backends.launch('#include "ldmatrix.cuh"\n' + SRC, "k",
                            args=_out()).outputs[0] == 3 * np.arange(32)).all()


# --------------------------------------------------------------------------------------------
# The grader's own launches: only in the service
# --------------------------------------------------------------------------------------------

def test_required_service_never_falls_back_to_a_child(monkeypatch, tmp_path):
    monkeypatch.setenv(backends.SERVICE_REQUIRED_ENV, "1")
    monkeypatch.setenv("PTXLAB_LAUNCH_SERVICE", str(tmp_path / "gone.sock"))
    with pytest.raises(ServiceUnavailable):
        backends.launch(SRC, "k", args=_out(), isolate=True, timeout_s=30)
    monkeypatch.delenv("PTXLAB_LAUNCH_SERVICE")
    with pytest.raises(ServiceUnavailable):
        backends.launch(SRC, "k", args=_out(), isolate=True, timeout_s=30)


# --------------------------------------------------------------------------------------------
# Compile caches: content-addressed, verified on read
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("poison", ["garbage", "other_entry", "link", "fifo", "truncated"])
def test_a_poisoned_ptx_cache_entry_is_detected_and_rebuilt(poison, monkeypatch, tmp_path):
    from ptxlab.run.ptx import nvrtc

    monkeypatch.setenv("PTXLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(nvrtc, "_MEMORY_CACHE", {})
    src = SRC.replace("3u", f"{len(poison)}u")
    good = nvrtc.compile_to_ptx(src)
    (entry,) = (tmp_path / "cache" / "ptx").glob("*.ptx")
    other = nvrtc.compile_to_ptx(SRC.replace("3u", "99u"))
    entry.unlink()
    if poison == "garbage":
        entry.write_text("// a learner's table\n.visible .entry nothing() { ret; }\n")
    elif poison == "other_entry":
        key = entry.stem
        entry.write_text(nvrtc._cache_entry(key + "0", other))
    elif poison == "link":
        os.symlink("/dev/zero", entry)
    elif poison == "fifo":
        os.mkfifo(entry)
    else:
        entry.write_text(nvrtc._cache_entry(entry.stem, good)[:-20])
    monkeypatch.setattr(nvrtc, "_MEMORY_CACHE", {})
    again = _within(30, lambda: nvrtc.compile_to_ptx(src))
    assert again == good
    assert nvrtc._read_cache(entry, entry.stem) == good      # rebuilt in place


def test_the_ptx_cache_stops_growing_at_its_budget(monkeypatch, tmp_path):
    """Many distinct sources cannot fill the (memory-backed) folder of the launch service."""
    from ptxlab.run.ptx import nvrtc

    monkeypatch.setenv("PTXLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PTXLAB_CACHE_MAX_MB", "0.0003")       # 300 bytes: one entry, no more
    monkeypatch.setattr(nvrtc, "_MEMORY_CACHE", {})
    for n in range(4):
        nvrtc.compile_to_ptx(SRC.replace("3u", f"{n + 10}u"))
    entries = list((tmp_path / "cache" / "ptx").glob("*.ptx"))
    assert len(entries) == 1, entries
