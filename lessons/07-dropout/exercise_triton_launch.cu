// Lesson 07, Triton track — the C++ side of the Triton exercise (exercise_triton.py).
//
// Impl registered here (op `dropout`, f32 and bf16, every p):
//   exercise_triton   the learner's Triton dropout, tl.philox on the lesson's stream, 256
//                     quads a program, compiled ahead of time from exercise_triton.py;
//                     graded by `klab check 07 --triton` against `triton`
//
// The learner edits only the .py (cmake/KlabLesson.cmake builds it, its solution and each
// TODO variant beside a copy of this file). The generated launchers
// tr_ex_dropout_<dtype>_default take (n, seed, offset low, offset high, threshold, scale),
// the arguments run_triton in dropout.cu passes to `triton`, and launch GRID, the C
// expression the learner writes; each runs the entry with n hinted divisible by 16 when n
// allows it, the unhinted one otherwise. The exercise takes every dtype and p of the op,
// as `triton` does.
//
// Run:  klab check 07 --triton       klab run 07 --impl exercise_triton,triton --variant p0.1
#include <cuda.h>

#include <cstdint>
#include <string>

#include "dropout.cuh"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#if KLAB_HAVE_TRITON
#include "exercise_triton.h"
#endif

namespace {

void run_exercise_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const std::int64_t n = lesson07::numel(l.problem);
  if (n == 0) return;   // a grid of zero programs is not a launch
  const lesson07::DropoutArgs a = lesson07::dropout_args(l);
  klab::triton_prepare();
  // The offset's halves travel as int32 bit patterns (tl.philox reads them as uint32); the
  // seed and the threshold as int64 (the threshold is 2^32 at p = 1).
  const auto lo = static_cast<std::int32_t>(static_cast<std::uint32_t>(a.offset));
  const auto hi = static_cast<std::int32_t>(static_cast<std::uint32_t>(a.offset >> 32));
  const auto seed = static_cast<std::int64_t>(a.seed), threshold = static_cast<std::int64_t>(a.threshold);
  const auto x = reinterpret_cast<CUdeviceptr>(l.in[0].data), y = reinterpret_cast<CUdeviceptr>(l.out[0].data);
  if (l.problem.dtype == klab::DType::f32)
    KLAB_CHECK_CU(tr_ex_dropout_f32_default(l.stream, x, y, n, seed, lo, hi, threshold, a.scale));
  else
    KLAB_CHECK_CU(tr_ex_dropout_bf16_default(l.stream, x, y, n, seed, lo, hi, threshold, a.scale));
#else
  (void)l;
#endif
}

// f32 and bf16 both, like lesson 04's Triton exercise: the kernel computes in fp32 and
// stores in y's type, so one source serves both.
std::string exercise_triton_supports(const klab::Problem&) { return klab::triton_supported(); }

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "dropout", .name = "exercise_triton",
                                   .summary = "your Triton dropout, tl.philox on the lesson's stream (exercise_triton.py)",
                                   .kind = klab::ImplKind::exercise, .supports = exercise_triton_supports,
                                   .run = run_exercise_triton, .built_from = KLAB_TRITON_EXERCISE_PY}));
