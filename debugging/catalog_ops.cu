// debugging/catalog_ops.cu — the debugging track's catalog: the ops its cases compute (the
// lesson "debug" and its cases are registered in catalog_cases.cu). Each case is a further
// exercise of the lesson (Lesson::more_exercises): the learner's file holds the kernel with
// its bug, registered as the op's impl `exercise`; `klab check debug/<case>` grades the fix,
// with the case's compute-sanitizer tool where the bug hides from the checks.
//
//   case              op               tool       the bug
//   missing_barrier   debug_row_sum    racecheck  a shared-memory tree without a barrier between steps
//   missing_mask      debug_scale      memcheck   no `if (i < n)`: the last block writes past the array
//   unzeroed_workspace debug_split_sum initcheck  a sum accumulated into a workspace never zeroed
//   unstable_softmax  debug_softmax    (checks)   exp without the row's max: inf / inf = NaN
//   one_pass_variance debug_variance   (checks)   E[x²] − E[x]² in f32: the difference cancels
//   divergent_barrier debug_row_max    synccheck  the tree's barrier inside its `if`: some threads skip it
//   misaligned_vector_load debug_row_scale memcheck  float4 loads from rows that start off a 16-byte boundary
//   launch_config     debug_bias_add   (checks)   a thread a channel: more than 1024 threads a block
//   half_accumulation debug_half_sum   (checks)   f16 values summed in an f16 accumulator
//   grid_too_small    debug_square     (checks)   n / 256 blocks: the last n % 256 elements unwritten
//   shared_memory_limit debug_row_reverse (checks) past 48 KB of dynamic shared memory without the opt-in
//
// The ops are small on purpose: the bug is the lesson, and each shows at the test shapes
// (ragged sizes, one element, a single short row). No shape passes 2^31 elements (64-bit
// indexing is lesson 01's).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "catalog.cuh"
#include "klab/compare.hpp"
#include "klab/op.hpp"
#include "klab/rng.hpp"

namespace debugging {
namespace {

using klab::DType;
using klab::Problem;
using klab::TensorSpec;

constexpr double kU = 0x1p-24;   // f32's unit roundoff
const char* const kNoHuge = "a debugging case: its bug shows at small sizes (64-bit indexing past 2^31 is lesson 01's)";

std::string not_negative(const Problem& p) {
  for (auto d : p.shape)
    if (d < 0) return "a negative size";
  return "";
}

// validate for an op that reduces each row to one value: a row of no element has none
// ("a row's <what> needs at least one element"); no rows at all is fine.
std::function<std::string(const Problem&)> rows_not_empty(const char* what) {
  return [what](const Problem& p) {
    if (std::string why = not_negative(p); !why.empty()) return why;
    return p.shape[0] > 0 && p.shape[1] == 0 ? std::string("a row's ") + what + " needs at least one element" : std::string();
  };
}

// The tolerance of an op whose result rounds nothing (a max, a copy): 0.
klab::Tolerance exact(const Problem&, int) { return {}; }

// What every case's op has: the catalog's lesson, f32, no huge shape, no negative size.
klab::Op case_op(const char* name, const char* summary, std::vector<std::string> dims) {
  klab::Op op;
  op.lesson = "debug";
  op.name = name;
  op.summary = summary;
  op.dims = std::move(dims);
  op.dtypes = {DType::f32};
  op.no_huge_shape = kNoHuge;
  op.validate = not_negative;
  return op;
}

// The fp64 sum of each row of a (rows, cols) x: debug_row_sum's and debug_split_sum's reference.
klab::Reference row_sums(const Problem& p, const klab::Inputs& in) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  klab::RefArray y(static_cast<std::size_t>(rows));
  klab::parallel_for(rows, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      double s = 0;
      for (i64 c = 0; c < cols; ++c) s += in.tensors[0].get(r * cols + c);
      y[static_cast<std::size_t>(r)] = s;
    }
  }, cols);
  return klab::single_output(std::move(y));
}

