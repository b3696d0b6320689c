// ldmatrix.cuh - inline-PTX wrappers for ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16
//
// Each call is warp-collective: all 32 lanes must call the same wrapper with the same template
// arguments, from converged code (.sync.aligned). Lane t supplies the shared-memory start address
// of row (t % 8) of matrix (t / 8); only lanes 0..8*N-1 are read for .xN. Row addresses must be
// 16-byte aligned. Register i of every lane receives its piece of matrix i.
//
// Pitfalls this header is written to avoid (seen in published examples):
//   * a function named for .x2 whose asm string issues .x4: the name and the instruction must
//     agree, so here the register count is part of the type (unsigned (&)[N]) and the asm
//     string is chosen from N, never typed twice by hand;
//   * a transposing load reached through a non-transposing wrapper (or the reverse): .trans is
//     a template argument here, and the named wrappers spell it in their names.
//
// Compiles standalone with nvcc and with NVRTC: no standard headers are included (uint32_t is
// 'unsigned int' on every CUDA target, so passing uint32_t arrays works unchanged).
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
__device__ __forceinline__ void ldmatrix_x1(unsigned (&r)[1], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0]) : "r"(smem_addr) : "memory");
}
__device__ __forceinline__ void ldmatrix_x1_trans(unsigned (&r)[1], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0]) : "r"(smem_addr) : "memory");
}

// ---- .x2 ----------------------------------------------------------------------------------
__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr) : "memory");
}
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned (&r)[2], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr) : "memory");
}

// ---- .x4 ----------------------------------------------------------------------------------
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr) : "memory");
}

// ---- the same, from a generic pointer to __shared__ memory --------------------------------
__device__ __forceinline__ void ldmatrix_x1(unsigned (&r)[1], const void* p) { ldmatrix_x1(r, shared_address(p)); }
__device__ __forceinline__ void ldmatrix_x1_trans(unsigned (&r)[1], const void* p) { ldmatrix_x1_trans(r, shared_address(p)); }
__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], const void* p) { ldmatrix_x2(r, shared_address(p)); }
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned (&r)[2], const void* p) { ldmatrix_x2_trans(r, shared_address(p)); }
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) { ldmatrix_x4(r, shared_address(p)); }
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) { ldmatrix_x4_trans(r, shared_address(p)); }

// ---- one name for all six forms: ldmatrix<Trans>(r, addr), N taken from the array ---------
template <bool Trans>
__device__ __forceinline__ void ldmatrix(unsigned (&r)[1], unsigned a) { if constexpr (Trans) ldmatrix_x1_trans(r, a); else ldmatrix_x1(r, a); }
template <bool Trans>
__device__ __forceinline__ void ldmatrix(unsigned (&r)[2], unsigned a) { if constexpr (Trans) ldmatrix_x2_trans(r, a); else ldmatrix_x2(r, a); }
template <bool Trans>
__device__ __forceinline__ void ldmatrix(unsigned (&r)[4], unsigned a) { if constexpr (Trans) ldmatrix_x4_trans(r, a); else ldmatrix_x4(r, a); }

}  // namespace ptxlab
