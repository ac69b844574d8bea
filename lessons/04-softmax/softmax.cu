// lessons/04-softmax/softmax.cu — row softmax, from three passes to one read and one write.
//
//   y[r, j] = exp(x[r, j] - m_r) / sum_k exp(x[r, k] - m_r),   m_r = max_k x[r, k]
//
// Subtracting the row max changes nothing mathematically (it cancels) and keeps every
// exponent <= 0, so exp never overflows: with x = 1e4, exp(x) is Inf in fp32 and a naive
// softmax returns Inf / Inf = NaN. The generator puts such rows into every test.
//
// Op softmax_rows, shape {rows, cols}, f32 and bf16 (computed in fp32), variants
//   ""        plain row softmax
//   "causal"  row r keeps columns j <= r + (cols - rows), the rest are 0 (softmax_common.cuh)
//
// Versions (each adds one technique; the README has the measured table):
//   v1_three_pass  three kernels: row max, row sum (one thread per row), then normalize.
//                  Reads x three times, and the per-row loops are not coalesced.
//   v2_fused       one block per row, the row cached in registers: one read, one write.
//                  Max, then sum, each a shared-memory tree reduction (two reductions).
//   v3_online      the online softmax: a (max, sum) pair merged by rescaling, so ONE
//                  reduction (warp shuffles, one barrier) gives both; 16-byte vector loads;
//                  each element's exp is computed once. Rows up to 32,768.
//   v4_long_rows   rows longer than a block holds: the row is split across blocks, each
//                  writes its (max, sum) pair, a second kernel merges them and writes.
//                  Any length, any GPU, but x is read twice.
//   v5_cluster     Hopper: the row split over a thread-block cluster (up to 8 blocks), the
//                  blocks' (max, sum) pairs exchanged through distributed shared memory.
//                  One read, one write, rows up to 262,144. Needs compute capability 9.0.
//   v6_exp2        v3/v5 with the per-element work cut down: exp as one FFMA + MUFU.EX2
//                  (base-2 pairs), no per-element mask compare on whole slices, 32-bit
//                  columns, packed bf16 stores; one block of up to 1024 threads per row while
//                  the row fits (clusters only past 32,768). The fastest CUDA version.
//   triton         softmax_triton.py (tile per row, or a two-sweep loop for long rows)
//   cudnn          cudnnSoftmaxForward, ACCURATE, INSTANCE mode (softmax_cudnn.cu): baseline
//
// Run:  klab test 04          klab bench 04 --op softmax_rows --dtype bf16
//       klab run 04 --impl v3_online,cudnn --shape 8192x8192
// Ops row_normalize and softmax_bwd live in softmax_more.cu.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "klab/triton.hpp"
#include "softmax_common.cuh"

#if KLAB_HAVE_TRITON
#include "softmax_triton.h"
#endif

namespace cg = cooperative_groups;
using klab::DType;
using klab::Problem;
using softmax04::MD;

namespace {

using i64 = std::int64_t;

// ============================================================================================
// The op: inputs, CPU reference, tolerances, property checks
// ============================================================================================

// Row kinds of the generated input (row index mod 4). Every test shape with 4 or more rows
// has all four; rows 1 and 3 overflow/underflow a softmax that forgets the max, row 2 is
// nearly one-hot (one element dominates), and large values test exp's range reduction.
//   0: U[-1, 1)            typical logits
//   1: U[-1, 1) + 1e4      exp(x) = Inf in fp32: naive Inf/Inf = NaN
//   2: U[-1, 1) * 1e4      magnitudes up to 1e4
//   3: U[-1, 1) - 1e4      exp(x) = 0 in fp32: naive 0/0 = NaN
double row_transform(i64 row, double u) {
  switch (row & 3) {
    case 1: return u + 1e4;
    case 2: return u * 1e4;
    case 3: return u - 1e4;
    default: return u;
  }
}

void generate_softmax(const Problem& p, std::uint64_t seed, klab::Inputs& in) {
  klab::HostTensor& x = softmax04::input_slot(in, 0, p.dtype, p.shape);
  const i64 rows = p.shape[0], cols = p.shape[1];
  const std::uint64_t s = klab::derive_seed(seed, 0);
  klab::parallel_for(rows, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r)
      for (i64 j = 0; j < cols; ++j) {
        const i64 i = r * cols + j;
        x.set(i, row_transform(r, 2.0 * klab::uniform01(s, static_cast<std::uint64_t>(i)) - 1.0));
      }
  });
}

// The mask, from the op's definition: row r of a (rows, cols) causal problem keeps column j
// when j <= r + (cols - rows); the plain variant keeps every column. Written apart from the
// kernels' diag_of / row_limit (softmax_common.cuh) on purpose: a reference that shared
// them would agree with any mistake in them. tests/test_references.cpp checks it on cases
// worked out by hand.
bool keeps(const Problem& p, i64 r, i64 j) {
  return p.variant != "causal" || j <= r + (p.shape[1] - p.shape[0]);
}

// How many elements keeps() keeps, in closed form (a loop over rows would cost seconds at
// 2^31 rows). Row r keeps max(r + a, 0) columns, a = cols - rows + 1 (never more than cols,
// as r < rows); summed over r that is 0 + 1 + ... + (rows + a - 1) less 0 + 1 + ... + (a - 1)
// when a > 0, two triangle numbers. In double: exact below 2^53, and a byte count needs no more.
double kept_elements(const Problem& p) {
  const double rows = static_cast<double>(p.shape[0]), cols = static_cast<double>(p.shape[1]);
  if (p.variant != "causal") return rows * cols;
  auto tri = [](double x) { return x > 0 ? x * (x - 1) / 2 : 0.0; };   // 0 + 1 + ... + (x - 1)
  const double a = cols - rows + 1;
  return tri(rows + a) - tri(a);
}

// fp64 softmax of row r of x (its kept columns; masked ones are 0), into out[0, cols).
template <class Get>
void softmax_row_ref(const Problem& p, i64 r, Get get, double* out) {
  const i64 cols = p.shape[1];
  double m = -std::numeric_limits<double>::infinity();
  for (i64 j = 0; j < cols; ++j)
    if (keeps(p, r, j)) m = std::max(m, get(j));
  double d = 0;
  for (i64 j = 0; j < cols; ++j)
    if (keeps(p, r, j)) d += std::exp(get(j) - m);
  for (i64 j = 0; j < cols; ++j) out[j] = keeps(p, r, j) ? std::exp(get(j) - m) / d : 0.0;
}

