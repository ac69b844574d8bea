// klab/peaks.hpp — the device's measured ceilings, measured once and cached.
//
// `klab doctor` measures the device-to-device copy bandwidth (bytes read + bytes written)
// and cuBLAS GEMM rates (fp32 pedantic, TF32, bf16, best of 4096^3 and 8192^3), and caches
// them per device UUID in $XDG_CACHE_HOME/klab (default ~/.cache/klab). Benchmarks report
// "% of peak" against these numbers.
#pragma once

#include <optional>
#include <string>

#include "klab/dtype.hpp"
#include "klab/op.hpp"

namespace klab {

struct Peaks {
  std::string device_name, device_uuid, measured_at;
  double copy_gbps = 0;        // device-to-device copy, (read + write) bytes / time
  double sgemm_tflops = 0;     // cuBLAS fp32 pedantic
  double tf32_tflops = 0;      // cuBLAS fp32 with TF32 tensor cores
  double bf16_tflops = 0;      // cuBLAS bf16 in, fp32 accumulate
  double f16_tflops = 0;       // cuBLAS fp16 in, fp32 accumulate
};

std::string peaks_cache_path(const std::string& uuid);
std::optional<Peaks> load_peaks();          // for the current device, if cached
Peaks measure_peaks(bool verbose);          // measures and writes the cache
const Peaks& peaks();                       // cached, or measured now (with a note on stderr)

// The ceiling an op is judged against: copy bandwidth (GB/s) for memory-bound ops, the
// vendor GEMM rate of the dtype (TFLOP/s) for compute-bound ones. Returns {value, label}.
std::pair<double, std::string> peak_for(Bound b, DType t);

}  // namespace klab
