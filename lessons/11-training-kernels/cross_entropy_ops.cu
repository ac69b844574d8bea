// Lesson 11 — the cross-entropy ops and their CPU references.
//
//   cross_entropy_fwd   loss = mean over rows not ignored of lse[r] − logits[r, target[r]],
//                       lse[r] = log Σ_j exp(logits[r, j])          {rows, vocab}   f32, bf16
//                       outputs loss {1} and lse {rows} (fp32)       variants random, extreme
//   cross_entropy_bwd   dlogits = scale · (softmax(logits) − onehot(target)), 0 in ignored rows,
//                       from logits, targets and the forward's lse   {rows, vocab}   f32, bf16
//                       variants out (dlogits a new tensor), inplace (written over the
//                       logits), extreme (out, on the stability cases below)
//
// Conventions (training.cuh): targets are int32, kIgnoreIndex (-100) ignores a row, and the
// loss of a batch whose every row is ignored is 0 (PyTorch's mean gives 0 / 0 = NaN). The
// kernels live in cross_entropy.cu and cross_entropy_triton.py.
//
//   klab test 11 --op cross_entropy_fwd,cross_entropy_bwd
//   klab bench 11 --op cross_entropy_fwd --variant random
//
// Inputs: logits from [-8, 8) (variant random) or, variant extreme, the seeds' stability
// cases: logits from [-1e4, 1e4) and in every third row one logit at 3e4, the row's target
// in half of those rows; targets uniform over the vocabulary, one row in eight ignored.
//
// Tolerances (fp32 arithmetic, u = 2^-24):
//   lse   a row's Σ exp(x − m), each thread summing its share in order and a tree joining the
//         threads: relative error about (vocab / 128 + 64) u for kernels that spread a row over
//         at least 128 lanes, an absolute error of the log that size, plus ex2's 2^-22 and
//         lse's own rounding, |lse| u        -> atol (vocab / 128 + 64) u, rtol 1e-6
//   loss  each row's term (m − x_t) + log s keeps the error relative to itself when m − x_t
//         is formed first (lse − x_t would carry |lse| u = 2e-3 at lse = 3e4, on a term near
//         0), then the mean's sum        -> the same atol, rtol 1e-5
//   dlogits   exp(x − lse) with x − lse formed first (within 30 of 0 wherever the value is
//         above 1e-13): 2 · 30 · log2(e) u + 2^-22 < 6e-6 relative, then scale and the
//         store's rounding; p − 1 at the target cancels, so the absolute floor is 1e-5 · scale
//         (not the default's 1e-6 or 1e-3: these gradients are about scale / vocab, so a
//         tensor of zeros would pass an absolute 1e-6)     -> f32 rtol 1e-5, bf16 2^-8
// Shifted rows of lse differ by about vocab^-1/2 (random logits) or 1e4 (extreme): caught.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "klab/compare.hpp"
#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "training.cuh"

namespace lesson11 {
namespace {

using i64 = std::int64_t;

// The stability cases: the forward's variant extreme, and the backward's (out of place).
bool extreme(const klab::Problem& p) { return p.variant == "extreme"; }

// The logits and targets both ops start from.
void fill_logits_targets(const klab::Problem& p, std::uint64_t seed, klab::HostTensor& x, klab::HostTensor& t) {
  const i64 rows = p.shape[0], vocab = p.shape[1];
  const double span = extreme(p) ? 1e4 : 8.0;
  klab::fill_uniform(x, klab::derive_seed(seed, 0), -span, span);
  const std::uint64_t ts = klab::derive_seed(seed, 1);
  klab::parallel_for(rows, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const auto u = static_cast<std::uint64_t>(r);
      i64 target = std::min(vocab - 1, static_cast<i64>(klab::uniform01(ts, 3 * u) * static_cast<double>(vocab)));
      if (extreme(p) && r % 3 == 0) {
        const i64 huge = std::min(vocab - 1, static_cast<i64>(klab::uniform01(ts, 3 * u + 1) * static_cast<double>(vocab)));
        x.set(r * vocab + huge, 3e4);
        if (klab::uniform01(ts, 3 * u + 2) < 0.5) target = huge;
      }
      if (klab::uniform01(klab::derive_seed(seed, 2), u) < 0.125) target = kIgnoreIndex;
      t.set(r, static_cast<double>(target));
    }
  });
}

