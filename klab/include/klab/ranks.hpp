// klab/ranks.hpp — the GPUs of this process as the ranks of one job (lesson 16).
//
// Rank r is CUDA device r. Rank 0 is the device the harness runs on, and its work goes on
// the launch stream itself. A job of more ranks than GPUs wraps around (rank r on GPU
// r mod G): correct, since every rank has its own stream and buffers, but not a timing of
// R GPUs; impls that time report such shapes unsupported (require_gpus), and lesson 16's
// exercise uses it so that one GPU can grade a ring of any size. One host thread drives every rank: it enqueues each rank's work
// on that rank's stream, with that rank's device current (DeviceScope), and events order the
// ranks: fork (every rank starts after what the launch stream has so far), join (the launch
// stream waits for every rank, so the harness's stop event covers them all) and ring_step
// (each rank waits for the previous step of rank r−1, the neighbour it reads). A CUDA event may be waited
// on from a stream of another device, which is all the cross-GPU ordering needs.
//
//   klab::Ranks& R = klab::Ranks::of(2);
//   R.fork(l.stream);
//   for (int r = 0; r < R.size(); ++r) {
//     klab::DeviceScope d(klab::rank_device(r));
//     kernel<<<g, b, 0, R.stream(r, l.stream)>>>(...);
//   }
//   R.join(l.stream);
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "klab/tensor.hpp"

namespace klab {

int gpu_count();                              // CUDA devices this process sees; 0 without one
int rank_device(int r);                       // the GPU of rank r: r mod gpu_count()
std::string require_gpus(int ranks);          // "" or "needs 2 GPUs; this machine has 1"
std::string require_peer_access(int ranks);   // "" or which pair of GPUs cannot map each other

// Makes device d current for its scope, then restores the one that was.
class DeviceScope {
 public:
  explicit DeviceScope(int d);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

// Streams and events for each of n ranks and an L2-flush buffer on each GPU they use, made on
// first use and kept for the process; peer access is enabled both ways between every pair of
// those GPUs that allows it. Enqueue a rank's work with its GPU current (DeviceScope).
class Ranks {
 public:
  static Ranks& of(int n);
  int size() const { return static_cast<int>(streams_.size()); }
  cudaStream_t stream(int r, cudaStream_t launch) const { return r == 0 ? launch : streams_[r]; }
  void fork(cudaStream_t launch);        // every rank waits for the launch stream's work so far
  void join(cudaStream_t launch);        // the launch stream waits for every rank's work so far
  void ring_step(cudaStream_t launch);   // each rank waits for rank r-1's work so far
  // Evicts the L2 of every GPU in use but GPU 0 (the harness flushes that one), and has the
  // launch stream wait for it: a timed launch finds no rank's data warm.
  void flush_l2(cudaStream_t launch);
  // Runs f(r) for every rank at once, each on a host thread of its own with its GPU current
  // (rank 0 on the calling thread), and returns when all have returned: one thread a GPU, so
  // that enqueuing a rank's work never waits for another's. An exception in any rank is
  // rethrown, the lowest rank's, after every thread has finished; from the first one on,
  // stopping() is true, and a rank that waits on the host for another rank's progress must
  // check it, or it would wait for a rank that has given up. Whatever f(r) touches that other
  // ranks touch too (buffers, streams, events made on first use) must exist before the call.
  void each(const std::function<void(int r)>& f);
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

 private:
  explicit Ranks(int n);
  void record(cudaStream_t launch);      // events_[r] := rank r's work so far
  std::vector<cudaStream_t> streams_;    // [0] unused: rank 0 works on the launch stream
  std::vector<cudaEvent_t> events_;
  std::vector<DeviceBuffer> flush_, sink_;
  std::atomic<bool> stopping_{false};
};

// A buffer of at least `bytes` for rank r on its GPU (rank 0's too), grown on demand and
// kept: the per-rank inputs, outputs and staging of a multi-GPU impl.
class RankBuffers {
 public:
  void* get(int r, std::size_t bytes);

 private:
  std::vector<DeviceBuffer> bufs_;
};

}  // namespace klab
