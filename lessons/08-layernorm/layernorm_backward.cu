// lessons/08-layernorm/layernorm_backward.cu — the layernorm backward: dx a row at a time,
// dgamma and dbeta as sums over the rows, column by column.
//
// Impls registered here (op layernorm_backward, and one of rmsnorm_backward):
//   v1_dx_then_column_sums  two passes over the data. One warp a row writes dx: the row's
//                           sums of g = dy * gamma and g * xhat, then dx from a second read
//                           of the row. Then blocks of 32 columns by a stripe of rows sum
//                           dy * xhat and dy into one partial a stripe, and
//                           layernorm_bwd_column_sums adds the partials. x and dy are read
//                           twice: 5 tensors' traffic for a minimum of 3.
//   v2_fused_partials       one pass: a block takes a group of rows at a time, each row held
//                           in registers (16-byte loads) for its two sums and dx; each thread
//                           adds its columns' dy * xhat and dy into shared memory as the rows
//                           go by, and the block writes one partial a column at the end, which
//                           layernorm_bwd_column_sums adds up. Deterministic. Rows up to 16,384.
//   v3_fused_atomics        v2 whose blocks add their sums straight into dgamma and dbeta with
//                           atomicAdd: no partials, no second kernel. Float addition is not
//                           associative and the blocks finish in a different order every run,
//                           so the last bits of dgamma and dbeta change from run to run (dx
//                           does not): fine for training, wrong where a run must repeat.
//   v1_fused_partials       (op rmsnorm_backward) v2 without the mean, c1 and dbeta.
//   v2_fused_residual_dropout  (op dropout_residual_layernorm_backward) v2 whose epilogue adds
//                           the residual stream's gradient to dx and writes the dropout's
//                           gradient beside it, the keep mask drawn again from (seed, offset).
//
// The shapes a training step gives: rows = tokens (B * T), cols = channels (768 for GPT-2
// small). dgamma and dbeta sum over every token, so there are few columns to share out and
// many rows to add: the sums are split over the rows (one partial a block) and added again.
//
//   klab test 08 --op layernorm_backward
//   klab bench 08 --op layernorm_backward
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "../07-dropout/dropout.cuh"
#include "klab/device.hpp"
#include "klab/device/mbarrier.cuh"
#include "klab/device/philox.cuh"
#include "klab/device/vec.cuh"
#include "klab/device/warp.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "layernorm.cuh"
#include "layernorm_backward_rows.cuh"
#include "row_plans.hpp"

// The op (formulas, inputs, reference, tolerances): layernorm_backward_ops.cu.

