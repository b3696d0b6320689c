"""What ``ptxlab run`` tells a learner about a copied program: ptxlab.run.programs.hints.

compile_hints: the header a type, function or namespace needs (from nvcc's "identifier ... is
undefined"). source_notes: a .shared address passed as a 64-bit "l" operand, and ldmatrix /
stmatrix / movmatrix modifiers in another order than the ISA's. Where nvcc is installed, the
log format and ptxas's acceptance of what the notes call legal are checked against it.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ptxlab.run.programs import hints
from ptxlab.run.programs.hints import HEADER_OF, compile_hints, source_notes

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH (install the CUDA "
                                                     "toolkit to check the real log format)")


def _log(line: int, name: str, path: str = "prog.cu") -> str:
    """One error as nvcc prints it: location, message, the source line, a caret."""
    return (f'{path}({line}): error: identifier "{name}" is undefined\n'
            f"    {name} x;\n    ^\n\n1 error detected in the compilation of \"{path}\".\n")


def _nvcc(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess:
    src = tmp_path / "prog.cu"
    src.write_text(source)
    return subprocess.run([NVCC, "-arch=sm_90a", *args, str(src), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------------------------------------
# compile_hints: a type used without its header
# ---------------------------------------------------------------------------------------------

HALF_PROGRAM = """\
#include <cstdint>

__global__ void scale(float *out) {
  half h = __float2half(2.0f);
  out[threadIdx.x] = __half2float(h);
}
"""


def test_half_without_its_header_names_type_header_and_line():
    [hint] = compile_hints(HALF_PROGRAM, _log(12, "half", "/tmp/x/file.cu"))
    assert hint.startswith("line 12: ")
    assert "`half`" in hint and "<cuda_fp16.h>" in hint
    assert "#include <cuda_fp16.h>" in hint
    assert "does not include" in hint and len(hint) <= hints.MAX_HINT


@pytest.mark.parametrize("name, header", [
    ("half", "cuda_fp16.h"), ("__half", "cuda_fp16.h"), ("half2", "cuda_fp16.h"),
    ("__half2", "cuda_fp16.h"), ("__float2half", "cuda_fp16.h"),
    ("__half2float", "cuda_fp16.h"),
    ("__nv_bfloat16", "cuda_bf16.h"), ("nv_bfloat16", "cuda_bf16.h"),
    ("__nv_bfloat162", "cuda_bf16.h"), ("__float2bfloat16", "cuda_bf16.h"),
    ("__nv_fp8_e4m3", "cuda_fp8.h"), ("__nv_fp8_e5m2", "cuda_fp8.h"),
    ("uint32_t", "cstdint"), ("int64_t", "cstdint"), ("uint8_t", "cstdint"),
    ("printf", "cstdio"), ("assert", "cassert"),
    ("wmma", "mma.h"), ("nvcuda", "mma.h"),
])
def test_each_name_is_sent_to_its_header(name, header):
    [hint] = compile_hints("int main() {}\n", _log(3, name))
    assert f"<{header}>" in hint and f"#include <{header}>" in hint
    assert f"`{name}`" in hint and hint.startswith("line 3: ")


def test_a_namespace_is_called_one():
    [hint] = compile_hints("", _log(4, "nvcuda"))
    assert "the namespace `nvcuda`" in hint


@pytest.mark.parametrize("include", [
    "#include <cuda_fp16.h>", '#include "cuda_fp16.h"', "#  include   <  cuda_fp16.h  >",
    '# include"cuda_fp16.h"', "\t#include <cuda_fp8.h>", "#include <cuda_bf16.h>",
    "#include <mma.h>", "#include <third_party/cuda_fp16.h>",
])
def test_no_hint_when_the_header_or_one_that_includes_it_is_there(include):
    assert compile_hints(include + "\n" + HALF_PROGRAM, _log(4, "half")) == []


@pytest.mark.parametrize("include, name", [
    ("#include <stdint.h>", "uint32_t"), ("#include <cstdint>", "uint64_t"),
    ("#include <stdio.h>", "printf"), ("#include <assert.h>", "assert"),
    ("#include <cassert>", "assert"), ("#include <mma.h>", "wmma"),
])
def test_no_hint_when_the_c_or_cpp_spelling_is_included(include, name):
    assert compile_hints(include + "\n", _log(2, name)) == []


@pytest.mark.parametrize("hidden", [
    "// #include <cuda_fp16.h>", "/* #include <cuda_fp16.h> */",
    "/*\n#include <cuda_fp16.h>\n*/", "#if 0\n#include <cuda_fp16.h>\n#endif",
    'const char *note = "#include <cuda_fp16.h>";',
])
def test_an_include_in_a_comment_or_string_does_not_count(hidden):
    [hint] = compile_hints(hidden + "\n" + HALF_PROGRAM, _log(9, "half"))
    assert "<cuda_fp16.h>" in hint


def test_one_hint_per_name_and_header_at_the_first_line_reported():
    log = _log(5, "half") + _log(9, "half") + _log(7, "__half2float") + _log(11, "half")
    out = compile_hints(HALF_PROGRAM, log)
    assert len(out) == 2
    assert out[0].startswith("line 5: `half`")
    assert out[1].startswith("line 7: `__half2float`")


def test_undefined_names_of_the_program_itself_get_no_hint():
    assert compile_hints(HALF_PROGRAM, _log(4, "my_tile") + _log(5, "acc")) == []
    assert compile_hints(HALF_PROGRAM, "") == []
    assert compile_hints(HALF_PROGRAM, "prog.cu(3): error: expected a \";\"\n") == []


def test_other_error_spellings_and_files():
    numbered = 'prog.cu(6): error #20-D: identifier "half2" is undefined\n'
    assert compile_hints("", numbered)[0].startswith("line 6: `half2`")
    nvrtc = 'default_program(12): error: identifier "half" is undefined\n'
    assert compile_hints("", nvrtc)[0].startswith("line 12: ")
    header = 'include/tile.cuh(4): error: identifier "__nv_bfloat16" is undefined\n'
    assert compile_hints("", header)[0].startswith("tile.cuh, line 4: ")


def test_std_members_point_at_their_header():
    log = 'prog.cu(8): error: namespace "std" has no member "cout"\n'
    [hint] = compile_hints("int main() {}\n", log)
    assert "`std::cout`" in hint and "<iostream>" in hint
    assert compile_hints("#include <iostream>\n", log) == []


NAMESPACE_PROGRAM = """\
#include <cuda_fp16.h>
using namespace nvcuda;
__global__ void k() {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
}
"""

# nvcc 13's log for NAMESPACE_PROGRAM: the name sits under the caret, not in the message.
NAMESPACE_LOG = """\
prog.cu(2): error: name must be a namespace name
  using namespace nvcuda;
                  ^

