// lessons/04-softmax/softmax_multipass.cu — softmax_rows the textbook ways: the max and the
// sum as two separate reductions.
//
// Impls registered here (op softmax_rows):
//   v1_three_pass  three kernels: row max, row sum (one thread per row), then normalize.
//                  Reads x three times, and the per-row loops are not coalesced.
//   v2_fused       one block per row, the row cached in registers: one read, one write.
//                  Max, then sum, each a shared-memory tree reduction (two reductions).
// The online versions (v3_online .. v6_exp2) are in softmax_online.cu; the README has the
// measured table.
//
// Run:  klab test 04 --impl v1_three_pass,v2_fused
//       klab run 04 --impl v1_three_pass,v2_fused --shape 8192x8192
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "softmax_common.cuh"

// The op (inputs, reference, tolerances, shapes): softmax_op.cu.

using klab::Problem;

namespace {

using i64 = std::int64_t;

// ============================================================================================
// v1_three_pass: row max, row sum, normalize — three kernels, x read three times
// ============================================================================================

// One thread per row. Neighbouring threads read addresses `cols` elements apart, so every
// load of a warp touches 32 different cache lines: this is the uncoalesced pattern of
// lesson 02, and with only `rows` threads the GPU is mostly idle when rows are few.
template <class T>
__global__ void softmax_rows_v1_three_pass_max(const T* __restrict__ g_x, float* __restrict__ g_max,
                                               i64 rows, i64 cols, i64 diag) {
  const i64 row = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const i64 limit = lesson04::row_limit(row, cols, diag);
  const T* g_xrow = g_x + row * cols;               // (cols,)
  float r_m = -INFINITY;
  for (i64 j = 0; j < limit; ++j) r_m = fmaxf(r_m, klab::to_f32(g_xrow[j]));
  g_max[row] = r_m;
}

// The sum is accumulated in double: a serial fp32 sum of 262,144 terms drifts by about
// sqrt(n) ulps, past the tolerance. (v2 onward sums in a tree, which keeps fp32 exact enough.)
template <class T>
__global__ void softmax_rows_v1_three_pass_sum(const T* __restrict__ g_x, const float* __restrict__ g_max,
                                               float* __restrict__ g_sum, i64 rows, i64 cols,
                                               i64 diag) {
  const i64 row = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const i64 limit = lesson04::row_limit(row, cols, diag);
  const T* g_xrow = g_x + row * cols;
  const float m = g_max[row];
  double r_d = 0;
  for (i64 j = 0; j < limit; ++j) r_d += expf(klab::to_f32(g_xrow[j]) - m);
  g_sum[row] = static_cast<float>(r_d);
}

// One thread per element, grid-stride, 64-bit flat index: coalesced, like lesson 01.
template <class T>
__global__ void softmax_rows_v1_three_pass_normalize(const T* __restrict__ g_x,
                                                     const float* __restrict__ g_max,
                                                     const float* __restrict__ g_sum,
                                                     T* __restrict__ g_y, i64 n, i64 cols, i64 diag) {
  for (i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 row = i / cols, j = i - row * cols;
    const float v = j < lesson04::row_limit(row, cols, diag)
                        ? expf(klab::to_f32(g_x[i]) - g_max[row]) / g_sum[row]
                        : 0.f;
    g_y[i] = klab::from_f32<T>(v);
  }
}

// ============================================================================================
// v2_fused: one block per row, row cached in registers, two shared-memory tree reductions
// ============================================================================================

// Classic tree over shared memory (blockDim.x a power of two): halve the active threads
// each step. log2(blockDim) barriers per reduction, two reductions per row.
template <class Op>
__device__ float v2_block_reduce(float v, float* s_red, Op op) {
  const int tid = threadIdx.x;
  s_red[tid] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) s_red[tid] = op(s_red[tid], s_red[tid + s]);
    __syncthreads();
  }
  const float r = s_red[0];
  __syncthreads();                                  // s_red may be reused right after
  return r;
}

