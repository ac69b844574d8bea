// Lesson 05 — exercise: the shared-memory tiled matmul (fp32).
//
//   exercise   op matmul, f32: your kernel matmul_exercise (launcher run_exercise)
//
// A 32x32 block of threads computes a 32x32 tile of C = A · B. Walking K in steps of 32,
// the block copies one 32x32 tile of A and one of B into shared memory, waits for the
// copy to finish, lets every thread take its dot product over the tile, and waits again
// before the next copy. Each global element is then read by one thread instead of 32.
//
// Fill in the four TODOs below. Then:
//   klab check 05        correctness on unseen seeds and edge shapes, then speed against
//                        v3_smem_tiles (the reference version of this exercise)
//
// Helpers (matmul.cuh):
//   a_at<AK>(A, lda, m, k)  element A(m, k) as float, whatever A's layout
//   b_at<BK>(B, ldb, k, n)  element B(k, n) as float
//   z.k_len                 how much of K this block covers (K itself here)
//   g.M, g.N, g.ldc         sizes and the row pitch of C
// Shapes are arbitrary (127 x 257 x 67, K = 0, ...): elements of a tile that fall outside
// the matrix must be stored as 0 so that they add nothing.
#include <cuda_runtime.h>

#include "klab/error.hpp"
#include "klab/op.hpp"
#include "matmul.cuh"

namespace {

using lesson05::a_at;
using lesson05::b_at;
using lesson05::GemmArgs;

template <bool AK, bool BK>
__global__ void matmul_exercise(GemmArgs g) {
  constexpr int T = 32;
  __shared__ float s_A[T][T];  // s_A[i][k] = A(m0 + i, k0 + k)
  __shared__ float s_B[T][T];  // s_B[k][j] = B(k0 + k, n0 + j)
  const auto z = lesson05::z_slice<AK, BK, float, float>(g);
  const int tx = threadIdx.x, ty = threadIdx.y;   // this thread computes C(m0 + ty, n0 + tx)
  const int m0 = blockIdx.y * T, n0 = blockIdx.x * T;
  float acc = 0.f;

  for (int k0 = 0; k0 < z.k_len; k0 += T) {
    // TODO 1: each thread loads one element of each tile:
    //   s_A[ty][tx] = A(m0 + ty, k0 + tx)   and   s_B[ty][tx] = B(k0 + ty, n0 + tx),
    //   or 0 when the row/column is past g.M / g.N or the k is past z.k_len.

    // TODO 2: wait until the whole block has written its elements.

    // TODO 3: acc += Σ_k s_A[ty][k] · s_B[k][tx] over the tile.

    // TODO 4: wait until the whole block is done reading before the next iteration
    //         overwrites the tiles.
  }
  const int m = m0 + ty, n = n0 + tx;
  if (m < g.M && n < g.N) z.C[static_cast<std::int64_t>(m) * g.ldc + n] = acc;
}

void run_exercise(const klab::Launch& l) {
  GemmArgs g = lesson05::gemm_args(l);
  if (lesson05::empty_output(g)) return;
  const dim3 grid(static_cast<unsigned>(klab::ceil_div(g.N, 32)), static_cast<unsigned>(klab::ceil_div(g.M, 32)));
  lesson05::dispatch_layout(l.problem.variant, [&]<bool AK, bool BK>() {
    matmul_exercise<AK, BK><<<grid, dim3(32, 32), 0, l.stream>>>(g);
  });
  KLAB_CHECK_LAUNCH();
}

std::string supports_exercise(const klab::Problem& p) {
  if (p.dtype != klab::DType::f32) return "f32 only (the exercise is the fp32 tiled kernel)";
  if (klab::ceil_div<std::int64_t>(p.shape[0], 32) > 65535) return "M over 65535·32 (grid y)";
  return "";
}

KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "exercise",
                                   .summary = "your shared-memory tiled matmul (lessons/05-matmul/exercise.cu)",
                                   .kind = klab::ImplKind::exercise, .supports = supports_exercise,
                                   .run = run_exercise}));

}  // namespace
