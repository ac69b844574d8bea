// CPU tests of lesson 06's poly_act and complex_mul (pointwise_ops.cu): the fp64 references
// against hand-computed values; the outputs a correct kernel can produce — fused (fp32, with
// or without the fma, one rounding to the dtype) and eager (every intermediate rounded to the
// dtype) — pass the op's tolerance and v1's; and each mistake named in pointwise_ops.cu fails
// both: for poly_act a coefficient dropped, the coefficients in reverse order, a term one
// power off; for complex_mul a wrong sign, a conjugate, re and im swapped, b's parts swapped.
// Some correct eager bf16 outputs fail the op's own tolerance: why v1 has its own.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
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

// A value computed in fp32 and stored in dtype t, as a kernel's store rounds it.
float stored_as(DType t, float v) { return static_cast<float>(round_to(t, v)); }

const std::vector<Dims> kShapes = {{1, 1}, {1, 7}, {3, 129}, {33, 65}, {1000, 3}};

// ---- poly_act ----------------------------------------------------------------------------

enum class Poly { horner_fma, horner_mul_add, eager, drop_c0, drop_c1, drop_c2, drop_c3, reversed,
                  c1_x2, c2_x3, c3_x4, c3_x2 };

// y as a kernel computes it. `eager`: v1_per_term's eight rounded steps; the others: Horner
// in fp32 (with fmaf, or as separate products and sums) with the mistake named, stored once.
HostTensor poly_like(const Problem& p, const Inputs& in, Poly kind) {
  const DType t = p.dtype;
  const HostTensor& x = in.tensors[0];
  float c[4];
  for (int i = 0; i < 4; ++i) c[i] = static_cast<float>(in.scalars[static_cast<std::size_t>(i)]);
  HostTensor y(t, x.shape());
  for (i64 i = 0; i < x.numel(); ++i) {
    const float v = static_cast<float>(x.get(i));
    float r = 0;
    auto horner = [&](float a0, float a1, float a2, float a3) { return std::fmaf(std::fmaf(std::fmaf(a3, v, a2), v, a1), v, a0); };
    switch (kind) {
      case Poly::horner_fma: r = horner(c[0], c[1], c[2], c[3]); break;
      case Poly::horner_mul_add: {
        volatile float q = c[3] * v;   // volatile: no contraction into an fma
        q = q + c[2];
        q = q * v;
        q = q + c[1];
        q = q * v;
        r = q + c[0];
        break;
      }
      case Poly::eager: {
        const float t1 = stored_as(t, c[1] * v), s1 = stored_as(t, t1 + c[0]);
        const float x2 = stored_as(t, v * v), t2 = stored_as(t, c[2] * x2), s2 = stored_as(t, s1 + t2);
        const float x3 = stored_as(t, v * v * v), t3 = stored_as(t, c[3] * x3);
        r = s2 + t3;
        break;
      }
      case Poly::drop_c0: r = horner(0, c[1], c[2], c[3]); break;
      case Poly::drop_c1: r = horner(c[0], 0, c[2], c[3]); break;
      case Poly::drop_c2: r = horner(c[0], c[1], 0, c[3]); break;
      case Poly::drop_c3: r = horner(c[0], c[1], c[2], 0); break;
      case Poly::reversed: r = horner(c[3], c[2], c[1], c[0]); break;
      case Poly::c1_x2: r = c[0] + c[1] * v * v + c[2] * v * v + c[3] * v * v * v; break;
      case Poly::c2_x3: r = c[0] + c[1] * v + c[2] * v * v * v + c[3] * v * v * v; break;
      case Poly::c3_x4: r = c[0] + c[1] * v + c[2] * v * v + c[3] * v * v * v * v; break;
      case Poly::c3_x2: r = c[0] + c[1] * v + c[2] * v * v + c[3] * v * v; break;
    }
    y.set(i, stored_as(t, r));
  }
  return y;
}

// ---- complex_mul -------------------------------------------------------------------------

enum class Cplx { fused_fma, fused_mul_add, eager, plus_sign, conjugate, swapped_re_im, swapped_b_parts };

