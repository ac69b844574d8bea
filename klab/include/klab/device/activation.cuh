// klab/device/activation.cuh — GELU in its tanh form (GPT-2's), host and device, at full
// fp32 accuracy: lesson 01 teaches it as an element-wise op, lesson 08 fuses it after the
// layernorm. (Lesson 06's matmul epilogue has its own, on the SFU's tanh.approx, where the
// tensor cores wait for every instruction: fusion.cuh says why.)
//
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
#pragma once

#include <cmath>

#include "klab/math.hpp"   // KLAB_HOST_DEVICE

namespace klab {

inline constexpr double kGeluTanhC = 0.7978845608028654;   // sqrt(2 / pi)
inline constexpr double kGeluTanhA = 0.044715;

// fp32: tanhf (a few ulp), not tanh.approx (2^-11 relative).
KLAB_HOST_DEVICE inline float gelu_tanh(float x) {
  const float u = static_cast<float>(kGeluTanhC) * (x + static_cast<float>(kGeluTanhA) * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// fp64, for the CPU references.
inline double gelu_tanh_ref(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluTanhC * (x + kGeluTanhA * x * x * x))); }

}  // namespace klab