prog.cu(4): error: name followed by "::" must be a class or namespace name
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    ^

2 errors detected in the compilation of "prog.cu".
"""


def test_namespace_errors_name_mma_h_from_the_caret():
    out = compile_hints(NAMESPACE_PROGRAM, NAMESPACE_LOG)
    assert len(out) == 2
    assert out[0].startswith("line 2: the namespace `nvcuda` is declared in <mma.h>")
    assert out[1].startswith("line 4: the namespace `wmma` is declared in <mma.h>")
    assert all("<mma.h>" in h for h in out)
    assert compile_hints("#include <mma.h>\n" + NAMESPACE_PROGRAM, NAMESPACE_LOG) == []


def test_namespace_errors_without_a_caret_read_the_source_line():
    bare = "\n".join(line for line in NAMESPACE_LOG.splitlines() if "error" in line)
    out = compile_hints(NAMESPACE_PROGRAM, bare)
    assert len(out) == 2 and all("<mma.h>" in h for h in out)
    assert compile_hints("int x;\n" * 5, bare) == []     # nothing known on those lines


@needs_nvcc
def test_the_log_nvcc_really_prints_for_half(tmp_path):
    """The format parsed above is nvcc's: line 4 of this program uses ``half``."""
    run = _nvcc(tmp_path, HALF_PROGRAM, "-cubin")
    assert run.returncode != 0
    out = compile_hints(HALF_PROGRAM, run.stdout + run.stderr)
    assert out[0].startswith("line 4: `half` is declared in <cuda_fp16.h>"), out
    assert any(h.startswith("line 4: `__float2half`") for h in out)
    assert any(h.startswith("line 5: `__half2float`") for h in out)
    fixed = "#include <cuda_fp16.h>\n" + HALF_PROGRAM
    assert _nvcc(tmp_path, fixed, "-cubin").returncode == 0


