// Lesson 07 — dropout kernels: the mask stored, then the mask never stored.
//
//   v1_stored_mask   how a stateful generator forces it: one kernel draws the keep mask
//                    and writes it to memory (one byte an element), a second reads x and
//                    the mask and writes y. The backward would read the mask again.
//                    Bytes: the mask written and read, 2 bytes an element beyond x and y:
//                    25% more traffic in f32, 50% in bf16.
//   v2_philox_fused  one kernel: each thread takes a quad of 4 consecutive elements, draws
//                    its 4 words with one Philox call (klab/device/philox.cuh), and loads,
//                    masks, scales and stores the quad in one vector access where it is
//                    aligned and whole. Nothing but x and y moves; the backward regenerates
//                    the same mask from the same (seed, offset).
//   triton           dropout_triton.py: the same stream through Triton's tl.philox, a
//                    quad per row of a (256, 4) block, compiled ahead of time.
//
//   klab test 07 --impl v1_stored_mask,v2_philox_fused,triton
//   klab bench 07 --variant p0.1 --impl v1_stored_mask,v2_philox_fused,triton
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "dropout.cuh"
#include "klab/device/philox.cuh"
#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#if KLAB_HAVE_TRITON
#include "dropout_triton.h"
#endif

namespace lesson07 {
namespace {

using std::int64_t;
using std::uint64_t;

// ======================================================================================
// v1_stored_mask
// ======================================================================================
// Kernel 1: mask[i] = keep(i), a quad (one Philox call) per thread and iteration.
__global__ void dropout_v1_draw_mask(std::uint8_t* __restrict__ g_mask, int64_t n, DropoutArgs a) {
  const int64_t quads = (n + 3) / 4, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < quads; q += stride) {
    const klab::Philox4 bits = klab::dropout_bits(a.seed, a.offset, static_cast<uint64_t>(q));
#pragma unroll
    for (int w = 0; w < 4; ++w)
      if (4 * q + w < n) g_mask[4 * q + w] = bits.x[w] >= a.threshold;
  }
}

// Kernel 2: y[i] = mask[i] ? x[i] · scale : 0, one element per thread and iteration.
template <class T>
__global__ void dropout_v1_apply_mask(const T* __restrict__ g_x, const std::uint8_t* __restrict__ g_mask,
                                      T* __restrict__ g_y, int64_t n, float scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    g_y[i] = klab::from_f32<T>(g_mask[i] ? klab::to_f32(g_x[i]) * scale : 0.0f);
}

// ======================================================================================
// v2_philox_fused
// ======================================================================================
// One quad of 4 elements per thread and iteration: one Philox call for its 4 words. An
// aligned whole quad moves as one vector (16 bytes of f32, 8 of bf16); the last, partial
// quad (n not a multiple of 4) and a misaligned base go element by element.
template <class T>
__global__ void dropout_v2_philox_fused(const T* __restrict__ g_x, T* __restrict__ g_y, int64_t n, DropoutArgs a,
                                        bool vec_ok) {
  using Quad = klab::Vec<T, 4>;
  const int64_t quads = (n + 3) / 4, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < quads; q += stride) {
    const klab::Philox4 bits = klab::dropout_bits(a.seed, a.offset, static_cast<uint64_t>(q));
    const int64_t i0 = 4 * q;
    if (vec_ok && i0 + 4 <= n) {
      Quad v = *reinterpret_cast<const Quad*>(g_x + i0);
#pragma unroll
      for (int w = 0; w < 4; ++w)
        v.v[w] = klab::from_f32<T>(bits.x[w] >= a.threshold ? klab::to_f32(v.v[w]) * a.scale : 0.0f);
      *reinterpret_cast<Quad*>(g_y + i0) = v;
    } else {
#pragma unroll
      for (int w = 0; w < 4; ++w)
        if (i0 + w < n) g_y[i0 + w] = klab::from_f32<T>(bits.x[w] >= a.threshold ? klab::to_f32(g_x[i0 + w]) * a.scale : 0.0f);
    }
  }
}

