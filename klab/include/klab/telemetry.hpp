// klab/telemetry.hpp — what the GPU's clocks and power did during a timed window.
//
// A tensor-core kernel can reach the board's power limit and clock down (the H100 caps at
// 700 W); a median taken while the clock dropped is not the kernel's speed. The bench
// samples the SM clock, the power draw and NVML's clock-event reasons while it times each
// row, stores them in the JSON, and flags a row whose window saw a power or thermal event.
// NVML is loaded at run time (dlopen), so the build and the CPU tests need no driver.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace klab {

struct Telemetry {
  bool available = false;          // false: no NVML here (why_unavailable says why)
  std::string why_unavailable;
  int samples = 0;
  double sm_mhz_min = 0, sm_mhz_median = 0, sm_mhz_max = 0;
  double power_w_median = 0, power_w_max = 0;
  std::vector<std::string> events; // clock-event reasons seen: "sw_power_cap", "hw_slowdown", ...
  bool throttled = false;          // a power or thermal clock event in the window
};

// NVML's clock-event reasons bitmask (nvmlDeviceGetCurrentClocksEventReasons) as names, in
// bit order: "gpu_idle", "applications_clocks", "sw_power_cap", "hw_slowdown", "sync_boost",
// "sw_thermal", "hw_thermal", "hw_power_brake", "display_clock"; a bit NVML may add later
// is named by its value ("reason_0x200") rather than dropped.
std::vector<std::string> clock_event_names(unsigned long long reasons);
// True for the events that lower the clock for power or heat (sw_power_cap, hw_slowdown,
// sw_thermal, hw_thermal, hw_power_brake); false for idle, application clocks, sync boost.
bool is_throttle_event(const std::string& name);

// The GPU to sample, as NVML finds it. CUDA's device index is not NVML's (CUDA_VISIBLE_DEVICES
// renumbers CUDA's devices, not NVML's), so the sampler looks the device up by its UUID
// ("GPU-8f2c..."), else by its PCI bus id ("0000:1b:00.0").
struct NvmlTarget {
  std::string uuid, pci_bus_id;
};

// Samples on a background thread between start() and stop(), every ~10 ms plus once at
// each end (so a short window still gets samples).
class TelemetrySampler {
 public:
  explicit TelemetrySampler(int device_index);   // that CUDA device, through libnvidia-ml.so.1
  // A given device and NVML library: tests pass a fake NVML, or a library that does not exist.
  TelemetrySampler(NvmlTarget target, const std::string& nvml_library);
  ~TelemetrySampler();
  TelemetrySampler(const TelemetrySampler&) = delete;
  TelemetrySampler& operator=(const TelemetrySampler&) = delete;
  void start();
  Telemetry stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace klab