klab::Reference reference_softmax(const Problem& p, const klab::Inputs& in) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  const klab::HostTensor& x = in.tensors[0];
  klab::Reference ref = klab::single_output(std::vector<double>(static_cast<std::size_t>(rows * cols)));
  klab::parallel_for(rows, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r)
      softmax_row_ref(p, r, [&](i64 j) { return x.get(r * cols + j); }, ref[0].data() + r * cols);
  });
  return ref;
}

// Shapes past 2^28 elements (the one whose flat index passes 2^31): the reference of a
// sample of whole rows, the first and the last among them.
std::vector<klab::SampledReference> sample_softmax(const Problem& p, const klab::Inputs& in,
                                                   std::uint64_t seed) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  std::vector<i64> pick = {0, rows - 1};
  for (int k = 0; k < 30 && rows > 2; ++k)
    pick.push_back(static_cast<i64>(klab::uniform01(seed, 1000 + k) * static_cast<double>(rows)));
  std::sort(pick.begin(), pick.end());
  pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
  std::vector<klab::SampledReference> out(1);
  std::vector<double> row(static_cast<std::size_t>(cols));
  for (i64 r : pick) {
    if (r < 0 || r >= rows) continue;
    softmax_row_ref(p, r, [&](i64 j) { return in.tensors[0].get(r * cols + j); }, row.data());
    for (i64 j = 0; j < cols; ++j) {
      out[0].index.push_back(r * cols + j);
      out[0].value.push_back(row[static_cast<std::size_t>(j)]);
    }
  }
  return out;
}

// Outputs are exp(x - m) / d computed in fp32: a few roundings (u = 2^-24) plus the sum's
// error, which grows with the row length; rtol 2e-5 leaves room for 262,144-long rows.
// bf16 stores the fp32 result rounded once: relative error up to u = 2^-8 = 3.9e-3.
// atol is tiny: softmax outputs of long rows are ~1/cols, and any atol near that would
// let a wrong answer through.
klab::Tolerance tolerance_softmax(const Problem& p, int) {
  if (p.dtype == DType::bf16) return {.atol = 1e-8, .rtol = 8e-3, .max_rel_l2 = 4e-3};
  return {.atol = 1e-8, .rtol = 2e-5, .max_rel_l2 = 1e-5};
}

// Property checks beside the compare: every output in [0, 1] (NaN fails too), and every
// row sums to 1, or to 0 when the causal mask removed every column of the row.
std::string properties_softmax(const Problem& p, const klab::Inputs&,
                               const std::vector<klab::HostTensor>& out) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  const double tol = p.dtype == DType::bf16 ? 8e-3 : 1e-4;
  const klab::HostTensor& y = out[0];
  std::vector<std::string> first(static_cast<std::size_t>(std::max<i64>(rows, 0)));
  std::vector<char> bad(first.size(), 0);
  klab::parallel_for(rows, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      double sum = 0;
      for (i64 j = 0; j < cols; ++j) {
        const double v = y.get(r * cols + j);
        if (!(v >= 0.0 && v <= 1.0)) {   // also catches NaN
          bad[r] = 1;
          first[r] = "row " + std::to_string(r) + " col " + std::to_string(j) + ": output " +
                     std::to_string(v) + " outside [0, 1]";
          break;
        }
        sum += v;
      }
      if (bad[r]) continue;
      const double want = cols > 0 && keeps(p, r, 0) ? 1.0 : 0.0;   // kept columns are a prefix
      if (std::fabs(sum - want) > tol) {
        bad[r] = 1;
        first[r] = "row " + std::to_string(r) + " sums to " + std::to_string(sum) + ", not " +
                   std::to_string(want);
      }
    }
  });
  for (std::size_t r = 0; r < bad.size(); ++r)
    if (bad[r]) return first[r];
  return "";
}

klab::Op make_softmax_op() {
  klab::Op op;
  op.lesson = "04";
  op.name = "softmax_rows";
  op.summary = "y = softmax(x) over each row of {rows, cols}; variant causal masks j > r + cols - rows";
  op.dims = {"rows", "cols"};
  op.dtypes = {DType::f32, DType::bf16};
  op.variants = {"", "causal"};
  op.test_shapes = {
      {0, 128}, {4, 0}, {1, 1}, {1, 7}, {7, 1},   // empty, single element, single column
      {7, 3},                 // rows > cols: causal rows 0..3 keep nothing and write zeros
      {3, 127}, {127, 1023}, {5, 4097},           // primes and odd sizes
      {9, 1000},              // multiple of 8 but of no block width
      {11, 1544}, {13, 3080}, // 16-byte vectors, 2 and 4 per thread in v3/v6 (f32; bf16 1 and 2)
      {17, 8191}, {33, 8192}, {6, 12289},
      {4, 32768},             // the most v3_online holds
      {3, 32769},             // one past it; odd, so no vector loads either
      {5, 65540},             // multiple of 4 (fp32 vectors) but not of 8 (bf16 vectors)
      {2, 262144}, {3, 262147},   // the long rows v5_cluster holds, and just past them
      {2, 300007},
      {1025, 33}, {70001, 5},     // many short rows; more rows than a grid's y-dimension
      {1031, 8209},               // 8.5M elements: v1_normalize's grid-stride loop (8448 blocks
                                  // of 256) runs 4 times, in bf16 too
      {16385, 131072},            // 2,147,614,720 elements: the flat index passes 2^31
  };
  op.bench_shapes = {{8192, 8192}, {4096, 32768}, {512, 262144}};
  op.baseline = "cudnn";
  op.bound = klab::Bound::memory;
  op.inputs = [](const Problem& p) { return std::vector<klab::TensorSpec>{{"x", p.dtype, p.shape}}; };
  op.outputs = [](const Problem& p) { return std::vector<klab::TensorSpec>{{"y", p.dtype, p.shape}}; };
  op.generate = generate_softmax;
  op.reference = reference_softmax;
  op.sample_only = [](const Problem& p) { return klab::numel_of(p.shape) > (i64{1} << 28); };
  op.reference_sample = sample_softmax;
  op.tolerance = tolerance_softmax;
  op.properties = properties_softmax;
  // max, subtract, exp, add, multiply: ~5 flops per kept element (not a compute-bound op);
  // a masked element is a 0 written, no arithmetic.
  op.flops = [](const Problem& p) { return 5.0 * kept_elements(p); };
  // The bytes the op needs: each kept element read once, every element written once. A
  // causal row's masked columns are never read (their output is 0 whatever x holds), so the
  // default count (all of x) would credit a causal kernel with reads it need not make.
  op.bytes = [](const Problem& p) {
    return (kept_elements(p) + static_cast<double>(klab::numel_of(p.shape))) * klab::dtype_size(p.dtype);
  };
  op.validate = [](const Problem& p) {
    std::string why = softmax04::validate_rows_cols(p);
    // The check past 2^31 elements costs ~17 GB of host and device memory per case: it runs
    // in f32 only (bf16 shares every index computation with it).
    if (why.empty() && klab::numel_of(p.shape) > std::numeric_limits<int>::max() && p.dtype != DType::f32)
      why = "past 2^31 elements: f32 only";
    return why;
  };
  return op;
}

