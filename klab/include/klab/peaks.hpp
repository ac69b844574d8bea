// klab/peaks.hpp — the device's measured ceilings, measured once and cached.
//
// `klab doctor` measures the device-to-device copy bandwidth (bytes read + bytes written),
// the read bandwidth (a kernel that only reads) and cuBLAS GEMM rates (fp32 pedantic, TF32,
// bf16, fp16, best of 4096^3 and 8192^3), and caches them per device UUID in
// $XDG_CACHE_HOME/klab (default ~/.cache/klab). Benchmarks report "% of peak" against these
// numbers. Each peak is the median of repeated runs after warm-up (20 for the bandwidths),
// as a kernel's time is the median of its launches: a percentage compares like with like.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <cuda_runtime_api.h>
#include <nlohmann/json_fwd.hpp>

#include "klab/dtype.hpp"
#include "klab/op.hpp"

namespace klab {

struct Peaks {
  std::string device_name, device_uuid, measured_at;
  double copy_gbps = 0;        // device-to-device copy, (read + write) bytes / time
  double read_gbps = 0;        // a read-only kernel, bytes read / time
  double sgemm_tflops = 0;     // cuBLAS fp32 pedantic
  double tf32_tflops = 0;      // cuBLAS fp32 with TF32 tensor cores
  double bf16_tflops = 0;      // cuBLAS bf16 in, fp32 accumulate
  double f16_tflops = 0;       // cuBLAS fp16 in, fp32 accumulate
};

std::string peaks_cache_path(const std::string& uuid);
std::optional<Peaks> load_peaks();          // for the current device, if cached
// A cache file's peaks when they are for device `uuid` and complete: a file written before
// a peak existed (no read_gbps), or with a peak <= 0, gives nullopt and is measured again,
// so that no percentage is ever taken of a missing peak.
std::optional<Peaks> peaks_from_json(const nlohmann::json& j, const std::string& uuid);
nlohmann::json peaks_json(const Peaks& p);  // what the cache file holds
Peaks measure_peaks(bool verbose);          // measures and writes the cache
const Peaks& peaks();                       // cached, or measured now (with a note on stderr)

// The ceiling an op is judged against: the copy bandwidth (GB/s) for memory-bound ops, the
// read bandwidth for read-only ones (Bound::memory_read), the vendor GEMM rate of the dtype
// (TFLOP/s) for compute-bound ones. Returns {value, label}; the label names the peak
// ("copy 2950 GB/s", "read 3210 GB/s", "cuBLAS bf16 744 TFLOP/s").
std::pair<double, std::string> peak_for(Bound b, DType t);
std::pair<double, std::string> peak_for(const Peaks& p, Bound b, DType t);

// The read-bandwidth kernel (read_peak.cu): reads `bytes` (a multiple of 16) at `buf` once
// with every resident thread keeping several 16-byte loads in flight; its only store, to
// `sink`, depends on every value read, so the compiler keeps every load, and the data
// (nonzero bytes) never triggers it.
void read_sweep(const void* buf, std::size_t bytes, unsigned* sink, cudaStream_t s);

}  // namespace klab
