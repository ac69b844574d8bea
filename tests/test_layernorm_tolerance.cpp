// CPU tests of lesson 08's layernorm tolerances (layernorm_ops.cu derives them): an fp32
// computation the way the kernels do it (tree sums, two passes, rsqrt) passes the harness's
// judge (klab::judge: the compare against the fp64 reference with the op's tolerances), and each kind of wrong output fails it: the variance divided
// by cols - 1, a row's statistics written to its neighbour, y shifted by one element, an
// output left unwritten (the harness's NaN poison).
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
#include "klab/rng.hpp"

using namespace klab;
using klab_test::check;

namespace {

const Op* layernorm_op() { return registry().find_op("layernorm"); }

// A tree (pairwise) sum in fp32, as the kernels' shuffle and block reductions add.
float tree_sum(const std::vector<float>& v, std::size_t b, std::size_t e) {
  if (e - b == 1) return v[b];
  if (e == b) return 0.f;
  const std::size_t m = b + (e - b) / 2;
  return tree_sum(v, b, m) + tree_sum(v, m, e);
}

// y, mean and rstd computed in fp32 the way v2_block_registers does (two passes over the
// row, tree sums, 1/sqrt); `divisor_minus` 1 divides the variance by cols - 1 instead.
std::vector<HostTensor> fp32_outputs(const Op& op, const Problem& p, const Inputs& in, int divisor_minus = 0) {
  const std::int64_t rows = p.shape[0], cols = p.shape[1];
  const auto specs = op.outputs(p);
  std::vector<HostTensor> out;
  for (const auto& s : specs) out.emplace_back(s.dtype, s.shape);
  const auto& x = in.tensors[0];
  const auto& g = in.tensors[1];
  const auto& b = in.tensors[2];
  std::vector<float> row(static_cast<std::size_t>(cols)), sq(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < cols; ++j) row[static_cast<std::size_t>(j)] = static_cast<float>(x.get(r * cols + j));
    const float mean = tree_sum(row, 0, row.size()) / static_cast<float>(cols);
    for (std::size_t j = 0; j < row.size(); ++j) sq[j] = (row[j] - mean) * (row[j] - mean);
    const float var = tree_sum(sq, 0, sq.size()) / static_cast<float>(cols - divisor_minus);
    const float rstd = 1.f / std::sqrt(var + 1e-5f);
    for (std::int64_t j = 0; j < cols; ++j)
      out[0].set(r * cols + j, (row[static_cast<std::size_t>(j)] - mean) * rstd * static_cast<float>(g.get(j)) +
                                   static_cast<float>(b.get(j)));
    out[1].set(r, mean);
    out[2].set(r, rstd);
  }
  return out;
}

}  // namespace

TEST(LayernormTolerance, Fp32ComputationPassesAndEachWrongOutputFails) {
  const Op* op = layernorm_op();
  if (!op) GTEST_SKIP() << "lesson 08 is not in this build";
  ASSERT_TRUE(static_cast<bool>(op->tolerance));
  for (const DType t : {DType::f32, DType::bf16})
    for (const Dims& shape : std::vector<Dims>{{9, 768}, {5, 127}, {1000, 3}, {3, 4097}}) {
      const Problem p{shape, t, ""};
      SCOPED_TRACE(p.label());
      for (std::uint64_t seed : {1u, 2u, 3u}) {
        const Inputs in = make_inputs(*op, p, seed);
        const Reference ref = op->reference(p, in);
        const auto good = fp32_outputs(*op, p, in);
        EXPECT_EQ(check(*op, p, in, ref, good), "") << "seed " << seed;

        // The unbiased variance: rstd off by about 1 / (2 cols).
        if (shape[1] <= 768) EXPECT_NE(check(*op, p, in, ref, fp32_outputs(*op, p, in, 1)), "") << "cols - 1";

        // Row 0's statistics written to row 1 (and row 1's to row 0).
        auto swapped = good;
        for (int k : {1, 2}) {
          const double a = swapped[static_cast<std::size_t>(k)].get(0), b = swapped[static_cast<std::size_t>(k)].get(1);
          swapped[static_cast<std::size_t>(k)].set(0, b);
          swapped[static_cast<std::size_t>(k)].set(1, a);
        }
        EXPECT_NE(check(*op, p, in, ref, swapped), "") << "rows swapped";

        // y shifted by one element within row 0.
        auto shifted = good;
        for (std::int64_t j = shape[1] - 1; j > 0; --j) shifted[0].set(j, good[0].get(j - 1));
        EXPECT_EQ(check(*op, p, in, ref, shifted).rfind("output y", 0), 0u) << "y shifted";

        // An output left unwritten: NaN, as the harness poisons it.
        for (std::size_t k = 0; k < 3; ++k) {
          auto unwritten = good;
          unwritten[k].set(unwritten[k].numel() - 1, std::numeric_limits<double>::quiet_NaN());
          EXPECT_NE(check(*op, p, in, ref, unwritten), "") << "output " << k << " unwritten";
        }
      }
    }
}
