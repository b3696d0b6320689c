// The peer of the capstone GEMM: CUTLASS's own mma.sync GEMM (the SM80 tensor-op kernel,
// cutlass::gemm::device::Gemm with arch::OpClassTensorOp and arch::Sm80), built for sm_90 with
// nvcc against the CUTLASS headers, one shared library per tile configuration.
//
// fp16 A (row-major, M x K) times fp16 B (row-major K x N, or with PEER_B_COL=1 column-major,
// stored N x K), fp32 accumulation, fp16 C (row-major), as the capstone GEMM computes. The tile
// configuration comes in -D options; the library exports one C function, called through ctypes
// with CuPy's device pointers and stream (ptxlab/bench/cutlass_peer.py).
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/gemm/device/gemm.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"

#ifndef PEER_TB_M
#define PEER_TB_M 128
#endif
#ifndef PEER_TB_N
#define PEER_TB_N 256
#endif
#ifndef PEER_TB_K
#define PEER_TB_K 64
#endif
#ifndef PEER_WARP_M
#define PEER_WARP_M 64
#endif
#ifndef PEER_WARP_N
#define PEER_WARP_N 64
#endif
#ifndef PEER_STAGES
#define PEER_STAGES 3
#endif
#ifndef PEER_B_COL
#define PEER_B_COL 0
#endif
#ifndef PEER_SWIZZLE
#define PEER_SWIZZLE 8
#endif

using Element = cutlass::half_t;
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = typename std::conditional<PEER_B_COL, cutlass::layout::ColumnMajor,
                                          cutlass::layout::RowMajor>::type;
using LayoutC = cutlass::layout::RowMajor;

using Gemm = cutlass::gemm::device::Gemm<
    Element, LayoutA, Element, LayoutB, Element, LayoutC, float,
    cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<PEER_TB_M, PEER_TB_N, PEER_TB_K>,
    cutlass::gemm::GemmShape<PEER_WARP_M, PEER_WARP_N, PEER_TB_K>,
    cutlass::gemm::GemmShape<16, 8, 16>,
    cutlass::epilogue::thread::LinearCombination<Element, 128 / cutlass::sizeof_bits<Element>::value,
                                                 float, float>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<PEER_SWIZZLE>, PEER_STAGES>;

// C = A * B on `stream`. Returns 0, or a cutlass::Status (+1000) / cudaError_t (+2000) code.
extern "C" int ptxlab_peer_gemm(const void* A, const void* B, void* C, int M, int N, int K,
                                void* stream) {
    const int lda = K, ldb = PEER_B_COL ? K : N, ldc = N;
    typename Gemm::Arguments args({M, N, K},
                                  {reinterpret_cast<const Element*>(A), lda},
                                  {reinterpret_cast<const Element*>(B), ldb},
                                  {reinterpret_cast<Element*>(C), ldc},
                                  {reinterpret_cast<Element*>(C), ldc},
                                  {1.0f, 0.0f});
    Gemm gemm;
    cutlass::Status status = gemm.can_implement(args);
    if (status != cutlass::Status::kSuccess) return 1000 + int(status);
    status = gemm(args, nullptr, reinterpret_cast<cudaStream_t>(stream));
    if (status != cutlass::Status::kSuccess) return 1000 + int(status);
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? 0 : 2000 + int(err);
}

// Shared memory the kernel asks for, and its threads per block (for the report).
extern "C" int ptxlab_peer_smem_bytes() { return int(sizeof(typename Gemm::GemmKernel::SharedStorage)); }
extern "C" int ptxlab_peer_threads() { return Gemm::GemmKernel::kThreadCount; }