namespace lesson08 {
namespace {

using i64 = std::int64_t;

// ============================================================================================
// The second reduction (v1 and v2)
// ============================================================================================

// The end of both column kernels below: a 32 x 32 block's (dg, db) per thread, added over
// ty for each column tx in a fixed order, written to dg_out[c] and db_out[c] (by warps 0
// and 1). Every thread of the block calls it.
__device__ __forceinline__ void add_over_ty(float dg, float db, float* __restrict__ dg_out, float* __restrict__ db_out,
                                            int c, int cols) {
  __shared__ float s_dg[32][33], s_db[32][33];      // (ty, tx), padded: no bank conflicts
  const int tx = threadIdx.x, ty = threadIdx.y;
  s_dg[ty][tx] = dg;
  s_db[ty][tx] = db;
  __syncthreads();
  if (ty < 2 && c < cols && (ty == 0 || db_out != nullptr)) {   // rmsnorm has no dbeta
    float (*s)[33] = ty == 0 ? s_dg : s_db;
    float sum = 0.f;
#pragma unroll 8
    for (int k = 0; k < 32; ++k) sum += s[k][tx];
    (ty == 0 ? dg_out : db_out)[c] = sum;
  }
}

// dgamma[c] = sum over p of part_dg[p][c] (dbeta likewise) for `parts` partial rows.
// Grid: ceil(cols / 32) blocks of 32 x 32 threads; thread (tx, ty) adds the partials ty,
// ty + 32, ... of column 32 bx + tx, and warp 0 and 1 add the 32 results in a fixed order:
// the same bits every run.
__global__ void __launch_bounds__(1024)
layernorm_bwd_column_sums(const float* __restrict__ part_dg, const float* __restrict__ part_db,
                          float* __restrict__ g_dgamma, float* __restrict__ g_dbeta, int parts, int cols) {
  const int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
  float dg = 0.f, db = 0.f;
  if (c < cols)
    for (int p = ty; p < parts; p += 32) {
      dg += part_dg[static_cast<i64>(p) * cols + c];
      if (part_db != nullptr) db += part_db[static_cast<i64>(p) * cols + c];
    }
  add_over_ty(dg, db, g_dgamma, g_dbeta, c, cols);
}

// No dbeta (rmsnorm): only dgamma's partials are read and written.
void launch_column_sums(const float* part, int parts, const LnBwdArgs& a, cudaStream_t stream) {
  const int cols = static_cast<int>(a.cols);
  const float* part_db = a.dbeta != nullptr ? part + static_cast<i64>(parts) * cols : nullptr;
  layernorm_bwd_column_sums<<<static_cast<unsigned>(klab::ceil_div(cols, 32)), dim3(32, 32), 0, stream>>>(
      part, part_db, a.dgamma, a.dbeta, parts, cols);
}

// ============================================================================================
// v1_dx_then_column_sums
// ============================================================================================

constexpr int kV1Warps = 8;         // rows a 256-thread block, for dx
constexpr int kV1MaxStripes = 512;  // the most partials the column pass writes

// dx. Grid: ceil(rows / 8) blocks of 8 warps; warp w of block b takes row 8 b + w.
template <class T>
__global__ void __launch_bounds__(kV1Warps * 32)
layernorm_bwd_v1_warp_dx(const T* __restrict__ g_x, const T* __restrict__ g_gamma, const T* __restrict__ g_dy,
                         const float* __restrict__ g_mean, const float* __restrict__ g_rstd, T* __restrict__ g_dx,
                         i64 rows, int cols) {
  const i64 row = static_cast<i64>(blockIdx.x) * kV1Warps + (threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  if (row >= rows) return;                          // a whole warp leaves together
  const T* x = g_x + row * cols;
  const T* dy = g_dy + row * cols;
  const float mean = g_mean[row], rstd = g_rstd[row];
  float s1 = 0.f, s2 = 0.f;                         // sums of g and g * xhat
  for (int j = lane; j < cols; j += 32) {
    const float xh = (klab::to_f32(x[j]) - mean) * rstd;
    const float g = klab::to_f32(dy[j]) * klab::to_f32(g_gamma[j]);
    s1 += g;
    s2 += g * xh;
  }
  const float c1 = klab::warp_sum(s1) / static_cast<float>(cols);
  const float c2 = klab::warp_sum(s2) / static_cast<float>(cols);
  T* dx = g_dx + row * cols;
  for (int j = lane; j < cols; j += 32) {           // the second read: L1 or L2 for most rows
    const float xh = (klab::to_f32(x[j]) - mean) * rstd;
    const float g = klab::to_f32(dy[j]) * klab::to_f32(g_gamma[j]);
    dx[j] = klab::from_f32<T>(rstd * (g - c1 - xh * c2));
  }
}

// One partial of dgamma and dbeta a stripe. Grid: (ceil(cols / 32), stripes) blocks of
// 32 x 32 threads; thread (tx, ty) of block (bx, by) adds column 32 bx + tx over the rows
// 32 by + ty, then every 32 stripes further; add_over_ty adds the 32 ty.
template <class T>
__global__ void __launch_bounds__(1024)
layernorm_bwd_v1_column_partials(const T* __restrict__ g_x, const T* __restrict__ g_dy,
                                 const float* __restrict__ g_mean, const float* __restrict__ g_rstd,
                                 float* __restrict__ part_dg, float* __restrict__ part_db, i64 rows, int cols) {
  const int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
  float dg = 0.f, db = 0.f;
  if (c < cols)
    for (i64 r = static_cast<i64>(blockIdx.y) * 32 + ty; r < rows; r += static_cast<i64>(gridDim.y) * 32) {
      const float d = klab::to_f32(g_dy[r * cols + c]);
      dg += d * (klab::to_f32(g_x[r * cols + c]) - g_mean[r]) * g_rstd[r];
      db += d;
    }
  add_over_ty(dg, db, part_dg + static_cast<i64>(blockIdx.y) * cols, part_db + static_cast<i64>(blockIdx.y) * cols, c,
              cols);
}

// Stripes of rows for the column pass: about 512 blocks in all (a few per SM), at least 32
// rows a stripe.
int v1_stripes(i64 rows, i64 cols) {
  const i64 by_cols = std::max<i64>(1, kV1MaxStripes / klab::ceil_div<i64>(cols, 32));
  return static_cast<int>(std::min(klab::ceil_div<i64>(rows, 32), by_cols));
}

void run_v1_dx_then_column_sums(const klab::Launch& l) {
  const LnBwdArgs a = ln_bwd_args(l);
  const int cols = static_cast<int>(a.cols);
  const int stripes = v1_stripes(a.rows, a.cols);
  auto* part = static_cast<float*>(l.workspace);    // (2, stripes, cols): dgamma's, dbeta's
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    if (a.rows == 0) return;
    const auto* x = static_cast<const T*>(a.x);
    const auto* dy = static_cast<const T*>(a.dy);
    layernorm_bwd_v1_warp_dx<T><<<static_cast<unsigned>(klab::ceil_div<i64>(a.rows, kV1Warps)), kV1Warps * 32, 0,
                                  l.stream>>>(x, static_cast<const T*>(a.gamma), dy, a.mean, a.rstd,
                                              static_cast<T*>(a.dx), a.rows, cols);
    layernorm_bwd_v1_column_partials<T>
        <<<dim3(static_cast<unsigned>(klab::ceil_div(cols, 32)), static_cast<unsigned>(stripes)), dim3(32, 32), 0,
           l.stream>>>(x, dy, a.mean, a.rstd, part, part + static_cast<i64>(stripes) * cols, a.rows, cols);
  });
  launch_column_sums(part, stripes, a, l.stream);   // no rows: 0 partials, and 0 is written
  KLAB_CHECK_LAUNCH();
}

std::size_t workspace_v1(const klab::Problem& p) {
  return 2 * sizeof(float) * static_cast<std::size_t>(v1_stripes(p.shape[0], p.shape[1]) * p.shape[1]);
}

std::string supports_v1(const klab::Problem& p) {
  if (klab::ceil_div<i64>(p.shape[0], kV1Warps) > 0x7fffffff) return "too many rows for one grid";
  return "";
}

// ============================================================================================
// v2_fused_partials and v3_fused_atomics
// ============================================================================================

// The fused body (ln_bwd_fused_rows) and its dx epilogues: layernorm_backward_rows.cuh.

// Each writes one partial a block: part_dg[blockIdx.x][:], part_db likewise.
template <class T, int VEC, int NV>
__global__ void __launch_bounds__(1024)
layernorm_bwd_v2_fused_partials(const T* __restrict__ g_x, const T* __restrict__ g_gamma, const T* __restrict__ g_dy,
                                const float* __restrict__ g_mean, const float* __restrict__ g_rstd,
                                T* __restrict__ g_dx, float* __restrict__ part_dg, float* __restrict__ part_db,
                                i64 rows, int cols, int tpr) {
  ln_bwd_fused_rows<T, VEC, NV, false>(g_x, g_gamma, g_dy, g_mean, g_rstd, g_dx, part_dg, part_db, rows, cols, tpr);
}

// dgamma and dbeta start at 0 (the launcher clears them) and each block adds into them.
template <class T, int VEC, int NV>
__global__ void __launch_bounds__(1024)
layernorm_bwd_v3_fused_atomics(const T* __restrict__ g_x, const T* __restrict__ g_gamma, const T* __restrict__ g_dy,
                               const float* __restrict__ g_mean, const float* __restrict__ g_rstd,
                               T* __restrict__ g_dx, float* __restrict__ g_dgamma, float* __restrict__ g_dbeta,
                               i64 rows, int cols, int tpr) {
  ln_bwd_fused_rows<T, VEC, NV, true>(g_x, g_gamma, g_dy, g_mean, g_rstd, g_dx, g_dgamma, g_dbeta, rows, cols, tpr);
}

// rmsnorm_backward's v1_fused_partials: v2 without the mean, c1 and dbeta.
template <class T, int VEC, int NV>
__global__ void __launch_bounds__(1024)
rmsnorm_bwd_v1_fused_partials(const T* __restrict__ g_x, const T* __restrict__ g_gamma, const T* __restrict__ g_dy,
                              const float* __restrict__ g_rstd, T* __restrict__ g_dx, float* __restrict__ part_dg,
                              i64 rows, int cols, int tpr) {
  ln_bwd_fused_rows<T, VEC, NV, false, true>(g_x, g_gamma, g_dy, nullptr, g_rstd, g_dx, part_dg, nullptr, rows, cols,
                                             tpr);
}

// dropout_residual_layernorm_backward's v2_fused_residual_dropout: layernorm_backward's v2
// whose dx epilogue adds the residual's gradient and writes the dropout's (ResidualDropoutStore).
template <class T, int VEC, int NV>
__global__ void __launch_bounds__(1024)
dropout_residual_layernorm_bwd_v2_fused_residual_dropout(
    const T* __restrict__ g_x, const T* __restrict__ g_gamma, const T* __restrict__ g_dy,
    const float* __restrict__ g_mean, const float* __restrict__ g_rstd, T* __restrict__ g_dx,
    float* __restrict__ part_dg, float* __restrict__ part_db, i64 rows, int cols, int tpr,
    ResidualDropoutStore<T> epi) {
  ln_bwd_fused_rows<T, VEC, NV, false, false, ResidualDropoutStore<T>>(g_x, g_gamma, g_dy, g_mean, g_rstd, g_dx,
                                                                       part_dg, part_db, rows, cols, tpr, epi);
}

constexpr int kFusedMaxCols = 1024 * 16;

// Blocks that fit the GPU at once (a block never waits for another: each takes its share of
// rows), never more than the rows need. Threads a block >= 480 (15 groups of 32 at the
// least), so at most 4 an SM.
constexpr int kFusedMaxBlocksPerSm = 4;
int fused_blocks(const void* kernel, const FusedPlan& pl, i64 rows) {
  int per_sm = 0;
  KLAB_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, pl.groups * pl.tpr, pl.smem));
  KLAB_REQUIRE(per_sm >= 1, "layernorm_backward: a fused block does not fit on an SM");
  const i64 fit = static_cast<i64>(klab::device_info().sms) * std::min(per_sm, kFusedMaxBlocksPerSm);
  return static_cast<int>(std::min(fit, klab::ceil_div<i64>(rows, pl.groups)));
}

