// Lesson 03 — sum and mean of a vector (fp32, int32).
//
// Versions of sum:
//   v1_smem_tree       one element per thread, tree in shared memory, one launch per level
//                      (n -> n/256 -> n/65536 -> ... -> 1); deterministic
//   v2_warp_shuffle    each thread first adds a grid-stride slice in registers; the block
//                      combines them with warp shuffles (klab::block_sum, no shared-memory
//                      tree); a second 1-block launch adds the per-block partials; deterministic
//   v3_atomic          one pass: each block atomicAdd's its partial into the output (zeroed
//                      by a memset first). fp32: NOT bitwise reproducible (the order of the
//                      atomics changes from run to run); int32: exact
//   v4_vec_last_block  16-byte loads, 4 in flight per thread, one launch: the last block to
//                      finish (found with an atomic ticket) adds the partials in a fixed
//                      order; deterministic, no memset, no second launch
//   v5_dynamic_chunks  v4's loads, but blocks take 16 KB chunks from an atomic counter
//                      (one grab ahead) until none are left: SMs that the memory system
//                      serves faster take more. One launch, no memset. fp32: NOT bitwise
//                      reproducible (which chunks a block adds depends on timing); int32: exact
//   cub                cub::DeviceReduce::Sum
//   triton             reduce_triton.py: two launches (chunk partials, then one program),
//                      the chunk and program shape timed per shape (klab::autotune)
//   exercise           (registered by exercise.cu) the warp-shuffle block reduction, written by you
// Versions of mean:
//   v1_vec_last_block  sum's v4_vec_last_block kernel, whose last block divides by n
//   cub                cub::DeviceReduce::Sum, then a 1-thread divide
//
// int32 sums wrap mod 2^32 (the reference wraps the exact sum the same way); fp32 sums are
// checked with a tolerance that grows with n (reductions.cuh says why).
//
// Run:  klab test 03 --op sum,mean     klab bench 03 --op sum,mean     klab check 03 (the exercise)
#include <cub/device/device_reduce.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "klab/autotune.hpp"
#include "klab/device/block.cuh"
#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "klab/triton.hpp"
#include "reductions.cuh"

#if KLAB_HAVE_TRITON
#include "reduce_triton.h"
#endif

namespace {

using klab::DType;
using klab::Problem;
using klab::TensorSpec;
using lesson03::acc_t;
using lesson03::vec4_t;

// ---------------------------------------------------------------------------------------
// CPU references (fp64; int32 exact, then wrapped mod 2^32)
// ---------------------------------------------------------------------------------------

double wrap_i32(std::int64_t s) {
  return static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(s))));
}

double sum_of(const Problem& p, const klab::HostTensor& x) {
  const std::int64_t n = p.shape[0];
  if (p.dtype == DType::i32) {
    const std::int32_t* v = x.as<std::int32_t>();
    std::int64_t s = 0;
    for (std::int64_t i = 0; i < n; ++i) s += v[i];
    return wrap_i32(s);
  }
  const float* v = x.as<float>();
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += v[i];
  return s;
}

klab::Reference sum_ref(const Problem& p, const klab::Inputs& in) { return {{sum_of(p, in.tensors[0])}}; }

klab::Reference mean_ref(const Problem& p, const klab::Inputs& in) {
  const std::int64_t n = p.shape[0];
  // The mean of nothing is NaN (0/0), as in NumPy and PyTorch; kernels write it.
  return {{n == 0 ? std::nan("") : sum_of(p, in.tensors[0]) / static_cast<double>(n)}};
}

// ---------------------------------------------------------------------------------------
// Op spec: shapes, validation, tolerances
// ---------------------------------------------------------------------------------------

// Grid loops: v2 and v3 give each thread 8 and 4 elements, so their grid-stride loops repeat
// from a few thousand elements on; at (1 << 24) + 3 v4's grid reaches the resident blocks
// and its four-loads-per-trip loop repeats (3-4 trips), and v5's ~1025 blocks take about 4
// of its 4096 chunks each. Past 2^31 elements (8 GiB per dtype): flat indices and loop
// counters must be 64-bit.
std::vector<klab::Dims> reduction_test_shapes() {
  return {{0},     {1},     {2},       {7},     {31},     {127},         {255},
          {257},   {1023},  {4097},    {65537}, {1000003}, {(1 << 24) + 3}, {(std::int64_t{1} << 31) + 17}};
}

