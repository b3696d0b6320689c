// ldmatrix.m8n8 with 16-bit elements, one warp per launch: .x1, .x2, .x4 and .x2.trans.
// Every lane prints what landed in its registers, so the printout is the fragment layout:
// lane L gets row L/4, columns 2*(L%4) and 2*(L%4)+1 of each 8x8 matrix.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

// Four 8x8 matrices, one after another in shared memory (row-major, 16 bytes per row).
// Matrix m, row r, column c holds 100*m + 10*r + c, so each value names its own position.
__global__ void load_tables(int form) {
  __shared__ __align__(16) uint16_t tiles[4 * 64];
  const unsigned lane = threadIdx.x;
  for (unsigned i = lane; i < 4 * 64; i += 32)
    tiles[i] = static_cast<uint16_t>(100 * (i / 64) + 10 * (i / 8 % 8) + i % 8);
  __syncthreads();

  // Lanes 8m..8m+7 point at rows 0..7 of matrix m (lanes past .num's count are not read).
  const uint32_t row = static_cast<uint32_t>(__cvta_generic_to_shared(&tiles[(lane / 8) * 64 + (lane % 8) * 8]));
  uint32_t r[4] = {0, 0, 0, 0};
  if (form == 1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(row));
  } else if (form == 2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(row));
  } else if (form == 4) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row));
  } else {  // .trans: lane L now gets column L/4, rows 2*(L%4) and 2*(L%4)+1
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(row));
  }

  // Low half of a register is the first (left) element, high half the second.
  const int n = (form == 1) ? 1 : (form == 4 ? 4 : 2);
  unsigned v[8];
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = (k < n) ? (r[k] & 0xFFFFu) : 0u;
    v[2 * k + 1] = (k < n) ? (r[k] >> 16) : 0u;
  }
  if (n == 1)
    printf("lane %2u | r0: %3u %3u\n", lane, v[0], v[1]);
  else if (n == 2)
    printf("lane %2u | r0: %3u %3u | r1: %3u %3u\n", lane, v[0], v[1], v[2], v[3]);
  else
    printf("lane %2u | r0: %3u %3u | r1: %3u %3u | r2: %3u %3u | r3: %3u %3u\n", lane,
           v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
}

int main(int argc, char** argv) {
  const int forms[4] = {1, 2, 4, 3};
  const char* names[4] = {"m8n8.x1", "m8n8.x2", "m8n8.x4", "m8n8.x2.trans"};
  for (int i = 0; i < 4; ++i) {
    printf("== ldmatrix.sync.aligned.%s.shared.b16 ==\n", names[i]);
    load_tables<<<1, 32>>>(forms[i]);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      printf("error: %s\n", cudaGetErrorString(err));
      return 1;
    }
  }
  return 0;
}
