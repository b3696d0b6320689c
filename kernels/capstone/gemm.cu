// Capstone GEMM: C[M,N] = A[M,K] * B[K,N], fp16 inputs, fp32 accumulation, fp16 or fp32 output.
//
// Data path of one block:
//   global --cp.async 16 B--> XOR-swizzled shared tiles (GEMM_STAGES-deep ring)
//          --ldmatrix (.trans for row-major B)--> mma.sync.m16n8k16 fragments
//          --mma.sync--> fp32 accumulators --stmatrix--> per-warp staging tile
//          --ld.shared.v4 / st.global.v4--> C
//
// A is row-major (M x K). B is row-major (K x N) or, with GEMM_B_COL=1, column-major (stored as
// N x K). M, N, K must be multiples of GEMM_BM, GEMM_BN, GEMM_BK (the host side checks).
//
// With GEMM_SPLIT_K = S > 1 the K dimension is cut into S slices and S blocks share a tile of C
// (block b computes slice b / tiles of tile b % tiles): that fills the SMs where the grid of
// tiles alone would leave many idle (1024^3 is 32 tiles of 128x256 on 132 SMs). Each block
// writes its fp32 partial tile to the workspace W and takes a ticket from the tile's counter;
// the block with the last ticket adds the others' partials to its accumulators, resets the
// counter for the next launch and runs the epilogue. No block waits for another, so the order
// in which blocks run (the CPU interpreter runs them one at a time) does not matter.
//
// A block computes the tiles blockIdx.x, blockIdx.x + gridDim.x, ... of C: launched with one
// block per tile it is an ordinary GEMM; launched with one block per SM it is persistent, and the
// cp.async ring runs on across tiles, so the next tile's first k-tiles are in flight while the
// epilogue of this one stores. The staging area of the epilogue is separate from the ring for
// that reason; with GEMM_EPI_OVERLAP=1 (f16 out) the read-back and global stores of one tile are
// also spread over the first k-tile of the next, between its mma.sync.
//
// The tile configuration is chosen with -D options (defaults below = the configuration picked by
// measurement on the H100, see measure/sweeps/capstone_tuning.md); a small configuration (one 64x64 tile,
// 128 threads) runs the same code on the CPU interpreter.
#ifndef GEMM_L2_PREFETCH
#define GEMM_L2_PREFETCH 0       // 64/128/256: each cp.async asks L2 to fetch that many bytes
#endif
#if GEMM_L2_PREFETCH == 64
#define CP_ASYNC_L2_HINT ".L2::64B"
#elif GEMM_L2_PREFETCH == 128
#define CP_ASYNC_L2_HINT ".L2::128B"
#elif GEMM_L2_PREFETCH == 256
#define CP_ASYNC_L2_HINT ".L2::256B"
#endif
#include "capstone/capstone_ptx.cuh"

#ifndef GEMM_BM
#define GEMM_BM 128
#endif
#ifndef GEMM_BN
#define GEMM_BN 256
#endif
#ifndef GEMM_BK
#define GEMM_BK 64
#endif
#ifndef GEMM_WARPS_M
#define GEMM_WARPS_M 2
#endif
#ifndef GEMM_WARPS_N
#define GEMM_WARPS_N 4
#endif
#ifndef GEMM_STAGES
#define GEMM_STAGES 3
#endif
#ifndef GEMM_B_COL
#define GEMM_B_COL 0
#endif
#ifndef GEMM_OUT_F32
#define GEMM_OUT_F32 0
#endif
#ifndef GEMM_GROUP_M
#define GEMM_GROUP_M 8
#endif
#ifndef GEMM_MAINLOOP
#define GEMM_MAINLOOP 2          // 2: fragments and barrier pipelined across k-steps; 0: plain
#endif
#ifndef GEMM_SPLIT_COPIES
#define GEMM_SPLIT_COPIES 0      // 1: a k-tile's cp.async spread over the k-steps of the previous
#endif
#ifndef GEMM_MIN_BLOCKS
#define GEMM_MIN_BLOCKS 1
#endif
#ifndef GEMM_EPI_ROWS
#define GEMM_EPI_ROWS 0          // rows of the warp tile staged at once; 0: all (f16), 16 (f32)
#endif
#ifndef GEMM_EPI_OVERLAP
#define GEMM_EPI_OVERLAP 0       // 1: a tile's stores issue during the next tile's first k-tile
#endif
#ifndef GEMM_PERSISTENT
#define GEMM_PERSISTENT 0        // 1: a block loops over tiles (launched with one per SM)
#endif
#ifndef GEMM_SPLIT_K
#define GEMM_SPLIT_K 1           // K slices per tile of C, reduced through the workspace
#endif
#ifndef GEMM_MMA_ORDER
#define GEMM_MMA_ORDER 0         // 0: m16 rows outer (A reused); 1: n8 columns outer, rows snake
#endif