klab::Op make_sum_op() {
  klab::Op op;
  op.lesson = "03";
  op.name = "sum";
  op.summary = "s = sum(x): tree, warp shuffles, atomics, one pass (f32 with a length-scaled tolerance, i32 exact)";
  op.dims = {"n"};
  op.dtypes = {DType::f32, DType::i32};
  op.test_shapes = reduction_test_shapes();
  op.bench_shapes = {{1 << 24}, {1 << 28}};
  op.baseline = "cub";
  op.tour = {"v1_smem_tree", "v5_dynamic_chunks"};
  op.bound = klab::Bound::memory_read;   // bytes (the default): x read once, one value written
  op.validate = lesson03::validate_1d;
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", p.dtype, p.shape}}; };
  op.outputs = [](const Problem& p) { return std::vector<TensorSpec>{{"s", p.dtype, {1}}}; };
  op.reference = sum_ref;  // default inputs: f32 uniform in [-1, 1), i32 in [0, 255]
  op.tolerance = [](const Problem& p, int) {
    return p.dtype == DType::i32 ? klab::Tolerance{0, 0} : lesson03::float_sum_tolerance(p.shape[0]);
  };
  op.flops = [](const Problem& p) { return static_cast<double>(p.shape[0]); };
  return op;
}

// The mean is an fp32 sum divided by n: the sum's error, divided by n, plus rtol 1e-6 for the
// division and the store (2 roundings of u = 2^-24). Neither mean impl adds in an arbitrary
// order, so the sum's bound uses the depth of their summation trees (reductions.cuh), not n:
//   v1 (sum v4): each thread adds a 16-element tree per trip into its register, over at most
//     ceil(n / T) elements, T = 256 x the resident blocks (v4_grid); then 10 levels of
//     block_sum, the last block's chain over <= 8 partials per thread, 10 levels again.
//   cub: each thread adds its items in a chain, T = 256 x min(tiles, 5 x the resident
//     blocks) threads; a block reduction; one block reduces the partials the same way.
// Every GPU this lesson runs on (cc >= 8.0, >= 16 SMs of >= 1024 resident threads) holds
// T >= 2^14 threads, so no term passes through more than ceil(n / 2^14) + 64 additions (64
// covers the trees and the partials' chains). With the any-order depth n, the bound at n =
// 2^22 (0.58) would accept a mean that left out or added one element of size < 0.58; with
// this depth it is 5e-3 (and 2.3 at n = 2^31, not 295).
klab::Tolerance mean_tolerance(const Problem& p, int) {
  const std::int64_t n = p.shape[0];
  const std::int64_t depth = std::min<std::int64_t>(n, klab::ceil_div<std::int64_t>(n, std::int64_t{1} << 14) + 64);
  const double sum_atol = lesson03::float_sum_tolerance(n, depth).atol;
  return klab::Tolerance{sum_atol / static_cast<double>(std::max<std::int64_t>(n, 1)), 1e-6};
}

klab::Op make_mean_op() {
  klab::Op op;
  op.lesson = "03";
  op.name = "mean";
  op.summary = "m = sum(x) / n (mean of nothing = NaN)";
  op.dims = {"n"};
  op.dtypes = {DType::f32};
  op.test_shapes = reduction_test_shapes();
  op.bench_shapes = {{1 << 24}, {1 << 28}};
  op.baseline = "cub";
  op.tour = {"v1_vec_last_block"};
  op.bound = klab::Bound::memory_read;   // bytes (the default): x read once, one value written
  op.validate = lesson03::validate_1d;
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", p.dtype, p.shape}}; };
  op.outputs = [](const Problem& p) { return std::vector<TensorSpec>{{"m", p.dtype, {1}}}; };
  op.reference = mean_ref;
  op.tolerance = mean_tolerance;
  op.flops = [](const Problem& p) { return static_cast<double>(p.shape[0]); };
  return op;
}

