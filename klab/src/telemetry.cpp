// Placeholder until NVML sampling lands: reports telemetry as unavailable.
#include "klab/telemetry.hpp"

namespace klab {

struct TelemetrySampler::Impl {};
TelemetrySampler::TelemetrySampler(int) : impl_(std::make_unique<Impl>()) {}
TelemetrySampler::~TelemetrySampler() = default;
void TelemetrySampler::start() {}
Telemetry TelemetrySampler::stop() {
  Telemetry t;
  t.why_unavailable = "not implemented";
  return t;
}

}  // namespace klab
