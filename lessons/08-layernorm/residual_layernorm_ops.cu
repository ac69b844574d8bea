// Lesson 08 — dropout_residual_layernorm and its backward: the ops and their CPU references. The sublayer
// boundary of a pre-LN transformer block (GPT-2's): the sublayer's output h is dropped out
// (lesson 07's stream), added to the residual stream x, and the sum is normalized for the
// next sublayer.
//
//   dropout_residual_layernorm   r = x + dropout(h)              {rows, cols}   f32, bf16
//                                y = layernorm(r) * gamma + beta   variants p0.1, p0, p1
//     inputs x, h {rows, cols}, gamma, beta {cols}; scalars seed, offset (lesson 07's)
//     outputs y, r (the new residual stream, which the next block adds to and the backward
//     reads), and mean and rstd (fp32, one a row) for the backward
//
// r is defined to the bit: element i of r is fma(h_i, scale, x_i) in fp32 when the dropout
// stream (seed, offset) keeps element i (lesson 07: word i % 4 of philox(seed, offset,
// i / 4) at least floor(p 2^32)), else x_i, then rounded to the dtype; scale = fp32(1 /
// (1 - p)). y is the layernorm of r as stored, so that the backward, which reads the stored
// r, differentiates the function the forward computed. The reference computes r that way
// (one fp32 fma, as the kernels' __fmaf_rn) and the rest in fp64 from it.
//
// The kernels live beside this file (residual_layernorm.cu: v1_residual_then_norm,
// v2_fused_in_registers, and the backward's v1_norm_backward_then_dropout;
// layernorm_backward.cu: the backward's v2_fused_residual_dropout). The backward's op is
// at the end of this file.
//
//   klab test 08 --op dropout_residual_layernorm
//   klab bench 08 --op dropout_residual_layernorm --variant p0.1
//
// Inputs: x as layernorm's (fill_layernorm_x: rows offset by o in [-2, 2), the first two
// elements o +- 0.9), h uniform in [-1, 1) with the first two elements of each row 0, so
// that r keeps x's spread there whatever the mask (var >= 1.62 / cols, rstd < 2.2 up to 7
// columns, about 1.7 at most on wider rows; without it, a row of three could have its
// spread cancelled by h); gamma from [0.5, 1.5), beta from [-0.5, 0.5).
//
// Tolerances: r is exact in f32 (the reference makes the same fma) and off by at most the
// dtype's rounding in bf16 (the default). mean, rstd and y: layernorm_ops.cu's derivation
// with |r| < 4.12 in place of |x| < 3 (|h| scale < 1.12 at p = 0.1): the mean's tree sum errs
// by (log2 cols + 1) u 4.12 < 4.4e-6 up to 2^17 columns -> atol 6e-6; y carries it times
// rstd gamma < 3.3 -> atol 2e-5; rstd rtol 3e-5; bf16 y: the default (its rounding
// dominates). A mask off by one element or quad moves r by |h| scale, and with it y; a
// residual left out moves r by |x|.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../07-dropout/dropout.cuh"
#include "klab/compare.hpp"
#include "klab/device/philox.cuh"
#include "klab/dtype.hpp"
#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "layernorm.cuh"

namespace lesson08 {
namespace {

using i64 = std::int64_t;

void generate(const klab::Problem& p, std::uint64_t seed, klab::Inputs& in) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  fill_layernorm_x(p, seed, in.tensors.at(0));
  auto& h = in.tensors.at(1);
  klab::fill_uniform(h, klab::derive_seed(seed, 4), -1.0, 1.0);
  for (i64 r = 0; r < rows; ++r)
    for (i64 j = 0; j < std::min<i64>(cols, 2); ++j) h.set(r * cols + j, 0.0);
  klab::fill_uniform(in.tensors.at(2), klab::derive_seed(seed, 1), 0.5, 1.5);
  klab::fill_uniform(in.tensors.at(3), klab::derive_seed(seed, 2), -0.5, 0.5);
  // seed and offset as lesson 07's op draws them (doubles: exact below 2^53).
  in.scalars = lesson07::draw_stream_scalars(seed, 5);
}

klab::Reference reference(const klab::Problem& p, const klab::Inputs& in) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  const auto &x = in.tensors.at(0), &h = in.tensors.at(1), &g = in.tensors.at(2), &b = in.tensors.at(3);
  const double drop = lesson07::drop_probability(p.variant);
  const std::uint64_t seed = static_cast<std::uint64_t>(in.scalars.at(0));
  const std::uint64_t offset = static_cast<std::uint64_t>(in.scalars.at(1));
  const std::uint64_t threshold = klab::dropout_threshold(drop);
  const float scale = drop < 1.0 ? static_cast<float>(1.0 / (1.0 - drop)) : 0.0f;
  klab::Reference ref(4);
  ref[0] = klab::RefArray(static_cast<std::size_t>(rows * cols));
  ref[1] = klab::RefArray(static_cast<std::size_t>(rows * cols));
  ref[2] = klab::RefArray(static_cast<std::size_t>(rows));
  ref[3] = klab::RefArray(static_cast<std::size_t>(rows));
  klab::parallel_for(
      rows,
      [&](i64 r0, i64 r1) {
        std::vector<double> row(static_cast<std::size_t>(cols));
        for (i64 r = r0; r < r1; ++r) {
          double s = 0;
          for (i64 j = 0; j < cols; ++j) {
            const i64 i = r * cols + j;
            const float xi = static_cast<float>(x.get(i)), hi = static_cast<float>(h.get(i));
            const bool keep = klab::dropout_keep(seed, offset, static_cast<std::uint64_t>(i), threshold);
            const double ri = klab::round_to(p.dtype, keep ? std::fma(hi, scale, xi) : xi);
            row[static_cast<std::size_t>(j)] = ri;
            ref[1][static_cast<std::size_t>(i)] = ri;
            s += ri;
          }
          const double mean = s / static_cast<double>(cols);
          double q = 0;
          for (i64 j = 0; j < cols; ++j) q += (row[static_cast<std::size_t>(j)] - mean) * (row[static_cast<std::size_t>(j)] - mean);
          const double rstd = 1.0 / std::sqrt(q / static_cast<double>(cols) + static_cast<double>(kEps));
          for (i64 j = 0; j < cols; ++j)
            ref[0][static_cast<std::size_t>(r * cols + j)] = (row[static_cast<std::size_t>(j)] - mean) * rstd * g.get(j) + b.get(j);
          ref[2][static_cast<std::size_t>(r)] = mean;
          ref[3][static_cast<std::size_t>(r)] = rstd;
        }
      },
      cols);
  return ref;
}

