// lessons/08-layernorm/layernorm_backward_ring.cu — the fused layernorm backward with its
// loads staged through shared memory, two rows ahead.
//
// Impls registered here (op layernorm_backward, one of rmsnorm_backward and one of
// dropout_residual_layernorm_backward):
//   v4_cp_async_ring  v2_fused_partials (layernorm_backward.cu) whose x and dy reach the
//                     thread through a ring of three shared-memory stages filled by cp.async:
//                     while a group works on row i, the copies of rows i + 1 and i + 2 are in
//                     flight, and no register holds them. Rows of whole 16-byte vectors, up
//                     to 8192 elements (rmsnorm's bf16: 16,384, pass 2 reading the row from
//                     the ring again); one partial a block, added by the same second kernel.
//   v2_cp_async_ring  (op rmsnorm_backward) v4 without the mean, c1 and dbeta.
//   v3_ring_residual_dropout  (op dropout_residual_layernorm_backward) v4 with
//                     v2_fused_residual_dropout's epilogue (dr = dres + dx stored as dx, dh
//                     from the Philox mask drawn again), dres staged in shared memory a row
//                     ahead; two ring stages.
//
// Why: v2 is bound by registers. A 1024-thread block may use 64 registers a thread, and v2's
// thread holds its columns' x and g (up to 16 floats), its running dgamma and dbeta (16
// more), and the next row's x and dy when it prefetches: one block an SM, and at most one
// row a group in flight beyond the current. cp.async writes shared memory without passing
// through registers, so the rows in flight cost none; the thread keeps only its running
// sums and gamma. Each thread copies and reads back only its own slots (slot (k, t) of its
// group, stage s), so waiting for its own copies (cp.async.wait_group) is all the
// synchronisation the data needs; the group's two sums still meet at its named barrier.
// A thread's work per element is also cut to the arithmetic: gamma converted to fp32 once,
// no bounds test on rows that fill the block, xhat and g kept from the first pass, and the
// group's sums added by shuffles (ncu on a first version: 54 instructions an element, the
// schedulers busy 36% of their samples: "selected" and "not selected").
//
//   per row (uniform trip count over the block, as v2):
//     issue the copies of the row two ahead into the stage this thread read last row
//     wait until this thread's copies of this row have landed (wait_group 2)
//     pass 1 from shared memory: sums of g and g * xhat; dgamma, dbeta in registers;
//       xhat and g kept in registers
//     the group's sums (shuffles, named barrier, shuffles)
//     pass 2 from registers: dx
//
// Past 8 columns a thread (bf16 rows of 16,384: 16 a thread at 1024 threads) xhat and g do
// not stay in registers: pass 2 reads x and dy from the ring again (the stage is not
// refilled before the next row) and recomputes them, and gamma is read where it is used (16
// bytes a vector, from L1) instead of kept. Rmsnorm's ring then takes 192 KB (three stages of
// two 32 KB rows); 64 registers, no stack (klab inspect). Layernorm's dbeta sums are 16
// registers more: kept there, its instance spilled (72 bytes of stack a thread) and ran at
// 56.6% of copy at 4096 x 16384, behind v3's 75.0% (H100, 2026-11-26). So they live in
// shared memory after the ring, each thread's 16 words its own (DB_SMEM: a read and a write
// a column a row, 64 KB), and the ring has two stages (this row and the next, 128 KB): 16
// bytes of stack, 81.3% of copy there.
//
//   klab test 08 --op layernorm_backward --impl v4_cp_async_ring
//   klab bench 08 --op layernorm_backward --impl v2_fused_partials,v4_cp_async_ring
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "klab/device.hpp"
#include "klab/device/cp_async.cuh"
#include "klab/device/mbarrier.cuh"
#include "klab/device/vec.cuh"
#include "klab/device/warp.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "layernorm.cuh"
#include "layernorm_backward_rows.cuh"

