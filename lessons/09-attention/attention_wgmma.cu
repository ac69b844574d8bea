// lessons/09-attention/attention_wgmma.cu — attention forward on Hopper: TMA, wgmma and warp
// specialization (the FlashAttention-3 structure), built on lesson 05's framework helpers
// (klab/device/tma.cuh, mbarrier.cuh, wgmma.cuh).
//
// Impls registered here (op attention_fwd), one kernel template (schedule, consumer count):
//   v3_wgmma_ws  a block of three warpgroups takes 128 query rows of one (batch, head): one
//                copy warp issues TMA loads (Q once, then K and V tiles of 128 keys into a
//                ring of stages guarded by mbarriers), two consumer warpgroups of 64 rows
//                each compute S = Q·Kᵀ with wgmma from shared memory, the online softmax on
//                the accumulators, and O += P·V with wgmma taking P from registers. Per
//                tile: S, wait, softmax, P·V, wait — in series.
//   v4_pingpong  each warpgroup issues P·V of tile j - 1 together with S of tile j (one
//                tensor-core phase, then the softmax of tile j), and the two warpgroups take
//                turns (a named-barrier hand-off): one's products run on the tensor cores
//                while the other computes its exps, so the tensor cores and the exp units
//                both stay busy.
//   v5_three_consumers  at d = 64, three consumer warpgroups (192 query rows a block) taking
//                turns in a ring: at d = 64 the products are half as long as at d = 128 but
//                the softmax is the same, so two warpgroups cannot hide one's exps under the
//                other's products; a third keeps the tensor cores fed. Each consumer then
//                has 160 registers (S 64, O 32, P 32 fit). d = 128 runs v4's two.
//
// Tried and not kept (README, trials): FlashAttention-3's intra-warpgroup overlap with P in
// registers (ptxas would not keep it: the comment at v4's loop says why) and with P staged
// in shared memory (kept by ptxas, but slower), K/V tiles of 192 keys at d = 128, and a
// persistent grid (one block an SM looping over the work tiles, its copy warp running on
// into the next tile): none was faster at the four bench problems.
//
// Why this shape: a consumer warpgroup's 64 rows are one wgmma's M, and a 64 x 128 S tile
// is 64 fp32 registers a thread; O adds D / 2 (64 at D = 128) and P, packed to 16 bits, 32:
// with setmaxnreg giving the consumers 240 registers, the copy warpgroup keeps 24. wgmma
// reads Q and K (both d-contiguous: "K-major") and V (key rows, d contiguous: an MN-major
// B operand, the transpose flag) straight from the 128-byte-swizzled tiles the TMA writes;
// the accumulator layout of S, packed to 16 bits, is the register A operand of P·V.
// Ragged Sq and Sk: the TMA fills rows past a head's end with zeros (the map's dims are per
// head), and keys past Sk are masked to -inf.
//
//   klab test 09 --impl v3_wgmma_ws,v4_pingpong,v5_three_consumers
//   klab bench 09 --impl v5_three_consumers,cudnn --variant causal
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "attention.cuh"
#include "klab/device/cp_async.cuh"
#include "klab/device/mbarrier.cuh"
#include "klab/device/mma.cuh"
#include "klab/device/online_softmax.cuh"
#include "klab/device/tma.cuh"
#include "klab/device/wgmma.cuh"
#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

// The op (inputs, reference, tolerances, shapes): attention_ops.cu.

