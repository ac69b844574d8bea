// klab/device/wgmma.cuh — warpgroup MMA (sm_90a; lesson 05's Hopper versions), and the
// ldmatrix / stmatrix moves between fragments and shared memory.
//
// wgmma.mma_async is issued by a warpgroup — 4 consecutive warps, the first a multiple of
// 4 — and multiplies a 64 x N x 16 block: A (64 x 16) and B (16 x N) read straight from
// shared memory through 64-bit descriptors, D (64 x N fp32) in registers, N/2 per thread.
// It is asynchronous: issue a batch, commit it as a group, and wait for groups later,
// which lets a warpgroup keep the tensor cores busy while it waits for the next tile.
//
// The protocol, in order:
//   wgmma_fence()        before the first wgmma that touches accumulators the warpgroup
//                        wrote or read with ordinary instructions;
//   wgmma_m64nNk16_*     the MMAs (any number);
//   wgmma_commit()       closes the group;
//   wgmma_wait<G>()      until at most G groups are pending; their shared-memory operands
//                        may then be overwritten, and their accumulators read — after
//                        wgmma_fence_acc() tells the compiler so.
//
// Accumulator fragment (the same as mma.sync's per 8 columns): thread t of the warpgroup,
// warp w = t/32, lane l: d[4j + 0..1] are row 16w + l/4, columns 8j + 2(l%4) + 0..1;
// d[4j + 2..3] are row 16w + l/4 + 8, the same columns.
//
// Shared-memory descriptors (smem_desc_sw128). Operands are stored as the TMA writes them
// with the 128-byte swizzle (tma.cuh): rows of 128 bytes, the pattern repeating every 8
// rows (1024 bytes). A descriptor holds the start address, two strides and the swizzle:
//   K-major operand (A as M x K, B as N x K, K contiguous; 64 K per 128-byte row):
//     SBO = 1024 (from one group of 8 M/N rows to the next); LBO unused.
//     The k-th 16-deep slice of a 64-deep tile starts 32·k bytes into the row; the
//     hardware applies the swizzle to the full address, so moving the start is enough.
//   MN-major operand (A stored K x M, B stored K x N, M/N contiguous; one 128-byte row
//     holds 64 M/N values of one k; a TMA box of 64 x BK fills BK rows):
//     SBO = 1024 (from one group of 8 k rows to the next), LBO = the bytes from one
//     64-wide M/N block to the next (BK · 128 when boxes sit one after another).
//     The k-th 16-deep slice starts 16·128·k bytes in: 2048·k.
// and the instruction's transpose flag (TA/TB = 1) says the operand is MN-major.
//
// Below sm_90a (the arch-specific target that wgmma and setmaxnreg need) the wrappers
// compile to nothing (KLAB_NO_WGMMA): kernels using them report themselves unsupported.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KLAB_NO_WGMMA 1
#endif

namespace klab {

// Descriptor of a 128-byte-swizzled operand at shared address s_addr (see above).
__device__ __forceinline__ std::uint64_t smem_desc_sw128(std::uint32_t s_addr, std::uint32_t lbo_bytes,
                                                        std::uint32_t sbo_bytes) {
  std::uint64_t d = 0;
  d |= static_cast<std::uint64_t>((s_addr & 0x3FFFF) >> 4);          // bits 0-13: address / 16
  d |= static_cast<std::uint64_t>((lbo_bytes & 0x3FFFF) >> 4) << 16;  // bits 16-29: leading byte offset / 16
  d |= static_cast<std::uint64_t>((sbo_bytes & 0x3FFFF) >> 4) << 32;  // bits 32-45: stride byte offset / 16
  d |= static_cast<std::uint64_t>(1) << 62;                           // bits 62-63: 1 = 128-byte swizzle
  return d;
}

__device__ __forceinline__ void wgmma_fence() {
#ifndef KLAB_NO_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_commit() {
#ifndef KLAB_NO_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

template <int G>
__device__ __forceinline__ void wgmma_wait() {
#ifndef KLAB_NO_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(G) : "memory");
#endif
}

// The compiler sees a wgmma's accumulators as written when it is issued; this tells it a
// register may have changed here too, so reads after a wgmma_wait stay after it.
template <int R>
__device__ __forceinline__ void wgmma_fence_acc(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The same for the registers a wgmma reads its A operand from (wgmma_rs): after the wait
// that retires it, so that the compiler neither reuses nor rewrites them before that point
// (the tensor cores read them while the instruction is in flight).
template <int R>
__device__ __forceinline__ void wgmma_fence_operand(std::uint32_t (&r)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Register reallocation between warpgroups: producers give registers back (dec), the
// consumers holding the accumulators take them (inc). Every warp of a warpgroup executes
// it; the kernel needs a register cap at entry (__launch_bounds__(threads, 1)).
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
#ifndef KLAB_NO_WGMMA
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
#endif
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
#ifndef KLAB_NO_WGMMA
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
#endif
}

// Stores four 8x8 b16 matrices to shared memory: lane l gives the address of row l % 8 of
// matrix l / 8 (16 bytes), register i holds this lane's pair of matrix i — the layout of an
// accumulator fragment packed to bf16x2, so a warp writes 16 rows x 16 columns of its tile
// with one instruction where 4-byte stores need eight.
__device__ __forceinline__ void stmatrix_x4(std::uint32_t s_row, std::uint32_t r0, std::uint32_t r1,
                                            std::uint32_t r2, std::uint32_t r3) {
#ifndef KLAB_NO_WGMMA
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(s_row), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
#endif
}

// Loads four 8x8 b16 matrices: lanes 8i..8i+7 give the row addresses of matrix i (16 bytes
// each), and lane l gets, in register i, row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 of
// matrix i (of its transpose with TRANS). Lesson 05's mma.sync kernels load their operand
// fragments with it; without TRANS it is the inverse of stmatrix_x4: reading back what
// stmatrix_x4 wrote at the same addresses gives each lane the registers it stored (lesson
// 06 reads an epilogue's source tile so). sm_75 and later.
template <bool TRANS = false>
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t s_addr) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 750
  if constexpr (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s_addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s_addr));
#endif
}

