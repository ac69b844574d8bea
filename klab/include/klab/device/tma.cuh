// klab/device/tma.cuh — the Tensor Memory Accelerator: tile copies global -> shared that
// the copy engine performs on its own (sm_90; lesson 05's Hopper versions).
//
// The host describes a tensor once (a CUtensorMap: base, sizes, strides, the box a copy
// moves, the shared-memory swizzle) and passes it to the kernel by value as a
// `const __grid_constant__ CUtensorMap` parameter. One thread then issues a copy of a whole
// box by its coordinates; the engine computes every address, fills the part of the box
// outside the tensor with zeros (ragged edges need no code), writes shared memory in the
// swizzled layout wgmma reads, and reports the bytes to an mbarrier (mbarrier.cuh).
//
// What TMA cannot describe: a base address that is not 16-byte aligned, or a row pitch
// (any stride but the innermost) that is not a multiple of 16 bytes — a bf16 matrix whose
// row length is not a multiple of 8. Kernels built on it must report such shapes
// unsupported (tma_describable).
//
// The 128-byte swizzle: shared memory is written in rows of 128 bytes (the box's inner
// extent must be exactly 128 bytes: 64 bf16), and within each group of 8 rows the 16-byte
// chunk c of row r lands at chunk c ^ (r % 8). A column of 8 consecutive rows then spans
// all 32 banks. The pattern repeats every 1024 bytes, so each box must start 1024-aligned.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "klab/device/mbarrier.cuh"
#include "klab/error.hpp"

namespace klab {

// ---- device ----------------------------------------------------------------------------

// Copies the box at coordinates (c0 innermost, c1, c2) of `map` to s_dst (1024-aligned for
// the 128-byte swizzle) and completes its bytes on the mbarrier s_bar.
__device__ __forceinline__ void tma_load_3d(std::uint32_t s_dst, const CUtensorMap* map, std::uint32_t s_bar,
                                            int c0, int c1, int c2) {
#ifndef KLAB_NO_TMA
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(s_dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(s_bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#endif
}

// The same box, written to the same shared-memory offset in every CTA of the cluster named
// in cta_mask (bit i: CTA rank i), each completing its bytes on its own mbarrier at the
// offset s_bar: one read of L2 feeds several SMs.
__device__ __forceinline__ void tma_load_3d_multicast(std::uint32_t s_dst, const CUtensorMap* map,
                                                      std::uint32_t s_bar, int c0, int c1, int c2,
                                                      std::uint16_t cta_mask) {
#ifndef KLAB_NO_TMA
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(s_dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(s_bar), "r"(c0), "r"(c1), "r"(c2), "h"(cta_mask)
      : "memory");
#endif
}

// The reverse copy: the box at s_src (laid out as the map's swizzle says) to coordinates
// (c0, c1, c2) of the tensor; the parts of the box outside the tensor are not written, so a
// ragged edge needs no code. Completion is tracked per thread by bulk groups: commit,
// then wait until the engine has read the shared memory (it may be reused) or finished.
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, std::uint32_t s_src, int c0, int c1, int c2) {
#ifndef KLAB_NO_TMA
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                   reinterpret_cast<std::uint64_t>(map)),
               "r"(s_src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
#endif
}
__device__ __forceinline__ void tma_store_commit() {
#ifndef KLAB_NO_TMA
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {  // the sources of all but N groups read
#ifndef KLAB_NO_TMA
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}
template <int N>
__device__ __forceinline__ void tma_store_wait() {  // all but N groups complete
#ifndef KLAB_NO_TMA
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Shared memory written by ordinary stores that the copy engine or the tensor cores read
// next must be fenced by each writing thread (then a barrier).
__device__ __forceinline__ void fence_proxy_async_smem() {
#ifndef KLAB_NO_TMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// ---- host ------------------------------------------------------------------------------

// "" when a row-major bf16/fp16 matrix (rows of `row_len` elements `pitch` apart, batch
// entries `batch_stride` apart, base `p`) can be described to TMA; otherwise the reason.
inline std::string tma_describable(const void* p, std::int64_t pitch, std::int64_t batch_stride,
                                   std::size_t elem_bytes) {
  if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return "TMA needs a 16-byte aligned base address";
  if ((pitch * static_cast<std::int64_t>(elem_bytes)) % 16 != 0 ||
      (batch_stride * static_cast<std::int64_t>(elem_bytes)) % 16 != 0)
    return "TMA needs row pitches that are multiples of 16 bytes (" + std::to_string(16 / elem_bytes) +
           " elements)";
  return "";
}

// A 3-D tensor map of 16-bit elements (`type`: BFLOAT16 or FLOAT16): `inner` contiguous
// elements per row, `outer` rows `pitch` elements apart, `batch` matrices `batch_stride`
// elements apart; each copy moves a box of box_inner x box_outer (x 1) elements into
// 128-byte-swizzled shared memory.
inline CUtensorMap tensor_map_16bit(CUtensorMapDataType type, const void* base, std::uint64_t inner,
                                    std::uint64_t outer, std::uint64_t batch, std::uint64_t pitch,
                                    std::uint64_t batch_stride, std::uint32_t box_inner, std::uint32_t box_outer) {
  KLAB_REQUIRE(box_inner * 2 == 128, "tensor_map_16bit: the 128-byte swizzle needs a 64-element inner box");
  KLAB_REQUIRE(box_outer >= 1 && box_outer <= 256, "tensor_map_16bit: a box extent is 1..256");
  CUtensorMap map;
  // Empty dimensions are not describable; a tensor of size 0 is never copied from, so any
  // extent of 1 serves (the kernels skip it before issuing a copy).
  const cuuint64_t dims[3] = {inner ? inner : 1, outer ? outer : 1, batch ? batch : 1};
  const cuuint64_t strides[2] = {pitch * 2, (batch_stride ? batch_stride : pitch * (outer ? outer : 1)) * 2};
  const cuuint32_t box[3] = {box_inner, box_outer, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  KLAB_CHECK_CU(cuTensorMapEncodeTiled(&map, type, 3, const_cast<void*>(base), dims,
                                       strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                       CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return map;
}

// The bf16 map (lessons 05 and 06).
inline CUtensorMap tensor_map_bf16(const void* base, std::uint64_t inner, std::uint64_t outer,
                                   std::uint64_t batch, std::uint64_t pitch, std::uint64_t batch_stride,
                                   std::uint32_t box_inner, std::uint32_t box_outer) {
  return tensor_map_16bit(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base, inner, outer, batch, pitch, batch_stride,
                          box_inner, box_outer);
}

}  // namespace klab