// What the ops that reduce each row of a (rows, cols) x to one value y[r] share: x in, y
// out, the bench shape, and their traffic (a row read, one value written).
klab::Op row_reduce_op(const char* name, const char* summary) {
  klab::Op op = case_op(name, summary, {"rows", "cols"});
  op.bench_shapes = {{4096, 4096}};
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", DType::f32, p.shape}}; };
  op.outputs = [](const Problem& p) { return std::vector<TensorSpec>{{"y", DType::f32, {p.shape[0]}}}; };
  op.bytes = [](const Problem& p) { return 4.0 * p.shape[0] * (p.shape[1] + 1); };
  op.bound = klab::Bound::memory_read;
  return op;
}

// y[r] = the sum of row r of x: debug_row_sum and debug_split_sum, which differ in how a
// kernel orders the additions. Its error is at most terms(cols) unit roundoffs times the sum
// of the row's magnitudes, first order; |x| < 1, so that sum is at most cols. The bound takes
// twice that.
klab::Op row_sum_op(const char* name, const char* summary, double (*terms)(i64 cols)) {
  klab::Op op = row_reduce_op(name, summary);
  op.test_shapes = {{0, 7}, {1, 1}, {5, 0}, {3, 257}, {129, 4099}, {1000, 33}};
  op.reference = row_sums;
  op.tolerance = [terms](const Problem& p, int) {
    const i64 cols = p.shape[1];
    klab::Tolerance t;
    t.atol = 2 * terms(cols) * kU * static_cast<double>(std::max<i64>(cols, 1));
    return t;
  };
  return op;
}

// ---- debug_row_sum (missing_barrier): y[r] = sum over c of x[r, c] -------------------------------
//
// One block a row: each of the kThreads threads sums every kThreads-th element, then the
// block adds the partial sums in a shared-memory tree (log2 kThreads steps): terms = the
// elements a thread adds + the tree's steps.
klab::Op make_row_sum_op() {
  return row_sum_op("debug_row_sum", "y = the sum of each row of x, one block a row (case missing_barrier)",
                    [](i64 cols) { return static_cast<double>((cols + kThreads - 1) / kThreads) + std::log2(kThreads) + 1; });
}

// What the element-wise cases' ops share: y = f(x) over n elements, a thread an element,
// one rounding an element (the default f32 tolerance); sizes around the block's 256 (one
// element, one short of a block, a block, one past it) and ragged ones.
klab::Op elementwise_op(const char* name, const char* summary, double (*f)(double), double flops_per_element) {
  klab::Op op = case_op(name, summary, {"n"});
  op.test_shapes = {{0}, {1}, {3}, {255}, {256}, {257}, {4099}, {100003}};
  op.bench_shapes = {{1 << 26}};
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", DType::f32, p.shape}}; };
  op.outputs = [](const Problem& p) { return std::vector<TensorSpec>{{"y", DType::f32, p.shape}}; };
  op.reference = [f](const Problem& p, const klab::Inputs& in) {
    klab::RefArray y(static_cast<std::size_t>(p.shape[0]));
    klab::parallel_for(p.shape[0], [&](i64 a, i64 b) {
      for (i64 i = a; i < b; ++i) y[static_cast<std::size_t>(i)] = f(in.tensors[0].get(i));
    });
    return klab::single_output(std::move(y));
  };
  op.flops = [flops_per_element](const Problem& p) { return flops_per_element * p.shape[0]; };
  return op;
}

// ---- debug_scale (missing_mask): y = 2 x + 1 -----------------------------------------------------
//
// 2x is exact; + 1 rounds once.
klab::Op make_scale_op() {
  return elementwise_op("debug_scale", "y = 2 x + 1, one element a thread (case missing_mask)",
                        [](double x) { return 2 * x + 1; }, 2);
}

