// Lesson 03, Triton track — the C++ side of the Triton exercise (exercise_triton.py).
//
// Impl registered here (op `sum`, f32 and i32):
//   exercise_triton   the learner's Triton sum in two stages (chunk partials, then one
//                     program), compiled ahead of time from exercise_triton.py; graded by
//                     `klab check 03 --triton` against `triton`
//
// The learner edits only the .py (cmake/KlabLesson.cmake builds it, its solution and each
// TODO variant beside a copy of this file). The generated launchers
// tr_ex_sum_stage1_<dtype>_default (x, part, n) and tr_ex_sum_stage2_<dtype>_default
// (part, s, m) launch the grids the learner writes, GRID_STAGE1 and GRID_STAGE2; stage 1
// takes its n-divisible-by-16 build when n allows. This file gives stage 1 the workspace
// for its partials, one per chunk of kChunk elements, and launches both stages as
// run_sum_triton does for `triton` (sum.cu). n = 0 launches no stage-1 program (an empty
// grid is a no-op) and stage 2 over m = 0 partials, which writes s = 0.
//
// Run:  klab check 03 --triton       klab run 03 --op sum --impl exercise_triton,triton --shape 2^28
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#if KLAB_HAVE_TRITON
#include "exercise_triton.h"
#endif

namespace {

constexpr std::int64_t kChunk = 65536;   // the AOT list's CHUNK: the elements of one partial

// One 4-byte partial (f32 or i32, the output's type) per chunk; 16 bytes more, so that
// n = 0 still gets a buffer.
std::size_t exercise_triton_workspace(const klab::Problem& p) {
  return static_cast<std::size_t>(klab::ceil_div<std::int64_t>(p.shape[0], kChunk)) * 4 + 16;
}

void run_exercise_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  klab::triton_prepare();
  const std::int64_t n = l.problem.shape[0];
  const std::int64_t parts = klab::ceil_div<std::int64_t>(n, kChunk);
  const auto x = reinterpret_cast<CUdeviceptr>(l.in[0].data);
  const auto ws = reinterpret_cast<CUdeviceptr>(l.workspace);
  const auto out = reinterpret_cast<CUdeviceptr>(l.out[0].data);
  const auto s = reinterpret_cast<CUstream>(l.stream);
  if (l.problem.dtype == klab::DType::f32) {
    KLAB_CHECK_CU(tr_ex_sum_stage1_f32_default(s, x, ws, n));
    KLAB_CHECK_CU(tr_ex_sum_stage2_f32_default(s, ws, out, parts));   // parts = 0 writes 0
  } else {
    KLAB_CHECK_CU(tr_ex_sum_stage1_i32_default(s, x, ws, n));
    KLAB_CHECK_CU(tr_ex_sum_stage2_i32_default(s, ws, out, parts));
  }
#else
  (void)l;
#endif
}

// The exercise takes every problem of the op (f32 and i32, any n): nothing to reject but a
// build or a device without Triton.
std::string exercise_triton_supports(const klab::Problem&) { return klab::triton_supported(); }

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "sum", .name = "exercise_triton",
                                   .summary = "your Triton sum, chunk partials then one program (exercise_triton.py)",
                                   .kind = klab::ImplKind::exercise, .supports = exercise_triton_supports,
                                   .workspace = exercise_triton_workspace, .run = run_exercise_triton,
                                   .built_from = KLAB_TRITON_EXERCISE_PY}));