// ============================================================================================
// v1_three_pass: row max, row sum, normalize — three kernels, x read three times
// ============================================================================================

// One thread per row. Neighbouring threads read addresses `cols` elements apart, so every
// load of a warp touches 32 different cache lines: this is the uncoalesced pattern of
// lesson 02, and with only `rows` threads the GPU is mostly idle when rows are few.
template <class T>
__global__ void v1_row_max(const T* __restrict__ g_x, float* __restrict__ g_max, i64 rows,
                           i64 cols, i64 diag) {
  const i64 row = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const i64 limit = softmax04::row_limit(row, cols, diag);
  const T* x = g_x + row * cols;                    // (cols,)
  float r_m = -INFINITY;
  for (i64 j = 0; j < limit; ++j) r_m = fmaxf(r_m, klab::to_f32(x[j]));
  g_max[row] = r_m;
}

// The sum is accumulated in double: a serial fp32 sum of 262,144 terms drifts by about
// sqrt(n) ulps, past the tolerance. (v2 onward sums in a tree, which keeps fp32 exact enough.)
template <class T>
__global__ void v1_row_sum(const T* __restrict__ g_x, const float* __restrict__ g_max,
                           float* __restrict__ g_sum, i64 rows, i64 cols, i64 diag) {
  const i64 row = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const i64 limit = softmax04::row_limit(row, cols, diag);
  const T* x = g_x + row * cols;
  const float m = g_max[row];
  double r_d = 0;
  for (i64 j = 0; j < limit; ++j) r_d += expf(klab::to_f32(x[j]) - m);
  g_sum[row] = static_cast<float>(r_d);
}

// One thread per element, grid-stride, 64-bit flat index: coalesced, like lesson 01.
template <class T>
__global__ void v1_normalize(const T* __restrict__ g_x, const float* __restrict__ g_max,
                             const float* __restrict__ g_sum, T* __restrict__ g_y, i64 n,
                             i64 cols, i64 diag) {
  for (i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 row = i / cols, j = i - row * cols;
    const float v = j < softmax04::row_limit(row, cols, diag)
                        ? expf(klab::to_f32(g_x[i]) - g_max[row]) / g_sum[row]
                        : 0.f;
    g_y[i] = klab::from_f32<T>(v);
  }
}

// ============================================================================================
// v2_fused: one block per row, row cached in registers, two shared-memory tree reductions
// ============================================================================================

// Classic tree over shared memory (blockDim.x a power of two): halve the active threads
// each step. log2(blockDim) barriers per reduction, two reductions per row.
template <class Op>
__device__ float v2_block_reduce(float v, float* s_red, Op op) {
  const int tid = threadIdx.x;
  s_red[tid] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) s_red[tid] = op(s_red[tid], s_red[tid + s]);
    __syncthreads();
  }
  const float r = s_red[0];
  __syncthreads();                                  // s_red may be reused right after
  return r;
}

// Thread t caches elements t, t + B, t + 2B, ... (B = blockDim.x): each load instruction
// of a warp reads 32 consecutive elements (coalesced). Rows longer than CACHE * B keep
// the rest in global memory and re-read it (a tail loop) — correct for every length,
// fast while the row fits in the cache.
template <class T, int CACHE>
__global__ void __launch_bounds__(1024)
v2_fused(const T* __restrict__ g_x, T* __restrict__ g_y, i64 cols, i64 diag) {
  __shared__ float s_red[1024];
  const i64 row = blockIdx.x;
  const i64 limit = softmax04::row_limit(row, cols, diag);
  const T* x = g_x + row * cols;                    // (cols,)
  T* y = g_y + row * cols;
  const int B = blockDim.x;
  const i64 cached = static_cast<i64>(CACHE) * B;   // columns held in registers

  float r_x[CACHE];                                 // (CACHE,) per thread
  float r_max = -INFINITY;
#pragma unroll
  for (int k = 0; k < CACHE; ++k) {
    const i64 j = threadIdx.x + static_cast<i64>(k) * B;
    r_x[k] = j < limit ? klab::to_f32(x[j]) : -INFINITY;
    r_max = fmaxf(r_max, r_x[k]);
  }
  for (i64 j = cached + threadIdx.x; j < limit; j += B) r_max = fmaxf(r_max, klab::to_f32(x[j]));
  const float m = v2_block_reduce(r_max, s_red, [](float a, float b) { return fmaxf(a, b); });

  // A fully masked row has m = -inf; shifting by 0 then gives exp(-inf) = 0 everywhere
  // instead of exp(-inf - -inf) = NaN.
  const float shift = m == -INFINITY ? 0.f : m;
  float r_sum = 0.f;
#pragma unroll
  for (int k = 0; k < CACHE; ++k) {
    r_x[k] = expf(r_x[k] - shift);                  // masked: exp(-inf) = 0
    r_sum += r_x[k];
  }
  for (i64 j = cached + threadIdx.x; j < limit; j += B) r_sum += expf(klab::to_f32(x[j]) - shift);
  const float d = v2_block_reduce(r_sum, s_red, [](float a, float b) { return a + b; });

  const float inv = d > 0.f ? 1.f / d : 0.f;
#pragma unroll
  for (int k = 0; k < CACHE; ++k) {
    const i64 j = threadIdx.x + static_cast<i64>(k) * B;
    if (j < cols) y[j] = klab::from_f32<T>(r_x[k] * inv);
  }
  for (i64 j = cached + threadIdx.x; j < cols; j += B)
    y[j] = klab::from_f32<T>(j < limit ? expf(klab::to_f32(x[j]) - shift) * inv : 0.f);
}

// ============================================================================================
// v3_online (and v5_cluster): one (max, sum) reduction, vector loads, rows in registers
// ============================================================================================

// Cluster helpers. They compile to nothing below sm_90, where the cluster kernels are never
// launched (v5_cluster's supports() asks for compute capability 9.0).
__device__ __forceinline__ int cluster_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return static_cast<int>(cg::this_cluster().block_rank());
#else
  return 0;
#endif
}
__device__ __forceinline__ int cluster_blocks() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return static_cast<int>(cg::this_cluster().num_blocks());
#else
  return 1;
