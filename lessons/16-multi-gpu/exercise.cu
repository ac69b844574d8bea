// Lesson 16 exercise — the ring all-reduce's schedule and its add.
//
// Impl registered here (op `allreduce`):
//   exercise       your ring, timed against v3_ring_p2p
//
// R ranks, one GPU each, every rank holding n numbers; each must end with the sum of all R.
// The ring cuts the n numbers into R segments (lesson16::segment) and runs 2(R − 1) steps,
// every rank in each: R − 1 steps of reduce-scatter, after which rank r holds the complete
// sum of one segment, then R − 1 steps of all-gather, which pass the complete segments on.
// At every step rank r reads only from rank r − 1, its left neighbour, whose memory it
// loads directly (peer access). The loop below enqueues each rank's part of a step on that
// rank's stream, then has every rank wait for its left neighbour before the next step.
// Fill in the TODOs, then run
//
//     klab check 16
//
// which compares every rank's result with an fp64 sum, for 1 to 131 ranks. A machine with
// fewer GPUs than ranks runs several ranks on one GPU (rank r on GPU r mod G; each rank
// keeps its own stream and buffers), so one GPU grades every ring; the speed comparison
// needs as many GPUs as ranks.
//
// Hints (klab hint 16)
//   1. One element: add in fp32 (klab::to_f32), round once to T (klab::from_f32<T>).
//   2. Reduce-scatter step k: rank r adds its own part of segment (r − 1 − k) mod R to what
//      rank r − 1 has of it: r − 1's input at k = 0 (nothing added yet), its output after.
//   3. All-gather step g: rank r copies segment (r − g) mod R, which rank r − 1 holds
//      complete, from rank r − 1's output into its own.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "allreduce.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/ranks.hpp"

namespace {

using lesson16::at;
using lesson16::RankIO;
using std::int64_t;

constexpr int kThreads = 256;

// out[i] = mine[i] + theirs[i]; theirs may live on another GPU.
template <class T>
__global__ void ring_add_exercise(T* __restrict__ out, const T* __restrict__ mine, const T* __restrict__ theirs,
                                  int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    // TODO 1: the sum of the two elements, added in fp32 and rounded once (hint 1).
  }
}

template <class T>
void ring_exercise(const RankIO& io, cudaStream_t launch) {
  const int R = io.ranks;
  if (R == 1) return lesson16::copy_own(io, launch);
  klab::Ranks& ranks = klab::Ranks::of(R);
  ranks.fork(launch);
  for (int k = 0; k < 2 * (R - 1); ++k) {
    if (k > 0) ranks.ring_step(launch);   // every rank waits for its left neighbour's last step
    for (int r = 0; r < R; ++r) {
      const int left = (r + R - 1) % R;
      klab::DeviceScope d(klab::rank_device(r));
      const cudaStream_t s = ranks.stream(r, launch);
      if (k < R - 1) {
        int seg = 0;
        const void* theirs = io.in[left];
        // TODO 2: the segment rank r reduces at step k, and rank r − 1's buffer that holds
        // its partial sum of it (hint 2).
        const lesson16::Segment sg = lesson16::segment(io.n, R, seg);
        if (sg.count == 0) continue;
        ring_add_exercise<T><<<klab::grid_stride_blocks(sg.count, kThreads), kThreads, 0, s>>>(
            at<T>(io.out[r], sg.begin), at<T>(io.in[r], sg.begin), at<T>(theirs, sg.begin), sg.count);
        KLAB_CHECK_LAUNCH();
      } else {
        const int g = k - (R - 1);
        int seg = 0;
        // TODO 3: the segment rank r copies at gather step g, and the copy itself: its
        // sg.count elements from rank r − 1's output into rank r's (cudaMemcpyAsync works
        // between GPUs with peer access; klab::rank_device names a rank's GPU) (hint 3).
        (void)g, (void)seg;
      }
    }
  }
  ranks.join(launch);
}

void run_exercise(const klab::Launch& l) {
  const RankIO io = lesson16::rank_io(l);
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() { ring_exercise<T>(io, l.stream); });
}

std::string supports_exercise(const klab::Problem&) {
  return klab::gpu_count() > 0 ? "" : "no GPU";
}

KLAB_REGISTER(klab::register_impl({.op = "allreduce",
                                   .name = "exercise",
                                   .summary = "your ring all-reduce (lesson 16 exercise)",
                                   .kind = klab::ImplKind::exercise,
                                   .supports = supports_exercise,
                                   .run = run_exercise,
                                   .stage = lesson16::stage,
                                   .gather = lesson16::gather,
                                   .kernels = {"ring_add_exercise"}}));

}  // namespace
