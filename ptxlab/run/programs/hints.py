"""Hints for whole CUDA programs that learners copy into ``ptxlab run``.

Programs copied from the web often miss a header, pass a shared-memory address in an unusual
way, or write an instruction's modifiers in an order of their own. nvcc's own messages for
these say little a learner can act on, so this module turns them into one or two sentences:

* :func:`compile_hints` reads the compiler's log of a program that did not build and names
  the header that declares each undefined type, function or namespace (``half`` ->
  ``<cuda_fp16.h>``), with the line nvcc reported first;
* :func:`source_notes` reads a program that builds and points at legal but surprising inline
  PTX: a ``.shared`` address bound to a 64-bit ``"l"`` operand, and ldmatrix / stmatrix /
  movmatrix modifiers in another order than the PTX ISA's.

Both are pure: text in, sentences out. What they claim was checked against nvcc 13
(``nvcc -arch=sm_90a -c``): its log wording (``file.cu(12): error: identifier "half" is
undefined``), that ptxas assembles ``ldmatrix.sync.aligned.x4.m8n8.shared.b16`` and takes a
``.shared`` address in a 64-bit register; ``tests/run/test_program_hints.py`` repeats those checks
where nvcc is installed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

from ...model import matrix_forms

__all__ = ["compile_hints", "source_notes", "HEADER_OF", "Declared"]

#: Longest hint or note, in characters: one or two sentences a learner reads in a terminal.
MAX_HINT = 300


# ---------------------------------------------------------------------------------------------
# Which header declares what
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Declared:
    """Where a name comes from: the header to add, and the headers that also bring it in
    (so a program that includes any of them is never told to add the header)."""

    header: str
    kind: str = "name"             # "name" (type, function, object) | "namespace" | "macro"
    also_in: tuple[str, ...] = ()

    @property
    def headers(self) -> tuple[str, ...]:
        return (self.header, *self.also_in)


# cuda_bf16.h, cuda_fp8.h, cuda_fp6.h, cuda_fp4.h and mma.h bring in cuda_fp16.h (nvcc 13).
_FP16 = Declared("cuda_fp16.h", also_in=("cuda_bf16.h", "cuda_fp8.h", "cuda_fp6.h", "cuda_fp4.h",
                                         "mma.h"))
_BF16 = Declared("cuda_bf16.h", also_in=("cuda_fp8.h", "cuda_fp6.h", "cuda_fp4.h", "mma.h"))
_FP8 = Declared("cuda_fp8.h")
_CSTDINT = Declared("cstdint", also_in=("stdint.h", "inttypes.h", "cinttypes"))
_CSTDIO = Declared("cstdio", also_in=("stdio.h",))
_CASSERT = Declared("cassert", kind="macro", also_in=("assert.h",))
_MMA = Declared("mma.h", kind="namespace")
_IOSTREAM = Declared("iostream")
_VECTOR = Declared("vector")


def _table(declared: Declared, names: str) -> dict[str, Declared]:
    return {name: declared for name in names.split()}


#: Name -> where it is declared: one row per header, read by :func:`compile_hints`.
#: Each name here is one nvcc 13 reports as undefined without its header (the test checks).
HEADER_OF: dict[str, Declared] = {
    **_table(_FP16, "half __half half2 __half2 __half_raw __half2_raw "
                    "__float2half __float2half_rn __float2half_rz __half2float __floats2half2_rn "
                    "__float2half2_rn __float22half2_rn __half22float2 __halves2half2 "
                    "__low2half __high2half __low2float __high2float __half_as_ushort "
                    "__ushort_as_half __hsub __hmul __hfma __hadd2 __hmul2 __hfma2 "
                    "__int2half_rn __half2int_rn"),
    **_table(_BF16, "__nv_bfloat16 nv_bfloat16 __nv_bfloat162 nv_bfloat162 "
                    "__nv_bfloat16_raw __float2bfloat16 __float2bfloat16_rn __bfloat162float "
                    "__floats2bfloat162_rn __float22bfloat162_rn __bfloat1622float2"),
    **_table(_FP8, "__nv_fp8_e4m3 __nv_fp8_e5m2 __nv_fp8x2_e4m3 __nv_fp8x2_e5m2 "
                   "__nv_fp8x4_e4m3 __nv_fp8x4_e5m2 __nv_fp8_storage_t __nv_cvt_float_to_fp8"),
    **_table(_CSTDINT, "uint8_t uint16_t uint32_t uint64_t int8_t int16_t int32_t int64_t "
                       "uintptr_t intptr_t"),
    **_table(_CSTDIO, "printf fprintf puts fflush"),
    **_table(_CASSERT, "assert"),
    **_table(_MMA, "nvcuda wmma"),
    **_table(_IOSTREAM, "cout cerr endl"),
    **_table(_VECTOR, "vector"),
}


# ---------------------------------------------------------------------------------------------
# Source text: comments out, lines kept
# ---------------------------------------------------------------------------------------------

_TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def _without_comments(source: str) -> str:
    """``source`` with comments (and ``#if 0`` blocks) blanked, so an instruction or an
    ``#include`` a learner commented out is not read, yet every line keeps its number."""
    def blank(m: re.Match) -> str:
        text = m.group(0)
        if text.startswith(("//", "/*")):
            return re.sub(r"[^\n]", " ", text)
        return text
    lines = _TOKENS.sub(blank, source).split("\n")
    depth = 0
    for i, line in enumerate(lines):
        directive = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)", line)
        if depth:
            if directive and directive.group(1).startswith("if"):
                depth += 1
            elif directive and directive.group(1) == "endif":
                depth -= 1
            elif directive and depth == 1 and directive.group(1) in ("else", "elif"):
                depth = 0
            lines[i] = ""
        elif directive and directive.group(1) == "if" and directive.group(2).strip() == "0":
            depth = 1
            lines[i] = ""
    return "\n".join(lines)


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"][ \t]*([^>"\n]*?)[ \t]*[>"]', re.M)


def _includes(code: str) -> set[str]:
    """The headers ``code`` includes, spelled without brackets or spaces."""
    return {m.group(1).replace("\\", "/") for m in _INCLUDE.finditer(code)}


def _is_included(header: str, included: set[str]) -> bool:
    return any(h == header or h.endswith("/" + header) for h in included)


# ---------------------------------------------------------------------------------------------
# compile_hints
# ---------------------------------------------------------------------------------------------

#: One error in nvcc's / NVRTC's wording: ``path(12): error: message`` (``error #20-D:`` too).
_ERROR = re.compile(r"^(?P<file>[^\n()]*?)\((?P<line>\d+)\):\s*(?:fatal\s+|catastrophic\s+)?"
                    r"error(?:\s*#\w+(?:-D)?)?:\s*(?P<msg>[^\n]*)$", re.M)
_NAMED = (re.compile(r'identifier "(?P<name>\w+)" is undefined'),
          re.compile(r'namespace "std" has no member "(?P<name>\w+)"'))
#: Errors that point at a name without spelling it (nvcc shows it under a caret).
_UNNAMED = (re.compile(r'name followed by "::" must be a class or namespace name'),
            re.compile(r"name must be a namespace name"))


def _name_at_caret(log: str, end: int) -> str | None:
    """The identifier nvcc marks with ``^`` in the two lines after an error message."""
    after = log[end:].split("\n")
    if len(after) < 3:
        return None
    echo, caret = after[1], after[2]
    col = caret.find("^")
    if col < 0 or caret.strip() != "^" or col >= len(echo):
        return None
    m = re.match(r"[A-Za-z_]\w*", echo[col:])
    return m.group(0) if m else None


def _namespaces_on(code_lines: list[str], line: int) -> list[str]:
    """The known namespaces a source line uses (``nvcuda::``, ``using namespace wmma``)."""
    if not 1 <= line <= len(code_lines):
        return []
    text = code_lines[line - 1]
    found = re.findall(r"\b(\w+)\s*::|\bnamespace\s+(\w+)", text)
    names = [a or b for a, b in found]
    return [n for n in dict.fromkeys(names) if n in HEADER_OF and HEADER_OF[n].kind == "namespace"]


def _where(path: str, line: int) -> str:
    """``line 12``, or ``kernel.cuh, line 12`` for an error inside another file."""
    name = PurePath(path.strip().replace("\\", "/")).name
    if not PurePath(name).suffix or name.endswith((".cu", ".cpp", ".cc", ".cxx")):
        return f"line {line}"
    return f"{name}, line {line}"


def _header_hint(where: str, name: str, declared: Declared, std: bool) -> str:
    what = f"the namespace `{name}`" if declared.kind == "namespace" else \
        f"`{'std::' + name if std else name}`"
    return (f"{where}: {what} is declared in <{declared.header}>, which this program does not "
            f"include: add `#include <{declared.header}>` at the top (nvcc does not include it "
            f"for you)")


def compile_hints(source: str, compiler_log: str) -> list[str]:
    """Hints for a program that did not compile: one sentence or two each.

    nvcc says only that ``half`` is undefined; a learner who copied a kernel needs to hear
    which header declares it. One hint per (name, header), at the first line nvcc reports it,
    and none where the program already includes that header (the error has another cause).
    """
    code = _without_comments(source)
    included = _includes(code)
    code_lines = code.split("\n")
    hints: dict[tuple[str, str], str] = {}
    for m in _ERROR.finditer(compiler_log):
        msg, line = m.group("msg"), int(m.group("line"))
        found: list[tuple[str, bool]] = []
        for pattern in _NAMED:
            named = pattern.search(msg)
            if named:
                found.append((named.group("name"), pattern is _NAMED[1]))
        if any(p.search(msg) for p in _UNNAMED):
            at_caret = _name_at_caret(compiler_log, m.end())
            names = [at_caret] if at_caret in HEADER_OF else _namespaces_on(code_lines, line)
            found.extend((n, False) for n in names)
        for name, std in found:
            declared = HEADER_OF.get(name)
            if declared is None or any(_is_included(h, included) for h in declared.headers):
                continue
            key = (name, declared.header)
            if key not in hints:
                hints[key] = _header_hint(_where(m.group("file"), line), name, declared, std)
    return list(hints.values())


# ---------------------------------------------------------------------------------------------
# Inline asm statements
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Operand:
    constraint: str     # as written: "=r", "+l", "l", ...
    expr: str           # the C++ expression in the parentheses
    name: str = ""      # the [name] of a named operand


@dataclass(frozen=True)
class _Asm:
    line: int                         # line of the ``asm`` keyword
    template: str                     # the concatenated string literals
    operands: tuple[_Operand, ...]    # outputs first, then inputs: %0, %1, ...

    def operand(self, ref: str) -> _Operand | None:
        """The operand ``%3`` or ``%[addr]`` names (``ref`` is ``3`` or ``[addr]``)."""
        if ref.startswith("["):
            return next((o for o in self.operands if o.name == ref[1:-1]), None)
        i = int(ref)
        return self.operands[i] if i < len(self.operands) else None


_ASM = re.compile(r"\b(?:asm|__asm__|__asm)\b(?:\s+(?:volatile|__volatile__|inline|goto))*"
                  r"\s*\(")
_STRING = re.compile(r'"((?:\\.|[^"\\\n])*)"')


_LITERAL = {q: re.compile(rf"{q}(?:\\.|[^{q}\\\n])*{q}") for q in "\"'"}


def _literal_end(text: str, i: int) -> int:
    """Where the string or character literal starting at ``text[i]`` ends (``i + 1`` if the
    quote opens none), so brackets and separators inside it are not counted."""
    m = _LITERAL[text[i]].match(text, i)
    return m.end() if m else i + 1


def _balanced(code: str, start: int) -> int:
    """Index of the ``)`` closing the ``(`` at ``start - 1``, skipping strings; -1 if none."""
    depth, i = 1, start
    while i < len(code):
        c = code[i]
        if c in "\"'":
            i = _literal_end(code, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets and strings (``::`` is two separators)."""
    parts, depth, last, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i = _literal_end(text, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[last:i])
            last = i + 1
        i += 1
    parts.append(text[last:])
    return parts


_OPERAND = re.compile(r'^\s*(?:\[\s*(?P<name>\w+)\s*\]\s*)?"(?P<c>[^"]*)"\s*\((?P<expr>.*)\)\s*$',
                      re.S)


def _operands(section: str) -> list[_Operand]:
    out = []
    for part in _split_top(section, ","):
        m = _OPERAND.match(part)
        if m:
            out.append(_Operand(m.group("c"), " ".join(m.group("expr").split()),
                                m.group("name") or ""))
    return out


def _unescape(s: str) -> str:
    return s.replace("\\n", "\n").replace("\\t", "\t").replace('\\"', '"').replace("\\\\", "\\")


def _asm_statements(code: str) -> list[_Asm]:
    """The inline asm statements of comment-free ``code``: ``asm volatile("..." "..." :
    outputs : inputs : clobbers)``, in a function or a ``#define`` (lines joined by ``\\``)."""
    out = []
    for m in _ASM.finditer(code):
        end = _balanced(code, m.end())
        if end < 0:
            continue
        body = code[m.end():end].replace("\\\n", " \n")
        sections = _split_top(body, ":")
        template = "".join(_unescape(s) for s in _STRING.findall(sections[0]))
        outputs = _operands(sections[1]) if len(sections) > 1 else []
        inputs = _operands(sections[2]) if len(sections) > 2 else []
        out.append(_Asm(code.count("\n", 0, m.start()) + 1, template, tuple(outputs + inputs)))
    return out


def _instructions(template: str) -> list[tuple[str, str]]:
    """``(opcode, operands)`` of each PTX instruction in an asm template."""
    out = []
    for stmt in template.replace("%%", "\0").split(";"):
        stmt = stmt.strip().lstrip("{").strip()
        stmt = re.sub(r"^(?:\w+:\s*)?(?:@!?\S+\s+)?", "", stmt)
        m = re.match(r"([A-Za-z_][\w.:]*)(.*)", stmt, re.S)
        if m and not m.group(1).startswith("."):
            out.append((m.group(1), m.group(2)))
    return out


# ---------------------------------------------------------------------------------------------
# source_notes
# ---------------------------------------------------------------------------------------------

_SPACES = ("shared", "global", "local", "const", "param")
_ADDRESS = re.compile(r"\[\s*%(\d+|\[\w+\])\s*(?:[+-][^\]]*)?\]")
_CVTA = re.compile(r"__cvta_generic_to_shared|cvta_to_shared|cast_smem_ptr_to_uint|"
                   r"smem_ptr_to_uint")
#: A generic pointer made visible: ``&x`` (not ``a & b``), or reinterpret_cast to an integer.
_POINTER = re.compile(r"(?:^|[(,=+\-?:]|\(\s*[\w:\s]+\**\s*\))\s*&\s*[A-Za-z_(]|"
                      r"reinterpret_cast\s*<\s*(?:unsigned|u?int|size_t|std::u?int)")


def _shared_address_operand(opcode: str, rest: str) -> str | None:
    """The ``%N`` of the bracketed address that is in ``.shared`` space, if any: with two
    spaces (``cp.async...shared.global [dst], [src]``) the addresses come in their order."""
    spaces = [p.split("::")[0] for p in opcode.split(".")[1:] if p.split("::")[0] in _SPACES]
    if "shared" not in spaces:
        return None
    refs = _ADDRESS.findall(rest)
    i = spaces.index("shared")
    if not refs:
        return None
    return refs[i] if i < len(refs) else refs[0]


def _short(opcode: str) -> str:
    """``ldmatrix`` for ldmatrix.sync..., ``ld.shared`` / ``cp.async`` for short opcodes."""
    parts = opcode.split(".")
    return ".".join(parts[:2]) if len(parts[0]) <= 5 and len(parts) > 1 else parts[0]


def _clip(expr: str, limit: int = 40) -> str:
    return expr if len(expr) <= limit else expr[: limit - 3] + "..."


def _origin(expr: str, code: str) -> str:
    """``"shared"`` if ``expr`` visibly holds a shared-window address, ``"generic"`` if a
    generic pointer, ``""`` if the text does not say (a variable set elsewhere)."""
    if _CVTA.search(expr):
        return "shared"
    if _POINTER.search(expr):
        return "generic"
    var = re.fullmatch(r"\(?\s*(?:\([\w\s:]+\)\s*)?([A-Za-z_]\w*)\s*\)?", expr)
    if var:
        sets = re.findall(rf"\b{re.escape(var.group(1))}\s*=(?!=)\s*([^;]*);", code)
        kinds = {_origin(s, "") for s in sets if var.group(1) not in s}
        if len(kinds) == 1:
            return kinds.pop()
    return ""


def _l_operand_note(op: str, expr: str, origin: str) -> str:
    if origin == "shared":
        return (f"the address of this `{op}` is a 64-bit \"l\" operand. That is legal: a .shared "
                f"address may be a 32- or 64-bit register and ptxas takes the 64-bit one; its "
                f"value must be a shared-window address, as __cvta_generic_to_shared gives here")
    if origin == "generic":
        return (f"this `{op}` gets a generic pointer (`{_clip(expr, 32)}`) as its 64-bit \"l\" "
                f"address; a .shared instruction reads it as a shared-window address, so it names "
                f"another address (the CPU model reports a generic address used as shared): use "
                f"__cvta_generic_to_shared(p)")
    return (f"the address of this `{op}` is a 64-bit \"l\" operand (`{_clip(expr, 30)}`). That "
            f"is legal (ptxas takes the 64-bit register), but its value must be a shared-window "
            f"address from __cvta_generic_to_shared, not a generic pointer: that names another "
            f"address")


def _order_note(opcode: str) -> str | None:
    """A note for an ldmatrix/stmatrix/movmatrix whose modifiers are not in ISA order."""
    if not opcode.startswith(("ldmatrix.", "stmatrix.", "movmatrix.")):
        return None
    try:
        isa = matrix_forms.parse_form(opcode).ptx
    except matrix_forms.FormError:
        return None     # not a form at all: nvcc and `ptxlab layout` say what is wrong
    if isa == opcode or sorted(isa.split(".")) != sorted(opcode.split(".")):
        return None
    return (f"`{opcode}` orders its modifiers unlike the PTX ISA's `{isa}`; ptxas takes any "
            f"order (same instruction), and the lab's tools (`ptxlab layout`) use the ISA's")


def _where_lines(lines: list[int]) -> str:
    lines = sorted(set(lines))
    if len(lines) == 1:
        return f"line {lines[0]}"
    shown = ", ".join(str(n) for n in lines[:3])
    return f"lines {shown}" + (f" and {len(lines) - 3} more" if len(lines) > 3 else "")


def source_notes(source: str) -> list[str]:
    """Notes on a program that compiles: legal but surprising things the articles do.

    Such a program runs, so nothing is wrong to report; but a learner comparing it with the
    ISA or with ``ptxlab layout`` should know that an ``"l"`` shared address and a reordered
    ``.x4.m8n8`` are the same thing written differently, and when an ``"l"`` address is not.
    Notes that say the same thing for several asm statements are given once, with their lines.
    """
    code = _without_comments(source)
    notes: dict[str, list[int]] = {}
    for stmt in _asm_statements(code):
        for opcode, rest in _instructions(stmt.template):
            order = _order_note(opcode)
            if order:
                notes.setdefault(order, []).append(stmt.line)
            ref = _shared_address_operand(opcode, rest)
            operand = stmt.operand(ref) if ref is not None else None
            if operand is None or "l" not in re.sub(r"[=+&]", "", operand.constraint):
                continue
            note = _l_operand_note(_short(opcode), operand.expr, _origin(operand.expr, code))
            notes.setdefault(note, []).append(stmt.line)
    out = []
    for body, lines in sorted(notes.items(), key=lambda kv: min(kv[1])):
        note = f"{_where_lines(lines)}: {body}"
        if len(note) > MAX_HINT and len(set(lines)) > 1:
            note = f"line {min(lines)} and {len(set(lines)) - 1} more: {body}"
        out.append(note)
    return out