namespace lesson08 {
namespace {

using i64 = std::int64_t;

constexpr int kStages = 3;              // this row and two ahead
// Elements a thread: 8 keeping xhat and g in registers; 16 (bf16) recomputing them.
constexpr int kKeepMaxPerThread = 8, kRingMaxPerThread = 16;
// The widest row: 1024 threads of 8 elements (the ring: 96 KB in fp32), and in bf16 16.
constexpr int ring_max_cols(int vec) { return 1024 * (vec == 8 ? kRingMaxPerThread : kKeepMaxPerThread); }
// Layernorm past 8 elements a thread keeps its running dbeta sums in shared memory (DB_SMEM,
// the kernel says why), and so has room for two stages only: this row and the next.
constexpr bool db_in_smem(bool rms, int per_thread) { return !rms && per_thread > kKeepMaxPerThread; }
// RESID (v3_ring_residual_dropout): two stages as well, and one more row slice for dres.
constexpr int ring_stages(bool rms, int per_thread, bool resid = false) {
  return resid || db_in_smem(rms, per_thread) ? 2 : kStages;
}

// Grid: persistent blocks (ln_bwd_fused_blocks) of `groups` row groups of tpr threads; the
// rows are shared out as in v2. NV vectors of VEC = 16 / sizeof(T) elements a thread.
// Dynamic shared memory: the ring, (S, groups, 2 tensors, NV, tpr) 16-byte vectors (S =
// ring_stages); then RESID's dres slots, (groups, NV, tpr) vectors; then DB_SMEM's dbeta
// sums, (groups, NV, VEC, tpr) floats. After the last row the ring's bytes hold the block's
// sums, (groups, 2, tpr * NV * VEC) floats (plan_ring keeps them inside the ring).
// RMS: rmsnorm's backward — no mean (xhat = x * rstd), no c1, no dbeta.
// Epi: what becomes of a vector of dx (layernorm_backward_rows.cuh): StoreDx stores it;
// ResidualDropoutStore (Epi::kResidual) adds dres and writes dh too. Its dres vectors come
// through shared memory as well, one row ahead: after the ring, (groups, NV, tpr) 16-byte
// slots, each refilled with the next row's vector as soon as pass 2 has read it, and
// committed as a cp.async group of their own after pass 2. With a two-stage ring the next
// trip's wait_group<1> then leaves only that trip's own x and dy copies in flight: this
// row's x, dy and dres have landed.
template <class T, int NV, bool RMS, class Epi = StoreDx<T>>
__device__ __forceinline__ void ln_bwd_ring_rows(const T* __restrict__ g_x, const T* __restrict__ g_gamma,
                                                 const T* __restrict__ g_dy, const float* __restrict__ g_mean,
                                                 const float* __restrict__ g_rstd, T* __restrict__ g_dx,
                                                 float* __restrict__ part_dg, float* __restrict__ part_db, i64 rows,
                                                 int cols, int tpr, const Epi& epi = Epi{}) {
  constexpr int VEC = klab::kVec16<T>;
  static_assert(NV * VEC <= kRingMaxPerThread, "at most 16 columns a thread: gamma, dgamma and dbeta in registers");
  constexpr bool KEEP = NV * VEC <= kKeepMaxPerThread;  // xhat and g kept for pass 2
  constexpr bool DB_SMEM = db_in_smem(RMS, NV * VEC);     // dbeta's running sums in shared memory
  constexpr bool RESID = Epi::kResidual;                  // dres staged a row ahead
  constexpr int S = ring_stages(RMS, NV * VEC, RESID);    // ring stages
  static_assert(!RESID || S == 2, "dres lands with the row's x and dy only under wait_group<1>");
  using V = klab::Vec<T, VEC>;
  static_assert(sizeof(V) == 16, "one cp.async moves one 16-byte vector");
  extern __shared__ uint4 s_ring[];
  __shared__ float2 s_part[2][32];                  // each warp's (sum g, sum g xhat), by row parity
  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const int groups = static_cast<int>(blockDim.x) / tpr, q = tid / tpr, t = tid % tpr;
  const auto col = [&](int k) { return (t + k * tpr) * VEC; };
  // Stage s, tensor (0: x, 1: dy), vector k of this thread: consecutive threads, consecutive
  // 16-byte slots (no bank conflicts), and no slot read by another thread.
  const auto slot = [&](int s, int tensor, int k) { return &s_ring[(((s * groups + q) * 2 + tensor) * NV + k) * tpr + t]; };

  // KEEP: gamma in fp32 registers, converted once. Otherwise its 16 registers are the ones
  // that do not fit: each pass reads the thread's gamma vectors again (16 bytes each, L1).
  float r_gamma[KEEP ? NV : 1][VEC];
  float r_dg[NV][VEC], r_db[DB_SMEM ? 1 : NV][VEC];  // this thread's columns' running sums
  // DB_SMEM: dbeta's sums after the ring, slot (k, i) of thread t at [((q NV + k) VEC + i) tpr
  // + t] (consecutive threads, consecutive words), read and written by this thread alone.
  uint4* s_res = s_ring + S * groups * 2 * NV * tpr;           // RESID: (groups, NV, tpr) dres vectors
  float* s_db = reinterpret_cast<float*>(s_res + (RESID ? groups * NV * tpr : 0));
  const auto res_slot = [&](int k) { return &s_res[(q * NV + k) * tpr + t]; };
  const auto db_slot = [&](int k, int i) { return ((q * NV + k) * VEC + i) * tpr + t; };
  const auto gamma_vec = [&](int k) {
    V gv{};
    if (col(k) < cols) gv = *reinterpret_cast<const V*>(g_gamma + col(k));
    return gv;
  };
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const V gv = gamma_vec(k);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      if constexpr (KEEP) r_gamma[k][i] = col(k) < cols ? klab::to_f32(gv.v[i]) : 0.f;
      r_dg[k][i] = 0.f;
      if constexpr (DB_SMEM) s_db[db_slot(k, i)] = 0.f;
      else r_db[k][i] = 0.f;
    }
  }
  const auto gamma_at = [&](int k, int i, const V& gv) {
    if constexpr (KEEP) return r_gamma[k][i];
    else return col(k) < cols ? klab::to_f32(gv.v[i]) : 0.f;
  };

