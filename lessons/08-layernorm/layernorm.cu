// lessons/08-layernorm/layernorm.cu — the layernorm forward, from a warp a row to a row held
// in registers.
//
// Impls registered here (op layernorm, and rmsnorm's forward):
//   v1_warp_welford     one warp a row: each lane folds its elements into a running
//                       (count, mean, M2) by Welford's update, the 32 triples merge by
//                       shuffles (Chan's formula), then the lanes read the row again to write
//                       y. Any width, one element a load.
//   v2_block_registers  one block a row, the row held in registers as fp32 (16-byte vector
//                       loads): mean from one block sum, then the variance from a second sum
//                       of (x - mean)^2 over the same registers (two passes, no second read),
//                       and y written from them. Rows up to 32,768 elements.
//   v3_block_welford_long_rows  one block a row of any length: v1's Welford triples merged
//                       across the block, then a second read of the row to write y (rows
//                       past v2's 32,768 elements; two reads, as v1).
//   triton              layernorm_triton.py: one program a row, the row as one block of
//                       the smallest compiled width that holds it (up to 32,768).
//   v1_block_registers  (op rmsnorm) v2 without the mean: one block sum of x^2 over the
//                       registers, y = x * rstd * gamma, rstd saved. Same limits.
//
// Why Welford: the one-pass formula var = E[x^2] - E[x]^2 subtracts two sums that grow with
// the row's mean; with a mean of 2 and a spread of 1 it loses about 4 of fp32's 24 bits, with
// a mean of 100 about 15. Welford's update keeps a running mean and the sum of squared
// deviations from it, so nothing large cancels, in one read of the row. v2 needs no such
// care: the row is in registers, and a second pass over them costs no memory traffic.
//
//   klab test 08
//   klab bench 08 --impl v1_warp_welford,v2_block_registers
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "klab/device/block.cuh"
#include "klab/device/vec.cuh"
#include "klab/device/warp.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#include "layernorm.cuh"
#include "layernorm_row.cuh"
#include "layernorm_triton.h"

// The op (inputs, reference, tolerances, shapes): layernorm_ops.cu.

namespace lesson08 {
namespace {

using i64 = std::int64_t;

// ============================================================================================
// v1_warp_welford
// ============================================================================================

// A running (count, mean, M2): M2 is the sum of squared deviations from the running mean.
struct Welford {
  float n, mean, m2;
};

// Welford's update with one more element x.
__device__ __forceinline__ void welford_add(Welford& w, float x) {
  w.n += 1.f;
  const float d = x - w.mean;
  w.mean += d / w.n;
  w.m2 += d * (x - w.mean);
}

// Chan's merge of two partial triples: the counts add, the mean moves by the difference of
// the means weighted by the other's share, and M2 gains the between-parts term.
__device__ __forceinline__ Welford welford_merge(Welford a, Welford b) {
  const float n = a.n + b.n;
  if (n == 0.f) return a;
  const float d = b.mean - a.mean, fb = b.n / n;
  return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * a.n * fb};
}

// Every lane returns the warp's merged triple: a butterfly of five shuffle rounds.
__device__ __forceinline__ Welford warp_welford(Welford w) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Welford other{__shfl_xor_sync(klab::kFullMask, w.n, o), __shfl_xor_sync(klab::kFullMask, w.mean, o),
                        __shfl_xor_sync(klab::kFullMask, w.m2, o)};
    w = welford_merge(w, other);
  }
  return w;
}

constexpr int kV1Warps = 8;   // rows a 256-thread block

