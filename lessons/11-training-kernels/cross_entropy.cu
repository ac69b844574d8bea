// Lesson 11 — cross-entropy kernels: the forward's log-sum-exp in two passes, then in one;
// the backward element by element, then a row at a time in 16-byte vectors.
//
//   cross_entropy_fwd
//     v1_two_pass      a block a row: one pass for the row's max, a second for Σ exp(x − max)
//                      (the row read twice; whether the second read comes from L2 depends on
//                      how many rows are in flight), scalar loads
//     v2_online        a block a row, the row read once: each thread keeps a running
//                      (max, Σ exp(x − max)) over 16-byte vectors, the block merges them
//                      (klab/device/online_softmax.cuh)
//   cross_entropy_bwd
//     v1_per_element   a thread an element of the flattened logits, the row found by a
//                      64-bit division, its lse and target loaded by every thread
//     v2_row_vec       a block a row: lse and the target read once, 16-byte loads and stores
// Both forwards write each row's loss term to the workspace, and one more block averages
// them in a fixed order (cross_entropy_mean): the same bits every run, no atomics.
//
//   klab test 11 --op cross_entropy_fwd,cross_entropy_bwd --impl v1_two_pass,v2_online,v1_per_element,v2_row_vec
//   klab bench 11 --op cross_entropy_fwd --variant random
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "klab/device/block.cuh"
#include "klab/device/online_softmax.cuh"
#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "training.cuh"

namespace lesson11 {
namespace {

using std::int64_t;

constexpr int kRowThreads = 256;   // a block a row: 24 vectors a thread at vocab 50,257 (bf16)
constexpr float kLog2e = 1.4426950408889634f;

// exp(d) for d = x − m formed first, so that d carries no rounding from |x| or |m| (both
// inputs or lse values; their difference is exact when they are close): ex2 of d · log2(e),
// one FMUL and MUFU.EX2 (cross_entropy_ops.cu derives the tolerances from this).
__device__ __forceinline__ float exp_of_difference(float d) { return klab::ex2_approx(d * kLog2e); }

// Elements before the row's first 16-byte boundary (the vector loop starts there).
template <class T>
__device__ __forceinline__ int64_t head_elements(const T* row, int64_t cols) {
  const auto mis = static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(row) % 16);
  return min(cols, mis == 0 ? int64_t{0} : (16 - mis) / static_cast<int64_t>(sizeof(T)));
}

// The row's end: lse, and its loss term (m − x_t) + log Σ (0 when the row is ignored).
__device__ __forceinline__ void write_row(klab::MD md, float x_target, int target, float* __restrict__ g_lse,
                                          float* __restrict__ g_row_loss, int64_t r) {
  const float log_d = logf(md.d);
  g_lse[r] = md.m + log_d;
  g_row_loss[r] = target == kIgnoreIndex ? 0.f : (md.m - x_target) + log_d;
}

// ======================================================================================
// cross_entropy_fwd: v1_two_pass
// ======================================================================================
template <class T>
__global__ void cross_entropy_fwd_v1_two_pass(const T* __restrict__ g_x, const int* __restrict__ g_t, int64_t vocab,
                                              float* __restrict__ g_lse, float* __restrict__ g_row_loss) {
  __shared__ float s_part[32];
  const int64_t r = blockIdx.x;
  const T* row = g_x + r * vocab;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) m = fmaxf(m, klab::to_f32(row[j]));
  // The block's max: a block_sum of the warps' maxima would add them, so the max has its own
  // two steps here (warp_max, then the parked maxima).
  m = klab::warp_max(m);
  if ((threadIdx.x & 31) == 0) s_part[threadIdx.x >> 5] = m;
  __syncthreads();
  m = klab::warp_max((threadIdx.x & 31) < (blockDim.x >> 5) ? s_part[threadIdx.x & 31] : -INFINITY);
  __syncthreads();   // s_part is block_sum's next
  float d = 0.f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) d += exp_of_difference(klab::to_f32(row[j]) - m);
  d = klab::block_sum(d, s_part);
  if (threadIdx.x == 0) {
    const int target = g_t[r];
    write_row({m, d}, target == kIgnoreIndex ? 0.f : klab::to_f32(row[target]), target, g_lse, g_row_loss, r);
  }
}

