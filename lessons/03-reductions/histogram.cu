// Lesson 03 — 256-bin histogram of u8 or int32 values.
//
// Semantics: bins[v] = number of i with x[i] == v, for v in [0, 256); values outside
// [0, 256) (int32 only) are not counted, as in cub::DeviceHistogram::HistogramEven with
// levels 0..256. Counts are int32 and exact (integer atomics are order-independent).
//
// Variants: "uniform" (every value equally likely) and "skewed" (90% of the values are
// 42, and for int32 about 2% are out of range): skewed data makes many threads hit the
// same bin at once, which is what privatization is for.
//
// Versions:
//   v1_global_atomics     one atomicAdd on global memory per element
//   v2_smem_private       a private 256-bin histogram per block in shared memory; the block
//                         merges it into global memory with one atomic per non-zero bin
//   v3_warp_private_vec   one private histogram per WARP (16 per block: fewer threads
//                         collide on a bin), 16-byte loads (16 u8 or 4 int32 per load), a
//                         grid of exactly the resident blocks
//   cub                   cub::DeviceHistogram::HistogramEven
//
// Run:  klab test 03 --op histogram     klab bench 03 --op histogram --variant skewed
#include <cub/device/device_histogram.cuh>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "reductions.cuh"

namespace {

using klab::DType;
using klab::Problem;
using klab::TensorSpec;

constexpr int kBins = 256;

// ---------------------------------------------------------------------------------------
// Inputs and CPU reference
// ---------------------------------------------------------------------------------------

void generate_histogram(const Problem& p, std::uint64_t seed, klab::Inputs& in) {
  auto& t = in.tensors[0];
  klab::fill_int(t, klab::derive_seed(seed, 0), 0, 255);
  if (p.variant != "skewed") return;
  const std::uint64_t s = klab::derive_seed(seed, 1);
  const bool is_u8 = p.dtype == DType::u8;
  klab::parallel_for(t.numel(), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const double u = klab::uniform01(s, static_cast<std::uint64_t>(i));
      int v = -1;
      if (u < 0.90) v = 42;
      else if (!is_u8 && u < 0.91) v = -7;     // out of range: not counted
      else if (!is_u8 && u < 0.92) v = 300;    // out of range: not counted
      if (v == -1) continue;
      if (is_u8) t.as<std::uint8_t>()[i] = static_cast<std::uint8_t>(v);
      else t.as<std::int32_t>()[i] = v;
    }
  });
}

klab::Reference histogram_ref(const Problem& p, const klab::Inputs& in) {
  const auto& t = in.tensors[0];
  std::vector<std::atomic<std::int64_t>> bins(kBins);
  klab::parallel_for(t.numel(), [&](std::int64_t b, std::int64_t e) {
    std::int64_t local[kBins] = {};
    for (std::int64_t i = b; i < e; ++i) {
      const std::int64_t v = p.dtype == DType::u8 ? t.as<std::uint8_t>()[i] : t.as<std::int32_t>()[i];
      if (v >= 0 && v < kBins) ++local[v];
    }
    for (int k = 0; k < kBins; ++k) bins[k] += local[k];
  });
  klab::RefArray r(kBins);
  for (int k = 0; k < kBins; ++k) r[k] = static_cast<double>(bins[k].load());
  return klab::single_output(std::move(r));
}

// ---------------------------------------------------------------------------------------
// Op spec: shapes, validation, tolerances
// ---------------------------------------------------------------------------------------

klab::Op make_histogram_op() {
  klab::Op op;
  op.lesson = "03";
  op.name = "histogram";
  op.summary = "256-bin histogram of u8/i32 (int32 counts, exact; out-of-range i32 values dropped)";
  op.dims = {"n"};
  op.dtypes = {DType::u8, DType::i32};
  op.variants = {"uniform", "skewed"};
  // 15 and 17 sit around v3's 16 u8 per load. From 1000003 on v1's grid (one element per
  // thread) is capped at the resident blocks and its grid-stride loop repeats; v2 and v3 give
  // each thread 16 and 64 elements, so theirs repeat on every shape past a block's worth.
  op.test_shapes = {{0}, {1}, {7}, {15}, {17}, {127}, {1023}, {4097}, {65537}, {1000003}, {(1 << 24) + 3},
                    {(std::int64_t{1} << 31) + 17}};  // past 2^31: 2 GiB of u8, 8 GiB of i32
  op.bench_shapes = {{1 << 24}, {1 << 28}};
  op.baseline = "cub";
  op.tour = {"v1_global_atomics", "v3_warp_private_vec"};
  op.bound = klab::Bound::memory_read;   // bytes (the default): x read once, 256 counts written
  op.validate = lesson03::validate_1d;
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", p.dtype, p.shape}}; };
  op.outputs = [](const Problem&) { return std::vector<TensorSpec>{{"bins", DType::i32, {kBins}}}; };
  op.generate = generate_histogram;
  op.reference = histogram_ref;
  op.tolerance = [](const Problem&, int) { return klab::Tolerance{0, 0}; };
  return op;
}