namespace lesson09 {
namespace {

using std::uint32_t;
using std::uint64_t;

enum class Sched { serial, pingpong };

// ============================================================================================
// Configuration
// ============================================================================================
// 64 query rows a consumer warpgroup (CONSUMERS of them: 128 or 192 rows a block), K/V tiles
// of 128 keys, kStages K/V stages. Shared memory, every tile 1024-aligned for the swizzle: Q
// (D/64 boxes of kBM rows x 128 bytes), then the K tiles and the V tiles (D/64 boxes of 128
// keys each), then the mbarriers. D = 128, 2 stages: 32 + 128 KB; D = 64, 4 stages: 16
// (24 with three consumers) + 128 KB.
template <int D, int CONSUMERS = 2>
struct V3Tiles {
  static constexpr int kBM = 64 * CONSUMERS, kBN = 128;
  static constexpr int kStages = D == 128 ? 2 : 4;
  static constexpr int kConsumers = CONSUMERS, kThreads = (kConsumers + 1) * 128;
  // Registers: the copy warpgroup keeps 24, the consumers share the rest of the 64K (a
  // multiple of 8): 240 with two consumer warpgroups, 160 with three.
  static constexpr int kCopyRegs = 24;
  static constexpr int kShare = (65536 - 128 * kCopyRegs) / (128 * kConsumers) / 8 * 8;
  static constexpr int kConsumerRegs = kShare > 240 ? 240 : kShare;
  static constexpr int kBoxes = D / 64;                  // 64-column boxes in a row of D
  static constexpr int kQBytes = kBoxes * kBM * 128;
  static constexpr int kKVBytes = kBoxes * kBN * 128;    // one K or one V tile
  static constexpr int kBarBytes = 8 * (2 + 3 * kStages);  // q_full, q_empty, k_full[], v_full[], empty[]
  static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kKVBytes + kBarBytes;
  static constexpr int kS = kBN / 2, kO = D / 2;       // fp32 accumulators a thread: S and O
  static_assert(D == 64 || D == 128, "a row of D is one or two 128-byte swizzle boxes");
  static_assert(kSmemBytes <= 227 * 1024, "over the 227 KB a block may have");
};

// Named barrier 1 + w: "consumer warpgroup w may issue its products" (v4, v5); 0 is
// __syncthreads.
constexpr int kTurnBarrier = 1;

// ============================================================================================
// Kernel: v3_wgmma_ws, v4_pingpong, v5_three_consumers
// ============================================================================================
// Grid: one block per (128 query rows, batch x head), 1D; causal blocks in reverse row
// order (the longest first), as v2.
template <class T, int D, Sched SCHED, int CONS>
__global__ void __launch_bounds__(V3Tiles<D, CONS>::kThreads, 1)
    attention_fwd_wgmma(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                        const __grid_constant__ CUtensorMap tm_v, const AttnArgs a, float scale_log2) {
#ifndef KLAB_NO_WGMMA
  using C = V3Tiles<D, CONS>;
  constexpr int S = C::kStages;
  extern __shared__ __align__(1024) unsigned char s_raw[];
  const uint32_t s_q = (klab::smem_u32(s_raw) + 1023u) & ~1023u;
  const uint32_t s_k0 = s_q + C::kQBytes, s_v0 = s_k0 + S * C::kKVBytes;
  const uint32_t s_bar = s_v0 + S * C::kKVBytes;
  const uint32_t q_full = s_bar, q_empty = s_bar + 8;
  auto k_full = [&](int s) { return s_bar + 16 + 8 * s; };
  auto v_full = [&](int s) { return s_bar + 16 + 8 * S + 8 * s; };
  auto empty = [&](int s) { return s_bar + 16 + 16 * S + 8 * s; };
  auto k_tile = [&](int s) { return s_k0 + s * C::kKVBytes; };
  auto v_tile = [&](int s) { return s_v0 + s * C::kKVBytes; };

  // Work tile t: 128 query rows of one (batch, head), rows fastest so that neighbouring
  // tiles share their K/V head in L2; causal tiles in reverse row order (the longest
  // first). A block takes tiles blockIdx.x, + gridDim.x, ...: one each with the grid the
  // launchers use (the tile count). The loop, and the ring and Q barriers running on across
  // tiles, serve a persistent grid too (one block an SM), measured and not kept (README).
  const int row_blocks = (a.Sq + C::kBM - 1) / C::kBM;
  const int total = static_cast<int>(static_cast<i64>(a.B) * a.Hq * row_blocks);
  struct Work {
    int q0, bh, bhk, tiles;
  };
  auto work_at = [&](int t) {
    Work wk;
    wk.bh = t / row_blocks;
    int rb = t % row_blocks;
    if (a.causal) rb = row_blocks - 1 - rb;
    wk.q0 = rb * C::kBM;
    const int b = wk.bh / a.Hq, h = wk.bh % a.Hq;
    wk.bhk = b * a.Hkv + h / (a.Hq / a.Hkv);
    // Keys any row of the tile sees: its last row's; causal tiles past them are never loaded.
    const i64 keys = visible_keys(min(wk.q0 + C::kBM, a.Sq) - 1, a.Sq, a.Sk, a.causal);
    wk.tiles = static_cast<int>((keys + C::kBN - 1) / C::kBN);
    return wk;
  };

  if (threadIdx.x == 0) {
    klab::mbar_init(q_full, 1);                      // the copying thread's arrive + the bytes
    klab::mbar_init(q_empty, C::kConsumers * 4);     // one arrive per consumer warp
    for (int s = 0; s < S; ++s) {
      klab::mbar_init(k_full(s), 1);
      klab::mbar_init(v_full(s), 1);
      klab::mbar_init(empty(s), C::kConsumers * 4);
    }
    klab::mbar_fence_init();
  }
  __syncthreads();
  const int wg = threadIdx.x / 128;

  // ---- the copy warpgroup: one thread issues every TMA load ---------------------------------
  // The K/V ring runs on across work tiles (u counts every K/V tile this block loads), so
  // the next work tile's first tiles load while the consumers finish the current one; its
  // Q waits until both consumer warpgroups have issued their last S (q_empty).
  if (wg == 0) {
    klab::setmaxnreg_dec<C::kCopyRegs>();
    if (threadIdx.x == 0) {
      int u = 0, qi = 0;
      for (int t = blockIdx.x; t < total; t += gridDim.x) {
        const Work wk = work_at(t);
        if (wk.tiles == 0) continue;   // no key seen: the consumers write O = 0, L = -inf
        klab::mbar_wait(q_empty, (qi & 1) ^ 1);   // the previous work tile's Q is done with
        klab::mbar_arrive_expect_tx(q_full, C::kQBytes);   // the full boxes, zero-filled rows too
#pragma unroll
        for (int x = 0; x < C::kBoxes; ++x)
          klab::tma_load_3d(s_q + x * C::kBM * 128, &tm_q, q_full, 64 * x, wk.q0, wk.bh);
        for (int j = 0; j < wk.tiles; ++j, ++u) {
          const int s = u % S;
          klab::mbar_wait(empty(s), ((u / S) & 1) ^ 1);   // use u / S - 1 of stage s is done
          klab::mbar_arrive_expect_tx(k_full(s), C::kKVBytes);
#pragma unroll
          for (int x = 0; x < C::kBoxes; ++x)
            klab::tma_load_3d(k_tile(s) + x * C::kBN * 128, &tm_k, k_full(s), 64 * x, j * C::kBN, wk.bhk);
          klab::mbar_arrive_expect_tx(v_full(s), C::kKVBytes);
#pragma unroll
          for (int x = 0; x < C::kBoxes; ++x)
            klab::tma_load_3d(v_tile(s) + x * C::kBN * 128, &tm_v, v_full(s), 64 * x, j * C::kBN, wk.bhk);
        }
        ++qi;
      }
    }
    return;
  }

  // ---- the consumer warpgroups ----------------------------------------------------------------
  klab::setmaxnreg_inc<C::kConsumerRegs>();
  const int w = wg - 1, warp_in_wg = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;                        // fragment row and column pair
  const i64 diag = static_cast<i64>(a.Sk) - a.Sq;              // query i sees key j <= i + diag
  int u = 0, qi = 0;   // K/V tiles and work tiles with keys consumed so far (the copy thread's u, qi)
  for (int t = blockIdx.x; t < total; t += gridDim.x) {
    const Work wk = work_at(t);
    const int q0 = wk.q0, tiles = wk.tiles, u0 = u;
    const int row0 = q0 + 64 * w + 16 * warp_in_wg + g;        // this thread's rows: row0, row0 + 8

    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};      // running max (base 2), partial sum
    float r_s[C::kS];                                            // S, then P in fp32   (64 x 128)
    float r_o[C::kO];                                            // O                   (64 x D)
    uint32_t r_p[C::kS / 2];                                     // P in 16 bits: the A operand
#pragma unroll
    for (int i = 0; i < C::kO; ++i) r_o[i] = 0.f;

    // S = Q_w · K_jᵀ: D/16 k-steps. A = Q's 64 rows of this warpgroup (8 KB into each box),
    // B = K_j, both K-major: a k-step is 32 bytes along the 128-byte row, the next box past 64.
    auto issue_s = [&](int j) {
      const uint32_t s_k = k_tile((u0 + j) % S);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t off = 32 * (kk % 4);
        const uint64_t d_q = klab::smem_desc_sw128(s_q + (kk / 4) * C::kBM * 128 + w * 64 * 128 + off, 16, 1024);
        const uint64_t d_k = klab::smem_desc_sw128(s_k + (kk / 4) * C::kBN * 128 + off, 16, 1024);
        klab::wgmma_ss_n128<T, 0, 0>(r_s, d_q, d_k, kk > 0);
      }
    };
    // O += P_j · V_j: kBN/16 k-steps over keys. B = V_j (keys x D, D contiguous): MN-major,
    // a k-step is 16 rows of 128 bytes (2048), the next 64 columns one box (kBN rows) on.
    auto issue_pv = [&](int j) {
      const uint32_t s_v = v_tile((u0 + j) % S);
#pragma unroll
      for (int kk = 0; kk < C::kBN / 16; ++kk) {
        const uint32_t a_p[4] = {r_p[4 * kk], r_p[4 * kk + 1], r_p[4 * kk + 2], r_p[4 * kk + 3]};
        const uint64_t d_v = klab::smem_desc_sw128(s_v + 2048 * kk, C::kBN * 128, 1024);
        klab::wgmma_rs<T, D, 1>(r_o, a_p, d_v, 1);
      }
    };
    // The softmax of tile j on r_s (raw scores): mask, the rows' new max over the quad, then
    // p = 2^(s · log2(e)/sqrt(d) - m) in place, one FFMA and one ex2 an element (m is kept
    // scaled, in base 2), and l updated; returns the corrections 2^(m_old - m_new) that O
    // still needs (the caller applies them once the last P·V into O has completed).
    auto softmax = [&](int j, float (&corr)[2]) {
      const i64 kv0 = static_cast<i64>(j) * C::kBN;
      // Only tiles reaching past Sk or past the diagonal of this warpgroup's first row are
      // masked; a row keeps its first `lim` keys of the tile (small ints, one compare an
      // element). A uniform branch: the unmasked tiles never execute it.
      if (kv0 + C::kBN > a.Sk || (a.causal && kv0 + C::kBN - 1 > q0 + 64 * w + diag)) {
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          const i64 vis = visible_keys(row0 + 8 * rr, a.Sq, a.Sk, a.causal) - kv0;
          const int lim = static_cast<int>(vis < 0 ? 0 : (vis > C::kBN ? C::kBN : vis));
#pragma unroll
          for (int n = 0; n < C::kBN / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if (n * 8 + 2 * c + e >= lim) r_s[4 * n + 2 * rr + e] = -INFINITY;
        }
      }
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {   // rows g (e = 0, 1) and g + 8 (e = 2, 3)
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < C::kBN / 8; ++n) mx = fmaxf(mx, fmaxf(r_s[4 * n + 2 * rr], r_s[4 * n + 2 * rr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(klab::kFullMask, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(klab::kFullMask, mx, 2));
        const float m_new = fmaxf(m[rr], mx * scale_log2);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;   // no key yet: p and corr come out 0
        corr[rr] = klab::ex2_approx(m[rr] - m_use);
        m[rr] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < C::kBN / 8; ++n) {
          r_s[4 * n + 2 * rr] = klab::ex2_approx(fmaf(r_s[4 * n + 2 * rr], scale_log2, -m_use));
          r_s[4 * n + 2 * rr + 1] = klab::ex2_approx(fmaf(r_s[4 * n + 2 * rr + 1], scale_log2, -m_use));
          sum += r_s[4 * n + 2 * rr] + r_s[4 * n + 2 * rr + 1];
        }
        l[rr] = l[rr] * corr[rr] + sum;
      }
    };
    // After P·V of tile j - 1 has completed: O *= corr (rows g, g + 8), P_j packed to 16 bits
    // in the A-fragment layout (k-step kk = S's n8 blocks 2 kk and 2 kk + 1).
    auto rescale_and_pack = [&](const float (&corr)[2]) {
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        r_o[4 * n] *= corr[0];
        r_o[4 * n + 1] *= corr[0];
        r_o[4 * n + 2] *= corr[1];
        r_o[4 * n + 3] *= corr[1];
      }
#pragma unroll
      for (int i = 0; i < C::kS / 2; ++i) r_p[i] = klab::pack_pair<T>(r_s[2 * i], r_s[2 * i + 1]);
    };
    auto release = [&](int j) {   // K/V tile j's stage read by this warp's products
      if (lane == 0) klab::mbar_arrive(empty((u0 + j) % S));
    };
    auto release_q = [&]() {      // the work tile's last S has completed
      if (lane == 0) klab::mbar_arrive(q_empty);
    };
    auto wait_k = [&](int j) { klab::mbar_wait(k_full((u0 + j) % S), ((u0 + j) / S) & 1); };
    auto wait_v = [&](int j) { klab::mbar_wait(v_full((u0 + j) % S), ((u0 + j) / S) & 1); };