#endif
}
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cg::this_cluster().sync();
#endif
}
// Reads `v` in the shared memory of block `rank` of this cluster (distributed shared memory).
__device__ __forceinline__ MD cluster_read(MD* v, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return *cg::this_cluster().map_shared_rank(v, rank);
#else
  return *v;
#endif
}

// A row (or, in a cluster, one block's slice of a row) in registers: thread t holds NV
// vectors of VEC elements, vector t, t + B, t + 2B, ... of the slice. The slice of block
// `rank` is columns [rank * slice, rank * slice + slice).
//
//   1. load, masked columns -inf                     one read of x
//   2. thread state: m = max of its elements, d = sum exp(x - m); keep e = exp(x - m)
//   3. block merge of (m, d) pairs (one barrier); in a cluster, then merge the blocks'
//      pairs through distributed shared memory
//   4. y = e * exp(m_thread - M) / D: rescale the kept exps; no second exp per element
//                                                      one write of y
// This is equivalent to max-reduce, then sum-reduce, then normalize (v2), with the two
// reductions fused into one because (m, d) pairs merge associatively (md_merge).
template <class T, int VEC, int NV, bool CLUSTER>
__global__ void __launch_bounds__(1024)
v3_online(const T* __restrict__ g_x, T* __restrict__ g_y, i64 cols, i64 diag, i64 slice) {
  __shared__ MD s_md[32];
  __shared__ MD s_block;                            // this block's pair, read by the cluster
  const int rank = CLUSTER ? cluster_rank() : 0;
  const int nblocks = CLUSTER ? cluster_blocks() : 1;
  const i64 row = blockIdx.x / nblocks;
  const i64 limit = softmax04::row_limit(row, cols, diag);
  const T* x = g_x + row * cols;                    // (cols,)
  T* y = g_y + row * cols;
  const i64 c0 = rank * slice;                      // this block's columns [c0, c1)
  const i64 c1 = c0 + slice < cols ? c0 + slice : cols;
  using V = softmax04::Vec<T, VEC>;

  float r_e[NV][VEC];                               // (NV, VEC) per thread
  float r_m = -INFINITY;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const i64 c = c0 + (threadIdx.x + static_cast<i64>(k) * blockDim.x) * VEC;
    if (c < c1) {                                   // cols % VEC == 0: whole vectors
      const V v = *reinterpret_cast<const V*>(x + c);
#pragma unroll
      for (int i = 0; i < VEC; ++i) r_e[k][i] = c + i < limit ? klab::to_f32(v.v[i]) : -INFINITY;
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) r_e[k][i] = -INFINITY;
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i) r_m = fmaxf(r_m, r_e[k][i]);
  }
  const float shift = r_m == -INFINITY ? 0.f : r_m;
  float r_d = 0.f;
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      r_e[k][i] = expf(r_e[k][i] - shift);          // masked or empty: 0
      r_d += r_e[k][i];
    }

  MD row_md = softmax04::block_merge(MD{r_m, r_d}, s_md);
  if constexpr (CLUSTER) {
    if (threadIdx.x == 0) s_block = row_md;
    cluster_sync();                                 // every block's s_block is written
    const int lane = threadIdx.x & 31;
    row_md = softmax04::warp_merge(lane < nblocks ? cluster_read(&s_block, lane)
                                                  : MD{-INFINITY, 0.f});
  }

  const float inv = row_md.d > 0.f ? 1.f / row_md.d : 0.f;
  const float scale = (r_m == -INFINITY || row_md.m == -INFINITY) ? 0.f : expf(r_m - row_md.m) * inv;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const i64 c = c0 + (threadIdx.x + static_cast<i64>(k) * blockDim.x) * VEC;
    if (c < c1) {
      V v;
#pragma unroll
      for (int i = 0; i < VEC; ++i) v.v[i] = klab::from_f32<T>(r_e[k][i] * scale);
      *reinterpret_cast<V*>(y + c) = v;
    }
  }
  // No block may exit (and free its shared memory) while another still reads its s_block.
  if constexpr (CLUSTER) cluster_sync();
}

// ============================================================================================
// v4_long_rows: the row split across independent blocks, two kernels
// ============================================================================================

// Each block owns a chunk of kChunk columns of one row (grid.x = rows * chunks). Kernel 1
// writes the chunk's (max, sum) pair; kernel 2 merges the row's pairs and writes the chunk.
// Blocks of one row never wait for each other (no co-residency needed), so this works for
// any length on any GPU; the price is a second read of x (kernel 2 cannot keep the chunk
// from kernel 1: registers do not outlive a kernel).
constexpr int kChunkThreads = 256;
constexpr int kChunkPerThread = 32;
constexpr i64 kChunk = kChunkThreads * kChunkPerThread;   // 8192 columns per block

template <class T, int VEC>
__device__ __forceinline__ void load_chunk(const T* x, i64 c0, i64 cols, i64 limit,
                                           float (&r)[kChunkPerThread / VEC][VEC]) {
  using V = softmax04::Vec<T, VEC>;
#pragma unroll
  for (int k = 0; k < kChunkPerThread / VEC; ++k) {
    const i64 c = c0 + (threadIdx.x + static_cast<i64>(k) * kChunkThreads) * VEC;
    if (c < cols) {
      const V v = *reinterpret_cast<const V*>(x + c);
#pragma unroll
      for (int i = 0; i < VEC; ++i) r[k][i] = c + i < limit ? klab::to_f32(v.v[i]) : -INFINITY;
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) r[k][i] = -INFINITY;
    }
  }
}

template <class T, int VEC>
__global__ void __launch_bounds__(kChunkThreads)
v4_partials(const T* __restrict__ g_x, MD* __restrict__ g_part, i64 cols, i64 diag, i64 chunks) {
  __shared__ MD s_md[32];
  const i64 row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const i64 limit = softmax04::row_limit(row, cols, diag);
  float r[kChunkPerThread / VEC][VEC];
  load_chunk<T, VEC>(g_x + row * cols, chunk * kChunk, cols, limit, r);
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kChunkPerThread / VEC; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) m = fmaxf(m, r[k][i]);
  const float shift = m == -INFINITY ? 0.f : m;
  float d = 0.f;
#pragma unroll
  for (int k = 0; k < kChunkPerThread / VEC; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) d += expf(r[k][i] - shift);
  const MD md = softmax04::block_merge(MD{m, d}, s_md);
  if (threadIdx.x == 0) g_part[blockIdx.x] = md;   // g_part: (rows, chunks)
}

