// Lesson 06 — the linear layer y = act(x · Wᵀ + b), with the bias and the activation after
// the matmul and inside it. Both versions run lesson 05's best Hopper matmul (v19_tma_store:
// TMA, wgmma, a copy warpgroup, persistent clusters of two, the TMA-store epilogue).
//
//   v1_matmul_then_bias_act  the matmul writes x · Wᵀ to y in bf16; a second kernel reads y
//                            back, adds the bias, applies the activation and writes y again.
//                            The second kernel moves 2·M·N·2 bytes (8192 x 3072: 100 MB) that
//                            the fused version never moves, and rounds the pre-activation
//                            to bf16 once more.
//   v2_fused_epilogue        the bias and the activation applied to the fp32 accumulators in
//                            registers, between the last MMA of a tile and its store
//                            (EpiBiasAct, fusion.cuh): y is written once, nothing is read back.
//
// Both take the shapes lesson 05's TMA versions take (K, the operands' row pitch, a multiple
// of 8); triton and cublaslt_epilogue take any.
//
//   klab test 06 --op linear_bias_act --impl v1_matmul_then_bias_act,v2_fused_epilogue
//   klab bench 06 --op linear_bias_act --variant gelu
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "fusion.cuh"
#include "klab/device.hpp"
#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "linear_wgmma.cuh"

namespace lesson06 {
namespace {

using std::int64_t;

// ======================================================================================
// v1_matmul_then_bias_act: the second kernel
// ======================================================================================
// y = act(y + b[column]) in place. Where N is a multiple of 8 a row holds whole 16-byte
// vectors, so each thread moves 8 bf16 at a time and their 8 biases are one vector too;
// otherwise one element at a time. A grid-stride loop over the flat index.
template <Act A, bool VEC>
__global__ void linear_bias_act_v1_matmul_then_bias_act(bf16* __restrict__ g_y, const bf16* __restrict__ g_b,
                                                        int64_t total, int N) {
  constexpr int V = VEC ? 8 : 1;
  using Vec = klab::Vec<bf16, V>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < total / V; v += stride) {
    Vec r_y = reinterpret_cast<const Vec*>(g_y)[v];
    const Vec r_b = *reinterpret_cast<const Vec*>(g_b + (v * V) % N);
#pragma unroll
    for (int k = 0; k < V; ++k)
      r_y.v[k] = __float2bfloat16_rn(activate<A>(__bfloat162float(r_y.v[k]) + __bfloat162float(r_b.v[k])));
    reinterpret_cast<Vec*>(g_y)[v] = r_y;
  }
}

// ======================================================================================
// Launchers
// ======================================================================================
// Calls f.template operator()<A>() with the activation as a template argument.
template <class F>
void dispatch_act(Act a, F&& f) {
  switch (a) {
    case Act::relu: f.template operator()<Act::relu>(); break;
    case Act::gelu: f.template operator()<Act::gelu>(); break;
    case Act::silu: f.template operator()<Act::silu>(); break;
    default: f.template operator()<Act::bias>(); break;
  }
}

void run_v1_matmul_then_bias_act(const klab::Launch& l) {
  const lesson05::GemmArgs g = linear_gemm_args(l);
  if (g.M == 0 || g.N == 0) return;
  launch_linear_wgmma(l, lesson05::NoEpilogue{});  // at K = 0 this alone writes act(b)
  if (g.K > 0) launch_bias_act(static_cast<bf16*>(g.C), l.in[2].as<const bf16>(), g.M, g.N, act_of(l.problem.variant), l.stream);
}

void run_v2_fused_epilogue(const klab::Launch& l) {
  const Act a = act_of(l.problem.variant);
  dispatch_act(a, [&]<Act A>() { launch_linear_wgmma(l, EpiBiasAct<A>{l.in[2].as<const bf16>(), static_cast<int>(l.problem.shape[1])}); });
}

}  // namespace

void launch_plain_nt(const lesson05::GemmArgs& g, cudaStream_t s) { launch_nt_wgmma(g, s, lesson05::NoEpilogue{}); }

void launch_bias_act(bf16* y, const bf16* b, int64_t M, int N, Act a, cudaStream_t s) {
  const int64_t total = M * N;
  if (total == 0) return;
  const bool vec = N % 8 == 0 && klab::aligned16(y) && klab::aligned16(b);
  dispatch_act(a, [&]<Act A>() {
    const unsigned blocks = klab::grid_stride_blocks(vec ? total / 8 : total, 256);
    if (vec) linear_bias_act_v1_matmul_then_bias_act<A, true><<<blocks, 256, 0, s>>>(y, b, total, N);
    else linear_bias_act_v1_matmul_then_bias_act<A, false><<<blocks, 256, 0, s>>>(y, b, total, N);
    KLAB_CHECK_LAUNCH();
  });
}

namespace {
// v1 rounds x·Wᵀ to bf16 before the bias and activation: the op's tolerance with rel-L2
// 2^-7 in place of 2^-8 (fusion_ops.cu's header derives the two roundings' worst case).
klab::Tolerance tolerance_v1(const klab::Problem& p, int) {
  klab::Tolerance t = linear_tolerance(p.shape[2]);
  t.max_rel_l2 = std::ldexp(1.0, -7);
  return t;
}
}  // namespace

std::string supports_linear_wgmma(const klab::Problem& p) {
  klab::Problem mm = p;  // lesson 05's matmul problem of the same shape, layout nt
  mm.variant = "nt";
  return lesson05::supports_wgmma(mm);
}

namespace {

KLAB_REGISTER(klab::register_impl({.op = "linear_bias_act", .name = "v1_matmul_then_bias_act",
                                   .summary = "lesson 05's v19 matmul, then a kernel that reads y back for bias + act",
                                   .kind = klab::ImplKind::cuda, .supports = supports_linear_wgmma,
                                   .run = run_v1_matmul_then_bias_act, .tolerance = tolerance_v1,
                                   .kernels = {"matmul_wgmma@true, true, __nv_bfloat16, lesson05::(anonymous namespace)::NoEpilogue"}}));
KLAB_REGISTER(klab::register_impl({.op = "linear_bias_act", .name = "v2_fused_epilogue",
                                   .summary = "bias + act on the fp32 accumulators before v19's TMA store",
                                   .kind = klab::ImplKind::cuda, .supports = supports_linear_wgmma,
                                   .run = run_v2_fused_epilogue, .kernels = {"matmul_wgmma@EpiBiasAct"}}));

}  // namespace
}  // namespace lesson06
