// Lesson 08 — layernorm_linear: the op and its CPU reference. A pre-LN transformer block
// normalizes its input and multiplies it by a weight right away (the attention's QKV
// projection, 768 -> 2304 in GPT-2 small, and the MLP's up-projection, 768 -> 3072):
//
//   layernorm_linear   y = layernorm(x; gamma, beta) · Wᵀ + b      {M, N, K}   bf16
//                      x (M, K), gamma and beta (K), W (N, K) as a layer stores it, b (N);
//                      outputs y (M, N), and mean and rstd (fp32, one a row) as
//                      layernorm's, for the backward
//
// The kernels live beside this file (layernorm_linear.cu: v1_layernorm_then_linear,
// v2_folded_epilogue).
//
//   klab test 08 --op layernorm_linear
//   klab bench 08 --op layernorm_linear
//
// Inputs: x as layernorm draws it (rows with an offset in [-2, 2), so that a row's mean is
// far from 0: v2's folded form subtracts mean · Σ W' from a product of the raw x, and the
// offset makes that subtraction a real one); gamma from [0.5, 1.5), beta from [-0.5, 0.5),
// W and b from [-1, 1).
//
// Tolerances. mean and rstd: layernorm's (layernorm_ops.cu). y: lesson 05's bf16 matmul
// tolerance (gemm_tolerance_at: 2^-7·σ + 2^-7·|y|, rel-L2 2^-8) at the typical size of an
// output, σ = sqrt(7K/18 + 1/3), with its absolute term and its rel-L2 bound doubled (2^-6·σ,
// 2^-7). The typical size:
// the normalized value v = x̂·gamma + beta has E[v²] = E[gamma²] + E[beta²] = 13/12 + 1/12 =
// 7/6 (x̂ has unit mean square over a row), W's elements 1/3, so K products give 7K/18, and
// b adds 1/3. The doubling: each version rounds one factor of every product to bf16 before
// the matmul (v1 the normalized v, v2 the folded weight gamma·W). A rounding to bf16 errs by
// a uniform share of an ulp, 2^-7 to 2^-8 of the value across a binade: rms ulp/√12, about
// 2^-9.2 relative. So y carries a sum of K such errors, normal with rms about 2^-9.2·σ (0.030
// at K = 768), and lesson 05's 2^-7·σ sits only 4.7 of those out: over the 10^5 to 10^6
// outputs of a check, an element gets there (v1 on the H100: one in 40 checks, an error of
// 0.142 where 2^-7·σ + 2^-7·|y| allowed 0.140). At 2^-6·σ the bound is 9 rms out
// (tests/test_layernorm_linear.cpp checks the room at that shape). v2 also multiplies the raw
// x, so its fp32 sums carry |x| ≤ 3 where v1's carry |v| (K·2^-24·3·|W'| at most, 2^-11·σ at
// K = 768), and it subtracts mean · Σ W' (about 2·17 against y's 17 at K = 768): a few fp32
// ulps of 34 more. Both round y once (up to 2^-8 relative, inside 2^-7·|y|). The rel-L2
// bound: over many outputs the two roundings give about sqrt(2)·2^-9.2 (3.1e-3 and 3.6e-3
// at most on the H100), but over one output rel-L2 is that output's relative error, and two
// roundings of up to 2^-8 each reach past 2^-8: 2^-7.
// A beta or bias left out moves y by about sqrt(K/36) or 0.58, a gamma left out by about
// 0.27·σ: all far past 2^-6·σ; a variance divided by K - 1 moves rstd by 1/(2K) (caught by
// rstd's 3e-5).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../05-matmul/matmul.cuh"
#include "../06-kernel-fusion/fusion.cuh"
#include "klab/compare.hpp"
#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "layernorm.cuh"

