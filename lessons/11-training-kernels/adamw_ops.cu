// Lesson 11 — training kernels: the lesson, its op adamw and the op's CPU reference.
//
//   adamw   `steps` AdamW steps over `params` fp32 parameters in `tensors` tensors of mixed
//           sizes   {params, tensors, steps}   f32   variants plain, clip, bf16_copy
//
// The layout of the tensors and scalars is training.cuh's. The kernels live beside this file
// (adamw.cu: v1_per_tensor, v2_multi_tensor; adamw_triton.py: triton); the learner's are
// exercise.cu and exercise_triton.py. The cross-entropy ops are cross_entropy_ops.cu's.
//
//   klab test 11 --op adamw
//   klab bench 11 --op adamw --variant plain
//   klab check 11                        grade the exercise (the AdamW update of one element)
//
// The reference runs the steps in fp64 from the fp32 state (the clipping norm too), so what
// it checks is the kernels' fp32 arithmetic over several steps, not one step alone.
// Tolerances, f32 (u = 2^-24): one step of klab::adamw_update rounds p · decay (|p| u), the
// moments (a few u of |m|, |v|) and the step s · m / (√v · c + ε), a few u of its size,
// which is about lr < 0.01; three steps add three such errors, and clipping's fp32 norm
// errs by (log2 n + 2) u relative, under 2^-18 at these sizes, scaling g, m and the step.
// All of it is under the f32 default's 1e-5 relative and 1e-6 absolute, and a missed
// update is not: a step moves p by about lr >= 1e-3, m by 0.1 |g - m| and v by
// (1 - β2) |g² - v| >= 1e-3 |g² - v|, against |v| < 1. The bf16 copies are one rounding of
// the fp32 parameters: half a bf16 ulp, 2^-9 relative, inside rtol 2^-8 (the bf16 default,
// 1.6e-2, would pass a copy of another neighbour's value more often).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "klab/compare.hpp"
#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "training.cuh"