// ---------------------------------------------------------------------------------------
// Kernels (S = std::uint8_t or int: the sample type)
// ---------------------------------------------------------------------------------------

template <class S>
__device__ __forceinline__ bool in_range(S v) {
  if constexpr (sizeof(S) == 1) return true;
  else return static_cast<unsigned>(v) < static_cast<unsigned>(kBins);  // negatives wrap to huge
}

// v1_global_atomics: every element is an atomic on one of 256 global counters. They are
// serialized per address in L2; with skewed data most of them hit the same address.
template <class S>
__global__ void histogram_v1_global_atomics(const S* __restrict__ g_x, int* __restrict__ g_bins, std::int64_t n) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const S v = g_x[i];
    if (in_range(v)) atomicAdd(&g_bins[v], 1);
  }
}

// v2_smem_private: the same atomics, on shared memory (a few cycles instead of an L2 round
// trip), and only 256 global atomics per block at the end.
template <class S>
__global__ void histogram_v2_smem_private(const S* __restrict__ g_x, int* __restrict__ g_bins, std::int64_t n) {
  __shared__ int s_bins[kBins];
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) s_bins[b] = 0;
  __syncthreads();
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const S v = g_x[i];
    if (in_range(v)) atomicAdd(&s_bins[v], 1);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += blockDim.x)
    if (s_bins[b] != 0) atomicAdd(&g_bins[b], s_bins[b]);
}

constexpr int kV3Threads = 512, kV3Warps = kV3Threads / 32;
static_assert(kV3Threads % 32 == 0 && kV3Threads <= 1024, "v3: one histogram per whole warp");
static_assert(kV3Warps * kBins * sizeof(int) <= 48 * 1024, "v3: the warps' histograms fit in static shared memory");

// v3_warp_private_vec: 16 warp-private histograms (16 KB of shared memory). A bin's counter
// is shared by the 32 lanes of one warp instead of the 512 threads of the block.
template <class S>
__global__ void __launch_bounds__(kV3Threads)
    histogram_v3_warp_private_vec(const S* __restrict__ g_x, int* __restrict__ g_bins, std::int64_t n, bool aligned) {
  static_assert(16 % sizeof(S) == 0, "whole samples per 16-byte load");
  constexpr int V = 16 / sizeof(S);  // samples per 16-byte load
  __shared__ int s_bins[kV3Warps][kBins];  // (warps, 256)
  for (int k = threadIdx.x; k < kV3Warps * kBins; k += kV3Threads) (&s_bins[0][0])[k] = 0;
  __syncthreads();
  int* s_mine = s_bins[threadIdx.x >> 5];
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * kV3Threads;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * kV3Threads + threadIdx.x;
  const std::int64_t nvec = aligned ? n / V : 0;
  for (std::int64_t v = tid; v < nvec; v += step) {
    union {
      uint4 u;
      S s[V];
    } r_q;
    r_q.u = reinterpret_cast<const uint4*>(g_x)[v];
#pragma unroll
    for (int k = 0; k < V; ++k)
      if (in_range(r_q.s[k])) atomicAdd(&s_mine[r_q.s[k]], 1);
  }
  for (std::int64_t i = nvec * V + tid; i < n; i += step) {  // the n % V tail
    const S s = g_x[i];
    if (in_range(s)) atomicAdd(&s_mine[s], 1);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += kV3Threads) {
    int c = 0;
#pragma unroll
    for (int w = 0; w < kV3Warps; ++w) c += s_bins[w][b];
    if (c != 0) atomicAdd(&g_bins[b], c);
  }
}

// ---------------------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------------------

