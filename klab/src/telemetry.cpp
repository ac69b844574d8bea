// klab/src/telemetry.cpp — the SM clock, power and clock-event reasons of a timed window,
// sampled through NVML (telemetry.hpp).
//
// NVML is opened with dlopen, never linked: a binary linked against libnvidia-ml.so.1 does
// not start on a machine without the NVIDIA driver (CI, a laptop), where `klab list`,
// `doctor` and the CPU tests must run. So the few NVML types, constants and functions used
// are declared here, with the values of NVML's header (nvml.h, API version 13).
#include "klab/telemetry.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "klab/device.hpp"
#include "klab/harness.hpp"

namespace klab {
namespace {

// ---- the NVML declarations used (nvml.h) --------------------------------------------------

using nvmlReturn_t = int;                    // enum nvmlReturn_enum
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;     // NVML_SUCCESS
constexpr int kNvmlClockSm = 1;              // NVML_CLOCK_SM of enum nvmlClockType_enum

struct ClockEvent {
  unsigned long long bit;
  const char* name;
  bool throttle;                             // lowers the clock for power or heat
};
// The nvmlClocksEventReason* bits (nvmlClocksThrottleReason* before the rename).
constexpr ClockEvent kClockEvents[] = {
    {0x1, "gpu_idle", false},                // GpuIdle: nothing running
    {0x2, "applications_clocks", false},     // ApplicationsClocksSetting: clocks set by the user
    {0x4, "sw_power_cap", true},             // SwPowerCap: the board's power limit
    {0x8, "hw_slowdown", true},              // HwSlowdown: thermal or power brake, in hardware
    {0x10, "sync_boost", false},             // SyncBoost: held to a group's clock
    {0x20, "sw_thermal", true},              // SwThermalSlowdown
    {0x40, "hw_thermal", true},              // HwThermalSlowdown
    {0x80, "hw_power_brake", true},          // HwPowerBrakeSlowdown: the power supply's brake
    {0x100, "display_clock", false},         // DisplayClockSetting
};

struct NvmlApi {
  nvmlReturn_t (*init)() = nullptr;          // nvmlInit_v2
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*by_pci_bus_id)(const char*, nvmlDevice_t*) = nullptr;   // ..._v2
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned*) = nullptr;         // MHz
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned*) = nullptr;              // milliwatts
  nvmlReturn_t (*reasons)(nvmlDevice_t, unsigned long long*) = nullptr;
};

struct Sample {
  double sm_mhz = -1, power_w = -1;          // -1: not read
  unsigned long long reasons = 0;
};

constexpr auto kPeriod = std::chrono::milliseconds(10);

// The CUDA device as NVML can find it. Under MIG the CUDA UUID names the instance, which
// NVML's UUID lookup may not give clocks for; the PCI bus id then finds the whole GPU.
NvmlTarget nvml_target_of(int device_index) {
  NvmlTarget t;
  const DeviceInfo& d = device_info();
  if (!d.present) return t;
  if (d.index == device_index) t.uuid = d.uuid;
  char bus[32] = {};                         // "0000:1b:00.0"
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device_index) == cudaSuccess) t.pci_bus_id = bus;
  else cudaGetLastError();
  return t;
}

}  // namespace

std::vector<std::string> clock_event_names(unsigned long long reasons) {
  std::vector<std::string> names;
  for (const auto& e : kClockEvents)
    if (reasons & e.bit) names.push_back(e.name);
  for (int b = 0; b < 64; ++b) {
    const unsigned long long bit = 1ull << b;
    bool known = false;
    for (const auto& e : kClockEvents) known = known || e.bit == bit;
    if ((reasons & bit) && !known) names.push_back(fmt::format("reason_0x{:x}", bit));
  }
  return names;
}

bool is_throttle_event(const std::string& name) {
  for (const auto& e : kClockEvents)
    if (name == e.name) return e.throttle;
  return false;
}

struct TelemetrySampler::Impl {
  std::string why;                           // empty: NVML is open and the device found
  void* lib = nullptr;
  NvmlApi api;
  bool initialised = false;
  nvmlDevice_t dev = nullptr;

  // start() and stop() run on the caller's thread, `thread` between them: each touches
  // `samples` only while the others cannot (start() before launching it, stop() after
  // joining it), so only the stop flag needs the mutex.
  std::thread thread;
  std::mutex m;
  std::condition_variable cv;
  bool stopping = false;
  std::vector<Sample> samples;
  nvmlReturn_t last_error = kNvmlSuccess;

  ~Impl() {
    halt();
    if (initialised) api.shutdown();         // NVML counts inits: this ends only ours
    if (lib) dlclose(lib);
  }

  template <class Fn>
  bool resolve(Fn& fn, const char* name) {
    fn = reinterpret_cast<Fn>(dlsym(lib, name));
    return fn != nullptr;
  }

  std::string error_name(nvmlReturn_t r) const {
    const char* s = api.error_string ? api.error_string(r) : nullptr;
    return s ? fmt::format("{} (NVML error {})", s, r) : fmt::format("NVML error {}", r);
  }

