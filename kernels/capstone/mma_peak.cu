// The ceiling of mma.sync.m16n8k16 f16 -> f32 on this GPU: operands live in registers, no memory
// traffic in the loop, MMA_PEAK_CHAINS independent accumulator chains per warp so the tensor
// pipe never waits for a previous result. FLOPs = 2*16*8*16 per mma per warp.
//
// Thread 0 of every block also records the SM cycle counter and the global nanosecond timer
// before and after its loop (clocks[4*block + 0..3] = clock64 start, end, globaltimer start,
// end), so the benchmark knows the SM clock the ceiling was measured at.
#include "capstone/capstone_ptx.cuh"

#ifndef MMA_PEAK_CHAINS
#define MMA_PEAK_CHAINS 8
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
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int c = 0; c < MMA_PEAK_CHAINS; ++c) mma_f16_f32(acc[c], a, b0, b1);
    }
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
