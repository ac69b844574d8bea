// Lesson 05 — split-K: matmul for outputs too small to fill the GPU.
//
//   v12_splitk   a 512x512 output is 16 tiles of 128x128: 16 blocks on 132 SMs, each
//                walking all of K alone. Split-K cuts K into S slices, runs the S·16
//                products side by side (blockIdx.z = slice) into fp32 partials, and a
//                second kernel adds the S partials of each element (in slice order, so
//                the result is deterministic) and rounds once to the output type.
//                f32 uses v7's kernel for the slices (matmul_v7_warptiling), bf16 uses
//                v11's (matmul_mma_sync); the sum is matmul_v12_splitk_reduce.
//   v17_splitk_wgmma  the same plan with the Hopper kernel for the slices
//                (matmul_wgmma, matmul_hopper.cu: warp-specialized, 128x128 tiles, slices
//                a multiple of 64 deep); bf16 on Hopper, the shapes TMA can describe.
//
// The price: S·M·N·4 bytes of workspace written and read back, and a second launch. It
// pays when M·N is small and K large; on a 4096^3 problem S is 1 and this is v7 / v11.
//
//   klab bench 05 --op matmul --impl v12_splitk,v8_autotuned,cublas --shape 512x512x32768
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "matmul.cuh"

namespace lesson05 {
namespace {

using std::int64_t;

struct Split {
  int splits = 1, k_chunk = 0;
};

// Enough slices for about two blocks per SM (one for v17, whose blocks fill an SM), each
// slice at least 256 deep (shorter ones spend more on the partials than they save), the
// slice length a multiple of the K tile (it keeps 16-byte alignment of the shifted
// operands too, and v17's TMA boxes never cross into the next slice).
// whole_wave: at most one wave of blocks (v17's blocks each fill an SM, so one block more
// than the SMs would double the time); otherwise at least blocks_per_sm per SM.
struct Tiling {
  int bm, bn, k_mult, blocks_per_sm;
  bool whole_wave;
};
constexpr Tiling kV12Tiling{128, 128, 32, 2, false}, kV17Tiling{128, 128, 64, 1, true};

Split choose_split(const klab::Problem& p, const Tiling& t) {
  const Shape s = shape_of(p);
  Split r;
  r.k_chunk = s.K;
  if (s.M == 0 || s.N == 0 || s.K == 0) return r;
  const int sms = klab::sm_count();
  const int64_t tiles = klab::ceil_div<int64_t>(s.M, t.bm) * klab::ceil_div<int64_t>(s.N, t.bn);
  const int64_t slots = int64_t{t.blocks_per_sm} * sms;
  int64_t want = t.whole_wave ? slots / tiles : klab::ceil_div<int64_t>(slots, tiles);
  want = std::min<int64_t>({want, 64, std::max<int64_t>(1, s.K / 256)});
  if (want <= 1) return r;
  r.k_chunk = static_cast<int>(klab::ceil_div<int64_t>(klab::ceil_div<int64_t>(s.K, want), t.k_mult) * t.k_mult);
  r.splits = static_cast<int>(klab::ceil_div<int64_t>(s.K, r.k_chunk));  // every slice non-empty
  if (r.splits <= 1) r.k_chunk = s.K, r.splits = 1;
  return r;
}

// C(i) = Σ_s P(s, i), s in order: fixed summation order, the same bits every run.
template <class T>
__global__ void matmul_v12_splitk_reduce(const float* __restrict__ g_P, T* __restrict__ g_C, int64_t mn, int splits) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < mn;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.f;
    for (int s = 0; s < splits; ++s) acc += g_P[s * mn + i];
    g_C[i] = klab::from_f32<T>(acc);
  }
}

// The split-K plan shared by v12 and v17: `slices(g, out_f32)` runs the (partial) products.
template <class Slices>
void run_splitk(const klab::Launch& l, const Tiling& t, Slices&& slices) {
  GemmArgs g = gemm_args(l);
  if (empty_output(g)) return;
  const Split sp = choose_split(l.problem, t);
  if (sp.splits == 1) {  // nothing to split: the plain kernel straight into C
    slices(g, false);
    return;
  }
  const int64_t mn = static_cast<int64_t>(g.M) * g.N;
  KLAB_REQUIRE(l.workspace_bytes >= static_cast<std::size_t>(sp.splits * mn) * sizeof(float),
               "split-K: workspace too small");
  GemmArgs part = g;
  part.C = l.workspace;       // (splits, M, N) fp32
  part.ldc = g.N;
  part.sC = mn;               // blockIdx.z = slice -> its own partial
  part.splits = sp.splits;
  part.k_chunk = sp.k_chunk;
  slices(part, true);
  const unsigned blocks = klab::blocks_for(mn, 256, 4096);
  if (l.problem.dtype == klab::DType::f32)
    matmul_v12_splitk_reduce<float><<<blocks, 256, 0, l.stream>>>(static_cast<const float*>(l.workspace),
                                                                  l.out[0].as<float>(), mn, sp.splits);
  else
    matmul_v12_splitk_reduce<__nv_bfloat16><<<blocks, 256, 0, l.stream>>>(
        static_cast<const float*>(l.workspace), l.out[0].as<__nv_bfloat16>(), mn, sp.splits);
  KLAB_CHECK_LAUNCH();
}

void run_v12_splitk(const klab::Launch& l) {
  run_splitk(l, kV12Tiling, [&](const GemmArgs& g, bool out_f32) {
    if (l.problem.dtype == klab::DType::f32) launch_warptile_f32(g, l.problem.variant, l.stream);
    else launch_mma_bf16(g, l.problem.variant, out_f32, l.stream);
  });
}

std::string supports_v12_splitk(const klab::Problem& p) {
  if (p.dtype == klab::DType::bf16) return klab::require_cc(80);
  return p.dtype == klab::DType::f32 ? "" : "f32 and bf16 only";
}

std::size_t workspace_for(const klab::Problem& p, const Tiling& t) {
  const Split sp = choose_split(p, t);
  if (sp.splits == 1) return 0;
  const Shape s = shape_of(p);
  return static_cast<std::size_t>(sp.splits) * s.M * s.N * sizeof(float);
}
std::size_t workspace_v12_splitk(const klab::Problem& p) { return workspace_for(p, kV12Tiling); }

KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v12_splitk",
                                   .summary = "K cut into slices run side by side, fp32 partials summed in order",
                                   .kind = klab::ImplKind::cuda, .supports = supports_v12_splitk,
                                   .workspace = workspace_v12_splitk, .run = run_v12_splitk,
                                   .kernels = {"matmul_mma_sync"}}));

}  // namespace

// Also a candidate of v20_autotuned (matmul_autotuned.cu).
void run_v17_splitk_wgmma(const klab::Launch& l) {
  run_splitk(l, kV17Tiling, [&](const GemmArgs& g, bool out_f32) {
    launch_wgmma_splitk_bf16(g, l.problem.variant, out_f32, l.stream);
  });
}
std::size_t workspace_v17_splitk_wgmma(const klab::Problem& p) { return workspace_for(p, kV17Tiling); }

namespace {

KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v17_splitk_wgmma",
                                   .summary = "split-K on the warp-specialized TMA + wgmma kernel, 128x128 tiles",
                                   .kind = klab::ImplKind::cuda, .supports = supports_wgmma,
                                   .workspace = workspace_v17_splitk_wgmma, .run = run_v17_splitk_wgmma,
                                   .kernels = {wgmma_splitk_kernel(), "matmul_v12_splitk_reduce"}}));

}  // namespace
}  // namespace lesson05
