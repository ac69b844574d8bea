// lessons/04-softmax/softmax_op.cu — the op softmax_rows: its inputs, CPU reference,
// tolerances, property checks and shapes; and the lesson's registration. No kernel lives
// here: the versions are in softmax_multipass.cu (v1_three_pass, v2_fused), softmax_online.cu
// (v3_online, v4_long_rows, v5_cluster, v6_exp2), softmax_triton.cu (triton) and
// softmax_cudnn.cu (cudnn); the exercise is exercise.cu.
//
//   y[r, j] = exp(x[r, j] - m_r) / sum_k exp(x[r, k] - m_r),   m_r = max_k x[r, k]
//
// Subtracting the row max changes nothing mathematically (it cancels) and keeps every
// exponent <= 0, so exp never overflows: with x = 1e4, exp(x) is Inf in fp32 and a naive
// softmax returns Inf / Inf = NaN. The generator puts such rows into every test.
//
// Op softmax_rows, shape {rows, cols}, f32 and bf16 (computed in fp32), variants
//   ""        plain row softmax
//   "causal"  row r keeps columns j <= r + (cols - rows), the rest are 0 (softmax_common.cuh)
//
// Run:  klab test 04          klab bench 04 --op softmax_rows --dtype bf16
//       klab run 04 --impl v3_online,cudnn --shape 8192x8192
// Ops row_normalize and softmax_bwd: row_ops_op.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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

// Row kinds of the generated input (row index mod 4). Every test shape with 4 or more rows
// has all four; rows 1 and 3 overflow/underflow a softmax that forgets the max, row 2 is
// nearly one-hot (one element dominates), and large values test exp's range reduction.
//   0: U[-1, 1)            typical logits
//   1: U[-1, 1) + 1e4      exp(x) = Inf in fp32: naive Inf/Inf = NaN
//   2: U[-1, 1) * 1e4      magnitudes up to 1e4
//   3: U[-1, 1) - 1e4      exp(x) = 0 in fp32: naive 0/0 = NaN
double row_transform(i64 row, double u) {
  switch (row & 3) {
    case 1: return u + 1e4;
    case 2: return u * 1e4;
    case 3: return u - 1e4;
    default: return u;
  }
}

void generate_softmax(const Problem& p, std::uint64_t seed, klab::Inputs& in) {
  klab::HostTensor& x = lesson04::input_slot(in, 0, p.dtype, p.shape);
  const i64 rows = p.shape[0], cols = p.shape[1];
  const std::uint64_t s = klab::derive_seed(seed, 0);
  klab::parallel_for(rows, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r)
      for (i64 j = 0; j < cols; ++j) {
        const i64 i = r * cols + j;
        x.set(i, row_transform(r, 2.0 * klab::uniform01(s, static_cast<std::uint64_t>(i)) - 1.0));
      }
  }, cols);
}

// The mask, from the op's definition: row r of a (rows, cols) causal problem keeps column j
// when j <= r + (cols - rows); the plain variant keeps every column. Written apart from the
// kernels' diag_of / row_limit (softmax_common.cuh) on purpose: a reference that shared
// them would agree with any mistake in them. tests/test_references.cpp checks it on cases
// worked out by hand.
bool keeps(const Problem& p, i64 r, i64 j) {
  return p.variant != "causal" || j <= r + (p.shape[1] - p.shape[0]);
}

// How many elements keeps() keeps, in closed form (a loop over rows would cost seconds at
// 2^31 rows). Row r keeps max(r + a, 0) columns, a = cols - rows + 1 (never more than cols,
// as r < rows); summed over r that is 0 + 1 + ... + (rows + a - 1) less 0 + 1 + ... + (a - 1)
// when a > 0, two triangle numbers. In double: exact below 2^53, and a byte count needs no more.
double kept_elements(const Problem& p) {
  const double rows = static_cast<double>(p.shape[0]), cols = static_cast<double>(p.shape[1]);
  if (p.variant != "causal") return rows * cols;
  auto tri = [](double x) { return x > 0 ? x * (x - 1) / 2 : 0.0; };   // 0 + 1 + ... + (x - 1)
  const double a = cols - rows + 1;
  return tri(rows + a) - tri(a);
}

