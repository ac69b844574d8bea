// Lesson 16 — the data-parallel training step: op dp_step, its reference and its tolerances.
//
//   dp_step   one AdamW training step of dp_model.hpp's model      {ranks, blocks, tokens, C}  bf16
//     in:  x, gy   {ranks · tokens, C} bf16: the global batch's inputs and the loss's gradient
//                  at the model's output; rank r takes rows [r · tokens, (r + 1) · tokens)
//          params  {P} f32 (in-out): the parameters, updated by the step
//          m, v    {P} f32 (in-out): AdamW's moments (zero: the first step)
//          p16     {P} bf16 (in-out): the copy of params the forward reads; the step writes the
//                  updated one
//     out: grad    {P} f32: the gradient of the loss over the global batch, summed over the
//                  ranks: what every rank's optimizer applied
// Every rank ends with the same parameters (the impls' gather checks the replicas bit for
// bit); rank 0's are the ones compared.
//
// The reference. At the test shapes: dp_model.hpp's fp64 forward and backward over the global
// batch, from p16 as the forward reads it, then AdamW in fp64. At the bench shapes (past
// kCpuReferenceFlops) the fp64 step would take the CPU minutes, so the reference is the
// step run on one GPU over the same global batch (dp_step.cu: dp_step_on_one_gpu, with the
// kernels the test shapes check against fp64), rank r's rows as its r-th micro-batch and the
// micro-batches' gradients added in fp32: gradient accumulation, which data parallelism must
// reproduce, bit for bit at two ranks (a + b = b + a in fp32). At one rank that is the same
// computation run a second time, so what the bench shape checks there is that every element
// is written and the run repeats; its numbers are the test shapes'.
//
// Tolerances (tolerance_at_ref: bounds scaled to the reference's own gradients).
//   grad: every element of a gradient is a sum over tokens of products of activations that were
//   stored in bf16 on the way (the residual stream, h, z, a, and going back g, dz, dh, each
//   within 2^-8 of its value), then rounded once more where the kernels store it (dW1 and dW2
//   leave the matmuls in bf16). Against fp64 each block the gradient flows through adds about
//   four such roundings to the factors of every product, the block's own two more: n = 4 ·
//   blocks + 2. Roundings to nearest are as likely up as down and independent, so they add in
//   quadrature: the gradient's error has a spread of about sqrt(n) · 2^-8 of the tensor's
//   typical size, rms_s, the root mean square of that tensor's (W1, b1, W2, gamma or beta of
//   one block) reference gradient. The whole vector's rel-L2 is held to twice that,
//   2^-7 · sqrt(n), and an element to eight times it, κ = 2^-5 · sqrt(n) · rms_s, plus 2^-7
//   of itself: the worst of thousands of elements sits several spreads out, and more so deep
//   in the model, where a rounding early in the forward has passed through many blocks. A CPU
//   emulation of the kernels' roundings (tests/test_dp_step.cpp) measured the worst element
//   at 0.22 to 0.26 of κ and the rel-L2 at 0.2 to 0.3 of its bound, from 2 blocks to 129; the
//   kernels themselves on the H100, at 129 blocks of 8 channels and 2 tokens, reached a rel-L2
//   of 0.37 of the bound, and with κ at 2^-6 · sqrt(n) one run's seed (219791339) failed 131
//   of its 72,240 elements: the factor was doubled after it. At 12 blocks κ is 22% of rms_s, at
//   2 blocks 10%.
//   Against the one-GPU step each micro-batch runs the kernels a rank runs on the same rows, so
//   the ranks' parts of the gradient are the micro-batches' bit for bit; only the order of the
//   fp32 sum of the R parts may differ (NCCL's against rank order): R − 1 roundings of sums no
//   larger than the R parts' magnitudes, each part's largest elements a few rms_s: κ = R · 2^-20
//   relative to rms_s, and 2^-22 of the element itself.
//   A gradient taken from the wrong block, tensor or rank, or not summed over the ranks, is off
//   by about rms_s itself: 10 times κ at two blocks (tests/test_dp_step.cpp).
//   m, v, params, p16: from the gradient's bound a_i = atol_i + rtol · |g_i|, through AdamW at
//   t = 1 with zero moments: m = (1 − β1) g moves by (1 − β1) a_i; v = (1 − β2) g² by
//   (1 − β2)(2|g_i| a_i + a_i²); the parameter steps by lr · g / (|g| + ε), so where |g_i| > a_i
//   its sign, and the step, are certain but for fp32's roundings of p · (1 − lr · wd) and of
//   the step (rtol 2^-20, and 2^-19 lr absolute where the two nearly cancel), and where not the
//   step may flip: 2 lr. p16 is params rounded to bf16: 2^-8 of it more (a rounding can fall
//   either side of a tie the two sides see differently), of a flipped value's 2 lr too.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dp_model.hpp"
#include "dp_step.cuh"
#include "klab/dtype.hpp"
#include "klab/op.hpp"
#include "klab/rng.hpp"

