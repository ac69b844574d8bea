// CPU tests of lesson 11's ops (adamw_ops.cu, cross_entropy_ops.cu): their tolerances pass
// what a correct fp32 kernel computes and fail what a wrong one does.
//
// The correct kernels are simulated on the host as the GPU versions compute: AdamW through
// klab::adamw_update itself (the framework's host-and-device function) with the step's
// constants from klab::adamw_step and clipping's norm summed in fp32; the cross-entropy in
// fp32 with the differences formed first (x − m, x − lse), as cross_entropy_ops.cu's
// derivation assumes. Each mistake must fail the op's judge at every test problem where it
// changes the result:
//   adamw   no bias correction; the weight decay left out; the clipping coefficient not
//           applied; every step taken with the first step's t; the bf16 copy of the old p
//   forward ignore_index not honoured, the mean over every row instead of the rows not
//           ignored, the last valid row left out of the mean (at these shapes, up to 257
//           rows: the mean's tolerance is relative, and past some thousands of rows one
//           row's term moves the mean by less than it)
//   backward exp(x − lse) as 2^(x·log2 e − lse·log2 e) (the extreme logits), the one-hot
//           left out, the scale left out, an ignored row's gradient not zeroed
// And the AdamW reference itself against a step worked by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "klab/device/adamw.cuh"
#include "klab/harness.hpp"
#include "klab/op.hpp"
#include "klab/tensor.hpp"

using namespace klab;