// ======================================================================================
// cross_entropy_fwd: v2_online
// ======================================================================================
// Folds n more values into the running state: one rescale of the old sum a vector, not an
// element (the vector's own max first).
template <int N>
__device__ __forceinline__ void fold(klab::MD& s, const float (&x)[N]) {
  float vmax = x[0];
#pragma unroll
  for (int e = 1; e < N; ++e) vmax = fmaxf(vmax, x[e]);
  const float m = fmaxf(s.m, vmax);
  float d = s.m == -INFINITY ? 0.f : s.d * exp_of_difference(s.m - m);
#pragma unroll
  for (int e = 0; e < N; ++e) d += exp_of_difference(x[e] - m);
  s = {m, d};
}

template <class T>
__global__ void __launch_bounds__(kRowThreads) cross_entropy_fwd_v2_online(const T* __restrict__ g_x,
                                                                           const int* __restrict__ g_t, int64_t vocab,
                                                                           float* __restrict__ g_lse,
                                                                           float* __restrict__ g_row_loss) {
  constexpr int kElems = klab::kVec16<T>;             // f32 4, bf16 8
  using V = klab::Vec<T, kElems>;
  __shared__ klab::MD s_md[32];
  const int64_t r = blockIdx.x;
  const T* row = g_x + r * vocab;
  const int64_t head = head_elements(row, vocab);
  const int64_t vecs = (vocab - head) / kElems;
  klab::MD s{-INFINITY, 0.f};
  // The scalar head and tail, one element a thread.
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x) fold<1>(s, {klab::to_f32(row[j])});
  for (int64_t j = head + vecs * kElems + threadIdx.x; j < vocab; j += blockDim.x) fold<1>(s, {klab::to_f32(row[j])});
  // The aligned body: two vectors a thread and pass, both loads issued before either is used.
  const V* body = reinterpret_cast<const V*>(row + head);
  int64_t v = threadIdx.x;
  for (; v + kRowThreads < vecs; v += 2 * kRowThreads) {
    const V a = body[v], b = body[v + kRowThreads];
    float x[2 * kElems];
#pragma unroll
    for (int e = 0; e < kElems; ++e) x[e] = klab::to_f32(a.v[e]), x[kElems + e] = klab::to_f32(b.v[e]);
    fold(s, x);
  }
  if (v < vecs) {
    const V a = body[v];
    float x[kElems];
#pragma unroll
    for (int e = 0; e < kElems; ++e) x[e] = klab::to_f32(a.v[e]);
    fold(s, x);
  }
  s = klab::block_merge(s, s_md);
  if (threadIdx.x == 0) {
    const int target = g_t[r];
    write_row(s, target == kIgnoreIndex ? 0.f : klab::to_f32(row[target]), target, g_lse, g_row_loss, r);
  }
}

// The mean over the rows not ignored, one block: each thread adds a fixed strided subset of
// the row terms and counts its targets, block_sum joins them in a fixed tree. 0 when every
// row is ignored.
__global__ void cross_entropy_mean(const float* __restrict__ g_row_loss, const int* __restrict__ g_t, int64_t rows,
                                   float* __restrict__ g_loss) {
  __shared__ float s_sum[32], s_count[32];
  float sum = 0.f, count = 0.f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    sum += g_row_loss[r];
    count += g_t[r] == kIgnoreIndex ? 0.f : 1.f;
  }
  sum = klab::block_sum(sum, s_sum);
  count = klab::block_sum(count, s_count);   // exact: integers below 2^24
  if (threadIdx.x == 0) *g_loss = count > 0.f ? sum / count : 0.f;
}

