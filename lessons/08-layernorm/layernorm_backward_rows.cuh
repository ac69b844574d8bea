// lessons/08-layernorm/layernorm_backward_rows.cuh — the fused layernorm backward's body, a
// row group working through its rows with dx from registers and the column sums kept as the
// rows go by, and the epilogues that store its dx: layernorm_backward.cu's v2_fused_partials,
// v3_fused_atomics, rmsnorm's v1_fused_partials and dropout_residual_layernorm_backward's
// v2_fused_residual_dropout are this body with different flags and stores.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../07-dropout/dropout.cuh"
#include "klab/device/mbarrier.cuh"
#include "klab/device/philox.cuh"
#include "klab/device/vec.cuh"
#include "klab/device/warp.cuh"
#include "klab/kernels.cuh"

namespace lesson08 {

// The fused body's default epilogue: dx, a vector of VEC elements at flat index i0, stored
// in the dtype (one 16-byte store where VEC fills it).
template <class T>
struct StoreDx {
  static constexpr bool kResidual = false;          // reads no residual gradient
  template <int VEC>
  __device__ __forceinline__ void store(T* __restrict__ g_dx, std::int64_t i0, const float (&dx)[VEC]) const {
    klab::Vec<T, VEC> out;
#pragma unroll
    for (int i = 0; i < VEC; ++i) out.v[i] = klab::from_f32<T>(dx[i]);
    *reinterpret_cast<klab::Vec<T, VEC>*>(g_dx + i0) = out;
  }
};

// dropout_residual_layernorm_backward's epilogue (residual_layernorm_ops.cu has the op): the
// residual stream's gradient dres joins the layernorm's, dr = dres + dx, stored as the op's
// dx; and the dropout's backward, dh = dr * keep / (1 - p), with the keep mask drawn again
// from the forward's (seed, offset) (klab/device/philox.cuh, lesson 07's stream), never read.
// Both from dr in fp32: one rounding each.
// store() loads dres's vector itself; store_with() takes it already loaded (the ring version,
// layernorm_backward_ring.cu, copies it into shared memory a row ahead).
template <class T>
struct ResidualDropoutStore {
  static constexpr bool kResidual = true;           // reads dres at dx's index
  const T* __restrict__ g_dres;
  T* __restrict__ g_dh;
  lesson07::DropoutArgs drop;
  template <int VEC>
  __device__ __forceinline__ void store(T* __restrict__ g_dx, std::int64_t i0, const float (&dx)[VEC]) const {
    store_with<VEC>(g_dx, i0, dx, *reinterpret_cast<const klab::Vec<T, VEC>*>(g_dres + i0));
  }
  template <int VEC>
  __device__ __forceinline__ void store_with(T* __restrict__ g_dx, std::int64_t i0, const float (&dx)[VEC],
                                             const klab::Vec<T, VEC>& res) const {
    using V = klab::Vec<T, VEC>;
    bool keep[VEC];
    klab::dropout_keep_run<VEC>(drop.seed, drop.offset, static_cast<std::uint64_t>(i0), drop.threshold, keep);
    V out_dx, out_dh;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float dr = dx[i] + klab::to_f32(res.v[i]);
      out_dx.v[i] = klab::from_f32<T>(dr);
      out_dh.v[i] = klab::from_f32<T>(keep[i] ? dr * drop.scale : 0.0f);
    }
    *reinterpret_cast<V*>(g_dx + i0) = out_dx;
    *reinterpret_cast<V*>(g_dh + i0) = out_dh;
  }
};