HostTensor complex_like(const Problem& p, const Inputs& in, Cplx kind) {
  const DType t = p.dtype;
  const HostTensor &a = in.tensors[0], &b = in.tensors[1];
  HostTensor z(t, a.shape());
  for (i64 i = 0; i < a.numel() / 2; ++i) {
    const float ar = static_cast<float>(a.get(2 * i)), ai = static_cast<float>(a.get(2 * i + 1));
    float br = static_cast<float>(b.get(2 * i)), bi = static_cast<float>(b.get(2 * i + 1));
    if (kind == Cplx::swapped_b_parts) std::swap(br, bi);
    if (kind == Cplx::conjugate) bi = -bi;
    float re = std::fmaf(ar, br, -(ai * bi)), im = std::fmaf(ar, bi, ai * br);
    if (kind == Cplx::fused_mul_add) {
      volatile float p1 = ar * br, p2 = ai * bi, p3 = ar * bi, p4 = ai * br;
      re = p1 - p2;
      im = p3 + p4;
    } else if (kind == Cplx::eager) {
      re = stored_as(t, ar * br) - stored_as(t, ai * bi);
      im = stored_as(t, ar * bi) + stored_as(t, ai * br);
    } else if (kind == Cplx::plus_sign) {
      re = std::fmaf(ar, br, ai * bi);
    }
    if (kind == Cplx::swapped_re_im) std::swap(re, im);
    z.set(2 * i, stored_as(t, re));
    z.set(2 * i + 1, stored_as(t, im));
  }
  return z;
}

struct Fixture {
  const Op* op = nullptr;
  const Impl* v1 = nullptr;
};

Fixture find(const std::string& op, const std::string& v1) {
  Fixture f{registry().find_op(op), registry().find_impl(op, v1)};
  return f;
}

}  // namespace

TEST(PolyAct, ReferenceMatchesHandComputedValues) {
  const Op* op = registry().find_op("poly_act");
  if (!op) GTEST_SKIP() << "lesson 06 is not in this build";
  const Problem p{{1, 4}, DType::f32, ""};
  Inputs in;
  in.tensors.emplace_back(DType::f32, Dims{1, 4});
  const double x[4] = {0.5, -1.0, 0.0, 0.25};
  for (i64 i = 0; i < 4; ++i) in.tensors[0].set(i, x[i]);
  in.scalars = {0.5, -0.75, 0.625, -0.875};   // c0, c1, c2, c3
  const Reference ref = op->reference(p, in);
  ASSERT_EQ(ref.size(), 1u);
  ASSERT_EQ(ref[0].size(), 4u);
  EXPECT_DOUBLE_EQ(ref[0][0], 0.5 - 0.375 + 0.15625 - 0.109375);          // 0.171875
  EXPECT_DOUBLE_EQ(ref[0][1], 0.5 + 0.75 + 0.625 + 0.875);                 // 2.75
  EXPECT_DOUBLE_EQ(ref[0][2], 0.5);
  EXPECT_DOUBLE_EQ(ref[0][3], 0.5 - 0.1875 + 0.0390625 - 0.013671875);    // 0.337890625
}

TEST(PolyAct, GeneratorDrawsFourFp32CoefficientsPerSeed) {
  const Op* op = registry().find_op("poly_act");
  if (!op) GTEST_SKIP() << "lesson 06 is not in this build";
  const Problem p{{3, 5}, DType::bf16, ""};
  const Inputs a = make_inputs(*op, p, 1), b = make_inputs(*op, p, 1), c = make_inputs(*op, p, 2);
  ASSERT_EQ(a.scalars.size(), 4u);
  EXPECT_EQ(a.scalars, b.scalars);
  EXPECT_NE(a.scalars, c.scalars);
  for (double s : a.scalars) {
    EXPECT_EQ(s, static_cast<double>(static_cast<float>(s))) << "the kernels take the coefficients as floats";
    EXPECT_LE(std::fabs(s), 1.0);
  }
  for (i64 i = 0; i < a.tensors[0].numel(); ++i) EXPECT_LE(std::fabs(a.tensors[0].get(i)), 1.0);
}