namespace gemm {

constexpr int BM = GEMM_BM, BN = GEMM_BN, BK = GEMM_BK, STAGES = GEMM_STAGES;
constexpr int WARPS_M = GEMM_WARPS_M, WARPS_N = GEMM_WARPS_N;
constexpr int THREADS = 32 * WARPS_M * WARPS_N;
constexpr int WTM = BM / WARPS_M;          // rows of C one warp owns
constexpr int WTN = BN / WARPS_N;          // columns of C one warp owns
constexpr int MT = WTM / 16;               // m16 tiles per warp
constexpr int NT = WTN / 8;                // n8 tiles per warp
constexpr int KS = BK / 16;                // k16 steps per shared tile
constexpr int SPLIT_K = GEMM_SPLIT_K;
static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BK % 16 == 0, "tile shape");
static_assert(SPLIT_K >= 1 && (SPLIT_K == 1 || !GEMM_PERSISTENT),
              "split-K blocks compute one tile slice each (not persistent)");

// Shared tiles are rows of 16-byte chunks. A: BM rows of BK/8 chunks. B row-major: BK rows of
// BN/8 chunks; B column-major: BN rows of BK/8 chunks.
constexpr int A_C = BK / 8;
constexpr int B_ROWS = GEMM_B_COL ? BN : BK;
constexpr int B_C = GEMM_B_COL ? BK / 8 : BN / 8;
constexpr int A_BYTES = BM * BK * 2;
constexpr int B_BYTES = BK * BN * 2;
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int RING_BYTES = STAGES * STAGE_BYTES;

// XOR swizzle of the 16-byte chunk index inside a row of C chunks: the 8 rows one ldmatrix phase
// reads (same logical chunk, consecutive rows) land in 8 different 16-byte bank groups.
template <int C>
__device__ __forceinline__ int swizzle(int row, int chunk) {
    if constexpr (C >= 8) return chunk ^ (row & 7);
    else if constexpr (C == 4) return chunk ^ ((row >> 1) & 3);
    else if constexpr (C == 2) return chunk ^ ((row >> 2) & 1);
    else return chunk;
}
template <int C>
__device__ __forceinline__ u32 tile_offset(int row, int chunk) {
    return (u32)(row * C + swizzle<C>(row, chunk)) * 16u;
}

// Epilogue staging, one area per warp: f16 stages EPI_ROWS rows of the warp tile at a time (the
// whole tile by default), f32 one m16 slab at a time. A block that computes one tile stages in
// the ring, which is free once every warp is past its last ldmatrix; a persistent block's ring
// is already filling for its next tile, so its staging areas come after the ring.
constexpr int EPI_ROWS = GEMM_OUT_F32 ? 16 : (GEMM_EPI_ROWS ? GEMM_EPI_ROWS : WTM);
constexpr int EPI_WARP_BYTES = EPI_ROWS * WTN * (GEMM_OUT_F32 ? 4 : 2);
constexpr int EPI_BASE = GEMM_PERSISTENT ? RING_BYTES : 0;
constexpr int EPI_END = EPI_BASE + (THREADS / 32) * EPI_WARP_BYTES;
constexpr int SMEM_BYTES = EPI_END > RING_BYTES ? EPI_END : RING_BYTES;
static_assert(WTM % EPI_ROWS == 0 && EPI_ROWS % 16 == 0, "staged rows");
static_assert(!GEMM_EPI_OVERLAP || (!GEMM_OUT_F32 && EPI_ROWS == WTM && GEMM_MAINLOOP == 2 &&
                                    GEMM_PERSISTENT),
              "overlapped stores need a persistent block, the whole f16 warp tile staged and the "
              "pipelined loop");