// D (64 x N, fp32) += A (64 x 16) · B (16 x N), bf16 operands from shared memory; with
// scale_d == 0 D is overwritten instead. TA / TB: 1 when that operand is MN-major.
template <int TA, int TB>
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[64], std::uint64_t desc_a, std::uint64_t desc_b,
                                                       int scale_d) {
#ifndef KLAB_NO_WGMMA
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "},"
      " %64, %65, p, 1, 1, %67, %68;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
#endif
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[128], std::uint64_t desc_a, std::uint64_t desc_b,
                                                       int scale_d) {
#ifndef KLAB_NO_WGMMA
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "},"
      " %128, %129, p, 1, 1, %131, %132;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
#endif
}

// The instruction for a warpgroup tile N wide (128 or 256).
template <int N, int TA, int TB>
__device__ __forceinline__ void wgmma_bf16(float (&d)[N / 2], std::uint64_t desc_a, std::uint64_t desc_b,
                                           int scale_d) {
  static_assert(N == 128 || N == 256, "wgmma_bf16: N is 128 or 256");
  if constexpr (N == 256) wgmma_m64n256k16_bf16<TA, TB>(d, desc_a, desc_b, scale_d);
  else wgmma_m64n128k16_bf16<TA, TB>(d, desc_a, desc_b, scale_d);
}

// The fp16 twin of wgmma_m64n128k16_bf16 (both operands in shared memory).
template <int TA, int TB>
__device__ __forceinline__ void wgmma_m64n128k16_f16(float (&d)[64], std::uint64_t desc_a, std::uint64_t desc_b,
                                                      int scale_d) {
#ifndef KLAB_NO_WGMMA
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "},"
      " %64, %65, p, 1, 1, %67, %68;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
#endif
}

// D (64 x 64, fp32) += A (64 x 16, bf16, registers) · B (16 x 64, bf16, shared memory).
template <int TB>
__device__ __forceinline__ void wgmma_m64n64k16_rs_bf16(float (&d)[32], const std::uint32_t (&a)[4],
                                                        std::uint64_t desc_b, int scale_d) {
#ifndef KLAB_NO_WGMMA
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "},"
      " {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
#endif
}

// D (64 x 64, fp32) += A (64 x 16, f16, registers) · B (16 x 64, f16, shared memory).
template <int TB>
__device__ __forceinline__ void wgmma_m64n64k16_rs_f16(float (&d)[32], const std::uint32_t (&a)[4],
                                                        std::uint64_t desc_b, int scale_d) {
#ifndef KLAB_NO_WGMMA
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "},"
      " {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
#endif
}

// D (64 x 128, fp32) += A (64 x 16, bf16, registers) · B (16 x 128, bf16, shared memory).
template <int TB>
__device__ __forceinline__ void wgmma_m64n128k16_rs_bf16(float (&d)[64], const std::uint32_t (&a)[4],
                                                        std::uint64_t desc_b, int scale_d) {
#ifndef KLAB_NO_WGMMA
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "},"
      " {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
#endif
}

// D (64 x 128, fp32) += A (64 x 16, f16, registers) · B (16 x 128, f16, shared memory).
template <int TB>
__device__ __forceinline__ void wgmma_m64n128k16_rs_f16(float (&d)[64], const std::uint32_t (&a)[4],
                                                        std::uint64_t desc_b, int scale_d) {
#ifndef KLAB_NO_WGMMA
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "},"
      " {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
#endif
}


// The 16-bit type's instruction, both operands from shared memory, a 64 x 128 tile: lesson
// 09's S = Q·Kᵀ (bf16 or fp16 inputs).
template <class T, int TA, int TB>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], std::uint64_t desc_a, std::uint64_t desc_b,
                                              int scale_d) {
  if constexpr (std::is_same_v<T, __half>) wgmma_m64n128k16_f16<TA, TB>(d, desc_a, desc_b, scale_d);
  else wgmma_m64n128k16_bf16<TA, TB>(d, desc_a, desc_b, scale_d);
}

// A from registers, B from shared memory, a 64 x N tile (N = 64 or 128), T = __nv_bfloat16
// or __half. A's registers hold the warp's 16 rows in mma.sync's A-fragment layout (mma.cuh:
// a[0] row g, columns 2c, 2c + 1; a[1] row g + 8; a[2], a[3] the same 8 columns on) — the
// layout of an accumulator fragment packed to 16 bits, so a product's output can feed the
// next product without a trip through shared memory (lesson 09's P·V). Only B can be
// transposed (TB = 1: MN-major).
template <class T, int N, int TB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                         int scale_d) {
  static_assert(N == 64 || N == 128, "wgmma_rs: N is 64 or 128");
  constexpr bool kHalf = std::is_same_v<T, __half>;
  if constexpr (N == 64) {
    if constexpr (kHalf) wgmma_m64n64k16_rs_f16<TB>(d, a, desc_b, scale_d);
    else wgmma_m64n64k16_rs_bf16<TB>(d, a, desc_b, scale_d);
  } else {
    if constexpr (kHalf) wgmma_m64n128k16_rs_f16<TB>(d, a, desc_b, scale_d);
    else wgmma_m64n128k16_rs_bf16<TB>(d, a, desc_b, scale_d);
  }
}

}  // namespace klab