// ---- debug_square (grid_too_small): y = x² -------------------------------------------------------
//
// One rounding. The sizes that are not a multiple of 256 leave the bug's last elements
// unwritten; those below 256 give it no block at all.
klab::Op make_square_op() {
  return elementwise_op("debug_square", "y = x², one element a thread (case grid_too_small)",
                        [](double x) { return x * x; }, 1);
}

// ---- debug_split_sum (unzeroed_workspace): y[r] = the sum of row r of x, in column chunks ----------
//
// One launch per chunk of kColChunk columns, one thread a row, adding the chunk's elements in
// order to the row's running sum in an fp32 workspace; a last launch copies the sums to y:
// terms = the elements a chunk adds + the chunks.
klab::Op make_split_sum_op() {
  return row_sum_op("debug_split_sum",
                    "y = the sum of each row of x, 1024 columns a launch into a workspace (case unzeroed_workspace)",
                    [](i64 cols) {
                      return static_cast<double>(std::min<i64>(cols, kColChunk) + (cols + kColChunk - 1) / kColChunk + 1);
                    });
}

// ---- debug_softmax (unstable_softmax): y = softmax of each row of x ------------------------------
//
// x is drawn in [-100, 100): e^x passes f32's largest value (3.4e38, e^88.7) in most rows, so
// only the form that subtracts the row's max first can compute it. One warp a row: each lane
// sums every 32nd e^(x - m), then a 5-step shuffle tree. Relative error of an element: the
// sum's (terms a lane adds + 5 steps), exp's and the division's few units; absolute, the
// rounding of x - m, at most u |x - m| in the exponent, which moves p = e^-(m - x) / sum by at
// most u max(t e^-t) = u / e. Twice each.
klab::Op make_softmax_op() {
  klab::Op op = case_op("debug_softmax", "y = softmax of each row of x, x in [-100, 100) (case unstable_softmax)",
                        {"rows", "cols"});
  op.test_shapes = {{0, 7}, {1, 1}, {3, 257}, {129, 1001}, {1000, 33}};
  op.bench_shapes = {{4096, 4096}};
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", DType::f32, p.shape}}; };
  op.outputs = [](const Problem& p) { return std::vector<TensorSpec>{{"y", DType::f32, p.shape}}; };
  op.generate = [](const Problem&, std::uint64_t seed, klab::Inputs& in) {
    klab::fill_uniform(in.tensors[0], klab::derive_seed(seed, 0), -100.0, 100.0);
  };
  op.reference = [](const Problem& p, const klab::Inputs& in) {
    const i64 rows = p.shape[0], cols = p.shape[1];
    klab::RefArray y(static_cast<std::size_t>(rows * cols));
    klab::parallel_for(rows, [&](i64 r0, i64 r1) {
      for (i64 r = r0; r < r1; ++r) {
        double m = -std::numeric_limits<double>::infinity(), s = 0;
        for (i64 c = 0; c < cols; ++c) m = std::max(m, in.tensors[0].get(r * cols + c));
        for (i64 c = 0; c < cols; ++c) s += std::exp(in.tensors[0].get(r * cols + c) - m);
        for (i64 c = 0; c < cols; ++c)
          y[static_cast<std::size_t>(r * cols + c)] = std::exp(in.tensors[0].get(r * cols + c) - m) / s;
      }
    }, cols);
    return klab::single_output(std::move(y));
  };
  op.tolerance = [](const Problem& p, int) {
    const double lane_terms = static_cast<double>((p.shape[1] + 31) / 32);
    klab::Tolerance t;
    t.rtol = 2 * (lane_terms + 5 + 6) * kU;
    t.atol = 2 * kU / std::exp(1.0);
    return t;
  };
  return op;
}

