// Lesson 11 — what the training-kernel files share (namespace lesson11): the layout of the
// AdamW problem's many tensors, its hyperparameters as a launch carries them, and the
// cross-entropy's conventions. It registers no impl.
//
// adamw (adamw_ops.cu): `params` fp32 parameters in `tensors` tensors of mixed sizes
// (adamw_sizes), updated `steps` times. The inputs, role by role, tensor k of role r at
// in[r · tensors + k]:
//   r = 0  p   {n_k}          the parameters (in-out)
//   r = 1  g   {steps, n_k}   one gradient a step
//   r = 2  m   {n_k}          first moment (in-out)
//   r = 3  v   {n_k}          second moment (in-out)
// and, in the variant bf16_copy, the outputs p16_k {n_k}: the updated parameters rounded to
// bf16 (the copy a bf16 forward pass reads). The scalars: lr, β1, β2, ε, weight decay, the
// first step's t, and max_norm (variant clip: each step's gradients, all tensors together,
// are scaled by min(1, max_norm / (‖g‖ + 1e-6)) first, as torch.nn.utils.clip_grad_norm_).
//
// cross_entropy_fwd / cross_entropy_bwd (cross_entropy_ops.cu): logits {rows, vocab} (f32 or
// bf16), targets {rows} int32 in [0, vocab) or kIgnoreIndex. The forward writes the mean loss
// over the rows not ignored (0 when every row is) and each row's log-sum-exp (fp32), which
// the backward takes back with scale = dloss / (rows not ignored):
//   dlogits[r, j] = scale · (exp(logits[r, j] − lse[r]) − [j = target[r]]),  0 in ignored rows.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "klab/device/adamw.cuh"
#include "klab/op.hpp"

namespace lesson11 {

// ---- AdamW --------------------------------------------------------------------------------

enum AdamRole { kParam = 0, kGrad = 1, kExpAvg = 2, kExpAvgSq = 3 };

// The sizes of the tensors: each takes a share of `params` by a weight cycled from the list
// below (large matrices beside vectors of a few hundred or thousand, as a transformer's
// parameters come), rounded down; the last takes the rest. 2^26 parameters in 13 tensors
// (the bench shape) run from 670 to 26.8 million. tools/torch_figures.py computes the same
// sizes (the same doubles, in the same order).
inline std::vector<std::int64_t> adamw_sizes(std::int64_t params, std::int64_t tensors) {
  static constexpr double kWeight[] = {4.0, 0.001, 3.0, 1.0, 0.0003, 12.0, 0.002, 2.0};
  constexpr std::int64_t kCycle = sizeof(kWeight) / sizeof(kWeight[0]);
  double total = 0;
  for (std::int64_t k = 0; k < tensors; ++k) total += kWeight[k % kCycle];
  std::vector<std::int64_t> n(static_cast<std::size_t>(tensors));
  std::int64_t used = 0;
  for (std::int64_t k = 0; k + 1 < tensors; ++k) {
    n[static_cast<std::size_t>(k)] = static_cast<std::int64_t>(std::floor(static_cast<double>(params) * kWeight[k % kCycle] / total));
    used += n[static_cast<std::size_t>(k)];
  }
  if (tensors > 0) n.back() = params - used;
  return n;
}

// The variants.
inline bool adamw_clips(const klab::Problem& p) { return p.variant == "clip"; }
inline bool adamw_copies(const klab::Problem& p) { return p.variant == "bf16_copy"; }

// The scalars, as the op's generator draws them.
struct AdamWHyper {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0, max_norm = 0;
  std::int64_t t0 = 1;   // the first step's t; step s of a launch is t0 + s
};
inline AdamWHyper adamw_hyper(const std::vector<double>& s) {
  return {s.at(0), s.at(1), s.at(2), s.at(3), s.at(4), s.at(6), static_cast<std::int64_t>(s.at(5))};
}
inline klab::AdamWStep adamw_step_at(const AdamWHyper& h, std::int64_t step) {
  return klab::adamw_step(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.t0 + step);
}

// The clipping coefficient from the gradients' norm (clip_grad_norm_'s: 1e-6 keeps a zero
// gradient finite, and a coefficient above 1 is not applied).
__host__ __device__ inline float clip_coefficient(float norm, float max_norm) {
  return fminf(1.0f, max_norm / (norm + 1e-6f));
}

// ---- cross-entropy -------------------------------------------------------------------------

// PyTorch's default ignore_index: a row whose target is this adds nothing to the loss and
// gets a zero gradient.
inline constexpr std::int32_t kIgnoreIndex = -100;

}  // namespace lesson11
