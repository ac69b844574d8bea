// lessons/08-layernorm/row_plans.hpp — how the layernorm kernels cut a row among threads,
// and how the Triton backward lays out its partials: host arithmetic only, so that
// tests/test_row_plans.cpp checks every width on the CPU (a plan that left a column out, a
// block past 1024 threads or an instance that is not compiled would fail there, not on a GPU).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "klab/math.hpp"

namespace lesson08 {

using i64 = std::int64_t;

// ============================================================================================
// The forward's row in registers (layernorm v2, rmsnorm v1, layernorm_gelu v2, the residual
// block's v2): one block a row
// ============================================================================================

// Threads and vectors a thread for a row of `cols` (NV in 1, 2, 4, ... while NV * VEC <= 32,
// 32 registers of data). With 16-byte vectors: the fewest vectors a thread that keep the
// block at or under 256 threads, and a row too long for that the most (the fewest threads,
// up to 1024). Measured on the H100 (2026-11-26, the bench shapes at 128, 256, 512 and 1024
// threads at most): at 8192x4096 a 1024-thread block of one vector a thread spent its time
// in the block's two reductions (layernorm 102 us in f32, 88 us at 256 threads), and at
// 16384 columns the residual block ran 1.19x faster in bf16 at 512 threads than at 1024.
// The scalar path (VEC = 1: a row not 16-byte aligned) keeps the fewest vectors that fit
// 1024 threads, because its long instances spill (klab inspect: NV = 32 has 48-72 B of
// stack). nv = 0: the row does not fit (more than 32,768 elements).
struct RowPlan {
  int threads = 0, nv = 0;
};
inline RowPlan plan_row_registers(i64 cols, int vec) {
  const auto threads_for = [&](int nv) {
    return klab::ceil_div<i64>(klab::ceil_div<i64>(cols, i64{vec} * nv), 32) * 32;
  };
  if (vec > 1) {
    for (int nv = 1; nv * vec <= 32; nv *= 2)
      if (threads_for(nv) <= 256) return {static_cast<int>(threads_for(nv)), nv};
    const int most = 32 / vec;
    if (threads_for(most) <= 1024) return {static_cast<int>(threads_for(most)), most};
    return {};
  }
  for (int nv = 1; nv <= 32; nv *= 2)
    if (threads_for(nv) <= 1024) return {static_cast<int>(threads_for(nv)), nv};
  return {};
}
inline constexpr i64 kRowRegistersMaxCols = 1024 * 32;

// ============================================================================================
// The fused backward (layernorm v2/v3, rmsnorm v1, the residual block's v2): row groups of
// tpr threads, up to 15 a block
// ============================================================================================

// The fewest vectors a thread (NV = min_nv, 2 min_nv, ... while NV * VEC <= 16) that keep a
// row group at or under 1024 threads, and as many row groups as fit in 1024 threads.
struct FusedPlan {
  int tpr = 0, nv = 0, groups = 0;
  std::size_t smem = 0;                             // s_acc's bytes
};
inline FusedPlan plan_fused(i64 cols, int vec, int min_nv) {
  for (int nv = min_nv; nv * vec <= 16; nv *= 2) {
    const i64 tpr = klab::ceil_div<i64>(klab::ceil_div<i64>(cols, static_cast<i64>(vec) * nv), 32) * 32;
    if (tpr > 1024) continue;
    const int groups = static_cast<int>(std::min<i64>(15, 1024 / tpr));   // named barriers 1..15
    return {static_cast<int>(tpr), nv, groups, sizeof(float) * 2 * static_cast<std::size_t>(groups * tpr * nv * vec)};
  }
  return {};
}

// The plan the fused kernels run: with 16-byte vectors, two a thread (8 elements in f32, 16
// in bf16) unless that leaves lanes of the row group idle that one vector a thread keeps
// busy (bf16 at 768 columns: 48 vectors of two in 64 threads, against 96 of one in 96).
// One vector a thread was the only plan before; measured on the H100 (2026-11-26) it made
// 1024-thread row groups at 4096 columns, whose reductions across 32 warps cost more than
// their loads: layernorm 184 us in f32 and 108 us in bf16, against 142 and 89 at two
// vectors; and at 768 columns in f32 34.0 us, against 29.7. Two vectors in bf16 at 768
// columns measured 29.2 us against one's 26.4. The residual block's bf16 instance of two
// vectors spills 80 B (klab inspect), so it keeps one; the scalar path (VEC = 1) keeps one,
// its long instances spilling too.
inline i64 idle_lanes(const FusedPlan& p, i64 cols, int vec) {
  return p.tpr - klab::ceil_div<i64>(cols, static_cast<i64>(vec) * p.nv);
}
// resid: the residual block's kernel (dropout_residual_layernorm_backward).
inline FusedPlan choose_fused_plan(i64 cols, int vec, bool resid) {
  const FusedPlan one = plan_fused(cols, vec, 1);
  if (vec == 1 || (resid && vec == 8) || one.nv == 0) return one;   // nv 0: the row does not fit
  const FusedPlan two = plan_fused(cols, vec, 2);
  return idle_lanes(two, cols, vec) > idle_lanes(one, cols, vec) ? one : two;
}

// ============================================================================================
// The Triton backward (layernorm_backward_triton.cu): programs and their partial rows
// ============================================================================================

// One wave of programs, as many as are resident on an SM at once for the compiled block
// width (never more than the rows), each taking rows_per_prog consecutive rows; then the
// fewest programs that still take every row. Measured on the H100 (2026-11-26, programs per
// SM 1, 2, 4, 8, 16 at each bench shape), the best was each width's residency: 8 for the
// 1024-wide block (56 registers, 128 threads), 2 for the 4096-wide (100-115 registers, 256
// threads), 1 for the 16384-wide (1024 threads). dbeta's partials start at a multiple of 4
// floats: the compiled kernels take every pointer as 16-byte aligned (the `:16` of their
// signatures) and the launcher Triton links refuses one that is not.
inline i64 triton_bwd_programs_per_sm(i64 cols) { return cols <= 1024 ? 8 : cols <= 4096 ? 2 : 1; }

struct TritonBwdLayout {
  i64 rows_per_prog = 1, programs = 0;   // programs = partial rows
  i64 db_at = 0;                         // dbeta's partials, in floats from the workspace start
  i64 floats = 0;                        // the workspace it uses
};
inline TritonBwdLayout triton_bwd_layout(i64 rows, i64 cols, i64 sms) {
  TritonBwdLayout t;
  const i64 most = std::min(rows, sms * triton_bwd_programs_per_sm(cols));
  if (most <= 0) return t;
  t.rows_per_prog = klab::ceil_div(rows, most);
  t.programs = klab::ceil_div(rows, t.rows_per_prog);
  t.db_at = klab::ceil_div<i64>(t.programs * cols, 4) * 4;
  t.floats = t.db_at + t.programs * cols;
  return t;
}
// The most any layout of (rows, cols) uses: two partial rows a program plus the alignment.
inline std::size_t triton_bwd_workspace(i64 rows, i64 cols, i64 sms) {
  const i64 most = std::min(rows, sms * triton_bwd_programs_per_sm(cols));
  return 2 * sizeof(float) * static_cast<std::size_t>(most * cols) + 16;
}

}  // namespace lesson08
