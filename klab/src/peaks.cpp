#include "klab/peaks.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/harness.hpp"
#include "klab/report.hpp"
#include "klab/rng.hpp"

namespace klab {

namespace fs = std::filesystem;

static fs::path cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "klab";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "klab";
  return fs::temp_directory_path() / "klab-cache";
}

std::string peaks_cache_path(const std::string& uuid) { return (cache_dir() / ("peaks-" + uuid + ".json")).string(); }

std::optional<Peaks> peaks_from_json(const nlohmann::json& j, const std::string& uuid) {
  Peaks p;
  try {
    p.device_name = j.at("device_name");
    p.device_uuid = j.at("device_uuid");
    p.measured_at = j.at("measured_at");
    p.copy_gbps = j.at("copy_gbps");
    p.read_gbps = j.at("read_gbps");
    p.sgemm_tflops = j.at("sgemm_tflops");
    p.tf32_tflops = j.at("tf32_tflops");
    p.bf16_tflops = j.at("bf16_tflops");
    p.f16_tflops = j.at("f16_tflops");
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // a field missing (a cache from before it existed) or mistyped
  }
  if (p.device_uuid != uuid) return std::nullopt;
  for (double v : {p.copy_gbps, p.read_gbps, p.sgemm_tflops, p.tf32_tflops, p.bf16_tflops, p.f16_tflops})
    if (!(v > 0) || !std::isfinite(v)) return std::nullopt;
  return p;
}

nlohmann::json peaks_json(const Peaks& p) {
  return {{"device_name", p.device_name}, {"device_uuid", p.device_uuid}, {"measured_at", p.measured_at},
          {"copy_gbps", p.copy_gbps},     {"read_gbps", p.read_gbps},     {"sgemm_tflops", p.sgemm_tflops},
          {"tf32_tflops", p.tf32_tflops}, {"bf16_tflops", p.bf16_tflops}, {"f16_tflops", p.f16_tflops}};
}

std::optional<Peaks> load_peaks() {
  const auto& d = device_info();
  if (!d.present) return std::nullopt;
  std::ifstream f(peaks_cache_path(d.uuid));
  if (!f) return std::nullopt;
  // An unreadable or incomplete cache is measured again and rewritten.
  const auto j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? std::nullopt : peaks_from_json(j, d.uuid);
}

namespace {

// Median of `reps` timed runs of f (after two warm-ups), in milliseconds.
template <class F>
double median_ms(F&& f, int reps) {
  cudaEvent_t a, b;
  KLAB_CHECK_CUDA(cudaEventCreate(&a));
  KLAB_CHECK_CUDA(cudaEventCreate(&b));
  f();
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    KLAB_CHECK_CUDA(cudaEventRecord(a));
    f();
    KLAB_CHECK_CUDA(cudaEventRecord(b));
    KLAB_CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    KLAB_CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return stats_of(t).median;
}

DeviceTensor random_device(DType t, std::int64_t n, std::uint64_t seed) {
  HostTensor h(t, {n});
  fill_uniform(h, seed, -1.0, 1.0);  // never time on zeros: they run faster than real data
  return to_device(h);
}

double gemm_tflops(cublasHandle_t h, DType t, bool tf32, int n) {
  const std::int64_t nn = static_cast<std::int64_t>(n) * n;
  auto A = random_device(t, nn, 1), B = random_device(t, nn, 2), C = random_device(t, nn, 3);
  const float alpha = 1.0f, beta = 0.0f;
  KLAB_CHECK_CUBLAS(cublasSetMathMode(h, t == DType::f32 ? (tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH)
                                                          : CUBLAS_DEFAULT_MATH));
  const cudaDataType_t ct = t == DType::f32 ? CUDA_R_32F : t == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const cublasComputeType_t comp = t == DType::f32 ? (tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC)
                                                   : CUBLAS_COMPUTE_32F;
  const double ms = median_ms([&] {
    KLAB_CHECK_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, A.data(), ct, n, B.data(), ct, n,
                                   &beta, C.data(), ct, n, comp, CUBLAS_GEMM_DEFAULT));
  }, n >= 8192 ? 5 : 10);
  return 2.0 * n * static_cast<double>(n) * n / (ms * 1e-3) * 1e-12;
}

}  // namespace

