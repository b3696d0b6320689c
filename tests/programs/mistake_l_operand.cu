// Kept "mistake" that is not one: the shared-window address from __cvta_generic_to_shared is a
// 64-bit size_t, and here it goes into ldmatrix as an "l" (64-bit register) operand instead of
// being narrowed to 32 bits for an "r" operand. PTX accepts a 64-bit address for .shared, so the
// program compiles and loads correctly. Each lane prints its four registers from a 16x16 tile
// (the A-operand layout of mma.m16n8k16) and whether they are the values it should hold.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

__global__ void load_a_fragment() {
  __shared__ __align__(16) uint16_t tile[16 * 16];     // tile[r*16 + c] = r*16 + c
  const unsigned lane = threadIdx.x;
  for (unsigned i = lane; i < 256; i += 32) tile[i] = static_cast<uint16_t>(i);
  __syncthreads();

  uint32_t r0, r1, r2, r3;
  const uint16_t* row = tile + (lane % 16) * 16 + (lane / 16) * 8;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "l"(__cvta_generic_to_shared(row)));

  // Register k holds row lane/4 (+8 for k = 1, 3), columns 2*(lane%4) (+8 for k = 2, 3).
  const unsigned first = (lane / 4) * 16 + 2 * (lane % 4);
  const bool ok = (r0 & 0xFFFF) == first && (r1 & 0xFFFF) == first + 128 &&
                  (r2 & 0xFFFF) == first + 8 && (r3 & 0xFFFF) == first + 136 &&
                  (r0 >> 16) == first + 1 && (r3 >> 16) == first + 137;
  printf("lane %2u: %3u %3u | %3u %3u | %3u %3u | %3u %3u  %s\n", lane, r0 & 0xFFFF, r0 >> 16,
         r1 & 0xFFFF, r1 >> 16, r2 & 0xFFFF, r2 >> 16, r3 & 0xFFFF, r3 >> 16, ok ? "ok" : "WRONG");
}

int main(int argc, char** argv) {
  load_a_fragment<<<1, 32>>>();
  cudaError_t err = cudaDeviceSynchronize();
  printf("%s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