#: Names nvcc 13 declares itself (its runtime headers typedef the signed ones); NVRTC does not.
PREDECLARED_BY_NVCC = {"int8_t", "int16_t", "int32_t", "int64_t"}
STD_ONLY = {"cout", "cerr", "endl", "vector"}


def _use(name: str) -> str:
    if name in STD_ONLY:
        return f"(void)std::{name};"
    return f"{name}(1);" if HEADER_OF[name].kind == "macro" else f"(void){name};"


@needs_nvcc
def test_the_table_matches_nvcc(tmp_path):
    """Every name in the table is undefined without its header and declared with it."""
    body = "\n".join(f"  {_use(n)}" for n in HEADER_OF)
    program = f"__device__ void uses() {{\n{body}\n}}\n"
    run = _nvcc(tmp_path, program, "-c")       # the host pass too: it reports printf, assert
    out = compile_hints(program, run.stdout + run.stderr)
    named = {n for n in HEADER_OF if any(f"`{n}`" in h or f"`std::{n}`" in h for h in out)}
    assert named | PREDECLARED_BY_NVCC == set(HEADER_OF), set(HEADER_OF) - named
    for n, line in zip(HEADER_OF, range(2, 2 + len(HEADER_OF))):
        if n in named:
            assert any(h.startswith(f"line {line}: ") and n in h for h in out), n
    headers = sorted({d.header for d in HEADER_OF.values()})
    with_headers = ("".join(f"#include <{h}>\n" for h in headers) + "using namespace nvcuda;\n"
                    + program)
    run = _nvcc(tmp_path, with_headers, "-c")
    log = run.stdout + run.stderr
    assert not [n for n in HEADER_OF if f'"{n}" is undefined' in log or f'member "{n}"' in log]
    assert compile_hints(with_headers, run.stdout + run.stderr) == []


# ---------------------------------------------------------------------------------------------
# source_notes: a shared address in a 64-bit "l" operand
# ---------------------------------------------------------------------------------------------

CVTA_L = """\
#include <cstdint>
__global__ void k(uint32_t *out) {
  __shared__ uint16_t tile[256];
  uint32_t a, b, c, d;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
               "{%0, %1, %2, %3}, [%4];\\n"
               : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
               : "l"(__cvta_generic_to_shared(&tile[(threadIdx.x % 16) * 16])));
  out[threadIdx.x] = a ^ b ^ c ^ d;
}
"""

GENERIC_L = """\
#include <cstdint>
__global__ void k(uint32_t *out) {
  __shared__ uint16_t tile[64];
  uint32_t a;
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
               : "=r"(a) : "l"((uint64_t)&tile[(threadIdx.x % 8) * 8]));
  out[threadIdx.x] = a;
}
"""


def test_l_operand_from_cvta_is_legal_and_says_why():
    [note] = source_notes(CVTA_L)
    assert note.startswith("line 5: ")                  # the line of the asm statement
    assert "`ldmatrix`" in note and '64-bit "l"' in note and "legal" in note
    assert "32- or 64-bit register" in note and "ptxas takes the 64-bit" in note
    assert "shared-window address" in note and "__cvta_generic_to_shared" in note


def test_l_operand_holding_a_generic_pointer_is_wrong():
    [note] = source_notes(GENERIC_L)
    assert note.startswith("line 5: ") and "generic pointer" in note
    assert "names another address" in note
    assert "CPU model reports a generic address used as shared" in note
    assert "__cvta_generic_to_shared" in note
    cast = GENERIC_L.replace("(uint64_t)&tile[(threadIdx.x % 8) * 8]",
                             "reinterpret_cast<uint64_t>(tile + threadIdx.x % 8 * 8)")
    assert "generic pointer" in source_notes(cast)[0]