  const i64 stride = static_cast<i64>(gridDim.x) * groups;
  const i64 first = static_cast<i64>(blockIdx.x) * groups;
  // The copies of the group's row in trip `base` into stage s; one commit a trip always (an
  // empty group past the last row), so that wait_group counts trips.
  const auto stage = [&](i64 base, int s) {
    const i64 row = base + q;
    if (row < rows)
#pragma unroll
      for (int k = 0; k < NV; ++k)
        if (col(k) < cols) {
          klab::cp_async_16_full(klab::smem_u32(slot(s, 0, k)), g_x + row * cols + col(k));
          klab::cp_async_16_full(klab::smem_u32(slot(s, 1, k)), g_dy + row * cols + col(k));
        }
    klab::cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) stage(first + s * stride, s);
  // RESID: dres of the group's row in trip `base`, vector k, into its slot (no commit).
  const auto stage_res = [&](i64 base, int k) {
    if constexpr (RESID) {
      const i64 row = base + q;
      if (row < rows && col(k) < cols)
        klab::cp_async_16_full(klab::smem_u32(res_slot(k)), epi.g_dres + row * cols + col(k));
    }
  };
  if constexpr (RESID) {
#pragma unroll
    for (int k = 0; k < NV; ++k) stage_res(first, k);
    klab::cp_async_commit();
  }

