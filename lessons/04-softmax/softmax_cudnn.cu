// lessons/04-softmax/softmax_cudnn.cu — the vendor baseline: cuDNN's softmax, forward and
// backward, through the legacy API (cudnnSoftmaxForward / cudnnSoftmaxBackward,
// CUDNN_SOFTMAX_ACCURATE = subtract the max first, CUDNN_SOFTMAX_MODE_INSTANCE over a
// [rows, cols, 1, 1] NCHW tensor = one softmax per row).
//
// Built with cuDNN only when CMake found it (KLAB_HAVE_CUDNN); the impls are registered
// either way, and without cuDNN their supports() says why.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>

#include "klab/error.hpp"
#include "klab/op.hpp"

#if KLAB_HAVE_CUDNN
#include <cudnn.h>
#endif

using klab::DType;
using klab::Problem;

namespace {

#if KLAB_HAVE_CUDNN

#define L04_CHECK_CUDNN(call)                                                             \
  do {                                                                                    \
    const cudnnStatus_t st_ = (call);                                                     \
    if (st_ != CUDNN_STATUS_SUCCESS)                                                      \
      ::klab::throw_error(cudnnGetErrorString(st_), #call, __FILE__, __LINE__);           \
  } while (0)

// One handle per device, made on first use (cudnnCreate is slow: outside the timed region,
// which starts after warm-up). Never destroyed: it lives as long as the process.
cudnnHandle_t handle_for_current_device() {
  static cudnnHandle_t handles[64] = {};
  int dev = 0;
  KLAB_CHECK_CUDA(cudaGetDevice(&dev));
  KLAB_REQUIRE(dev >= 0 && dev < 64, "cudnn: device index out of range");
  if (!handles[dev]) L04_CHECK_CUDNN(cudnnCreate(&handles[dev]));
  return handles[dev];
}

cudnnDataType_t cudnn_type(DType t) {
  return t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

// A [rows, cols, 1, 1] descriptor, destroyed at scope exit.
struct Desc {
  cudnnTensorDescriptor_t d = nullptr;
  Desc(const Problem& p) {
    L04_CHECK_CUDNN(cudnnCreateTensorDescriptor(&d));
    L04_CHECK_CUDNN(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, cudnn_type(p.dtype),
                                               static_cast<int>(p.shape[0]),
                                               static_cast<int>(p.shape[1]), 1, 1));
  }
  ~Desc() { cudnnDestroyTensorDescriptor(d); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
};

void run_cudnn_fwd(const klab::Launch& l) {
  const Problem& p = l.problem;
  if (p.shape[0] * p.shape[1] == 0) return;         // cuDNN rejects zero-sized tensors
  cudnnHandle_t h = handle_for_current_device();
  L04_CHECK_CUDNN(cudnnSetStream(h, l.stream));
  Desc desc(p);
  const float alpha = 1.f, beta = 0.f;              // float scaling factors for f32 and bf16
  L04_CHECK_CUDNN(cudnnSoftmaxForward(h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE,
                                      &alpha, desc.d, l.in[0].data, &beta, desc.d, l.out[0].data));
}

void run_cudnn_bwd(const klab::Launch& l) {
  const Problem& p = l.problem;
  if (p.shape[0] * p.shape[1] == 0) return;
  cudnnHandle_t h = handle_for_current_device();
  L04_CHECK_CUDNN(cudnnSetStream(h, l.stream));
  Desc desc(p);
  const float alpha = 1.f, beta = 0.f;
  L04_CHECK_CUDNN(cudnnSoftmaxBackward(h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE,
                                       &alpha, desc.d, l.in[0].data, desc.d, l.in[1].data, &beta,
                                       desc.d, l.out[0].data));
}

std::string supports_cudnn(const Problem& p) {
  if (p.variant == "causal") return "cuDNN's legacy softmax has no mask";
  // The legacy descriptors hold int sizes and strides: N * C must fit in 31 bits.
  if (p.shape.at(0) * p.shape.at(1) > std::numeric_limits<int>::max())
    return "more than 2^31 - 1 elements (legacy cuDNN descriptors are 32-bit)";
  return "";
}

#else

std::string supports_cudnn(const Problem&) {
  return "built without cuDNN (CMake found no cudnn_ops.h / libcudnn; see lessons/04-softmax/CMakeLists.txt)";
}
void run_cudnn_fwd(const klab::Launch&) { KLAB_REQUIRE(false, "built without cuDNN"); }
void run_cudnn_bwd(const klab::Launch&) { KLAB_REQUIRE(false, "built without cuDNN"); }

#endif

KLAB_REGISTER(klab::register_impl({
    .op = "softmax_rows",
    .name = "cudnn",
    .summary = "cuDNN cudnnSoftmaxForward (ACCURATE, INSTANCE over [rows, cols, 1, 1])",
    .kind = klab::ImplKind::vendor,
    .supports = supports_cudnn,
    .run = run_cudnn_fwd,
}));

KLAB_REGISTER(klab::register_impl({
    .op = "softmax_bwd",
    .name = "cudnn",
    .summary = "cuDNN cudnnSoftmaxBackward (ACCURATE, INSTANCE over [rows, cols, 1, 1])",
    .kind = klab::ImplKind::vendor,
    .supports = supports_cudnn,
    .run = run_cudnn_bwd,
}));

}  // namespace
