// Lesson 16 — the ring all-reduce, written by hand.
//
//   v1_ring_memcpy      the ring's 2(R−1) steps (below) with the copy engines moving each
//                       segment into a staging buffer on the receiving GPU
//                       (cudaMemcpyPeerAsync), then a kernel adding it to the rank's own
//                       part. A step's copy and its add run one after the other.
//   v2_ring_pipelined   v1 with each reduce step cut into chunks (none under 8 MB): the copy
//                       engine brings chunk c+1 into one half of a double buffer, on a second
//                       stream, while the kernel adds chunk c from the other half, so the
//                       add's time hides behind the copies.
//   v3_ring_p2p         the same steps with no copy: the add kernel loads the neighbour's
//                       segment straight from its memory over NVLink (peer access), 16 bytes
//                       a load and four loads in flight a thread, and the gather is a kernel
//                       of such loads. Each segment crosses the link once and is written
//                       once, where v1 also writes the staging buffer and reads it back.
//
// The ring. Rank r talks only to rank r−1 (it reads) and r+1 (which reads it); n is cut into
// R segments (allreduce.cuh). Reduce-scatter, step k = 0 .. R−2: rank r adds its own part of
// segment (r−1−k) mod R to rank r−1's partial sum of that segment (r−1's input at k = 0, its
// output after) and stores it in its output; after R−1 steps rank r holds the full sum of
// segment (r+1) mod R. All-gather, step k = 0 .. R−2: rank r copies segment (r−k) mod R, now
// complete, from rank r−1's output. Every rank moves (R−1)/R of the message in each phase,
// which is the lower bound the bus bandwidth is counted against.
//
// Between steps each rank waits for rank r−1's previous step (klab::Ranks::ring_step): r−1
// wrote what r reads next. Nothing waits for r+1, which reads r's partials: the gather step
// that overwrites a partial comes R−1 steps after r+1 read it, and R−1 steps of waiting for
// the left neighbour lead around the ring from r+1 to r. tests/test_allreduce.cpp checks
// every pair of accesses of the schedule under this order.
//
//   klab test 16 --impl v1_ring_memcpy,v3_ring_p2p
//   klab bench 16 --impl nccl,v3_ring_p2p --dtype bf16
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "allreduce.cuh"
#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/ranks.hpp"

namespace lesson16 {
namespace {

using std::int64_t;

constexpr int kThreads = 256;
constexpr int kUnroll = 4;   // 16-byte loads in flight a thread: a peer load crosses NVLink

// ======================================================================================
// The kernels every version shares (the technique is where `theirs` points)
// ======================================================================================
// out[i] = mine[i] + theirs[i], added in fp32 and rounded once to T. All three pointers
// 16-byte aligned (segments start on multiples of 8 elements).
template <class T>
__global__ void ring_reduce(T* __restrict__ out, const T* __restrict__ mine, const T* __restrict__ theirs, int64_t n) {
  using V = klab::Vec<T, klab::kVec16<T>>;
  constexpr int E = klab::kVec16<T>;
  const int64_t nv = n / E;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const V* a = reinterpret_cast<const V*>(mine);
  const V* b = reinterpret_cast<const V*>(theirs);
  V* c = reinterpret_cast<V*>(out);
  for (int64_t i0 = t; i0 < nv; i0 += stride * kUnroll) {
    V va[kUnroll], vb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)   // every load issued before the first add
      if (i0 + u * stride < nv) va[u] = a[i0 + u * stride], vb[u] = b[i0 + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i0 + u * stride >= nv) break;
      V vc;
#pragma unroll
      for (int e = 0; e < E; ++e) vc.v[e] = klab::from_f32<T>(klab::to_f32(va[u].v[e]) + klab::to_f32(vb[u].v[e]));
      c[i0 + u * stride] = vc;
    }
  }
  for (int64_t i = nv * E + t; i < n; i += stride)   // the last segment's ragged end
    out[i] = klab::from_f32<T>(klab::to_f32(mine[i]) + klab::to_f32(theirs[i]));
}

// out[i] = src[i] (src on the neighbour's GPU: the gather's peer loads).
template <class T>
__global__ void ring_copy(T* __restrict__ out, const T* __restrict__ src, int64_t n) {
  using V = klab::Vec<T, klab::kVec16<T>>;
  constexpr int E = klab::kVec16<T>;
  const int64_t nv = n / E;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const V* a = reinterpret_cast<const V*>(src);
  V* c = reinterpret_cast<V*>(out);
  for (int64_t i0 = t; i0 < nv; i0 += stride * kUnroll) {
    V va[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i0 + u * stride < nv) va[u] = a[i0 + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i0 + u * stride < nv) c[i0 + u * stride] = va[u];
  }
  for (int64_t i = nv * E + t; i < n; i += stride) out[i] = src[i];
}

