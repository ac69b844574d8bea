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
//                      of 8 warps shares each row instead (kernel gemv_v2_warp_per_row_block)
//   v3_multi_row       R rows (1, 2 or 4) per group of W warps (1..8): every x load serves R
//                      rows of A (x traffic from L1 divided by R) and R independent loads of
//                      A are in flight per x load; W follows the row length (no idle lanes
//                      on short rows), R the row count (enough warps to fill every SM)
//
// The shuffle reduction is klab::warp_sum (klab/device/warp.cuh, taught in lesson 03).
//
//   klab bench 05 --op gemv
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "klab/device.hpp"
#include "klab/device/warp.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace lesson05 {
namespace {

using std::int64_t;

// The CPU reference: matmul_ops.cu (make_gemv_op).

// ======================================================================================
// v1_thread_per_row
// ======================================================================================
template <class T>
__global__ void gemv_v1_thread_per_row(const T* __restrict__ g_A, const T* __restrict__ g_x, T* __restrict__ g_y,
                                       int M, int K) {
  const int m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= M) return;
  const T* g_a = g_A + static_cast<int64_t>(m) * K;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += klab::to_f32(g_a[k]) * klab::to_f32(g_x[k]);
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
__device__ __forceinline__ float row_dot(const T* __restrict__ g_a, const T* __restrict__ g_x, int K, int p, int P) {
  float acc = 0.f;
  if (VEC) {  // K is a multiple of the vector width and both rows are 16-byte aligned
    constexpr int V = 16 / sizeof(T);
    const int kv = K / V;
    const uint4* g_a4 = reinterpret_cast<const uint4*>(g_a);
    const uint4* g_x4 = reinterpret_cast<const uint4*>(g_x);
    // A is read once: streaming loads (evict first) keep x resident in L1/L2 instead.
#pragma unroll 4
    for (int i = p; i < kv; i += P) acc += dot16(__ldcs(g_a4 + i), __ldg(g_x4 + i), T{});
  } else {
    for (int k = p; k < K; k += P) acc += klab::to_f32(g_a[k]) * klab::to_f32(__ldg(g_x + k));
  }
  return acc;
}

template <class T, bool VEC>
__global__ void __launch_bounds__(256) gemv_v2_warp_per_row(const T* __restrict__ g_A, const T* __restrict__ g_x,
                                                            T* __restrict__ g_y, int M, int K) {
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32; m < M;
       m += static_cast<int64_t>(gridDim.x) * warps) {
    const float s = klab::warp_sum(row_dot<T, VEC>(g_A + m * K, g_x, K, lane, 32));
    if (lane == 0) g_y[m] = klab::from_f32<T>(s);
  }
}

template <class T, bool VEC>
__global__ void __launch_bounds__(256) gemv_v2_warp_per_row_block(const T* __restrict__ g_A, const T* __restrict__ g_x,
                                                                  T* __restrict__ g_y, int M, int K) {
  __shared__ float s_part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    float s = klab::warp_sum(row_dot<T, VEC>(g_A + m * K, g_x, K, threadIdx.x, blockDim.x));
    if (lane == 0) s_part[warp] = s;
    __syncthreads();
    if (warp == 0) {
      s = klab::warp_sum(lane < warps ? s_part[lane] : 0.f);
      if (lane == 0) g_y[m] = klab::from_f32<T>(s);
    }
    __syncthreads();  // s_part is reused by the next row
  }
}

