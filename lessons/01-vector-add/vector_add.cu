// Lesson 01 — vector add: z = x + y, from a CPU loop to a kernel at the copy bandwidth.
//
// Versions (impls of op `vector_add`, f32/f16/bf16):
//   cpu            one host thread, a plain loop: the "CPU vs GPU" baseline
//   v1_naive       one element per thread, one block of 256 threads per 256 elements
//   v2_grid_stride a fixed grid (a few blocks per SM) that strides over the array
//   v3_vec16       v2 with 16-byte loads and stores (float4: 4 f32, or 8 f16/bf16)
//   triton         vector_add_triton.py, compiled ahead of time
//   exercise       exercise.cu: the grid-stride loop, for you to write (klab check 01)
//
//   klab test 01 --op vector_add          every version on every edge-case shape
//   klab bench 01 --op vector_add         timings at 2^20 and 2^28 elements
//
// Every index is 64-bit: with n > 2^31 elements, `blockIdx.x * blockDim.x` in 32 bits
// wraps around and the kernel writes somewhere else (the test at 2^31 + 7 catches it).
#include <cuda_runtime.h>

#include "elementwise.cuh"
#include "klab/triton.hpp"
#if KLAB_HAVE_TRITON
#include "vector_add_triton.h"
#endif

namespace lesson01 {

using klab::ceil_div;

// ---- CPU baseline ------------------------------------------------------------------------
// (The fp64 reference is map_reference in elementwise.cuh; this is the CPU *impl*.)

template <class T>
void add_cpu(const T* x, const T* y, T* z, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
}

// ---- v1: one element per thread ------------------------------------------------------------

template <class T>
__global__ void add_v1_naive(const T* __restrict__ g_x, const T* __restrict__ g_y, T* __restrict__ g_z,
                             std::int64_t n) {
  // The cast comes first: blockIdx.x * blockDim.x in 32-bit arithmetic overflows past 2^31.
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) g_z[i] = klab::from_f32<T>(klab::to_f32(g_x[i]) + klab::to_f32(g_y[i]));
}

// ---- v2: grid-stride loop --------------------------------------------------------------------
// A grid sized to the machine (not to n) walks the array: fewer blocks to schedule, and
// the same kernel works for any n, including n past the largest grid.

template <class T>
__global__ void add_v2_grid_stride(const T* __restrict__ g_x, const T* __restrict__ g_y, T* __restrict__ g_z,
                                   std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    g_z[i] = klab::from_f32<T>(klab::to_f32(g_x[i]) + klab::to_f32(g_y[i]));
}

// ---- v3: 16-byte vector loads ------------------------------------------------------------------
// One 128-bit load moves 4 floats (or 8 halves) per instruction: a quarter of the load
// instructions of v2 for the same bytes, and more bytes in flight per thread. cudaMalloc
// returns 256-byte aligned pointers, so element 0 starts a vector; the n % kVec tail
// elements are done one by one.

template <class T>
__global__ void add_v3_vec16(const T* __restrict__ g_x, const T* __restrict__ g_y, T* __restrict__ g_z,
                             std::int64_t n) {
  constexpr int kVec = 16 / sizeof(T);                 // elements per 16-byte vector
  static_assert(16 % sizeof(T) == 0, "element size must divide 16 bytes");
  const std::int64_t n_vec = n / kVec;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const auto* g_x4 = reinterpret_cast<const uint4*>(g_x);
  const auto* g_y4 = reinterpret_cast<const uint4*>(g_y);
  auto* g_z4 = reinterpret_cast<uint4*>(g_z);
  for (std::int64_t v = tid; v < n_vec; v += stride) {
    uint4 r_x = g_x4[v], r_y = g_y4[v], r_z;           // 16 bytes each
    const T* x = reinterpret_cast<const T*>(&r_x);
    const T* y = reinterpret_cast<const T*>(&r_y);
    T* z = reinterpret_cast<T*>(&r_z);
#pragma unroll
    for (int k = 0; k < kVec; ++k) z[k] = klab::from_f32<T>(klab::to_f32(x[k]) + klab::to_f32(y[k]));
    g_z4[v] = r_z;
  }
  for (std::int64_t i = n_vec * kVec + tid; i < n; i += stride)   // the tail, < kVec elements
    g_z[i] = klab::from_f32<T>(klab::to_f32(g_x[i]) + klab::to_f32(g_y[i]));
}

