// A kernel that never finishes: lane 0 waits for a flag in global memory that nothing ever sets
// (a volatile read, so each pass of the loop really reads memory). Meant for the CPU model only,
// where the runner stops the launch as an endless loop; the synchronize then returns an error
// ("the launch timed out and was terminated"), which main prints before exiting with status 1.
// On a GPU it would spin until killed.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void wait_forever(const volatile int* flag, int* seen) {
  if (threadIdx.x == 0) {
    while (*flag == 0) {
    }
    *seen = 1;
  }
}

int main(int argc, char** argv) {
  int *flag, *seen;
  cudaMalloc(&flag, sizeof(int));
  cudaMalloc(&seen, sizeof(int));
  cudaMemset(flag, 0, sizeof(int));
  printf("launching a kernel that waits for a flag nobody sets\n");
  fflush(stdout);
  wait_forever<<<1, 32>>>(flag, seen);
  cudaError_t err = cudaDeviceSynchronize();
  printf("returned from the wait: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