def test_l_operand_from_a_variable_is_traced_or_explained():
    declared = "  uint32_t a, b, c, d;\n  size_t addr = __cvta_generic_to_shared(tile);\n"
    via = CVTA_L.replace("  uint32_t a, b, c, d;\n", declared).replace(
        "__cvta_generic_to_shared(&tile[(threadIdx.x % 16) * 16])", "addr")
    assert "as __cvta_generic_to_shared gives here" in source_notes(via)[0]
    unknown = CVTA_L.replace("__cvta_generic_to_shared(&tile[(threadIdx.x % 16) * 16])",
                             "row_address(tile)")
    [note] = source_notes(unknown)
    assert "legal" in note and "must be a shared-window address" in note
    assert "not a generic pointer" in note


def test_r_operand_gets_no_note():
    r32 = CVTA_L.replace('"l"(__cvta', '"r"((uint32_t)__cvta')
    assert source_notes(r32) == []


def test_operand_numbering_counts_outputs_first_and_reads_plus_constraints():
    program = """\
__device__ void f(unsigned p32, unsigned long long p64) {
  unsigned v = 0, w;
  asm volatile("ld.shared.u32 %0, [%2];\\n\\tadd.u32 %1, %1, 1;"
               : "+r"(v), "=r"(w) : "r"(p32), "l"(p64));
  asm volatile("ld.shared.u32 %0, [%3];" : "+r"(v), "=r"(w) : "r"(p32), "l"(p64));
}
"""
    [note] = source_notes(program)
    assert note.startswith("line 5: ") and "`ld.shared`" in note and "(`p64`)" in note


def test_named_operands_and_macros():
    program = """\
#define LDS(v, a) asm volatile("ld.shared.b32 %[val], [%[addr]];" \\
                               : [val] "=r"(v) : [addr] "l"(a))
#define LDS32(v, a) asm volatile("ld.shared.b32 %[val], [%[addr]];" \\
                               : [val] "=r"(v) : [addr] "r"(a))
"""
    [note] = source_notes(program)
    assert note.startswith("line 1: ") and "`ld.shared`" in note


def test_only_the_shared_address_of_a_copy_counts():
    global_l = """\
__device__ void f(unsigned s, const float *g) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" :: "r"(s), "l"(g));
  asm volatile("cvta.to.shared.u64 %0, %1;" : "=l"(x) : "l"(g));
}
"""
    assert source_notes(global_l) == []
    bulk = """\
__device__ void f(float *g, unsigned long long s) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 64;" :: "l"(g), "l"(s));
}
"""
    [note] = source_notes(bulk)
    assert "`cp.async`" in note and "(`s`)" in note


def test_asm_in_comments_is_not_read():
    commented = "// " + CVTA_L.replace("\n", "\n// ")
    assert source_notes(commented) == []
    assert source_notes("/*\n" + CVTA_L + "*/\n") == []
    assert source_notes("#if 0\n" + CVTA_L + "#endif\n") == []


@needs_nvcc
def test_ptxas_takes_l_operands_so_these_are_notes_not_errors(tmp_path):
    """Both programs assemble: ptxas takes the 64-bit register in a .shared instruction and
    cannot tell a generic pointer from a shared-window address (hence the note)."""
    program = CVTA_L + GENERIC_L.replace("void k(", "void g(").split("\n", 1)[1]
    run = _nvcc(tmp_path, program, "-cubin")
    assert run.returncode == 0, run.stderr
    assert len(source_notes(program)) == 2


# ---------------------------------------------------------------------------------------------
# source_notes: modifiers in another order than the ISA's
# ---------------------------------------------------------------------------------------------

def _asm(instruction: str, operands: str = '"=r"(a) : "r"(p)') -> str:
    return f'  asm volatile("{instruction}" : {operands});\n'


