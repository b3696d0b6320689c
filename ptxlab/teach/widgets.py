"""Interactive views for the notebooks: a per-lane address table, a fragment map, a bank view,
and a player that steps a picture lane by lane.

The first three redraw as soon as a control changes or the learner types a formula, and colour
the lanes whose formula disagrees with the layout red. All layout knowledge comes from
:mod:`ptxlab.model.layouts` (through :mod:`ptxlab.teach.exercises.tiles` for where matrices sit
in a tile); all drawing from :mod:`ptxlab.teach.render`. The computing parts (``rows()``,
``wrong_cells()``) work without ipywidgets, which keeps them testable and lets the HTML be
produced anywhere.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..model import banks, cute_atoms, layouts
from . import render
from . import tiles

__all__ = ["AddressTable", "FragmentMap", "BankView", "LanePlayer", "evaluate_formula",
           "ARRANGEMENTS", "FRAGMENTS"]

#: Tile arrangements offered by the address table: name -> (placement for num, fixed num or None,
#: .trans the arrangement calls for or None).
ARRANGEMENTS: dict[str, tuple[Callable[[int], tiles.Placement], int | None, bool | None]] = {
    "matrices stacked (rows 8i..8i+7)": (tiles.stacked, None, None),
    "matrices side by side (cols 8i..8i+7)": (tiles.side_by_side, None, None),
    "A of m16n8k16 (16x16, row-major)": (lambda n: tiles.mma_a(), 4, False),
    "B of m16n8k16 stored row-major (.trans)": (lambda n: tiles.mma_b_row_major(), 2, True),
    "B of m16n8k16 stored column-major": (lambda n: tiles.mma_b_col_major(), 2, False),
    "C/D f16 of m16n8k16 (stmatrix)": (lambda n: tiles.mma_cd_f16(), 2, False),
    "C/D f16 of m16n8k16 stored column-major (stmatrix .trans)":
        (lambda n: tiles.mirrored(tiles.mma_cd_f16()), 2, True),
    "16x16 tile transposed (A's blocks mirrored)": (lambda n: tiles.mirrored(tiles.mma_a()), 4, False),
}

_SAFE_BUILTINS = {"abs": abs, "min": min, "max": max, "int": int, "divmod": divmod,
                  "range": range, "len": len, "pow": pow, "round": round}


def evaluate_formula(formula, names: dict) -> tuple[object, str]:
    """Evaluate a learner's formula: a Python expression (string) over ``names`` or a callable
    taking them positionally. Returns ``(value, "")`` or ``(None, error text)``."""
    if formula is None or (isinstance(formula, str) and not formula.strip()):
        return None, ""
    try:
        if callable(formula):
            return formula(*names.values()), ""
        code = compile(formula, "<formula>", "eval")
        env = {"__builtins__": _SAFE_BUILTINS, "math": math}
        return eval(code, env, dict(names)), ""  # noqa: S307 - the learner's own expression
    except NotImplementedError:
        return None, "not implemented yet"
    except SyntaxError as exc:
        return None, f"syntax error: {exc.msg}"
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def formula_problem(formula) -> str:
    """What makes a typed formula unusable as a whole (it does not compile), else ``""``."""
    if not isinstance(formula, str) or not formula.strip():
        return ""
    try:
        compile(formula, "<formula>", "eval")
    except SyntaxError as exc:
        return f"syntax error: {exc.msg}"
    return ""


def _as_int(v) -> int | None:
    if isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)) and math.isfinite(v) and v == int(v):
        return int(v)
    return None


def _widgets():
    try:
        import ipywidgets
    except ImportError as exc:  # pragma: no cover - the course extra installs it
        raise ImportError("the interactive views need ipywidgets: pip install ipywidgets") from exc
    return ipywidgets


class _StaticFallback:
    """A view shown as two outputs: its controls (a widget) and its picture (plain HTML, which
    the controls redraw in place). Where widgets do not run, in an exported notebook (nbconvert
    HTML, nbgrader's feedback) or a file reopened without its kernel, the picture still shows,
    as it was last drawn, and the controls say in one line where they run. A subclass builds
    ``self.controls``, draws in ``refresh()`` and ends it with ``self._redrawn()``."""

    controls: object

    def static_html(self) -> str:
        """The picture as it is drawn now (status line included)."""
        raise NotImplementedError

    def settings(self) -> str:
        """The controls' values in words, for where the controls cannot be drawn."""
        return ""

    @property
    def widget(self):
        """The controls (the ipywidgets box), for code that places the view in its own layout."""
        return self.controls

    def _picture(self):
        from IPython.display import HTML

        return HTML(self.static_html())

    def _redrawn(self) -> None:
        for handle in getattr(self, "_handles", []):
            handle.update(self._picture())

    def _ipython_display_(self) -> None:
        from IPython.display import display

        bundle = self.controls._repr_mimebundle_()
        data = dict(bundle[0] if isinstance(bundle, tuple) else bundle)
        settings = self.settings()
        data["text/plain"] = (f"({type(self).__name__}{': ' + settings if settings else ''}; "
                              "its controls run in JupyterLab)")
        display(data, raw=True)
        self.__dict__.setdefault("_handles", []).append(
            display(self._picture(), display_id=True))


class AddressTable(_StaticFallback):
    """Per-lane row addresses of ldmatrix/stmatrix for a tile in shared memory.

    Pick ``.num``, ``.trans``, the tile's base and row stride, and an arrangement; type a formula
    over ``lane, num, base, stride`` to compare yours lane by lane.
    """

    def __init__(self, formula=None, *, num: int = 4, trans: bool = False, base: int = 0,
                 stride: int = 16, arrangement: str = "matrices stacked (rows 8i..8i+7)",
                 instruction: str = "ldmatrix", show_memory: bool = True):
        w = _widgets()
        if arrangement not in ARRANGEMENTS:
            raise ValueError(f"unknown arrangement {arrangement!r}; pick one of {list(ARRANGEMENTS)}")
        self.instruction = instruction
        self.show_memory = show_memory
        self._callable = formula if callable(formula) else None
        self.arrangement = w.Dropdown(options=list(ARRANGEMENTS), value=arrangement,
                                      description="tile", layout=w.Layout(width="420px"))
        self.num = w.ToggleButtons(options=[(".x1", 1), (".x2", 2), (".x4", 4)], value=num,
                                   description=".num", style={"button_width": "52px"})
        self.trans = w.Checkbox(value=trans, description=".trans", indent=False)
        self.base = w.BoundedIntText(value=base, min=0, max=1 << 16, step=16,
                                     description="base (B)", layout=w.Layout(width="170px"))
        self.stride = w.BoundedIntText(value=stride, min=16, max=4096, step=16,
                                       description="row stride (B)", style={"description_width": "95px"},
                                       layout=w.Layout(width="200px"))
        text = formula if isinstance(formula, str) else ""
        self.formula = w.Text(value=text, continuous_update=True,
                              placeholder="your formula, e.g. base + (lane % 8) * stride",
                              description="address =", layout=w.Layout(width="620px"))
        if self._callable is not None:
            self.formula.placeholder = "(using your Python function; type here to override)"
        self.status = w.HTML()
        self.output = w.HTML()
        for ctl in (self.arrangement, self.num, self.trans, self.base, self.stride, self.formula):
            ctl.observe(self._on_change, names="value")
        self._sync_fixed()
        self.controls = w.VBox([
            w.HBox([self.arrangement, self.trans]),
            w.HBox([self.num, self.base, self.stride]),
            self.formula,
        ])
        self.refresh()

    # -- model --------------------------------------------------------------------------------
    def placement(self) -> tiles.Placement:
        make, _, _ = ARRANGEMENTS[self.arrangement.value]
        return make(int(self.num.value))

    def tile(self) -> tiles.Tile:
        return self.placement().tile(int(self.base.value), int(self.stride.value))

    def learner_addresses(self) -> tuple[list[int | None], str]:
        """The formula's address per lane (None where it failed) and the first error."""
        src = self.formula.value if self.formula.value.strip() else self._callable
        if src is None:
            return [None] * layouts.WARP_SIZE, ""
        unusable = formula_problem(src)
        if unusable:                 # the whole formula, not a lane: said once, no lane marked
            return [None] * layouts.WARP_SIZE, unusable
        out, first_err = [], ""
        for lane in range(layouts.WARP_SIZE):
            names = {"lane": lane, "num": int(self.num.value), "base": int(self.base.value),
                     "stride": int(self.stride.value)}
            if callable(src) and not isinstance(src, str):
                v, err = _call_flexible(src, names)
            else:
                v, err = evaluate_formula(src, names)
            iv = _as_int(v)
            if err and not first_err:
                first_err = f"lane {lane}: {err}"
            elif v is not None and iv is None and not first_err:
                first_err = f"lane {lane}: the formula gave {v!r}, not a whole number"
            out.append(iv)
        return out, first_err

    def rows(self) -> list[dict]:
        """One dict per lane: address, the row it supplies, the lanes that receive it, and the
        learner's address with a verdict when a formula is given."""
        place = self.placement()
        tile = place.tile(int(self.base.value), int(self.stride.value))
        expected = place.expected_addresses(tile)
        frag = layouts.ldmatrix_fragment(place.num, bool(self.trans.value))
        mine, _ = self.learner_addresses()
        src = self.formula.value if self.formula.value.strip() else self._callable
        have_formula = (src is not None) and not formula_problem(src)
        rows = []
        for lane in range(layouts.WARP_SIZE):
            role = layouts.address_role(lane, place.num)
            row = {"lane": lane}
            if role is None:
                row.update(address="-", role=f"ignored (.x{place.num})", receivers="",
                           ignored=True)
            else:
                m, r = role
                a = int(expected[lane])
                recv = frag.lanes_holding_row(m, r)
                row.update(address=f"{a} (0x{a:x})", role=f"matrix {m}, row {r}",
                           receivers=render.lane_list(recv), expected=a)
            if have_formula:
                v = mine[lane]
                row["yours"] = "error" if v is None else str(v)
                if role is None:
                    row["status"] = "(ignored)"
                elif v is None or v != row["expected"]:
                    row["wrong"] = True
                    got = place.decode(tile, v) if v is not None else None
                    if got:
                        row["points_at"] = got
                    row["status"] = ("wrong: " + (
                        f"matrix {got[0]}, row {got[1]}" if got else
                        "no address (the formula failed here)" if v is None else
                        "not a row start"))
                else:
                    row["status"] = "ok"
            rows.append(row)
        return rows

    def wrong_lanes(self) -> list[int]:
        return [r["lane"] for r in self.rows() if r.get("wrong")]

    # -- view ---------------------------------------------------------------------------------
    def _sync_fixed(self) -> None:
        _, fixed_num, fixed_trans = ARRANGEMENTS[self.arrangement.value]
        if fixed_num is not None and self.num.value != fixed_num:
            self.num.value = fixed_num
        self.num.disabled = fixed_num is not None
        if fixed_trans is not None and self.trans.value != fixed_trans:
            self.trans.value = fixed_trans

    def _on_change(self, change) -> None:
        if change["owner"] is self.arrangement:
            self._sync_fixed()
        self.refresh()

    def refresh(self) -> None:
        rows = self.rows()
        _, err = self.learner_addresses()
        wrong = [r["lane"] for r in rows if r.get("wrong")]
        if err:
            self.status.value = f'<span style="color:#c00000">{render.escape(err)}</span>'
        elif any("yours" in r for r in rows):
            self.status.value = (f'<b style="color:#c00000">{len(wrong)} lane(s) wrong: '
                                 f'{render.lane_list(wrong)}</b>' if wrong else
                                 '<b style="color:#1a7f37">every address lane matches</b>')
        else:
            self.status.value = ""
        instr = (f"{self.instruction}.sync.aligned.m8n8.x{self.placement().num}"
                 f"{'.trans' if self.trans.value else ''}.shared.b16")
        # stmatrix moves data the other way: a row address says where registers go
        receivers = "row lands in lanes" if self.instruction == "ldmatrix" else "row comes from lanes"
        table = render.address_table_html(rows, title=instr, columns=[
            ("lane", "lane"), ("address", "address"), ("role", "gives"), ("receivers", receivers)])
        flow = render.row_flow_svg(self.placement().num, bool(self.trans.value),
                                   instruction=self.instruction,
                                   addresses=[r.get("expected", 0) for r in rows],
                                   wrong_lanes=wrong,
                                   wrong_targets={r["lane"]: tuple(r["points_at"]) for r in rows
                                                  if "points_at" in r})
        # The picture says who gives and who receives each row; with a formula, the lanes it
        # got wrong beside it. The whole lane table and shared memory are a click away, so
        # the view stays about one screen tall.
        parts = [flow]
        if wrong:
            parts.append(render.address_table_html(
                [r for r in rows if r.get("wrong")], title=f"{instr}: the wrong lanes",
                columns=[("lane", "lane"), ("yours", "yours"), ("address", "right address"),
                         ("status", "verdict")]))
        below = []
        if any("yours" in r for r in rows):
            below.append(render.collapsible("every lane: address, role, your formula", table))
        if self.show_memory:
            below.append(render.collapsible(
                "shared memory: where each lane's row starts", self._memory_picture(rows)))
        self.output.value = render.side_by_side(*parts) + "".join(below)
        self._redrawn()

    def _memory_picture(self, rows: list[dict]) -> str:
        tile = self.tile()
        size = min(tile.end + 16, 4096)
        smem = np.arange(size // 2, dtype=np.uint16).view(np.uint8)
        addr_lanes: dict[int, list[int]] = {}
        bad = []
        for r in rows:
            if "expected" in r:
                a = r["expected"]
                if r.get("wrong"):
                    continue
                addr_lanes.setdefault(a, []).append(r["lane"])
        for r in rows:
            if r.get("wrong") and r.get("yours", "error") != "error":
                a = int(r["yours"])
                if 0 <= a < size:
                    addr_lanes.setdefault(a - a % 2, []).append(r["lane"])
                    bad.append(a - a % 2)
        row_bytes = max(16, min(int(self.stride.value), 128))
        return render.smem_rows_html(smem, row_bytes, addr_lanes, title="shared memory "
                                     "(16-bit element ids; coloured: row starts by lane)",
                                     max_rows=min(40, -(-size // row_bytes)), bad_addresses=bad)

    def html(self) -> str:
        return self.output.value

    def settings(self) -> str:
        src = self.formula.value.strip() or ("your Python function" if self._callable else "")
        trans = " .trans" if self.trans.value else ""
        return (f"{self.instruction} .x{self.placement().num}{trans}"
                f", {self.arrangement.value}, base {int(self.base.value)}, row stride "
                f"{int(self.stride.value)} B" + (f", address = {src}" if src else ""))

    def static_html(self) -> str:
        return self.status.value + self.output.value


def _call_flexible(fn, names: dict):
    """Call a learner's function with as many of (lane, num, base, stride) as it takes."""
    import inspect
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = list(names)
    args = [names[p] for p in params if p in names]
    if len(args) != len(params):
        args = list(names.values())[: len(params)]
    try:
        return fn(*args), ""
    except NotImplementedError:
        return None, "not implemented yet"
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------------------------------------
# Fragment map
# ---------------------------------------------------------------------------------------------

def _movmatrix_output_layout() -> layouts.FragmentLayout:
    """Where each element of movmatrix's *input* matrix ends up: the input layout transposed."""
    src = layouts.movmatrix_fragment()
    coords = src.coords.copy()
    coords[..., 1], coords[..., 2] = src.coords[..., 2], src.coords[..., 1]
    return layouts.FragmentLayout("movmatrix.m8n8.trans.b16 output (positions in the input)",
                                  1, 8, 8, 16, coords)


def _fragments() -> dict[str, Callable[..., layouts.FragmentLayout]]:
    out: dict[str, Callable[..., layouts.FragmentLayout]] = {
        "ldmatrix / stmatrix m8n8": lambda num, trans, form: layouts.ldmatrix_fragment(num, trans),
        "movmatrix input": lambda num, trans, form: layouts.movmatrix_fragment(),
        "movmatrix output": lambda num, trans, form: _movmatrix_output_layout(),
    }
    for op in ("a", "b", "c", "d"):
        out[f"mma operand {op.upper()}"] = (
            lambda num, trans, form, _op=op: getattr(layouts.mma_form(*form), _op))
    return out


FRAGMENTS = _fragments()


def cute_atom_html(kind: str, num: int = 1, trans: bool = False,
                   mma: tuple = ("m16n8k16", "f16", "f16", "f32", "f32")) -> str:
    """One line under a fragment map: the CuTe atom(s) doing the same, with their layouts."""
    if kind in ("ldmatrix", "stmatrix"):
        atoms = [cute_atoms.copy_atom(kind, num, trans)]
    elif kind.startswith("ldmatrix"):
        atoms = [cute_atoms.copy_atom(op, num, trans) for op in ("ldmatrix", "stmatrix")]
    elif kind.startswith("movmatrix"):
        atoms = [cute_atoms.copy_atom("movmatrix", 1, True)]
    else:
        atoms = [cute_atoms.mma_atom(*mma)]
    lines = [render.escape(cute_atoms.caption(a)) for a in atoms if a is not None]
    if not lines:
        return ""
    return ('<div style="font-size:12px;font-family:monospace;margin:2px 0">'
            + "<br>".join(lines) + "</div>")


class FragmentMap(_StaticFallback):
    """Which lane holds which element, for any instruction the course covers.

    Pick the instruction (and ``.num``/``.trans`` or the mma variant), select a lane to see its
    registers, and type a formula over ``lane, reg, half`` giving ``(row, col)`` (or
    ``(matrix, row, col)``) to see where yours disagrees: wrong cells turn red.
    """

    def __init__(self, kind: str = "ldmatrix / stmatrix m8n8", *, num: int = 1,
                 trans: bool = False, mma: tuple = ("m16n8k16", "f16", "f16", "f32", "f32"),
                 lane: int = -1, formula=None):
        w = _widgets()
        if kind not in FRAGMENTS:
            raise ValueError(f"unknown fragment {kind!r}; pick one of {list(FRAGMENTS)}")
        self._callable = formula if callable(formula) else None
        self.kind = w.Dropdown(options=list(FRAGMENTS), value=kind, description="fragment",
                               layout=w.Layout(width="330px"))
        self.num = w.ToggleButtons(options=[(".x1", 1), (".x2", 2), (".x4", 4)], value=num,
                                   description=".num", style={"button_width": "52px"})
        self.trans = w.Checkbox(value=trans, description=".trans", indent=False)
        variants = [(f"{s} {a}x{b} + {c} -> {d}", (s, a, b, c, d))
                    for s, a, b, c, d in layouts.MMA_VARIANTS]
        self.mma = w.Dropdown(options=variants, value=tuple(mma), description="mma",
                              layout=w.Layout(width="330px"))
        self.lane = w.IntSlider(value=lane, min=-1, max=31, description="lane",
                                continuous_update=True, layout=w.Layout(width="420px"))
        text = formula if isinstance(formula, str) else ""
        self.formula = w.Text(value=text, continuous_update=True,
                              placeholder="(row, col) = ... e.g. (lane // 4, 2 * (lane % 4) + half)",
                              description="(row, col) =", layout=w.Layout(width="620px"),
                              style={"description_width": "80px"})
        self.status = w.HTML()
        self.output = w.HTML()
        self.lane_view = w.HTML(layout=w.Layout(flex="0 0 auto"))  # never squeezed by the map
        for ctl in (self.kind, self.num, self.trans, self.mma, self.lane, self.formula):
            ctl.observe(lambda change: self.refresh(), names="value")
        self.controls = w.VBox([w.HBox([self.kind, self.mma]), w.HBox([self.num, self.trans]),
                                self.lane, self.formula])
        self.refresh()

    def layout(self) -> layouts.FragmentLayout:
        return FRAGMENTS[self.kind.value](int(self.num.value), bool(self.trans.value),
                                          tuple(self.mma.value))

    def _elem_name(self, lay: layouts.FragmentLayout) -> str:
        return {16: "half", 8: "byte"}.get(lay.elem_bits, "elem")

    def wrong_cells(self) -> tuple[np.ndarray | None, str, int]:
        """``(wrong mask (matrices, rows, cols) or None, first error, number wrong)``."""
        lay = self.layout()
        src = self.formula.value if self.formula.value.strip() else self._callable
        if src is None:
            return None, "", 0
        wrong = np.zeros((lay.matrices, lay.rows, lay.cols), dtype=bool)
        first_err, n_wrong = "", 0
        unusable = formula_problem(src)
        if unusable:
            return None, unusable, 0
        arity = self.arity(lay)
        for lane in range(layouts.WARP_SIZE):
            for reg in range(lay.regs):
                for e in range(lay.elems_per_reg):
                    names = {"lane": lane, "reg": reg, "half": e}
                    v, err = (_call_flexible(src, names) if callable(src) and not isinstance(src, str)
                              else evaluate_formula(src, names))
                    m, r, c = lay.element(lane, reg, e)
                    ok = False
                    if (not err and isinstance(v, (tuple, list)) and len(v) not in arity
                            and len(v) in (2, 3)):
                        # One problem of the formula, not of every element: said once.
                        return None, self.arity_problem(lay, len(v)), 0
                    if not err and isinstance(v, (tuple, list)) and len(v) in arity:
                        vals = [_as_int(x) for x in v]
                        if len(vals) == 2:
                            default_m = reg if lay.matrices > 1 else 0
                            vals = [default_m] + vals
                        ok = vals == [m, r, c]
                    elif not err and not first_err:
                        first_err = (f"lane {lane} reg {reg} {self._elem_name(lay)} {e}: expected "
                                     f"a tuple {self.answer_form(lay)}, got {v!r:.30}")
                    if err and not first_err:
                        first_err = f"lane {lane} reg {reg}: {err}"
                    if not ok:
                        wrong[m, r, c] = True
                        n_wrong += 1
        return wrong, first_err, n_wrong

    def coord_names(self) -> tuple[str, str]:
        return ("k", "n") if self.kind.value == "mma operand B" else ("row", "col")

    def arity(self, lay: layouts.FragmentLayout) -> tuple[int, ...]:
        """How many values a formula gives: (row, col) for one matrix; (matrix, row, col) for
        several, or (row, col) meaning matrix = reg."""
        return (2,) if lay.matrices == 1 else (3, 2)

    def answer_form(self, lay: layouts.FragmentLayout) -> str:
        a, b = self.coord_names()
        return f"({a}, {b})" if lay.matrices == 1 else f"(matrix, {a}, {b})"

    def arity_problem(self, lay: layouts.FragmentLayout, got: int) -> str:
        if lay.matrices == 1:
            return (f"this fragment is one matrix: the formula gives {self.answer_form(lay)}, "
                    f"2 values, and yours gives {got}")
        return (f"this fragment has {lay.matrices} matrices: give {self.answer_form(lay)} "
                f"(or 2 values, the matrix then being reg); yours gives {got}")

    def refresh(self) -> None:
        lay = self.layout()
        form = self.answer_form(lay)
        self.formula.description = f"{form} ="
        self.formula.placeholder = (f"{form} = ... e.g. " + (
            "(lane // 4, 2 * (lane % 4) + half)" if lay.matrices == 1 else
            "(reg, lane // 4, 2 * (lane % 4) + half)"))
        self.formula.style.description_width = f"{8 * len(form) + 24}px"
        is_mma = self.kind.value.startswith("mma")
        self.mma.layout.display = "" if is_mma else "none"
        plain = self.kind.value.startswith("ldmatrix")
        self.num.layout.display = "" if plain else "none"
        self.trans.layout.display = "" if plain else "none"
        lane = int(self.lane.value)
        wrong, err, n_wrong = self.wrong_cells()
        if err:
            self.status.value = f'<span style="color:#c00000">{render.escape(err)}</span>'
        elif wrong is not None:
            total = lay.matrices * lay.rows * lay.cols
            self.status.value = (f'<b style="color:#c00000">{n_wrong} of {total} elements '
                                 'wrong (striped red)</b>' if n_wrong else
                                 '<b style="color:#1a7f37">your formula matches every element</b>')
        else:
            self.status.value = ""
        names = self.coord_names()
        self.output.value = render.fragment_map_html(
            lay, selected_lane=None if lane < 0 else lane, wrong=wrong,
            row_label=names[0], col_label=names[1])
        self.output.value += cute_atom_html(self.kind.value, int(self.num.value),
                                            bool(self.trans.value), tuple(self.mma.value))
        self.lane_view.value = (render.lane_registers_html(
            lay, lane, coord_names=("matrix",) + names) if lane >= 0 else
            '<i style="font-size:12px">move the lane slider to see one lane\'s registers; '
            "hover a cell for its lane, register and element</i>")
        self._redrawn()

    def html(self) -> str:
        return self.output.value

    def settings(self) -> str:
        kind = self.kind.value
        if kind.startswith("mma"):
            kind += f" of {' '.join(self.mma.value)}"
        elif kind.startswith("ldmatrix"):
            kind += f" .x{int(self.num.value)}{' .trans' if self.trans.value else ''}"
        lane = int(self.lane.value)
        return kind + (f", lane {lane}" if lane >= 0 else "")

    def static_html(self) -> str:
        # the lane's panel goes below a map too wide to share a row
        return self.status.value + render.side_by_side(self.output.value, self.lane_view.value)


# ---------------------------------------------------------------------------------------------
# Bank conflicts
# ---------------------------------------------------------------------------------------------

class BankView(_StaticFallback):
    """The banks an ldmatrix touches for a tile of ``row_bytes``-byte rows, with an optional
    swizzle formula over ``row, chunk`` (the 16-byte chunk index) giving the stored chunk."""

    def __init__(self, swizzle=None, *, row_bytes: int = 128, num: int = 4, column_chunk: int = 0):
        w = _widgets()
        self._callable = swizzle if callable(swizzle) else None
        self.row_bytes = w.Dropdown(options=[32, 64, 128, 256], value=row_bytes,
                                    description="row bytes")
        self.pad = w.BoundedIntText(value=0, min=0, max=64, step=16, description="padding (B)")
        self.chunk = w.BoundedIntText(value=column_chunk, min=0, max=15,
                                      description="column chunk",
                                      style={"description_width": "initial"})
        self.num = w.ToggleButtons(options=[(".x1", 1), (".x2", 2), (".x4", 4)], value=num,
                                   description=".num", style={"button_width": "52px"})
        text = swizzle if isinstance(swizzle, str) else ""
        self.formula = w.Text(value=text, continuous_update=True, description="stored chunk =",
                              placeholder="swizzle over row, chunk, e.g. chunk ^ (row % 8)",
                              layout=w.Layout(width="620px"), style={"description_width": "100px"})
        self.status = w.HTML()
        self.output = w.HTML()
        for ctl in (self.row_bytes, self.pad, self.chunk, self.num, self.formula):
            ctl.observe(lambda change: self.refresh(), names="value")
        self.controls = w.VBox([w.HBox([self.row_bytes, self.pad, self.chunk]), self.num,
                                self.formula])
        self.refresh()

    def addresses(self) -> tuple[np.ndarray, str]:
        """Row addresses of an ldmatrix reading column chunk ``chunk`` of rows 0..8*num-1."""
        stride = int(self.row_bytes.value) + int(self.pad.value)
        chunks_per_row = int(self.row_bytes.value) // 16
        src = self.formula.value if self.formula.value.strip() else self._callable
        out = np.zeros(layouts.WARP_SIZE, dtype=np.int64)
        err = ""
        for lane in range(layouts.WARP_SIZE):
            row = lane % (8 * int(self.num.value))
            chunk = int(self.chunk.value) % chunks_per_row
            if src is not None:
                names = {"row": row, "chunk": chunk, "chunks": chunks_per_row}
                v, e = (_call_flexible(src, names) if callable(src) and not isinstance(src, str)
                        else evaluate_formula(src, names))
                iv = _as_int(v)
                if e or iv is None:
                    err = err or f"row {row}, chunk {chunk}: {e or f'got {v!r}'}"
                    iv = chunk
                elif not 0 <= iv < chunks_per_row:
                    err = err or (f"row {row}, chunk {chunk}: stored chunk {iv} is outside the "
                                  f"row (0..{chunks_per_row - 1})")
                    iv = iv % chunks_per_row
                chunk = iv
            out[lane] = row * stride + chunk * 16
        return out, err

    def refresh(self) -> None:
        addrs, err = self.addresses()
        num = int(self.num.value)
        cost = banks.ldmatrix_cost(addrs, num=num)
        color = "#1a7f37" if cost.conflicts == 0 else "#c00000"
        msg = (f'<b style="color:{color}">{cost.wavefronts} wavefront(s) for {num} matrices '
               f'(conflict-free: {cost.ideal}); {cost.conflicts} extra from bank conflicts</b>')
        if err:
            msg = f'<span style="color:#c00000">{render.escape(err)}</span><br>' + msg
        self.status.value = msg
        lanes = list(range(8 * num))
        self.output.value = render.bank_table_html([int(addrs[l]) for l in lanes], lanes=lanes,
                                                   phases=[l // 8 for l in lanes],
                                                   title="banks touched per lane (red: bank "
                                                   "shared by different words of one matrix)")
        self._redrawn()

    def html(self) -> str:
        return self.output.value

    def settings(self) -> str:
        src = self.formula.value.strip() or ("your Python function" if self._callable else "")
        return (f"rows of {int(self.row_bytes.value)} B + {int(self.pad.value)} B padding, "
                f"column chunk {int(self.chunk.value)}, .x{int(self.num.value)}"
                + (f", stored chunk = {src}" if src else ""))

    def static_html(self) -> str:
        return self.status.value + self.output.value


# ---------------------------------------------------------------------------------------------
# Stepping a picture through the lanes
# ---------------------------------------------------------------------------------------------

class LanePlayer:
    """A picture stepped lane by lane (or row by row) with a play button and a slider.

    The picture is an ordinary HTML output (an SVG), so a notebook saved or exported without
    its widgets (nbconvert, a reopened file) still shows it, as it was last drawn; the controls
    are a widget that redraws that output in place. ``draw(step, option)`` returns the picture
    for one step (``None``: every lane at once); ``options`` (label -> value) adds a drop-down
    whose value is passed as ``option``.
    """

    def __init__(self, draw: Callable[[int | None, object], str], *, steps: int = 32,
                 label: str = "lane", start: int | None = None,
                 options: dict[str, object] | None = None, option: str | None = None,
                 interval_ms: int = 900):
        w = _widgets()
        self._draw = draw
        self.label = label
        self.options = dict(options or {})
        first = -1 if start is None else int(start)
        self.play = w.Play(value=first, min=-1, max=steps - 1, step=1, interval=interval_ms,
                           description=f"step through the {label}s")
        self.slider = w.IntSlider(value=first, min=-1, max=steps - 1, description=label,
                                  continuous_update=True, layout=w.Layout(width="360px"))
        w.jslink((self.play, "value"), (self.slider, "value"))
        self.caption = w.HTML()
        self.choice = None
        row = [self.play, self.slider, self.caption]
        if self.options:
            names = list(self.options)
            self.choice = w.Dropdown(options=names, value=option or names[0],
                                     layout=w.Layout(width="300px"))
            self.choice.observe(lambda change: self.refresh(), names="value")
            row.insert(0, self.choice)
        self.slider.observe(lambda change: self.refresh(), names="value")
        self.controls = w.HBox(row, layout=w.Layout(flex_flow="row wrap"))
        self._handles: list = []
        self.refresh()

    @classmethod
    def movmatrix(cls, lane: int | None = None, **kwargs) -> LanePlayer:
        """movmatrix before and after, one lane's two elements given and received at a time."""
        return cls(lambda step, _: render.movmatrix_svg(step) + cute_atom_html("movmatrix"),
                   start=lane, **kwargs)

    @classmethod
    def mma(cls, variant: tuple = ("m16n8k16", "f16", "f16", "f32", "f32"),
            lane: int | None = None, **kwargs) -> LanePlayer:
        """A, B and C/D of an mma side by side; a drop-down picks any variant of the course."""
        options = {f"{s} {a}x{b} + {c} -> {d}": (s, a, b, c, d)
                   for s, a, b, c, d in layouts.MMA_VARIANTS}
        chosen = next(k for k, v in options.items() if v == tuple(variant))
        return cls(lambda step, form: render.mma_fragments_svg(form, step)
                   + cute_atom_html("mma", mma=form), start=lane,
                   options=options, option=chosen, **kwargs)

    @classmethod
    def rows(cls, num: int = 4, trans: bool = False, instruction: str = "ldmatrix",
             row: int | None = None, **kwargs) -> LanePlayer:
        """An ldmatrix/stmatrix row by row: the lane giving its address, the lanes it lands in."""
        return cls(lambda step, _: render.row_flow_svg(num, trans, row=step,
                                                       instruction=instruction)
                   + cute_atom_html(instruction, num, trans),
                   steps=8 * num, label="row", start=row, **kwargs)

    def step(self) -> int | None:
        """The step shown (``None``: all at once)."""
        v = int(self.slider.value)
        return None if v < 0 else v

    def picture(self) -> str:
        option = self.options[self.choice.value] if self.choice is not None else None
        return str(self._draw(self.step(), option))

    def refresh(self) -> None:
        step = self.step()
        self.caption.value = (f"<i>all {self.label}s; press play or move the slider</i>"
                              if step is None else f"<b>{self.label} {step}</b>")
        self._current = self.picture()
        for handle in self._handles:
            handle.update(self._bundle())

    def html(self) -> str:
        return self._current

    def _bundle(self):
        from IPython.display import HTML

        return HTML(self._current)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        bundle = self.controls._repr_mimebundle_()
        bundle = bundle[0] if isinstance(bundle, tuple) else bundle
        # where widgets do not run (a static export) the controls say so in one line
        bundle["text/plain"] = (f"({self.label} slider and play button: they run in "
                                "JupyterLab)")
        display(bundle, raw=True)
        self._handles.append(display(self._bundle(), display_id=True))