// The body both kernels share. A block of `groups` row groups of `tpr` threads (tpr a
// multiple of 32: a warp serves one row only) works through rows a group at a time: group q
// of block b takes rows groups * b + q, then every groups * gridDim rows further. Thread t of
// a group holds the row's vectors t, t + tpr, ... (NV of them, VEC elements each): columns
// (t + k tpr) VEC + i. Its running dgamma and dbeta for those columns live in shared memory at
// the same column index, one pair of rows of s_acc a group, so no two threads touch a slot.
// A group waits only for its own warps (named barrier q + 1), never for the block, and
// PREFETCH (where the registers allow) loads the group's next row while this one is reduced
// and written: the loads of one row overlap the barrier and the stores of the last.
// ATOMIC: the block's sums go into dgamma and dbeta by atomicAdd, else into its partial row.
// RMS: rmsnorm's backward — no mean (xhat = x * rstd), no c1, no dbeta.
// Epi: what becomes of a vector of dx (fp32, VEC elements from column `col` of `row`):
// StoreDx stores it; dropout_residual_layernorm_backward's adds the residual's gradient and
// writes the dropout's too (ResidualDropoutStore).
template <class T, int VEC, int NV, bool ATOMIC, bool RMS = false, class Epi = StoreDx<T>>
__device__ __forceinline__ void ln_bwd_fused_rows(const T* __restrict__ g_x, const T* __restrict__ g_gamma,
                                                  const T* __restrict__ g_dy, const float* __restrict__ g_mean,
                                                  const float* __restrict__ g_rstd, T* __restrict__ g_dx,
                                                  float* __restrict__ out_dg, float* __restrict__ out_db, std::int64_t rows,
                                                  int cols, int tpr, const Epi& epi = Epi{}) {
  static_assert(NV * VEC <= 16, "at most 16 elements of x and of dy a thread (1024 threads: 64 registers)");
  // The next row's x and dy: 2 x 16 bytes a thread at most, or no prefetch.
  constexpr bool PREFETCH = NV * VEC * sizeof(T) <= 16;
  // The running dgamma and dbeta: in registers up to 8 columns a thread, else (16 columns,
  // rows past 8192) in the thread's shared-memory slots, read and written every row.
  constexpr bool ACC_SMEM = NV * VEC > 8;
  constexpr int AW = VEC < 4 ? VEC : 4, AP = VEC / AW;   // a vector's slots: AP pieces of AW floats
  using V = klab::Vec<T, VEC>;
  using A = klab::Vec<float, AW>;
  extern __shared__ float4 s_raw[];                 // 16-byte aligned dynamic shared memory
  A* s_acc = reinterpret_cast<A*>(s_raw);           // (groups, 2, tpr * NV * AP) of A
  __shared__ float2 s_part[2][32];                  // each warp's (sum g, sum g xhat), by row parity
  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const int groups = static_cast<int>(blockDim.x) / tpr, q = tid / tpr, t = tid % tpr;
  const int slots = tpr * NV * AP;                  // A's per accumulator row
  A* acc_dg = s_acc + (2 * q) * slots;
  A* acc_db = acc_dg + slots;
  const auto col = [&](int k) { return (t + k * tpr) * VEC; };
  const auto slot = [&](int k, int p) { return (t + k * tpr) * AP + p; };   // float col(k) + p AW
  A r_dg[ACC_SMEM ? 1 : NV][AP], r_db[ACC_SMEM ? 1 : NV][AP];   // registers' accumulators
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int p = 0; p < AP; ++p) {
      if constexpr (ACC_SMEM) acc_dg[slot(k, p)] = acc_db[slot(k, p)] = A{};
      else r_dg[k][p] = r_db[k][p] = A{};
    }

  // The row's x and dy as loaded (r_), and the next row's (n_) when prefetching. Kept for
  // the second pass: x as loaded (xhat is computed again from it: no load, and half the
  // registers in bf16) and g = dy * gamma in fp32 (so that the second pass reads nothing).
  // A column past cols stays unloaded; `in` masks every use of it. The prefetch reads the
  // last row again rather than test the row: an unpredicated load is a plain register move
  // to hand over.
  V r_x[NV], r_dy[NV], n_x[PREFETCH ? NV : 1], n_dy[PREFETCH ? NV : 1];
  float r_g[NV][VEC];                               // (NV, VEC) per thread
  const auto load = [&](V* to_x, V* to_dy, std::int64_t row) {
    row = row < rows ? row : rows - 1;
#pragma unroll
    for (int k = 0; k < NV; ++k)
      if (col(k) < cols) {                          // cols is a multiple of VEC
        to_x[k] = *reinterpret_cast<const V*>(g_x + row * cols + col(k));
        to_dy[k] = *reinterpret_cast<const V*>(g_dy + row * cols + col(k));
      } else {                                      // else the last row's values would stay
        to_x[k] = V{};                              // live across the loop: twice the registers
        to_dy[k] = V{};
      }
  };
  // Every group makes the same number of trips (a group past the last row idles through its
  // last one): the named barriers of all groups then count alike, which compute-sanitizer's
  // racecheck needs to follow them (with uneven trip counts it reports the final
  // __syncthreads as no barrier at all).
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * groups;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * groups;
  if constexpr (PREFETCH) load(n_x, n_dy, first + q);
  for (std::int64_t base = first, parity = 0; base < rows; base += stride, parity ^= 1) {
    const std::int64_t row = base + q;
    const bool active = row < rows;
    if constexpr (PREFETCH) {
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        r_x[k] = n_x[k];
        r_dy[k] = n_dy[k];
      }
      load(n_x, n_dy, row + stride);                // in flight while this row is worked on
    } else {
      load(r_x, r_dy, row);
    }
    const float mean = active && !RMS ? g_mean[row] : 0.f, rstd = active ? g_rstd[row] : 0.f;
    float s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const bool in = active && col(k) < cols;
      V gv{};
      if (in) gv = *reinterpret_cast<const V*>(g_gamma + col(k));
      A dg[AP], db[AP];
