// Bank-conflict study: one ldmatrix tile loop, three shared-memory layouts of the same tile.
//
// The tile is BANK_ROWS x BANK_COLS 16-bit elements. Each warp walks all of its 16x16 pieces with
// ldmatrix.x4 (BANK_TRANS=1: ldmatrix.x4.trans), BANK_REPS times. Only the layout changes:
//   BANK_LAYOUT 0  naive     row r at r * 2*BANK_COLS bytes
//   BANK_LAYOUT 1  padded    row r at r * (2*BANK_COLS + BANK_PAD) bytes
//   BANK_LAYOUT 2  swizzled  row r at r * 2*BANK_COLS bytes, 16-byte chunk c stored at chunk
//                            c ^ f(r) (f as in the GEMM: r & 7 for rows of >= 8 chunks)
// ptxlab.banks predicts the shared-memory wavefronts of every ldmatrix from the same per-lane
// addresses (ptxlab/bench/bank_study.py computes them with the formulas below); ncu measures them.
// The tile is filled with 16-byte st.shared (a different counter: op_st), and the loop's result
// is summed into one word per thread so the loads cannot be dropped.
#include "capstone/capstone_ptx.cuh"

#ifndef BANK_LAYOUT
#define BANK_LAYOUT 0
#endif
#ifndef BANK_ROWS
#define BANK_ROWS 64
#endif
#ifndef BANK_COLS
#define BANK_COLS 64
#endif
#ifndef BANK_PAD
#define BANK_PAD 16
#endif
#ifndef BANK_REPS
#define BANK_REPS 4
#endif
#ifndef BANK_TRANS
#define BANK_TRANS 0
#endif

namespace bank {
constexpr int ROWS = BANK_ROWS, COLS = BANK_COLS, CHUNKS = COLS / 8;
constexpr int PITCH = BANK_LAYOUT == 1 ? 2 * COLS + BANK_PAD : 2 * COLS;
constexpr int BYTES = ROWS * PITCH;
constexpr int PIECES = (ROWS / 16) * (COLS / 16);

__device__ __forceinline__ u32 offset(int row, int chunk) {
#if BANK_LAYOUT == 2
    int sw;
    if constexpr (CHUNKS >= 8) sw = chunk ^ (row & 7);
    else if constexpr (CHUNKS == 4) sw = chunk ^ ((row >> 1) & 3);
    else if constexpr (CHUNKS == 2) sw = chunk ^ ((row >> 2) & 1);
    else sw = chunk;
    return (u32)(row * PITCH + sw * 16);
#else
    return (u32)(row * PITCH + chunk * 16);
#endif
}
}  // namespace bank

extern "C" __global__ void bank_study(const unsigned int* __restrict__ fill,
                                      unsigned int* __restrict__ out) {
    using namespace bank;
    __shared__ __align__(128) unsigned char tile[BYTES];
    const u32 s = smem_addr(tile);
    const int tid = threadIdx.x, lane = tid & 31;
    for (int q = tid; q < ROWS * CHUNKS; q += blockDim.x) {
        const int row = q / CHUNKS, ch = q % CHUNKS;
        const u32 v[4] = {fill[4 * q], fill[4 * q + 1], fill[4 * q + 2], fill[4 * q + 3]};
        st_shared_v4(s + offset(row, ch), v);
    }
    block_sync();

    u32 folded = 0;
    for (int rep = 0; rep < BANK_REPS; ++rep) {
#pragma unroll 1
        for (int p = 0; p < PIECES; ++p) {
            const int rb = (p / (COLS / 16)) * 16, cb = (p % (COLS / 16)) * 16;
            const u32 addr = s + offset(rb + (lane & 15), cb / 8 + (lane >> 4));
            u32 r[4];
#if BANK_TRANS
            ldsm_x4_trans(r, addr);
#else
            ldsm_x4(r, addr);
#endif
            folded += r[0] ^ (3u * r[1]) ^ (5u * r[2]) ^ (7u * r[3]);
        }
    }
    out[blockIdx.x * blockDim.x + tid] = folded;
}
