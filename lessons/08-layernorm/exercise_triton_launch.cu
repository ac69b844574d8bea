// Lesson 08, Triton track — the C++ side of the Triton exercise (exercise_triton.py).
//
// Impl registered here (op `layernorm`, f32 and bf16):
//   exercise_triton   the learner's Triton layernorm forward, one program a row, compiled
//                     ahead of time from exercise_triton.py; graded by `klab check 08
//                     --triton` against `triton`
//
// The learner edits only the .py (cmake/KlabLesson.cmake builds it, its solution and each
// TODO variant beside a copy of this file). The generated launchers
// tr_ex_layernorm_<dtype>_<block>_default take (rows, cols, eps), the arguments run_triton in
// layernorm.cu passes to `triton`, and launch GRID, the C expression the learner writes.
// This file picks the block: 4096 for rows up to 4096 elements, 32768 up to 32,768.
//
// Run:  klab check 08 --triton       klab run 08 --impl exercise_triton,triton
#include <cuda.h>

#include <cstdint>
#include <string>

#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#include "layernorm.cuh"
#if KLAB_HAVE_TRITON
#include "exercise_triton.h"
#endif

namespace {

void run_exercise_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const lesson08::LnArgs a = lesson08::ln_args(l);
  if (a.rows == 0) return;   // a grid of zero programs is not a launch
  klab::triton_prepare();
  const auto ptr = [](const void* q) { return reinterpret_cast<CUdeviceptr>(q); };
  const CUdeviceptr x = ptr(a.x), g = ptr(a.gamma), b = ptr(a.beta), y = ptr(a.y), m = ptr(a.mean), r = ptr(a.rstd);
  const auto rows = static_cast<std::int32_t>(a.rows), cols = static_cast<std::int32_t>(a.cols);
  const float eps = lesson08::kEps;
  const bool f32 = l.problem.dtype == klab::DType::f32;
  if (cols <= 4096)
    KLAB_CHECK_CU(f32 ? tr_ex_layernorm_f32_4096_default(l.stream, x, g, b, y, m, r, rows, cols, eps)
                      : tr_ex_layernorm_bf16_4096_default(l.stream, x, g, b, y, m, r, rows, cols, eps));
  else
    KLAB_CHECK_CU(f32 ? tr_ex_layernorm_f32_32768_default(l.stream, x, g, b, y, m, r, rows, cols, eps)
                      : tr_ex_layernorm_bf16_32768_default(l.stream, x, g, b, y, m, r, rows, cols, eps));
#else
  (void)l;
#endif
}

// The row is one block of at most 32,768 lanes, and the rows one grid dimension.
std::string exercise_triton_supports(const klab::Problem& p) {
  if (p.shape[1] > 32768) return "rows longer than 32,768 elements (the widest block compiled)";
  if (p.shape[0] > 0x7fffffff) return "too many rows for one grid";
  return klab::triton_supported();
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "layernorm", .name = "exercise_triton",
                                   .summary = "your Triton layernorm forward, one program a row (exercise_triton.py)",
                                   .kind = klab::ImplKind::exercise, .supports = exercise_triton_supports,
                                   .run = run_exercise_triton, .built_from = KLAB_TRITON_EXERCISE_PY}));
