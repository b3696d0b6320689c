// Transpose a 32x48 half matrix, one 16x16 tile per block (one warp each):
// ldmatrix.x4 brings the tile's four 8x8 pieces into registers, movmatrix.trans transposes each
// piece inside the warp, and stmatrix.x4 writes them back with the off-diagonal pieces swapped.
// The host checks every element against its own transpose and prints PASS or the first mismatch.
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

constexpr int ROWS = 32, COLS = 48;

__global__ void transpose_tiles(const __half* a, __half* b, int rows, int cols) {
  __shared__ __align__(16) __half in[256];
  __shared__ __align__(16) __half out[256];
  const unsigned lane = threadIdx.x;
  const int r0 = blockIdx.y * 16, c0 = blockIdx.x * 16;
  for (unsigned i = lane; i < 256; i += 32) in[i] = a[(r0 + i / 16) * cols + c0 + i % 16];
  __syncthreads();

  // Pieces in register order: top-left, bottom-left, top-right, bottom-right.
  const unsigned offset = (lane % 16) * 16 + (lane / 16) * 8;
  const uint32_t src = static_cast<uint32_t>(__cvta_generic_to_shared(in + offset));
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(out + offset));
  uint32_t p[4], t[4];
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(p[0]), "=r"(p[1]), "=r"(p[2]), "=r"(p[3]) : "r"(src));
  for (int k = 0; k < 4; ++k)
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(t[k]) : "r"(p[k]));
  // The transposed bottom-left piece becomes the top-right one and the other way round.
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :: "r"(dst), "r"(t[0]), "r"(t[2]), "r"(t[1]), "r"(t[3]) : "memory");
  __syncthreads();

  // out is tile (c0, r0) of the result, which has `rows` columns.
  for (unsigned i = lane; i < 256; i += 32) b[(c0 + i / 16) * rows + r0 + i % 16] = out[i];
}

static uint16_t bits(__half h) { uint16_t u; memcpy(&u, &h, sizeof u); return u; }

int main(int argc, char** argv) {
  static __half a[ROWS * COLS], b[COLS * ROWS];
  for (int i = 0; i < ROWS * COLS; ++i) a[i] = __float2half(static_cast<float>(i));  // exact below 2048
  __half *da, *db;
  cudaMalloc(&da, sizeof a);
  cudaMalloc(&db, sizeof b);
  cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
  cudaMemset(db, 0, sizeof b);
  transpose_tiles<<<dim3(COLS / 16, ROWS / 16), 32>>>(da, db, ROWS, COLS);
  cudaMemcpy(b, db, sizeof b, cudaMemcpyDeviceToHost);
  cudaFree(da);
  cudaFree(db);

  for (int i = 0; i < COLS; ++i)
    for (int j = 0; j < ROWS; ++j)
      if (bits(b[i * ROWS + j]) != bits(a[j * COLS + i])) {
        printf("FAIL: out[%d][%d] = %g, expected %g\n", i, j, __half2float(b[i * ROWS + j]),
               __half2float(a[j * COLS + i]));
        return 1;
      }
  printf("out row 1, first four: %g %g %g %g\n", __half2float(b[ROWS]), __half2float(b[ROWS + 1]),
         __half2float(b[ROWS + 2]), __half2float(b[ROWS + 3]));
  printf("PASS: %dx%d transpose matches the host\n", COLS, ROWS);
  return 0;
}
