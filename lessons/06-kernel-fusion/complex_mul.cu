// Lesson 06 — z = a · b for complex numbers stored interleaved (re, im): the product written
// with real operators as an eager framework runs them against one kernel.
//
//   v1_real_ops   what eager PyTorch runs for a complex product written with real tensors,
//                 as a bf16 model must write it (PyTorch has no complex bf16 dtype):
//                   ar, ai, br, bi = a[..., 0], a[..., 1], b[..., 0], b[..., 1]   (views)
//                   z = torch.stack((ar*br - ai*bi, ar*bi + ai*br), -1)
//                 seven kernels: four products of two strided views (t1 = ar·br, t2 = ai·bi,
//                 t3 = ar·bi, t4 = ai·br), a subtraction (re), an addition (im), and the
//                 stack that interleaves re and im into z. The planar intermediates live in
//                 four workspace buffers, reused as a caching allocator reuses freed blocks.
//   v2_fused      one kernel: a and b read once as 16-byte vectors of whole complex numbers
//                 (2 in f32, 4 in bf16), the product in fp32 registers (two fmaf), z
//                 written once as a 16-byte vector; a grid-stride loop.
//   triton        complex_mul_triton.py: the same fused product in Triton, compiled ahead
//                 of time.
//
// Bytes per complex number (e = 4 bytes f32, 2 bf16; a complex number is 2e): the op needs
// a and b read and z written, 6e. v1's products each read two views that use every other
// element of a and b, but every 32-byte sector holds both halves, so each fetches a and b
// whole (4e) and writes its planar result (e): 5e each, 20e for four; the subtraction and
// the addition read two planar tensors and write one, 3e each; the stack reads re and im
// and writes z, 4e. 30e in all, 5x the fused kernel's 6e; the bench's GB/s counts the
// op's minimal 6e, so v1 shows at most 1/5 of the copy bandwidth.
//
//   klab test 06 --op complex_mul
//   klab bench 06 --op complex_mul
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "fusion.cuh"
#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#if KLAB_HAVE_TRITON
#include "complex_mul_triton.h"
#endif

