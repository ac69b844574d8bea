// lessons/09-attention/attention.cuh — what the attention op (attention_ops.cu) and its
// kernels (attention_simt.cu, attention_mma.cu) share: the shape, the causal convention, the
// launch arguments and the head dims the kernels are compiled for.
//
// The problem is {B, Hq, Hkv, Sq, Sk, d}:
//   Q (B, Hq,  Sq, d)   K, V (B, Hkv, Sk, d)   O (B, Hq, Sq, d)   L (B, Hq, Sq) fp32
// all contiguous, row-major. Head h of Q reads K/V head h / (Hq / Hkv) (grouped-query
// attention; Hq = Hkv is plain multi-head attention, Hkv = 1 multi-query): the kernels index
// the shared head, nothing is copied.
//
// The causal convention (bottom-right, as in lesson 04's causal softmax): query i sees key j
// iff j <= i + (Sk - Sq). With Sq = Sk that is the usual lower triangle; with Sq < Sk the
// queries are the last Sq positions of the key sequence (decoding, chunked prefill), and the
// last query sees every key; with Sq > Sk the first Sq - Sk queries see no key at all. Such a
// row has no softmax: we define its output as O = 0 and L = -inf (the log of an empty sum),
// what a kernel that never found a key leaves in its running state (l = 0, m = -inf).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "klab/device/cp_async.cuh"
#include "klab/device/mma.cuh"
#include "klab/device/warp.cuh"
#include "klab/op.hpp"

