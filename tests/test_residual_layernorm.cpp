// CPU tests of lesson 08's dropout_residual_layernorm (residual_layernorm_ops.cu): its
// reference keeps the op's definition (p = 0 adds all of h, p = 1 none of it, the kept
// elements are lesson 07's stream), an fp32 computation the way v2_fused_in_registers does
// it passes the harness's judge at the op's tolerances, and each kind of wrong output fails
// it: the mask shifted by one element or drawn at the next offset, the kept elements not
// scaled, the residual left out, y shifted by one element, statistics of a neighbouring row,
// an output left unwritten.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "klab/device/philox.cuh"
#include "klab/dtype.hpp"
#include "klab/harness.hpp"
#include "klab/op.hpp"
#include "test_util.hpp"

using namespace klab;
using klab_test::check;

namespace {

const Op* residual_op() { return registry().find_op("dropout_residual_layernorm"); }

double drop_of(const Problem& p) { return std::stod(p.variant.substr(1)); }

// A tree (pairwise) sum in fp32, as the kernels' shuffle and block reductions add.
float tree_sum(const std::vector<float>& v, std::size_t b, std::size_t e) {
  if (e == b) return 0.f;
  if (e - b == 1) return v[b];
  const std::size_t m = b + (e - b) / 2;
  return tree_sum(v, b, m) + tree_sum(v, m, e);
}

// What a kernel could do wrong, one at a time.
struct Mistake {
  std::int64_t mask_shift = 0;     // element i takes the keep bit of element i + shift
  std::uint64_t offset_plus = 0;   // the stream drawn at offset + this
  bool unscaled = false;           // kept elements added without 1 / (1 - p)
  bool no_residual = false;        // r = dropout(h), x left out
};

// y, r, mean and rstd in fp32 the way v2_fused_in_registers computes them: r by one fma and
// rounded to the dtype, tree sums over the row as stored, two passes, 1 / sqrt.
std::vector<HostTensor> fp32_outputs(const Op& op, const Problem& p, const Inputs& in, const Mistake& m = {}) {
  const std::int64_t rows = p.shape[0], cols = p.shape[1];
  std::vector<HostTensor> out;
  for (const auto& s : op.outputs(p)) out.emplace_back(s.dtype, s.shape);
  const auto &x = in.tensors[0], &h = in.tensors[1], &g = in.tensors[2], &b = in.tensors[3];
  const double drop = drop_of(p);
  const float scale = m.unscaled ? 1.0f : (drop < 1.0 ? static_cast<float>(1.0 / (1.0 - drop)) : 0.0f);
  const auto seed = static_cast<std::uint64_t>(in.scalars[0]);
  const auto offset = static_cast<std::uint64_t>(in.scalars[1]) + m.offset_plus;
  const std::uint64_t threshold = dropout_threshold(drop);
  std::vector<float> row(static_cast<std::size_t>(cols)), sq(row.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const std::int64_t i = r * cols + j;
      const bool keep = dropout_keep(seed, offset, static_cast<std::uint64_t>(i + m.mask_shift), threshold);
      const float xi = m.no_residual ? 0.0f : static_cast<float>(x.get(i)), hi = static_cast<float>(h.get(i));
      const float ri = static_cast<float>(round_to(p.dtype, keep ? std::fma(hi, scale, xi) : xi));
      row[static_cast<std::size_t>(j)] = ri;
      out[1].set(i, ri);
    }
    const float mean = tree_sum(row, 0, row.size()) / static_cast<float>(cols);
    for (std::size_t j = 0; j < row.size(); ++j) sq[j] = (row[j] - mean) * (row[j] - mean);
    const float rstd = 1.f / std::sqrt(tree_sum(sq, 0, sq.size()) / static_cast<float>(cols) + 1e-5f);
    for (std::int64_t j = 0; j < cols; ++j)
      out[0].set(r * cols + j, (row[static_cast<std::size_t>(j)] - mean) * rstd * static_cast<float>(g.get(j)) +
                                   static_cast<float>(b.get(j)));
    out[2].set(r, mean);
    out[3].set(r, rstd);
  }
  return out;
}

}  // namespace

