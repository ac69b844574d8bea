// lessons/09-attention/attention_bwd_mma.cu — attention backward on the tensor cores with
// mma.sync: the FlashAttention-2 structure, by recomputation (S and P from Q, K and L; the
// S x S matrix is never stored).
//
// Impls registered here (op attention_bwd):
//   v1_mma_atomic_dq      a block of 4 warps owns 64 keys of one (batch, K/V head), 16 a warp,
//                         K and V held in shared memory, and walks the query tiles of every
//                         head of its group (Q, dO by cp.async, two stages): Sᵀ = K·Qᵀ,
//                         P = 2^(Sᵀ log2(e)/sqrt(d) - L log2(e)), dV += P·dO, dPᵀ = V·dOᵀ,
//                         dS = P (dP - D), dK += dS·Q, all on the accumulator fragments (P and
//                         dS reused from registers as A operands); dQ += dSᵀ·K through shared
//                         memory, added to an fp32 buffer by atomics (many key blocks write
//                         the same dQ rows). dQ's buffer is a workspace the harness zero-fills
//                         before every launch (Impl::zero_workspace); a last kernel scales
//                         and rounds it. Not deterministic: fp32 atomics add in whatever order
//                         the blocks arrive.
//   v2_mma_deterministic  the same dK/dV kernel without the dQ part, and dQ by a second
//                         kernel that owns 64 query rows and walks the key tiles (the forward's
//                         shape): S, P, dP and dS recomputed there, dQ += dS·K in registers.
//                         Every sum in a fixed order: bit-identical results run after run, for
//                         7 products instead of 5 (S and dP are computed twice).
// Both: D = rowsum(dO ⊙ O) and L in base 2 first, by a small kernel (one warp a query row);
// causal key blocks skip the query tiles that see none of their keys. The lesson's second
// exercise (exercise_bwd.cu, klab check 09b) is v1 with dS, dV and dK left to the learner;
// the pieces the three kernels share are in attention_bwd.cuh.
//
// Why this shape: dK and dV are sums over queries, so a block that owns keys keeps them in
// registers for the whole walk and writes each once; only dQ, a sum over keys, crosses
// blocks. The Sᵀ accumulator (keys in rows) is laid out as an A fragment, so P and dS feed
// dV = Pᵀ·dO and dK = dSᵀ·Q without shared memory (mma.cuh); dQ = dS·K needs dS with queries
// in rows, the transpose, so it goes through shared memory once a tile.
//
//   klab test 09 --op attention_bwd --impl v1_mma_atomic_dq,v2_mma_deterministic
//   klab bench 09 --op attention_bwd --variant causal
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "attention.cuh"
#include "attention_bwd.cuh"
#include "klab/device/online_softmax.cuh"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

// The op (inputs, reference, tolerances, shapes): attention_bwd_ops.cu. The launch
// arguments, the tiles, the D/L kernel, the dK/dV kernel's pieces and the launchers' parts:
// attention_bwd.cuh.

namespace lesson09 {
namespace {

// ============================================================================================
// v1_mma_atomic_dq (kAtomicDq) and v2_mma_deterministic's dK/dV kernel
// ============================================================================================

// Grid: one block per (64 keys, batch x K/V head), 1D. The block walks tiles t of
// (head of its group, query tile), the heads outermost (DkvBlock).
template <class T, int D, bool kAtomicDq>
__global__ void __launch_bounds__(BwdTiles<D>::kThreads)
    attention_bwd_v1_mma_atomic_dq(const BwdArgs a) {
  using C = BwdTiles<D>;
  constexpr int kNS = C::kBM / 8;   // n8 blocks of Sᵀ (queries)
  constexpr int kND = D / 8;        // n8 blocks of dK, dV (head dim)
  constexpr int kKQ = C::kBM / 16;  // k16 steps over the tile's queries
  static_assert(kNS % 2 == 0 && kND % 2 == 0, "ldmatrix_x4 feeds two n8 blocks");
  extern __shared__ __align__(128) unsigned char s_raw[];
  const DkvBlock<T, D> blk(a, s_raw);
  // What the tile loop reads of blk, as locals (DkvBlock says why).
  const int lane = blk.lane, c = blk.c, k0 = blk.k0, diag = blk.diag;
  const float *s_l = blk.s_l, *s_dd = blk.s_dd;

  // Accumulators: dK and dV of the warp's 16 keys, rows g and g + 8 (mma.cuh's D layout).
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
    blk.begin_tile(t, bh, q0);   // tile t: head bh, queries q0..; Q_t, dO_t, L and D in shared memory
    const uint32_t s_qt = blk.s_q + (t & 1) * C::kQBytes, s_dot = blk.s_do + (t & 1) * C::kQBytes;

    // Sᵀ (16 keys x kBM queries a warp) = K_w · Q_tᵀ, and dPᵀ = V_w · dO_tᵀ: K_w's and V_w's
    // A fragments as the forward reads Q's, Q_t's and dO_t's B fragments as it reads K's.
    float r_s[kNS][4], r_dp[kNS][4];
    products<T, D>(blk.s_k, s_qt, blk.s_v, s_dot, blk.warp, lane, r_s, r_dp);

    // P = 2^(s log2(e)/sqrt(d) - L log2(e)) and dS = P (dP - D), element (key key_row + 8 (e >> 1),
    // query q0 + 8 n + 2 c + (e & 1)). Masked to 0: keys past Sk, and causal, keys past the
    // query's diagonal; only tiles that reach past either need the test.
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
        r_dp[n][e] = p * (r_dp[n][e] - s_dd[qc]);
      }

