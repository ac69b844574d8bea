// lessons/04-softmax/softmax_cudnn.cu — the vendor baseline: cuDNN's softmax, forward and
// backward, through the legacy API (cudnnSoftmaxForward / cudnnSoftmaxBackward,
// CUDNN_SOFTMAX_ACCURATE = subtract the max first, CUDNN_SOFTMAX_MODE_INSTANCE over a
// [rows, cols, 1, 1] NCHW tensor = one softmax per row).
//
// Impls registered here (the same impl name for two ops):
//   cudnn  softmax_rows: cudnnSoftmaxForward (no causal variant: the legacy API has no mask)
//          softmax_bwd:  cudnnSoftmaxBackward
//
// Built with cuDNN only when CMake found it (KLAB_HAVE_CUDNN); the impls are registered
// either way, and without cuDNN their supports() says why.
//
// Run:  klab run 04 --impl v6_exp2,cudnn --shape 8192x8192      klab bench 04 --op softmax_bwd
#include <cuda_runtime.h>

#include <cstdint>
#include <exception>
#include <limits>
#include <string>

#include "klab/dtype.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"

#if KLAB_HAVE_CUDNN
#include <cudnn.h>

#include "klab/cudnn.hpp"
#endif

using klab::DType;
using klab::Problem;

namespace {

#if KLAB_HAVE_CUDNN

cudnnDataType_t cudnn_type(DType t) {
  return t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

// A [rows, cols, 1, 1] descriptor, destroyed at scope exit.
struct Desc {
  cudnnTensorDescriptor_t d = nullptr;
  Desc(const Problem& p) {
    KLAB_CHECK_CUDNN(cudnnCreateTensorDescriptor(&d));
    KLAB_CHECK_CUDNN(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, cudnn_type(p.dtype),
                                               static_cast<int>(p.shape[0]),
                                               static_cast<int>(p.shape[1]), 1, 1));
  }
  ~Desc() { cudnnDestroyTensorDescriptor(d); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
};

void run_softmax_rows_cudnn(const klab::Launch& l) {
  const Problem& p = l.problem;
  if (p.shape[0] * p.shape[1] == 0) return;         // cuDNN rejects zero-sized tensors
  cudnnHandle_t h = klab::cudnn_handle();
  KLAB_CHECK_CUDNN(cudnnSetStream(h, l.stream));
  Desc desc(p);
  const float alpha = 1.f, beta = 0.f;              // float scaling factors for f32 and bf16
  KLAB_CHECK_CUDNN(cudnnSoftmaxForward(h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE,
                                      &alpha, desc.d, l.in[0].data, &beta, desc.d, l.out[0].data));
}

void run_softmax_bwd_cudnn(const klab::Launch& l) {
  const Problem& p = l.problem;
  if (p.shape[0] * p.shape[1] == 0) return;
  cudnnHandle_t h = klab::cudnn_handle();
  KLAB_CHECK_CUDNN(cudnnSetStream(h, l.stream));
  Desc desc(p);
  const float alpha = 1.f, beta = 0.f;
  KLAB_CHECK_CUDNN(cudnnSoftmaxBackward(h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE,
                                       &alpha, desc.d, l.in[0].data, desc.d, l.in[1].data, &beta,
                                       desc.d, l.out[0].data));
}

// Whether this cuDNN runs the legacy softmax for a dtype at all (bf16 support of the legacy
// API is not documented): one 1 x 2 softmax on the device, asked once per (direction, dtype),
// so that a refusal shows as "unsupported" with cuDNN's reason instead of as an error.
std::string probe(bool backward, DType t) {
  static std::string answer[2][2];
  static bool asked[2][2] = {};
  const int d = t == DType::bf16 ? 1 : 0, b = backward ? 1 : 0;
  if (asked[b][d]) return answer[b][d];
  asked[b][d] = true;
  try {
    const Problem p{{1, 2}, t, ""};
    void* buf = nullptr;
    KLAB_CHECK_CUDA(cudaMalloc(&buf, 64));
    KLAB_CHECK_CUDA(cudaMemset(buf, 0, 64));
    cudnnHandle_t h = klab::cudnn_handle();
    KLAB_CHECK_CUDNN(cudnnSetStream(h, nullptr));
    Desc desc(p);
    const float alpha = 1.f, beta = 0.f;
    char* c = static_cast<char*>(buf);
    cudnnStatus_t st =
        backward ? cudnnSoftmaxBackward(h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &alpha,
                                        desc.d, c, desc.d, c + 16, &beta, desc.d, c + 32)
                 : cudnnSoftmaxForward(h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &alpha,
                                       desc.d, c, &beta, desc.d, c + 32);
    KLAB_CHECK_CUDA(cudaDeviceSynchronize());
    KLAB_CHECK_CUDA(cudaFree(buf));
    if (st != CUDNN_STATUS_SUCCESS)
      answer[b][d] = std::string("this cuDNN's legacy softmax refuses ") + klab::dtype_name(t) + ": " +
                     cudnnGetErrorString(st);
  } catch (const std::exception& e) {
    answer[b][d] = std::string("cuDNN probe failed: ") + e.what();
  }
  return answer[b][d];
}

std::string supports_cudnn(const Problem& p, bool backward) {
  if (p.variant == "causal") return "cuDNN's legacy softmax has no mask";
  // The legacy descriptors hold int sizes and strides: N * C must fit in 31 bits.
  if (p.shape.at(0) * p.shape.at(1) > std::numeric_limits<int>::max())
    return "more than 2^31 - 1 elements (legacy cuDNN descriptors are 32-bit)";
  return probe(backward, p.dtype);
}

#else

std::string supports_cudnn(const Problem&, bool) {
  return "built without cuDNN (CMake found no cudnn_ops.h / libcudnn; see lessons/04-softmax/CMakeLists.txt)";
}
void run_softmax_rows_cudnn(const klab::Launch&) { KLAB_REQUIRE(false, "built without cuDNN"); }
void run_softmax_bwd_cudnn(const klab::Launch&) { KLAB_REQUIRE(false, "built without cuDNN"); }

#endif

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "softmax_rows", .name = "cudnn",
                                   .summary = "cuDNN cudnnSoftmaxForward (ACCURATE, INSTANCE over "
                                              "[rows, cols, 1, 1])",
                                   .kind = klab::ImplKind::vendor,
                                   .supports = [](const Problem& p) { return supports_cudnn(p, false); },
                                   .run = run_softmax_rows_cudnn}));

KLAB_REGISTER(klab::register_impl({.op = "softmax_bwd", .name = "cudnn",
                                   .summary = "cuDNN cudnnSoftmaxBackward (ACCURATE, INSTANCE over "
                                              "[rows, cols, 1, 1])",
                                   .kind = klab::ImplKind::vendor,
                                   .supports = [](const Problem& p) { return supports_cudnn(p, true); },
                                   .run = run_softmax_bwd_cudnn}));

}  // namespace