namespace lesson09 {

using i64 = std::int64_t;

struct Shape {
  i64 B, Hq, Hkv, Sq, Sk, d;
};

inline Shape shape_of(const klab::Problem& p) {
  return {p.shape.at(0), p.shape.at(1), p.shape.at(2), p.shape.at(3), p.shape.at(4), p.shape.at(5)};
}

inline bool is_causal(const klab::Problem& p) { return p.variant == "causal"; }

// The lesson's bench problems, attention_fwd's and attention_bwd's: FlashAttention's standard
// shapes, head dim 128 and 64, a long sequence, and grouped-query attention (4 query heads a
// K/V head).
inline std::vector<klab::Dims> bench_problems() {
  return {{4, 16, 16, 4096, 4096, 128},
          {8, 16, 16, 4096, 4096, 64},
          {1, 16, 16, 16384, 16384, 128},
          {4, 32, 8, 4096, 4096, 128}};
}

// How many keys query i sees: a prefix [0, visible_keys) of the key sequence, by the
// convention above (every key without the mask). 0 for the early queries when Sq > Sk.
__host__ __device__ __forceinline__ i64 visible_keys(i64 i, i64 Sq, i64 Sk, bool causal) {
  if (!causal) return Sk;
  const i64 n = i + (Sk - Sq) + 1;
  return n < 0 ? 0 : (n > Sk ? Sk : n);
}

// The launch arguments of every attention_fwd launcher. Sq and Sk fit 31 bits (the op's
// validate), so kernels index positions with int and offsets with int64.
struct AttnArgs {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  int B, Hq, Hkv, Sq, Sk, d;
  bool causal;
  cudaStream_t stream;
};

inline AttnArgs attn_args(const klab::Launch& l) {
  const Shape s = shape_of(l.problem);
  return {l.in[0].data,
          l.in[1].data,
          l.in[2].data,
          l.out[0].data,
          l.out[1].as<float>(),
          static_cast<int>(s.B),
          static_cast<int>(s.Hq),
          static_cast<int>(s.Hkv),
          static_cast<int>(s.Sq),
          static_cast<int>(s.Sk),
          static_cast<int>(s.d),
          is_causal(l.problem),
          l.stream};
}

// The tiles of the mma.sync kernels (v2_mma_sync, attention_bwd's v1 and v2): (rows, D)
// matrices of 16-bit elements in shared memory, copied in by cp.async and read by ldmatrix.
//
// Byte offset of 16-byte chunk `chunk` of tile row `row`. An ldmatrix reads one chunk from
// each of 8 consecutive rows; rows of 128 or 256 bytes would put all 8 in the same banks.
// XOR-ing the chunk with row % 8 lands the 8 in 8 different 16-byte bank groups (lesson 05's
// swizzle):  equivalent to  phys_chunk = chunk ^ (row & 7).
template <int D>
__device__ __forceinline__ std::uint32_t swz(int row, int chunk) {
  return static_cast<std::uint32_t>(row * (D * 2) + ((chunk ^ (row & 7)) << 4));
}

// Rows [r0, r0 + ROWS) of a (rows, D) matrix into a swizzled tile by cp.async, 16 bytes a
// copy; rows at or past `rows` are zero-filled by the copy itself (source size 0). Thread
// tid copies chunk column tid % kChunks of the rows tid / kChunks + i * kStep: a fixed
// column and rows kStep apart, so one swizzle key (kStep is a multiple of 8) and one
// address increment serve all of its copies.
template <int ROWS, int D, int NT, class T>
__device__ __forceinline__ void copy_tile_async(std::uint32_t s_tile, const T* g_m, i64 r0, i64 rows, int tid) {
  constexpr int kChunks = D / 8, kStep = NT / kChunks;
  static_assert(NT % kChunks == 0 && ROWS % kStep == 0 && kStep % 8 == 0,
                "whole rows of chunks, evenly spaced, one swizzle key");
  const int r = tid / kChunks, c = tid % kChunks;
  const std::uint32_t s_dst = s_tile + swz<D>(r, c);
  const T* g_src = g_m + (r0 + r) * D + c * 8;
#pragma unroll
  for (int i = 0; i < ROWS / kStep; ++i) {
    const bool in = r0 + r + i * kStep < rows;
    klab::cp_async_16(s_dst + i * kStep * D * 2, in ? g_src + static_cast<i64>(i) * kStep * D : g_m, in ? 16 : 0);
  }
}

// The end of the tensor-core kernels (v2-v5), for the two query rows a thread holds in the
// mma / wgmma accumulator layout: rows row0 and row0 + 8, columns 8 n + 2 c and + 1 of each
// n8 block, r_o[4 n + 2 rr + 0..1] for row row0 + 8 rr (v2's r_o[n][4] is the same array).
// O = acc / l and L = (m + log2 l) ln 2 (m in base 2). l is summed over the quad here,
// once: its parts were all rescaled by the same corrections. A row that saw no key: O = 0,
// L = -inf. Rows past Sq (a ragged last block) are not stored.
template <class T, int D>
__device__ __forceinline__ void store_rows(const AttnArgs& a, i64 bh, int row0, int c, const float* r_o,
                                           const float (&m)[2], const float (&l)[2]) {
  T* g_o = static_cast<T*>(a.o) + bh * a.Sq * D;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float sum = l[rr];
    sum += __shfl_xor_sync(klab::kFullMask, sum, 1);
    sum += __shfl_xor_sync(klab::kFullMask, sum, 2);
    const int row = row0 + rr * 8;
    if (row >= a.Sq) continue;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    T* g_row = g_o + static_cast<i64>(row) * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<std::uint32_t*>(g_row + n * 8 + 2 * c) =
          klab::pack_pair<T>(r_o[4 * n + 2 * rr] * inv, r_o[4 * n + 2 * rr + 1] * inv);
    if (c == 0) a.lse[bh * a.Sq + row] = sum > 0.f ? (m[rr] + log2f(sum)) * 0.69314718f : -INFINITY;
  }
}

// What attention_fwd and attention_bwd share (attention_ops.cu): the shape's checks ("" when
// valid), and the (query, key) pairs the mask leaves visible, in closed form, which the ops'
// FLOP counts are made of.
std::string validate_attention(const klab::Problem& p);
double visible_pairs(const klab::Problem& p);

// The kernels are templates on the head dim: d = 64 and d = 128, the dims of nearly every
// model (a kernel keeps a row of O in registers, sized at compile time). Other dims: the
// reason, from supports().
inline std::string supports_head_dim(const klab::Problem& p) {
  const i64 d = shape_of(p).d;
  if (d == 64 || d == 128) return "";
  return "head dim d = " + std::to_string(d) + ": the kernels are compiled for d = 64 and d = 128 only";
}

// Calls go.template operator()<T, D>() for the problem's dtype (T = __nv_bfloat16 or __half)
// and head dim (D = 64 or 128; supports_head_dim has said no to the others): the launchers'
// one dispatch.
template <class F>
void dispatch_dtype_dim(const klab::Problem& p, F&& go) {
  const bool bf16 = p.dtype == klab::DType::bf16;
  if (shape_of(p).d == 64) bf16 ? go.template operator()<__nv_bfloat16, 64>() : go.template operator()<__half, 64>();
  else bf16 ? go.template operator()<__nv_bfloat16, 128>() : go.template operator()<__half, 128>();
}

}  // namespace lesson09