// fp64 softmax of row r of x (its kept columns; masked ones are 0), into out[0, cols).
template <class Get>
void softmax_row_ref(const Problem& p, i64 r, Get get, double* out) {
  const i64 cols = p.shape[1];
  double m = -std::numeric_limits<double>::infinity();
  for (i64 j = 0; j < cols; ++j)
    if (keeps(p, r, j)) m = std::max(m, get(j));
  double d = 0;
  for (i64 j = 0; j < cols; ++j)
    if (keeps(p, r, j)) d += std::exp(get(j) - m);
  for (i64 j = 0; j < cols; ++j) out[j] = keeps(p, r, j) ? std::exp(get(j) - m) / d : 0.0;
}

klab::Reference reference_softmax(const Problem& p, const klab::Inputs& in) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  const klab::HostTensor& x = in.tensors[0];
  klab::Reference ref = klab::single_output(klab::RefArray(static_cast<std::size_t>(rows * cols)));
  klab::parallel_for(rows, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r)
      softmax_row_ref(p, r, [&](i64 j) { return x.get(r * cols + j); }, ref[0].data() + r * cols);
  }, cols);
  return ref;
}

// Shapes past 2^28 elements (the one whose flat index passes 2^31): the reference of a
// sample of whole rows, the first and the last among them.
std::vector<klab::SampledReference> sample_softmax(const Problem& p, const klab::Inputs& in,
                                                   std::uint64_t seed) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  std::vector<i64> pick = {0, rows - 1};
  for (int k = 0; k < 30 && rows > 2; ++k)
    pick.push_back(static_cast<i64>(klab::uniform01(seed, 1000 + k) * static_cast<double>(rows)));
  std::sort(pick.begin(), pick.end());
  pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
  std::vector<klab::SampledReference> out(1);
  std::vector<double> row(static_cast<std::size_t>(cols));
  for (i64 r : pick) {
    if (r < 0 || r >= rows) continue;
    softmax_row_ref(p, r, [&](i64 j) { return in.tensors[0].get(r * cols + j); }, row.data());
    for (i64 j = 0; j < cols; ++j) {
      out[0].index.push_back(r * cols + j);
      out[0].value.push_back(row[static_cast<std::size_t>(j)]);
    }
  }
  return out;
}

// Outputs are exp(x - m) / d computed in fp32 (row_tolerance). atol is tiny: softmax outputs
// of long rows are ~1/cols, and any atol near that would let a wrong answer through.
klab::Tolerance tolerance_softmax(const Problem& p, int) { return lesson04::row_tolerance(p.dtype, 1e-8); }

// Property checks beside the compare: every output in [0, 1] (NaN fails too), and every
// row sums to 1, or to 0 when the causal mask removed every column of the row.
std::string properties_softmax(const Problem& p, const klab::Inputs&,
                               const std::vector<klab::HostTensor>& out) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  const double tol = p.dtype == DType::bf16 ? 8e-3 : 1e-4;
  const klab::HostTensor& y = out[0];
  std::vector<std::string> first(static_cast<std::size_t>(std::max<i64>(rows, 0)));
  std::vector<char> bad(first.size(), 0);
  klab::parallel_for(rows, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      double sum = 0;
      for (i64 j = 0; j < cols; ++j) {
        const double v = y.get(r * cols + j);
        if (!(v >= 0.0 && v <= 1.0)) {   // also catches NaN
          bad[r] = 1;
          first[r] = "row " + std::to_string(r) + " col " + std::to_string(j) + ": output " +
                     std::to_string(v) + " outside [0, 1]";
          break;
        }
        sum += v;
      }
      if (bad[r]) continue;
      const double want = cols > 0 && keeps(p, r, 0) ? 1.0 : 0.0;   // kept columns are a prefix
      if (std::fabs(sum - want) > tol) {
        bad[r] = 1;
        first[r] = "row " + std::to_string(r) + " sums to " + std::to_string(sum) + ", not " +
                   std::to_string(want);
      }
    }
  }, cols);
  for (std::size_t r = 0; r < bad.size(); ++r)
    if (bad[r]) return first[r];
  return "";
}

