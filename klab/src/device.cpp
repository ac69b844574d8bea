#include "klab/device.hpp"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "klab/error.hpp"

namespace klab {

static DeviceInfo query() {
  DeviceInfo d;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    d.why_absent = e != cudaSuccess ? fmt::format("{} ({})", cudaGetErrorString(e), cudaGetErrorName(e))
                                    : std::string("no CUDA device found");
    return d;
  }
  cudaDeviceProp p{};
  if (cudaGetDevice(&d.index) != cudaSuccess || cudaGetDeviceProperties(&p, d.index) != cudaSuccess) {
    d.why_absent = "cudaGetDeviceProperties failed";
    return d;
  }
  d.present = true;
  d.name = p.name;
  const auto* u = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
  d.uuid = fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                       u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sms = p.multiProcessorCount;
  d.global_mem = p.totalGlobalMem;
  d.l2_bytes = static_cast<std::size_t>(p.l2CacheSize);
  d.smem_per_block_optin = p.sharedMemPerBlockOptin;
  d.smem_per_sm = p.sharedMemPerMultiprocessor;
  cudaDriverGetVersion(&d.driver_version);
  cudaRuntimeGetVersion(&d.runtime_version);
  cudaDeviceGetAttribute(&d.mem_bus_bits, cudaDevAttrGlobalMemoryBusWidth, d.index);
  cudaDeviceGetAttribute(&d.mem_clock_khz, cudaDevAttrMemoryClockRate, d.index);
  return d;
}

const DeviceInfo& device_info() {
  static const DeviceInfo info = query();
  return info;
}

void require_gpu() {
  const auto& d = device_info();
  if (!d.present) throw NoGpuError("no GPU available: " + d.why_absent);
}

}  // namespace klab