@pytest.mark.parametrize("written, isa", [
    ("ldmatrix.sync.aligned.x4.m8n8.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
    ("ldmatrix.sync.aligned.x2.trans.m8n8.shared.b16",
     "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16"),
    ("ldmatrix.sync.aligned.trans.m8n8.x1.shared::cta.b16",
     "ldmatrix.sync.aligned.m8n8.x1.trans.shared::cta.b16"),
    ("ldmatrix.sync.aligned.m8n8.x4.shared.trans.b16",
     "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"),
    ("stmatrix.sync.aligned.x2.m8n8.shared.b16", "stmatrix.sync.aligned.m8n8.x2.shared.b16"),
    ("movmatrix.sync.aligned.trans.m8n8.b16", "movmatrix.sync.aligned.m8n8.trans.b16"),
])
def test_other_order_shows_the_isa_order(written, isa):
    program = "__device__ void f(unsigned p) {\n  unsigned a;\n" + _asm(written + " {%0}, [%1];")
    [note] = source_notes(program)
    assert note.startswith("line 3: ")
    assert f"`{written}`" in note and f"`{isa}`" in note
    assert "ptxas takes any order" in note and "`ptxlab layout`" in note and "ISA" in note
    assert len(note) <= hints.MAX_HINT


@pytest.mark.parametrize("isa", [
    "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
    "ldmatrix.sync.aligned.m8n8.x1.trans.shared::cta.b16", "ldmatrix.sync.aligned.m8n8.x4.b16",
    "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "movmatrix.sync.aligned.m8n8.trans.b16",
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
    "ldmatrix.sync.aligned.x3.m8n8.shared.b16",          # not a form: nvcc says so, not a note
])
def test_isa_order_or_no_form_gets_no_note(isa):
    assert source_notes(_asm(isa + " {%0}, [%1];")) == []


def test_the_same_reordered_instruction_is_one_note_with_its_lines():
    x4 = "ldmatrix.sync.aligned.x4.m8n8.shared.b16 {%0, %1, %2, %3}, [%4];"
    ops = '"=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(p)'
    program = "void f() {\n" + _asm(x4, ops) + "\n" + _asm(x4, ops) + "}\n"
    [note] = source_notes(program)
    assert note.startswith("lines 2, 4: ")


def test_reordered_instruction_in_a_comment_is_not_flagged():
    program = ("// asm volatile(\"ldmatrix.sync.aligned.x4.m8n8.shared.b16 {%0}, [%1];\");\n"
               "/* ldmatrix.sync.aligned.x2.m8n8.shared.b16 */\n"
               + _asm("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];",
                      '"=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(p)'))
    assert source_notes(program) == []


@needs_nvcc
def test_ptxas_accepts_the_other_orders(tmp_path):
    program = """\
__global__ void k(unsigned *out) {
  __shared__ unsigned short tile[256];
  unsigned s = (unsigned)__cvta_generic_to_shared(&tile[(threadIdx.x % 8) * 8]);
  unsigned a, b, d;
  asm volatile("ldmatrix.sync.aligned.x2.trans.m8n8.shared.b16 {%0, %1}, [%2];"
               : "=r"(a), "=r"(b) : "r"(s));
  asm volatile("stmatrix.sync.aligned.x1.m8n8.shared.b16 [%0], {%1};" :: "r"(s), "r"(a));
  asm volatile("movmatrix.sync.aligned.trans.m8n8.b16 %0, %1;" : "=r"(d) : "r"(b));
  out[threadIdx.x] = d;
}
"""
    run = _nvcc(tmp_path, program, "-cubin")
    assert run.returncode == 0, run.stderr
    assert [n[:8] for n in source_notes(program)] == ["line 5: ", "line 7: ", "line 8: "]


# ---------------------------------------------------------------------------------------------
# The voice: short, and about "this program"
# ---------------------------------------------------------------------------------------------

def test_every_message_is_short_even_for_long_programs():
    long_expr = "reinterpret_cast<unsigned long long>(&tile[" + "x + " * 30 + "0])"
    packed = "ldmatrix.sync.aligned.x2.m16n16.trans.shared::cta.b8x16.b6x16_p32 {%0, %1}, [%2];"
    program = "".join(_asm(packed, f'"=r"(a), "=r"(b) : "l"({long_expr})') for _ in range(12))
    notes = source_notes(program)
    assert len(notes) == 2 and all(len(n) <= hints.MAX_HINT for n in notes), notes
    log = "".join(_log(i, n) for i, n in enumerate(HEADER_OF, 1))
    out = compile_hints("", log)
    assert len(out) == len(HEADER_OF)
    assert all(len(h) <= hints.MAX_HINT for h in out)
    for text in notes + out:
        assert "article" not in text.lower() and "tutorial" not in text.lower()