// ---------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------

constexpr int kThreads = 256;
static_assert((kThreads & (kThreads - 1)) == 0, "v1's tree halves the block: a power of two");
static_assert(kThreads % 32 == 0 && kThreads <= 1024, "klab::block_sum: whole warps, at most 32 of them");

// v1_smem_tree: 256 elements per block, one per thread, halved in shared memory 8 times.
// "Sequential addressing" (s = 128, 64, ..., 1 with thread i adding i + s) keeps the
// active threads contiguous (whole warps retire) and is bank-conflict free.
template <class In, class A>
__global__ void sum_v1_smem_tree(const In* __restrict__ g_in, A* __restrict__ g_out, std::int64_t n) {
  __shared__ A s_data[kThreads];
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  s_data[threadIdx.x] = (i < n) ? static_cast<A>(g_in[i]) : A(0);
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) s_data[threadIdx.x] += s_data[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) g_out[blockIdx.x] = s_data[0];
}

// v2_warp_shuffle: a grid-stride loop first (most of the work happens in registers, with
// no synchronisation), then the block's 256 values go through warp shuffles.
template <class In, class A>
__global__ void sum_v2_warp_shuffle(const In* __restrict__ g_in, A* __restrict__ g_out, std::int64_t n) {
  __shared__ A s_part[32];
  A r_acc = 0;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    r_acc += static_cast<A>(g_in[i]);
  r_acc = klab::block_sum(r_acc, s_part);  // every thread gets the sum; thread 0 writes it
  if (threadIdx.x == 0) g_out[blockIdx.x] = r_acc;
}

// v3_atomic: as v2, but every block adds its partial straight into the output.
template <class In, class A>
__global__ void sum_v3_atomic(const In* __restrict__ g_in, A* __restrict__ g_out, std::int64_t n) {
  __shared__ A s_part[32];
  A r_acc = 0;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    r_acc += static_cast<A>(g_in[i]);
  r_acc = klab::block_sum(r_acc, s_part);
  if (threadIdx.x == 0) atomicAdd(g_out, r_acc);  // the order of these adds varies: fp32 bits vary
}

// v4_vec_last_block. The ticket counter lives in device memory of the module (zero at
// load); atomicInc(ctr, G - 1) counts 0, 1, ..., G - 1 and wraps back to 0, so the last
// block of each launch leaves it at 0 for the next launch: no memset needed.
__device__ unsigned int g_sum_ticket;

template <class A>
__device__ __forceinline__ A hsum(const vec4_t<A>& v) { return (v.x + v.y) + (v.z + v.w); }

// Divide = true is mean's v1_vec_last_block: the last block writes total / n.
template <class In, class A, bool Divide>
__global__ void __launch_bounds__(kThreads)
    sum_v4_vec_last_block(const In* __restrict__ g_in, A* __restrict__ g_partial, A* __restrict__ g_out,
                          std::int64_t n, bool aligned) {
  using V = vec4_t<A>;
  static_assert(sizeof(In) == sizeof(A), "In and A reinterpret the same 4-byte words");
  __shared__ A s_part[32];
  A r_acc = 0;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t nvec = aligned ? n / 4 : 0;  // misaligned input: all of it goes the scalar way
  const V* g_v = reinterpret_cast<const V*>(g_in);
  std::int64_t v = tid;
  // Four independent 16-byte loads per thread per trip: 64 bytes in flight per thread.
  for (; v + 3 * step < nvec; v += 4 * step) {
    const V a = g_v[v], b = g_v[v + step], c = g_v[v + 2 * step], d = g_v[v + 3 * step];
    r_acc += (hsum<A>(a) + hsum<A>(b)) + (hsum<A>(c) + hsum<A>(d));
  }
  for (; v < nvec; v += step) r_acc += hsum<A>(g_v[v]);
  const A* g_s = reinterpret_cast<const A*>(g_in);
  for (std::int64_t i = nvec * 4 + tid; i < n; i += step) r_acc += g_s[i];  // the n % 4 tail
  r_acc = klab::block_sum(r_acc, s_part);

  __shared__ bool s_last;
  if (threadIdx.x == 0) {
    g_partial[blockIdx.x] = r_acc;
    __threadfence();  // the partial is visible device-wide before the ticket is taken
    s_last = atomicInc(&g_sum_ticket, gridDim.x - 1) == gridDim.x - 1;
  }
  __syncthreads();  // also: every thread has read s_part before the second block_sum writes it
  if (!s_last) return;
  // The last block: every other partial is written (their fences precede their tickets).
  // __ldcg reads through L2 (this SM's L1 may hold nothing stale, but say so explicitly).
  A r_tot = 0;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) r_tot += __ldcg(&g_partial[b]);
  r_tot = klab::block_sum(r_tot, s_part);  // fixed order: the same bits on every run
  if (threadIdx.x == 0) {
    if constexpr (Divide) g_out[0] = static_cast<A>(static_cast<double>(r_tot) / static_cast<double>(n));
    else g_out[0] = r_tot;
  }
}

