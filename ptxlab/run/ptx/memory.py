"""The address spaces of a launch, and checked loads and stores in them.

Generic (64-bit) addresses are laid out as on a GPU, with made-up but fixed windows:

* global memory: one buffer per array argument (a copy of it) and per module variable, each
  at its own 1 MiB-aligned base starting at :data:`GLOBAL_BASE`, with gaps between them so a
  stray pointer never lands in a neighbour;
* the shared window at :data:`SHARED_WINDOW` (+ the 32-bit ``.shared`` address);
* the local window at :data:`LOCAL_WINDOW` (+ the 32-bit ``.local`` address, per thread);
* kernel parameters at :data:`PARAM_WINDOW`.

Every access is checked: an address outside every buffer, or not aligned to the access size,
raises a :class:`LaneFault` that names the lane; the interpreter adds block, warp and line.
"""
from __future__ import annotations

import bisect
import warnings
from dataclasses import dataclass, field

import numpy as np

GLOBAL_BASE = 0x7000_0000_0000
GLOBAL_STRIDE = 1 << 20
SHARED_WINDOW = 0x7F00_0000_0000
LOCAL_WINDOW = 0x7F80_0000_0000
PARAM_WINDOW = 0x7FC0_0000_0000
WINDOW_SIZE = 1 << 32

#: ``.shared`` address of the first byte of a block's shared memory. On sm_90 the first KiB of
#: the window is reserved for the system and a block's variables start after it (measured on an
#: H100: reports/hardware/SHARED_LAYOUT.md), so an address that depends on where the tile sits
#: comes out as on the hardware.
SHARED_START = 1024


class GenericAddressAsShared(UserWarning):
    """A generic pointer given where a shared-space address belongs (see ``Spaces.shared32``)."""


class LaneFault(Exception):
    """Raised inside an instruction; the interpreter turns it into a located KernelFault."""

    def __init__(self, message: str, lanes=(), kind: str = "memory", advice: str = ""):
        super().__init__(message)
        self.message = message
        self.lanes = tuple(int(x) for x in lanes)
        self.kind = kind
        self.advice = advice


class WarpAccess:
    """What decoding knows of a load or store (element type, vector width), worked out once:
    its bytes, its alignment, and the one item a lane moves (the element, or the vector as one
    opaque item of ``total`` bytes, so a warp's vectors move with one index per lane)."""

    __slots__ = ("dtype", "count", "total", "align", "item", "key")

    def __init__(self, dtype, count: int = 1):
        self.dtype = np.dtype(dtype)
        self.count = count
        self.total = self.dtype.itemsize * count
        self.align = self.total if count > 1 else self.dtype.itemsize
        self.item = self.dtype if count == 1 else np.dtype(f"V{self.total}")
        self.key = self.item.str

    def unpack(self, items: np.ndarray) -> np.ndarray:
        """Gathered items as ``(lanes, count)`` elements."""
        if self.count == 1:
            return items[:, None]
        return items.view(self.dtype).reshape(items.size, self.count)

    def pack_columns(self, columns: list, lanes: int) -> np.ndarray:
        """One item per lane from ``count`` arrays of ``lanes`` elements (a vector's sources),
        written straight into the items' bytes."""
        items = np.empty(lanes, self.item)
        items.view(self.dtype).reshape(lanes, self.count).T[...] = columns
        return items

    def pack(self, values: np.ndarray) -> np.ndarray:
        """``(lanes, count)`` elements of ``dtype`` as one item per lane."""
        if self.count == 1:
            return values[:, 0]
        return np.ascontiguousarray(values).view(self.item).reshape(values.shape[0])


class ItemViews:
    """The bytes of ``source`` from ``start`` on, seen as items of each size, one starting at
    every byte: ``view[off]`` is the item at byte ``off``, so an aligned warp's access is one
    fancy index, with no division and no ``(lanes, count)`` index grid. Each kind of item is
    made once and kept."""

    __slots__ = ("source", "data", "views")

    def __init__(self, source: np.ndarray, start: int = 0):
        self.source = source
        self.data = source[start:] if start else source
        self.views: dict = {}

    def of(self, access: WarpAccess) -> np.ndarray:
        v = self.views.get(access.key)
        if v is None:
            v = self.views[access.key] = item_view(self.data, access.item)
        return v


