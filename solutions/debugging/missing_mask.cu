// debugging/missing_mask.cu — case missing_mask: a kernel without its bounds check.
//
// Impl registered here (op `debug_scale`, f32):
//   exercise       y = 2 x + 1 below, with its bug: yours to find and fix
//
// One thread an element, blocks of 256 threads, as many blocks as it takes to cover n: when
// n is not a multiple of 256, the last block has threads with no element. The checks may
// pass all the same: what those threads do lands outside the arrays, where no check need
// look.
//
//   klab debug run missing_mask     the kernel under compute-sanitizer's memcheck
//   klab hint debug/missing_mask    how to read its report, one hint at a time
//   klab check debug/missing_mask   grades your fix: the checks, then memcheck clean
#include <cuda_runtime.h>

#include "catalog.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace debugging {
namespace {

// Grid: ceil(n / 256) blocks of 256 threads, one element a thread.
__global__ void __launch_bounds__(kThreads) debug_scale_exercise(const float* __restrict__ g_x, float* __restrict__ g_y,
                                                                 i64 n) {
  const i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  // The fix: the last block's threads past n have no element; without the test they read
  // x and write y past the arrays' ends.
  if (i < n) g_y[i] = 2.f * g_x[i] + 1.f;
}

void run_exercise(const klab::Launch& l) {
  const i64 n = l.problem.shape[0];
  if (n == 0) return;
  debug_scale_exercise<<<klab::blocks_for(n, kThreads), kThreads, 0, l.stream>>>(l.in[0].as<const float>(),
                                                                                 l.out[0].as<float>(), n);
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "debug_scale", .name = "exercise",
                                   .summary = "your fix of the scale's bounds (debugging/missing_mask.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .run = run_exercise}));

}  // namespace
}  // namespace debugging