klab::Tolerance tolerance(const klab::Problem& p, int output) {
  klab::Tolerance t = klab::default_tolerance(output <= 1 ? p.dtype : klab::DType::f32);
  if (output == 0 && p.dtype == klab::DType::f32) t.atol = 2e-5;
  if (output == 2) t.atol = 6e-6;
  if (output == 3) t.rtol = 3e-5;
  return t;
}

klab::Op make_op() {
  klab::Op op;
  op.lesson = "08";
  op.name = "dropout_residual_layernorm";
  op.summary = "r = x + dropout(h), y = layernorm(r): a pre-LN transformer block's sublayer boundary";
  op.dims = {"rows", "cols"};
  op.dtypes = {klab::DType::f32, klab::DType::bf16};
  op.variants = {"p0.1", "p0", "p1"};
  op.test_shapes = layernorm_test_shapes();
  op.bench_shapes = {{8192, 768}, {8192, 4096}, {4096, 16384}};
  op.baseline = "v1_residual_then_norm";
  op.tour = {"v1_residual_then_norm", "v2_fused_in_registers"};
  op.bound = klab::Bound::memory;
  op.inputs = [](const klab::Problem& p) {
    return std::vector<klab::TensorSpec>{{"x", p.dtype, p.shape},
                                         {"h", p.dtype, p.shape},
                                         {"gamma", p.dtype, {p.shape[1]}},
                                         {"beta", p.dtype, {p.shape[1]}}};
  };
  op.outputs = [](const klab::Problem& p) {
    return std::vector<klab::TensorSpec>{{"y", p.dtype, p.shape},
                                         {"r", p.dtype, p.shape},
                                         {"mean", klab::DType::f32, {p.shape[0]}},
                                         {"rstd", klab::DType::f32, {p.shape[0]}}};
  };
  op.generate = generate;
  op.reference = reference;
  op.tolerance = tolerance;
  op.validate = [](const klab::Problem& p) {
    std::string why = validate_layernorm_shape(p);
    // Past 2^31: once, in f32 at p = 0.1 (the same index code serves every p); four such
    // tensors on the device and their fp64 references on the host.
    if (why.empty() && p.shape[0] * p.shape[1] > std::numeric_limits<std::int32_t>::max() && p.variant != "p0.1")
      why = "past 2^31 elements: f32 at p0.1 only";
    return why;
  };
  return op;
}

// ============================================================================================
// dropout_residual_layernorm_backward
// ============================================================================================
// dx, dh, dgamma, dbeta from dy (the gradient of y), dres (the gradient the residual stream r
// brings from the blocks after this one) and the forward's saved r, mean and rstd:
//   dr    = dres + layernorm_backward's dx of r (layernorm_backward_ops.cu's formulas)
//   dx    = dr                       (r = x + ...: the residual input's gradient is r's)
//   dh    = dr * keep / (1 - p)      (the mask drawn again from the forward's seed and offset)
//   dgamma, dbeta as layernorm_backward's
// Inputs: r, gamma, dy, mean and rstd drawn as layernorm_backward's (r as its x), dres
// uniform in [-1, 1); outputs dx, dgamma, dbeta (layernorm_backward's order), then dh.
// Tolerances: layernorm_backward's (layernorm_backward_ops.cu derives them) for dx, dgamma
// and dbeta; the add of dres is one more fp32 rounding of |dr| (inside f32's rtol). dh is dx
// times scale <= 1.12 with one more rounding: f32 atol 3e-5 * 1.12 + u -> 4e-5. One column:
// layernorm's dx is rstd (g - c1), 0 in exact arithmetic, off by up to 2.9e-5 in fp32
// (rstd = 316) -> atol 1e-4. bf16: the output rounding dominates, the dtype's default.
// v1_norm_backward_then_dropout rounds layernorm's dx to bf16 before it adds dres: residual_layernorm.cu
// states its own tolerance.