  // Rows that fill every thread's vectors (the bench shapes) take the first pass without a
  // test an element: a block-uniform branch between two copies of it.
  const bool whole = cols == tpr * NV * VEC;
  const int wpg = tpr >> 5;                         // warps a group
  int cur = 0;                                      // the stage of this trip's row
  for (i64 base = first, parity = 0; base < rows; base += stride, parity ^= 1) {
    // The stage refilled here was read (by this thread alone) in the last trip, in program
    // order before this copy; the copy's write lands only after its global load returns.
    asm volatile("" ::: "memory");
    stage(base + (S - 1) * stride, (cur + S - 1) % S);
    klab::cp_async_wait<S - 1>();             // this thread's copies of this row are in
    const i64 row = base + q;
    const bool active = row < rows;
    const float mean = active && !RMS ? g_mean[row] : 0.f, rstd = active ? g_rstd[row] : 0.f;
    // Pass 1, from shared memory: xhat and g kept in registers for pass 2; the row's sums;
    // this thread's columns' dgamma and dbeta.
    float r_xh[NV][VEC], r_g[NV][VEC];              // (NV, VEC) per thread
    float s1 = 0.f, s2 = 0.f;
    const auto pass1 = [&]<bool ALL_IN>() {
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        const bool in = ALL_IN || (active && col(k) < cols);
        const V xv = *reinterpret_cast<const V*>(slot(cur, 0, k));   // not used unless `in`
        const V dv = *reinterpret_cast<const V*>(slot(cur, 1, k));
        float gk[VEC];                              // gamma of these columns, fp32
        if constexpr (KEEP) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) gk[i] = r_gamma[k][i];
        } else {
          const V gv = gamma_vec(k);
#pragma unroll
          for (int i = 0; i < VEC; ++i) gk[i] = gamma_at(k, i, gv);
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float d = in ? klab::to_f32(dv.v[i]) : 0.f;
          const float xh = in ? (klab::to_f32(xv.v[i]) - mean) * rstd : 0.f;
          const float g = d * gk[i];                // 0 where !in: d is 0, gamma 0
          if constexpr (KEEP) {
            r_xh[k][i] = xh;
            r_g[k][i] = g;
          }
          s1 += g;
          s2 += g * xh;
          r_dg[k][i] += d * xh;
          if constexpr (DB_SMEM) s_db[db_slot(k, i)] += d;
          else if constexpr (!RMS) r_db[k][i] += d;
        }
      }
    };
    if (whole && active) pass1.template operator()<true>();
    else pass1.template operator()<false>();
    // The group's two sums: shuffles in each warp, the warps' pairs through s_part (one
    // named barrier a row, s_part by row parity, as v2), then each warp adds the group's
    // pairs lane-parallel: a shuffle sum instead of a loop over up to 32 pairs.
    s1 = klab::warp_sum(s1);
    s2 = klab::warp_sum(s2);
    if (lane == 0) s_part[parity][warp] = make_float2(s1, s2);
    klab::named_barrier_sync(static_cast<std::uint32_t>(q + 1), static_cast<std::uint32_t>(tpr));
    const float2 pair = lane < wpg ? s_part[parity][q * wpg + lane] : make_float2(0.f, 0.f);
    const float c1 = RMS ? 0.f : klab::warp_sum(pair.x) / static_cast<float>(cols);
    const float c2 = klab::warp_sum(pair.y) / static_cast<float>(cols);
    // Pass 2, from registers (or, !KEEP, from the ring again): dx = rstd (g - c1 - xhat c2)
    // = rstd g + (-rstd c2) xhat - rstd c1.
    const float b = -rstd * c1, c = -rstd * c2;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      if (!active || col(k) >= cols) continue;    // (then the next row is past the end too)
      float dx[VEC];
      if constexpr (KEEP) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) dx[i] = fmaf(rstd, r_g[k][i], fmaf(c, r_xh[k][i], b));
      } else {
        const V xv = *reinterpret_cast<const V*>(slot(cur, 0, k));
        const V dv = *reinterpret_cast<const V*>(slot(cur, 1, k));
        const V gv = gamma_vec(k);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float xh = (klab::to_f32(xv.v[i]) - mean) * rstd;
          const float g = klab::to_f32(dv.v[i]) * gamma_at(k, i, gv);
          dx[i] = fmaf(rstd, g, fmaf(c, xh, b));
        }
      }
      if constexpr (RESID) {
        // The slot is read, then refilled with the next row's vector: the read is first in
        // this thread's program order, and the copy's write lands only after its global load.
        const V res = *reinterpret_cast<const V*>(res_slot(k));
        asm volatile("" ::: "memory");
        stage_res(base + stride, k);
        epi.template store_with<VEC>(g_dx, row * cols + col(k), dx, res);
      } else {
        epi.template store<VEC>(g_dx, row * cols + col(k), dx);
      }
    }
    if constexpr (RESID) klab::cp_async_commit();   // the next row's dres: a group of its own
    cur = cur + 1 == S ? 0 : cur + 1;
  }
  klab::cp_async_wait<0>();                         // the trailing copies (past the last row)
  __syncthreads();                                  // every thread is done with the ring

  // The block's sums: group q's running sums at float c of its two rows, then added over the
  // groups in a fixed order.
  float* f_acc = reinterpret_cast<float*>(s_ring);
  const int row_floats = tpr * NV * VEC;
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      f_acc[(2 * q) * row_floats + col(k) + i] = r_dg[k][i];
      if constexpr (DB_SMEM) f_acc[(2 * q + 1) * row_floats + col(k) + i] = s_db[db_slot(k, i)];
      else f_acc[(2 * q + 1) * row_floats + col(k) + i] = r_db[k][i];
    }
  __syncthreads();
  for (int c = tid; c < cols; c += static_cast<int>(blockDim.x)) {
    float dg = 0.f, db = 0.f;
    for (int g = 0; g < groups; ++g) {
      dg += f_acc[(2 * g) * row_floats + c];
      db += f_acc[(2 * g + 1) * row_floats + c];
    }
    part_dg[static_cast<i64>(blockIdx.x) * cols + c] = dg;
    if constexpr (!RMS) part_db[static_cast<i64>(blockIdx.x) * cols + c] = db;
  }
}