// ======================================================================================
// v3_multi_row — a group of W warps (P = 32·W threads) computes R consecutive rows; group
// `grp` owns rows [grp·R, grp·R + R). A block of 256 threads holds 8 / W groups.
//   for each 16-byte chunk i of the row (i = p, p + P, ...):
//     xv = x[i]                                          one x load ...
//     r_acc[r] += dot(A[row r][i], xv) for r < R         ... for R loads of A
// then each warp reduces its R sums by shuffles and, when W > 1, the W warps of a group add
// theirs through shared memory.
// ======================================================================================
template <class T, int R, int W>
__global__ void __launch_bounds__(256) gemv_v3_multi_row(const T* __restrict__ g_A, const T* __restrict__ g_x,
                                                         T* __restrict__ g_y, int M, int K) {
  constexpr int V = 16 / sizeof(T), GROUPS = 8 / W, P = 32 * W;
  static_assert(W == 1 || W == 2 || W == 4 || W == 8, "8 warps per block split into whole groups");
  __shared__ float s_part[8][R];                             // (warp, row of the group)
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int p = (warp % W) * 32 + lane;                      // thread within the group
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * GROUPS + warp / W) * R;
  const int kv = K / V;
  const uint4* g_x4 = reinterpret_cast<const uint4*>(g_x);
  const uint4* g_a4[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {                             // rows past M read row M-1, unused
    const int64_t row = row0 + r < M ? row0 + r : M - 1;
    g_a4[r] = reinterpret_cast<const uint4*>(g_A + row * K);
  }
  float r_acc[R] = {};
#pragma unroll 2
  for (int i = p; i < kv; i += P) {
    const uint4 xv = __ldg(g_x4 + i);
    uint4 r_av[R];
#pragma unroll
    for (int r = 0; r < R; ++r) r_av[r] = __ldcs(g_a4[r] + i); // A is read once: evict first
#pragma unroll
    for (int r = 0; r < R; ++r) r_acc[r] += dot16(r_av[r], xv, T{});
  }
#pragma unroll
  for (int r = 0; r < R; ++r) r_acc[r] = klab::warp_sum(r_acc[r]);
  if constexpr (W > 1) {
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < R; ++r) s_part[warp][r] = r_acc[r];
    __syncthreads();
    if (warp % W != 0) return;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < W; ++w) s += s_part[warp + w][r];
      r_acc[r] = s;
    }
  }
  if (lane < R && row0 + lane < M) {                         // lane r stores row r
    float v = r_acc[0];
#pragma unroll
    for (int r = 1; r < R; ++r) v = lane == r ? r_acc[r] : v;
    g_y[row0 + lane] = klab::from_f32<T>(v);
  }
}

// ======================================================================================
// Launchers and registration
// ======================================================================================
void run_v1_thread_per_row(const klab::Launch& l) {
  const int M = static_cast<int>(l.problem.shape[0]), K = static_cast<int>(l.problem.shape[1]);
  if (M == 0) return;
  klab::dispatch_float(l.problem.dtype, [&]<class T>() {
    gemv_v1_thread_per_row<T><<<klab::blocks_for(M, 256), 256, 0, l.stream>>>(l.in[0].as<T>(), l.in[1].as<T>(),
                                                                               l.out[0].as<T>(), M, K);
  });
  KLAB_CHECK_LAUNCH();
}

void run_v2_warp_per_row(const klab::Launch& l) {
  const int M = static_cast<int>(l.problem.shape[0]), K = static_cast<int>(l.problem.shape[1]);
  if (M == 0) return;
  const int sms = klab::sm_count();
  klab::dispatch_float(l.problem.dtype, [&]<class T>() {
    constexpr int V = 16 / sizeof(T);
    const bool vec = K % V == 0 && reinterpret_cast<std::uintptr_t>(l.in[0].data) % 16 == 0 &&
                     reinterpret_cast<std::uintptr_t>(l.in[1].data) % 16 == 0;
    const T* a = l.in[0].as<T>();
    const T* x = l.in[1].as<T>();
    T* y = l.out[0].as<T>();
    if (M >= sms * 64) {  // a warp per row already gives every SM 64 warps
      const unsigned blocks = klab::blocks_for(M, 8, 1 << 20);
      if (vec) gemv_v2_warp_per_row<T, true><<<blocks, 256, 0, l.stream>>>(a, x, y, M, K);
      else gemv_v2_warp_per_row<T, false><<<blocks, 256, 0, l.stream>>>(a, x, y, M, K);
    } else {
      const unsigned blocks = klab::blocks_for(M, 1, 1 << 20);
      if (vec) gemv_v2_warp_per_row_block<T, true><<<blocks, 256, 0, l.stream>>>(a, x, y, M, K);
      else gemv_v2_warp_per_row_block<T, false><<<blocks, 256, 0, l.stream>>>(a, x, y, M, K);
    }
  });
  KLAB_CHECK_LAUNCH();
}

