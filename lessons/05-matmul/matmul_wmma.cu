// Lesson 05 — matmul on the tensor cores through WMMA: bf16 inputs, fp32 accumulation,
// bf16 output. The PTX underneath (ldmatrix, mma.sync, cp.async) is matmul_mma.cu.
//
//   v9_wmma   the portable C++ API: a warp loads 16x16 fragments from shared memory
//             (wmma::load_matrix_sync) and multiplies them (wmma::mma_sync); 128x128x32
//             block tiles, 8 warps of 64x32, one shared-memory stage loaded synchronously
//
// Any M, N, K and all three layouts: tiles are zero-filled past M, N and K, stores are
// guarded. When a row length is not a multiple of 8 elements the same kernel is
// instantiated with element loads (VEC = false).
//
//   klab test 05 --op matmul --dtype bf16 --impl v9_wmma
//   klab bench 05 --op matmul --dtype bf16 --variant nt --shape 4096x4096x4096
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <string>

#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "matmul.cuh"

namespace lesson05 {
namespace {

using bf16 = __nv_bfloat16;
using std::int64_t;

// ======================================================================================
// v9_wmma — 128x128x32 block tile, 8 warps as 2 (M) x 4 (N), each a 64x32 warp tile of
// 4x2 fragments of 16x16. Shared tiles keep the global layout (+8 elements of padding per
// row; WMMA's col_major fragments read M/N-contiguous tiles as they are).
// ======================================================================================
namespace wmma = nvcuda::wmma;

template <bool AK, bool BK, bool VEC>
__global__ void __launch_bounds__(256) matmul_v9_wmma(GemmArgs g, bool c_pair) {
#ifndef KLAB_TC_UNSUPPORTED
  constexpr int BM = 128, BN = 128, BKT = 32, NT = 256, PAD = 8;
  constexpr int A_ROWS = AK ? BM : BKT, A_COLS = AK ? BKT : BM;  // tile in A's global layout
  constexpr int B_ROWS = BK ? BN : BKT, B_COLS = BK ? BKT : BN;
  constexpr int LDA = A_COLS + PAD, LDB = B_COLS + PAD;          // wmma ldm, elements
  static_assert(NT == 8 * 32 && BM == 2 * 64 && BN == 4 * 32, "8 warps as 2 (M) x 4 (N) warp tiles of 64x32");
  static_assert(BKT % 16 == 0 && PAD % 8 == 0, "whole k16 steps; padded rows stay 16-byte aligned");
  static_assert((A_ROWS * (A_COLS / 8)) % NT == 0 && (B_ROWS * (B_COLS / 8)) % NT == 0,
                "every thread copies the same number of 16-byte chunks");
  __shared__ __align__(128) bf16 s_A[A_ROWS * LDA];
  __shared__ __align__(128) bf16 s_B[B_ROWS * LDB];
  __shared__ __align__(128) float s_C[8][16 * 16];               // per-warp epilogue staging

  const auto z = z_slice<AK, BK, bf16, bf16>(g);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int wm0 = (warp / 4) * 64, wn0 = (warp % 4) * 32;

  using ALayout = std::conditional_t<AK, wmma::row_major, wmma::col_major>;
  using BLayout = std::conditional_t<BK, wmma::col_major, wmma::row_major>;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> r_acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(r_acc[i][j], 0.f);

  for (int k0 = 0; k0 < z.k_len; k0 += BKT) {
    // Padded rows (LDA = A_COLS + 8) through the generic loader: a pitch of LDA elements.
#pragma unroll
    for (int i = 0; i < A_ROWS * (A_COLS / 8) / NT; ++i) {
      const int c = tid + i * NT, r = c / (A_COLS / 8), ch = c % (A_COLS / 8);
      const int gr = (AK ? m0 : k0) + r, gc = (AK ? k0 : m0) + ch * 8;
      const int r_lim = AK ? g.M : z.k_len, c_lim = AK ? z.k_len : g.M;
      const bf16* g_src = z.A + static_cast<int64_t>(gr < r_lim ? gr : 0) * g.lda + gc;
      __align__(16) bf16 r_v[8];
      if (VEC && gr < r_lim && gc + 7 < c_lim) {
        *reinterpret_cast<uint4*>(r_v) = __ldg(reinterpret_cast<const uint4*>(g_src));
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) r_v[j] = (gr < r_lim && gc + j < c_lim) ? g_src[j] : __float2bfloat16_rn(0.f);
      }
      *reinterpret_cast<uint4*>(&s_A[r * LDA + ch * 8]) = *reinterpret_cast<const uint4*>(r_v);
    }
#pragma unroll
    for (int i = 0; i < B_ROWS * (B_COLS / 8) / NT; ++i) {
      const int c = tid + i * NT, r = c / (B_COLS / 8), ch = c % (B_COLS / 8);
      const int gr = (BK ? n0 : k0) + r, gc = (BK ? k0 : n0) + ch * 8;
      const int r_lim = BK ? g.N : z.k_len, c_lim = BK ? z.k_len : g.N;
      const bf16* g_src = z.B + static_cast<int64_t>(gr < r_lim ? gr : 0) * g.ldb + gc;
      __align__(16) bf16 r_v[8];
      if (VEC && gr < r_lim && gc + 7 < c_lim) {
        *reinterpret_cast<uint4*>(r_v) = __ldg(reinterpret_cast<const uint4*>(g_src));
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) r_v[j] = (gr < r_lim && gc + j < c_lim) ? g_src[j] : __float2bfloat16_rn(0.f);
      }
      *reinterpret_cast<uint4*>(&s_B[r * LDB + ch * 8]) = *reinterpret_cast<const uint4*>(r_v);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BKT; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, ALayout> r_fa[4];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, BLayout> r_fb[2];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int m = wm0 + i * 16;  // (m, k) at row m, column k (row_major) or row k, column m
        wmma::load_matrix_sync(r_fa[i], AK ? &s_A[m * LDA + kk] : &s_A[kk * LDA + m], LDA);
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int n = wn0 + j * 16;
        wmma::load_matrix_sync(r_fb[j], BK ? &s_B[n * LDB + kk] : &s_B[kk * LDB + n], LDB);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(r_acc[i][j], r_fa[i], r_fb[j], r_acc[i][j]);
    }
    __syncthreads();
  }

