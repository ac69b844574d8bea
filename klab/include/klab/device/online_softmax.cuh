// klab/device/online_softmax.cuh — the online-softmax state and its merges (lesson 04).
//
// A softmax needs the row's max m and d = sum of exp(x - m). Read in one pass, each thread
// keeps a running (m, d); two states merge by rescaling both sums to the larger max. The
// same merge serves softmax, the norms' statistics and cross-entropy, and the attention
// kernels' running rows.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "klab/device/warp.cuh"

namespace klab {

// The running state: the max seen so far and the sum of exp(x - m). The empty state is
// (-inf, 0); merging two empty states must not compute exp(-inf - -inf) = NaN.
struct MD {
  float m, d;
};

// 2^x on the special-function unit (MUFU.EX2): one instruction, relative error about 2^-22
// (PTX ISA, ex2.approx), what Triton's tl.exp compiles to. -inf gives +0; results below
// 2^-126 flush to 0.
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// kLog2 = true: the same state in base 2: m is the max times log2(e) and
// d = sum of 2^(x * log2(e) - m), so the merge needs ex2 instead of exp.
template <bool kLog2 = false>
__device__ __forceinline__ MD md_merge(MD a, MD b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  if constexpr (kLog2) return {m, a.d * ex2_approx(a.m - m) + b.d * ex2_approx(b.m - m)};
  else return {m, a.d * expf(a.m - m) + b.d * expf(b.m - m)};   // exp(-inf - finite) = 0
}

// Merge over the 32 lanes; every lane returns the warp's state.
template <bool kLog2 = false>
__device__ __forceinline__ MD warp_merge(MD v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MD other{__shfl_xor_sync(kFullMask, v.m, o), __shfl_xor_sync(kFullMask, v.d, o)};
    v = md_merge<kLog2>(v, other);
  }
  return v;
}

// The block's merge with one barrier: each warp merges its lanes, lane 0 parks the result in
// s_md (32 entries), and after the barrier every warp merges the parked states again, so
// every thread returns the block's state. The caller must __syncthreads() before calling it
// again with the same s_md.
template <bool kLog2 = false>
__device__ __forceinline__ MD block_merge(MD v, MD* s_md) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = warp_merge<kLog2>(v);
  if (lane == 0) s_md[warp] = v;
  __syncthreads();
  MD w = lane < warps ? s_md[lane] : MD{-INFINITY, 0.f};
  return warp_merge<kLog2>(w);
}

}  // namespace klab
