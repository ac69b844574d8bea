// Lesson 04, Triton track — the C++ side of the Triton exercise (exercise_triton.py).
//
// Impl registered here (op `softmax_rows`, f32 and bf16, the plain variant):
//   exercise_triton   the learner's Triton row softmax, one program per row holding the row
//                     in one tile, compiled ahead of time from exercise_triton.py; graded by
//                     `klab check 04 --triton` against `triton`
//
// The learner edits only the .py (cmake/KlabLesson.cmake builds it, its solution and each
// TODO variant beside a copy of this file). The generated launchers, one per tile width
// (tr_ex_softmax_<dtype>_b<BLOCK>_default), take (rows, cols) as 32-bit integers and launch
// GRID, the C expression the learner writes; each picks its cols-divisible-by-16 build when
// cols allows. This file picks the smallest tile that holds the row, as softmax_triton.cu
// does for `triton`. Rows longer than the largest tile, and the causal variant, are left to
// `triton` (its loop kernel, its causal limit): the exercise reports them unsupported.
//
// Run:  klab check 04 --triton       klab run 04 --impl exercise_triton,triton --shape 8192x8192
#include <cuda.h>

#include <cstdint>
#include <string>

#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#if KLAB_HAVE_TRITON
#include "exercise_triton.h"
#endif

namespace {

constexpr std::int64_t kMaxTile = 131072;   // the AOT list's largest BLOCK

void run_exercise_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const std::int64_t rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0 || cols == 0) return;   // a grid of zero programs is not a launch
  klab::triton_prepare();
  const auto x = reinterpret_cast<CUdeviceptr>(l.in[0].data);
  const auto y = reinterpret_cast<CUdeviceptr>(l.out[0].data);
  const auto s = reinterpret_cast<CUstream>(l.stream);
  // The op's validate keeps rows and cols within 31 bits; supports keeps cols <= kMaxTile.
  const auto r = static_cast<std::int32_t>(rows), c = static_cast<std::int32_t>(cols);
  const bool f32 = l.problem.dtype == klab::DType::f32;
  if (cols <= 1024)
    KLAB_CHECK_CU(f32 ? tr_ex_softmax_f32_b1024_default(s, x, y, r, c) : tr_ex_softmax_bf16_b1024_default(s, x, y, r, c));
  else if (cols <= 4096)
    KLAB_CHECK_CU(f32 ? tr_ex_softmax_f32_b4096_default(s, x, y, r, c) : tr_ex_softmax_bf16_b4096_default(s, x, y, r, c));
  else if (cols <= 8192)
    KLAB_CHECK_CU(f32 ? tr_ex_softmax_f32_b8192_default(s, x, y, r, c) : tr_ex_softmax_bf16_b8192_default(s, x, y, r, c));
  else if (cols <= 16384)
    KLAB_CHECK_CU(f32 ? tr_ex_softmax_f32_b16384_default(s, x, y, r, c)
                      : tr_ex_softmax_bf16_b16384_default(s, x, y, r, c));
  else if (cols <= 32768)
    KLAB_CHECK_CU(f32 ? tr_ex_softmax_f32_b32768_default(s, x, y, r, c)
                      : tr_ex_softmax_bf16_b32768_default(s, x, y, r, c));
  else
    KLAB_CHECK_CU(f32 ? tr_ex_softmax_f32_b131072_default(s, x, y, r, c)
                      : tr_ex_softmax_bf16_b131072_default(s, x, y, r, c));
#else
  (void)l;
#endif
}

std::string exercise_triton_supports(const klab::Problem& p) {
  if (p.variant == "causal") return "the Triton exercise is the plain softmax (the causal variant is `triton`'s)";
  if (p.shape[1] > kMaxTile) return "rows longer than 131072 columns, the exercise's largest tile";
  return klab::triton_supported();
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "softmax_rows", .name = "exercise_triton",
                                   .summary = "your Triton row softmax (exercise_triton.py)",
                                   .kind = klab::ImplKind::exercise, .supports = exercise_triton_supports,
                                   .run = run_exercise_triton, .built_from = KLAB_TRITON_EXERCISE_PY}));
