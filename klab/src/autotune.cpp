// klab/src/autotune.cpp — see klab/autotune.hpp.
#include "klab/autotune.hpp"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "klab/error.hpp"

namespace klab {
namespace {

int choose(const Launch& l, const std::string& key, const std::vector<std::string>& names, int fallback,
           const std::function<void(int)>& launch) {
  const int candidates = static_cast<int>(names.size());
  const int forced = l.candidate;
  KLAB_REQUIRE(candidates > 0, "autotune " + key + ": no candidates");
  // A forced candidate is what `klab test` verifies one by one: it must run exactly that
  // configuration, so it neither times the others nor reads or fills the cache.
  if (forced >= 0) {
    KLAB_REQUIRE(forced < candidates, "autotune " + key + ": candidate " + std::to_string(forced) + " of " +
                                          std::to_string(candidates) + " does not exist");
    return forced;
  }
  KLAB_REQUIRE(forced == -1, "autotune " + key + ": candidate " + std::to_string(forced) + " (-1 autotunes)");
  KLAB_REQUIRE(fallback >= 0 && fallback < candidates,
               "autotune " + key + ": fallback " + std::to_string(fallback) + " is not a candidate");
  // The cache keeps each key's candidate list with its winner: two impls that passed the same
  // key (say, two ops whose problems print alike) would otherwise reuse each other's choice,
  // and an index into a shorter list would run a configuration that does not exist.
  static std::mutex mu;
  static std::unordered_map<std::string, std::pair<std::vector<std::string>, int>> best;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = best.find(key);
    if (it != best.end()) {
      KLAB_REQUIRE(it->second.first == names, "autotune " + key +
                                                  ": the key was used before with other candidates (make the key name "
                                                  "the op and the impl)");
      return it->second.second;
    }
  }
  if (candidates == 1) return 0;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  KLAB_CHECK_CUDA(cudaStreamIsCapturing(l.stream, &cap));
  if (cap != cudaStreamCaptureStatusNone) return fallback;  // cannot synchronise inside a capture

  cudaEvent_t t0, t1;
  KLAB_CHECK_CUDA(cudaEventCreate(&t0));
  KLAB_CHECK_CUDA(cudaEventCreate(&t1));
  int winner = fallback;
  float winner_ms = 0;
  std::vector<float> times(static_cast<std::size_t>(candidates), 0.f);
  for (int c = 0; c < candidates; ++c) {
    launch(c);  // warm: first-launch costs (module load, caches) out of the timing
    float best_ms = 0;
    for (int rep = 0; rep < 3; ++rep) {
      KLAB_CHECK_CUDA(cudaEventRecord(t0, l.stream));
      launch(c);
      KLAB_CHECK_CUDA(cudaEventRecord(t1, l.stream));
      KLAB_CHECK_CUDA(cudaEventSynchronize(t1));
      float ms = 0;
      KLAB_CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
      if (rep == 0 || ms < best_ms) best_ms = ms;
    }
    times[static_cast<std::size_t>(c)] = best_ms;
    if (c == 0 || best_ms < winner_ms) winner = c, winner_ms = best_ms;
  }
  if (const char* log = std::getenv("KLAB_AUTOTUNE_LOG"); log && *log && *log != '0') {
    std::fprintf(stderr, "autotune %s:", key.c_str());
    for (std::size_t c = 0; c < names.size(); ++c)
      std::fprintf(stderr, "%s %s %.4f ms", c ? "," : "", names[c].c_str(), times[c]);
    std::fprintf(stderr, " -> %s\n", names[static_cast<std::size_t>(winner)].c_str());
  }
  KLAB_CHECK_CUDA(cudaEventDestroy(t0));
  KLAB_CHECK_CUDA(cudaEventDestroy(t1));
  std::lock_guard<std::mutex> lock(mu);
  best[key] = {names, winner};
  return winner;
}

}  // namespace

int autotune(const Launch& l, const std::string& key, const std::vector<std::string>& names, int fallback,
             const std::function<void(int)>& launch) {
  const int c = choose(l, key, names, fallback, launch);
  if (l.chosen) *l.chosen = names[static_cast<std::size_t>(c)];
  return c;
}

}  // namespace klab
