// lessons/05-matmul/matmul.cuh — what the lesson-05 files share (namespace lesson05).
//
// C = A · B with C (M, N) row-major and A, B row-major with either operand stored
// transposed. The variant names which operand is stored transposed:
//
//   variant  A stored        B stored        A(m,k) at            B(k,n) at
//   "nn"     (M, K)          (K, N)          A[m*K + k]           B[k*N + n]
//   "tn"     (K, M) = Aᵀ     (K, N)          A[k*M + m]           B[k*N + n]
//   "nt"     (M, K)          (N, K) = Bᵀ     A[m*K + k]           B[n*K + k]
//
// Kernels do not branch on the variant at run time: it becomes two template booleans,
// A_KMAJ (A's contiguous dimension is K) and B_KMAJ (B's contiguous dimension is K).
// "nt" — both operands K-contiguous — is the layout of x · Wᵀ in a linear layer.
//
// One argument struct serves plain, batched and split-K launches: blockIdx.z is split into
// (batch, split); each z-slice computes C_z = A_z[:, ks:ke] · B_z[ks:ke, :] into its own C
// slice (the output for a plain launch, an fp32 partial for split-K).
#pragma once

#include <cmath>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "klab/autotune.hpp"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace lesson05 {

struct GemmArgs {
  const void* A = nullptr;
  const void* B = nullptr;
  void* C = nullptr;
  int M = 0, N = 0, K = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;     // leading dimensions, in elements
  std::int64_t sA = 0, sB = 0, sC = 0;        // batch strides, in elements
  int splits = 1;                             // split-K slices per batch entry
  int k_chunk = 0;                            // K per split (the last one may be shorter)
};

// Where z-slice blockIdx.z reads and writes, and how much K it covers.
template <bool A_KMAJ, bool B_KMAJ, class TA, class TC>
struct ZSlice {
  const TA* A;
  const TA* B;
  TC* C;
  int k_len;
};

template <bool A_KMAJ, bool B_KMAJ, class TA, class TC>
__device__ __forceinline__ ZSlice<A_KMAJ, B_KMAJ, TA, TC> z_slice(const GemmArgs& g) {
  const int z = blockIdx.z;
  const int batch = z / g.splits;
  const int split = z - batch * g.splits;
  const std::int64_t k0 = static_cast<std::int64_t>(split) * g.k_chunk;
  ZSlice<A_KMAJ, B_KMAJ, TA, TC> s;
  // Moving the K origin: one element along a K-contiguous row, one row otherwise.
  s.A = static_cast<const TA*>(g.A) + batch * g.sA + (A_KMAJ ? k0 : k0 * g.lda);
  s.B = static_cast<const TA*>(g.B) + batch * g.sB + (B_KMAJ ? k0 : k0 * g.ldb);
  s.C = static_cast<TC*>(g.C) + static_cast<std::int64_t>(z) * g.sC;
  const std::int64_t rest = g.K - k0;
  s.k_len = static_cast<int>(rest < g.k_chunk ? rest : g.k_chunk);
  return s;
}

// Element accessors for the teaching versions (v1..v3 and the exercise): the layout is a
// compile-time choice, so these cost one multiply-add, no branch.
template <bool A_KMAJ, class T>
__device__ __forceinline__ float a_at(const T* A, std::int64_t lda, int m, int k) {
  return klab::to_f32(A_KMAJ ? A[static_cast<std::int64_t>(m) * lda + k]
                             : A[static_cast<std::int64_t>(k) * lda + m]);
}
template <bool B_KMAJ, class T>
__device__ __forceinline__ float b_at(const T* B, std::int64_t ldb, int k, int n) {
  return klab::to_f32(B_KMAJ ? B[static_cast<std::int64_t>(n) * ldb + k]
                             : B[static_cast<std::int64_t>(k) * ldb + n]);
}

// Grouped tile order. Row-major order walks all N tiles of one M row before the next, so
// the B columns are re-read from DRAM for each M row; grouped order walks GROUP M rows at a
// time, column by column, so a B tile is reused GROUP times while it is in L2. Maps the
// linear tile index t (0 .. grid_m·grid_n) to (tile_m, tile_n).
template <int GROUP>
__device__ __forceinline__ void grouped_tile(int t, int grid_m, int grid_n, int& tile_m, int& tile_n) {
  const int per_group = GROUP * grid_n;
  const int first_m = (t / per_group) * GROUP;
  const int rows = min(grid_m - first_m, GROUP);
  tile_m = first_m + (t % per_group) % rows;
  tile_n = (t % per_group) / rows;
}

// ---- host side -----------------------------------------------------------------------

// Variant string -> the two layout booleans as template arguments:
//   dispatch_layout(p.variant, [&]<bool AK, bool BK>() { kernel<AK, BK><<<...>>>(...); });
template <class F>
void dispatch_layout(const std::string& variant, F&& f) {
  if (variant == "nn") f.template operator()<true, false>();
  else if (variant == "tn") f.template operator()<false, false>();
  else if (variant == "nt") f.template operator()<true, true>();
  else KLAB_REQUIRE(false, "matmul: unknown variant '" + variant + "' (nn, tn, nt)");
}

