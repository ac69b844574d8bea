// lessons/04-softmax/softmax_online.cu — softmax_rows with the online softmax: one (max, sum)
// reduction instead of two, the row held in registers, and rows longer than a block.
//
// Impls registered here (op softmax_rows):
//   v3_online     the online softmax: a (max, sum) pair merged by rescaling, so ONE
//                 reduction (warp shuffles, one barrier) gives both; 16-byte vector loads;
//                 each element's exp is computed once. Rows up to 32,768.
//   v4_long_rows  rows longer than a block holds: the row is split across blocks, each
//                 writes its (max, sum) pair, a second kernel merges them and writes.
//                 Any length, any GPU, but x is read twice.
//   v5_cluster    Hopper: the row split over a thread-block cluster (up to 8 blocks), the
//                 blocks' (max, sum) pairs exchanged through distributed shared memory.
//                 One read, one write, rows up to 262,144. Needs compute capability 9.0.
//                 (v3_online's kernel, softmax_rows_online, with CLUSTER = true.)
//   v6_exp2       v3/v5 with the per-element work cut down: exp as one FFMA + MUFU.EX2
//                 (base-2 pairs), no per-element mask compare on whole slices, 32-bit
//                 columns, packed bf16 stores; one block of up to 1024 threads per row while
//                 the row fits (clusters only past 32,768). The fastest CUDA version.
// The (max, sum) state and its merges are the framework's: klab/device/online_softmax.cuh.
// How a row is cut into blocks and clusters (v3, v5, v6): softmax_online_plan.cuh.
// The two-reduction versions (v1_three_pass, v2_fused) are in softmax_multipass.cu; the
// README has the measured table.
//
// Run:  klab test 04 --impl v3_online,v4_long_rows,v5_cluster,v6_exp2
//       klab run 04 --impl v3_online,v6_exp2,cudnn --shape 8192x8192
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "klab/device/online_softmax.cuh"
#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "softmax_common.cuh"
#include "softmax_online_device.cuh"
#include "softmax_online_plan.cuh"

// The op (inputs, reference, tolerances, shapes): softmax_op.cu.

using klab::MD;
using klab::Problem;

