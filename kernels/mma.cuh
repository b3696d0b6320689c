// mma.cuh - inline-PTX wrappers for the warp-level mma.sync.aligned forms the course covers
//
//   m16n8k16.row.col  f16  <- f16  x f16  + f16    (sm_80)
//   m16n8k16.row.col  f32  <- f16  x f16  + f32    (sm_80)
//   m16n8k16.row.col  f32  <- bf16 x bf16 + f32    (sm_80)
//   m16n8k8.row.col   f32  <- f16  x f16  + f32    (sm_75)
//   m16n8k8.row.col   f32  <- tf32 x tf32 + f32    (sm_80)
//   m16n8k32.row.col  s32  <- s8   x s8   + s32    (sm_80; wraps on overflow, no .satfinite)
//
// Names follow the PTX type order d.a.b.c: mma_<shape>_<dtype>_<atype>_<btype>_<ctype>.
// Operands are one warp's fragments: A is M x K row-major (".row"), B is K x N column-major
// (".col"), C and D are M x N. 16-bit and 8-bit elements are packed into 32-bit registers, lower
// index in the low bits; f32 accumulators are floats, s32 accumulators ints; tf32 elements are
// f32 bit patterns of which the tensor core reads the upper 19 bits.
// Register counts per lane (A, B, C/D) are part of each wrapper's type, so a fragment of the
// wrong size does not compile. Warp-collective: all 32 lanes call the same wrapper.
//
// Compiles standalone with nvcc and with NVRTC (no standard headers needed).
#pragma once

namespace ptxlab {

// ---- m16n8k16 -----------------------------------------------------------------------------
__device__ __forceinline__ void mma_m16n8k16_f16_f16_f16_f16(
    unsigned (&d)[2], const unsigned (&a)[4], const unsigned (&b)[2], const unsigned (&c)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
      "{%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%8, %9};\n"
      : "=r"(d[0]), "=r"(d[1])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]));
}

__device__ __forceinline__ void mma_m16n8k16_f32_f16_f16_f32(
    float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

__device__ __forceinline__ void mma_m16n8k16_f32_bf16_bf16_f32(
    float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// ---- m16n8k8 ------------------------------------------------------------------------------
__device__ __forceinline__ void mma_m16n8k8_f32_f16_f16_f32(
    float (&d)[4], const unsigned (&a)[2], const unsigned (&b)[1], const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

__device__ __forceinline__ void mma_m16n8k8_f32_tf32_tf32_f32(
    float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// ---- m16n8k32 -----------------------------------------------------------------------------
__device__ __forceinline__ void mma_m16n8k32_s32_s8_s8_s32(
    int (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const int (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
}

}  // namespace ptxlab