void generate_backward(const klab::Problem& p, std::uint64_t seed, klab::Inputs& in) {
  generate_layernorm_backward(p, seed, in);
  klab::fill_uniform(in.tensors.at(5), klab::derive_seed(seed, 7), -1.0, 1.0);
  in.scalars = lesson07::draw_stream_scalars(seed, 5);   // as the forward's
}

klab::Reference reference_backward(const klab::Problem& p, const klab::Inputs& in) {
  klab::Reference ref = layernorm_backward_reference(p, in);   // dx (layernorm's), dgamma, dbeta
  const auto& dres = in.tensors.at(5);
  const double drop = lesson07::drop_probability(p.variant);
  const auto seed = static_cast<std::uint64_t>(in.scalars.at(0)), offset = static_cast<std::uint64_t>(in.scalars.at(1));
  const std::uint64_t threshold = klab::dropout_threshold(drop);
  const double scale = drop < 1.0 ? static_cast<double>(static_cast<float>(1.0 / (1.0 - drop))) : 0.0;
  ref.emplace_back(ref[0].size());
  klab::parallel_for(static_cast<i64>(ref[0].size()), [&](i64 b, i64 e) {
    for (i64 i = b; i < e; ++i) {
      const auto k = static_cast<std::size_t>(i);
      ref[0][k] += dres.get(i);
      ref[3][k] = klab::dropout_keep(seed, offset, static_cast<std::uint64_t>(i), threshold) ? ref[0][k] * scale : 0.0;
    }
  });
  return ref;
}

klab::Tolerance tolerance_backward(const klab::Problem& p, int output) {
  if (output == 1 || output == 2) return column_sum_tolerance(p.shape[0], output == 1 ? 4.4 : 1.0);
  klab::Tolerance t = klab::default_tolerance(p.dtype);
  if (p.dtype == klab::DType::f32) t.atol = p.shape[1] == 1 ? 1e-4 : (output == 0 ? 3e-5 : 4e-5);
  return t;
}

klab::Op make_backward_op() {
  klab::Op op;
  op.lesson = "08";
  op.name = "dropout_residual_layernorm_backward";
  op.summary = "dx, dh, dgamma, dbeta of dropout_residual_layernorm from dy and the residual's gradient";
  op.dims = {"rows", "cols"};
  op.dtypes = {klab::DType::f32, klab::DType::bf16};
  op.variants = {"p0.1", "p0", "p1"};
  op.test_shapes = layernorm_backward_test_shapes();
  op.bench_shapes = {{8192, 768}, {8192, 4096}, {4096, 16384}};
  op.baseline = "v1_norm_backward_then_dropout";
  op.tour = {"v1_norm_backward_then_dropout", "v2_fused_residual_dropout"};
  op.bound = klab::Bound::memory;
  op.inputs = [](const klab::Problem& p) {
    return std::vector<klab::TensorSpec>{{"r", p.dtype, p.shape},
                                         {"gamma", p.dtype, {p.shape[1]}},
                                         {"dy", p.dtype, p.shape},
                                         {"mean", klab::DType::f32, {p.shape[0]}},
                                         {"rstd", klab::DType::f32, {p.shape[0]}},
                                         {"dres", p.dtype, p.shape}};
  };
  op.outputs = [](const klab::Problem& p) {
    return std::vector<klab::TensorSpec>{{"dx", p.dtype, p.shape},
                                         {"dgamma", klab::DType::f32, {p.shape[1]}},
                                         {"dbeta", klab::DType::f32, {p.shape[1]}},
                                         {"dh", p.dtype, p.shape}};
  };
  // bytes (the default): r, dy, dres read and dx, dh written once (with gamma, mean, rstd,
  // dgamma and dbeta): the per-block partial sums are a kernel's own cost, not counted.
  op.generate = generate_backward;
  op.reference = reference_backward;
  op.tolerance = tolerance_backward;
  op.validate = [](const klab::Problem& p) {
    std::string why = validate_layernorm_shape(p);
    if (why.empty() && p.shape[0] * p.shape[1] > std::numeric_limits<std::int32_t>::max() && p.variant != "p0.1")
      why = "past 2^31 elements: f32 at p0.1 only";
    return why;
  };
  return op;
}

}  // namespace

KLAB_REGISTER(klab::register_op(make_op()));
KLAB_REGISTER(klab::register_op(make_backward_op()));

}  // namespace lesson08
