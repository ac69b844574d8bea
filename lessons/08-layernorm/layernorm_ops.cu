// Lesson 08 — layernorm: the lesson, its op and its CPU reference.
//
//   layernorm   y = (x - mean) * rstd * gamma + beta, per row   {rows, cols}   f32, bf16
//               outputs y, and mean and rstd (fp32, one per row) for the backward pass
//
// mean and var are the row's (biased: var = sum (x - mean)^2 / cols, as PyTorch's
// layer_norm), rstd = 1 / sqrt(var + 1e-5). gamma and beta have the dtype of x. The kernels
// live beside this file (layernorm.cu); the learner's is exercise.cu.
//
//   klab test 08
//   klab bench 08
//   klab check 08                        grade the exercise (Welford's row statistics, f32)
//
// Inputs: each row is x = o + u, o a row offset drawn from [-2, 2) and u from [-1, 1), so
// that a row's mean is not 0 and a formula that subtracts two large sums (E[x^2] - E[x]^2)
// loses bits; the first two elements of a row are o + 0.9 and o - 0.9 (generate says why);
// gamma from [0.5, 1.5), beta from [-0.5, 0.5).
//
// Tolerances (fp32 arithmetic, u = 2^-24; |x| < 3, rstd < 2.2 for these rows, |gamma| <
// 1.5; a tree sum of n terms errs by at most (log2 n + 1) u times the sum of their
// magnitudes):
//   mean  error <= (log2 cols + 1) u * 3          < 5.4e-6 at cols = 2^16  -> atol 6e-6
//   rstd  relative error of a two-pass or Welford variance ~ (log2 cols + 2) u, halved by
//         the root, plus rsqrtf's 2 ulp                                     -> rtol 3e-5
//   y     (x - mean) carries the mean's error, times rstd * gamma < 3.3     -> atol 2e-5
//   bf16  y's output rounding, up to 2^-8 relative, dominates: the dtype's default.
// A variance divided by cols - 1 instead of cols is off by 1 / (2 cols) in rstd: 4e-3 at
// the test shapes' 127 columns, 6.5e-4 at 768, caught.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "klab/compare.hpp"
#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "layernorm.cuh"

namespace lesson08 {
using i64 = std::int64_t;

// x for both ops: uniform in [-1, 1) plus a row offset o from [-2, 2), the row's first two
// elements set to o +- 0.9 (layernorm.cuh declares it).
void fill_layernorm_x(const klab::Problem& p, std::uint64_t seed, klab::HostTensor& x) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  klab::fill_uniform(x, klab::derive_seed(seed, 0), -1.0, 1.0);
  klab::parallel_for(
      rows,
      [&](i64 r0, i64 r1) {
        for (i64 r = r0; r < r1; ++r) {
          const double o = 4.0 * klab::uniform01(klab::derive_seed(seed, 3), static_cast<std::uint64_t>(r)) - 2.0;
          for (i64 j = 0; j < cols; ++j) x.set(r * cols + j, x.get(r * cols + j) + o);
          // A spread the tolerances can count on: with the row's first two elements at o +- 0.9,
          // var >= 1.62 / cols, so rstd < 2.2 up to 7 columns; wider rows of uniform elements
          // have var near 1/3 (rstd near 1.7). Three uniform elements alone came within 0.004 of
          // each other in 1 row of 1000 x 3 at one seed (rstd ~ 250), and y's fp32 error, the
          // mean's rounding times rstd, passed the tolerance (2 of 3000 elements).
          if (cols >= 2) {
            x.set(r * cols, o + 0.9);
            x.set(r * cols + 1, o - 0.9);
          }
        }
      },
      cols);
}

// No rows, one element, one row, odd and prime widths, widths past a warp's and a block's
// natural tile, GPT-2's 768, the widest row a block holds in registers (32768) and one past
// it, a long row, and x with a flat index past 2^31 (f32 only: validate_layernorm_shape).
// Row r's mean and rstd in fp64, two passes (layernorm.cuh declares it).
void reference_row_stats(const klab::HostTensor& x, i64 r, i64 cols, double& mean, double& rstd) {
  double s = 0;
  for (i64 j = 0; j < cols; ++j) s += x.get(r * cols + j);
  mean = s / static_cast<double>(cols);
  double q = 0;
  for (i64 j = 0; j < cols; ++j) {
    const double d = x.get(r * cols + j) - mean;
    q += d * d;
  }
  rstd = 1.0 / std::sqrt(q / static_cast<double>(cols) + static_cast<double>(kEps));
}

std::vector<klab::Dims> layernorm_test_shapes() {
  return {{0, 768},   {1, 1},     {1, 7},    {3, 129},   {127, 1023}, {1000, 3},     {257, 768},
          {7, 4097},  {33, 8191}, {9, 32768}, {3, 32772}, {2, 131072}, {65537, 32768}};
}

