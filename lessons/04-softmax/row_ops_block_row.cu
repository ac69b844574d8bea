// lessons/04-softmax/row_ops_block_row.cu — row_normalize and softmax_bwd, one block per row.
//
// Impls registered here (the same impl name for both ops):
//   v1_block_row  row_normalize and softmax_bwd: one block per row, looping over the row
//                 twice (sum, then write), 16-byte loads when rows are aligned. Any length.
//                 The second sweep re-reads the row, usually from L2 (the block read it a
//                 moment before). The row's sum is klab::block_sum (klab/device/block.cuh).
// softmax_bwd's baseline, cudnn, is in softmax_cudnn.cu.
//
// Run:  klab test 04 --op row_normalize       klab bench 04 --op softmax_bwd
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "klab/device/block.cuh"
#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "softmax_common.cuh"

// The ops (inputs, references, tolerances, shapes): row_ops_op.cu.

using klab::Problem;

namespace {

using i64 = std::int64_t;

// ============================================================================================
// v1_block_row: the sum sweep, klab::block_sum, the write sweep
// ============================================================================================

constexpr int kThreads = 512;
static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps; block_sum takes up to 1024 threads");

// Thread t visits vectors t, t + B, ... of its row (coalesced: a warp reads 32 adjacent
// vectors per step).
template <class T, int VEC>
__global__ void __launch_bounds__(kThreads)
row_normalize_v1_block_row(const T* __restrict__ g_x, T* __restrict__ g_y, i64 cols) {
  __shared__ float s_part[32];
  using V = lesson04::Vec<T, VEC>;
  const i64 row = blockIdx.x;
  const V* g_xrow = reinterpret_cast<const V*>(g_x + row * cols);   // (cols / VEC,)
  V* g_yrow = reinterpret_cast<V*>(g_y + row * cols);
  const i64 nv = cols / VEC;
  float r_s = 0.f;
  for (i64 v = threadIdx.x; v < nv; v += kThreads) {
    const V a = g_xrow[v];
#pragma unroll
    for (int i = 0; i < VEC; ++i) r_s += klab::to_f32(a.v[i]);
  }
  const float s = klab::block_sum(r_s, s_part);
  const float inv = 1.f / s;   // positive inputs: s > 0 whenever cols > 0
  for (i64 v = threadIdx.x; v < nv; v += kThreads) {
    const V a = g_xrow[v];
    V b;
#pragma unroll
    for (int i = 0; i < VEC; ++i) b.v[i] = klab::from_f32<T>(klab::to_f32(a.v[i]) * inv);
    g_yrow[v] = b;
  }
}

template <class T, int VEC>
__global__ void __launch_bounds__(kThreads)
softmax_bwd_v1_block_row(const T* __restrict__ g_y, const T* __restrict__ g_dy,
                         T* __restrict__ g_dx, i64 cols) {
  __shared__ float s_part[32];
  using V = lesson04::Vec<T, VEC>;
  const i64 row = blockIdx.x;
  const V* g_yrow = reinterpret_cast<const V*>(g_y + row * cols);    // (cols / VEC,)
  const V* g_dyrow = reinterpret_cast<const V*>(g_dy + row * cols);
  V* g_dxrow = reinterpret_cast<V*>(g_dx + row * cols);
  const i64 nv = cols / VEC;
  float r_s = 0.f;
  for (i64 v = threadIdx.x; v < nv; v += kThreads) {
    const V a = g_yrow[v], b = g_dyrow[v];
#pragma unroll
    for (int i = 0; i < VEC; ++i) r_s += klab::to_f32(a.v[i]) * klab::to_f32(b.v[i]);
  }
  const float s = klab::block_sum(r_s, s_part);        // sum_k y_k dy_k
  for (i64 v = threadIdx.x; v < nv; v += kThreads) {
    const V a = g_yrow[v], b = g_dyrow[v];
    V c;
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      c.v[i] = klab::from_f32<T>(klab::to_f32(a.v[i]) * (klab::to_f32(b.v[i]) - s));
    g_dxrow[v] = c;
  }
}

// ============================================================================================
// Launchers
// ============================================================================================

template <class T>
bool vec_ok(i64 cols, std::initializer_list<const void*> ptrs) {
  if (cols % klab::kVec16<T> != 0) return false;
  for (const void* p : ptrs)
    if (!klab::aligned16(p)) return false;
  return true;
}

void run_row_normalize_v1_block_row(const klab::Launch& l) {
  const i64 rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows * cols == 0) return;
  lesson04::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const T* x = l.in[0].as<const T>();
    T* y = l.out[0].as<T>();
    const auto grid = static_cast<unsigned>(rows);
    constexpr int V = klab::kVec16<T>;
    if (vec_ok<T>(cols, {x, y}))
      row_normalize_v1_block_row<T, V><<<grid, kThreads, 0, l.stream>>>(x, y, cols);
    else row_normalize_v1_block_row<T, 1><<<grid, kThreads, 0, l.stream>>>(x, y, cols);
    KLAB_CHECK_LAUNCH();
  });
}

void run_softmax_bwd_v1_block_row(const klab::Launch& l) {
  const i64 rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows * cols == 0) return;
  lesson04::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const T* y = l.in[0].as<const T>();
    const T* dy = l.in[1].as<const T>();
    T* dx = l.out[0].as<T>();
    const auto grid = static_cast<unsigned>(rows);
    constexpr int V = klab::kVec16<T>;
    if (vec_ok<T>(cols, {y, dy, dx}))
      softmax_bwd_v1_block_row<T, V><<<grid, kThreads, 0, l.stream>>>(y, dy, dx, cols);
    else softmax_bwd_v1_block_row<T, 1><<<grid, kThreads, 0, l.stream>>>(y, dy, dx, cols);
    KLAB_CHECK_LAUNCH();
  });
}

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "row_normalize", .name = "v1_block_row",
                                   .summary = "one block per row: sum sweep, block reduction, "
                                              "write sweep (16-byte loads)",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = [](const Problem&) { return std::string(); },
                                   .run = run_row_normalize_v1_block_row}));

KLAB_REGISTER(klab::register_impl({.op = "softmax_bwd", .name = "v1_block_row",
                                   .summary = "one block per row: sum(y * dy) sweep, block "
                                              "reduction, write sweep",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = [](const Problem&) { return std::string(); },
                                   .run = run_softmax_bwd_v1_block_row}));

}  // namespace