namespace {

using i64 = std::int64_t;
constexpr i64 kMaxElems = i64{1} << 21;   // test problems up to this many logits (CPU time)
constexpr int kIgnore = -100;             // training.cuh's kIgnoreIndex

// The op, or the test skips: a build without lesson 11 (-DKLAB_LESSONS) has none of them.
#define TRAINING_OP(var, name)                                                \
  const Op* var##_ptr = registry().find_op(name);                            \
  if (!var##_ptr) GTEST_SKIP() << name << ": lesson 11 is not in this build"; \
  const Op& var = *var##_ptr

bool passes(const Op& op, const Problem& p, const Inputs& in, const Reference& ref, const std::vector<HostTensor>& out) {
  VerifyRecord rec;
  judge(op, p, in, ref, out, rec);
  return rec.status == Status::pass;
}

// A sum in fp32 the way the kernels add: many lanes, each a few terms in order, then trees.
// Pairwise summation has the same error bound, (log2 n + 1) u of the sum of magnitudes; one
// accumulator over n terms (n u) is what no kernel of the lesson does, and fails the
// tolerances, which are derived for the kernels' order.
float pairwise_sum(const std::vector<float>& v, std::size_t lo, std::size_t hi) {
  if (hi - lo <= 4) {
    float s = 0.f;
    for (std::size_t i = lo; i < hi; ++i) s += v[i];
    return s;
  }
  const std::size_t mid = lo + (hi - lo) / 2;
  return pairwise_sum(v, lo, mid) + pairwise_sum(v, mid, hi);
}
float pairwise_sum(const std::vector<float>& v) { return pairwise_sum(v, 0, v.size()); }

// ---- AdamW ------------------------------------------------------------------------------

struct AdamMistake {
  bool no_bias_correction = false, no_decay = false, no_clip = false, first_t_always = false, stale_copy = false;
};

// What a kernel computes: the outputs (bf16 copies), then p, m, v, as the harness reads them.
std::vector<HostTensor> adamw_fp32(const Problem& p, const Inputs& in, AdamMistake mk) {
  const i64 t = p.shape[1], steps = p.shape[2];
  const auto& s = in.scalars;
  std::vector<HostTensor> pm, mm, vm;
  for (i64 k = 0; k < t; ++k) {
    pm.push_back(in.tensors[static_cast<std::size_t>(k)]);
    mm.push_back(in.tensors[static_cast<std::size_t>(2 * t + k)]);
    vm.push_back(in.tensors[static_cast<std::size_t>(3 * t + k)]);
  }
  std::vector<HostTensor> copies;
  for (i64 st = 0; st < steps; ++st) {
    float coef = 1.f;
    if (p.variant == "clip" && !mk.no_clip) {
      std::vector<float> sq;
      for (i64 k = 0; k < t; ++k) {
        const auto& g = in.tensors[static_cast<std::size_t>(t + k)];
        const i64 n = g.numel() / steps;
        for (i64 i = 0; i < n; ++i) {
          const auto gi = static_cast<float>(g.get(st * n + i));
          sq.push_back(gi * gi);
        }
      }
      coef = std::min(1.f, static_cast<float>(s[6]) / (std::sqrt(pairwise_sum(sq)) + 1e-6f));
    }
    AdamWStep step = adamw_step(s[0], s[1], s[2], s[3], s[4], static_cast<i64>(s[5]) + (mk.first_t_always ? 0 : st));
    if (mk.no_bias_correction) step.step_size = static_cast<float>(s[0]), step.inv_sqrt_bc2 = 1.f;
    if (mk.no_decay) step.decay = 1.f;
    for (i64 k = 0; k < t; ++k) {
      const auto& g = in.tensors[static_cast<std::size_t>(t + k)];
      const i64 n = pm[static_cast<std::size_t>(k)].numel();
      if (st == steps - 1 && p.variant == "bf16_copy") {
        copies.emplace_back(DType::bf16, Dims{n});
        if (mk.stale_copy)
          for (i64 i = 0; i < n; ++i) copies.back().set(i, pm[static_cast<std::size_t>(k)].get(i));
      }
      for (i64 i = 0; i < n; ++i) {
        float pv = static_cast<float>(pm[static_cast<std::size_t>(k)].get(i));
        float mv = static_cast<float>(mm[static_cast<std::size_t>(k)].get(i));
        float vv = static_cast<float>(vm[static_cast<std::size_t>(k)].get(i));
        adamw_update(pv, static_cast<float>(g.get(st * n + i)) * coef, mv, vv, step);
        pm[static_cast<std::size_t>(k)].set(i, pv), mm[static_cast<std::size_t>(k)].set(i, mv);
        vm[static_cast<std::size_t>(k)].set(i, vv);
        if (st == steps - 1 && p.variant == "bf16_copy" && !mk.stale_copy) copies.back().set(i, pv);
      }
    }
  }
  std::vector<HostTensor> out = copies;
  for (auto* group : {&pm, &mm, &vm}) out.insert(out.end(), group->begin(), group->end());
  return out;
}

TEST(TrainingAdamW, ReferenceMatchesAStepWorkedByHand) {
  TRAINING_OP(op, "adamw");
  // One parameter, one step at t = 1: p = 1, g = 0.5, m = v = 0, lr 0.1, β = (0.9, 0.999),
  // ε = 0, no decay. m = 0.05, v = 0.00025; the bias corrections make them 0.5 and 0.25, so
  // the step is 0.1 · 0.5 / √0.25 = 0.1: p = 0.9.
  const Problem p{{1, 1, 1}, DType::f32, "plain"};
  Inputs in = make_inputs(op, p, 1);
  in.tensors[0].set(0, 1.0), in.tensors[1].set(0, 0.5), in.tensors[2].set(0, 0.0), in.tensors[3].set(0, 0.0);
  in.scalars = {0.1, 0.9, 0.999, 0.0, 0.0, 1.0, 1.0};
  const Reference ref = op.reference(p, in);
  ASSERT_EQ(ref.size(), 3u);
  EXPECT_NEAR(ref[0][0], 0.9, 1e-15);
  EXPECT_NEAR(ref[1][0], 0.05, 1e-15);
  EXPECT_NEAR(ref[2][0], 0.00025, 1e-15);
  // The framework's fp32 step, from the same state.
  float pv = 1.f, mv = 0.f, vv = 0.f;
  adamw_update(pv, 0.5f, mv, vv, adamw_step(0.1, 0.9, 0.999, 0.0, 0.0, 1));
  EXPECT_NEAR(pv, 0.9f, 1e-6f);
}

TEST(TrainingAdamW, ToleranceKeepsTheFp32StepAndRejectsMistakes) {
  TRAINING_OP(op, "adamw");
  int checked = 0;
  for (const std::string& variant : op.variants)
    for (const Dims& shape : op.test_shapes) {
      const Problem p{shape, DType::f32, variant};
      if (op.validate && !op.validate(p).empty()) continue;
      if (largest_tensor(op, p) > kMaxElems) continue;
      const Inputs in = make_inputs(op, p, 7);
      const Reference ref = op.reference(p, in);
      const auto right = adamw_fp32(p, in, {});
      EXPECT_TRUE(passes(op, p, in, ref, right)) << p.label() << ": the fp32 step fails its tolerance";
      if (shape[0] == 0) continue;
      const std::vector<std::pair<const char*, AdamMistake>> mistakes = {
          {"no bias correction", {.no_bias_correction = true}},
          {"no weight decay", {.no_decay = true}},
          {"clip coefficient not applied", {.no_clip = true}},
          {"the first step's t every step", {.first_t_always = true}},
          {"the bf16 copy of the old p", {.stale_copy = true}},
      };
      for (const auto& [name, mk] : mistakes) {
        const auto wrong = adamw_fp32(p, in, mk);
        bool same = true;
        for (std::size_t k = 0; k < wrong.size() && same; ++k)
          same = std::equal(static_cast<const std::byte*>(wrong[k].data()),
                            static_cast<const std::byte*>(wrong[k].data()) + wrong[k].bytes(),
                            static_cast<const std::byte*>(right[k].data()));
        if (same) continue;   // the mistake does not apply here (no clipping, one step, no copy)
        // A coefficient that rounds to 1 leaves the unclipped step within the tolerance; the
        // generator's max_norm is half the expected norm, so it does not, above one parameter.
        EXPECT_FALSE(passes(op, p, in, ref, wrong)) << p.label() << ": the tolerance accepts " << name;
        ++checked;
      }
    }
  EXPECT_GT(checked, 20);
}

TEST(TrainingAdamW, SizesFillTheParametersAndMatchThePythonRule) {
  TRAINING_OP(op, "adamw");
  // The bench shape's tensors, as adamw_sizes and tools/torch_figures.py's copy of it give
  // them (13 sizes summing to 2^26).
  const std::vector<i64> want = {8946476, 2236, 6709857, 2236619, 670, 26839430, 4473,
                                 4473238, 8946476, 2236, 6709857, 2236619, 677};
  const auto in = op.inputs({{i64{1} << 26, 13, 1}, DType::f32, "plain"});
  ASSERT_EQ(in.size(), 4u * 13u);
  i64 total = 0;
  for (std::size_t k = 0; k < 13; ++k) {
    EXPECT_EQ(in[k].shape, Dims{want[k]}) << "tensor " << k;
    total += in[k].shape[0];
  }
  EXPECT_EQ(total, i64{1} << 26);
}

// ---- cross-entropy ----------------------------------------------------------------------

struct CeMistake {
  bool no_ignore = false, mean_over_all = false, drop_last_valid = false;
  bool exp_by_products = false, no_onehot = false, no_scale = false, ignored_not_zeroed = false;
};

float fp32_exp_of_difference(float d) { return std::exp2(d * 1.4426950408889634f); }

std::vector<HostTensor> ce_fwd_fp32(const Problem& p, const Inputs& in, CeMistake mk) {
  const i64 rows = p.shape[0], vocab = p.shape[1];
  const auto& x = in.tensors[0];
  const auto& t = in.tensors[1];
  HostTensor loss(DType::f32, {1}), lse(DType::f32, {rows});
  std::vector<float> terms;
  float count = 0.f;
  i64 last_valid = -1;
  for (i64 r = 0; r < rows; ++r)
    if (static_cast<int>(t.get(r)) != kIgnore) last_valid = r;
  for (i64 r = 0; r < rows; ++r) {
    float m = -INFINITY, s = 0.f;
    for (i64 j = 0; j < vocab; ++j) m = std::max(m, static_cast<float>(x.get(r * vocab + j)));
    std::vector<float> e(static_cast<std::size_t>(vocab));
    for (i64 j = 0; j < vocab; ++j) e[static_cast<std::size_t>(j)] = fp32_exp_of_difference(static_cast<float>(x.get(r * vocab + j)) - m);
    s = pairwise_sum(e);
    const float log_s = std::log(s), l = m + log_s;
    lse.set(r, l);
    int target = static_cast<int>(t.get(r));
    if (mk.no_ignore && target == kIgnore) target = 0;
    if (target == kIgnore || (mk.drop_last_valid && r == last_valid)) continue;
    const float xt = static_cast<float>(x.get(r * vocab + target));
    terms.push_back((m - xt) + log_s);
    count += 1.f;
  }
  if (mk.mean_over_all) count = static_cast<float>(rows);
  loss.set(0, count > 0.f ? pairwise_sum(terms) / count : 0.f);
  return {loss, lse};
}

std::vector<HostTensor> ce_bwd_fp32(const Problem& p, const Inputs& in, CeMistake mk) {
  const i64 rows = p.shape[0], vocab = p.shape[1];
  const auto& x = in.tensors[0];
  const auto& t = in.tensors[1];
  const auto& lse = in.tensors[2];
  const float scale = mk.no_scale ? 1.f : static_cast<float>(in.scalars.at(0));
  HostTensor d(p.dtype, p.shape);
  for (i64 r = 0; r < rows; ++r) {
    const int target = static_cast<int>(t.get(r));
    const float l = static_cast<float>(lse.get(r));
    for (i64 j = 0; j < vocab; ++j) {
      const float xv = static_cast<float>(x.get(r * vocab + j));
      float e = mk.exp_by_products ? std::exp2(xv * 1.4426950408889634f - l * 1.4426950408889634f)
                                   : fp32_exp_of_difference(xv - l);
      float g = scale * (e - (j == target && !mk.no_onehot ? 1.f : 0.f));
      if (target == kIgnore && !mk.ignored_not_zeroed) g = 0.f;
      d.set(r * vocab + j, g);
    }
  }
  return {d};
}

template <class Run>
int check_ce(const Op& op, const std::vector<std::pair<const char*, CeMistake>>& mistakes, Run run) {
  const char* op_name = op.name.c_str();
  int checked = 0;
  for (DType dt : op.dtypes)
    for (const std::string& variant : op.variants) {
      if (variant == "inplace") continue;   // the out-of-place checks cover its arithmetic
      for (const Dims& shape : op.test_shapes) {
        const Problem p{shape, dt, variant};
        if (op.validate && !op.validate(p).empty()) continue;
        if (shape[0] * shape[1] > kMaxElems) continue;
        const Inputs in = make_inputs(op, p, 11);
        const Reference ref = op.reference(p, in);
        const auto right = run(p, in, CeMistake{});
        EXPECT_TRUE(passes(op, p, in, ref, right)) << op_name << " " << p.label() << ": the fp32 kernel fails";
        for (const auto& [name, mk] : mistakes) {
          const auto wrong = run(p, in, mk);
          bool same = true;
          for (std::size_t k = 0; k < wrong.size() && same; ++k)
            for (i64 i = 0; i < wrong[k].numel() && same; ++i) same = wrong[k].get(i) == right[k].get(i);
          if (same) continue;
          EXPECT_FALSE(passes(op, p, in, ref, wrong)) << op_name << " " << p.label() << ": the tolerance accepts " << name;
          ++checked;
        }
      }
    }
  return checked;
}

TEST(TrainingCrossEntropy, ForwardToleranceKeepsFp32AndRejectsMistakes) {
  TRAINING_OP(op, "cross_entropy_fwd");
  const int checked = check_ce(op,
                               {{"ignore_index not honoured", {.no_ignore = true}},
                                {"the mean over every row", {.mean_over_all = true}},
                                {"the last valid row left out", {.drop_last_valid = true}}},
                               ce_fwd_fp32);
  EXPECT_GT(checked, 20);
}

TEST(TrainingCrossEntropy, BackwardToleranceKeepsFp32AndRejectsMistakes) {
  TRAINING_OP(op, "cross_entropy_bwd");
  const int checked = check_ce(op,
                               {{"the one-hot left out", {.no_onehot = true}},
                                {"the scale left out", {.no_scale = true}},
                                {"an ignored row not zeroed", {.ignored_not_zeroed = true}}},
                               ce_bwd_fp32);
  EXPECT_GT(checked, 20);
}

// exp(x − lse) as 2^(x log2 e − lse log2 e): two roundings of numbers near 1.4e4 in the
// exponent. Fails the extreme logits in f32 (the bf16 output's rounding is coarser).
TEST(TrainingCrossEntropy, BackwardExpByProductsFailsTheExtremeLogits) {
  TRAINING_OP(op, "cross_entropy_bwd");
  bool caught = false;
  for (const Dims& shape : op.test_shapes) {
    const Problem p{shape, DType::f32, "extreme"};
    if (shape[0] == 0 || shape[0] * shape[1] > kMaxElems) continue;
    const Inputs in = make_inputs(op, p, 11);
    const Reference ref = op.reference(p, in);
    caught = caught || !passes(op, p, in, ref, ce_bwd_fp32(p, in, {.exp_by_products = true}));
  }
  EXPECT_TRUE(caught);
}

}  // namespace
