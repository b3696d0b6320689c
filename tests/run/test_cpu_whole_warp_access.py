"""A warp's ``.shared``/``.global``/``.param`` access that is aligned and inside one buffer is checked for
the whole warp at once (``Spaces.load``/``Spaces.store``); every other access takes the lane by
lane path. Both must leave memory, the race tracker and the fault (its kind, words and lane)
exactly as the lane-by-lane path alone does, also at the edges of a buffer, where a bulk test
that is off by one byte would let an access through."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from ptxlab.run import gpu
from ptxlab.run.ptx import memory, racecheck
from ptxlab.run.ptx.launch_shape import launch_shape


class _LaneByLane(memory.Spaces):
    __slots__ = ()
    whole_warp_checks = False


class _Ins:
    line = 7
    text = "st.shared.u16 [%r1], %rs1;"
    full_opcode = "st.shared.u16"


class _Program:
    def source_location(self, ins):
        return "", ""


SHARED_SIZE = 200                      # not a multiple of 16: the last bytes are an edge
SITE = racecheck.Site(_Ins())


def _spaces(cls, tracker_cls=racecheck.SoleWarpTracker):
    glob = memory.GlobalMemory()
    glob.add(100, "argument 0", np.arange(100, dtype=np.uint8))
    glob.add(64, "variable table", np.arange(64, dtype=np.uint8)[::-1].copy(), writable=False)
    glob.add(48, "argument 1")
    shared = np.zeros(memory.SHARED_START + 208, np.uint8)
    shared[memory.SHARED_START:] = np.arange(208, dtype=np.uint8)
    sp = cls(glob, shared, SHARED_SIZE, None, np.arange(48, dtype=np.uint8))
    sp.race = tracker_cls(SHARED_SIZE, _Program(), (0, 0, 0))
    if tracker_cls is racecheck.SoleWarpTracker:
        sp.race.written[:120] = True                 # some bytes written before, some not
    return sp


def _addresses(rng, space: str, glob: memory.GlobalMemory, esize: int, total: int, n: int):
    """``n`` lanes' addresses near one edge or another of a buffer: mostly aligned and inside,
    often one byte or one element over, sometimes misaligned, in another buffer or generic."""
    if space == "shared":
        lo, hi = memory.SHARED_START, memory.SHARED_START + SHARED_SIZE
    elif space == "param":
        lo, hi = 0, 48
    else:
        b = glob.buffers[rng.integers(len(glob.buffers))]
        lo, hi = b.base, b.base + b.size
    pick = rng.integers(6)
    if pick == 0:                                    # right up to the end
        start = hi - total * n
    elif pick == 1:                                  # one element past the end
        start = hi - total * n + esize
    elif pick == 2:                                  # one element before the start
        start = lo - esize
    else:
        start = lo + total * int(rng.integers(0, max(1, (hi - lo) // total - n + 1)))
    addrs = start + total * rng.permutation(n)
    if rng.random() < 0.15:
        addrs[rng.integers(n)] += esize // 2 or 1    # one lane misaligned
    if rng.random() < 0.1 and space == "global":
        addrs[rng.integers(n)] = glob.buffers[-1].base   # one lane in another buffer
    if rng.random() < 0.1 and space == "shared":
        addrs[rng.integers(n)] += memory.SHARED_WINDOW   # a generic pointer
    return np.asarray(addrs, dtype=np.int64).astype(np.uint64)


def _outcome(call):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            got = call()
        except memory.LaneFault as f:
            got = ("fault", f.message, f.lanes, f.kind)
    return got, [str(w.message) for w in seen]


@pytest.mark.parametrize("seed", range(6))
def test_whole_warp_path_does_what_the_lane_path_does(seed):
    rng = np.random.default_rng(seed)
    fast, slow = _spaces(memory.Spaces), _spaces(_LaneByLane)
    faults = passed = 0
    for _ in range(400):
        space = ("shared", "global", "param")[rng.integers(3)]
        dtype = np.dtype((np.uint8, np.uint16, np.uint32, np.uint64)[rng.integers(4)])
        count = (1, 2, 4)[rng.integers(3)] if dtype.itemsize < 8 else 1
        total = dtype.itemsize * count
        n = int(rng.integers(1, 9))
        addrs = _addresses(rng, space, fast.glob, dtype.itemsize, total, n)
        lanes = np.sort(rng.choice(32, n, replace=False))
        if rng.random() < 0.5 and space != "param":
            values = rng.integers(0, 255, (n, count)).astype(dtype)
            a = _outcome(lambda: fast.store(space, addrs.copy(), lanes, values, SITE))
            b = _outcome(lambda: slow.store(space, addrs.copy(), lanes, values, SITE))
        else:
            a = _outcome(lambda: fast.load(space, addrs.copy(), lanes, dtype, count, SITE))
            b = _outcome(lambda: slow.load(space, addrs.copy(), lanes, dtype, count, SITE))
        if isinstance(a[0], np.ndarray):
            assert isinstance(b[0], np.ndarray) and a[0].dtype == b[0].dtype
            assert np.array_equal(a[0], b[0]) and a[1] == b[1]
        else:
            assert a == b
        faults += isinstance(a[0], tuple)
        passed += not isinstance(a[0], tuple)
        assert np.array_equal(fast.shared, slow.shared)
        assert all(np.array_equal(x.data, y.data)
                   for x, y in zip(fast.glob.buffers, slow.glob.buffers))
        assert np.array_equal(fast.race.written, slow.race.written)
    assert fast.race.uninitialized == slow.race.uninitialized
    assert faults > 40 and passed > 120       # both paths were walked, many times


def test_race_tracker_of_many_warps_sees_the_same_accesses():
    """A block of several warps keeps writers and readers per byte: the whole-warp path hands
    it the same offsets."""
    fast = _spaces(memory.Spaces, racecheck.RaceTracker)
    slow = _spaces(_LaneByLane, racecheck.RaceTracker)
    rng = np.random.default_rng(1)
    for step in range(60):
        for sp in (fast, slow):
            sp.warp = step % 3
        addrs = (memory.SHARED_START + 2 * rng.permutation(32)).astype(np.uint64)
        vals = rng.integers(0, 9, (32, 1)).astype(np.uint16)
        for sp in (fast, slow):
            if step % 2:
                sp.store("shared", addrs, np.arange(32), vals, SITE)
            else:
                sp.load("shared", addrs, np.arange(32), np.uint16, 1, SITE)
    for name in ("w_warp", "w_lane", "r_warps", "r_lane"):
        assert np.array_equal(getattr(fast.race, name), getattr(slow.race, name)), name
    assert [r.address for r in fast.race.races] == [r.address for r in slow.race.races]
    assert fast.race.races                     # the warps did race


@pytest.mark.parametrize("nbytes", [1, 2, 4, 8, 16])
def test_bytes_of_an_access_are_those_access_units_names(nbytes):
    off = np.random.default_rng(nbytes).integers(0, 500, 32)
    every_byte = np.concatenate([np.arange(o, o + nbytes) for o in off])
    assert np.array_equal(racecheck._bytes_of(off, nbytes), every_byte)
    idx, who, _ = racecheck.access_units(np.arange(32), off, nbytes, widest=1)
    assert np.array_equal(idx, every_byte) and np.array_equal(who, np.repeat(np.arange(32),
                                                                             nbytes))


def test_a_launch_shape_is_shared_read_only():
    exists, specials = launch_shape((40, 1, 1), (2, 1, 1), 0, 64)
    assert len(exists) == 2 and exists[1].sum() == 8
    assert list(specials[1]["%tid.x"][:3]) == [32, 33, 34]
    for table in specials:
        with pytest.raises(TypeError):
            table["%laneid"] = None                          # the table is a read-only view
        for name, arr in table.items():
            assert not arr.flags.writeable, name
    assert launch_shape((40, 1, 1), (2, 1, 1), 0, 64)[1] is specials
    from ptxlab.run.ptx.wide import _tiled_specials       # many blocks side by side
    tiled = _tiled_specials(((40, 1, 1), (2, 1, 1), 0, 64), 3)
    assert list(tiled["%tid.x"][:3]) == [0, 1, 2] and tiled["%tid.x"].size == 3 * 64
    assert list(tiled["%tid.x"][64:67]) == [0, 1, 2]      # the second block starts again
    assert not any(arr.flags.writeable for arr in tiled.values())


def test_required_capability_is_a_new_list_each_time():
    src = "asm volatile(\"stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1};\" ...);"
    need, uses = gpu.required_compute_capability(src)
    uses.append("spoilt")
    assert gpu.required_compute_capability(src) == (need, ["stmatrix"]) and need == 90


def test_sole_warp_tracker_notes_a_read_of_bytes_partly_unwritten():
    tracker = racecheck.SoleWarpTracker(64, _Program(), (0, 0, 0))
    tracker.write(0, np.arange(5), np.arange(5) * 2, 2, SITE)             # bytes 0..9
    tracker.read(0, np.arange(4), np.array([0, 2, 4, 6]), 2, SITE)        # all written
    assert tracker.uninitialized == []
    tracker.read(0, np.arange(2), np.array([8, 10]), 2, SITE)             # 10, 11 are not
    (access, address), = tracker.uninitialized
    assert address == memory.SHARED_START + 10 and access.lane == 1


#: One warp copies 16 bytes per lane with cp.async from ``src`` (offset ``SRC`` elements of 4
#: bytes) to the shared tile (offset ``DST`` bytes), ``BYTES`` of them read (the rest zero).
CP_ASYNC = r'''
extern "C" __global__ void k(const unsigned* src, unsigned* out) {
    __shared__ __align__(16) unsigned tile[136];
    int t = threadIdx.x;
    for (int i = t; i < 136; i += 32) tile[i] = 7u;
    __syncwarp();
    unsigned d = (unsigned)__cvta_generic_to_shared(tile) + DST + 16 * t;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n"
                 "cp.async.wait_all;" :: "r"(d), "l"(src + SRC + 4 * t), "r"(BYTES));
    __syncwarp();
    for (int i = t; i < 136; i += 32) out[i] = tile[i];
}'''


@pytest.mark.parametrize("dst,src,nbytes", [
    (0, 0, 16),          # every lane inside both ends
    (32, 8, 16),         # the last lane ends at the tile's last byte
    (48, 0, 16),         # the last lane runs 16 bytes past the tile
    (0, 4, 16),          # the last lane reads past the source array
    (8, 0, 16),          # destinations misaligned
    (0, 1, 16),          # sources misaligned
    (0, 4, 0),           # nothing read: the source is not touched, the tile gets zeros
    (0, 0, 5),           # part read, the rest zeros
])
def test_cp_async_checks_and_copies_as_lane_by_lane(monkeypatch, dst, src, nbytes):
    from ptxlab.run import backends
    from ptxlab.run.in_process import cpu_available
    if not cpu_available()[0]:
        pytest.skip(f"CPU model unavailable: {cpu_available()[1]}")
    code = (CP_ASYNC.replace("DST", str(dst)).replace("SRC", str(src))
            .replace("BYTES", str(nbytes)))

    def run():
        args = [np.arange(4 * 32, dtype=np.uint32), np.zeros(136, np.uint32)]
        try:
            return backends.launch(code, "k", args=args, grid=1, block=32, backend="cpu").outputs[1]
        except Exception as exc:                      # the fault, in its words
            return f"{type(exc).__name__}: {exc}"

    whole = run()
    monkeypatch.setattr(memory.Spaces, "whole_warp_checks", False)
    lane_by_lane = run()
    if isinstance(whole, str):
        assert whole == lane_by_lane and "cp.async" in whole
    else:
        assert np.array_equal(whole, lane_by_lane)


def test_a_copy_with_no_lanes_does_nothing():
    from ptxlab.run.ptx.instructions.memory_ops import _perform_copy

    class _Warp:
        spaces = _spaces(memory.Spaces)
    before = _Warp.spaces.shared.copy()
    none = np.zeros(0, np.int64)
    _perform_copy(_Warp, (none, none.astype(np.uint64), none.astype(np.uint64), none, 16, SITE))
    assert np.array_equal(_Warp.spaces.shared, before)


@pytest.mark.parametrize("seed", range(4))
def test_a_whole_warps_load_warp_and_store_warp_do_what_the_lane_path_does(seed):
    """``ld``/``st`` with every lane active call ``load_warp``/``store_warp`` first and, where
    they decline, ``load``/``store``: together the same bytes, values, flags and faults as the
    lane-by-lane path alone, vectors included."""
    rng = np.random.default_rng(100 + seed)
    fast, slow = _spaces(memory.Spaces), _spaces(_LaneByLane)
    lanes = np.arange(32)
    took = faults = 0
    for _ in range(300):
        space = ("shared", "global", "param")[rng.integers(3)]
        dtype = np.dtype((np.uint8, np.uint16, np.uint32, np.uint64)[rng.integers(4)])
        count = (1, 2, 4)[rng.integers(3)] if dtype.itemsize < 8 else (1, 2)[rng.integers(2)]
        access = memory.WarpAccess(dtype, count)
        total = access.total
        lo = 0 if space == "param" else memory.SHARED_START
        span = 48 if space == "param" else SHARED_SIZE
        if space == "global":
            b = fast.glob.buffers[rng.integers(len(fast.glob.buffers))]
            lo, span = b.base, b.size
        start = lo + total * int(rng.integers(-1, max(1, span // total - 2)))
        addrs = start + total * rng.integers(0, 3, 32)    # lanes share items: later lanes win
        if rng.random() < 0.2:
            addrs[rng.integers(32)] += int(rng.integers(1, total + 2))
        addrs = np.asarray(addrs, np.int64).astype(np.uint64)
        if rng.random() < 0.5 and space != "param":
            values = rng.integers(0, 255, (32, count)).astype(dtype)
            a = _outcome(lambda: fast.store_warp(space, addrs.copy(), access,
                                                 access.pack(values), SITE)
                         or fast.store(space, addrs.copy(), lanes, values, SITE))
            b = _outcome(lambda: slow.store(space, addrs.copy(), lanes, values, SITE))
            if a[0] is True:
                a, b = (None, a[1]), b
                took += 1
        else:
            def whole():
                got = fast.load_warp(space, addrs.copy(), access, SITE)
                if got is None:
                    return fast.load(space, addrs.copy(), lanes, dtype, count, SITE)
                return access.unpack(got)
            a = _outcome(whole)
            b = _outcome(lambda: slow.load(space, addrs.copy(), lanes, dtype, count, SITE))
        if isinstance(a[0], np.ndarray):
            assert a[0].dtype == b[0].dtype and np.array_equal(a[0], b[0]) and a[1] == b[1]
        else:
            assert a == b
        faults += isinstance(a[0], tuple)
        assert np.array_equal(fast.shared, slow.shared)
        assert all(np.array_equal(x.data, y.data)
                   for x, y in zip(fast.glob.buffers, slow.glob.buffers))
        assert np.array_equal(fast.race.written, slow.race.written)
    assert fast.race.uninitialized == slow.race.uninitialized
    assert faults > 20 and took > 30


COPY16 = memory.WarpAccess(np.uint8, 16)


def test_a_planned_copy_does_what_a_load_and_a_store_do():
    fast, slow = _spaces(memory.Spaces), _spaces(_LaneByLane)
    lanes = np.arange(12)
    dst = (memory.SHARED_START + 16 * np.random.default_rng(3).permutation(12)).astype(np.uint64)
    src = (fast.glob.buffers[0].base + 16 * (np.arange(12) % 6)).astype(np.uint64)
    plan = fast.plan_copy(dst, src, COPY16)
    assert plan is not None
    fast.copy_planned(plan, SITE)
    slow.store("shared", dst, lanes, slow.load("global", src, lanes, np.uint8, 16, SITE), SITE)
    assert np.array_equal(fast.shared, slow.shared)
    assert np.array_equal(fast.race.written, slow.race.written)
    assert fast.race.uninitialized == slow.race.uninitialized
    assert fast.plan_copy(dst + np.uint64(8), src, COPY16) is None          # misaligned
    assert fast.plan_copy(dst, src + np.uint64(16 * 6), COPY16) is None     # past argument 0
    assert _LaneByLane.plan_copy(slow, dst, src, COPY16) is None            # lane by lane


PARAM_KERNEL = r'''
extern "C" __global__ void k(unsigned* out, unsigned n, unsigned long long m) {
    out[threadIdx.x] = n + (unsigned)(m >> 32) + threadIdx.x;
}'''


def test_a_kept_parameter_load_follows_the_parameter_bytes():
    """``ld.param`` keeps its values with the bytes they came from: a launch with other
    arguments loads them again, one with the same ones hands out the same values."""
    from ptxlab.run import backends
    from ptxlab.run.in_process import cpu_available
    if not cpu_available()[0]:
        pytest.skip(f"CPU model unavailable: {cpu_available()[1]}")

    def run(n, m):
        out = np.zeros(32, np.uint32)
        return backends.launch(PARAM_KERNEL, "k", args=[out, np.uint32(n), np.uint64(m)],
                               grid=1, block=32, backend="cpu").outputs[0]
    for n, m in ((3, 5 << 32), (3, 5 << 32), (7, 5 << 32), (7, 9 << 32), (3, 5 << 32)):
        assert list(run(n, m)) == [n + (m >> 32) + t for t in range(32)]


@pytest.mark.parametrize("dtype,count", [(np.uint32, 4), (np.uint16, 2), (np.float32, 4),
                                         (np.uint64, 2), (np.uint8, 4)])
def test_a_vectors_sources_pack_as_its_stacked_elements(dtype, count):
    """``st.v2/v4`` packs its source registers straight into items: the bytes of the
    ``(lanes, count)`` elements the lane path stores."""
    access = memory.WarpAccess(dtype, count)
    rng = np.random.default_rng(count)
    cols = [rng.integers(0, 250, 32).astype(dtype) for _ in range(count)]
    packed = access.pack_columns(cols, 32)
    assert packed.tobytes() == np.stack(cols, axis=1).tobytes()
    assert packed.tobytes() == access.pack(np.stack(cols, axis=1)).tobytes()
    assert np.array_equal(access.unpack(packed), np.stack(cols, axis=1))
