// CPU tests of lesson 16's data-parallel step (dp_model.hpp, dp_step_ops.cu).
//
// The fp64 reference: its gradient is the loss's, by central differences of its own forward
// over every parameter of a two-block model. The tolerance: a step computed as the kernels
// compute it (every activation rounded to bf16 where a kernel stores one, each rank's weight
// gradients rounded to bf16 before the ranks' parts are added) passes, with room; and each
// mistake a data-parallel step can make fails: no all-reduce (rank 0's gradient alone), the
// mean over ranks where the op asks for the sum, two blocks' gradients swapped, the bf16
// copy not updated. The op's shape rules, and the layout's alignment, are checked too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../lessons/16-multi-gpu/dp_model.hpp"
#include "klab/dtype.hpp"
#include "klab/error.hpp"
#include "klab/harness.hpp"
#include "klab/op.hpp"
#include "test_util.hpp"

using namespace klab;
using lesson16::BlockLayout;
using lesson16::DpShape;

namespace {

using i64 = std::int64_t;

const Op& dp_op() {
  const Op* op = registry().find_op("dp_step");
  if (!op) throw Error("dp_step is not registered");
  return *op;
}

double bf16_round(double v) { return round_to(DType::bf16, v); }

// The outputs (grad, params, m, v, p16) of a step whose summed gradient is `grad`.
std::vector<HostTensor> outputs_for(const Problem& p, const Inputs& in, const std::vector<double>& grad) {
  const i64 P = lesson16::param_count(lesson16::dp_shape(p));
  std::vector<HostTensor> out;
  out.emplace_back(DType::f32, Dims{P});
  for (DType t : {DType::f32, DType::f32, DType::f32, DType::bf16}) out.emplace_back(t, Dims{P});
  for (i64 i = 0; i < P; ++i) {
    double w = in.tensors[2].get(i), m = in.tensors[3].get(i), v = in.tensors[4].get(i);
    // As the kernel does it: fp32 gradient, fp32 update.
    const double g = static_cast<float>(grad[i]);
    lesson16::adamw_ref(in.scalars, g, w, m, v);
    out[0].set(i, g), out[1].set(i, w), out[2].set(i, m), out[3].set(i, v), out[4].set(i, w);
  }
  return out;
}

// Rank r's gradient over its own rows, activations stored through `store`; with bf16 rounding,
// the weight matrices' gradients rounded to bf16 as the matmuls store them.
template <class Store>
std::vector<double> rank_gradient(const Problem& p, const Inputs& in, int r, Store store, bool round_weights) {
  const DpShape s = lesson16::dp_shape(p);
  const i64 P = lesson16::param_count(s), T = s.tokens, C = s.C;
  std::vector<double> w(P), x(T * C), gy(T * C), g(P, 0.0);
  for (i64 i = 0; i < P; ++i) w[i] = in.tensors[5].get(i);
  for (i64 i = 0; i < T * C; ++i) x[i] = in.tensors[0].get(r * T * C + i), gy[i] = in.tensors[1].get(r * T * C + i);
  lesson16::model_forward_backward(s, w, x.data(), gy.data(), T, g, store);
  if (round_weights) {
    const BlockLayout L = lesson16::block_layout(C);
    for (i64 i = 0; i < P; ++i)
      if (i % L.size >= L.w1) g[i] = bf16_round(g[i]);
  }
  return g;
}

TEST(DpStep, ReferenceGradientIsTheLossGradient) {
  const DpShape s{1, 2, 5, 8};
  const i64 P = lesson16::param_count(s), N = s.tokens, C = s.C;
  std::vector<double> w(P), x(N * C), gy(N * C);
  const BlockLayout L = lesson16::block_layout(C);
  for (i64 i = 0; i < P; ++i) w[i] = lesson16::param_init(L, C, s.blocks, i % L.size, uniform01(11, i));
  for (i64 i = 0; i < N * C; ++i) x[i] = 2 * uniform01(12, i) - 1, gy[i] = 2 * uniform01(13, i) - 1;
  std::vector<double> grad(P, 0.0);
  lesson16::model_forward_backward(s, w, x.data(), gy.data(), N, grad);
  auto loss = [&] {
    std::vector<double> unused(P, 0.0);
    return lesson16::model_forward_backward(s, w, x.data(), gy.data(), N, unused);
  };
  EXPECT_LT(klab_test::worst_fd_gap(w, grad, loss), 1e-7);
  // And a gradient with one block's W2 part left out is caught by the same check.
  std::vector<double> wrong = grad;
  for (i64 i = L.w2; i < L.size; ++i) wrong[i] = 0;
  EXPECT_GT(klab_test::worst_fd_gap(w, wrong, loss), 1e-3);
}

class DpStepTolerance : public ::testing::TestWithParam<Dims> {};

TEST_P(DpStepTolerance, KernelRoundingPassesAndMistakesFail) {
  const Op& op = dp_op();
  const Problem p{GetParam(), DType::bf16, ""};
  ASSERT_EQ(op.validate(p), "");
  const DpShape s = lesson16::dp_shape(p);
  const Inputs in = make_inputs(op, p, 5);
  const Reference ref = op.reference(p, in);
  const i64 P = lesson16::param_count(s);

  // As the kernels compute it.
  std::vector<double> sum(P, 0.0), rank0;
  for (int r = 0; r < s.ranks; ++r) {
    const std::vector<double> g = rank_gradient(p, in, r, bf16_round, true);
    if (r == 0) rank0 = g;
    for (i64 i = 0; i < P; ++i) sum[i] += g[i];
  }
  EXPECT_EQ(klab_test::check(op, p, in, ref, outputs_for(p, in, sum)), "") << "the kernels' roundings fail the tolerance";
  // With room: the relative L2 error of the gradient stays under half the bound.
  {
    double e2 = 0, r2 = 0;
    for (i64 i = 0; i < P; ++i) e2 += (sum[i] - ref[0][i]) * (sum[i] - ref[0][i]), r2 += ref[0][i] * ref[0][i];
    EXPECT_LT(std::sqrt(e2 / r2), 0.5 * 0x1p-7 * std::sqrt(4.0 * s.blocks + 2)) << "the emulated kernels use most of the bound";
  }

  if (s.ranks > 1) {
    EXPECT_NE(klab_test::check(op, p, in, ref, outputs_for(p, in, rank0)), "") << "no all-reduce passes";
    std::vector<double> mean = sum;
    for (double& g : mean) g /= s.ranks;
    EXPECT_NE(klab_test::check(op, p, in, ref, outputs_for(p, in, mean)), "") << "the mean over ranks passes";
  }
  if (s.blocks > 1) {
    const BlockLayout L = lesson16::block_layout(s.C);
    std::vector<double> swapped = sum;
    for (i64 i = 0; i < L.size; ++i) std::swap(swapped[i], swapped[L.size + i]);
    EXPECT_NE(klab_test::check(op, p, in, ref, outputs_for(p, in, swapped)), "") << "swapped blocks pass";
  }
  std::vector<HostTensor> stale = outputs_for(p, in, sum);
  for (i64 i = 0; i < P; ++i) stale[4].set(i, in.tensors[5].get(i));
  EXPECT_NE(klab_test::check(op, p, in, ref, stale), "") << "a bf16 copy left as it was passes";
}

INSTANTIATE_TEST_SUITE_P(Shapes, DpStepTolerance,
                         ::testing::Values(Dims{2, 2, 37, 40}, Dims{2, 1, 300, 128}, Dims{3, 2, 19, 16}, Dims{1, 2, 37, 24},
                                           Dims{1, 129, 2, 8}, Dims{1, 3, 5, 7}));

TEST(DpStep, ShapeRulesAndLayout) {
  const Op& op = dp_op();
  EXPECT_NE(op.validate({{2, 1, 8, 0}, DType::bf16, ""}), "");
  EXPECT_NE(op.validate({{0, 1, 8, 8}, DType::bf16, ""}), "");
  EXPECT_NE(op.validate({{1, 0, 8, 8}, DType::bf16, ""}), "");
  EXPECT_NE(op.validate({{1, 1, -1, 8}, DType::bf16, ""}), "");
  EXPECT_NE(op.validate({{1, 1, 8}, DType::bf16, ""}), "");
  EXPECT_EQ(op.validate({{2, 12, 8192, 768}, DType::bf16, ""}), "");
  // Every tensor of the layout starts on 16 bytes of the bf16 copy, in every block.
  for (i64 C : {8, 40, 768}) {
    const BlockLayout L = lesson16::block_layout(C);
    for (i64 off : {L.gamma, L.beta, L.b1, L.w1, L.w2, L.size}) EXPECT_EQ(off % 8, 0) << "C " << C << " offset " << off;
    EXPECT_EQ(L.size, 2 * C + 4 * C + 8 * C * C);
  }
  // GPT-2 small's MLP half: 56.7 million parameters in 12 blocks.
  EXPECT_EQ(lesson16::param_count({2, 12, 8192, 768}), 12 * (6 * 768 + 8 * 768 * 768));
}

}  // namespace