template <class T, int NV>
__global__ void __launch_bounds__(1024)
layernorm_bwd_v4_cp_async_ring(const T* __restrict__ g_x, const T* __restrict__ g_gamma, const T* __restrict__ g_dy,
                               const float* __restrict__ g_mean, const float* __restrict__ g_rstd,
                               T* __restrict__ g_dx, float* __restrict__ part_dg, float* __restrict__ part_db,
                               i64 rows, int cols, int tpr) {
  ln_bwd_ring_rows<T, NV, false>(g_x, g_gamma, g_dy, g_mean, g_rstd, g_dx, part_dg, part_db, rows, cols, tpr);
}

// dropout_residual_layernorm_backward's v3_ring_residual_dropout: v4 whose dx epilogue adds
// the residual's gradient and writes the dropout's (ResidualDropoutStore), dres staged in
// shared memory a row ahead.
template <class T, int NV>
__global__ void __launch_bounds__(1024)
dropout_residual_layernorm_bwd_v3_ring_residual_dropout(
    const T* __restrict__ g_x, const T* __restrict__ g_gamma, const T* __restrict__ g_dy,
    const float* __restrict__ g_mean, const float* __restrict__ g_rstd, T* __restrict__ g_dx,
    float* __restrict__ part_dg, float* __restrict__ part_db, i64 rows, int cols, int tpr,
    ResidualDropoutStore<T> epi) {
  ln_bwd_ring_rows<T, NV, false, ResidualDropoutStore<T>>(g_x, g_gamma, g_dy, g_mean, g_rstd, g_dx, part_dg, part_db,
                                                          rows, cols, tpr, epi);
}

// rmsnorm_backward's v2_cp_async_ring: the same without the mean, c1 and dbeta.
template <class T, int NV>
__global__ void __launch_bounds__(1024)
rmsnorm_bwd_v2_cp_async_ring(const T* __restrict__ g_x, const T* __restrict__ g_gamma, const T* __restrict__ g_dy,
                             const float* __restrict__ g_rstd, T* __restrict__ g_dx, float* __restrict__ part_dg,
                             i64 rows, int cols, int tpr) {
  ln_bwd_ring_rows<T, NV, true>(g_x, g_gamma, g_dy, nullptr, g_rstd, g_dx, part_dg, nullptr, rows, cols, tpr);
}

