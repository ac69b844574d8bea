#include "klab/error.hpp"

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

#include "klab/device.hpp"

namespace klab {

namespace {
std::string where(const char* call, const char* file, int line) {
  std::string f = file;
  const auto slash = f.find_last_of('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  return std::string(" [") + call + " at " + f + ":" + std::to_string(line) + "]";
}
}  // namespace

void throw_error(const std::string& what, const char* call, const char* file, int line) {
  throw Error(what + where(call, file, line));
}

void check_cuda(int code, const char* call, const char* file, int line) {
  if (code == cudaSuccess) return;
  const auto e = static_cast<cudaError_t>(code);
  cudaGetLastError();  // clear a sticky non-fatal error so the next case starts clean
  const std::string msg = std::string("CUDA error ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
  // The exit-code rule of device.hpp: no driver or no device skips (77); a driver too old
  // for the runtime is a failure the user must see.
  int driver_version = 0;
  cudaDriverGetVersion(&driver_version);
  if (gpu_absence_is_skip(classify_cuda_init(code, 0, driver_version))) throw NoGpuError(msg + where(call, file, line));
  throw Error(msg + where(call, file, line));
}

void check_cu(int code, const char* call, const char* file, int line) {
  if (code == CUDA_SUCCESS) return;
  // The driver's own error strings need libcuda; the runtime knows the same numbering.
  const auto e = static_cast<cudaError_t>(code);
  throw Error(std::string("CUDA driver error ") + std::to_string(code) + " (" + cudaGetErrorName(e) +
              ")" + where(call, file, line));
}

void check_cublas(int code, const char* call, const char* file, int line) {
  if (code == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string("cuBLAS error ") +
              cublasGetStatusName(static_cast<cublasStatus_t>(code)) + ": " +
              cublasGetStatusString(static_cast<cublasStatus_t>(code)) + where(call, file, line));
}

void check_last_launch(const char* file, int line) {
  check_cuda(static_cast<int>(cudaGetLastError()), "kernel launch", file, line);
}

}  // namespace klab
