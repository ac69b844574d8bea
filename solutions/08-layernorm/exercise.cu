// Lesson 08 exercise — the layernorm forward's row statistics by Welford's update.
//
// Impl registered here (op `layernorm`, f32):
//   exercise       your warp-a-row layernorm, timed against v1_warp_welford
//
// One warp takes a row. Each lane folds its elements (j = lane, lane + 32, ...) into a
// running count n, mean and M2 (the sum of squared deviations from the running mean); the
// 32 lanes' triples are merged by shuffles; then rstd, and the lanes write y. Fill in the
// three TODOs, then run
//
//     klab check 08
//
// which checks y, mean and rstd against the fp64 reference on unseen seeds and every edge
// shape (one column, odd widths, 131,072 columns, more than 2^31 elements), then times your
// kernel against v1_warp_welford. The harness fills the outputs with NaN before each launch:
// until the kernel computes every one, the check fails.
//
// Hints (klab hint 08)
//   1. Welford's update with a value v: n += 1; d = v - mean; mean += d / n; m2 += d * (v - mean).
//   2. Chan's merge of (n_b, mean_b, m2_b) into (n, mean, m2): with t = n + n_b and
//      d = mean_b - mean, mean += d * n_b / t and m2 += m2_b + d * d * n * n_b / t (using
//      the old n), then n = t. Two empty triples (t = 0) stay empty.
//   3. var = m2 / cols (the biased variance, as PyTorch's layer_norm); rstd = rsqrtf(var + lesson08::kEps).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "klab/device/warp.cuh"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "layernorm.cuh"

namespace {

constexpr int kWarps = 8;   // rows a 256-thread block

__global__ void layernorm_exercise(const float* __restrict__ g_x, const float* __restrict__ g_gamma,
                                   const float* __restrict__ g_beta, float* __restrict__ g_y,
                                   float* __restrict__ g_mean, float* __restrict__ g_rstd, std::int64_t rows, int cols) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  if (row >= rows) return;                          // a whole warp leaves together
  const float* x = g_x + row * cols;
  float n = 0.f, mean = 0.f, m2 = 0.f;              // this lane's running count, mean and M2
  for (int j = lane; j < cols; j += 32) {
    const float v = x[j];
    // TODO 1: fold v into (n, mean, m2) with Welford's update (hint 1).
    n += 1.f;
    const float d = v - mean;
    mean += d / n;
    m2 += d * (v - mean);
    // end of TODO 1
  }
  for (int o = 16; o > 0; o >>= 1) {                // every lane ends with the row's triple
    const float n_b = __shfl_xor_sync(klab::kFullMask, n, o);
    const float mean_b = __shfl_xor_sync(klab::kFullMask, mean, o);
    const float m2_b = __shfl_xor_sync(klab::kFullMask, m2, o);
    // TODO 2: merge (n_b, mean_b, m2_b) into (n, mean, m2) with Chan's formula (hint 2).
    const float t = n + n_b;
    if (t > 0.f) {
      const float d = mean_b - mean, fb = n_b / t;
      mean += d * fb;
      m2 += m2_b + d * d * n * fb;
      n = t;
    }
    // end of TODO 2
  }
  float rstd = 0.f;
  // TODO 3: rstd from m2 (hint 3).
  rstd = rsqrtf(m2 / static_cast<float>(cols) + lesson08::kEps);
  // end of TODO 3
  if (lane == 0) {
    g_mean[row] = mean;
    g_rstd[row] = rstd;
  }
  float* y = g_y + row * cols;
  for (int j = lane; j < cols; j += 32) y[j] = (x[j] - mean) * rstd * g_gamma[j] + g_beta[j];
}

void run_exercise(const klab::Launch& l) {
  const lesson08::LnArgs a = lesson08::ln_args(l);
  if (a.rows == 0) return;
  const auto blocks = static_cast<unsigned>(klab::ceil_div<std::int64_t>(a.rows, kWarps));
  layernorm_exercise<<<blocks, kWarps * 32, 0, l.stream>>>(
      static_cast<const float*>(a.x), static_cast<const float*>(a.gamma), static_cast<const float*>(a.beta),
      static_cast<float*>(a.y), a.mean, a.rstd, a.rows, static_cast<int>(a.cols));
}

std::string exercise_supports(const klab::Problem& p) {
  return p.dtype == klab::DType::f32 ? std::string() : std::string("the exercise is f32 only");
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "layernorm", .name = "exercise",
                                   .summary = "your warp-a-row layernorm with Welford statistics (exercise.cu)",
                                   .kind = klab::ImplKind::exercise, .supports = exercise_supports,
                                   .run = run_exercise}));
