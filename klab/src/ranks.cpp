// The ranks of a multi-GPU job (klab/ranks.hpp).
#include "klab/ranks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <utility>

#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/harness.hpp"

namespace klab {

int gpu_count() {
  static const int n = [] {
    int c = 0;
    if (cudaGetDeviceCount(&c) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return c;
  }();
  return n;
}

int rank_device(int r) {
  const int g = gpu_count();
  return g > 0 ? r % g : 0;
}

std::string require_gpus(int ranks) {
  const int have = gpu_count();
  if (ranks <= have) return "";
  if (have == 0) return fmt::format("needs {} GPUs; this machine has 0", ranks);
  return fmt::format("needs {} GPUs; this machine has {} (the shapes with {} rank{} run here)", ranks, have,
                     have == 1 ? "1" : fmt::format("up to {}", have), have == 1 ? "" : "s");
}

std::string require_peer_access(int ranks) {
  if (std::string why = require_gpus(ranks); !why.empty()) return why;
  for (int a = 0; a < ranks; ++a)
    for (int b = 0; b < ranks; ++b) {
      if (a == b) continue;
      int ok = 0;
      KLAB_CHECK_CUDA(cudaDeviceCanAccessPeer(&ok, a, b));
      if (!ok) return fmt::format("GPU {} cannot load from GPU {}'s memory (no peer access between them)", a, b);
    }
  return "";
}

DeviceScope::DeviceScope(int d) {
  KLAB_CHECK_CUDA(cudaGetDevice(&previous_));
  KLAB_CHECK_CUDA(cudaSetDevice(d));
}
DeviceScope::~DeviceScope() { cudaSetDevice(previous_); }

Ranks& Ranks::of(int n) {
  static std::map<int, std::unique_ptr<Ranks>> made;
  KLAB_REQUIRE(n >= 1, "Ranks::of: at least one rank");
  if (gpu_count() == 0) throw Error("no GPU");
  auto& r = made[n];
  if (!r) r.reset(new Ranks(n));
  return *r;
}

Ranks::Ranks(int n) : streams_(n, nullptr), events_(n, nullptr), flush_(n), sink_(n) {
  const int gpus = std::min(n, gpu_count());
  for (int r = 0; r < n; ++r) {
    DeviceScope d(rank_device(r));
    if (r > 0) KLAB_CHECK_CUDA(cudaStreamCreateWithFlags(&streams_[r], cudaStreamNonBlocking));
    KLAB_CHECK_CUDA(cudaEventCreateWithFlags(&events_[r], cudaEventDisableTiming));
  }
  // Peer access between every pair of the GPUs in use, and an L2-flush buffer on each but
  // GPU 0 (held by the rank that runs there first, rank g of GPU g).
  const std::size_t flush_bytes = std::max<std::size_t>(2 * device_info().l2_bytes, std::size_t{64} << 20);
  static std::set<std::pair<int, int>> enabled;   // once per pair and process: a second
                                                  // enable is an error (a sanitizer reports it)
  for (int g = 0; g < gpus; ++g) {
    DeviceScope d(g);
    for (int q = 0; q < gpus; ++q) {
      int ok = 0;
      if (q == g || enabled.count({g, q}) || cudaDeviceCanAccessPeer(&ok, g, q) != cudaSuccess || !ok) continue;
      KLAB_CHECK_CUDA(cudaDeviceEnablePeerAccess(q, 0));
      enabled.insert({g, q});
    }
    if (g == 0) continue;
    flush_[g] = DeviceBuffer(flush_bytes);
    sink_[g] = DeviceBuffer(sizeof(unsigned));
    KLAB_CHECK_CUDA(cudaMemset(flush_[g].get(), 0, flush_bytes));   // the read flush expects zeros
    KLAB_CHECK_CUDA(cudaMemset(sink_[g].get(), 0, sizeof(unsigned)));
    KLAB_CHECK_CUDA(cudaDeviceSynchronize());
  }
}

void Ranks::record(cudaStream_t launch) {
  for (int r = 0; r < size(); ++r) {
    DeviceScope d(rank_device(r));
    KLAB_CHECK_CUDA(cudaEventRecord(events_[r], stream(r, launch)));
  }
}

void Ranks::fork(cudaStream_t launch) {
  {
    DeviceScope d(0);
    KLAB_CHECK_CUDA(cudaEventRecord(events_[0], launch));
  }
  for (int r = 1; r < size(); ++r) KLAB_CHECK_CUDA(cudaStreamWaitEvent(streams_[r], events_[0], 0));
}

void Ranks::join(cudaStream_t launch) {
  for (int r = 1; r < size(); ++r) {
    DeviceScope d(rank_device(r));
    KLAB_CHECK_CUDA(cudaEventRecord(events_[r], streams_[r]));
  }
  for (int r = 1; r < size(); ++r) KLAB_CHECK_CUDA(cudaStreamWaitEvent(launch, events_[r], 0));
}

void Ranks::each(const std::function<void(int r)>& f) {
  const int n = size();
  stopping_.store(false, std::memory_order_release);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  auto run = [&](int r) {
    try {
      DeviceScope d(rank_device(r));
      f(r);
    } catch (...) {
      errors[static_cast<std::size_t>(r)] = std::current_exception();
      stopping_.store(true, std::memory_order_release);
    }
  };
  // A thread a call: starting one costs tens of microseconds, against milliseconds of work.
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) threads.emplace_back(run, r);
  run(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

void Ranks::ring_step(cudaStream_t launch) {
  const int n = size();
  if (n == 1) return;
  record(launch);
  // Every wait is enqueued before any event is recorded again, so each waits for the
  // record above (a wait binds to the event's latest record when it is enqueued).
  for (int r = 0; r < n; ++r) KLAB_CHECK_CUDA(cudaStreamWaitEvent(stream(r, launch), events_[(r + n - 1) % n], 0));
}

void Ranks::flush_l2(cudaStream_t launch) {
  if (size() == 1) return;
  fork(launch);
  for (int g = 1; g < std::min(size(), gpu_count()); ++g) {   // rank g runs on GPU g
    DeviceScope d(g);
    l2_flush_read(flush_[g].get(), flush_[g].size(), static_cast<unsigned*>(sink_[g].get()), streams_[g]);
  }
  join(launch);
}

void* RankBuffers::get(int r, std::size_t bytes) {
  if (bufs_.size() <= static_cast<std::size_t>(r)) bufs_.resize(r + 1);
  if (bufs_[r].size() < bytes) {
    DeviceScope d(rank_device(r));
    bufs_[r] = DeviceBuffer();   // free the old one first: a 1 GB message needs room for its successor
    bufs_[r] = DeviceBuffer(bytes);
  }
  return bufs_[r].get();
}

}  // namespace klab
