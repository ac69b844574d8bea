// Lesson 06 — the vendor baseline of the linear layer: cuBLASLt with its own epilogue.
//
//   cublaslt_epilogue  cublasLtMatmul, bf16 A, B, C and bias, CUBLAS_COMPUTE_32F (fp32
//                      accumulation), the epilogue CUBLASLT_EPILOGUE_BIAS, RELU_BIAS or
//                      GELU_BIAS (GELU's tanh form) for the variants bias, relu, gelu. cuBLASLt
//                      has no SiLU epilogue: silu is reported unsupported. The algorithm is
//                      the heuristic's first choice for the shape (cached), with a 32 MiB
//                      workspace; reduction schemes that add split-K partials in the output
//                      type (bf16) are excluded, as lesson 05's cuBLAS baseline excludes them
//                      (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION): every partial
//                      stays fp32, as in this lesson's kernels.
//
// Row-major through a column-major library: y (M, N) row-major is yᵀ (N, M) column-major,
// and yᵀ = W · xᵀ. W stored (N, K) row-major is the column-major (K, N) matrix, taken
// transposed (TRANSA = T); x stored (M, K) row-major is the column-major (K, M) matrix xᵀ
// (TRANSB = N). The bias runs along the rows of yᵀ, i.e. along N, as cuBLASLt's bias does.
//
// The backward of the GELU and bias (op linear_dgelu_bgrad) is the same library call with
// the DGELU_BGRAD epilogue, below.
//
//   klab bench 06 --op linear_bias_act --impl cublaslt_epilogue,v2_fused_epilogue
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "fusion.cuh"
#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"

namespace lesson06 {
namespace {

constexpr std::size_t kWorkspace = std::size_t{32} << 20;

cublasLtHandle_t handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t x = nullptr;
    KLAB_CHECK_CUBLAS(cublasLtCreate(&x));
    return x;
  }();
  return h;
}

cublasLtEpilogue_t epilogue_of(Act a) {
  switch (a) {
    case Act::relu: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Act::gelu: return CUBLASLT_EPILOGUE_GELU_BIAS;
    default: return CUBLASLT_EPILOGUE_BIAS;
  }
}

// The descriptors of one problem and the algorithm the heuristic chose for it. The bias
// pointer is set per launch (the harness's buffers move between checks).
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
};

// The heuristic's first algorithm for p's descriptors (p.found, p.algo): a 32 MiB workspace,
// every reduction scheme but the one that adds split-K partials in the output type.
void choose_algo(Plan& p) {
  cublasLtMatmulPreference_t pref = nullptr;
  KLAB_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  KLAB_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspace,
                                                         sizeof(kWorkspace)));
  const std::uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE);
  KLAB_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                         sizeof(schemes)));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle(), p.op, p.a, p.b, p.d, p.d, pref, 1, &result, &count);
  KLAB_CHECK_CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
  p.found = st == CUBLAS_STATUS_SUCCESS && count > 0;
  if (p.found) p.algo = result.algo;
}

const Plan& plan_for(std::int64_t M, std::int64_t N, std::int64_t K, Act act) {
  static std::mutex mu;
  static std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, int>, Plan> plans;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = plans.try_emplace({M, N, K, static_cast<int>(act)});
  Plan& p = it->second;
  if (!fresh) return p;
  KLAB_CHECK_CUBLAS(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  KLAB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
  KLAB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)));
  const cublasLtEpilogue_t epi = epilogue_of(act);
  KLAB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  const cudaDataType_t bias_type = CUDA_R_16BF;
  KLAB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  KLAB_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, K, N, K));  // W: (K, N), ld K
  KLAB_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, K, M, K));  // xᵀ: (K, M), ld K
  KLAB_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_16BF, N, M, N));  // yᵀ: (N, M), ld N
  choose_algo(p);
  return p;
}

std::string supports_cublaslt(const klab::Problem& p) {
  const Act a = act_of(p.variant);
  if (a == Act::silu) return "cuBLASLt has no SiLU epilogue (bias, relu, gelu only)";
  if (p.shape[2] == 0) return "cuBLASLt's epilogue needs K >= 1";
  if (!klab::device_info().present) return "";
  if (p.shape[0] == 0 || p.shape[1] == 0) return "";
  if (!plan_for(p.shape[0], p.shape[1], p.shape[2], a).found)
    return "cuBLASLt's heuristic has no algorithm for this shape with this epilogue";
  return "";
}

void run_cublaslt_epilogue(const klab::Launch& l) {
  const std::int64_t M = l.problem.shape[0], N = l.problem.shape[1], K = l.problem.shape[2];
  if (M == 0 || N == 0) return;
  const Plan& p = plan_for(M, N, K, act_of(l.problem.variant));
  KLAB_REQUIRE(p.found, "cublaslt_epilogue: no algorithm for this shape");
  const void* bias = l.in[2].data;
  KLAB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const float one = 1.f, zero = 0.f;
  KLAB_CHECK_CUBLAS(cublasLtMatmul(handle(), p.op, &one, l.in[1].data, p.a, l.in[0].data, p.b, &zero, l.out[0].data,
                                   p.d, l.out[0].data, p.d, &p.algo, l.workspace, l.workspace_bytes, l.stream));
}