// ---- debug_variance (one_pass_variance): y[r] = the variance of row r of x -------------------------
//
// x is drawn in [999, 1001): a mean of 1000 and a variance of 1/3, so E[x²] (10^6) and E[x]²
// agree in their first seven digits, f32's all. One warp a row, in two passes (the fix): the
// mean m', each lane adding k = ceil(cols / 32) elements, then a 5-step shuffle tree and the
// division: |m' − m| <= d = (k + 6) u max|x|, max|x| <= 1001. Then the squares of x − m'
// (exact: x and m' within a factor of 2), each rounded once, summed the same way with no
// cancellation: within (k + 7) u of Σ(x − m')² / n = var + (m − m')². So the error is at most
// (k + 7) u var + d² to first order; the bound takes twice each. The one-pass form's error is
// that of E[x²], about k u 10^6: units, not millionths.
klab::Op make_variance_op() {
  klab::Op op = row_reduce_op("debug_variance",
                              "y = the variance of each row of x, x in [999, 1001) (case one_pass_variance)");
  op.test_shapes = {{0, 7}, {1, 1}, {5, 2}, {3, 257}, {129, 1001}, {1000, 33}};
  op.validate = rows_not_empty("variance");
  op.generate = [](const Problem&, std::uint64_t seed, klab::Inputs& in) {
    klab::fill_uniform(in.tensors[0], klab::derive_seed(seed, 0), 999.0, 1001.0);
  };
  op.reference = [](const Problem& p, const klab::Inputs& in) {   // two passes in fp64
    const i64 rows = p.shape[0], cols = p.shape[1];
    klab::RefArray y(static_cast<std::size_t>(rows));
    klab::parallel_for(rows, [&](i64 r0, i64 r1) {
      for (i64 r = r0; r < r1; ++r) {
        double m = 0, q = 0;
        for (i64 c = 0; c < cols; ++c) m += in.tensors[0].get(r * cols + c);
        m /= static_cast<double>(cols);
        for (i64 c = 0; c < cols; ++c) {
          const double d = in.tensors[0].get(r * cols + c) - m;
          q += d * d;
        }
        y[static_cast<std::size_t>(r)] = q / static_cast<double>(cols);
      }
    }, cols);
    return klab::single_output(std::move(y));
  };
  op.tolerance = [](const Problem& p, int) {
    const double k = static_cast<double>((p.shape[1] + 31) / 32);
    const double d = (k + 6) * kU * 1001.0;
    klab::Tolerance t;
    t.rtol = 2 * (k + 7) * kU;
    t.atol = 2 * d * d;
    return t;
  };
  return op;
}

// ---- debug_row_max (divergent_barrier): y[r] = the largest element of row r ------------------------
//
// One block a row, the same tree as debug_row_sum's with fmaxf for +. A max rounds nothing:
// the only right answer is the row's largest element itself, and the tolerance is 0.
klab::Op make_row_max_op() {
  klab::Op op = row_reduce_op("debug_row_max", "y = the largest element of each row of x, one block a row "
                                               "(case divergent_barrier)");
  op.test_shapes = {{0, 7}, {1, 1}, {3, 257}, {129, 4099}, {1000, 33}};
  op.validate = rows_not_empty("max");
  op.reference = [](const Problem& p, const klab::Inputs& in) {
    const i64 rows = p.shape[0], cols = p.shape[1];
    klab::RefArray y(static_cast<std::size_t>(rows));
    klab::parallel_for(rows, [&](i64 r0, i64 r1) {
      for (i64 r = r0; r < r1; ++r) {
        double m = -std::numeric_limits<double>::infinity();
        for (i64 c = 0; c < cols; ++c) m = std::max(m, in.tensors[0].get(r * cols + c));
        y[static_cast<std::size_t>(r)] = m;
      }
    }, cols);
    return klab::single_output(std::move(y));
  };
  op.tolerance = exact;
  return op;
}