// ======================================================================================
// The ring's steps, shared by every version
// ======================================================================================
// A copy-engine transfer into rank r's memory from rank r−1's, on stream s.
void copy_from_left(int r, int ranks, void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  const int left = (r + ranks - 1) % ranks;
  KLAB_CHECK_CUDA(cudaMemcpyPeerAsync(dst, klab::rank_device(r), src, klab::rank_device(left), bytes, s));
}

unsigned blocks_for_segment(int64_t n, int elems_per_thread) {
  return klab::grid_stride_blocks(klab::ceil_div<int64_t>(n, elems_per_thread * kUnroll), kThreads);
}

// reduce(r, stream, dst, mine, theirs_on_r_minus_1, count) and copy(r, stream, dst,
// src_on_r_minus_1, count) enqueue one rank's part of a step; device r is current.
template <class T, class Reduce, class Copy>
void ring_all_reduce(const RankIO& io, cudaStream_t launch, Reduce reduce, Copy copy) {
  const int R = io.ranks;
  if (R == 1) return lesson16::copy_own(io, launch);
  klab::Ranks& ranks = klab::Ranks::of(R);
  ranks.fork(launch);
  for (int k = 0; k < ring_steps(R); ++k) {
    if (k > 0) ranks.ring_step(launch);
    for (int r = 0; r < R; ++r) {
      const int left = (r + R - 1) % R;
      const RingStep st = ring_step(r, k, R);
      const Segment s = segment(io.n, R, st.segment);
      if (s.count == 0) continue;
      klab::DeviceScope d(klab::rank_device(r));
      const cudaStream_t rs = ranks.stream(r, launch);
      if (st.reduce)
        reduce(r, rs, at<T>(io.out[r], s.begin), at<T>(io.in[r], s.begin),
               at<T>(st.from_input ? io.in[left] : io.out[left], s.begin), s.count);
      else
        copy(r, rs, at<T>(io.out[r], s.begin), at<T>(io.out[left], s.begin), s.count);
    }
  }
  ranks.join(launch);
}

// ======================================================================================
// v1_ring_memcpy
// ======================================================================================
void run_v1_ring_memcpy(const klab::Launch& l) {
  const RankIO io = rank_io(l);
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const std::size_t seg_bytes = static_cast<std::size_t>(segment(io.n, io.ranks, 0).count) * sizeof(T);
    auto reduce = [&](int r, cudaStream_t s, T* dst, T* mine, T* theirs, int64_t count) {
      T* staged = static_cast<T*>(rank_scratch(r, seg_bytes));
      copy_from_left(r, io.ranks, staged, theirs, count * sizeof(T), s);
      ring_reduce<T><<<blocks_for_segment(count, klab::kVec16<T>), kThreads, 0, s>>>(dst, mine, staged, count);
      KLAB_CHECK_LAUNCH();
    };
    auto copy = [&](int r, cudaStream_t s, T* dst, T* src, int64_t count) {
      copy_from_left(r, io.ranks, dst, src, count * sizeof(T), s);
    };
    ring_all_reduce<T>(io, l.stream, reduce, copy);
  });
}

// ======================================================================================
// v2_ring_pipelined
// ======================================================================================
// A reduce step's segment goes in chunks: the copy engine brings chunk c+1 into one half of
// the staging buffer, on the rank's copy stream, while the add of chunk c reads the other
// half on the rank's own stream. Events hand each half over: `copied` (the add may read it)
// and `added` (the copy may overwrite it).
struct CopyLane {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, copied[2] = {}, added[2] = {};
};

CopyLane& copy_lane(int r) {   // rank r's GPU current; made on first use and kept
  static std::vector<CopyLane> lanes;
  if (lanes.size() <= static_cast<std::size_t>(r)) lanes.resize(r + 1);
  CopyLane& c = lanes[r];
  if (!c.stream) {
    KLAB_CHECK_CUDA(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&c.start, &c.copied[0], &c.copied[1], &c.added[0], &c.added[1]})
      KLAB_CHECK_CUDA(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  }
  return c;
}

// Elements a chunk: a segment in 8 chunks, none under 8 MB, a multiple of 8 elements so that
// every chunk starts 16-byte aligned. One host thread issues every rank's chunks, six API
// calls each (the copy, the add, the events): at ~2 µs a call a chunk must take far longer
// than that to move, or the GPUs wait for the host. With 1 MB chunks (about 3 µs on the
// link) this version ran at half v1's speed from 4 to 128 MB (README).
int64_t chunk_elems(int64_t segment_elems, std::size_t elem) {
  const int64_t c = std::max<int64_t>(klab::ceil_div<int64_t>(segment_elems, 8), (int64_t{8} << 20) / elem);
  return (c + 7) / 8 * 8;
}

