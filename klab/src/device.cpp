#include "klab/device.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "klab/error.hpp"

namespace klab {

const char* gpu_state_name(GpuState s) {
  switch (s) {
    case GpuState::present: return "present";
    case GpuState::no_driver: return "no driver";
    case GpuState::no_device: return "no device";
    case GpuState::driver_too_old: return "driver too old";
    case GpuState::init_failed: return "CUDA initialisation failed";
  }
  return "?";
}

bool gpu_absence_is_skip(GpuState s) { return s == GpuState::no_driver || s == GpuState::no_device; }

GpuState classify_cuda_init(int count_error, int device_count, int driver_version) {
  switch (static_cast<cudaError_t>(count_error)) {
    case cudaSuccess: return device_count > 0 ? GpuState::present : GpuState::no_device;
    case cudaErrorNoDevice: return GpuState::no_device;
    // The toolkit's libcuda stub answers in place of a driver on build machines.
    case cudaErrorStubLibrary: return GpuState::no_driver;
    // The runtime reports a missing driver and an old one with the same error; only an
    // installed driver reports a version.
    case cudaErrorInsufficientDriver: return driver_version > 0 ? GpuState::driver_too_old : GpuState::no_driver;
    default: return GpuState::init_failed;
  }
}

static std::string cuda_version(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

static std::string why_absent(GpuState s, cudaError_t e, int driver_version, int runtime_version) {
  const std::string err = fmt::format("{}: {}", cudaGetErrorName(e), cudaGetErrorString(e));
  switch (s) {
    // The runtime's own wording for a missing driver ("driver version is insufficient")
    // misleads: the name of the error is enough.
    case GpuState::no_driver: return fmt::format("no NVIDIA driver ({})", cudaGetErrorName(e));
    case GpuState::no_device: return e == cudaSuccess ? std::string("the driver sees no CUDA device") : fmt::format("no CUDA device ({})", cudaGetErrorName(e));
    case GpuState::driver_too_old:
      return fmt::format("the NVIDIA driver supports CUDA {}, older than the CUDA {} runtime klab was built with ({}); update the driver",
                         cuda_version(driver_version), cuda_version(runtime_version), cudaGetErrorName(e));
    default: return fmt::format("CUDA initialisation failed ({})", err);
  }
}

static DeviceInfo query() {
  DeviceInfo d;
  cudaDriverGetVersion(&d.driver_version);   // 0 when no driver is installed
  cudaRuntimeGetVersion(&d.runtime_version);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  d.state = classify_cuda_init(e, count, d.driver_version);
  if (d.state != GpuState::present) {
    cudaGetLastError();
    d.why_absent = why_absent(d.state, e, d.driver_version, d.runtime_version);
    return d;
  }
  cudaDeviceProp p{};
  cudaError_t pe = cudaGetDevice(&d.index);
  if (pe == cudaSuccess) pe = cudaGetDeviceProperties(&p, d.index);
  if (pe != cudaSuccess) {
    cudaGetLastError();
    d.state = GpuState::init_failed;
    d.why_absent = why_absent(d.state, pe, d.driver_version, d.runtime_version);
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
  cudaDeviceGetAttribute(&d.mem_bus_bits, cudaDevAttrGlobalMemoryBusWidth, d.index);
  cudaDeviceGetAttribute(&d.mem_clock_khz, cudaDevAttrMemoryClockRate, d.index);
  return d;
}

const DeviceInfo& device_info() {
  static const DeviceInfo info = query();
  return info;
}

void require_gpu(const DeviceInfo& d) {
  if (d.present) return;
  // One line that says what still works, and where the page for this machine is: a user
  // without a GPU has plenty to do (docs/no-gpu.md, which also says how to get a GPU).
  if (gpu_absence_is_skip(d.state))
    throw NoGpuError("no GPU: " + d.why_absent + "; the build, `klab list`, `progress`, `doctor` and the CPU tests work without one: see docs/no-gpu.md");
  throw Error("cannot use the GPU: " + d.why_absent + " (docs/no-gpu.md)");
}

void require_gpu() { require_gpu(device_info()); }

void allow_dynamic_smem(const void* fn, int bytes) {
  static std::mutex m;
  static std::map<std::pair<const void*, int>, int> set;   // (kernel, GPU) -> the size allowed
  int dev = 0;
  KLAB_CHECK_CUDA(cudaGetDevice(&dev));
  std::lock_guard lock(m);
  int& have = set[{fn, dev}];
  if (have >= bytes) return;
  KLAB_CHECK_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  have = bytes;
}

std::int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : 0;
}

}  // namespace klab