    if (tiles > 0) klab::mbar_wait(q_full, qi & 1);
    if constexpr (SCHED == Sched::serial) {
      for (int j = 0; j < tiles; ++j) {
        wait_k(j);
        klab::wgmma_fence();
        issue_s(j);
        klab::wgmma_commit();
        klab::wgmma_wait<0>();
        klab::wgmma_fence_acc(r_s);
        if (j == tiles - 1) release_q();
        float corr[2];
        softmax(j, corr);
        rescale_and_pack(corr);
        wait_v(j);
        klab::wgmma_fence();
        issue_pv(j);
        klab::wgmma_commit();
        klab::wgmma_wait<0>();
        klab::wgmma_fence_acc(r_o);
        release(j);
      }
    } else if (tiles > 0) {
      // Phase j: the products S_j and P_{j-1}·V_{j-1} issued together, then the softmax of
      // S_j. The first phase has no P·V and the last (j = tiles) no S: peeled, so that the
      // steady loop has no branch around a wgmma (ptxas serializes wgmma on divergent paths).
      //
      // The turn: warpgroup w waits at barrier 1 + w before issuing and hands the turn to
      // w + 1 (round the ring of consumers) right after, so the warpgroups' phases take the
      // tensor cores in turn and each one's softmax runs under the others' products.
      // Warpgroup 0 takes the first turn (the last one's arrive below) and the last skips its
      // last hand-off, so that each barrier is arrived at as often as it is waited for.
      //
      // Tried and not kept: S and P·V as two commit groups and wait<1> before the softmax,
      // for it to run while P·V still computes (FlashAttention-3's intra-warpgroup overlap).
      // ptxas (CUDA 13.0) treats any accumulator read before the wait that retires the last
      // group as a hazard: it moved wait<0> up to the softmax's first instruction (SASS:
      // WARPGROUP.DEPBAR.LE gsb0, 0x0 right after the first FMNMX), and where the wait was
      // forced late it serialized every wgmma instead (C7514).
      constexpr bool kPing = SCHED == Sched::pingpong;
      auto take_turn = [&]() {
        if constexpr (kPing) klab::named_barrier_sync(kTurnBarrier + w, 256);
      };
      constexpr int kLast = C::kConsumers - 1;
      auto pass_turn = [&](bool last) {
        if constexpr (kPing)
          if (!(w == kLast && last)) klab::named_barrier_arrive(kTurnBarrier + (w + 1) % C::kConsumers, 256);
      };
      if (kPing && w == kLast) klab::named_barrier_arrive(kTurnBarrier + 0, 256);
      float corr[2];
      take_turn();
      wait_k(0);
      klab::wgmma_fence();
      issue_s(0);
      klab::wgmma_commit();
      pass_turn(false);
      klab::wgmma_wait<0>();
      klab::wgmma_fence_acc(r_s);
      softmax(0, corr);
      rescale_and_pack(corr);
      for (int j = 1; j < tiles; ++j) {
        take_turn();
        wait_k(j);
        wait_v(j - 1);
        klab::wgmma_fence();
        issue_s(j);
        issue_pv(j - 1);
        klab::wgmma_commit();
        pass_turn(false);
        klab::wgmma_wait<0>();
        klab::wgmma_fence_acc(r_s);
        klab::wgmma_fence_acc(r_o);
        klab::wgmma_fence_operand(r_p);
        release(j - 1);
        softmax(j, corr);
        rescale_and_pack(corr);
      }
      release_q();
      take_turn();
      wait_v(tiles - 1);
      klab::wgmma_fence();
      issue_pv(tiles - 1);
      klab::wgmma_commit();
      pass_turn(true);
      klab::wgmma_wait<0>();
      klab::wgmma_fence_acc(r_o);
      release(tiles - 1);
    }

