// Lesson 05 — matrix-vector: y(M) = A(M, K) · x(K), A row-major.
//
// A GEMV does 2 FLOPs per element of A and reads each element once: it is bound by memory
// bandwidth, not arithmetic (the opposite regime from a square matmul), so the target is
// copy bandwidth, and the technique is the one of lessons 01–03: coalesced, wide loads and
// enough of them in flight.
//
//   v1_thread_per_row  one thread per row: neighbouring threads read addresses K elements
//                      apart, every load touches its own sector
//   v2_warp_per_row    a warp per row, lanes striding the row with 16-byte loads (4 fp32 or
//                      8 bf16), four loads in flight per lane, a shuffle reduction; when M
//                      is too small to give every SM its warps (M < ~8K rows), a whole block
//                      of 8 warps shares each row instead
//
//   klab bench 05 --op gemv
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace {

using std::int64_t;

// The CPU reference: matmul_ops.cu (make_gemv_op).

// ======================================================================================
// v1_thread_per_row
// ======================================================================================
template <class T>
__global__ void gemv_v1_kernel(const T* __restrict__ g_A, const T* __restrict__ g_x, T* __restrict__ g_y, int M, int K) {
  const int m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= M) return;
  const T* a = g_A + static_cast<int64_t>(m) * K;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += klab::to_f32(a[k]) * klab::to_f32(g_x[k]);
  g_y[m] = klab::from_f32<T>(acc);
}

// ======================================================================================
// v2_warp_per_row — the dot product of one row by P cooperating threads (p = 0..P-1).
// ======================================================================================
__device__ __forceinline__ float dot16(const uint4& a, const uint4& x, float) {
  const float4 av = *reinterpret_cast<const float4*>(&a), xv = *reinterpret_cast<const float4*>(&x);
  return av.x * xv.x + av.y * xv.y + av.z * xv.z + av.w * xv.w;
}
__device__ __forceinline__ float dot16(const uint4& a, const uint4& x, __nv_bfloat16) {
  const __nv_bfloat162* a2 = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&x);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 af = __bfloat1622float2(a2[i]), xf = __bfloat1622float2(x2[i]);
    s += af.x * xf.x + af.y * xf.y;
  }
  return s;
}

template <class T, bool VEC>
__device__ __forceinline__ float row_dot(const T* __restrict__ a, const T* __restrict__ x, int K, int p, int P) {
  float acc = 0.f;
  if (VEC) {  // K is a multiple of the vector width and both rows are 16-byte aligned
    constexpr int V = 16 / sizeof(T);
    const int kv = K / V;
    const uint4* a4 = reinterpret_cast<const uint4*>(a);
    const uint4* x4 = reinterpret_cast<const uint4*>(x);
    // A is read once: streaming loads (evict first) keep x resident in L1/L2 instead.
#pragma unroll 4
    for (int i = p; i < kv; i += P) acc += dot16(__ldcs(a4 + i), __ldg(x4 + i), T{});
  } else {
    for (int k = p; k < K; k += P) acc += klab::to_f32(a[k]) * klab::to_f32(__ldg(x + k));
  }
  return acc;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class T, bool VEC>
__global__ void __launch_bounds__(256) gemv_warp_rows_kernel(const T* __restrict__ g_A, const T* __restrict__ g_x,
                                                             T* __restrict__ g_y, int M, int K) {
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32; m < M;
       m += static_cast<int64_t>(gridDim.x) * warps) {
    const float s = warp_sum(row_dot<T, VEC>(g_A + m * K, g_x, K, lane, 32));
    if (lane == 0) g_y[m] = klab::from_f32<T>(s);
  }
}

template <class T, bool VEC>
__global__ void __launch_bounds__(256) gemv_block_rows_kernel(const T* __restrict__ g_A, const T* __restrict__ g_x,
                                                              T* __restrict__ g_y, int M, int K) {
  __shared__ float s_part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    float s = warp_sum(row_dot<T, VEC>(g_A + m * K, g_x, K, threadIdx.x, blockDim.x));
    if (lane == 0) s_part[warp] = s;
    __syncthreads();
    if (warp == 0) {
      s = warp_sum(lane < warps ? s_part[lane] : 0.f);
      if (lane == 0) g_y[m] = klab::from_f32<T>(s);
    }
    __syncthreads();  // s_part is reused by the next row
  }
}

// ======================================================================================
// Launchers and registration
// ======================================================================================
void run_v1(const klab::Launch& L) {
  const int M = static_cast<int>(L.problem.shape[0]), K = static_cast<int>(L.problem.shape[1]);
  if (M == 0) return;
  klab::dispatch_float(L.problem.dtype, [&]<class T>() {
    gemv_v1_kernel<T><<<klab::blocks_for(M, 256), 256, 0, L.stream>>>(L.in[0].as<T>(), L.in[1].as<T>(),
                                                                       L.out[0].as<T>(), M, K);
  });
  KLAB_CHECK_LAUNCH();
}

void run_v2(const klab::Launch& L) {
  const int M = static_cast<int>(L.problem.shape[0]), K = static_cast<int>(L.problem.shape[1]);
  if (M == 0) return;
  const int sms = klab::device_info().present ? klab::device_info().sms : 132;
  klab::dispatch_float(L.problem.dtype, [&]<class T>() {
    constexpr int V = 16 / sizeof(T);
    const bool vec = K % V == 0 && reinterpret_cast<std::uintptr_t>(L.in[0].data) % 16 == 0 &&
                     reinterpret_cast<std::uintptr_t>(L.in[1].data) % 16 == 0;
    const T* a = L.in[0].as<T>();
    const T* x = L.in[1].as<T>();
    T* y = L.out[0].as<T>();
    if (M >= sms * 64) {  // a warp per row already gives every SM 64 warps
      const unsigned blocks = klab::blocks_for(M, 8, 1 << 20);
      if (vec) gemv_warp_rows_kernel<T, true><<<blocks, 256, 0, L.stream>>>(a, x, y, M, K);
      else gemv_warp_rows_kernel<T, false><<<blocks, 256, 0, L.stream>>>(a, x, y, M, K);
    } else {
      const unsigned blocks = klab::blocks_for(M, 1, 1 << 20);
      if (vec) gemv_block_rows_kernel<T, true><<<blocks, 256, 0, L.stream>>>(a, x, y, M, K);
      else gemv_block_rows_kernel<T, false><<<blocks, 256, 0, L.stream>>>(a, x, y, M, K);
    }
  });
  KLAB_CHECK_LAUNCH();
}

std::string float_only(const klab::Problem& p) {
  return p.dtype == klab::DType::f32 || p.dtype == klab::DType::bf16 ? "" : "f32 and bf16 only";
}

bool register_all() {
  klab::register_impl({.op = "gemv", .name = "v1_thread_per_row", .summary = "one thread per row (uncoalesced)",
                       .kind = klab::ImplKind::cuda, .supports = float_only, .run = run_v1});
  klab::register_impl({.op = "gemv", .name = "v2_warp_per_row",
                       .summary = "a warp (or block) per row, 16-byte loads, shuffle reduction",
                       .kind = klab::ImplKind::cuda, .supports = float_only, .run = run_v2});
  return true;
}

}  // namespace

KLAB_REGISTER(register_all());
