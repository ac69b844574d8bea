// lessons/09-attention/attention_simt.cu — attention forward on the CUDA cores: the online
// softmax over K/V tiles, every product in fp32.
//
// Impls registered here (op attention_fwd):
//   v1_simt_online  a block of 8 warps takes 16 query rows of one (batch, head), 2 rows a
//                   warp; K and V pass through shared memory in tiles of 32 keys (as fp32),
//                   each lane scores one key of the tile against both of its warp's rows,
//                   and each row keeps lesson 04's online-softmax state (running max m, sum
//                   l, klab::MD) and its output row in registers, rescaled by exp(m_old -
//                   m_new) whenever the max grows. S and P never exist in memory; O is
//                   divided by l once, at the end. Correct on every shape; not fast (a
//                   shared-memory load for each fused multiply-add of the scores).
//
// Why the online softmax: softmax(s) · V needs the row's max and sum before the first
// product, and they depend on every key. Kept as a running (m, l), merged tile by tile
// (md_merge), the output accumulated so far only needs the same correction factor
// exp(m_old - m_new) as l: O = sum_j exp(s_j - m) v_j / l comes out in one pass over K/V.
//
//   klab test 09 --impl v1_simt_online
//   klab bench 09 --impl v1_simt_online --shape 4x16x16x4096x4096x128
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "attention.cuh"
#include "klab/device/online_softmax.cuh"
#include "klab/device/warp.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

// The op (inputs, reference, tolerances, shapes): attention_ops.cu.

