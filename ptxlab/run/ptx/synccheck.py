"""Barriers reached by only part of the block, in the spirit of compute-sanitizer's synccheck.

A block-wide barrier (``bar.sync``/``barrier.sync`` without a thread count: ``__syncthreads()``
and its ``_count``/``_and``/``_or`` forms) must be reached by every thread of the block, at the
same instruction when the barrier is ``.aligned`` (``bar.sync`` always is). A GPU does not
always hang when that rule is broken: a thread that exits releases the barriers that waited only
for it, so ``if (warp == 0) __syncthreads();`` runs to the end, but orders nothing between the
warps it was meant to order, and the result depends on timing. synccheck calls this
"divergent thread(s) in block" (and "in warp" when the lanes of one warp part); the CPU model
checks it each time a barrier opens and raises :class:`BarrierDivergence` naming the barrier,
the warps (or lanes) that arrived and where the others were. A barrier with a thread count
(``bar.sync 1, 64``: a named barrier for some warps) is checked only for lanes of an arriving
warp that exited.

``__syncwarp(mask)`` (``bar.warp.sync``) is checked where it runs: a lane named in the mask that
has exited is synccheck's "invalid arguments".
"""
from __future__ import annotations

import numpy as np

from ..failure import FailureKind
from .errors import DivergenceFault, Where, _lanes_text


class BarrierDivergence(DivergenceFault):
    """A barrier was reached by only part of the threads that must reach it (or at different
    instructions): synccheck's "divergent thread(s) in block/warp" and "invalid arguments"."""

    sanitizer = "synccheck"
    failure_kind = FailureKind.BARRIER
    advice = ("every thread of the block must reach the same __syncthreads(): none may "
              "return before it or skip it in a branch")


#: The advice for a ``__syncwarp(mask)`` whose mask names a lane that never reaches it.
SYNCWARP_ADVICE = ("every lane named in __syncwarp's mask must reach that same __syncwarp(): "
                   "name only the lanes that do")


def _warps_text(indices: list[int]) -> str:
    text = _lanes_text(tuple(indices))
    return "warp" + text[len("lane"):]


def _site(program, fc, pc: int) -> str:
    """``PTX line N (kernel.cu:12)`` of instruction ``pc`` of function code ``fc``."""
    ins = fc.instrs[pc] if 0 <= pc < len(fc.instrs) else None
    if ins is None:
        return "the end of the kernel"
    src, _ = program.source_location(ins)
    return f"PTX line {ins.line}" + (f", {src}" if src else "")


def _exit_site(program, w, lanes: np.ndarray | None = None) -> str:
    """Where the warp's lanes (``lanes``, default all) exited."""
    places = [(fc, pc) for fc, pc, m in w.exited_at if lanes is None or (m & lanes).any()]
    if not places:
        return ""
    fc, pc = places[-1]
    return f" ({_site(program, fc, pc)})"


def check_release(block, bar_id: int, state) -> None:
    """Raise :class:`BarrierDivergence` if barrier ``bar_id`` of ``block`` is opening although
    part of the block never reached it (a warp exited, waits at another instruction, or some
    of its lanes exited). A barrier with a thread count is meant for some of the warps: only
    the lanes of the warps that arrived are checked."""
    if not state.waiting:
        return
    if state.count is not None:        # for part of the block: only its warps' lanes are checked
        _check_lanes(block, sorted(state.waiting, key=lambda w: w.index))
        return
    program = block.launch.program
    waiting = sorted(state.waiting, key=lambda w: w.index)
    first = waiting[0]
    fl = first.flows[0]
    pc = fl.pc - 1
    barrier = fl.fc.instrs[pc]
    what = barrier.full_opcode
    arrived = [w.index for w in waiting]
    gone = [w for w in block.warps if w.state == "done"]
    if gone:
        by_place: dict[str, list[int]] = {}
        for w in gone:
            by_place.setdefault(_exit_site(program, w), []).append(w.index)
        where = "; ".join(f"{_warps_text(ix)} exited{place}" for place, ix in by_place.items())
        _raise(block, first, pc, (),
               f"divergent threads in block: {what} was reached by {_warps_text(arrived)} only; "
               f"{where} without reaching it, so on a GPU it orders nothing")
    places = {}
    for w in waiting:
        places.setdefault(w.flows[0].pc - 1, []).append(w.index)
    if len(places) > 1 and any(w.flows[0].code[w.flows[0].pc - 1].aligned for w in waiting):
        where = "; ".join(f"{_warps_text(ix)} at {_site(program, fl.fc, p)}"
                          for p, ix in sorted(places.items()))
        _raise(block, first, pc, (),
               f"divergent threads in block: the warps wait at different barrier instructions "
               f"for barrier {bar_id} ({where})")
    _check_lanes(block, waiting)


def _check_lanes(block, waiting: list) -> None:
    """Every lane of each waiting warp reached the barrier (none exited before it)."""
    program = block.launch.program
    for w in waiting:
        exists = block.thread_exists[w.index]
        left = exists & ~w.live
        if left.any():
            came = exists & w.live
            pc = w.flows[0].pc - 1
            what = w.flows[0].fc.instrs[pc].full_opcode
            _raise(block, w, pc, _idx(came),
                   f"divergent threads in warp: in warp {w.index}, {_lanes_text(_idx(came))} "
                   f"reached {what}; {_lanes_text(_idx(left))} exited"
                   f"{_exit_site(program, w, left)} without reaching it")


def check_syncwarp(w, fl, member_lanes: np.ndarray) -> BarrierDivergence | None:
    """The error of a ``__syncwarp(mask)`` whose mask names a lane that exited, or None. The
    caller raises it from inside the instruction, where it is located."""
    gone = member_lanes & ~fl.live & w.block.thread_exists[w.index]
    if not gone.any():
        return None
    place = _exit_site(w.launch.program, w, gone)
    fault = BarrierDivergence(
        f"invalid arguments: {_lanes_text(_idx(gone))}, named in the mask of __syncwarp "
        f"(bar.warp.sync), exited{place} without reaching it")
    fault.advice = SYNCWARP_ADVICE
    return fault


def _idx(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.nonzero(mask)[0])


def _raise(block, w, pc: int, lanes: tuple, message: str) -> None:
    program = block.launch.program
    fc = w.flows[0].fc
    ins = fc.instrs[pc]
    src, text = program.source_location(ins)
    raise BarrierDivergence(message, Where(block=block.index, warp=w.index, lanes=lanes,
                                           ptx_line=ins.line, ptx_text=ins.text,
                                           source=src, source_text=text))
