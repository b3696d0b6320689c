// Reference kernels for ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16.
//
// One warp (one block of 32 threads) per test case, so a launch runs many independent cases:
//   grid = (cases,), block = (32,), dynamic shared memory = smem_bytes.
// Arguments (every array is flat, case-major):
//   images     uint8  [cases * smem_bytes]  the shared-memory contents of each case
//   addrs      uint32 [cases * 32]          per-lane byte offsets into the case's shared buffer
//   out        uint32 [cases * 32 * N]      register i of lane t goes to out[(case*32 + t)*N + i]
//   smem_bytes uint32                       shared bytes per case: a multiple of 16, <= 49152
// The offsets are used as given (no clamping), so any address pattern can be tried, including
// misaligned or out-of-range ones in the lanes an .x1/.x2 load is said to ignore.
//
// expect-ptx: ldmatrix.sync.aligned.m8n8.x1.shared.b16
// expect-ptx: ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16
// expect-ptx: ldmatrix.sync.aligned.m8n8.x2.shared.b16
// expect-ptx: ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16
// expect-ptx: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// expect-ptx: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
#include "ldmatrix.cuh"

extern __shared__ __align__(16) unsigned char ldmatrix_ref_smem[];

// Copy this case's image into shared memory, 16 bytes per thread per step.
__device__ __forceinline__ void load_shared_image(const unsigned char* images, unsigned smem_bytes) {
  const uint4* src = reinterpret_cast<const uint4*>(images + (unsigned long long)blockIdx.x * smem_bytes);
  uint4* dst = reinterpret_cast<uint4*>(ldmatrix_ref_smem);
  for (unsigned i = threadIdx.x; i < smem_bytes / 16u; i += blockDim.x) dst[i] = src[i];
  __syncthreads();
}

template <int N, bool Trans>
__device__ __forceinline__ void ldmatrix_case(const unsigned char* images, const unsigned* addrs,
                                              unsigned* out, unsigned smem_bytes) {
  load_shared_image(images, smem_bytes);
  const unsigned lane = threadIdx.x;
  const unsigned long long slot = (unsigned long long)blockIdx.x * 32u + lane;
  unsigned r[N];
  ptxlab::ldmatrix<Trans>(r, ptxlab::shared_address(ldmatrix_ref_smem) + addrs[slot]);
#pragma unroll
  for (int i = 0; i < N; ++i) out[slot * N + i] = r[i];
}

#define PTXLAB_LDMATRIX_REF(NAME, N, TRANS)                                                     \
  extern "C" __global__ void NAME(const unsigned char* images, const unsigned* addrs,        \
                                  unsigned* out, unsigned smem_bytes) {                      \
    ldmatrix_case<N, TRANS>(images, addrs, out, smem_bytes);                                 \
  }

PTXLAB_LDMATRIX_REF(ldmatrix_x1_ref, 1, false)
PTXLAB_LDMATRIX_REF(ldmatrix_x1_trans_ref, 1, true)
PTXLAB_LDMATRIX_REF(ldmatrix_x2_ref, 2, false)
PTXLAB_LDMATRIX_REF(ldmatrix_x2_trans_ref, 2, true)
PTXLAB_LDMATRIX_REF(ldmatrix_x4_ref, 4, false)
PTXLAB_LDMATRIX_REF(ldmatrix_x4_trans_ref, 4, true)