    // dV += P · dO_t and dK += dS · Q_t: P's and dS's k16 step kk is their n8 blocks 2 kk and
    // 2 kk + 1, packed (the A fragment); dO_t and Q_t stored (query, d) are the B operands
    // transposed: ldmatrix.trans, as the forward reads V.
#pragma unroll
    for (int kk = 0; kk < kKQ; ++kk) {
      const uint32_t r_p[4] = {klab::pack_pair<T>(r_s[2 * kk][0], r_s[2 * kk][1]),
                               klab::pack_pair<T>(r_s[2 * kk][2], r_s[2 * kk][3]),
                               klab::pack_pair<T>(r_s[2 * kk + 1][0], r_s[2 * kk + 1][1]),
                               klab::pack_pair<T>(r_s[2 * kk + 1][2], r_s[2 * kk + 1][3])};
      const uint32_t r_d[4] = {klab::pack_pair<T>(r_dp[2 * kk][0], r_dp[2 * kk][1]),
                               klab::pack_pair<T>(r_dp[2 * kk][2], r_dp[2 * kk][3]),
                               klab::pack_pair<T>(r_dp[2 * kk + 1][0], r_dp[2 * kk + 1][1]),
                               klab::pack_pair<T>(r_dp[2 * kk + 1][2], r_dp[2 * kk + 1][3])};
#pragma unroll
      for (int n = 0; n < kND; n += 2) {
        uint32_t r_b[4];
        const int row = 16 * kk + (lane / 8 % 2) * 8 + lane % 8;
        klab::ldmatrix_x4<true>(r_b, s_dot + swz<D>(row, n + lane / 16));
        klab::mma_m16n8k16<T>(r_dv[n], r_p, r_b[0], r_b[1]);
        klab::mma_m16n8k16<T>(r_dv[n + 1], r_p, r_b[2], r_b[3]);
        klab::ldmatrix_x4<true>(r_b, s_qt + swz<D>(row, n + lane / 16));
        klab::mma_m16n8k16<T>(r_dk[n], r_d, r_b[0], r_b[1]);
        klab::mma_m16n8k16<T>(r_dk[n + 1], r_d, r_b[2], r_b[3]);
      }
    }

    if constexpr (kAtomicDq) add_dq_atomic<T, D>(blk, bh, q0, r_dp);   // dQ += dS·K
    __syncthreads();   // every warp is done with this stage (and dS) before they are refilled
  }
  store_dkv<T, D>(blk, key_row, r_dk, r_dv);
}

// ============================================================================================
// v2_mma_deterministic's dQ kernel
// ============================================================================================

