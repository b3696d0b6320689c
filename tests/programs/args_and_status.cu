// Command-line arguments and exit status.
//   args_and_status [N [MODE]]
//   N     how many squares to compute, 1..1024 (default 10); anything else: message, exit 2
//   MODE  "fail": the run prints as usual and then exits with status 3; otherwise exit 0
// The manifest runs it three ways: "5 fail" -> exit 3, no arguments -> 0, "0" -> 2.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

__global__ void squares(long long* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<long long>(i) * i;
}

int main(int argc, char** argv) {
  int n = 10;
  if (argc > 1) {
    char* end = nullptr;
    long v = strtol(argv[1], &end, 10);
    if (*argv[1] == '\0' || *end != '\0' || v < 1 || v > 1024) {
      printf("bad N '%s': expected 1..1024\n", argv[1]);
      return 2;
    }
    n = static_cast<int>(v);
  }
  const bool fail = argc > 2 && strcmp(argv[2], "fail") == 0;
  printf("argc = %d, N = %d, mode = %s\n", argc, n, argc > 2 ? argv[2] : "(none)");

  long long* d;
  cudaMalloc(&d, n * sizeof(long long));
  squares<<<(n + 127) / 128, 128>>>(d, n);
  long long* h = static_cast<long long*>(malloc(n * sizeof(long long)));
  cudaMemcpy(h, d, n * sizeof(long long), cudaMemcpyDeviceToHost);
  cudaFree(d);

  long long total = 0;
  printf("squares:");
  for (int i = 0; i < n; ++i) { printf(" %lld", h[i]); total += h[i]; }
  printf("\nsum = %lld\n", total);
  free(h);
  if (fail) {
    printf("asked to fail: exit status 3\n");
    return 3;
  }
  return 0;
}
