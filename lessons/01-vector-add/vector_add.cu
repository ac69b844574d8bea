// Lesson 01 — vector add: z = x + y, from a CPU loop to a kernel at the copy bandwidth.
//
// Impls of op `vector_add` (f32/f16/bf16) registered here:
//   cpu            one host thread, a plain loop: the "CPU vs GPU" baseline
//   v1_naive       one element per thread, one block of 256 threads per 256 elements
//   v2_grid_stride a fixed grid (a few blocks per SM) that strides over the array
//   v3_vec16       v2 with 16-byte loads and stores (uint4: 4 f32, or 8 f16/bf16)
//   triton         vector_add_triton.py, compiled ahead of time
// (The learner's grid-stride loop, impl `exercise`, is registered by exercise.cu.)
//
//   klab test 01 --op vector_add          every version on every edge-case shape
//   klab bench 01 --op vector_add         timings at 2^20 and 2^28 elements
//
// Every index is 64-bit: with n > 2^31 elements, `blockIdx.x * blockDim.x` in 32 bits
// wraps around and the kernel writes somewhere else (the test at 2^31 + 7 catches it).
#include <cuda_runtime.h>

#include "elementwise.cuh"
#include "klab/device/vec.cuh"
#include "klab/triton.hpp"
#if KLAB_HAVE_TRITON
#include "vector_add_triton.h"
#endif

namespace lesson01 {
namespace {

using klab::ceil_div;

// The op spec (inputs, fp64 reference, shapes) is elementwise_op in elementwise.cuh; the
// registration at the end adds f16 to its dtypes.

// ---- cpu: the CPU baseline ----------------------------------------------------------------
// (The fp64 reference is map_reference in elementwise.cuh; this is the CPU *impl*.)

template <class T>
void vector_add_cpu(const T* x, const T* y, T* z, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
}

// ---- v1_naive: one element per thread ------------------------------------------------------

template <class T>
__global__ void vector_add_v1_naive(const T* __restrict__ g_x, const T* __restrict__ g_y, T* __restrict__ g_z,
                                    std::int64_t n) {
  // The cast comes first: blockIdx.x * blockDim.x in 32-bit arithmetic overflows past 2^31.
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) g_z[i] = klab::from_f32<T>(klab::to_f32(g_x[i]) + klab::to_f32(g_y[i]));
}

// ---- v2_grid_stride: grid-stride loop --------------------------------------------------------
// A grid sized to the machine (not to n) walks the array: fewer blocks to schedule, and
// the same kernel works for any n, including n past the largest grid.

template <class T>
__global__ void vector_add_v2_grid_stride(const T* __restrict__ g_x, const T* __restrict__ g_y,
                                          T* __restrict__ g_z, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    g_z[i] = klab::from_f32<T>(klab::to_f32(g_x[i]) + klab::to_f32(g_y[i]));
}

// ---- v3_vec16: 16-byte vector loads ------------------------------------------------------------
// One 128-bit load moves 4 floats (or 8 halves) per instruction: a quarter of the load
// instructions of v2 for the same bytes, and more bytes in flight per thread. cudaMalloc
// returns 256-byte aligned pointers, so element 0 starts a vector; the n % kVec tail
// elements are done one by one. (klab/device/vec.cuh keeps this lesson's 16-byte vector
// for the later lessons: klab::Vec, klab::kVec16, klab::aligned16.)

template <class T>
__global__ void vector_add_v3_vec16(const T* __restrict__ g_x, const T* __restrict__ g_y, T* __restrict__ g_z,
                                    std::int64_t n) {
  static_assert(16 % sizeof(T) == 0, "element size must divide 16 bytes");
  constexpr int kVec = klab::kVec16<T>;                // elements per 16-byte vector
  const std::int64_t n_vec = n / kVec;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const auto* g_x4 = reinterpret_cast<const uint4*>(g_x);
  const auto* g_y4 = reinterpret_cast<const uint4*>(g_y);
  auto* g_z4 = reinterpret_cast<uint4*>(g_z);
  for (std::int64_t v = tid; v < n_vec; v += stride) {
    uint4 r_x = g_x4[v], r_y = g_y4[v], r_z;           // 16 bytes each
    const T* r_xe = reinterpret_cast<const T*>(&r_x);  // the same registers, element by element
    const T* r_ye = reinterpret_cast<const T*>(&r_y);
    T* r_ze = reinterpret_cast<T*>(&r_z);
#pragma unroll
    for (int k = 0; k < kVec; ++k) r_ze[k] = klab::from_f32<T>(klab::to_f32(r_xe[k]) + klab::to_f32(r_ye[k]));
    g_z4[v] = r_z;
  }
  for (std::int64_t i = n_vec * kVec + tid; i < n; i += stride)   // the tail, < kVec elements
    g_z[i] = klab::from_f32<T>(klab::to_f32(g_x[i]) + klab::to_f32(g_y[i]));
}

// ---- launchers ---------------------------------------------------------------------------------

void run_cpu(const klab::Launch& l) {  // f32 only (cpu_supports)
  vector_add_cpu(l.in[0].as<const float>(), l.in[1].as<const float>(), l.out[0].as<float>(), l.problem.shape[0]);
}

void run_v1_naive(const klab::Launch& l) {
  klab::dispatch_float(l.problem.dtype, [&]<class T>() {
    const std::int64_t n = l.problem.shape[0];
    if (n == 0) return;
    vector_add_v1_naive<T><<<klab::blocks_for(n, kThreads), kThreads, 0, l.stream>>>(
        l.in[0].as<const T>(), l.in[1].as<const T>(), l.out[0].as<T>(), n);
  });
}

void run_v2_grid_stride(const klab::Launch& l) {
  klab::dispatch_float(l.problem.dtype, [&]<class T>() {
    const std::int64_t n = l.problem.shape[0];
    if (n == 0) return;
    vector_add_v2_grid_stride<T><<<grid_stride_blocks(n), kThreads, 0, l.stream>>>(
        l.in[0].as<const T>(), l.in[1].as<const T>(), l.out[0].as<T>(), n);
  });
}

void run_v3_vec16(const klab::Launch& l) {
  klab::dispatch_float(l.problem.dtype, [&]<class T>() {
    const std::int64_t n = l.problem.shape[0];
    if (n == 0) return;
    vector_add_v3_vec16<T><<<grid_stride_blocks(ceil_div<std::int64_t>(n, klab::kVec16<T>)), kThreads, 0, l.stream>>>(
        l.in[0].as<const T>(), l.in[1].as<const T>(), l.out[0].as<T>(), n);
  });
}

std::string triton_supports(const klab::Problem& p) {
  if (p.dtype != klab::DType::f32) return std::string("the Triton vector add is built for f32");
  return klab::triton_supported();
}

void run_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return;
  klab::triton_prepare();
  KLAB_CHECK_CU(tr_vector_add_f32_default(l.stream, reinterpret_cast<CUdeviceptr>(l.in[0].data),
                                          reinterpret_cast<CUdeviceptr>(l.in[1].data),
                                          reinterpret_cast<CUdeviceptr>(l.out[0].data), n));
#else
  (void)l;
#endif
}