def item_view(data: np.ndarray, item: np.dtype) -> np.ndarray:
    """``data`` seen as ``item``s, one starting at each byte (see :class:`ItemViews`)."""
    n = max(0, data.size - item.itemsize + 1)
    return np.ndarray((n,), item, buffer=data, strides=(1,))


@dataclass
class Buffer:
    base: int
    data: np.ndarray       # uint8, padded to a multiple of 16 bytes
    size: int              # bytes the program may touch
    name: str
    writable: bool = True
    #: the buffer's items seen at every byte, for the whole-warp path (see :class:`ItemViews`)
    items: ItemViews | None = field(default=None, repr=False, compare=False)
    #: ``base`` as a numpy scalar, to subtract from a warp's addresses
    ubase: np.uint64 = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        self.ubase = np.uint64(self.base)


class GlobalMemory:
    """The global buffers of one launch, found by address."""

    def __init__(self):
        self.buffers: list[Buffer] = []
        self._bases = np.zeros(0, dtype=np.uint64)
        self._base_list: list[int] = []       # the same, as ints, for :meth:`starting_below`
        self._next = GLOBAL_BASE

    def add(self, nbytes: int, name: str, init: bytes | np.ndarray | None = None,
            writable: bool = True) -> Buffer:
        padded = max(16, (nbytes + 15) // 16 * 16)
        data = np.zeros(padded, dtype=np.uint8)
        if init is not None:
            src = np.frombuffer(init, dtype=np.uint8) if isinstance(init, (bytes, bytearray)) \
                else np.asarray(init).reshape(-1).view(np.uint8)
            data[: src.size] = src
        buf = Buffer(self._next, data, nbytes, name, writable)
        self._next += (padded + GLOBAL_STRIDE + GLOBAL_STRIDE - 1) // GLOBAL_STRIDE * GLOBAL_STRIDE
        self.buffers.append(buf)
        self._index_bases()
        return buf

    def remove(self, base: int) -> bool:
        """Free the buffer that starts at ``base`` (``cudaFree``); ``False`` if none does."""
        for i, b in enumerate(self.buffers):
            if b.base == base:
                del self.buffers[i]
                self._index_bases()
                return True
        return False

    def _index_bases(self) -> None:
        """The buffers' bases, in order, for :meth:`locate` (an array) and
        :meth:`starting_below`."""
        self._base_list = [b.base for b in self.buffers]
        self._bases = np.array(self._base_list, dtype=np.uint64)

    def span(self, addr: int, nbytes: int) -> tuple[Buffer, int]:
        """The buffer holding ``nbytes`` from ``addr`` and the offset in it (a host copy);
        ``ValueError`` saying where the range falls otherwise."""
        for b in self.buffers:
            if b.base <= addr and addr + nbytes <= b.base + b.size:
                return b, addr - b.base
        raise ValueError(self.describe(addr, nbytes))

    def starting_below(self, addr: int) -> int:
        """Index of the last buffer that starts at or below ``addr``, the only one that can
        hold it (-1: none)."""
        return bisect.bisect_right(self._base_list, addr) - 1

    def locate(self, addrs: np.ndarray, nbytes: int, lanes: np.ndarray, what: str) -> np.ndarray:
        """Index of the buffer holding each access; faults name the first bad lane."""
        k = np.searchsorted(self._bases, addrs, side="right").astype(np.int64) - 1
        if not self.buffers:
            raise LaneFault(f"{what}: address 0x{int(addrs[0]):x} is not in global memory "
                            "(the kernel has no global buffers)", lanes[:1])
        kk = np.maximum(k, 0)
        sizes = np.array([b.size for b in self.buffers], dtype=np.uint64)
        off = addrs - self._bases[kk]
        ok = (k >= 0) & (off + np.uint64(nbytes) <= sizes[kk])
        if not ok.all():
            i = int(np.argmin(ok))
            raise LaneFault(f"{what}: {self.describe(int(addrs[i]), nbytes)}", [lanes[i]])
        return k

    def describe(self, addr: int, nbytes: int) -> str:
        """Where an out-of-bounds address points, in words."""
        if not self.buffers:
            return f"address 0x{addr:x} is outside global memory"
        best = None
        for b in self.buffers:
            if b.base <= addr < b.base + max(b.size, 1) + GLOBAL_STRIDE // 2:
                best = b
            elif addr < b.base and best is None:
                best = b
        if best is None:
            best = self.buffers[-1]
        rel = addr - best.base
        if rel >= 0:
            if rel < best.size:
                return (f"bytes {rel}..{rel + nbytes - 1} of {best.name} run past its end "
                        f"({best.size} bytes)")
            return (f"address 0x{addr:x} is {rel - best.size} bytes past the end of "
                    f"{best.name} ({best.size} bytes; offset {rel})")
        return f"address 0x{addr:x} is {-rel} bytes before the start of {best.name}"


def check_alignment(addrs: np.ndarray, align: int, lanes: np.ndarray, what: str) -> None:
    if align <= 1:
        return
    bad = (addrs & np.uint64(align - 1)) != 0
    if bad.any():
        i = int(np.argmax(bad))
        a = int(addrs[i])
        raise LaneFault(f"{what}: misaligned address 0x{a:x} (a {align}-byte access needs an "
                        f"address that is a multiple of {align}; this one is {a % align} past)",
                        [lanes[i]])


def _gather(data: np.ndarray, off: np.ndarray, dtype, count: int) -> np.ndarray:
    view = data.view(dtype)
    esize = np.dtype(dtype).itemsize
    idx = (off // esize).astype(np.int64)
    if count == 1:
        return view[idx][:, None]
    return view[idx[:, None] + np.arange(count)]


def _scatter(data: np.ndarray, off: np.ndarray, values: np.ndarray) -> None:
    esize = values.dtype.itemsize
    view = data.view(values.dtype)
    idx = (off // esize).astype(np.int64)
    count = values.shape[1]
    if count == 1:
        view[idx] = values[:, 0]
    else:
        view[idx[:, None] + np.arange(count)] = values


_START = np.uint64(SHARED_START)
_OR = np.bitwise_or.reduce
_ACCESSES: dict = {}
_EVERY_LANE: dict = {}


def warp_access(dtype, count: int = 1) -> WarpAccess:
    """The kept :class:`WarpAccess` of ``count`` elements of ``dtype``."""
    key = (np.dtype(dtype), count)
    acc = _ACCESSES.get(key)
    if acc is None:
        acc = _ACCESSES[key] = WarpAccess(*key)
    return acc


def every_lane(n: int) -> np.ndarray:
    """Lanes ``0 .. n-1`` (read-only, kept): the lanes of an access every lane makes."""
    lanes = _EVERY_LANE.get(n)
    if lanes is None:
        lanes = _EVERY_LANE[n] = np.arange(n)
        lanes.flags.writeable = False
    return lanes


class Spaces:
    """Everything a warp's loads and stores reach: global, its block's shared, its local.

    A ``.shared``, ``.global`` or ``.param`` access whose lanes are all aligned and inside one
    buffer (the shared memory, one global buffer, the parameters) is checked with one
    reduction (two where the first cannot tell) and goes straight to the bytes, one index per
    lane (:class:`ItemViews`); any other access takes the lane-by-lane path, which names the
    first bad lane. Both paths do the same to memory and to the race tracker."""

    #: whether :meth:`load` and :meth:`store` may take the whole-warp path, which places a
    #: shared access by its ``.shared`` address and tells no global watcher (a subclass that
    #: places lanes differently or watches global accesses, such as many warps side by side,
    #: turns it off)
    whole_warp_checks = True

    __slots__ = ("glob", "shared", "shared_size", "local", "params", "param_size", "race",
                 "warp", "source_of", "_shared_items", "_param_items")

    def __init__(self, glob: GlobalMemory, shared: np.ndarray, shared_size: int,
                 local: np.ndarray | None, params: np.ndarray):
        self.glob = glob
        self.shared = shared
        self.shared_size = shared_size
        self.local = local
        self.params = params
        self.param_size = params.size
        self.race = None          # the block's RaceTracker, when races are watched
        self.warp = 0             # this warp's index in its block
        self.source_of = None     # instruction -> ("kernel.cu:12", text), for diagnostics
        self._shared_items: ItemViews | None = None   # made at the first whole-warp access
        self._param_items: ItemViews | None = None

    # ---- address classification ---------------------------------------------------------

    def split_generic(self, addrs: np.ndarray):
        """Generic addresses -> {space: boolean mask} for the spaces present."""
        a = addrs
        in_shared = (a >= np.uint64(SHARED_WINDOW)) & (a < np.uint64(SHARED_WINDOW + WINDOW_SIZE))
        in_local = (a >= np.uint64(LOCAL_WINDOW)) & (a < np.uint64(LOCAL_WINDOW + WINDOW_SIZE))
        in_param = (a >= np.uint64(PARAM_WINDOW)) & (a < np.uint64(PARAM_WINDOW + WINDOW_SIZE))
        return in_shared, in_local, in_param

    # ---- loads ---------------------------------------------------------------------------

    def load(self, space: str, addrs: np.ndarray, lanes: np.ndarray, dtype, count: int,
             what: str) -> np.ndarray:
        """Values ``(len(lanes), count)`` of ``dtype`` at ``addrs`` (one per active lane)."""
        esize = np.dtype(dtype).itemsize
        total = esize * count
        addrs = addrs.astype(np.uint64, copy=False)
        align = total if count > 1 else esize
        if space == "shared" or space == "global" or space == "param":
            got = self._load_whole_warp(space, addrs, lanes, dtype, count, total, align, what)
            if got is not None:
                return got
        check_alignment(addrs, align, lanes, what)
        if space == "generic":
            sh, lo, pa = self.split_generic(addrs)
            if not (sh.any() or lo.any() or pa.any()):
                return self._load_global(addrs, lanes, dtype, count, total, what)
            if sh.all():
                return self._load_shared(addrs - np.uint64(SHARED_WINDOW), lanes, dtype, count,
                                         total, what)
            if lo.all():
                return self._load_local(addrs - np.uint64(LOCAL_WINDOW), lanes, dtype, count,
                                        total, what)
            out = np.zeros((addrs.size, count), dtype=dtype)
            gl = ~(sh | lo | pa)
            for mask, sp, base in ((sh, "shared", SHARED_WINDOW), (lo, "local", LOCAL_WINDOW),
                                   (pa, "param", PARAM_WINDOW), (gl, "global", 0)):
                if mask.any():
                    out[mask] = self.load(sp, addrs[mask] - np.uint64(base), lanes[mask],
                                          dtype, count, what)
            return out
        if space == "global" or space == "const":
            return self._load_global(addrs, lanes, dtype, count, total, what)
        if space == "shared":
            return self._load_shared(self.shared32(addrs, lanes, what), lanes, dtype, count,
                                     total, what)
        if space == "local":
            return self._load_local(addrs, lanes, dtype, count, total, what)
        if space == "param":
            off = addrs.astype(np.int64)
            if (off < 0).any() or (off + total > self.param_size).any():
                i = int(np.argmax((off < 0) | (off + total > self.param_size)))
                raise LaneFault(f"{what}: parameter offset {int(off[i])} is outside the "
                                f"{self.param_size} bytes of kernel parameters", [lanes[i]])
            return _gather(self.params, off, dtype, count)
        raise LaneFault(f"{what}: state space .{space} is not modelled", lanes[:1],
                        kind="unsupported")

    def _place(self, space: str, addrs: np.ndarray, total: int, align: int):
        """Where an access of ``total`` bytes at each of ``addrs`` (uint64) goes when every lane
        is aligned and inside one buffer: ``(items, offsets, writable)``, the offsets (int64)
        counted from the buffer's first byte; ``None`` when not, or when this model checks lane
        by lane: then the lane-by-lane path names the first bad lane. One reduction tests
        alignment and bounds at once (the OR of the offsets is at least their largest); only
        where that cannot tell does a second take the largest."""
        if not (self.whole_warp_checks and addrs.size):
            return None
        if space == "shared":           # one bound: below the start wraps round, generic is huge
            off = addrs - _START
            size, writable = self.shared_size, True
            items = self._shared_items
            if items is None or items.source is not self.shared:
                items = self._shared_items = ItemViews(self.shared, SHARED_START)
        elif space == "global":
            glob = self.glob
            k = glob.starting_below(addrs.item(0))
            if k < 0:
                return None
            b = glob.buffers[k]
            off = addrs - b.ubase       # below the buffer wraps round
            size, writable = b.size, b.writable
            items = b.items
            if items is None or items.source is not b.data:
                items = b.items = ItemViews(b.data)
        elif space == "param":
            off = addrs
            size, writable = self.param_size, False
            items = self._param_items
            if items is None or items.source is not self.params:
                items = self._param_items = ItemViews(self.params)
        else:
            return None
        low = int(_OR(off))
        if low & (align - 1) or (low + total > size and int(off.max()) + total > size):
            return None
        return items, off.view(np.int64), writable

    def load_warp(self, space: str, addrs: np.ndarray, access: WarpAccess, what
                  ) -> np.ndarray | None:
        """Every lane's item (one per lane, of ``access.item``) at ``addrs`` (uint64, every lane
        of the warp active), or ``None`` where :meth:`load` must check lane by lane."""
        got = self._place(space, addrs, access.total, access.align)
        if got is None:
            return None
        items, off, _ = got
        if space == "shared":
            self._watch_shared("read", every_lane(off.size), off, access.total, what)
        return items.of(access)[off]

    def store_warp(self, space: str, addrs: np.ndarray, access: WarpAccess, items: np.ndarray,
                   what) -> bool:
        """Write one item per lane (``access.pack``-ed, every lane of the warp active): done,
        ``True``; ``False`` where :meth:`store` must check lane by lane."""
        got = self._place(space, addrs, access.total, access.align)
        if got is None or not got[2]:
            return False
        where, off, _ = got
        if space == "shared":
            self._watch_shared("write", every_lane(off.size), off, access.total, what, items)
        where.of(access)[off] = items
        return True

    def plan_copy(self, dst: np.ndarray, src: np.ndarray, access: WarpAccess):
        """A whole warp's copy of ``access.total`` bytes per lane (``access``: that many bytes)
        from global ``src`` to shared ``dst`` (uint64 addresses), checked now at both ends, to
        make later with :meth:`copy_planned`; ``None`` where a lane is misaligned or outside
        (then the lane by lane checks name it). It changes nothing: asked only to check, it
        says whether both ends fit."""
        size = access.total
        to = self._place("shared", dst, size, size)
        if to is None:
            return None
        fro = self._place("global", src, size, size)
        if fro is None:
            return None
        return to[0], to[1], fro[0], fro[1], access

    def copy_planned(self, plan, what) -> None:
        """Make a copy :meth:`plan_copy` checked: read every lane's bytes, then write them
        (the race tracker sees the write, as :meth:`store` shows it)."""
        to, dst_off, fro, src_off, access = plan
        items = fro.of(access)[src_off]
        self._watch_shared("write", every_lane(dst_off.size), dst_off, access.total, what,
                           items)
        to.of(access)[dst_off] = items

    def _load_whole_warp(self, space, addrs, lanes, dtype, count, total, align, what):
        """The load when every lane is aligned and inside one buffer, else ``None``."""
        got = self._place(space, addrs, total, align)
        if got is None:
            return None
        items, off, _ = got
        if space == "shared":
            self._watch_shared("read", lanes, off, total, what)
        access = warp_access(dtype, count)
        return access.unpack(items.of(access)[off])

    def _store_whole_warp(self, space, addrs, lanes, values, total, align, what) -> bool:
        """The store when every lane is aligned and inside one writable buffer: done, ``True``."""
        got = self._place(space, addrs, total, align)
        if got is None or not got[2]:
            return False
        where, off, _ = got
        if space == "shared":
            self._watch_shared("write", lanes, off, total, what, values)
        access = warp_access(values.dtype, values.shape[1])
        where.of(access)[off] = access.pack(values)
        return True

    def _load_global(self, addrs, lanes, dtype, count, total, what):
        k = self.glob.locate(addrs, total, lanes, what)
        self._watch_global("read", k, addrs, lanes, total)
        k0 = int(k[0])
        if (k == k0).all():
            b = self.glob.buffers[k0]
            return _gather(b.data, addrs - np.uint64(b.base), dtype, count)
        out = np.zeros((addrs.size, count), dtype=dtype)
        for kb in np.unique(k):
            sel = k == kb
            b = self.glob.buffers[int(kb)]
            out[sel] = _gather(b.data, addrs[sel] - np.uint64(b.base), dtype, count)
        return out

    def shared32(self, addrs: np.ndarray, lanes: np.ndarray, what) -> np.ndarray:
        """A ``.shared`` instruction's addresses as sm_90 uses them: the low 32 bits.

        Handed a 64-bit generic pointer instead of a shared address, ptxas keeps the register's
        low 32 bits; the generic window of shared memory has zero low bits, so on sm_90 that is
        the right shared address. It is still a mistake (on sm_80 the same code may fault), so
        it is reported as a :class:`GenericAddressAsShared` warning.
        """
        high = addrs >> np.uint64(32)
        if not high.any():
            return addrs
        i = int(np.argmax(high != 0))
        ins = getattr(what, "ins", None)
        line = f" (PTX line {ins.line}" if getattr(ins, "line", None) else ""
        if line and self.source_of is not None:
            src = self.source_of(ins)[0]
            line += f", {src}" if src else ""
        line += ")" if line else ""
        warnings.warn(GenericAddressAsShared(
            f"{what}{line}: lane {int(lanes[i])} gave the generic address 0x{int(addrs[i]):x} "
            "to a .shared instruction. It works on sm_90 only because the instruction keeps the "
            "low 32 bits and the generic window of shared memory has zero low bits; on sm_80 it "
            "may fault. Convert the pointer with __cvta_generic_to_shared() (cvta.to.shared)"),
            stacklevel=3)
        return addrs & np.uint64(0xFFFF_FFFF)

    def _shared_offsets(self, addrs, lanes, total, what):
        off = addrs.astype(np.int64) - SHARED_START
        bad = (off < 0) | (off + total > self.shared_size)
        if bad.any():
            i = int(np.argmax(bad))
            a = int(addrs[i])
            if 0 <= a < SHARED_START:
                raise LaneFault(
                    f"{what}: shared address {a} (0x{a:x}) is below the block's shared memory: "
                    f"on sm_90 the first {SHARED_START} bytes of the .shared window are reserved "
                    f"for the system and the block's variables start at {SHARED_START}; an "
                    "address is the tile's base (from __cvta_generic_to_shared) plus an offset",
                    [lanes[i]])
            raise LaneFault(
                f"{what}: shared address {a} (0x{a:x}) is outside the block's shared memory "
                f"({self.shared_size} bytes from address {SHARED_START}: static variables plus "
                "the dynamic size the launch asked for)", [lanes[i]])
        return off

    def _load_shared(self, addrs, lanes, dtype, count, total, what):
        off = self._shared_offsets(addrs, lanes, total, what)
        self._watch_shared("read", lanes, off, total, what)
        return _gather(self.shared, off + SHARED_START, dtype, count)

    def _local_offsets(self, addrs, lanes, total, what):
        size = 0 if self.local is None else self.local.shape[1]
        off = addrs.astype(np.int64)
        bad = (off < 0) | (off + total > size)
        if bad.any():
            i = int(np.argmax(bad))
            raise LaneFault(f"{what}: local address {int(off[i])} is outside the thread's "
                            f"{size} bytes of local memory", [lanes[i]])
        return off

    def _load_local(self, addrs, lanes, dtype, count, total, what):
        off = self._local_offsets(addrs, lanes, total, what)
        view = self.local.view(dtype)
        esize = np.dtype(dtype).itemsize
        idx = off // esize
        return view[lanes[:, None], idx[:, None] + np.arange(count)]

    # ---- stores --------------------------------------------------------------------------

    def store(self, space: str, addrs: np.ndarray, lanes: np.ndarray, values: np.ndarray,
              what: str) -> None:
        """Write ``values`` ``(len(lanes), count)``; later lanes win on equal addresses."""
        count = values.shape[1]
        esize = values.dtype.itemsize
        total = esize * count
        addrs = addrs.astype(np.uint64, copy=False)
        align = total if count > 1 else esize
        if (space == "shared" or space == "global") and self._store_whole_warp(
                space, addrs, lanes, values, total, align, what):
            return
        check_alignment(addrs, align, lanes, what)
        if space == "generic":
            sh, lo, pa = self.split_generic(addrs)
            if pa.any():
                i = int(np.argmax(pa))
                raise LaneFault(f"{what}: kernel parameters are read-only", [lanes[i]])
            gl = ~(sh | lo)
            for mask, sp, base in ((sh, "shared", SHARED_WINDOW), (lo, "local", LOCAL_WINDOW),
                                   (gl, "global", 0)):
                if mask.all():
                    self.store(sp, addrs - np.uint64(base), lanes, values, what)
                    return
                if mask.any():
                    self.store(sp, addrs[mask] - np.uint64(base), lanes[mask], values[mask],
                               what)
            return
        if space == "global":
            k = self.glob.locate(addrs, total, lanes, what)
            self._watch_global("write", k, addrs, lanes, total)
            for kb in (np.unique(k) if not (k == k[0]).all() else k[:1]):
                sel = k == kb
                b = self.glob.buffers[int(kb)]
                if not b.writable:
                    raise LaneFault(f"{what}: {b.name} is read-only", [lanes[int(np.argmax(sel))]])
                if sel.all():
                    _scatter(b.data, addrs - np.uint64(b.base), values)
                else:
                    _scatter(b.data, addrs[sel] - np.uint64(b.base), values[sel])
            return
        if space == "shared":
            off = self._shared_offsets(self.shared32(addrs, lanes, what), lanes, total, what)
            self._watch_shared("write", lanes, off, total, what, values)
            _scatter(self.shared, off + SHARED_START, values)
            return
        if space == "local":
            off = self._local_offsets(addrs, lanes, total, what)
            view = self.local.view(values.dtype)
            idx = off // esize
            view[lanes[:, None], idx[:, None] + np.arange(count)] = values
            return
        raise LaneFault(f"{what}: cannot store to state space .{space}", lanes[:1])

    # ---- who watches the accesses -----------------------------------------------------

    def _watch_shared(self, kind: str, lanes, off, total: int, what, values=None) -> None:
        """A shared access, for the block's race tracker (``off`` from the block's start)."""
        if self.race is None or getattr(what, "ins", None) is None:
            return
        if kind == "read":
            self.race.read(self.warp, lanes, off, total, what)
        else:
            self.race.write(self.warp, lanes, off, total, what,
                            unchanged=lambda: self._unchanged(off, total, values))

    def _watch_global(self, kind: str, k: np.ndarray, addrs, lanes, total: int) -> None:
        """A global access to the buffers ``k``: nobody watches it warp by warp (a vector run
        of many warps does, :class:`ptxlab.run.ptx.wide_memory.WideSpaces`)."""

    def _unchanged(self, off: np.ndarray, total: int, values: np.ndarray) -> np.ndarray:
        """Which bytes a shared store is about to write already hold the value it writes (one
        flag per byte, lane by lane): asked for by the race tracker only when a race is found."""
        where = (off + SHARED_START)[:, None] + np.arange(total)
        new = np.ascontiguousarray(values).view(np.uint8).reshape(where.shape)
        return (self.shared[where] == new).reshape(-1)

    # ---- raw shared bytes for the matrix instructions ------------------------------------

    def shared_bytes(self) -> np.ndarray:
        """The ``.shared`` window up to the block's last byte, indexed by address (the emulator
        takes addresses); the reserved bytes before :data:`SHARED_START` are never reached,
        the instructions refuse rows there first (:meth:`check_shared_rows`)."""
        return self.shared[: SHARED_START + self.shared_size]

    def check_shared_rows(self, addrs: np.ndarray, lanes: np.ndarray, what) -> None:
        """Refuse rows in the reserved start of the window, as :meth:`_shared_offsets` does."""
        low = addrs < SHARED_START
        if low.any():
            self._shared_offsets(addrs[low][:1].astype(np.uint64), lanes[low][:1], 16, what)