// v5_dynamic_chunks: v4's loads, but the work is handed out at run time. A grid of exactly
// the resident blocks, each taking chunks of 1024 float4s (16 KB: 4 loads in flight per
// thread) from an atomic counter until none are left. With a fixed grid stride (v4) every
// block gets the same share, so the run ends when the slowest SM finishes its share; with
// chunks on demand, an SM that is served faster by the memory system simply takes more
// chunks, and all SMs finish within one chunk of each other. Chunks are taken in order, so
// the bytes in flight stay in one compact window of the array (an equal contiguous range
// per block, CUB's "even share" at one block per slot, measured far slower: one stream
// per block, far apart; README, with the numbers in HISTORY.md).
//  - The first chunk of block b is chunk b (no wait); the counter hands out chunks G, G+1, ...
//  - Thread 0 asks for the NEXT chunk as soon as it knows the current one, so the atomic's
//    round trip overlaps the current loads; the index goes through a double-buffered shared
//    slot, one __syncthreads per chunk.
//  - Finish as v4 (last block adds the partials in a fixed order), and that block resets
//    the counter for the next launch (every block has made its last grab by then).
// fp32: NOT bitwise reproducible: which chunks a block adds, and so the partials, depend on
// timing. int32: exact.
__device__ unsigned int g_sum_chunk;  // chunks handed out beyond the first G; zero between launches

constexpr int kV5Unroll = 4, kV5Chunk = kV5Unroll * kThreads;  // float4s per chunk (16 KB)
static_assert(kV5Unroll >= 1 && kV5Unroll <= 8, "v5: the chunk's loads of a thread are held in registers at once");