// ---- launchers ---------------------------------------------------------------------------------

template <class T>
void launch_v1(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return;
  const auto* x = l.in[0].as<const T>();
  const auto* y = l.in[1].as<const T>();
  auto* z = l.out[0].as<T>();
  add_v1_naive<T><<<klab::blocks_for(n, kThreads), kThreads, 0, l.stream>>>(x, y, z, n);
}

template <class T>
void launch_v2(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return;
  add_v2_grid_stride<T><<<grid_stride_blocks(n), kThreads, 0, l.stream>>>(l.in[0].as<const T>(), l.in[1].as<const T>(),
                                                                          l.out[0].as<T>(), n);
}

template <class T>
void launch_v3(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  if (n == 0) return;
  constexpr int kVec = 16 / sizeof(T);
  add_v3_vec16<T><<<grid_stride_blocks(ceil_div<std::int64_t>(n, kVec)), kThreads, 0, l.stream>>>(
      l.in[0].as<const T>(), l.in[1].as<const T>(), l.out[0].as<T>(), n);
}

void run_cpu(const klab::Launch& l) {  // f32 only (cpu_supports)
  add_cpu(l.in[0].as<const float>(), l.in[1].as<const float>(), l.out[0].as<float>(), l.problem.shape[0]);
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

// ---- registration ------------------------------------------------------------------------------

template <template <class> class L>
std::function<void(const klab::Launch&)> by_dtype() {
  return [](const klab::Launch& l) {
    klab::dispatch_float(l.problem.dtype, [&]<class T>() { L<T>::run(l); });
  };
}
template <class T> struct V1 { static void run(const klab::Launch& l) { launch_v1<T>(l); } };
template <class T> struct V2 { static void run(const klab::Launch& l) { launch_v2<T>(l); } };
template <class T> struct V3 { static void run(const klab::Launch& l) { launch_v3<T>(l); } };

KLAB_REGISTER(klab::register_lesson({"01", "vector-add", "Vector add and the element-wise family", "vector_add",
                                     "v2_grid_stride", "lessons/01-vector-add/exercise.cu"}));

KLAB_REGISTER(klab::register_op([] {
  klab::Op op = elementwise_op("vector_add", "z = x + y", 2, [](double x, double y) { return x + y; });
  op.dtypes = {klab::DType::f32, klab::DType::f16, klab::DType::bf16};
  return op;
}()));

KLAB_REGISTER(klab::register_impl({"vector_add", "cpu", "one host thread, a plain loop", klab::ImplKind::cpu, cpu_supports, {}, run_cpu}));
KLAB_REGISTER(klab::register_impl({"vector_add", "v1_naive", "one element per thread, 64-bit index", klab::ImplKind::cuda, {}, {}, by_dtype<V1>()}));
KLAB_REGISTER(klab::register_impl({"vector_add", "v2_grid_stride", "fixed grid striding over the array", klab::ImplKind::cuda, {}, {}, by_dtype<V2>()}));
KLAB_REGISTER(klab::register_impl({"vector_add", "v3_vec16", "grid-stride with 16-byte vector loads/stores", klab::ImplKind::cuda, {}, {}, by_dtype<V3>()}));
KLAB_REGISTER(klab::register_impl({"vector_add", "triton", "Triton, 4096 elements per program, compiled ahead of time",
                                   klab::ImplKind::triton,
                                   [](const klab::Problem& p) {
                                     if (p.dtype != klab::DType::f32) return std::string("the Triton vector add is built for f32");
                                     return klab::triton_supported();
                                   },
                                   {}, run_triton}));

}  // namespace lesson01