template <class F>
void dispatch_sample(DType t, F&& f) {
  if (t == DType::u8) f.template operator()<std::uint8_t>();
  else f.template operator()<int>();
}

// The atomics add onto zeros: every launcher zeroes the bins first.
void zero_bins(const klab::Launch& l) {
  KLAB_CHECK_CUDA(cudaMemsetAsync(l.out[0].data, 0, kBins * sizeof(int), l.stream));
}

void run_v1_global_atomics(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  zero_bins(l);
  if (n == 0) return;
  dispatch_sample(l.problem.dtype, [&]<class S>() {
    static const int cap = lesson03::resident_blocks(histogram_v1_global_atomics<S>, 256);
    histogram_v1_global_atomics<S><<<lesson03::grid_for(n, 256, cap), 256, 0, l.stream>>>(
        l.in[0].as<S>(), l.out[0].as<int>(), n);
    KLAB_CHECK_LAUNCH();
  });
}

void run_v2_smem_private(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  zero_bins(l);
  if (n == 0) return;
  dispatch_sample(l.problem.dtype, [&]<class S>() {
    static const int cap = lesson03::resident_blocks(histogram_v2_smem_private<S>, 256);
    histogram_v2_smem_private<S><<<lesson03::grid_for(n, 256 * 16, cap), 256, 0, l.stream>>>(
        l.in[0].as<S>(), l.out[0].as<int>(), n);
    KLAB_CHECK_LAUNCH();
  });
}

void run_v3_warp_private_vec(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  zero_bins(l);
  if (n == 0) return;
  dispatch_sample(l.problem.dtype, [&]<class S>() {
    static const int cap = lesson03::resident_blocks(histogram_v3_warp_private_vec<S>, kV3Threads);
    const S* x = l.in[0].as<S>();
    const bool aligned = reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
    histogram_v3_warp_private_vec<S><<<lesson03::grid_for(n, kV3Threads * 64, cap), kV3Threads, 0, l.stream>>>(
        x, l.out[0].as<int>(), n, aligned);
    KLAB_CHECK_LAUNCH();
  });
}

// CUB: 257 levels 0, 1, ..., 256 make 256 bins [v, v + 1); samples outside are dropped.
std::size_t cub_histogram_bytes(const Problem& p) {
  std::size_t bytes = 0;
  dispatch_sample(p.dtype, [&]<class S>() {
    KLAB_CHECK_CUDA(cub::DeviceHistogram::HistogramEven(nullptr, bytes, static_cast<const S*>(nullptr),
                                                        static_cast<int*>(nullptr), kBins + 1, 0, kBins,
                                                        p.shape[0]));
  });
  return bytes;
}

void run_cub(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) {  // nothing to count: write the zeros ourselves rather than rely on CUB's n = 0 path
    KLAB_CHECK_CUDA(cudaMemsetAsync(l.out[0].data, 0, kBins * sizeof(int), l.stream));
    return;
  }
  dispatch_sample(l.problem.dtype, [&]<class S>() {
    std::size_t bytes = l.workspace_bytes;
    KLAB_CHECK_CUDA(cub::DeviceHistogram::HistogramEven(l.workspace, bytes, l.in[0].as<S>(), l.out[0].as<int>(),
                                                        kBins + 1, 0, kBins, n, l.stream));
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------

KLAB_REGISTER(klab::register_op(make_histogram_op()));
KLAB_REGISTER(klab::register_impl({.op = "histogram", .name = "v1_global_atomics",
                                   .summary = "one global atomicAdd per element",
                                   .kind = klab::ImplKind::cuda, .run = run_v1_global_atomics}));
KLAB_REGISTER(klab::register_impl({.op = "histogram", .name = "v2_smem_private",
                                   .summary = "per-block shared-memory bins, merged with 256 atomics",
                                   .kind = klab::ImplKind::cuda, .run = run_v2_smem_private}));
KLAB_REGISTER(klab::register_impl({.op = "histogram", .name = "v3_warp_private_vec",
                                   .summary = "per-warp shared-memory bins, 16-byte loads",
                                   .kind = klab::ImplKind::cuda, .run = run_v3_warp_private_vec}));
KLAB_REGISTER(klab::register_impl({.op = "histogram", .name = "cub",
                                   .summary = "cub::DeviceHistogram::HistogramEven (257 levels)",
                                   .kind = klab::ImplKind::vendor, .workspace = cub_histogram_bytes,
                                   .run = run_cub}));
