// Lesson 03 — pieces the reduction kernels share: accumulator types, the 16-byte vector of
// an accumulator, grid sizing, the length-dependent tolerance of a float sum, the shape check.
// The warp and block sums this lesson teaches are the framework's, included where used:
// klab::warp_sum (klab/device/warp.cuh) and klab::block_sum (klab/device/block.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "klab/compare.hpp"
#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace lesson03 {

// The type a sum accumulates in. int32 sums accumulate in uint32: unsigned overflow is
// defined (mod 2^32) and gives the same bits as a wrapping int32 add, and because
// modular addition is associative the int32 result is exact and the same for every
// order (atomics included). Signed overflow would be undefined behaviour in C++.
template <class T> struct Acc;
template <> struct Acc<float> { using type = float; };
template <> struct Acc<int> { using type = unsigned int; };
template <class T> using acc_t = typename Acc<T>::type;

// The 16-byte vector of an accumulator type (int32 data is read as uint32): the built-in
// float4 / uint4, so that __ldg / __ldcs and a reinterpreting load see one 16-byte access.
template <class A> struct Vec4;
template <> struct Vec4<float> { using type = float4; };
template <> struct Vec4<unsigned int> { using type = uint4; };
template <class A> using vec4_t = typename Vec4<A>::type;

// Blocks that fit on the GPU at once for this kernel and block size: the grid of a
// grid-stride kernel that fills every SM exactly.
template <class K>
int resident_blocks(K kernel, int threads, std::size_t smem = 0) {
  int per_sm = 0;
  KLAB_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return (per_sm > 0 ? per_sm : 1) * klab::sm_count();
}

inline int grid_for(std::int64_t work_items, int per_block, int cap) {
  const std::int64_t b = klab::ceil_div<std::int64_t>(work_items, per_block);
  return static_cast<int>(b < 1 ? 1 : (b > cap ? cap : b));
}

// Tolerance of an fp32 sum of n terms uniform in [-1, 1) (sigma = 1/sqrt(3)) against the
// fp64 sum, for a summation order in which no term passes through more than `depth`
// additions (any order: depth <= n - 1, one thread adding all n in a row).
//   Each fp32 addition rounds its result s_k with a relative error delta_k, |delta_k| <=
//   u = 2^-24, so to first order the sum is off by sum_k delta_k s_k. Model the deltas as
//   independent and uniform (standard deviation u / sqrt(3)) and the terms as independent
//   with mean 0: E[s_k^2] = sigma^2 * (the number of terms under addition k). Summed over the
//   additions, that number counts every term once per addition above it: at most n * depth.
//   So the error's standard deviation is at most (u / sqrt(3)) sigma sqrt(n * depth), and
//   atol = 4 u sigma sqrt(n * depth) is 4 sqrt(3) = 6.9 of them, plus a floor for tiny n.
//   rtol 1e-6 (17 u) covers the rounding of the stored result.
// For n = 2^24 in any order that is atol = 2.3 (4 / sqrt(3)) against a sum of size ~2.4e3:
// a float sum in an unknown order cannot tell one missing element of a long array from
// rounding, which is why every sum kernel is also tested on int32 (exact, same code, same
// indexing), and why ops that know their kernels' order pass a smaller depth (mean).
inline klab::Tolerance float_sum_tolerance(std::int64_t n, std::int64_t depth) {
  const double u = std::ldexp(1.0, -24), sigma = 1.0 / std::sqrt(3.0);
  const double terms = static_cast<double>(n), d = static_cast<double>(depth);
  return klab::Tolerance{4.0 * u * sigma * std::sqrt(terms * d) + 1e-6, 1e-6};
}
inline klab::Tolerance float_sum_tolerance(std::int64_t n) { return float_sum_tolerance(n, n); }

// Tolerance of an fp32 inclusive scan of n terms: element i is an fp32 sum of its i + 1
// terms, whatever order the kernel adds them in (a tile's own scan, then the prefix of the
// tiles before it), so it gets the bound of a sum of i + 1 terms, not the last element's: an
// exclusive scan or an off-by-one prefix is off by a whole term, and the early prefixes'
// bounds are far below that. atol (unused by compare) is the last element's bound.
inline klab::Tolerance float_scan_tolerance(std::int64_t n) {
  klab::Tolerance t = float_sum_tolerance(n);
  t.atol_at = [](std::int64_t i) { return float_sum_tolerance(i + 1).atol; };
  return t;
}

// The Triton first stages' configurations: reduce_triton.py's STAGE1_CONFIGS in its order
// (the linked launchers' algo_ids). `chunk` is what one program sums, so a candidate writes
// ceil(n / chunk) partials; the workspace is sized for the smallest chunk.
struct TritonStage1 {
  std::int64_t chunk;
  const char* name;   // CHUNK/BLOCK/warps, as --candidate takes it
};
inline constexpr TritonStage1 kTritonStage1[] = {
    {65536, "chunk65536/4096/8w"}, {32768, "chunk32768/4096/8w"}, {16384, "chunk16384/4096/8w"},
    {16384, "chunk16384/2048/4w"}};
inline constexpr std::int64_t kTritonMinChunk = 16384;
inline constexpr int kTritonStage1Count = sizeof(kTritonStage1) / sizeof(kTritonStage1[0]);
constexpr bool min_chunk_is_smallest() {
  for (const auto& c : kTritonStage1)
    if (c.chunk < kTritonMinChunk) return false;
  return true;
}
static_assert(min_chunk_is_smallest(), "kTritonMinChunk sizes the partials: it must be the smallest chunk");

// What the Triton sum and argmax time per shape (klab::autotune), as Impl::candidates says.
inline std::vector<std::string> triton_stage1_candidates(const klab::Problem&) {
  std::vector<std::string> names;
  for (const auto& c : kTritonStage1) names.push_back(c.name);
  return names;
}

// The ops of this lesson take one dimension, n >= 0.
inline std::string validate_1d(const klab::Problem& p) {
  if (p.shape.size() != 1) return "expects 1 dim: n";
  if (p.shape[0] < 0) return "negative size";
  return "";
}

}  // namespace lesson03