// Grid: one block per (64 query rows, batch x head), as the forward's v2_mma_sync: 16 rows a
// warp, K/V tiles of 64 keys by cp.async (two stages). Per tile: S = Q·Kᵀ, P from L,
// dP = dO·Vᵀ, dS = P (dP - D), dQ += dS·K (dS's fragments as A, K transposed as B).
template <class T, int D>
__global__ void __launch_bounds__(128) attention_bwd_v2_mma_deterministic_dq(const BwdArgs a) {
  constexpr int kBM = 64, kBN = 64, kThreads = 128;
  constexpr int kRowBytes = D * 2, kQBytes = kBM * kRowBytes, kKVBytes = kBN * kRowBytes;
  constexpr int kNS = kBN / 8, kND = D / 8, kKP = kBN / 16;
  extern __shared__ __align__(128) unsigned char s_raw[];
  const uint32_t s_q = klab::smem_u32(s_raw);
  const uint32_t s_do = s_q + kQBytes;
  const uint32_t s_k = s_do + kQBytes;          // K[stage] at s_k + stage * kKVBytes
  const uint32_t s_v = s_k + 2 * kKVBytes;      // V[stage] likewise

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, c = lane % 4;
  const int row_blocks = (a.Sq + kBM - 1) / kBM;
  const i64 bh = blockIdx.x / row_blocks;
  int rb = blockIdx.x % row_blocks;
  if (a.causal) rb = row_blocks - 1 - rb;   // the longest rows first
  const int q0 = rb * kBM;
  const i64 b = bh / a.Hq, h = bh % a.Hq, hk = h / (a.Hq / a.Hkv);
  const T* g_q = static_cast<const T*>(a.q) + bh * a.Sq * D;
  const T* g_do = static_cast<const T*>(a.dout) + bh * a.Sq * D;
  const T* g_k = static_cast<const T*>(a.k) + (b * a.Hkv + hk) * a.Sk * D;
  const T* g_v = static_cast<const T*>(a.v) + (b * a.Hkv + hk) * a.Sk * D;
  const i64 block_keys = visible_keys(min(q0 + kBM, a.Sq) - 1, a.Sq, a.Sk, a.causal);
  const int tiles = static_cast<int>((block_keys + kBN - 1) / kBN);

  const int row0 = q0 + warp * 16 + g;   // rows row0 and row0 + 8
  float l2[2], dd[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const bool in = row0 + rr * 8 < a.Sq;
    l2[rr] = in ? a.lse2[bh * a.Sq + row0 + rr * 8] : INFINITY;
    dd[rr] = in ? a.delta[bh * a.Sq + row0 + rr * 8] : 0.f;
  }
  float r_dq[kND][4];
#pragma unroll
  for (int n = 0; n < kND; ++n) r_dq[n][0] = r_dq[n][1] = r_dq[n][2] = r_dq[n][3] = 0.f;

  if (tiles > 0) {
    copy_tile_async<kBM, D, kThreads>(s_q, g_q, q0, a.Sq, tid);
    copy_tile_async<kBM, D, kThreads>(s_do, g_do, q0, a.Sq, tid);
    copy_tile_async<kBN, D, kThreads>(s_k, g_k, 0, a.Sk, tid);
    copy_tile_async<kBN, D, kThreads>(s_v, g_v, 0, a.Sk, tid);
    klab::cp_async_commit();
  }
  const int diag = a.Sk - a.Sq;
  for (int t = 0; t < tiles; ++t) {
    const int stage = t & 1;
    if (t + 1 < tiles) {
      const i64 kv1 = static_cast<i64>(t + 1) * kBN;
      copy_tile_async<kBN, D, kThreads>(s_k + (stage ^ 1) * kKVBytes, g_k, kv1, a.Sk, tid);
      copy_tile_async<kBN, D, kThreads>(s_v + (stage ^ 1) * kKVBytes, g_v, kv1, a.Sk, tid);
      klab::cp_async_commit();
      klab::cp_async_wait<1>();
    } else {
      klab::cp_async_wait<0>();
    }
    __syncthreads();
    const uint32_t s_kt = s_k + stage * kKVBytes, s_vt = s_v + stage * kKVBytes;
    float r_s[kNS][4], r_dp[kNS][4];
    products<T, D>(s_q, s_kt, s_do, s_vt, warp, lane, r_s, r_dp);   // S = Q·K_tᵀ, dP = dO·V_tᵀ
    const i64 kv0 = static_cast<i64>(t) * kBN;
    const bool masked = kv0 + kBN > a.Sk || (a.causal && kv0 + kBN - 1 > q0 + diag);
#pragma unroll
    for (int n = 0; n < kNS; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = klab::ex2_approx(r_s[n][e] * a.scale_log2 - l2[e >> 1]);
        if (masked) {
          const i64 key = kv0 + n * 8 + 2 * c + (e & 1);
          const int row = row0 + (e >> 1) * 8;
          if (key >= a.Sk || (a.causal && key > row + diag)) p = 0.f;
        }
        r_dp[n][e] = p * (r_dp[n][e] - dd[e >> 1]);
      }
    // dQ += dS · K_t: K_t stored (key, d) is the B operand transposed (ldmatrix.trans).
#pragma unroll
    for (int kk = 0; kk < kKP; ++kk) {
      const uint32_t r_d[4] = {klab::pack_pair<T>(r_dp[2 * kk][0], r_dp[2 * kk][1]),
                               klab::pack_pair<T>(r_dp[2 * kk][2], r_dp[2 * kk][3]),
                               klab::pack_pair<T>(r_dp[2 * kk + 1][0], r_dp[2 * kk + 1][1]),
                               klab::pack_pair<T>(r_dp[2 * kk + 1][2], r_dp[2 * kk + 1][3])};
#pragma unroll
      for (int n = 0; n < kND; n += 2) {
        uint32_t r_b[4];
        klab::ldmatrix_x4<true>(r_b, s_kt + swz<D>(16 * kk + (lane / 8 % 2) * 8 + lane % 8, n + lane / 16));
        klab::mma_m16n8k16<T>(r_dq[n], r_d, r_b[0], r_b[1]);
        klab::mma_m16n8k16<T>(r_dq[n + 1], r_d, r_b[2], r_b[3]);
      }
    }
    __syncthreads();
  }
  T* g_dq = static_cast<T*>(a.dq) + bh * a.Sq * D;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int row = row0 + rr * 8;
    if (row >= a.Sq) continue;
#pragma unroll
    for (int n = 0; n < kND; ++n)
      *reinterpret_cast<uint32_t*>(g_dq + static_cast<i64>(row) * D + n * 8 + 2 * c) =
          klab::pack_pair<T>(r_dq[n][2 * rr] * a.scale, r_dq[n][2 * rr + 1] * a.scale);
  }
}