// lse of every row, fp64, from the logits as stored.
klab::RefArray row_lse(const klab::HostTensor& x, i64 rows, i64 vocab) {
  klab::RefArray lse(static_cast<std::size_t>(rows));
  klab::parallel_for(rows, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      double m = -std::numeric_limits<double>::infinity(), s = 0;
      for (i64 j = 0; j < vocab; ++j) m = std::max(m, x.get(r * vocab + j));
      for (i64 j = 0; j < vocab; ++j) s += std::exp(x.get(r * vocab + j) - m);
      lse[static_cast<std::size_t>(r)] = m + std::log(s);
    }
  });
  return lse;
}

i64 valid_rows(const klab::HostTensor& t) {
  i64 n = 0;
  for (i64 r = 0; r < t.numel(); ++r) n += t.get(r) != kIgnoreIndex;
  return n;
}

double lse_atol(const klab::Problem& p) { return (static_cast<double>(p.shape[1]) / 128.0 + 64.0) * std::ldexp(1.0, -24); }

std::string validate_ce(const klab::Problem& p, const char* huge_variant) {
  if (p.shape[0] < 0) return "rows must be >= 0";
  if (p.shape[1] < 1) return "vocab must be >= 1 (a row needs a class)";
  if (p.shape[1] > std::numeric_limits<std::int32_t>::max()) return "vocab must fit int32 targets";
  // The check past 2^31 runs once, in bf16 with random logits: the indexing is the same
  // template code for each dtype and variant.
  if (p.shape[0] * p.shape[1] > std::numeric_limits<std::int32_t>::max() &&
      (p.dtype != klab::DType::bf16 || p.variant != huge_variant))
    return std::string("past 2^31 elements: bf16, variant ") + huge_variant + " only";
  return "";
}

// Empty, one class, one row, odd and prime widths, the two vocabularies (50,257 is GPT-2's,
// 128,256 Llama 3's) with few rows, and 2^31 + a little elements (42,800 rows of GPT-2's).
const std::vector<klab::Dims> kTestShapes = {{0, 5},    {1, 1},   {1, 7},       {3, 129},     {8, 1000},     {127, 1023},
                                             {33, 4099}, {257, 3001}, {2, 50257}, {5, 128256}, {42800, 50257}};
// A GPT-2 batch (8 x 1024 tokens) over its vocabulary, and 4096 tokens over 128,256 classes.
const std::vector<klab::Dims> kBenchShapes = {{8192, 50257}, {4096, 128256}};

klab::Op make_fwd_op() {
  klab::Op op;
  op.lesson = "11";
  op.name = "cross_entropy_fwd";
  op.summary = "mean cross-entropy loss and each row's log-sum-exp, the logits read once";
  op.dims = {"rows", "vocab"};
  op.dtypes = {klab::DType::bf16, klab::DType::f32};
  op.variants = {"random", "extreme"};
  op.test_shapes = kTestShapes;
  op.bench_shapes = kBenchShapes;
  op.seeds = 2;
  op.baseline = "v1_two_pass";
  op.tour = {"v1_two_pass", "v2_online"};
  op.bound = klab::Bound::memory_read;
  op.inputs = [](const klab::Problem& p) {
    return std::vector<klab::TensorSpec>{{"logits", p.dtype, p.shape}, {"targets", klab::DType::i32, {p.shape[0]}}};
  };
  op.outputs = [](const klab::Problem& p) {
    return std::vector<klab::TensorSpec>{{"loss", klab::DType::f32, {1}}, {"lse", klab::DType::f32, {p.shape[0]}}};
  };
  op.generate = [](const klab::Problem& p, std::uint64_t seed, klab::Inputs& in) {
    fill_logits_targets(p, seed, in.tensors[0], in.tensors[1]);
  };
  op.reference = [](const klab::Problem& p, const klab::Inputs& in) {
    const auto& x = in.tensors[0];
    const auto& t = in.tensors[1];
    const i64 rows = p.shape[0], vocab = p.shape[1];
    klab::RefArray lse = row_lse(x, rows, vocab);
    double sum = 0;
    for (i64 r = 0; r < rows; ++r)
      if (const auto target = static_cast<i64>(t.get(r)); target != kIgnoreIndex)
        sum += lse[static_cast<std::size_t>(r)] - x.get(r * vocab + target);
    const i64 n = valid_rows(t);
    klab::RefArray loss(1);
    loss[0] = n > 0 ? sum / static_cast<double>(n) : 0.0;
    klab::Reference ref;
    ref.push_back(std::move(loss));
    ref.push_back(std::move(lse));
    return ref;
  };
  op.tolerance = [](const klab::Problem& p, int output) {
    return output == 0 ? klab::Tolerance{lse_atol(p), 1e-5, 1e-5} : klab::Tolerance{lse_atol(p), 1e-6, 1e-6};
  };
  op.validate = [](const klab::Problem& p) { return validate_ce(p, "random"); };
  return op;
}