namespace lesson16 {
namespace {

using i64 = std::int64_t;
using klab::DType;

// 6 matmuls a block, 2 · N · H · C each, over N tokens.
double step_flops(const DpShape& s, std::int64_t N) {
  return 12.0 * static_cast<double>(N) * static_cast<double>(s.H()) * static_cast<double>(s.C) *
         static_cast<double>(s.blocks);
}

void generate(const klab::Problem& p, std::uint64_t seed, klab::Inputs& in) {
  const DpShape s = dp_shape(p);
  klab::fill_uniform(in.tensors.at(0), klab::derive_seed(seed, 0), -1.0, 1.0);
  klab::fill_uniform(in.tensors.at(1), klab::derive_seed(seed, 1), -1.0, 1.0);
  const BlockLayout L = block_layout(s.C);
  const std::uint64_t ps = klab::derive_seed(seed, 2);
  klab::HostTensor &params = in.tensors.at(2), &p16 = in.tensors.at(5);
  klab::parallel_for(param_count(s), [&](i64 b, i64 e) {
    for (i64 i = b; i < e; ++i) {
      const float w = static_cast<float>(param_init(L, s.C, s.blocks, i % L.size, klab::uniform01(ps, static_cast<std::uint64_t>(i))));
      params.set(i, w);
      p16.set(i, w);   // rounded to bf16 by set: the copy the previous step would have written
    }
  });
  // m and v stay zero (HostTensor starts zeroed): the first step.
  in.scalars = dp_adamw_scalars();
}

}  // namespace

bool dp_reference_on_gpu(const klab::Problem& p) {
  const DpShape s = dp_shape(p);
  return step_flops(s, s.global_tokens()) > kCpuReferenceFlops;
}

namespace {

klab::Reference reference(const klab::Problem& p, const klab::Inputs& in) {
  if (dp_reference_on_gpu(p)) return dp_step_on_one_gpu(p, in);
  const DpShape s = dp_shape(p);
  const i64 P = param_count(s), N = s.global_tokens();
  std::vector<double> w(static_cast<std::size_t>(P)), x(static_cast<std::size_t>(N * s.C)), gy(x.size());
  for (i64 i = 0; i < P; ++i) w[i] = in.tensors[5].get(i);
  for (i64 i = 0; i < N * s.C; ++i) x[i] = in.tensors[0].get(i), gy[i] = in.tensors[1].get(i);
  std::vector<double> grad(static_cast<std::size_t>(P), 0.0);
  model_forward_backward(s, w, x.data(), gy.data(), N, grad);
  klab::Reference r(5, klab::RefArray(static_cast<std::size_t>(P)));
  for (i64 i = 0; i < P; ++i) {
    double pa = in.tensors[2].get(i), m = in.tensors[3].get(i), v = in.tensors[4].get(i);
    adamw_ref(in.scalars, grad[i], pa, m, v);
    r[0][i] = grad[i], r[1][i] = pa, r[2][i] = m, r[3][i] = v, r[4][i] = pa;
  }
  return r;
}

// The root mean square of each tensor's reference gradient, by tensor (block b's gamma, beta,
// b1, W1, W2 at 5 b .. 5 b + 4), and the index of the tensor element i belongs to.
struct TensorScales {
  BlockLayout L;
  std::vector<double> rms;
  int of(i64 i) const {
    const i64 b = i / L.size, j = i % L.size;
    const int t = j < L.beta ? 0 : j < L.b1 ? 1 : j < L.w1 ? 2 : j < L.w2 ? 3 : 4;
    return static_cast<int>(5 * b + t);
  }
};
TensorScales tensor_scales(const DpShape& s, std::span<const double> g) {
  TensorScales ts{block_layout(s.C), std::vector<double>(static_cast<std::size_t>(5 * s.blocks), 0.0)};
  std::vector<i64> count(ts.rms.size(), 0);
  for (i64 i = 0; i < static_cast<i64>(g.size()); ++i) {
    const int t = ts.of(i);
    ts.rms[t] += g[i] * g[i], ++count[t];
  }
  for (std::size_t t = 0; t < ts.rms.size(); ++t) ts.rms[t] = count[t] ? std::sqrt(ts.rms[t] / count[t]) : 0.0;
  return ts;
}

klab::Tolerance tolerance(const klab::Problem& p, int k, const std::vector<std::span<const double>>& ref) {
  const DpShape s = dp_shape(p);
  const bool gpu_ref = dp_reference_on_gpu(p);
  const double roundings = std::sqrt(4.0 * static_cast<double>(s.blocks) + 2);
  const double kappa = gpu_ref ? s.ranks * 0x1p-20 : 0x1p-5 * roundings;
  const double rel_l2 = gpu_ref ? kappa : 0x1p-7 * roundings;
  const double grad_rtol = gpu_ref ? 0x1p-22 : 0x1p-7;
  auto ts = std::make_shared<const TensorScales>(tensor_scales(s, ref.at(0)));
  const std::span<const double> g = ref.at(0);
  // a_i: how far element i of the gradient may be off.
  auto a = [ts, g, kappa, grad_rtol](i64 i) { return kappa * ts->rms[ts->of(i)] + grad_rtol * std::fabs(g[i]); };
  const std::vector<double> sc = dp_adamw_scalars();
  const double lr = sc[0], b1 = sc[1], b2 = sc[2];
  klab::Tolerance t;
  double largest = 0, a_most = 0, g_most = 0;   // for Tolerance::atol, the largest bound given
  for (double r : ts->rms) largest = std::max(largest, r);
  for (i64 i = 0; i < static_cast<i64>(g.size()); ++i) a_most = std::max(a_most, a(i)), g_most = std::max(g_most, std::fabs(g[i]));
  switch (k) {
    case 0:   // grad
      t.rtol = grad_rtol;
      t.atol_at = [ts, kappa](i64 i) { return kappa * ts->rms[ts->of(i)]; };
      t.atol = kappa * largest;
      t.max_rel_l2 = rel_l2;
      break;
    case 2:   // m
      t.rtol = 0x1p-20;
      t.atol_at = [a, b1](i64 i) { return (1 - b1) * a(i); };
      t.atol = (1 - b1) * a_most;
      break;
    case 3:   // v
      t.rtol = 0x1p-20;
      t.atol_at = [a, g, b2](i64 i) { return (1 - b2) * (2 * std::fabs(g[i]) * a(i) + a(i) * a(i)); };
      t.atol = (1 - b2) * (2 * g_most * a_most + a_most * a_most);
      break;
    default:  // params (1), p16 (4)
      t.rtol = k == 1 ? 0x1p-20 : 0x1p-20 + 0x1p-8;
      t.atol_at = [a, g, lr](i64 i) { return std::fabs(g[i]) > a(i) ? 0x1p-19 * lr : 2 * lr * (1 + 0x1p-7); };
      t.atol = 2 * lr * (1 + 0x1p-7);
      break;
  }
  return t;
}

klab::Op make_dp_step_op() {
  klab::Op op;
  op.lesson = "16";
  op.name = "dp_step";
  op.summary = "one AdamW step of pre-LN MLP blocks over a global batch split across ranks, gradients all-reduced";
  op.dims = {"ranks", "blocks", "tokens", "C"};
  op.dtypes = {DType::bf16};
  // No tokens (a rank with nothing to add), one token, primes and sizes that are a multiple of
  // no tile (tokens: the M of the forward's matmuls and the K of the weight gradients'), widths
  // of one to a few 64-wide tiles, 1 to 4 ranks.
  // C must be a multiple of 8 on the GPU (TMA's row pitch for W1 and W2): the shapes of another
  // width (one element, an odd C) check the reference and the tolerance, and every impl reports
  // them unsupported with that reason. 129 blocks deep; 131 ranks, more than any machine's GPUs.
  op.test_shapes = {{1, 1, 0, 8},    {1, 1, 1, 1},    {1, 1, 1, 8},     {1, 2, 37, 24},  {1, 1, 130, 64},
                    {1, 3, 5, 7},    {1, 129, 2, 8},  {2, 1, 0, 16},    {2, 1, 1, 8},    {2, 2, 37, 40},
                    {2, 1, 300, 128}, {2, 1, 37, 136}, {3, 2, 19, 16},  {4, 1, 9, 8},    {131, 1, 1, 8}};
  op.no_huge_shape =
      "a tensor of 2^31 elements here is a model of 2^31 parameters (four fp32 copies of them are "
      "34 GB a rank) or an activation of 2^31 / C rows; the step's kernels are each checked past "
      "2^31 in their own lessons";
  // GPT-2 small's MLP width, 12 blocks, 8192 tokens a rank: two GPUs; one GPU over one rank's
  // share (the compute alone, which the overlap is measured against); and one GPU over the
  // whole global batch (the step the two GPUs must agree with, and are timed against).
  op.bench_shapes = {{2, 12, 8192, 768}, {1, 12, 8192, 768}, {1, 12, 16384, 768}};
  op.seeds = 1;
  op.baseline = "v1_allreduce_after_backward";
  op.tour = {"v1_allreduce_after_backward", "v3_copy_engine_ring"};
  op.bound = klab::Bound::compute;
  op.inputs = [](const klab::Problem& p) {
    const DpShape s = dp_shape(p);
    const i64 P = param_count(s);
    return std::vector<klab::TensorSpec>{{"x", DType::bf16, {s.global_tokens(), s.C}},
                                         {"gy", DType::bf16, {s.global_tokens(), s.C}},
                                         {"params", DType::f32, {P}, klab::Init::inout},
                                         {"m", DType::f32, {P}, klab::Init::inout},
                                         {"v", DType::f32, {P}, klab::Init::inout},
                                         {"p16", DType::bf16, {P}, klab::Init::inout}};
  };
  op.outputs = [](const klab::Problem& p) {
    return std::vector<klab::TensorSpec>{{"grad", DType::f32, {param_count(dp_shape(p))}}};
  };
  op.generate = generate;
  op.reference = reference;
  op.tolerance_at_ref = tolerance;
  // One GPU's share: the TFLOP/s column is each GPU's rate, against one GPU's peak, so that one
  // and two GPUs compare directly.
  op.flops = [](const klab::Problem& p) {
    const DpShape s = dp_shape(p);
    return step_flops(s, s.tokens);
  };
  op.validate = [](const klab::Problem& p) -> std::string {
    if (p.shape.size() != 4) return "dp_step takes {ranks, blocks, tokens, C}";
    const DpShape s = dp_shape(p);
    if (s.ranks < 1 || s.ranks > 1024) return "ranks must be 1 to 1024";
    if (s.blocks < 1 || s.blocks > 256) return "blocks must be 1 to 256";
    if (s.tokens < 0 || s.tokens > (i64{1} << 20)) return "tokens (a rank's) must be 0 to 2^20";
    if (s.C < 1 || s.C > 4096)
      return "C must be 1 to 4096";
    return "";
  };
  return op;
}

KLAB_REGISTER(klab::register_op(make_dp_step_op()));

}  // namespace
}  // namespace lesson16
