/* A stand-in for libnvidia-ml.so.1 with one GPU, loaded by path by the telemetry tests
 * (tests/test_metrics.cpp), so that the sampler's whole path runs without a driver: finding
 * the device, the sampling thread, the clock, power and clock-event readings.
 *   FAKE_NVML_INIT_RESULT  what nvmlInit_v2 returns (default 0, NVML_SUCCESS)
 *   FAKE_NVML_UUID         the UUID of its GPU (default GPU-fake)
 *   FAKE_NVML_PCI          its PCI bus id (default 00000000:01:00.0)
 *   FAKE_NVML_SM_MHZ       SM clocks, comma-separated, returned in turn (default 1980)
 *   FAKE_NVML_POWER_MW     power readings in milliwatts, in turn (default 300000)
 *   FAKE_NVML_REASONS      clock-event reason masks, in turn (default 0; hex, as 0x4, works)
 * Built twice: as it is, exporting nvmlDeviceGetCurrentClocksEventReasons, and with
 * FAKE_NVML_OLD_NAME, exporting the name that drivers before the rename have,
 * nvmlDeviceGetCurrentClocksThrottleReasons. */
#include <stdlib.h>
#include <string.h>

typedef struct nvmlDevice_st* nvmlDevice_t;

static struct nvmlDevice_st {
  int unused;
} the_gpu;

static const char* env_or(const char* name, const char* fallback) {
  const char* v = getenv(name);
  return v && *v ? v : fallback;
}

/* The call-th entry of a comma-separated list, cycling. */
static unsigned long long nth(const char* list, unsigned call) {
  unsigned count = 1;
  for (const char* c = list; *c; ++c) count += *c == ',';
  const char* p = list;
  for (unsigned i = call % count; i > 0; --i) p = strchr(p, ',') + 1;
  return strtoull(p, NULL, 0);
}

static unsigned clock_calls, power_calls, reason_calls;

/* For the tests: how many clock readings were taken (none after a sampler's stop()). */
unsigned fake_nvml_clock_calls(void) { return __atomic_load_n(&clock_calls, __ATOMIC_RELAXED); }

int nvmlInit_v2(void) { return atoi(env_or("FAKE_NVML_INIT_RESULT", "0")); }
int nvmlShutdown(void) { return 0; }
const char* nvmlErrorString(int r) { return r == 6 ? "Not Found" : "Fake NVML error"; }

int nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* dev) {
  if (strcmp(uuid, env_or("FAKE_NVML_UUID", "GPU-fake")) != 0) return 6; /* NVML_ERROR_NOT_FOUND */
  *dev = &the_gpu;
  return 0;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, nvmlDevice_t* dev) {
  if (strcmp(bus, env_or("FAKE_NVML_PCI", "00000000:01:00.0")) != 0) return 6;
  *dev = &the_gpu;
  return 0;
}

int nvmlDeviceGetClockInfo(nvmlDevice_t dev, int type, unsigned* mhz) {
  if (dev != &the_gpu || type != 1) return 2; /* NVML_ERROR_INVALID_ARGUMENT; 1 = NVML_CLOCK_SM */
  *mhz = (unsigned)nth(env_or("FAKE_NVML_SM_MHZ", "1980"), __atomic_fetch_add(&clock_calls, 1, __ATOMIC_RELAXED));
  return 0;
}

int nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned* mw) {
  if (dev != &the_gpu) return 2;
  *mw = (unsigned)nth(env_or("FAKE_NVML_POWER_MW", "300000"), __atomic_fetch_add(&power_calls, 1, __ATOMIC_RELAXED));
  return 0;
}

static int reasons(nvmlDevice_t dev, unsigned long long* mask) {
  if (dev != &the_gpu) return 2;
  *mask = nth(env_or("FAKE_NVML_REASONS", "0"), __atomic_fetch_add(&reason_calls, 1, __ATOMIC_RELAXED));
  return 0;
}

#ifdef FAKE_NVML_OLD_NAME
int nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t dev, unsigned long long* mask) { return reasons(dev, mask); }
#else
int nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t dev, unsigned long long* mask) { return reasons(dev, mask); }
#endif