struct RingPlan {
  int tpr = 0, nv = 0, groups = 0;
  std::size_t smem = 0;
};
// The fewest vectors a thread (NV * VEC <= 8, bf16 16) that keep a row group within 1024
// threads, and as many groups as fit in 1024 threads (at most 15: named barriers 1..15), if
// the ring fits the block's shared memory (192 KB at most: fp32 rows of 8192, bf16 of 16,384;
// RESID adds a row slice of dres: 224 KB for layernorm's bf16 rows of 16,384).
RingPlan plan_ring(i64 cols, int vec, bool rms, std::size_t smem_limit, bool resid = false) {
  for (int nv = 1; nv * vec * 1024 <= ring_max_cols(vec); nv *= 2) {
    const i64 tpr = klab::ceil_div<i64>(klab::ceil_div<i64>(cols, static_cast<i64>(vec) * nv), 32) * 32;
    if (tpr > 1024) continue;
    const int groups = static_cast<int>(std::min<i64>(15, 1024 / tpr));
    const std::size_t threads = static_cast<std::size_t>(groups) * static_cast<std::size_t>(tpr);
    const std::size_t ring = ring_stages(rms, nv * vec, resid) * threads * 2 * static_cast<std::size_t>(nv) * 16;
    const std::size_t res = resid ? threads * static_cast<std::size_t>(nv) * 16 : 0;
    const std::size_t sums = threads * 2 * static_cast<std::size_t>(nv * vec) * sizeof(float);
    // DB_SMEM: dbeta's sums after the ring (the block's sums, written over the ring at the
    // end, must not reach them: in bf16 they are the ring's size exactly).
    const std::size_t db = db_in_smem(rms, nv * vec) ? threads * static_cast<std::size_t>(nv * vec) * sizeof(float) : 0;
    if (db > 0 && sums > ring) return {};
    const std::size_t smem = std::max(ring + res + db, sums);   // the sums overlay the ring only
    if (smem > smem_limit) return {};
    return {static_cast<int>(tpr), nv, groups, smem};
  }
  return {};
}

// RESID: dropout_residual_layernorm_backward (inputs x, gamma, dy, mean, rstd as
// layernorm_backward's, then dres; outputs dx, dgamma, dbeta, then dh).
template <bool RMS, bool RESID = false>
void run_ring(const klab::Launch& l) {
  const LnBwdArgs a = RMS ? rms_bwd_args(l) : ln_bwd_args(l);
  const int cols = static_cast<int>(a.cols);
  int blocks = 0;
  auto* part = static_cast<float*>(l.workspace);    // (2, blocks, cols)
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    if (a.rows == 0) return;
    constexpr int VEC = klab::kVec16<T>;
    KLAB_REQUIRE(klab::aligned16(a.x) && klab::aligned16(a.dy) && klab::aligned16(a.gamma) && klab::aligned16(a.dx) &&
                     (!RESID || (klab::aligned16(l.in[5].data) && klab::aligned16(l.out[3].data))),
                 "cp_async_ring: tensors must be 16-byte aligned");
    const RingPlan pl = plan_ring(cols, VEC, RMS, klab::device_info().smem_per_block_optin, RESID);
    KLAB_REQUIRE(pl.nv > 0, "cp_async_ring: row too long (supports() should have said so)");
    const auto go = [&]<int NV>() {
      // Each op's own instance only (rmsnorm's bf16 NV = 2 has no layernorm twin).
      const void* fn;
      if constexpr (RMS) fn = reinterpret_cast<const void*>(rmsnorm_bwd_v2_cp_async_ring<T, NV>);
      else if constexpr (RESID)
        fn = reinterpret_cast<const void*>(dropout_residual_layernorm_bwd_v3_ring_residual_dropout<T, NV>);
      else fn = reinterpret_cast<const void*>(layernorm_bwd_v4_cp_async_ring<T, NV>);
      {   // the most any width needs, once an instantiation and GPU
        constexpr int PER = NV * VEC, db = db_in_smem(RMS, PER) ? 1024 * PER * 4 : 0, res = RESID ? 1024 * NV * 16 : 0;
        klab::allow_dynamic_smem(fn, ring_stages(RMS, PER, RESID) * 1024 * 2 * NV * 16 + res + db);
      }
      blocks = ln_bwd_fused_blocks(fn, pl.groups * pl.tpr, pl.smem, pl.groups, a.rows);
      KLAB_REQUIRE(static_cast<std::size_t>(blocks) * 2 * sizeof(float) * cols <= l.workspace_bytes,
                   "cp_async_ring: more partials than the workspace holds");
      const auto grid = static_cast<unsigned>(blocks);
      const auto* x = static_cast<const T*>(a.x);
      const auto* gamma = static_cast<const T*>(a.gamma);
      const auto* dy = static_cast<const T*>(a.dy);
      if constexpr (RMS)
        rmsnorm_bwd_v2_cp_async_ring<T, NV><<<grid, pl.groups * pl.tpr, pl.smem, l.stream>>>(
            x, gamma, dy, a.rstd, static_cast<T*>(a.dx), part, a.rows, cols, pl.tpr);
      else if constexpr (RESID)
        dropout_residual_layernorm_bwd_v3_ring_residual_dropout<T, NV>
            <<<grid, pl.groups * pl.tpr, pl.smem, l.stream>>>(
                x, gamma, dy, a.mean, a.rstd, static_cast<T*>(a.dx), part, part + static_cast<i64>(blocks) * cols,
                a.rows, cols, pl.tpr,
                ResidualDropoutStore<T>{l.in[5].as<const T>(), l.out[3].as<T>(), lesson07::dropout_args(l)});
      else
        layernorm_bwd_v4_cp_async_ring<T, NV><<<grid, pl.groups * pl.tpr, pl.smem, l.stream>>>(
            x, gamma, dy, a.mean, a.rstd, static_cast<T*>(a.dx), part, part + static_cast<i64>(blocks) * cols, a.rows,
            cols, pl.tpr);
    };
    if (pl.nv == 1) go.template operator()<1>();
    else go.template operator()<2>();             // fp32: 8 elements a thread; bf16: 16
  });
  ln_bwd_column_sums(part, blocks, a, l.stream);    // no rows: 0 partials, and 0 is written
  KLAB_CHECK_LAUNCH();
}

