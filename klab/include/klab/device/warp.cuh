// klab/device/warp.cuh — warp-level reductions (taught in lesson 03, used from lesson 04 on).
//
// A warp's 32 lanes exchange registers through shuffles, no shared memory and no barrier.
// The butterfly (__shfl_xor_sync) leaves the result in every lane; for lane 0 it adds the
// same pairs in the same order as the textbook __shfl_down_sync tree (lane 0 ^ o == 0 + o at
// every step), so the two give lane 0 the same bits.
#pragma once

#include <cuda_runtime.h>

namespace klab {

// Every lane takes part: the mask of a full warp.
inline constexpr unsigned kFullMask = 0xffffffffu;

// Sum over the 32 lanes of a warp; every lane returns the warp's sum. Five shuffles.
// A: float, or an unsigned int (a wrapping int32 sum: modular addition is exact in any order).
template <class A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// Max over the 32 lanes of a warp; every lane returns it.
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

}  // namespace klab