  // Fragments have no documented element order: stage each through shared memory, then
  // convert and store with guards.
  float* s_stage = s_C[warp];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(s_stage, r_acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
#pragma unroll
      for (int e = lane * 2; e < 256; e += 64) {
        const int r = e / 16, c = e % 16;
        const int m = m0 + wm0 + i * 16 + r, n = n0 + wn0 + j * 16 + c;
        if (m < g.M) store_pair<bf16>(z.C, static_cast<int64_t>(m) * g.ldc, n, g.N, s_stage[e], s_stage[e + 1], c_pair);
      }
      __syncwarp();
    }
#endif
}

// ======================================================================================
// Launcher and registration
// ======================================================================================
void run_v9_wmma(const klab::Launch& l) {
  GemmArgs g = gemm_args(l);
  if (empty_output(g)) return;
  const dim3 grid = tile_grid(g, 128, 128, shape_of(l.problem).batch);
  const bool vec = operands_aligned(g, 2, 16), cp = pair_ok(g, 2);
  dispatch_layout(l.problem.variant, [&]<bool AK, bool BK>() {
    if (vec) matmul_v9_wmma<AK, BK, true><<<grid, 256, 0, l.stream>>>(g, cp);
    else matmul_v9_wmma<AK, BK, false><<<grid, 256, 0, l.stream>>>(g, cp);
  });
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v9_wmma",
                                   .summary = "tensor cores through WMMA 16x16x16 fragments",
                                   .kind = klab::ImplKind::cuda, .supports = bf16_tc, .run = run_v9_wmma}));

}  // namespace
}  // namespace lesson05
