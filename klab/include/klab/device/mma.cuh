// klab/device/mma.cuh — the warp-level tensor-core product mma.sync.m16n8k16 with 16-bit
// operands and fp32 accumulators, for bf16 and fp16 (lesson 05 taught it; lesson 09's
// attention kernels use both types), and the packing of two fp32 values into the 16-bit
// pair an operand register holds.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane l, g = l / 4, c = l % 4:
//   A (16 x 16, row-major)  a[0] = (row g,     cols 2c, 2c+1)   a[1] = (row g + 8, cols 2c, 2c+1)
//                           a[2] = (row g,     cols 2c+8, +9)   a[3] = (row g + 8, cols 2c+8, +9)
//   B (16 x 8, "col")       b0   = (rows 2c, 2c+1,   col g)     b1   = (rows 2c+8, 2c+9, col g)
//   D (16 x 8, fp32)        d[0], d[1] = (row g, cols 2c, 2c+1) d[2], d[3] = (row g + 8, same cols)
// The accumulator of two neighbouring n8 blocks, packed to 16 bits, is the A fragment of a
// 16-deep product: what lets attention reuse P from registers (lesson 09). ldmatrix_x4, which
// loads these fragments from shared memory, is in wgmma.cuh.
//
// sm_80 and later; below it the product compiles to nothing (impls using it report
// themselves unsupported there).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define KLAB_NO_MMA_M16N8K16 1
#endif

namespace klab {

// D (16 x 8, fp32) += A (16 x 16) · B (16 x 8), T = __nv_bfloat16 or __half.
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                             std::uint32_t b1) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "bf16 or fp16 operands");
#ifndef KLAB_NO_MMA_M16N8K16
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Two fp32 values rounded to T (to nearest even) in one 32-bit register: lo in the low
// half, the element of the lower column index, as the fragments above expect.
template <class T>
__device__ __forceinline__ std::uint32_t pack_pair(float lo, float hi) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "bf16 or fp16 pairs");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  }
}

}  // namespace klab
