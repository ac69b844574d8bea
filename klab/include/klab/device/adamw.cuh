// klab/device/adamw.cuh — one AdamW step on one fp32 parameter (lesson 11), host and device.
//
// AdamW (decoupled weight decay) at step t, as PyTorch's torch.optim.AdamW computes it:
//   p ← p · (1 − lr · wd)                                   the decay, on the old weights
//   m ← β1 · m + (1 − β1) · g                                first moment
//   v ← β2 · v + (1 − β2) · g²                               second moment
//   p ← p − lr / (1 − β1^t) · m / (√v / √(1 − β2^t) + ε)     the bias-corrected step
// The step's constants depend on t only, so the host computes them once, in double, and
// every element does four FMAs, a square root and a divide. lesson 11's kernels, its Triton
// version and the multi-GPU lesson's sharded optimizer call these two functions.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace klab {

struct AdamWStep {
  float beta1, one_minus_beta1;   // 1 − β1 rounded once (β1 = 0.9: 0.1 is not a float)
  float beta2, one_minus_beta2;
  float eps;
  float decay;                    // 1 − lr · wd
  float step_size;                // lr / (1 − β1^t)
  float inv_sqrt_bc2;             // 1 / √(1 − β2^t)
};

// t counts from 1 (the first step divides by 1 − β1, not by 0).
inline AdamWStep adamw_step(double lr, double beta1, double beta2, double eps, double weight_decay, std::int64_t t) {
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  return {static_cast<float>(beta1),       static_cast<float>(1.0 - beta1),      static_cast<float>(beta2),
          static_cast<float>(1.0 - beta2), static_cast<float>(eps),              static_cast<float>(1.0 - lr * weight_decay),
          static_cast<float>(lr / bc1),    static_cast<float>(1.0 / std::sqrt(bc2))};
}

// One element's step, in place. g is the gradient as the step uses it (already multiplied by
// the clipping coefficient where the gradients are clipped).
__host__ __device__ __forceinline__ void adamw_update(float& p, float g, float& m, float& v, const AdamWStep& s) {
  p *= s.decay;
  m = s.beta1 * m + s.one_minus_beta1 * g;
  v = s.beta2 * v + s.one_minus_beta2 * g * g;
  p -= s.step_size * m / (sqrtf(v) * s.inv_sqrt_bc2 + s.eps);
}

}  // namespace klab
