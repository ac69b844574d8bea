// CPU tests of lesson 07's dropout properties (Op::properties in dropout_ops.cu): what any
// dropout output must satisfy whichever random stream drew it, the only check of an impl
// judged by properties (curand_mask). A valid output of another stream passes; each kind
// of wrong output fails: an element that is neither 0 nor x · scale, a NaN, an element
// shifted from its neighbour, p = 0 or 1 not exact, a keep rate off by a wrong threshold.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "klab/device/philox.cuh"
#include "klab/harness.hpp"
#include "klab/op.hpp"
#include "klab/rng.hpp"

using namespace klab;

namespace {

constexpr std::int64_t kRows = 64, kCols = 1000;   // 64,000 elements: the binomial bound applies

const Op* dropout_op() { return registry().find_op("dropout"); }

// y from the lesson's stream under another (seed, offset) than the inputs name: a valid
// output that the element-by-element compare would reject. `threshold_p`: the drop
// probability whose threshold decides (the problem's own for a valid output).
HostTensor other_draw(const Problem& p, const Inputs& in, double threshold_p) {
  const auto& x = in.tensors.at(0);
  HostTensor y(p.dtype, p.shape);
  const double drop = std::stod(p.variant.substr(1));
  const double scale = drop < 1.0 ? static_cast<double>(static_cast<float>(1.0 / (1.0 - drop))) : 0.0;
  const std::uint64_t threshold = dropout_threshold(threshold_p);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    y.set(i, dropout_keep(12345, 678, static_cast<std::uint64_t>(i), threshold)
                 ? static_cast<double>(static_cast<float>(x.get(i)) * static_cast<float>(scale))
                 : 0.0);
  return y;
}

std::string judge(const Op& op, const Problem& p, const Inputs& in, const HostTensor& y) {
  return op.properties(p, in, std::vector<HostTensor>{y});
}

}  // namespace

TEST(DropoutProperties, AnotherStreamPassesAndEachWrongOutputFails) {
  const Op* op = dropout_op();
  if (!op) GTEST_SKIP() << "lesson 07 is not in this build";
  ASSERT_TRUE(static_cast<bool>(op->properties));
  for (const DType t : {DType::f32, DType::bf16})
    for (const std::string v : {"p0.1", "p0.5", "p0.9"}) {
      const Problem p{{kRows, kCols}, t, v};
      const Inputs in = make_inputs(*op, p, 7);
      const HostTensor good = other_draw(p, in, std::stod(v.substr(1)));
      EXPECT_EQ(judge(*op, p, in, good), "") << v;

      HostTensor off = good;   // a kept element off by a tenth
      for (std::int64_t i = 0; i < off.numel(); ++i)
        if (off.get(i) != 0.0) { off.set(i, off.get(i) * 1.1); break; }
      EXPECT_NE(judge(*op, p, in, off), "") << v << ": an element neither 0 nor x * scale";

      HostTensor nan = good;
      nan.set(kCols + 3, std::nan(""));
      EXPECT_NE(judge(*op, p, in, nan), "") << v << ": a NaN";

      HostTensor shifted(t, p.shape);   // every element one to the right
      for (std::int64_t i = 1; i < good.numel(); ++i) shifted.set(i, good.get(i - 1));
      EXPECT_NE(judge(*op, p, in, shifted), "") << v << ": shifted by one element";

      // The threshold of another rate: every element is 0 or x * scale, the rate is wrong.
      const double wrong_p = v == "p0.5" ? 0.45 : v == "p0.1" ? 0.12 : 0.88;
      EXPECT_NE(judge(*op, p, in, other_draw(p, in, wrong_p)), "") << v << ": keep rate of p = " << wrong_p;
    }
}

TEST(DropoutProperties, TheEndsAreExact) {
  const Op* op = dropout_op();
  if (!op) GTEST_SKIP() << "lesson 07 is not in this build";
  const Problem p0{{kRows, kCols}, DType::f32, "p0"}, p1{{kRows, kCols}, DType::f32, "p1"};
  const Inputs in0 = make_inputs(*op, p0, 3), in1 = make_inputs(*op, p1, 3);
  HostTensor all = other_draw(p0, in0, 0.0);
  EXPECT_EQ(judge(*op, p0, in0, all), "");
  for (std::int64_t i = 0; i < all.numel(); ++i)
    if (all.get(i) != 0.0) { all.set(i, 0.0); break; }
  EXPECT_NE(judge(*op, p0, in0, all), "") << "p = 0 with one element dropped";
  HostTensor none(DType::f32, p1.shape);
  for (std::int64_t i = 0; i < none.numel(); ++i) none.set(i, 0.0);
  EXPECT_EQ(judge(*op, p1, in1, none), "");
  none.set(5, in1.tensors[0].get(5));   // one element kept (x * 0 would be 0: keep x itself)
  EXPECT_NE(judge(*op, p1, in1, none), "") << "p = 1 with one element kept";
}