inline bool a_kmajor(const std::string& v) { return v != "tn"; }
inline bool b_kmajor(const std::string& v) { return v == "nt"; }

// Problem shape: matmul {M, N, K}; matmul_batched {batch, M, N, K}.
struct Shape {
  int batch = 1, M = 0, N = 0, K = 0;
};
inline Shape shape_of(const klab::Problem& p) {
  Shape s;
  const auto& d = p.shape;
  const std::size_t o = d.size() == 4 ? 1 : 0;
  if (o) s.batch = static_cast<int>(d[0]);
  s.M = static_cast<int>(d[o + 0]);
  s.N = static_cast<int>(d[o + 1]);
  s.K = static_cast<int>(d[o + 2]);
  return s;
}

// GemmArgs for one product C (M, N) = A (M, K) · B (K, N) in a layout (nn, tn, nt; a batch
// entry's strides for matmul_batched), C's rows ldc elements apart (N: dense), no split.
inline GemmArgs gemm_args(const void* A, const void* B, void* C, int M, int N, int K, const std::string& layout,
                          std::int64_t ldc) {
  GemmArgs g;
  g.A = A;
  g.B = B;
  g.C = C;
  g.M = M; g.N = N; g.K = K;
  g.lda = a_kmajor(layout) ? K : M;
  g.ldb = b_kmajor(layout) ? K : N;
  g.ldc = ldc;
  g.sA = static_cast<std::int64_t>(M) * K;
  g.sB = static_cast<std::int64_t>(K) * N;
  g.sC = static_cast<std::int64_t>(M) * ldc;
  g.splits = 1;
  g.k_chunk = K;
  return g;
}

// GemmArgs for a launch of op matmul or matmul_batched (no split).
inline GemmArgs gemm_args(const klab::Launch& L) {
  const Shape s = shape_of(L.problem);
  return gemm_args(L.in.at(0).data, L.in.at(1).data, L.out.at(0).data, s.M, s.N, s.K, L.problem.variant, s.N);
}

// True when every row start of both operands (and the batch and split offsets) is aligned
// to `bytes`, so the tile loaders may use vector loads / 16-byte cp.async.
inline bool operands_aligned(const GemmArgs& g, std::size_t elem_bytes, std::size_t bytes) {
  const std::int64_t e = static_cast<std::int64_t>(bytes / elem_bytes);  // elements per vector
  auto ptr_ok = [&](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; };
  return ptr_ok(g.A) && ptr_ok(g.B) && g.lda % e == 0 && g.ldb % e == 0 && g.sA % e == 0 &&
         g.sB % e == 0 && (g.splits == 1 || g.k_chunk % e == 0);
}

// Output elements must be poisoned-proof even when K == 0 (C = 0) or M·N == 0 (nothing).
inline bool empty_output(const GemmArgs& g) { return g.M == 0 || g.N == 0; }

// Grid for a tiled kernel: x over N tiles, y over M tiles, z over batch x splits.
inline dim3 tile_grid(const GemmArgs& g, int bm, int bn, int batch) {
  const std::int64_t gy = klab::ceil_div<std::int64_t>(g.M, bm), gz = static_cast<std::int64_t>(batch) * g.splits;
  KLAB_REQUIRE(gy <= 65535 && gz <= 65535, "matmul: grid y (M tiles) or z (batch x splits) over 65535");
  return dim3(static_cast<unsigned>(klab::ceil_div<std::int64_t>(g.N, bn)), static_cast<unsigned>(gy),
              static_cast<unsigned>(gz));
}

// Two output elements at once (the tensor-core epilogues) need an even pitch and an aligned base.
inline bool pair_ok(const GemmArgs& g, std::size_t elem) {
  return reinterpret_cast<std::uintptr_t>(g.C) % (2 * elem) == 0 && g.ldc % 2 == 0 && g.sC % 2 == 0;
}

// supports() of the two ladders: fp32 on the CUDA cores, bf16 on the tensor cores (sm_80+).
inline std::string f32_only(const klab::Problem& p) {
  return p.dtype == klab::DType::f32 ? "" : "f32 only (the SIMT ladder); bf16 runs on v9_wmma and later";
}
inline std::string bf16_tc(const klab::Problem& p) {
  if (p.dtype != klab::DType::bf16) return "bf16 only (tensor cores); f32 runs on the SIMT ladder";
  return klab::require_cc(80);
}

// ---- tensor-core epilogue (matmul_wmma.cu, matmul_mma.cu) ------------------------------
// The tensor-core kernels (WMMA, ldmatrix, mma.sync) need sm_80; below it their bodies
// compile to nothing (they report themselves unsupported and never run). The cp.async
// wrappers (klab/device/cp_async.cuh) have their own guard, KLAB_NO_CP_ASYNC.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define KLAB_TC_UNSUPPORTED 1
#endif

