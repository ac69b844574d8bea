// klab/device.hpp — what GPU (if any) this process runs on.
#pragma once

#include <cstddef>
#include <string>

namespace klab {

struct DeviceInfo {
  bool present = false;
  std::string why_absent;            // when !present: the CUDA error, in words
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

// Throws NoGpuError with the reason when no GPU is present.
void require_gpu();

}  // namespace klab
