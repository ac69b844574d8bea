// Lesson 01, Triton track — the C++ side of the Triton exercise (exercise_triton.py).
//
// Impl registered here (op `vector_add`, f32):
//   exercise_triton   the learner's Triton kernel, compiled ahead of time from
//                     exercise_triton.py; graded by `klab check 01 --triton` against `triton`
//
// The learner edits only the .py. The build compiles it (and, for klab-solutions and the
// TODO proofs, the solution and each of its variants) with tools/triton_aot.py and links
// this launcher beside each result: the generated tr_ex_vector_add_f32_default has the same
// signature in all of them, because the AOT list stays outside the TODO regions (but for
// the grid, a C expression inside the generated launcher).
#include <cuda.h>

#include <string>

#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#if KLAB_HAVE_TRITON
#include "exercise_triton.h"
#endif

namespace {

void run_exercise_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return;   // a grid of zero programs is not a launch
  klab::triton_prepare();
  KLAB_CHECK_CU(tr_ex_vector_add_f32_default(l.stream, reinterpret_cast<CUdeviceptr>(l.in[0].data),
                                             reinterpret_cast<CUdeviceptr>(l.in[1].data),
                                             reinterpret_cast<CUdeviceptr>(l.out[0].data), n));
#else
  (void)l;
#endif
}

std::string exercise_triton_supports(const klab::Problem& p) {
  if (p.dtype != klab::DType::f32) return "the Triton exercise is f32 only";
  return klab::triton_supported();
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "vector_add", .name = "exercise_triton",
                                   .summary = "your Triton vector add (exercise_triton.py)",
                                   .kind = klab::ImplKind::exercise, .supports = exercise_triton_supports,
                                   .run = run_exercise_triton, .built_from = KLAB_TRITON_EXERCISE_PY}));