// Block tile `tile` -> its first row and column of C. GEMM_GROUP_M tile rows at a time, so that
// blocks running together share A and B panels in L2.
__device__ __forceinline__ void tile_origin(int tile, int M, int N, int& m0, int& n0) {
    const int tiles_m = M / BM, tiles_n = N / BN;
    const int per_group = GEMM_GROUP_M * tiles_n;
    const int group = tile / per_group, first_m = group * GEMM_GROUP_M;
    const int gsize = tiles_m - first_m < GEMM_GROUP_M ? tiles_m - first_m : GEMM_GROUP_M;
    const int in_group = tile % per_group;
    m0 = (first_m + in_group % gsize) * BM;
    n0 = (in_group / gsize) * BN;
}

// Where this thread's cp.async copies go. Copy i of A moves 16-byte chunk `ch` of tile row
// row0 + i * (THREADS / A_C); that step is a multiple of 8 rows, so the swizzle of every copy
// equals that of copy 0 and the whole plan is two pointers, two shared offsets and two strides,
// computed once per tile (the per-copy index arithmetic would otherwise cost more than the copies).
struct CopyPlan {
    const unsigned short* a_src;   // chunk of copy 0 in the current k-tile
    const unsigned short* b_src;
    u32 a_dst, b_dst;              // shared offsets of copy 0 inside a stage
    u64 a_step, b_step;            // elements between copy i and copy i+1
    u64 b_next;                    // elements from one k-tile of B to the next
};
constexpr int A_ROWS_PER_COPY = THREADS / A_C;
constexpr int B_ROWS_PER_COPY = THREADS / B_C;
static_assert(THREADS % A_C == 0 && THREADS % B_C == 0, "a warp-block row split of the copies");
static_assert(A_ROWS_PER_COPY % 8 == 0 && B_ROWS_PER_COPY % 8 == 0, "swizzle-invariant copy step");

__device__ __forceinline__ CopyPlan make_copy_plan(const unsigned short* A, const unsigned short* B,
                                                   int m0, int n0, int k0, int N, int K,
                                                   int tid) {
    CopyPlan p;
    const int a_row = tid / A_C, a_ch = tid % A_C, b_row = tid / B_C, b_ch = tid % B_C;
    p.a_src = A + (u64)(m0 + a_row) * K + k0 + a_ch * 8;
    p.a_dst = tile_offset<A_C>(a_row, a_ch);
    p.a_step = (u64)A_ROWS_PER_COPY * K;
#if GEMM_B_COL
    p.b_src = B + (u64)(n0 + b_row) * K + k0 + b_ch * 8;
    p.b_step = (u64)B_ROWS_PER_COPY * K;
    p.b_next = BK;
#else
    p.b_src = B + (u64)(k0 + b_row) * N + n0 + b_ch * 8;
    p.b_step = (u64)B_ROWS_PER_COPY * N;
    p.b_next = (u64)BK * N;
#endif
    p.b_dst = A_BYTES + tile_offset<B_C>(b_row, b_ch);
    return p;
}

