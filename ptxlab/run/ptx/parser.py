"""Read PTX text into functions, declarations and instructions (no execution here).

The parser knows PTX's syntax, not its semantics: an instruction is an opcode split at its dots
(``ld.global.v4.u32`` -> ``ld`` + ``("global", "v4", "u32")``), an optional guard predicate and
a list of operands. Names declared in ``{ }`` scopes (inline-asm blocks declare their own
``.reg``s) are renamed so that every register of a function has one unique name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...model import matrix_forms
from .errors import PtxSyntaxError

# ---------------------------------------------------------------------------------------------
# Operands
# ---------------------------------------------------------------------------------------------


class _Frozen:
    """An immutable record: its fields are its ``__slots__``; equal to a record of the same
    class with equal fields, hashed and printed as a frozen dataclass is. Written out rather
    than ``@dataclass(frozen=True)``: a dataclass writes and compiles its methods when its module
    is imported, and these eleven were about 6 ms of loading the CPU model, paid by every first
    check and every grading process."""

    __slots__ = ()

    def _init(self, *values) -> None:
        for name, value in zip(self.__slots__, values):
            object.__setattr__(self, name, value)

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__qualname__}({fields})"

    def __setattr__(self, name, value):
        raise AttributeError(f"cannot assign to field {name!r} of a {type(self).__name__}")

    def __delattr__(self, name):
        raise AttributeError(f"cannot delete field {name!r} of a {type(self).__name__}")

    def __reduce__(self):
        return type(self), self._values()


class Reg(_Frozen):
    """A register (or predicate) by its unique name; ``neg`` for ``!%p``."""
    __slots__ = ("name", "neg")

    def __init__(self, name: str, neg: bool = False):
        self._init(name, neg)


class Imm(_Frozen):
    """An integer immediate."""
    __slots__ = ("value",)

    def __init__(self, value: int):
        self._init(value)


class FImm(_Frozen):
    """A floating-point immediate as raw bits of ``bits`` width (0f... is 32, 0d... is 64)."""
    __slots__ = ("raw", "bits")

    def __init__(self, raw: int, bits: int):
        self._init(raw, bits)


class Special(_Frozen):
    """A special register such as ``%tid.x`` or ``%laneid``."""
    __slots__ = ("name",)

    def __init__(self, name: str):
        self._init(name)


class Sym(_Frozen):
    """A label, variable or function name, optionally plus a byte offset."""
    __slots__ = ("name", "offset")

    def __init__(self, name: str, offset: int = 0):
        self._init(name, offset)


class Addr(_Frozen):
    """``[base + offset]``: base is a Reg, a Sym, or None for an absolute address."""
    __slots__ = ("base", "offset")

    def __init__(self, base: object, offset: int = 0):
        self._init(base, offset)


class Vec(_Frozen):
    """``{a, b, c, d}``."""
    __slots__ = ("items",)

    def __init__(self, items: tuple):
        self._init(items)


class Pair(_Frozen):
    """``%p|%q`` (a predicate pair, or a value plus predicate)."""
    __slots__ = ("first", "second")

    def __init__(self, first: object, second: object):
        self._init(first, second)


class Sink(_Frozen):
    """``_``: a destination whose value is thrown away."""
    __slots__ = ()


class ParenList(_Frozen):
    """``(a, b)`` in a ``call`` instruction."""
    __slots__ = ("items",)

    def __init__(self, items: tuple):
        self._init(items)


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------


class Loc(_Frozen):
    """A ``.loc`` directive: file index, line, column, and where it was inlined (if anywhere)."""
    __slots__ = ("file", "line", "col", "inlined_at")

    def __init__(self, file: int, line: int, col: int,
                 inlined_at: tuple[int, int, int] | None = None):
        self._init(file, line, col, inlined_at)


@dataclass
class Instruction:
    line: int                       # 1-based PTX line
    text: str                       # the statement as written
    opcode: str                     # "ld"
    mods: tuple[str, ...]           # ("global", "v4", "u32")
    operands: tuple
    guard: Reg | None = None        # @%p / @!%p
    loc: Loc | None = None

    @property
    def full_opcode(self) -> str:
        return ".".join((self.opcode,) + self.mods)


@dataclass
class VarDecl:
    """A ``.global/.shared/.const/.local/.param`` variable."""
    space: str
    name: str
    type: str                       # "b8", "u32", ...
    align: int
    count: int | None               # array length; None for a scalar; 0 for ``[]``
    init: list | None = None        # initial values (ints/floats) for .global/.const
    extern: bool = False
    line: int = 0

    @property
    def elem_size(self) -> int:
        return type_size(self.type)

    @property
    def size(self) -> int:
        return self.elem_size * (1 if self.count is None else self.count)


@dataclass
class Param:
    name: str
    type: str
    align: int
    count: int | None = None

    @property
    def size(self) -> int:
        return type_size(self.type) * (1 if self.count is None else self.count)


@dataclass
class Function:
    name: str
    is_entry: bool
    params: list[Param]
    returns: list[Param]
    regs: dict[str, str] = field(default_factory=dict)          # unique name -> type
    labels: dict[str, int] = field(default_factory=dict)        # label -> instruction index
    body: list = field(default_factory=list)                    # Instruction
    locals: list[VarDecl] = field(default_factory=list)         # .local/.shared/.param in body
    line: int = 0
    has_body: bool = True
    directives: dict[str, tuple[int, ...]] = field(default_factory=dict)  # .reqntid etc.


@dataclass
class Module:
    version: str = ""
    target: str = ""
    address_size: int = 64
    functions: dict[str, Function] = field(default_factory=dict)
    variables: list[VarDecl] = field(default_factory=list)
    files: dict[int, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    @property
    def entries(self) -> list[str]:
        return [f.name for f in self.functions.values() if f.is_entry]


_TYPE_SIZES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
               "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
               "b64": 8, "u64": 8, "s64": 8, "f64": 8, "pred": 1, "b128": 16,
               "e4m3x2": 2, "e5m2x2": 2}


def type_size(t: str) -> int:
    """Bytes of a PTX type."""
    try:
        return _TYPE_SIZES[t]
    except KeyError:
        raise PtxSyntaxError(f"unknown PTX type .{t}") from None


# ---------------------------------------------------------------------------------------------
# Statement splitting
# ---------------------------------------------------------------------------------------------

#: Directives that end at the end of their line; the name must end there too (``.local`` is a
#: declaration, not a ``.loc``).
_LINE_DIRECTIVE = re.compile(r"\.(loc|file|version|target|address_size|section)(?![\w$])")
_LABEL = re.compile(r"([A-Za-z_$%][\w$]*)\s*:(?!:)")


@dataclass
class _Stmt:
    kind: str    # "stmt", "open", "close", "label", "line"
    text: str
    line: int


#: A string (kept whole, unterminated ones to the end), a line comment (its newline kept) or a
#: block comment (unterminated ones to the end), whichever starts first.
_COMMENT_OR_STRING = re.compile(r'"[^"]*"?|//[^\n]*|/\*.*?(?:\*/|\Z)', re.DOTALL)


def _blank_comment(m: re.Match) -> str:
    text = m.group()
    if text[0] == '"':
        return text
    if text[1] == "/":
        return ""
    return "".join("\n" if ch == "\n" else " " for ch in text)


def _strip_comments(text: str) -> str:
    """Blank out comments but keep line breaks, so line numbers survive; ``//`` or ``/*``
    inside a string is text. One regex pass: a PTX of ten thousand lines is read often."""
    if "/" not in text:
        return text
    return _COMMENT_OR_STRING.sub(_blank_comment, text)


def _statements(text: str) -> list[_Stmt]:
    """Split PTX text (comments removed) into braces, labels, line directives and statements,
    each with the line it starts on."""
    text = _strip_comments(text)
    stmts: list[_Stmt] = []
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
            continue
        if c.isspace():
            i += 1
            continue
        if c == "{":
            stmts.append(_Stmt("open", "{", line))
            i += 1
            continue
        if c == "}":
            stmts.append(_Stmt("close", "}", line))
            i += 1
            continue
        if c == ";":
            i += 1
            continue
        start_line = line
        if _LINE_DIRECTIVE.match(text, i):
            stmt, i, line = _line_directive(text, i, line)
            if stmt is not None:
                stmts.append(_Stmt("line", stmt, start_line))
            continue
        m = _LABEL.match(text, i)
        if m and not text.startswith(".", i):
            stmts.append(_Stmt("label", m.group(1), line))
            line += text.count("\n", i, m.end())
            i = m.end()
            continue
        j = _statement_end(text, i)
        stmt = text[i:j]
        stmts.append(_Stmt("stmt", " ".join(stmt.split()), start_line))
        line += stmt.count("\n")
        i = j + 1 if j < n and text[j] == ";" else j
    return stmts


def _line_directive(text: str, i: int, line: int) -> tuple[str | None, int, int]:
    """A directive that ends at the end of its line (``.loc``, ``.file``, ``.section`` ...) at
    ``text[i]``: (its text, or None for a debug ``.section`` skipped with its ``{ ... }``
    block; where to go on; the line number there)."""
    n = len(text)
    j = text.find("\n", i)
    j = n if j < 0 else j
    stmt = text[i:j].strip().rstrip(";")
    i = j
    if not stmt.startswith(".section"):
        return stmt, i, line
    # Debug sections: skip the whole { ... } block that follows.
    k = text.find("{", i)
    if k >= 0 and text[i:k].strip() == "":
        m = _closing_brace(text, k)
        line += text.count("\n", i, m + 1)
        i = m + 1
    return None, i, line


def _closing_brace(text: str, k: int) -> int:
    """The index of the ``}`` that closes the ``{`` at ``text[k]`` (``len(text)`` if none)."""
    depth, m, n = 0, k, len(text)
    while m < n:
        if text[m] == "{":
            depth += 1
        elif text[m] == "}":
            depth -= 1
            if depth == 0:
                break
        m += 1
    return m


#: A run of characters that changes nothing in a statement's nesting (no quote, ';', bracket).
_PLAIN_RUN = re.compile(r'[^";(){}]*')


def _statement_end(text: str, i: int) -> int:
    """Where the ordinary statement starting at ``text[i]`` ends: its ';' at nesting depth 0,
    the '{' that opens a function body, or an unmatched '}' (or the end of the text). Runs of
    plain characters are skipped by one regex match, a string by one ``find``."""
    n = len(text)
    depth_paren = depth_brace = 0
    j = i
    while True:
        j = _PLAIN_RUN.match(text, j).end()
        if j >= n:
            return n
        ch = text[j]
        if ch == '"':
            k = text.find('"', j + 1)
            if k < 0:
                return n
            j = k + 1
            continue
        if ch == "(":
            depth_paren += 1
        elif ch == ")":
            depth_paren -= 1
        elif ch == "{":
            if depth_paren == 0 and depth_brace == 0 and _is_function_header(text[i:j]):
                return j
            depth_brace += 1
        elif ch == "}":
            if depth_brace == 0:
                return j
            depth_brace -= 1
        elif depth_paren == 0 and depth_brace == 0:        # ';'
            return j
        j += 1


def _is_function_header(text: str) -> bool:
    return bool(re.search(r"(^|\s)\.(entry|func)\b", text))


# ---------------------------------------------------------------------------------------------
# Operand parsing
# ---------------------------------------------------------------------------------------------

_SPECIAL_BASES = {"%tid", "%ntid", "%ctaid", "%nctaid", "%laneid", "%warpid", "%nwarpid",
                  "%smid", "%nsmid", "%gridid", "%clock", "%clock64", "%globaltimer",
                  "%lanemask_eq", "%lanemask_le", "%lanemask_lt", "%lanemask_ge",
                  "%lanemask_gt", "%dynamic_smem_size", "%total_smem_size", "%clusterid",
                  "%nclusterid", "%cluster_ctaid", "%cluster_nctaid", "%cluster_ctarank",
                  "%cluster_nctarank", "%is_explicit_cluster", "%globaltimer_lo",
                  "%globaltimer_hi", "%reserved_smem_offset_begin", "%aggr_smem_size"}


def _split_top(text: str, sep: str = ",") -> list[str]:
    """``text`` split at each ``sep`` outside brackets, each part stripped."""
    if not any(b in text for b in "[]{}()"):       # most operand lists: no nesting to track
        parts = [p.strip() for p in text.split(sep)]
        return [] if parts == [""] else parts
    return _split_nested(text, sep)


def _split_nested(text: str, sep: str) -> list[str]:
    """:func:`_split_top` for any text, stepping through every character to track how deep in
    brackets it is."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    tail = "".join(cur).strip()
    if tail or parts:
        parts.append(tail)
    return parts


_INT = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)[uU]?$")
_FLOAT_HEX = re.compile(r"^[+-]?0([fFdD])([0-9a-fA-F]+)$")
_FLOAT_DEC = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


