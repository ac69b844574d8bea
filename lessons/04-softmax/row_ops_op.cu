// lessons/04-softmax/row_ops_op.cu — the two other row ops of the lesson: their inputs, CPU
// references, tolerances, property checks and shapes. No kernel lives here: both ops'
// v1_block_row is in row_ops_block_row.cu, softmax_bwd's cudnn in softmax_cudnn.cu.
//
//   row_normalize  y[r, j] = x[r, j] / sum_k x[r, k]           (positive inputs)
//   softmax_bwd    dx[r, j] = y[r, j] * (dy[r, j] - sum_k y[r, k] dy[r, k])
//
// Both are "reduce the row, then rewrite it", like softmax, with a plain sum instead of a
// (max, sum) pair. softmax_bwd is the gradient of softmax: with y = softmax(x),
// dy_j/dx_i = y_j (delta_ij - y_i), so dx_i = sum_j dy_j y_j (delta_ij - y_i)
//                                         = y_i (dy_i - sum_j y_j dy_j).
// It needs only the forward's output y, not x: training frameworks keep y for this.
//
// Run:  klab test 04 --op row_normalize       klab bench 04 --op softmax_bwd
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "softmax_common.cuh"

using klab::DType;
using klab::Problem;

namespace {

using i64 = std::int64_t;

// The last shape has 2,147,614,720 elements: row offsets and flat indices pass 2^31 (its
// 131072 columns take the 16-byte path). Each block's loop over its row repeats from 512
// vectors on (512 threads).
const std::vector<klab::Dims> kTestShapes = {
    {0, 128}, {4, 0}, {1, 1}, {1, 7}, {7, 1}, {3, 127}, {127, 1023}, {5, 4097}, {9, 1000},
    {17, 8191}, {33, 8192}, {3, 32769}, {5, 65540}, {3, 262147}, {1025, 33}, {70001, 5},
    {16385, 131072},
};
const std::vector<klab::Dims> kBenchShapes = {{8192, 8192}, {4096, 32768}};

// --- row_normalize --------------------------------------------------------------------------

// Positive inputs in [0.01, 1): the sum cannot be 0 and x / sum is in (0, 1].
void generate_normalize(const Problem& p, std::uint64_t seed, klab::Inputs& in) {
  klab::fill_uniform(lesson04::input_slot(in, 0, p.dtype, p.shape), klab::derive_seed(seed, 0), 0.01, 1.0);
}

klab::Reference reference_normalize(const Problem& p, const klab::Inputs& in) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  const klab::HostTensor& x = in.tensors[0];
  klab::Reference ref = klab::single_output(klab::RefArray(static_cast<std::size_t>(rows * cols)));
  klab::parallel_for(rows, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      double s = 0;
      for (i64 j = 0; j < cols; ++j) s += x.get(r * cols + j);
      for (i64 j = 0; j < cols; ++j) ref[0][r * cols + j] = x.get(r * cols + j) / s;
    }
  }, cols);
  return ref;
}

// Same reasoning as softmax_rows: a sum and a division in fp32, one rounding to bf16.
klab::Tolerance tolerance_rows(const Problem& p, int) { return lesson04::row_tolerance(p.dtype, 1e-8); }

std::string properties_normalize(const Problem& p, const klab::Inputs&,
                                  const std::vector<klab::HostTensor>& out) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  const double tol = p.dtype == DType::bf16 ? 8e-3 : 1e-4;
  for (i64 r = 0; r < rows && cols > 0; ++r) {
    double s = 0;
    for (i64 j = 0; j < cols; ++j) {
      const double v = out[0].get(r * cols + j);
      if (!(v >= 0.0 && v <= 1.0))
        return "row " + std::to_string(r) + " col " + std::to_string(j) + ": " + std::to_string(v) +
               " outside [0, 1]";
      s += v;
    }
    if (std::fabs(s - 1.0) > tol) return "row " + std::to_string(r) + " sums to " + std::to_string(s);
  }
  return "";
}

