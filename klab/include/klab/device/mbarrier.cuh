// klab/device/mbarrier.cuh — shared-memory transaction barriers (sm_90; lesson 05's Hopper
// versions).
//
// An mbarrier is a 64-bit object in shared memory that counts arrivals and, on Hopper, bytes
// ("transactions"). It completes a phase when the expected arrivals have arrived and every
// byte announced by arrive.expect_tx has landed; then it starts the next phase. Waiters
// name the phase they wait for by its parity (0, 1, 0, ...), so a barrier reused round a
// ring of pipeline stages needs no reset:
//
//   full[s]   "stage s holds tile j":  one arrive.expect_tx(bytes) by the thread that
//             issues the TMA copies; the copies' bytes complete it. Consumers of the u-th
//             use of stage s wait for parity u & 1.
//   empty[s]  "stage s may be overwritten": one arrive per consumer warp after its MMAs on
//             stage s have finished. The producer's u-th refill (u >= 1) waits for the
//             phase of use u - 1, parity (u - 1) & 1. For u = 0 it waits for parity 1,
//             which a freshly initialised barrier (in phase 0) reports as already passed.
//
// Below sm_90 the wrappers compile to nothing (KLAB_NO_TMA): kernels that use them report
// themselves unsupported there and never run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "klab/device/cp_async.cuh"  // smem_u32

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define KLAB_NO_TMA 1
#endif

namespace klab {

// One thread initialises; `count` arrivals (besides the transaction bytes) complete a phase.
__device__ __forceinline__ void mbar_init(std::uint32_t s_bar, std::uint32_t count) {
#ifndef KLAB_NO_TMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(s_bar), "r"(count));
#endif
}

// After the inits, before any other thread or the copy engine uses the barriers: makes the
// initialised state visible to the async proxy (the TMA unit). Follow it with a
// __syncthreads() so the other threads see it too.
__device__ __forceinline__ void mbar_fence_init() {
#ifndef KLAB_NO_TMA
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// Arrive and announce `bytes` more to come from asynchronous copies in this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint32_t s_bar, std::uint32_t bytes) {
#ifndef KLAB_NO_TMA
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(s_bar), "r"(bytes) : "memory");
#endif
}

__device__ __forceinline__ void mbar_arrive(std::uint32_t s_bar) {
#ifndef KLAB_NO_TMA
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(s_bar) : "memory");
#endif
}

// Arrive on the mbarrier at the same shared-memory offset in CTA `cta` of this cluster
// (itself included): how a consumer frees a stage that another CTA's multicast copies fill.
__device__ __forceinline__ void mbar_arrive_cluster(std::uint32_t s_bar, std::uint32_t cta) {
#ifndef KLAB_NO_TMA
  std::uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(s_bar), "r"(cta));
  // The default semantics (release at CTA scope): a cluster-scope release would first wait
  // for this thread's earlier global stores (the last tile's epilogue) to be visible to the
  // cluster. The MMAs' reads that the arrival reports are complete already (wgmma_wait).
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
#endif
}

// Stores the pair (a, b) at shared-memory offset `s_dst` of CTA `cta` of this cluster (itself
// included) and reports its 8 bytes to that CTA's mbarrier at offset `s_bar` as transaction
// bytes: the receiver announces them with arrive.expect_tx and waits on the barrier, after
// which the pair is visible to it. A one-way message with no cluster barrier: lesson 04's
// v8 pushes each block's (max, sum) pair to every block of its cluster this way. A
// complete_tx may land before the receiver's expect_tx of the same phase (the barrier's
// byte count may go transiently negative); the phase completes when both have happened.
__device__ __forceinline__ void st_async_pair(std::uint32_t s_dst, float a, float b, std::uint32_t s_bar,
                                              std::uint32_t cta) {
#ifndef KLAB_NO_TMA
  std::uint32_t dst, bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(dst) : "r"(s_dst), "r"(cta));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(bar) : "r"(s_bar), "r"(cta));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];\n" ::"r"(dst),
               "f"(a), "f"(b), "r"(bar)
               : "memory");
#endif
}

// This CTA's rank in its cluster, and a barrier over every thread of the cluster (release /
// acquire: shared-memory writes before it are visible to the other CTAs after it).
__device__ __forceinline__ std::uint32_t cluster_rank() {
  std::uint32_t r = 0;
#ifndef KLAB_NO_TMA
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
  return r;
}
__device__ __forceinline__ void cluster_sync() {
#ifndef KLAB_NO_TMA
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// A barrier over `threads` threads (a multiple of 32) that use the same id (1..15; 0 is
// __syncthreads): one warpgroup can synchronise without stopping the others.
__device__ __forceinline__ void named_barrier_sync(std::uint32_t id, std::uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Counts this warp's threads toward barrier `id` without waiting: the other side of a
// named_barrier_sync, for a hand-off in one direction (one warpgroup signals, another waits).
__device__ __forceinline__ void named_barrier_arrive(std::uint32_t id, std::uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Blocks until the phase with this parity has completed. try_wait suspends the thread for
// a hardware-chosen time before returning false, so the loop does not spin hot.
__device__ __forceinline__ void mbar_wait(std::uint32_t s_bar, std::uint32_t parity) {
#ifndef KLAB_NO_TMA
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(s_bar),
      "r"(parity)
      : "memory");
#endif
}

}  // namespace klab
