// CPU tests of lesson 08's layernorm_gelu (layernorm_gelu_ops.cu): its reference is
// layernorm's with GELU after it; an fp32 computation as v2_fused_gelu does it, and one as
// v1_layernorm_then_gelu does it (the layernorm's output rounded to the dtype before the
// GELU), pass the harness's judge at the op's tolerances; a GELU left out, GELU applied
// before gamma and beta, and an output left unwritten fail it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "klab/device/activation.cuh"
#include "klab/dtype.hpp"
#include "klab/harness.hpp"
#include "klab/op.hpp"
#include "test_util.hpp"

using namespace klab;
using klab_test::check;

namespace {

enum class Way { fused, unfused, no_gelu, gelu_before_affine };

// y, mean, rstd in fp32: two passes over the row, then the affine map and GELU.
std::vector<HostTensor> outputs(const Op& op, const Problem& p, const Inputs& in, Way way) {
  const std::int64_t rows = p.shape[0], cols = p.shape[1];
  std::vector<HostTensor> out;
  for (const auto& s : op.outputs(p)) out.emplace_back(s.dtype, s.shape);
  const auto &x = in.tensors[0], &g = in.tensors[1], &b = in.tensors[2];
  for (std::int64_t r = 0; r < rows; ++r) {
    float s = 0.f, q = 0.f;
    for (std::int64_t j = 0; j < cols; ++j) s += static_cast<float>(x.get(r * cols + j));
    const float mean = s / static_cast<float>(cols);
    for (std::int64_t j = 0; j < cols; ++j) {
      const float d = static_cast<float>(x.get(r * cols + j)) - mean;
      q += d * d;
    }
    const float rstd = 1.f / std::sqrt(q / static_cast<float>(cols) + 1e-5f);
    for (std::int64_t j = 0; j < cols; ++j) {
      const float xh = (static_cast<float>(x.get(r * cols + j)) - mean) * rstd;
      const float gj = static_cast<float>(g.get(j)), bj = static_cast<float>(b.get(j));
      float v = xh * gj + bj, y = 0.f;
      switch (way) {
        case Way::fused: y = gelu_tanh(v); break;
        case Way::unfused: y = gelu_tanh(static_cast<float>(round_to(p.dtype, v))); break;
        case Way::no_gelu: y = v; break;
        case Way::gelu_before_affine: y = gelu_tanh(xh) * gj + bj; break;
      }
      out[0].set(r * cols + j, y);
    }
    out[1].set(r, mean);
    out[2].set(r, rstd);
  }
  return out;
}

}  // namespace

TEST(LayernormGelu, ReferenceIsLayernormThenGelu) {
  const Op* op = registry().find_op("layernorm_gelu");
  const Op* ln = registry().find_op("layernorm");
  if (!op || !ln) GTEST_SKIP() << "lesson 08 is not in this build";
  const Problem p{{5, 127}, DType::f32, ""};
  const Inputs in = make_inputs(*op, p, 4);
  const Reference ref = op->reference(p, in), lref = ln->reference(p, in);
  for (std::size_t i = 0; i < ref[0].size(); ++i) EXPECT_EQ(ref[0][i], gelu_tanh_ref(lref[0][i])) << i;
  EXPECT_EQ(ref[1], lref[1]);
  EXPECT_EQ(ref[2], lref[2]);
  EXPECT_NEAR(gelu_tanh_ref(1.0), 0.8411919906, 1e-9);      // GELU's tanh form at 1 and -1
  EXPECT_NEAR(gelu_tanh_ref(-1.0), -0.1588080094, 1e-9);
}

TEST(LayernormGelu, KernelLikeOutputsPassAndEachWrongOneFails) {
  const Op* op = registry().find_op("layernorm_gelu");
  if (!op) GTEST_SKIP() << "lesson 08 is not in this build";
  for (const DType t : {DType::f32, DType::bf16})
    for (const Dims& shape : std::vector<Dims>{{9, 768}, {5, 127}, {1000, 3}, {3, 4097}}) {
      const Problem p{shape, t, ""};
      SCOPED_TRACE(p.label());
      for (std::uint64_t seed : {1u, 2u}) {
        const Inputs in = make_inputs(*op, p, seed);
        const Reference ref = op->reference(p, in);
        EXPECT_EQ(check(*op, p, in, ref, outputs(*op, p, in, Way::fused)), "") << "fused, seed " << seed;
        EXPECT_EQ(check(*op, p, in, ref, outputs(*op, p, in, Way::unfused)), "") << "unfused, seed " << seed;
        EXPECT_NE(check(*op, p, in, ref, outputs(*op, p, in, Way::no_gelu)), "") << "no GELU";
        EXPECT_NE(check(*op, p, in, ref, outputs(*op, p, in, Way::gelu_before_affine)), "") << "GELU before gamma, beta";
        auto unwritten = outputs(*op, p, in, Way::fused);
        unwritten[0].set(unwritten[0].numel() - 1, std::numeric_limits<double>::quiet_NaN());
        EXPECT_NE(check(*op, p, in, ref, unwritten), "") << "y unwritten";
      }
    }
}
