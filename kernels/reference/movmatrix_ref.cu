// Reference kernel for movmatrix.sync.aligned.m8n8.trans.b16 (sm_75).
//
// One warp per test case: grid = (cases,), block = (32,), no shared memory (the instruction
// works on registers only).
//   a  uint32 [cases * 32]  raw bits of each lane's source register
//   d  uint32 [cases * 32]  raw bits of each lane's result register
//
// expect-ptx: movmatrix.sync.aligned.m8n8.trans.b16
#include "movmatrix.cuh"

extern "C" __global__ void movmatrix_trans_ref(const unsigned* a, unsigned* d) {
  const unsigned long long slot = (unsigned long long)blockIdx.x * 32u + threadIdx.x;
  d[slot] = ptxlab::movmatrix_trans(a[slot]);
}
