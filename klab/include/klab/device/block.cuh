// klab/device/block.cuh — block-level reductions built on the warp ones (lesson 03).
#pragma once

#include <cuda_runtime.h>

#include "klab/device/warp.cuh"

namespace klab {

// Sum over the block with one barrier; every thread returns the block's sum.
//   1. each warp sums its lanes by shuffles (warp_sum);
//   2. lane 0 of each warp parks its warp's sum in s_part (32 entries: up to 1024 threads);
//   3. after the barrier every warp sums the (at most 32) parked values again.
// The order of additions is fixed by the thread layout: the result is deterministic, and
// thread 0 gets the same bits as a tree whose last step runs in warp 0 alone.
// Preconditions: blockDim.x <= 1024, every thread of the block calls it. The caller must
// __syncthreads() before it writes s_part again (a second call with the same s_part).
template <class A>
__device__ __forceinline__ A block_sum(A v, A* s_part) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  if (lane == 0) s_part[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? s_part[lane] : A(0));
}

}  // namespace klab
