// Capstone transpose: out[C, R] = in[R, C]^T for 16-bit elements (fp16 bits), R and C multiples
// of the tile.
//
// One block moves one TR x TC tile:
//   global --cp.async 16 B--> swizzled input tile
//          --ldmatrix.x4.trans (or ldmatrix.x4 + movmatrix)--> registers now hold 8x8 blocks
//            transposed --stmatrix.x4 at the mirrored block position--> swizzled output tile
//          --ld.shared.v4 / st.global.v4 (16 B per lane, whole 2*TR-byte rows)--> out
// Every global access is 16 bytes wide and every row segment a warp touches is contiguous.
#include "capstone/capstone_ptx.cuh"

#ifndef TRANSPOSE_TR
#define TRANSPOSE_TR 64          // input rows per tile (= output columns)
#endif
#ifndef TRANSPOSE_TC
#define TRANSPOSE_TC 64          // input columns per tile (= output rows)
#endif
#ifndef TRANSPOSE_THREADS
#define TRANSPOSE_THREADS 256
#endif
#ifndef TRANSPOSE_MOVMATRIX
#define TRANSPOSE_MOVMATRIX 0    // 1: plain ldmatrix + movmatrix instead of ldmatrix .trans
#endif
#ifndef TRANSPOSE_MIN_BLOCKS
#define TRANSPOSE_MIN_BLOCKS 1
#endif

namespace tr {
constexpr int TR = TRANSPOSE_TR, TC = TRANSPOSE_TC, THREADS = TRANSPOSE_THREADS;
constexpr int IN_C = TC / 8;    // 16-byte chunks per input-tile row
constexpr int OUT_C = TR / 8;   // 16-byte chunks per output-tile row
constexpr int TILE_BYTES = TR * TC * 2;
constexpr int BLOCKS16 = (TR / 16) * (TC / 16);  // 16x16 pieces, one ldmatrix.x4 each
static_assert(TR % 16 == 0 && TC % 16 == 0, "tile must be made of 16x16 pieces");
static_assert((TR * IN_C) % THREADS == 0 && BLOCKS16 % (THREADS / 32) == 0, "work split");

// Same XOR swizzle as the GEMM tiles: 8 consecutive rows of one chunk column hit 8 bank groups.
template <int C>
__device__ __forceinline__ u32 tile_offset(int row, int chunk) {
    int sw;
    if constexpr (C >= 8) sw = chunk ^ (row & 7);
    else if constexpr (C == 4) sw = chunk ^ ((row >> 1) & 3);
    else if constexpr (C == 2) sw = chunk ^ ((row >> 2) & 1);
    else sw = chunk;
    return (u32)(row * C + sw) * 16u;
}
}  // namespace tr

extern "C" __global__ void __launch_bounds__(tr::THREADS, TRANSPOSE_MIN_BLOCKS)
transpose_b16(const unsigned short* __restrict__ in, unsigned short* __restrict__ out, int R,
              int C) {
    using namespace tr;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 s_in = smem_addr(smem_raw), s_out = s_in + TILE_BYTES;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tiles_c = C / TC;
    const int r0 = (blockIdx.x / tiles_c) * TR, c0 = (blockIdx.x % tiles_c) * TC;

#pragma unroll
    for (int i = 0; i < TR * IN_C / THREADS; ++i) {
        const int q = i * THREADS + tid, row = q / IN_C, ch = q % IN_C;
        cp_async_16(s_in + tile_offset<IN_C>(row, ch), in + (u64)(r0 + row) * C + c0 + ch * 8);
    }
    cp_async_commit();
    cp_async_wait<0>();
    block_sync();

#pragma unroll
    for (int i = 0; i < BLOCKS16 / (THREADS / 32); ++i) {
        const int b = i * (THREADS / 32) + warp;
        const int rb = (b / (TC / 16)) * 16, cb = (b % (TC / 16)) * 16;
        // ldmatrix matrices: 0 = (rows rb+0..7, cols cb+0..7), 1 = (rows +8..15, cols +0..7),
        //                    2 = (rows +0..7, cols +8..15),    3 = (rows +8..15, cols +8..15)
        const int in_row = rb + (lane & 15), in_chunk = cb / 8 + (lane >> 4);
        u32 r[4];
#if TRANSPOSE_MOVMATRIX
        ldsm_x4(r, s_in + tile_offset<IN_C>(in_row, in_chunk));
#pragma unroll
        for (int m = 0; m < 4; ++m) r[m] = movmatrix_trans(r[m]);
#else
        ldsm_x4_trans(r, s_in + tile_offset<IN_C>(in_row, in_chunk));
#endif
        // Matrix m, now transposed, belongs at output rows cb + 8*(m>>1) and output columns
        // rb + 8*(m&1): lane 8*m + j gives the address of its row j.
        const int m = lane >> 3;
        const int out_row = cb + 8 * (m >> 1) + (lane & 7), out_chunk = rb / 8 + (m & 1);
        stsm_x4(s_out + tile_offset<OUT_C>(out_row, out_chunk), r);
    }
    block_sync();

#pragma unroll
    for (int i = 0; i < TC * OUT_C / THREADS; ++i) {
        const int q = i * THREADS + tid, row = q / OUT_C, ch = q % OUT_C;
        u32 v[4];
        ld_shared_v4(v, s_out + tile_offset<OUT_C>(row, ch));
        st_global_v4(out + (u64)(c0 + row) * R + r0 + ch * 8, v);
    }
}
