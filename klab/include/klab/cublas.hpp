// klab/cublas.hpp — the process's cuBLAS handle, for the lessons' cuBLAS baselines and the
// products some versions hand to cuBLAS (lessons 02, 05, 09).
//
// One handle, created on first use and kept for the process (creating one costs
// milliseconds and a context's worth of setup, not something to time). Its math mode is
// cuBLAS's default — each call's compute type decides pedantic fp32, TF32 or 16-bit tensor
// cores — plus CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, which keeps split-K partial
// sums in fp32 where cuBLAS would otherwise add them in the output's 16-bit type: the
// setting the course compares its own kernels against (fp32 accumulation throughout).
//
// A caller sets the stream before its calls (cublasSetStream; it also resets any workspace
// an earlier caller set with cublasSetWorkspace to the library's own), so callers sharing the
// handle do not see each other's settings. klab's peak measurement (src/peaks.cpp) changes
// the math mode and keeps a handle of its own.
#pragma once

#include <cublas_v2.h>

#include "klab/error.hpp"

namespace klab {

inline cublasHandle_t cublas_handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t x = nullptr;
    KLAB_CHECK_CUBLAS(cublasCreate(&x));
    KLAB_CHECK_CUBLAS(cublasSetMathMode(
        x, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    return x;
  }();
  return h;
}

}  // namespace klab