// The copies of the plan's current k-tile into ring slot `stage`, split into PARTS groups of
// about equal size: part `part` issues its share (no commit, no advance). PARTS = 1 issues them
// all; spreading them over k-steps lets the copies issue in the gaps between mma.sync.
constexpr int A_COPIES = BM * A_C / THREADS, B_COPIES = B_ROWS * B_C / THREADS;
static_assert((BM * A_C) % THREADS == 0 && (B_ROWS * B_C) % THREADS == 0, "copy split");
template <int PARTS>
__device__ __forceinline__ void load_stage_part(u32 smem, int stage, const CopyPlan& p, int part) {
    const u32 base = smem + stage * STAGE_BYTES;
#pragma unroll
    for (int c = 0; c < A_COPIES + B_COPIES; ++c) {
        if (c * PARTS / (A_COPIES + B_COPIES) != part) continue;
        if (c < A_COPIES)
            cp_async_16(base + p.a_dst + c * A_ROWS_PER_COPY * A_C * 16, p.a_src + c * p.a_step);
        else
            cp_async_16(base + p.b_dst + (c - A_COPIES) * B_ROWS_PER_COPY * B_C * 16,
                        p.b_src + (c - A_COPIES) * p.b_step);
    }
}
__device__ __forceinline__ void advance_plan(CopyPlan& p) {
    p.a_src += BK;
    p.b_src += p.b_next;
}

// The producer side of the ring: what it copies next. Without GEMM_PERSISTENT a block computes
// one tile and the producer stops after its last k-tile; with it, the producer runs on from one
// tile of the block into the next, so the ring never drains between them. The next tile's
// origin is worked out (a division) before the k-loop of the current one, not inside it.
struct Producer {
    CopyPlan plan;
    int left;        // k-tiles of the current tile still to copy
#if GEMM_PERSISTENT
    int tile;        // the block tile being copied
    int next;        // origin of the tile after it, (m0 / BM) << 16 | n0 / BN, or -1: not known
#endif
};
__device__ __forceinline__ void start_tile(Producer& pr, const unsigned short* A,
                                           const unsigned short* B, int m0, int n0, int k0, int N,
                                           int K, int KT, int tid) {
    pr.plan = make_copy_plan(A, B, m0, n0, k0, N, K, tid);
    pr.left = KT;
}
#if GEMM_PERSISTENT
// Before the k-loop of block tile `tile`: the origin of the block's next tile, if the producer
// will move there during this k-loop (it is still copying `tile`).
__device__ __forceinline__ void plan_next_tile(Producer& pr, int tile, int tiles, int M, int N) {
    pr.next = -1;
    if (pr.tile == tile && tile + (int)gridDim.x < tiles) {
        int m0, n0;
        tile_origin(tile + gridDim.x, M, N, m0, n0);
        pr.next = (m0 / BM) << 16 | (n0 / BN);
    }
}
#endif
// Part `part` of PARTS of the copies of the producer's k-tile into slot `stage` (if any is left).
template <int PARTS>
__device__ __forceinline__ void produce_part(u32 smem, int stage, const Producer& pr, int part) {
    if (pr.left > 0) load_stage_part<PARTS>(smem, stage, pr.plan, part);
}
// Commit the k-tile's copies as one group (an empty group past the last k-tile keeps the count
// cp.async.wait_group relies on) and move to the next k-tile, or the block's next tile.
__device__ __forceinline__ void produce_finish(Producer& pr, const unsigned short* A,
                                               const unsigned short* B, int M, int N, int K,
                                               int tiles, int KT, int tid) {
    cp_async_commit();
    if (pr.left <= 0) return;
    advance_plan(pr.plan);
#if GEMM_PERSISTENT
    if (--pr.left == 0) {
        pr.tile += gridDim.x;
        if (pr.tile < tiles) {
            int m0, n0;
            if (pr.next >= 0) {
                m0 = (pr.next >> 16) * BM;
                n0 = (pr.next & 0xffff) * BN;
            } else {
                tile_origin(pr.tile, M, N, m0, n0);
            }
            pr.next = -1;
            start_tile(pr, A, B, m0, n0, 0, N, K, KT, tid);
        }
    }
#else
    --pr.left;
#endif
}

// The tiles of this block: one, or (persistent) every gridDim.x-th from blockIdx.x.
#if GEMM_PERSISTENT
#define FOR_EACH_TILE(tile) for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x)
#else
#define FOR_EACH_TILE(tile) for (int tile = first_tile, once_ = 1; once_; once_ = 0)
#endif

