// Lesson 06 — the backward of the linear layer's GELU and bias: op linear_dgelu_bgrad.
//
// In a transformer's MLP, z = x · W1ᵀ + b1, h = gelu(z), y = h · W2ᵀ + b2. Going back, the
// gradient of h comes out of the second layer's matmul, dh = dy · W2, and the first layer
// needs
//   dz = dh ⊙ gelu'(z)          the gradient of its pre-activation (M, N), bf16
//   db = Σ over the rows of dz  the gradient of its bias (N), fp32
// — cuBLASLt's DGELU_BGRAD epilogue. z is the pre-activation the forward saved (bf16).
//
//   linear_dgelu_bgrad   {M, N, K}   bf16
//     in:  dy (M, K), the gradient of the second layer's output; w (K, N), the second
//          layer's weight as that layer stores it (K outputs of N inputs); z (M, N)
//     out: dz (M, N) bf16 = (dy · w) ⊙ gelu'(z); db (N) fp32 = Σ_m dz[m, :]
// GPT-2 small's first MLP layer: M = 8192 tokens, N = 3072, K = 768.
//
// The kernels: linear_backward.cu (v1_matmul_then_dgelu_bgrad, v2_fused_epilogue),
// linear_cublaslt.cu (cublaslt_epilogue). gelu' is klab::gelu_tanh_grad
// (klab/device/activation.cuh), its fp64 reference klab::gelu_tanh_grad_ref.
//
//   klab test 06 --op linear_dgelu_bgrad
//   klab bench 06 --op linear_dgelu_bgrad
//
// Inputs: dy and w uniform in [-1, 1) (dh has the spread of lesson 05's products,
// σ_K = sqrt(K)/3); z uniform in [-4, 4), which covers GELU's curved middle and both
// flat ends (gelu' about 0 below -3, about 1 above 3), where a wrong derivative shows.
//
// Tolerances.
//   dz: lesson 05's bf16 product tolerance at depth K (gemm_tolerance: 2^-7 of σ_K
//   absolute, 2^-7 relative, rel-L2 2^-8 with σ_K as the floor of the denominator).
//   dz = dh · gelu'(z) with |gelu'| ≤ 1.13, so dh's error passes through about unchanged;
//   gelu_tanh_grad's own relative error (about 2^-21, no difference of nearly equal
//   values: activation.cuh) is far below dz's bf16 rounding (up to 2^-8 of dz: bf16 keeps 8
//   significant bits). An unfused version rounds dh to bf16 before the product: up to
//   2^-8 · |dh · gelu'| = 2^-8 · |dz| more, relative to dz itself, so the two roundings
//   stay within 2^-7 of |dz| (and the absolute term's 2^-7 · σ_K covers the 2^-16 beyond);
//   their mean square, about 2^-8 · sqrt(2/3), stays under the rel-L2 bound.
//   db: the sum of M values of dz, each about σ_K · ρ with ρ = 0.72 the root mean square of
//   gelu'(z) over z in [-4, 4) (rms_gelu_grad below computes it): the sum's spread is
//   σ_db = sqrt(M) · σ_K · ρ, and the tolerance is 2^-7 of it absolute, 2^-7 relative, rel-L2
//   2^-8 with σ_db as its floor. The kernels add fp32 values of dz whose errors are
//   independent, at most 2^-8 · |dz| and about 2^-8 / sqrt(3) of it in mean square where a
//   bf16 rounding came first: sqrt(M) · 2^-8 · σ_K · ρ / sqrt(3) ≈ 0.3 · 2^-7 · σ_db, under a
//   third of the bound; fp32 addition over at most a few thousand terms in a
//   tree adds a few units of 2^-24 of the sum of |dz|, below that. A row of dz missing from
//   db moves it by 1/sqrt(M) in rel-L2 (above 2^-8 for M below 65,536); the other mistakes
//   tests/test_linear_dgelu_bgrad.cpp makes (gelu for gelu', db of dh, a column shifted,
//   dz transposed, an output unwritten) move one output or the other further.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../05-matmul/matmul.cuh"
#include "fusion.cuh"
#include "klab/device/activation.cuh"
#include "klab/op.hpp"
#include "klab/rng.hpp"

