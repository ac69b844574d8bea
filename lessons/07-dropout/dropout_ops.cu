// Lesson 07 — dropout: the lesson, its op and its CPU reference.
//
//   dropout   y = x · keep / (1 − p)   {rows, cols}   f32, bf16   variants p0, p0.1, p0.5, p0.9, p1
//
// The kernels live beside this file (dropout.cu: v1_stored_mask, v2_philox_fused, triton;
// dropout_curand.cu: curand_mask, judged by the op's properties); the learner's is exercise.cu. The mask is the dropout stream of klab/device/philox.cuh, the
// same functions on the host and the device: the reference calls them, so the mask is
// checked bit for bit (a kept element the kernel dropped, or the reverse, is off by
// |x| / (1 − p), far outside any tolerance), while the generator itself is checked
// against its published known answers in the unit tests (tests/test_philox.cpp).
//
//   klab test 07
//   klab bench 07 --variant p0.1
//   klab check 07                        grade the exercise (the keep mask, f32)
//
// Tolerances: the default of each dtype. The kept value x · scale is one fp32 multiply by
// scale = fp32(1 / (1 − p)): two roundings, relative error under 2^-23, inside f32's 1e-5
// relative; bf16 adds the output rounding, up to 2^-8 relative, inside its 1.6e-2.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "dropout.cuh"
#include "klab/compare.hpp"
#include "klab/op.hpp"
#include "klab/rng.hpp"