template <class In, class A>
__global__ void __launch_bounds__(kThreads)
    sum_v5_dynamic_chunks(const In* __restrict__ g_in, A* __restrict__ g_partial, A* __restrict__ g_out,
                          std::int64_t n, bool aligned) {
  using V = vec4_t<A>;
  static_assert(sizeof(In) == sizeof(A), "In and A reinterpret the same 4-byte words");
  __shared__ unsigned int s_chunk[2];
  __shared__ A s_part[32];
  A r_acc = 0;
  const std::int64_t nvec = aligned ? n / 4 : 0;  // misaligned input: all of it goes the scalar way
  const unsigned nchunks = static_cast<unsigned>(nvec / kV5Chunk);
  const V* g_v = reinterpret_cast<const V*>(g_in);
  unsigned c = blockIdx.x;  // the first chunk needs no counter
  unsigned r_next = 0;      // thread 0: the next chunk, asked for one chunk ahead
  if (threadIdx.x == 0 && c < nchunks) r_next = gridDim.x + atomicAdd(&g_sum_chunk, 1u);
  for (int it = 0; c < nchunks; ++it) {
    const V* g_c = g_v + static_cast<std::int64_t>(c) * kV5Chunk + threadIdx.x;
    V r_vec[kV5Unroll];  // (4 float4) per thread: all four loads issued before the first add
#pragma unroll
    for (int u = 0; u < kV5Unroll; ++u) r_vec[u] = __ldg(g_c + u * kThreads);
    if (threadIdx.x == 0) s_chunk[it & 1] = r_next;  // slot it&1 was last read before the previous barrier
#pragma unroll
    for (int u = 0; u < kV5Unroll; ++u) r_acc += hsum<A>(r_vec[u]);
    __syncthreads();
    c = s_chunk[it & 1];
    if (threadIdx.x == 0 && c < nchunks) r_next = gridDim.x + atomicAdd(&g_sum_chunk, 1u);
  }
  // The rest: the float4s past the last whole chunk, then the n % 4 tail (grid-stride).
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t gstep = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t v = static_cast<std::int64_t>(nchunks) * kV5Chunk + tid; v < nvec; v += gstep)
    r_acc += hsum<A>(__ldg(g_v + v));
  const A* g_s = reinterpret_cast<const A*>(g_in);
  for (std::int64_t i = nvec * 4 + tid; i < n; i += gstep) r_acc += g_s[i];
  r_acc = klab::block_sum(r_acc, s_part);

  __shared__ bool s_last;
  if (threadIdx.x == 0) {
    g_partial[blockIdx.x] = r_acc;
    __threadfence();
    s_last = atomicInc(&g_sum_ticket, gridDim.x - 1) == gridDim.x - 1;
  }
  __syncthreads();  // also: every thread has read s_part before the second block_sum writes it
  if (!s_last) return;
  if (threadIdx.x == 0) g_sum_chunk = 0;  // all grabs are done: ready for the next launch
  A r_tot = 0;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) r_tot += __ldcg(&g_partial[b]);
  r_tot = klab::block_sum(r_tot, s_part);
  if (threadIdx.x == 0) g_out[0] = r_tot;
}

// mean's cub: the one-thread divide after cub::DeviceReduce::Sum.
template <class A>
__global__ void mean_cub_divide_by_n(A* g_x, std::int64_t n) {
  g_x[0] = static_cast<A>(static_cast<double>(g_x[0]) / static_cast<double>(n));
}

// ---------------------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------------------

// f32 -> (float, float); i32 -> (int, unsigned int): f.template operator()<In, A>().
template <class F>
void dispatch_sum(DType t, F&& f) {
  if (t == DType::f32) f.template operator()<float, float>();
  else f.template operator()<int, unsigned int>();
}

// v1: the sizes of the levels that go to the workspace (the last level writes the output).
std::vector<std::int64_t> v1_levels(std::int64_t n) {
  std::vector<std::int64_t> lv;
  for (std::int64_t len = klab::ceil_div<std::int64_t>(n, kThreads); len > 1;
       len = klab::ceil_div<std::int64_t>(len, kThreads))
    lv.push_back(len);
  return lv;
}

std::size_t v1_workspace(const Problem& p) {
  std::size_t b = 0;
  for (auto len : v1_levels(p.shape[0])) b += static_cast<std::size_t>(len) * 4;
  return b;
}

void run_sum_v1_smem_tree(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) {
    KLAB_CHECK_CUDA(cudaMemsetAsync(l.out[0].data, 0, 4, l.stream));  // 0.0f and 0 are all-zero bits
    return;
  }
  dispatch_sum(l.problem.dtype, [&]<class In, class A>() {
    const auto levels = v1_levels(n);
    A* ws = static_cast<A*>(l.workspace);
    A* out = reinterpret_cast<A*>(l.out[0].data);
    // Level 0 reads the input; later levels read the previous level's partials.
    A* dst = levels.empty() ? out : ws;
    sum_v1_smem_tree<In, A><<<klab::blocks_for(n, kThreads), kThreads, 0, l.stream>>>(l.in[0].as<In>(), dst, n);
    KLAB_CHECK_LAUNCH();
    for (std::size_t k = 0; k < levels.size(); ++k) {
      A* src = dst;
      dst = (k + 1 == levels.size()) ? out : src + levels[k];
      sum_v1_smem_tree<A, A><<<klab::blocks_for(levels[k], kThreads), kThreads, 0, l.stream>>>(src, dst, levels[k]);
      KLAB_CHECK_LAUNCH();
    }
  });
}

