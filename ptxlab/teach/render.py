"""HTML pictures of warp-level data: matrices coloured by lane, fragment maps, address tables.

Every picture is drawn from :mod:`ptxlab.model.layouts` data (or from arrays a kernel produced),
never from pasted images, so a picture cannot disagree with the emulator. Functions return
:class:`Html`, a ``str`` that Jupyter displays as HTML and that an ipywidgets ``HTML`` accepts
as its value. Only inline styles are used, so the pictures survive JupyterLab's sanitiser and
nbconvert exports.
"""
from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..model import cute_atoms, layouts, matrix_forms
from ..run.ptx.errors import number_runs

__all__ = [
    "Html", "lane_color", "matrix_html", "fragment_map_html", "cute_atom_html",
    "lane_registers_html",
    "address_table_html", "registers_html", "smem_rows_html", "bank_table_html", "side_by_side",
    "legend_html", "escape", "row_flow_svg", "fit", "table_px", "FIT_PX", "movmatrix_svg",
    "mma_fragments_svg", "register_blocks_html", "register_prefix", "collapsible", "text_px",
    "wrap_px",
]

#: A wrong cell: red stripes, a fill no lane has (lane colours are plain and keep clear of
#: red), so a wrong cell never reads as a lane's.
WRONG_BG = "repeating-linear-gradient(135deg,#ff9c9c 0 4px,#ffffff 4px 7px)"
WRONG_BORDER = "#b00000"
IGNORED_BG = "#eeeeee"

_TABLE = ("border-collapse:collapse;font-family:ui-monospace,SFMono-Regular,Menlo,monospace;"
          "font-size:12px;margin:4px 8px 8px 0")
_CELL = "border:1px solid #bbb;padding:2px 5px;text-align:center;min-width:22px"
_HEAD = "border:1px solid #bbb;padding:2px 5px;background:#f3f3f3;font-weight:600"


#: The width a picture may take: a notebook's output column in a 1280-pixel window with
#: JupyterLab's file browser open is 848 pixels (measured in chromium by
#: tests/browser/test_learner_workspace.py).
FIT_PX = 840
_TABLE_COMPACT = _TABLE.replace("font-size:12px", "font-size:10px")
_CELL_COMPACT = "border:1px solid #ccc;padding:1px 1px;text-align:center;min-width:13px"
_HEAD_COMPACT = "border:1px solid #ccc;padding:1px 2px;background:#f3f3f3;font-weight:600"


def table_px(cols: int, chars: int, *, compact: bool = False, head_chars: int = 6) -> int:
    """About how wide a table of ``cols`` columns of ``chars``-character cells is drawn."""
    if compact:
        return head_chars * 6 + 6 + cols * (max(13, int(chars * 5.6)) + 3)
    return head_chars * 7 + 12 + cols * (max(22, int(chars * 7.3)) + 11)


def fit(table: str, cols: int, chars: int, *, head_chars: int = 6, budget: int = FIT_PX) -> str:
    """``table`` drawn compact (smaller type, tighter cells) when it would not fit ``budget``
    pixels as it is."""
    if table_px(cols, chars, head_chars=head_chars) <= budget:
        return table
    return (table.replace(_TABLE, _TABLE_COMPACT).replace(_CELL, _CELL_COMPACT)
            .replace(_HEAD, _HEAD_COMPACT))


class Html(str):
    """A string of HTML that notebooks render (``_repr_html_``) instead of printing."""

    def _repr_html_(self) -> str:
        return str(self)