TEST(ResidualLayernorm, ReferenceKeepsTheDefinition) {
  const Op* op = residual_op();
  if (!op) GTEST_SKIP() << "lesson 08 is not in this build";
  for (const DType t : {DType::f32, DType::bf16}) {
    const Dims shape{7, 133};
    const Problem p0{shape, t, "p0"}, p1{shape, t, "p1"}, p01{shape, t, "p0.1"};
    const Inputs in = make_inputs(*op, p0, 5);
    const Reference r0 = op->reference(p0, in), r1 = op->reference(p1, in), r01 = op->reference(p01, in);
    std::int64_t dropped = 0;
    for (std::int64_t i = 0; i < shape[0] * shape[1]; ++i) {
      const auto k = static_cast<std::size_t>(i);
      const double x = in.tensors[0].get(i), h = in.tensors[1].get(i);
      EXPECT_EQ(r0[1][k], round_to(t, static_cast<double>(static_cast<float>(x) + static_cast<float>(h)))) << i;
      EXPECT_EQ(r1[1][k], x) << i;                       // nothing kept: r is x, to the bit
      // p = 0.1: each element is x (dropped) or x + h / 0.9 (kept), as lesson 07's stream says.
      const bool keep = dropout_keep(static_cast<std::uint64_t>(in.scalars[0]), static_cast<std::uint64_t>(in.scalars[1]),
                                     static_cast<std::uint64_t>(i), dropout_threshold(0.1));
      if (!keep) ++dropped;
      EXPECT_NEAR(r01[1][k], keep ? x + h / 0.9 : x, 2e-2 * (std::fabs(x) + std::fabs(h)) + 1e-6) << i;
      if (!keep) EXPECT_EQ(r01[1][k], x) << i;
    }
    EXPECT_GT(dropped, 0);                               // 931 elements at p = 0.1: some dropped
    // Each row of y has mean beta's mean and the spread gamma gives it: the row of r, normalized.
    for (std::int64_t r = 0; r < shape[0]; ++r) {
      double s = 0;
      for (std::int64_t j = 0; j < shape[1]; ++j) s += r01[1][static_cast<std::size_t>(r * shape[1] + j)];
      EXPECT_NEAR(r01[2][static_cast<std::size_t>(r)], s / static_cast<double>(shape[1]), 1e-12);
    }
  }
}

TEST(ResidualLayernorm, Fp32ComputationPassesAndEachWrongOutputFails) {
  const Op* op = residual_op();
  if (!op) GTEST_SKIP() << "lesson 08 is not in this build";
  for (const DType t : {DType::f32, DType::bf16})
    for (const std::string variant : {"p0.1", "p0", "p1"})
      for (const Dims& shape : std::vector<Dims>{{9, 768}, {5, 127}, {1000, 3}, {3, 4097}}) {
        const Problem p{shape, t, variant};
        SCOPED_TRACE(p.label() + " " + variant);
        for (std::uint64_t seed : {1u, 2u}) {
          const Inputs in = make_inputs(*op, p, seed);
          const Reference ref = op->reference(p, in);
          EXPECT_EQ(check(*op, p, in, ref, fp32_outputs(*op, p, in)), "") << "seed " << seed;
          EXPECT_NE(check(*op, p, in, ref, fp32_outputs(*op, p, in, {.no_residual = true})), "") << "no residual";
          if (variant == "p0.1") {
            EXPECT_NE(check(*op, p, in, ref, fp32_outputs(*op, p, in, {.mask_shift = 1})), "") << "mask shifted";
            EXPECT_NE(check(*op, p, in, ref, fp32_outputs(*op, p, in, {.offset_plus = 1})), "") << "next offset";
            EXPECT_NE(check(*op, p, in, ref, fp32_outputs(*op, p, in, {.unscaled = true})), "") << "unscaled";
          }
          const auto good = fp32_outputs(*op, p, in);
          auto shifted = good;                           // y shifted by one element in row 0
          for (std::int64_t j = shape[1] - 1; j > 0; --j) shifted[0].set(j, good[0].get(j - 1));
          EXPECT_EQ(check(*op, p, in, ref, shifted).rfind("output y", 0), 0u) << "y shifted";
          auto swapped = good;                           // rows 0 and 1 of mean and rstd swapped
          for (std::size_t k : {2u, 3u}) {
            swapped[k].set(0, good[k].get(1));
            swapped[k].set(1, good[k].get(0));
          }
          EXPECT_NE(check(*op, p, in, ref, swapped), "") << "statistics swapped";
          for (std::size_t k = 0; k < 4; ++k) {          // an output left unwritten (NaN poison)
            auto unwritten = good;
            unwritten[k].set(unwritten[k].numel() - 1, std::numeric_limits<double>::quiet_NaN());
            EXPECT_NE(check(*op, p, in, ref, unwritten), "") << "output " << k << " unwritten";
          }
        }
      }
}

