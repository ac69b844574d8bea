// lessons/04-softmax/softmax_prefetch.cu — softmax_rows with the next row's load in flight
// while this row is reduced and written.
//
// Impls registered here (op softmax_rows):
//   v8_push_exchange  v7 with the cluster's (max, sum) pairs pushed into each peer's shared
//                 memory by st.async onto transaction barriers: no cluster barrier a row (its
//                 section below says why that matters).
//   v7_prefetch   v6_exp2's kernel made persistent: a fixed grid of blocks (of clusters,
//                 past 32,768 columns) walks the rows, and each thread copies its share of
//                 the NEXT row into shared memory with cp.async while it computes and
//                 stores this one. Rows of whole 16-byte vectors; clusters need compute
//                 capability 9.0, cp.async 8.0.
//
// Why: v6_exp2 holds a row (or its cluster's slice) in registers, one 1024-thread block per
// SM at the long shapes. Such a block loads, waits, reduces, waits for its cluster, stores and
// exits; the next block's first load leaves only after that. At 512 x 262144 each SM's
// memory pipe idles between rows: v6 reached 85% of copy in fp32 and 62% in bf16 (the
// README's v6_exp2 and v7_prefetch sections have the numbers). v7 keeps one block per SM
// for the whole run and overlaps the two phases:
//
//   prologue: issue the cp.async copies of the first row
//   per row:  wait for this thread's copies (each thread reads back only what it copied
//             itself, so no barrier is needed for the data)
//             shared -> registers, each slot refilled with the next  (v6_gather with a refill)
//             row's vector right after it is read                     (the loads now overlap)
//             thread (max, sum) pair, block merge, cluster merge,     (v6's steps)
//             scale, store
//
// Shared memory holds one row slice, the registers the other: 128 KB of the 227 KB for an
// fp32 slice of 32,768 columns, 64 KB in bf16. Thread t's k-th vector lives at slot
// k * blockDim + t, so a warp's 16-byte accesses cover 512 consecutive bytes (no bank
// conflicts) and a thread's slots are its own.
//
// Run:  klab test 04 --impl v7_prefetch,v8_push_exchange
//       klab bench 04 --impl v6_exp2,v7_prefetch,v8_push_exchange --shape 512x262144 --dtype bf16
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "klab/device.hpp"
#include "klab/device/cp_async.cuh"
#include "klab/device/mbarrier.cuh"
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

using i64 = std::int64_t;
using lesson04::cluster_blocks;
using lesson04::cluster_rank;
using lesson04::cluster_read;
using lesson04::cluster_sync;

// ============================================================================================
// v7_prefetch: persistent blocks (clusters), the next row copied in while this one is written
// ============================================================================================