// ============================================================================================
// Launchers
// ============================================================================================

void run_v1_mma_atomic_dq(const klab::Launch& l) {
  const BwdArgs a = bwd_args(l, true);
  auto go = [&]<class T, int D>() {
    launch_dkv<T, D>(attention_bwd_v1_mma_atomic_dq<T, D, true>, a, l.stream);
    launch_dq_convert<T, D>(a, l.stream);
  };
  dispatch_dtype_dim(l.problem, go);
  KLAB_CHECK_LAUNCH();
}

void run_v2_mma_deterministic(const klab::Launch& l) {
  const BwdArgs a = bwd_args(l, false);
  auto go = [&]<class T, int D>() {
    launch_dkv<T, D>(attention_bwd_v1_mma_atomic_dq<T, D, false>, a, l.stream);
    const i64 blocks = static_cast<i64>(a.B) * a.Hq * ((a.Sq + 63) / 64);
    if (blocks == 0) return;
    constexpr int kSmem = 2 * 64 * D * 2 + 4 * 64 * D * 2;   // Q, dO; K[2], V[2]
    auto kernel = attention_bwd_v2_mma_deterministic_dq<T, D>;
    klab::allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmem);
    kernel<<<static_cast<unsigned>(blocks), 128, kSmem, l.stream>>>(a);
  };
  dispatch_dtype_dim(l.problem, go);
  KLAB_CHECK_LAUNCH();
}

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "attention_bwd", .name = "v1_mma_atomic_dq",
                                   .summary = "FlashAttention-2 backward on mma.sync: a block owns 64 keys "
                                              "(dK, dV in registers) and walks the query tiles; dQ by fp32 "
                                              "atomics into a zeroed workspace",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_bwd,
                                   .workspace = [](const klab::Problem& p) {
                                     return workspace_floats(p, true) * sizeof(float);
                                   },
                                   .run = run_v1_mma_atomic_dq,
                                   .zero_workspace = true,
                                   .kernels = {"attention_bwd_dot_do_o"}}));
KLAB_REGISTER(klab::register_impl({.op = "attention_bwd", .name = "v2_mma_deterministic",
                                   .summary = "v1's dK/dV kernel without atomics, dQ by a second kernel that "
                                              "owns 64 query rows: bit-identical run to run, S and dP "
                                              "computed twice",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_bwd,
                                   .workspace = [](const klab::Problem& p) {
                                     return workspace_floats(p, false) * sizeof(float);
                                   },
                                   .run = run_v2_mma_deterministic,
                                   .deterministic = true,
                                   .kernels = {"attention_bwd_dot_do_o", "attention_bwd_v1_mma_atomic_dq@false>"}}));

}  // namespace
}  // namespace lesson09