klab::Op make_normalize_op() {
  klab::Op op;
  op.lesson = "04";
  op.name = "row_normalize";
  op.summary = "y = x / sum(x) over each row of {rows, cols} (positive x)";
  op.dims = {"rows", "cols"};
  op.dtypes = {DType::f32, DType::bf16};
  op.test_shapes = kTestShapes;
  op.bench_shapes = kBenchShapes;
  op.baseline = "";
  op.tour = {"v1_block_row"};
  op.bound = klab::Bound::memory;
  op.inputs = [](const Problem& p) { return std::vector<klab::TensorSpec>{{"x", p.dtype, p.shape}}; };
  op.outputs = [](const Problem& p) { return std::vector<klab::TensorSpec>{{"y", p.dtype, p.shape}}; };
  op.generate = generate_normalize;
  op.reference = reference_normalize;
  op.tolerance = tolerance_rows;
  op.properties = properties_normalize;
  op.flops = [](const Problem& p) { return 2.0 * static_cast<double>(klab::numel_of(p.shape)); };
  op.validate = lesson04::validate_rows_cols;
  return op;
}

// --- softmax_bwd ----------------------------------------------------------------------------

// y is a real softmax output (of U[-1, 1) logits, computed in fp64 and rounded), dy is
// U[-1, 1). The reference uses y as rounded, so it need not sum to exactly 1.
void generate_bwd(const Problem& p, std::uint64_t seed, klab::Inputs& in) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  lesson04::input_slot(in, 1, p.dtype, p.shape);   // both first: a resize moves tensors
  lesson04::input_slot(in, 0, p.dtype, p.shape);
  klab::HostTensor& y = in.tensors[0];
  klab::HostTensor& dy = in.tensors[1];
  const std::uint64_t sx = klab::derive_seed(seed, 0);
  klab::parallel_for(rows, [&](i64 r0, i64 r1) {
    std::vector<double> e(static_cast<std::size_t>(cols));
    for (i64 r = r0; r < r1; ++r) {
      double m = -INFINITY, s = 0;
      for (i64 j = 0; j < cols; ++j) {
        e[j] = 2.0 * klab::uniform01(sx, static_cast<std::uint64_t>(r * cols + j)) - 1.0;
        m = std::max(m, e[j]);
      }
      for (i64 j = 0; j < cols; ++j) s += (e[j] = std::exp(e[j] - m));
      for (i64 j = 0; j < cols; ++j) y.set(r * cols + j, e[j] / s);
    }
  }, cols);
  klab::fill_uniform(dy, klab::derive_seed(seed, 1), -1.0, 1.0);
}

klab::Reference reference_bwd(const Problem& p, const klab::Inputs& in) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  const klab::HostTensor &y = in.tensors[0], &dy = in.tensors[1];
  klab::Reference ref = klab::single_output(klab::RefArray(static_cast<std::size_t>(rows * cols)));
  klab::parallel_for(rows, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      double s = 0;
      for (i64 j = 0; j < cols; ++j) s += y.get(r * cols + j) * dy.get(r * cols + j);
      for (i64 j = 0; j < cols; ++j) {
        const i64 i = r * cols + j;
        ref[0][i] = y.get(i) * (dy.get(i) - s);
      }
    }
  }, cols);
  return ref;
}

// dx = y (dy - s) cancels where dy ~ s, so a relative bound alone is too strict there. The
// absolute error is about y * (ulp(dy) + error of s) <= y * 2e-7, and y <= e^2 / cols for
// softmax of logits in [-1, 1): atol = 1e-5 / cols is a few times that.
klab::Tolerance tolerance_bwd(const Problem& p, int) {
  return lesson04::row_tolerance(p.dtype, 1e-5 / static_cast<double>(std::max<i64>(p.shape.at(1), 1)));
}

klab::Op make_bwd_op() {
  klab::Op op;
  op.lesson = "04";
  op.name = "softmax_bwd";
  op.summary = "dx = y * (dy - sum(y * dy)) over each row: the gradient of softmax";
  op.dims = {"rows", "cols"};
  op.dtypes = {DType::f32, DType::bf16};
  op.test_shapes = kTestShapes;
  op.bench_shapes = kBenchShapes;
  op.baseline = "cudnn";
  op.tour = {"v1_block_row"};
  op.bound = klab::Bound::memory;
  op.inputs = [](const Problem& p) {
    return std::vector<klab::TensorSpec>{{"y", p.dtype, p.shape}, {"dy", p.dtype, p.shape}};
  };
  op.outputs = [](const Problem& p) { return std::vector<klab::TensorSpec>{{"dx", p.dtype, p.shape}}; };
  op.generate = generate_bwd;
  op.reference = reference_bwd;
  op.tolerance = tolerance_bwd;
  op.flops = [](const Problem& p) { return 4.0 * static_cast<double>(klab::numel_of(p.shape)); };
  op.validate = lesson04::validate_rows_cols;
  return op;
}

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_op(make_normalize_op()));
KLAB_REGISTER(klab::register_op(make_bwd_op()));

}  // namespace
