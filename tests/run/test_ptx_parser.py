"""The parser's first pass over PTX text, and the records it makes of operands.

The pass (comments blanked, strings and line numbers kept) is one regular expression. These
tests hold it to the character-by-character scan it replaced (kept here as the reference), over
random texts made of the pieces that matter: quotes, slashes, stars and newlines. So is where a
statement ends, against the scan it replaced, and the split of an operand list without
brackets, against the split that steps through every character. The operand
records are written out by hand; they must behave as the frozen dataclasses they replaced."""
from __future__ import annotations

import copy
import dataclasses
import pickle
import random

import pytest

from ptxlab.run.ptx import parser


def _reference_strip(text: str) -> str:
    """The scan the parser used to do: a string runs to its closing quote (or the end), ``//``
    runs to the newline (kept), ``/* */`` becomes spaces with its newlines kept."""
    out, i, n = [], 0, len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == '"':
                in_str = False
            i += 1
        elif c == '"':
            in_str = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


_PIECES = ['"', "/", "*", "\n", " ", "a", "//", "/*", "*/", "x;", ".file 1 \"k.cu\"", "{", "}"]


@pytest.mark.parametrize("seed", range(300))
def test_random_texts_strip_as_the_scan_did(seed):
    rng = random.Random(seed)
    text = "".join(rng.choice(_PIECES) for _ in range(rng.randrange(0, 40)))
    assert parser._strip_comments(text) == _reference_strip(text), repr(text)


def _reference_statement_end(text: str, i: int) -> int:
    """The character-by-character scan that found where a statement ends."""
    n = len(text)
    depth_paren = depth_brace = 0
    j = i
    in_str = False
    while j < n:
        ch = text[j]
        if in_str:
            if ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "(":
            depth_paren += 1
        elif ch == ")":
            depth_paren -= 1
        elif ch == "{":
            if depth_paren == 0 and depth_brace == 0 and parser._is_function_header(text[i:j]):
                break
            depth_brace += 1
        elif ch == "}":
            if depth_brace == 0:
                break
            depth_brace -= 1
        elif ch == ";" and depth_paren == 0 and depth_brace == 0:
            break
        j += 1
    return j


_STATEMENT_PIECES = ['"', ";", "(", ")", "{", "}", "[", "]", ",", " ", "%r1", ".entry k",
                     ".func f", "\n", "ld.u32", "x"]


@pytest.mark.parametrize("seed", range(300))
def test_random_statements_end_and_split_as_the_scans_did(seed):
    """Where a statement ends agrees with the scan it replaced, and an operand list split at
    its top-level commas with the character-by-character split that handles any brackets
    (both step through every character)."""
    rng = random.Random(seed)
    text = "".join(rng.choice(_STATEMENT_PIECES) for _ in range(rng.randrange(0, 30)))
    for i in range(len(text) + 1):
        assert parser._statement_end(text, i) == _reference_statement_end(text, i), (text, i)
    for sep in (",", "|"):
        assert parser._split_top(text, sep) == parser._split_nested(text, sep), (text, sep)


def test_line_numbers_survive_comments_and_a_slash_in_a_string_is_text():
    text = ('.file 1 "dir//k.cu"\n'
            "/* two\nlines */ add.s32 %r1, %r2, %r3; // trailing\n"
            "mov.u32 %r4, 7;")
    got = parser._strip_comments(text)
    assert got.count("\n") == text.count("\n")
    assert '"dir//k.cu"' in got
    assert "two" not in got and "trailing" not in got
    assert got.splitlines()[2] == " " * 8 + " add.s32 %r1, %r2, %r3; "


def test_a_mutant_that_drops_block_comment_newlines_is_caught():
    """The reference is not vacuous: a pass that loses a block comment's newlines differs."""
    text = "a /* b\nc */ d"
    wrong = text.replace("/* b\nc */", " " * 9)
    assert _reference_strip(text) != wrong
    assert parser._strip_comments(text) == _reference_strip(text)


@dataclasses.dataclass(frozen=True)
class _DataclassReg:
    name: str
    neg: bool = False


@dataclasses.dataclass(frozen=True)
class _DataclassAddr:
    base: object
    offset: int = 0


def test_operand_records_behave_as_frozen_dataclasses():
    reg, twin, negated = parser.Reg("%r1"), parser.Reg("%r1"), parser.Reg("%r1", neg=True)
    assert reg == twin and hash(reg) == hash(twin) and reg != negated
    assert hash(reg) == hash(_DataclassReg("%r1"))
    assert repr(reg) == repr(_DataclassReg("%r1")).replace("_DataclassReg", "Reg")
    assert parser.Sym("x") != parser.Special("x")             # same fields, other kind
    assert parser.Imm(1) != 1 and parser.Sink() == parser.Sink()
    addr = parser.Addr(parser.Sym("tile", 4), 8)
    assert repr(addr) == "Addr(base=Sym(name='tile', offset=4), offset=8)"
    assert pickle.loads(pickle.dumps(addr)) == addr and copy.deepcopy(addr) == addr
    assert {addr: 1}[parser.Addr(parser.Sym("tile", 4), 8)] == 1
    assert parser.Addr(None).offset == _DataclassAddr(None).offset == 0
    with pytest.raises(AttributeError):
        reg.name = "%r2"
    with pytest.raises(AttributeError):
        del addr.offset
    with pytest.raises(TypeError):
        parser.Reg("%r1", False, "extra")
    loc = parser.Loc(1, 20, 3)
    assert (loc.file, loc.line, loc.col, loc.inlined_at) == (1, 20, 3, None)
