// Kept mistake: the kernel uses `half` and __float2half, but the program includes only
// <cstdio> and <cuda_runtime.h>. The half type lives in <cuda_fp16.h>, so nvcc stops with
// 'identifier "half" is undefined'. (Adding #include <cuda_fp16.h> makes it a correct program.)
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

// Transposes one 8x8 tile of halves inside a warp with movmatrix.
__global__ void transpose8(const half* in, half* out) {
  __shared__ __align__(16) half tile[64];
  const unsigned lane = threadIdx.x;
  tile[lane] = in[lane];
  tile[lane + 32] = in[lane + 32];
  __syncthreads();
  uint32_t frag, moved;
  const uint32_t row = static_cast<uint32_t>(__cvta_generic_to_shared(tile + (lane % 8) * 8));
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(frag) : "r"(row));
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(moved) : "r"(frag));
  // lane holds row lane/4, columns 2*(lane%4) and the next one, of the transposed tile
  reinterpret_cast<uint32_t*>(out)[lane] = moved;
}

int main(int argc, char** argv) {
  half h_in[64], h_out[64];
  for (int i = 0; i < 64; ++i) h_in[i] = __float2half(static_cast<float>(i));
  half *d_in, *d_out;
  cudaMalloc(&d_in, sizeof h_in);
  cudaMalloc(&d_out, sizeof h_out);
  cudaMemcpy(d_in, h_in, sizeof h_in, cudaMemcpyHostToDevice);
  transpose8<<<1, 32>>>(d_in, d_out);
  cudaMemcpy(h_out, d_out, sizeof h_out, cudaMemcpyDeviceToHost);
  printf("out[0][1] = %g (expected 8)\n", __half2float(h_out[1]));
  cudaFree(d_in);
  cudaFree(d_out);
  return 0;
}
