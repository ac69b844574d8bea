// lessons/06-kernel-fusion/fusion.cuh — what the lesson-06 files share (namespace lesson06):
// the activations (device and fp64 host forms), the bias-and-activation epilogue that
// lesson 05's Hopper matmul runs on its accumulators, the launchers of the linear layer, and
// map_vec16, the 16-byte-vector grid-stride loop of the element-wise kernels (add_mul.cu,
// poly_act.cu, complex_mul.cu).
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

#include "klab/compare.hpp"
#include "klab/device/activation.cuh"
#include "klab/device/cp_async.cuh"
#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#ifdef __CUDACC__
#include "klab/kernels.cuh"
#endif
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

// GELU's tanh form, 0.5·v·(1 + tanh(√(2/π)·(v + 0.044715·v³))): its constants and fp64
// reference are the framework's (klab/device/activation.cuh, lesson 01's GELU).
inline double act_ref(Act a, double v) {
  switch (a) {
    case Act::relu: return v > 0.0 ? v : 0.0;
    case Act::gelu: return klab::gelu_tanh_ref(v);
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
    const float u = v * fmaf(static_cast<float>(klab::kGeluTanhC * klab::kGeluTanhA), v * v,
                             static_cast<float>(klab::kGeluTanhC));
    const float hv = 0.5f * v;
    return fmaf(hv, tanh_approx(u), hv);
  } else if constexpr (A == Act::silu) {
    const float hv = 0.5f * v;
    return fmaf(hv, tanh_approx(hv), hv);
  } else {
    return v;
  }
}

// Applies f to every element of n: 16-byte vectors over the whole vectors, one element at a
// time over the tail. The harness's tensors (and the workspace) are 256-byte aligned, so
// element 0 starts a vector. f(a, b, c) computes one element from up to three inputs, in
// fp32: the first IN of g_a, g_b, g_c are read (the others may be null; f gets 0 for them),
// and each result is rounded once to T as it is stored.
//   equivalent to: for (i = 0; i < n; ++i) g_z[i] = T(f(float(g_a[i]), float(g_b[i]), float(g_c[i])));
template <class T, int IN, class F>
__device__ __forceinline__ void map_vec16(const T* __restrict__ g_a, const T* __restrict__ g_b,
                                          const T* __restrict__ g_c, T* __restrict__ g_z, std::int64_t n, F f) {
  static_assert(IN >= 1 && IN <= 3, "one to three inputs");
  constexpr int V = klab::kVec16<T>;
  using Vec = klab::Vec<T, V>;
  const std::int64_t n_vec = n / V, stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::int64_t v = tid; v < n_vec; v += stride) {
    const Vec r_a = reinterpret_cast<const Vec*>(g_a)[v];
    Vec r_b{}, r_c{};
    if constexpr (IN >= 2) r_b = reinterpret_cast<const Vec*>(g_b)[v];
    if constexpr (IN == 3) r_c = reinterpret_cast<const Vec*>(g_c)[v];
    Vec r_z;
#pragma unroll
    for (int k = 0; k < V; ++k)
      r_z.v[k] = klab::from_f32<T>(f(klab::to_f32(r_a.v[k]), IN >= 2 ? klab::to_f32(r_b.v[k]) : 0.f,
                                     IN == 3 ? klab::to_f32(r_c.v[k]) : 0.f));
    reinterpret_cast<Vec*>(g_z)[v] = r_z;
  }
  for (std::int64_t i = n_vec * V + tid; i < n; i += stride)
    g_z[i] = klab::from_f32<T>(f(klab::to_f32(g_a[i]), IN >= 2 ? klab::to_f32(g_b[i]) : 0.f,
                                 IN == 3 ? klab::to_f32(g_c[i]) : 0.f));
}

