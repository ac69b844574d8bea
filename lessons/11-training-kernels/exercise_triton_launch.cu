// Lesson 11, Triton track — the C++ side of the Triton exercise (exercise_triton.py).
//
// Impl registered here (op `adamw`, variant plain):
//   exercise_triton   the learner's Triton AdamW update, one launch per tensor and per step,
//                     1024 elements a program, compiled ahead of time from exercise_triton.py;
//                     graded by `klab check 11 --triton` against `triton`
//
// The learner edits only the .py (cmake/KlabLesson.cmake builds it, its solution and each
// TODO variant beside a copy of this file). The generated launcher tr_ex_adamw_default takes
// (p, g, m, v, n, then klab::AdamWStep's eight constants) and launches GRID, the C expression
// the learner writes; it runs the entry with every pointer and n hinted divisible by 16 when
// they are, the other one otherwise. This file loops over the steps and the tensors as
// v1_per_tensor does: step s of tensor k reads g_k at s · n_k elements, with the constants of
// step t0 + s (adamw_step_at, training.cuh). An empty tensor launches nothing.
//
// The exercise is the update alone: variant plain. Clipping needs the norm of every tensor's
// gradient before the first update (a second kernel and a reduction), the bf16 copy a third
// store; both are `triton`'s (adamw_triton.py).
//
// Run:  klab check 11 --triton       klab run 11 --op adamw --impl exercise_triton,triton --variant plain
#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#include "training.cuh"
#if KLAB_HAVE_TRITON
#include "exercise_triton.h"
#endif

namespace {

using lesson11::kExpAvg;
using lesson11::kExpAvgSq;
using lesson11::kGrad;
using lesson11::kParam;

void run_exercise_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const std::int64_t tensors = l.problem.shape[1], steps = l.problem.shape[2];
  const std::vector<std::int64_t> sizes = lesson11::adamw_sizes(l.problem.shape[0], tensors);
  const lesson11::AdamWHyper h = lesson11::adamw_hyper(l.scalars);
  klab::triton_prepare();
  const auto s = reinterpret_cast<CUstream>(l.stream);
  const auto at = [&](int role, std::int64_t k) { return l.in[static_cast<std::size_t>(role * tensors + k)].data; };
  for (std::int64_t step = 0; step < steps; ++step) {
    const klab::AdamWStep c = lesson11::adamw_step_at(h, step);
    for (std::int64_t k = 0; k < tensors; ++k) {
      const std::int64_t n = sizes[static_cast<std::size_t>(k)];
      if (n == 0) continue;   // a grid of zero programs is not a launch
      const auto p = reinterpret_cast<CUdeviceptr>(at(kParam, k));
      const auto g = reinterpret_cast<CUdeviceptr>(static_cast<const float*>(at(kGrad, k)) + step * n);
      const auto m = reinterpret_cast<CUdeviceptr>(at(kExpAvg, k));
      const auto v = reinterpret_cast<CUdeviceptr>(at(kExpAvgSq, k));
      KLAB_CHECK_CU(tr_ex_adamw_default(s, p, g, m, v, n, c.beta1, c.one_minus_beta1, c.beta2, c.one_minus_beta2, c.eps,
                                        c.decay, c.step_size, c.inv_sqrt_bc2));
    }
  }
#else
  (void)l;
#endif
}

std::string exercise_triton_supports(const klab::Problem& p) {
  if (p.variant != "plain")
    return "the Triton exercise is the plain update (clipping and the bf16 copy are `triton`'s, adamw_triton.py)";
  return klab::triton_supported();
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "adamw", .name = "exercise_triton",
                                   .summary = "your Triton AdamW update, a launch a tensor a step (exercise_triton.py)",
                                   .kind = klab::ImplKind::exercise, .supports = exercise_triton_supports,
                                   .run = run_exercise_triton, .built_from = KLAB_TRITON_EXERCISE_PY}));
