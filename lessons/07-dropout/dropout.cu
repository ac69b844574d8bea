// Lesson 07 — dropout kernels: the mask stored, then the mask never stored.
//
//   v1_stored_mask   how a stateful generator forces it: one kernel draws the keep mask
//                    and writes it to memory (one byte an element), a second reads x and
//                    the mask and writes y. The backward would read the mask again.
//                    Bytes: the mask written and read, 2 bytes an element beyond x and y:
//                    25% more traffic in f32, 50% in bf16.
//   v2_philox_fused  one kernel: each thread takes 16 bytes (one quad of 4 consecutive
//                    elements in f32, two in bf16), draws each quad's 4 words with one
//                    Philox call (klab/device/philox.cuh), and loads, masks, scales and
//                    stores the 16 bytes in one vector access where they are aligned and whole. Nothing but x and y moves; the backward regenerates
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
// Kernel 1: mask[i] = keep(i), a quad (one Philox call, one 4-byte store) per thread and
// iteration. The workspace is 16-byte aligned, so a whole quad's 4 bytes are aligned.
__global__ void dropout_v1_draw_mask(std::uint8_t* __restrict__ g_mask, int64_t n, DropoutArgs a) {
  const int64_t quads = (n + 3) / 4, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < quads; q += stride) {
    const klab::Philox4 bits = klab::dropout_bits(a.seed, a.offset, static_cast<uint64_t>(q));
    klab::Vec<std::uint8_t, 4> m;
#pragma unroll
    for (int w = 0; w < 4; ++w) m.v[w] = bits.x[w] >= a.threshold;
    if (4 * q + 4 <= n) {
      *reinterpret_cast<klab::Vec<std::uint8_t, 4>*>(g_mask + 4 * q) = m;
    } else {
      for (int w = 0; 4 * q + w < n; ++w) g_mask[4 * q + w] = m.v[w];
    }
  }
}

// Kernel 2: y[i] = mask[i] ? x[i] · scale : 0, 16 bytes of x (and their mask bytes) per
// thread and iteration, as v2 moves them: what separates v1 from v2 is the mask's bytes and
// the second launch, not the width of the accesses.
template <class T>
__global__ void dropout_v1_apply_mask(const T* __restrict__ g_x, const std::uint8_t* __restrict__ g_mask,
                                      T* __restrict__ g_y, int64_t n, float scale, bool vec_ok) {
  constexpr int kElems = klab::kVec16<T>;            // f32 4, bf16 8
  using V = klab::Vec<T, kElems>;
  using M = klab::Vec<std::uint8_t, kElems>;
  const int64_t vecs = (n + kElems - 1) / kElems, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vecs; v += stride) {
    const int64_t i0 = v * kElems;
    if (vec_ok && i0 + kElems <= n) {
      V r = *reinterpret_cast<const V*>(g_x + i0);
      const M m = *reinterpret_cast<const M*>(g_mask + i0);
#pragma unroll
      for (int e = 0; e < kElems; ++e) r.v[e] = klab::from_f32<T>(m.v[e] ? klab::to_f32(r.v[e]) * scale : 0.0f);
      *reinterpret_cast<V*>(g_y + i0) = r;
    } else {
      for (int64_t i = i0; i < i0 + kElems && i < n; ++i)
        g_y[i] = klab::from_f32<T>(g_mask[i] ? klab::to_f32(g_x[i]) * scale : 0.0f);
    }
  }
}

// ======================================================================================
// v2_philox_fused
// ======================================================================================
// One 16-byte vector per thread and iteration: one quad in f32, two in bf16 (a Philox call
// per quad). A quad a thread moved bf16 in 8-byte accesses: 2048 threads an SM kept 16 KB in
// flight and the bench measured 84-88% of copy (f32, 16 bytes a thread: 97-98%). An
// aligned whole vector moves in one access; the last, partial one (n not a multiple of its
// elements) and a misaligned base go element by element.
template <class T>
__global__ void dropout_v2_philox_fused(const T* __restrict__ g_x, T* __restrict__ g_y, int64_t n, DropoutArgs a,
                                        bool vec_ok) {
  constexpr int kElems = klab::kVec16<T>;            // elements in 16 bytes: f32 4, bf16 8
  constexpr int kQuads = kElems / 4;                 // Philox calls a vector: f32 1, bf16 2
  static_assert(kElems % 4 == 0, "a vector holds whole quads");
  using V = klab::Vec<T, kElems>;
  const int64_t vecs = (n + kElems - 1) / kElems, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vecs; v += stride) {
    klab::Philox4 bits[kQuads];                      // the words of elements i0 .. i0 + kElems - 1
#pragma unroll
    for (int j = 0; j < kQuads; ++j) bits[j] = klab::dropout_bits(a.seed, a.offset, static_cast<uint64_t>(v * kQuads + j));
    const auto keep = [&](int e, float x) { return bits[e / 4].x[e % 4] >= a.threshold ? x * a.scale : 0.0f; };
    const int64_t i0 = v * kElems;
    if (vec_ok && i0 + kElems <= n) {
      V r = *reinterpret_cast<const V*>(g_x + i0);
#pragma unroll
      for (int e = 0; e < kElems; ++e) r.v[e] = klab::from_f32<T>(keep(e, klab::to_f32(r.v[e])));
      *reinterpret_cast<V*>(g_y + i0) = r;
    } else {
#pragma unroll
      for (int e = 0; e < kElems; ++e)
        if (i0 + e < n) g_y[i0 + e] = klab::from_f32<T>(keep(e, klab::to_f32(g_x[i0 + e])));
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
  KLAB_REQUIRE(reinterpret_cast<std::uintptr_t>(mask) % 16 == 0, "v1_stored_mask: workspace not 16-byte aligned");
  dropout_v1_draw_mask<<<klab::grid_stride_blocks((n + 3) / 4, kThreads), kThreads, 0, l.stream>>>(mask, n, a);
  KLAB_CHECK_LAUNCH();
  const T* x = l.in[0].as<const T>();
  T* y = l.out[0].as<T>();
  const bool vec_ok = reinterpret_cast<std::uintptr_t>(x) % 16 == 0 && reinterpret_cast<std::uintptr_t>(y) % 16 == 0;
  const int64_t vecs = (n + klab::kVec16<T> - 1) / klab::kVec16<T>;
  dropout_v1_apply_mask<T><<<klab::grid_stride_blocks(vecs, kThreads), kThreads, 0, l.stream>>>(x, mask, y, n, a.scale,
                                                                                 vec_ok);
  KLAB_CHECK_LAUNCH();
}

template <class T>
void run_v2(const klab::Launch& l) {
  const int64_t n = numel(l.problem);
  if (n == 0) return;
  const T* x = l.in[0].as<const T>();
  T* y = l.out[0].as<T>();
  // A vector starts at a multiple of 16 bytes from the base: aligned when the bases are.
  const bool vec_ok = reinterpret_cast<std::uintptr_t>(x) % 16 == 0 && reinterpret_cast<std::uintptr_t>(y) % 16 == 0;
  const int64_t vecs = (n + klab::kVec16<T> - 1) / klab::kVec16<T>;
  dropout_v2_philox_fused<T><<<klab::grid_stride_blocks(vecs, kThreads), kThreads, 0, l.stream>>>(x, y, n, dropout_args(l),
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
