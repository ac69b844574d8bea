// Lesson 06 — z = (a + b) · c, one kernel per operator against one kernel for the chain.
//
//   v1_kernel_per_op  what an eager framework runs: one kernel computes t = a + b and writes
//                     t to memory, a second reads t and c and writes z. t is written once
//                     and read once: 6 tensors move instead of 4, 1.5x the bytes.
//   v2_fused          one kernel: a, b, c read once, z written once; (a + b) · c stays in
//                     registers. 16-byte vectors, a grid-stride loop (lesson 01's v3_vec16;
//                     map_vec16 in fusion.cuh, which poly_act.cu's kernels share).
//   triton           add_mul_triton.py: the same fused chain in Triton, compiled ahead of time.
//
// Bytes per element (4 bytes f32, 2 bf16): v1 moves 6 (a, b read, t written; t, c read, z
// written), v2 moves 4; both are bandwidth-bound, so v2 should take 2/3 of v1's time. The
// bench's GB/s counts the op's minimal 4, so v1 shows at most 2/3 of the copy bandwidth.
//
//   klab test 06 --op add_mul
//   klab bench 06 --op add_mul
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
#include "add_mul_triton.h"
#endif

namespace lesson06 {
namespace {

using std::int64_t;

constexpr int kThreads = 256;

// ======================================================================================
// v1_kernel_per_op
// ======================================================================================
template <class T>
__global__ void add_mul_v1_kernel_per_op_add(const T* __restrict__ g_a, const T* __restrict__ g_b,
                                             T* __restrict__ g_t, int64_t n) {
  map_vec16<T, 2>(g_a, g_b, nullptr, g_t, n, [](float a, float b, float) { return a + b; });
}
template <class T>
__global__ void add_mul_v1_kernel_per_op_mul(const T* __restrict__ g_t, const T* __restrict__ g_c,
                                             T* __restrict__ g_z, int64_t n) {
  map_vec16<T, 2>(g_t, g_c, nullptr, g_z, n, [](float t, float c, float) { return t * c; });
}

// ======================================================================================
// v2_fused
// ======================================================================================
template <class T>
__global__ void add_mul_v2_fused(const T* __restrict__ g_a, const T* __restrict__ g_b, const T* __restrict__ g_c,
                                 T* __restrict__ g_z, int64_t n) {
  map_vec16<T, 3>(g_a, g_b, g_c, g_z, n, [](float a, float b, float c) { return (a + b) * c; });
}

// ======================================================================================
// Launchers
// ======================================================================================
int64_t numel(const klab::Problem& p) { return p.shape[0] * p.shape[1]; }
unsigned blocks(int64_t n, klab::DType t) { return klab::grid_stride_blocks(n / (16 / klab::dtype_size(t)) + 1, kThreads); }

// t, the intermediate a + b, lives in the workspace (the harness's allocation, 256-byte aligned).
std::size_t workspace_v1_kernel_per_op(const klab::Problem& p) {
  return static_cast<std::size_t>(numel(p)) * klab::dtype_size(p.dtype);
}

void run_v1_kernel_per_op(const klab::Launch& l) {
  const int64_t n = numel(l.problem);
  if (n == 0) return;
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    T* t = static_cast<T*>(l.workspace);
    const unsigned g = blocks(n, l.problem.dtype);
    add_mul_v1_kernel_per_op_add<T><<<g, kThreads, 0, l.stream>>>(l.in[0].as<const T>(), l.in[1].as<const T>(), t, n);
    KLAB_CHECK_LAUNCH();
    add_mul_v1_kernel_per_op_mul<T><<<g, kThreads, 0, l.stream>>>(t, l.in[2].as<const T>(), l.out[0].as<T>(), n);
    KLAB_CHECK_LAUNCH();
  });
}

void run_v2_fused(const klab::Launch& l) {
  const int64_t n = numel(l.problem);
  if (n == 0) return;
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    add_mul_v2_fused<T><<<blocks(n, l.problem.dtype), kThreads, 0, l.stream>>>(
        l.in[0].as<const T>(), l.in[1].as<const T>(), l.in[2].as<const T>(), l.out[0].as<T>(), n);
    KLAB_CHECK_LAUNCH();
  });
}

// The Triton kernel takes its size as one int64 and its dtype from the launcher's name.
std::string triton_supports(const klab::Problem&) { return klab::triton_supported(); }

void run_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const int64_t n = numel(l.problem);
  if (n == 0) return;
  klab::triton_prepare();
  auto ptr = [](const klab::TensorView& t) { return reinterpret_cast<CUdeviceptr>(t.data); };
  const CUdeviceptr a = ptr(l.in[0]), b = ptr(l.in[1]), c = ptr(l.in[2]), z = ptr(l.out[0]);
  if (l.problem.dtype == klab::DType::f32) KLAB_CHECK_CU(tr_add_mul_f32_default(l.stream, a, b, c, z, n));
  else KLAB_CHECK_CU(tr_add_mul_bf16_default(l.stream, a, b, c, z, n));
#else
  (void)l;
#endif
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "add_mul", .name = "v1_kernel_per_op",
                                   .summary = "t = a + b, then z = t * c: two kernels, t written and read back",
                                   .kind = klab::ImplKind::cuda, .workspace = workspace_v1_kernel_per_op,
                                   .run = run_v1_kernel_per_op}));
KLAB_REGISTER(klab::register_impl({.op = "add_mul", .name = "v2_fused",
                                   .summary = "one kernel, (a + b) * c in registers, 16-byte vectors",
                                   .kind = klab::ImplKind::cuda, .run = run_v2_fused}));
KLAB_REGISTER(klab::register_impl({.op = "add_mul", .name = "triton",
                                   .summary = "the fused chain in Triton, compiled ahead of time",
                                   .kind = klab::ImplKind::triton, .supports = triton_supports, .run = run_triton}));

}  // namespace lesson06