namespace lesson11 {
namespace {

using i64 = std::int64_t;

i64 tensors_of(const klab::Problem& p) { return p.shape[1]; }
i64 steps_of(const klab::Problem& p) { return p.shape[2]; }

klab::Op make_adamw_op() {
  klab::Op op;
  op.lesson = "11";
  op.name = "adamw";
  op.summary = "AdamW over many fp32 tensors in place: moments, bias correction, weight decay, optional clipping";
  op.dims = {"params", "tensors", "steps"};
  op.dtypes = {klab::DType::f32};
  op.variants = {"plain", "clip", "bf16_copy"};
  // No tensors at all, one parameter, more tensors than parameters (empty tensors between
  // full ones), odd and prime sizes, three steps (bias correction moving, each step's own
  // clipping norm), more tensors than one launch's table holds (40, and 133 over 129 steps:
  // tables of mostly empty tensors, bias corrections run from t0 to t0 + 128; its gradient
  // tensor of 129 x 3,332 is past the --max-elems of a sanitizer run, which would otherwise
  // spend minutes on its tens of thousands of launches).
  op.test_shapes = {{0, 1, 1},    {1, 1, 1},      {3, 8, 1},     {7, 3, 2},                {1000, 13, 3},
                    {100003, 5, 2}, {65539, 1, 1}, {100000, 133, 129}, {(1 << 20) + 7, 40, 1}};
  op.no_huge_shape =
      "a parameter past 2^31 elements needs 8 GB for p and each of g, m, v, as many again for the harness's "
      "pristine copies of the in-out tensors and 17 GB for each fp64 reference array; the kernels index with "
      "64-bit offsets and 32-bit chunk numbers, which the 40-tensor shape's table crosses launches with";
  // 2^26 parameters in 13 tensors (670 to 26.8 million each), one step: the figure PyTorch's
  // fused AdamW is quoted at.
  op.bench_shapes = {{i64{1} << 26, 13, 1}};
  op.baseline = "v1_per_tensor";
  op.tour = {"v1_per_tensor", "v2_multi_tensor"};
  op.bound = klab::Bound::memory;
  op.inputs = [](const klab::Problem& p) {
    const std::vector<i64> n = adamw_sizes(p.shape[0], tensors_of(p));
    std::vector<klab::TensorSpec> in;
    const char* role[] = {"p", "g", "m", "v"};
    for (int r = 0; r < 4; ++r)
      for (std::size_t k = 0; k < n.size(); ++k) {
        klab::Dims shape = r == kGrad ? klab::Dims{steps_of(p), n[k]} : klab::Dims{n[k]};
        in.push_back({std::string(role[r]) + std::to_string(k), klab::DType::f32, shape,
                      r == kGrad ? klab::Init::plain : klab::Init::inout});
      }
    return in;
  };
  op.outputs = [](const klab::Problem& p) {
    std::vector<klab::TensorSpec> out;
    if (adamw_copies(p)) {
      const std::vector<i64> n = adamw_sizes(p.shape[0], tensors_of(p));
      for (std::size_t k = 0; k < n.size(); ++k) out.push_back({"p16_" + std::to_string(k), klab::DType::bf16, {n[k]}});
    }
    return out;
  };
  // p and g from [-1, 1), m from [-0.5, 0.5) and v from [0.05, 1): a state some steps into
  // training. lr from [1e-3, 1e-2), β1 = 0.9, β2 0.95 or 0.999, ε = 1e-8, weight decay 0.1,
  // t0 from 1 to 20 (where the bias corrections matter most). max_norm is half the expected
  // norm of one step's gradients (√(params / 3) / 2), so that clipping acts.
  op.generate = [](const klab::Problem& p, std::uint64_t seed, klab::Inputs& in) {
    const i64 t = tensors_of(p);
    const double lo[] = {-1.0, -1.0, -0.5, 0.05}, hi[] = {1.0, 1.0, 0.5, 1.0};
    for (i64 k = 0; k < 4 * t; ++k)
      klab::fill_uniform(in.tensors[static_cast<std::size_t>(k)], klab::derive_seed(seed, static_cast<std::uint64_t>(k)),
                         lo[k / t], hi[k / t]);
    const std::uint64_t s = klab::derive_seed(seed, 1u << 20);
    in.scalars = {1e-3 + 9e-3 * klab::uniform01(s, 0),
                  0.9,
                  klab::uniform01(s, 1) < 0.5 ? 0.95 : 0.999,
                  1e-8,
                  0.1,
                  std::floor(1.0 + 20.0 * klab::uniform01(s, 2)),
                  0.5 * std::sqrt(static_cast<double>(p.shape[0]) / 3.0)};
  };
  // fp64, step by step: each step's norm over every tensor's gradient of that step, then
  // the update of every element with that step's constants (computed in double).
  op.reference = [](const klab::Problem& p, const klab::Inputs& in) {
    const i64 t = tensors_of(p), steps = steps_of(p);
    const AdamWHyper h = adamw_hyper(in.scalars);
    std::vector<klab::RefArray> pa(static_cast<std::size_t>(t)), ma(pa.size()), va(pa.size());
    for (i64 k = 0; k < t; ++k) {
      const auto& tp = in.tensors[static_cast<std::size_t>(kParam * t + k)];
      const auto& tm = in.tensors[static_cast<std::size_t>(kExpAvg * t + k)];
      const auto& tv = in.tensors[static_cast<std::size_t>(kExpAvgSq * t + k)];
      auto& P = pa[static_cast<std::size_t>(k)];
      auto& M = ma[static_cast<std::size_t>(k)];
      auto& V = va[static_cast<std::size_t>(k)];
      P.resize(static_cast<std::size_t>(tp.numel())), M.resize(P.size()), V.resize(P.size());
      for (i64 i = 0; i < tp.numel(); ++i)
        P[static_cast<std::size_t>(i)] = tp.get(i), M[static_cast<std::size_t>(i)] = tm.get(i),
        V[static_cast<std::size_t>(i)] = tv.get(i);
    }
    for (i64 s = 0; s < steps; ++s) {
      double coef = 1.0;
      if (adamw_clips(p)) {
        double sq = 0;
        for (i64 k = 0; k < t; ++k) {
          const auto& g = in.tensors[static_cast<std::size_t>(kGrad * t + k)];
          const i64 n = g.numel() / steps;
          for (i64 i = 0; i < n; ++i) sq += g.get(s * n + i) * g.get(s * n + i);
        }
        coef = std::min(1.0, h.max_norm / (std::sqrt(sq) + 1e-6));
      }
      const double tt = static_cast<double>(h.t0 + s);
      const double bc1 = 1.0 - std::pow(h.beta1, tt), bc2 = 1.0 - std::pow(h.beta2, tt);
      for (i64 k = 0; k < t; ++k) {
        const auto& g = in.tensors[static_cast<std::size_t>(kGrad * t + k)];
        auto& P = pa[static_cast<std::size_t>(k)];
        auto& M = ma[static_cast<std::size_t>(k)];
        auto& V = va[static_cast<std::size_t>(k)];
        const i64 n = static_cast<i64>(P.size());
        klab::parallel_for(n, [&](i64 b, i64 e) {
          for (i64 i = b; i < e; ++i) {
            const auto j = static_cast<std::size_t>(i);
            const double gi = g.get(s * n + i) * coef;
            P[j] *= 1.0 - h.lr * h.weight_decay;
            M[j] = h.beta1 * M[j] + (1.0 - h.beta1) * gi;
            V[j] = h.beta2 * V[j] + (1.0 - h.beta2) * gi * gi;
            P[j] -= h.lr / bc1 * M[j] / (std::sqrt(V[j] / bc2) + h.eps);
          }
        });
      }
    }
    // The outputs (the bf16 copies), then the in-out inputs in input order: p, m, v.
    klab::Reference r;
    if (adamw_copies(p))
      for (const auto& P : pa) r.push_back(P);
    for (auto* arrays : {&pa, &ma, &va})
      for (auto& a : *arrays) r.push_back(std::move(a));
    return r;
  };
  op.tolerance = [](const klab::Problem& p, int output) {
    if (adamw_copies(p) && output < tensors_of(p)) return klab::Tolerance{1e-6, 1.0 / 256, 1.0 / 256};
    return klab::default_tolerance(klab::DType::f32);
  };
  // The harness's rule: each input read once, each output and in-out input written once.
  // One step (the bench's) is read p, g, m, v and write p, m, v: 28 bytes a parameter, the
  // figure PyTorch's fused AdamW is quoted with; more steps add a gradient each; the bf16
  // copy writes 2 more. Clipping's second read of g is the algorithm's, not the op's (the
  // norm needs every gradient before the first update), and is not counted: a clipped step
  // shows as a lower GB/s.
  op.bytes = [](const klab::Problem& p) {
    const double n = static_cast<double>(p.shape[0]), steps = static_cast<double>(steps_of(p));
    return 24.0 * n + 4.0 * n * steps + (adamw_copies(p) ? 2.0 * n : 0.0);
  };
  op.validate = [](const klab::Problem& p) {
    if (p.shape[0] < 0) return std::string("params must be >= 0");
    if (p.shape[1] < 1 || p.shape[1] > 4096) return std::string("tensors must be in [1, 4096]");
    if (p.shape[2] < 1 || p.shape[2] > 1024) return std::string("steps must be in [1, 1024]");
    if (p.shape[0] > (i64{1} << 31) - 1) return std::string("params must be below 2^31 (see the op's note on huge shapes)");
    return std::string();
  };
  return op;
}

}  // namespace

KLAB_REGISTER(klab::register_lesson({.id = "11",
                                     .slug = "training-kernels",
                                     .title = "Training kernels: AdamW over many tensors, fused cross-entropy",
                                     .exercise_op = "adamw",
                                     .exercise_reference = "v2_multi_tensor",
                                     .exercise_hint = "lessons/11-training-kernels/exercise.cu"}));
KLAB_REGISTER(klab::register_op(make_adamw_op()));

}  // namespace lesson11
