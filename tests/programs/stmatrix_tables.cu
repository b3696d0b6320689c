// stmatrix.m8n8 with 16-bit elements (sm_90 and newer), one warp per launch.
// Each lane packs register j as (low, high) = (100*j + 2*lane, 100*j + 2*lane + 1); after the
// store, element (r, c) of matrix j must read 100*j + 8*r + c wherever its rows were sent.
// Thread 0 prints the shared tile row by row.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

__device__ __forceinline__ uint32_t pack(unsigned lo, unsigned hi) { return (hi << 16) | (lo & 0xFFFFu); }

// form 1: .x1 into an 8x8 tile;  2: .x2, the two matrices side by side (8 rows of 16);
// 4: .x4 into a 16x16 tile, matrices ordered top-left, bottom-left, top-right, bottom-right;
// 5: .x1.trans into an 8x8 tile (so the tile holds the transpose).
__global__ void store_tables(int form) {
  __shared__ __align__(16) uint16_t tile[16 * 16];
  const unsigned lane = threadIdx.x;
  for (unsigned i = lane; i < 256; i += 32) tile[i] = 0;
  __syncthreads();

  uint32_t r[4];
  for (unsigned j = 0; j < 4; ++j) r[j] = pack(100 * j + 2 * lane, 100 * j + 2 * lane + 1);

  int width = 8, height = 8;
  unsigned offset;                            // element offset of the row this lane names
  if (form == 2) { width = 16; offset = (lane % 8) * 16 + (lane / 8 % 2) * 8; }
  else if (form == 4) { width = 16; height = 16; offset = (lane % 16) * 16 + (lane / 16) * 8; }
  else offset = (lane % 8) * 8;
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(tile + offset));

  if (form == 1)
    asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};\n" :: "r"(addr), "r"(r[0]) : "memory");
  else if (form == 2)
    asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};\n"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]) : "memory");
  else if (form == 4)
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
  else
    asm volatile("stmatrix.sync.aligned.m8n8.x1.trans.shared.b16 [%0], {%1};\n" :: "r"(addr), "r"(r[0]) : "memory");
  __syncthreads();

  if (lane == 0) {
    for (int y = 0; y < height; ++y) {
      printf("row %2d:", y);
      for (int x = 0; x < width; ++x) printf(" %3u", (unsigned)tile[y * width + x]);
      printf("\n");
    }
  }
}

int main(int argc, char** argv) {
  const int forms[4] = {1, 2, 4, 5};
  const char* names[4] = {"m8n8.x1", "m8n8.x2", "m8n8.x4", "m8n8.x1.trans"};
  for (int i = 0; i < 4; ++i) {
    printf("== stmatrix.sync.aligned.%s.shared.b16 ==\n", names[i]);
    store_tables<<<1, 32>>>(forms[i]);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      printf("error: %s\n", cudaGetErrorString(err));
      return 1;
    }
  }
  return 0;
}
