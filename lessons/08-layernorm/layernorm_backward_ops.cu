// Lesson 08 — layernorm_backward: the op and its CPU reference.
//
//   layernorm_backward   dx, dgamma, dbeta of y = xhat * gamma + beta, xhat = (x - mean) * rstd
//                        inputs x {rows, cols}, gamma {cols}, dy {rows, cols}, and the mean and
//                        rstd (fp32, one per row) the forward saved; f32, bf16
//
// With g = dy * gamma and the row means c1 = mean(g), c2 = mean(g * xhat):
//   dx     = rstd * (g - c1 - xhat * c2)        per row (the mean and rstd depend on every x)
//   dgamma = sum over rows of dy * xhat          column sums
//   dbeta  = sum over rows of dy
// dx has the dtype of x; dgamma and dbeta are fp32: a parameter's gradient is summed over
// every token and kept in fp32 for the optimizer. The kernels: layernorm_backward.cu.
// tests/test_layernorm_backward.cpp checks this reference against finite differences of an
// fp64 forward, and that each kind of wrong output fails the tolerances below.
//
// Inputs: x as the forward's (rows offset by o in [-2, 2), first two elements o +- 0.9),
// gamma from [0.5, 1.5), dy from [-1, 1), and mean and rstd computed from x in fp64 and
// rounded to fp32, as a forward would have saved them.
//
// Tolerances (fp32 arithmetic, u = 2^-24; |xhat| <= 4.4 (|x - mean| < 2, rstd < 2.2 from
// two columns on; one column has rstd = 316 and dx = 0: tolerance() says what it allows),
// |g| < 1.5, |g * xhat| < 6.6, |dy * xhat| < 4.4). A sum of n zero-mean terms, each at most
// T, added one after another in fp32 errs by a random walk of standard deviation at most
// u T n / sqrt(6); eight of those, 2^-22 n T, bounds any order of addition a kernel picks
// (a tree's error is smaller):
//   dx      rstd * (err c1 + |xhat| err c2 + |c2| err xhat) with err c = 2^-22 T (a mean)
//           and err xhat = 2 u |xhat|: 2.2 * (3.6e-7 + 6.9e-6 + 3.5e-6) = 2.4e-5 -> atol 3e-5
//   dgamma  2^-22 rows 4.4   (0.069 at 65,537 rows, where one row's term reaches 4)
//   dbeta   2^-22 rows 1
//   bf16 dx: its output rounding, up to 2^-8 relative, dominates: the dtype's default.
//   (and max_rel_l2 for dgamma, dbeta: column_sum_tolerance derives it)
// Each of these fails: dx without c2 (off by xhat * c2, ~0.02 at 768 columns), a row's
// term missing from dgamma or dbeta, a column's sum written to its neighbour.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "klab/compare.hpp"
#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "layernorm.cuh"

namespace lesson08 {
// The forward's edge shapes (layernorm_test_shapes): no rows (dgamma and dbeta are then 0,
// and must be written), one element, odd and prime widths, GPT-2's 768, the widest row the
// fused versions hold (16384) and one past it, a long row, and x with a flat index past
// 2^31 in rows every version holds (8192 columns; f32 only, as the forward).
std::vector<klab::Dims> layernorm_backward_test_shapes() {
  return {{0, 768},   {1, 1},     {1, 7},    {3, 129},   {127, 1023}, {1000, 3},      {257, 768},
          {7, 4097},  {33, 8191}, {9, 16384}, {3, 16388}, {2, 131072}, {262147, 8192}};
}

// dgamma (terms dy * xhat, |.| < 4.4) and dbeta (dy, < 1): the bound above, 2^-22 rows T,
// with the dtype's floor for a few rows. Its rel-L2: the same walk over all columns, its rms
// relative to the sums' rms (sqrt(rows) times the terms' rms, 0.58) is
// u (T / 0.58) sqrt(rows / 6), 1.4e-4 at 65,537 rows for three standard deviations; a row
// left out costs 1 / sqrt(rows), 0.004 there.
klab::Tolerance column_sum_tolerance(std::int64_t rows, double term_bound) {
  const double n = static_cast<double>(rows);
  klab::Tolerance t = klab::default_tolerance(klab::DType::f32);
  t.atol = std::max(std::ldexp(n * term_bound, -22), 1e-6);
  t.max_rel_l2 = std::max(t.max_rel_l2, std::ldexp(std::sqrt(n), -20));
  return t;
}

// The rel-L2 of a zero reference is the rms error itself (ref_scale 1), held to atol too.
void allow_zero_dx(klab::Tolerance& t, double atol) {
  t.atol = std::max(t.atol, atol);
  t.ref_scale = 1;
  t.max_rel_l2 = std::max(t.max_rel_l2, atol);
}

using i64 = std::int64_t;

// x as the forward's (fill_layernorm_x), then mean and rstd from it in fp64 (layernorm.cuh
// declares it, for dropout_residual_layernorm_backward too).
void generate_layernorm_backward(const klab::Problem& p, std::uint64_t seed, klab::Inputs& in) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  const klab::HostTensor& x = in.tensors.at(0);
  fill_layernorm_x(p, seed, in.tensors.at(0));
  klab::fill_uniform(in.tensors.at(1), klab::derive_seed(seed, 1), 0.5, 1.5);
  klab::fill_uniform(in.tensors.at(2), klab::derive_seed(seed, 2), -1.0, 1.0);
  klab::HostTensor& mean = in.tensors.at(3);
  klab::HostTensor& rstd = in.tensors.at(4);
  klab::parallel_for(
      rows,
      [&](i64 r0, i64 r1) {
        for (i64 r = r0; r < r1; ++r) {
          double s = 0, q = 0;
          for (i64 j = 0; j < cols; ++j) s += x.get(r * cols + j);
          const double m = s / static_cast<double>(cols);
          for (i64 j = 0; j < cols; ++j) q += (x.get(r * cols + j) - m) * (x.get(r * cols + j) - m);
          mean.set(r, m);
          rstd.set(r, 1.0 / std::sqrt(q / static_cast<double>(cols) + static_cast<double>(kEps)));
        }
      },
      cols);
}

