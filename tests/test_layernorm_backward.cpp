// CPU tests of lesson 08's layernorm and rmsnorm backward (layernorm_backward_ops.cu,
// rmsnorm_ops.cu); for the layernorm one:
//   1. its fp64 reference is the gradient: central finite differences of an fp64 forward
//      (L = sum dy * y) agree with dx, dgamma and dbeta on small shapes, and a dx that
//      leaves out the c2 term, the classic slip, does not;
//   2. its tolerances: an fp32 computation in the worst summation order a kernel could pick
//      (column sums added row after row) passes the harness's judge, and each kind of wrong
//      output fails it: dx without c2, a row's term missing from dgamma, dbeta shifted by a
//      column, two rows' dx swapped, an output left unwritten.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "klab/compare.hpp"
#include "klab/harness.hpp"
#include "klab/op.hpp"
#include "test_util.hpp"

using namespace klab;
using klab_test::check;
using klab_test::worst_fd_gap;

namespace {

using i64 = std::int64_t;

const Op* backward_op() { return registry().find_op("layernorm_backward"); }

constexpr double kEps = 1e-5;   // the op's epsilon (layernorm.cuh)

// L = sum over the tensor of dy * y, y = layernorm(x) * gamma + beta, all in fp64 with the
// row statistics computed from x (so that they move with it).
double loss(const std::vector<double>& x, const std::vector<double>& gamma, const std::vector<double>& beta,
            const std::vector<double>& dy, i64 rows, i64 cols) {
  double l = 0;
  for (i64 r = 0; r < rows; ++r) {
    double s = 0, q = 0;
    for (i64 j = 0; j < cols; ++j) s += x[static_cast<std::size_t>(r * cols + j)];
    const double mean = s / static_cast<double>(cols);
    for (i64 j = 0; j < cols; ++j) q += std::pow(x[static_cast<std::size_t>(r * cols + j)] - mean, 2);
    const double rstd = 1.0 / std::sqrt(q / static_cast<double>(cols) + kEps);
    for (i64 j = 0; j < cols; ++j) {
      const auto k = static_cast<std::size_t>(r * cols + j);
      l += dy[k] * ((x[k] - mean) * rstd * gamma[static_cast<std::size_t>(j)] + beta[static_cast<std::size_t>(j)]);
    }
  }
  return l;
}

std::vector<double> as_doubles(const HostTensor& t) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (i64 i = 0; i < t.numel(); ++i) v[static_cast<std::size_t>(i)] = t.get(i);
  return v;
}

// One row's c2 = mean(dy * gamma * xhat) times rstd * xhat, per element: what a dx that
// forgets the c2 term is off by.
std::vector<double> c2_term(const Inputs& in, i64 rows, i64 cols) {
  std::vector<double> t(static_cast<std::size_t>(rows * cols));
  for (i64 r = 0; r < rows; ++r) {
    const double m = in.tensors[3].get(r), rs = in.tensors[4].get(r);
    double c2 = 0;
    for (i64 j = 0; j < cols; ++j)
      c2 += in.tensors[2].get(r * cols + j) * in.tensors[1].get(j) * (in.tensors[0].get(r * cols + j) - m) * rs;
    c2 /= static_cast<double>(cols);
    for (i64 j = 0; j < cols; ++j)
      t[static_cast<std::size_t>(r * cols + j)] = rs * (in.tensors[0].get(r * cols + j) - m) * rs * c2;
  }
  return t;
}

// dx, dgamma, dbeta in fp32 the way a kernel might compute them, the column sums added one
// row after another (the largest rounding error of any order).
std::vector<HostTensor> fp32_outputs(const Op& op, const Problem& p, const Inputs& in) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  std::vector<HostTensor> out;
  for (const auto& s : op.outputs(p)) out.emplace_back(s.dtype, s.shape);
  std::vector<float> dg(static_cast<std::size_t>(cols), 0.f), db(static_cast<std::size_t>(cols), 0.f);
  std::vector<float> xh(static_cast<std::size_t>(cols)), g(static_cast<std::size_t>(cols));
  for (i64 r = 0; r < rows; ++r) {
    const auto m = static_cast<float>(in.tensors[3].get(r)), rs = static_cast<float>(in.tensors[4].get(r));
    float c1 = 0.f, c2 = 0.f;
    for (i64 j = 0; j < cols; ++j) {
      const auto k = static_cast<std::size_t>(j);
      const auto d = static_cast<float>(in.tensors[2].get(r * cols + j));
      xh[k] = (static_cast<float>(in.tensors[0].get(r * cols + j)) - m) * rs;
      g[k] = d * static_cast<float>(in.tensors[1].get(j));
      c1 += g[k];
      c2 += g[k] * xh[k];
      dg[k] += d * xh[k];
      db[k] += d;
    }
    c1 /= static_cast<float>(cols);
    c2 /= static_cast<float>(cols);
    for (i64 j = 0; j < cols; ++j) {
      const auto k = static_cast<std::size_t>(j);
      out[0].set(r * cols + j, rs * (g[k] - c1 - xh[k] * c2));
    }
  }
  for (i64 j = 0; j < cols; ++j) {
    out[1].set(j, dg[static_cast<std::size_t>(j)]);
    out[2].set(j, db[static_cast<std::size_t>(j)]);
  }
  return out;
}

}  // namespace