namespace lesson07 {
namespace {

klab::Op make_dropout_op() {
  klab::Op op;
  op.lesson = "07";
  op.name = "dropout";
  op.summary = "y = x * keep / (1 - p), keep from a counter-based Philox stream (seed, offset)";
  op.dims = {"rows", "cols"};
  op.dtypes = {klab::DType::f32, klab::DType::bf16};
  op.variants = {"p0.1", "p0", "p0.5", "p0.9", "p1"};
  // Empty in each dimension, one element, odd and prime sizes, sizes past 128 that are no
  // multiple of 32, rows that are not a multiple of the 4-element quads of the stream (a
  // quad then spans two rows), and a tensor whose flat index passes 2^31 (f32, p = 0.1).
  op.test_shapes = {{0, 5},    {5, 0},    {1, 1},    {1, 7},     {3, 129},  {127, 1023},
                    {1000, 3}, {33, 4097}, {257, 768}, {2, (std::int64_t{1} << 30) + 3}};
  // GPT-2 small's activations (8192 tokens x 768 channels), its MLP's (x 4 = 3072 is close
  // to 4096) and a wide one.
  op.bench_shapes = {{8192, 768}, {8192, 4096}, {4096, 16384}};
  op.baseline = "v1_stored_mask";
  op.tour = {"v1_stored_mask", "v2_philox_fused"};
  op.bound = klab::Bound::memory;
  op.inputs = [](const klab::Problem& p) { return std::vector<klab::TensorSpec>{{"x", p.dtype, p.shape}}; };
  op.outputs = [](const klab::Problem& p) { return std::vector<klab::TensorSpec>{{"y", p.dtype, p.shape}}; };
  op.generate = [](const klab::Problem&, std::uint64_t seed, klab::Inputs& in) {
    klab::fill_uniform(in.tensors[0], klab::derive_seed(seed, 0), -1.0, 1.0);
    // seed and offset travel as doubles: below 2^53 they are exact.
    in.scalars = draw_stream_scalars(seed, 1);
  };
  op.reference = [](const klab::Problem& p, const klab::Inputs& in) {
    const auto& x = in.tensors.at(0);
    const double drop = drop_probability(p.variant);
    const std::uint64_t seed = static_cast<std::uint64_t>(in.scalars.at(0));
    const std::uint64_t offset = static_cast<std::uint64_t>(in.scalars.at(1));
    const std::uint64_t threshold = klab::dropout_threshold(drop);
    klab::RefArray y(static_cast<std::size_t>(x.numel()));
    klab::parallel_for(x.numel(), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const bool keep = klab::dropout_keep(seed, offset, static_cast<std::uint64_t>(i), threshold);
        y[static_cast<std::size_t>(i)] = keep ? x.get(i) / (1.0 - drop) : 0.0;
      }
    });
    return klab::single_output(std::move(y));
  };
  // What any dropout output satisfies, whichever random stream drew it: each element is 0
  // or x · scale (within the dtype's tolerance), and the kept fraction of the non-zero x is
  // exact at p = 0 and p = 1 and otherwise inside a 6-sigma binomial bound (checked from
  // 1000 such elements on). For the impls that draw this lesson's stream it holds beside the
  // element-by-element compare; `curand_mask`, which draws cuRAND's own stream, is judged by
  // it alone (Impl::judged_by_properties). A NaN, an
  // unwritten (poisoned) element, an element shifted from its neighbour or a wrong
  // threshold fails it.
  op.properties = [](const klab::Problem& p, const klab::Inputs& in, const std::vector<klab::HostTensor>& out) {
    const auto& x = in.tensors.at(0);
    const auto& y = out.at(0);
    const double drop = drop_probability(p.variant);
    const double scale = drop < 1.0 ? static_cast<double>(static_cast<float>(1.0 / (1.0 - drop))) : 0.0;
    const klab::Tolerance tol = klab::default_tolerance(p.dtype);
    std::atomic<std::int64_t> kept{0}, counted{0}, first_bad{std::numeric_limits<std::int64_t>::max()};
    klab::parallel_for(x.numel(), [&](std::int64_t b, std::int64_t e) {
      std::int64_t k = 0, c = 0;
      for (std::int64_t i = b; i < e; ++i) {
        const double xi = x.get(i), yi = y.get(i), want = xi * scale;
        const bool zero = yi == 0.0, scaled = std::fabs(yi - want) <= tol.atol + tol.rtol * std::fabs(want);
        if (!zero && !scaled) {
          std::int64_t f = first_bad.load();
          while (i < f && !first_bad.compare_exchange_weak(f, i)) {}
          break;
        }
        if (xi != 0.0) {
          ++c;
          k += zero ? 0 : 1;
        }
      }
      kept += k;
      counted += c;
    });
    if (first_bad.load() != std::numeric_limits<std::int64_t>::max()) {
      const std::int64_t i = first_bad.load();
      return "y[" + std::to_string(i) + "] = " + std::to_string(y.get(i)) + " is neither 0 nor x * scale = " +
             std::to_string(x.get(i) * scale);
    }
    const double n = static_cast<double>(counted.load()), k = static_cast<double>(kept.load());
    if (drop == 0.0 && k != n) return "p = 0 dropped " + std::to_string(n - k) + " elements";
    if (drop == 1.0 && k != 0.0) return "p = 1 kept " + std::to_string(k) + " elements";
    if (drop > 0.0 && drop < 1.0 && n >= 1000) {
      const double mean = n * (1.0 - drop), sigma = std::sqrt(n * drop * (1.0 - drop));
      if (std::fabs(k - mean) > 6.0 * sigma + 1.0)
        return "kept " + std::to_string(static_cast<std::int64_t>(k)) + " of " + std::to_string(static_cast<std::int64_t>(n)) +
               ", expected " + std::to_string(mean) + " +- 6 sigma (" + std::to_string(6.0 * sigma) + ")";
    }
    return std::string();
  };
  op.validate = [](const klab::Problem& p) {
    if (p.shape[0] < 0 || p.shape[1] < 0) return std::string("rows and cols must be >= 0");
    // The check past 2^31 runs once, in f32 at p = 0.1: the index arithmetic is the same
    // template code for every dtype and p, and each such check moves ~17 GB through host memory.
    if (numel(p) > std::numeric_limits<std::int32_t>::max() && (p.dtype != klab::DType::f32 || p.variant != "p0.1"))
      return std::string("past 2^31 elements: f32 at p0.1 only");
    return std::string();
  };
  return op;
}

}  // namespace

KLAB_REGISTER(klab::register_lesson({.id = "07",
                                     .slug = "dropout",
                                     .title = "Dropout: a counter-based random mask that is never stored",
                                     .exercise_op = "dropout",
                                     .exercise_reference = "v2_philox_fused",
                                     .exercise_hint = "lessons/07-dropout/exercise.cu"}));
KLAB_REGISTER(klab::register_op(make_dropout_op()));

}  // namespace lesson07
