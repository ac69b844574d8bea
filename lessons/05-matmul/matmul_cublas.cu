// Lesson 05 — the vendor baselines, measured in the same run as the kernels.
//
//   cublas       f32: cublasGemmEx with CUBLAS_COMPUTE_32F_PEDANTIC — true fp32 FMAs on the
//                CUDA cores, the bar of the SIMT ladder. bf16: cublasGemmEx with A, B, C
//                in CUDA_R_16BF and CUBLAS_COMPUTE_32F (fp32 accumulation, bf16 output),
//                reduced-precision reductions disallowed (below) — the bar of the
//                tensor-core versions. The speedup column of every matmul impl is against
//                this one.
//   cublas_tf32  f32 through the tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32: inputs rounded
//                to 10-bit mantissas): what fp32 "costs" when TF32 is allowed.
//   cublas       (op gemv) cublasSgemv (f32); bf16 through cublasGemmEx with N = 1,
//                reductions in fp32.
//
// Launchers: run_matmul_cublas and run_matmul_cublas_tf32 (ops matmul and matmul_batched),
// run_gemv_cublas.
//
// Reduced-precision reductions: with a bf16 output, cuBLAS's heuristic may split K and add
// the partial products in the OUTPUT type, each partial rounded to bf16 first. At
// 1000x1001x999 bf16 it did, and a few outputs landed past the bf16 tolerance our kernels
// are held to (the README, "Baselines", has the numbers). Our kernels (v12_splitk included) keep every
// partial in fp32 and round once; a baseline that rounds more often is faster by a
// shortcut the lesson's kernels do not take. So the handle (klab::cublas_handle(), klab/cublas.hpp) carries
// CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION: any split-K reduction is done in the
// compute type (fp32). It changes nothing for f32 outputs (compute and output type agree).
//
// Row-major through a column-major library: a row-major (M, N) matrix is the column-major
// (N, M) matrix Cᵀ, and Cᵀ = Bᵀ·Aᵀ, so cuBLAS is called with the operands swapped and
// m = N, n = M. A row-major operand stored (R, C) is column-major (C, R) with ld = C.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "klab/cublas.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "matmul.cuh"

