// Lesson 06 exercise — the bias and GELU fused into the matmul's epilogue.
//
// Impl registered here (op `linear_bias_act`, variant gelu, bf16, on Hopper):
//   exercise       your epilogue inside lesson 05's Hopper matmul, timed against v2_fused_epilogue
//
// Lesson 05's fastest matmul (v19_tma_store) computes each 128 x 256 tile of y = x · Wᵀ in
// fp32 registers, then stores it. Just before the store it calls the epilogue's apply() on
// every MMA thread's accumulators. Write that epilogue: add the bias of each accumulator's
// column and apply GELU (tanh form), so that y = gelu(x · Wᵀ + b) leaves the kernel in one
// store and the pre-activation never goes to memory. Then run
//
//     klab check 06
//
// which checks it against an fp64 reference on unseen seeds and every edge shape (partial
// tiles, odd N, K = 0 is handled for you), then times it against v2_fused_epilogue.
//
// The thread's accumulators (lessons/05-matmul/matmul_wgmma.cuh): r_acc[4j + 2h + e] is the
// output at row `row + 8h` and column `col + 8j + e` (j over the tile's 32 groups of 8
// columns, h = 0 or 1, e = 0 or 1). Columns past N exist in the last tile; they are never
// stored, but their bias must not be read past the end of b.
//
// Hints (klab hint 06)
//   1. The bias depends on the column only: col + 8j + e.
//   2. gelu(v) = 0.5 · v · (1 + tanh(0.7978845608 · (v + 0.044715 · v³))), in fp32.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "fusion.cuh"
#include "klab/op.hpp"
#include "linear_wgmma.cuh"

namespace {

using lesson06::bf16;

struct ExerciseEpilogue {
  const bf16* g_bias;  // b, N values
  int N;
  template <int ACC>
  __device__ __forceinline__ void apply(float (&r_acc)[ACC], int row, int col) const {
#pragma unroll
    for (int j = 0; j < ACC / 4; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float bias = 0.f;
        // TODO 1: the bias of column col + 8j + e (hint 1); 0 past N.
        const int n = col + 8 * j + e;
        if (n < N) bias = __bfloat162float(g_bias[n]);
        // end of TODO 1
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float v = r_acc[4 * j + 2 * h + e] + bias;
          // TODO 2: v = gelu(v), the tanh form (hint 2).
          v = 0.5f * v * (1.f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
          // end of TODO 2
          r_acc[4 * j + 2 * h + e] = v;
        }
      }
    }
    (void)row;
  }
};

void run_exercise(const klab::Launch& l) {
  lesson06::launch_linear_wgmma(l, ExerciseEpilogue{l.in[2].as<const bf16>(), static_cast<int>(l.problem.shape[1])});
}

std::string exercise_supports(const klab::Problem& p) {
  if (p.variant != "gelu") return "the exercise is the gelu variant";
  return lesson06::supports_linear_wgmma(p);
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "linear_bias_act", .name = "exercise",
                                   .summary = "your bias + GELU epilogue in lesson 05's Hopper matmul (exercise.cu)",
                                   .kind = klab::ImplKind::exercise, .supports = exercise_supports,
                                   .run = run_exercise}));