  // "" when the library is loaded, initialised and knows the target; else why not.
  std::string open(const std::string& library, const NvmlTarget& target) {
    lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      return fmt::format("NVML not loaded: {}", e ? e : library);
    }
    const char* missing = nullptr;
    if (!resolve(api.init, "nvmlInit_v2")) missing = "nvmlInit_v2";
    else if (!resolve(api.shutdown, "nvmlShutdown")) missing = "nvmlShutdown";
    else if (!resolve(api.error_string, "nvmlErrorString")) missing = "nvmlErrorString";
    else if (!resolve(api.by_uuid, "nvmlDeviceGetHandleByUUID")) missing = "nvmlDeviceGetHandleByUUID";
    else if (!resolve(api.by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2")) missing = "nvmlDeviceGetHandleByPciBusId_v2";
    else if (!resolve(api.clock, "nvmlDeviceGetClockInfo")) missing = "nvmlDeviceGetClockInfo";
    else if (!resolve(api.power, "nvmlDeviceGetPowerUsage")) missing = "nvmlDeviceGetPowerUsage";
    // Drivers before the rename export the same function as ...ClocksThrottleReasons.
    else if (!resolve(api.reasons, "nvmlDeviceGetCurrentClocksEventReasons") &&
             !resolve(api.reasons, "nvmlDeviceGetCurrentClocksThrottleReasons"))
      missing = "nvmlDeviceGetCurrentClocksEventReasons";
    if (missing) return fmt::format("{} has no {}", library, missing);
    if (const nvmlReturn_t r = api.init(); r != kNvmlSuccess) return "nvmlInit failed: " + error_name(r);
    initialised = true;
    if (!target.uuid.empty() && api.by_uuid(target.uuid.c_str(), &dev) == kNvmlSuccess) return "";
    if (!target.pci_bus_id.empty() && api.by_pci_bus_id(target.pci_bus_id.c_str(), &dev) == kNvmlSuccess) return "";
    if (target.uuid.empty() && target.pci_bus_id.empty()) return "no CUDA device to sample";
    return fmt::format("NVML finds no device with UUID '{}' or PCI bus id '{}'", target.uuid, target.pci_bus_id);
  }

  void take() {
    Sample s;
    unsigned v = 0;
    if (const nvmlReturn_t r = api.clock(dev, kNvmlClockSm, &v); r == kNvmlSuccess) s.sm_mhz = v;
    else last_error = r;
    if (const nvmlReturn_t r = api.power(dev, &v); r == kNvmlSuccess) s.power_w = v * 1e-3;
    else last_error = r;
    if (const nvmlReturn_t r = api.reasons(dev, &s.reasons); r != kNvmlSuccess) last_error = r;
    samples.push_back(s);
  }

  // Sleeps on the condition variable between samples: no busy loop, and stop() wakes it at once.
  void run() {
    std::unique_lock<std::mutex> lock(m);
    while (!cv.wait_for(lock, kPeriod, [this] { return stopping; })) {
      lock.unlock();
      take();
      lock.lock();
    }
  }

  void halt() {
    {
      std::lock_guard<std::mutex> lock(m);
      stopping = true;
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
  }

  Telemetry summary() const {
    Telemetry t;
    std::vector<double> mhz, watts;
    unsigned long long reasons = 0;
    for (const Sample& s : samples) {
      if (s.sm_mhz >= 0) mhz.push_back(s.sm_mhz);
      if (s.power_w >= 0) watts.push_back(s.power_w);
      reasons |= s.reasons;
    }
    t.samples = static_cast<int>(samples.size());
    if (mhz.empty() && watts.empty() && last_error != kNvmlSuccess) {
      t.why_unavailable = "NVML gave no clock or power reading: " + error_name(last_error);
      return t;
    }
    t.available = true;
    const Stats c = stats_of(mhz), p = stats_of(watts);
    t.sm_mhz_min = c.min;
    t.sm_mhz_median = c.median;
    t.sm_mhz_max = c.max;
    t.power_w_median = p.median;
    t.power_w_max = p.max;
    t.events = clock_event_names(reasons);
    for (const auto& e : t.events) t.throttled = t.throttled || is_throttle_event(e);
    return t;
  }
};

TelemetrySampler::TelemetrySampler(int device_index)
    : TelemetrySampler(nvml_target_of(device_index), "libnvidia-ml.so.1") {}

TelemetrySampler::TelemetrySampler(NvmlTarget target, const std::string& nvml_library)
    : impl_(std::make_unique<Impl>()) {
  impl_->why = impl_->open(nvml_library, target);
}

TelemetrySampler::~TelemetrySampler() = default;

void TelemetrySampler::start() {
  Impl& s = *impl_;
  s.halt();                                  // a second start() drops the window before it
  s.samples.clear();
  s.last_error = kNvmlSuccess;
  if (!s.why.empty()) return;
  s.take();                                  // one at the start: a short window has samples
  s.stopping = false;                        // the thread is not running: no lock needed
  s.thread = std::thread([&s] { s.run(); });
}

Telemetry TelemetrySampler::stop() {
  Impl& s = *impl_;
  const bool running = s.thread.joinable();
  s.halt();
  if (!s.why.empty() || !running) {
    Telemetry t;
    t.why_unavailable = !s.why.empty() ? s.why : "no window was sampled (stop() without start())";
    return t;
  }
  s.take();                                  // and one at the end
  return s.summary();
}

}  // namespace klab