Peaks measure_peaks(bool verbose) {
  require_gpu();
  const auto& d = device_info();
  Peaks p;
  p.device_name = d.name;
  p.device_uuid = d.uuid;
  p.measured_at = utc_now_iso();
  // The bandwidth buffers: 1 GiB, and at least 8x the L2 (20x an H100's 50 MB). What one
  // run leaves in the L2 is the buffer's end, evicted by the next run long before that run,
  // which starts at the beginning, gets there: every run reads cold, from DRAM.
  const std::size_t bytes = std::max(std::size_t{1} << 30, 8 * d.l2_bytes) / 16 * 16;
  // Copy bandwidth: a device-to-device copy, counted as bytes read + bytes written.
  {
    DeviceBuffer a(bytes), b(bytes);
    KLAB_CHECK_CUDA(cudaMemset(a.get(), 1, bytes));
    const double ms = median_ms([&] { KLAB_CHECK_CUDA(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice)); }, 20);
    p.copy_gbps = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) * 1e-9;
    if (verbose) std::fprintf(stderr, "  copy bandwidth   %8.0f GB/s\n", p.copy_gbps);
  }
  // Read bandwidth: a kernel that only reads (read_peak.cu), counted as bytes read: the
  // ceiling of a reduction. A copy interleaves writes with its reads, and DRAM turning its
  // bus around between them costs time, so reads alone run faster than a copy's (read +
  // write) rate, and a reduction judged against the copy could show over 100%.
  {
    DeviceBuffer a(bytes), sink(sizeof(unsigned));
    KLAB_CHECK_CUDA(cudaMemset(a.get(), 1, bytes));
    KLAB_CHECK_CUDA(cudaMemset(sink.get(), 0, sink.size()));
    const double ms = median_ms([&] { read_sweep(a.get(), bytes, static_cast<unsigned*>(sink.get()), nullptr); }, 20);
    p.read_gbps = static_cast<double>(bytes) / (ms * 1e-3) * 1e-9;
    if (verbose) std::fprintf(stderr, "  read bandwidth   %8.0f GB/s\n", p.read_gbps);
  }
  cublasHandle_t h;
  KLAB_CHECK_CUBLAS(cublasCreate(&h));
  try {
    auto best = [&](DType t, bool tf32, const char* name) {
      double r = 0;
      for (int n : {4096, 8192}) r = std::max(r, gemm_tflops(h, t, tf32, n));
      if (verbose) std::fprintf(stderr, "  %-16s %8.1f TFLOP/s\n", name, r);
      return r;
    };
    p.sgemm_tflops = best(DType::f32, false, "cuBLAS fp32");
    p.tf32_tflops = best(DType::f32, true, "cuBLAS tf32");
    p.bf16_tflops = best(DType::bf16, false, "cuBLAS bf16");
    p.f16_tflops = best(DType::f16, false, "cuBLAS fp16");
  } catch (...) {
    cublasDestroy(h);
    throw;
  }
  cublasDestroy(h);

  const nlohmann::json j = peaks_json(p);
  std::error_code ec;
  fs::create_directories(cache_dir(), ec);
  const std::string path = peaks_cache_path(d.uuid);
  std::ofstream f(path);
  if (f) f << j.dump(2) << "\n";
  else std::fprintf(stderr, "klab: warning: could not write the peaks cache %s\n", path.c_str());
  return p;
}

const Peaks& peaks() {
  static const Peaks p = [] {
    if (auto cached = load_peaks()) return *cached;
    std::fprintf(stderr, "klab: measuring this device's peaks once (klab doctor caches them)...\n");
    return measure_peaks(true);
  }();
  return p;
}

std::pair<double, std::string> peak_for(const Peaks& p, Bound b, DType t) {
  if (b == Bound::memory) return {p.copy_gbps, fmt::format("copy {:.0f} GB/s", p.copy_gbps)};
  if (b == Bound::memory_read) return {p.read_gbps, fmt::format("read {:.0f} GB/s", p.read_gbps)};
  if (b == Bound::link) return {0.0, "no peak: the link between GPUs is not measured"};
  switch (t) {
    case DType::bf16: return {p.bf16_tflops, fmt::format("cuBLAS bf16 {:.0f} TFLOP/s", p.bf16_tflops)};
    case DType::f16: return {p.f16_tflops, fmt::format("cuBLAS fp16 {:.0f} TFLOP/s", p.f16_tflops)};
    default: return {p.sgemm_tflops, fmt::format("cuBLAS fp32 {:.1f} TFLOP/s", p.sgemm_tflops)};
  }
}

std::pair<double, std::string> peak_for(Bound b, DType t) {
  if (b == Bound::link) return peak_for(Peaks{}, b, t);   // nothing to measure for it
  return peak_for(peaks(), b, t);
}

}  // namespace klab