// Grid: `row_step` blocks (CLUSTER: clusters of cluster_blocks() blocks); block group g takes
// rows g, g + row_step, ... Dynamic shared memory: NV * blockDim 16-byte slots.
// PUSH (v8): the cluster's pairs travel by st.async into s_recv instead of through a cluster
// barrier (the v8 section below says why).
template <class T, int VEC, int NV, bool CLUSTER, bool PUSH>
__device__ __forceinline__ void prefetch_rows(const T* __restrict__ g_x, T* __restrict__ g_y, int rows, int cols,
                                              i64 diag, int slice, int row_step) {
  static_assert(NV * VEC <= 32, "at most 32 elements per thread (32 registers of data)");
  using V = lesson04::Vec<T, VEC>;
  static_assert(sizeof(V) == 16, "one cp.async moves one 16-byte vector");
  extern __shared__ uint4 s_slots[];                // (NV, blockDim) vectors of the staged row
  __shared__ MD s_md[2][32];                        // block_merge's scratch, by row parity
  __shared__ MD s_block[2];                         // this block's pair, by row parity
  __shared__ MD s_recv[2][lesson04::kMaxCluster];   // v8: the cluster's pairs, by row parity
  __shared__ std::uint64_t s_bar[2];                // v8: "all pairs of the row are in", by parity
  const int rank = CLUSTER ? cluster_rank() : 0;
  const int nblocks = CLUSTER ? cluster_blocks() : 1;
  const int c0 = rank * slice;                      // this block's columns [c0, c1)
  const int c1 = min(c0 + slice, cols);
  const int t = static_cast<int>(threadIdx.x), nthreads = static_cast<int>(blockDim.x);
  const bool whole_slice = c1 - c0 == nthreads * NV * VEC;
  const auto kept_of = [&](i64 row) { return min(c1, static_cast<int>(lesson04::row_limit(row, cols, diag))); };

  // Vector k of this thread (column c) of `row` into its slot: none past the last row, none
  // of a masked vector.
  const auto slot = [&](int c) { return &s_slots[(c - c0) / VEC]; };   // c = c0 + (t + k * nthreads) * VEC
  const auto stage = [&](i64 row, int kept, int c) {
    if (row < rows && c < kept) klab::cp_async_16_full(klab::smem_u32(slot(c)), g_x + row * cols + c);
  };
  const auto get = [&](int c) { return *reinterpret_cast<const V*>(slot(c)); };

  if constexpr (CLUSTER && PUSH) {
    if (threadIdx.x == 0) {
      klab::mbar_init(klab::smem_u32(&s_bar[0]), 1);  // one arrival (expect_tx) and the bytes
      klab::mbar_init(klab::smem_u32(&s_bar[1]), 1);
      klab::mbar_fence_init();
    }
    cluster_sync();                                 // no pair is pushed before every barrier exists
  }
  i64 row = blockIdx.x / nblocks;
  {
    const int kept = kept_of(row);
#pragma unroll
    for (int k = 0; k < NV; ++k) stage(row, kept, c0 + (t + k * nthreads) * VEC);
    klab::cp_async_commit();                        // every thread commits one group per row
  }
  for (int it = 0; row < rows; row += row_step, ++it) {
    const int parity = it & 1;                      // rows alternate between two sets of scratch
    klab::cp_async_wait<0>();                       // this thread's copies of `row` have landed
    const int kept = kept_of(row);
    const bool full = whole_slice && kept == c1;    // block-uniform, as in v6
    const i64 next = row + row_step;
    const int kept_next = kept_of(next);
    // Each slot is refilled with the next row's vector as soon as this row's vector has been
    // read from it, so the next row's loads leave while this row is still being read out of
    // shared memory. (Refilling only after the whole slice was read left each SM's memory
    // pipe idle for that read and the thread pair: 85% of copy in fp32 at 512 x 262144.)
    // The slot's read is issued first, in this thread's program order, and the copy's write
    // lands only after its global load has come back.
    const auto refill = [&](int, int c) {
      asm volatile("" ::: "memory");                // the compiler keeps the slot's read first
      stage(next, kept_next, c);
    };
    float r_e[NV][VEC];                             // (NV, VEC) per thread: x, then its exp
    if (full) lesson04::v6_gather<T, VEC, NV, true>(get, c0, c1, r_e, refill);
    else lesson04::v6_gather<T, VEC, NV, false>(get, c0, kept, r_e, refill);
    klab::cp_async_commit();
    const MD mine = lesson04::v6_thread_pair(r_e);

    MD row_md = klab::block_merge<true>(mine, s_md[parity]);
    if constexpr (CLUSTER && PUSH) {
      // Thread 0 announces the cluster's nblocks pairs and pushes this block's pair into
      // slot `rank` of every block's s_recv[parity] (its own included); all threads wait for
      // the pairs to land, then merge them from their own shared memory.
      const std::uint32_t bar = klab::smem_u32(&s_bar[parity]);
      if (t == 0) {
        klab::mbar_arrive_expect_tx(bar, static_cast<std::uint32_t>(nblocks * sizeof(MD)));
        for (int r = 0; r < nblocks; ++r)
          klab::st_async_pair(klab::smem_u32(&s_recv[parity][rank]), row_md.m, row_md.d, bar, static_cast<std::uint32_t>(r));
      }
      klab::mbar_wait(bar, static_cast<std::uint32_t>(it >> 1) & 1);   // its (it / 2)-th phase
      const int lane = t & 31;
      row_md = klab::warp_merge<true>(lane < nblocks ? s_recv[parity][lane] : MD{-INFINITY, 0.f});
    } else if constexpr (CLUSTER) {
      if (t == 0) s_block[parity] = row_md;
      cluster_sync();                               // every block's pair of this row is written
      const int lane = t & 31;
      row_md = klab::warp_merge<true>(lane < nblocks ? cluster_read(&s_block[parity], lane)
                                                     : MD{-INFINITY, 0.f});
    }
    // s_md[parity] and s_block[parity] are written again two rows on, after the next row's
    // block_merge barrier (and cluster barrier), which every reader of this row has passed.
    // v8's s_recv[parity]: a peer pushes its pair of row + 2 * row_step only after it has
    // received this block's pair of the next row, which thread 0 pushes after that barrier.
    const float scale = lesson04::v6_scale(mine, row_md);
    T* g_yrow = g_y + row * cols;
    if (full) lesson04::v6_write<T, VEC, NV, true>(g_yrow, c0, c1, r_e, scale);
    else lesson04::v6_write<T, VEC, NV, false>(g_yrow, c0, c1, r_e, scale);
  }
  klab::cp_async_wait<0>();                         // the last, empty group
  // v7: no block may exit (and free its shared memory) while another still reads its
  // s_block. v8 reads no peer's memory, and every push into this block's s_recv is one it
  // has waited for.
  if constexpr (CLUSTER && !PUSH) cluster_sync();
}