constexpr int kMaxPartials = 1024;  // v2's second pass is one block: keep its loop short

int v2_grid(std::int64_t n) { return lesson03::grid_for(n, kThreads * 8, kMaxPartials); }

void run_sum_v2_warp_shuffle(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  dispatch_sum(l.problem.dtype, [&]<class In, class A>() {
    A* out = reinterpret_cast<A*>(l.out[0].data);
    const int g = v2_grid(n);
    if (g == 1) {
      sum_v2_warp_shuffle<In, A><<<1, kThreads, 0, l.stream>>>(l.in[0].as<In>(), out, n);  // n = 0 writes 0
    } else {
      A* ws = static_cast<A*>(l.workspace);
      sum_v2_warp_shuffle<In, A><<<g, kThreads, 0, l.stream>>>(l.in[0].as<In>(), ws, n);
      KLAB_CHECK_LAUNCH();
      sum_v2_warp_shuffle<A, A><<<1, kThreads, 0, l.stream>>>(ws, out, g);
    }
    KLAB_CHECK_LAUNCH();
  });
}

void run_sum_v3_atomic(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  KLAB_CHECK_CUDA(cudaMemsetAsync(l.out[0].data, 0, 4, l.stream));
  if (n == 0) return;
  dispatch_sum(l.problem.dtype, [&]<class In, class A>() {
    static const int cap = lesson03::resident_blocks(sum_v3_atomic<In, A>, kThreads);
    sum_v3_atomic<In, A><<<lesson03::grid_for(n, kThreads * 4, cap), kThreads, 0, l.stream>>>(
        l.in[0].as<In>(), reinterpret_cast<A*>(l.out[0].data), n);
    KLAB_CHECK_LAUNCH();
  });
}

template <bool Divide>
int v4_grid(DType t, std::int64_t n) {
  int cap = 0;
  dispatch_sum(t, [&]<class In, class A>() {
    static const int c = lesson03::resident_blocks(sum_v4_vec_last_block<In, A, Divide>, kThreads);
    cap = c;
  });
  return lesson03::grid_for(n, kThreads * 16, cap);  // at least 16 elements per thread
}

template <bool Divide>
std::size_t v4_workspace(const Problem& p) {
  return static_cast<std::size_t>(v4_grid<Divide>(p.dtype, p.shape[0])) * 4;
}

template <bool Divide>
void launch_v4_vec_last_block(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (Divide && n == 0) {  // mean of nothing: NaN (0xFF bytes are a NaN)
    KLAB_CHECK_CUDA(cudaMemsetAsync(l.out[0].data, 0xFF, 4, l.stream));
    return;
  }
  dispatch_sum(l.problem.dtype, [&]<class In, class A>() {
    const bool aligned = reinterpret_cast<std::uintptr_t>(l.in[0].data) % 16 == 0;
    sum_v4_vec_last_block<In, A, Divide><<<v4_grid<Divide>(l.problem.dtype, n), kThreads, 0, l.stream>>>(
        l.in[0].as<In>(), static_cast<A*>(l.workspace), reinterpret_cast<A*>(l.out[0].data), n, aligned);
    KLAB_CHECK_LAUNCH();
  });
}

void run_sum_v4_vec_last_block(const klab::Launch& l) { launch_v4_vec_last_block<false>(l); }
void run_mean_v1_vec_last_block(const klab::Launch& l) { launch_v4_vec_last_block<true>(l); }

// v5: the resident blocks, fewer when n is small (at least one chunk's worth per block).
int v5_grid(DType t, std::int64_t n) {
  int cap = 0;
  dispatch_sum(t, [&]<class In, class A>() {
    static const int c = lesson03::resident_blocks(sum_v5_dynamic_chunks<In, A>, kThreads);
    cap = c;
  });
  return lesson03::grid_for(n, kV5Chunk * 4, cap);
}