// ldmatrix the A and B fragments of k-step `ks` of the shared tile at `base`.
__device__ __forceinline__ void load_fragments(u32 (&af)[MT][4], u32 (&bf)[NT / 2][4], u32 base,
                                               int ks, const u32* a_off, const u32* b_off) {
#pragma unroll
    for (int i = 0; i < MT; ++i) ldsm_x4(af[i], base + a_off[ks] + i * 16 * A_C * 16);
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
#if GEMM_B_COL
        ldsm_x4(bf[j], base + b_off[ks] + j * 16 * B_C * 16);
#else
        ldsm_x4_trans(bf[j], base + b_off[j] + ks * 16 * B_C * 16);
#endif
    }
}

// The mma.sync of one k-step over the warp tile. Order 0 keeps an A fragment for a whole row of
// n8 tiles; order 1 keeps a B fragment for a column of m16 tiles and walks the rows down and up
// (consecutive mma share an operand at every turn).
__device__ __forceinline__ void mma_tile(float (&acc)[MT][NT][4], const u32 (&af)[MT][4],
                                         const u32 (&bf)[NT / 2][4]) {
#if GEMM_MMA_ORDER == 1
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int ii = 0; ii < MT; ++ii) {
            const int i = j % 2 ? MT - 1 - ii : ii;
            mma_f16_f32(acc[i][j], af[i], bf[j / 2][2 * (j % 2)], bf[j / 2][2 * (j % 2) + 1]);
        }
#else
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
            mma_f16_f32(acc[i][j], af[i], bf[j / 2][2 * (j % 2)], bf[j / 2][2 * (j % 2) + 1]);
#endif
}

}  // namespace gemm

namespace gemm {

// ---- epilogue: registers -> stmatrix -> per-warp staging -> 16-byte stores -----------------
#if GEMM_OUT_F32
// f32 results go through stmatrix as pairs of b16: one m8n8 matrix holds 8 rows x 4 floats.
// Register c0 (columns 2t) of a quad fills the "even" matrix, c1 the "odd" one; a staged row
// of an n8 tile is [even 16 B | odd 16 B] and the read-back interleaves them again.
__device__ __forceinline__ void epilogue(float (&acc)[MT][NT][4], u32 stage_w, float* Cw, int N,
                                         int lane) {
    constexpr int EC = WTN / 4;  // 16-byte chunks per staged row (16 rows per slab)
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        warp_sync();  // every lane has read the previous slab back
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const u32 r[4] = {float_bits(acc[i][j][0]), float_bits(acc[i][j][1]),
                              float_bits(acc[i][j][2]), float_bits(acc[i][j][3])};
            const int row = (lane & 7) + 8 * (lane >> 4), chunk = 2 * j + ((lane >> 3) & 1);
            stsm_x4(stage_w + tile_offset<EC>(row, chunk), r);
        }
        warp_sync();
#pragma unroll
        for (int it = 0; it < 16 * NT * 2 / 32; ++it) {
            const int q = it * 32 + lane, row = q / (2 * NT), j = (q % (2 * NT)) / 2, h = q % 2;
            u32 e0, e1, o0, o1;
            ld_shared_v2(e0, e1, stage_w + tile_offset<EC>(row, 2 * j) + 8 * h);
            ld_shared_v2(o0, o1, stage_w + tile_offset<EC>(row, 2 * j + 1) + 8 * h);
            const u32 v[4] = {e0, o0, e1, o1};
            st_global_v4(Cw + (u64)(16 * i + row) * N + 8 * j + 4 * h, v);
        }
    }
}
#else
constexpr int EC = WTN / 8;                      // 16-byte chunks per staged row of f16
constexpr int EPI_ITERS = EPI_ROWS * EC / 32;    // 16-byte pieces per lane per staged block
static_assert((EPI_ROWS * EC) % 32 == 0, "staged rows split over the lanes");
static_assert(!GEMM_EPI_OVERLAP || EPI_ITERS % KS == 0, "stores split over the k-steps");

