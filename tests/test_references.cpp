// CPU tests of lesson references against cases worked out by hand, called through the
// registry as the harness calls them. A reference that shares code with the kernels would
// agree with the kernels' mistakes; these cases come from the ops' definitions alone.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "klab/op.hpp"

using namespace klab;

namespace {

// The reference of a softmax_rows problem (f32, shape {rows, cols}) whose every row is
// x[r][j] = ln(j + 1): exp(x) is 1, 2, 3, ..., so the softmax over a kept prefix of k
// columns is (1, 2, ..., k) / (k (k + 1) / 2) — fractions that can be written out by hand.
RefArray softmax_of_logs(std::int64_t rows, std::int64_t cols, const std::string& variant) {
  const Op* op = registry().find_op("softmax_rows");
  EXPECT_NE(op, nullptr);
  if (!op) return {};
  const Problem p{{rows, cols}, DType::f32, variant};
  Inputs in;
  in.tensors.emplace_back(DType::f32, Dims{rows, cols});
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < cols; ++j) in.tensors[0].set(r * cols + j, std::log(static_cast<double>(j + 1)));
  return op->reference(p, in).at(0);
}

// Masked elements must be exactly 0. Kept ones: the inputs are ln(j + 1) rounded to f32,
// off by at most 2^-24 relative, so by at most ln(4) * 2^-24 < 1e-7 absolute here; each
// exp moves by that much relative, and a ratio of them (the softmax) by at most twice
// that: 2e-7 of values <= 1. 1e-6 is five times that, and far below what a mask one
// column off changes (at least 1/6 - 1/10 = 0.067 in these cases).
void expect_rows(const RefArray& got, const std::vector<std::vector<double>>& want) {
  std::size_t i = 0;
  for (std::size_t r = 0; r < want.size(); ++r)
    for (std::size_t j = 0; j < want[r].size(); ++j, ++i) {
      ASSERT_LT(i, got.size());
      if (want[r][j] == 0) EXPECT_EQ(got[i], 0.0) << "row " << r << " col " << j;
      else EXPECT_NEAR(got[i], want[r][j], 1e-6) << "row " << r << " col " << j;
    }
  EXPECT_EQ(i, got.size());
}

}  // namespace

// Causal: row r of an (R, C) problem keeps columns j <= r + (C - R): the last row keeps all
// of them (queries aligned to the end of a longer key sequence).
TEST(SoftmaxReference, CausalFewerRowsThanColumns) {
  if (!registry().find_op("softmax_rows")) GTEST_SKIP() << "lesson 04 is not in this build";
  // R = 2, C = 4: row 0 keeps j <= 2, row 1 keeps j <= 3.
  expect_rows(softmax_of_logs(2, 4, "causal"), {{1.0 / 6, 2.0 / 6, 3.0 / 6, 0},
                                                {1.0 / 10, 2.0 / 10, 3.0 / 10, 4.0 / 10}});
}

TEST(SoftmaxReference, CausalSquare) {
  if (!registry().find_op("softmax_rows")) GTEST_SKIP() << "lesson 04 is not in this build";
  // R = C = 3: the lower triangle, diagonal included.
  expect_rows(softmax_of_logs(3, 3, "causal"), {{1, 0, 0},
                                                {1.0 / 3, 2.0 / 3, 0},
                                                {1.0 / 6, 2.0 / 6, 3.0 / 6}});
}

TEST(SoftmaxReference, CausalMoreRowsThanColumns) {
  if (!registry().find_op("softmax_rows")) GTEST_SKIP() << "lesson 04 is not in this build";
  // R = 4, C = 2: row r keeps j <= r - 2; rows 0 and 1 keep nothing and are all zeros.
  expect_rows(softmax_of_logs(4, 2, "causal"), {{0, 0}, {0, 0}, {1, 0}, {1.0 / 3, 2.0 / 3}});
}

TEST(SoftmaxReference, PlainKeepsEveryColumn) {
  if (!registry().find_op("softmax_rows")) GTEST_SKIP() << "lesson 04 is not in this build";
  expect_rows(softmax_of_logs(2, 3, ""), {{1.0 / 6, 2.0 / 6, 3.0 / 6}, {1.0 / 6, 2.0 / 6, 3.0 / 6}});
}

// The sampled reference of shapes too large for a full one must agree with the full one
// on the rows it samples, causal mask included.
TEST(SoftmaxReference, SampleMatchesFullReference) {
  if (!registry().find_op("softmax_rows")) GTEST_SKIP() << "lesson 04 is not in this build";
  const Op* op = registry().find_op("softmax_rows");
  ASSERT_NE(op, nullptr);
  ASSERT_TRUE(op->reference_sample);
  const Problem p{{7, 3}, DType::f32, "causal"};
  Inputs in;
  in.tensors.emplace_back(DType::f32, Dims{7, 3});
  for (std::int64_t i = 0; i < 21; ++i) in.tensors[0].set(i, std::log(static_cast<double>(i % 3 + 1)));
  const auto full = op->reference(p, in).at(0);
  const auto sample = op->reference_sample(p, in, 11).at(0);
  ASSERT_FALSE(sample.index.empty());
  for (std::size_t k = 0; k < sample.index.size(); ++k)
    EXPECT_EQ(sample.value[k], full.at(static_cast<std::size_t>(sample.index[k]))) << "element " << sample.index[k];
}
