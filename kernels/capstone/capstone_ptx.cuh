// Inline-PTX helpers shared by the capstone kernels (GEMM, transpose, bank-conflict study).
//
// Self-contained on purpose: the capstone sources compile under NVRTC with no system header and
// under nvcc alike, and every instruction the CPU interpreter has to execute is spelled out here
// in plain PTX (cp.async 16-byte copies, ldmatrix, stmatrix, movmatrix, mma.sync, 16-byte loads
// and stores, bar.sync).
#pragma once

typedef unsigned int u32;
typedef unsigned long long u64;

// Shared-memory byte address (32-bit, as ldmatrix/stmatrix/cp.async take it) of a generic pointer.
static __device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }"
                 : "=r"(r) : "l"(p));
    return r;
}

// ---- asynchronous global -> shared copies (Ampere and later) ------------------------------
// CP_ASYNC_L2_HINT: an L2 prefetch size for every copy (e.g. ".L2::128B": L2 fetches the whole
// 128-byte line from DRAM at once), or nothing.
#ifndef CP_ASYNC_L2_HINT
#define CP_ASYNC_L2_HINT ""
#endif
static __device__ __forceinline__ void cp_async_16(u32 dst_smem, const void* src_global) {
    asm volatile("cp.async.cg.shared.global" CP_ASYNC_L2_HINT " [%0], [%1], 16;"
                 :: "r"(dst_smem), "l"(src_global) : "memory");
}
static __device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
// Wait until at most N committed groups are still in flight.
template <int N>
static __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
static __device__ __forceinline__ void block_sync() {
    asm volatile("bar.sync 0;" ::: "memory");
}
// The lane index, read from %laneid where it is needed: a value the compiler cannot hoist, so no
// per-lane address derived from it stays alive in registers across a loop.
static __device__ __forceinline__ int lane_id() {
    int r;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(r));
    return r;
}
static __device__ __forceinline__ void warp_sync() {
    asm volatile("bar.warp.sync -1;" ::: "memory");
}

// ---- 16-byte global and shared accesses --------------------------------------------------
static __device__ __forceinline__ void ld_global_v4(u32 (&r)[4], const void* p) {
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
}
static __device__ __forceinline__ void st_global_v4(void* p, const u32 (&r)[4]) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
static __device__ __forceinline__ void st_global_u32(void* p, u32 v) {
    asm volatile("st.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
static __device__ __forceinline__ void ld_shared_v4(u32 (&r)[4], u32 addr) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
static __device__ __forceinline__ void ld_shared_v2(u32& a, u32& b, u32 addr) {
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(a), "=r"(b) : "r"(addr) : "memory");
}
static __device__ __forceinline__ void st_shared_v4(u32 addr, const u32 (&r)[4]) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}

// ---- the warp-level matrix instructions ----------------------------------------------------
static __device__ __forceinline__ void ldsm_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
static __device__ __forceinline__ void ldsm_x4_trans(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
static __device__ __forceinline__ void stsm_x4(u32 addr, const u32 (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
static __device__ __forceinline__ void stsm_x4_trans(u32 addr, const u32 (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
static __device__ __forceinline__ u32 movmatrix_trans(u32 a) {
    u32 d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(a));
    return d;
}
// D = A * B + D, m16n8k16, f16 inputs, f32 accumulators (row.col as the instruction requires).
static __device__ __forceinline__ void mma_f16_f32(float (&d)[4], const u32 (&a)[4], u32 b0,
                                                   u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Bytes of {b, a} picked by the four selector nibbles (prmt): byte_perm(a, b, 0x5410) is the low
// half of a, then the low half of b.
static __device__ __forceinline__ u32 byte_perm(u32 a, u32 b, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// Two f32 -> one register of two f16 (round to nearest even); `lo` lands in the low half.
static __device__ __forceinline__ u32 pack_f16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
static __device__ __forceinline__ u32 float_bits(float x) {
    u32 r;
    asm("mov.b32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
