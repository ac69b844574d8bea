// klab/device/activation.cuh — GELU in its tanh form (GPT-2's), host and device, at full
// fp32 accuracy, and its derivative (fp32 and the fp64 reference): lesson 01 teaches it as an element-wise
// op, lesson 08 fuses it after the layernorm, lesson 06 takes its backward. (Lesson 06's
// matmul epilogue has its own, on the SFU's tanh.approx, where the
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

// Its derivative in fp64, for the backward's CPU references (lesson 06's linear_dgelu_bgrad):
// with u = c (x + a x^3) and t = tanh(u),
//   gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2).
inline double gelu_tanh_grad_ref(double x) {
  const double t = std::tanh(kGeluTanhC * (x + kGeluTanhA * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluTanhC * (1.0 + 3.0 * kGeluTanhA * x * x);
}


// Its derivative in fp32, for a backward pass's inner loop or epilogue (lesson 06's
// linear_dgelu_bgrad). Not from tanh: gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) u' takes
// 1 - t^2 from t, and where |x| is large (x = 4: 1 - t^2 = 1e-4) the SFU's tanh.approx
// (2^-11 relative error in t) gets it wrong ten times over, times 0.5 x u' = 5: an error of
// 5e-3 in a gradient that is about 0 (x = -4), far past a bf16 tolerance. Written with
// s = sigmoid(2u) = 1 / (1 + E), E = exp(-2u), so that 1 - s = E s is never a difference:
//   gelu'(x) = s + 2 x u' E s^2,   u' = c (1 + 3 a x^2).
// On the GPU E and the reciprocal are one SFU instruction each (ex2.approx and rcp.approx,
// relative errors about 2^-22 and 2^-23); on the host (the CPU test of the formula) std::exp
// and a division. -2u is capped at 80 (x below about -9.6, where gelu' is 0 in fp32), so
// that E stays finite and E s^2 underflows to 0 rather than becoming inf * 0.
KLAB_HOST_DEVICE inline float gelu_tanh_grad(float x) {
  // The constants folded so that each step is one instruction: -2u·log2(e) (ex2's argument)
  // and 2u' as one fma of x^2 each.
  constexpr double kLog2e = 1.4426950408889634;
  constexpr float a0 = static_cast<float>(-2.0 * kGeluTanhC * kLog2e), a1 = static_cast<float>(-2.0 * kGeluTanhC * kGeluTanhA * kLog2e);
  constexpr float b0 = static_cast<float>(2.0 * kGeluTanhC), b1 = static_cast<float>(6.0 * kGeluTanhC * kGeluTanhA);
  const float x2 = x * x;
  const float arg = fminf(x * fmaf(a1, x2, a0), static_cast<float>(80.0 * kLog2e));   // -2u·log2(e)
#ifdef __CUDA_ARCH__
  float e, s;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(arg));                            // E = exp(-2u)
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(s) : "f"(1.f + e));
#else
  const float e = std::exp2(arg);
  const float s = 1.f / (1.f + e);
#endif
  const float t = x * fmaf(b1, x2, b0) * (e * s);   // 2 x u' E s; E s = 1 - s <= 1, where E alone can be 1e34
  return fmaf(t, s, s);                              // s + 2 x u' E s^2
}
}  // namespace klab
