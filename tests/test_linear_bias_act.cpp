// CPU tests of lesson 06's linear layer, y = act(x · Wᵀ + b) (fusion_ops.cu): the outputs a
// correct bf16 kernel can produce pass the op's tolerance (fused: one rounding) and v1's
// (unfused: x · Wᵀ rounded to bf16 before the bias), and each deliberate mistake fails both:
// the bias left out, the bias one column off, the activation left out, the rows shifted by
// one. Some correct unfused outputs fail the op's own rel-L2 bound: why v1 has a tolerance
// of its own.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "klab/compare.hpp"
#include "klab/harness.hpp"
#include "klab/op.hpp"
#include "klab/dtype.hpp"
#include "klab/tensor.hpp"

using namespace klab;

namespace {

using i64 = std::int64_t;

double act(const std::string& v, double x) {
  if (v == "relu") return x > 0 ? x : 0;
  if (v == "gelu") return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  if (v == "silu") return x / (1.0 + std::exp(-x));
  return x;
}

// y the way a kernel computes it: the dot product in fp32, then (unfused) a bf16 rounding,
// then the bias and the activation in fp32, then the bf16 store. `bias_shift` reads column
// n's bias from n - shift, `row_shift` writes row m's values to row m + shift (mistakes).
HostTensor kernel_like(const Problem& p, const Inputs& in, bool unfused, bool with_bias, bool with_act,
                       i64 bias_shift = 0, i64 row_shift = 0) {
  const i64 M = p.shape[0], N = p.shape[1], K = p.shape[2];
  HostTensor y(DType::bf16, {M, N});
  for (i64 m = 0; m < M; ++m)
    for (i64 n = 0; n < N; ++n) {
      float acc = 0.f;
      for (i64 k = 0; k < K; ++k)
        acc += static_cast<float>(in.tensors[0].get(m * K + k)) * static_cast<float>(in.tensors[1].get(n * K + k));
      if (unfused) acc = static_cast<float>(round_to(DType::bf16, acc));
      const i64 bn = (n - bias_shift + N) % N;
      const float v = acc + (with_bias ? static_cast<float>(in.tensors[2].get(bn)) : 0.f);
      const double out = with_act ? act(p.variant, v) : v;
      y.set(((m + row_shift) % M) * N + n, static_cast<float>(out));
    }
  return y;
}

}  // namespace

TEST(LinearBiasAct, KernelLikeOutputsPassAndEachMistakeFails) {
  const Op* op = registry().find_op("linear_bias_act");
  if (!op) GTEST_SKIP() << "lesson 06 is not in this build";
  const Impl* v1 = registry().find_impl("linear_bias_act", "v1_matmul_then_bias_act");
  ASSERT_NE(v1, nullptr);
  ASSERT_TRUE(static_cast<bool>(v1->tolerance));
  int unfused_past_op_bound = 0;  // unfused outputs the op's own rel-L2 bound rejects
  for (const std::string variant : {"gelu", "relu", "silu", "bias"})
    for (const Dims& shape : std::vector<Dims>{{1, 1, 8}, {9, 40, 8}, {33, 65, 136}, {5, 7, 0}, {17, 3, 768}}) {
      const Problem p{shape, DType::bf16, variant};
      SCOPED_TRACE(p.label());
      const i64 M = shape[0], N = shape[1], K = shape[2];
      for (std::uint64_t seed : {1u, 2u, 3u, 4u}) {
        const Inputs in = make_inputs(*op, p, seed);
        const Reference ref = op->reference(p, in);
        const Tolerance op_tol = op->tolerance(p, 0), v1_tol = v1->tolerance(p, 0);
        auto passes = [&](const HostTensor& y, const Tolerance& t) { return compare(y, ref[0], t).ok; };

        EXPECT_TRUE(passes(kernel_like(p, in, false, true, true), op_tol)) << "fused, seed " << seed;
        if (K > 0) {
          const HostTensor unfused = kernel_like(p, in, true, true, true);
          EXPECT_TRUE(passes(unfused, v1_tol)) << "unfused, seed " << seed;
          unfused_past_op_bound += passes(unfused, op_tol) ? 0 : 1;
        }
        // v1's tolerance is the op's but for the rel-L2 bound, which it doubles.
        EXPECT_EQ(v1_tol.atol, op_tol.atol);
        EXPECT_EQ(v1_tol.rtol, op_tol.rtol);
        EXPECT_EQ(v1_tol.max_rel_l2, 2 * op_tol.max_rel_l2);

        // The mistakes, each judged by the looser of the two tolerances. One output element
        // can escape a mistake (a bias near 0, a ReLU of a negative value), so the checks
        // are on shapes with enough elements.
        if (M * N < 8) continue;
        EXPECT_FALSE(passes(kernel_like(p, in, false, false, true), v1_tol)) << "no bias, seed " << seed;
        if (N >= 2) EXPECT_FALSE(passes(kernel_like(p, in, false, true, true, 1), v1_tol)) << "bias shifted, seed " << seed;
        if (variant != "bias") EXPECT_FALSE(passes(kernel_like(p, in, false, true, false), v1_tol)) << "no act, seed " << seed;
        if (M >= 2 && K > 0) EXPECT_FALSE(passes(kernel_like(p, in, false, true, true, 0, 1), v1_tol)) << "rows shifted, seed " << seed;
      }
    }
  // Why v1 has a tolerance of its own: some of its correct outputs fail the op's.
  EXPECT_GT(unfused_past_op_bound, 0);
}