namespace lesson06 {
namespace {

using std::int64_t;

constexpr int kThreads = 256;

// ======================================================================================
// v1_real_ops: one kernel per real operator (each computes in fp32 and stores its result
// rounded to T, as an eager framework's element-wise kernels do)
// ======================================================================================
// t[i] = x[2i + ox] · y[2i + oy]: the product of two strided views (ox, oy: 0 the real
// halves, 1 the imaginary ones). One element a thread and iteration: a strided view is not
// vectorised.
template <class T>
__global__ void complex_mul_v1_real_ops_mul(const T* __restrict__ g_x, int ox, const T* __restrict__ g_y, int oy,
                                            T* __restrict__ g_t, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    g_t[i] = klab::from_f32<T>(klab::to_f32(g_x[2 * i + ox]) * klab::to_f32(g_y[2 * i + oy]));
}
template <class T>
__global__ void complex_mul_v1_real_ops_sub(const T* __restrict__ g_a, const T* __restrict__ g_b, T* __restrict__ g_t,
                                            int64_t n) {
  map_vec16<T, 2>(g_a, g_b, nullptr, g_t, n, [](float a, float b, float) { return a - b; });
}
template <class T>
__global__ void complex_mul_v1_real_ops_add(const T* __restrict__ g_a, const T* __restrict__ g_b, T* __restrict__ g_t,
                                            int64_t n) {
  map_vec16<T, 2>(g_a, g_b, nullptr, g_t, n, [](float a, float b, float) { return a + b; });
}
// z[2i] = re[i], z[2i + 1] = im[i]: a copy, no rounding.
template <class T>
__global__ void complex_mul_v1_real_ops_stack(const T* __restrict__ g_re, const T* __restrict__ g_im,
                                              T* __restrict__ g_z, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    g_z[2 * i] = g_re[i];
    g_z[2 * i + 1] = g_im[i];
  }
}

// ======================================================================================
// v2_fused
// ======================================================================================
// (ar + i·ai)(br + i·bi) in fp32: re = ar·br − ai·bi, im = ar·bi + ai·br, one product
// rounded and one fmaf for each.
__device__ __forceinline__ float2 cmul(float ar, float ai, float br, float bi) {
  return make_float2(fmaf(ar, br, -(ai * bi)), fmaf(ar, bi, ai * br));
}

// n complex numbers, 2n elements of T. A 16-byte vector holds V/2 whole complex numbers
// (V elements: re at even positions, im at odd); the tail, one complex number at a time.
//   equivalent to: for (i = 0; i < n; ++i) (g_z[2i], g_z[2i+1]) = cmul(g_a[2i], g_a[2i+1], g_b[2i], g_b[2i+1]);
template <class T>
__global__ void complex_mul_v2_fused(const T* __restrict__ g_a, const T* __restrict__ g_b, T* __restrict__ g_z,
                                     int64_t n) {
  constexpr int V = klab::kVec16<T>;
  static_assert(V % 2 == 0, "a vector holds whole complex numbers");
  using Vec = klab::Vec<T, V>;
  const int64_t n_vec = 2 * n / V, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = tid; v < n_vec; v += stride) {
    const Vec r_a = reinterpret_cast<const Vec*>(g_a)[v];
    const Vec r_b = reinterpret_cast<const Vec*>(g_b)[v];
    Vec r_z;
#pragma unroll
    for (int k = 0; k < V; k += 2) {
      const float2 z = cmul(klab::to_f32(r_a.v[k]), klab::to_f32(r_a.v[k + 1]), klab::to_f32(r_b.v[k]),
                            klab::to_f32(r_b.v[k + 1]));
      r_z.v[k] = klab::from_f32<T>(z.x);
      r_z.v[k + 1] = klab::from_f32<T>(z.y);
    }
    reinterpret_cast<Vec*>(g_z)[v] = r_z;
  }
  for (int64_t i = n_vec * (V / 2) + tid; i < n; i += stride) {
    const float2 z = cmul(klab::to_f32(g_a[2 * i]), klab::to_f32(g_a[2 * i + 1]), klab::to_f32(g_b[2 * i]),
                          klab::to_f32(g_b[2 * i + 1]));
    g_z[2 * i] = klab::from_f32<T>(z.x);
    g_z[2 * i + 1] = klab::from_f32<T>(z.y);
  }
}

// ======================================================================================
// Launchers
// ======================================================================================
int64_t count(const klab::Problem& p) { return p.shape[0] * p.shape[1]; }   // complex numbers

// One planar intermediate (n elements of T) in the workspace, rounded up to 256 bytes so
// that each of the four starts a 16-byte vector (the harness's workspace is 256-byte aligned).
std::size_t buffer_bytes(const klab::Problem& p) {
  return (static_cast<std::size_t>(count(p)) * klab::dtype_size(p.dtype) + 255) / 256 * 256;
}
std::size_t workspace_v1_real_ops(const klab::Problem& p) { return 4 * buffer_bytes(p); }