namespace {

// The cluster helpers and v6's per-element steps: softmax_online_device.cuh.
using lesson04::cluster_blocks;
using lesson04::cluster_rank;
using lesson04::cluster_read;
using lesson04::cluster_sync;
using lesson04::v6_gather;
using lesson04::v6_scale;
using lesson04::v6_thread_pair;
using lesson04::v6_write;

using i64 = std::int64_t;

// ============================================================================================
// v3_online and v5_cluster: one (max, sum) reduction, vector loads, rows in registers
// ============================================================================================

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
// reductions fused into one because (m, d) pairs merge associatively (klab::md_merge).
// The kernel of v3_online (CLUSTER = false) and of v5_cluster (CLUSTER = true when the row
// needs more than one block), hence named for its technique.
template <class T, int VEC, int NV, bool CLUSTER>
__global__ void __launch_bounds__(1024)
softmax_rows_online(const T* __restrict__ g_x, T* __restrict__ g_y, i64 cols, i64 diag, i64 slice) {
  static_assert(NV * VEC <= 32, "at most 32 elements per thread (32 registers of data)");
  __shared__ MD s_md[32];
  __shared__ MD s_block;                            // this block's pair, read by the cluster
  const int rank = CLUSTER ? cluster_rank() : 0;
  const int nblocks = CLUSTER ? cluster_blocks() : 1;
  const i64 row = blockIdx.x / nblocks;
  const i64 limit = lesson04::row_limit(row, cols, diag);
  const T* g_xrow = g_x + row * cols;               // (cols,)
  T* g_yrow = g_y + row * cols;
  const i64 c0 = rank * slice;                      // this block's columns [c0, c1)
  const i64 c1 = c0 + slice < cols ? c0 + slice : cols;
  using V = lesson04::Vec<T, VEC>;

  float r_e[NV][VEC];                               // (NV, VEC) per thread
  float r_m = -INFINITY;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const i64 c = c0 + (threadIdx.x + static_cast<i64>(k) * blockDim.x) * VEC;
    if (c < c1) {                                   // cols % VEC == 0: whole vectors
      const V v = *reinterpret_cast<const V*>(g_xrow + c);
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

  MD row_md = klab::block_merge(MD{r_m, r_d}, s_md);
  if constexpr (CLUSTER) {
    if (threadIdx.x == 0) s_block = row_md;
    cluster_sync();                                 // every block's s_block is written
    const int lane = threadIdx.x & 31;
    row_md = klab::warp_merge(lane < nblocks ? cluster_read(&s_block, lane)
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
      *reinterpret_cast<V*>(g_yrow + c) = v;
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
static_assert(kChunkThreads % 32 == 0 && kChunkThreads <= 1024, "whole warps, one block_merge");

template <class T, int VEC>
__device__ __forceinline__ void v4_load_chunk(const T* g_xrow, i64 c0, i64 cols, i64 limit,
                                              float (&r_x)[kChunkPerThread / VEC][VEC]) {
  static_assert(kChunkPerThread % VEC == 0, "whole vectors per thread");
  using V = lesson04::Vec<T, VEC>;
#pragma unroll
  for (int k = 0; k < kChunkPerThread / VEC; ++k) {
    const i64 c = c0 + (threadIdx.x + static_cast<i64>(k) * kChunkThreads) * VEC;
    if (c < cols) {
      const V v = *reinterpret_cast<const V*>(g_xrow + c);
#pragma unroll
      for (int i = 0; i < VEC; ++i) r_x[k][i] = c + i < limit ? klab::to_f32(v.v[i]) : -INFINITY;
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) r_x[k][i] = -INFINITY;
    }
  }
}

template <class T, int VEC>
__global__ void __launch_bounds__(kChunkThreads)
softmax_rows_v4_long_rows_partials(const T* __restrict__ g_x, MD* __restrict__ g_part, i64 cols,
                                   i64 diag, i64 chunks) {
  __shared__ MD s_md[32];
  const i64 row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const i64 limit = lesson04::row_limit(row, cols, diag);
  float r_x[kChunkPerThread / VEC][VEC];
  v4_load_chunk<T, VEC>(g_x + row * cols, chunk * kChunk, cols, limit, r_x);
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kChunkPerThread / VEC; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) m = fmaxf(m, r_x[k][i]);
  const float shift = m == -INFINITY ? 0.f : m;
  float d = 0.f;
#pragma unroll
  for (int k = 0; k < kChunkPerThread / VEC; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) d += expf(r_x[k][i] - shift);
  const MD md = klab::block_merge(MD{m, d}, s_md);
  if (threadIdx.x == 0) g_part[blockIdx.x] = md;   // g_part: (rows, chunks)
}

template <class T, int VEC>
__global__ void __launch_bounds__(kChunkThreads)
softmax_rows_v4_long_rows_finish(const T* __restrict__ g_x, const MD* __restrict__ g_part,
                                 T* __restrict__ g_y, i64 cols, i64 diag, i64 chunks) {
  __shared__ MD s_md[32];
  const i64 row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const i64 limit = lesson04::row_limit(row, cols, diag);
  // Merge the row's chunk pairs (a row of 262,144 has 32 of them).
  MD md{-INFINITY, 0.f};
  for (i64 c = threadIdx.x; c < chunks; c += kChunkThreads)
    md = klab::md_merge(md, g_part[row * chunks + c]);
  md = klab::block_merge(md, s_md);
  const float shift = md.m == -INFINITY ? 0.f : md.m;
  const float inv = md.d > 0.f ? 1.f / md.d : 0.f;

  float r_x[kChunkPerThread / VEC][VEC];
  const i64 c0 = chunk * kChunk;
  v4_load_chunk<T, VEC>(g_x + row * cols, c0, cols, limit, r_x);
  using V = lesson04::Vec<T, VEC>;
  T* g_yrow = g_y + row * cols;
#pragma unroll
  for (int k = 0; k < kChunkPerThread / VEC; ++k) {
    const i64 c = c0 + (threadIdx.x + static_cast<i64>(k) * kChunkThreads) * VEC;
    if (c < cols) {
      V v;
#pragma unroll
      for (int i = 0; i < VEC; ++i) v.v[i] = klab::from_f32<T>(expf(r_x[k][i] - shift) * inv);
      *reinterpret_cast<V*>(g_yrow + c) = v;
    }
  }
}

// ============================================================================================
// v6_exp2: v3/v5 with the per-element work cut to the minimum (same kernel shape)
// ============================================================================================

// What v6 changes, and its per-element steps (v6_gather, v6_thread_pair, v6_scale, v6_write):
// softmax_online_device.cuh, where v7_prefetch (softmax_prefetch.cu) reuses them.
// One row (or, in a cluster, one block's slice of it) per block, as softmax_rows_online.
template <class T, int VEC, int NV, bool CLUSTER>
__global__ void __launch_bounds__(1024)
softmax_rows_v6_exp2(const T* __restrict__ g_x, T* __restrict__ g_y, int cols, i64 diag, int slice) {
  static_assert(NV * VEC <= 32, "at most 32 elements per thread (32 registers of data)");
  __shared__ MD s_md[32];
  __shared__ MD s_block;                            // this block's pair, read by the cluster
  const int rank = CLUSTER ? cluster_rank() : 0;
  const int nblocks = CLUSTER ? cluster_blocks() : 1;
  const i64 row = blockIdx.x / nblocks;
  const int limit = static_cast<int>(lesson04::row_limit(row, cols, diag));
  const T* g_xrow = g_x + row * cols;               // (cols,)
  T* g_yrow = g_y + row * cols;
  const int c0 = rank * slice;                      // this block's columns [c0, c1)
  const int c1 = min(c0 + slice, cols);
  using V = lesson04::Vec<T, VEC>;
  const auto get = [&](int c) { return *reinterpret_cast<const V*>(g_xrow + c); };
  // Block-uniform: the slice is exactly the threads' NV vectors each, and all of it is kept.
  const bool full = limit >= c1 && c1 - c0 == static_cast<int>(blockDim.x) * NV * VEC;

  float r_e[NV][VEC];                               // (NV, VEC) per thread: x, then its exp
  if (full) v6_gather<T, VEC, NV, true>(get, c0, c1, r_e);
  else v6_gather<T, VEC, NV, false>(get, c0, min(c1, limit), r_e);
  const MD mine = v6_thread_pair(r_e);

  MD row_md = klab::block_merge<true>(mine, s_md);
  if constexpr (CLUSTER) {
    if (threadIdx.x == 0) s_block = row_md;
    cluster_sync();                                 // every block's s_block is written
    const int lane = threadIdx.x & 31;
    row_md = klab::warp_merge<true>(lane < nblocks ? cluster_read(&s_block, lane)
                                                   : MD{-INFINITY, 0.f});
  }
  const float scale = v6_scale(mine, row_md);
  if (full) v6_write<T, VEC, NV, true>(g_yrow, c0, c1, r_e, scale);
  else v6_write<T, VEC, NV, false>(g_yrow, c0, c1, r_e, scale);
  // No block may exit (and free its shared memory) while another still reads its s_block.
  if constexpr (CLUSTER) cluster_sync();
}

// ============================================================================================
// Launchers
// ============================================================================================

// Launches one block (CLUSTER = false) or one cluster of pl.blocks blocks per row.
// VERSION 3: softmax_rows_online (v3_online, v5_cluster); VERSION 6: softmax_rows_v6_exp2.
template <int VERSION, class T, int VEC, int NV, bool CLUSTER>
void launch_online_kernel(const lesson04::RowArgs& a, const lesson04::OnlinePlan& pl) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const auto kernel = [] {
    if constexpr (VERSION == 3) return softmax_rows_online<T, VEC, NV, CLUSTER>;
    else return softmax_rows_v6_exp2<T, VEC, NV, CLUSTER>;
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

// Plans the row for at most max_blocks blocks and launches VERSION's kernel.
template <int VERSION>
void run_online(const klab::Launch& l, int max_blocks) {
  const lesson04::RowArgs a = lesson04::row_args(l);
  if (a.rows * a.cols == 0) return;
  lesson04::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const int vec = lesson04::vec_for<T>(a);
    const lesson04::OnlinePlan pl =
        lesson04::plan_online(a.cols, vec, max_blocks, /*fewest_blocks_first=*/VERSION == 6);
    KLAB_REQUIRE(pl.ok, "online softmax: row too long (supports() should have said so)");
    constexpr int V = klab::kVec16<T>;
    const auto go = [&]<int VEC>() {
      lesson04::dispatch_nv<VEC>(pl.nv, [&]<int NV>() {
        if (pl.blocks == 1) launch_online_kernel<VERSION, T, VEC, NV, false>(a, pl);
        else launch_online_kernel<VERSION, T, VEC, NV, true>(a, pl);
      });
    };
    if (vec == V) go.template operator()<V>();
    else go.template operator()<1>();
  });
}

// v3_online: one block per row.
void run_v3_online(const klab::Launch& l) { run_online<3>(l, 1); }

std::string supports_v3_online(const Problem& p) { return lesson04::supports_online(p, 1); }

// v4_long_rows: chunks of kChunk columns, partials then finish.
i64 v4_chunks(i64 cols) { return klab::ceil_div<i64>(cols, kChunk); }

void run_v4_long_rows(const klab::Launch& l) {
  const lesson04::RowArgs a = lesson04::row_args(l);
  if (a.rows * a.cols == 0) return;
  const i64 chunks = v4_chunks(a.cols);
  MD* g_part = static_cast<MD*>(l.workspace);       // (rows, chunks)
  const unsigned grid = static_cast<unsigned>(a.rows * chunks);
  lesson04::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const T* x = static_cast<const T*>(a.x);
    T* y = static_cast<T*>(a.y);
    constexpr int V = klab::kVec16<T>;
    if (lesson04::vec_for<T>(a) == V) {
      softmax_rows_v4_long_rows_partials<T, V><<<grid, kChunkThreads, 0, a.stream>>>(
          x, g_part, a.cols, a.diag, chunks);
      KLAB_CHECK_LAUNCH();
      softmax_rows_v4_long_rows_finish<T, V><<<grid, kChunkThreads, 0, a.stream>>>(
          x, g_part, y, a.cols, a.diag, chunks);
    } else {
      softmax_rows_v4_long_rows_partials<T, 1><<<grid, kChunkThreads, 0, a.stream>>>(
          x, g_part, a.cols, a.diag, chunks);
      KLAB_CHECK_LAUNCH();
      softmax_rows_v4_long_rows_finish<T, 1><<<grid, kChunkThreads, 0, a.stream>>>(
          x, g_part, y, a.cols, a.diag, chunks);
    }
    KLAB_CHECK_LAUNCH();
  });
}

