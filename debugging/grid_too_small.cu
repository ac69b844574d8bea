// debugging/grid_too_small.cu — case grid_too_small: a grid that does not cover the array.
//
// Impl registered here (op `debug_square`, f32):
//   exercise       y = x² below, with its bug: yours to find and fix
//
// One thread an element, blocks of 256 threads, and the kernel checks `if (i < n)` as it
// should (missing_mask's lesson). The grid has n / 256 blocks: right when n is a multiple of
// 256, and otherwise the last n % 256 elements have no thread. Below 256 elements there is
// no block at all, and the launch itself fails.
//
//   klab debug run grid_too_small     the kernel through the checks (their FAIL and ERROR lines)
//   klab hint debug/grid_too_small    how to read them, one hint at a time
//   klab check debug/grid_too_small   grades your fix
#include <cuda_runtime.h>

#include "catalog.cuh"
#include "klab/error.hpp"
#include "klab/op.hpp"

namespace debugging {
namespace {

// Grid: one thread an element, kThreads a block.
__global__ void __launch_bounds__(kThreads) debug_square_exercise(const float* __restrict__ g_x,
                                                                  float* __restrict__ g_y, i64 n) {
  const i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) g_y[i] = g_x[i] * g_x[i];
}

void run_exercise(const klab::Launch& l) {
  const i64 n = l.problem.shape[0];
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(n / kThreads);
  debug_square_exercise<<<blocks, kThreads, 0, l.stream>>>(l.in[0].as<const float>(), l.out[0].as<float>(), n);
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "debug_square", .name = "exercise",
                                   .summary = "your fix of the square's grid (debugging/grid_too_small.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .run = run_exercise}));

}  // namespace
}  // namespace debugging