std::size_t v5_workspace(const Problem& p) { return static_cast<std::size_t>(v5_grid(p.dtype, p.shape[0])) * 4; }

void run_sum_v5_dynamic_chunks(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  dispatch_sum(l.problem.dtype, [&]<class In, class A>() {
    const bool aligned = reinterpret_cast<std::uintptr_t>(l.in[0].data) % 16 == 0;
    sum_v5_dynamic_chunks<In, A><<<v5_grid(l.problem.dtype, n), kThreads, 0, l.stream>>>(
        l.in[0].as<In>(), static_cast<A*>(l.workspace), reinterpret_cast<A*>(l.out[0].data), n, aligned);
    KLAB_CHECK_LAUNCH();
  });
}

// CUB. The int32 sum goes through unsigned pointers: the same bits, defined wrap-around.
std::size_t cub_sum_bytes(DType t, std::int64_t n) {
  std::size_t bytes = 0;
  dispatch_sum(t, [&]<class In, class A>() {
    KLAB_CHECK_CUDA(cub::DeviceReduce::Sum(nullptr, bytes, static_cast<const A*>(nullptr),
                                           static_cast<A*>(nullptr), n));
  });
  return bytes;
}

void run_sum_cub(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  dispatch_sum(l.problem.dtype, [&]<class In, class A>() {
    std::size_t bytes = l.workspace_bytes;
    KLAB_CHECK_CUDA(cub::DeviceReduce::Sum(l.workspace, bytes, reinterpret_cast<const A*>(l.in[0].data),
                                           reinterpret_cast<A*>(l.out[0].data), n, l.stream));
  });
}

std::size_t mean_cub_workspace(const Problem& p) { return cub_sum_bytes(DType::f32, p.shape[0]); }

void run_mean_cub(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  float* out = l.out[0].as<float>();
  if (n == 0) {
    KLAB_CHECK_CUDA(cudaMemsetAsync(out, 0xFF, 4, l.stream));
    return;
  }
  std::size_t bytes = l.workspace_bytes;
  KLAB_CHECK_CUDA(cub::DeviceReduce::Sum(l.workspace, bytes, l.in[0].as<float>(), out, n, l.stream));
  mean_cub_divide_by_n<float><<<1, 1, 0, l.stream>>>(out, n);
  KLAB_CHECK_LAUNCH();
}

// Triton: stage 1 sums chunks into partials (the chunk and the program's shape per
// candidate, kTritonStage1), stage 2 sums the partials; the fastest candidate per shape.
std::size_t triton_sum_workspace(const Problem& p) {
  return static_cast<std::size_t>(klab::ceil_div<std::int64_t>(p.shape[0], lesson03::kTritonMinChunk)) * 4 + 16;
}

void run_sum_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  klab::triton_prepare();
  const std::int64_t n = l.problem.shape[0];
  const auto x = reinterpret_cast<CUdeviceptr>(l.in[0].data);
  const auto ws = reinterpret_cast<CUdeviceptr>(l.workspace);
  const auto out = reinterpret_cast<CUdeviceptr>(l.out[0].data);
  const auto s = reinterpret_cast<CUstream>(l.stream);
  const bool f32 = l.problem.dtype == DType::f32;
  const int linked = f32 ? tr_sum_stage1_f32_get_num_algos() : tr_sum_stage1_i32_get_num_algos();
  KLAB_REQUIRE(linked == lesson03::kTritonStage1Count,
               "triton sum: the linked stage 1 does not match kTritonStage1 (reduce_triton.py's STAGE1_CONFIGS)");
  auto launch = [&](int c) {
    const std::int64_t parts = klab::ceil_div<std::int64_t>(n, lesson03::kTritonStage1[c].chunk);
    if (f32) {
      KLAB_CHECK_CU(tr_sum_stage1_f32(s, x, ws, n, c));
      KLAB_CHECK_CU(tr_sum_stage2_f32_default(s, ws, out, parts));  // parts = 0 writes 0
    } else {
      KLAB_CHECK_CU(tr_sum_stage1_i32(s, x, ws, n, c));
      KLAB_CHECK_CU(tr_sum_stage2_i32_default(s, ws, out, parts));
    }
  };
  launch(klab::autotune(l, "sum|triton|" + l.problem.label(), lesson03::triton_stage1_candidates(l.problem), 0, launch));