std::string supports_v4_long_rows(const Problem& p) {
  return p.shape.at(0) * v4_chunks(p.shape.at(1)) > std::numeric_limits<int>::max()
             ? std::string("too many chunks for one grid")
             : std::string();
}

// One (max, sum) pair per (row, chunk).
std::size_t workspace_v4_long_rows(const Problem& p) {
  return static_cast<std::size_t>(p.shape.at(0) * v4_chunks(p.shape.at(1))) * sizeof(MD);
}

// v5_cluster: v3_online's kernel, the row over a cluster of up to kMaxCluster blocks.
void run_v5_cluster(const klab::Launch& l) { run_online<3>(l, lesson04::kMaxCluster); }

std::string supports_v5_cluster(const Problem& p) {
  std::string why = klab::require_cc(90);
  return why.empty() ? lesson04::supports_online(p, lesson04::kMaxCluster) : why;
}

// v6_exp2: v3/v5's plan with fewest_blocks_first, and its own kernel.
void run_v6_exp2(const klab::Launch& l) { run_online<6>(l, lesson04::kMaxCluster); }

// Rows up to 32,768 run in one block on any GPU; longer ones need v5's clusters.
// (The plan for unaligned rows, vector width 1, is the one with the most blocks per row.)
std::string supports_v6_exp2(const Problem& p) {
  constexpr int kMax = lesson04::kMaxCluster;
  std::string why = lesson04::supports_online(p, kMax);
  if (why.empty() && lesson04::plan_online(p.shape.at(1), 1, kMax, true).blocks > 1)
    why = klab::require_cc(90);
  return why;
}

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "softmax_rows", .name = "v3_online",
                                   .summary = "online (max, sum) pairs: one shuffle reduction; "
                                              "16-byte loads; rows <= 32768",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v3_online,
                                   .run = run_v3_online,
                                   .kernels = {"softmax_rows_online"}}));

KLAB_REGISTER(klab::register_impl({.op = "softmax_rows", .name = "v4_long_rows",
                                   .summary = "row split across blocks: partial (max, sum) per "
                                              "chunk, then merge and write",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v4_long_rows,
                                   .workspace = workspace_v4_long_rows,
                                   .run = run_v4_long_rows}));

KLAB_REGISTER(klab::register_impl({.op = "softmax_rows", .name = "v5_cluster",
                                   .summary = "Hopper: row split over a block cluster, pairs "
                                              "merged in distributed smem",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v5_cluster,
                                   .run = run_v5_cluster,
                                   .kernels = {"softmax_rows_online"}}));

KLAB_REGISTER(klab::register_impl({.op = "softmax_rows", .name = "v6_exp2",
                                   .summary = "v3/v5 with base-2 exps (one FFMA + MUFU.EX2), no "
                                              "per-element mask on whole slices",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v6_exp2,
                                   .run = run_v6_exp2}));

}  // namespace
