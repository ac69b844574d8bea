// Lesson 05, Triton track — the C++ side of the Triton exercise (exercise_triton.py).
//
// Impl registered here (op `matmul`, bf16, layout nn):
//   exercise_triton   the learner's Triton tl.dot matmul, compiled ahead of time from
//                     exercise_triton.py; graded by `klab check 05 --triton` against `triton`
//
// The learner edits only the .py (cmake/KlabLesson.cmake builds it, its solution and each
// TODO variant beside a copy of this file). The generated launcher tr_ex_matmul_nn_default
// takes (M, N, K, lda, ldb, ldc) and launches GRID, the C expression the learner writes
// (every tile of C on the grid's x axis); it runs the entry hinted divisible by 16 when the
// arguments allow it, the unhinted one otherwise.
#include <cuda.h>

#include <cstdint>
#include <string>

#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#include "matmul.cuh"
#if KLAB_HAVE_TRITON
#include "exercise_triton.h"
#endif

namespace {

void run_exercise_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const lesson05::GemmArgs g = lesson05::gemm_args(l);
  if (lesson05::empty_output(g)) return;   // a grid of zero programs is not a launch; K = 0 still writes C = 0
  klab::triton_prepare();
  KLAB_CHECK_CU(tr_ex_matmul_nn_default(reinterpret_cast<CUstream>(l.stream), reinterpret_cast<CUdeviceptr>(g.A),
                                        reinterpret_cast<CUdeviceptr>(g.B), reinterpret_cast<CUdeviceptr>(g.C), g.M,
                                        g.N, g.K, static_cast<int32_t>(g.lda), static_cast<int32_t>(g.ldb),
                                        static_cast<int32_t>(g.ldc)));
#else
  (void)l;
#endif
}

std::string exercise_triton_supports(const klab::Problem& p) {
  if (p.dtype != klab::DType::bf16) return "the Triton exercise is bf16 only";
  if (p.variant != "nn") return "the Triton exercise takes the layout nn only (A stored (M, K), B stored (K, N))";
  return klab::triton_supported();
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "exercise_triton",
                                   .summary = "your Triton tl.dot matmul, bf16 nn (exercise_triton.py)",
                                   .kind = klab::ImplKind::exercise, .supports = exercise_triton_supports,
                                   .run = run_exercise_triton, .built_from = KLAB_TRITON_EXERCISE_PY}));
