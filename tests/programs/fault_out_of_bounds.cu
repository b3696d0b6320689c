// A kernel writes far past the end of a 256-byte cudaMalloc buffer (2^36 floats = 256 GiB beyond
// it) from one lane. The fault shows at the next synchronization: the host prints the error
// string ("an illegal memory access was encountered" on a GPU) and exits with status 1.
// (The margin is that large on purpose: on an H200, 2^24 floats past the buffer was still mapped
// memory and nothing faulted, and 2^30 floats past it landed in another address window, which
// gives a different error.)
#include <cstdio>
#include <cstddef>
#include <cuda_runtime.h>

__global__ void scribble(float* buf, size_t n) {
  buf[threadIdx.x] = 1.0f;                           // in bounds: 32 of the 64 floats
  if (threadIdx.x == 7) {
    volatile float* way_off = buf + n + (size_t(1) << 36); // nowhere near the allocation
    *way_off = 42.0f;
  }
}

int main(int argc, char** argv) {
  const size_t n = 64;                               // 64 floats = 256 bytes
  float* buf = nullptr;
  cudaMalloc(&buf, n * sizeof(float));
  printf("launching a kernel that writes out of bounds\n");
  scribble<<<1, 32>>>(buf, n);
  cudaError_t err = cudaDeviceSynchronize();
  printf("cudaDeviceSynchronize: %s\n", cudaGetErrorString(err));
  if (err != cudaSuccess) return 1;
  cudaFree(buf);
  printf("no fault seen\n");
  return 0;
}