namespace lesson06 {
namespace {

double rms_gelu_grad() {
  // The root mean square of gelu'(z) for z uniform in [-4, 4): midpoint rule, 2^16 points.
  static const double r = [] {
    constexpr int n = 1 << 16;
    double s = 0;
    for (int i = 0; i < n; ++i) {
      const double g = klab::gelu_tanh_grad_ref(-4.0 + 8.0 * (i + 0.5) / n);
      s += g * g;
    }
    return std::sqrt(s / n);
  }();
  return r;
}

}  // namespace

klab::Tolerance dgelu_bgrad_tolerance(const klab::Problem& p, int output) {
  const std::int64_t M = p.shape[0], K = p.shape[2];
  if (output == 0) return lesson05::gemm_tolerance(klab::DType::bf16, K);
  return lesson05::gemm_tolerance_at(klab::DType::bf16,
                                     std::sqrt(static_cast<double>(M)) * lesson05::sigma_k(K) * rms_gelu_grad());
}

namespace {

using klab::DType;
using klab::Inputs;
using klab::Problem;
using klab::TensorSpec;
using i64 = std::int64_t;

void generate(const Problem&, std::uint64_t seed, Inputs& in) {
  klab::fill_uniform(in.tensors.at(0), klab::derive_seed(seed, 0), -1.0, 1.0);
  klab::fill_uniform(in.tensors.at(1), klab::derive_seed(seed, 1), -1.0, 1.0);
  klab::fill_uniform(in.tensors.at(2), klab::derive_seed(seed, 2), -4.0, 4.0);
}

// dh[m, n] = Σ_k dy[m, k] · w[k, n], in fp64.
double dh_at(const Inputs& in, i64 m, i64 n, i64 N, i64 K) {
  const auto &dy = in.tensors[0], &w = in.tensors[1];
  double acc = 0;
  for (i64 k = 0; k < K; ++k) acc += dy.get(m * K + k) * w.get(k * N + n);
  return acc;
}

klab::Reference reference(const Problem& p, const Inputs& in) {
  const i64 M = p.shape[0], N = p.shape[1], K = p.shape[2];
  klab::Reference ref{klab::RefArray(static_cast<std::size_t>(M * N)), klab::RefArray(static_cast<std::size_t>(N), 0.0)};
  double* dz = ref[0].data();
  lesson05::reference_gemm(in.tensors[0], in.tensors[1], 0, 0, static_cast<int>(M), static_cast<int>(N),
                           static_cast<int>(K), true, false, dz);
  const auto& z = in.tensors[2];
  klab::parallel_for(M, [&](i64 m0, i64 m1) {
    // + 0.0: where dh is 0 (K = 0) and gelu' < 0 the product is -0, which a kernel storing
    // 0 matches but which differs from it in its bits.
    for (i64 i = m0 * N; i < m1 * N; ++i) dz[i] = dz[i] * klab::gelu_tanh_grad_ref(z.get(i)) + 0.0;
  }, N);
  klab::parallel_for(N, [&](i64 n0, i64 n1) {
    for (i64 n = n0; n < n1; ++n) {
      double s = 0;
      for (i64 m = 0; m < M; ++m) s += dz[m * N + n];
      ref[1][static_cast<std::size_t>(n)] = s;
    }
  }, M);
  return ref;
}

// The bench shapes: dz at lesson 05's sampled positions, db at 64 random columns and the
// first and last (each a whole column of dz: M · K multiply-adds).
std::vector<klab::SampledReference> reference_sample(const Problem& p, const Inputs& in, std::uint64_t seed) {
  const i64 M = p.shape[0], N = p.shape[1], K = p.shape[2];
  const auto& z = in.tensors[2];
  klab::SampledReference dz, db;
  dz.index = lesson05::sample_positions(M, N, seed);
  dz.value.resize(dz.index.size());
  klab::parallel_for(static_cast<i64>(dz.index.size()), [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; ++i) {
      const i64 m = dz.index[i] / N, n = dz.index[i] % N;
      dz.value[i] = dh_at(in, m, n, N, K) * klab::gelu_tanh_grad_ref(z.get(m * N + n));
    }
  }, K);
  if (N > 0) {
    db.index = {0, N - 1};
    for (int i = 0; i < 64; ++i)
      db.index.push_back(static_cast<i64>(klab::uniform01(klab::derive_seed(seed, 7), i) * static_cast<double>(N)) % N);
  }
  db.value.resize(db.index.size());
  klab::parallel_for(static_cast<i64>(db.index.size()), [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; ++i) {
      const i64 n = db.index[i];
      double s = 0;
      for (i64 m = 0; m < M; ++m) s += dh_at(in, m, n, N, K) * klab::gelu_tanh_grad_ref(z.get(m * N + n));
      db.value[i] = s;
    }
  }, M * K);
  return {dz, db};
}