// Grid: ceil(rows / 8) blocks of 8 warps; warp w of block b takes row 8 b + w.
template <class T>
__global__ void __launch_bounds__(kV1Warps * 32)
layernorm_v1_warp_welford(const T* __restrict__ g_x, const T* __restrict__ g_gamma, const T* __restrict__ g_beta,
                          T* __restrict__ g_y, float* __restrict__ g_mean, float* __restrict__ g_rstd, i64 rows,
                          int cols) {
  const i64 row = static_cast<i64>(blockIdx.x) * kV1Warps + (threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  if (row >= rows) return;                          // a whole warp leaves together
  const T* x = g_x + row * cols;
  Welford w{0.f, 0.f, 0.f};
  for (int j = lane; j < cols; j += 32) welford_add(w, klab::to_f32(x[j]));
  w = warp_welford(w);
  const float mean = w.mean;
  const float rstd = rsqrtf(w.m2 / static_cast<float>(cols) + kEps);
  if (lane == 0) {
    g_mean[row] = mean;
    g_rstd[row] = rstd;
  }
  T* y = g_y + row * cols;
  for (int j = lane; j < cols; j += 32)
    y[j] = klab::from_f32<T>((klab::to_f32(x[j]) - mean) * rstd * klab::to_f32(g_gamma[j]) + klab::to_f32(g_beta[j]));
}

void launch_v1(const LnArgs& a, klab::DType dtype, cudaStream_t stream) {
  if (a.rows == 0) return;
  klab::dispatch_f32_bf16(dtype, [&]<class T>() {
    const auto blocks = static_cast<unsigned>(klab::ceil_div<i64>(a.rows, kV1Warps));
    layernorm_v1_warp_welford<T><<<blocks, kV1Warps * 32, 0, stream>>>(
        static_cast<const T*>(a.x), static_cast<const T*>(a.gamma), static_cast<const T*>(a.beta), static_cast<T*>(a.y),
        a.mean, a.rstd, a.rows, static_cast<int>(a.cols));
  });
  KLAB_CHECK_LAUNCH();
}

void run_v1_warp_welford(const klab::Launch& l) { launch_v1(ln_args(l), l.problem.dtype, l.stream); }

std::string supports_v1(const klab::Problem& p) {
  if (klab::ceil_div<i64>(p.shape[0], kV1Warps) > 0x7fffffff) return "too many rows for one grid";
  return "";
}

// ============================================================================================
// v2_block_registers
// ============================================================================================

template <class T, int VEC, int NV>
__global__ void __launch_bounds__(1024)
layernorm_v2_block_registers(const T* __restrict__ g_x, const T* __restrict__ g_gamma, const T* __restrict__ g_beta,
                             T* __restrict__ g_y, float* __restrict__ g_mean, float* __restrict__ g_rstd, int cols) {
  norm_row_in_registers<T, VEC, NV, false>(g_x, g_gamma, g_beta, g_y, g_mean, g_rstd, cols);
}

// rmsnorm's v1_block_registers: the same kernel without the mean.
template <class T, int VEC, int NV>
__global__ void __launch_bounds__(1024)
rmsnorm_v1_block_registers(const T* __restrict__ g_x, const T* __restrict__ g_gamma, T* __restrict__ g_y,
                           float* __restrict__ g_rstd, int cols) {
  norm_row_in_registers<T, VEC, NV, true>(g_x, g_gamma, nullptr, g_y, nullptr, g_rstd, cols);
}

template <class T, int VEC, bool RMS>
void launch_v2(const LnArgs& a, cudaStream_t stream) {
  const RowPlan pl = plan_row_registers(a.cols, VEC);
  dispatch_row_nv<VEC>(pl.nv, [&]<int NV>() {
    const auto grid = static_cast<unsigned>(a.rows);
    if constexpr (RMS)
      rmsnorm_v1_block_registers<T, VEC, NV><<<grid, pl.threads, 0, stream>>>(
          static_cast<const T*>(a.x), static_cast<const T*>(a.gamma), static_cast<T*>(a.y), a.rstd,
          static_cast<int>(a.cols));
    else
      layernorm_v2_block_registers<T, VEC, NV><<<grid, pl.threads, 0, stream>>>(
          static_cast<const T*>(a.x), static_cast<const T*>(a.gamma), static_cast<const T*>(a.beta),
          static_cast<T*>(a.y), a.mean, a.rstd, static_cast<int>(a.cols));
  });
}

template <bool RMS>
void run_block_registers(const LnArgs& a, klab::DType dtype, cudaStream_t stream) {
  if (a.rows == 0) return;
  klab::dispatch_f32_bf16(dtype, [&]<class T>() {
    constexpr int VEC = klab::kVec16<T>;
    const bool vec_ok = a.cols % VEC == 0 && klab::aligned16(a.x) && klab::aligned16(a.y) && klab::aligned16(a.gamma) &&
                        (RMS || klab::aligned16(a.beta));
    if (vec_ok) launch_v2<T, VEC, RMS>(a, stream);
    else launch_v2<T, 1, RMS>(a, stream);
  });
  KLAB_CHECK_LAUNCH();
}

void run_v2_block_registers(const klab::Launch& l) { run_block_registers<false>(ln_args(l), l.problem.dtype, l.stream); }

// rmsnorm's inputs (x, gamma) and outputs (y, rstd) in layernorm's arguments.
void run_rms_v1_block_registers(const klab::Launch& l) {
  const LnArgs a{l.in[0].data, l.in[1].data, nullptr, l.out[0].data, nullptr, l.out[1].as<float>(),
                 l.problem.shape[0], l.problem.shape[1]};
  run_block_registers<true>(a, l.problem.dtype, l.stream);
}

std::string supports_v2(const klab::Problem& p) {
  if (p.shape[1] > kRowRegistersMaxCols) return "rows longer than 32,768 elements do not fit in one block's registers";
  if (p.shape[0] > 0x7fffffff) return "too many rows for one grid";
  return "";
}

// ============================================================================================
// v3_block_welford_long_rows
// ============================================================================================

// For rows too long for v2's registers (past 32,768 elements), and any other: one block a row,
// v1's Welford at block scale. Each thread folds its 16-byte vectors of the row (elements
// one at a time where the row is not whole vectors) into a running triple, the block merges
// the triples (shuffles in each warp, then warp 0 over the warps' results in shared memory),
// and a second read of the row writes y. Two reads and one write: 3 tensors' traffic where
// v2 moves 2, but no row is too long. The second read finds much of the row in L2 (a
// 131,072-element fp32 row is 512 KB).
constexpr int kV3Threads = 512;

template <class T, int VEC>
__global__ void __launch_bounds__(kV3Threads)
layernorm_v3_block_welford_long_rows(const T* __restrict__ g_x, const T* __restrict__ g_gamma,
                                     const T* __restrict__ g_beta, T* __restrict__ g_y, float* __restrict__ g_mean,
                                     float* __restrict__ g_rstd, int cols) {
  using V = klab::Vec<T, VEC>;
  __shared__ Welford s_w[kV3Threads / 32];
  __shared__ float s_stat[2];                       // the row's mean and rstd
  const i64 row = blockIdx.x;
  const T* x = g_x + row * cols;
  const int vecs = cols / VEC, warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  Welford w{0.f, 0.f, 0.f};
  for (int v = threadIdx.x; v < vecs; v += kV3Threads) {
    const V r = *reinterpret_cast<const V*>(x + v * VEC);   // cols is a multiple of VEC
#pragma unroll
    for (int i = 0; i < VEC; ++i) welford_add(w, klab::to_f32(r.v[i]));
  }
  w = warp_welford(w);
  if (lane == 0) s_w[warp] = w;
  __syncthreads();
  if (warp == 0) {
    Welford b = lane < kV3Threads / 32 ? s_w[lane] : Welford{0.f, 0.f, 0.f};
    b = warp_welford(b);
    if (lane == 0) {
      s_stat[0] = b.mean;
      s_stat[1] = rsqrtf(b.m2 / static_cast<float>(cols) + kEps);
      g_mean[row] = s_stat[0];
      g_rstd[row] = s_stat[1];
    }
  }
  __syncthreads();
  const float mean = s_stat[0], rstd = s_stat[1];
  T* y = g_y + row * cols;
  for (int v = threadIdx.x; v < vecs; v += kV3Threads) {
    const V r = *reinterpret_cast<const V*>(x + v * VEC);
    const V g = *reinterpret_cast<const V*>(g_gamma + v * VEC), b = *reinterpret_cast<const V*>(g_beta + v * VEC);
    V out;
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      out.v[i] = klab::from_f32<T>((klab::to_f32(r.v[i]) - mean) * rstd * klab::to_f32(g.v[i]) + klab::to_f32(b.v[i]));
    *reinterpret_cast<V*>(y + v * VEC) = out;
  }
}

void run_v3_block_welford_long_rows(const klab::Launch& l) {
  const LnArgs a = ln_args(l);
  if (a.rows == 0) return;
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    constexpr int VEC = klab::kVec16<T>;
    const bool vec_ok = a.cols % VEC == 0 && klab::aligned16(a.x) && klab::aligned16(a.y) && klab::aligned16(a.gamma) &&
                        klab::aligned16(a.beta);
    const auto grid = static_cast<unsigned>(a.rows);
    const auto* x = static_cast<const T*>(a.x);
    const auto* g = static_cast<const T*>(a.gamma);
    const auto* b = static_cast<const T*>(a.beta);
    auto* y = static_cast<T*>(a.y);
    if (vec_ok)
      layernorm_v3_block_welford_long_rows<T, VEC>
          <<<grid, kV3Threads, 0, l.stream>>>(x, g, b, y, a.mean, a.rstd, static_cast<int>(a.cols));
    else
      layernorm_v3_block_welford_long_rows<T, 1>
          <<<grid, kV3Threads, 0, l.stream>>>(x, g, b, y, a.mean, a.rstd, static_cast<int>(a.cols));
  });
  KLAB_CHECK_LAUNCH();
}