// ---- linear_dgelu_bgrad: CUBLASLT_EPILOGUE_DGELU_BGRAD ---------------------------------
// dzᵀ (N, M) = wᵀ · dyᵀ column-major: w stored (K, N) row-major is the column-major (N, K)
// matrix wᵀ (TRANSA = N), dy stored (M, K) row-major the column-major (K, M) dyᵀ (TRANSB =
// N). The epilogue multiplies in gelu' of the aux matrix (z, laid out as dzᵀ, bf16: what
// GELU_AUX saves in a forward) and writes the bias gradient, the sums along dzᵀ's rows: db.
// db is asked for in fp32 (BIAS_DATA_TYPE), as this lesson's kernels write it; where the
// heuristic has no algorithm for that, in bf16 (dz's type) into the workspace, widened to
// fp32 by a small kernel after it, and a line on stderr says so once.
struct DgeluPlan : Plan {
  bool bias_f32 = true;
};

const DgeluPlan& dgelu_plan_for(std::int64_t M, std::int64_t N, std::int64_t K) {
  static std::mutex mu;
  static std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, DgeluPlan> plans;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = plans.try_emplace({M, N, K});
  DgeluPlan& p = it->second;
  if (!fresh) return p;
  KLAB_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, N, K, N));  // wᵀ: (N, K), ld N
  KLAB_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, K, M, K));  // dyᵀ: (K, M), ld K
  KLAB_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_16BF, N, M, N));  // dzᵀ: (N, M), ld N
  for (const cudaDataType_t bias_type : {CUDA_R_32F, CUDA_R_16BF}) {
    if (p.op != nullptr) KLAB_CHECK_CUBLAS(cublasLtMatmulDescDestroy(p.op));
    KLAB_CHECK_CUBLAS(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t n = CUBLAS_OP_N;
    KLAB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &n, sizeof(n)));
    KLAB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)));
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DGELU_BGRAD;
    KLAB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    KLAB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    const cudaDataType_t aux_type = CUDA_R_16BF;
    KLAB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type, sizeof(aux_type)));
    const std::int64_t aux_ld = N;
    KLAB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    choose_algo(p);
    p.bias_f32 = bias_type == CUDA_R_32F;
    if (p.found) break;
  }
  if (p.found && !p.bias_f32) {
    static bool said = false;
    if (!said) std::fprintf(stderr, "klab: cublaslt_epilogue (linear_dgelu_bgrad): no DGELU_BGRAD algorithm with an fp32 "
                                    "bias gradient; db is computed in bf16 and widened to fp32\n");
    said = true;
  }
  return p;
}

__global__ void widen_bf16(const __nv_bfloat16* __restrict__ in, float* __restrict__ out, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __bfloat162float(in[i]);
}

std::string supports_dgelu(const klab::Problem& p) {
  if (p.shape[2] == 0) return "cuBLASLt's epilogue needs K >= 1";
  if (!klab::device_info().present) return "";
  if (p.shape[0] == 0 || p.shape[1] == 0) return "";
  if (!dgelu_plan_for(p.shape[0], p.shape[1], p.shape[2]).found)
    return "cuBLASLt's heuristic has no DGELU_BGRAD algorithm for this shape (bias gradient in fp32 or bf16)";
  return "";
}

// The library's workspace, then db in bf16 where the plan needs it (256-byte aligned).
std::size_t dgelu_workspace(const klab::Problem& p) { return kWorkspace + static_cast<std::size_t>(p.shape[1]) * 2; }

void run_cublaslt_dgelu(const klab::Launch& l) {
  const std::int64_t M = l.problem.shape[0], N = l.problem.shape[1], K = l.problem.shape[2];
  if (N == 0) return;
  if (M == 0) {  // no rows: db = 0, without the library (it takes no empty matrix)
    KLAB_CHECK_CUDA(cudaMemsetAsync(l.out[1].data, 0, static_cast<std::size_t>(N) * sizeof(float), l.stream));
    return;
  }
  const DgeluPlan& p = dgelu_plan_for(M, N, K);
  KLAB_REQUIRE(p.found, "cublaslt_epilogue: no algorithm for this shape");
  void* bias = p.bias_f32 ? l.out[1].data : static_cast<char*>(l.workspace) + kWorkspace;
  const void* aux = l.in[2].data;
  KLAB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  KLAB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  const float one = 1.f, zero = 0.f;
  KLAB_CHECK_CUBLAS(cublasLtMatmul(handle(), p.op, &one, l.in[1].data, p.a, l.in[0].data, p.b, &zero, l.out[0].data,
                                   p.d, l.out[0].data, p.d, &p.algo, l.workspace, kWorkspace, l.stream));
  if (!p.bias_f32) {
    widen_bf16<<<static_cast<unsigned>((N + 255) / 256), 256, 0, l.stream>>>(static_cast<const __nv_bfloat16*>(bias),
                                                                           l.out[1].as<float>(), N);
    KLAB_CHECK_LAUNCH();
  }
}

KLAB_REGISTER(klab::register_impl({.op = "linear_bias_act", .name = "cublaslt_epilogue",
                                   .summary = "cublasLtMatmul with its BIAS / RELU_BIAS / GELU_BIAS epilogue",
                                   .kind = klab::ImplKind::vendor, .supports = supports_cublaslt,
                                   .workspace = [](const klab::Problem&) { return kWorkspace; },
                                   .run = run_cublaslt_epilogue}));
KLAB_REGISTER(klab::register_impl({.op = "linear_dgelu_bgrad", .name = "cublaslt_epilogue",
                                   .summary = "cublasLtMatmul with its DGELU_BGRAD epilogue (aux z, db in fp32 where it has it)",
                                   .kind = klab::ImplKind::vendor, .supports = supports_dgelu,
                                   .workspace = dgelu_workspace,
                                   .run = run_cublaslt_dgelu}));

}  // namespace
}  // namespace lesson06