template <class T, int VEC>
__global__ void __launch_bounds__(kChunkThreads)
v4_finish(const T* __restrict__ g_x, const MD* __restrict__ g_part, T* __restrict__ g_y, i64 cols,
          i64 diag, i64 chunks) {
  __shared__ MD s_md[32];
  const i64 row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const i64 limit = softmax04::row_limit(row, cols, diag);
  // Merge the row's chunk pairs (a row of 262,144 has 32 of them).
  MD md{-INFINITY, 0.f};
  for (i64 c = threadIdx.x; c < chunks; c += kChunkThreads) md = softmax04::md_merge(md, g_part[row * chunks + c]);
  md = softmax04::block_merge(md, s_md);
  const float shift = md.m == -INFINITY ? 0.f : md.m;
  const float inv = md.d > 0.f ? 1.f / md.d : 0.f;

  float r[kChunkPerThread / VEC][VEC];
  const i64 c0 = chunk * kChunk;
  load_chunk<T, VEC>(g_x + row * cols, c0, cols, limit, r);
  using V = softmax04::Vec<T, VEC>;
  T* y = g_y + row * cols;
#pragma unroll
  for (int k = 0; k < kChunkPerThread / VEC; ++k) {
    const i64 c = c0 + (threadIdx.x + static_cast<i64>(k) * kChunkThreads) * VEC;
    if (c < cols) {
      V v;
#pragma unroll
      for (int i = 0; i < VEC; ++i) v.v[i] = klab::from_f32<T>(expf(r[k][i] - shift) * inv);
      *reinterpret_cast<V*>(y + c) = v;
    }
  }
}

// ============================================================================================
// v6_exp2: v3/v5 with the per-element work cut to the minimum (same kernel shape)
// ============================================================================================

// v3 spends most of its issue slots on arithmetic that a bandwidth-bound kernel should not
// need: an accurate expf (range reduction, ~8 instructions), a 64-bit `c + i < limit`
// compare and select per element, 64-bit column arithmetic. bf16 has twice the elements per
// byte, so it pays twice per byte. v6 keeps v3/v5's kernel structure and changes the math:
//   - exp in base 2: exp(x - m) = 2^(x * log2(e) - m * log2(e)). The thread's shift
//     s = m * log2(e) is computed once, then each element is one FFMA and one MUFU.EX2
//     (ex2_approx). The rounding of s cancels: the same s is used for the element and for
//     the thread's pair, so y = 2^(x*log2e - s) * 2^(s - S) / D depends on s only through
//     exact arithmetic (s and S agree in their leading bits wherever the output is not ~0).
//   - the (m, d) pairs live in base 2 too (md_merge<true>): m is already scaled.
//   - a block-uniform test "this block's slice is whole and unmasked" (every plain row of an
//     aligned shape) skips every per-element and per-vector compare; the masked path is
//     kept for causal rows and ragged slices, and tests whole vectors: only the one vector
//     the causal mask cuts compares element by element. Columns are 32-bit (cols < 2^31, and
//     a row's columns are never past 262,144 here).
//   - bf16 results are packed two at a time (one cvt.rn.bf16x2.f32 per pair).
// Measured (README): 87.6 against v3's 116.4 us for bf16 8192 x 8192, 103% of copy. With
// the arithmetic gone, the block plan matters again: plan_online(..., fewest_blocks_first)
// keeps a 32,768-column row in one 1024-thread block instead of v5's 4-block cluster.
constexpr float kLog2e = 1.4426950408889634f;

// Thread t's NV vectors of the slice [c0, c1): vector k starts at column
// c0 + (t + k * blockDim.x) * VEC. get(c) returns the vector that starts at column c.
// FULL: the caller has checked that every vector lies in the slice and every column is kept.
// Otherwise kept = min(c1, limit): vectors that start before it are loaded (they lie in the
// slice: c1 is a multiple of VEC), the rest are -inf without a load.
// All loads are issued before any is used: with the load and its conversion inside one
// branch per vector, the compiler waited for each load in turn (measured: causal bf16 at
// 4096 x 32768 ran at 76% of copy against 99.6% plain).
template <class T, int VEC, int NV, bool FULL, class Get>
__device__ __forceinline__ void v6_gather(Get get, int c0, int kept, float (&r_x)[NV][VEC]) {
  using V = softmax04::Vec<T, VEC>;
  const auto col = [&](int k) { return c0 + (static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x)) * VEC; };
  V r_v[NV];                                        // (NV,) raw vectors
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    if (FULL || col(k) < kept) r_v[k] = get(col(k));
    else r_v[k] = V{};
  }
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int c = col(k);
    if (FULL || c + VEC <= kept) {                  // the whole vector is kept
#pragma unroll
      for (int i = 0; i < VEC; ++i) r_x[k][i] = klab::to_f32(r_v[k].v[i]);
    } else {                                        // the vector the mask cuts, or none of it
#pragma unroll
      for (int i = 0; i < VEC; ++i) r_x[k][i] = c + i < kept ? klab::to_f32(r_v[k].v[i]) : -INFINITY;
    }
  }
}

// The thread's base-2 pair, and r_x replaced by 2^(x * log2e - s) (each element's one exp).
template <int NV, int VEC>
__device__ __forceinline__ MD v6_thread_pair(float (&r_x)[NV][VEC]) {
  float r_m = -INFINITY;
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) r_m = fmaxf(r_m, r_x[k][i]);
  const float s = r_m * kLog2e;                     // -inf stays -inf
  const float shift = r_m == -INFINITY ? 0.f : s;   // all masked: 2^(-inf - 0) = 0, not NaN
  float r_d = 0.f;
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      r_x[k][i] = softmax04::ex2_approx(fmaf(r_x[k][i], kLog2e, -shift));
      r_d += r_x[k][i];
    }
  return {s, r_d};
}

// y = e * scale for one vector, rounded once; bf16 pairs through one packed convert.
template <class T, int VEC>
__device__ __forceinline__ void v6_store(T* dst, const float (&e)[VEC], float scale) {
  using V = softmax04::Vec<T, VEC>;
  V v;
  if constexpr (std::is_same_v<T, __nv_bfloat16> && VEC % 2 == 0) {
#pragma unroll
    for (int i = 0; i < VEC; i += 2) {
      const __nv_bfloat162 p = __floats2bfloat162_rn(e[i] * scale, e[i + 1] * scale);
      v.v[i] = p.x;
      v.v[i + 1] = p.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) v.v[i] = klab::from_f32<T>(e[i] * scale);
  }
  *reinterpret_cast<V*>(dst) = v;
}

// Writes the thread's vectors of [c0, c1) of row y: FULL as in v6_gather.
template <class T, int VEC, int NV, bool FULL>
__device__ __forceinline__ void v6_write(T* y, int c0, int c1, const float (&r_e)[NV][VEC], float scale) {
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int c = c0 + (static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x)) * VEC;
    if (FULL || c < c1) v6_store<T, VEC>(y + c, r_e[k], scale);
  }
}

