// Lesson 06 — two more element-wise fusions: their ops and their CPU references.
//
//   poly_act     y = c0 + c1·x + c2·x² + c3·x³      {rows, cols}  f32, bf16   c0..c3: the op's scalars
//   complex_mul  z = a · b, complex, interleaved     {rows, cols}  f32, bf16   tensors {rows, cols, 2}
//
// The kernels live beside this file (poly_act.cu: v1_per_term, v2_fused_horner, triton;
// complex_mul.cu: v1_real_ops, v2_fused, triton); the lesson and its other ops are
// registered in fusion_ops.cu.
//
// complex_mul's shape counts complex numbers; each tensor holds them as {rows, cols, 2}, the
// trailing 2 being (re, im) side by side: 2·rows·cols elements of the dtype.
//
// Tolerances. u = 2^-24 (f32's unit roundoff), u_T the output dtype's (2^-24 f32, 2^-8 bf16).
// The inputs are uniform in [-1, 1) rounded to the dtype, so |x| ≤ 1 (bf16 may round to ±1),
// and the coefficients are uniform in [-1, 1) rounded to fp32, so |c_i| ≤ 1; the kernels
// read the very values the reference uses (the coefficients as floats, exactly).
//
//   poly_act, fused (v2_fused_horner, triton). Horner's rule with an fma per step rounds 3
//   times, and its error is bounded by γ_3·Σ|c_i||x|^i (γ_k = k·u/(1 − k·u)): each rounding
//   is relative to a partial value, and the partial values are bounded by the sum of the
//   terms' magnitudes, not by |y|. The terms can cancel (y near 0 with every term near 1),
//   so a bound relative to |y| would fail correct kernels. Without the fma (a compiler that
//   does not contract) it is 6 roundings, γ_6 < 8u. Σ|c_i||x|^i ≤ Σ|c_i| ≤ 4, so
//     atol = 8u · 4 = 2^-19 (≈ 1.9e-6), then the store's rounding to T, rtol = u_T
//   (atol grows by the factor 1 + u_T for the store of a value already off by atol).
//   A coefficient dropped moves y by |c_i||x|^i, the coefficients in reverse order by
//   (c3 − c0)(1 − x³) + (c2 − c1)(x − x²), a term one power off by |c_i||x|^i·|1 − x|: on
//   any shape of more than a few elements these are far past 2^-19 + 2^-8·|y| somewhere
//   (tests/test_poly_complex.cpp checks each).
//   poly_act, v1_per_term: every intermediate is rounded to T (u_T each): t1 = c1·x,
//   s1 = t1 + c0, x2, t2 = c2·x2, s2 = s1 + t2, x3 (two fp32 products, then T), t3 = c3·x3
//   and y. Each rounding's error reaches y unchanged or scaled by a |c_i| ≤ 1, and is
//   relative to the value rounded: |t1| ≤ 1, |s1| ≤ 2, |x2|, |t2| ≤ 1, |s2| ≤ 3, |x3|,
//   |t3| ≤ 1. First order: u_T·(1 + 2 + 1 + 1 + 3 + 1 + 1) + 2u = 10·u_T + 2u, plus u_T·|y|
//   for y's own. So v1 gets atol = 12·u_T + 4u (room for the second-order terms), rtol =
//   u_T: 0.047 in bf16, 2^-20 in f32. Loose in bf16: an eager bf16 polynomial is that
//   inexact, and the fused version's point is also being exact.
//
//   complex_mul, fused (v2_fused, triton). re = fma(ar, br, −ai·bi) rounds the product ai·bi
//   and the fma: |error| ≤ u·|ai·bi| + u·|re| ≤ 2u·(|ar·br| + |ai·bi|) (to first order), and
//   likewise im; a version without the fma rounds three times, 3u·(|ar·br| + |ai·bi|). The
//   products' magnitudes, not |re|, set the scale: re cancels when ar·br ≈ ai·bi.
//   |ar·br| + |ai·bi| ≤ 2, so atol = 4u · 2 = 2^-21 (≈ 4.8e-7), rtol = u_T for the store.
//   A wrong sign moves re by 2|ai·bi|, re and im swapped or a conjugate by about as much.
//   complex_mul, v1_real_ops: the four products each rounded to T (u_T·(|ar·br| + |ai·bi|)
//   ≤ 2u_T for re), the sum rounded to T (u_T·|re|, the rtol); the stack copies. atol =
//   3·u_T (2u_T and the second-order terms), rtol = u_T.
//
//   Rel-L2: every tolerance here has ref_scale = 1 (the size of a term: |c_i·x^i| and
//   |ar·br| are at most 1) and max_rel_l2 = atol + rtol. Each element's error is at most
//   atol + rtol·|ref|, so ||out − ref|| ≤ atol·√n + rtol·||ref|| ≤ (atol + rtol)·max(||ref||, √n):
//   the rel-L2 bound follows from the per-element one and rejects nothing it passes.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "fusion.cuh"
#include "klab/op.hpp"
#include "klab/rng.hpp"