std::string validate_layernorm_shape(const klab::Problem& p) {
  if (p.shape[0] < 0) return "rows must be >= 0";
  if (p.shape[1] < 1) return "cols must be >= 1 (a row's mean needs an element)";
  if (p.shape[1] > std::numeric_limits<std::int32_t>::max()) return "cols must fit in int32";
  // The check past 2^31 runs once, in f32: the index arithmetic is the same template code
  // for both dtypes, and each such check moves ~40 GB through host memory.
  if (p.shape[0] * p.shape[1] > std::numeric_limits<std::int32_t>::max() && p.dtype != klab::DType::f32)
    return "past 2^31 elements: f32 only";
  return "";
}

namespace {

void generate(const klab::Problem& p, std::uint64_t seed, klab::Inputs& in) {
  fill_layernorm_x(p, seed, in.tensors.at(0));
  klab::fill_uniform(in.tensors.at(1), klab::derive_seed(seed, 1), 0.5, 1.5);
  klab::fill_uniform(in.tensors.at(2), klab::derive_seed(seed, 2), -0.5, 0.5);
}

klab::Reference reference(const klab::Problem& p, const klab::Inputs& in) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  const auto& x = in.tensors.at(0);
  const auto& g = in.tensors.at(1);
  const auto& b = in.tensors.at(2);
  klab::Reference ref(3);
  ref[0] = klab::RefArray(static_cast<std::size_t>(rows * cols));
  ref[1] = klab::RefArray(static_cast<std::size_t>(rows));
  ref[2] = klab::RefArray(static_cast<std::size_t>(rows));
  klab::parallel_for(rows, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      double mean = 0, rstd = 0;
      reference_row_stats(x, r, cols, mean, rstd);
      for (i64 j = 0; j < cols; ++j)
        ref[0][static_cast<std::size_t>(r * cols + j)] = (x.get(r * cols + j) - mean) * rstd * g.get(j) + b.get(j);
      ref[1][static_cast<std::size_t>(r)] = mean;
      ref[2][static_cast<std::size_t>(r)] = rstd;
    }
  });
  return ref;
}

klab::Tolerance tolerance(const klab::Problem& p, int output) {
  klab::Tolerance t = klab::default_tolerance(output == 0 ? p.dtype : klab::DType::f32);
  if (output == 0 && p.dtype == klab::DType::f32) t.atol = 2e-5;
  if (output == 1) t.atol = 6e-6;
  if (output == 2) t.rtol = 3e-5;
  return t;
}

}  // namespace

// layernorm.cuh declares it: the op as registered here, for ops that extend it
// (layernorm_gelu_ops.cu).
klab::Op make_layernorm_op() {
  klab::Op op;
  op.lesson = "08";
  op.name = "layernorm";
  op.summary = "y = (x - mean) * rstd * gamma + beta per row; mean and rstd saved for the backward";
  op.dims = {"rows", "cols"};
  op.dtypes = {klab::DType::f32, klab::DType::bf16};
  op.test_shapes = layernorm_test_shapes();
  // GPT-2 small's activations (8192 tokens x 768 channels) and two wider ones.
  op.bench_shapes = {{8192, 768}, {8192, 4096}, {4096, 16384}};
  op.baseline = "v1_warp_welford";
  op.tour = {"v1_warp_welford", "v2_block_registers"};
  op.bound = klab::Bound::memory;
  op.inputs = [](const klab::Problem& p) {
    return std::vector<klab::TensorSpec>{{"x", p.dtype, p.shape}, {"gamma", p.dtype, {p.shape[1]}},
                                         {"beta", p.dtype, {p.shape[1]}}};
  };
  op.outputs = [](const klab::Problem& p) {
    return std::vector<klab::TensorSpec>{{"y", p.dtype, p.shape}, {"mean", klab::DType::f32, {p.shape[0]}},
                                         {"rstd", klab::DType::f32, {p.shape[0]}}};
  };
  op.generate = generate;
  op.reference = reference;
  op.tolerance = tolerance;
  op.validate = validate_layernorm_shape;
  return op;
}

KLAB_REGISTER(klab::register_lesson({.id = "08",
                                     .slug = "layernorm",
                                     .title = "LayerNorm: a row's mean and variance in one pass, and the backward",
                                     .exercise_op = "layernorm",
                                     .exercise_reference = "v1_warp_welford",
                                     .exercise_hint = "lessons/08-layernorm/exercise.cu"}));
KLAB_REGISTER(klab::register_op(make_layernorm_op()));

}  // namespace lesson08
