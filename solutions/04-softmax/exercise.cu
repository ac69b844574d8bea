// Lesson 04 exercise, SOLVED — the two block reductions of a fused softmax.
// (The completed version of lessons/04-softmax/exercise.cu; built into klab-solutions.)
//
// The kernel below is v2_fused of softmax_multipass.cu: one block per row, the row cached in
// registers, one read of x and one write of y. What it lacks are the two reductions that
// turn each thread's partial result into the row's: the row max and the row sum. Write
//
//     block_reduce_max   every thread passes its partial max, every thread gets the row max
//     block_reduce_sum   the same for the sum
//
// then run
//
//     klab check 04
//
// which checks your softmax on unseen seeds and every edge case (0 and 1 rows, one column,
// odd and prime lengths, rows of 262,147, inputs of +-1e4, the causal mask, fp32 and bf16),
// then times it against v2_fused. Until both reductions are right the check fails: the
// stubs return NaN, and the harness also fills y with NaN before each launch.
//
// Hints
//   1. blockDim.x is a power of two from 32 to 1024, and s_red has blockDim.x floats.
//   2. A tree: every thread stores its value in s_red[threadIdx.x]; then, for
//      s = blockDim.x / 2, blockDim.x / 4, ..., 1, the threads below s combine their slot
//      with slot + s. __syncthreads() after the store and after every step — every thread
//      of the block must reach each barrier, so keep it outside the `if`.
//   3. Every thread needs the result: read s_red[0] after the last step, then
//      __syncthreads() once more before returning, because the caller reuses s_red for the
//      next reduction and a fast thread must not overwrite s_red[0] before a slow one read it.
//   4. Max combines with fmaxf, sum with +. The empty max is -INFINITY (the kernel passes it
//      for threads that own no column), the empty sum 0.
//   5. Faster (optional): __shfl_xor_sync reduces a warp without shared memory; then only the
//      32 warp results go through s_red. klab::block_sum (klab/device/block.cuh) does this
//      for a sum, klab::block_merge (klab/device/online_softmax.cuh) for v3's (max, sum) pairs.
//
// Impl registered here (op softmax_rows):
//   exercise  this file's fused softmax (kernel softmax_rows_exercise, launcher run_exercise)
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "softmax_common.cuh"

namespace {

using i64 = std::int64_t;

// TODO 1 (hints 1-4): the row max. Every thread calls this with its partial max.
// Solution: a tree over shared memory. Each step halves the active threads; the barrier
// after each step makes the step's writes visible to the next.
__device__ float block_reduce_max(float v, float* s_red) {
  const int tid = threadIdx.x;
  s_red[tid] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) s_red[tid] = fmaxf(s_red[tid], s_red[tid + s]);
    __syncthreads();                                // outside the if: every thread arrives
  }
  const float r = s_red[0];
  // mistake no_last_barrier (racecheck):
  __syncthreads();                                  // everyone has read s_red[0]: reusable
  return r;
}
// end of TODO 1

// TODO 2 (hints 1-4): the row sum. Every thread calls this with its partial sum.
__device__ float block_reduce_sum(float v, float* s_red) {
  const int tid = threadIdx.x;
  s_red[tid] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) s_red[tid] += s_red[tid + s];
    __syncthreads();
  }
  const float r = s_red[0];
  __syncthreads();
  return r;
}
// end of TODO 2

// ---- given: the fused kernel (you do not need to change anything below) -------------------

// Thread t caches columns t, t + B, t + 2B, ... (B = blockDim.x); columns past CACHE * B
// stay in global memory and are re-read (rows longer than the cache). Masked columns (the
// causal variant) count as -inf and come out 0.
template <class T, int CACHE>
__global__ void __launch_bounds__(1024)
softmax_rows_exercise(const T* __restrict__ g_x, T* __restrict__ g_y, i64 cols, i64 diag) {
  __shared__ float s_red[1024];
  const i64 row = blockIdx.x;
  const i64 limit = lesson04::row_limit(row, cols, diag);
  const T* x = g_x + row * cols;                    // (cols,)
  T* y = g_y + row * cols;
  const int B = blockDim.x;
  const i64 cached = static_cast<i64>(CACHE) * B;

  float r_x[CACHE];
  float r_max = -INFINITY;
#pragma unroll
  for (int k = 0; k < CACHE; ++k) {
    const i64 j = threadIdx.x + static_cast<i64>(k) * B;
    r_x[k] = j < limit ? klab::to_f32(x[j]) : -INFINITY;
    r_max = fmaxf(r_max, r_x[k]);
  }
  for (i64 j = cached + threadIdx.x; j < limit; j += B) r_max = fmaxf(r_max, klab::to_f32(x[j]));
  const float m = block_reduce_max(r_max, s_red);

  const float shift = m == -INFINITY ? 0.f : m;     // a fully masked row: all exps are 0
  float r_sum = 0.f;
#pragma unroll
  for (int k = 0; k < CACHE; ++k) {
    r_x[k] = expf(r_x[k] - shift);
    r_sum += r_x[k];
  }
  for (i64 j = cached + threadIdx.x; j < limit; j += B) r_sum += expf(klab::to_f32(x[j]) - shift);
  const float d = block_reduce_sum(r_sum, s_red);

  const float inv = d > 0.f ? 1.f / d : 0.f;
#pragma unroll
  for (int k = 0; k < CACHE; ++k) {
    const i64 j = threadIdx.x + static_cast<i64>(k) * B;
    if (j < cols) y[j] = klab::from_f32<T>(r_x[k] * inv);
  }
  for (i64 j = cached + threadIdx.x; j < cols; j += B)
    y[j] = klab::from_f32<T>(j < limit ? expf(klab::to_f32(x[j]) - shift) * inv : 0.f);
}

void run_exercise(const klab::Launch& l) {
  const i64 rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows * cols == 0) return;
  const i64 diag = lesson04::diag_of(l.problem);
  int cache = 1;
  while (cache < 16 && cols > 1024 * cache) cache *= 2;
  int threads = 32;                                 // a power of two (hint 1)
  while (threads < 1024 && static_cast<i64>(threads) * cache < cols) threads *= 2;
  lesson04::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const T* x = l.in[0].as<const T>();
    T* y = l.out[0].as<T>();
    const auto grid = static_cast<unsigned>(rows);
    switch (cache) {
      case 1: softmax_rows_exercise<T, 1><<<grid, threads, 0, l.stream>>>(x, y, cols, diag); break;
      case 2: softmax_rows_exercise<T, 2><<<grid, threads, 0, l.stream>>>(x, y, cols, diag); break;
      case 4: softmax_rows_exercise<T, 4><<<grid, threads, 0, l.stream>>>(x, y, cols, diag); break;
      case 8: softmax_rows_exercise<T, 8><<<grid, threads, 0, l.stream>>>(x, y, cols, diag); break;
      default: softmax_rows_exercise<T, 16><<<grid, threads, 0, l.stream>>>(x, y, cols, diag); break;
    }
    KLAB_CHECK_LAUNCH();
  });
}

KLAB_REGISTER(klab::register_impl({.op = "softmax_rows", .name = "exercise",
                                   .summary = "your fused softmax: block_reduce_max / "
                                              "block_reduce_sum (exercise.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .supports = [](const klab::Problem&) { return std::string(); },
                                   .run = run_exercise}));

}  // namespace
