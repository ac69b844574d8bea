// Lesson 05 — matmul on the CUDA cores (fp32 SIMT), the first three steps: global memory
// and shared-memory tiles. The register-tiled versions v4..v8 are in matmul_regtile.cu.
//
//   v1_naive        one thread per C element; threadIdx.x walks M, so neighbouring threads
//                   read A and write C a whole row apart (uncoalesced)
//   v2_coalesced    the same loop with threadIdx.x walking N: a warp reads one A element
//                   (broadcast) and 32 consecutive B and C elements
//   v3_smem_tiles   32x32 tiles of A and B staged in shared memory: each global element is
//                   read once per tile instead of once per output (the exercise)
//
// Every version handles any M, N, K (tiles are zero-filled past the edges, stores are
// guarded) and the three layouts nn / tn / nt (template booleans A_KMAJ, B_KMAJ; see
// matmul.cuh).
//
//   klab test 05 --op matmul --dtype f32 --impl v1_naive,v2_coalesced,v3_smem_tiles
//   klab bench 05 --op matmul --dtype f32 --variant nn --shape 4096x4096x4096
//
// The CPU reference: matmul_ops.cu (reference_gemm).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "matmul.cuh"

namespace lesson05 {
namespace {

using std::int64_t;

// ======================================================================================
// v1_naive — C(m, n) = Σ_k A(m, k) B(k, n), one thread each, threadIdx.x -> m.
// ======================================================================================
template <bool AK, bool BK>
__global__ void matmul_v1_naive(GemmArgs g) {
  const auto z = z_slice<AK, BK, float, float>(g);
  const int m = blockIdx.x * 32 + threadIdx.x;  // consecutive threads: consecutive rows
  const int n = blockIdx.y * 32 + threadIdx.y;
  if (m >= g.M || n >= g.N) return;
  float acc = 0.f;
  for (int k = 0; k < z.k_len; ++k) acc += a_at<AK>(z.A, g.lda, m, k) * b_at<BK>(z.B, g.ldb, k, n);
  z.C[static_cast<int64_t>(m) * g.ldc + n] = acc;
}

// ======================================================================================
// v2_coalesced — the same, threadIdx.x -> n: for "nn" a warp reads A(m, k) once (one
// address, broadcast), B(k, n0..n0+31) as one 128-byte line, and writes C as one line.
// ======================================================================================
template <bool AK, bool BK>
__global__ void matmul_v2_coalesced(GemmArgs g) {
  const auto z = z_slice<AK, BK, float, float>(g);
  const int n = blockIdx.x * 32 + threadIdx.x;  // consecutive threads: consecutive columns
  const int m = blockIdx.y * 32 + threadIdx.y;
  if (m >= g.M || n >= g.N) return;
  float acc = 0.f;
  for (int k = 0; k < z.k_len; ++k) acc += a_at<AK>(z.A, g.lda, m, k) * b_at<BK>(z.B, g.ldb, k, n);
  z.C[static_cast<int64_t>(m) * g.ldc + n] = acc;
}

// ======================================================================================
// v3_smem_tiles — a 32x32 block of threads computes a 32x32 tile of C. For each K tile the
// block copies A(m0.., k0..) and B(k0.., n0..) into shared memory (each thread one element
// of each), waits, and every thread takes its dot product from shared memory: each global
// element is now read by 1 thread instead of 32.
// ======================================================================================
template <bool AK, bool BK>
__global__ void matmul_v3_smem_tiles(GemmArgs g) {
  constexpr int T = 32;
  static_assert(T * T <= 1024, "one thread per tile element: a T x T block");
  __shared__ float s_A[T][T + 1];  // (m, k); +1: the transposed stores below hit 32 banks
  __shared__ float s_B[T][T + 1];  // (k, n)
  const auto z = z_slice<AK, BK, float, float>(g);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m0 = blockIdx.y * T, n0 = blockIdx.x * T;
  float acc = 0.f;
  for (int k0 = 0; k0 < z.k_len; k0 += T) {
    // Each load walks the operand's contiguous dimension with threadIdx.x (coalesced).
    if (AK) {
      const int m = m0 + ty, k = k0 + tx;
      s_A[ty][tx] = (m < g.M && k < z.k_len) ? a_at<AK>(z.A, g.lda, m, k) : 0.f;
    } else {
      const int m = m0 + tx, k = k0 + ty;
      s_A[tx][ty] = (m < g.M && k < z.k_len) ? a_at<AK>(z.A, g.lda, m, k) : 0.f;
    }
    if (BK) {
      const int n = n0 + ty, k = k0 + tx;
      s_B[tx][ty] = (n < g.N && k < z.k_len) ? b_at<BK>(z.B, g.ldb, k, n) : 0.f;
    } else {
      const int k = k0 + ty, n = n0 + tx;
      s_B[ty][tx] = (n < g.N && k < z.k_len) ? b_at<BK>(z.B, g.ldb, k, n) : 0.f;
    }
    __syncthreads();  // the tile is complete before anyone reads it
#pragma unroll
    for (int kk = 0; kk < T; ++kk) acc += s_A[ty][kk] * s_B[kk][tx];  // broadcast · row
    __syncthreads();  // everyone is done reading before the next tile overwrites it
  }
  const int m = m0 + ty, n = n0 + tx;
  if (m < g.M && n < g.N) z.C[static_cast<int64_t>(m) * g.ldc + n] = acc;
}

// ======================================================================================
// Launchers (K == 0 with M·N > 0 still launches: the kernels then write C = 0)
// ======================================================================================
void run_v1_naive(const klab::Launch& l) {
  GemmArgs g = gemm_args(l);
  if (empty_output(g)) return;
  const int64_t gy = klab::ceil_div<int64_t>(g.N, 32);
  KLAB_REQUIRE(gy <= 65535, "v1_naive: N over 65535·32");
  const dim3 grid(static_cast<unsigned>(klab::ceil_div<int64_t>(g.M, 32)), static_cast<unsigned>(gy),
                  shape_of(l.problem).batch);
  dispatch_layout(l.problem.variant, [&]<bool AK, bool BK>() {
    matmul_v1_naive<AK, BK><<<grid, dim3(32, 32), 0, l.stream>>>(g);
  });
  KLAB_CHECK_LAUNCH();
}

void run_v2_coalesced(const klab::Launch& l) {
  GemmArgs g = gemm_args(l);
  if (empty_output(g)) return;
  const dim3 grid = tile_grid(g, 32, 32, shape_of(l.problem).batch);
  dispatch_layout(l.problem.variant, [&]<bool AK, bool BK>() {
    matmul_v2_coalesced<AK, BK><<<grid, dim3(32, 32), 0, l.stream>>>(g);
  });
  KLAB_CHECK_LAUNCH();
}

void run_v3_smem_tiles(const klab::Launch& l) {
  GemmArgs g = gemm_args(l);
  if (empty_output(g)) return;
  const dim3 grid = tile_grid(g, 32, 32, shape_of(l.problem).batch);
  dispatch_layout(l.problem.variant, [&]<bool AK, bool BK>() {
    matmul_v3_smem_tiles<AK, BK><<<grid, dim3(32, 32), 0, l.stream>>>(g);
  });
  KLAB_CHECK_LAUNCH();
}

// v1 is ~100x slower than cuBLAS: a 8192^3 launch takes seconds, x the bench's repeats.
std::string supports_v1_naive(const klab::Problem& p) {
  if (auto why = f32_only(p); !why.empty()) return why;
  const auto s = shape_of(p);
  if (static_cast<double>(s.M) * s.N * s.K > 68719476736.0) return "teaching version: capped at 4096^3 of work";
  return "";
}

// ======================================================================================
// Registration
// ======================================================================================
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v1_naive",
                                   .summary = "one thread per output, threadIdx.x along M (uncoalesced)",
                                   .kind = klab::ImplKind::cuda, .supports = supports_v1_naive,
                                   .run = run_v1_naive}));
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v2_coalesced",
                                   .summary = "one thread per output, threadIdx.x along N (coalesced)",
                                   .kind = klab::ImplKind::cuda, .supports = f32_only,
                                   .run = run_v2_coalesced}));
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v3_smem_tiles",
                                   .summary = "32x32 tiles staged in shared memory",
                                   .kind = klab::ImplKind::cuda, .supports = f32_only,
                                   .run = run_v3_smem_tiles}));

}  // namespace
}  // namespace lesson05