// ======================================================================================
// cross_entropy_bwd: v1_per_element
// ======================================================================================
// g_x and g_d alias in the variant inplace: no __restrict__ on them (each element is read
// and then written by the same thread).
template <class T>
__global__ void cross_entropy_bwd_v1_per_element(const T* g_x, const int* __restrict__ g_t,
                                                 const float* __restrict__ g_lse, T* g_d, int64_t rows, int64_t vocab,
                                                 float scale) {
  const int64_t n = rows * vocab, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / vocab, j = i - r * vocab;
    const int target = g_t[r];
    float d = 0.f;
    if (target != kIgnoreIndex) d = scale * (exp_of_difference(klab::to_f32(g_x[i]) - g_lse[r]) - (j == target ? 1.f : 0.f));
    g_d[i] = klab::from_f32<T>(d);
  }
}

// ======================================================================================
// cross_entropy_bwd: v2_row_vec
// ======================================================================================
__device__ __forceinline__ float grad_of(float x, float lse, float scale, bool ignored, bool is_target) {
  return ignored ? 0.f : scale * (exp_of_difference(x - lse) - (is_target ? 1.f : 0.f));
}

template <class T>
__global__ void __launch_bounds__(kRowThreads) cross_entropy_bwd_v2_row_vec(const T* g_x, const int* __restrict__ g_t,
                                                                            const float* __restrict__ g_lse, T* g_d,
                                                                            int64_t vocab, float scale) {
  constexpr int kElems = klab::kVec16<T>;
  using V = klab::Vec<T, kElems>;
  const int64_t r = blockIdx.x;
  const T* row = g_x + r * vocab;
  T* drow = g_d + r * vocab;
  const int target = g_t[r];
  const bool ignored = target == kIgnoreIndex;
  const float lse = g_lse[r];
  // In place, row and drow are the same address; out of place both rows start at the same
  // element offset from 16-byte aligned bases, so one head serves both.
  const int64_t head = head_elements(row, vocab);
  const int64_t vecs = (vocab - head) / kElems;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x)
    drow[j] = klab::from_f32<T>(grad_of(klab::to_f32(row[j]), lse, scale, ignored, j == target));
  for (int64_t j = head + vecs * kElems + threadIdx.x; j < vocab; j += blockDim.x)
    drow[j] = klab::from_f32<T>(grad_of(klab::to_f32(row[j]), lse, scale, ignored, j == target));
  const V* body = reinterpret_cast<const V*>(row + head);
  V* dbody = reinterpret_cast<V*>(drow + head);
  for (int64_t v = threadIdx.x; v < vecs; v += kRowThreads) {
    V a = body[v];
    const int64_t j0 = head + v * kElems;
#pragma unroll
    for (int e = 0; e < kElems; ++e)
      a.v[e] = klab::from_f32<T>(grad_of(klab::to_f32(a.v[e]), lse, scale, ignored, j0 + e == target));
    dbody[v] = a;
  }
}

// ======================================================================================
// Launchers
// ======================================================================================
std::size_t fwd_workspace(const klab::Problem& p) { return static_cast<std::size_t>(p.shape[0]) * sizeof(float); }

void fwd_finish(const klab::Launch& l, float* row_loss) {
  cross_entropy_mean<<<1, 1024, 0, l.stream>>>(row_loss, l.in[1].as<const int>(), l.problem.shape[0], l.out[0].as<float>());
  KLAB_CHECK_LAUNCH();
}