std::string supports_v3(const klab::Problem& p) {
  if (p.shape[0] > 0x7fffffff) return "too many rows for one grid";
  return "";
}

// ============================================================================================
// triton
// ============================================================================================

// layernorm_triton.py: one program a row, the row as one block of the smallest compiled
// width that holds it.
std::string supports_triton(const klab::Problem& p) {
  if (p.shape[1] > 32768) return "rows longer than 32,768 elements (the widest block compiled)";
  if (p.shape[0] > 0x7fffffff) return "too many rows for one grid";
  return klab::triton_supported();
}

void run_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const LnArgs a = ln_args(l);
  if (a.rows == 0) return;
  klab::triton_prepare();
  const auto ptr = [](const void* q) { return reinterpret_cast<CUdeviceptr>(q); };
  const CUdeviceptr x = ptr(a.x), g = ptr(a.gamma), b = ptr(a.beta), y = ptr(a.y), m = ptr(a.mean), r = ptr(a.rstd);
  const auto rows = static_cast<std::int32_t>(a.rows), cols = static_cast<std::int32_t>(a.cols);
  const bool f32 = l.problem.dtype == klab::DType::f32;
  CUresult rc;
  if (cols <= 1024) rc = f32 ? tr_layernorm_f32_1024_default(l.stream, x, g, b, y, m, r, rows, cols, kEps)
                             : tr_layernorm_bf16_1024_default(l.stream, x, g, b, y, m, r, rows, cols, kEps);
  else if (cols <= 4096) rc = f32 ? tr_layernorm_f32_4096_default(l.stream, x, g, b, y, m, r, rows, cols, kEps)
                                  : tr_layernorm_bf16_4096_default(l.stream, x, g, b, y, m, r, rows, cols, kEps);
  else if (cols <= 16384) rc = f32 ? tr_layernorm_f32_16384_default(l.stream, x, g, b, y, m, r, rows, cols, kEps)
                                   : tr_layernorm_bf16_16384_default(l.stream, x, g, b, y, m, r, rows, cols, kEps);
  else rc = f32 ? tr_layernorm_f32_32768_default(l.stream, x, g, b, y, m, r, rows, cols, kEps)
                : tr_layernorm_bf16_32768_default(l.stream, x, g, b, y, m, r, rows, cols, kEps);
  KLAB_CHECK_CU(rc);