// Lesson 05's Hopper matmul calls apply() on each MMA thread's accumulators before it stores
// them (matmul_wgmma.cuh: r_acc[4j + 2h + e] is output (row + 8h, col + 8j + e)). The tile's
// bias row is copied into shared memory by cp.async as the tile starts (load_tile: 32
// threads, 16 bytes each, zeros past N), so it lands while the main loop runs; apply()
// then reads each column pair's two biases with one 4-byte shared load (col + 8j is even).
// Read from global memory inside apply(), the biases cost their latency after the last MMA,
// with the tensor cores idle: ncu put the first use of each loaded bias and the branches
// around the loads at the top of the epilogue's stalls.
template <Act A>
struct EpiBiasAct {
  const bf16* g_bias;
  int N;
  static constexpr int kTileCols = 256;                  // the widest tile (lesson 05's BN)
  static constexpr int kSmemBytes = kTileCols * 2;       // its bias row, bf16
  // A chunk that reaches past N is written element by element with plain loads and shared
  // stores (zeros past N): cp.async's zero-fill would still name 16 bytes of b, past the end
  // of its allocation at the last chunk, which compute-sanitizer's memcheck reports.
  __device__ __forceinline__ void load_tile(unsigned char* s_epi, int n0, int t) const {
    if (t < kTileCols / 8) {
      const int n = n0 + 8 * t;                          // 8 bf16 = 16 bytes a thread
      bf16* s_bias = reinterpret_cast<bf16*>(s_epi) + 8 * t;
      if (n + 8 <= N) {
        klab::cp_async_16_full(klab::smem_u32(s_bias), g_bias + n);
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) s_bias[k] = n + k < N ? g_bias[n + k] : __float2bfloat16_rn(0.f);
      }
    }
  }
  template <int ACC>
  __device__ __forceinline__ void apply(float (&r_acc)[ACC], int, int col, const unsigned char* s_epi) const {
    static_assert(2 * ACC <= kTileCols, "the tile is wider than the staged bias row");
    const auto* s_bias = reinterpret_cast<const __nv_bfloat162*>(s_epi);
    const int c0 = (col % (2 * ACC)) / 2;                // this thread's first column pair in the tile
#pragma unroll
    for (int j = 0; j < ACC / 4; ++j) {
      const float2 b = __bfloat1622float2(s_bias[c0 + 4 * j]);  // columns col + 8j, col + 8j + 1
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        r_acc[4 * j + 2 * h] = activate<A>(r_acc[4 * j + 2 * h] + b.x);
        r_acc[4 * j + 2 * h + 1] = activate<A>(r_acc[4 * j + 2 * h + 1] + b.y);
      }
    }
  }
};
#endif

// The op's tolerance at depth K (fusion_ops.cu derives it).
klab::Tolerance linear_tolerance(std::int64_t K);
// What linear_bias_act and linear_dgelu_bgrad share as M x N x K products (fusion_ops.cu):
// flops 2·M·N·K, sampled checks past 3·10^9 multiply-adds, each size in [0, 2^30].
void set_product_shape_rules(klab::Op& op);
// linear_swiglu's tolerance at depth K (swiglu_ops.cu derives it).
klab::Tolerance swiglu_tolerance(std::int64_t K);
// linear_dgelu_bgrad's tolerance of output 0 (dz) or 1 (db) (linear_backward_ops.cu derives it).
klab::Tolerance dgelu_bgrad_tolerance(const klab::Problem& p, int output);
// The tolerances of the eager versions of poly_act and complex_mul, which round every
// intermediate to the tensors' dtype (pointwise_ops.cu derives them).
klab::Tolerance poly_act_v1_tolerance(const klab::Problem& p, int output);
klab::Tolerance complex_mul_v1_tolerance(const klab::Problem& p, int output);

// ---- launchers (linear.cu) ------------------------------------------------------------
// "" when lesson 05's Hopper matmul takes this linear_bias_act problem, else why not.
std::string supports_linear_wgmma(const klab::Problem& p);
// y = act(y + b) in place over an (M, N) bf16 matrix: the unfused second kernel, and the
// whole layer when K = 0.
void launch_bias_act(bf16* y, const bf16* b, std::int64_t M, int N, Act a, cudaStream_t s);

}  // namespace lesson06