#pragma unroll
      for (int p = 0; p < AP; ++p) {
        dg[p] = ACC_SMEM ? acc_dg[slot(k, p)] : r_dg[ACC_SMEM ? 0 : k][p];
        db[p] = ACC_SMEM ? acc_db[slot(k, p)] : r_db[ACC_SMEM ? 0 : k][p];
      }
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float d = in ? klab::to_f32(r_dy[k].v[i]) : 0.f;
        const float xh = in ? (klab::to_f32(r_x[k].v[i]) - mean) * rstd : 0.f;
        const float g = in ? d * klab::to_f32(gv.v[i]) : 0.f;   // gv is unloaded when !in
        r_g[k][i] = g;
        s1 += g;
        s2 += g * xh;
        dg[i / AW].v[i % AW] += d * xh;
        if constexpr (!RMS) db[i / AW].v[i % AW] += d;
      }
#pragma unroll
      for (int p = 0; p < AP; ++p) {
        if constexpr (ACC_SMEM) {
          acc_dg[slot(k, p)] = dg[p];
          acc_db[slot(k, p)] = db[p];
        } else {
          r_dg[k][p] = dg[p];
          r_db[k][p] = db[p];
        }
      }
    }
    // The group's two sums: shuffles in each warp, then the group's warps through s_part.
    // One barrier a row: a warp writes s_part[parity] again two rows on, past the next
    // barrier, which every warp of the group reaches only after reading it.
    s1 = klab::warp_sum(s1);
    s2 = klab::warp_sum(s2);
    if (lane == 0) s_part[parity][warp] = make_float2(s1, s2);
    klab::named_barrier_sync(static_cast<std::uint32_t>(q + 1), static_cast<std::uint32_t>(tpr));
    float c1 = 0.f, c2 = 0.f;
    for (int w = q * (tpr >> 5); w < (q + 1) * (tpr >> 5); ++w) {
      c1 += s_part[parity][w].x;
      c2 += s_part[parity][w].y;
    }
    c1 = RMS ? 0.f : c1 / static_cast<float>(cols);
    c2 /= static_cast<float>(cols);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      if (!active || col(k) >= cols) continue;
      float dx[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float xh = (klab::to_f32(r_x[k].v[i]) - mean) * rstd;
        dx[i] = rstd * (r_g[k][i] - c1 - xh * c2);
      }
      epi.template store<VEC>(g_dx, row * cols + col(k), dx);
    }
  }
  // The block's sums: column c's slot is float c of each accumulator row; add the groups'.
  if constexpr (!ACC_SMEM)
#pragma unroll
    for (int k = 0; k < NV; ++k)
#pragma unroll
      for (int p = 0; p < AP; ++p) {
        acc_dg[slot(k, p)] = r_dg[k][p];
        acc_db[slot(k, p)] = r_db[k][p];
      }
  __syncthreads();
  const float* f_acc = reinterpret_cast<const float*>(s_acc);
  const int row_floats = slots * AW;
  for (int c = tid; c < cols; c += static_cast<int>(blockDim.x)) {
    float dg = 0.f, db = 0.f;
    for (int g = 0; g < groups; ++g) {
      dg += f_acc[(2 * g) * row_floats + c];
      db += f_acc[(2 * g + 1) * row_floats + c];
    }
    if constexpr (ATOMIC) {
      atomicAdd(out_dg + c, dg);
      if constexpr (!RMS) atomicAdd(out_db + c, db);
    } else {
      out_dg[static_cast<std::int64_t>(blockIdx.x) * cols + c] = dg;
      if constexpr (!RMS) out_db[static_cast<std::int64_t>(blockIdx.x) * cols + c] = db;
    }
  }
}

}  // namespace lesson08