TEST(LayernormBackward, ReferenceMatchesFiniteDifferencesOfTheFp64Forward) {
  const Op* op = backward_op();
  if (!op) GTEST_SKIP() << "lesson 08 is not in this build";
  for (const Dims& shape : std::vector<Dims>{{3, 5}, {2, 17}, {4, 64}, {1, 1}, {2, 2}})
    for (std::uint64_t seed : {1u, 2u}) {
      const Problem p{shape, DType::f32, ""};
      SCOPED_TRACE(p.label() + " seed " + std::to_string(seed));
      const i64 rows = shape[0], cols = shape[1];
      const Inputs in = make_inputs(*op, p, seed);
      const Reference ref = op->reference(p, in);
      std::vector<double> x = as_doubles(in.tensors[0]), gamma = as_doubles(in.tensors[1]);
      std::vector<double> dy = as_doubles(in.tensors[2]), beta(static_cast<std::size_t>(cols), 0.0);
      const auto l = [&] { return loss(x, gamma, beta, dy, rows, cols); };
      const std::vector<double> dx(ref[0].begin(), ref[0].end()), dgamma(ref[1].begin(), ref[1].end()),
          dbeta(ref[2].begin(), ref[2].end());
      // The reference reads mean and rstd rounded to fp32, as the forward saved them: xhat
      // moves by up to 2^-24 * (|mean| rstd + |xhat|) < 5e-7, dgamma by rows times that.
      constexpr double tol = 1e-5;
      EXPECT_LT(worst_fd_gap(x, dx, l), tol) << "dx";
      EXPECT_LT(worst_fd_gap(gamma, dgamma, l), tol) << "dgamma";
      EXPECT_LT(worst_fd_gap(beta, dbeta, l), tol) << "dbeta";
      // The check has teeth: dx without its c2 term is off by more (where c2 is not ~0).
      if (cols >= 5) {
        std::vector<double> no_c2 = dx;
        const std::vector<double> t = c2_term(in, rows, cols);
        for (std::size_t i = 0; i < no_c2.size(); ++i) no_c2[i] += t[i];
        EXPECT_GT(worst_fd_gap(x, no_c2, l), 100 * tol) << "dx without c2";
      }
    }
}