// RESID: dropout_residual_layernorm_backward (inputs x, gamma, dy, mean, rstd as
// layernorm_backward's, then dres; outputs dx, dgamma, dbeta, then dh; the dropout's seed and
// offset its scalars).
template <bool ATOMIC, bool RMS = false, bool RESID = false>
void run_fused(const klab::Launch& l) {
  const LnBwdArgs a = RMS ? rms_bwd_args(l) : ln_bwd_args(l);
  const int cols = static_cast<int>(a.cols);
  if constexpr (ATOMIC) {
    KLAB_CHECK_CUDA(cudaMemsetAsync(a.dgamma, 0, sizeof(float) * static_cast<std::size_t>(cols), l.stream));
    KLAB_CHECK_CUDA(cudaMemsetAsync(a.dbeta, 0, sizeof(float) * static_cast<std::size_t>(cols), l.stream));
  }
  int blocks = 0;
  auto* part = static_cast<float*>(l.workspace);    // v2: (2, blocks, cols)
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    if (a.rows == 0) return;
    constexpr int VEC16 = klab::kVec16<T>;
    bool vec_ok = cols % VEC16 == 0 && klab::aligned16(a.x) && klab::aligned16(a.dy) &&
                  klab::aligned16(a.gamma) && klab::aligned16(a.dx);
    if constexpr (RESID) vec_ok = vec_ok && klab::aligned16(l.in[5].data) && klab::aligned16(l.out[3].data);
    const auto go = [&]<int VEC, int NV>(const FusedPlan& pl) {
      const void* fn = RESID    ? reinterpret_cast<const void*>(
                                      dropout_residual_layernorm_bwd_v2_fused_residual_dropout<T, VEC, NV>)
                       : RMS    ? reinterpret_cast<const void*>(rmsnorm_bwd_v1_fused_partials<T, VEC, NV>)
                       : ATOMIC ? reinterpret_cast<const void*>(layernorm_bwd_v3_fused_atomics<T, VEC, NV>)
                                : reinterpret_cast<const void*>(layernorm_bwd_v2_fused_partials<T, VEC, NV>);
      // The most s_acc any width gives it (1024 threads' slots), once an instantiation and GPU.
      klab::allow_dynamic_smem(fn, static_cast<int>(sizeof(float)) * 2 * 1024 * NV * VEC);
      blocks = fused_blocks(fn, pl, a.rows);
      KLAB_REQUIRE(ATOMIC || static_cast<std::size_t>(blocks) * 2 * sizeof(float) * cols <= l.workspace_bytes,
                   "fused_partials: more partials than the workspace holds");
      const auto grid = static_cast<unsigned>(blocks);
      const auto* x = static_cast<const T*>(a.x);
      const auto* gamma = static_cast<const T*>(a.gamma);
      const auto* dy = static_cast<const T*>(a.dy);
      auto* dx = static_cast<T*>(a.dx);
      if constexpr (RESID)
        dropout_residual_layernorm_bwd_v2_fused_residual_dropout<T, VEC, NV>
            <<<grid, pl.groups * pl.tpr, pl.smem, l.stream>>>(
                x, gamma, dy, a.mean, a.rstd, dx, part, part + static_cast<i64>(blocks) * cols, a.rows, cols, pl.tpr,
                ResidualDropoutStore<T>{l.in[5].as<const T>(), l.out[3].as<T>(), lesson07::dropout_args(l)});
      else if constexpr (RMS)
        rmsnorm_bwd_v1_fused_partials<T, VEC, NV><<<grid, pl.groups * pl.tpr, pl.smem, l.stream>>>(
            x, gamma, dy, a.rstd, dx, part, a.rows, cols, pl.tpr);
      else if constexpr (ATOMIC)
        layernorm_bwd_v3_fused_atomics<T, VEC, NV><<<grid, pl.groups * pl.tpr, pl.smem, l.stream>>>(
            x, gamma, dy, a.mean, a.rstd, dx, a.dgamma, a.dbeta, a.rows, cols, pl.tpr);
      else
        layernorm_bwd_v2_fused_partials<T, VEC, NV><<<grid, pl.groups * pl.tpr, pl.smem, l.stream>>>(
            x, gamma, dy, a.mean, a.rstd, dx, part, part + static_cast<i64>(blocks) * cols, a.rows, cols, pl.tpr);
    };
    const auto by_vec = [&]<int VEC>() {
      const FusedPlan pl = choose_fused_plan(cols, VEC, RESID);
      KLAB_REQUIRE(pl.nv > 0, "layernorm_backward: row too long for the fused kernel (supports() should have said so)");
      switch (pl.nv) {
        case 1: go.template operator()<VEC, 1>(pl); break;
        case 2: go.template operator()<VEC, 2>(pl); break;
        case 4:
          if constexpr (VEC * 4 <= 16) go.template operator()<VEC, 4>(pl);
          break;
        case 8:
          if constexpr (VEC * 8 <= 16) go.template operator()<VEC, 8>(pl);
          break;
        default:
          if constexpr (VEC * 16 <= 16) go.template operator()<VEC, 16>(pl);
      }
    };
    if (vec_ok) by_vec.template operator()<VEC16>();
    else by_vec.template operator()<1>();
  });
  if constexpr (!ATOMIC) launch_column_sums(part, blocks, a, l.stream);   // no rows: writes 0
  KLAB_CHECK_LAUNCH();
}

