// Kept mistake: ldmatrix spelled with .x4 before .m8n8 ("ldmatrix.sync.aligned.x4.m8n8..."),
// while the PTX ISA writes ldmatrix.sync.aligned.shape.num... (".m8n8.x4"). ptxas takes both
// orders, and both load the same registers. The per-lane lines below are the ones
// ldmatrix_tables.cu prints for .x4 (same tile, same addresses); the kernel also loads with the
// ISA spelling and the host reports whether every lane got the same four registers both ways.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

__global__ void load_both_ways(int* agree) {
  __shared__ __align__(16) uint16_t tiles[4 * 64];     // matrix m, row r, column c: 100m + 10r + c
  const unsigned lane = threadIdx.x;
  for (unsigned i = lane; i < 4 * 64; i += 32)
    tiles[i] = static_cast<uint16_t>(100 * (i / 64) + 10 * (i / 8 % 8) + i % 8);
  __syncthreads();

  const uint32_t row = static_cast<uint32_t>(__cvta_generic_to_shared(&tiles[(lane / 8) * 64 + (lane % 8) * 8]));
  uint32_t a[4], b[4];
  asm volatile("ldmatrix.sync.aligned.x4.m8n8.shared.b16 {%0, %1, %2, %3}, [%4];\n"   // swapped order
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"   // ISA order
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3]) : "r"(row));

  printf("lane %2u | r0: %3u %3u | r1: %3u %3u | r2: %3u %3u | r3: %3u %3u\n", lane,
         a[0] & 0xFFFF, a[0] >> 16, a[1] & 0xFFFF, a[1] >> 16, a[2] & 0xFFFF, a[2] >> 16,
         a[3] & 0xFFFF, a[3] >> 16);
  const bool same = a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
  const bool all_same = __all_sync(0xFFFFFFFFu, same);
  if (lane == 0) *agree = all_same ? 1 : 0;
}

int main(int argc, char** argv) {
  int* d_agree;
  int agree = -1;
  cudaMalloc(&d_agree, sizeof(int));
  printf("== ldmatrix.sync.aligned.x4.m8n8.shared.b16 ==\n");
  load_both_ways<<<1, 32>>>(d_agree);
  cudaMemcpy(&agree, d_agree, sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(d_agree);
  printf("same registers as ldmatrix.sync.aligned.m8n8.x4.shared.b16: %s\n", agree == 1 ? "yes" : "no");
  return agree == 1 ? 0 : 1;
}