klab::Op make_bwd_op() {
  klab::Op op;
  op.lesson = "11";
  op.name = "cross_entropy_bwd";
  op.summary = "dlogits = scale * (softmax - onehot) from the saved lse, never the softmax in memory";
  op.dims = {"rows", "vocab"};
  op.dtypes = {klab::DType::bf16, klab::DType::f32};
  op.variants = {"out", "inplace", "extreme"};
  op.test_shapes = kTestShapes;
  op.bench_shapes = kBenchShapes;
  op.seeds = 2;
  op.baseline = "v1_per_element";
  op.tour = {"v1_per_element", "v2_row_vec"};
  op.bound = klab::Bound::memory;
  op.inputs = [](const klab::Problem& p) {
    const bool inplace = p.variant == "inplace";
    return std::vector<klab::TensorSpec>{{"logits", p.dtype, p.shape, inplace ? klab::Init::inout : klab::Init::plain},
                                         {"targets", klab::DType::i32, {p.shape[0]}},
                                         {"lse", klab::DType::f32, {p.shape[0]}}};
  };
  op.outputs = [](const klab::Problem& p) {
    if (p.variant == "inplace") return std::vector<klab::TensorSpec>{};
    return std::vector<klab::TensorSpec>{{"dlogits", p.dtype, p.shape}};
  };
  // lse as the forward saves it: the fp64 value rounded to fp32. scale = 1 / (rows not
  // ignored), the mean's derivative for dloss = 1.
  op.generate = [](const klab::Problem& p, std::uint64_t seed, klab::Inputs& in) {
    fill_logits_targets(p, seed, in.tensors[0], in.tensors[1]);
    const klab::RefArray lse = row_lse(in.tensors[0], p.shape[0], p.shape[1]);
    for (i64 r = 0; r < p.shape[0]; ++r) in.tensors[2].set(r, lse[static_cast<std::size_t>(r)]);
    in.scalars = {1.0 / static_cast<double>(std::max<i64>(1, valid_rows(in.tensors[1])))};
  };
  op.reference = [](const klab::Problem& p, const klab::Inputs& in) {
    const auto& x = in.tensors[0];
    const auto& t = in.tensors[1];
    const auto& lse = in.tensors[2];
    const i64 rows = p.shape[0], vocab = p.shape[1];
    const double scale = in.scalars.at(0);
    klab::RefArray d(static_cast<std::size_t>(rows * vocab));
    klab::parallel_for(rows, [&](i64 r0, i64 r1) {
      for (i64 r = r0; r < r1; ++r) {
        const auto target = static_cast<i64>(t.get(r));
        if (target == kIgnoreIndex) continue;   // RefArray starts at zero
        const double l = lse.get(r);
        for (i64 j = 0; j < vocab; ++j)
          d[static_cast<std::size_t>(r * vocab + j)] = scale * (std::exp(x.get(r * vocab + j) - l) - (j == target ? 1.0 : 0.0));
      }
    });
    return klab::single_output(std::move(d));
  };
  op.tolerance = [](const klab::Problem& p, int) {
    const double rtol = p.dtype == klab::DType::bf16 ? 1.0 / 256 : 1e-5;
    // The generator's scale; 1 / rows is its smallest (every row counted).
    const double atol = 1e-5 / static_cast<double>(std::max<i64>(1, p.shape[0]));
    return klab::Tolerance{atol, rtol, rtol};
  };
  // The logits read and the gradient written (in place or not), lse and targets once.
  op.bytes = [](const klab::Problem& p) {
    const double n = static_cast<double>(p.shape[0]) * static_cast<double>(p.shape[1]);
    return 2.0 * n * static_cast<double>(klab::dtype_size(p.dtype)) + 8.0 * static_cast<double>(p.shape[0]);
  };
  op.validate = [](const klab::Problem& p) { return validate_ce(p, "out"); };
  return op;
}

}  // namespace

KLAB_REGISTER(klab::register_op(make_fwd_op()));
KLAB_REGISTER(klab::register_op(make_bwd_op()));

}  // namespace lesson11
