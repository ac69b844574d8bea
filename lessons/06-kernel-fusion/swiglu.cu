// Lesson 06 — SwiGLU (op linear_swiglu, swiglu_ops.cu): y = silu(x · W_gᵀ) ⊙ (x · W_uᵀ) with
// [W_g | W_u] interleaved in blocks of 8 rows, as one matmul of 2N columns. Both versions run
// lesson 05's best Hopper matmul (v19_tma_store's kernel) in the nt layout.
//
//   v1_matmul_then_swiglu  the matmul writes h = x · wᵀ, (M, 2N) bf16, to the workspace; a
//                          second kernel reads each gate block and its up block back and
//                          writes y. g and u go to memory and back: 2·M·2N·2 bytes (8192 x
//                          2048: 134 MB) that the fused version never moves.
//   v2_fused_epilogue      on the fp32 accumulators (EpiSwiGLU): each thread holds a gate
//                          column and its up column one n8 block apart, so it computes y
//                          in registers and the kernel stores the half-width tile by TMA.
//                          Neither g nor u is stored.
//
// Both take the shapes lesson 05's TMA versions take (K a multiple of 8), N in whole blocks of 8.
//
//   klab test 06 --op linear_swiglu
//   klab bench 06 --op linear_swiglu
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "fusion.cuh"
#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "linear_wgmma.cuh"

namespace lesson06 {
namespace {

using std::int64_t;

// ======================================================================================
// v1_matmul_then_swiglu: the second kernel
// ======================================================================================
// y[m, 8b + i] = silu(h[m, 16b + i]) · h[m, 16b + 8 + i]: one thread a block of 8 outputs,
// its gate and up values two adjacent 16-byte vectors of h, its outputs one. A grid-stride
// loop over the M·N / 8 blocks.
__global__ void __launch_bounds__(256)
linear_swiglu_v1_matmul_then_swiglu(const bf16* __restrict__ g_h, bf16* __restrict__ g_y, int64_t blocks) {
  using Vec = klab::Vec<bf16, 8>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < blocks; v += stride) {
    const Vec r_g = reinterpret_cast<const Vec*>(g_h)[2 * v];
    const Vec r_u = reinterpret_cast<const Vec*>(g_h)[2 * v + 1];
    Vec r_y;
#pragma unroll
    for (int k = 0; k < 8; ++k)
      r_y.v[k] = __float2bfloat16_rn(activate<Act::silu>(__bfloat162float(r_g.v[k])) * __bfloat162float(r_u.v[k]));
    reinterpret_cast<Vec*>(g_y)[v] = r_y;
  }
}

}  // namespace

// ======================================================================================
// v2_fused_epilogue: the epilogue
// ======================================================================================
// r_acc[4j + 2h + e] is the product at (row + 8h, col + 8j + e) (matmul_wgmma.cuh). With
// the 8-row interleave, n8 block j = 2b holds gate columns and j = 2b + 1 the matching up
// columns: output column n0 / 2 + 8b + (col - n0) + e. apply() writes y for (h, e) of block
// b into r_acc[4b + 2h + e] — the layout of a BN / 2-wide tile, which the kernel stores
// (kOutDiv = 2). In place, in increasing b: 4b + 3 < 8b' for every later b', so no gate or
// up value is overwritten before it is read.
struct EpiSwiGLU {
  static constexpr int kOutDiv = 2;
  template <int ACC>
  __device__ __forceinline__ void apply(float (&r_acc)[ACC], int, int) const {
    static_assert(ACC % 8 == 0, "pairs of n8 blocks");
#pragma unroll
    for (int b = 0; b < ACC / 8; ++b)
#pragma unroll
      for (int i = 0; i < 4; ++i) r_acc[4 * b + i] = activate<Act::silu>(r_acc[8 * b + i]) * r_acc[8 * b + 4 + i];
  }
};