// ---- debug_row_scale (misaligned_vector_load): y[r, c] = s[r] · x[r, c] ------------------------------
//
// One block a row, four elements a thread at a time where a row allows 16-byte loads. One
// rounding an element: the default f32 tolerance. The test shapes have rows whose length is
// not a multiple of 4 (a row then starts 4, 8 or 12 bytes past a 16-byte boundary), and
// rows that are.
klab::Op make_row_scale_op() {
  klab::Op op = case_op("debug_row_scale", "y = x with each row scaled by its own s[r], 16-byte loads "
                                           "(case misaligned_vector_load)", {"rows", "cols"});
  op.test_shapes = {{0, 5}, {1, 1}, {1, 7}, {5, 4}, {3, 7}, {129, 1001}, {1000, 64}, {64, 4098}};
  op.bench_shapes = {{4096, 4096}};
  op.inputs = [](const Problem& p) {
    return std::vector<TensorSpec>{{"x", DType::f32, p.shape}, {"s", DType::f32, {p.shape[0]}}};
  };
  op.outputs = [](const Problem& p) { return std::vector<TensorSpec>{{"y", DType::f32, p.shape}}; };
  op.reference = [](const Problem& p, const klab::Inputs& in) {
    const i64 cols = p.shape[1];
    klab::RefArray y(static_cast<std::size_t>(p.shape[0] * cols));
    klab::parallel_for(p.shape[0] * cols, [&](i64 a, i64 b) {
      for (i64 i = a; i < b; ++i) y[static_cast<std::size_t>(i)] = in.tensors[1].get(i / cols) * in.tensors[0].get(i);
    });
    return klab::single_output(std::move(y));
  };
  op.bytes = [](const Problem& p) { return 4.0 * p.shape[0] * (2 * p.shape[1] + 1); };
  op.flops = [](const Problem& p) { return 1.0 * p.shape[0] * p.shape[1]; };
  return op;
}

// ---- debug_bias_add (launch_config): y[r, c] = x[r, c] + b[c] -------------------------------------
//
// A transformer's bias: rows = tokens, cols = channels (GPT-2 small: 768, its MLP 3072). One
// rounding an element: the default f32 tolerance. The test shapes have rows of more than
// 1024 elements, the most threads a block can have, and rows of 768.
klab::Op make_bias_add_op() {
  klab::Op op = case_op("debug_bias_add", "y = x + b, the bias b[c] added to every row (case launch_config)",
                        {"rows", "cols"});
  op.test_shapes = {{0, 3}, {1, 1}, {4, 768}, {1000, 33}, {5, 3072}, {3, 1025}};
  op.bench_shapes = {{8192, 768}, {8192, 3072}};
  op.inputs = [](const Problem& p) {
    return std::vector<TensorSpec>{{"x", DType::f32, p.shape}, {"b", DType::f32, {p.shape[1]}}};
  };
  op.outputs = [](const Problem& p) { return std::vector<TensorSpec>{{"y", DType::f32, p.shape}}; };
  op.reference = [](const Problem& p, const klab::Inputs& in) {
    const i64 cols = p.shape[1];
    klab::RefArray y(static_cast<std::size_t>(p.shape[0] * cols));
    klab::parallel_for(p.shape[0] * cols, [&](i64 a, i64 b) {
      for (i64 i = a; i < b; ++i) y[static_cast<std::size_t>(i)] = in.tensors[0].get(i) + in.tensors[1].get(i % cols);
    });
    return klab::single_output(std::move(y));
  };
  op.bytes = [](const Problem& p) { return 4.0 * (2 * p.shape[0] * p.shape[1] + p.shape[1]); };
  op.flops = [](const Problem& p) { return 1.0 * p.shape[0] * p.shape[1]; };
  return op;
}