def parse_int(text: str) -> int:
    t = text.strip()
    neg = t.startswith("-")
    if t[:1] in "+-":
        t = t[1:]
    t = t.rstrip("uU")
    if t[:2] in ("0x", "0X"):
        v = int(t[2:], 16)
    elif t[:2] in ("0b", "0B"):
        v = int(t[2:], 2)
    elif len(t) > 1 and t.startswith("0"):
        v = int(t[1:], 8)
    else:
        v = int(t)
    return -v if neg else v


def _is_int(text: str) -> bool:
    return bool(_INT.match(text.strip()))


class _Scopes:
    """Name resolution for ``{ }`` scopes inside a function body."""

    def __init__(self):
        self.stack: list[dict[str, str]] = [{}]
        self.counter = 0
        self.regs: set[str] = set()   # unique names declared with .reg (``t`` in asm blocks)

    def declare(self, name: str) -> str:
        if len(self.stack) == 1:
            unique = name
        else:
            self.counter += 1
            unique = f"{name}@{self.counter}"
        self.stack[-1][name] = unique
        return unique

    def resolve(self, name: str) -> str:
        for scope in reversed(self.stack):
            if name in scope:
                return scope[name]
        return name


def _parse_operand(text: str, scopes: _Scopes, line: int, stmt: str):
    t = text.strip()
    if not t:
        raise PtxSyntaxError("empty operand", line, stmt)
    if t == "_":
        return Sink()
    if t.startswith("[") and t.endswith("]"):
        return _parse_address(t[1:-1], scopes, line, stmt)
    if t.startswith("{") and t.endswith("}"):
        return Vec(tuple(_parse_operand(p, scopes, line, stmt) for p in _split_top(t[1:-1])))
    if t.startswith("(") and t.endswith(")"):
        inner = t[1:-1].strip()
        return ParenList(tuple(_parse_operand(p, scopes, line, stmt)
                               for p in _split_top(inner)) if inner else ())
    if "|" in t:
        a, b = t.split("|", 1)
        return Pair(_parse_operand(a, scopes, line, stmt), _parse_operand(b, scopes, line, stmt))
    if t.startswith("!"):
        inner = _parse_operand(t[1:], scopes, line, stmt)
        if not isinstance(inner, Reg):
            raise PtxSyntaxError(f"'!' applies to a predicate register, got {t}", line, stmt)
        return Reg(inner.name, True)
    m = _FLOAT_HEX.match(t)
    if m:
        bits = 32 if m.group(1) in "fF" else 64
        raw = int(m.group(2), 16)
        if t.startswith("-"):
            raw ^= 1 << (bits - 1)
        return FImm(raw, bits)
    if _is_int(t):
        return Imm(parse_int(t))
    if _FLOAT_DEC.match(t):
        import struct
        return FImm(struct.unpack("<Q", struct.pack("<d", float(t)))[0], 64)
    if t.startswith("%"):
        base = t.split(".", 1)[0]
        if base in _SPECIAL_BASES:
            return Special(t)
        return Reg(scopes.resolve(t))
    # symbol, maybe with +offset
    m = re.match(r"^([A-Za-z_$][\w$]*)\s*(?:\+\s*([+-]?\w+))?$", t)
    if m:
        name = scopes.resolve(m.group(1))
        off = parse_int(m.group(2)) if m.group(2) else 0
        if not off and name in scopes.regs:
            return Reg(name)
        return Sym(name, off)
    raise PtxSyntaxError(f"cannot read operand {t!r}", line, stmt)


