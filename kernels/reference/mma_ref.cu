// Reference kernels for the mma.sync.aligned forms of mma.cuh, on raw register bits.
//
// One warp per test case: grid = (cases,), block = (32,), no shared memory.
// Arguments (flat, case-major; NA/NB/NC/ND registers per lane depend on the form):
//   a  uint32 [cases * 32 * NA]   A fragment bits: register i of lane t at [(case*32 + t)*NA + i]
//   b  uint32 [cases * 32 * NB]   B fragment bits
//   c  uint32 [cases * 32 * NC]   C fragment bits (f32/s32 accumulators as their 32-bit patterns)
//   d  uint32 [cases * 32 * ND]   D fragment bits written by the instruction
// Accumulators travel as bit patterns (__uint_as_float and back), so NaN payloads, infinities
// and subnormals reach the instruction exactly as given.
//
// expect-ptx: mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16
// expect-ptx: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// expect-ptx: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// expect-ptx: mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32
// expect-ptx: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
// expect-ptx: mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32
#include "mma.cuh"

template <int N>
__device__ __forceinline__ void load_bits(unsigned (&r)[N], const unsigned* src) {
  const unsigned long long slot = (unsigned long long)blockIdx.x * 32u + threadIdx.x;
#pragma unroll
  for (int i = 0; i < N; ++i) r[i] = src[slot * N + i];
}
template <int N>
__device__ __forceinline__ void load_f32(float (&r)[N], const unsigned* src) {
  const unsigned long long slot = (unsigned long long)blockIdx.x * 32u + threadIdx.x;
#pragma unroll
  for (int i = 0; i < N; ++i) r[i] = __uint_as_float(src[slot * N + i]);
}
template <int N>
__device__ __forceinline__ void load_s32(int (&r)[N], const unsigned* src) {
  const unsigned long long slot = (unsigned long long)blockIdx.x * 32u + threadIdx.x;
#pragma unroll
  for (int i = 0; i < N; ++i) r[i] = static_cast<int>(src[slot * N + i]);
}
template <int N>
__device__ __forceinline__ void store_bits(unsigned* dst, const unsigned (&r)[N]) {
  const unsigned long long slot = (unsigned long long)blockIdx.x * 32u + threadIdx.x;
#pragma unroll
  for (int i = 0; i < N; ++i) dst[slot * N + i] = r[i];
}
template <int N>
__device__ __forceinline__ void store_f32(unsigned* dst, const float (&r)[N]) {
  const unsigned long long slot = (unsigned long long)blockIdx.x * 32u + threadIdx.x;
#pragma unroll
  for (int i = 0; i < N; ++i) dst[slot * N + i] = __float_as_uint(r[i]);
}
template <int N>
__device__ __forceinline__ void store_s32(unsigned* dst, const int (&r)[N]) {
  const unsigned long long slot = (unsigned long long)blockIdx.x * 32u + threadIdx.x;
#pragma unroll
  for (int i = 0; i < N; ++i) dst[slot * N + i] = static_cast<unsigned>(r[i]);
}

extern "C" __global__ void mma_m16n8k16_f16_f16_f16_f16_ref(const unsigned* a, const unsigned* b,
                                                            const unsigned* c, unsigned* d) {
  unsigned ra[4], rb[2], rc[2], rd[2];
  load_bits(ra, a); load_bits(rb, b); load_bits(rc, c);
  ptxlab::mma_m16n8k16_f16_f16_f16_f16(rd, ra, rb, rc);
  store_bits(d, rd);
}

extern "C" __global__ void mma_m16n8k16_f32_f16_f16_f32_ref(const unsigned* a, const unsigned* b,
                                                            const unsigned* c, unsigned* d) {
  unsigned ra[4], rb[2];
  float rc[4], rd[4];
  load_bits(ra, a); load_bits(rb, b); load_f32(rc, c);
  ptxlab::mma_m16n8k16_f32_f16_f16_f32(rd, ra, rb, rc);
  store_f32(d, rd);
}

extern "C" __global__ void mma_m16n8k16_f32_bf16_bf16_f32_ref(const unsigned* a, const unsigned* b,
                                                              const unsigned* c, unsigned* d) {
  unsigned ra[4], rb[2];
  float rc[4], rd[4];
  load_bits(ra, a); load_bits(rb, b); load_f32(rc, c);
  ptxlab::mma_m16n8k16_f32_bf16_bf16_f32(rd, ra, rb, rc);
  store_f32(d, rd);
}

extern "C" __global__ void mma_m16n8k8_f32_f16_f16_f32_ref(const unsigned* a, const unsigned* b,
                                                           const unsigned* c, unsigned* d) {
  unsigned ra[2], rb[1];
  float rc[4], rd[4];
  load_bits(ra, a); load_bits(rb, b); load_f32(rc, c);
  ptxlab::mma_m16n8k8_f32_f16_f16_f32(rd, ra, rb, rc);
  store_f32(d, rd);
}

extern "C" __global__ void mma_m16n8k8_f32_tf32_tf32_f32_ref(const unsigned* a, const unsigned* b,
                                                             const unsigned* c, unsigned* d) {
  unsigned ra[4], rb[2];
  float rc[4], rd[4];
  load_bits(ra, a); load_bits(rb, b); load_f32(rc, c);
  ptxlab::mma_m16n8k8_f32_tf32_tf32_f32(rd, ra, rb, rc);
  store_f32(d, rd);
}

extern "C" __global__ void mma_m16n8k32_s32_s8_s8_s32_ref(const unsigned* a, const unsigned* b,
                                                          const unsigned* c, unsigned* d) {
  unsigned ra[4], rb[2];
  int rc[4], rd[4];
  load_bits(ra, a); load_bits(rb, b); load_s32(rc, c);
  ptxlab::mma_m16n8k32_s32_s8_s8_s32(rd, ra, rb, rc);
  store_s32(d, rd);
}