// The thread's output scale: 2^(s_thread - S) / D, or 0 when nothing was kept.
__device__ __forceinline__ float v6_scale(MD thread, MD row) {
  const float inv = row.d > 0.f ? 1.f / row.d : 0.f;
  return (thread.m == -INFINITY || row.m == -INFINITY) ? 0.f : softmax04::ex2_approx(thread.m - row.m) * inv;
}

// One row (or, in a cluster, one block's slice of it) per block, as v3_online/v5_cluster.
template <class T, int VEC, int NV, bool CLUSTER>
__global__ void __launch_bounds__(1024)
v6_exp2(const T* __restrict__ g_x, T* __restrict__ g_y, int cols, i64 diag, int slice) {
  __shared__ MD s_md[32];
  __shared__ MD s_block;                            // this block's pair, read by the cluster
  const int rank = CLUSTER ? cluster_rank() : 0;
  const int nblocks = CLUSTER ? cluster_blocks() : 1;
  const i64 row = blockIdx.x / nblocks;
  const int limit = static_cast<int>(softmax04::row_limit(row, cols, diag));
  const T* x = g_x + row * cols;                    // (cols,)
  T* y = g_y + row * cols;
  const int c0 = rank * slice;                      // this block's columns [c0, c1)
  const int c1 = min(c0 + slice, cols);
  using V = softmax04::Vec<T, VEC>;
  const auto get = [&](int c) { return *reinterpret_cast<const V*>(x + c); };
  // Block-uniform: the slice is exactly the threads' NV vectors each, and all of it is kept.
  const bool full = limit >= c1 && c1 - c0 == static_cast<int>(blockDim.x) * NV * VEC;

  float r_e[NV][VEC];                               // (NV, VEC) per thread: x, then its exp
  if (full) v6_gather<T, VEC, NV, true>(get, c0, c1, r_e);
  else v6_gather<T, VEC, NV, false>(get, c0, min(c1, limit), r_e);
  const MD mine = v6_thread_pair(r_e);

  MD row_md = softmax04::block_merge<true>(mine, s_md);
  if constexpr (CLUSTER) {
    if (threadIdx.x == 0) s_block = row_md;
    cluster_sync();                                 // every block's s_block is written
    const int lane = threadIdx.x & 31;
    row_md = softmax04::warp_merge<true>(lane < nblocks ? cluster_read(&s_block, lane)
                                                        : MD{-INFINITY, 0.f});
  }
  const float scale = v6_scale(mine, row_md);
  if (full) v6_write<T, VEC, NV, true>(y, c0, c1, r_e, scale);
  else v6_write<T, VEC, NV, false>(y, c0, c1, r_e, scale);
  // No block may exit (and free its shared memory) while another still reads its s_block.
  if constexpr (CLUSTER) cluster_sync();
}

// ============================================================================================
// Launchers
// ============================================================================================

struct Args {
  const void* x;
  void* y;
  i64 rows, cols, diag;
  cudaStream_t stream;
};

Args args_of(const klab::Launch& l) {
  return {l.in[0].data, l.out[0].data, l.problem.shape[0], l.problem.shape[1],
          softmax04::diag_of(l.problem), l.stream};
}

// Vector width for a launch: 16-byte vectors when every row starts 16-byte aligned.
template <class T>
int vec_for(const Args& a) {
  constexpr int V = softmax04::kVec16<T>;
  return (a.cols % V == 0 && softmax04::aligned16(a.x) && softmax04::aligned16(a.y)) ? V : 1;
}

void run_v1(const klab::Launch& l) {
  const Args a = args_of(l);
  if (a.rows * a.cols == 0) return;
  float* g_max = static_cast<float*>(l.workspace);  // (rows,)
  float* g_sum = g_max + a.rows;                    // (rows,)
  softmax04::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const T* x = static_cast<const T*>(a.x);
    const unsigned row_blocks = klab::blocks_for(a.rows, 128);
    v1_row_max<T><<<row_blocks, 128, 0, a.stream>>>(x, g_max, a.rows, a.cols, a.diag);
    KLAB_CHECK_LAUNCH();
    v1_row_sum<T><<<row_blocks, 128, 0, a.stream>>>(x, g_max, g_sum, a.rows, a.cols, a.diag);
    KLAB_CHECK_LAUNCH();
    v1_normalize<T><<<klab::blocks_for(a.rows * a.cols, 256, 132 * 64), 256, 0, a.stream>>>(
        x, g_max, g_sum, static_cast<T*>(a.y), a.rows * a.cols, a.cols, a.diag);
    KLAB_CHECK_LAUNCH();
  });
}

void run_v2(const klab::Launch& l) {
  const Args a = args_of(l);
  if (a.rows * a.cols == 0) return;
  // The smallest cache that holds the row with at most 1024 threads (else the largest, and
  // the tail loop takes the rest); threads a power of two for the tree reduction.
  int cache = 1;
  while (cache < 16 && a.cols > 1024 * cache) cache *= 2;
  int threads = 32;
  while (threads < 1024 && static_cast<i64>(threads) * cache < a.cols) threads *= 2;
  softmax04::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const T* x = static_cast<const T*>(a.x);
    T* y = static_cast<T*>(a.y);
    const unsigned grid = static_cast<unsigned>(a.rows);
    switch (cache) {
      case 1: v2_fused<T, 1><<<grid, threads, 0, a.stream>>>(x, y, a.cols, a.diag); break;
      case 2: v2_fused<T, 2><<<grid, threads, 0, a.stream>>>(x, y, a.cols, a.diag); break;
      case 4: v2_fused<T, 4><<<grid, threads, 0, a.stream>>>(x, y, a.cols, a.diag); break;
      case 8: v2_fused<T, 8><<<grid, threads, 0, a.stream>>>(x, y, a.cols, a.diag); break;
      default: v2_fused<T, 16><<<grid, threads, 0, a.stream>>>(x, y, a.cols, a.diag); break;
    }
    KLAB_CHECK_LAUNCH();
  });
}

// How v3/v5 cut a row: C blocks per row (a cluster when C > 1), `threads` per block, NV
// vectors of VEC elements per thread (at most 32 elements: 32 registers of data).
struct OnlinePlan {
  int blocks = 0, threads = 0, nv = 0;
  i64 slice = 0;
  bool ok = false;
};

// NV choices per vector width: the instantiated kernels.
std::vector<int> nv_choices(int vec) {
  if (vec == 1) return {1, 4, 32};
  std::vector<int> out;
  for (int nv = 1; nv * vec <= 32; nv *= 2) out.push_back(nv);
  return out;
}