// Stores the two adjacent outputs (row, n) and (row, n + 1) of a fragment, as one 4- or
// 8-byte store when the pair is aligned and inside N, element by element otherwise.
template <class TC>
__device__ __forceinline__ void store_pair(TC* g_c, std::int64_t row_off, int n, int N, float v0, float v1,
                                           bool c_pair) {
  if (c_pair && n + 1 < N) {
    if constexpr (sizeof(TC) == 2)
      *reinterpret_cast<__nv_bfloat162*>(g_c + row_off + n) = __floats2bfloat162_rn(v0, v1);
    else
      *reinterpret_cast<float2*>(g_c + row_off + n) = make_float2(v0, v1);
  } else {
    if (n < N) g_c[row_off + n] = klab::from_f32<TC>(v0);
    if (n + 1 < N) g_c[row_off + n + 1] = klab::from_f32<TC>(v1);
  }
}

// ---- shared launchers (defined in matmul_regtile.cu / matmul_mma.cu / matmul_hopper.cu) 
// Used by split-K (matmul_splitk.cu): `out_f32` writes fp32 to g.C (the split-K partials)
// instead of the problem's dtype.
void launch_warptile_f32(const GemmArgs& g, const std::string& variant, cudaStream_t s);
void launch_mma_bf16(const GemmArgs& g, const std::string& variant, bool out_f32, cudaStream_t s);
// v17_splitk_wgmma's slices (matmul_hopper.cu): 128x128 tiles, K slices multiples of 64.
void launch_wgmma_splitk_bf16(const GemmArgs& g, const std::string& variant, bool out_f32, cudaStream_t s);
std::string supports_wgmma(const klab::Problem& p);
std::string wgmma_splitk_kernel();  // v17's instances of matmul_wgmma (Impl::kernels)

// ---- the versions v20_autotuned chooses among (matmul_autotuned.cu) --------------------
std::vector<std::string> v13_config_names();                 // matmul_mma.cu
void run_v13_config(const klab::Launch& l, int c);
void run_v16_persistent(const klab::Launch& l);              // matmul_hopper.cu
void run_v18_cluster_multicast(const klab::Launch& l);
void run_v19_tma_store(const klab::Launch& l);
void run_v19_tma_store_4st(const klab::Launch& l);        // v19 with 4 stages, C in two rounds
void run_v21_pingpong(const klab::Launch& l);
void run_v21_pingpong_cluster4(const klab::Launch& l);  // v21 in clusters of four
void run_v17_splitk_wgmma(const klab::Launch& l);            // matmul_splitk.cu
std::size_t workspace_v17_splitk_wgmma(const klab::Problem& p);

// ---- the fp64 reference and its tolerances (matmul_ops.cu; lesson 06 uses them too) ------
// C (M, N) = A · B in fp64 from host tensors in any layout (a_kmaj / b_kmaj as the variant
// says), A and B read from element offsets a_off and b_off, on all host cores.
void reference_gemm(const klab::HostTensor& A, const klab::HostTensor& B, std::int64_t a_off, std::int64_t b_off,
                    int M, int N, int K, bool a_kmaj, bool b_kmaj, double* C);
// The tolerance of a K-deep product for each dtype (matmul_ops.cu's header derives it), and
// the same for a result whose typical size is s in place of sigma_k(K) (lesson 06's ops:
// a bias added, a product of two products, a column sum).
klab::Tolerance gemm_tolerance(klab::DType t, std::int64_t K);
klab::Tolerance gemm_tolerance_at(klab::DType t, double s);
// 2048 random flat positions of an (M, N) output, its corners, and 64 each of its last row
// and column: where a sampled check looks when the full reference is too slow.
std::vector<std::int64_t> sample_positions(std::int64_t M, std::int64_t N, std::uint64_t seed);

// ---- the Triton tile configurations (matmul_triton_impl.cu; lesson 06's Triton too) -----
// Of configurations named BMxBNxBK/<warps>w/<stages>st/..., the ones whose stages fit the
// device's shared memory (all of them without a GPU): what an autotuned Triton tl.dot
// kernel times on this device. A stage holds A's (BM, BK) tile and b_tiles (BK, BN) tiles
// of B: stages x (BM + b_tiles BN) x BK bf16 (lesson 06's SwiGLU reads two tiles of w).
std::vector<std::string> triton_tiles_that_fit(const std::vector<std::string>& names, int b_tiles = 1);
// "" when the persistent Triton kernels' 32-bit offsets inside a tile hold for every
// dimension of the product (all below 2^23: at most 255 rows of a 2^23-long row plus 255
// stay below 2^31), else why not.
std::string triton_offsets_fit(std::int64_t M, std::int64_t N, std::int64_t K);

// The typical size of an output of a K-term dot product of inputs uniform in [-1, 1).
inline double sigma_k(std::int64_t K) { return std::sqrt(static_cast<double>(K)) / 3.0; }

// The TF32 baseline's tolerance (an impl-level override; matmul_ops.cu's header comment
// gives the reasoning): absolute term 2^-7 * sigma_K, relative 2^-9, rel-L2 2^-8.
inline klab::Tolerance tf32_gemm_tolerance(std::int64_t K) {
  const double s = sigma_k(K);
  return {std::ldexp(s, -7), std::ldexp(1.0, -9), std::ldexp(1.0, -8), s};
}

}  // namespace lesson05
