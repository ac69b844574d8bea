// CPU tests of lesson 06's linear_swiglu (swiglu_ops.cu): y = silu(x · W_gᵀ) ⊙ (x · W_uᵀ)
// with [W_g | W_u] interleaved by blocks of 8 rows. The outputs a correct kernel can produce
// pass (fused: g and u in fp32, SiLU off by tanh.approx's error, judged by the op's
// tolerance; unfused: g and u rounded to bf16 first, judged by v1's), and each deliberate
// mistake fails v1's, the looser: gate and up swapped, the blocks read 8 rows off, SiLU left
// out, y one row off. v1's differs from the op's in the relative and rel-L2 terms only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "klab/compare.hpp"
#include "klab/dtype.hpp"
#include "klab/harness.hpp"
#include "klab/op.hpp"
#include "klab/tensor.hpp"

using namespace klab;

namespace {

using i64 = std::int64_t;

enum class Way { fused, unfused, swapped, block_off, no_silu, row_shifted };

// y the way a kernel computes it: both dot products in fp32 (unfused: each rounded to bf16),
// SiLU in fp32 moved by tanh.approx's worst error (2^-12 · |g|, towards larger |y|), the
// product rounded to bf16.
HostTensor kernel_like(const Problem& p, const Inputs& in, Way way) {
  const i64 M = p.shape[0], N = p.shape[1], K = p.shape[2];
  HostTensor y(DType::bf16, {M, N});
  auto dot = [&](i64 m, i64 row) {
    float acc = 0.f;
    for (i64 k = 0; k < K; ++k)
      acc += static_cast<float>(in.tensors[0].get(m * K + k)) * static_cast<float>(in.tensors[1].get(row * K + k));
    return way == Way::unfused ? static_cast<float>(round_to(DType::bf16, acc)) : acc;
  };
  for (i64 m = 0; m < M; ++m)
    for (i64 n = 0; n < N; ++n) {
      i64 gate = 16 * (n / 8) + n % 8, up = gate + 8;
      if (way == Way::swapped) std::swap(gate, up);
      if (way == Way::block_off) gate = (gate + 16) % (2 * N), up = (up + 16) % (2 * N);
      const float g = dot(m, gate), u = dot(m, up);
      float s = way == Way::no_silu ? g : g / (1.f + std::exp(-g));
      s += std::copysign(std::ldexp(std::fabs(g), -12), s * u);
      y.set(((m + (way == Way::row_shifted ? 1 : 0)) % M) * N + n, s * u);
    }
  return y;
}

}  // namespace

TEST(LinearSwiglu, KernelLikeOutputsPassAndEachMistakeFails) {
  const Op* op = registry().find_op("linear_swiglu");
  if (!op) GTEST_SKIP() << "lesson 06 is not in this build";
  const Impl* v1 = registry().find_impl("linear_swiglu", "v1_matmul_then_swiglu");
  ASSERT_NE(v1, nullptr);
  ASSERT_TRUE(static_cast<bool>(v1->tolerance));
  for (const Dims& shape : std::vector<Dims>{{1, 8, 8}, {9, 40, 8}, {33, 64, 136}, {17, 16, 768}, {5, 8, 0}}) {
    const Problem p{shape, DType::bf16, ""};
    SCOPED_TRACE(p.label());
    const i64 M = shape[0], N = shape[1], K = shape[2];
    for (std::uint64_t seed : {1u, 2u, 3u, 4u}) {
      const Inputs in = make_inputs(*op, p, seed);
      const Reference ref = op->reference(p, in);
      const Tolerance op_tol = op->tolerance(p, 0), v1_tol = v1->tolerance(p, 0);
      EXPECT_EQ(v1_tol.atol, op_tol.atol);
      EXPECT_EQ(v1_tol.rtol, 2 * op_tol.rtol);
      EXPECT_EQ(v1_tol.max_rel_l2, 2 * op_tol.max_rel_l2);
      auto passes = [&](Way w, const Tolerance& t) { return compare(kernel_like(p, in, w), ref[0], t).ok; };
      EXPECT_TRUE(passes(Way::fused, op_tol)) << "fused, seed " << seed;
      EXPECT_TRUE(passes(Way::unfused, v1_tol)) << "unfused, seed " << seed;
      if (K == 0) continue;                     // y = 0: nothing to get wrong
      EXPECT_FALSE(passes(Way::swapped, v1_tol)) << "gate and up swapped, seed " << seed;
      if (N >= 16) EXPECT_FALSE(passes(Way::block_off, v1_tol)) << "blocks off by 8 rows, seed " << seed;
      EXPECT_FALSE(passes(Way::no_silu, v1_tol)) << "no SiLU, seed " << seed;
      if (M >= 2) EXPECT_FALSE(passes(Way::row_shifted, v1_tol)) << "rows shifted, seed " << seed;
    }
  }
}

// v1's relative term, from its derivation: g and u each off by a bf16 rounding (2^-8 of
// themselves) in the worst direction at g = 1.28, where silu amplifies g's change most, then
// y's own rounding: over 2^-7 of |y|, under 2^-6.
TEST(LinearSwiglu, UnfusedWorstCaseNeedsV1sRelativeTerm) {
  const double g = 1.2785, u = 100.0, e = std::ldexp(1.0, -8);
  auto silu = [](double v) { return v / (1.0 + std::exp(-v)); };
  const double y = silu(g) * u, worst = silu(g * (1 + e)) * u * (1 + e) * (1 + e);
  EXPECT_GT(std::fabs(worst - y) / y, std::ldexp(1.0, -7));
  EXPECT_LT(std::fabs(worst - y) / y, std::ldexp(1.0, -6));
}
