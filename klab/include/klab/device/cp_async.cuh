// klab/device/cp_async.cuh — asynchronous global -> shared copies (sm_80+; lesson 05).
//
// cp.async moves 16 bytes from global to shared memory without passing through registers;
// copies are grouped (commit) and waited for by group count, so the loads of tile k + 1 run
// while tile k is computed. On architectures before sm_80 the wrappers compile to nothing:
// kernels that use them report themselves unsupported there (supports()), and never run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define KLAB_NO_CP_ASYNC 1
#endif

namespace klab {

// The 32-bit shared-memory address that PTX's shared-state-space instructions take.
__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; bytes beyond src_bytes (0..16) are written as zeros, so a
// tile's ragged edge is zero-filled by the same instruction.
__device__ __forceinline__ void cp_async_16(std::uint32_t s_dst, const void* g_src, int src_bytes) {
#ifndef KLAB_NO_CP_ASYNC
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s_dst), "l"(g_src), "r"(src_bytes));
#endif
}

// The same for a chunk known to be in bounds: no source size, nothing to zero-fill.
__device__ __forceinline__ void cp_async_16_full(std::uint32_t s_dst, const void* g_src) {
#ifndef KLAB_NO_CP_ASYNC
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s_dst), "l"(g_src));
#endif
}

// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
#ifndef KLAB_NO_CP_ASYNC
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most N committed groups are still in flight (N = 0: all landed). The
// copies are visible to the other threads of the block only after a __syncthreads().
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifndef KLAB_NO_CP_ASYNC
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

}  // namespace klab