klab::Op make_vector_add_op() {
  klab::Op op = elementwise_op("vector_add", "z = x + y", 2, [](double x, double y) { return x + y; });
  op.dtypes = {klab::DType::f32, klab::DType::f16, klab::DType::bf16};
  op.tour = {"v1_naive", "v3_vec16"};
  return op;
}

}  // namespace

// ---- registration ------------------------------------------------------------------------------

KLAB_REGISTER(klab::register_lesson({.id = "01",
                                     .slug = "vector-add",
                                     .title = "Vector add and the element-wise family",
                                     .exercise_op = "vector_add",
                                     .exercise_reference = "v2_grid_stride",
                                     .exercise_hint = "lessons/01-vector-add/exercise.cu"}));

KLAB_REGISTER(klab::register_op(make_vector_add_op()));
KLAB_REGISTER(klab::register_impl({.op = "vector_add", .name = "cpu", .summary = "one host thread, a plain loop",
                                   .kind = klab::ImplKind::cpu, .supports = cpu_supports, .run = run_cpu}));
KLAB_REGISTER(klab::register_impl({.op = "vector_add", .name = "v1_naive",
                                   .summary = "one element per thread, 64-bit index",
                                   .kind = klab::ImplKind::cuda, .run = run_v1_naive}));
KLAB_REGISTER(klab::register_impl({.op = "vector_add", .name = "v2_grid_stride",
                                   .summary = "fixed grid striding over the array",
                                   .kind = klab::ImplKind::cuda, .run = run_v2_grid_stride}));
KLAB_REGISTER(klab::register_impl({.op = "vector_add", .name = "v3_vec16",
                                   .summary = "grid-stride with 16-byte vector loads/stores",
                                   .kind = klab::ImplKind::cuda, .run = run_v3_vec16}));
KLAB_REGISTER(klab::register_impl({.op = "vector_add", .name = "triton",
                                   .summary = "Triton, 4096 elements per program, compiled ahead of time",
                                   .kind = klab::ImplKind::triton, .supports = triton_supports, .run = run_triton}));

}  // namespace lesson01