// The most blocks fused_blocks can choose: workspace for that many partials.
std::size_t workspace_v2(const klab::Problem& p) {
  const i64 blocks = std::min<i64>(p.shape[0], i64{klab::sm_count()} * kFusedMaxBlocksPerSm);
  return 2 * sizeof(float) * static_cast<std::size_t>(blocks * p.shape[1]);
}

std::string supports_fused(const klab::Problem& p) {
  if (p.shape[1] > kFusedMaxCols) return "rows longer than 16,384 elements do not fit one block's registers";
  return "";
}

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "layernorm_backward", .name = "v1_dx_then_column_sums",
                                   .summary = "a warp a row for dx, then column sums of dy * xhat and dy over "
                                              "stripes of rows and a second reduction: x and dy read twice",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v1,
                                   .workspace = workspace_v1,
                                   .run = run_v1_dx_then_column_sums,
                                   .kernels = {"layernorm_bwd_column_sums"}}));
KLAB_REGISTER(klab::register_impl({.op = "layernorm_backward", .name = "v2_fused_partials",
                                   .summary = "one read of x and dy: rows in registers for dx, each thread's "
                                              "column sums in shared memory, one partial a block, added after",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_fused,
                                   .workspace = workspace_v2,
                                   .run = run_fused<false>,
                                   .kernels = {"layernorm_bwd_column_sums"}}));
