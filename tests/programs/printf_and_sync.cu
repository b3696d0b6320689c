// Device printf with assorted conversions, one warp per launch, between host prints.
// A kernel's printf output reaches stdout when the host next synchronizes, so a host line
// printed right after a launch comes before that kernel's lines.
#include <cstdio>
#include <cuda_runtime.h>

__device__ const char* const kWords[4] = {"zero", "one", "two", "three"};

__global__ void formats(int base) {
  const int lane = threadIdx.x;
  const unsigned u = 3000000000u + lane;
  const float f = 0.25f * lane - 2.0f;                 // exact in binary: no rounding questions
  printf("[%02d] d=%d |%5d|%-5d| u=%u x=%x X=%08X f=%f %.2f %8.3f s=%s |%6s| c=%c %%\n",
         lane, base - lane, lane * 7, -lane, u, 0xbeef0000u + lane, lane * 0x111u, f, f, f,
         kWords[lane % 4], kWords[(lane + 1) % 4], 'A' + lane % 26);
}

// Only block 1, lanes 0..7 print here: still a single warp, so the order is lane order.
__global__ void some_lanes(long long scale) {
  if (blockIdx.x == 1 && threadIdx.x < 8)
    printf("block %d lane %d: %lld %ld %c%c\n", (int)blockIdx.x, (int)threadIdx.x,
           scale * threadIdx.x, (long)threadIdx.x - 4, 'a' + (char)threadIdx.x, '!');
}

int main(int argc, char** argv) {
  printf("host: before the first launch\n");
  formats<<<1, 32>>>(100);
  printf("host: launched, not yet synchronized\n");
  cudaDeviceSynchronize();
  printf("host: after the first synchronize\n");
  some_lanes<<<3, 64>>>(1000000000000LL);
  cudaDeviceSynchronize();
  printf("host: after the second synchronize\n");
  formats<<<1, 4>>>(-5);
  cudaDeviceSynchronize();
  printf("host: done\n");
  return 0;
}