template <bool kOnline>
void run_fwd(const klab::Launch& l) {
  const int64_t rows = l.problem.shape[0], vocab = l.problem.shape[1];
  KLAB_REQUIRE(l.workspace_bytes >= fwd_workspace(l.problem), "cross_entropy_fwd: workspace too small");
  auto* row_loss = static_cast<float*>(l.workspace);
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    if (rows > 0) {
      if constexpr (kOnline)
        cross_entropy_fwd_v2_online<T><<<static_cast<unsigned>(rows), kRowThreads, 0, l.stream>>>(
            l.in[0].as<const T>(), l.in[1].as<const int>(), vocab, l.out[1].as<float>(), row_loss);
      else
        cross_entropy_fwd_v1_two_pass<T><<<static_cast<unsigned>(rows), kRowThreads, 0, l.stream>>>(
            l.in[0].as<const T>(), l.in[1].as<const int>(), vocab, l.out[1].as<float>(), row_loss);
      KLAB_CHECK_LAUNCH();
    }
  });
  fwd_finish(l, row_loss);
}
void run_v1_two_pass(const klab::Launch& l) { run_fwd<false>(l); }
void run_v2_online(const klab::Launch& l) { run_fwd<true>(l); }

// The gradient's destination: the output, or the logits themselves (variant inplace).
template <class T>
T* grad_out(const klab::Launch& l) {
  return l.problem.variant == "inplace" ? l.in[0].as<T>() : l.out[0].as<T>();
}

void run_v1_per_element(const klab::Launch& l) {
  const int64_t rows = l.problem.shape[0], vocab = l.problem.shape[1];
  if (rows == 0) return;
  const auto scale = static_cast<float>(l.scalars.at(0));
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    cross_entropy_bwd_v1_per_element<T><<<klab::grid_stride_blocks(rows * vocab, kRowThreads), kRowThreads, 0, l.stream>>>(
        l.in[0].as<const T>(), l.in[1].as<const int>(), l.in[2].as<const float>(), grad_out<T>(l), rows, vocab, scale);
    KLAB_CHECK_LAUNCH();
  });
}

void run_v2_row_vec(const klab::Launch& l) {
  const int64_t rows = l.problem.shape[0], vocab = l.problem.shape[1];
  if (rows == 0) return;
  const auto scale = static_cast<float>(l.scalars.at(0));
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const T* x = l.in[0].as<const T>();
    T* d = grad_out<T>(l);
    // One head for both rows needs the two bases equally far from a 16-byte boundary.
    KLAB_REQUIRE(reinterpret_cast<std::uintptr_t>(x) % 16 == reinterpret_cast<std::uintptr_t>(d) % 16,
                 "v2_row_vec: logits and dlogits differently aligned");
    cross_entropy_bwd_v2_row_vec<T><<<static_cast<unsigned>(rows), kRowThreads, 0, l.stream>>>(
        x, l.in[1].as<const int>(), l.in[2].as<const float>(), d, vocab, scale);
    KLAB_CHECK_LAUNCH();
  });
}

// ======================================================================================
// Registration
// ======================================================================================
KLAB_REGISTER(klab::register_impl({.op = "cross_entropy_fwd", .name = "v1_two_pass",
                                   .summary = "a block a row: the max in one pass, the sum of exponentials in a second",
                                   .kind = klab::ImplKind::cuda, .workspace = fwd_workspace,
                                   .run = run_v1_two_pass, .kernels = {"cross_entropy_mean"}}));
KLAB_REGISTER(klab::register_impl({.op = "cross_entropy_fwd", .name = "v2_online",
                                   .summary = "a block a row, read once: a running (max, sum) over 16-byte vectors",
                                   .kind = klab::ImplKind::cuda, .workspace = fwd_workspace,
                                   .run = run_v2_online, .kernels = {"cross_entropy_mean"}}));
KLAB_REGISTER(klab::register_impl({.op = "cross_entropy_bwd", .name = "v1_per_element",
                                   .summary = "a thread an element, its row by a 64-bit division",
                                   .kind = klab::ImplKind::cuda, .run = run_v1_per_element}));
KLAB_REGISTER(klab::register_impl({.op = "cross_entropy_bwd", .name = "v2_row_vec",
                                   .summary = "a block a row: lse and target read once, 16-byte loads and stores",
                                   .kind = klab::ImplKind::cuda, .run = run_v2_row_vec}));

}  // namespace
}  // namespace lesson11
