// klab/device.hpp — what GPU (if any) this process runs on, and why not when none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace klab {

// Why a GPU can or cannot be used. The first two absences are the machine's nature (a CI
// runner, a laptop): verbs that need a GPU skip with exit 77. The others are a broken
// installation the user must hear about: exit 1 with the CUDA error named.
enum class GpuState {
  present,
  no_driver,        // libcuda.so.1 absent, or only the toolkit's stub of it
  no_device,        // a driver, but no device (or CUDA_VISIBLE_DEVICES hides them all)
  driver_too_old,   // a driver older than the CUDA runtime klab was built with
  init_failed,      // any other CUDA initialisation failure
};
const char* gpu_state_name(GpuState s);          // "no driver", "driver too old", ...
bool gpu_absence_is_skip(GpuState s);            // no_driver, no_device: exit 77

// The state from what the CUDA runtime reports at start-up: cudaGetDeviceCount's result
// and count, and cudaDriverGetVersion's version (0 when no driver is installed). Pure, so
// that every branch is tested without the machine it describes.
GpuState classify_cuda_init(int count_error, int device_count, int driver_version);

struct DeviceInfo {
  bool present = false;
  GpuState state = GpuState::no_device;
  std::string why_absent;            // when !present: the CUDA error and what it means, in words
  int index = 0;
  std::string name, uuid;
  int cc_major = 0, cc_minor = 0;
  int sms = 0;
  std::size_t global_mem = 0, l2_bytes = 0, smem_per_block_optin = 0, smem_per_sm = 0;
  int driver_version = 0, runtime_version = 0;
  int mem_clock_khz = 0, mem_bus_bits = 0;
  int cc() const { return cc_major * 10 + cc_minor; }
};

// Queried once and cached. Never throws: absence is a state, not an error.
const DeviceInfo& device_info();

// Returns when a GPU is present. Throws NoGpuError (exit 77) when there is no driver or
// no device, and klab::Error naming the CUDA error (exit 1) for a driver too old or any
// other initialisation failure. Both lines point to docs/no-gpu.md, which explains them
// (tests/CMakeLists.txt: cli.no_device, cli.stub_driver, cli.driver_too_old, ...).
void require_gpu();
void require_gpu(const DeviceInfo& d);

// Lets kernel `fn` launch with up to `bytes` of dynamic shared memory on the current GPU
// (cudaFuncAttributeMaxDynamicSharedMemorySize; above 48 KB a kernel must opt in). The
// attribute belongs to the GPU it was set on: a launcher that set it once for the process
// would fail on the second GPU of a multi-GPU step (lesson 16). Set once per kernel and GPU,
// raised when a larger size is asked; thread-safe.
void allow_dynamic_smem(const void* fn, int bytes);

// Physical memory of this machine in bytes (0 if it cannot be read): what --shape is
// checked against before anything is allocated.
std::int64_t host_memory_bytes();

}  // namespace klab