namespace lesson09 {
namespace {

constexpr int kV1Warps = 8;
constexpr int kV1RowsPerWarp = 2;
constexpr int kV1Rows = kV1Warps * kV1RowsPerWarp;   // query rows a block
constexpr int kV1Keys = 32;                          // keys a tile: one a lane

// ============================================================================================
// v1_simt_online
// ============================================================================================

// Grid: one block per (16 query rows, batch x head), the rows fastest so that neighbouring
// blocks read the same K/V head from L2. 1D: B * Hq passes 65535 (a grid's y/z limit).
template <class T, int D>
__global__ void __launch_bounds__(kV1Warps * 32) attention_fwd_v1_simt_online(const AttnArgs a, float scale) {
  static_assert(D % 32 == 0 && D % 4 == 0, "each lane owns D / 32 columns of O; scores read 4 floats at once");
  constexpr int kCols = D / 32;   // columns of O a lane keeps: lane + 32 c
  constexpr int kKPitch = D + 4;  // padded K rows: lane j's 16-byte reads of row j fall in distinct banks
  __shared__ __align__(16) float s_q[kV1Rows][D];        // (16, D)  Q rows, times the softmax scale
  __shared__ __align__(16) float s_k[kV1Keys][kKPitch];  // (32, D)  K tile, padded
  __shared__ __align__(16) float s_v[kV1Keys][D];        // (32, D)  V tile

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int row_blocks = (a.Sq + kV1Rows - 1) / kV1Rows;
  const i64 bh = blockIdx.x / row_blocks;              // b * Hq + h
  const int q0 = (blockIdx.x % row_blocks) * kV1Rows;  // first query row of the block
  const i64 b = bh / a.Hq, h = bh % a.Hq;
  const i64 hk = h / (a.Hq / a.Hkv);                   // the K/V head this query head reads
  const T* g_q = static_cast<const T*>(a.q) + bh * a.Sq * D;
  const T* g_k = static_cast<const T*>(a.k) + (b * a.Hkv + hk) * a.Sk * D;
  const T* g_v = static_cast<const T*>(a.v) + (b * a.Hkv + hk) * a.Sk * D;

  for (int x = tid; x < kV1Rows * D; x += blockDim.x) {
    const int r = x / D, e = x % D;
    s_q[r][e] = q0 + r < a.Sq ? klab::to_f32(g_q[static_cast<i64>(q0 + r) * D + e]) * scale : 0.f;
  }

  // This warp's rows, their visible keys (0 past Sq), running state and output rows.
  int row[kV1RowsPerWarp];
  i64 seen[kV1RowsPerWarp];
  klab::MD r_md[kV1RowsPerWarp];
  float r_o[kV1RowsPerWarp][kCols];
#pragma unroll
  for (int rr = 0; rr < kV1RowsPerWarp; ++rr) {
    row[rr] = warp * kV1RowsPerWarp + rr;
    seen[rr] = q0 + row[rr] < a.Sq ? visible_keys(q0 + row[rr], a.Sq, a.Sk, a.causal) : 0;
    r_md[rr] = {-INFINITY, 0.f};
#pragma unroll
    for (int c = 0; c < kCols; ++c) r_o[rr][c] = 0.f;
  }
  // The block's last row sees the most keys (visible_keys grows with the row).
  const int last = min(q0 + kV1Rows, a.Sq) - 1;
  const i64 block_keys = visible_keys(last, a.Sq, a.Sk, a.causal);

  for (i64 kv0 = 0; kv0 < block_keys; kv0 += kV1Keys) {
    __syncthreads();   // the previous tile is consumed (and, the first time, s_q written)
    for (int x = tid; x < kV1Keys * D; x += blockDim.x) {
      const int j = x / D, e = x % D;
      const bool in = kv0 + j < a.Sk;
      s_k[j][e] = in ? klab::to_f32(g_k[(kv0 + j) * D + e]) : 0.f;
      s_v[j][e] = in ? klab::to_f32(g_v[(kv0 + j) * D + e]) : 0.f;
    }
    __syncthreads();

    // Scores: lane j takes key kv0 + j, against both rows (each K read serves both).
    float s[kV1RowsPerWarp] = {};
#pragma unroll 8
    for (int e = 0; e < D; e += 4) {
      const float4 k4 = *reinterpret_cast<const float4*>(&s_k[lane][e]);
#pragma unroll
      for (int rr = 0; rr < kV1RowsPerWarp; ++rr) {
        const float4 q4 = *reinterpret_cast<const float4*>(&s_q[row[rr]][e]);   // a broadcast
        s[rr] += q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w;
      }
    }

#pragma unroll
    for (int rr = 0; rr < kV1RowsPerWarp; ++rr) {
      if (kv0 >= seen[rr]) continue;   // warp-uniform: this row sees none of the tile
      // The tile's state (its max, and its sum relative to that max) merged into the row's:
      // key kv0 is visible (kv0 < seen), so the merged max is finite.
      const bool visible = kv0 + lane < seen[rr];
      const klab::MD tile = klab::warp_merge(klab::MD{visible ? s[rr] : -INFINITY, visible ? 1.f : 0.f});
      const klab::MD next = klab::md_merge(r_md[rr], tile);
      const float correction = expf(r_md[rr].m - next.m);   // 0 on the first tile: m = -inf
      const float p = visible ? expf(s[rr] - next.m) : 0.f;
      r_md[rr] = next;
#pragma unroll
      for (int c = 0; c < kCols; ++c) r_o[rr][c] *= correction;
      // O += p · V_tile: p of key j comes from lane j, V row j is read by all lanes.
#pragma unroll 8
      for (int j = 0; j < kV1Keys; ++j) {
        const float pj = __shfl_sync(klab::kFullMask, p, j);
#pragma unroll
        for (int c = 0; c < kCols; ++c) r_o[rr][c] += pj * s_v[j][lane + 32 * c];
      }
    }
  }

  // O = acc / l; L = m + ln l. A row that saw no key: O = 0, L = -inf (attention.cuh).
  T* g_o = static_cast<T*>(a.o) + bh * a.Sq * D;
#pragma unroll
  for (int rr = 0; rr < kV1RowsPerWarp; ++rr) {
    const int i = q0 + row[rr];
    if (i >= a.Sq) continue;
    const float l = r_md[rr].d;
    const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) g_o[static_cast<i64>(i) * D + lane + 32 * c] = klab::from_f32<T>(r_o[rr][c] * inv);
    if (lane == 0) a.lse[bh * a.Sq + i] = l > 0.f ? r_md[rr].m + logf(l) : -INFINITY;
  }
}

// ============================================================================================
// Launchers
// ============================================================================================

std::string supports_v1(const klab::Problem& p) {
  if (std::string why = supports_head_dim(p); !why.empty()) return why;
  const Shape s = shape_of(p);
  const i64 blocks = s.B * s.Hq * ((s.Sq + kV1Rows - 1) / kV1Rows);
  if (blocks > std::numeric_limits<int>::max()) return "more than 2^31 - 1 blocks of 16 query rows";
  return "";
}

void run_v1_simt_online(const klab::Launch& l) {
  const AttnArgs a = attn_args(l);
  const i64 blocks = static_cast<i64>(a.B) * a.Hq * ((a.Sq + kV1Rows - 1) / kV1Rows);
  if (blocks == 0) return;
  const float scale = 1.f / std::sqrt(static_cast<float>(a.d));
  auto go = [&]<class T, int D>() {
    attention_fwd_v1_simt_online<T, D><<<static_cast<unsigned>(blocks), kV1Warps * 32, 0, a.stream>>>(a, scale);
  };
  dispatch_dtype_dim(l.problem, go);
  KLAB_CHECK_LAUNCH();
}

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "attention_fwd", .name = "v1_simt_online",
                                   .summary = "fp32 on the CUDA cores: 2 query rows a warp, K/V tiles of 32 "
                                              "keys in shared memory, the online softmax (running max and sum, "
                                              "output rescaled) in registers",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v1,
                                   .run = run_v1_simt_online}));

}  // namespace
}  // namespace lesson09
