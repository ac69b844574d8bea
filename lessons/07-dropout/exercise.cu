// Lesson 07 exercise — the dropout keep mask, drawn in registers, never stored.
//
// Impl registered here (op `dropout`, f32):
//   exercise       your fused dropout, timed against v2_philox_fused
//
// Each thread of the grid-stride loop below owns a quad: the 4 consecutive elements
// 4q .. 4q + 3. Fill in the two TODOs so that y[i] = x[i] / (1 - p) for the elements the
// stream keeps and 0 for the others, then run
//
//     klab check 07
//
// which checks your kernel bit for bit against the mask of klab/device/philox.cuh on
// unseen seeds, at p = 0, 0.1, 0.5, 0.9 and 1, on every edge shape (empty, one element,
// sizes that are no multiple of 4, more than 2^31 elements), then times it against
// v2_philox_fused. Until the kernel writes every element, the check fails: the harness
// fills y with NaN before each launch.
//
// Hints (klab hint 07)
//   1. One call, klab::dropout_bits(a.seed, a.offset, q), gives the quad's four 32-bit words.
//   2. Element 4q + w is kept when word w is at least a.threshold (an integer compare: it is
//      exact at p = 0 and p = 1).
//   3. A kept element is x * a.scale, a dropped one 0; the last quad may reach past n.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "dropout.cuh"
#include "klab/device/philox.cuh"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace {

using lesson07::DropoutArgs;

__global__ void dropout_exercise(const float* __restrict__ g_x, float* __restrict__ g_y, std::int64_t n,
                                 DropoutArgs a) {
  const std::int64_t quads = (n + 3) / 4, stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t q = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < quads; q += stride) {
    klab::Philox4 bits{};
    // TODO 1: the quad's four random words into bits (hint 1).
    // TODO 2: each of the quad's elements inside n: kept (hint 2), written (hint 3).
  }
}

void run_exercise(const klab::Launch& l) {
  const std::int64_t n = lesson07::numel(l.problem);
  if (n == 0) return;
  // The grid is fixed, whatever n is: the loop covers the rest.
  const unsigned blocks = klab::blocks_for((n + 3) / 4, lesson07::kThreads, 1024);
  dropout_exercise<<<blocks, lesson07::kThreads, 0, l.stream>>>(l.in[0].as<const float>(), l.out[0].as<float>(), n,
                                                                lesson07::dropout_args(l));
}

std::string exercise_supports(const klab::Problem& p) {
  return p.dtype == klab::DType::f32 ? std::string() : std::string("the exercise is f32 only");
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "dropout", .name = "exercise",
                                   .summary = "your fused dropout keep mask (exercise.cu)",
                                   .kind = klab::ImplKind::exercise, .supports = exercise_supports,
                                   .run = run_exercise}));
