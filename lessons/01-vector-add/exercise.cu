// Lesson 01 exercise — write the grid-stride vector add.
//
// Impl registered here (op `vector_add`, f32):
//   exercise       your grid-stride loop, timed against v2_grid_stride
//
// Fill in the kernel below so that z[i] = x[i] + y[i] for every i in [0, n), then run
//
//     klab check 01
//
// which checks your kernel on unseen seeds and every edge case (0 and 1 elements, primes,
// more than 2^31 elements), then times it against v2_grid_stride. Until the kernel writes
// every element, the check fails: the harness fills z with NaN before each launch.
//
// Hints
//   1. A thread's first element is its global index: blockIdx.x * blockDim.x + threadIdx.x.
//      Do that arithmetic in 64 bits (std::int64_t) or it wraps around past 2^31.
//   2. The grid is smaller than n: after each element, jump by the number of threads in
//      the whole grid (gridDim.x * blockDim.x) until you pass n.
//   3. Guard every access with i < n: the last jump usually lands past the end.
#include <cuda_runtime.h>

#include <string>

#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace {

__global__ void vector_add_exercise(const float* __restrict__ g_x, const float* __restrict__ g_y,
                                    float* __restrict__ g_z, std::int64_t n) {
  // TODO 1: the grid-stride loop (hints 1-3).
}

void run_exercise(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return;
  constexpr int kThreads = 256;
  // The grid is fixed, whatever n is: your loop must cover the rest.
  const unsigned blocks = klab::blocks_for(n, kThreads, 1024);
  vector_add_exercise<<<blocks, kThreads, 0, l.stream>>>(l.in[0].as<const float>(), l.in[1].as<const float>(),
                                                          l.out[0].as<float>(), n);
}

std::string exercise_supports(const klab::Problem& p) {
  return p.dtype == klab::DType::f32 ? std::string() : std::string("the exercise is f32 only");
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "vector_add", .name = "exercise",
                                   .summary = "your grid-stride vector add (exercise.cu)",
                                   .kind = klab::ImplKind::exercise, .supports = exercise_supports,
                                   .run = run_exercise}));