TEST(LayernormBackward, Fp32ComputationPassesAndEachWrongOutputFails) {
  const Op* op = backward_op();
  if (!op) GTEST_SKIP() << "lesson 08 is not in this build";
  for (const DType t : {DType::f32, DType::bf16})
    for (const Dims& shape : std::vector<Dims>{{9, 768}, {5, 127}, {1000, 3}, {3, 4097}, {300, 64}}) {
      const Problem p{shape, t, ""};
      SCOPED_TRACE(p.label());
      const i64 rows = shape[0], cols = shape[1];
      for (std::uint64_t seed : {1u, 2u, 3u}) {
        const Inputs in = make_inputs(*op, p, seed);
        const Reference ref = op->reference(p, in);
        const auto good = fp32_outputs(*op, p, in);
        EXPECT_EQ(check(*op, p, in, ref, good), "") << "seed " << seed;

        // dx without c2 (f32: bf16's rounding can hide it on the widest rows).
        if (t == DType::f32) {
          auto no_c2 = good;
          const std::vector<double> term = c2_term(in, rows, cols);
          for (i64 i = 0; i < rows * cols; ++i) no_c2[0].set(i, good[0].get(i) + term[static_cast<std::size_t>(i)]);
          EXPECT_EQ(check(*op, p, in, ref, no_c2).rfind("output dx", 0), 0u) << "dx without c2";
        }

        // Row 0's term left out of dgamma (row 0 of dy times its xhat).
        auto missing = good;
        for (i64 j = 0; j < cols; ++j) {
          const double xh = (in.tensors[0].get(j) - in.tensors[3].get(0)) * in.tensors[4].get(0);
          missing[1].set(j, good[1].get(j) - in.tensors[2].get(j) * xh);
        }
        EXPECT_EQ(check(*op, p, in, ref, missing).rfind("output dgamma", 0), 0u) << "a row missing from dgamma";

        // dbeta shifted by one column.
        auto shifted = good;
        for (i64 j = cols - 1; j > 0; --j) shifted[2].set(j, good[2].get(j - 1));
        EXPECT_EQ(check(*op, p, in, ref, shifted).rfind("output dbeta", 0), 0u) << "dbeta shifted";

        // Rows 0 and 1 of dx swapped.
        auto swapped = good;
        for (i64 j = 0; j < cols; ++j) {
          swapped[0].set(j, good[0].get(cols + j));
          swapped[0].set(cols + j, good[0].get(j));
        }
        EXPECT_EQ(check(*op, p, in, ref, swapped).rfind("output dx", 0), 0u) << "rows swapped";

        // An output left unwritten: NaN, as the harness poisons it.
        for (std::size_t k = 0; k < 3; ++k) {
          auto unwritten = good;
          unwritten[k].set(unwritten[k].numel() - 1, std::numeric_limits<double>::quiet_NaN());
          EXPECT_NE(check(*op, p, in, ref, unwritten), "") << "output " << k << " unwritten";
        }
      }
    }
}

// One column: rstd = 316 and dx = 0 exactly. The tolerance admits what an FMA-contracted
// g - c1 leaves (half an ulp of dy * gamma, times rstd) and nothing near a missing c1.
TEST(LayernormBackward, OneColumnAllowsTheProductsRoundingOnly) {
  const Op* op = backward_op();
  if (!op) GTEST_SKIP() << "lesson 08 is not in this build";
  const Problem p{{64, 1}, DType::f32, ""};
  const Inputs in = make_inputs(*op, p, 7);
  const Reference ref = op->reference(p, in);
  const auto good = fp32_outputs(*op, p, in);
  EXPECT_EQ(check(*op, p, in, ref, good), "");
  auto fma = good, no_c1 = good;
  for (i64 r = 0; r < 64; ++r) {
    const double g = in.tensors[2].get(r) * in.tensors[1].get(0), rstd = in.tensors[4].get(r);
    EXPECT_GT(rstd, 300.0);
    fma[0].set(r, rstd * std::ldexp(std::abs(g), -25));
    no_c1[0].set(r, rstd * static_cast<float>(g));
  }
  EXPECT_EQ(check(*op, p, in, ref, fma), "") << "the product's rounding";
  EXPECT_EQ(check(*op, p, in, ref, no_c1).rfind("output dx", 0), 0u) << "c1 left out";
}

// rmsnorm_backward (rmsnorm_ops.cu): the same two checks. Its reference against finite
// differences of an fp64 rmsnorm forward, with teeth (dx without c2); and an fp32
// computation passes its tolerances while dx without c2 and a row left out of dgamma fail.
namespace {

double rms_loss(const std::vector<double>& x, const std::vector<double>& gamma, const std::vector<double>& dy, i64 rows,
                i64 cols) {
  double l = 0;
  for (i64 r = 0; r < rows; ++r) {
    double q = 0;
    for (i64 j = 0; j < cols; ++j) q += std::pow(x[static_cast<std::size_t>(r * cols + j)], 2);
    const double rstd = 1.0 / std::sqrt(q / static_cast<double>(cols) + kEps);
    for (i64 j = 0; j < cols; ++j) {
      const auto k = static_cast<std::size_t>(r * cols + j);
      l += dy[k] * x[k] * rstd * gamma[static_cast<std::size_t>(j)];
    }
  }
  return l;
}

// rstd * xhat * c2 per element (xhat = x * rstd): what a dx without c2 is off by.
std::vector<double> rms_c2_term(const Inputs& in, i64 rows, i64 cols) {
  std::vector<double> t(static_cast<std::size_t>(rows * cols));
  for (i64 r = 0; r < rows; ++r) {
    const double rs = in.tensors[3].get(r);
    double c2 = 0;
    for (i64 j = 0; j < cols; ++j)
      c2 += in.tensors[2].get(r * cols + j) * in.tensors[1].get(j) * in.tensors[0].get(r * cols + j) * rs;
    c2 /= static_cast<double>(cols);
    for (i64 j = 0; j < cols; ++j) t[static_cast<std::size_t>(r * cols + j)] = rs * in.tensors[0].get(r * cols + j) * rs * c2;
  }
  return t;
}

}  // namespace

