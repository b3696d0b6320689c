// One warp computes D = A*B + C with mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32.
// A (16x16, row-major) comes in with ldmatrix.x4, B (16x8) with ldmatrix.x2 from its
// column-major copy (8 rows of 16 k-values). All inputs are small integers, so every product
// and sum is exact and the host reference must match bit for bit.
#include <cstdio>
#include <cstdint>
#include <cmath>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

__global__ void mma_tile(const __half* a, const __half* bt, const float* c, float* d) {
  __shared__ __align__(16) __half sa[16 * 16];
  __shared__ __align__(16) __half sb[8 * 16];   // sb[n*16 + k] = B[k][n]
  const unsigned lane = threadIdx.x;
  for (unsigned i = lane; i < 256; i += 32) sa[i] = a[i];
  for (unsigned i = lane; i < 128; i += 32) sb[i] = bt[i];
  __syncthreads();

  // A: lanes 0-15 name rows 0-15 at column 0, lanes 16-31 the same rows at column 8,
  // giving a0..a3 = rows 0-7/8-15 of columns 0-7, then rows 0-7/8-15 of columns 8-15.
  uint32_t fa[4], fb[2];
  const uint32_t pa = static_cast<uint32_t>(__cvta_generic_to_shared(sa + (lane % 16) * 16 + (lane / 16) * 8));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(fa[0]), "=r"(fa[1]), "=r"(fa[2]), "=r"(fa[3]) : "r"(pa));
  // B: lanes 0-7 name columns n = 0-7 at k = 0, lanes 8-15 the same columns at k = 8.
  const uint32_t pb = static_cast<uint32_t>(__cvta_generic_to_shared(sb + (lane % 8) * 16 + (lane / 8 % 2) * 8));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(fb[0]), "=r"(fb[1]) : "r"(pb));

  // C and D: lane holds rows lane/4 and lane/4 + 8, columns 2*(lane%4) and 2*(lane%4) + 1.
  const int row = lane / 4, col = 2 * (lane % 4);
  float acc[4] = {c[row * 8 + col], c[row * 8 + col + 1], c[(row + 8) * 8 + col], c[(row + 8) * 8 + col + 1]};
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
               : "r"(fa[0]), "r"(fa[1]), "r"(fa[2]), "r"(fa[3]), "r"(fb[0]), "r"(fb[1]));
  d[row * 8 + col] = acc[0];
  d[row * 8 + col + 1] = acc[1];
  d[(row + 8) * 8 + col] = acc[2];
  d[(row + 8) * 8 + col + 1] = acc[3];
}

int main(int argc, char** argv) {
  float A[16][16], B[16][8], C[16][8], D[16][8];
  __half ha[256], hbt[128];
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k) { A[i][k] = (float)((3 * i + 5 * k) % 7 - 3); ha[i * 16 + k] = __float2half(A[i][k]); }
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) { B[k][n] = (float)((k + 2 * n) % 5 - 2); hbt[n * 16 + k] = __float2half(B[k][n]); }
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n) C[i][n] = (float)(i - 2 * n);

  __half *da, *db;
  float *dc, *dd;
  cudaMalloc(&da, sizeof ha);
  cudaMalloc(&db, sizeof hbt);
  cudaMalloc(&dc, sizeof C);
  cudaMalloc(&dd, sizeof D);
  cudaMemcpy(da, ha, sizeof ha, cudaMemcpyHostToDevice);
  cudaMemcpy(db, hbt, sizeof hbt, cudaMemcpyHostToDevice);
  cudaMemcpy(dc, C, sizeof C, cudaMemcpyHostToDevice);
  mma_tile<<<1, 32>>>(da, db, dc, dd);
  cudaMemcpy(D, dd, sizeof D, cudaMemcpyDeviceToHost);
  cudaFree(da); cudaFree(db); cudaFree(dc); cudaFree(dd);

  double max_err = 0.0;
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n) {
      float ref = C[i][n];
      for (int k = 0; k < 16; ++k) ref += A[i][k] * B[k][n];
      max_err = fmax(max_err, fabs((double)D[i][n] - ref));
    }
  for (int i : {0, 1, 8, 15}) {
    printf("D[%2d][0..7]:", i);
    for (int n = 0; n < 8; ++n) printf(" %6.1f", D[i][n]);
    printf("\n");
  }
  printf("max |D - ref| = %g\n", max_err);
  printf("%s\n", max_err == 0.0 ? "PASS" : "FAIL");
  return max_err == 0.0 ? 0 : 1;
}
