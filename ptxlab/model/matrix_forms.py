"""Which ldmatrix / stmatrix / movmatrix forms exist, where each is legal, and its byte map.

The PTX text of an instruction (``ldmatrix.sync.aligned.m16n16.x2.trans.shared.b8``) is parsed
into a :class:`MatrixForm`; :func:`parse_form` refuses, with the change the learner must make,
every combination ptxas 13 refuses (``.m16n16`` without ``.trans``, ``.m16n16.x4``, ``.m8n16``
with ``.trans``, ``stmatrix.m16n8`` without ``.trans``, ...), and :func:`check_target` gives
ptxas's answer for a ``.target``/``.version`` pair. Both were measured against ptxas 13.0
(``tests/fixtures/ptxas_matrix_gates.json``).

:func:`byte_map` is the one place that turns a form's fragment layout (from
:mod:`ptxlab.model.layouts`) into "lane L, register r, byte b <-> matrix m, row i, column c":
the emulator, the CPU PTX interpreter and ``ptxlab layout`` all read it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import layouts
from .layouts import WARP_SIZE

__all__ = [
    "FormError", "MatrixForm", "parse_form", "form", "check_target", "byte_map",
    "address_lanes", "all_forms", "layout_record", "check_register_count",
    "check_module_target", "min_version", "oldest_versions",
    "parse_mma", "mma_record", "check_mma_types", "mma_types", "PACKED_FORMATS",
    "BLACKWELL_TARGET_HINT",
]

#: Packed sub-byte source formats: bits per element and bytes of data in a 16-byte row (the rest
#: of the row is padding).
PACKED_FORMATS: dict[str, tuple[int, int]] = {"b6x16_p32": (6, 12), "b4x16_p64": (4, 8)}

BLACKWELL_TARGET_HINT = ("sm_100a, sm_103a, sm_110a, sm_120a, sm_121a or a family target "
                         "sm_100f, sm_103f, sm_110f, sm_120f, sm_121f")


class FormError(ValueError):
    """An instruction form that does not exist, or is not legal for the module's target/version.

    The message says what to change; ``ptxas`` refuses the same PTX.
    """


@dataclass(frozen=True)
class MatrixForm:
    """One warp-level matrix move, as written in PTX.

    ``dtype`` is ``"b16"``, ``"b8"``, or a packed source format (``"b6x16_p32"``,
    ``"b4x16_p64"``, written ``.b8x16.<fmt>`` in PTX). ``space`` is ``"shared"``,
    ``"shared::cta"`` or ``"generic"``.
    """

    op: str              # "ldmatrix" | "stmatrix" | "movmatrix"
    shape: str           # "m8n8" | "m16n16" | "m8n16" | "m16n8"
    num: int             # 1, 2, 4
    trans: bool
    dtype: str
    space: str = "shared"

    # ---- what the PTX says ----
    @property
    def ptx(self) -> str:
        """The opcode as written in PTX (without operands)."""
        if self.op == "movmatrix":
            return "movmatrix.sync.aligned.m8n8.trans.b16"
        parts = [self.op, "sync", "aligned", self.shape, f"x{self.num}"]
        if self.trans:
            parts.append("trans")
        if self.space != "generic":
            parts.append(self.space)
        parts.append(f"b8x16.{self.dtype}" if self.packed else self.dtype)
        return ".".join(parts)

    @property
    def packed(self) -> bool:
        """Whether the source rows hold packed 6-bit/4-bit elements (unpacked into bytes)."""
        return self.dtype in PACKED_FORMATS

    @property
    def blackwell(self) -> bool:
        """Forms that need an sm_100a/sm_110a/sm_120a-class target (not m8n8 .b16)."""
        return self.dtype != "b16"

    # ---- its geometry ----
    @property
    def regs(self) -> int:
        """32-bit registers each lane gives or receives."""
        if self.op == "movmatrix":
            return 1
        return 2 * self.num if self.shape == "m16n16" else self.num

    @property
    def rows_per_matrix(self) -> int:
        """16-byte shared-memory rows of one matrix (each named by one lane's address)."""
        return 16 if self.shape == "m16n16" else 8

    @property
    def address_lane_count(self) -> int:
        """Lanes whose addresses the instruction uses (lanes 0 .. count-1)."""
        return 0 if self.op == "movmatrix" else self.num * self.rows_per_matrix

    @property
    def fragment(self) -> layouts.FragmentLayout:
        """The register side, as data: ``coords[lane, reg, elem] = (matrix, row, col)``."""
        if self.op == "movmatrix":
            return layouts.movmatrix_fragment()
        if self.dtype == "b16":
            return layouts.ldmatrix_fragment(self.num, self.trans)
        if self.shape == "m16n16":
            return layouts.ldmatrix_m16n16_fragment(self.num)
        if self.shape == "m8n16":
            return layouts.ldmatrix_m8n16_fragment(self.num)
        return layouts.stmatrix_m16n8_fragment(self.num)


# ---------------------------------------------------------------------------------------------
# Parsing and the rules of which forms exist
# ---------------------------------------------------------------------------------------------

_OPCODE = re.compile(r"^\s*(?:@!?%?\w+\s+)?([A-Za-z][\w.:]*)")


def _split_mods(opcode: str) -> tuple[str, list[str]]:
    parts = opcode.split(".")
    return parts[0], [p for p in parts[1:] if p]


def parse_form(text: str) -> MatrixForm:
    """The form of one PTX instruction (operands optional), or :class:`FormError` saying what to
    change.

    Only the form is checked here; :func:`check_target` adds the ``.target``/``.version`` gate.
    If braced register operands are given, their count is checked against the form.
    """
    m = _OPCODE.match(text)
    if not m:
        raise FormError(f"not a PTX instruction: {text!r}")
    opcode = m.group(1)
    op, mods = _split_mods(opcode)
    if op not in ("ldmatrix", "stmatrix", "movmatrix"):
        raise FormError(f"{opcode}: 'ptxlab layout' and the matrix model know ldmatrix, "
                        f"stmatrix and movmatrix (mma: see ptxlab.model.layouts.mma_form); "
                        f"got '{op}'")
    f = _form_from_mods(opcode, op, mods)
    _check_operands(text[m.end():], f, opcode)
    return f


#: What each modifier is, for counting them as ptxas does.
_KINDS: dict[str, str] = {
    "sync": "sync", "aligned": "aligned", "trans": "trans",
    "m8n8": "shape", "m16n16": "shape", "m8n16": "shape", "m16n8": "shape",
    "x1": "num", "x2": "num", "x4": "num",
    "shared": "space", "shared::cta": "space",
    "b16": "type", "b8": "type", "b8x16": "type", **{p: "type" for p in PACKED_FORMATS},
}


#: PTX data types (.f16, .u32, .b64, .e4m3, ...): written on ldmatrix/stmatrix in place of a
#: bit width, ptxas refuses them as instruction types.
_DATA_TYPE = re.compile(r"(?:[bsuf](?:8|16|32|64)|bf16|tf32|e[2-5]m[1-3]|pred)(?:x\d+)?")
_OTHER_SPACES = {"shared::cluster", "global", "local", "const", "param"}


def _check_counts(opcode: str, op: str, mods: list[str]) -> None:
    """Refuse what ptxas 13 refuses before it looks at the form: an unknown modifier, a
    repeated one, two state spaces, a packed source format before ``.b8x16``.

    ptxas takes the modifiers after the opcode in any order (``.x4.m8n8``, ``.b16.shared`` and
    ``.aligned.sync`` assemble), and tolerates a repeated ``.sync``; everything else may appear
    once (measured: ``tests/fixtures/ptxas_matrix_gates.json``).
    """
    for mod in mods:
        if mod in _KINDS:
            continue
        if _DATA_TYPE.fullmatch(mod):
            raise FormError(f"{opcode}: {op} moves bits, not numbers: .{mod} is not one of its "
                            f"types (ptxas: \"Unexpected instruction types specified for "
                            f"'{op}'\"); write .b16 (m8n8), .b8 (m16n16/m16n8) or "
                            f".b8x16.b6x16_p32 / .b8x16.b4x16_p64 (packed)")
        if mod in _OTHER_SPACES:
            raise FormError(f"{opcode}: {op} reads and writes only the executing block's own "
                            f"shared memory, so .{mod} is not allowed (ptxas: \"State space "
                            f"incorrect for instruction '{op}'\"): write .shared or .shared::cta")
        raise FormError(f"{opcode}: unknown qualifier .{mod} for {op}")
    count = {k: [m for m in mods if _KINDS[m] == k] for k in set(_KINDS.values())}
    for kind, what, theirs in (("aligned", ".aligned", ".aligned"), ("trans", ".trans", ".trans"),
                               ("shape", "shape", "matrix shape"),
                               ("num", ".num (.x1/.x2/.x4)", ".num")):
        if len(count[kind]) > 1:
            given = " and ".join(f".{m}" for m in count[kind])
            raise FormError(f"{opcode}: give one {what} modifier, not {given} (ptxas: "
                            f"\"Multiple {theirs} modifiers specified\"): remove the extra one")
    if len(count["space"]) > 1:
        raise FormError(f"{opcode}: give at most one state space, not "
                        f"{' and '.join('.' + m for m in count['space'])} (ptxas: \"Unexpected "
                        f"number of state spaces\"): write .shared or .shared::cta once")
    types = count["type"]
    if len(types) != len(set(types)):
        raise FormError(f"{opcode}: give each element type once, not "
                        f"{'.'.join([''] + types)}: remove the repeated one")
    packed = [t for t in types if t in PACKED_FORMATS]
    if len(packed) > 1:
        raise FormError(f"{opcode}: give one source format after .b8x16, not "
                        f"{' and '.join('.' + t for t in packed)}: write .b8x16.{packed[0]} or "
                        f".b8x16.{packed[1]}")
    if "b8x16" in types and packed and types.index(packed[0]) < types.index("b8x16"):
        raise FormError(f"{opcode}: the destination format comes first: write .b8x16.{packed[0]} "
                        f"(ptxas: \"Illegal modifier '.{packed[0]}.b8x16'\")")


def _form_from_mods(opcode: str, op: str, mods: list[str]) -> MatrixForm:
    """The form ``opcode`` (``op`` and its modifiers ``mods``) names, or the FormError ptxas's
    refusal would deserve, worded with the fix."""
    _check_counts(opcode, op, mods)
    space = next((m for m in mods if _KINDS[m] == "space"), "generic")
    missing = [q for q in ("sync", "aligned") if q not in mods]
    if missing:
        raise FormError(f"{opcode}: {op} needs .sync.aligned (write {op}.sync.aligned....)")
    trans = "trans" in mods
    shapes = [x for x in mods if _KINDS[x] == "shape"]
    if len(shapes) != 1:
        raise FormError(f"{opcode}: give exactly one shape (.m8n8, .m16n16, .m8n16 for ldmatrix; "
                        f".m8n8, .m16n8 for stmatrix)")
    shape = shapes[0]
    if op == "movmatrix":
        return _movmatrix_form(opcode, mods, shape, trans, space)
    nums = [int(x[1]) for x in mods if x in ("x1", "x2", "x4")]
    if len(nums) != 1:
        raise FormError(f"{opcode}: {op} needs one of .x1, .x2, .x4")
    types = [x for x in mods if _KINDS[x] == "type"]
    if op == "stmatrix":
        return _stmatrix_form(opcode, shape, nums[0], trans, types, space)
    return _ldmatrix_form(opcode, shape, nums[0], trans, types, space)


def _movmatrix_form(opcode: str, mods: list[str], shape: str, trans: bool,
                    space: str) -> MatrixForm:
    """movmatrix has one form: m8n8.trans.b16, with no .num or state space."""
    if shape != "m8n8" or not trans or mods.count("b16") != 1 or len(
            [x for x in mods if x in ("b8", "b8x16", *PACKED_FORMATS)]):
        raise FormError(f"{opcode}: the only form is movmatrix.sync.aligned.m8n8.trans.b16")
    if space != "generic" or any(x in mods for x in ("x1", "x2", "x4")):
        raise FormError(f"{opcode}: movmatrix takes no .num or state space; "
                        "write movmatrix.sync.aligned.m8n8.trans.b16")
    return MatrixForm("movmatrix", "m8n8", 1, True, "b16", "generic")


def _stmatrix_form(opcode: str, shape: str, num: int, trans: bool, types: list[str],
                   space: str) -> MatrixForm:
    """stmatrix: .m8n8 with .b16 (either .trans), or .m16n8.trans with .b8."""
    op = "stmatrix"
    if shape not in ("m8n8", "m16n8"):
        raise FormError(f"{opcode}: stmatrix has no .{shape} shape: use .m8n8 with .b16 or "
                        f".m16n8.trans with .b8 (stmatrix.sync.aligned.m16n8.x{num}.trans."
                        f"shared.b8)")
    if shape == "m8n8":
        if types != ["b16"]:
            raise FormError(f"{opcode}: stmatrix.m8n8 stores .b16 elements; for 8-bit "
                            f"elements use stmatrix.sync.aligned.m16n8.x{num}.trans.shared.b8")
        return MatrixForm(op, shape, num, trans, "b16", space)
    if types != ["b8"]:
        raise FormError(f"{opcode}: stmatrix.m16n8 stores .b8 elements: write "
                        f"stmatrix.sync.aligned.m16n8.x{num}.trans.shared.b8 (16-bit "
                        f"elements use .m8n8.b16)")
    if not trans:
        raise FormError(f"{opcode}: stmatrix with shape .m16n8 requires .trans: write "
                        f"{_insert_after_num(opcode, 'trans')}")
    return MatrixForm(op, shape, num, True, "b8", space)


def _ldmatrix_form(opcode: str, shape: str, num: int, trans: bool, types: list[str],
                   space: str) -> MatrixForm:
    """ldmatrix: .m8n8 with .b16, .m16n16.trans with .b8 or a packed source (.x1/.x2), or
    .m8n16 with a packed source."""
    if shape == "m16n8":
        raise FormError(f"{opcode}: .m16n8 is a stmatrix shape; for ldmatrix use .m8n8 (.b16), "
                        ".m16n16 (.b8 or packed, with .trans) or .m8n16 (packed)")
    dtype, packed = _ldmatrix_type(opcode, types)
    if shape == "m8n8":
        if dtype != "b16":
            raise FormError(f"{opcode}: ldmatrix.m8n8 loads .b16 elements; 8-bit and packed "
                            f"elements use .m16n16 (with .trans) or .m8n16")
    elif shape == "m16n16":
        _check_ldmatrix_m16n16(opcode, num, trans, dtype)
    else:  # m8n16
        if not packed:
            raise FormError(f"{opcode}: ldmatrix.m8n16 loads packed elements only: "
                            f"write .b8x16.b6x16_p32 or .b8x16.b4x16_p64 (8-bit elements use "
                            f".m16n16.trans.b8)")
        if trans:
            raise FormError(f"{opcode}: .trans is not allowed with shape .m8n16; remove it: write "
                            f"{opcode.replace('.trans', '')} (a transposed packed load is "
                            f".m16n16.x1/.x2.trans)")
    return MatrixForm("ldmatrix", shape, num, trans, dtype, space)


def _ldmatrix_type(opcode: str, types: list[str]) -> tuple[str, list[str]]:
    """The element type ldmatrix's type modifiers name, and the packed source formats among
    them: one type, or ``.b8x16`` followed by one source format."""
    packed = [x for x in types if x in PACKED_FORMATS]
    if packed:
        if types != ["b8x16", packed[0]]:
            raise FormError(f"{opcode}: a packed source is written .b8x16.{packed[0]} "
                            "(destination format, then source format) and no other type")
        return packed[0], packed
    if types == ["b8x16"]:
        raise FormError(f"{opcode}: .b8x16 needs a source format after it: "
                        ".b8x16.b6x16_p32 or .b8x16.b4x16_p64")
    if len(types) != 1:
        raise FormError(f"{opcode}: give one element type (.b16 for .m8n8, .b8 for .m16n16, "
                        ".b8x16.b6x16_p32 or .b8x16.b4x16_p64 for .m8n16/.m16n16)")
    return types[0], packed


def _check_ldmatrix_m16n16(opcode: str, num: int, trans: bool, dtype: str) -> None:
    """ldmatrix.m16n16 loads 8-bit or packed elements, as .x1 or .x2, with .trans."""
    if dtype == "b16":
        raise FormError(f"{opcode}: ldmatrix.m16n16 loads .b8 or packed elements "
                        f"(.b8x16.b6x16_p32, .b8x16.b4x16_p64); 16-bit elements use .m8n8")
    if num == 4:
        raise FormError(f"{opcode}: ldmatrix.m16n16 exists only as .x1 and .x2 "
                        f"(four registers already hold two 16x16 matrices)")
    if not trans:
        raise FormError(f"{opcode}: ldmatrix with shape .m16n16 requires .trans: write "
                        f"{_insert_after_num(opcode, 'trans')}")


def _insert_after_num(opcode: str, qualifier: str) -> str:
    """``opcode`` with ``.qualifier`` added after its ``.xN`` (the corrected spelling to show)."""
    return re.sub(r"\.(x[124])(?=\.|$)", rf".\1.{qualifier}", opcode, count=1)


def _check_operands(rest: str, f: MatrixForm, opcode: str) -> None:
    braces = re.search(r"\{([^}]*)\}", rest)
    if braces:
        check_register_count(f, len([x for x in braces.group(1).split(",") if x.strip()]),
                             opcode)


def check_register_count(f: MatrixForm, given: int, opcode: str = "") -> None:
    """:class:`FormError` unless ``given`` registers are what ``f`` moves per lane."""
    if given != f.regs:
        raise FormError(f"{opcode or f.ptx}: this form moves {f.regs} register(s) per lane, so "
                        f"it needs {{{', '.join(f'%r{i}' for i in range(f.regs))}}}; got {given}")


@lru_cache(maxsize=256)
def form(op: str = "ldmatrix", *, shape: str = "m8n8", num: int = 4, trans: bool = False,
         dtype: str = "b16", space: str = "shared") -> MatrixForm:
    """A form from keywords (the emulator's ``shape=``/``dtype=``), validated like PTX text.

    ``dtype`` may be ``"b16"``, ``"b8"``, ``"b6x16_p32"``, ``"b4x16_p64"`` or the PTX spelling
    ``"b8x16.b6x16_p32"``.
    """
    if dtype.startswith("b8x16."):
        dtype = dtype.split(".", 1)[1]
    type_mods = f"b8x16.{dtype}" if dtype in PACKED_FORMATS else dtype
    parts = [op, "sync", "aligned", shape]
    if op != "movmatrix":
        parts.append(f"x{num}")
    if trans:
        parts.append("trans")
    if space != "generic" and op != "movmatrix":
        parts.append(space)
    parts.append(type_mods)
    return parse_form(".".join(parts))


# ---------------------------------------------------------------------------------------------
# .target / .version gates (as ptxas 13.0 enforces them)
# ---------------------------------------------------------------------------------------------

#: The oldest PTX ISA version that accepts each ``.target`` (ptxas 13.0, measured on a module
#: with no instruction in it; sm_70 is given as 6.0 although ptxas also takes the non-existent
#: 5.1-5.9).
TARGET_MIN_VERSION: dict[str, tuple[int, int]] = {
    "sm_50": (4, 0), "sm_52": (4, 1), "sm_53": (4, 2), "sm_60": (5, 0), "sm_61": (5, 0),
    "sm_62": (5, 0), "sm_70": (6, 0), "sm_72": (6, 1),
    "sm_75": (6, 3), "sm_80": (7, 0), "sm_86": (7, 1), "sm_87": (7, 4), "sm_88": (7, 3),
    "sm_89": (7, 8),
    "sm_90": (7, 8), "sm_90a": (8, 0),
    "sm_100": (8, 6), "sm_100a": (8, 6), "sm_100f": (8, 8),
    "sm_103": (8, 8), "sm_103a": (8, 8), "sm_103f": (8, 8),
    "sm_110": (9, 0), "sm_110a": (9, 0), "sm_110f": (9, 0),
    "sm_120": (8, 7), "sm_120a": (8, 7), "sm_120f": (8, 8),
    "sm_121": (8, 8), "sm_121a": (8, 8), "sm_121f": (8, 8),
}

#: Targets ptxas 13 no longer knows, and what replaced them.
RENAMED_TARGETS = {"sm_101": "sm_110", "sm_101a": "sm_110a", "sm_101f": "sm_110f"}


def _version(v: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", v or "")
    if not m:
        raise FormError(f".version {v!r} is not a PTX ISA version (write e.g. .version 8.8)")
    return int(m.group(1)), int(m.group(2))


def _arch(target: str) -> tuple[str, int, str]:
    """``("sm_100a", 100, "a")`` from a ``.target`` line's value (``"sm_100a, debug"``)."""
    name = (target or "").split(",")[0].strip()
    m = re.fullmatch(r"sm_(\d+)([af]?)", name)
    if not m:
        raise FormError(f".target {target!r} is not an sm_XY target")
    return name, int(m.group(1)), m.group(2)


def min_version(target: str) -> tuple[int, int] | None:
    """The oldest ``.version`` ptxas 13 takes with this ``.target`` (None: not a target it
    checks)."""
    name = (target or "").split(",")[0].strip()
    return TARGET_MIN_VERSION.get(name)


def check_module_target(target: str, version: str) -> None:
    """Raise :class:`FormError` where ptxas 13 refuses a module's ``.target``/``.version`` pair
    whatever its instructions (``.target sm_100a`` with ``.version 8.5``, ``sm_120a`` before 8.7,
    the ``f`` family targets before 8.8, a renamed or unknown target)."""
    name, sm, _ = _arch(target)
    ver = _version(version)
    if name in RENAMED_TARGETS:
        raise FormError(f".target {name} is not known to ptxas 13: it was renamed "
                        f"{RENAMED_TARGETS[name]} in PTX ISA 9.0; write .target "
                        f"{RENAMED_TARGETS[name]} with .version 9.0")
    need = TARGET_MIN_VERSION.get(name)
    if need is None:
        if sm >= 50:
            raise FormError(f".target {name} is not a target ptxas 13 knows (ptxas: "
                            f"\"Unsupported .target\"): use one of "
                            f"{', '.join(TARGET_MIN_VERSION)}")
        return
    if ver < need:
        raise FormError(f"PTX .version {version} does not support .target {name}: "
                        f"write .version {need[0]}.{need[1]} or later")


def oldest_versions(f: MatrixForm) -> dict[str, tuple[int, int]]:
    """Every ``.target`` ptxas 13 accepts ``f`` on, with the oldest ``.version`` it needs there:
    the later of the form's own version and the target's (``sm_100a`` 8.6, ``sm_120a`` 8.7, the
    ``f`` family 8.8, ``sm_110a`` 9.0 for the .b8 forms)."""
    out = {}
    for name, need in TARGET_MIN_VERSION.items():
        _, sm, suffix = _arch(name)
        if f.blackwell:
            if sm < 100 or not suffix:
                continue
            floor = (8, 6)
        else:
            min_sm, floor = _requirements(f)
            if sm < min_sm:
                continue
        out[name] = max(floor, need)
    return out


def _requirements(f: MatrixForm) -> tuple[int, tuple[int, int]]:
    """(oldest sm number, oldest PTX version) of a non-Blackwell form."""
    if f.op == "stmatrix":
        return 90, (7, 8)
    if f.op == "movmatrix":
        return 75, (7, 8)
    return 75, ((7, 8) if f.space == "shared::cta" else (6, 5))


def check_target(f: MatrixForm, target: str, version: str) -> None:
    """Raise :class:`FormError` where ptxas 13 refuses ``f`` in a module with this ``.target``
    and ``.version``; return ``None`` where it accepts.

    The m8n8 .b16 forms need sm_75 (stmatrix sm_90) and an old enough PTX version; the .b8 and
    packed forms need an architecture-specific (``a``) or family (``f``) target of sm_100 or
    newer, and ``.version`` 8.6 or later.
    """
    check_module_target(target, version)
    name, sm, suffix = _arch(target)
    ver = _version(version)
    where = f"{f.ptx} "
    if f.blackwell:
        feature = (f"{f.op}.b8" if f.dtype == "b8" else f"{f.op} .b8x16.{f.dtype}")
        if sm < 100 or suffix == "":
            raise FormError(
                f"{where}is not supported on .target {name}: the .{f.shape} "
                f"{'.b8' if f.dtype == 'b8' else 'packed'} forms need {BLACKWELL_TARGET_HINT} "
                f"(an architecture-specific 'a' or family 'f' target; plain sm_100/sm_120 "
                f"and sm_90 refuse them): compile for one, e.g. nvcc -arch=sm_100a, or the "
                f"option --gpu-architecture=compute_100a")
        if ver < (8, 6):
            raise FormError(f"{where}({feature}) requires PTX ISA .version 8.6 or later: write "
                            f".version 8.6")
        return
    min_sm, min_ver = _requirements(f)
    if sm < min_sm:
        raise FormError(f"{where}is not supported on .target {name}: it needs sm_{min_sm} "
                        f"or newer (write .target sm_{min_sm} or later)")
    if ver < min_ver:
        raise FormError(f"{where}requires PTX ISA .version {min_ver[0]}.{min_ver[1]} or later: "
                        f"write .version {min_ver[0]}.{min_ver[1]}")


# ---------------------------------------------------------------------------------------------
# The byte map: what the emulator, the PTX interpreter and `ptxlab layout` all read
# ---------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def address_lanes(f: MatrixForm) -> np.ndarray:
    """``(32, 2)``: the ``(matrix, row)`` whose start address each lane supplies, ``-1`` where the
    lane's address is ignored (and for movmatrix, which takes no address).

    Lane ``rows_per_matrix * m + i`` names row ``i`` of matrix ``m``: eight lanes per matrix for
    m8n8/m8n16/m16n8, sixteen for m16n16.
    """
    out = np.full((WARP_SIZE, 2), -1, dtype=np.int64)
    n = f.address_lane_count
    lanes = np.arange(n)
    out[:n, 0] = lanes // f.rows_per_matrix
    out[:n, 1] = lanes % f.rows_per_matrix
    out.setflags(write=False)
    return out


@lru_cache(maxsize=None)
def byte_map(f: MatrixForm) -> np.ndarray:
    """``(32, regs, 4, 3)``: lane, register, byte (0 = least significant) -> ``(matrix, row,
    col)``.

    ``row`` is the 16-byte shared-memory row named by the lane in :func:`address_lanes`; ``col``
    is the byte offset within it, or for the packed ``b6x16_p32``/``b4x16_p64`` sources the
    element index within the row (each element lands, zero-extended, in its own byte). For
    stmatrix the byte is written there; for movmatrix ``(0, row, col)`` is the byte of the
    source fragment's 8x8 .b16 matrix (``col`` in bytes) that lands in this byte of ``d``.
    """
    lay = f.fragment
    c = lay.coords                                            # (32, regs, per, 3)
    out = np.zeros((WARP_SIZE, lay.regs, 4, 3), dtype=np.int64)
    if lay.elem_bits == 16:
        coords = c
        if f.op == "movmatrix":                               # d holds A^T: swap row and col
            coords = c[..., [0, 2, 1]]
        for b in range(4):
            e = coords[:, :, b // 2]
            out[:, :, b, 0] = e[..., 0]
            out[:, :, b, 1] = e[..., 1]
            out[:, :, b, 2] = 2 * e[..., 2] + b % 2
    else:
        out[:] = c
    out.setflags(write=False)
    return out


def all_forms() -> list[MatrixForm]:
    """Every form the model knows, old and new (in the order ``ptxlab layout`` lists them)."""
    out = []
    for op in ("ldmatrix", "stmatrix"):
        for num in (1, 2, 4):
            for trans in (False, True):
                out.append(MatrixForm(op, "m8n8", num, trans, "b16"))
    out.append(MatrixForm("movmatrix", "m8n8", 1, True, "b16", "generic"))
    for num in (1, 2):
        for dtype in ("b8", *PACKED_FORMATS):
            out.append(MatrixForm("ldmatrix", "m16n16", num, True, dtype))
    for num in (1, 2, 4):
        for dtype in PACKED_FORMATS:
            out.append(MatrixForm("ldmatrix", "m8n16", num, False, dtype))
    for num in (1, 2, 4):
        out.append(MatrixForm("stmatrix", "m16n8", num, True, "b8"))
    return out


def layout_record(f: MatrixForm) -> dict:
    """The machine-readable map of a form (what ``ptxlab layout --json`` prints).

    ``{"instruction": PTX opcode, "address_lane": 32 x ([matrix, row] or None),
    "map": [lane][reg][byte 0..3] -> [matrix, row, col]}``, read from :func:`address_lanes` and
    :func:`byte_map`.
    """
    roles = address_lanes(f)
    return {
        "instruction": f.ptx,
        "address_lane": [None if m < 0 else [int(m), int(r)] for m, r in roles],
        "map": byte_map(f).tolist(),
    }


#: The accumulator (D, C) types the PTX ISA gives mma.sync for each family of A/B types, over
#: all shapes: a pair outside these is refused by ptxas 13 whatever the shape ("Unexpected
#: instruction types specified for 'mma'").
MMA_ACCUMULATORS: dict[frozenset, frozenset] = {
    frozenset({"f16"}): frozenset({"f16", "f32"}),
    frozenset({"bf16"}): frozenset({"f32"}),
    frozenset({"tf32"}): frozenset({"f32"}),
    frozenset({"f64"}): frozenset({"f64"}),
    frozenset({"s8", "u8"}): frozenset({"s32"}),
    frozenset({"s4", "u4"}): frozenset({"s32"}),
    frozenset({"b1"}): frozenset({"s32"}),
    frozenset({"e4m3", "e5m2", "e3m2", "e2m3", "e2m1"}): frozenset({"f32", "f16"}),
}

#: Every type name an mma.sync operand may carry.
MMA_TYPES = frozenset().union(*MMA_ACCUMULATORS, *MMA_ACCUMULATORS.values())


def mma_types(mods: list[str]) -> list[str]:
    """The type modifiers of an mma opcode, in order (``.dtype.atype.btype.ctype``)."""
    return [m for m in mods if m in MMA_TYPES]


def check_mma_types(opcode: str, dtype: str, atype: str, btype: str, ctype: str) -> None:
    """Raise :class:`FormError` where ptxas refuses the type combination of an mma.sync at compile
    time: A and B from different families, or an accumulator the inputs do not have (f16 inputs
    accumulate in .f16/.f32, never .f64). Combinations that exist but the model does not cover
    are not refused here."""
    family = next((f for f in MMA_ACCUMULATORS if atype in f), None)
    if family is None or btype not in family:
        raise FormError(f"{opcode}: A is .{atype} and B is .{btype}; mma takes A and B of one "
                        f"family (ptxas: \"Unexpected instruction types specified for 'mma'\"): "
                        f"write the same type for both")
    allowed = MMA_ACCUMULATORS[family]
    bad = [f".{t}" for t in (dtype, ctype) if t not in allowed]
    if bad:
        acc = " or ".join(f".{t}" for t in sorted(allowed))
        raise FormError(f"{opcode}: with .{atype} inputs mma accumulates in {acc} only, not "
                        f"{' / '.join(dict.fromkeys(bad))} (ptxas: \"Unexpected instruction "
                        f"types specified for 'mma'\"): write {acc} for D and C"
                        + (", or use the f64 shapes with .f64 inputs" if "f64" in (dtype, ctype)
                           else ""))


def parse_mma(text: str) -> layouts.MmaForm:
    """The mma variant of ``mma.sync.aligned.<shape>.row.col.<d>.<a>.<b>.<c>`` (operands
    optional), or :class:`FormError` naming the variants the model covers."""
    m = _OPCODE.match(text)
    opcode = m.group(1) if m else text.strip()
    op, mods = _split_mods(opcode)
    if op != "mma":
        raise FormError(f"{opcode}: not an mma instruction")
    if "sync" not in mods or "aligned" not in mods:
        raise FormError(f"{opcode}: mma needs .sync.aligned (write mma.sync.aligned....)")
    shapes = [x for x in mods if re.fullmatch(r"m\d+n\d+k\d+", x)]
    types = mma_types(mods)
    if len(types) == 4:
        check_mma_types(opcode, *types)
    if len(shapes) != 1 or len(types) != 4 or "row" not in mods or "col" not in mods:
        covered = ", ".join(layouts.MmaForm(*v, a=None, b=None, c=None, d=None).ptx
                            for v in layouts.MMA_VARIANTS)
        raise FormError(f"{opcode}: write mma.sync.aligned.<shape>.row.col.<dtype>.<atype>."
                        f"<btype>.<ctype>; the model covers {covered}")
    dtype, atype, btype, ctype = types
    try:
        return layouts.mma_form(shapes[0], atype, btype, ctype, dtype)
    except ValueError as exc:      # a real PTX variant the model does not cover
        raise FormError(f"{opcode}: {str(exc).replace('covered:', 'the model covers')}") from None


def mma_record(form: layouts.MmaForm) -> dict:
    """The machine-readable fragments of an mma variant (``ptxlab layout --json`` for mma):
    ``{"instruction", "address_lane": 32 x None (mma takes no address), "operands": {"A": ...,
    "B": ..., "C": ..., "D": ...}}`` with each operand ``[lane][reg][elem] -> [row, col]``
    (``elem`` counts the elements of one register, lowest bits first)."""
    return {
        "instruction": form.ptx,
        "address_lane": [None] * WARP_SIZE,
        "operands": {name: getattr(form, name.lower()).coords[..., 1:].tolist()
                     for name in ("A", "B", "C", "D")},
    }