klab::Op make_softmax_op() {
  klab::Op op;
  op.lesson = "04";
  op.name = "softmax_rows";
  op.summary = "y = softmax(x) over each row of {rows, cols}; variant causal masks j > r + cols - rows";
  op.dims = {"rows", "cols"};
  op.dtypes = {DType::f32, DType::bf16};
  op.variants = {"", "causal"};
  op.test_shapes = {
      {0, 128}, {4, 0}, {1, 1}, {1, 7}, {7, 1},   // empty, single element, single column
      {7, 3},                 // rows > cols: causal rows 0..3 keep nothing and write zeros
      {3, 127}, {127, 1023}, {5, 4097},           // primes and odd sizes
      {9, 1000},              // multiple of 8 but of no block width
      {11, 1544}, {13, 3080}, // 16-byte vectors, 2 and 4 per thread in v3/v6 (f32; bf16 1 and 2)
      {17, 8191}, {33, 8192}, {6, 12289},
      {4, 32768},             // the most v3_online holds
      {3, 32769},             // one past it; odd, so no vector loads either
      {5, 65540},             // multiple of 4 (fp32 vectors) but not of 8 (bf16 vectors)
      {2, 262144}, {3, 262147},   // the long rows v5_cluster holds, and just past them
      {3, 200008},                // whole bf16 vectors, a cluster of 7 blocks with a ragged last one
      {2, 300007},
      {1025, 33}, {70001, 5},     // many short rows; more rows than a grid's y-dimension
      {1031, 8209},               // 8.5M elements: softmax_rows_v1_three_pass_normalize's
                                  // grid-stride loop (8448 blocks of 256) runs 4 times, bf16 too
      {16385, 131072},            // 2,147,614,720 elements: the flat index passes 2^31
  };
  op.bench_shapes = {{8192, 8192}, {4096, 32768}, {512, 262144}};
  op.baseline = "cudnn";
  op.tour = {"v1_three_pass", "v6_exp2"};
  op.bound = klab::Bound::memory;
  op.inputs = [](const Problem& p) { return std::vector<klab::TensorSpec>{{"x", p.dtype, p.shape}}; };
  op.outputs = [](const Problem& p) { return std::vector<klab::TensorSpec>{{"y", p.dtype, p.shape}}; };
  op.generate = generate_softmax;
  op.reference = reference_softmax;
  op.sample_only = [](const Problem& p) { return klab::numel_of(p.shape) > (i64{1} << 28); };
  op.reference_sample = sample_softmax;
  op.tolerance = tolerance_softmax;
  op.properties = properties_softmax;
  // max, subtract, exp, add, multiply: ~5 flops per kept element (not a compute-bound op);
  // a masked element is a 0 written, no arithmetic.
  op.flops = [](const Problem& p) { return 5.0 * kept_elements(p); };
  // The bytes the op needs: each kept element read once, every element written once. A
  // causal row's masked columns are never read (their output is 0 whatever x holds), so the
  // default count (all of x) would credit a causal kernel with reads it need not make.
  op.bytes = [](const Problem& p) {
    return (kept_elements(p) + static_cast<double>(klab::numel_of(p.shape))) * klab::dtype_size(p.dtype);
  };
  op.validate = [](const Problem& p) {
    std::string why = lesson04::validate_rows_cols(p);
    // The check past 2^31 elements costs ~17 GB of host and device memory per case: it runs
    // in f32 only (bf16 shares every index computation with it).
    if (why.empty() && klab::numel_of(p.shape) > std::numeric_limits<int>::max() && p.dtype != DType::f32)
      why = "past 2^31 elements: f32 only";
    return why;
  };
  return op;
}

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_lesson({
    .id = "04",
    .slug = "softmax",
    .title = "Softmax: fused, online, long rows, causal, backward",
    .exercise_op = "softmax_rows",
    .exercise_reference = "v2_fused",
    .exercise_hint = "lessons/04-softmax/exercise.cu: fill in block_reduce_max and block_reduce_sum",
}));

KLAB_REGISTER(klab::register_op(make_softmax_op()));

}  // namespace