void run_v2_ring_pipelined(const klab::Launch& l) {
  const RankIO io = rank_io(l);
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const int64_t chunk = chunk_elems(segment(io.n, io.ranks, 0).count, sizeof(T));
    auto reduce = [&](int r, cudaStream_t s, T* dst, T* mine, T* theirs, int64_t count) {
      CopyLane& c = copy_lane(r);
      T* staged = static_cast<T*>(rank_scratch(r, 2 * chunk * sizeof(T)));
      // The copies start after what this rank's stream waits for (the ring's step order).
      KLAB_CHECK_CUDA(cudaEventRecord(c.start, s));
      KLAB_CHECK_CUDA(cudaStreamWaitEvent(c.stream, c.start, 0));
      for (int64_t i = 0, j = 0; i < count; i += chunk, ++j) {
        const int64_t m = std::min(chunk, count - i);
        const int h = static_cast<int>(j % 2);
        T* half = staged + h * chunk;
        // Before j = 2 the half's last reader is a step already behind c.start.
        if (j >= 2) KLAB_CHECK_CUDA(cudaStreamWaitEvent(c.stream, c.added[h], 0));
        copy_from_left(r, io.ranks, half, theirs + i, m * sizeof(T), c.stream);
        KLAB_CHECK_CUDA(cudaEventRecord(c.copied[h], c.stream));
        KLAB_CHECK_CUDA(cudaStreamWaitEvent(s, c.copied[h], 0));
        ring_reduce<T><<<blocks_for_segment(m, klab::kVec16<T>), kThreads, 0, s>>>(dst + i, mine + i, half, m);
        KLAB_CHECK_LAUNCH();
        KLAB_CHECK_CUDA(cudaEventRecord(c.added[h], s));
      }
    };
    auto copy = [&](int r, cudaStream_t s, T* dst, T* src, int64_t count) {
      copy_from_left(r, io.ranks, dst, src, count * sizeof(T), s);
    };
    ring_all_reduce<T>(io, l.stream, reduce, copy);
  });
}

// ======================================================================================
// v3_ring_p2p
// ======================================================================================
void run_v3_ring_p2p(const klab::Launch& l) {
  const RankIO io = rank_io(l);
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    auto reduce = [&](int, cudaStream_t s, T* dst, T* mine, T* theirs, int64_t count) {
      ring_reduce<T><<<blocks_for_segment(count, klab::kVec16<T>), kThreads, 0, s>>>(dst, mine, theirs, count);
      KLAB_CHECK_LAUNCH();
    };
    auto copy = [&](int, cudaStream_t s, T* dst, T* src, int64_t count) {
      ring_copy<T><<<blocks_for_segment(count, klab::kVec16<T>), kThreads, 0, s>>>(dst, src, count);
      KLAB_CHECK_LAUNCH();
    };
    ring_all_reduce<T>(io, l.stream, reduce, copy);
  });
}

std::string needs_ranks(const klab::Problem& p) { return klab::require_gpus(static_cast<int>(p.shape[0])); }
std::string needs_peers(const klab::Problem& p) { return klab::require_peer_access(static_cast<int>(p.shape[0])); }

KLAB_REGISTER(klab::register_impl({.op = "allreduce",
                                   .name = "v1_ring_memcpy",
                                   .summary = "ring: copy-engine transfers to a staging buffer, then an add kernel",
                                   .supports = needs_ranks,
                                   .run = run_v1_ring_memcpy,
                                   .stage = stage,
                                   .gather = gather,
                                   .kernels = {"ring_reduce"}}));
KLAB_REGISTER(klab::register_impl({.op = "allreduce",
                                   .name = "v2_ring_pipelined",
                                   .summary = "ring: v1 in chunks, the copy of one overlapping the add of the last",
                                   .supports = needs_ranks,
                                   .run = run_v2_ring_pipelined,
                                   .stage = stage,
                                   .gather = gather,
                                   .kernels = {"ring_reduce"}}));
KLAB_REGISTER(klab::register_impl({.op = "allreduce",
                                   .name = "v3_ring_p2p",
                                   .summary = "ring: the add and the gather load the neighbour's memory over NVLink",
                                   .supports = needs_peers,
                                   .run = run_v3_ring_p2p,
                                   .stage = stage,
                                   .gather = gather,
                                   .kernels = {"ring_reduce", "ring_copy"}}));

}  // namespace
}  // namespace lesson16