KLAB_REGISTER(klab::register_impl({.op = "layernorm_backward", .name = "v3_fused_atomics",
                                   .summary = "v2 adding each block's sums into dgamma and dbeta by atomicAdd: "
                                              "no second kernel; their last bits change from run to run",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_fused,
                                   .run = run_fused<true>}));
KLAB_REGISTER(klab::register_impl({.op = "dropout_residual_layernorm_backward", .name = "v2_fused_residual_dropout",
                                   .summary = "layernorm_backward's v2 whose dx epilogue adds the residual's "
                                              "gradient and writes the dropout's, the mask drawn again",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_fused,
                                   .workspace = workspace_v2,
                                   .run = run_fused<false, false, true>,
                                   .kernels = {"layernorm_bwd_column_sums"}}));
KLAB_REGISTER(klab::register_impl({.op = "rmsnorm_backward", .name = "v1_fused_partials",
                                   .summary = "layernorm_backward's v2_fused_partials without the mean, c1 and "
                                              "dbeta: one read of x and dy, one partial of dgamma a block",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_fused,
                                   .workspace = workspace_v2,
                                   .run = run_fused<false, true>,
                                   .kernels = {"layernorm_bwd_column_sums"}}));

}  // namespace

// What layernorm_backward_ring.cu shares (layernorm.cuh declares them).
void ln_bwd_column_sums(const float* part, int parts, const LnBwdArgs& a, cudaStream_t stream) {
  launch_column_sums(part, parts, a, stream);
}
int ln_bwd_fused_blocks(const void* kernel, int threads, std::size_t smem, int groups, std::int64_t rows) {
  FusedPlan pl;
  pl.tpr = threads / groups;
  pl.groups = groups;
  pl.smem = smem;
  return fused_blocks(kernel, pl, rows);
}
std::size_t ln_bwd_partials_workspace(const klab::Problem& p) { return workspace_v2(p); }

// For ops that run the layernorm backward as a step (layernorm.cuh declares them).
void layernorm_backward(const klab::Launch& l) {
  if (l.problem.shape[1] <= kFusedMaxCols) run_fused<false>(l);
  else run_v1_dx_then_column_sums(l);
}
std::size_t layernorm_backward_workspace(const klab::Problem& p) { return std::max(workspace_v1(p), workspace_v2(p)); }

}  // namespace lesson08
