#include "klab/rng.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <thread>
#include <vector>

namespace klab {

std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double uniform01(std::uint64_t seed, std::uint64_t i) {
  // Two rounds so that neighbouring (seed, i) pairs are uncorrelated; top 53 bits.
  return static_cast<double>(mix64(mix64(seed) ^ i) >> 11) * 0x1.0p-53;
}

std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  return mix64(seed * 0x9E3779B97F4A7C15ull + stream + 1);
}

void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& f,
                  std::int64_t work_per_item) {
  constexpr std::int64_t kSerial = 1 << 16;   // elements below which a thread costs more than it saves
  const std::int64_t hw = std::max(1u, std::thread::hardware_concurrency());
  const std::int64_t w = std::max<std::int64_t>(work_per_item, 1);
  // n * w without overflow: past 2^62 it is "a lot" either way.
  const std::int64_t work = n > (std::int64_t{1} << 62) / w ? (std::int64_t{1} << 62) : n * w;
  if (work <= kSerial || hw == 1 || n <= 1) {
    if (n > 0) f(0, n);
    return;
  }
  const std::int64_t parts = std::min({hw, n, (work + kSerial - 1) / kSerial});
  const std::int64_t chunk = (n + parts - 1) / parts;
  std::vector<std::thread> threads;
  for (std::int64_t p = 0; p < parts; ++p) {
    const std::int64_t b = p * chunk, e = std::min(n, b + chunk);
    if (b < e) threads.emplace_back(f, b, e);
  }
  for (auto& t : threads) t.join();
}

void fill_uniform(HostTensor& t, std::uint64_t seed, double lo, double hi) {
  parallel_for(t.numel(), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) t.set(i, lo + (hi - lo) * uniform01(seed, static_cast<std::uint64_t>(i)));
  });
}

void fill_normal(HostTensor& t, std::uint64_t seed, double mean, double stddev) {
  parallel_for(t.numel(), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      // Box-Muller from two independent uniforms of the same counter.
      const auto k = static_cast<std::uint64_t>(i) * 2;
      const double u1 = 1.0 - uniform01(seed, k), u2 = uniform01(seed, k + 1);
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
      t.set(i, mean + stddev * z);
    }
  });
}

void fill_int(HostTensor& t, std::uint64_t seed, std::int64_t lo, std::int64_t hi) {
  const double span = static_cast<double>(hi - lo + 1);
  parallel_for(t.numel(), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const auto v = lo + static_cast<std::int64_t>(std::floor(uniform01(seed, static_cast<std::uint64_t>(i)) * span));
      t.set(i, static_cast<double>(std::min(v, hi)));
    }
  });
}

}  // namespace klab
