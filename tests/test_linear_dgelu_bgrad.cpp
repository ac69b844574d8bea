// CPU tests of lesson 06's linear_dgelu_bgrad (linear_backward_ops.cu): dz = (dy · w) ⊙
// gelu'(z) and db = Σ_m dz.
//   - GELU's derivative: the fp64 reference matches central differences of the fp64 GELU;
//     the fp32 form the kernels use (klab::gelu_tanh_grad, here with std::exp in place of the
//     SFU's ex2) matches the reference; a derivative taken from a tanh with tanh.approx's
//     2^-11 relative error misses it by far more at x = -4 (why the kernels do not).
//   - The op: outputs a correct kernel can produce pass its tolerances (fused: dh in fp32;
//     unfused: dh rounded to bf16 first; db from dz before or after its rounding), and each
//     deliberate mistake fails: gelu in place of gelu', db summed from dh, db one column
//     off, a row of dz missing from db, dz one row off, dz or db left unwritten.
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
#include "klab/tensor.hpp"
#include "test_util.hpp"

using namespace klab;
using klab_test::check;

namespace {

using i64 = std::int64_t;

TEST(GeluGrad, ReferenceIsTheDerivativeAndTheFp32FormMatchesIt) {
  for (int i = 0; i <= 4000; ++i) {
    const double x = -10.0 + 20.0 * i / 4000.0, h = 1e-5;
    const double fd = (gelu_tanh_ref(x + h) - gelu_tanh_ref(x - h)) / (2 * h);
    EXPECT_NEAR(gelu_tanh_grad_ref(x), fd, 1e-8) << x;
    // fp32: a few units of 2^-24 of the terms (s up to 1, 2 x u' E s^2 up to about 0.13).
    EXPECT_NEAR(gelu_tanh_grad(static_cast<float>(x)), gelu_tanh_grad_ref(static_cast<float>(x)), 4e-7) << x;
  }
  // Far out: the limits, and no inf * 0 (-2u is capped at 80, so E s^2 stays finite).
  for (float x : {-1e4f, -100.f, -9.6f}) {
    EXPECT_TRUE(std::isfinite(gelu_tanh_grad(x))) << x;
    EXPECT_LT(std::fabs(gelu_tanh_grad(x)), 1e-20) << x;
  }
  for (float x : {9.6f, 100.f, 1e4f}) EXPECT_EQ(gelu_tanh_grad(x), 1.0f) << x;
  EXPECT_NEAR(gelu_tanh_grad_ref(0.0), 0.5, 1e-15);
  EXPECT_NEAR(gelu_tanh_grad_ref(1.0), 1.0829640838457826, 1e-12);
}

TEST(GeluGrad, ATanhWithTanhApproxErrorMissesBadly) {
  // 0.5 (1 + t) + 0.5 x (1 - t^2) u' with t off by tanh.approx's bound, 2^-11 relative.
  const double x = -4.0, c = kGeluTanhC, a = kGeluTanhA;
  const double t = std::tanh(c * (x + a * x * x * x)) * (1.0 + std::ldexp(1.0, -11));
  const double g = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x);
  EXPECT_GT(std::fabs(g - gelu_tanh_grad_ref(x)), 4e-3);         // against a true value of -3.6e-4
  EXPECT_LT(std::fabs(gelu_tanh_grad(static_cast<float>(x)) - gelu_tanh_grad_ref(x)), 1e-7);
}

enum class Way { fused, unfused_dh, db_from_rounded_dz, gelu_not_grad, db_from_dh, db_shifted, db_missing_row,
                 dz_row_shifted, dz_unwritten, db_unwritten };

