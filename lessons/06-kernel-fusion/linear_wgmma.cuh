// lessons/06-kernel-fusion/linear_wgmma.cuh — the linear layer on lesson 05's Hopper matmul
// (v19_tma_store's kernel: TMA, wgmma, a copy warpgroup, persistent clusters of two, the
// TMA-store epilogue) with an epilogue of this lesson run on its accumulators, in 128 x 256
// or 128 x 128 tiles, whichever fills the GPU's waves better.
// linear.cu (v1, v2), linear_backward.cu, swiglu.cu and the exercise include it; each
// compiles its own instances.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../05-matmul/matmul.cuh"
#include "../05-matmul/matmul_wgmma.cuh"
#include "fusion.cuh"
#include "klab/device.hpp"
#include "klab/op.hpp"

namespace lesson06 {

// y (M, N) = epi(x (M, K) · W (N, K)ᵀ): lesson 05's "nt" layout, one batch entry.
inline lesson05::GemmArgs linear_gemm_args(const klab::Launch& l) {
  const int M = static_cast<int>(l.problem.shape[0]), N = static_cast<int>(l.problem.shape[1]);
  return lesson05::gemm_args(l.in.at(0).data, l.in.at(1).data, l.out.at(0).data, M, N,
                             static_cast<int>(l.problem.shape[2]), "nt", N);
}

// Two tile widths of the same persistent kernel: lesson 05's v19 (128 x 256 tiles, 3 stages)
// and 128 x 128 tiles with 5 stages (the C staging area is half the size).
using CfgWide = lesson05::CfgV19;
using CfgNarrow = lesson05::WgCfg<128, 5, true, true, 2, 1>;

// The fraction of the last wave's clusters that have work when `units` work units (two
// tiles stacked in M, one per CTA of a cluster) are spread over `clusters` resident clusters.
inline double wave_efficiency(std::int64_t units, std::int64_t clusters) {
  const std::int64_t waves = (units + clusters - 1) / clusters;
  return waves == 0 ? 1.0 : static_cast<double>(units) / static_cast<double>(waves * clusters);
}

// Wave quantization: 8192 x 768 in 128 x 256 tiles is 96 units of two tiles on 66 clusters
// (132 SMs), two waves of which the second is half empty; 128 x 128 tiles make 192 units, three
// nearly full waves. The narrow tile is taken when it fills the waves clearly better (by a
// tenth); otherwise the wide one, which reads each byte of x and W fewer times.
inline bool narrow_tiles(std::int64_t M, std::int64_t N) {
  const std::int64_t clusters = std::max(1, klab::device_info().sms / 2), m_units = (M + 255) / 256;
  return wave_efficiency(m_units * ((N + 127) / 128), clusters) > wave_efficiency(m_units * ((N + 255) / 256), clusters) + 0.1;
}

// The nt matmul g with epilogue `epi`, in the tile width that fills the waves (K > 0).
template <class Epi>
void launch_nt_wgmma(const lesson05::GemmArgs& g, cudaStream_t s, Epi epi) {
  if (narrow_tiles(g.M, g.N)) lesson05::launch_wgmma<CfgNarrow, bf16, Epi, lesson05::Layouts::nt>(g, "nt", 1, s, epi);
  else lesson05::launch_wgmma<CfgWide, bf16, Epi, lesson05::Layouts::nt>(g, "nt", 1, s, epi);
}

// The nt matmul g with no epilogue (linear.cu compiles it, for v1 here and in swiglu.cu: one
// set of instances).
void launch_plain_nt(const lesson05::GemmArgs& g, cudaStream_t s);

// The matmul with epilogue `epi`. At K = 0 there is no product to run an epilogue on:
// y = 0 goes through the lesson's bias-and-activation kernel instead.
template <class Epi>
void launch_linear_wgmma(const klab::Launch& l, Epi epi) {
  const lesson05::GemmArgs g = linear_gemm_args(l);
  if (g.M == 0 || g.N == 0) return;
  if (g.K == 0) {
    KLAB_CHECK_CUDA(cudaMemsetAsync(g.C, 0, static_cast<std::size_t>(g.sC) * sizeof(bf16), l.stream));
    launch_bias_act(static_cast<bf16*>(g.C), l.in.at(2).as<const bf16>(), g.M, g.N, act_of(l.problem.variant), l.stream);
    return;
  }
  launch_nt_wgmma(g, l.stream, epi);
}

// dz (M, N) = epi(dy (M, K) · w (K, N)): linear_dgelu_bgrad's product, through the next
// layer's weight as that layer stores it: lesson 05's "nn" layout (w is N-contiguous, read
// by TMA in 64 x 64 boxes and fed to wgmma transposed). The caller handles M, N or K = 0.
template <class Epi>
void launch_backward_wgmma(const klab::Launch& l, Epi epi) {
  const int M = static_cast<int>(l.problem.shape[0]), N = static_cast<int>(l.problem.shape[1]);
  const lesson05::GemmArgs g = lesson05::gemm_args(l.in.at(0).data, l.in.at(1).data, l.out.at(0).data, M, N,
                                                   static_cast<int>(l.problem.shape[2]), "nn", N);
  if (narrow_tiles(g.M, g.N)) lesson05::launch_wgmma<CfgNarrow, bf16, Epi, lesson05::Layouts::nn>(g, "nn", 1, l.stream, epi);
  else lesson05::launch_wgmma<CfgWide, bf16, Epi, lesson05::Layouts::nn>(g, "nn", 1, l.stream, epi);
}

}  // namespace lesson06