// Both ops' ring versions take the same rows.
std::string supports_ring(const klab::Problem& p) {
  const int vec = static_cast<int>(16 / klab::dtype_size(p.dtype));
  if (p.shape[1] % vec != 0) return "rows of whole 16-byte vectors only (cp.async moves 16 bytes)";
  if (p.shape[1] > ring_max_cols(vec))
    return vec == 8 ? "rows longer than 16,384 elements: 16 columns a thread at most (the README says why)"
                    : "rows longer than 8192 elements: 8 columns a thread at most (the README says why)";
  if (klab::device_info().cc_major > 0 && klab::device_info().cc_major < 8) return "cp.async needs compute capability 8.0";
  return "";
}

// v3_ring_residual_dropout: the ring's rows, whose ring and dres slice must fit the device's
// shared memory (224 KB at 16,384 bf16 columns: more than an A100's 163 KB).
std::string supports_ring_residual(const klab::Problem& p) {
  if (std::string why = supports_ring(p); !why.empty()) return why;
  const std::size_t limit = klab::device_info().smem_per_block_optin;
  const int vec = static_cast<int>(16 / klab::dtype_size(p.dtype));
  if (limit > 0 && plan_ring(p.shape[1], vec, false, limit, true).nv == 0)
    return "the ring and the row of dres need more shared memory than this GPU gives a block";
  return "";
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "layernorm_backward", .name = "v4_cp_async_ring",
                                   .summary = "v2 with x and dy staged by cp.async in a three-row shared-memory "
                                              "ring: two rows in flight, none of them in registers",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_ring,
                                   .workspace = ln_bwd_partials_workspace,
                                   .run = run_ring<false>,
                                   .kernels = {"layernorm_bwd_column_sums"}}));
KLAB_REGISTER(klab::register_impl({.op = "dropout_residual_layernorm_backward", .name = "v3_ring_residual_dropout",
                                   .summary = "layernorm_backward's v4 ring whose dx epilogue adds the residual's "
                                              "gradient and writes the dropout's; dres staged a row ahead",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_ring_residual,
                                   .workspace = ln_bwd_partials_workspace,
                                   .run = run_ring<false, true>,
                                   .kernels = {"layernorm_bwd_column_sums"}}));
KLAB_REGISTER(klab::register_impl({.op = "rmsnorm_backward", .name = "v2_cp_async_ring",
                                   .summary = "layernorm_backward's v4_cp_async_ring without the mean, c1 and "
                                              "dbeta: x and dy two rows ahead in a cp.async ring",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_ring,
                                   .workspace = ln_bwd_partials_workspace,
                                   .run = run_ring<true>,
                                   .kernels = {"layernorm_bwd_column_sums"}}));

}  // namespace lesson08