TEST(PolyAct, KernelLikeOutputsPassAndEachMistakeFails) {
  const Fixture f = find("poly_act", "v1_per_term");
  if (!f.op) GTEST_SKIP() << "lesson 06 is not in this build";
  ASSERT_NE(f.v1, nullptr);
  ASSERT_TRUE(static_cast<bool>(f.v1->tolerance));
  const std::vector<std::pair<Poly, const char*>> mistakes = {
      {Poly::drop_c0, "c0 dropped"}, {Poly::drop_c1, "c1 dropped"}, {Poly::drop_c2, "c2 dropped"},
      {Poly::drop_c3, "c3 dropped"}, {Poly::reversed, "coefficients reversed"}, {Poly::c1_x2, "c1 x^2"},
      {Poly::c2_x3, "c2 x^3"}, {Poly::c3_x4, "c3 x^4"}, {Poly::c3_x2, "c3 x^2"}};
  int eager_past_op_bound = 0;
  for (DType dt : {DType::f32, DType::bf16})
    for (const Dims& shape : kShapes) {
      const Problem p{shape, dt, ""};
      SCOPED_TRACE(p.label());
      for (std::uint64_t seed : {1u, 2u, 3u, 4u}) {
        const Inputs in = make_inputs(*f.op, p, seed);
        const Reference ref = f.op->reference(p, in);
        const Tolerance op_tol = f.op->tolerance(p, 0), v1_tol = f.v1->tolerance(p, 0);
        auto passes = [&](const HostTensor& y, const Tolerance& t) { return compare(y, ref[0], t).ok; };
        // The rel-L2 bound follows from the per-element one (pointwise_ops.cu).
        EXPECT_EQ(op_tol.max_rel_l2, op_tol.atol + op_tol.rtol);
        EXPECT_EQ(v1_tol.max_rel_l2, v1_tol.atol + v1_tol.rtol);

        EXPECT_TRUE(passes(poly_like(p, in, Poly::horner_fma), op_tol)) << "Horner with fma, seed " << seed;
        EXPECT_TRUE(passes(poly_like(p, in, Poly::horner_mul_add), op_tol)) << "Horner without fma, seed " << seed;
        EXPECT_TRUE(passes(poly_like(p, in, Poly::horner_fma), v1_tol)) << "Horner under v1's, seed " << seed;
        const HostTensor eager = poly_like(p, in, Poly::eager);
        EXPECT_TRUE(passes(eager, v1_tol)) << "eager, seed " << seed;
        eager_past_op_bound += passes(eager, op_tol) ? 0 : 1;

        // One element can escape a mistake (x near 0 for a dropped high term), so the
        // mistakes are judged on shapes with enough elements; each by both tolerances.
        if (shape[0] * shape[1] < 8) continue;
        for (const auto& [kind, what] : mistakes) {
          const HostTensor y = poly_like(p, in, kind);
          EXPECT_FALSE(passes(y, op_tol)) << what << " passed the op's tolerance, seed " << seed;
          EXPECT_FALSE(passes(y, v1_tol)) << what << " passed v1's tolerance, seed " << seed;
        }
      }
    }
  // Why v1 has a tolerance of its own: some eager bf16 outputs fail the op's.
  EXPECT_GT(eager_past_op_bound, 0);
}

TEST(ComplexMul, ReferenceMatchesHandComputedValues) {
  const Op* op = registry().find_op("complex_mul");
  if (!op) GTEST_SKIP() << "lesson 06 is not in this build";
  const Problem p{{1, 3}, DType::f32, ""};
  const auto specs = op->inputs(p);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].shape, (Dims{1, 3, 2}));   // interleaved (re, im) as a trailing 2
  EXPECT_EQ(op->outputs(p)[0].shape, (Dims{1, 3, 2}));
  Inputs in;
  in.tensors.emplace_back(DType::f32, Dims{1, 3, 2});
  in.tensors.emplace_back(DType::f32, Dims{1, 3, 2});
  const double a[6] = {0.5, 0.25, 1.0, 0.0, 0.0, 1.0};    // 0.5 + 0.25i, 1, i
  const double b[6] = {-0.75, 0.5, 0.0, 1.0, 0.0, 1.0};   // -0.75 + 0.5i, i, i
  for (i64 i = 0; i < 6; ++i) in.tensors[0].set(i, a[i]), in.tensors[1].set(i, b[i]);
  const Reference ref = op->reference(p, in);
  ASSERT_EQ(ref[0].size(), 6u);
  // (0.5 + 0.25i)(-0.75 + 0.5i) = -0.375 - 0.125 + (0.25 - 0.1875)i
  EXPECT_DOUBLE_EQ(ref[0][0], -0.5);
  EXPECT_DOUBLE_EQ(ref[0][1], 0.0625);
  EXPECT_DOUBLE_EQ(ref[0][2], 0.0);    // 1 · i = i
  EXPECT_DOUBLE_EQ(ref[0][3], 1.0);
  EXPECT_DOUBLE_EQ(ref[0][4], -1.0);   // i · i = -1
  EXPECT_DOUBLE_EQ(ref[0][5], 0.0);
}