// The formulas above in fp64, from the saved mean and rstd as the kernels read them
// (layernorm.cuh declares it).
klab::Reference layernorm_backward_reference(const klab::Problem& p, const klab::Inputs& in) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  const auto& x = in.tensors.at(0);
  const auto& gamma = in.tensors.at(1);
  const auto& dy = in.tensors.at(2);
  const auto& mean = in.tensors.at(3);
  const auto& rstd = in.tensors.at(4);
  klab::Reference ref(3);
  ref[0] = klab::RefArray(static_cast<std::size_t>(rows * cols));
  ref[1] = klab::RefArray(static_cast<std::size_t>(cols));
  ref[2] = klab::RefArray(static_cast<std::size_t>(cols));
  for (i64 j = 0; j < cols; ++j) ref[1][static_cast<std::size_t>(j)] = ref[2][static_cast<std::size_t>(j)] = 0;
  std::mutex merge;
  klab::parallel_for(
      rows,
      [&](i64 r0, i64 r1) {
        std::vector<double> dg(static_cast<std::size_t>(cols), 0.0), db(static_cast<std::size_t>(cols), 0.0);
        std::vector<double> xh(static_cast<std::size_t>(cols)), g(static_cast<std::size_t>(cols));
        for (i64 r = r0; r < r1; ++r) {
          const double m = mean.get(r), rs = rstd.get(r);
          double c1 = 0, c2 = 0;
          for (i64 j = 0; j < cols; ++j) {
            const auto k = static_cast<std::size_t>(j);
            const double d = dy.get(r * cols + j);
            xh[k] = (x.get(r * cols + j) - m) * rs;
            g[k] = d * gamma.get(j);
            c1 += g[k];
            c2 += g[k] * xh[k];
            dg[k] += d * xh[k];
            db[k] += d;
          }
          c1 /= static_cast<double>(cols);
          c2 /= static_cast<double>(cols);
          for (i64 j = 0; j < cols; ++j) {
            const auto k = static_cast<std::size_t>(j);
            ref[0][static_cast<std::size_t>(r * cols + j)] = rs * (g[k] - c1 - xh[k] * c2);
          }
        }
        const std::lock_guard<std::mutex> lock(merge);
        for (i64 j = 0; j < cols; ++j) {
          ref[1][static_cast<std::size_t>(j)] += dg[static_cast<std::size_t>(j)];
          ref[2][static_cast<std::size_t>(j)] += db[static_cast<std::size_t>(j)];
        }
      },
      cols);
  return ref;
}

namespace {

klab::Tolerance tolerance(const klab::Problem& p, int output) {
  if (output > 0) return column_sum_tolerance(p.shape[0], output == 1 ? 4.4 : 1.0);   // dgamma, dbeta
  klab::Tolerance t = klab::default_tolerance(p.dtype);
  if (p.dtype == klab::DType::f32) t.atol = 3e-5;
  // One column: var = 0 and rstd = 1 / sqrt(eps) = 316, and dx = rstd (g - c1) is 0 in
  // exact arithmetic. A kernel whose g - c1 keeps the product's rounding (an FMA contracts
  // dy * gamma - c1) is off by up to rstd * 2^-24 * |g| < 2.9e-5 (measured: 1.5e-5).
  if (p.shape[1] == 1) allow_zero_dx(t, 1e-4);
  return t;
}

klab::Op make_layernorm_backward_op() {
  klab::Op op;
  op.lesson = "08";
  op.name = "layernorm_backward";
  op.summary = "dx, dgamma, dbeta of layernorm from dy and the saved mean and rstd";
  op.dims = {"rows", "cols"};
  op.dtypes = {klab::DType::f32, klab::DType::bf16};
  op.test_shapes = layernorm_backward_test_shapes();
  op.bench_shapes = {{8192, 768}, {8192, 4096}, {4096, 16384}};
  op.baseline = "v1_dx_then_column_sums";
  op.tour = {"v1_dx_then_column_sums", "v2_fused_partials"};
  op.bound = klab::Bound::memory;
  op.inputs = [](const klab::Problem& p) {
    return std::vector<klab::TensorSpec>{{"x", p.dtype, p.shape},
                                         {"gamma", p.dtype, {p.shape[1]}},
                                         {"dy", p.dtype, p.shape},
                                         {"mean", klab::DType::f32, {p.shape[0]}},
                                         {"rstd", klab::DType::f32, {p.shape[0]}}};
  };
  op.outputs = [](const klab::Problem& p) {
    return std::vector<klab::TensorSpec>{{"dx", p.dtype, p.shape},
                                         {"dgamma", klab::DType::f32, {p.shape[1]}},
                                         {"dbeta", klab::DType::f32, {p.shape[1]}}};
  };
  // bytes (the default): x, dy, gamma, mean and rstd read once, dx, dgamma and dbeta written
  // once: the least any backward moves. The per-block partial sums a kernel writes and reads
  // back are its own cost, not counted.
  op.generate = generate_layernorm_backward;
  op.reference = layernorm_backward_reference;
  op.tolerance = tolerance;
  op.validate = validate_layernorm_shape;
  return op;
}

}  // namespace

KLAB_REGISTER(klab::register_op(make_layernorm_backward_op()));

}  // namespace lesson08