// ---- debug_half_sum (half_accumulation): y[r] = the sum of row r of an f16 x ------------------------
//
// x is f16 drawn in [0, 1): the sums grow with the row (half the row's length). One warp a
// row, in f32 (the fix): each lane adds k = ceil(cols / 32) elements (f16 converts to f32
// exactly), then a 5-step shuffle tree: at most (k + 5) roundings of partial sums no larger
// than the row's sum, itself below cols. The bound takes twice that. An f16 accumulator
// rounds each addition to 11 significant bits (a unit of 2^-11 relative, 2^13 f32's): past a
// lane sum of 2048 adding a value below 1 changes nothing at all, and 32 lanes of 2048 make
// 65536, past f16's largest value (65504): inf, at the test shape of 300,007 columns. That
// shape has one row: two rows that long have sums closer together than the f32 bound (a
// spread of about 160 against 335), so a kernel writing one row's sum in the other's place
// would pass.
klab::Op make_half_sum_op() {
  klab::Op op = row_sum_op("debug_half_sum", "y = the sum of each row of an f16 x in [0, 1), one warp a row "
                                             "(case half_accumulation)",
                           [](i64 cols) { return static_cast<double>((cols + 31) / 32) + 5; });
  op.dtypes = {DType::f16};
  op.test_shapes = {{0, 7}, {1, 1}, {5, 0}, {3, 257}, {129, 4099}, {1000, 33}, {1, 300007}};
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", DType::f16, p.shape}}; };
  op.bytes = [](const Problem& p) { return 2.0 * p.shape[0] * p.shape[1] + 4.0 * p.shape[0]; };
  op.generate = [](const Problem&, std::uint64_t seed, klab::Inputs& in) {
    klab::fill_uniform(in.tensors[0], klab::derive_seed(seed, 0), 0.0, 1.0);
  };
  return op;
}

// ---- debug_row_reverse (shared_memory_limit): y[r, c] = x[r, cols − 1 − c] -----------------------
//
// One block a row, the row staged in dynamic shared memory (cols floats). A copy: the
// tolerance is 0. The test shapes pass 48 KB (12,288 floats), the most dynamic shared memory
// a kernel gets without asking; the rows stop at 160 KB (40,960 floats), under the A100's
// and the H100's largest block (163 and 227 KB).
constexpr i64 kMaxReverseCols = 40960;

klab::Op make_row_reverse_op() {
  klab::Op op = case_op("debug_row_reverse", "y = each row of x back to front, the row staged in shared memory "
                                             "(case shared_memory_limit)", {"rows", "cols"});
  op.test_shapes = {{0, 5}, {1, 1}, {3, 257}, {129, 1001}, {4, 12288}, {3, 12289}, {2, 20000}};
  op.bench_shapes = {{4096, 4096}};
  op.validate = [](const Problem& p) {
    if (std::string why = not_negative(p); !why.empty()) return why;
    return p.shape[1] > kMaxReverseCols ? std::string("a row must fit one block's shared memory: at most 40960 columns (160 KB)")
                                        : std::string();
  };
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", DType::f32, p.shape}}; };
  op.outputs = [](const Problem& p) { return std::vector<TensorSpec>{{"y", DType::f32, p.shape}}; };
  op.reference = [](const Problem& p, const klab::Inputs& in) {
    const i64 cols = p.shape[1];
    klab::RefArray y(static_cast<std::size_t>(p.shape[0] * cols));
    klab::parallel_for(p.shape[0] * cols, [&](i64 a, i64 b) {
      for (i64 i = a; i < b; ++i) y[static_cast<std::size_t>(i)] = in.tensors[0].get(i - i % cols + cols - 1 - i % cols);
    });
    return klab::single_output(std::move(y));
  };
  op.tolerance = exact;
  return op;
}

}  // namespace

// ---- registration (the lesson and its cases: catalog_cases.cu) ---------------------------------

KLAB_REGISTER(klab::register_op(make_row_sum_op()));
KLAB_REGISTER(klab::register_op(make_scale_op()));
KLAB_REGISTER(klab::register_op(make_split_sum_op()));
KLAB_REGISTER(klab::register_op(make_softmax_op()));
KLAB_REGISTER(klab::register_op(make_variance_op()));
KLAB_REGISTER(klab::register_op(make_row_max_op()));
KLAB_REGISTER(klab::register_op(make_row_scale_op()));
KLAB_REGISTER(klab::register_op(make_bias_add_op()));
KLAB_REGISTER(klab::register_op(make_half_sum_op()));
KLAB_REGISTER(klab::register_op(make_square_op()));
KLAB_REGISTER(klab::register_op(make_row_reverse_op()));

}  // namespace debugging
