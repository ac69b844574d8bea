// Lesson 03 — pieces the reduction kernels share: accumulator types, warp and block
// sums, grid sizing, the length-dependent tolerance of a float sum, the shape check.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "klab/compare.hpp"
#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace l03 {

// The type a sum accumulates in. int32 sums accumulate in uint32: unsigned overflow is
// defined (mod 2^32) and gives the same bits as a wrapping int32 add, and because
// modular addition is associative the int32 result is exact and the same for every
// order (atomics included). Signed overflow would be undefined behaviour in C++.
template <class T> struct Acc;
template <> struct Acc<float> { using type = float; };
template <> struct Acc<int> { using type = unsigned int; };
template <class T> using acc_t = typename Acc<T>::type;

template <class A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;  // lane 0 holds the warp's sum
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); the result is valid in
// thread 0. The order of additions is fixed by the thread layout: deterministic.
template <class A>
__device__ __forceinline__ A block_sum(A v) {
  __shared__ A s_warp[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) s_warp[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = (threadIdx.x < warps) ? s_warp[threadIdx.x] : A(0);
  if (warp == 0) v = warp_sum(v);
  __syncthreads();  // s_warp may be reused by a later call
  return v;
}

// Blocks that fit on the GPU at once for this kernel and block size: the grid of a
// grid-stride kernel that fills every SM exactly.
template <class K>
int resident_blocks(K kernel, int threads, std::size_t smem = 0) {
  int per_sm = 0;
  KLAB_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  const int sms = klab::device_info().sms > 0 ? klab::device_info().sms : 132;
  return (per_sm > 0 ? per_sm : 1) * sms;
}

inline int grid_for(std::int64_t work_items, int per_block, int cap) {
  const std::int64_t b = klab::ceil_div<std::int64_t>(work_items, per_block);
  return static_cast<int>(b < 1 ? 1 : (b > cap ? cap : b));
}

// Tolerance of an fp32 sum of n terms uniform in [-1, 1) (sigma = 1/sqrt(3)) against the
// fp64 sum. Each fp32 addition rounds with a relative error up to eps = 2^-24 of the
// running partial; the partials of random-sign terms grow like sqrt(k) * sigma, so the
// accumulated error of ANY summation order stays below about eps * n * sigma (a single
// thread adding all n terms in a row is the worst order; trees do much better). atol =
// 4 eps n sigma + a floor for tiny n. For n = 2^24 that is 2.3 (4/sqrt(3)) against a sum of size
// ~2.4e3 (a tree's real error is ~1e-4): float sums cannot tell one missing element of a
// long array from rounding, which is why every kernel is also tested on int32 (exact,
// same code, same indexing).
inline klab::Tolerance float_sum_tolerance(std::int64_t n) {
  const double eps = std::ldexp(1.0, -24), sigma = 1.0 / std::sqrt(3.0);
  return klab::Tolerance{4.0 * eps * static_cast<double>(n) * sigma + 1e-6, 1e-6};
}

// The ops of this lesson take one dimension, n >= 0.
inline std::string validate_1d(const klab::Problem& p) {
  if (p.shape.size() != 1) return "expects 1 dim: n";
  if (p.shape[0] < 0) return "negative size";
  return "";
}

}  // namespace l03
