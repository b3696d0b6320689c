// movmatrix.cuh - inline-PTX wrapper for movmatrix.sync.aligned.m8n8.trans.b16 (sm_75+)
//
// Transposes one 8x8 matrix of 16-bit elements held in registers across the warp, without
// touching memory. In and out, lane t holds row t/4, columns 2*(t%4) (low half) and 2*(t%4)+1
// (high half). The only form the PTX ISA defines is .trans, hence the single wrapper.
// Warp-collective: all 32 lanes call it from converged code.
//
// Compiles standalone with nvcc and with NVRTC (no standard headers needed).
#pragma once

namespace ptxlab {

__device__ __forceinline__ unsigned movmatrix_trans(unsigned a) {
  unsigned d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
  return d;
}

}  // namespace ptxlab