// Prefer blocks of at most 256 threads (several blocks per SM, so one block's reduction
// overlaps another's loads), with as few blocks per row and as few elements per thread as
// that allows; failing that, up to 1024 threads. v3/v5 (fewest_blocks_first = false) split a
// row over a cluster before they use more than 256 threads; v6 (true) keeps the row in one
// block of up to 1024 threads while it fits and clusters only rows longer than 32,768
// (measured: at 4096 x 32768, clusters of 4 x 256 threads ran v6's math at 95.8% / 85.3% of
// copy in fp32 / bf16, one block of 1024 threads at 100.4% / 99.7%).
OnlinePlan plan_online(i64 cols, int vec, int max_blocks, bool fewest_blocks_first = false) {
  const auto try_plan = [&](int c, int cap) -> OnlinePlan {
    const i64 slice = klab::ceil_div<i64>(klab::ceil_div<i64>(cols, c), vec) * vec;
    for (int nv : nv_choices(vec)) {
      const i64 threads = klab::ceil_div<i64>(klab::ceil_div<i64>(slice, static_cast<i64>(vec) * nv), 32) * 32;
      if (threads <= cap) return {c, static_cast<int>(std::max<i64>(threads, 32)), nv, slice, true};
    }
    return {};
  };
  for (int first = 0; first < 2; ++first)            // pass 0: the preferred plans, 1: the rest
    for (int c = 1; c <= max_blocks; ++c)
      for (int cap : {256, 1024}) {
        const bool preferred = fewest_blocks_first ? true : cap == 256;
        if (preferred != (first == 0)) continue;
        if (const OnlinePlan pl = try_plan(c, cap); pl.ok) return pl;
      }
  return {};
}

constexpr int kMaxCluster = 8;   // the portable cluster size limit

// Launches one block (CLUSTER = false) or one cluster of pl.blocks blocks per row.
// VERSION 3: v3_online / v5_cluster's kernel; VERSION 6: v6_exp2's.
template <int VERSION, class T, int VEC, int NV, bool CLUSTER>
void launch_online_kernel(const Args& a, const OnlinePlan& pl) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const auto kernel = [] {
    if constexpr (VERSION == 3) return v3_online<T, VEC, NV, CLUSTER>;
    else return v6_exp2<T, VEC, NV, CLUSTER>;
  }();
  // v6 indexes columns in 32 bits (validate_rows_cols: cols < 2^31).
  const auto cols = [&] {
    if constexpr (VERSION == 3) return a.cols;
    else return static_cast<int>(a.cols);
  }();
  const auto slice = static_cast<decltype(cols)>(pl.slice);
  if constexpr (!CLUSTER) {
    kernel<<<static_cast<unsigned>(a.rows), pl.threads, 0, a.stream>>>(x, y, cols, a.diag, slice);
    KLAB_CHECK_LAUNCH();
  } else {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(a.rows * pl.blocks));
    cfg.blockDim = dim3(static_cast<unsigned>(pl.threads));
    cfg.stream = a.stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(pl.blocks);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    KLAB_CHECK_CUDA(cudaLaunchKernelEx(&cfg, kernel, x, y, cols, a.diag, slice));
    KLAB_CHECK_LAUNCH();
  }
}

// Calls f.template operator()<NV>() for the plan's NV (the instantiated choices of nv_choices).
template <int VEC, class F>
void dispatch_nv(int nv, F&& f) {
  if constexpr (VEC == 1) {
    switch (nv) {
      case 1: return f.template operator()<1>();
      case 4: return f.template operator()<4>();
      default: return f.template operator()<32>();
    }
  } else {
    switch (nv) {
      case 1: return f.template operator()<1>();
      case 2: return f.template operator()<2>();
      case 4: return f.template operator()<4>();
      default:
        if constexpr (VEC * 8 <= 32) {
          return f.template operator()<8>();
        } else {
          KLAB_REQUIRE(false, "online softmax: no kernel for this plan");
        }
    }
  }
}

template <int VERSION>
void run_online(const klab::Launch& l, int max_blocks) {
  const Args a = args_of(l);
  if (a.rows * a.cols == 0) return;
  softmax04::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const int vec = vec_for<T>(a);
    const OnlinePlan pl = plan_online(a.cols, vec, max_blocks, /*fewest_blocks_first=*/VERSION == 6);
    KLAB_REQUIRE(pl.ok, "online softmax: row too long (supports() should have said so)");
    constexpr int V = softmax04::kVec16<T>;
    const auto go = [&]<int VEC>() {
      dispatch_nv<VEC>(pl.nv, [&]<int NV>() {
        if (pl.blocks == 1) launch_online_kernel<VERSION, T, VEC, NV, false>(a, pl);
        else launch_online_kernel<VERSION, T, VEC, NV, true>(a, pl);
      });
    };
    if (vec == V) go.template operator()<V>();
    else go.template operator()<1>();
  });
}

std::string supports_online(const Problem& p, int max_blocks) {
  const i64 cols = p.shape.at(1);
  // Vector width 1 is the worst case for the plan (it only depends on cols through it).
  if (!plan_online(cols, 1, max_blocks).ok)
    return "rows longer than " + std::to_string(max_blocks * 1024 * 32) +
           " do not fit in registers here (v4_long_rows handles any length)";
  if (p.shape.at(0) * max_blocks > std::numeric_limits<int>::max()) return "too many rows for one grid";
  return "";
}

// v6: rows up to 32,768 run in one block on any GPU; longer ones need v5's clusters.
// (The plan for unaligned rows, vector width 1, is the one with the most blocks per row.)
std::string supports_v6(const Problem& p) {
  std::string why = supports_online(p, kMaxCluster);
  if (why.empty() && plan_online(p.shape.at(1), 1, kMaxCluster, true).blocks > 1) why = klab::require_cc(90);
  return why;
}

i64 v4_chunks(i64 cols) { return klab::ceil_div<i64>(cols, kChunk); }