def _parse_address(inner: str, scopes: _Scopes, line: int, stmt: str) -> Addr:
    t = inner.replace(" ", "")
    if not t:
        raise PtxSyntaxError("empty address []", line, stmt)
    m = re.match(r"^([^+\-]+?)?((?:[+-][+-]?[0-9a-fA-FxX]+)*)$", t)
    if not m:
        raise PtxSyntaxError(f"cannot read address [{inner}]", line, stmt)
    base_text, off_text = m.group(1), m.group(2)
    if base_text and _is_int(base_text) and not off_text:
        return Addr(None, parse_int(base_text))
    offset = 0
    for part in re.findall(r"[+-][+-]?[0-9a-fA-FxX]+", off_text or ""):
        sign = -1 if part[0] == "-" else 1
        offset += sign * parse_int(part[1:])
    if base_text is None:
        return Addr(None, offset)
    base = _parse_operand(base_text, scopes, line, stmt)
    if isinstance(base, Imm):
        return Addr(None, base.value + offset)
    if isinstance(base, Sym):
        return Addr(Sym(base.name), base.offset + offset)
    if isinstance(base, Reg):
        return Addr(base, offset)
    raise PtxSyntaxError(f"cannot use {base_text} as an address base", line, stmt)


# ---------------------------------------------------------------------------------------------
# Declarations
# ---------------------------------------------------------------------------------------------

