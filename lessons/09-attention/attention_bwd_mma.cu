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
// causal key blocks skip the query tiles that see none of their keys.
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

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "attention.cuh"
#include "klab/device.hpp"
#include "klab/device/cp_async.cuh"
#include "klab/device/mma.cuh"
#include "klab/device/online_softmax.cuh"
#include "klab/device/wgmma.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

// The op (inputs, reference, tolerances, shapes): attention_bwd_ops.cu.

namespace lesson09 {
namespace {

using std::uint32_t;

// The launch arguments: the op's tensors, and the workspace's fp32 arrays (D, L in base 2,
// and v1's dQ accumulator).
struct BwdArgs {
  const void *q, *k, *v, *o, *dout;
  const float* lse;
  void *dq, *dk, *dv;
  float* dq_acc;   // (B Hq Sq, d), zeroed by the harness; v1 only
  float* delta;    // (B Hq Sq): D = dO · O
  float* lse2;     // (B Hq Sq): L log2(e); +inf for a row that sees no key (its P is 0)
  int B, Hq, Hkv, Sq, Sk, d;
  bool causal;
  float scale;       // 1 / sqrt(d)
  float scale_log2;  // log2(e) / sqrt(d)
};

// The dK/dV kernel's tiles for head dim D: 64 keys a block (4 warps x 16), query tiles of
// kBM rows: 64 at D = 64, 32 at D = 128, where the dK and dV accumulators (2 x 64 floats a
// thread) leave no room for a 64-wide Sᵀ and dPᵀ (2 x 32 more) under 255 registers.
template <int D>
struct BwdTiles {
  static constexpr int kWarps = 4, kThreads = kWarps * 32;
  static constexpr int kBN = 16 * kWarps;        // keys a block
  static constexpr int kBM = D == 128 ? 32 : 64; // queries a tile
  static constexpr int kRowBytes = D * 2;
  static constexpr int kKVBytes = kBN * kRowBytes, kQBytes = kBM * kRowBytes;
  static constexpr int kDSBytes = kBM * kBN * 2;   // dS, (query, key): rows of 64 keys, 128 bytes
  // K, V once; Q and dO twice (the ring); dS; L and D of the tile.
  static constexpr int kSmemBytes = 2 * kKVBytes + 4 * kQBytes + kDSBytes + 2 * kBM * 4;
  // dQ's tile (kBM x D) over the 4 warps: kWarpsM row blocks of 16, kWarpsN column blocks.
  static constexpr int kWarpsM = kBM / 16, kWarpsN = kWarps / kWarpsM, kDQCols = D / kWarpsN;
  static_assert(D % 16 == 0 && D / 8 >= 8, "k16 steps; 8 chunks a row for the swizzle");
  static_assert(kBM % 16 == 0 && kWarps % kWarpsM == 0 && kDQCols % 16 == 0, "dQ's warp tiling");
  static_assert(kBN * 2 == 128, "dS rows of 8 chunks: the swizzle of swz<64>");
};

// ============================================================================================
// D and L in base 2: one warp a query row
// ============================================================================================

template <class T, int D>
__global__ void attention_bwd_dot_do_o(const BwdArgs a, i64 rows) {
  const i64 row = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* o = static_cast<const T*>(a.o) + row * D;
  const T* dout = static_cast<const T*>(a.dout) + row * D;
  float acc = 0.f;
#pragma unroll
  for (int e = lane * 2; e < D; e += 64) {   // two 16-bit elements a lane a step
    acc += klab::to_f32(o[e]) * klab::to_f32(dout[e]);
    acc += klab::to_f32(o[e + 1]) * klab::to_f32(dout[e + 1]);
  }
  acc = klab::warp_sum(acc);
  if (lane == 0) {
    a.delta[row] = acc;
    const float l = a.lse[row];
    a.lse2[row] = l == -INFINITY ? INFINITY : l * 1.4426950408889634f;
  }
}

// ============================================================================================
// v1_mma_atomic_dq (kAtomicDq) and v2_mma_deterministic's dK/dV kernel
// ============================================================================================

// Grid: one block per (64 keys, batch x K/V head), 1D. The block walks tiles t of
// (head of its group, query tile), the heads outermost.
template <class T, int D, bool kAtomicDq>
__global__ void __launch_bounds__(BwdTiles<D>::kThreads)
    attention_bwd_v1_mma_atomic_dq(const BwdArgs a) {
  using C = BwdTiles<D>;
  constexpr int kNS = C::kBM / 8;   // n8 blocks of Sᵀ (queries)
  constexpr int kND = D / 8;        // n8 blocks of dK, dV (head dim)
  constexpr int kKD = D / 16;       // k16 steps over the head dim
  constexpr int kKQ = C::kBM / 16;  // k16 steps over the tile's queries
  static_assert(kNS % 2 == 0 && kND % 2 == 0, "ldmatrix_x4 feeds two n8 blocks");
  extern __shared__ __align__(128) unsigned char s_raw[];
  const uint32_t s_k = klab::smem_u32(s_raw);
  const uint32_t s_v = s_k + C::kKVBytes;
  const uint32_t s_q = s_v + C::kKVBytes;         // Q[stage] at s_q + stage * kQBytes
  const uint32_t s_do = s_q + 2 * C::kQBytes;     // dO[stage] likewise
  const uint32_t s_ds = s_do + 2 * C::kQBytes;    // dS (kBM queries, 64 keys), swz<64>
  float* s_l = reinterpret_cast<float*>(s_raw + 2 * C::kKVBytes + 4 * C::kQBytes + C::kDSBytes);
  float* s_dd = s_l + C::kBM;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, c = lane % 4;
  const int key_blocks = (a.Sk + C::kBN - 1) / C::kBN;
  const i64 bhk = blockIdx.x / key_blocks;
  const int k0 = (blockIdx.x % key_blocks) * C::kBN;
  const i64 b = bhk / a.Hkv, hk = bhk % a.Hkv;
  const int group = a.Hq / a.Hkv;
  const T* g_k = static_cast<const T*>(a.k) + bhk * a.Sk * D;   // (Sk, D)
  const T* g_v = static_cast<const T*>(a.v) + bhk * a.Sk * D;

  // The query tiles that see a key of the block: causal, query i sees key j iff
  // i >= j - diag, so the block's first key k0 is seen from row k0 - diag on.
  const int diag = a.Sk - a.Sq;
  const int q_first = a.causal ? max(0, k0 - diag) : 0;
  const int tile0 = q_first / C::kBM;
  const int per_head = q_first >= a.Sq ? 0 : (a.Sq + C::kBM - 1) / C::kBM - tile0;
  const int tiles = per_head * group;

  // Accumulators: dK and dV of the warp's 16 keys, rows g and g + 8 (mma.cuh's D layout).
  float r_dk[kND][4], r_dv[kND][4];
#pragma unroll
  for (int n = 0; n < kND; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) r_dk[n][e] = r_dv[n][e] = 0.f;

  // Tile t's head and first query row; its Q and dO copied into stage t & 1.
  auto tile_at = [&](int t, i64& bh, int& q0) {
    bh = b * a.Hq + hk * group + t / per_head;
    q0 = (tile0 + t % per_head) * C::kBM;
  };
  auto load_tile = [&](int t) {
    i64 bh;
    int q0;
    tile_at(t, bh, q0);
    const int stage = t & 1;
    copy_tile_async<C::kBM, D, C::kThreads>(s_q + stage * C::kQBytes, static_cast<const T*>(a.q) + bh * a.Sq * D, q0,
                                            a.Sq, tid);
    copy_tile_async<C::kBM, D, C::kThreads>(s_do + stage * C::kQBytes, static_cast<const T*>(a.dout) + bh * a.Sq * D,
                                            q0, a.Sq, tid);
  };

  if (tiles > 0) {
    copy_tile_async<C::kBN, D, C::kThreads>(s_k, g_k, k0, a.Sk, tid);
    copy_tile_async<C::kBN, D, C::kThreads>(s_v, g_v, k0, a.Sk, tid);
    load_tile(0);
    klab::cp_async_commit();
  }
  const int key_row = k0 + warp * 16 + g;   // this thread's keys: key_row and key_row + 8
  for (int t = 0; t < tiles; ++t) {
    const int stage = t & 1;
    i64 bh;
    int q0;
    tile_at(t, bh, q0);
    if (tid < C::kBM) {   // the tile's L (base 2) and D; rows past Sq: P = 0
      const bool in = q0 + tid < a.Sq;
      s_l[tid] = in ? a.lse2[bh * a.Sq + q0 + tid] : INFINITY;
      s_dd[tid] = in ? a.delta[bh * a.Sq + q0 + tid] : 0.f;
    }
    if (t + 1 < tiles) {   // the next tile into the other stage, freed by the last barrier
      load_tile(t + 1);
      klab::cp_async_commit();
      klab::cp_async_wait<1>();
    } else {
      klab::cp_async_wait<0>();
    }
    __syncthreads();
    const uint32_t s_qt = s_q + stage * C::kQBytes, s_dot = s_do + stage * C::kQBytes;

    // Sᵀ (16 keys x kBM queries a warp) = K_w · Q_tᵀ, and dPᵀ = V_w · dO_tᵀ: K_w's and V_w's
    // A fragments as the forward reads Q's, Q_t's and dO_t's B fragments as it reads K's.
    float r_s[kNS][4], r_dp[kNS][4];
#pragma unroll
    for (int n = 0; n < kNS; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) r_s[n][e] = r_dp[n][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKD; ++kk) {
      uint32_t r_a[4];
      klab::ldmatrix_x4(r_a, s_k + swz<D>(warp * 16 + (lane / 8 % 2) * 8 + lane % 8, 2 * kk + lane / 16));
#pragma unroll
      for (int n = 0; n < kNS; n += 2) {
        uint32_t r_b[4];
        klab::ldmatrix_x4(r_b, s_qt + swz<D>((n + lane / 16) * 8 + lane % 8, 2 * kk + lane / 8 % 2));
        klab::mma_m16n8k16<T>(r_s[n], r_a, r_b[0], r_b[1]);
        klab::mma_m16n8k16<T>(r_s[n + 1], r_a, r_b[2], r_b[3]);
      }
      klab::ldmatrix_x4(r_a, s_v + swz<D>(warp * 16 + (lane / 8 % 2) * 8 + lane % 8, 2 * kk + lane / 16));
#pragma unroll
      for (int n = 0; n < kNS; n += 2) {
        uint32_t r_b[4];
        klab::ldmatrix_x4(r_b, s_dot + swz<D>((n + lane / 16) * 8 + lane % 8, 2 * kk + lane / 8 % 2));
        klab::mma_m16n8k16<T>(r_dp[n], r_a, r_b[0], r_b[1]);
        klab::mma_m16n8k16<T>(r_dp[n + 1], r_a, r_b[2], r_b[3]);
      }
    }

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

    if constexpr (kAtomicDq) {
      // dS into shared memory with queries in rows (the transpose of the fragments): 16-bit
      // stores, query q0 + 8 n + 2 c + (e & 1), key warp * 16 + g + 8 (e >> 1).
      unsigned char* s_ds_p = s_raw + 2 * C::kKVBytes + 4 * C::kQBytes;
#pragma unroll
      for (int n = 0; n < kNS; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qr = n * 8 + 2 * c + (e & 1), kc = warp * 16 + g + (e >> 1) * 8;
          T* dst = reinterpret_cast<T*>(s_ds_p + swz<C::kBN>(qr, kc / 8) + (kc % 8) * 2);
          *dst = klab::from_f32<T>(r_dp[n][e]);
        }
      __syncthreads();
      // dQ_t (kBM x D) += dS (kBM x 64 keys) · K (64 x D): warp (wm, wn) takes rows
      // 16 wm.., columns kDQCols wn..; A = dS as stored (the forward's Q pattern), B = K
      // transposed (ldmatrix.trans).
      constexpr int kNQ = C::kDQCols / 8;
      const int wm = warp % C::kWarpsM, wn = warp / C::kWarpsM;
      float r_dq[kNQ][4];
#pragma unroll
      for (int n = 0; n < kNQ; ++n) r_dq[n][0] = r_dq[n][1] = r_dq[n][2] = r_dq[n][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < C::kBN / 16; ++kk) {
        uint32_t r_a[4];
        klab::ldmatrix_x4(r_a, s_ds + swz<C::kBN>(wm * 16 + (lane / 8 % 2) * 8 + lane % 8, 2 * kk + lane / 16));
#pragma unroll
        for (int n = 0; n < kNQ; n += 2) {
          uint32_t r_b[4];
          klab::ldmatrix_x4<true>(
              r_b, s_k + swz<D>(16 * kk + (lane / 8 % 2) * 8 + lane % 8, wn * (C::kDQCols / 8) + n + lane / 16));
          klab::mma_m16n8k16<T>(r_dq[n], r_a, r_b[0], r_b[1]);
          klab::mma_m16n8k16<T>(r_dq[n + 1], r_a, r_b[2], r_b[3]);
        }
      }
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int q = q0 + wm * 16 + g + rr * 8;
        if (q >= a.Sq) continue;
        float* dst = a.dq_acc + (bh * a.Sq + q) * D + wn * C::kDQCols + 2 * c;
#pragma unroll
        for (int n = 0; n < kNQ; ++n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
          atomicAdd(reinterpret_cast<float2*>(dst + n * 8), make_float2(r_dq[n][2 * rr], r_dq[n][2 * rr + 1]));
#else
          atomicAdd(dst + n * 8, r_dq[n][2 * rr]);
          atomicAdd(dst + n * 8 + 1, r_dq[n][2 * rr + 1]);
#endif
        }
      }
    }
    __syncthreads();   // every warp is done with this stage (and dS) before they are refilled
  }

