// klab/error.hpp — the one error-macro family of Kernel Lab.
//
// Every CUDA runtime, driver, cuBLAS or argument failure becomes a klab::Error carrying
// the failing call (stringified) and file:line. The CLI catches it at the top and prints
// one line; the harness catches it around each (impl, shape) and reports that case as an
// error instead of letting one bad kernel take the whole run down.
#pragma once

#include <stdexcept>
#include <string>

namespace klab {

// Thrown for every failure the user must see: bad arguments, CUDA errors, bad files.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad request: unknown verb, lesson, op or impl, malformed shape or dtype. Exit code 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

// Thrown when the machine has no usable GPU; the CLI maps it to exit code 77.
class NoGpuError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void throw_error(const std::string& what, const char* call, const char* file,
                              int line);
void check_cuda(int code, const char* call, const char* file, int line);     // cudaError_t
void check_cu(int code, const char* call, const char* file, int line);       // CUresult
void check_cublas(int code, const char* call, const char* file, int line);   // cublasStatus_t
void check_last_launch(const char* file, int line);

}  // namespace klab

// Wrap every runtime call:  KLAB_CHECK_CUDA(cudaMalloc(&p, n));
#define KLAB_CHECK_CUDA(call)                                          \
  do {                                                                 \
    ::klab::check_cuda(static_cast<int>(call), #call, __FILE__, __LINE__); \
  } while (0)

// Driver API (the Triton AOT launchers return CUresult).
#define KLAB_CHECK_CU(call)                                            \
  do {                                                                 \
    ::klab::check_cu(static_cast<int>(call), #call, __FILE__, __LINE__); \
  } while (0)

#define KLAB_CHECK_CUBLAS(call)                                            \
  do {                                                                     \
    ::klab::check_cublas(static_cast<int>(call), #call, __FILE__, __LINE__); \
  } while (0)

// cuDNN (cudnnStatus_t). It expands where it is used, so this header needs no cudnn.h.
#define KLAB_CHECK_CUDNN(call)                                                  \
  do {                                                                          \
    const auto klab_st_ = (call);                                               \
    if (klab_st_ != CUDNN_STATUS_SUCCESS)                                       \
      ::klab::throw_error(cudnnGetErrorString(klab_st_), #call, __FILE__, __LINE__); \
  } while (0)

// cuRAND (curandStatus_t), expanded where it is used like cuDNN's; cuRAND has no message
// function, so the status is shown by number (curand.h lists them).
#define KLAB_CHECK_CURAND(call)                                                          \
  do {                                                                                   \
    const auto klab_st_ = (call);                                                        \
    if (klab_st_ != CURAND_STATUS_SUCCESS)                                               \
      ::klab::throw_error("cuRAND status " + std::to_string(static_cast<int>(klab_st_)), #call, __FILE__, \
                          __LINE__);                                                     \
  } while (0)

// After every <<<...>>> launch: catches bad configurations (too many threads, too much
// shared memory) at the launch that caused them, not at the next synchronisation.
#define KLAB_CHECK_LAUNCH()                          \
  do {                                               \
    ::klab::check_last_launch(__FILE__, __LINE__);   \
  } while (0)

// Argument and invariant checks that are not CUDA calls: KLAB_REQUIRE(n >= 0, "n < 0");
#define KLAB_REQUIRE(cond, msg)                                   \
  do {                                                            \
    if (!(cond)) ::klab::throw_error((msg), #cond, __FILE__, __LINE__); \
  } while (0)
