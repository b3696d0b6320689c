// The ceiling of mma.sync.m16n8k16 f16 -> f32 on this GPU: operands live in registers, no memory
// traffic in the loop, MMA_PEAK_CHAINS independent accumulator chains per warp so the tensor
// pipe never waits for a previous result. FLOPs = 2*16*8*16 per mma per warp.
#include "capstone/capstone_ptx.cuh"

#ifndef MMA_PEAK_CHAINS
#define MMA_PEAK_CHAINS 8
#endif

extern "C" __global__ void mma_peak(const unsigned int* __restrict__ seed, float* __restrict__ out,
                                    int iters) {
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
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int c = 0; c < MMA_PEAK_CHAINS; ++c) mma_f16_f32(acc[c], a, b0, b1);
    }
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < MMA_PEAK_CHAINS; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    out[blockIdx.x * blockDim.x + tid] = s;
}
