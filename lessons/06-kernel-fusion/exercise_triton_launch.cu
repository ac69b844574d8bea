// Lesson 06, Triton track — the C++ side of the Triton exercise (exercise_triton.py).
//
// Impl registered here (op `linear_bias_act`, variant gelu, bf16):
//   exercise_triton   the learner's fused linear layer in Triton, y = gelu(x · Wᵀ + b): a
//                     tl.dot loop whose epilogue adds the bias and applies GELU to the fp32
//                     tile before its one store, compiled ahead of time from
//                     exercise_triton.py; graded by `klab check 06 --triton` against `triton`
//
// The learner edits only the .py (cmake/KlabLesson.cmake builds it, its solution and each
// TODO variant beside a copy of this file). The generated launcher
// tr_ex_linear_gelu_default takes (x, W, b, y, M, N, K) — the pitches are K, K and N: the
// harness's tensors are dense — and launches GRID, one program per 128 x 128 tile of y; it
// runs the entry hinted divisible by 16 when M, N and K allow it, the unhinted one
// otherwise. Unlike the CUDA exercise (lesson 05's Hopper matmul), it runs on sm_80 as well
// as sm_90.
//
// Run:  klab check 06 --triton       klab run 06 --op linear_bias_act --impl exercise_triton,triton --variant gelu
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

void run_exercise_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  // y (M, N) = gelu(x (M, K) · W (N, K)ᵀ + b (N)); the op's validate keeps each size <= 2^30.
  const auto& d = l.problem.shape;
  KLAB_REQUIRE(d.size() == 3, "exercise_triton linear_bias_act: the shape is {M, N, K}");
  const auto M = static_cast<int32_t>(d[0]), N = static_cast<int32_t>(d[1]), K = static_cast<int32_t>(d[2]);
  if (M == 0 || N == 0) return;   // a grid of zero programs is not a launch; K = 0 still stores gelu(b)
  klab::triton_prepare();
  KLAB_CHECK_CU(tr_ex_linear_gelu_default(reinterpret_cast<CUstream>(l.stream),
                                          reinterpret_cast<CUdeviceptr>(l.in.at(0).data),
                                          reinterpret_cast<CUdeviceptr>(l.in.at(1).data),
                                          reinterpret_cast<CUdeviceptr>(l.in.at(2).data),
                                          reinterpret_cast<CUdeviceptr>(l.out.at(0).data), M, N, K));
#else
  (void)l;
#endif
}

// The kernel applies GELU and nothing else: the other variants are `triton`'s (one ACT
// constexpr a launcher, linear_triton.py).
std::string exercise_triton_supports(const klab::Problem& p) {
  if (p.dtype != klab::DType::bf16) return "the Triton exercise is bf16 only";
  if (p.variant != "gelu") return "the Triton exercise is the gelu variant";
  return klab::triton_supported();
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "linear_bias_act", .name = "exercise_triton",
                                   .summary = "your fused linear layer in Triton, gelu(x W^T + b) (exercise_triton.py)",
                                   .kind = klab::ImplKind::exercise, .supports = exercise_triton_supports,
                                   .run = run_exercise_triton, .built_from = KLAB_TRITON_EXERCISE_PY}));
