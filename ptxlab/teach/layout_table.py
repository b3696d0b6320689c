"""Text pictures of a matrix instruction's layout, drawn from :mod:`ptxlab.model.matrix_forms`.

Two views of the same byte map: shared memory (one line per 16-byte row, each cell naming the
lane, register and byte that receives or stores it) and registers (one line per lane, each byte
naming its matrix, row and column). ``ptxlab layout`` prints them; notebooks may too.
"""
from __future__ import annotations

from ..model import matrix_forms
from ..model.matrix_forms import MatrixForm


def describe(f: MatrixForm) -> str:
    """One paragraph: what the form moves, where it is legal."""
    if f.op == "movmatrix":
        what = ("transposes one 8x8 matrix of 16-bit elements held in registers (one register "
                "per lane): d = a^T")
    else:
        unit = ("16 packed {}-bit elements + {} bits padding, each unpacked into its own byte"
                .format(*((6, 32) if f.dtype == "b6x16_p32" else (4, 64))) if f.packed
                else ("8 16-bit elements" if f.dtype == "b16" else "16 8-bit elements"))
        verb = "loads" if f.op == "ldmatrix" else "stores"
        what = (f"{verb} {f.num} matrix(es); each is {f.rows_per_matrix} shared-memory rows of "
                f"16 bytes ({unit}); lanes 0-{f.address_lane_count - 1} give the row addresses; "
                f"each lane {'receives' if f.op == 'ldmatrix' else 'gives'} {f.regs} register(s)"
                + (" (.trans: the matrix is transposed on the way)" if f.trans else ""))
    where = "needs " + targets_and_versions(f)
    if f.blackwell:
        where += " (no GPU here runs it: the CPU model does)"
    return f"{f.ptx}\n  {what}\n  {where}"


def targets_and_versions(f: MatrixForm) -> str:
    """The targets ptxas 13 accepts ``f`` on, grouped by the oldest ``.version`` each needs
    (``sm_100a .version 8.6+; sm_120a .version 8.7+; ...``): the form and the target each set
    a floor, and the later one counts."""
    by_version: dict[tuple[int, int], list[str]] = {}
    for target, ver in matrix_forms.oldest_versions(f).items():
        by_version.setdefault(ver, []).append(target)
    return "; ".join(f"{'/'.join(ts)} .version {v[0]}.{v[1]}+"
                     for v, ts in sorted(by_version.items()))


def _cell(lane: int, reg: int, byte: int) -> str:
    return f"L{lane}r{reg}b{byte}"


def shared_view(f: MatrixForm) -> str:
    """One line per shared-memory row: which lane/register/byte holds each of its 16 columns."""
    bm = matrix_forms.byte_map(f)
    roles = matrix_forms.address_lanes(f)
    rows: dict[tuple[int, int], dict[int, str]] = {}
    for lane in range(bm.shape[0]):
        for reg in range(bm.shape[1]):
            for byte in range(4):
                m, r, c = (int(x) for x in bm[lane, reg, byte])
                rows.setdefault((m, r), {})[c] = _cell(lane, reg, byte)
    addr_of = {(int(m), int(r)): lane for lane, (m, r) in enumerate(roles) if m >= 0}
    ncols = 1 + max(c for cells in rows.values() for c in cells)
    width = max(len(s) for cells in rows.values() for s in cells.values())
    col_name = "elem" if f.packed else "byte"
    if f.op == "movmatrix":
        title = ("source matrix a (8 rows of 16 bytes, as the standard fragment holds it): "
                 "cell = lane/register/byte of d that receives the byte")
        head = "row      |"
    else:
        flows = "receives" if f.op == "ldmatrix" else "stores"
        title = (f"shared memory: one line per 16-byte row (named by the lane whose address "
                 f"gives it); cell = the lane L, register r, byte b that {flows} it"
                 + (f"; columns are packed elements" if f.packed else ""))
        head = "m.row  addr lane |"
    lines = [title, head + "".join(f" {col_name[0]}{c:<{width - 1}}" for c in range(ncols))]
    for (m, r) in sorted(rows):
        label = (f"{r:<8} |" if f.op == "movmatrix"
                 else f"{m}.{r:<4} lane {addr_of[(m, r)]:>2}   |")
        lines.append(label + "".join(f" {rows[(m, r)].get(c, '-'):<{width}}"
                                     for c in range(ncols)))
    return "\n".join(lines)


def register_view(f: MatrixForm) -> str:
    """One line per lane: each register's bytes 3..0 as ``matrix.row.col``."""
    bm = matrix_forms.byte_map(f)
    roles = matrix_forms.address_lanes(f)
    lines = ["registers: one line per lane; each register shown byte 3 .. byte 0 "
             "(byte 0 least significant), each byte as matrix.row.col"]
    for lane in range(bm.shape[0]):
        m, r = roles[lane]
        addr = f"addr m{m}.r{r:<2}" if m >= 0 else ("addr  -    " if f.op != "movmatrix" else "")
        regs = []
        for reg in range(bm.shape[1]):
            cells = [".".join(str(int(x)) for x in bm[lane, reg, b]) for b in (3, 2, 1, 0)]
            regs.append(f"r{reg}[" + " ".join(f"{c:>7}" for c in cells) + "]")
        lines.append(f"lane {lane:>2} {addr} " + " ".join(regs))
    return "\n".join(lines)


def render_text(f: MatrixForm) -> str:
    """The whole picture: description, shared-memory view, register view."""
    return "\n\n".join([describe(f), shared_view(f), register_view(f)])


def render_mma_text(form) -> str:
    """An mma variant's four fragments: one line per lane, each register's elements (highest
    first) as ``row.col`` of A (MxK), B (KxN), C and D (MxN)."""
    lines = [f"{form.ptx}\n  D = A*B + C, M={form.m} N={form.n} K={form.k}; no addresses: every "
             "operand is in registers; each register shown highest element first, as row.col"]
    for name in ("A", "B", "C", "D"):
        lay = getattr(form, name.lower())
        lines.append(f"\n{name} ({lay.rows}x{lay.cols}, {lay.elem_bits}-bit elements, "
                     f"{lay.regs} register(s) per lane)")
        for lane in range(lay.coords.shape[0]):
            regs = []
            for reg in range(lay.regs):
                cells = [f"{int(lay.coords[lane, reg, e, 1])}.{int(lay.coords[lane, reg, e, 2])}"
                         for e in reversed(range(lay.elems_per_reg))]
                regs.append(f"r{reg}[" + " ".join(f"{c:>5}" for c in cells) + "]")
            lines.append(f"lane {lane:>2} " + " ".join(regs))
    return "\n".join(lines)