_DECL_SPACES = ("global", "shared", "const", "local", "param", "reg", "tex", "surf")


def _parse_decl(text: str, line: int) -> list[VarDecl] | tuple[str, list[tuple[str, str]]]:
    """``.shared .align 16 .b8 x[64]`` -> VarDecl list; ``.reg .b32 %r<4>`` -> ("reg", names)."""
    init = None
    if "=" in text:
        text, init_text = text.split("=", 1)
        init = _parse_init(init_text.strip(), line, text)
    tokens = text.replace(",", " , ").split()
    extern = False
    space = None
    align = 0
    vtype = None
    vec = 1
    rest: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in (".extern", ".visible", ".weak", ".common"):
            extern = extern or tok == ".extern"
        elif tok.startswith(".") and tok[1:].split("::")[0] in _DECL_SPACES and space is None:
            space = tok[1:].split("::")[0]
        elif tok == ".align":
            align = parse_int(tokens[i + 1])
            i += 1
        elif tok in (".v2", ".v4", ".v8"):
            vec = int(tok[2:])
        elif tok.startswith(".") and tok[1:] in _TYPE_SIZES:
            vtype = tok[1:]
        elif tok.startswith(".ptr") or tok.startswith(".attribute"):
            pass
        else:
            rest.append(tok)
        i += 1
    if space is None or vtype is None:
        raise PtxSyntaxError("cannot read declaration", line, text)
    names = [n for n in " ".join(rest).replace(" ", "").split(",") if n]
    if space == "reg":
        out: list[tuple[str, str]] = []
        for name in names:
            m = re.match(r"^(.+)<(\d+)>$", name)
            if m:
                out += [(f"{m.group(1)}{k}", vtype) for k in range(int(m.group(2)))]
            else:
                out.append((name, vtype))
        if vec != 1:
            raise PtxSyntaxError("vector registers (.reg .v2/.v4) are not supported", line, text)
        return ("reg", out)
    decls = []
    for name in names:
        m = re.match(r"^([^\[]+)((?:\[\d*\])*)$", name)
        if not m:
            raise PtxSyntaxError(f"cannot read variable name {name!r}", line, text)
        dims = re.findall(r"\[(\d*)\]", m.group(2))
        count = None
        if dims:
            count = 1
            for d in dims:
                count = count * int(d) if d else 0
        if vec != 1:
            count = (count or 1) * vec
        decls.append(VarDecl(space, m.group(1), vtype, align or type_size(vtype), count,
                             init, extern, line))
    return decls


