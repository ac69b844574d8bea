// debugging/divergent_barrier.cu — case divergent_barrier: a barrier that only some threads reach.
//
// Impl registered here (op `debug_row_max`, f32):
//   exercise       the row max below, with its bug: yours to find and fix
//
// One block of 256 threads takes the max of one row of x: each thread the max of every 256th
// element, then a tree in shared memory, half of the threads taking the max of their value
// and the other half's at each step, with a barrier after each step. Someone moved the
// barrier inside the `if` that picks the threads of a step: the maxima can still come out
// right, which is what makes the bug hard to see.
//
//   klab debug run divergent_barrier     the kernel under compute-sanitizer's synccheck
//   klab hint debug/divergent_barrier    how to read its report, one hint at a time
//   klab check debug/divergent_barrier   grades your fix: the checks, then synccheck clean
#include <cuda_runtime.h>

#include <cmath>

#include "catalog.cuh"
#include "klab/error.hpp"
#include "klab/op.hpp"

namespace debugging {
namespace {

// Grid: one block per row.
__global__ void __launch_bounds__(kThreads) debug_row_max_exercise(const float* __restrict__ g_x, float* g_y, i64 cols) {
  __shared__ float s_part[kThreads];   // (256) the threads' partial maxima
  const float* row = g_x + static_cast<i64>(blockIdx.x) * cols;
  const int t = threadIdx.x;
  float m = -INFINITY;
  for (i64 c = t; c < cols; c += kThreads) m = fmaxf(m, row[c]);
  s_part[t] = m;
  __syncthreads();   // every partial max written before the tree reads them
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) {
      s_part[t] = fmaxf(s_part[t], s_part[t + half]);
      __syncthreads();   // this step done before the next reads it
    }
  }
  if (t == 0) g_y[blockIdx.x] = s_part[0];
}

void run_exercise(const klab::Launch& l) {
  const i64 rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0) return;
  debug_row_max_exercise<<<static_cast<unsigned>(rows), kThreads, 0, l.stream>>>(l.in[0].as<const float>(),
                                                                                 l.out[0].as<float>(), cols);
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "debug_row_max", .name = "exercise",
                                   .summary = "your fix of the row max's barrier (debugging/divergent_barrier.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .run = run_exercise}));

}  // namespace
}  // namespace debugging