// stmatrix rows 16*i0 .. 16*i0 + EPI_ROWS - 1 of the warp tile into the staging area.
__device__ __forceinline__ void stage_rows(const float (&acc)[MT][NT][4], u32 stage_w, int i0,
                                           int lane) {
#pragma unroll
    for (int i = i0; i < i0 + EPI_ROWS / 16; ++i) {
#pragma unroll
        for (int jj = 0; jj < NT / 2; ++jj) {
            const u32 r[4] = {pack_f16x2(acc[i][2 * jj][0], acc[i][2 * jj][1]),
                              pack_f16x2(acc[i][2 * jj][2], acc[i][2 * jj][3]),
                              pack_f16x2(acc[i][2 * jj + 1][0], acc[i][2 * jj + 1][1]),
                              pack_f16x2(acc[i][2 * jj + 1][2], acc[i][2 * jj + 1][3])};
            const int row = 16 * (i - i0) + (lane & 15), chunk = 2 * jj + (lane >> 4);
            stsm_x4(stage_w + tile_offset<EC>(row, chunk), r);
        }
    }
}
// Read back pieces [it0, it0 + count) of the staged rows (16 contiguous bytes of a row per lane
// and piece) and store them to C, `Ch` pointing at the place of staged row 0.
__device__ __forceinline__ void store_rows(u32 stage_w, unsigned short* Ch, int N, int lane,
                                           int it0, int count) {
    lane = lane_id();  // read here, so the compiler keeps no per-lane addresses alive for this
#pragma unroll
    for (int it = it0; it < it0 + count; ++it) {
        const int q = it * 32 + lane, row = q / EC, ch = q % EC;
        u32 v[4];
        ld_shared_v4(v, stage_w + tile_offset<EC>(row, ch));
        st_global_v4(Ch + (u64)row * N + ch * 8, v);
    }
}
__device__ __forceinline__ void epilogue(const float (&acc)[MT][NT][4], u32 stage_w,
                                         unsigned short* Cw, int N, int lane) {
#pragma unroll
    for (int i0 = 0; i0 < MT; i0 += EPI_ROWS / 16) {
        warp_sync();  // every lane has read the previous rows back
        stage_rows(acc, stage_w, i0, lane);
        warp_sync();
        store_rows(stage_w, Cw + (u64)16 * i0 * N, N, lane, 0, EPI_ITERS);
    }
}
#endif

#if GEMM_SPLIT_K > 1
// The split-K reduction of one block's slice of `tile`: its fp32 partial goes to the workspace
// (float4 `(i * NT + j) * THREADS + tid` of the block's area: 16 contiguous bytes per thread,
// coalesced), then the block takes a ticket from the tile's counter. True for the block with the
// last ticket, which has then added every other slice's partial to `acc` and reset the counter;
// the others are done. The fences order each block's partial before its ticket, and the other
// blocks' partials before the last block's reads (read through L2: .cg).
__device__ __forceinline__ bool split_k_reduce(float (&acc)[MT][NT][4], float* W, int* counters,
                                               int tile, int slice, int tid) {
    __shared__ int ticket;
    constexpr int AREA = BM * BN / 4;   // float4 per slice of a tile
    float4* mine = reinterpret_cast<float4*>(W) + (u64)(tile * SPLIT_K + slice) * AREA;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
            mine[(i * NT + j) * THREADS + tid] =
                make_float4(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]);
    __threadfence();
    block_sync();
    if (tid == 0) ticket = atomicAdd(counters + tile, 1);
    block_sync();
    if (ticket != SPLIT_K - 1) return false;
    __threadfence();
    for (int s = 0; s < SPLIT_K; ++s) {
        if (s == slice) continue;
        const float4* other = reinterpret_cast<const float4*>(W) + (u64)(tile * SPLIT_K + s) * AREA;
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const float4 v = __ldcg(other + (i * NT + j) * THREADS + tid);
                acc[i][j][0] += v.x;
                acc[i][j][1] += v.y;
                acc[i][j][2] += v.z;
                acc[i][j][3] += v.w;
            }
    }
    if (tid == 0) counters[tile] = 0;
    return true;
}
#endif

}  // namespace gemm

