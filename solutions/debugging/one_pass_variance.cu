// debugging/one_pass_variance.cu — case one_pass_variance: a variance that cancels.
//
// Impl registered here (op `debug_variance`, f32):
//   exercise       the row variance below, with its bug: yours to find and fix
//
// One warp a row: each lane sums x and x² over every 32nd element of the row, the warp adds
// the 32 partial sums, and lane 0 writes E[x²] − E[x]², the formula of the textbook, in one
// pass over the row. The op's values lie in [999, 1001): the checks fail on every row of two
// or more elements, with variances off by whole units, some of them negative.
//
//   klab debug run one_pass_variance     the kernel through the checks (their FAIL lines)
//   klab hint debug/one_pass_variance    how to read them, one hint at a time
//   klab check debug/one_pass_variance   grades your fix
#include <cuda_runtime.h>

#include "catalog.cuh"
#include "klab/device/warp.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace debugging {
namespace {

constexpr int kRowsPerBlock = kThreads / 32;   // one warp a row

// Grid: one block per kRowsPerBlock rows.
__global__ void __launch_bounds__(kThreads) debug_variance_exercise(const float* __restrict__ g_x,
                                                                    float* __restrict__ g_y, i64 rows, i64 cols) {
  const i64 r = static_cast<i64>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;   // a whole warp leaves: no barrier below
  const float* x = g_x + r * cols;
  // The fix: two passes. The mean first; then the squares of the deviations x - mean, each
  // about 1 here, whose sum has no terms of opposite sign and so nothing to cancel. (x and
  // the mean lie within a factor of 2 of each other, so x - mean is exact.)
  float s = 0.f;
  for (i64 c = lane; c < cols; c += 32) s += x[c];
  const float mean = klab::warp_sum(s) / static_cast<float>(cols);
  float q = 0.f;
  for (i64 c = lane; c < cols; c += 32) {
    const float d = x[c] - mean;
    q += d * d;
  }
  q = klab::warp_sum(q);
  if (lane == 0) g_y[r] = q / static_cast<float>(cols);
}

void run_exercise(const klab::Launch& l) {
  const i64 rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0) return;
  debug_variance_exercise<<<klab::blocks_for(rows, kRowsPerBlock), kThreads, 0, l.stream>>>(
      l.in[0].as<const float>(), l.out[0].as<float>(), rows, cols);
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "debug_variance", .name = "exercise",
                                   .summary = "your fix of the variance's cancellation (debugging/one_pass_variance.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .run = run_exercise}));

}  // namespace
}  // namespace debugging
