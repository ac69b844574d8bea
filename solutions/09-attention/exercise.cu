// Lesson 09 exercise, completed — the online softmax inside the K/V tile loop.
//
// Impl registered here (op `attention_fwd`, bf16 and f16, head dim 64 and 128):
//   exercise       your attention forward, timed against v1_simt_online
//
// The kernel below is v1_simt_online (attention_simt.cu): a block of 8 warps takes 16 query
// rows, 2 a warp; K and V pass through shared memory in tiles of 32 keys; lane j scores key
// j of the tile. What it lacks is the heart of flash attention: the update of each row's
// running state as a tile goes by. A row keeps
//
//     m   the largest score it has seen            (starts at -inf)
//     l   sum of exp(s_j - m) over the keys seen   (starts at 0)
//     o   sum of exp(s_j - m) v_j, its output row  (starts at 0; D / 32 columns a lane)
//
// and after the last tile O = o / l and L = m + ln l. Fill in the TODOs, then run
//
//     klab check 09
//
// which checks your kernel against the fp64 reference on unseen seeds and every edge shape
// (one key, one query and 4099 keys, primes, causal with Sq < Sk and Sq > Sk, rows whose
// scores reach several hundred, K and V past 2^31 elements), then times it against
// v1_simt_online. Until every TODO is right the check fails: the stubs give NaN, and the
// harness fills O and L with NaN before each launch.
//
// Hints (klab hint 09)
//   1. The tile's largest visible score is a warp maximum (klab::warp_max); the running
//      max can only grow.
//   2. Whatever the row holds was computed against the old max: multiplying it by
//      exp(m_old - m_new) puts it against the new one. That includes l and o.
//   3. A row that has seen no key has m = -inf; exp(-inf - finite) = 0, so the first tile
//      needs no special case, but a row that never sees a key must come out as O = 0,
//      L = -inf.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "attention.cuh"
#include "klab/device/warp.cuh"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace {

using lesson09::AttnArgs;
using lesson09::i64;

constexpr int kWarps = 8, kRowsPerWarp = 2, kRows = kWarps * kRowsPerWarp, kKeys = 32;

// Grid: one block per (16 query rows, batch x head). Given: the loads, the scores, P·V and
// the stores' addressing; yours: the running state's update and the final division.
template <class T, int D>
__global__ void __launch_bounds__(kWarps * 32) attention_fwd_exercise(const AttnArgs a, float scale) {
  constexpr int kCols = D / 32;   // columns of o a lane keeps: lane + 32 c
  constexpr int kKPitch = D + 4;  // padded K rows (no bank conflicts for lane j's reads of row j)
  __shared__ __align__(16) float s_q[kRows][D];        // (16, D)  Q rows, times the softmax scale
  __shared__ __align__(16) float s_k[kKeys][kKPitch];  // (32, D)  K tile
  __shared__ __align__(16) float s_v[kKeys][D];        // (32, D)  V tile

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int row_blocks = (a.Sq + kRows - 1) / kRows;
  const i64 bh = blockIdx.x / row_blocks;              // b * Hq + h
  const int q0 = (blockIdx.x % row_blocks) * kRows;
  const i64 b = bh / a.Hq, h = bh % a.Hq, hk = h / (a.Hq / a.Hkv);
  const T* g_q = static_cast<const T*>(a.q) + bh * a.Sq * D;
  const T* g_k = static_cast<const T*>(a.k) + (b * a.Hkv + hk) * a.Sk * D;
  const T* g_v = static_cast<const T*>(a.v) + (b * a.Hkv + hk) * a.Sk * D;
  for (int x = tid; x < kRows * D; x += blockDim.x) {
    const int r = x / D, e = x % D;
    s_q[r][e] = q0 + r < a.Sq ? klab::to_f32(g_q[static_cast<i64>(q0 + r) * D + e]) * scale : 0.f;
  }

  // This warp's rows, the keys each sees, and the running state m, l, o of each.
  int row[kRowsPerWarp];
  i64 seen[kRowsPerWarp];
  float r_m[kRowsPerWarp], r_l[kRowsPerWarp], r_o[kRowsPerWarp][kCols];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    row[rr] = warp * kRowsPerWarp + rr;
    seen[rr] = q0 + row[rr] < a.Sq ? lesson09::visible_keys(q0 + row[rr], a.Sq, a.Sk, a.causal) : 0;
    r_m[rr] = -INFINITY;
    r_l[rr] = 0.f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) r_o[rr][c] = 0.f;
  }
  const i64 block_keys = lesson09::visible_keys(min(q0 + kRows, a.Sq) - 1, a.Sq, a.Sk, a.causal);

  for (i64 kv0 = 0; kv0 < block_keys; kv0 += kKeys) {
    __syncthreads();
    for (int x = tid; x < kKeys * D; x += blockDim.x) {
      const int j = x / D, e = x % D;
      const bool in = kv0 + j < a.Sk;
      s_k[j][e] = in ? klab::to_f32(g_k[(kv0 + j) * D + e]) : 0.f;
      s_v[j][e] = in ? klab::to_f32(g_v[(kv0 + j) * D + e]) : 0.f;
    }
    __syncthreads();
    float s[kRowsPerWarp] = {};   // lane j: the score of key kv0 + j against each row
#pragma unroll 8
    for (int e = 0; e < D; e += 4) {
      const float4 k4 = *reinterpret_cast<const float4*>(&s_k[lane][e]);
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const float4 q4 = *reinterpret_cast<const float4*>(&s_q[row[rr]][e]);
        s[rr] += q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w;
      }
    }

