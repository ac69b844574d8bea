// Lesson 11 — the multi-tensor apply: one launch over a list of tensors of different sizes
// (namespace lesson11). v2_multi_tensor and the exercise use it; it registers no impl.
//
// A launch's kernel arguments carry a table: each tensor's pointers and size, and a prefix
// of chunk counts. The tensors are cut into chunks of kChunk elements (the last chunk of a
// tensor is shorter); a block takes chunks in a grid-stride loop and finds a chunk's tensor
// by walking the prefix (at most kTableTensors entries, read from the kernel-argument bank,
// which every thread of the block reads at the same address: a broadcast). So one launch
// serves 13 tensors or 24, where one launch a tensor pays a launch and a ragged last wave
// for each; a list longer than kTableTensors takes one launch per kTableTensors tensors.
//
// Clipping needs the norm of every gradient of the step before any update: a first
// multi-tensor pass (adamw_grad_sumsq) writes one partial sum of squares per block, a
// fixed kSumsqBlocks per table, and every block of the update sums all the partials in
// the same order (block_clip_coefficient), so each gets the same coefficient, run after run.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "klab/device/block.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "training.cuh"

namespace lesson11 {

inline constexpr int kTableTensors = 24;   // the table in 1.3 KB of the 4 KB of kernel arguments
inline constexpr int kChunk = 8192;        // elements a chunk: 8 passes of 256 threads x 4
inline constexpr int kThreads = 256;
inline constexpr int kSumsqBlocks = 1024;  // partial sums of squares a table writes: ~8 blocks an SM

struct AdamWTable {
  float* p[kTableTensors];
  const float* g[kTableTensors];             // this step's gradient
  float* m[kTableTensors];
  float* v[kTableTensors];
  __nv_bfloat16* p16[kTableTensors];         // the bf16 copy, or null
  std::int64_t n[kTableTensors];
  int first_chunk[kTableTensors + 1];        // tensor k's chunks: [first_chunk[k], first_chunk[k + 1])
  bool vec4[kTableTensors];                  // every pointer of tensor k 16-byte aligned
  int count;
};

// The tables of step s: the tensors in order, kTableTensors a table.
inline std::vector<AdamWTable> adamw_tables(const klab::Launch& l, std::int64_t step) {
  const auto tensors = static_cast<int>(l.problem.shape[1]);
  std::vector<AdamWTable> tables;
  for (int k0 = 0; k0 < tensors; k0 += kTableTensors) {
    AdamWTable t{};
    t.count = std::min(kTableTensors, tensors - k0);
    for (int j = 0; j < t.count; ++j) {
      const int k = k0 + j;
      const std::int64_t n = l.in[static_cast<std::size_t>(kParam * tensors + k)].numel();
      t.p[j] = l.in[static_cast<std::size_t>(kParam * tensors + k)].as<float>();
      t.g[j] = l.in[static_cast<std::size_t>(kGrad * tensors + k)].as<const float>() + step * n;
      t.m[j] = l.in[static_cast<std::size_t>(kExpAvg * tensors + k)].as<float>();
      t.v[j] = l.in[static_cast<std::size_t>(kExpAvgSq * tensors + k)].as<float>();
      t.p16[j] = adamw_copies(l.problem) ? l.out[static_cast<std::size_t>(k)].as<__nv_bfloat16>() : nullptr;
      t.n[j] = n;
      t.first_chunk[j + 1] = t.first_chunk[j] + static_cast<int>((n + kChunk - 1) / kChunk);
      const auto a16 = [](const void* q) { return reinterpret_cast<std::uintptr_t>(q) % 16 == 0; };
      t.vec4[j] = a16(t.p[j]) && a16(t.g[j]) && a16(t.m[j]) && a16(t.v[j]) &&
                  (t.p16[j] == nullptr || reinterpret_cast<std::uintptr_t>(t.p16[j]) % 8 == 0);
    }
    tables.push_back(t);
  }
  return tables;
}

__host__ __device__ inline int table_chunks(const AdamWTable& t) { return t.first_chunk[t.count]; }

// The tensor chunk c belongs to (c < table_chunks(t)).
__host__ __device__ __forceinline__ int chunk_tensor(const AdamWTable& t, int c) {
  int k = 0;
  while (k + 1 < t.count && c >= t.first_chunk[k + 1]) ++k;
  return k;
}

// Σ g² over the table's gradients, one partial a block into g_part[blockIdx.x] (grid:
// kSumsqBlocks; a block past the last chunk writes 0). 16 bytes a thread and pass where the
// tensor is aligned: the same bytes in flight as the update, whose pass it precedes.
// (With its launcher in an anonymous namespace: each file that includes the header gets
// its own kernel.)
namespace {
__global__ void adamw_grad_sumsq(AdamWTable t, float* __restrict__ g_part) {
  __shared__ float s_part[32];
  float sq = 0.f;
  for (int c = blockIdx.x; c < table_chunks(t); c += gridDim.x) {
    const int k = chunk_tensor(t, c);
    const std::int64_t begin = static_cast<std::int64_t>(c - t.first_chunk[k]) * kChunk;
    const std::int64_t end = std::min<std::int64_t>(begin + kChunk, t.n[k]);
    const float* g = t.g[k];
    for (std::int64_t i = begin + 4 * threadIdx.x; i < end; i += 4 * blockDim.x) {
      if (t.vec4[k] && i + 4 <= end) {
        const float4 q = *reinterpret_cast<const float4*>(g + i);
        sq += q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w;
      } else {
        for (std::int64_t e = i; e < end && e < i + 4; ++e) sq += g[e] * g[e];
      }
    }
  }
  sq = klab::block_sum(sq, s_part);
  if (threadIdx.x == 0) g_part[blockIdx.x] = sq;
}

// Clipping's first pass over every table of the step: the partials of table j at
// g_part + j · kSumsqBlocks. Returns how many partials there are (0: nothing to clip).
int launch_grad_sumsq(const std::vector<AdamWTable>& tables, float* g_part, cudaStream_t stream) {
  for (std::size_t j = 0; j < tables.size(); ++j) {
    adamw_grad_sumsq<<<kSumsqBlocks, kThreads, 0, stream>>>(tables[j], g_part + j * kSumsqBlocks);
    KLAB_CHECK_LAUNCH();
  }
  return static_cast<int>(tables.size()) * kSumsqBlocks;
}

}  // namespace

// The step's clipping coefficient from all `parts` partial sums of squares; every thread of
// the block gets it (each thread adds a fixed strided subset, then block_sum's fixed tree).
// g_part null: no clipping, 1.
__device__ __forceinline__ float block_clip_coefficient(const float* __restrict__ g_part, int parts, float max_norm) {
  if (g_part == nullptr) return 1.f;
  __shared__ float s_part[32];
  float sq = 0.f;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) sq += g_part[i];
  return clip_coefficient(sqrtf(klab::block_sum(sq, s_part)), max_norm);
}

// The workspace of an impl that clips with launch_grad_sumsq.
inline std::size_t sumsq_workspace(const klab::Problem& p) {
  if (!adamw_clips(p)) return 0;
  return static_cast<std::size_t>((p.shape[1] + kTableTensors - 1) / kTableTensors) * kSumsqBlocks * sizeof(float);
}

// Blocks of an update launch: a grid-stride loop over the table's chunks, a grid of 8 blocks
// of 256 threads an SM (2048 threads, an H100 SM's limit, where the registers allow it: the
// update's 62 registers a thread let 4 blocks run at once, and the loop hands the others'
// chunks round; `klab inspect 11` shows both), never more blocks than chunks.
inline unsigned update_blocks(const AdamWTable& t) {
  return static_cast<unsigned>(std::max(1, std::min(table_chunks(t), klab::sm_count() * 8)));
}

}  // namespace lesson11