def lane_color(lane: int) -> str:
    """Colour of a lane: one hue per group of four lanes (the lanes that share a row), lighter
    to darker across the four lanes of the group."""
    lane = int(lane)
    hue = 30 + (lane // 4) * 38          # orange ... magenta: red is kept for wrong cells
    light = (88, 80, 72, 64)[lane % 4]
    return f"hsl({hue},70%,{light}%)"


def escape(x) -> str:
    """``x`` as text that is safe inside HTML (and inside a quoted attribute)."""
    return html.escape(str(x), quote=True)


def _td(text, *, bg: str | None = None, title: str | None = None, bold: bool = False,
        border: str | None = None, extra: str = "") -> str:
    style = _CELL
    if bg:
        style += f";background:{bg}"
    if bold:
        style += ";font-weight:700"
    if border:
        style += f";outline:2px solid {border};outline-offset:-2px"
    style += extra
    t = f' title="{escape(title)}"' if title else ""
    return f'<td style="{style}"{t}>{escape(text)}</td>'


def _th(text) -> str:
    return f'<th style="{_HEAD}">{escape(text)}</th>'


def _caption(title: str | None) -> str:
    if not title:
        return ""
    return (f'<caption style="caption-side:top;text-align:left;font-weight:600;'
            f'padding-bottom:2px">{escape(title)}</caption>')


def _fmt_value(v, fmt: str) -> str:
    if fmt == "hex16":
        return f"{int(v) & 0xFFFF:04x}"
    if fmt == "hex32":
        return f"{int(v) & 0xFFFFFFFF:08x}"
    if isinstance(v, (float, np.floating)):
        return format(float(v), fmt or "g")
    return format(int(v), fmt) if fmt else str(int(v))


def matrix_html(values: np.ndarray, owner_lanes: np.ndarray | None = None, *,
                title: str | None = None, fmt: str = "", wrong: np.ndarray | None = None,
                highlight_lane: int | None = None, row_label: str = "",
                col_label: str = "", tooltips: np.ndarray | None = None,
                expected: np.ndarray | None = None) -> Html:
    """One 2-D matrix as a table; each cell coloured by the lane that holds it.

    ``owner_lanes`` (same shape, ints, -1 for none) picks the colours; ``wrong`` marks cells red
    (with ``expected`` the tooltip shows what was expected); ``highlight_lane`` outlines that
    lane's cells and fades the others.
    """
    vals = np.asarray(values)
    if vals.ndim != 2:
        raise ValueError(f"matrix_html draws 2-D matrices, got shape {vals.shape}")
    rows, cols = vals.shape
    out = [f'<table style="{_TABLE}">', _caption(title), "<tr>",
           _th(f"{row_label}\\{col_label}" if (row_label or col_label) else "")]
    out += [_th(c) for c in range(cols)]
    out.append("</tr>")
    for r in range(rows):
        out.append(f"<tr>{_th(r)}")
        for c in range(cols):
            lane = int(owner_lanes[r, c]) if owner_lanes is not None else -1
            bg = lane_color(lane) if lane >= 0 else None
            border = None
            tip = []
            if lane >= 0:
                tip.append(f"lane {lane}")
            if tooltips is not None:
                tip.append(str(tooltips[r, c]))
            if highlight_lane is not None and lane >= 0:
                if lane == highlight_lane:
                    border = "#000"
                else:
                    bg = "#f7f7f7"
            if wrong is not None and bool(wrong[r, c]):
                bg, border = WRONG_BG, WRONG_BORDER
                if expected is not None:
                    tip.append(f"expected {_fmt_value(expected[r, c], fmt)}")
            out.append(_td(_fmt_value(vals[r, c], fmt), bg=bg, border=border,
                           title=", ".join(tip) or None, bold=border == "#000"))
        out.append("</tr>")
    out.append("</table>")
    return Html("".join(out))


def side_by_side(*parts: str, gap: int = 14) -> Html:
    """Lay several pictures out in a row (wrapping on narrow screens)."""
    cells = "".join(f'<div style="margin-right:{gap}px">{p}</div>' for p in parts)
    return Html(f'<div style="display:flex;flex-wrap:wrap;align-items:flex-start">{cells}</div>')


def collapsible(summary: str, body: str, *, opened: bool = False) -> Html:
    """``body`` under a line that opens and closes it (an HTML ``<details>``, which JupyterLab,
    nbconvert exports and browsers all draw without script)."""
    return Html(f'<details{" open" if opened else ""} style="margin:2px 0 6px 0">'
                f'<summary style="cursor:pointer;font-size:12px;font-weight:600">'
                f'{escape(summary)}</summary>{body}</details>')


def legend_html(lanes: Iterable[int] = range(32), *, wrong: bool = True) -> Html:
    """A strip of lane colours, so a picture can be read without hovering, and the look of a
    wrong cell."""
    cells = "".join(_td(l, bg=lane_color(l)) for l in lanes)
    if wrong:
        cells += _th("wrong") + _td("✗", bg=WRONG_BG, border=WRONG_BORDER)
    return Html(f'<table style="{_TABLE}"><tr>{_th("lane")}{cells}</tr></table>')


def _layout_grids(layout: layouts.FragmentLayout, label: str) -> tuple[np.ndarray, np.ndarray]:
    """Owner lane per element and a short text per element ("T5 r1.0" or "5")."""
    own = layout.owners                                            # (m, rows, cols, 3)
    lanes = own[..., 0]
    if label == "lane":
        text = lanes.astype(object)
    else:
        text = np.empty(lanes.shape, dtype=object)
        for idx in np.ndindex(lanes.shape):
            ln, rg, el = own[idx]
            text[idx] = f"T{ln}:{rg}.{el}" if layout.elems_per_reg > 1 else f"T{ln}:{rg}"
    return lanes, text


def fragment_map_html(layout: layouts.FragmentLayout, *, selected_lane: int | None = None,
                      wrong: np.ndarray | None = None, label: str = "lane+reg",
                      titles: Sequence[str] | None = None, row_label: str = "row",
                      col_label: str = "col",
                      form: matrix_forms.MatrixForm | None = None) -> Html:
    """Who holds which element: every matrix of ``layout``, each cell naming its lane (and
    register.element), coloured by lane. ``wrong``: bool ``(matrices, rows, cols)``. ``form``:
    the instruction whose map this is; CuTe's atom for it is named under the picture
    (:func:`cute_atom_html`)."""
    if label != "lane" and table_px(layout.cols, 7) > FIT_PX:
        label = "lane"           # too wide with "T5:0.1" in every cell: the lane, the rest on hover
    lanes, text = _layout_grids(layout, "lane" if label == "lane" else "full")
    # Several matrices: two to a row (an .x4 map as a 2x2 block, not a column of four).
    budget = FIT_PX // 2 - 20 if layout.matrices > 1 else FIT_PX
    blocks = _has_register_blocks(layout)
    parts = []
    for m in range(layout.matrices):
        title = titles[m] if titles else (f"matrix {m}" if layout.matrices > 1 else layout.name)
        tips = np.empty(lanes[m].shape, dtype=object)
        for r in range(layout.rows):
            for c in range(layout.cols):
                ln, rg, el = layout.owners[m, r, c]
                tips[r, c] = f"reg {rg}, element {el} ({row_label} {r}, {col_label} {c})"
        parts.append(fit(_text_grid(text[m], lanes[m], title=title, selected_lane=selected_lane,
                                wrong=None if wrong is None else wrong[m], tooltips=tips,
                                row_label=row_label, col_label=col_label, block_edges=blocks),
                         layout.cols, max(len(str(t)) for t in text[m].flat), budget=budget))
    if blocks:
        parts.append(register_blocks_html(layout, row_label=row_label, col_label=col_label))
    if form is not None:
        return Html(side_by_side(*parts) + cute_atom_html(form))
    return side_by_side(*parts)


def cute_atom_html(form: matrix_forms.MatrixForm) -> Html:
    """The CuTe copy atom that issues ``form``, under a map of ours: its name, the instruction,
    its register and shared-memory layouts and any byte reorder after the instruction (from
    :mod:`ptxlab.model.cute_atoms`, whose pairs a test checks with pycute); or a line saying
    CuTe has none."""
    atom = cute_atoms.copy_atom_for(form)
    lines = (cute_atoms.caption_lines(atom) if atom is not None
             else [f"CuTe has no copy atom for {form.ptx}"])
    return Html('<div style="font-size:12px;font-family:monospace;margin:2px 0;'
                'white-space:pre-wrap">' + "<br>".join(escape(x) for x in lines) + "</div>")


#: Rows and columns of the blocks a fragment is made of (one 8x8 matrix of ldmatrix each).
BLOCK = 8


def _has_register_blocks(layout: layouts.FragmentLayout) -> bool:
    """One matrix larger than 8x8 held in several registers (an mma operand): its 8x8 blocks
    are what ldmatrix loads, one register each, and their order is part of the layout."""
    return (layout.matrices == 1 and layout.regs > 1 and layout.rows % BLOCK == 0
            and layout.cols % BLOCK == 0 and (layout.rows > BLOCK or layout.cols > BLOCK))


def register_prefix(layout: layouts.FragmentLayout) -> str:
    """How the instruction names the registers of ``layout``: ``a`` for mma's A operand
    (``a0, a1, ...``), ``b``, ``c``, ``d`` likewise, ``r`` for anything else."""
    parts = layout.name.split(".")
    return parts[1].lower() if len(parts) > 1 and parts[1] in ("A", "B", "C", "D") else "r"


def register_blocks_html(layout: layouts.FragmentLayout, *, row_label: str = "row",
                         col_label: str = "col") -> Html:
    """A key to a fragment map: which register holds each 8x8 block, drawn where the block
    sits (for mma's A: ``a0`` upper left, ``a1`` lower left, ``a2`` upper right, ``a3`` lower
    right)."""
    regs = layout.owners[0, ..., 1]
    name = register_prefix(layout)
    out = [f'<table style="{_TABLE}">', _caption("8x8 blocks: register"), "<tr>",
           _th(f"{row_label}\\{col_label}")]
    out += [_th(f"{c0}-{c0 + BLOCK - 1}") for c0 in range(0, layout.cols, BLOCK)]
    out.append("</tr>")
    for r0 in range(0, layout.rows, BLOCK):
        out.append(f"<tr>{_th(f'{r0}-{r0 + BLOCK - 1}')}")
        for c0 in range(0, layout.cols, BLOCK):
            held = sorted({int(x) for x in regs[r0:r0 + BLOCK, c0:c0 + BLOCK].flat})
            out.append(_td(", ".join(f"{name}{x}" for x in held), bold=True,
                           title=f"{row_label}s {r0}-{r0 + BLOCK - 1}, {col_label}s "
                                 f"{c0}-{c0 + BLOCK - 1}: register(s) "
                                 + ", ".join(f"{name}{x}" for x in held),
                           extra=";padding:6px 10px"))
        out.append("</tr>")
    out.append("</table>")
    return Html("".join(out))


def _text_grid(text: np.ndarray, lanes: np.ndarray, *, title: str, selected_lane: int | None,
               wrong: np.ndarray | None, tooltips: np.ndarray, row_label: str,
               col_label: str, block_edges: bool = False) -> str:
    rows, cols = text.shape
    out = [f'<table style="{_TABLE}">', _caption(title), "<tr>", _th(f"{row_label}\\{col_label}")]
    out += [_th(c) for c in range(cols)]
    out.append("</tr>")
    for r in range(rows):
        out.append(f"<tr>{_th(r)}")
        for c in range(cols):
            lane = int(lanes[r, c])
            bg, border = lane_color(lane), None
            if selected_lane is not None:
                if lane == selected_lane:
                    border = "#000"
                else:
                    bg = "#f7f7f7"
            if wrong is not None and bool(wrong[r, c]):
                bg, border = WRONG_BG, WRONG_BORDER
            # thick lines part the 8x8 blocks (one register each) of an mma operand
            edge = ((";border-top:3px solid #333" if block_edges and r and r % BLOCK == 0 else "")
                    + (";border-left:3px solid #333" if block_edges and c and c % BLOCK == 0
                       else ""))
            out.append(_td(text[r, c], bg=bg, border=border, title=f"lane {lane}, {tooltips[r, c]}",
                           bold=border == "#000", extra=edge))
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def lane_registers_html(layout: layouts.FragmentLayout, lane: int, *,
                        coord_names: tuple[str, str, str] = ("matrix", "row", "col"),
                        values: np.ndarray | None = None) -> Html:
    """The registers of one lane and the element each half (or byte) holds."""
    if not 0 <= int(lane) < layouts.WARP_SIZE:
        raise ValueError(f"lane must be 0..31, got {lane}")
    out = [f'<table style="{_TABLE}">', _caption(f"lane {lane} holds ({layout.name})"), "<tr>",
           _th("register")]
    out += [_th(f"element {e}" + (" (low bits)" if e == 0 and layout.elems_per_reg > 1 else ""))
            for e in range(layout.elems_per_reg)]
    if values is not None:
        out.append(_th("bits"))
    out.append("</tr>")
    for reg in range(layout.regs):
        out.append(f"<tr>{_th(f'r{reg}')}")
        for e in range(layout.elems_per_reg):
            m, r, c = layout.element(lane, reg, e)
            where = f"{coord_names[1]} {r}, {coord_names[2]} {c}"
            if layout.matrices > 1:
                where = f"{coord_names[0]} {m}: " + where
            out.append(_td(where, bg=lane_color(lane)))
        if values is not None:
            out.append(_td(f"0x{int(values[lane, reg]):08x}"))
        out.append("</tr>")
    out.append("</table>")
    return Html("".join(out))


def address_table_html(rows: Sequence[dict], *, title: str | None = None,
                       columns: Sequence[tuple[str, str]] | None = None) -> Html:
    """Per-lane address table. Each row dict may hold ``lane``, ``address``, ``role``,
    ``receivers``, ``yours``, ``status`` and ``wrong`` (bool) / ``ignored`` (bool) flags;
    wrong rows are drawn red, ignored ones grey."""
    cols = list(columns or [("lane", "lane"), ("address", "address"), ("role", "gives"),
                            ("receivers", "row lands in lanes")])
    if any("yours" in r for r in rows) and not any(k == "yours" for k, _ in cols):
        cols += [("yours", "your formula"), ("status", "")]
    out = [f'<table style="{_TABLE}">', _caption(title), "<tr>"]
    out += [_th(h) for _, h in cols]
    out.append("</tr>")
    for r in rows:
        lane = r.get("lane")
        bg = None
        if r.get("ignored"):
            bg = IGNORED_BG
        if r.get("wrong"):
            bg = WRONG_BG
        out.append("<tr>")
        for key, _ in cols:
            val = r.get(key, "")
            cell_bg = bg
            if key == "lane" and lane is not None and not r.get("wrong"):
                cell_bg = lane_color(lane)
            out.append(_td(val, bg=cell_bg, bold=bool(r.get("wrong")) and key in ("yours", "status")))
        out.append("</tr>")
    out.append("</table>")
    return Html("".join(out))


def registers_html(regs: np.ndarray, *, title: str | None = None,
                   wrong: np.ndarray | None = None, halves: bool = True,
                   expected: np.ndarray | None = None) -> Html:
    """A warp's registers ``(32, n)``: one row per lane, 16-bit halves shown as ``hi|lo``."""
    r = np.asarray(regs, dtype=np.uint32)
    if r.ndim == 1:
        r = r[:, None]
    out = [f'<table style="{_TABLE}">', _caption(title), "<tr>", _th("lane")]
    out += [_th(f"r{i}" + (" (hi | lo)" if halves else "")) for i in range(r.shape[1])]
    out.append("</tr>")
    for lane in range(r.shape[0]):
        out.append(f"<tr>{_td(lane, bg=lane_color(lane))}")
        for i in range(r.shape[1]):
            v = int(r[lane, i])
            text = f"{v >> 16:5d} | {v & 0xFFFF:5d}" if halves else f"0x{v:08x}"
            bad = wrong is not None and bool(np.asarray(wrong)[lane, i])
            tip = None
            if bad and expected is not None:
                e = int(np.asarray(expected)[lane, i])
                tip = f"expected {e >> 16} | {e & 0xFFFF}" if halves else f"expected 0x{e:08x}"
            out.append(_td(text, bg=WRONG_BG if bad else None, title=tip,
                           extra=";white-space:pre;text-align:right"))
        out.append("</tr>")
    out.append("</table>")
    return Html("".join(out))


def smem_rows_html(smem: np.ndarray, row_bytes: int, addr_lanes: dict[int, list[int]] | None = None,
                   *, title: str | None = None, max_rows: int = 64, elem_bytes: int = 2,
                   bad_addresses: Iterable[int] = ()) -> Html:
    """Shared memory drawn as rows of ``row_bytes`` bytes of 16-bit values; each 16-byte chunk
    that a lane's address points at is coloured by that lane (``addr_lanes``: address -> lanes)."""
    mem = np.asarray(smem, dtype=np.uint8)
    if mem.size % elem_bytes:
        mem = np.pad(mem, (0, elem_bytes - mem.size % elem_bytes))
    words = mem.view(np.uint16 if elem_bytes == 2 else np.uint8)
    per_row = row_bytes // elem_bytes
    chars = len(str(int(words.max()))) if words.size else 1
    while per_row > 8 and table_px(per_row, max(chars, 3), compact=True) > FIT_PX:
        per_row //= 2                  # a row too long to fit is drawn over several lines
        max_rows *= 2
    row_bytes = per_row * elem_bytes
    n_rows = min(max_rows, -(-words.size // per_row))
    addr_lanes = addr_lanes or {}
    bad = set(int(a) for a in bad_addresses)
    chunk_owner: dict[int, int] = {}
    chunk_bad: set[int] = set()
    for a, ln in addr_lanes.items():
        for k in range(16 // elem_bytes):
            chunk_owner[(int(a) + k * elem_bytes) // elem_bytes] = ln[0]
            if int(a) in bad:
                chunk_bad.add((int(a) + k * elem_bytes) // elem_bytes)
    out = [f'<table style="{_TABLE}">', _caption(title), "<tr>", _th("byte")]
    out += [_th(c * elem_bytes) for c in range(per_row)]
    out.append("</tr>")
    for r in range(n_rows):
        out.append(f"<tr>{_th(r * row_bytes)}")
        for c in range(per_row):
            i = r * per_row + c
            if i >= words.size:
                out.append(_td(""))
                continue
            lane = chunk_owner.get(i)
            if i in chunk_bad:
                bg = WRONG_BG
            else:
                bg = lane_color(lane) if lane is not None else None
            tip = f"byte {i * elem_bytes}" + (f", row start given by lane(s) "
                                              f"{addr_lanes.get(i * elem_bytes, [lane])}"
                                              if lane is not None else "")
            out.append(_td(int(words[i]), bg=bg, title=tip))
        out.append("</tr>")
    out.append("</table>")
    return Html(fit("".join(out), per_row, max(chars, len(str((per_row - 1) * elem_bytes)))))


def bank_table_html(addresses: Sequence[int], *, bytes_per_lane: int = 16, banks: int = 32,
                    bank_bytes: int = 4, lanes: Sequence[int] | None = None,
                    phases: Sequence[int] | None = None, title: str | None = None) -> Html:
    """Which banks each lane's access touches: one row per lane, one column per bank. Lanes
    served together form a phase (``phases``, default: one phase); a bank that one phase needs
    for more than one distinct 4-byte word is a conflict, drawn red."""
    lanes = list(range(len(addresses))) if lanes is None else list(lanes)
    phases = [0] * len(addresses) if phases is None else list(phases)
    touch = np.zeros((len(lanes), banks), dtype=bool)
    words: dict[tuple[int, int], set[int]] = {}
    for i, a in enumerate(addresses):
        for w in range(int(a) // bank_bytes, (int(a) + bytes_per_lane) // bank_bytes):
            touch[i, w % banks] = True
            words.setdefault((phases[i], w % banks), set()).add(w)
    out = [f'<table style="{_TABLE}">', _caption(title), "<tr>", _th("lane"), _th("address")]
    out += [_th(b) for b in range(banks)]
    out.append("</tr>")
    for i, ln in enumerate(lanes):
        out.append(f"<tr>{_td(ln, bg=lane_color(ln))}{_td(int(addresses[i]))}")
        for b in range(banks):
            if touch[i, b]:
                clash = len(words[(phases[i], b)]) > 1
                out.append(_td("", bg=WRONG_BG if clash else lane_color(ln),
                               title=f"bank {b}" + (" (conflict)" if clash else "")))
            else:
                out.append(_td(""))
        out.append("</tr>")
    out.append("</table>")
    return Html(fit("".join(out), banks, 2, head_chars=14))


def id_grid_html(ids: np.ndarray, *, text: np.ndarray | None = None, title: str | None = None,
                 marked: np.ndarray | None = None, clash: np.ndarray | None = None,
                 tooltips: np.ndarray | None = None, row_label: str = "",
                 col_label: str = "", col_names: Sequence[str] | None = None) -> Html:
    """A grid of cells coloured by an id (a 16-byte chunk of a tile, a warp...), not by a lane.

    ``ids`` (2-D ints, -1 for an empty cell) pick the colours (one hue per id); ``text`` is what
    each cell shows (default: the id); ``marked`` outlines cells (e.g. the ones one instruction
    reads); ``clash`` draws cells red (e.g. a bank conflict); ``col_names`` replaces the column
    numbers in the header.
    """
    ids = np.asarray(ids)
    if ids.ndim != 2:
        raise ValueError(f"id_grid_html draws 2-D grids, got shape {ids.shape}")
    rows, cols = ids.shape
    heads = list(col_names) if col_names is not None else list(range(cols))
    out = [f'<table style="{_TABLE}">', _caption(title), "<tr>",
           _th(f"{row_label}\\{col_label}" if (row_label or col_label) else "")]
    out += [_th(h) for h in heads]
    out.append("</tr>")
    for r in range(rows):
        out.append(f"<tr>{_th(r)}")
        for c in range(cols):
            i = int(ids[r, c])
            bg = lane_color(4 * i) if i >= 0 else None
            border = "#000" if marked is not None and bool(marked[r, c]) else None
            if clash is not None and bool(clash[r, c]):
                bg, border = WRONG_BG, WRONG_BORDER
            shown = text[r, c] if text is not None else (i if i >= 0 else "")
            tip = str(tooltips[r, c]) if tooltips is not None else None
            out.append(_td(shown, bg=bg, border=border, title=tip, bold=border is not None))
        out.append("</tr>")
    out.append("</table>")
    chars = max([len(str(h)) for h in heads] + [len(str(text[r, c] if text is not None else
                                                         ids[r, c])) for r in range(rows)
                                                for c in range(cols)])
    return Html(fit("".join(out), cols, chars))


def row_flow_svg(num: int, trans: bool = False, *, addresses: Sequence[int] | None = None,
                 lane: int | None = None, row: int | None = None,
                 instruction: str = "ldmatrix", wrong_lanes: Iterable[int] = (),
                 wrong_targets: dict[int, tuple[int, int]] | None = None) -> Html:
    """Where each shared-memory row goes: the lane that gives its address (left), the row
    (middle), the lanes that receive it (right; for ``stmatrix`` the arrows point the other
    way). ``lane`` picks one lane: its rows stand out, the rest fade; ``row`` picks one row
    (``8 * matrix + row``) the same way, with its lanes outlined. ``wrong_lanes``: lanes
    whose address is wrong, drawn with a striped box; ``wrong_targets``: for such a lane, the
    (matrix, row) its address points at instead, drawn as a dashed red arrow."""
    frag = layouts.ldmatrix_fragment(num, trans)
    wrong = set(int(x) for x in wrong_lanes)
    if row is not None and not 0 <= int(row) < 8 * num:
        raise ValueError(f"row must be 0..{8 * num - 1} for .x{num}, got {row}")
    outlined_give, outlined_take = _row_flow_outlined(frag, lane, row)
    geo = _row_flow_geometry(num, frag, trans, addresses, lane, row, instruction)
    out = _row_flow_head(geo)
    body, strong = _row_flow_rows(frag, geo, lane, row)
    out += body + strong                          # strong arrows drawn last, over the faded
    out += _row_flow_wrong_arrows(geo, num, wrong_targets or {})
    out += _row_flow_lanes(geo, wrong, outlined_give, outlined_take)
    for k, line in enumerate(geo.note_lines):
        out.append(_svg_text(geo.x_give, geo.top + 32 * geo.pitch + 20 + 16 * k, line,
                             font_weight="600"))
    out.append("</svg>")
    return Html("".join(out))


def _row_flow_outlined(frag: layouts.FragmentLayout, lane: int | None,
                       row: int | None) -> tuple[set[int], set[int]]:
    """The lanes outlined (giving side, receiving side): the picked lane on both sides, or the
    lane giving the picked row (left) and the lanes receiving it (right)."""
    outlined_give = {lane} if lane is not None else set()
    outlined_take = set(outlined_give)
    if row is not None:
        outlined_give = {int(row)}
        outlined_take = set(frag.lanes_holding_row(int(row) // 8, int(row) % 8))
    return outlined_give, outlined_take


@dataclass(frozen=True)
class _RowFlowGeometry:
    """Where :func:`row_flow_svg` puts things: the three columns, the row boxes, the note."""

    n_rows: int
    labels: list[str]
    heads: tuple[str, str, str, str]       # giving lanes, rows, receiving lanes, registers
    row_w: float
    x_give: int
    x_row: float
    x_recv: float
    width: int
    height: int
    row_pitch: float
    note_lines: list[str]
    pitch: int = 15
    box: int = 12
    top: int = 34

    def lane_y(self, t: int) -> float:
        return self.top + t * self.pitch + self.box / 2

    def row_y(self, i: int) -> float:
        return self.top + i * self.row_pitch + self.row_pitch / 2


def _row_flow_geometry(num: int, frag: layouts.FragmentLayout, trans: bool,
                       addresses: Sequence[int] | None, lane: int | None, row: int | None,
                       instruction: str) -> _RowFlowGeometry:
    """Every box and column as wide as its longest label, so no text is cut off."""
    pitch, top = 15, 34
    n_rows = 8 * num
    labels = [f"matrix {i // 8} row {i % 8}" + (f" @ {int(addresses[i])}" if addresses is not None
                                                else "") for i in range(n_rows)]
    loads = instruction == "ldmatrix"
    head_give, head_row = "lane gives a row address", "shared-memory row (16 B)"
    head_recv = "lanes receive it" if loads else "lanes it comes from"
    head_regs = f"(register = matrix{', one column each' if trans else ''})"
    row_w = max(130, max(text_px(t) for t in labels) + 10)
    x_give = 10
    x_row = max(250, x_give + text_px(head_give, bold=True) + 20)
    x_recv = x_row + row_w + 140
    width = int(max(x_recv + 60, x_row - 20 + text_px(head_row, bold=True),
                    x_recv - 40 + max(text_px(head_recv, bold=True), text_px(head_regs)))) + 10
    note = _row_flow_note(frag, lane, row, instruction)
    note_lines = wrap_px(note, width - x_give - 10, bold=True) if note else []
    height = top + 32 * pitch + 10 + 16 * len(note_lines) + (4 if note_lines else 0)
    return _RowFlowGeometry(n_rows, labels, (head_give, head_row, head_recv, head_regs), row_w,
                            x_give, x_row, x_recv, width, height, (32 * pitch) / n_rows,
                            note_lines, pitch=pitch, top=top)


def _row_flow_head(geo: _RowFlowGeometry) -> list[str]:
    """The ``<svg>`` element, the striped pattern of wrong lanes and the column headings."""
    head_give, head_row, head_recv, head_regs = geo.heads
    width, height = geo.width, geo.height
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
            '<defs><pattern id="wrong" width="6" height="6" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/>'
            '<rect width="3" height="6" fill="#ff9c9c"/></pattern></defs>',
            f'<text x="{geo.x_give}" y="12" font-weight="600">{head_give}</text>',
            f'<text x="{geo.x_row - 20}" y="12" font-weight="600">{head_row}</text>',
            f'<text x="{geo.x_recv - 40}" y="12" font-weight="600">{head_recv}</text>',
            f'<text x="{geo.x_recv - 40}" y="25" fill="#555">{escape(head_regs)}</text>']


def _row_flow_rows(frag: layouts.FragmentLayout, geo: _RowFlowGeometry, lane: int | None,
                   row: int | None) -> tuple[list[str], list[str]]:
    """Each row's box and its arrows: ``(body, strong)``, the arrows of the picked lane or row
    in ``strong`` so that they can be drawn over the faded ones."""
    faded = "#e2e2e2"
    picked = lane is not None or row is not None
    out: list[str] = []
    strong: list[str] = []
    x_give, x_row, x_recv, row_w = geo.x_give, geo.x_row, geo.x_recv, geo.row_w
    for i in range(geo.n_rows):
        m, r = divmod(i, 8)
        giver = i                                     # lane 8m + r gives row r of matrix m
        if row is not None:
            related = i == int(row)
        else:
            related = lane is None or lane == giver or lane in frag.lanes_holding_row(m, r)
        # one row picked out: its arrows dark, so that a pale lane colour still shows
        colour = ("#333" if picked else lane_color(giver)) if related else faded
        width = 2 if related else 1
        lines = [f'<line x1="{x_give + 48}" y1="{geo.lane_y(giver)}" x2="{x_row}" '
                 f'y2="{geo.row_y(i)}" stroke="{colour}" stroke-width="{width}"/>']
        for t in frag.lanes_holding_row(m, r):
            lines.append(f'<line x1="{x_row + row_w}" y1="{geo.row_y(i)}" x2="{x_recv}" '
                         f'y2="{geo.lane_y(t)}" stroke="{colour}" stroke-width="{width}" '
                         'stroke-opacity="0.8"/>')
        (strong if related and picked else out).extend(lines)
        label = geo.labels[i]
        out.append(f'<rect x="{x_row}" y="{geo.row_y(i) - geo.row_pitch / 2 + 1}" '
                   f'width="{row_w}" height="{geo.row_pitch - 2}" rx="2" '
                   f'fill="{lane_color(giver) if related else "#f4f4f4"}" '
                   f'stroke="#999"><title>{escape(label)}, address from lane {giver}</title></rect>')
        out.append(f'<text x="{x_row + 4}" y="{geo.row_y(i) + 4}">{escape(label)}</text>')
    return out, strong


def _row_flow_wrong_arrows(geo: _RowFlowGeometry, num: int,
                           wrong_targets: dict[int, tuple[int, int]]) -> list[str]:
    """A dashed red arrow from each wrong lane to the row its address points at instead."""
    out = []
    for t, (m, r) in wrong_targets.items():
        if 0 <= m < num and 0 <= r < 8:
            out.append(f'<line x1="{geo.x_give + 48}" y1="{geo.lane_y(t)}" x2="{geo.x_row}" '
                       f'y2="{geo.row_y(8 * m + r)}" stroke="#b00000" stroke-width="2" '
                       f'stroke-dasharray="5,3"><title>lane {t}: your address points at matrix '
                       f'{m} row {r}</title></line>')
    return out


def _row_flow_lanes(geo: _RowFlowGeometry, wrong: set[int], outlined_give: set[int],
                    outlined_take: set[int]) -> list[str]:
    """The 32 lane boxes on both sides: giving lanes (left), receiving lanes (right)."""
    out = []
    x_give, x_recv, top, pitch, box = geo.x_give, geo.x_recv, geo.top, geo.pitch, geo.box
    for t in range(32):
        gives = t < geo.n_rows
        fill = ("url(#wrong)" if t in wrong else lane_color(t)) if gives else "#f4f4f4"
        stroke = "#b00000" if t in wrong else ("#000" if t in outlined_give else "#999")
        out.append(f'<rect x="{x_give}" y="{top + t * pitch}" width="48" height="{box}" rx="2" '
                   f'fill="{fill}" stroke="{stroke}"><title>lane {t}'
                   f'{"" if gives else " (its address is ignored)"}'
                   f'{", wrong address" if t in wrong else ""}</title></rect>')
        out.append(f'<text x="{x_give + 4}" y="{top + t * pitch + 10}" '
                   f'fill="{"#000" if gives else "#999"}">lane {t}</text>')
        out.append(f'<rect x="{x_recv}" y="{top + t * pitch}" width="48" height="{box}" rx="2" '
                   f'fill="{lane_color(t)}" stroke="{"#000" if t in outlined_take else "#999"}"/>')
        out.append(f'<text x="{x_recv + 4}" y="{top + t * pitch + 10}">lane {t}</text>')
    return out


def text_px(text: str, size: float = 11, *, bold: bool = False) -> float:
    """About how wide ``text`` is drawn in a sans-serif font of ``size`` px: an upper bound for
    digits and lower-case letters (0.62 em, bold 0.68 em), so a picture sized with it keeps its
    labels inside."""
    return len(str(text)) * size * (0.68 if bold else 0.62)


def wrap_px(text: str, px: float, size: float = 11, *, bold: bool = False) -> list[str]:
    """``text`` broken at spaces into lines of at most ``px`` pixels (see :func:`text_px`)."""
    lines: list[str] = []
    for word in str(text).split(" "):
        if lines and text_px(lines[-1] + " " + word, size, bold=bold) <= px:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _row_flow_note(frag: layouts.FragmentLayout, lane: int | None, row: int | None,
                   instruction: str) -> str:
    """One line saying what the picked row or lane does."""
    loads = instruction == "ldmatrix"
    if row is not None:
        m, r = divmod(int(row), 8)
        lanes = frag.lanes_holding_row(m, r)
        return (f"matrix {m} row {r}: its address from lane {int(row)}; "
                f"{'it lands in' if loads else 'it comes from'} lanes {lane_list(lanes)}")
    if lane is not None:
        role = layouts.address_role(int(lane), frag.matrices)
        rows = [f"{m}.{r}" for m in range(frag.matrices) for r in range(8)
                if int(lane) in frag.lanes_holding_row(m, r)]
        gives = (f"gives the address of matrix {role[0]} row {role[1]}" if role else
                 "gives no address (ignored)")
        return (f"lane {int(lane)} {gives}; {'receives' if loads else 'stores'} part of rows "
                f"(matrix.row) {', '.join(rows)}")
    return ""


def lane_list(lanes: Iterable[int]) -> str:
    """Lanes in words (``0, 1, 4-7``), worded as every report of the project words them."""
    return number_runs(lanes)


# ---------------------------------------------------------------------------------------------
# SVG pictures of whole fragments: movmatrix before/after, the three mma operands side by side
# ---------------------------------------------------------------------------------------------

_SVG_HEAD = ('<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             'viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">')
_ARROW = ('<marker id="{id}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" '
          'markerHeight="6" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
          'fill="{colour}"/></marker>')
_FADED = "0.28"


def _svg_text(x: float, y: float, text: str, **attrs) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{escape(v)}"' for k, v in attrs.items())
    return f'<text x="{x:g}" y="{y:g}"{extra}>{escape(text)}</text>'


#: movmatrix_svg's grid: cell width and height, row-heading width, top of the cells, gap
#: between the two grids.
_MV_CW, _MV_CH, _MV_HEAD_W, _MV_TOP, _MV_GAP = 37, 30, 62, 52, 110
#: element of A held at fragment place (r, c): A[r][c] before, A[c][r] after the move
_MV_HELD = {"before": lambda r, c: (r, c), "after": lambda r, c: (c, r)}
_MV_TITLES = {"before": "before: register a (lane t holds row t // 4 of A)",
              "after": "after movmatrix: register d (lane t holds column t // 4 of A)"}


def movmatrix_svg(lane: int | None = None, *,
                  values: tuple[np.ndarray, np.ndarray] | None = None) -> Html:
    """``movmatrix.sync.aligned.m8n8.trans.b16 d, a`` as two grids of the same fragment: the
    register ``a`` before (lane ``t`` holds row ``t // 4`` of A) and ``d`` after (the same
    places now hold Aᵀ). Every element keeps the colour of the lane that held it before, so the
    transpose shows as colours turning from rows into columns.

    ``lane`` picks one lane: the two elements it gives and the two it receives stand out, with
    arrows from where each element was to where it lands. ``values``: the registers ``(a, d)``
    (``(32,)`` uint32 each, from a kernel) to print in the cells instead of ``row,col`` of A.
    """
    frag = layouts.movmatrix_fragment()
    if lane is not None and not 0 <= int(lane) < layouts.WARP_SIZE:
        raise ValueError(f"lane must be 0..31, got {lane}")
    grid_w = _MV_HEAD_W + 8 * _MV_CW
    x0 = (5, 5 + grid_w + _MV_GAP)                   # left edge of the before / after grids
    lines_below = 3 if lane is not None else 1
    height = _MV_TOP + 8 * _MV_CH + 14 + 16 * lines_below
    width = 2 * grid_w + _MV_GAP + 10
    regs = None if values is None else [np.asarray(v, dtype=np.uint32).reshape(-1)
                                        for v in values]
    out = [_SVG_HEAD.format(w=width, h=height),
           "<defs>" + _ARROW.format(id="mv-give", colour="#000") +
           _ARROW.format(id="mv-take", colour="#555") + "</defs>"]
    moved = _movmatrix_moved(frag, lane)
    for i, grid in enumerate(("before", "after")):
        out += _movmatrix_grid(frag, grid, i, x0[i], lane, regs, moved)
    notes = ["the colour of an element is the lane that held it before: rows of colour "
             "become columns"]
    if lane is not None:
        out += _movmatrix_arrows(frag, int(lane), x0)
        notes = _movmatrix_lane_notes(frag, int(lane)) + notes
    for k, note in enumerate(notes):
        out.append(_svg_text(5, _MV_TOP + 8 * _MV_CH + 16 + 16 * k, note, font_size="11"))
    out.append("</svg>")
    return Html("".join(out))


def _movmatrix_moved(frag: layouts.FragmentLayout,
                     lane: int | None) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """``(gives, takes)``: the places in "before" of the elements ``lane`` gives and of those it
    receives (both empty when no lane is picked)."""
    gives: set[tuple[int, int]] = set()
    takes: set[tuple[int, int]] = set()
    if lane is not None:
        for h in range(2):
            _, r, c = frag.element(int(lane), 0, h)
            gives.add((r, c))
            takes.add((c, r))
    return gives, takes


def _movmatrix_grid(frag: layouts.FragmentLayout, grid: str, i: int, gx: int,
                    lane: int | None, regs: list[np.ndarray] | None,
                    moved: tuple[set[tuple[int, int]], set[tuple[int, int]]]) -> list[str]:
    """One of the two grids (``grid`` is "before" or "after", ``i`` its index): title, column
    and row headings, and the 64 cells."""
    gives, takes = moved
    out = [_svg_text(gx, 14, _MV_TITLES[grid], font_weight="600"),
           _svg_text(gx, 30, "cells: the element of A (row,col) each half holds" if
                     regs is None else "cells: the 16-bit value each half holds",
                     fill="#555", font_size="10")]
    for t in range(4):
        out.append(_svg_text(gx + _MV_HEAD_W + (2 * t + 1) * _MV_CW, _MV_TOP - 6,
                             f"t = {t}: lo | hi", text_anchor="middle", font_size="10",
                             fill="#555"))
    for r in range(8):
        out.append(_svg_text(gx + 2, _MV_TOP + r * _MV_CH + _MV_CH / 2 + 4,
                             f"lanes {4 * r}-{4 * r + 3}", font_size="10", fill="#555"))
        for c in range(8):
            owner = frag.owner(0, r, c)[0]
            # before: what the lane gives and what it will receive; after: what it
            # received and where what it gave landed
            picked = lane is None or (
                (grid == "before" and (r, c) in gives | takes) or
                (grid == "after" and (owner == int(lane) or (c, r) in gives)))
            out.append(_movmatrix_cell(frag, grid, i, gx, r, c, regs, picked,
                                       lane is not None and picked))
    return out


def _movmatrix_cell(frag: layouts.FragmentLayout, grid: str, i: int, gx: int, r: int, c: int,
                    regs: list[np.ndarray] | None, picked: bool, outlined: bool) -> str:
    """The cell at fragment place (r, c) of one grid: coloured by the lane that held its
    element before the move, labelled with the element (or its value), faded unless
    ``picked``."""
    cw, ch = _MV_CW, _MV_CH
    owner, _, half = frag.owner(0, r, c)
    er, ec = _MV_HELD[grid](r, c)
    giver = frag.owner(0, er, ec)[0]          # the lane that held A[er][ec] before
    label = (f"{er},{ec}" if regs is None else
             str(int(regs[i][owner]) >> (16 * half) & 0xFFFF))
    x, y = gx + _MV_HEAD_W + c * cw, _MV_TOP + r * ch
    stroke = "#000" if outlined else "#999"
    tip = (f"lane {owner}, {'high' if half else 'low'} half of "
           f"{'a' if grid == 'before' else 'd'}: A[{er}][{ec}]"
           + (f" (held by lane {giver} before)" if grid == "after" else ""))
    return (f'<g data-grid="{grid}" data-lane="{owner}" data-half="{half}" '
            f'data-row="{r}" data-col="{c}" data-elem="{er},{ec}" '
            f'opacity="{1 if picked else _FADED}">'
            f'<rect x="{x}" y="{y}" width="{cw}" height="{ch}" fill="{lane_color(giver)}" '
            f'stroke="{stroke}" stroke-width="{2 if stroke == "#000" else 1}">'
            f'<title>{escape(tip)}</title></rect>'
            + _svg_text(x + cw / 2, y + 13, label, text_anchor="middle")
            + _svg_text(x + cw / 2, y + 25, f"L{owner}", text_anchor="middle",
                        font_size="8", fill="#444")
            + "</g>")


def _movmatrix_arrows(frag: layouts.FragmentLayout, L: int, x0: tuple[int, int]) -> list[str]:
    """For lane ``L``: a solid arrow from each element it gives to where it lands in ``d``, a
    dashed one from each element it receives to its place in ``d``."""
    cw, ch = _MV_CW, _MV_CH

    def centre(grid: str, r: int, c: int) -> tuple[float, float]:
        i = 0 if grid == "before" else 1
        return x0[i] + _MV_HEAD_W + c * cw + cw / 2, _MV_TOP + r * ch + ch / 2

    out = []
    for h in range(2):
        _, r, c = frag.element(L, 0, h)
        # L gives A[r][c] (before, at (r, c)); it lands at place (c, r) of d
        (bx, by), (ax, ay) = centre("before", r, c), centre("after", c, r)
        out.append(f'<line x1="{bx}" y1="{by}" x2="{ax - cw / 2 + 3}" y2="{ay}" '
                   'stroke="#000" stroke-width="2" marker-end="url(#mv-give)" '
                   f'data-arrow="gives"><title>lane {L} gives A[{r}][{c}] to lane '
                   f'{frag.owner(0, c, r)[0]}</title></line>')
        # L receives, at place (r, c) of d, A[c][r], held before at place (c, r)
        (bx, by), (ax, ay) = centre("before", c, r), centre("after", r, c)
        out.append(f'<line x1="{bx}" y1="{by}" x2="{ax - cw / 2 + 3}" y2="{ay}" '
                   'stroke="#555" stroke-width="2" stroke-dasharray="5,3" '
                   f'marker-end="url(#mv-take)" data-arrow="receives"><title>lane {L} '
                   f'receives A[{c}][{r}] from lane {frag.owner(0, c, r)[0]}</title></line>')
    return out


def _movmatrix_lane_notes(frag: layouts.FragmentLayout, L: int) -> list[str]:
    """The two lines under the grids saying what lane ``L`` gives and receives."""
    lo, hi = (frag.element(L, 0, h)[1:] for h in range(2))
    senders = [frag.owner(0, c, r) for r, c in (lo, hi)]
    return [f"lane {L} gives A[{lo[0]}][{lo[1]}] and A[{hi[0]}][{hi[1]}] (solid arrows)",
            f"lane {L} receives A[{lo[1]}][{lo[0]}] from lane {senders[0][0]} "
            f"({'high' if senders[0][2] else 'low'} half) and A[{hi[1]}][{hi[0]}] "
            f"from lane {senders[1][0]} ({'high' if senders[1][2] else 'low'} half) "
            "(dashed arrows)"]


def _reg_names(op: str, regs: int) -> str:
    return f"{op}0" if regs == 1 else f"{op}0-{op}{regs - 1}"


def _span(points: list[tuple[int, int]], name: str) -> str:
    """``A[3][4..5]`` for the elements of one register (consecutive along a row or a column)."""
    rows = sorted({r for r, _ in points})
    cols = sorted({c for _, c in points})
    if len(rows) == 1:
        cols_text = str(cols[0]) if len(cols) == 1 else f"{cols[0]}..{cols[-1]}"
        return f"{name}[{rows[0]}][{cols_text}]"
    if len(cols) == 1:
        return f"{name}[{rows[0]}..{rows[-1]}][{cols[0]}]"
    return ", ".join(f"{name}[{r}][{c}]" for r, c in points)


#: mma_fragments_svg's grid: cell width and height, row-heading width, heading height above the
#: cells, gap between panels.
_MMA_CW, _MMA_CH, _MMA_HEAD_W, _MMA_HEAD_H, _MMA_GAP = 22, 18, 24, 34, 26


def mma_fragments_svg(form: layouts.MmaForm | Sequence[str], lane: int | None = None, *,
                      budget: int = FIT_PX) -> Html:
    """The fragments of one ``mma.sync`` variant, A, B and C/D side by side (wrapped to a second
    row when they do not fit ``budget`` pixels), every cell naming the lane that holds it, in
    that lane's colour in all three. Thick lines part the registers. ``lane`` picks one lane:
    its cells show ``register.element`` and a line per operand lists what it holds."""
    if not isinstance(form, layouts.MmaForm):
        form = layouts.mma_form(*form)
    if lane is not None and not 0 <= int(lane) < layouts.WARP_SIZE:
        raise ValueError(f"lane must be 0..31, got {lane}")
    cd = "C/D" if form.ctype == form.dtype else "C"
    panels = [("a", "A", form.a, "m", "k", form.atype), ("b", "B", form.b, "k", "n", form.btype),
              ("c", cd, form.c, "m", "n", form.ctype)]
    places, y, row_h = _place_panels([p[2] for p in panels], budget)
    width = max(px + _MMA_HEAD_W + p[2].cols * _MMA_CW for p, (px, _) in zip(panels, places)) + 5
    notes = 4 if lane is not None else 1
    height = y + row_h + 8 + 16 * notes
    out = [_SVG_HEAD.format(w=width, h=height),
           _svg_text(5, 13, form.ptx, font_weight="600", font_family="monospace")]
    for panel, place in zip(panels, places):
        out += _mma_panel(panel, place, lane)
    out += _mma_notes(panels, lane, y + row_h + 18)
    out.append("</svg>")
    return Html("".join(out))


def _place_panels(lays: list[layouts.FragmentLayout],
                  budget: int) -> tuple[list[tuple[int, int]], int, int]:
    """Each panel's top-left corner, left to right, a new row when the next one would pass
    ``budget``; with the last row's top and height."""
    places, x, y, row_h = [], 5, 22, 0
    for lay in lays:
        w, h = _MMA_HEAD_W + lay.cols * _MMA_CW, _MMA_HEAD_H + lay.rows * _MMA_CH
        if x > 5 and x + w > budget:
            x, y, row_h = 5, y + row_h + 14, 0
        places.append((x, y))
        x, row_h = x + w + _MMA_GAP, max(row_h, h)
    return places, y, row_h


def _mma_panel(panel: tuple, place: tuple[int, int], lane: int | None) -> list[str]:
    """One operand's panel: its title, the column and row numbers, the cells, the lines
    between registers and a frame."""
    op, name, lay, rl, cl, ty = panel
    px, py = place
    cw, ch = _MMA_CW, _MMA_CH
    out = [_svg_text(px, py + 10, f"{name} ({lay.rows} x {lay.cols}, {rl} x {cl}), "
                     f"{ty}: {_reg_names(op, lay.regs)}", font_weight="600")]
    gx, gy = px + _MMA_HEAD_W, py + _MMA_HEAD_H
    for c in range(lay.cols):
        if lay.cols <= 16 or c % 4 == 0:
            out.append(_svg_text(gx + c * cw + cw / 2, gy - 5, str(c), text_anchor="middle",
                                 font_size="9", fill="#555"))
    out.append(_svg_text(px, gy - 5, f"{rl}\\{cl}", font_size="9", fill="#555"))
    for r in range(lay.rows):
        out.append(_svg_text(gx - 4, gy + r * ch + 13, str(r), text_anchor="end",
                             font_size="9", fill="#555"))
        for c in range(lay.cols):
            out.append(_mma_cell(op, name, lay, r, c, gx, gy, lane))
    out += _register_borders(lay, gx, gy)
    out.append(f'<rect x="{gx}" y="{gy}" width="{lay.cols * cw}" height="{lay.rows * ch}" '
               'fill="none" stroke="#333" stroke-width="2"/>')
    return out


def _mma_cell(op: str, name: str, lay: layouts.FragmentLayout, r: int, c: int, gx: int,
              gy: int, lane: int | None) -> str:
    """The cell at (r, c) of one operand: the lane holding it (or, for the picked lane, its
    ``register.element``), in that lane's colour, faded when another lane is picked."""
    cw, ch = _MMA_CW, _MMA_CH
    ln, rg, el = (int(v) for v in lay.owners[0][r, c])
    picked = lane is None or ln == int(lane)
    cx, cy = gx + c * cw, gy + r * ch
    text = str(ln) if lane is None or ln != int(lane) else (
        f"{op}{rg}" + (f".{el}" if lay.elems_per_reg > 1 else ""))
    stroke = "#000" if lane is not None and picked else "#bbb"
    return (f'<g data-op="{op}" data-lane="{ln}" data-reg="{rg}" data-elem="{el}" '
            f'data-row="{r}" data-col="{c}" opacity="{1 if picked else _FADED}">'
            f'<rect x="{cx}" y="{cy}" width="{cw}" height="{ch}" fill="{lane_color(ln)}" '
            f'stroke="{stroke}" stroke-width="{2 if stroke == "#000" else 0.5}">'
            f'<title>{escape(f"lane {ln}, {op}{rg}, element {el}: {name}[{r}][{c}]")}'
            f'</title></rect>'
            + _svg_text(cx + cw / 2, cy + 13, text, text_anchor="middle",
                        font_size="10" if len(text) <= 3 else "8")
            + "</g>")


def _register_borders(lay: layouts.FragmentLayout, gx: int, gy: int) -> list[str]:
    """Thick lines where a neighbouring element sits in another register."""
    cw, ch = _MMA_CW, _MMA_CH
    owners = lay.owners[0]                          # (rows, cols, 3)
    out = []
    for r in range(lay.rows):
        for c in range(lay.cols):
            rg = owners[r, c, 1]
            if c + 1 < lay.cols and owners[r, c + 1, 1] != rg:
                xx = gx + (c + 1) * cw
                out.append(f'<line x1="{xx}" y1="{gy + r * ch}" x2="{xx}" '
                           f'y2="{gy + (r + 1) * ch}" stroke="#333" stroke-width="2"/>')
            if r + 1 < lay.rows and owners[r + 1, c, 1] != rg:
                yy = gy + (r + 1) * ch
                out.append(f'<line x1="{gx + c * cw}" y1="{yy}" x2="{gx + (c + 1) * cw}" '
                           f'y2="{yy}" stroke="#333" stroke-width="2"/>')
    return out


def _mma_notes(panels: list[tuple], lane: int | None, ny: int) -> list[str]:
    """The lines under the panels: how to read a cell, or what the picked lane holds."""
    if lane is None:
        return [_svg_text(5, ny, "each cell: the lane holding it (hover: register and "
                          "element); thick lines part the registers", fill="#555")]
    L = int(lane)
    out = [_svg_text(5, ny, f"lane {L}: group g = {L // 4}, t = {L % 4}", font_weight="600")]
    for k, (op, name, lay, *_rest) in enumerate(panels):
        parts = []
        for rg in range(lay.regs):
            pts = [lay.element(L, rg, e)[1:] for e in range(lay.elems_per_reg)]
            parts.append(f"{op}{rg} = {_span(pts, name.split('/')[0])}")
        out.append(_svg_text(5, ny + 16 * (k + 1), "; ".join(parts), font_family="monospace",
                             font_size="10"))
    return out
