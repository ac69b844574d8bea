// debugging/unstable_softmax.cu — case unstable_softmax: a softmax without the row's max.
//
// Impl registered here (op `debug_softmax`, f32):
//   exercise       the row softmax below, with its bug: yours to find and fix
//
// One warp a row: each lane sums e^x over every 32nd element of the row, the warp adds the
// 32 partial sums, and each element is written as e^x / sum. The formula is the textbook's;
// the op's logits lie in [-100, 100), and the checks fail with NaN in nearly every row.
//
//   klab debug run unstable_softmax     the kernel through the checks (their FAIL lines)
//   klab hint debug/unstable_softmax    how to read them, one hint at a time
//   klab check debug/unstable_softmax   grades your fix
#include <cuda_runtime.h>

#include <cmath>

#include "catalog.cuh"
#include "klab/device/warp.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace debugging {
namespace {

constexpr int kRowsPerBlock = kThreads / 32;   // one warp a row

// Grid: one block per kRowsPerBlock rows.
__global__ void __launch_bounds__(kThreads) debug_softmax_exercise(const float* __restrict__ g_x,
                                                                   float* __restrict__ g_y, i64 rows, i64 cols) {
  const i64 r = static_cast<i64>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;   // a whole warp leaves: no barrier below
  const float* x = g_x + r * cols;
  float* y = g_y + r * cols;
  float sum = 0.f;
  for (i64 c = lane; c < cols; c += 32) sum += expf(x[c]);
  sum = klab::warp_sum(sum);
  for (i64 c = lane; c < cols; c += 32) y[c] = expf(x[c]) / sum;
}

void run_exercise(const klab::Launch& l) {
  const i64 rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0) return;
  debug_softmax_exercise<<<klab::blocks_for(rows, kRowsPerBlock), kThreads, 0, l.stream>>>(
      l.in[0].as<const float>(), l.out[0].as<float>(), rows, cols);
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "debug_softmax", .name = "exercise",
                                   .summary = "your fix of the softmax's overflow (debugging/unstable_softmax.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .run = run_exercise}));

}  // namespace
}  // namespace debugging