template <class T, int VEC, int NV, bool CLUSTER>
__global__ void __launch_bounds__(1024)
softmax_rows_v7_prefetch(const T* __restrict__ g_x, T* __restrict__ g_y, int rows, int cols, i64 diag,
                         int slice, int row_step) {
  prefetch_rows<T, VEC, NV, CLUSTER, false>(g_x, g_y, rows, cols, diag, slice, row_step);
}

// ============================================================================================
// v8_push_exchange: v7 with the cluster's pairs pushed by st.async, no cluster barrier a row
// ============================================================================================
// v7 merges a row's pairs through a cluster barrier: each block writes its pair, all blocks
// of the cluster arrive and wait, then read every peer's pair. The barrier's arrive releases
// at cluster scope, which ptxas compiles to MEMBAR.ALL.GPU: each block waits there until its
// previous row's 64-128 KB of stores have reached the GPU's memory, once a row, and then for
// the slowest block of the cluster. v8 sends each pair as a one-way message: st.async
// writes it into every peer's shared memory and counts its 8 bytes on the peer's
// transaction barrier (klab::st_async_pair); a block waits only until the nblocks pairs of
// the row are in its own shared memory, and its stores are never fenced.
template <class T, int VEC, int NV>
__global__ void __launch_bounds__(1024)
softmax_rows_v8_push_exchange(const T* __restrict__ g_x, T* __restrict__ g_y, int rows, int cols, i64 diag,
                              int slice, int row_step) {
  prefetch_rows<T, VEC, NV, true, true>(g_x, g_y, rows, cols, diag, slice, row_step);
}

// ============================================================================================
// Launcher
// ============================================================================================

