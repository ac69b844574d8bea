// Lesson 16 — what the all-reduce impls share: where each rank's data lives.
//
// The harness's tensors are on GPU 0: x {ranks, n} holds rank r's contribution in row r and
// y {ranks, n} receives rank r's result in row r (every row the full sum). Rank 0 reads x's
// row 0 and writes y's row 0 where they are. Every other rank works on buffers of its own
// GPU, which stage() fills before each launch (its row of x, and its row of the poisoned y,
// so that an element it leaves unwritten still fails) and gather() copies back after, both
// outside the timed region; the L2 of every rank is cold when the timing starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "klab/op.hpp"

namespace lesson16 {

struct RankIO {
  int ranks = 1;
  std::int64_t n = 0;              // elements each rank contributes and receives
  std::size_t elem = 4;            // bytes an element
  std::vector<const void*> in;     // [r]: rank r's contribution, on GPU r
  std::vector<void*> out;          // [r]: rank r's result, on GPU r
  std::size_t bytes() const { return static_cast<std::size_t>(n) * elem; }
};

RankIO rank_io(const klab::Launch& l);
// One rank: the sum is its own contribution, copied (every version's R = 1 case).
void copy_own(const RankIO& io, cudaStream_t launch);
// Element i of a rank's buffer, typed.
template <class T>
T* at(const void* p, std::int64_t i) {
  return static_cast<T*>(const_cast<void*>(p)) + i;
}
void stage(const klab::Launch& l);
void gather(const klab::Launch& l);

// The ring's segments: n split into `ranks` pieces, each a multiple of 8 elements but the
// last (16 bytes in either dtype), so every segment starts 16-byte aligned.
struct Segment {
  std::int64_t begin, count;
};
Segment segment(std::int64_t n, int ranks, int s);

// The ring's schedule (ring.cu explains it): step k = 0 .. 2R−3 of rank r. The first R−1
// steps reduce: rank r adds its own part of `segment` to rank r−1's partial sum of it (rank
// r−1's input at k = 0, its output after) into its output. The last R−1 gather: rank r copies
// `segment`, complete, from rank r−1's output. tests/test_allreduce.cpp runs it on the CPU.
struct RingStep {
  int segment;
  bool reduce;       // false: a gather step (a copy)
  bool from_input;   // read rank r−1's input, not its output (the first step)
};
RingStep ring_step(int r, int k, int ranks);
int ring_steps(int ranks);   // 2(R−1)

// One more unit of scratch per rank, on its GPU (the staging buffer of the copy-engine rings).
void* rank_scratch(int r, std::size_t bytes);

}  // namespace lesson16