#else
  (void)l;
#endif
}

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "layernorm", .name = "v1_warp_welford",
                                   .summary = "a warp a row: Welford's running (count, mean, M2), merged by "
                                              "shuffles, then a second read to write y",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v1,
                                   .run = run_v1_warp_welford}));
KLAB_REGISTER(klab::register_impl({.op = "layernorm", .name = "v2_block_registers",
                                   .summary = "a block a row, held in registers (16-byte loads): mean, then "
                                              "the variance from the same registers, one read and one write",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v2,
                                   .run = run_v2_block_registers}));
KLAB_REGISTER(klab::register_impl({.op = "layernorm", .name = "v3_block_welford_long_rows",
                                   .summary = "a block a row of any length: Welford's triples merged across the "
                                              "block, then a second read to write y",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v3,
                                   .run = run_v3_block_welford_long_rows}));
KLAB_REGISTER(klab::register_impl({.op = "layernorm", .name = "triton",
                                   .summary = "Triton, one program a row: the row as one block, mean and "
                                              "variance in two passes over it",
                                   .kind = klab::ImplKind::triton,
                                   .supports = supports_triton,
                                   .run = run_triton}));
KLAB_REGISTER(klab::register_impl({.op = "rmsnorm", .name = "v1_block_registers",
                                   .summary = "layernorm's v2_block_registers without the mean: the row in "
                                              "registers, one block sum of x^2, one read and one write",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v2,
                                   .run = run_rms_v1_block_registers}));

}  // namespace

// layernorm.cuh declares it: v2 where the row fits a block's registers, else v1.
void layernorm_forward(const LnArgs& a, klab::DType dtype, cudaStream_t stream) {
  if (a.cols <= kRowRegistersMaxCols) run_block_registers<false>(a, dtype, stream);
  else launch_v1(a, dtype, stream);
}

}  // namespace lesson08