// dz and db the way a kernel computes them: dh in fp32, then (unfused) a bf16 rounding, then
// dz = dh · gelu'(z) in fp32, stored in bf16; db the fp32 sum of dz before its rounding (or
// after it), over the rows in order.
std::vector<HostTensor> outputs(const Problem& p, const Inputs& in, Way way) {
  const i64 M = p.shape[0], N = p.shape[1], K = p.shape[2];
  HostTensor dz(DType::bf16, {M, N}), db(DType::f32, {N});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<float> sum(static_cast<std::size_t>(N), 0.f);
  for (i64 m = 0; m < M; ++m)
    for (i64 n = 0; n < N; ++n) {
      float dh = 0.f;
      for (i64 k = 0; k < K; ++k) dh += static_cast<float>(in.tensors[0].get(m * K + k) * in.tensors[1].get(k * N + n));
      if (way == Way::unfused_dh) dh = static_cast<float>(round_to(DType::bf16, dh));
      const float z = static_cast<float>(in.tensors[2].get(m * N + n));
      const float g = way == Way::gelu_not_grad ? gelu_tanh(z) : gelu_tanh_grad(z);
      const float v = dh * g;
      const i64 out_m = way == Way::dz_row_shifted ? (m + 1) % M : m;
      dz.set(out_m * N + n, way == Way::dz_unwritten ? nan : v);
      const float added = way == Way::db_from_dh ? dh : way == Way::db_from_rounded_dz ? static_cast<float>(round_to(DType::bf16, v)) : v;
      if (!(way == Way::db_missing_row && m == M - 1)) sum[static_cast<std::size_t>(n)] += added;
    }
  for (i64 n = 0; n < N; ++n) {
    const i64 src = way == Way::db_shifted ? (n + 1) % N : n;
    db.set(n, way == Way::db_unwritten ? nan : sum[static_cast<std::size_t>(src)]);
  }
  std::vector<HostTensor> out;
  out.push_back(std::move(dz));
  out.push_back(std::move(db));
  return out;
}

}  // namespace

TEST(LinearDgeluBgrad, KernelLikeOutputsPassAndEachMistakeFails) {
  const Op* op = registry().find_op("linear_dgelu_bgrad");
  if (!op) GTEST_SKIP() << "lesson 06 is not in this build";
  for (const Dims& shape : std::vector<Dims>{{1, 8, 8}, {9, 40, 8}, {33, 64, 136}, {127, 264, 72}, {5, 8, 0}, {0, 8, 8}}) {
    const Problem p{shape, DType::bf16, ""};
    SCOPED_TRACE(p.label());
    const i64 M = shape[0], K = shape[2];
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      const Inputs in = make_inputs(*op, p, seed);
      const Reference ref = op->reference(p, in);
      auto verdict = [&](Way w) { return check(*op, p, in, ref, outputs(p, in, w)); };
      EXPECT_EQ(verdict(Way::fused), "") << "seed " << seed;
      EXPECT_EQ(verdict(Way::unfused_dh), "") << "seed " << seed;
      EXPECT_EQ(verdict(Way::db_from_rounded_dz), "") << "seed " << seed;
      EXPECT_NE(verdict(Way::db_unwritten), "") << "seed " << seed;
      if (M == 0) continue;
      EXPECT_NE(verdict(Way::dz_unwritten), "") << "seed " << seed;
      if (K == 0) continue;                        // dz = 0 and db = 0: nothing else to get wrong
      EXPECT_NE(verdict(Way::gelu_not_grad), "") << "seed " << seed;
      EXPECT_NE(verdict(Way::db_from_dh), "") << "seed " << seed;
      EXPECT_NE(verdict(Way::db_shifted), "") << "seed " << seed;
      EXPECT_NE(verdict(Way::db_missing_row), "") << "seed " << seed;
      if (M >= 2) EXPECT_NE(verdict(Way::dz_row_shifted), "") << "seed " << seed;
    }
  }
}

TEST(LinearDgeluBgrad, ZCoversGelusCurvedMiddleAndFlatEnds) {
  const Op* op = registry().find_op("linear_dgelu_bgrad");
  if (!op) GTEST_SKIP() << "lesson 06 is not in this build";
  const Problem p{{64, 64, 8}, DType::bf16, ""};
  const Inputs in = make_inputs(*op, p, 5);
  double lo = 0, hi = 0;
  for (i64 i = 0; i < 64 * 64; ++i) lo = std::min(lo, in.tensors[2].get(i)), hi = std::max(hi, in.tensors[2].get(i));
  EXPECT_LT(lo, -3.5);
  EXPECT_GT(hi, 3.5);
}
