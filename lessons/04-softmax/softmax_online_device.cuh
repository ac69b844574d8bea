// lessons/04-softmax/softmax_online_device.cuh — the device code the online kernels share:
// the cluster helpers (v5_cluster, v6_exp2, v7_prefetch) and v6_exp2's per-element steps
// (gather, thread pair, scale, write), which v7_prefetch reuses on rows it stages in shared
// memory. Kernels and launchers: softmax_online.cu (v3..v6), softmax_prefetch.cu (v7).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "klab/device/online_softmax.cuh"
#include "klab/device/vec.cuh"
#include "softmax_common.cuh"

namespace lesson04 {

using klab::MD;


// Cluster helpers. They compile to nothing below sm_90, where the cluster kernels are never
// launched (v5_cluster's supports() asks for compute capability 9.0).
__device__ __forceinline__ int cluster_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return static_cast<int>(cooperative_groups::this_cluster().block_rank());
#else
  return 0;
#endif
}
__device__ __forceinline__ int cluster_blocks() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return static_cast<int>(cooperative_groups::this_cluster().num_blocks());
#else
  return 1;
#endif
}
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::this_cluster().sync();
#endif
}
// Reads `s_v` in the shared memory of block `rank` of this cluster (distributed shared memory).
__device__ __forceinline__ MD cluster_read(MD* s_v, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return *cooperative_groups::this_cluster().map_shared_rank(s_v, rank);
#else
  return *s_v;
#endif
}

// v3 spends most of its issue slots on arithmetic that a bandwidth-bound kernel should not
// need: an accurate expf (range reduction, ~8 instructions), a 64-bit `c + i < limit`
// compare and select per element, 64-bit column arithmetic. bf16 has twice the elements per
// byte, so it pays twice per byte. v6 keeps v3/v5's kernel structure and changes the math:
//   - exp in base 2: exp(x - m) = 2^(x * log2(e) - m * log2(e)). The thread's shift
//     s = m * log2(e) is computed once, then each element is one FFMA and one MUFU.EX2
//     (klab::ex2_approx). The rounding of s cancels: the same s is used for the element and for
//     the thread's pair, so y = 2^(x*log2e - s) * 2^(s - S) / D depends on s only through
//     exact arithmetic (s and S agree in their leading bits wherever the output is not ~0).
//   - the (m, d) pairs live in base 2 too (klab::md_merge<true>): m is already scaled.
//   - a block-uniform test "this block's slice is whole and unmasked" (every plain row of an
//     aligned shape) skips every per-element and per-vector compare; the masked path is
//     kept for causal rows and ragged slices, and tests whole vectors: only the one vector
//     the causal mask cuts compares element by element. Columns are 32-bit (cols < 2^31, and
//     a row's columns are never past 262,144 here).
//   - bf16 results are packed two at a time (one cvt.rn.bf16x2.f32 per pair).
// With the arithmetic gone the kernel streams at copy speed (the README has the numbers),
// and the block plan matters again: plan_online(..., fewest_blocks_first) keeps a
// 32,768-column row in one 1024-thread block instead of v5's 4-block cluster.
constexpr float kLog2e = 1.4426950408889634f;

// Thread t's NV vectors of the slice [c0, c1): vector k starts at column
// c0 + (t + k * blockDim.x) * VEC. get(c) returns the vector that starts at column c.
// FULL: the caller has checked that every vector lies in the slice and every column is kept.
// Otherwise kept = min(c1, limit): vectors that start before it are loaded (they lie in the
// slice: c1 is a multiple of VEC), the rest are -inf without a load.
// All loads are issued before any is used: with the load and its conversion inside one
// branch per vector, the compiler waited for each load in turn, and the masked (causal)
// path fell well short of the plain one (the README's v6_exp2 section has the numbers).
// after(k, c) runs right after vector k (column c) is fetched, for every k: v7_prefetch
// refills the shared-memory slot it was read from there.
template <class T, int VEC, int NV, bool FULL, class Get, class After>
__device__ __forceinline__ void v6_gather(Get get, int c0, int kept, float (&r_x)[NV][VEC], After after) {
  using V = lesson04::Vec<T, VEC>;
  const auto col = [&](int k) {
    return c0 + (static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x)) * VEC;
  };
  V r_v[NV];                                        // (NV,) raw vectors
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    if (FULL || col(k) < kept) r_v[k] = get(col(k));
    else r_v[k] = V{};
    after(k, col(k));
  }
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int c = col(k);
    if (FULL || c + VEC <= kept) {                  // the whole vector is kept
#pragma unroll
      for (int i = 0; i < VEC; ++i) r_x[k][i] = klab::to_f32(r_v[k].v[i]);
    } else {                                        // the vector the mask cuts, or none of it
#pragma unroll
      for (int i = 0; i < VEC; ++i) r_x[k][i] = c + i < kept ? klab::to_f32(r_v[k].v[i]) : -INFINITY;
    }
  }
}

template <class T, int VEC, int NV, bool FULL, class Get>
__device__ __forceinline__ void v6_gather(Get get, int c0, int kept, float (&r_x)[NV][VEC]) {
  v6_gather<T, VEC, NV, FULL>(get, c0, kept, r_x, [](int, int) {});
}

// The thread's base-2 pair, and r_x replaced by 2^(x * log2e - s) (each element's one exp).
template <int NV, int VEC>
__device__ __forceinline__ MD v6_thread_pair(float (&r_x)[NV][VEC]) {
  float r_m = -INFINITY;
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) r_m = fmaxf(r_m, r_x[k][i]);
  const float s = r_m * kLog2e;                     // -inf stays -inf
  const float shift = r_m == -INFINITY ? 0.f : s;   // all masked: 2^(-inf - 0) = 0, not NaN
  float r_d = 0.f;
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      r_x[k][i] = klab::ex2_approx(fmaf(r_x[k][i], kLog2e, -shift));
      r_d += r_x[k][i];
    }
  return {s, r_d};
}

// y = e * scale for one vector, rounded once; bf16 pairs through one packed convert.
template <class T, int VEC>
__device__ __forceinline__ void v6_store(T* g_dst, const float (&e)[VEC], float scale) {
  using V = lesson04::Vec<T, VEC>;
  V v;
  if constexpr (std::is_same_v<T, __nv_bfloat16> && VEC % 2 == 0) {
#pragma unroll
    for (int i = 0; i < VEC; i += 2) {
      const __nv_bfloat162 p = __floats2bfloat162_rn(e[i] * scale, e[i + 1] * scale);
      v.v[i] = p.x;
      v.v[i + 1] = p.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) v.v[i] = klab::from_f32<T>(e[i] * scale);
  }
  *reinterpret_cast<V*>(g_dst) = v;
}

// Writes the thread's vectors of [c0, c1) of the row g_yrow: FULL as in v6_gather.
template <class T, int VEC, int NV, bool FULL>
__device__ __forceinline__ void v6_write(T* g_yrow, int c0, int c1, const float (&r_e)[NV][VEC],
                                         float scale) {
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int c = c0 + (static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x)) * VEC;
    if (FULL || c < c1) v6_store<T, VEC>(g_yrow + c, r_e[k], scale);
  }
}

// The thread's output scale: 2^(s_thread - S) / D, or 0 when nothing was kept.
__device__ __forceinline__ float v6_scale(MD thread, MD row) {
  const float inv = row.d > 0.f ? 1.f / row.d : 0.f;
  return (thread.m == -INFINITY || row.m == -INFINITY) ? 0.f
                                                       : klab::ex2_approx(thread.m - row.m) * inv;
}

}  // namespace lesson04