// W: enough warps per row that each lane has >= 4 chunks of a row, at most 8; R: the most
// rows per group (4, 2, 1) that still make >= 64 warps per SM (a full SM), or 1.
template <class T, int R>
void launch_v3_multi_row(const T* a, const T* x, T* y, int M, int K, int W, cudaStream_t s) {
  const int64_t groups = klab::ceil_div<int64_t>(M, R);
  const unsigned blocks = static_cast<unsigned>(klab::ceil_div<int64_t>(groups * W, 8));
  switch (W) {
    case 1: gemv_v3_multi_row<T, R, 1><<<blocks, 256, 0, s>>>(a, x, y, M, K); break;
    case 2: gemv_v3_multi_row<T, R, 2><<<blocks, 256, 0, s>>>(a, x, y, M, K); break;
    case 4: gemv_v3_multi_row<T, R, 4><<<blocks, 256, 0, s>>>(a, x, y, M, K); break;
    default: gemv_v3_multi_row<T, R, 8><<<blocks, 256, 0, s>>>(a, x, y, M, K); break;
  }
}

bool multi_row_vec_ok(const klab::Launch& l, int V) {
  const int64_t K = l.problem.shape[1];
  return K % V == 0 && reinterpret_cast<std::uintptr_t>(l.in[0].data) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(l.in[1].data) % 16 == 0;
}

void run_v3_multi_row(const klab::Launch& l) {
  const int M = static_cast<int>(l.problem.shape[0]), K = static_cast<int>(l.problem.shape[1]);
  if (M == 0) return;
  const int sms = klab::sm_count();
  klab::dispatch_float(l.problem.dtype, [&]<class T>() {
    constexpr int V = 16 / sizeof(T);
    KLAB_REQUIRE(multi_row_vec_ok(l, V), "v3_multi_row: K must be a multiple of 16 bytes (supports() says so)");
    const int chunks = K / V;
    int W = 1;
    while (W < 8 && chunks >= 32 * (2 * W) * 4) W *= 2;
    const int64_t want = static_cast<int64_t>(sms) * 64;     // warps that fill every SM
    const T* a = l.in[0].as<T>();
    const T* x = l.in[1].as<T>();
    T* y = l.out[0].as<T>();
    if (klab::ceil_div<int64_t>(M, 4) * W >= want) launch_v3_multi_row<T, 4>(a, x, y, M, K, W, l.stream);
    else if (klab::ceil_div<int64_t>(M, 2) * W >= want) launch_v3_multi_row<T, 2>(a, x, y, M, K, W, l.stream);
    else launch_v3_multi_row<T, 1>(a, x, y, M, K, W, l.stream);
  });
  KLAB_CHECK_LAUNCH();
}

std::string float_only(const klab::Problem& p) {
  return p.dtype == klab::DType::f32 || p.dtype == klab::DType::bf16 ? "" : "f32 and bf16 only";
}

std::string supports_v3_multi_row(const klab::Problem& p) {
  if (auto why = float_only(p); !why.empty()) return why;
  if ((p.shape[1] * static_cast<int64_t>(klab::dtype_size(p.dtype))) % 16 != 0)
    return "rows must be a multiple of 16 bytes (v2_warp_per_row takes any K)";
  return "";
}

KLAB_REGISTER(klab::register_impl({.op = "gemv", .name = "v1_thread_per_row",
                                   .summary = "one thread per row (uncoalesced)", .kind = klab::ImplKind::cuda,
                                   .supports = float_only, .run = run_v1_thread_per_row}));
KLAB_REGISTER(klab::register_impl({.op = "gemv", .name = "v2_warp_per_row",
                                   .summary = "a warp (or block) per row, 16-byte loads, shuffle reduction",
                                   .kind = klab::ImplKind::cuda, .supports = float_only,
                                   .run = run_v2_warp_per_row}));
KLAB_REGISTER(klab::register_impl({.op = "gemv", .name = "v3_multi_row",
                                   .summary = "R rows per warp group share each x load; group size follows the row length",
                                   .kind = klab::ImplKind::cuda, .supports = supports_v3_multi_row,
                                   .run = run_v3_multi_row}));

}  // namespace
}  // namespace lesson05
