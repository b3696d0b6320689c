"""Memory for a vector run of many warps: every block's shared memory side by side in one
array, one row of local memory per lane, and a guard that finds accesses whose order could
matter.

The warp-by-warp model runs warps one after another, so two unordered accesses of one byte by
different warps (no barrier between them, or in different blocks) get the order of that model.
A vector run steps all warps together, a different order. The guard watches every byte the run
touches and stops the run (:class:`NeedsWarpByWarp`) at the first such pair, and at a read of
shared memory nobody wrote (the warp-by-warp model warns of it): then the launch runs warp by
warp, and its race report, warning or answer is that model's own.
"""
from __future__ import annotations

import numpy as np

from .errors import NeedsWarpByWarp
from .memory import SHARED_START, Spaces
from .racecheck import access_units

_NONE, _MANY = -1, -2
#: Bytes of one page of an :class:`OrderGuard`'s record.
PAGE = 4096
#: A region up to this size gets its whole record at once (16 bytes of record per byte).
DIRECT_BYTES = 8 << 20
#: Rows of reads an :class:`OrderGuard` keeps aside before its region's first write.
DEFERRED_ROWS = 1 << 22
#: The widest run of bytes an access is taken in (a row of every record).
UNIT = 16


def _padded(nbytes: int) -> int:
    return -(-max(nbytes, 1) // UNIT) * UNIT


class OrderGuard:
    """Last writer and readers of each byte of one region, as global warp numbers with the
    barrier generation of the warp's block when it accessed the byte. The record is kept in
    pages of :data:`PAGE` bytes made on first touch, so a large buffer costs what the run
    touches of it. Reads before the region's first write are kept aside and noted when it
    comes (a kernel's inputs are read, never written)."""

    def __init__(self, nbytes: int, lane_warp: np.ndarray, warp_block: np.ndarray,
                 generation: np.ndarray):
        self.direct = nbytes <= DIRECT_BYTES
        self.page_slot = np.full((nbytes + PAGE - 1) // PAGE, -1, np.int64)
        self.pages = 0
        self._grow((nbytes + PAGE - 1) // PAGE if self.direct else 4)
        self.lane_warp = lane_warp          # global warp number of each lane
        self.warp_block = warp_block        # block slot of each global warp
        self.generation = generation        # barriers passed, per block slot (shared, updated)
        self.deferred: list | None = []     # reads before the region's first write
        self.deferred_rows = 0

    def _grow(self, pages: int) -> None:
        n = pages * PAGE
        old = getattr(self, "writer", None)
        arrays = (np.full(n, _NONE, np.int32), np.zeros(n, np.int32),
                  np.full(n, _NONE, np.int32), np.zeros(n, np.int32))
        if old is not None:
            for new, cur in zip(arrays, (self.writer, self.w_gen, self.reader, self.r_gen)):
                new[: cur.size] = cur
        self.writer, self.w_gen, self.reader, self.r_gen = arrays

    def _rows(self, lanes: np.ndarray, off: np.ndarray, nbytes: int):
        """The access as rows of the record (see :func:`access_units`), whose each is, and
        the row width."""
        idx, who, unit = access_units(self.lane_warp[lanes], off, nbytes, UNIT)
        if self.direct:
            return idx, who, unit
        start = idx * unit                       # a row never crosses a page (PAGE % UNIT == 0)
        page = start // PAGE
        slot = self.page_slot[page]
        if (slot < 0).any():
            new = np.unique(page[slot < 0])
            self.page_slot[new] = np.arange(self.pages, self.pages + new.size)
            self.pages += new.size
            if self.pages * PAGE > self.writer.size:
                self._grow(max(2 * self.writer.size // PAGE, self.pages))
            slot = self.page_slot[page]
        return (slot * PAGE + start % PAGE) // unit, who, unit

    def _unordered(self, other: np.ndarray, stamp: np.ndarray, who: np.ndarray) -> np.ndarray:
        """Whether an earlier access by ``other`` (at generation ``stamp``) and one by ``who``
        now have no barrier between them: different blocks, or the same barrier interval."""
        ob = self.warp_block[np.maximum(other, 0)]
        mb = self.warp_block[who]
        return (ob != mb) | (stamp == self.generation[mb])

    def _after_writer(self, idx: np.ndarray, who: np.ndarray, u: int, what: str):
        """Stop at a byte of these rows another warp wrote with no barrier between; else the
        records as rows of ``u`` and the warp of each byte."""
        writer, w_gen, reader, r_gen = (a.reshape(-1, u) for a in
                                        (self.writer, self.w_gen, self.reader, self.r_gen))
        whom = np.broadcast_to(who[:, None], (who.size, u))
        w = writer[idx]
        clash = (w >= 0) & (w != whom)
        if clash.any() and self._unordered(w[clash], w_gen[idx][clash], whom[clash]).any():
            raise NeedsWarpByWarp(f"a {what} of a byte another warp wrote, unordered")
        return (writer, w_gen, reader, r_gen), whom

    def read(self, lanes: np.ndarray, off: np.ndarray, nbytes: int) -> None:
        idx, who, u = self._rows(lanes, off, nbytes)
        stamp = self.generation[self.warp_block[who]]
        if self.deferred is not None:
            # nothing written here yet, so no read can clash: the readers are needed only
            # once a write comes (most inputs never get one), and are noted then
            self.deferred.append((idx, who, u, stamp))
            self.deferred_rows += idx.size
            if self.deferred_rows > DEFERRED_ROWS:
                self._note_deferred()
            return
        self._after_writer(idx, who, u, "read")
        self._note_readers(idx, who, u, stamp)

    def _note_readers(self, idx: np.ndarray, who: np.ndarray, u: int,
                      stamp: np.ndarray) -> None:
        reader, r_gen = self.reader.reshape(-1, u), self.r_gen.reshape(-1, u)
        whom = np.broadcast_to(who[:, None], (who.size, u))
        r = reader[idx]
        fresh = (r == _NONE) | (r == whom) | (r_gen[idx] != stamp[:, None])
        # one reader stays named; a second one in the same interval makes it "many"
        reader[idx] = np.where(fresh, whom, _MANY)
        r_gen[idx] = stamp[:, None]

    def _note_deferred(self) -> None:
        """Note the deferred reads, in their order, as they would have been noted."""
        deferred, self.deferred = self.deferred, None
        for idx, who, u, stamp in deferred or ():
            self._note_readers(idx, who, u, stamp)

    def write(self, lanes: np.ndarray, off: np.ndarray, nbytes: int) -> None:
        if self.deferred is not None:
            self._note_deferred()
        idx, who, u = self._rows(lanes, off, nbytes)
        if idx.size > nbytes // u:
            order = np.argsort(idx, kind="stable")
            si, sw = idx[order], who[order]
            if ((si[1:] == si[:-1]) & (sw[1:] != sw[:-1])).any():
                raise NeedsWarpByWarp("two warps write one byte in the same instruction")
        (writer, w_gen, reader, r_gen), whom = self._after_writer(idx, who, u, "write")
        r = reader[idx]
        seen = (r != _NONE) & (r != whom)
        if seen.any():
            many = r[seen] == _MANY
            stamp = r_gen[idx][seen]
            mine = self.generation[self.warp_block[whom[seen]]]
            if (many & (stamp == mine)).any() or \
                    self._unordered(r[seen][~many], stamp[~many], whom[seen][~many]).any():
                raise NeedsWarpByWarp("a write of a byte another warp read, unordered")
        writer[idx] = whom
        w_gen[idx] = self.generation[self.warp_block[who]][:, None]


class IntervalGuard:
    """The same watch for shared memory, where a barrier orders everything before it: the
    accesses of the current barrier interval are only noted, and checked together when a
    barrier opens (:meth:`barrier`) or the run ends (:meth:`check`): a byte written by two
    warps, or written by one and read by another, stops the run. A read of a byte no thread
    wrote is caught as it happens."""

    def __init__(self, nbytes: int, lane_warp: np.ndarray, *, uninitialized_reads: bool):
        self.written = np.zeros(_padded(nbytes), dtype=bool)       # ever, by any thread
        self.owner = np.full(_padded(nbytes), _NONE, np.int32)      # scratch of :meth:`check`
        self.lane_warp = lane_warp
        self.uninitialized_reads = uninitialized_reads
        self.reads: list = []
        self.writes: list = []

    def read(self, lanes: np.ndarray, off: np.ndarray, nbytes: int) -> None:
        idx, who, u = access_units(self.lane_warp[lanes], off, nbytes, UNIT)
        if self.uninitialized_reads and not self.written.reshape(-1, u)[idx].all():
            raise NeedsWarpByWarp("a read of shared memory no thread of the block wrote")
        self.reads.append((idx, who, u))

    def write(self, lanes: np.ndarray, off: np.ndarray, nbytes: int) -> None:
        idx, who, u = access_units(self.lane_warp[lanes], off, nbytes, UNIT)
        self.written.reshape(-1, u)[idx] = True
        self.writes.append((idx, who, u))

    def check(self) -> None:
        """Check the noted interval and start a new one."""
        writes, reads = self.writes, self.reads
        self.writes, self.reads = [], []
        if not writes:
            return
        for idx, who, u in writes:                # one writer per byte stays
            self.owner.reshape(-1, u)[idx] = who[:, None]
        try:
            for idx, who, u in writes:
                if (self.owner.reshape(-1, u)[idx] != who[:, None]).any():
                    raise NeedsWarpByWarp("two warps write one byte of shared memory, unordered")
            for idx, who, u in reads:
                got = self.owner.reshape(-1, u)[idx]
                if ((got >= 0) & (got != who[:, None])).any():
                    raise NeedsWarpByWarp("a warp reads shared memory another warp writes, "
                                          "unordered")
        finally:
            for idx, _, u in writes:
                self.owner.reshape(-1, u)[idx] = _NONE

    def barrier(self, all_blocks: bool) -> None:
        """A barrier opened. Only when it opened for every block is the interval closed for
        all of them; otherwise what was noted is kept (checked again later, which can only
        stop the run, never miss a pair)."""
        if all_blocks:
            self.check()


class WideSpaces(Spaces):
    """The address spaces of many warps of several blocks held as one vector of lanes: shared
    memory is one array with a segment per block (``segment[lane]`` is where the lane's block
    starts), local memory one row per lane; every shared access is noted by an
    :class:`IntervalGuard`, every global one by an :class:`OrderGuard` per buffer."""

    __slots__ = ("segment", "shared_guard", "global_guards", "_guard_args")
    whole_warp_checks = False       # lanes of many blocks, and global accesses watched

    def __init__(self, glob, shared: np.ndarray, shared_size: int, local, params,
                 segment: np.ndarray, lane_warp: np.ndarray, warp_block: np.ndarray,
                 generation: np.ndarray, *, uninitialized_reads: bool = True):
        """``uninitialized_reads``: stop at a read of shared memory nobody wrote (where the
        warp-by-warp model warns)."""
        super().__init__(glob, shared, shared_size, local, params)
        self.segment = segment
        self._guard_args = (lane_warp, warp_block, generation)
        self.shared_guard = IntervalGuard(shared.size, lane_warp,
                                          uninitialized_reads=uninitialized_reads)
        self.global_guards: dict[int, OrderGuard] = {}

    def _global_guard(self, k: int) -> OrderGuard:
        g = self.global_guards.get(k)
        if g is None:
            g = self.global_guards[k] = OrderGuard(self.glob.buffers[k].data.size,
                                                   *self._guard_args)
        return g

    def shared32(self, addrs, lanes, what):
        if (addrs >> np.uint64(32)).any():      # the warp-by-warp model warns of it
            raise NeedsWarpByWarp("a generic address given to a .shared instruction")
        return addrs

    def _shared_offsets(self, addrs, lanes, total, what):
        return super()._shared_offsets(addrs, lanes, total, what) + self.segment[lanes]

    def _watch_shared(self, kind, lanes, off, total, what, values=None) -> None:
        guard = self.shared_guard
        (guard.read if kind == "read" else guard.write)(lanes, off + SHARED_START, total)

    def _watch_global(self, kind, k, addrs, lanes, total) -> None:
        if k.size and not (k != k[0]).any():       # the usual case: one buffer for every lane
            guard = self._global_guard(int(k[0]))
            base = np.uint64(self.glob.buffers[int(k[0])].base)
            (guard.read if kind == "read" else guard.write)(lanes, addrs - base, total)
            return
        for kb in np.unique(k):
            sel = k == kb
            guard = self._global_guard(int(kb))
            base = np.uint64(self.glob.buffers[int(kb)].base)
            (guard.read if kind == "read" else guard.write)(lanes[sel], addrs[sel] - base, total)

    # ---- the matrix instructions' rows -------------------------------------------------

    def rows_in_blocks(self, rows: np.ndarray, lane0: np.ndarray, nbytes: int = 16) -> np.ndarray:
        """Row addresses ``(k, n)`` of ``k`` warps (first lanes ``lane0``) as indices into the
        side-by-side shared array; a row outside its block's shared memory stops the run
        (the warp-by-warp model names the lane)."""
        rel = rows - SHARED_START
        if (rel < 0).any() or (rel + nbytes > self.shared_size).any():
            raise NeedsWarpByWarp("a matrix row outside the block's shared memory")
        return rows + self.segment[lane0][:, None]