klab::Op make_op() {
  klab::Op op;
  op.lesson = "06";
  op.name = "linear_dgelu_bgrad";
  op.summary = "dz = (dy * w) . gelu'(z), db = column sums of dz: GELU's and the bias's backward in the matmul's epilogue";
  op.dims = {"M", "N", "K"};
  op.dtypes = {DType::bf16};
  // The Hopper versions read w (K, N) and write dz with TMA: N and K, the operands' row
  // pitches, multiples of 8; cuBLASLt takes what its heuristic takes.
  op.test_shapes = {
      {1, 1, 1},          // one element everywhere (no TMA version takes it)
      {1, 8, 8},          // the smallest product TMA can describe: db is dz's one row
      {0, 8, 8},          // no rows: dz empty, db = 0 (written, not left poisoned)
      {8, 0, 8},          // no columns
      {8, 24, 0},         // K = 0: dh = 0, so dz = 0 and db = 0
      {7, 5, 3},          // N and K not multiples of 8
      {24, 40, 8},        // every box larger than the matrix
      {127, 264, 72},     // a prime M, partial tiles in M and N
      {1000, 1016, 1000}, // partial tiles in M (128), N (256) and K (64) at once
      {257, 3072, 768},   // GPT-2's MLP width, one M tile past 256
  };
  op.bench_shapes = {{8192, 3072, 768}, {4096, 4096, 4096}};
  op.no_huge_shape = "dz past 2^31 elements is 4 GiB of bf16 per check and a CPU product of 2^31 dot products; "
                     "lesson 05's matmul carries the index check for the same kernels";
  op.baseline = "cublaslt_epilogue";
  op.tour = {"v1_matmul_then_dgelu_bgrad", "v2_fused_epilogue"};
  op.bound = klab::Bound::compute;
  op.inputs = [](const Problem& p) {
    const i64 M = p.shape[0], N = p.shape[1], K = p.shape[2];
    return std::vector<TensorSpec>{{"dy", DType::bf16, {M, K}}, {"w", DType::bf16, {K, N}}, {"z", DType::bf16, {M, N}}};
  };
  op.outputs = [](const Problem& p) {
    return std::vector<TensorSpec>{{"dz", DType::bf16, {p.shape[0], p.shape[1]}}, {"db", DType::f32, {p.shape[1]}}};
  };
  op.generate = generate;
  op.reference = reference;
  op.reference_sample = reference_sample;
  op.tolerance = dgelu_bgrad_tolerance;
  set_product_shape_rules(op);   // flops 2MNK, sampled checks past 3·10^9 multiply-adds, sizes up to 2^30
  return op;
}

}  // namespace

KLAB_REGISTER(klab::register_op(make_op()));

}  // namespace lesson06