def _parse_init(text: str, line: int, stmt: str) -> list:
    flat = text.replace("{", " ").replace("}", " ").replace(",", " ").split()
    vals = []
    for tok in flat:
        m = _FLOAT_HEX.match(tok)
        if m:
            vals.append(("fbits", int(m.group(2), 16), 32 if m.group(1) in "fF" else 64))
        elif _is_int(tok):
            vals.append(parse_int(tok))
        elif _FLOAT_DEC.match(tok):
            vals.append(float(tok))
        else:
            vals.append(("sym", tok))
    return vals


def _parse_params(text: str, line: int) -> list[Param]:
    params = []
    for part in _split_top(text):
        if not part:
            continue
        toks = part.split()
        align = 0
        ptype = None
        name = None
        i = 0
        pointee = False
        while i < len(toks):
            tok = toks[i]
            if tok == ".ptr":
                # ".ptr [.space] .align N": N is the alignment of the data pointed to, not of
                # the parameter (newer compilers write it on every pointer parameter)
                pointee = True
            elif tok == ".align":
                if not pointee:
                    align = parse_int(toks[i + 1])
                i += 1
            elif tok.startswith(".") and tok[1:] in _TYPE_SIZES:
                ptype = tok[1:]
            elif tok.startswith("."):
                pass
            else:
                name = tok
            i += 1
        if ptype is None or name is None:
            raise PtxSyntaxError(f"cannot read parameter {part!r}", line)
        count = None
        m = re.match(r"^([^\[]+)\[(\d*)\]$", name)
        if m:
            name, count = m.group(1), int(m.group(2) or 0)
        params.append(Param(name, ptype, align or type_size(ptype), count))
    return params