namespace lesson06 {
namespace {

using klab::DType;
using klab::Inputs;
using klab::Problem;
using klab::TensorSpec;

double unit_roundoff(DType t) { return t == DType::f32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8); }
const double kU32 = std::ldexp(1.0, -24);

klab::Tolerance with_atol_rtol(double atol, double rtol) {
  klab::Tolerance t;
  t.atol = atol;
  t.rtol = rtol;
  t.ref_scale = 1.0;
  t.max_rel_l2 = atol + rtol;
  return t;
}

// Both ops: rows x cols with a count of elements (times `per`: 2 reals per complex number)
// that fits int64, and past 2^31 elements in f32 only: the index arithmetic is the same
// template code for both dtypes, and each such check moves ~40 GB through host memory.
std::string validate_rows_cols(const Problem& p, std::int64_t per) {
  if (p.shape.size() != 2) return std::string("expects rows x cols");
  if (p.shape[0] < 0 || p.shape[1] < 0) return std::string("rows and cols must be >= 0");
  if (p.shape[0] > 0 && p.shape[1] > std::numeric_limits<std::int64_t>::max() / per / p.shape[0])
    return std::string("rows x cols is too large");
  if (per * p.shape[0] * p.shape[1] > std::numeric_limits<std::int32_t>::max() && p.dtype != DType::f32)
    return std::string("past 2^31 elements: f32 only");
  return std::string();
}

// Empty in each dimension, one element, odd and prime sizes, sizes that are no multiple of
// a 16-byte vector (4 f32, 8 bf16; 2 and 4 complex numbers), and one shape whose flat index
// passes 2^31 (f32 only): `huge` rows x cols.
std::vector<klab::Dims> edge_shapes(klab::Dims huge) {
  return {{0, 5}, {5, 0}, {1, 1}, {1, 7}, {3, 129}, {127, 1023}, {1000, 3}, {33, 4097}, {257, 768}, std::move(huge)};
}

klab::Op make_poly_act_op() {
  klab::Op op;
  op.lesson = "06";
  op.name = "poly_act";
  op.summary = "y = c0 + c1 x + c2 x^2 + c3 x^3: one kernel per operator against Horner in registers";
  op.dims = {"rows", "cols"};
  op.dtypes = {DType::f32, DType::bf16};
  op.test_shapes = edge_shapes({2, (std::int64_t{1} << 30) + 3});
  // add_mul's: GPT-2 small's activations (8192 x 768), its MLP's (x 4 = 3072, close to 4096), a wide one.
  op.bench_shapes = {{8192, 768}, {8192, 4096}, {4096, 16384}};
  op.baseline = "v1_per_term";
  op.tour = {"v1_per_term", "v2_fused_horner"};
  op.bound = klab::Bound::memory;
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", p.dtype, p.shape}}; };
  op.outputs = [](const Problem& p) { return std::vector<TensorSpec>{{"y", p.dtype, p.shape}}; };
  // x uniform in [-1, 1); the coefficients c0..c3 uniform in [-1, 1), rounded to fp32 (the
  // kernels take them as floats, and the reference must use the values they use).
  op.generate = [](const Problem&, std::uint64_t seed, Inputs& in) {
    klab::fill_uniform(in.tensors[0], klab::derive_seed(seed, 0), -1.0, 1.0);
    const std::uint64_t cs = klab::derive_seed(seed, 1);
    in.scalars.clear();
    for (std::uint64_t i = 0; i < 4; ++i)
      in.scalars.push_back(static_cast<double>(static_cast<float>(-1.0 + 2.0 * klab::uniform01(cs, i))));
  };
  op.reference = [](const Problem&, const Inputs& in) {
    const auto& x = in.tensors.at(0);
    const double c0 = in.scalars.at(0), c1 = in.scalars.at(1), c2 = in.scalars.at(2), c3 = in.scalars.at(3);
    klab::RefArray y(static_cast<std::size_t>(x.numel()));
    klab::parallel_for(x.numel(), [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const double v = x.get(i);
        y[static_cast<std::size_t>(i)] = c0 + c1 * v + c2 * v * v + c3 * v * v * v;
      }
    });
    return klab::single_output(std::move(y));
  };
  op.tolerance = [](const Problem& p, int) {
    const double uT = unit_roundoff(p.dtype), atol = 8 * kU32 * 4;
    return with_atol_rtol(atol * (1 + uT), uT);
  };
  // Three multiply-adds an element. The bytes are the default: x read once, y written once.
  op.flops = [](const Problem& p) { return 6.0 * static_cast<double>(p.shape[0]) * static_cast<double>(p.shape[1]); };
  op.validate = [](const Problem& p) { return validate_rows_cols(p, 1); };
  return op;
}