// ---------------------------------------------------------------------------------------
// dropout_residual_layernorm_backward
// ---------------------------------------------------------------------------------------
namespace {

const Op* residual_backward_op() { return registry().find_op("dropout_residual_layernorm_backward"); }

// L = sum dy * layernorm(r) * gamma + beta + sum dres * r, r = x + keep * scale * h, in fp64
// with the row statistics computed from r (so that they move with it).
double residual_loss(const std::vector<double>& x, const std::vector<double>& h, const std::vector<bool>& keep,
                     double scale, const Inputs& in, std::int64_t rows, std::int64_t cols) {
  const auto &g = in.tensors[1], &dy = in.tensors[2], &dres = in.tensors[5];
  double l = 0;
  std::vector<double> r(static_cast<std::size_t>(cols));
  for (std::int64_t row = 0; row < rows; ++row) {
    double s = 0, q = 0;
    for (std::int64_t j = 0; j < cols; ++j) {
      const auto k = static_cast<std::size_t>(row * cols + j);
      r[static_cast<std::size_t>(j)] = x[k] + (keep[k] ? scale * h[k] : 0.0);
      s += r[static_cast<std::size_t>(j)];
    }
    const double mean = s / static_cast<double>(cols);
    for (std::int64_t j = 0; j < cols; ++j) q += std::pow(r[static_cast<std::size_t>(j)] - mean, 2);
    const double rstd = 1.0 / std::sqrt(q / static_cast<double>(cols) + 1e-5);
    for (std::int64_t j = 0; j < cols; ++j) {
      const std::int64_t i = row * cols + j;
      const double rj = r[static_cast<std::size_t>(j)];
      l += dy.get(i) * (rj - mean) * rstd * g.get(j) + dres.get(i) * rj;   // beta adds a constant
    }
  }
  return l;
}

}  // namespace

TEST(ResidualLayernormBackward, ReferenceIsTheGradientByFiniteDifferences) {
  const Op* op = residual_backward_op();
  if (!op) GTEST_SKIP() << "lesson 08 is not in this build";
  const Dims shape{4, 33};
  const Problem p{shape, DType::f32, "p0.1"};
  const Inputs in = make_inputs(*op, p, 11);
  const Reference ref = op->reference(p, in);
  const std::int64_t n = shape[0] * shape[1];
  // The forward's keep mask, and an h and x that give the saved r: x = r - keep * scale * h.
  const auto seed = static_cast<std::uint64_t>(in.scalars[0]), offset = static_cast<std::uint64_t>(in.scalars[1]);
  const double scale = static_cast<double>(static_cast<float>(1.0 / 0.9));
  std::vector<bool> keep(static_cast<std::size_t>(n));
  std::vector<double> h(static_cast<std::size_t>(n)), x(static_cast<std::size_t>(n));
  int dropped = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    keep[k] = dropout_keep(seed, offset, static_cast<std::uint64_t>(i), dropout_threshold(0.1));
    dropped += keep[k] ? 0 : 1;
    h[k] = std::sin(0.7 * static_cast<double>(i));
    x[k] = in.tensors[0].get(i) - (keep[k] ? scale * h[k] : 0.0);
  }
  ASSERT_GT(dropped, 0) << "the check needs dropped elements (132 at p = 0.1)";
  const auto loss = [&] { return residual_loss(x, h, keep, scale, in, shape[0], shape[1]); };
  constexpr double step = 1e-5;
  double worst_dx = 0, worst_dh = 0, worst_wrong = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    for (auto* v : {&x, &h}) {
      const double at = (*v)[k];
      (*v)[k] = at + step;
      const double up = loss();
      (*v)[k] = at - step;
      const double down = loss();
      (*v)[k] = at;
      const double fd = (up - down) / (2 * step);
      if (v == &x) worst_dx = std::max(worst_dx, std::fabs(fd - ref[0][k]));
      else {
        worst_dh = std::max(worst_dh, std::fabs(fd - ref[3][k]));
        worst_wrong = std::max(worst_wrong, std::fabs(fd - scale * ref[0][k]));   // the mask left out
      }
    }
  }
  // The saved mean and rstd are fp32 roundings of the exact ones: gaps of ~1e-7, far below
  // any slip (a dropped element's dh is off by its whole dr).
  EXPECT_LT(worst_dx, 1e-5);
  EXPECT_LT(worst_dh, 1e-5);
  EXPECT_GT(worst_wrong, 1e-2);
}

