// debugging/missing_barrier.cu — case missing_barrier: a shared-memory reduction without its
// barriers.
//
// Impl registered here (op `debug_row_sum`, f32):
//   exercise       the row sum below, with its bug: yours to find and fix
//
// One block of 256 threads sums one row of x: each thread adds every 256th element, writes
// its partial sum to shared memory, and the block adds the 256 partial sums in a tree, half
// of the threads adding the other half's value at each step. The sums come out wrong on some
// rows, differently from run to run, or right by luck: a bug the checks may not see.
//
//   klab debug run missing_barrier     the kernel under compute-sanitizer's racecheck
//   klab hint debug/missing_barrier    how to read its report, one hint at a time
//   klab check debug/missing_barrier   grades your fix: the checks, then racecheck clean
#include <cuda_runtime.h>

#include "catalog.cuh"
#include "klab/error.hpp"
#include "klab/op.hpp"

namespace debugging {
namespace {

// Grid: one block per row.
__global__ void __launch_bounds__(kThreads) debug_row_sum_exercise(const float* __restrict__ g_x, float* g_y, i64 cols) {
  __shared__ float s_part[kThreads];   // (256) the threads' partial sums
  const float* row = g_x + static_cast<i64>(blockIdx.x) * cols;
  const int t = threadIdx.x;
  float acc = 0.f;
  for (i64 c = t; c < cols; c += kThreads) acc += row[c];
  s_part[t] = acc;
  __syncthreads();   // every partial sum written before the tree reads them
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) s_part[t] += s_part[t + half];
    // The fix: a step reads what the step before wrote, in other warps; no warp may start
    // the next step (nor thread 0 read the total) before every warp has finished this one.
    // Outside the `if`: every thread of the block must reach the barrier.
    __syncthreads();
  }
  if (t == 0) g_y[blockIdx.x] = s_part[0];
}

void run_exercise(const klab::Launch& l) {
  const i64 rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0) return;
  debug_row_sum_exercise<<<static_cast<unsigned>(rows), kThreads, 0, l.stream>>>(l.in[0].as<const float>(),
                                                                                 l.out[0].as<float>(), cols);
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "debug_row_sum", .name = "exercise",
                                   .summary = "your fix of the row sum's race (debugging/missing_barrier.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .run = run_exercise}));

}  // namespace
}  // namespace debugging