    // O = acc / l and L, by the lesson's one epilogue (attention.cuh). Rows past Sq were
    // zero rows of Q: not stored.
    store_rows<T, D>(a, wk.bh, row0, c, r_o, m, l);
    if (tiles > 0) {
      u += tiles;
      ++qi;
    }
  }
#endif
}

// ============================================================================================
// Launchers
// ============================================================================================

std::string supports_wgmma(const klab::Problem& p) {
  const auto& dev = klab::device_info();
  if (dev.present && dev.cc() != 90) return "Hopper (compute capability 9.0) only: wgmma and setmaxnreg are sm_90a";
  if (std::string why = supports_head_dim(p); !why.empty()) return why;
  const Shape s = shape_of(p);
  if (s.B * s.Hq * ((s.Sq + 127) / 128) > std::numeric_limits<int>::max())
    return "more than 2^31 - 1 blocks of 128 query rows";   // (of 192 at d = 64 with three warpgroups: fewer)
  return "";
}

template <Sched SCHED, int CONS64 = 2>
void run_wgmma(const klab::Launch& l) {
  const AttnArgs a = attn_args(l);
  if (static_cast<i64>(a.B) * a.Hq * a.Sq == 0) return;
  // Rows of d = 64 or 128 elements: pitches of 128 or 256 bytes, always describable; the
  // base addresses must be 16-byte aligned (the harness's allocations are).
  for (const void* p : {a.q, a.k, a.v}) {
    const std::string why = klab::tma_describable(p, a.d, a.d, 2);
    KLAB_REQUIRE(why.empty(), "attention (TMA): " + why);
  }
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(a.d)));
  auto go = [&]<class T, int D>() {
    constexpr int CONS = D == 64 ? CONS64 : 2;
    using C = V3Tiles<D, CONS>;
    const i64 blocks = static_cast<i64>(a.B) * a.Hq * ((a.Sq + C::kBM - 1) / C::kBM);   // one a work tile
    const CUtensorMapDataType type =
        std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    // Per head: rows of D, Sq (Q) or Sk (K, V) rows, one head after another; boxes of 64
    // columns x kBM (Q) or kBN (K, V) rows. A box past a head's last row reads zeros, never
    // the next head.
    const CUtensorMap tm_q = klab::tensor_map_16bit(type, a.q, D, a.Sq, static_cast<i64>(a.B) * a.Hq, D,
                                                    static_cast<i64>(a.Sq) * D, 64, C::kBM);
    const CUtensorMap tm_k = klab::tensor_map_16bit(type, a.k, D, a.Sk, static_cast<i64>(a.B) * a.Hkv, D,
                                                    static_cast<i64>(a.Sk) * D, 64, C::kBN);
    const CUtensorMap tm_v = klab::tensor_map_16bit(type, a.v, D, a.Sk, static_cast<i64>(a.B) * a.Hkv, D,
                                                    static_cast<i64>(a.Sk) * D, 64, C::kBN);
    auto kernel = attention_fwd_wgmma<T, D, SCHED, CONS>;
    KLAB_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    kernel<<<static_cast<unsigned>(blocks), C::kThreads, C::kSmemBytes, a.stream>>>(tm_q, tm_k, tm_v, a,
                                                                                    scale_log2);
  };
  dispatch_dtype_dim(l.problem, go);
  KLAB_CHECK_LAUNCH();
}