namespace {

// ======================================================================================
// Launchers
// ======================================================================================
// The product h (M, 2N) = x · wᵀ into C (ldc: C's row pitch).
lesson05::GemmArgs product(const klab::Launch& l, void* C, int64_t ldc) {
  return lesson05::gemm_args(l.in.at(0).data, l.in.at(1).data, C, static_cast<int>(l.problem.shape[0]),
                             static_cast<int>(2 * l.problem.shape[1]), static_cast<int>(l.problem.shape[2]), "nt", ldc);
}

// M or N = 0: nothing. K = 0: g = u = 0, so y = silu(0) · 0 = 0. Returns true when that was all.
bool empty_product(const klab::Launch& l) {
  const int64_t M = l.problem.shape[0], N = l.problem.shape[1];
  if (M == 0 || N == 0) return true;
  if (l.problem.shape[2] > 0) return false;
  KLAB_CHECK_CUDA(cudaMemsetAsync(l.out[0].data, 0, static_cast<std::size_t>(M * N) * sizeof(bf16), l.stream));
  return true;
}

void run_v1_matmul_then_swiglu(const klab::Launch& l) {
  if (empty_product(l)) return;
  const int64_t M = l.problem.shape[0], N = l.problem.shape[1];
  launch_plain_nt(product(l, l.workspace, 2 * N), l.stream);   // linear.cu's instances
  const int64_t blocks = M * N / 8;
  linear_swiglu_v1_matmul_then_swiglu<<<klab::grid_stride_blocks(blocks, 256), 256, 0, l.stream>>>(
      static_cast<const bf16*>(l.workspace), l.out[0].as<bf16>(), blocks);
  KLAB_CHECK_LAUNCH();
}

void run_v2_fused_epilogue(const klab::Launch& l) {
  if (empty_product(l)) return;
  launch_nt_wgmma(product(l, l.out[0].data, l.problem.shape[1]), l.stream, EpiSwiGLU{});
}

// v1 rounds g and u to bf16 before the SiLU and the product: 2^-6 relative, rel-L2 2^-7
// (swiglu_ops.cu's header derives it).
klab::Tolerance tolerance_v1(const klab::Problem& p, int) {
  klab::Tolerance t = swiglu_tolerance(p.shape[2]);
  t.rtol = std::ldexp(1.0, -6);
  t.max_rel_l2 = std::ldexp(1.0, -7);
  return t;
}

// "" when N is whole blocks of 8 and lesson 05's Hopper matmul takes the (M, 2N, K) product
// in the nt layout.
std::string supports(const klab::Problem& p) {
  if (p.shape[1] % 8 != 0) return "N must be whole blocks of 8 (the interleave this epilogue reads)";
  klab::Problem mm = p;
  mm.shape = {p.shape[0], 2 * p.shape[1], p.shape[2]};
  mm.variant = "nt";
  return lesson05::supports_wgmma(mm);
}

KLAB_REGISTER(klab::register_impl({.op = "linear_swiglu", .name = "v1_matmul_then_swiglu",
                                   .summary = "lesson 05's v19 matmul writes g and u; a kernel reads them back for silu(g) * u",
                                   .kind = klab::ImplKind::cuda, .supports = supports,
                                   .workspace = [](const klab::Problem& p) {
                                     return static_cast<std::size_t>(p.shape[0] * 2 * p.shape[1]) * sizeof(bf16);
                                   },
                                   .run = run_v1_matmul_then_swiglu, .tolerance = tolerance_v1,
                                   .kernels = {"matmul_wgmma@true, true, __nv_bfloat16, lesson05::(anonymous namespace)::NoEpilogue",
                                               "linear_swiglu_v1_matmul_then_swiglu"}}));
KLAB_REGISTER(klab::register_impl({.op = "linear_swiglu", .name = "v2_fused_epilogue",
                                   .summary = "silu(g) * u on the fp32 accumulators, the half-width tile stored by TMA",
                                   .kind = klab::ImplKind::cuda, .supports = supports,
                                   .run = run_v2_fused_epilogue, .kernels = {"matmul_wgmma@EpiSwiGLU"}}));

}  // namespace
}  // namespace lesson06