namespace lesson05 {
namespace {

struct ColMajorCall {
  cublasOperation_t op_b, op_a;  // on the swapped operands: first B, then A
  int m, n, k;
  int ldb, lda, ldc;
};

ColMajorCall col_major(const klab::Problem& p) {
  const Shape s = shape_of(p);
  ColMajorCall c;
  c.m = s.N, c.n = s.M, c.k = s.K;
  // B "n" (K, N) row-major = col-major (N, K) = Bᵀ: no transpose. B "t" (N, K) = col-major (K, N) = B.
  c.op_b = b_kmajor(p.variant) ? CUBLAS_OP_T : CUBLAS_OP_N;
  c.ldb = b_kmajor(p.variant) ? s.K : s.N;
  // A "n" (M, K) row-major = col-major (K, M) = Aᵀ: no transpose. A "t" (K, M) = col-major (M, K) = A.
  c.op_a = a_kmajor(p.variant) ? CUBLAS_OP_N : CUBLAS_OP_T;
  c.lda = a_kmajor(p.variant) ? s.K : s.M;
  c.ldc = s.N;
  return c;
}

enum class Mode { pedantic_or_bf16, tf32 };

// Returns false when there is nothing for cuBLAS to do (empty output); K == 0 is zeroed
// here so that no assumption about cuBLAS's k == 0 path is needed.
bool trivial(const klab::Launch& l) {
  const Shape s = shape_of(l.problem);
  if (s.M == 0 || s.N == 0 || s.batch == 0) return true;
  if (s.K == 0) {
    KLAB_CHECK_CUDA(cudaMemsetAsync(l.out[0].data, 0, l.out[0].bytes(), l.stream));
    return true;
  }
  return false;
}

template <Mode MODE>
void gemm_cublas(const klab::Launch& l) {
  if (trivial(l)) return;
  const Shape s = shape_of(l.problem);
  const ColMajorCall c = col_major(l.problem);
  const bool bf = l.problem.dtype == klab::DType::bf16;
  const cudaDataType_t t = bf ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t ct = bf ? CUBLAS_COMPUTE_32F
                                    : (MODE == Mode::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC);
  const float alpha = 1.f, beta = 0.f;
  cublasHandle_t h = klab::cublas_handle();
  KLAB_CHECK_CUBLAS(cublasSetStream(h, l.stream));
  if (l.problem.shape.size() == 3) {
    KLAB_CHECK_CUBLAS(cublasGemmEx(h, c.op_b, c.op_a, c.m, c.n, c.k, &alpha, l.in[1].data, t, c.ldb,
                                   l.in[0].data, t, c.lda, &beta, l.out[0].data, t, c.ldc, ct, CUBLAS_GEMM_DEFAULT));
  } else {
    const long long sa = static_cast<long long>(s.M) * s.K, sb = static_cast<long long>(s.K) * s.N,
                    sc = static_cast<long long>(s.M) * s.N;
    KLAB_CHECK_CUBLAS(cublasGemmStridedBatchedEx(h, c.op_b, c.op_a, c.m, c.n, c.k, &alpha, l.in[1].data, t,
                                                 c.ldb, sb, l.in[0].data, t, c.lda, sa, &beta, l.out[0].data, t,
                                                 c.ldc, sc, s.batch, ct, CUBLAS_GEMM_DEFAULT));
  }
}

void run_matmul_cublas(const klab::Launch& l) { gemm_cublas<Mode::pedantic_or_bf16>(l); }
void run_matmul_cublas_tf32(const klab::Launch& l) { gemm_cublas<Mode::tf32>(l); }

// y(M) = A(M, K) · x: A row-major is column-major (K, M) with ld K, so y = (that)ᵀ · x.
void run_gemv_cublas(const klab::Launch& l) {
  const int M = static_cast<int>(l.problem.shape[0]), K = static_cast<int>(l.problem.shape[1]);
  if (M == 0) return;
  if (K == 0) {
    KLAB_CHECK_CUDA(cudaMemsetAsync(l.out[0].data, 0, l.out[0].bytes(), l.stream));
    return;
  }
  const float alpha = 1.f, beta = 0.f;
  cublasHandle_t h = klab::cublas_handle();
  KLAB_CHECK_CUBLAS(cublasSetStream(h, l.stream));
  if (l.problem.dtype == klab::DType::f32) {
    KLAB_CHECK_CUBLAS(cublasSgemv(h, CUBLAS_OP_T, K, M, &alpha, l.in[0].as<float>(), K,
                                  l.in[1].as<float>(), 1, &beta, l.out[0].as<float>(), 1));
  } else {
    // yᵀ (1, M) = xᵀ (1, K) · Aᵀ (K, M): column-major m = 1, n = M, k = K.
    KLAB_CHECK_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, M, K, &alpha, l.in[1].data, CUDA_R_16BF, 1,
                                   l.in[0].data, CUDA_R_16BF, K, &beta, l.out[0].data, CUDA_R_16BF, 1,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

std::string any_float(const klab::Problem& p) {
  return p.dtype == klab::DType::f32 || p.dtype == klab::DType::bf16 ? "" : "f32 and bf16 only";
}

std::string supports_cublas_tf32(const klab::Problem& p) {
  return p.dtype == klab::DType::f32 ? "" : "f32 only (TF32 is a mode of the f32 problem)";
}

klab::Tolerance tolerance_cublas_tf32(const klab::Problem& p, int) { return tf32_gemm_tolerance(shape_of(p).K); }

constexpr const char* kCublasSummary =
    "cuBLAS GemmEx: f32 pedantic (CUDA cores), bf16 with fp32 accumulation and fp32 split-K reductions";

KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "cublas", .summary = kCublasSummary,
                                   .kind = klab::ImplKind::vendor, .supports = any_float,
                                   .run = run_matmul_cublas}));
KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "cublas_tf32",
                                   .summary = "cuBLAS GemmEx f32 on the tensor cores (TF32 inputs)",
                                   .kind = klab::ImplKind::vendor, .supports = supports_cublas_tf32,
                                   .run = run_matmul_cublas_tf32, .tolerance = tolerance_cublas_tf32}));
KLAB_REGISTER(klab::register_impl({.op = "matmul_batched", .name = "cublas", .summary = kCublasSummary,
                                   .kind = klab::ImplKind::vendor, .supports = any_float,
                                   .run = run_matmul_cublas}));
KLAB_REGISTER(klab::register_impl({.op = "matmul_batched", .name = "cublas_tf32",
                                   .summary = "cuBLAS GemmEx f32 on the tensor cores (TF32 inputs)",
                                   .kind = klab::ImplKind::vendor, .supports = supports_cublas_tf32,
                                   .run = run_matmul_cublas_tf32, .tolerance = tolerance_cublas_tf32}));
KLAB_REGISTER(klab::register_impl({.op = "gemv", .name = "cublas",
                                   .summary = "cublasSgemv (f32), cublasGemmEx N = 1 (bf16, fp32 split-K reductions)",
                                   .kind = klab::ImplKind::vendor, .supports = any_float,
                                   .run = run_gemv_cublas}));

}  // namespace
}  // namespace lesson05