// The impls: the schedule, and the consumer warpgroups a block at d = 64.
void run_v3_wgmma_ws(const klab::Launch& l) { run_wgmma<Sched::serial>(l); }
void run_v4_pingpong(const klab::Launch& l) { run_wgmma<Sched::pingpong>(l); }
void run_v5_three_consumers(const klab::Launch& l) { run_wgmma<Sched::pingpong, 3>(l); }

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "attention_fwd", .name = "v3_wgmma_ws",
                                   .summary = "Hopper: a TMA copy warp, two consumer warpgroups of 64 rows, "
                                              "S = Q·Kᵀ and O += P·V by wgmma (P from registers), K/V tiles "
                                              "of 128 in an mbarrier ring; S, softmax, P·V in series",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_wgmma,
                                   .run = run_v3_wgmma_ws,
                                   .kernels = {"attention_fwd_wgmma@Sched)0, 2>"}}));
KLAB_REGISTER(klab::register_impl({.op = "attention_fwd", .name = "v4_pingpong",
                                   .summary = "v3 with P·V of tile j-1 issued with S of tile j, and the two "
                                              "consumer warpgroups taking turns on the tensor cores (named "
                                              "barriers): one's softmax runs under the other's products",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_wgmma,
                                   .run = run_v4_pingpong,
                                   .kernels = {"attention_fwd_wgmma@Sched)1, 2>"}}));
KLAB_REGISTER(klab::register_impl({.op = "attention_fwd", .name = "v5_three_consumers",
                                   .summary = "v4 with three consumer warpgroups (192 query rows a block) at d = 64, "
                                              "taking turns in a ring; d = 128 as v4 (too few registers for three)",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_wgmma,
                                   .run = run_v5_three_consumers,
                                   // d = 64: three consumers; d = 128: v4's kernel
                                   .kernels = {"attention_fwd_wgmma@64, (lesson09::(anonymous namespace)::Sched)1, 3>",
                                               "attention_fwd_wgmma@128, (lesson09::(anonymous namespace)::Sched)1, 2>"}}));

}  // namespace
}  // namespace lesson09
