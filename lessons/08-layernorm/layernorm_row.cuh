// lessons/08-layernorm/layernorm_row.cuh — the row held in registers (layernorm.cu's
// v2_block_registers), for every kernel that normalizes such a row: layernorm's v2, rmsnorm's
// v1, and residual_layernorm.cu's fused block, which fills the registers with x + dropout(h)
// instead of a load of x. One block a row; thread t holds the row's vectors t, t + blockDim,
// ... (NV of them, VEC elements each) as fp32; vectors past the row hold 0.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "klab/device/activation.cuh"
#include "klab/device/block.cuh"
#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "layernorm.cuh"
#include "row_plans.hpp"

namespace lesson08 {

// The first column of the thread's k-th vector.
__device__ __forceinline__ int row_col(int k, int vec) {
  return (static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x)) * vec;
}

// From the row in r_x (NV, VEC) and s, the thread's sum of its elements: mean (not for
// RMS), the variance from a second pass over the same registers, rstd, and y written.
// Block `row` of the grid; row `row` of g_y; g_mean and g_rstd at [row] (RMS: rmsnorm, no
// mean, mean(x^2) in place of the variance, no beta; g_mean and g_beta unused). GELU: y
// passes through GELU (klab/device/activation.cuh) before its store (op layernorm_gelu).
// Y = false: the statistics only, no y (g_gamma, g_beta and g_y unused; op layernorm_linear,
// whose matmul applies them).
template <class T, int VEC, int NV, bool RMS, bool GELU = false, bool Y = true>
__device__ __forceinline__ void normalize_row_registers(const float (&r_x)[NV][VEC], float s,
                                                        const T* __restrict__ g_gamma, const T* __restrict__ g_beta,
                                                        T* __restrict__ g_y, float* __restrict__ g_mean,
                                                        float* __restrict__ g_rstd, int cols) {
  using V = klab::Vec<T, VEC>;
  __shared__ float s_part[32];                      // block_sum's scratch
  const std::int64_t row = blockIdx.x;
  const float mean = RMS ? 0.f : klab::block_sum(s, s_part) / static_cast<float>(cols);
  float q = 0.f;
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float d = row_col(k, VEC) < cols ? r_x[k][i] - mean : 0.f;
      q += d * d;
    }
  if constexpr (!RMS) __syncthreads();              // every warp has read s_part (block_sum's rule)
  const float rstd = rsqrtf(klab::block_sum(q, s_part) / static_cast<float>(cols) + kEps);
  if (threadIdx.x == 0) {
    if constexpr (!RMS) g_mean[row] = mean;
    g_rstd[row] = rstd;
  }
  if constexpr (!Y) return;
  T* y = g_y + row * cols;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int c = row_col(k, VEC);
    if (c >= cols) continue;
    const V g = *reinterpret_cast<const V*>(g_gamma + c);
    V b{};
    if constexpr (!RMS) b = *reinterpret_cast<const V*>(g_beta + c);
    V out;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float v = (r_x[k][i] - mean) * rstd * klab::to_f32(g.v[i]) + (RMS ? 0.f : klab::to_f32(b.v[i]));
      out.v[i] = klab::from_f32<T>(GELU ? klab::gelu_tanh(v) : v);
    }
    *reinterpret_cast<V*>(y + c) = out;
  }
}

// The body of layernorm's v2, rmsnorm's v1 and layernorm_gelu's v2: the row loaded into registers (layernorm_row.cuh's
// layout, 16-byte vectors where VEC > 1), then normalized there.
template <class T, int VEC, int NV, bool RMS, bool GELU = false, bool Y = true>
__device__ __forceinline__ void norm_row_in_registers(const T* __restrict__ g_x, const T* __restrict__ g_gamma,
                                                      const T* __restrict__ g_beta, T* __restrict__ g_y,
                                                      float* __restrict__ g_mean, float* __restrict__ g_rstd,
                                                      int cols) {
  static_assert(NV * VEC <= 32, "at most 32 elements a thread (32 registers of data)");
  using V = klab::Vec<T, VEC>;
  const T* x = g_x + static_cast<std::int64_t>(blockIdx.x) * cols;
  float r_x[NV][VEC];                               // (NV, VEC) per thread
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int c = row_col(k, VEC);
    V v{};
    if (c < cols) v = *reinterpret_cast<const V*>(x + c);   // cols is a multiple of VEC
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      r_x[k][i] = c < cols ? klab::to_f32(v.v[i]) : 0.f;
      s += r_x[k][i];
    }
  }
  normalize_row_registers<T, VEC, NV, RMS, GELU, Y>(r_x, s, g_gamma, g_beta, g_y, g_mean, g_rstd, cols);
}

// Calls go.template operator()<NV>() with the plan's NV as a constant (NV * VEC <= 32).
template <int VEC, class Go>
void dispatch_row_nv(int nv, Go&& go) {
  KLAB_REQUIRE(nv > 0, "row too long for one block's registers (supports() should have said so)");
  switch (nv) {
    case 1: go.template operator()<1>(); break;
    case 2: go.template operator()<2>(); break;
    case 4: go.template operator()<4>(); break;
    case 8:
      if constexpr (VEC * 8 <= 32) go.template operator()<8>();
      break;
    case 16:
      if constexpr (VEC * 16 <= 32) go.template operator()<16>();
      break;
    default:
      if constexpr (VEC == 1) go.template operator()<32>();
  }
}

}  // namespace lesson08
