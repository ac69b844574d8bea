// lessons/04-softmax/softmax_common.cuh — pieces shared by the lesson's kernel files.
//
// The op's shape is {rows, cols}, row-major. Causal masking is folded into one number per
// launch, `diag`: column j of row r is kept while j <= r + diag, so
//   limit(r) = clamp(r + diag + 1, 0, cols)        columns [0, limit) take part
// with diag = cols - rows for the causal variant (the last row sees every column, as in
// attention with a longer key sequence than query sequence) and diag = cols, which keeps
// everything, otherwise. A row with limit 0 (possible when rows > cols) writes zeros.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace softmax04 {

constexpr unsigned kFull = 0xffffffffu;

// The diag of a problem: see the header comment.
inline std::int64_t diag_of(const klab::Problem& p) {
  const std::int64_t rows = p.shape.at(0), cols = p.shape.at(1);
  return p.variant == "causal" ? cols - rows : cols;
}

__host__ __device__ __forceinline__ std::int64_t row_limit(std::int64_t row, std::int64_t cols,
                                                           std::int64_t diag) {
  std::int64_t lim = row + diag + 1;
  return lim < 0 ? 0 : (lim > cols ? cols : lim);
}

// The running state of a softmax: the max m seen so far and d = sum of exp(x - m).
// Two states merge by rescaling both sums to the larger max; the empty state is
// (-inf, 0), and merging two empty states must not compute exp(-inf - -inf) = NaN.
struct MD {
  float m, d;
};

// 2^x on the special-function unit (MUFU.EX2): one instruction, relative error about 2^-22
// (PTX ISA, ex2.approx), what Triton's tl.exp compiles to. -inf gives +0; results below
// 2^-126 flush to 0 (an output that small is below every tolerance's atol anyway).
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// kLog2 = true: the same state in base 2 (v6, v7): m is the max times log2(e) and
// d = sum of 2^(x * log2(e) - m), so the merge needs ex2 instead of exp.
template <bool kLog2 = false>
__device__ __forceinline__ MD md_merge(MD a, MD b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  if constexpr (kLog2) return {m, a.d * ex2_approx(a.m - m) + b.d * ex2_approx(b.m - m)};
  else return {m, a.d * expf(a.m - m) + b.d * expf(b.m - m)};   // exp(-inf - finite) = 0
}

template <bool kLog2 = false>
__device__ __forceinline__ MD warp_merge(MD v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MD other{__shfl_xor_sync(kFull, v.m, o), __shfl_xor_sync(kFull, v.d, o)};
    v = md_merge<kLog2>(v, other);
  }
  return v;   // every lane holds the merge of the whole warp
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// One block's merge of per-thread states, with one barrier: each warp merges its lanes by
// shuffles, lane 0 parks the result in shared memory, and after the barrier every warp
// merges the (at most 32) warp results again, so every thread ends up with the block's
// state and no second barrier or broadcast is needed. s_md holds 32 entries.
// The caller must __syncthreads() before calling it again with the same s_md.
template <bool kLog2 = false>
__device__ __forceinline__ MD block_merge(MD v, MD* s_md) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = warp_merge<kLog2>(v);
  if (lane == 0) s_md[warp] = v;
  __syncthreads();
  MD w = lane < warps ? s_md[lane] : MD{-INFINITY, 0.f};
  return warp_merge<kLog2>(w);
}

// The same for a plain sum (row_normalize, softmax_bwd).
__device__ __forceinline__ float block_sum(float v, float* s_part) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  if (lane == 0) s_part[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? s_part[lane] : 0.f);
}

// A 16-byte (or smaller) bundle of elements for vector loads and stores.
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Elements per 16-byte vector.
template <class T>
constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

// dispatch_float without fp16: the lesson's ops come in fp32 and bf16 only, and leaving
// fp16 out halves the kernels compiled.
template <class F>
void dispatch_f32_bf16(klab::DType t, F&& f) {
  switch (t) {
    case klab::DType::f32: f.template operator()<float>(); break;
    case klab::DType::bf16: f.template operator()<__nv_bfloat16>(); break;
    default: KLAB_REQUIRE(false, "lesson 04: fp32 and bf16 only");
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// --- host helpers shared by the op definitions -----------------------------------------------

// The i-th input tensor, created with the given type and shape unless the harness already
// made it so.
inline klab::HostTensor& input_slot(klab::Inputs& in, std::size_t i, klab::DType t,
                                    const klab::Dims& shape) {
  if (in.tensors.size() <= i) in.tensors.resize(i + 1);
  if (in.tensors[i].shape() != shape || in.tensors[i].dtype() != t) in.tensors[i] = klab::HostTensor(t, shape);
  return in.tensors[i];
}

inline std::string validate_rows_cols(const klab::Problem& p) {
  if (p.shape.size() != 2) return "shape must be {rows, cols}";
  if (p.shape[0] < 0 || p.shape[1] < 0) return "rows and cols must be >= 0";
  if (p.shape[0] > std::numeric_limits<int>::max() || p.shape[1] > std::numeric_limits<int>::max())
    return "rows and cols must each fit in 31 bits (grid size, column index)";
  return "";
}

}  // namespace softmax04
