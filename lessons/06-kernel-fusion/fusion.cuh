// lessons/06-kernel-fusion/fusion.cuh — what the lesson-06 files share (namespace lesson06):
// the activations (device and fp64 host forms), the bias-and-activation epilogue that
// lesson 05's Hopper matmul runs on its accumulators, and the launchers of the linear layer.
//
// The linear layer is y = act(x · Wᵀ + b): x (M, K) row-major (M = tokens), W (N, K)
// row-major as a layer stores it, b (N), y (M, N); all bf16, accumulation and the epilogue
// in fp32, one rounding. Both operands are K-contiguous: lesson 05's "nt" layout.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "klab/error.hpp"
#include "klab/op.hpp"

namespace lesson06 {

using bf16 = __nv_bfloat16;

// The variants of linear_bias_act: "bias" adds the bias only.
enum class Act { bias, relu, gelu, silu };

inline Act act_of(const std::string& variant) {
  if (variant == "bias") return Act::bias;
  if (variant == "relu") return Act::relu;
  if (variant == "gelu") return Act::gelu;
  KLAB_REQUIRE(variant == "silu", "linear_bias_act: unknown variant '" + variant + "' (bias, relu, gelu, silu)");
  return Act::silu;
}

// GELU's tanh form: 0.5·v·(1 + tanh(√(2/π)·(v + 0.044715·v³))).
inline constexpr double kGeluC = 0.7978845608028654, kGeluA = 0.044715;

inline double act_ref(Act a, double v) {
  switch (a) {
    case Act::relu: return v > 0.0 ? v : 0.0;
    case Act::gelu: return 0.5 * v * (1.0 + std::tanh(kGeluC * (v + kGeluA * v * v * v)));
    case Act::silu: return v / (1.0 + std::exp(-v));
    default: return v;
  }
}

#ifdef __CUDACC__
// tanh on the SFU: one MUFU.TANH, relative error about 2^-11 (PTX's tanh.approx.f32).
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The activations in fp32. GELU and SiLU each take one SFU instruction: GELU is
// 0.5·v·(1 + tanh(u)) directly, SiLU v·sigmoid(v) = 0.5·v·(1 + tanh(v/2)). The SFU does 16
// of these a clock per SM against the tensor cores' 1024 multiply-adds: in the epilogue of a
// 128 x 256 tile (32768 outputs) every MUFU counts, and an exp2 plus a reciprocal (the
// sigmoid form) would be two. tanh's error moves the result by at most about 2^-12·|v|: an
// eighth of bf16's rounding where the result is about v, and far under the tolerance's
// absolute term (2^-7·σ, fusion_ops.cu) where it is about 0.
template <Act A>
__device__ __forceinline__ float activate(float v) {
  if constexpr (A == Act::relu) {
    return fmaxf(v, 0.f);
  } else if constexpr (A == Act::gelu) {
    const float u = v * fmaf(static_cast<float>(kGeluC * kGeluA), v * v, static_cast<float>(kGeluC));
    const float hv = 0.5f * v;
    return fmaf(hv, tanh_approx(u), hv);
  } else if constexpr (A == Act::silu) {
    const float hv = 0.5f * v;
    return fmaf(hv, tanh_approx(hv), hv);
  } else {
    return v;
  }
}

// Lesson 05's Hopper matmul calls apply() on each MMA thread's accumulators before it stores
// them (matmul_wgmma.cuh: r_acc[4j + 2h + e] is output (row + 8h, col + 8j + e)). The bias of
// a column is the same for the thread's two rows, and a thread's two columns col + 8j and
// col + 8j + 1 are adjacent with col + 8j even: one 4-byte load brings both biases (the
// harness's b is 256-byte aligned). The loads go out CH at a time, unconditionally where the
// whole tile lies inside N, before any of them is used: a load consumed at once, or one
// behind a branch, makes each thread wait out its latency 32 times a tile (ncu showed the
// first use of each bias, a PRMT, and the branches around the loads as the epilogue's top
// stalls). Columns past N read no bias: they are never stored.
template <Act A>
struct EpiBiasAct {
  const bf16* g_bias;
  int N;
  static constexpr int CH = 8;  // bias loads in flight at once
  template <int ACC>
  __device__ __forceinline__ void apply(float (&r_acc)[ACC], int, int col) const {
    static_assert((ACC / 4) % CH == 0, "whole chunks of column groups");
    const bool whole = col + 8 * (ACC / 4 - 1) + 1 < N;  // every column of this thread inside N
#pragma unroll
    for (int j0 = 0; j0 < ACC / 4; j0 += CH) {
      float2 r_b[CH];
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        const int n = col + 8 * (j0 + c);
        if (whole) {
          r_b[c] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(g_bias + n));
        } else {
          r_b[c].x = n < N ? __bfloat162float(g_bias[n]) : 0.f;
          r_b[c].y = n + 1 < N ? __bfloat162float(g_bias[n + 1]) : 0.f;
        }
      }
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        const int j = j0 + c;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          r_acc[4 * j + 2 * h] = activate<A>(r_acc[4 * j + 2 * h] + r_b[c].x);
          r_acc[4 * j + 2 * h + 1] = activate<A>(r_acc[4 * j + 2 * h + 1] + r_b[c].y);
        }
      }
    }
  }
};
#endif

// ---- launchers (linear.cu) ------------------------------------------------------------
// "" when lesson 05's Hopper matmul takes this linear_bias_act problem, else why not.
std::string supports_linear_wgmma(const klab::Problem& p);
// y = act(y + b) in place over an (M, N) bf16 matrix: the unfused second kernel, and the
// whole layer when K = 0.
void launch_bias_act(bf16* y, const bf16* b, std::int64_t M, int N, Act a, cudaStream_t s);

}  // namespace lesson06