#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      if (kv0 >= seen[rr]) continue;              // warp-uniform: no key of this tile is visible
      const bool visible = kv0 + lane < seen[rr];   // key kv0 is, so some lane's is
      // TODO 1 (hint 1): m_new, the row's running max after this tile.
      const float m_new = fmaxf(r_m[rr], klab::warp_max(visible ? s[rr] : -INFINITY));
      // end of TODO 1
      // TODO 2 (hint 2): the correction that moves what the row holds onto m_new.
      const float correction = expf(r_m[rr] - m_new);   // 0 on the row's first tile: m = -inf
      // end of TODO 2
      // TODO 3: p, this lane's key's exp(s - m_new), 0 if the key is not visible.
      const float p = visible ? expf(s[rr] - m_new) : 0.f;
      // end of TODO 3
      // TODO 4 (hint 2): the running sum l and max m, updated.
      r_l[rr] = r_l[rr] * correction + klab::warp_sum(p);
      r_m[rr] = m_new;
      // end of TODO 4
      // TODO 5 (hint 2): the output row o, corrected.
#pragma unroll
      for (int c = 0; c < kCols; ++c) r_o[rr][c] *= correction;
      // end of TODO 5
      // Given: o += p · V_tile (p of key j from lane j; row j of V read by every lane).
#pragma unroll 8
      for (int j = 0; j < kKeys; ++j) {
        const float pj = __shfl_sync(klab::kFullMask, p, j);
#pragma unroll
        for (int c = 0; c < kCols; ++c) r_o[rr][c] += pj * s_v[j][lane + 32 * c];
      }
    }
  }

  T* g_o = static_cast<T*>(a.o) + bh * a.Sq * D;
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = q0 + row[rr];
    if (i >= a.Sq) continue;
    T* o_row = g_o + static_cast<i64>(i) * D;   // O's row: o_row[lane + 32 c] for c < kCols
    float* lse = a.lse + bh * a.Sq + i;         // L of the row: one float, written by one lane
    // TODO 6 (hint 3): O = o / l and L = m + ln l; a row that saw no key: O = 0, L = -inf.
    const float inv = r_l[rr] > 0.f ? 1.f / r_l[rr] : 0.f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) o_row[lane + 32 * c] = klab::from_f32<T>(r_o[rr][c] * inv);
    if (lane == 0) *lse = r_l[rr] > 0.f ? r_m[rr] + logf(r_l[rr]) : -INFINITY;
    // end of TODO 6
  }
}

// ---- given: the launcher and the registration ----------------------------------------------

std::string supports_exercise(const klab::Problem& p) {
  if (std::string why = lesson09::supports_head_dim(p); !why.empty()) return why;
  const lesson09::Shape s = lesson09::shape_of(p);
  if (s.B * s.Hq * ((s.Sq + kRows - 1) / kRows) > std::numeric_limits<int>::max()) return "more than 2^31 - 1 blocks";
  return "";
}

void run_exercise(const klab::Launch& l) {
  const AttnArgs a = lesson09::attn_args(l);
  const i64 blocks = static_cast<i64>(a.B) * a.Hq * ((a.Sq + kRows - 1) / kRows);
  if (blocks == 0) return;
  const float scale = 1.f / std::sqrt(static_cast<float>(a.d));
  auto go = [&]<class T, int D>() {
    attention_fwd_exercise<T, D><<<static_cast<unsigned>(blocks), kWarps * 32, 0, a.stream>>>(a, scale);
  };
  lesson09::dispatch_dtype_dim(l.problem, go);
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "attention_fwd", .name = "exercise",
                                   .summary = "your attention forward (lessons/09-attention/exercise.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .supports = supports_exercise,
                                   .run = run_exercise}));

}  // namespace
