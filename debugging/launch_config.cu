// debugging/launch_config.cu — case launch_config: a launch with more threads a block than a
// block can have.
//
// Impl registered here (op `debug_bias_add`, f32):
//   exercise       the bias add below, with its bug: yours to find and fix
//
// y = x + b over a (rows, cols) matrix, a transformer's bias: one block a row (a token) and
// one thread a column (a channel), the mapping that reads most plainly. It passes at GPT-2's
// 768 channels; at its MLP's 3072 the launch itself fails, and the kernel never runs.
//
//   klab debug run launch_config     the kernel through the checks (their ERROR lines)
//   klab hint debug/launch_config    how to read them, one hint at a time
//   klab check debug/launch_config   grades your fix
#include <cuda_runtime.h>

#include "catalog.cuh"
#include "klab/error.hpp"
#include "klab/op.hpp"

namespace debugging {
namespace {

// Grid: one block per row, a thread per column.
__global__ void debug_bias_add_exercise(const float* __restrict__ g_x, const float* __restrict__ g_b,
                                        float* __restrict__ g_y, i64 cols) {
  const i64 i = static_cast<i64>(blockIdx.x) * cols + threadIdx.x;
  g_y[i] = g_x[i] + g_b[threadIdx.x];
}

void run_exercise(const klab::Launch& l) {
  const i64 rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0 || cols == 0) return;
  debug_bias_add_exercise<<<static_cast<unsigned>(rows), static_cast<unsigned>(cols), 0, l.stream>>>(
      l.in[0].as<const float>(), l.in[1].as<const float>(), l.out[0].as<float>(), cols);
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "debug_bias_add", .name = "exercise",
                                   .summary = "your fix of the bias add's launch (debugging/launch_config.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .run = run_exercise}));

}  // namespace
}  // namespace debugging