klab::Op make_complex_mul_op() {
  klab::Op op;
  op.lesson = "06";
  op.name = "complex_mul";
  op.summary = "z = a * b, complex, interleaved (re, im): eager real ops against one kernel";
  op.dims = {"rows", "cols"};
  op.dtypes = {DType::f32, DType::bf16};
  // The last shape: 2^30 + 6 complex numbers, 2^31 + 12 elements, so the element index
  // (2i + 1) passes 2^31 while the complex index i does not.
  op.test_shapes = edge_shapes({2, (std::int64_t{1} << 29) + 3});
  op.bench_shapes = {{8192, 768}, {8192, 4096}, {4096, 16384}};
  op.baseline = "v1_real_ops";
  op.tour = {"v1_real_ops", "v2_fused"};
  op.bound = klab::Bound::memory;
  op.inputs = [](const Problem& p) {
    const klab::Dims d = {p.shape[0], p.shape[1], 2};
    return std::vector<TensorSpec>{{"a", p.dtype, d}, {"b", p.dtype, d}};
  };
  op.outputs = [](const Problem& p) {
    return std::vector<TensorSpec>{{"z", p.dtype, {p.shape[0], p.shape[1], 2}}};
  };
  op.reference = [](const Problem&, const Inputs& in) {
    const auto &a = in.tensors.at(0), &b = in.tensors.at(1);
    klab::RefArray z(static_cast<std::size_t>(a.numel()));
    klab::parallel_for(a.numel() / 2, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const double ar = a.get(2 * i), ai = a.get(2 * i + 1), br = b.get(2 * i), bi = b.get(2 * i + 1);
        z[static_cast<std::size_t>(2 * i)] = ar * br - ai * bi;
        z[static_cast<std::size_t>(2 * i + 1)] = ar * bi + ai * br;
      }
    });
    return klab::single_output(std::move(z));
  };
  op.tolerance = [](const Problem& p, int) {
    const double uT = unit_roundoff(p.dtype), atol = 4 * kU32 * 2;
    return with_atol_rtol(atol * (1 + uT), uT);
  };
  // Four products and two sums a complex number. The bytes are the default: a and b read
  // once, z written once (6 elements a complex number).
  op.flops = [](const Problem& p) { return 6.0 * static_cast<double>(p.shape[0]) * static_cast<double>(p.shape[1]); };
  op.validate = [](const Problem& p) { return validate_rows_cols(p, 2); };
  return op;
}

}  // namespace

klab::Tolerance poly_act_v1_tolerance(const Problem& p, int) {
  const double uT = unit_roundoff(p.dtype);
  return with_atol_rtol(12 * uT + 4 * kU32, uT);
}

klab::Tolerance complex_mul_v1_tolerance(const Problem& p, int) {
  const double uT = unit_roundoff(p.dtype);
  return with_atol_rtol(3 * uT, uT);
}

KLAB_REGISTER(klab::register_op(make_poly_act_op()));
KLAB_REGISTER(klab::register_op(make_complex_mul_op()));

}  // namespace lesson06