// C = A * B. With GEMM_SPLIT_K > 1 two more arguments: the fp32 workspace W (SPLIT_K partial
// tiles per tile of C, M * N * SPLIT_K floats) and one int counter per tile of C, all zero before
// the first launch (each launch leaves them zero again).
extern "C" __global__ void __launch_bounds__(gemm::THREADS, GEMM_MIN_BLOCKS)
gemm_f16(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B,
         void* __restrict__ C, int M, int N, int K
#if GEMM_SPLIT_K > 1
         , float* __restrict__ W, int* __restrict__ counters
#endif
) {
    using namespace gemm;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 smem = smem_addr(smem_raw);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int tiles = (M / BM) * (N / BN), KT = K / BK / SPLIT_K;
    // Split-K: this block's tile and the first column of A (row of B) of its K slice.
    const int first_tile = SPLIT_K > 1 ? (int)blockIdx.x % tiles : (int)blockIdx.x;
    const int slice = SPLIT_K > 1 ? (int)blockIdx.x / tiles : 0;
    const int k0 = slice * KT * BK;
    const u32 stage_w = smem + EPI_BASE + warp * EPI_WARP_BYTES;

    // Per-lane ldmatrix offsets (bytes inside a stage). The swizzle depends only on row bits that
    // the tile loops below do not change, so it is folded here once.
    u32 a_off[KS];
    {
        const int row = wm * WTM + (lane & 15);
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) a_off[ks] = tile_offset<A_C>(row, 2 * ks + (lane >> 4));
    }
#if GEMM_B_COL
    u32 b_off[KS];
    {
        const int row = wn * WTN + (lane & 7) + 8 * (lane >> 4);
#pragma unroll
        for (int ks = 0; ks < KS; ++ks)
            b_off[ks] = A_BYTES + tile_offset<B_C>(row, 2 * ks + ((lane >> 3) & 1));
    }
#else
    u32 b_off[NT / 2];
    {
        const int row = (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
        for (int j = 0; j < NT / 2; ++j)
            b_off[j] = A_BYTES + tile_offset<B_C>(row, wn * (WTN / 8) + 2 * j + (lane >> 4));
    }
#endif

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    Producer pr;
    pr.left = 0;
#if GEMM_PERSISTENT
    pr.tile = blockIdx.x;
    pr.next = -1;
#endif
    if (first_tile < tiles) {
        int m0, n0;
        tile_origin(first_tile, M, N, m0, n0);
        start_tile(pr, A, B, m0, n0, k0, N, K, KT, tid);
    }
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        produce_part<1>(smem, s, pr, 0);
        produce_finish(pr, A, B, M, N, K, tiles, KT, tid);
    }
#if GEMM_OUT_F32
    float* Cout = reinterpret_cast<float*>(C);
#else
    unsigned short* Cout = reinterpret_cast<unsigned short*>(C);
#endif
#if GEMM_EPI_OVERLAP
    u32 pending = ~0u;  // element offset in C of the previous tile's staged warp tile (none: ~0)
#endif