#else
  (void)l;
  KLAB_REQUIRE(false, "built without Triton");
#endif
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------

KLAB_REGISTER(klab::register_lesson({
    .id = "03",
    .slug = "reductions",
    .title = "Reductions: sum, argmax, mean, histogram, scan",
    .exercise_op = "sum",
    .exercise_reference = "v2_warp_shuffle",
    .exercise_hint = "lessons/03-reductions/exercise.cu: the warp-shuffle block sum",
}));

KLAB_REGISTER(klab::register_op(make_sum_op()));
KLAB_REGISTER(klab::register_impl({.op = "sum", .name = "v1_smem_tree",
                                   .summary = "shared-memory tree per block, one launch per level",
                                   .kind = klab::ImplKind::cuda, .workspace = v1_workspace, .run = run_sum_v1_smem_tree}));
KLAB_REGISTER(klab::register_impl({.op = "sum", .name = "v2_warp_shuffle",
                                   .summary = "grid-stride in registers, warp shuffles, 2 launches",
                                   .kind = klab::ImplKind::cuda,
                                   .workspace = [](const Problem& p) { return static_cast<std::size_t>(v2_grid(p.shape[0])) * 4; },
                                   .run = run_sum_v2_warp_shuffle}));
KLAB_REGISTER(klab::register_impl({.op = "sum", .name = "v3_atomic",
                                   .summary = "one pass, atomicAdd per block (f32 not bitwise reproducible)",
                                   .kind = klab::ImplKind::cuda, .run = run_sum_v3_atomic}));
KLAB_REGISTER(klab::register_impl({.op = "sum", .name = "v4_vec_last_block",
                                   .summary = "16-byte loads x4 in flight, last block adds partials: 1 launch, deterministic",
                                   .kind = klab::ImplKind::cuda, .workspace = v4_workspace<false>,
                                   .run = run_sum_v4_vec_last_block}));
KLAB_REGISTER(klab::register_impl({.op = "sum", .name = "v5_dynamic_chunks",
                                   .summary = "16 KB chunks from an atomic counter, resident grid, last block (f32 not bitwise reproducible)",
                                   .kind = klab::ImplKind::cuda, .workspace = v5_workspace, .run = run_sum_v5_dynamic_chunks}));
KLAB_REGISTER(klab::register_impl({.op = "sum", .name = "cub",
                                   .summary = "cub::DeviceReduce::Sum",
                                   .kind = klab::ImplKind::vendor,
                                   .workspace = [](const Problem& p) { return cub_sum_bytes(p.dtype, p.shape[0]); },
                                   .run = run_sum_cub}));
KLAB_REGISTER(klab::register_impl({.op = "sum", .name = "triton",
                                   .summary = "Triton: chunk partials, then one program; the chunk chosen per shape",
                                   .kind = klab::ImplKind::triton,
                                   .supports = [](const Problem&) { return klab::triton_supported(); },
                                   .workspace = triton_sum_workspace, .run = run_sum_triton,
                                   .candidates = lesson03::triton_stage1_candidates}));

KLAB_REGISTER(klab::register_op(make_mean_op()));
KLAB_REGISTER(klab::register_impl({.op = "mean", .name = "v1_vec_last_block",
                                   .summary = "sum v4 with the divide done by the last block",
                                   .kind = klab::ImplKind::cuda, .workspace = v4_workspace<true>,
                                   .run = run_mean_v1_vec_last_block,
                                   .kernels = {"sum_v4_vec_last_block"}}));
KLAB_REGISTER(klab::register_impl({.op = "mean", .name = "cub",
                                   .summary = "cub::DeviceReduce::Sum, then a 1-thread divide",
                                   .kind = klab::ImplKind::vendor, .workspace = mean_cub_workspace,
                                   .run = run_mean_cub}));
