// debugging/shared_memory_limit.cu — case shared_memory_limit: a launch asking for more
// shared memory than a kernel gets without asking.
//
// Impl registered here (op `debug_row_reverse`, f32):
//   exercise       the row reversal below, with its bug: yours to find and fix
//
// One block a row: the block copies its row into shared memory (dynamic, sized at launch to
// the row: cols floats), waits, and writes it out back to front, every read and write of
// global memory in order. Right on rows of up to 12,288 floats; past that the launch fails
// and the kernel never runs.
//
//   klab debug run shared_memory_limit     the kernel through the checks (their ERROR lines)
//   klab hint debug/shared_memory_limit    how to read them, one hint at a time
//   klab check debug/shared_memory_limit   grades your fix
#include <cuda_runtime.h>

#include "catalog.cuh"
#include "klab/error.hpp"
#include "klab/op.hpp"

namespace debugging {
namespace {

// Grid: one block per row; dynamic shared memory: the row, cols floats.
__global__ void __launch_bounds__(kThreads) debug_row_reverse_exercise(const float* __restrict__ g_x,
                                                                       float* __restrict__ g_y, i64 cols) {
  extern __shared__ float s_row[];   // (cols) the block's row
  const float* x = g_x + static_cast<i64>(blockIdx.x) * cols;
  float* y = g_y + static_cast<i64>(blockIdx.x) * cols;
  for (i64 c = threadIdx.x; c < cols; c += kThreads) s_row[c] = x[c];
  __syncthreads();   // the whole row in shared memory before any thread reads another's part
  for (i64 c = threadIdx.x; c < cols; c += kThreads) y[c] = s_row[cols - 1 - c];
}

void run_exercise(const klab::Launch& l) {
  const i64 rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0 || cols == 0) return;
  const auto smem = static_cast<int>(cols * sizeof(float));
  debug_row_reverse_exercise<<<static_cast<unsigned>(rows), kThreads, smem, l.stream>>>(l.in[0].as<const float>(),
                                                                                        l.out[0].as<float>(), cols);
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "debug_row_reverse", .name = "exercise",
                                   .summary = "your fix of the row reversal's launch (debugging/shared_memory_limit.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .run = run_exercise}));

}  // namespace
}  // namespace debugging