def _parse_function_header(text: str, line: int) -> Function:
    is_entry = bool(re.search(r"\.entry\b", text))
    m = re.search(r"\.(?:entry|func)\s*(\([^)]*\))?\s*([A-Za-z_$][\w$]*)\s*(\((.*?)\))?(.*)$",
                  text, re.S)
    if not m:
        raise PtxSyntaxError("cannot read function header", line, text)
    returns = _parse_params(m.group(1)[1:-1], line) if m.group(1) else []
    params = _parse_params(m.group(4) or "", line)
    fn = Function(m.group(2), is_entry, params, returns, line=line)
    tail = m.group(5) or ""
    for d in re.finditer(r"\.(maxntid|reqntid|minnctapersm|maxnreg|maxclusterrank|reqnctapercluster)"
                         r"\s+([\d,\s]+)", tail):
        fn.directives[d.group(1)] = tuple(int(x) for x in d.group(2).replace(",", " ").split())
    return fn


# ---------------------------------------------------------------------------------------------
# The module
# ---------------------------------------------------------------------------------------------

_LOC = re.compile(r"^\.loc\s+(\d+)\s+(\d+)\s+(\d+)(?:.*?inlined_at\s+(\d+)\s+(\d+)\s+(\d+))?")


def _check_target(mod: Module, line: int, text: str) -> None:
    """ptxas refuses a module whose ``.version`` is too old for its ``.target`` (or whose target
    it does not know) before it reads any instruction; so does the model."""
    if not mod.version:
        return
    try:
        matrix_forms.check_module_target(mod.target, mod.version)
    except matrix_forms.FormError as exc:
        raise PtxSyntaxError(str(exc), line, text) from None