  // dK (scaled by 1/sqrt(d)) and dV, rounded once; rows past Sk are not stored. A key no
  // query sees (tiles = 0) gets zeros.
  T* g_dk = static_cast<T*>(a.dk) + bhk * a.Sk * D;
  T* g_dv = static_cast<T*>(a.dv) + bhk * a.Sk * D;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int key = key_row + rr * 8;
    if (key >= a.Sk) continue;
#pragma unroll
    for (int n = 0; n < kND; ++n) {
      const i64 off = static_cast<i64>(key) * D + n * 8 + 2 * c;
      *reinterpret_cast<uint32_t*>(g_dk + off) =
          klab::pack_pair<T>(r_dk[n][2 * rr] * a.scale, r_dk[n][2 * rr + 1] * a.scale);
      *reinterpret_cast<uint32_t*>(g_dv + off) = klab::pack_pair<T>(r_dv[n][2 * rr], r_dv[n][2 * rr + 1]);
    }
  }
}

// dQ = dQ_acc / sqrt(d), rounded: v1's last kernel, two elements a thread.
template <class T>
__global__ void attention_bwd_v1_mma_atomic_dq_convert(const BwdArgs a, i64 pairs) {
  const i64 k = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= pairs) return;
  const float2 x = reinterpret_cast<const float2*>(a.dq_acc)[k];
  reinterpret_cast<uint32_t*>(a.dq)[k] = klab::pack_pair<T>(x.x * a.scale, x.y * a.scale);
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
  constexpr int kNS = kBN / 8, kND = D / 8, kKD = D / 16, kKP = kBN / 16;
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
#pragma unroll
    for (int n = 0; n < kNS; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) r_s[n][e] = r_dp[n][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKD; ++kk) {
      uint32_t r_a[4];
      klab::ldmatrix_x4(r_a, s_q + swz<D>(warp * 16 + (lane / 8 % 2) * 8 + lane % 8, 2 * kk + lane / 16));
#pragma unroll
      for (int n = 0; n < kNS; n += 2) {
        uint32_t r_b[4];
        klab::ldmatrix_x4(r_b, s_kt + swz<D>((n + lane / 16) * 8 + lane % 8, 2 * kk + lane / 8 % 2));
        klab::mma_m16n8k16<T>(r_s[n], r_a, r_b[0], r_b[1]);
        klab::mma_m16n8k16<T>(r_s[n + 1], r_a, r_b[2], r_b[3]);
      }
      klab::ldmatrix_x4(r_a, s_do + swz<D>(warp * 16 + (lane / 8 % 2) * 8 + lane % 8, 2 * kk + lane / 16));
#pragma unroll
      for (int n = 0; n < kNS; n += 2) {
        uint32_t r_b[4];
        klab::ldmatrix_x4(r_b, s_vt + swz<D>((n + lane / 16) * 8 + lane % 8, 2 * kk + lane / 8 % 2));
        klab::mma_m16n8k16<T>(r_dp[n], r_a, r_b[0], r_b[1]);
        klab::mma_m16n8k16<T>(r_dp[n + 1], r_a, r_b[2], r_b[3]);
      }
    }
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

