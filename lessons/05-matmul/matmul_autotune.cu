// lessons/05-matmul/matmul_autotune.cu — the per-shape choice of v8_autotuned,
// v13_mma_autotuned and triton.
//
// Autotuning in one sentence: the fastest tile configuration depends on the shape (a
// 128x128 tile leaves most SMs idle on a 512x512 output; a 64x64 tile wastes bandwidth on
// a 8192^3 one), so the first call for a shape times each candidate and every later call
// reuses the winner. The cache lives for the process (in memory); the key names the op,
// the shape, the dtype and the layout, so a new shape is timed once.
//
// The timing runs on the launch stream during the harness's warm-up launches, never inside
// a timed launch: by the time the harness measures, the choice is a map lookup.
//
// KLAB_AUTOTUNE_LOG=1 prints each choice to stderr (key, every candidate's time, the
// winner), so a bench run can say which configuration it measured.
//
// Which candidate wins depends on timing, so verifying only the winner would leave the
// others unchecked until some shape or GPU picks them. Each autotuned impl therefore names
// its candidates (Impl::candidates, the same list it passes here), `klab test` runs each one
// by index (Launch::candidate), and `--candidate NAME` runs one by hand:
//
//   klab test 05 --op matmul --impl v8_autotuned --candidate 64x64x16
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "klab/error.hpp"
#include "matmul.cuh"

namespace lesson05 {

int autotune(const std::string& key, const std::vector<std::string>& names, int forced, int fallback,
             const std::function<void(int)>& launch, cudaStream_t stream) {
  const int candidates = static_cast<int>(names.size());
  KLAB_REQUIRE(candidates > 0, "autotune " + key + ": no candidates");
  // A forced candidate is what `klab test` verifies one by one: it must run exactly that
  // configuration, so it neither times the others nor reads or fills the cache.
  if (forced >= 0) {
    KLAB_REQUIRE(forced < candidates, "autotune " + key + ": candidate " + std::to_string(forced) + " of " +
                                          std::to_string(candidates) + " does not exist");
    return forced;
  }
  KLAB_REQUIRE(forced == -1, "autotune " + key + ": candidate " + std::to_string(forced) + " (-1 autotunes)");
  static std::mutex mu;
  static std::unordered_map<std::string, int> best;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = best.find(key);
    if (it != best.end()) return it->second;
  }
  if (candidates == 1) return 0;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  KLAB_CHECK_CUDA(cudaStreamIsCapturing(stream, &cap));
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
      KLAB_CHECK_CUDA(cudaEventRecord(t0, stream));
      launch(c);
      KLAB_CHECK_CUDA(cudaEventRecord(t1, stream));
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
  best[key] = winner;
  return winner;
}

}  // namespace lesson05
