// debugging/uninit_shared.cu — case uninit_shared: a shared tile read where it was never
// written.
//
// Impl registered here (op `debug_block_sum`, f32):
//   exercise       the chunk sums below, with their bug: yours to find and fix
//
// One block of 256 threads sums one chunk of 256 elements of x: each thread loads one
// element into a shared tile, and the block adds the tile in a tree. When n is not a
// multiple of 256 the last chunk is short, and its sum may come out wrong, by an amount that
// changes from run to run.
//
//   klab debug run uninit_shared     the kernel under compute-sanitizer's initcheck
//   klab hint debug/uninit_shared    how to read its report, one hint at a time
//   klab check debug/uninit_shared   grades your fix: the checks, then initcheck clean
#include <cuda_runtime.h>

#include "catalog.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace debugging {
namespace {

// Grid: one block per chunk of kChunk elements.
__global__ void __launch_bounds__(kThreads) debug_block_sum_exercise(const float* __restrict__ g_x, float* g_y, i64 n) {
  static_assert(kChunk == kThreads, "one element a thread");
  __shared__ float s_tile[kChunk];   // (256) the chunk
  const int t = threadIdx.x;
  const i64 i = static_cast<i64>(blockIdx.x) * kChunk + t;
  if (i < n) s_tile[t] = g_x[i];
  __syncthreads();   // the tile loaded before the tree reads it
  for (int half = kChunk / 2; half > 0; half /= 2) {
    if (t < half) s_tile[t] += s_tile[t + half];
    __syncthreads();
  }
  if (t == 0) g_y[blockIdx.x] = s_tile[0];
}

void run_exercise(const klab::Launch& l) {
  const i64 n = l.problem.shape[0];
  if (n == 0) return;
  debug_block_sum_exercise<<<klab::blocks_for(n, kChunk), kThreads, 0, l.stream>>>(l.in[0].as<const float>(),
                                                                                   l.out[0].as<float>(), n);
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "debug_block_sum", .name = "exercise",
                                   .summary = "your fix of the chunk sums' tile (debugging/uninit_shared.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .run = run_exercise}));

}  // namespace
}  // namespace debugging