// The workspace: dQ's fp32 accumulator (v1 only), then D and L in base 2, one float a query
// row each.
std::size_t workspace_floats(const klab::Problem& p, bool atomic_dq) {
  const Shape s = shape_of(p);
  const i64 rows = s.B * s.Hq * s.Sq;
  return static_cast<std::size_t>((atomic_dq ? rows * s.d : 0) + 2 * rows);
}

BwdArgs bwd_args(const klab::Launch& l, bool atomic_dq) {
  const Shape s = shape_of(l.problem);
  const i64 rows = s.B * s.Hq * s.Sq;
  float* ws = static_cast<float*>(l.workspace);
  float* dq_acc = atomic_dq ? ws : nullptr;
  float* delta = ws + (atomic_dq ? rows * s.d : 0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  return {l.in[0].data, l.in[1].data, l.in[2].data, l.in[3].data, l.in[4].data, l.in[5].as<float>(),
          l.out[0].data, l.out[1].data, l.out[2].data, dq_acc, delta, delta + rows,
          static_cast<int>(s.B), static_cast<int>(s.Hq), static_cast<int>(s.Hkv), static_cast<int>(s.Sq),
          static_cast<int>(s.Sk), static_cast<int>(s.d), is_causal(l.problem), static_cast<float>(scale),
          static_cast<float>(scale * 1.4426950408889634)};
}

std::string supports_bwd(const klab::Problem& p) {
  if (std::string why = klab::require_cc(80); !why.empty()) return why;   // mma.sync bf16, cp.async
  if (std::string why = supports_head_dim(p); !why.empty()) return why;
  const Shape s = shape_of(p);
  if (s.B * s.Hkv * ((s.Sk + 63) / 64) > std::numeric_limits<int>::max() ||
      s.B * s.Hq * ((s.Sq + 63) / 64) > std::numeric_limits<int>::max())
    return "more than 2^31 - 1 blocks of 64 rows";
  return "";
}

// D and L in base 2, then the dK/dV kernel (with or without dQ's atomics).
template <class T, int D, bool kAtomicDq>
void launch_dkv(const BwdArgs& a, cudaStream_t stream) {
  using C = BwdTiles<D>;
  const i64 rows = static_cast<i64>(a.B) * a.Hq * a.Sq;
  if (rows > 0)
    attention_bwd_dot_do_o<T, D><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(a, rows);
  const i64 blocks = static_cast<i64>(a.B) * a.Hkv * ((a.Sk + C::kBN - 1) / C::kBN);
  if (blocks == 0) return;
  auto kernel = attention_bwd_v1_mma_atomic_dq<T, D, kAtomicDq>;
  klab::allow_dynamic_smem(reinterpret_cast<const void*>(kernel), C::kSmemBytes);
  kernel<<<static_cast<unsigned>(blocks), C::kThreads, C::kSmemBytes, stream>>>(a);
}

void run_v1_mma_atomic_dq(const klab::Launch& l) {
  const BwdArgs a = bwd_args(l, true);
  auto go = [&]<class T, int D>() {
    launch_dkv<T, D, true>(a, l.stream);
    const i64 pairs = static_cast<i64>(a.B) * a.Hq * a.Sq * D / 2;
    if (pairs > 0)
      attention_bwd_v1_mma_atomic_dq_convert<T>
          <<<static_cast<unsigned>((pairs + 255) / 256), 256, 0, l.stream>>>(a, pairs);
  };
  dispatch_dtype_dim(l.problem, go);
  KLAB_CHECK_LAUNCH();
}

void run_v2_mma_deterministic(const klab::Launch& l) {
  const BwdArgs a = bwd_args(l, false);
  auto go = [&]<class T, int D>() {
    launch_dkv<T, D, false>(a, l.stream);
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