// Thread t caches elements t, t + B, t + 2B, ... (B = blockDim.x): each load instruction
// of a warp reads 32 consecutive elements (coalesced). Rows longer than CACHE * B keep
// the rest in global memory and re-read it (a tail loop) — correct for every length,
// fast while the row fits in the cache.
template <class T, int CACHE>
__global__ void __launch_bounds__(1024)
softmax_rows_v2_fused(const T* __restrict__ g_x, T* __restrict__ g_y, i64 cols, i64 diag) {
  static_assert(CACHE >= 1 && CACHE <= 16, "at most 16 cached elements per thread (registers)");
  __shared__ float s_red[1024];
  const i64 row = blockIdx.x;
  const i64 limit = lesson04::row_limit(row, cols, diag);
  const T* g_xrow = g_x + row * cols;               // (cols,)
  T* g_yrow = g_y + row * cols;
  const int B = blockDim.x;
  const i64 cached = static_cast<i64>(CACHE) * B;   // columns held in registers

  float r_x[CACHE];                                 // (CACHE,) per thread
  float r_max = -INFINITY;
#pragma unroll
  for (int k = 0; k < CACHE; ++k) {
    const i64 j = threadIdx.x + static_cast<i64>(k) * B;
    r_x[k] = j < limit ? klab::to_f32(g_xrow[j]) : -INFINITY;
    r_max = fmaxf(r_max, r_x[k]);
  }
  for (i64 j = cached + threadIdx.x; j < limit; j += B) r_max = fmaxf(r_max, klab::to_f32(g_xrow[j]));
  const float m = v2_block_reduce(r_max, s_red, [](float a, float b) { return fmaxf(a, b); });

  // A fully masked row has m = -inf; shifting by 0 then gives exp(-inf) = 0 everywhere
  // instead of exp(-inf - -inf) = NaN.
  const float shift = m == -INFINITY ? 0.f : m;
  float r_sum = 0.f;
#pragma unroll
  for (int k = 0; k < CACHE; ++k) {
    r_x[k] = expf(r_x[k] - shift);                  // masked: exp(-inf) = 0
    r_sum += r_x[k];
  }
  for (i64 j = cached + threadIdx.x; j < limit; j += B) r_sum += expf(klab::to_f32(g_xrow[j]) - shift);
  const float d = v2_block_reduce(r_sum, s_red, [](float a, float b) { return a + b; });

  const float inv = d > 0.f ? 1.f / d : 0.f;
#pragma unroll
  for (int k = 0; k < CACHE; ++k) {
    const i64 j = threadIdx.x + static_cast<i64>(k) * B;
    if (j < cols) g_yrow[j] = klab::from_f32<T>(r_x[k] * inv);
  }
  for (i64 j = cached + threadIdx.x; j < cols; j += B)
    g_yrow[j] = klab::from_f32<T>(j < limit ? expf(klab::to_f32(g_xrow[j]) - shift) * inv : 0.f);
}

// ============================================================================================
// Launchers
// ============================================================================================

void run_v1_three_pass(const klab::Launch& l) {
  const lesson04::RowArgs a = lesson04::row_args(l);
  if (a.rows * a.cols == 0) return;
  float* g_max = static_cast<float*>(l.workspace);  // (rows,)
  float* g_sum = g_max + a.rows;                    // (rows,)
  lesson04::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const T* x = static_cast<const T*>(a.x);
    const unsigned row_blocks = klab::blocks_for(a.rows, 128);
    softmax_rows_v1_three_pass_max<T><<<row_blocks, 128, 0, a.stream>>>(x, g_max, a.rows, a.cols,
                                                                         a.diag);
    KLAB_CHECK_LAUNCH();
    softmax_rows_v1_three_pass_sum<T><<<row_blocks, 128, 0, a.stream>>>(x, g_max, g_sum, a.rows,
                                                                         a.cols, a.diag);
    KLAB_CHECK_LAUNCH();
    const unsigned grid = klab::blocks_for(a.rows * a.cols, 256, 132 * 64);
    softmax_rows_v1_three_pass_normalize<T><<<grid, 256, 0, a.stream>>>(
        x, g_max, g_sum, static_cast<T*>(a.y), a.rows * a.cols, a.cols, a.diag);
    KLAB_CHECK_LAUNCH();
  });
}

// x's row max and row sum, one float each per row.
std::size_t workspace_v1_three_pass(const Problem& p) {
  return static_cast<std::size_t>(2 * p.shape.at(0)) * sizeof(float);
}

void run_v2_fused(const klab::Launch& l) {
  const lesson04::RowArgs a = lesson04::row_args(l);
  if (a.rows * a.cols == 0) return;
  // The smallest cache that holds the row with at most 1024 threads (else the largest, and
  // the tail loop takes the rest); threads a power of two for the tree reduction.
  int cache = 1;
  while (cache < 16 && a.cols > 1024 * cache) cache *= 2;
  int threads = 32;
  while (threads < 1024 && static_cast<i64>(threads) * cache < a.cols) threads *= 2;
  lesson04::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const T* x = static_cast<const T*>(a.x);
    T* y = static_cast<T*>(a.y);
    const unsigned grid = static_cast<unsigned>(a.rows);
    switch (cache) {
      case 1: softmax_rows_v2_fused<T, 1><<<grid, threads, 0, a.stream>>>(x, y, a.cols, a.diag); break;
      case 2: softmax_rows_v2_fused<T, 2><<<grid, threads, 0, a.stream>>>(x, y, a.cols, a.diag); break;
      case 4: softmax_rows_v2_fused<T, 4><<<grid, threads, 0, a.stream>>>(x, y, a.cols, a.diag); break;
      case 8: softmax_rows_v2_fused<T, 8><<<grid, threads, 0, a.stream>>>(x, y, a.cols, a.diag); break;
      default: softmax_rows_v2_fused<T, 16><<<grid, threads, 0, a.stream>>>(x, y, a.cols, a.diag); break;
    }
    KLAB_CHECK_LAUNCH();
  });
}

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "softmax_rows", .name = "v1_three_pass",
                                   .summary = "row max, row sum (a thread per row), normalize: "
                                              "three kernels, x read 3 times",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = [](const Problem&) { return std::string(); },
                                   .workspace = workspace_v1_three_pass,
                                   .run = run_v1_three_pass}));

KLAB_REGISTER(klab::register_impl({.op = "softmax_rows", .name = "v2_fused",
                                   .summary = "one block per row, row in registers, max then sum "
                                              "by shared-memory trees",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = [](const Problem&) { return std::string(); },
                                   .run = run_v2_fused}));

}  // namespace