TEST(ComplexMul, KernelLikeOutputsPassAndEachMistakeFails) {
  const Fixture f = find("complex_mul", "v1_real_ops");
  if (!f.op) GTEST_SKIP() << "lesson 06 is not in this build";
  ASSERT_NE(f.v1, nullptr);
  ASSERT_TRUE(static_cast<bool>(f.v1->tolerance));
  const std::vector<std::pair<Cplx, const char*>> mistakes = {
      {Cplx::plus_sign, "re = ar br + ai bi"}, {Cplx::conjugate, "a times conj(b)"},
      {Cplx::swapped_re_im, "re and im swapped"}, {Cplx::swapped_b_parts, "b's re and im swapped"}};
  int eager_past_op_bound = 0;
  for (DType dt : {DType::f32, DType::bf16})
    for (const Dims& shape : kShapes) {
      const Problem p{shape, dt, ""};
      SCOPED_TRACE(p.label());
      for (std::uint64_t seed : {1u, 2u, 3u, 4u}) {
        const Inputs in = make_inputs(*f.op, p, seed);
        const Reference ref = f.op->reference(p, in);
        const Tolerance op_tol = f.op->tolerance(p, 0), v1_tol = f.v1->tolerance(p, 0);
        auto passes = [&](const HostTensor& z, const Tolerance& t) { return compare(z, ref[0], t).ok; };
        EXPECT_EQ(op_tol.max_rel_l2, op_tol.atol + op_tol.rtol);
        EXPECT_EQ(v1_tol.max_rel_l2, v1_tol.atol + v1_tol.rtol);

        EXPECT_TRUE(passes(complex_like(p, in, Cplx::fused_fma), op_tol)) << "fused with fma, seed " << seed;
        EXPECT_TRUE(passes(complex_like(p, in, Cplx::fused_mul_add), op_tol)) << "fused without fma, seed " << seed;
        const HostTensor eager = complex_like(p, in, Cplx::eager);
        EXPECT_TRUE(passes(eager, v1_tol)) << "eager, seed " << seed;
        eager_past_op_bound += passes(eager, op_tol) ? 0 : 1;

        if (shape[0] * shape[1] < 4) continue;
        for (const auto& [kind, what] : mistakes) {
          const HostTensor z = complex_like(p, in, kind);
          EXPECT_FALSE(passes(z, op_tol)) << what << " passed the op's tolerance, seed " << seed;
          EXPECT_FALSE(passes(z, v1_tol)) << what << " passed v1's tolerance, seed " << seed;
        }
      }
    }
  EXPECT_GT(eager_past_op_bound, 0);
}

TEST(PolyComplex, ValidateRejectsBadShapesWithOneReason) {
  for (const char* name : {"poly_act", "complex_mul"}) {
    const Op* op = registry().find_op(name);
    if (!op) GTEST_SKIP() << "lesson 06 is not in this build";
    SCOPED_TRACE(name);
    EXPECT_EQ(op->validate({{-3, 4}, DType::f32, ""}), "rows and cols must be >= 0");
    EXPECT_EQ(op->validate({{4}, DType::f32, ""}), "expects rows x cols");
    EXPECT_EQ(op->validate({{i64{1} << 40, i64{1} << 40}, DType::f32, ""}), "rows x cols is too large");
    EXPECT_EQ(op->validate({{4, 5}, DType::bf16, ""}), "");
    // The test shape past 2^31 elements: f32 only.
    const Dims& huge = op->test_shapes.back();
    const i64 elems = largest_tensor(*op, {huge, DType::f32, ""});
    EXPECT_GT(elems, i64{1} << 31);
    EXPECT_EQ(op->validate({huge, DType::f32, ""}), "");
    EXPECT_EQ(op->validate({huge, DType::bf16, ""}), "past 2^31 elements: f32 only");
  }
}