TEST(ResidualLayernormBackward, EachWrongOutputFails) {
  const Op* op = residual_backward_op();
  if (!op) GTEST_SKIP() << "lesson 08 is not in this build";
  for (const DType t : {DType::f32, DType::bf16})
    for (const Dims& shape : std::vector<Dims>{{9, 768}, {5, 127}, {1000, 3}, {1, 1}}) {
      const Problem p{shape, t, "p0.1"};
      SCOPED_TRACE(p.label());
      const Inputs in = make_inputs(*op, p, 3);
      const Reference ref = op->reference(p, in);
      const auto seed = static_cast<std::uint64_t>(in.scalars[0]), offset = static_cast<std::uint64_t>(in.scalars[1]);
      const double scale = static_cast<double>(static_cast<float>(1.0 / 0.9));
      // Outputs from the reference, each rounded to its dtype once (what a fused kernel
      // stores), and with one mistake: layernorm's dx alone (no dres), the mask drawn for the
      // next element, dh unscaled, dh as dr with no mask.
      enum Mistake { none, no_residual, mask_shifted, unscaled, no_mask };
      const auto outputs = [&](Mistake m) {
        std::vector<HostTensor> out;
        for (const auto& s : op->outputs(p)) out.emplace_back(s.dtype, s.shape);
        for (std::int64_t i = 0; i < out[0].numel(); ++i) {
          const auto k = static_cast<std::size_t>(i);
          const double dr = m == no_residual ? ref[0][k] - in.tensors[5].get(i) : ref[0][k];
          const bool keep = dropout_keep(seed, offset, static_cast<std::uint64_t>(i + (m == mask_shifted ? 1 : 0)),
                                         dropout_threshold(0.1));
          out[0].set(i, dr);
          out[3].set(i, m == no_mask ? dr : keep ? dr * (m == unscaled ? 1.0 : scale) : 0.0);
        }
        for (std::int64_t j = 0; j < shape[1]; ++j) {
          out[1].set(j, ref[1][static_cast<std::size_t>(j)]);
          out[2].set(j, ref[2][static_cast<std::size_t>(j)]);
        }
        return out;
      };
      EXPECT_EQ(check(*op, p, in, ref, outputs(none)), "");
      EXPECT_NE(check(*op, p, in, ref, outputs(no_residual)), "") << "no residual";
      if (shape[0] * shape[1] >= 100) {    // a one-element tensor may keep its only element
        EXPECT_NE(check(*op, p, in, ref, outputs(mask_shifted)), "") << "mask shifted";
        EXPECT_NE(check(*op, p, in, ref, outputs(no_mask)), "") << "no mask";
        EXPECT_NE(check(*op, p, in, ref, outputs(unscaled)), "") << "unscaled";
      }
      for (std::size_t k = 0; k < 4; ++k) {            // an output left unwritten
        auto unwritten = outputs(none);
        unwritten[k].set(unwritten[k].numel() - 1, std::numeric_limits<double>::quiet_NaN());
        EXPECT_NE(check(*op, p, in, ref, unwritten), "") << "output " << k << " unwritten";
      }
    }
}
