// stmatrix.cuh - inline-PTX wrappers for stmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16
//
// The store twin of ldmatrix (needs sm_90). Warp-collective: all 32 lanes call the same wrapper
// from converged code. Lane t supplies the shared-memory start address of row (t % 8) of matrix
// (t / 8); only lanes 0..8*N-1 are read for .xN; row addresses must be 16-byte aligned.
// Register i of every lane holds its piece of matrix i, in the same fragment layout ldmatrix
// produces, so stmatrix(ldmatrix(x)) writes x back unchanged (for the same .trans).
// Two lanes naming the same row leave that row's contents undefined.
//
// Pitfalls this header is written to avoid: a wrapper whose name says one .num while its asm
// string stores another, and a .trans store hidden behind a plain name. The register count is
// part of each wrapper's type and .trans is part of its name (or a template argument).
//
// Compiles standalone with nvcc and with NVRTC (no standard headers needed).
#pragma once

namespace ptxlab {

#ifndef PTXLAB_SHARED_ADDRESS_DEFINED
#define PTXLAB_SHARED_ADDRESS_DEFINED
// A generic pointer into __shared__ memory -> the 32-bit .shared address the instructions take.
__device__ __forceinline__ unsigned shared_address(const void* generic_ptr) {
  return static_cast<unsigned>(__cvta_generic_to_shared(generic_ptr));
}
#endif

// ---- .x1 ----------------------------------------------------------------------------------
__device__ __forceinline__ void stmatrix_x1(unsigned smem_addr, const unsigned (&r)[1]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};\n"
               :: "r"(smem_addr), "r"(r[0]) : "memory");
}
__device__ __forceinline__ void stmatrix_x1_trans(unsigned smem_addr, const unsigned (&r)[1]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x1.trans.shared.b16 [%0], {%1};\n"
               :: "r"(smem_addr), "r"(r[0]) : "memory");
}

// ---- .x2 ----------------------------------------------------------------------------------
__device__ __forceinline__ void stmatrix_x2(unsigned smem_addr, const unsigned (&r)[2]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};\n"
               :: "r"(smem_addr), "r"(r[0]), "r"(r[1]) : "memory");
}
__device__ __forceinline__ void stmatrix_x2_trans(unsigned smem_addr, const unsigned (&r)[2]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n"
               :: "r"(smem_addr), "r"(r[0]), "r"(r[1]) : "memory");
}

// ---- .x4 ----------------------------------------------------------------------------------
__device__ __forceinline__ void stmatrix_x4(unsigned smem_addr, const unsigned (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :: "r"(smem_addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
__device__ __forceinline__ void stmatrix_x4_trans(unsigned smem_addr, const unsigned (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :: "r"(smem_addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}

// ---- the same, to a generic pointer into __shared__ memory --------------------------------
__device__ __forceinline__ void stmatrix_x1(void* p, const unsigned (&r)[1]) { stmatrix_x1(shared_address(p), r); }
__device__ __forceinline__ void stmatrix_x1_trans(void* p, const unsigned (&r)[1]) { stmatrix_x1_trans(shared_address(p), r); }
__device__ __forceinline__ void stmatrix_x2(void* p, const unsigned (&r)[2]) { stmatrix_x2(shared_address(p), r); }
__device__ __forceinline__ void stmatrix_x2_trans(void* p, const unsigned (&r)[2]) { stmatrix_x2_trans(shared_address(p), r); }
__device__ __forceinline__ void stmatrix_x4(void* p, const unsigned (&r)[4]) { stmatrix_x4(shared_address(p), r); }
__device__ __forceinline__ void stmatrix_x4_trans(void* p, const unsigned (&r)[4]) { stmatrix_x4_trans(shared_address(p), r); }

// ---- one name for all six forms: stmatrix<Trans>(addr, r), N taken from the array ---------
template <bool Trans>
__device__ __forceinline__ void stmatrix(unsigned a, const unsigned (&r)[1]) { if constexpr (Trans) stmatrix_x1_trans(a, r); else stmatrix_x1(a, r); }
template <bool Trans>
__device__ __forceinline__ void stmatrix(unsigned a, const unsigned (&r)[2]) { if constexpr (Trans) stmatrix_x2_trans(a, r); else stmatrix_x2(a, r); }
template <bool Trans>
__device__ __forceinline__ void stmatrix(unsigned a, const unsigned (&r)[4]) { if constexpr (Trans) stmatrix_x4_trans(a, r); else stmatrix_x4(a, r); }

}  // namespace ptxlab