void run_v1_real_ops(const klab::Launch& l) {
  const int64_t n = count(l.problem);
  if (n == 0) return;
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    auto* ws = static_cast<unsigned char*>(l.workspace);
    const std::size_t b = buffer_bytes(l.problem);
    T* w[4];
    for (int k = 0; k < 4; ++k) w[k] = reinterpret_cast<T*>(ws + k * b);
    const T *a = l.in[0].as<const T>(), *bb = l.in[1].as<const T>();
    const unsigned g1 = klab::grid_stride_blocks(n, kThreads);
    const unsigned gv = klab::grid_stride_blocks(n / klab::kVec16<T> + 1, kThreads);
    complex_mul_v1_real_ops_mul<T><<<g1, kThreads, 0, l.stream>>>(a, 0, bb, 0, w[0], n);   // t1 = ar·br
    KLAB_CHECK_LAUNCH();
    complex_mul_v1_real_ops_mul<T><<<g1, kThreads, 0, l.stream>>>(a, 1, bb, 1, w[1], n);   // t2 = ai·bi
    KLAB_CHECK_LAUNCH();
    complex_mul_v1_real_ops_sub<T><<<gv, kThreads, 0, l.stream>>>(w[0], w[1], w[2], n);    // re = t1 − t2
    KLAB_CHECK_LAUNCH();
    complex_mul_v1_real_ops_mul<T><<<g1, kThreads, 0, l.stream>>>(a, 0, bb, 1, w[0], n);   // t3 = ar·bi
    KLAB_CHECK_LAUNCH();
    complex_mul_v1_real_ops_mul<T><<<g1, kThreads, 0, l.stream>>>(a, 1, bb, 0, w[1], n);   // t4 = ai·br
    KLAB_CHECK_LAUNCH();
    complex_mul_v1_real_ops_add<T><<<gv, kThreads, 0, l.stream>>>(w[0], w[1], w[3], n);    // im = t3 + t4
    KLAB_CHECK_LAUNCH();
    complex_mul_v1_real_ops_stack<T><<<g1, kThreads, 0, l.stream>>>(w[2], w[3], l.out[0].as<T>(), n);  // z
    KLAB_CHECK_LAUNCH();
  });
}

void run_v2_fused(const klab::Launch& l) {
  const int64_t n = count(l.problem);
  if (n == 0) return;
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const unsigned g = klab::grid_stride_blocks(2 * n / klab::kVec16<T> + 1, kThreads);
    complex_mul_v2_fused<T><<<g, kThreads, 0, l.stream>>>(l.in[0].as<const T>(), l.in[1].as<const T>(),
                                                          l.out[0].as<T>(), n);
    KLAB_CHECK_LAUNCH();
  });
}

// The Triton kernel takes the count of real elements (2n) as one int64, its dtype from the
// launcher's name.
std::string triton_supports(const klab::Problem&) { return klab::triton_supported(); }

void run_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const int64_t n = count(l.problem);
  if (n == 0) return;
  klab::triton_prepare();
  auto ptr = [](const klab::TensorView& t) { return reinterpret_cast<CUdeviceptr>(t.data); };
  const CUdeviceptr a = ptr(l.in[0]), b = ptr(l.in[1]), z = ptr(l.out[0]);
  if (l.problem.dtype == klab::DType::f32) KLAB_CHECK_CU(tr_complex_mul_f32_default(l.stream, a, b, z, 2 * n));
  else KLAB_CHECK_CU(tr_complex_mul_bf16_default(l.stream, a, b, z, 2 * n));
#else
  (void)l;
#endif
}

}  // namespace

// v1's own tolerance: its roundings to T (pointwise_ops.cu derives it).
KLAB_REGISTER(klab::register_impl({.op = "complex_mul", .name = "v1_real_ops",
                                   .summary = "eager real ops: 4 strided products, a sub, an add, a stack (7 kernels)",
                                   .kind = klab::ImplKind::cuda, .workspace = workspace_v1_real_ops,
                                   .run = run_v1_real_ops, .tolerance = complex_mul_v1_tolerance}));
KLAB_REGISTER(klab::register_impl({.op = "complex_mul", .name = "v2_fused",
                                   .summary = "one kernel, 16-byte vectors of whole complex numbers, fp32 fmaf",
                                   .kind = klab::ImplKind::cuda, .run = run_v2_fused}));
KLAB_REGISTER(klab::register_impl({.op = "complex_mul", .name = "triton",
                                   .summary = "the fused product in Triton, compiled ahead of time",
                                   .kind = klab::ImplKind::triton, .supports = triton_supports, .run = run_triton}));

}  // namespace lesson06