TEST(RmsnormBackward, ReferenceMatchesFiniteDifferencesAndTolerancesHaveTeeth) {
  const Op* op = registry().find_op("rmsnorm_backward");
  if (!op) GTEST_SKIP() << "lesson 08 is not in this build";
  for (const Dims& shape : std::vector<Dims>{{3, 5}, {2, 17}, {4, 64}})
    for (std::uint64_t seed : {1u, 2u}) {
      const Problem p{shape, DType::f32, ""};
      SCOPED_TRACE(p.label() + " seed " + std::to_string(seed));
      const i64 rows = shape[0], cols = shape[1];
      const Inputs in = make_inputs(*op, p, seed);
      const Reference ref = op->reference(p, in);
      std::vector<double> x = as_doubles(in.tensors[0]), gamma = as_doubles(in.tensors[1]);
      const std::vector<double> dy = as_doubles(in.tensors[2]);
      const auto l = [&] { return rms_loss(x, gamma, dy, rows, cols); };
      const std::vector<double> dx(ref[0].begin(), ref[0].end()), dgamma(ref[1].begin(), ref[1].end());
      constexpr double tol = 1e-5;   // as layernorm_backward's: rstd rounded to fp32
      EXPECT_LT(worst_fd_gap(x, dx, l), tol) << "dx";
      EXPECT_LT(worst_fd_gap(gamma, dgamma, l), tol) << "dgamma";
      std::vector<double> no_c2 = dx;
      const std::vector<double> term = rms_c2_term(in, rows, cols);
      for (std::size_t i = 0; i < no_c2.size(); ++i) no_c2[i] += term[i];
      EXPECT_GT(worst_fd_gap(x, no_c2, l), 100 * tol) << "dx without c2";
    }
  for (const Dims& shape : std::vector<Dims>{{9, 768}, {1000, 3}, {3, 4097}}) {
    const Problem p{shape, DType::f32, ""};
    SCOPED_TRACE(p.label());
    const i64 rows = shape[0], cols = shape[1];
    const Inputs in = make_inputs(*op, p, 3);
    const Reference ref = op->reference(p, in);
    // fp32, the column sums added row after row.
    std::vector<HostTensor> good;
    for (const auto& s : op->outputs(p)) good.emplace_back(s.dtype, s.shape);
    std::vector<float> dg(static_cast<std::size_t>(cols), 0.f);
    for (i64 r = 0; r < rows; ++r) {
      const auto rs = static_cast<float>(in.tensors[3].get(r));
      float c2 = 0.f;
      for (i64 j = 0; j < cols; ++j) {
        const auto d = static_cast<float>(in.tensors[2].get(r * cols + j));
        const float xh = static_cast<float>(in.tensors[0].get(r * cols + j)) * rs;
        c2 += d * static_cast<float>(in.tensors[1].get(j)) * xh;
        dg[static_cast<std::size_t>(j)] += d * xh;
      }
      c2 /= static_cast<float>(cols);
      for (i64 j = 0; j < cols; ++j) {
        const float xh = static_cast<float>(in.tensors[0].get(r * cols + j)) * rs;
        const float g = static_cast<float>(in.tensors[2].get(r * cols + j)) * static_cast<float>(in.tensors[1].get(j));
        good[0].set(r * cols + j, rs * (g - xh * c2));
      }
    }
    for (i64 j = 0; j < cols; ++j) good[1].set(j, dg[static_cast<std::size_t>(j)]);
    EXPECT_EQ(check(*op, p, in, ref, good), "");
    auto no_c2 = good;
    const std::vector<double> term = rms_c2_term(in, rows, cols);
    for (i64 i = 0; i < rows * cols; ++i) no_c2[0].set(i, good[0].get(i) + term[static_cast<std::size_t>(i)]);
    EXPECT_EQ(check(*op, p, in, ref, no_c2).rfind("output dx", 0), 0u) << "dx without c2";
    auto missing = good;
    for (i64 j = 0; j < cols; ++j)
      missing[1].set(j, good[1].get(j) - in.tensors[2].get(j) * in.tensors[0].get(j) * in.tensors[3].get(0));
    EXPECT_EQ(check(*op, p, in, ref, missing).rfind("output dgamma", 0), 0u) << "a row missing from dgamma";
  }
}
