// Lesson 09 exercise b, completed — the attention backward's dK/dV accumulation.
//
// Impl registered here (op `attention_bwd`, bf16 and f16, head dim 64 and 128):
//   exercise       your attention backward, timed against v1_mma_atomic_dq
//
// The kernel below is v1_mma_atomic_dq's (attention_bwd_mma.cu; its pieces are in
// attention_bwd.cuh): a block of 4 warps owns 64 keys of one (batch, K/V head), 16 a warp,
// and walks the query tiles of every head of its group. Each warp keeps dK and dV of its 16
// keys in registers for the whole walk. For each tile of queries the tensor cores have
// already computed
//
//     Sᵀ  = K_w · Q_tᵀ  and  dPᵀ = V_w · dO_tᵀ      (16 keys x kBM queries a warp: r_s, r_dp)
//
// in mma's accumulator fragments, and the given loop turns Sᵀ into P in place (from L, with
// the mask). What it lacks is the heart of the FlashAttention-2 backward, the tile's share
// of the gradients:
//
//     dS  = P ∘ (dP − D)      element by element, D = rowsum(dO ∘ O) of the query
//     dV += P · dO_t          (16 keys x kBM) · (kBM x d)
//     dK += dS · Q_t          likewise; the 1/sqrt(d) is applied once, at the store
//
// the two products on the tensor cores with P and dS straight from registers. Fill in the
// TODOs, then run
//
//     klab check 09b
//
// which checks dQ, dK and dV against the fp64 reference on unseen seeds and every edge shape
// (one key, where dS is exactly 0; five keys; primes; causal with Sq < Sk and Sq > Sk;
// grouped-query heads; K and V past 2^31 elements), then times the kernel against
// v1_mma_atomic_dq. dQ comes from your dS (the given step after your code), so it is right
// only when dS is. Until every TODO is right the check fails: the stubs leave dK and dV at 0
// and dQ made of dP.
//
// Hints (klab hint 09b)
//   1. r_s[n][e] (P) and r_dp[n][e] (dP) are the same element (key, query q0 + qc): dS
//      needs only the query's D, s_dd[qc]. Write it over dP: the dQ step reads r_dp as dS.
//   2. Two neighbouring n8 blocks of an accumulator, packed to 16 bits (klab::pack_pair),
//      are the A fragment of a k16 step (mma.cuh): step kk is blocks 2 kk and 2 kk + 1.
//   3. dO_t and Q_t are stored (query, d): the B operand wants them transposed, which
//      ldmatrix_x4<true> does on the way (as the forward reads V). One x4 load feeds two n8
//      blocks of the head dim.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "attention.cuh"
#include "attention_bwd.cuh"
#include "klab/device/online_softmax.cuh"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace lesson09 {
namespace {

// Grid: one block per (64 keys, batch x K/V head). Given: the walk over the query tiles, Sᵀ
// and dPᵀ, P, dQ and the stores; yours: dS, and dV and dK accumulated on the tensor cores.
template <class T, int D>
__global__ void __launch_bounds__(BwdTiles<D>::kThreads) attention_bwd_exercise(const BwdArgs a) {
  using C = BwdTiles<D>;
  constexpr int kNS = C::kBM / 8;   // n8 blocks of Sᵀ (the tile's queries)
  constexpr int kND = D / 8;        // n8 blocks of dK, dV (the head dim)
  constexpr int kKQ = C::kBM / 16;  // k16 steps over the tile's queries
  static_assert(kNS % 2 == 0 && kND % 2 == 0, "ldmatrix_x4 feeds two n8 blocks");
  extern __shared__ __align__(128) unsigned char s_raw[];
  const DkvBlock<T, D> blk(a, s_raw);   // the block's keys, its query tiles, its shared memory
  // What the tile loop reads of blk, as locals (attention_bwd.cuh's DkvBlock says why).
  const int lane = blk.lane, c = blk.c, k0 = blk.k0, diag = blk.diag;
  const float *s_l = blk.s_l, *s_dd = blk.s_dd;   // L (base 2) and D of the tile's queries

  // dK and dV of the warp's 16 keys, (16, D): rows key_row and key_row + 8 (mma.cuh's D layout).
  float r_dk[kND][4], r_dv[kND][4];
#pragma unroll
  for (int n = 0; n < kND; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) r_dk[n][e] = r_dv[n][e] = 0.f;

  blk.load_first();
  const int key_row = k0 + blk.warp * 16 + blk.g;   // this thread's keys: key_row and key_row + 8
  for (int t = 0; t < blk.tiles; ++t) {
    i64 bh;
    int q0;
    blk.begin_tile(t, bh, q0);   // tile t: head bh, queries q0..; its Q_t and dO_t in shared memory
    const uint32_t s_qt = blk.s_q + (t & 1) * C::kQBytes, s_dot = blk.s_do + (t & 1) * C::kQBytes;

    float r_s[kNS][4], r_dp[kNS][4];   // Sᵀ and dPᵀ, (16 keys, kBM queries) a warp
    products<T, D>(blk.s_k, s_qt, blk.s_v, s_dot, blk.warp, lane, r_s, r_dp);

    // Element (n, e) of both is key key_row + 8 (e >> 1), query q0 + qc. P = 2^(s log2(e)/sqrt(d)
    // - L log2(e)), masked to 0: keys past Sk, and causal, keys past the query's diagonal.
    const bool masked = k0 + C::kBN > a.Sk || (a.causal && k0 + C::kBN - 1 > q0 + diag);
#pragma unroll
    for (int n = 0; n < kNS; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qc = n * 8 + 2 * c + (e & 1);
        float p = klab::ex2_approx(r_s[n][e] * a.scale_log2 - s_l[qc]);
        if (masked) {
          const int key = key_row + (e >> 1) * 8, query = q0 + qc;
          if (key >= a.Sk || (a.causal && key > query + diag)) p = 0.f;
        }
        r_s[n][e] = p;
        // TODO 1 (hint 1): dS = P (dP - D), written over dP in r_dp[n][e].
        // mistake no_delta (check): r_dp[n][e] = p * r_dp[n][e];
        r_dp[n][e] = p * (r_dp[n][e] - s_dd[qc]);
        // end of TODO 1
      }

    // dV += P · dO_t and dK += dS · Q_t, k16 step kk over the tile's queries at a time.
#pragma unroll
    for (int kk = 0; kk < kKQ; ++kk) {
      // TODO 2 (hint 2): r_p and r_d, the A fragments of P and dS for step kk (uint32_t[4] each).
      const uint32_t r_p[4] = {klab::pack_pair<T>(r_s[2 * kk][0], r_s[2 * kk][1]),
                               klab::pack_pair<T>(r_s[2 * kk][2], r_s[2 * kk][3]),
                               klab::pack_pair<T>(r_s[2 * kk + 1][0], r_s[2 * kk + 1][1]),
                               klab::pack_pair<T>(r_s[2 * kk + 1][2], r_s[2 * kk + 1][3])};
      const uint32_t r_d[4] = {klab::pack_pair<T>(r_dp[2 * kk][0], r_dp[2 * kk][1]),
                               klab::pack_pair<T>(r_dp[2 * kk][2], r_dp[2 * kk][3]),
                               klab::pack_pair<T>(r_dp[2 * kk + 1][0], r_dp[2 * kk + 1][1]),
                               klab::pack_pair<T>(r_dp[2 * kk + 1][2], r_dp[2 * kk + 1][3])};
      // end of TODO 2 (compile:r_p)
      // TODO 3 (hint 3): r_dv += P · dO_t and r_dk += dS · Q_t (Q_t at s_qt, dO_t at s_dot, swz<D>).
#pragma unroll
      for (int n = 0; n < kND; n += 2) {
        uint32_t r_b[4];
        const int row = 16 * kk + (lane / 8 % 2) * 8 + lane % 8;
        klab::ldmatrix_x4<true>(r_b, s_dot + swz<D>(row, n + lane / 16));
        klab::mma_m16n8k16<T>(r_dv[n], r_p, r_b[0], r_b[1]);
        klab::mma_m16n8k16<T>(r_dv[n + 1], r_p, r_b[2], r_b[3]);
        klab::ldmatrix_x4<true>(r_b, s_qt + swz<D>(row, n + lane / 16));
        // mistake p_for_ds (check): klab::mma_m16n8k16<T>(r_dk[n], r_p, r_b[0], r_b[1]);
        klab::mma_m16n8k16<T>(r_dk[n], r_d, r_b[0], r_b[1]);
        // mistake p_for_ds (check): klab::mma_m16n8k16<T>(r_dk[n + 1], r_p, r_b[2], r_b[3]);
        klab::mma_m16n8k16<T>(r_dk[n + 1], r_d, r_b[2], r_b[3]);
      }
      // end of TODO 3
    }

    add_dq_atomic<T, D>(blk, bh, q0, r_dp);   // dQ += dS · K by fp32 atomics: r_dp read as dS
    __syncthreads();   // every warp is done with this stage (and dS) before they are refilled
  }
  store_dkv<T, D>(blk, key_row, r_dk, r_dv);   // dK / sqrt(d) and dV, rounded once
}

// ---- given: the launcher and the registration ----------------------------------------------

// D and L, the kernel above, then dQ from its fp32 accumulator: v1_mma_atomic_dq's launches.
void run_exercise(const klab::Launch& l) {
  const BwdArgs a = bwd_args(l, true);
  auto go = [&]<class T, int D>() {
    launch_dkv<T, D>(attention_bwd_exercise<T, D>, a, l.stream);
    launch_dq_convert<T, D>(a, l.stream);
  };
  dispatch_dtype_dim(l.problem, go);
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "attention_bwd", .name = "exercise",
                                   .summary = "your attention backward's dK/dV accumulation "
                                              "(lessons/09-attention/exercise_bwd.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .supports = supports_bwd,
                                   .workspace = [](const klab::Problem& p) {
                                     return workspace_floats(p, true) * sizeof(float);
                                   },
                                   .run = run_exercise,
                                   .zero_workspace = true,
                                   .kernels = {"attention_bwd_dot_do_o", "attention_bwd_v1_mma_atomic_dq_convert"}}));

}  // namespace
}  // namespace lesson09
