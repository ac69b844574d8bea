// klab/cudnn.hpp — the cuDNN handle the vendor baselines share (lesson 04's softmax, lesson
// 08's layernorm). Include it only where cuDNN was found (KLAB_HAVE_CUDNN or
// KLAB_HAVE_CUDNN_FRONTEND): it needs cudnn.h.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include "klab/error.hpp"

namespace klab {

// One handle per device, made on first use (cudnnCreate is slow: outside the timed region,
// which starts after warm-up). Never destroyed: it lives as long as the process. An inline
// function's static is one object across every file that includes this.
inline cudnnHandle_t cudnn_handle() {
  static cudnnHandle_t handles[64] = {};
  int dev = 0;
  KLAB_CHECK_CUDA(cudaGetDevice(&dev));
  KLAB_REQUIRE(dev >= 0 && dev < 64, "cudnn: device index out of range");
  if (!handles[dev]) KLAB_CHECK_CUDNN(cudnnCreate(&handles[dev]));
  return handles[dev];
}

}  // namespace klab
