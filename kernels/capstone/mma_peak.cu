// The ceiling of mma.sync.m16n8k16 f16 -> f32 on this GPU: operands live in registers, no memory
// traffic in the loop, MMA_PEAK_CHAINS independent accumulator chains per warp so the tensor
// pipe never waits for a previous result. FLOPs = 2*16*8*16 per mma per warp.
//
// With MMA_PEAK_VARY=1 the operands change from one mma to the next (four A and four B
// fragments, half-words drawn from the seed, used in rotation), as they do in a GEMM: the tensor
// core's power depends on how many operand bits toggle, so this is the ceiling for real data
// when the board's power limit sets the clock.
//
// Thread 0 of every block also records the SM cycle counter and the global nanosecond timer
// before and after its loop (clocks[4*block + 0..3] = clock64 start, end, globaltimer start,
// end), so the benchmark knows the SM clock the ceiling was measured at.
#include "capstone/capstone_ptx.cuh"

#ifndef MMA_PEAK_CHAINS
#define MMA_PEAK_CHAINS 8
#endif
#ifndef MMA_PEAK_VARY
#define MMA_PEAK_VARY 0
#endif

static __device__ __forceinline__ u64 global_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
static __device__ __forceinline__ u64 sm_cycles() {
    u64 t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
    return t;
}

extern "C" __global__ void mma_peak(const unsigned int* __restrict__ seed, float* __restrict__ out,
                                    int iters, unsigned long long* __restrict__ clocks) {
    const int tid = threadIdx.x;
    // Operands from memory so the compiler cannot fold them; values stay small and finite.
    const u32 a[4] = {seed[tid & 31], seed[32 + (tid & 31)], seed[64 + (tid & 31)],
                      seed[96 + (tid & 31)]};
    const u32 b0 = seed[128 + (tid & 31)], b1 = seed[160 + (tid & 31)];
    float acc[MMA_PEAK_CHAINS][4];
#pragma unroll
    for (int c = 0; c < MMA_PEAK_CHAINS; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[c][e] = 0.f;
    const u64 c0 = sm_cycles(), t0 = global_ns();
#if MMA_PEAK_VARY
    // Four A and four B fragments: byte permutations (prmt) of the seed words that keep whole
    // f16 halves, so every value is one of the seed's finite f16 values.
    u32 av[4][4], bv[4][2];
#pragma unroll
    for (int v = 0; v < 4; ++v) {
        const u32 sel = v == 0 ? 0x3210u : v == 1 ? 0x5410u : v == 2 ? 0x3276u : 0x7654u;
#pragma unroll
        for (int r = 0; r < 4; ++r) av[v][r] = byte_perm(a[r], a[(r + v) & 3], sel);
        bv[v][0] = byte_perm(b0, b1, sel);
        bv[v][1] = byte_perm(b1, a[v], sel);
    }
    for (int it = 0; it < iters; it += 4) {
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
            for (int c = 0; c < MMA_PEAK_CHAINS; ++c)
                mma_f16_f32(acc[c], av[(c + u) & 3], bv[(3 * c + u + 1) & 3][0],
                            bv[(3 * c + u + 1) & 3][1]);
    }
#else
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int c = 0; c < MMA_PEAK_CHAINS; ++c) mma_f16_f32(acc[c], a, b0, b1);
    }
#endif
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < MMA_PEAK_CHAINS; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    out[blockIdx.x * blockDim.x + tid] = s;
    if (tid == 0) {
        const u64 c1 = sm_cycles(), t1 = global_ns();
        clocks[4 * blockIdx.x + 0] = c0;
        clocks[4 * blockIdx.x + 1] = c1;
        clocks[4 * blockIdx.x + 2] = t0;
        clocks[4 * blockIdx.x + 3] = t1;
    }
}
