// Lesson 02, Triton track — the C++ side of the Triton exercise (exercise_triton.py).
//
// Impl registered here (op `transpose`, f32 and bf16):
//   exercise_triton   the learner's Triton transpose, compiled ahead of time from
//                     exercise_triton.py; graded by `klab check 02 --triton` against `triton`
//
// The learner edits only the .py (cmake/KlabLesson.cmake builds it, its solution and each
// TODO variant beside a copy of this file). The generated launchers take (rows, cols) and
// launch GRID, the C expression the learner writes: row tiles on the grid's x axis, column
// tiles on y, which CUDA caps at 65535.
#include <cuda.h>

#include <string>

#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#if KLAB_HAVE_TRITON
#include "exercise_triton.h"
#endif

namespace {

constexpr std::int64_t kTile = 64;        // the AOT list's BLOCK_R = BLOCK_C
constexpr std::int64_t kMaxGridY = 65535;

void run_exercise_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const std::int64_t rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0 || cols == 0) return;   // a grid of zero programs is not a launch
  klab::triton_prepare();
  const auto x = reinterpret_cast<CUdeviceptr>(l.in[0].data);
  const auto y = reinterpret_cast<CUdeviceptr>(l.out[0].data);
  const auto s = reinterpret_cast<CUstream>(l.stream);
  if (l.problem.dtype == klab::DType::f32) KLAB_CHECK_CU(tr_ex_transpose_f32_default(s, x, y, rows, cols));
  else KLAB_CHECK_CU(tr_ex_transpose_bf16_default(s, x, y, rows, cols));
#else
  (void)l;
#endif
}

std::string exercise_triton_supports(const klab::Problem& p) {
  if (p.dtype != klab::DType::f32 && p.dtype != klab::DType::bf16) return "the Triton exercise takes f32 and bf16";
  if (klab::ceil_div<std::int64_t>(p.shape[1], kTile) > kMaxGridY)
    return "more than 65535 column tiles (the grid's y axis)";
  return klab::triton_supported();
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "transpose", .name = "exercise_triton",
                                   .summary = "your Triton tiled transpose (exercise_triton.py)",
                                   .kind = klab::ImplKind::exercise, .supports = exercise_triton_supports,
                                   .run = run_exercise_triton, .built_from = KLAB_TRITON_EXERCISE_PY}));