#if GEMM_MAINLOOP == 2
    // Main loop with the barrier inside the tile: the fragments of k-step ks+1 are loaded while
    // the mma of k-step ks run (two register sets), and that includes the step across the k-tile
    // boundary (and across block tiles). Before the mma of the last k-step of k-tile kt, whose
    // fragments are already in registers, the block waits for k-tile kt+1 and synchronises once;
    // then every warp starts the ldmatrix of k-tile kt+1 and issues the last k-step's mma while
    // those loads are in flight, so neither the barrier nor the ldmatrix latency leaves the tensor
    // pipe idle. The barrier also tells every warp that all ldmatrix of k-tile kt are done, so
    // its ring slot is refilled (with k-tile kt+STAGES) right after it.
    static_assert(KS % 2 == 0, "the fragment set alternates per k-step across tiles");
    cp_async_wait<STAGES - 2>();
    block_sync();  // k-tile 0 is in shared memory
    u32 af[2][MT][4], bf[2][NT / 2][4];
    int read_stage = 0, write_stage = STAGES - 1;
    u32 base = smem;
    load_fragments(af[0], bf[0], base, 0, a_off, b_off);
    FOR_EACH_TILE(tile) {
        const bool last_tile = !GEMM_PERSISTENT || tile + (int)gridDim.x >= tiles;
#if GEMM_PERSISTENT
        plan_next_tile(pr, tile, tiles, M, N);
#endif
        for (int kt = 0; kt < KT; ++kt) {
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                if (ks == KS - 1) {
                    cp_async_wait<STAGES - 2>();
                    block_sync();  // k-tile kt+1 has landed; every warp is done reading k-tile kt
                    read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
                    base = smem + read_stage * STAGE_BYTES;
                }
                if (ks < KS - 1 || kt + 1 < KT || !last_tile)
                    load_fragments(af[(ks + 1) % 2], bf[(ks + 1) % 2], base, (ks + 1) % KS, a_off,
                                   b_off);
#if GEMM_SPLIT_COPIES
                if (ks < KS - 1) produce_part<KS - 1>(smem, write_stage, pr, ks);
                if (ks == KS - 2) produce_finish(pr, A, B, M, N, K, tiles, KT, tid);
#else
                if (ks == 0) {
                    produce_part<1>(smem, write_stage, pr, 0);
                    produce_finish(pr, A, B, M, N, K, tiles, KT, tid);
                }
#endif
#if GEMM_EPI_OVERLAP
                if (kt == 0 && pending != ~0u)
                    store_rows(stage_w, Cout + pending, N, lane, ks * EPI_ITERS / KS,
                               EPI_ITERS / KS);
#endif
                mma_tile(acc, af[ks % 2], bf[ks % 2]);
            }
            write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;
        }
#else
    int read_stage = 0, write_stage = STAGES - 1;
    FOR_EACH_TILE(tile) {
        for (int kt = 0; kt < KT; ++kt) {
            cp_async_wait<STAGES - 2>();
            block_sync();  // k-tile kt is in shared memory, and every warp is done with kt-1
            produce_part<1>(smem, write_stage, pr, 0);  // k-tile kt + STAGES - 1
            produce_finish(pr, A, B, M, N, K, tiles, KT, tid);
            const u32 base = smem + read_stage * STAGE_BYTES;
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                u32 af[MT][4], bf[NT / 2][4];
                load_fragments(af, bf, base, ks, a_off, b_off);
                mma_tile(acc, af, bf);
            }
            read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
            write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;
        }
#endif
        // ---- this tile's epilogue; persistent, the ring keeps filling for the next tile ----
#if !GEMM_PERSISTENT
        cp_async_wait<0>();
        block_sync();  // every warp is past its last ldmatrix before any stmatrix
#endif
#if GEMM_SPLIT_K > 1
        if (!split_k_reduce(acc, W, counters, tile, slice, tid)) return;
#endif
        int m0, n0;
        tile_origin(tile, M, N, m0, n0);
        const u64 origin = (u64)(m0 + wm * WTM) * N + n0 + wn * WTN;
#if GEMM_EPI_OVERLAP
        warp_sync();  // the previous tile's rows were all read back (in k-tile 0 of this one)
        stage_rows(acc, stage_w, 0, lane);
        warp_sync();
        pending = (u32)origin;
        if (!GEMM_PERSISTENT || tile + (int)gridDim.x >= tiles)
            store_rows(stage_w, Cout + origin, N, lane, 0, EPI_ITERS);
#else
        epilogue(acc, stage_w, Cout + origin, N, lane);
#endif
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
    }
    cp_async_wait<0>();
}