namespace lesson08 {
namespace {

using klab::DType;
using klab::Inputs;
using klab::Problem;
using i64 = std::int64_t;

// The (M, K) problem of the layernorm inside the op.
Problem ln_problem(const Problem& p) {
  Problem q = p;
  q.shape = {p.shape[0], p.shape[2]};
  q.variant = "";
  return q;
}

void generate(const Problem& p, std::uint64_t seed, Inputs& in) {
  fill_layernorm_x(ln_problem(p), seed, in.tensors.at(0));
  klab::fill_uniform(in.tensors.at(1), klab::derive_seed(seed, 1), 0.5, 1.5);
  klab::fill_uniform(in.tensors.at(2), klab::derive_seed(seed, 2), -0.5, 0.5);
  klab::fill_uniform(in.tensors.at(3), klab::derive_seed(seed, 4), -1.0, 1.0);
  klab::fill_uniform(in.tensors.at(4), klab::derive_seed(seed, 5), -1.0, 1.0);
}

// y[r, n] from row r's normalized values v (K of them).
double dot_row(const std::vector<double>& v, const klab::HostTensor& w, const klab::HostTensor& b, i64 n, i64 K) {
  double acc = b.get(n);
  for (i64 k = 0; k < K; ++k) acc += v[static_cast<std::size_t>(k)] * w.get(n * K + k);
  return acc;
}

std::vector<double> normalized_row(const Inputs& in, i64 r, i64 K, double mean, double rstd) {
  const auto &x = in.tensors[0], &g = in.tensors[1], &be = in.tensors[2];
  std::vector<double> v(static_cast<std::size_t>(K));
  for (i64 k = 0; k < K; ++k) v[static_cast<std::size_t>(k)] = (x.get(r * K + k) - mean) * rstd * g.get(k) + be.get(k);
  return v;
}

klab::Reference reference(const Problem& p, const Inputs& in) {
  const i64 M = p.shape[0], N = p.shape[1], K = p.shape[2];
  klab::Reference ref(3);
  ref[0] = klab::RefArray(static_cast<std::size_t>(M * N));
  ref[1] = klab::RefArray(static_cast<std::size_t>(M));
  ref[2] = klab::RefArray(static_cast<std::size_t>(M));
  klab::parallel_for(M, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      double mean = 0, rstd = 0;
      reference_row_stats(in.tensors[0], r, K, mean, rstd);
      const std::vector<double> v = normalized_row(in, r, K, mean, rstd);
      for (i64 n = 0; n < N; ++n) ref[0][static_cast<std::size_t>(r * N + n)] = dot_row(v, in.tensors[3], in.tensors[4], n, K);
      ref[1][static_cast<std::size_t>(r)] = mean;
      ref[2][static_cast<std::size_t>(r)] = rstd;
    }
  }, N * K);
  return ref;
}

// The bench shapes: y at lesson 05's sampled positions, mean and rstd at every row.
std::vector<klab::SampledReference> reference_sample(const Problem& p, const Inputs& in, std::uint64_t seed) {
  const i64 M = p.shape[0], N = p.shape[1], K = p.shape[2];
  std::vector<klab::SampledReference> r(3);
  r[0].index = lesson05::sample_positions(M, N, seed);
  r[0].value.resize(r[0].index.size());
  klab::parallel_for(static_cast<i64>(r[0].index.size()), [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; ++i) {
      const i64 m = r[0].index[i] / N, n = r[0].index[i] % N;
      double mean = 0, rstd = 0;
      reference_row_stats(in.tensors[0], m, K, mean, rstd);
      r[0].value[i] = dot_row(normalized_row(in, m, K, mean, rstd), in.tensors[3], in.tensors[4], n, K);
    }
  }, 3 * K);
  for (int o = 1; o <= 2; ++o) {
    r[o].index.resize(static_cast<std::size_t>(M));
    r[o].value.resize(static_cast<std::size_t>(M));
  }
  klab::parallel_for(M, [&](i64 m0, i64 m1) {
    for (i64 m = m0; m < m1; ++m) {
      double mean = 0, rstd = 0;
      reference_row_stats(in.tensors[0], m, K, mean, rstd);
      r[1].index[m] = r[2].index[m] = m;
      r[1].value[m] = mean;
      r[2].value[m] = rstd;
    }
  }, 2 * K);
  return r;
}

