// lessons/06-kernel-fusion/linear_wgmma.cuh — the linear layer on lesson 05's Hopper matmul
// (v19_tma_store's configuration: TMA, wgmma, a copy warpgroup, persistent clusters of two,
// the TMA-store epilogue) with an epilogue of this lesson run on its accumulators.
// linear.cu (v1, v2) and the exercise include it; each compiles its own instances.
#pragma once

#include <cstdint>

#include "../05-matmul/matmul.cuh"
#include "../05-matmul/matmul_wgmma.cuh"
#include "fusion.cuh"
#include "klab/op.hpp"

namespace lesson06 {

// y (M, N) = epi(x (M, K) · W (N, K)ᵀ): lesson 05's "nt" layout, one batch entry.
inline lesson05::GemmArgs linear_gemm_args(const klab::Launch& l) {
  const std::int64_t M = l.problem.shape[0], N = l.problem.shape[1], K = l.problem.shape[2];
  lesson05::GemmArgs g;
  g.A = l.in.at(0).data;
  g.B = l.in.at(1).data;
  g.C = l.out.at(0).data;
  g.M = static_cast<int>(M); g.N = static_cast<int>(N); g.K = static_cast<int>(K);
  g.lda = K; g.ldb = K; g.ldc = N;
  g.sA = M * K; g.sB = N * K; g.sC = M * N;
  g.splits = 1;
  g.k_chunk = g.K;  // one K slice: the whole of K
  return g;
}

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
  lesson05::launch_wgmma<lesson05::CfgV19, bf16, Epi>(g, "nt", 1, l.stream, epi);
}

}  // namespace lesson06