// The launch of v7 and v8 (which differ only in their kernel): `kernel` runs the plan `pl`.
template <class T, int NV, bool CLUSTER, class Kernel>
void launch_prefetch(const lesson04::RowArgs& a, const lesson04::OnlinePlan& pl, Kernel kernel) {
  constexpr const char* name = "v7_prefetch/v8_push_exchange";
  const std::size_t smem = static_cast<std::size_t>(NV) * pl.threads * 16;
  KLAB_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaLaunchConfig_t cfg{};
  cfg.blockDim = dim3(static_cast<unsigned>(pl.threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = a.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(pl.blocks);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  // As many block groups as fit on the GPU at once, never more than there are rows.
  int groups = 0;
  if constexpr (CLUSTER) {
    cfg.gridDim = dim3(static_cast<unsigned>(pl.blocks));
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    KLAB_CHECK_CUDA(cudaOccupancyMaxActiveClusters(&groups, kernel, &cfg));
  } else {
    int per_sm = 0;
    KLAB_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, pl.threads, smem));
    groups = klab::device_info().sms * per_sm;
  }
  KLAB_REQUIRE(groups > 0, std::string(name) + ": no block of this plan fits on the GPU");
  const int row_step = static_cast<int>(std::min<i64>(groups, a.rows));
  cfg.gridDim = dim3(static_cast<unsigned>(row_step * pl.blocks));
  KLAB_CHECK_CUDA(cudaLaunchKernelEx(&cfg, kernel, static_cast<const T*>(a.x), static_cast<T*>(a.y),
                                     static_cast<int>(a.rows), static_cast<int>(a.cols), a.diag,
                                     static_cast<int>(pl.slice), row_step));
  KLAB_CHECK_LAUNCH();
}

// PUSH: v8 (on plans that need a cluster; a one-block row has nothing to exchange and runs
// v7's kernel).
template <bool PUSH>
void run_prefetch(const klab::Launch& l) {
  const lesson04::RowArgs a = lesson04::row_args(l);
  if (a.rows * a.cols == 0) return;
  lesson04::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    constexpr int VEC = klab::kVec16<T>;
    KLAB_REQUIRE(lesson04::vec_for<T>(a) == VEC, "v7_prefetch/v8_push_exchange: rows must be whole 16-byte vectors, 16-byte aligned");
    const lesson04::OnlinePlan pl = lesson04::plan_online(a.cols, VEC, lesson04::kMaxCluster, true);
    KLAB_REQUIRE(pl.ok, "v7_prefetch/v8_push_exchange: row too long (supports() should have said so)");
    lesson04::dispatch_nv<VEC>(pl.nv, [&]<int NV>() {
      if (pl.blocks == 1) launch_prefetch<T, NV, false>(a, pl, softmax_rows_v7_prefetch<T, VEC, NV, false>);
      else if (PUSH) launch_prefetch<T, NV, true>(a, pl, softmax_rows_v8_push_exchange<T, VEC, NV>);
      else launch_prefetch<T, NV, true>(a, pl, softmax_rows_v7_prefetch<T, VEC, NV, true>);
    });
  });
}
void run_v7_prefetch(const klab::Launch& l) { run_prefetch<false>(l); }
void run_v8_push_exchange(const klab::Launch& l) { run_prefetch<true>(l); }

// v6_exp2's plan, in 16-byte vectors only (a cp.async moves 16 bytes), on sm_80+ (cp.async),
// sm_90 when the row needs a cluster.
std::string supports_v7_prefetch(const Problem& p) {
  if (std::string why = klab::require_cc(80); !why.empty()) return why;
  const i64 cols = p.shape.at(1);
  const int vec = p.dtype == klab::DType::f32 ? 4 : 8;
  if (cols % vec != 0)
    return "rows must be whole 16-byte vectors (cols a multiple of " + std::to_string(vec) + "); v6_exp2 takes any";
  if (std::string why = lesson04::supports_online(p, lesson04::kMaxCluster); !why.empty()) return why;
  if (lesson04::plan_online(cols, vec, lesson04::kMaxCluster, true).blocks > 1) return klab::require_cc(90);
  return "";
}

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "softmax_rows", .name = "v7_prefetch",
                                   .summary = "v6 made persistent: the next row cp.async-staged in "
                                              "shared memory while this one is reduced and written",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v7_prefetch,
                                   .run = run_v7_prefetch}));
KLAB_REGISTER(klab::register_impl({.op = "softmax_rows", .name = "v8_push_exchange",
                                   .summary = "v7 with the cluster's (max, sum) pairs pushed by st.async onto "
                                              "transaction barriers: no cluster barrier a row",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v7_prefetch,
                                   .run = run_v8_push_exchange}));

}  // namespace