def parse_module(text: str) -> Module:
    """Parse a whole PTX module."""
    mod = Module(lines=text.splitlines())
    stmts = _statements(text)
    fn: Function | None = None
    depth = 0
    scopes = _Scopes()
    pending_header: Function | None = None
    loc: Loc | None = None
    for st in stmts:
        if st.kind == "line":
            t = st.text
            if t.startswith(".version"):
                mod.version = t.split()[1]
            elif t.startswith(".target"):
                mod.target = t.split(None, 1)[1]
                _check_target(mod, st.line, t)
            elif t.startswith(".address_size"):
                mod.address_size = int(t.split()[1])
            elif t.startswith(".file"):
                m = re.match(r'^\.file\s+(\d+)\s+"([^"]*)"', t)
                if m:
                    mod.files[int(m.group(1))] = m.group(2)
            elif t.startswith(".loc"):
                m = _LOC.match(t)
                if m:
                    inl = (int(m.group(4)), int(m.group(5)), int(m.group(6))) if m.group(4) else None
                    loc = Loc(int(m.group(1)), int(m.group(2)), int(m.group(3)), inl)
            continue
        if st.kind == "open":
            if pending_header is not None and depth == 0:
                fn = pending_header
                pending_header = None
                scopes = _Scopes()
                depth = 1
                loc = None
                continue
            if fn is None:
                raise PtxSyntaxError("'{' outside a function", st.line)
            depth += 1
            scopes.stack.append({})
            continue
        if st.kind == "close":
            if fn is None:
                raise PtxSyntaxError("'}' outside a function", st.line)
            depth -= 1
            if depth == 0:
                mod.functions[fn.name] = fn
                fn = None
            else:
                scopes.stack.pop()
            continue
        if st.kind == "label":
            if fn is None:
                continue
            fn.labels[st.text] = len(fn.body)
            continue
        text = st.text
        if fn is None:
            _module_statement(mod, text, st.line, lambda f: None)
            if _is_function_header(text):
                header = _parse_function_header(text, st.line)
                if text.rstrip().endswith(")") or re.search(r"\.(entry|func)", text):
                    pending_header = header
                # A prototype (ended by ';') has no body: remember it as external.
            continue
        # inside a function body
        if text.startswith("."):
            _body_directive(fn, text, st.line, scopes)
            continue
        fn.body.append(_parse_instruction(text, st.line, scopes, loc))
    if fn is not None:
        raise PtxSyntaxError(f"function {fn.name} is not closed with '}}'", fn.line)
    return mod


def _module_statement(mod: Module, text: str, line: int, _unused) -> None:
    if _is_function_header(text):
        return
    if text.startswith(".") and any(f".{s}" in text.split() or f".{s}::" in text
                                    for s in ("global", "shared", "const", "local")):
        decls = _parse_decl(text, line)
        if isinstance(decls, list):
            mod.variables.extend(decls)
        return
    # .pragma, .maxnreg at module level, etc.: nothing to do


def _body_directive(fn: Function, text: str, line: int, scopes: _Scopes) -> None:
    first = text.split()[0]
    if first in (".reg", ".local", ".shared", ".param", ".global", ".const") or first.startswith(
            (".reg", ".local", ".shared", ".param")):
        decl = _parse_decl(text, line)
        names = [n for n, _ in decl[1]] if isinstance(decl, tuple) else [d.name for d in decl]
        for name in names:
            if name in scopes.stack[-1]:
                raise PtxSyntaxError(
                    f"duplicate definition of variable '{name}' (ptxas: \"Duplicate definition "
                    f"of variable\"): it is declared twice in one scope, as happens when an "
                    f"inline-asm string that declares a .reg is expanded twice in a function; "
                    f"wrap that asm string's body in {{ }} so each copy has its own scope",
                    line, text)
        if isinstance(decl, tuple):
            for name, typ in decl[1]:
                unique = scopes.declare(name)
                scopes.regs.add(unique)
                fn.regs[unique] = typ
        else:
            for d in decl:
                unique = scopes.declare(d.name)
                d.name = unique
                fn.locals.append(d)
        return
    if first == ".pragma":
        return
    # other directives (.maxntid inside body, .noreturn ...) carry no semantics here


_GUARD = re.compile(r"^@(!?)(%?[\w$@]+)\s+")


def _parse_instruction(text: str, line: int, scopes: _Scopes, loc: Loc | None) -> Instruction:
    guard = None
    m = _GUARD.match(text)
    if m:
        guard = Reg(scopes.resolve(m.group(2)), m.group(1) == "!")
        text = text[m.end():]
    parts = text.split(None, 1)
    opcode_full = parts[0]
    ops_text = parts[1] if len(parts) > 1 else ""
    pieces = opcode_full.split(".")
    opcode, mods = pieces[0], tuple(p for p in pieces[1:] if p)
    operands: list = []
    if ops_text.strip():
        # ``call`` has a special shape: call (ret), func, (args);
        operands = [_parse_operand(p, scopes, line, text) for p in _split_top(ops_text)]
    return Instruction(line, text, opcode, mods, tuple(operands), guard, loc)
