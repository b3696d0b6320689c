// Host-side CUDA features around plain kernels: a template kernel in two instantiations,
// __forceinline__ device helpers, launches in a host loop, dynamic shared memory, a 2-D grid,
// cudaMemset, a device-to-device copy, events, atomics and cudaGetLastError. Only the host prints.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

__device__ __forceinline__ int flat_index() { return blockIdx.x * blockDim.x + threadIdx.x; }
template <typename T> __device__ __forceinline__ T twice(T v) { return v + v; }

// y += a*x + STEP, elementwise; used as <float, 1> and <int, 3>.
template <typename T, int STEP>
__global__ void axpy_step(T* y, const T* x, T a, int n) {
  const int i = flat_index();
  if (i < n) y[i] += a * x[i] + static_cast<T>(STEP);
}

// Reverses each block's slice through dynamic shared memory (size given at launch).
__global__ void reverse_slices(const int* in, int* out) {
  extern __shared__ int slice[];
  const int base = blockIdx.x * blockDim.x;
  slice[threadIdx.x] = in[base + threadIdx.x];
  __syncthreads();
  out[base + threadIdx.x] = twice(slice[blockDim.x - 1 - threadIdx.x]);
}

// A 2-D grid of 2-D blocks labels every cell of a width-wide table.
__global__ void label_cells(int* out, int width) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  out[y * width + x] = 100 * y + x;
}

__global__ void total(const int* v, int n, unsigned long long* sum) {
  const int i = flat_index();
  if (i < n) atomicAdd(sum, static_cast<unsigned long long>(v[i]));
}

int main(int argc, char** argv) {
  const int N = 256;
  float hx[N], hy[N];
  int hxi[N], hyi[N], hrev[N], cells[12 * 32];
  for (int i = 0; i < N; ++i) { hx[i] = 0.5f * i; hxi[i] = i; }
  float *x, *y;
  int *xi, *yi, *copy, *rev, *grid_out;
  unsigned long long *sum, hsum = 0;
  cudaMalloc(&x, N * sizeof(float)); cudaMalloc(&y, N * sizeof(float));
  cudaMalloc(&xi, N * sizeof(int)); cudaMalloc(&yi, N * sizeof(int));
  cudaMalloc(&copy, N * sizeof(int)); cudaMalloc(&rev, N * sizeof(int));
  cudaMalloc(&grid_out, sizeof cells); cudaMalloc(&sum, sizeof hsum);
  cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
  cudaMemcpy(xi, hxi, sizeof hxi, cudaMemcpyHostToDevice);
  cudaMemset(y, 0, N * sizeof(float));
  cudaMemset(yi, 0, N * sizeof(int));
  cudaMemset(sum, 0, sizeof hsum);

  cudaEvent_t start, stop;
  cudaEventCreate(&start); cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int it = 0; it < 5; ++it) {            // five launches, each adds to the last
    axpy_step<float, 1><<<N / 64, 64>>>(y, x, 2.0f, N);
    axpy_step<int, 3><<<N / 128, 128>>>(yi, xi, it, N);
  }
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = -1.0f;
  cudaEventElapsedTime(&ms, start, stop);
  printf("loop elapsed >= 0: %s\n", ms >= 0.0f ? "yes" : "no");

  cudaMemcpy(copy, yi, N * sizeof(int), cudaMemcpyDeviceToDevice);
  reverse_slices<<<N / 64, 64, 64 * sizeof(int)>>>(copy, rev);
  printf("after reverse_slices: %s\n", cudaGetErrorString(cudaGetLastError()));
  label_cells<<<dim3(4, 3), dim3(8, 4)>>>(grid_out, 32);
  total<<<N / 32, 32>>>(yi, N, sum);
  label_cells<<<1, 2048>>>(grid_out, 32);    // too many threads per block: refused at launch
  printf("oversized block: %s\n", cudaGetErrorString(cudaGetLastError()));
  printf("and then: %s\n", cudaGetErrorString(cudaGetLastError()));

  cudaMemcpy(hy, y, sizeof hy, cudaMemcpyDeviceToHost);
  cudaMemcpy(hyi, yi, sizeof hyi, cudaMemcpyDeviceToHost);
  cudaMemcpy(hrev, rev, sizeof hrev, cudaMemcpyDeviceToHost);
  cudaMemcpy(cells, grid_out, sizeof cells, cudaMemcpyDeviceToHost);
  cudaMemcpy(&hsum, sum, sizeof hsum, cudaMemcpyDeviceToHost);
  printf("float y[0], y[1], y[255] = %.1f %.1f %.1f\n", hy[0], hy[1], hy[255]);   // 5*(i+1)
  printf("int y[0], y[1], y[255] = %d %d %d\n", hyi[0], hyi[1], hyi[255]);       // 10*i+15
  printf("reversed x2: rev[0], rev[63], rev[64] = %d %d %d\n", hrev[0], hrev[63], hrev[64]);
  printf("cells[0][0], cells[5][17], cells[11][31] = %d %d %d\n", cells[0], cells[5 * 32 + 17], cells[11 * 32 + 31]);
  printf("atomic total of int y = %llu\n", hsum);
  cudaEventDestroy(start); cudaEventDestroy(stop);
  cudaFree(x); cudaFree(y); cudaFree(xi); cudaFree(yi); cudaFree(copy); cudaFree(rev);
  cudaFree(grid_out); cudaFree(sum);
  return 0;
}