// ======================================================================================
// Launchers
// ======================================================================================
template <class T>
void run_v1(const klab::Launch& l) {
  const int64_t n = numel(l.problem);
  if (n == 0) return;
  const DropoutArgs a = dropout_args(l);
  KLAB_REQUIRE(l.workspace_bytes >= static_cast<std::size_t>(n), "v1_stored_mask: workspace too small");
  auto* mask = static_cast<std::uint8_t*>(l.workspace);
  dropout_v1_draw_mask<<<klab::grid_stride_blocks((n + 3) / 4, kThreads), kThreads, 0, l.stream>>>(mask, n, a);
  KLAB_CHECK_LAUNCH();
  dropout_v1_apply_mask<T><<<klab::grid_stride_blocks(n, kThreads), kThreads, 0, l.stream>>>(l.in[0].as<const T>(), mask,
                                                                            l.out[0].as<T>(), n, a.scale);
  KLAB_CHECK_LAUNCH();
}

template <class T>
void run_v2(const klab::Launch& l) {
  const int64_t n = numel(l.problem);
  if (n == 0) return;
  const T* x = l.in[0].as<const T>();
  T* y = l.out[0].as<T>();
  // A quad starts at a multiple of 4 elements: aligned to its vector when the bases are.
  const bool vec_ok = reinterpret_cast<std::uintptr_t>(x) % sizeof(klab::Vec<T, 4>) == 0 &&
                      reinterpret_cast<std::uintptr_t>(y) % sizeof(klab::Vec<T, 4>) == 0;
  dropout_v2_philox_fused<T><<<klab::grid_stride_blocks((n + 3) / 4, kThreads), kThreads, 0, l.stream>>>(x, y, n, dropout_args(l),
                                                                                        vec_ok);
  KLAB_CHECK_LAUNCH();
}

void run_v1_stored_mask(const klab::Launch& l) {
  if (l.problem.dtype == klab::DType::f32) run_v1<float>(l);
  else run_v1<__nv_bfloat16>(l);
}
void run_v2_philox_fused(const klab::Launch& l) {
  if (l.problem.dtype == klab::DType::f32) run_v2<float>(l);
  else run_v2<__nv_bfloat16>(l);
}

std::size_t workspace_v1(const klab::Problem& p) { return static_cast<std::size_t>(numel(p)); }

std::string triton_supports(const klab::Problem&) { return klab::triton_supported(); }

void run_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const int64_t n = numel(l.problem);
  if (n == 0) return;
  const DropoutArgs a = dropout_args(l);
  klab::triton_prepare();
  // The offset's halves travel as int32 bit patterns; tl.philox reads them as uint32.
  const auto lo = static_cast<std::int32_t>(static_cast<std::uint32_t>(a.offset));
  const auto hi = static_cast<std::int32_t>(static_cast<std::uint32_t>(a.offset >> 32));
  const auto x = reinterpret_cast<CUdeviceptr>(l.in[0].data), y = reinterpret_cast<CUdeviceptr>(l.out[0].data);
  const auto seed = static_cast<int64_t>(a.seed), threshold = static_cast<int64_t>(a.threshold);
  if (l.problem.dtype == klab::DType::f32)
    KLAB_CHECK_CU(tr_dropout_f32_default(l.stream, x, y, n, seed, lo, hi, threshold, a.scale));
  else
    KLAB_CHECK_CU(tr_dropout_bf16_default(l.stream, x, y, n, seed, lo, hi, threshold, a.scale));
#else
  (void)l;
#endif
}

// ======================================================================================
// Registration
// ======================================================================================
KLAB_REGISTER(klab::register_impl({.op = "dropout", .name = "v1_stored_mask",
                                   .summary = "the mask drawn into memory by one kernel, applied by a second",
                                   .kind = klab::ImplKind::cuda, .workspace = workspace_v1,
                                   .run = run_v1_stored_mask, .kernels = {"dropout_v1_draw_mask", "dropout_v1_apply_mask"}}));
KLAB_REGISTER(klab::register_impl({.op = "dropout", .name = "v2_philox_fused",
                                   .summary = "one kernel: a Philox call per 4 elements, the mask never stored",
                                   .kind = klab::ImplKind::cuda, .run = run_v2_philox_fused,
                                   .kernels = {"dropout_v2_philox_fused"}}));
KLAB_REGISTER(klab::register_impl({.op = "dropout", .name = "triton",
                                   .summary = "Triton, tl.philox on the same stream, 1024 elements a program",
                                   .kind = klab::ImplKind::triton, .supports = triton_supports, .run = run_triton}));

}  // namespace
}  // namespace lesson07