klab::Op make_op() {
  klab::Op op;
  op.lesson = "08";
  op.name = "layernorm_linear";
  op.summary = "y = layernorm(x) * W^T + b: the normalization folded into the matmul's epilogue";
  op.dims = {"M", "N", "K"};
  op.dtypes = {DType::bf16};
  // K is the row pitch of x and W: the Hopper matmul needs it a multiple of 8 (TMA).
  op.test_shapes = {
      {1, 1, 1},          // one element everywhere: K not a multiple of 8, unsupported (TMA)
      {7, 5, 3},          // odd sizes: the same
      {0, 8, 8},          // no rows
      {8, 0, 8},          // no columns of y: mean and rstd are still written
      {1, 1, 8},          // the smallest product TMA can describe
      {24, 40, 8},        // every box larger than the matrix
      {129, 131, 136},    // odd N: y stored from registers, the column vectors read to N - 1
      {127, 257, 72},     // primes in M and N, partial tiles in both
      {1000, 1016, 1000}, // partial tiles in M, N and K at once
      {257, 2304, 768},   // GPT-2's QKV projection on one M tile past 256
      {3, 24, 32768},     // the widest row v2's statistics hold in registers
      {2, 16, 32776},     // one vector past it: v1 only
  };
  op.bench_shapes = {{8192, 2304, 768}, {8192, 3072, 768}};
  op.no_huge_shape = "y past 2^31 elements is 4 GiB of bf16 per check and a CPU product of 2^31 dot products; "
                     "lesson 05's matmul carries the index check for the same kernels";
  op.baseline = "v1_layernorm_then_linear";
  op.tour = {"v1_layernorm_then_linear", "v2_folded_epilogue"};
  op.bound = klab::Bound::compute;
  op.inputs = [](const Problem& p) {
    const i64 M = p.shape[0], N = p.shape[1], K = p.shape[2];
    return std::vector<klab::TensorSpec>{{"x", DType::bf16, {M, K}},
                                         {"gamma", DType::bf16, {K}},
                                         {"beta", DType::bf16, {K}},
                                         {"w", DType::bf16, {N, K}},
                                         {"b", DType::bf16, {N}}};
  };
  op.outputs = [](const Problem& p) {
    return std::vector<klab::TensorSpec>{{"y", DType::bf16, {p.shape[0], p.shape[1]}},
                                         {"mean", DType::f32, {p.shape[0]}},
                                         {"rstd", DType::f32, {p.shape[0]}}};
  };
  op.generate = generate;
  op.reference = reference;
  op.reference_sample = reference_sample;
  op.tolerance = [](const Problem& p, int output) {
    if (output == 0) {
      const double K = static_cast<double>(p.shape[2]);
      klab::Tolerance t = lesson05::gemm_tolerance_at(DType::bf16, std::sqrt(7.0 * K / 18.0 + 1.0 / 3.0));
      t.atol *= 2;        // 2^-6·σ: one factor of every product rounded to bf16 (the header derives it)
      t.max_rel_l2 *= 2;  // 2^-7: that rounding and y's own, over a single output
      return t;
    }
    static const klab::Op ln = make_layernorm_op();
    return ln.tolerance(ln_problem(p), output);
  };
  // Lesson 06's rules for an M x N x K product (flops, sampled checks, sizes), and a row's
  // mean needs an element.
  lesson06::set_product_shape_rules(op);
  op.validate = [product = op.validate](const Problem& p) {
    std::string why = product(p);
    if (why.empty() && p.shape[2] < 1) why = "K must be >= 1 (a row's mean needs an element)";
    return why;
  };
  return op;
}

}  // namespace

KLAB_REGISTER(klab::register_op(make_op()));

}  // namespace lesson08
