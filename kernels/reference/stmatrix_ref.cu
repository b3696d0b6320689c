// Reference kernels for stmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16 (sm_90).
//
// One warp (one block of 32 threads) per test case:
//   grid = (cases,), block = (32,), dynamic shared memory = smem_bytes.
// Arguments (flat, case-major):
//   images_in  uint8  [cases * smem_bytes]  shared-memory contents before the store
//   addrs      uint32 [cases * 32]          per-lane byte offsets into the case's shared buffer
//   regs       uint32 [cases * 32 * N]      register i of lane t is regs[(case*32 + t)*N + i]
//   images_out uint8  [cases * smem_bytes]  the whole shared buffer after the store, so every
//                                           written and every untouched byte can be compared
//   smem_bytes uint32                       a multiple of 16, <= 49152
//
// expect-ptx: stmatrix.sync.aligned.m8n8.x1.shared.b16
// expect-ptx: stmatrix.sync.aligned.m8n8.x1.trans.shared.b16
// expect-ptx: stmatrix.sync.aligned.m8n8.x2.shared.b16
// expect-ptx: stmatrix.sync.aligned.m8n8.x2.trans.shared.b16
// expect-ptx: stmatrix.sync.aligned.m8n8.x4.shared.b16
// expect-ptx: stmatrix.sync.aligned.m8n8.x4.trans.shared.b16
#include "stmatrix.cuh"

extern __shared__ __align__(16) unsigned char stmatrix_ref_smem[];

template <int N, bool Trans>
__device__ __forceinline__ void stmatrix_case(const unsigned char* images_in, const unsigned* addrs,
                                              const unsigned* regs, unsigned char* images_out,
                                              unsigned smem_bytes) {
  const unsigned long long base = (unsigned long long)blockIdx.x * smem_bytes;
  const uint4* src = reinterpret_cast<const uint4*>(images_in + base);
  uint4* dst = reinterpret_cast<uint4*>(images_out + base);
  uint4* shm = reinterpret_cast<uint4*>(stmatrix_ref_smem);
  for (unsigned i = threadIdx.x; i < smem_bytes / 16u; i += blockDim.x) shm[i] = src[i];
  __syncthreads();

  const unsigned lane = threadIdx.x;
  const unsigned long long slot = (unsigned long long)blockIdx.x * 32u + lane;
  unsigned r[N];
#pragma unroll
  for (int i = 0; i < N; ++i) r[i] = regs[slot * N + i];
  ptxlab::stmatrix<Trans>(ptxlab::shared_address(stmatrix_ref_smem) + addrs[slot], r);
  __syncthreads();

  for (unsigned i = threadIdx.x; i < smem_bytes / 16u; i += blockDim.x) dst[i] = shm[i];
}

#define PTXLAB_STMATRIX_REF(NAME, N, TRANS)                                                     \
  extern "C" __global__ void NAME(const unsigned char* images_in, const unsigned* addrs,     \
                                  const unsigned* regs, unsigned char* images_out,           \
                                  unsigned smem_bytes) {                                     \
    stmatrix_case<N, TRANS>(images_in, addrs, regs, images_out, smem_bytes);                 \
  }

PTXLAB_STMATRIX_REF(stmatrix_x1_ref, 1, false)
PTXLAB_STMATRIX_REF(stmatrix_x1_trans_ref, 1, true)
PTXLAB_STMATRIX_REF(stmatrix_x2_ref, 2, false)
PTXLAB_STMATRIX_REF(stmatrix_x2_trans_ref, 2, true)
PTXLAB_STMATRIX_REF(stmatrix_x4_ref, 4, false)
PTXLAB_STMATRIX_REF(stmatrix_x4_trans_ref, 4, true)
