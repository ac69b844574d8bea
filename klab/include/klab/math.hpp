// klab/math.hpp — the integer arithmetic of launch shapes, for host and device code alike:
// host-only files (the CPU tests, a launcher's plan) include it without the CUDA headers.
#pragma once

#if defined(__CUDACC__)
#define KLAB_HOST_DEVICE __host__ __device__
#else
#define KLAB_HOST_DEVICE
#endif

namespace klab {

// ceil(a / b) for b > 0 and a >= 0.
template <class T>
KLAB_HOST_DEVICE constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }

}  // namespace klab