void run_v4(const klab::Launch& l) {
  const Args a = args_of(l);
  if (a.rows * a.cols == 0) return;
  const i64 chunks = v4_chunks(a.cols);
  MD* g_part = static_cast<MD*>(l.workspace);       // (rows, chunks)
  const unsigned grid = static_cast<unsigned>(a.rows * chunks);
  softmax04::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const T* x = static_cast<const T*>(a.x);
    T* y = static_cast<T*>(a.y);
    constexpr int V = softmax04::kVec16<T>;
    if (vec_for<T>(a) == V) {
      v4_partials<T, V><<<grid, kChunkThreads, 0, a.stream>>>(x, g_part, a.cols, a.diag, chunks);
      KLAB_CHECK_LAUNCH();
      v4_finish<T, V><<<grid, kChunkThreads, 0, a.stream>>>(x, g_part, y, a.cols, a.diag, chunks);
    } else {
      v4_partials<T, 1><<<grid, kChunkThreads, 0, a.stream>>>(x, g_part, a.cols, a.diag, chunks);
      KLAB_CHECK_LAUNCH();
      v4_finish<T, 1><<<grid, kChunkThreads, 0, a.stream>>>(x, g_part, y, a.cols, a.diag, chunks);
    }
    KLAB_CHECK_LAUNCH();
  });
}

#if KLAB_HAVE_TRITON
// The smallest Triton tile that holds the row; the two-sweep loop kernel past 32,768.
void run_triton(const klab::Launch& l) {
  const Args a = args_of(l);
  if (a.rows * a.cols == 0) return;
  klab::triton_prepare();
  const auto x = reinterpret_cast<CUdeviceptr>(a.x);
  const auto y = reinterpret_cast<CUdeviceptr>(a.y);
  const auto rows = static_cast<int32_t>(a.rows), cols = static_cast<int32_t>(a.cols),
             diag = static_cast<int32_t>(a.diag);
  CUstream s = reinterpret_cast<CUstream>(a.stream);
  const bool f32 = l.problem.dtype == DType::f32;
  if (a.cols <= 1024)
    KLAB_CHECK_CU(f32 ? tr_softmax_f32_b1024_default(s, x, y, rows, cols, diag)
                      : tr_softmax_bf16_b1024_default(s, x, y, rows, cols, diag));
  else if (a.cols <= 4096)
    KLAB_CHECK_CU(f32 ? tr_softmax_f32_b4096_default(s, x, y, rows, cols, diag)
                      : tr_softmax_bf16_b4096_default(s, x, y, rows, cols, diag));
  else if (a.cols <= 8192)
    KLAB_CHECK_CU(f32 ? tr_softmax_f32_b8192_default(s, x, y, rows, cols, diag)
                      : tr_softmax_bf16_b8192_default(s, x, y, rows, cols, diag));
  else if (a.cols <= 16384)
    KLAB_CHECK_CU(f32 ? tr_softmax_f32_b16384_default(s, x, y, rows, cols, diag)
                      : tr_softmax_bf16_b16384_default(s, x, y, rows, cols, diag));
  else if (a.cols <= 32768)
    KLAB_CHECK_CU(f32 ? tr_softmax_f32_b32768_default(s, x, y, rows, cols, diag)
                      : tr_softmax_bf16_b32768_default(s, x, y, rows, cols, diag));
  else
    KLAB_CHECK_CU(f32 ? tr_softmax_f32_loop_default(s, x, y, rows, cols, diag)
                      : tr_softmax_bf16_loop_default(s, x, y, rows, cols, diag));
}
#endif

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_lesson({
    .id = "04",
    .slug = "softmax",
    .title = "Softmax: fused, online, long rows, causal, backward",
    .exercise_op = "softmax_rows",
    .exercise_reference = "v2_fused",
    .exercise_hint = "lessons/04-softmax/exercise.cu: fill in block_reduce_max and block_reduce_sum",
}));

KLAB_REGISTER(klab::register_op(make_softmax_op()));

KLAB_REGISTER(klab::register_impl({
    .op = "softmax_rows",
    .name = "v1_three_pass",
    .summary = "row max, row sum (a thread per row), normalize: three kernels, x read 3 times",
    .kind = klab::ImplKind::cuda,
    .supports = [](const Problem&) { return std::string(); },
    .workspace = [](const Problem& p) { return static_cast<std::size_t>(2 * p.shape.at(0)) * sizeof(float); },
    .run = run_v1,
}));

KLAB_REGISTER(klab::register_impl({
    .op = "softmax_rows",
    .name = "v2_fused",
    .summary = "one block per row, row in registers, max then sum by shared-memory trees",
    .kind = klab::ImplKind::cuda,
    .supports = [](const Problem&) { return std::string(); },
    .run = run_v2,
}));

KLAB_REGISTER(klab::register_impl({
    .op = "softmax_rows",
    .name = "v3_online",
    .summary = "online (max, sum) pairs: one shuffle reduction; 16-byte loads; rows <= 32768",
    .kind = klab::ImplKind::cuda,
    .supports = [](const Problem& p) { return supports_online(p, 1); },
    .run = [](const klab::Launch& l) { run_online<3>(l, 1); },
}));

KLAB_REGISTER(klab::register_impl({
    .op = "softmax_rows",
    .name = "v4_long_rows",
    .summary = "row split across blocks: partial (max, sum) per chunk, then merge and write",
    .kind = klab::ImplKind::cuda,
    .supports = [](const Problem& p) {
      return p.shape.at(0) * v4_chunks(p.shape.at(1)) > std::numeric_limits<int>::max()
                 ? std::string("too many chunks for one grid")
                 : std::string();
    },
    .workspace = [](const Problem& p) {
      return static_cast<std::size_t>(p.shape.at(0) * v4_chunks(p.shape.at(1))) * sizeof(MD);
    },
    .run = run_v4,
}));

KLAB_REGISTER(klab::register_impl({
    .op = "softmax_rows",
    .name = "v5_cluster",
    .summary = "Hopper: row split over a block cluster, pairs merged in distributed smem",
    .kind = klab::ImplKind::cuda,
    .supports = [](const Problem& p) {
      std::string why = klab::require_cc(90);
      return why.empty() ? supports_online(p, kMaxCluster) : why;
    },
    .run = [](const klab::Launch& l) { run_online<3>(l, kMaxCluster); },
}));

KLAB_REGISTER(klab::register_impl({
    .op = "softmax_rows",
    .name = "v6_exp2",
    .summary = "v3/v5 with base-2 exps (one FFMA + MUFU.EX2), no per-element mask on whole slices",
    .kind = klab::ImplKind::cuda,
    .supports = supports_v6,
    .run = [](const klab::Launch& l) { run_online<6>(l, kMaxCluster); },
}));

KLAB_REGISTER(klab::register_impl({
    .op = "softmax_rows",
    .name = "triton",
    .summary = "Triton: one program per row (tile or two-sweep online loop)",
    .kind = klab::ImplKind::triton,
    .supports = [](const Problem&) { return klab::triton_supported(); },
#if KLAB_HAVE_TRITON
    .run = run_triton,
#else
    .run = [](const klab::Launch&) { KLAB_REQUIRE(false, "built without Triton"); },
#endif
}));

}  // namespace
