// lessons/08-layernorm/layernorm_linear.cu — a layernorm and the linear layer after it, as
// two passes and with the normalization folded into the matmul (op layernorm_linear,
// layernorm_linear_ops.cu). The matmul is lesson 06's linear layer on lesson 05's Hopper
// kernel (linear_wgmma.cuh: TMA, wgmma, persistent clusters, the TMA-store epilogue).
//
// Impls registered here:
//   v1_layernorm_then_linear  this lesson's best layernorm forward for the width writes the
//                             normalized x̂·gamma + beta to a bf16 workspace (M x K), and the
//                             matmul reads it back with the bias in its epilogue: the
//                             activations cross memory three times (x read, v written, v read).
//   v2_folded_epilogue        the normalization moved to where it costs nothing. With
//                             W' = gamma ∘ W (each row of W times gamma), u = Σ_k W'[n, k] and
//                             c = Σ_k beta[k]·W[n, k] + b[n]:
//                               y[r, n] = rstd_r · (x[r, :]·W'[n, :] − mean_r · u_n) + c_n,
//                             so the matmul runs on the raw x, and the epilogue applies each
//                             row's mean and rstd and each column's u and c to the
//                             accumulators (EpiLnFold). Three launches: the row statistics
//                             (layernorm's v2 with no y: x read once, 8 bytes a row written),
//                             the folded weight (W read, W' written: a cost per weight, not
//                             per token), and the matmul on x and W'. Rows up to 32,768.
//
// Both need the shapes lesson 05's TMA versions take (K a multiple of 8).
//
//   klab test 08 --op layernorm_linear
//   klab bench 08 --op layernorm_linear
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "../06-kernel-fusion/linear_wgmma.cuh"
#include "klab/device/cp_async.cuh"
#include "klab/device/vec.cuh"
#include "klab/device/warp.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "layernorm.cuh"
#include "layernorm_row.cuh"

namespace lesson08 {
namespace {

using bf16 = __nv_bfloat16;

// The launch's tensors: in x, gamma, beta, w, b; out y, mean, rstd.
struct LnLinArgs {
  const bf16 *x, *gamma, *beta, *w, *b;
  bf16* y;
  float *mean, *rstd;
  int M, N, K;
};

LnLinArgs lnlin_args(const klab::Launch& l) {
  return {l.in[0].as<const bf16>(), l.in[1].as<const bf16>(), l.in[2].as<const bf16>(), l.in[3].as<const bf16>(),
          l.in[4].as<const bf16>(), l.out[0].as<bf16>(),      l.out[1].as<float>(),      l.out[2].as<float>(),
          static_cast<int>(l.problem.shape[0]), static_cast<int>(l.problem.shape[1]),
          static_cast<int>(l.problem.shape[2])};
}

// y (M, N) = epi(a (M, K) · w (N, K)ᵀ) on lesson 06's launcher (K > 0).
template <class Epi>
void launch_product(const bf16* a, const bf16* w, bf16* y, int M, int N, int K, cudaStream_t s, Epi epi) {
  const lesson05::GemmArgs g = lesson05::gemm_args(a, w, y, M, N, K, "nt", N);
  if (lesson05::empty_output(g)) return;
  lesson06::launch_nt_wgmma(g, s, epi);
}

// ============================================================================================
// v1_layernorm_then_linear
// ============================================================================================

void run_v1_layernorm_then_linear(const klab::Launch& l) {
  const LnLinArgs a = lnlin_args(l);
  bf16* v = static_cast<bf16*>(l.workspace);         // (M, K): x̂·gamma + beta
  layernorm_forward({a.x, a.gamma, a.beta, v, a.mean, a.rstd, a.M, a.K}, klab::DType::bf16, l.stream);
  launch_product(v, a.w, a.y, a.M, a.N, a.K, l.stream, lesson06::EpiBiasAct<lesson06::Act::bias>{a.b, a.N});
}

std::size_t workspace_v1(const klab::Problem& p) {
  return static_cast<std::size_t>(p.shape[0] * p.shape[2]) * sizeof(bf16);
}

// ============================================================================================
// v2_folded_epilogue
// ============================================================================================

// Each row's mean and rstd: layernorm's v2_block_registers without y (layernorm_row.cuh).
template <int VEC, int NV>
__global__ void __launch_bounds__(1024)
layernorm_linear_v2_folded_epilogue_stats(const bf16* __restrict__ g_x, float* __restrict__ g_mean,
                                          float* __restrict__ g_rstd, int cols) {
  norm_row_in_registers<bf16, VEC, NV, false, false, false>(g_x, nullptr, nullptr, nullptr, g_mean, g_rstd, cols);
}

// One warp a row n of W: W'[n, :] = bf16(gamma ∘ W[n, :]), and uc[n] = (u_n, c_n) with
// u_n = Σ_k W'[n, k] (the rounded W' the matmul multiplies, so that mean_r · u_n cancels the
// mean's share of x·W' to the fp32 sums' rounding) and c_n = Σ_k beta[k]·W[n, k] + b[n].
// K is a multiple of 8: 16-byte vectors, a warp's lanes on consecutive ones.
__global__ void __launch_bounds__(256)
layernorm_linear_v2_folded_epilogue_fold(const bf16* __restrict__ g_w, const bf16* __restrict__ g_gamma,
                                         const bf16* __restrict__ g_beta, const bf16* __restrict__ g_b,
                                         bf16* __restrict__ g_wf, float2* __restrict__ g_uc, int N, int K) {
  using V = klab::Vec<bf16, 8>;
  const std::int64_t n = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const V* w = reinterpret_cast<const V*>(g_w + n * K);
  V* wf = reinterpret_cast<V*>(g_wf + n * K);
  float u = 0.f, c = 0.f;
  for (int k = lane; k < K / 8; k += 32) {
    const V r_w = w[k], r_g = reinterpret_cast<const V*>(g_gamma)[k], r_be = reinterpret_cast<const V*>(g_beta)[k];
    V r_f;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float we = __bfloat162float(r_w.v[e]);
      r_f.v[e] = __float2bfloat16_rn(__bfloat162float(r_g.v[e]) * we);
      u += __bfloat162float(r_f.v[e]);
      c = fmaf(__bfloat162float(r_be.v[e]), we, c);
    }
    wf[k] = r_f;
  }
  u = klab::warp_sum(u);
  c = klab::warp_sum(c);
  if (lane == 0) g_uc[n] = make_float2(u, c + __bfloat162float(g_b[n]));
}

}  // namespace

// The epilogue (lesson 05's matmul runs it on each MMA thread's accumulators:
// matmul_wgmma.cuh): acc = x[r, :]·W'[n, :] becomes rstd_r · (acc − mean_r · u_n) + c_n.
// As the tile starts, load_tile copies the tile's 256 column pairs (u, c) and its 64 rows'
// mean and rstd into shared memory (cp.async, zeros past N and M), so they land while the
// main loop runs and apply() reads them with shared loads only. (Outside the anonymous
// namespace, as lesson 06's epilogues are: the sm_80 pass, which compiles the matmul to
// nothing, would otherwise warn that its members are never used.)
struct EpiLnFold {
  const float2* g_uc;
  const float *g_mean, *g_rstd;
  int M, N;
  static constexpr bool kTileRows = true;                 // load_tile takes the first row
  static constexpr int kTileCols = 256;                   // the widest tile (lesson 05's BN)
  static constexpr int kSmemBytes = kTileCols * 8 + 64 * 8;  // (u, c) a column; mean, rstd a row
  __device__ __forceinline__ void load_tile(unsigned char* s_epi, int m0, int n0, int t) const {
    float2* s_uc = reinterpret_cast<float2*>(s_epi);
    float* s_mean = reinterpret_cast<float*>(s_epi + kTileCols * 8);
    float* s_rstd = s_mean + 64;
    // Columns: thread t's 16 bytes are the pairs of columns n0 + 2t and n0 + 2t + 1.
    const int n = n0 + 2 * t;
    if (n + 2 <= N) {
      klab::cp_async_16_full(klab::smem_u32(s_uc + 2 * t), g_uc + n);
    } else {
      for (int e = 0; e < 2; ++e) s_uc[2 * t + e] = n + e < N ? g_uc[n + e] : make_float2(0.f, 0.f);
    }
    // Rows: threads 0..15 copy 4 means each, 16..31 4 rstds.
    if (t < 32) {
      const int q = t % 16, m = m0 + 4 * q;
      const float* g = t < 16 ? g_mean : g_rstd;
      float* s = (t < 16 ? s_mean : s_rstd) + 4 * q;
      if (m + 4 <= M) {
        klab::cp_async_16_full(klab::smem_u32(s), g + m);
      } else {
        for (int e = 0; e < 4; ++e) s[e] = m + e < M ? g[m + e] : 0.f;
      }
    }
  }
  template <int ACC>
  __device__ __forceinline__ void apply(float (&r_acc)[ACC], int row, int col, const unsigned char* s_epi) const {
    static_assert(2 * ACC <= kTileCols, "the tile is wider than the staged column vectors");
    const auto* s_uc = reinterpret_cast<const float4*>(s_epi);  // two columns' (u, c) a float4
    const float* s_mean = reinterpret_cast<const float*>(s_epi + kTileCols * 8);
    const float* s_rstd = s_mean + 64;
    const int r = row % 64, c0 = (col % (2 * ACC)) / 2;    // the rows r, r + 8; column pairs c0 + 4j
    float rstd[2], nmr[2];                                  // rstd and −mean·rstd of the two rows
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rstd[h] = s_rstd[r + 8 * h];
      nmr[h] = -s_mean[r + 8 * h] * rstd[h];
    }
#pragma unroll
    for (int j = 0; j < ACC / 4; ++j) {
      const float4 uc = s_uc[c0 + 4 * j];                  // (u, c) of columns col + 8j, col + 8j + 1
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        r_acc[4 * j + 2 * h] = fmaf(rstd[h], r_acc[4 * j + 2 * h], fmaf(nmr[h], uc.x, uc.y));
        r_acc[4 * j + 2 * h + 1] = fmaf(rstd[h], r_acc[4 * j + 2 * h + 1], fmaf(nmr[h], uc.z, uc.w));
      }
    }
  }
};

namespace {

// The workspace: W' (N x K bf16), then (u, c) for each column (N float2), 256-aligned.
std::size_t uc_offset(const klab::Problem& p) {
  return klab::ceil_div<std::size_t>(static_cast<std::size_t>(p.shape[1] * p.shape[2]) * sizeof(bf16), 256) * 256;
}

std::size_t workspace_v2(const klab::Problem& p) {
  return uc_offset(p) + static_cast<std::size_t>(p.shape[1]) * sizeof(float2);
}

void run_v2_folded_epilogue(const klab::Launch& l) {
  const LnLinArgs a = lnlin_args(l);
  if (a.M > 0) {  // the statistics, y or not
    const auto go = [&]<int VEC>() {
      const RowPlan pl = plan_row_registers(a.K, VEC);
      dispatch_row_nv<VEC>(pl.nv, [&]<int NV>() {
        layernorm_linear_v2_folded_epilogue_stats<VEC, NV>
            <<<static_cast<unsigned>(a.M), pl.threads, 0, l.stream>>>(a.x, a.mean, a.rstd, a.K);
      });
    };
    if (a.K % 8 == 0 && klab::aligned16(a.x)) go.template operator()<8>();
    else go.template operator()<1>();
    KLAB_CHECK_LAUNCH();
  }
  if (a.M == 0 || a.N == 0) return;
  bf16* wf = static_cast<bf16*>(l.workspace);
  auto* uc = reinterpret_cast<float2*>(static_cast<unsigned char*>(l.workspace) + uc_offset(l.problem));
  layernorm_linear_v2_folded_epilogue_fold<<<klab::ceil_div(a.N, 8), 256, 0, l.stream>>>(a.w, a.gamma, a.beta, a.b, wf,
                                                                                          uc, a.N, a.K);
  KLAB_CHECK_LAUNCH();
  launch_product(a.x, wf, a.y, a.M, a.N, a.K, l.stream, EpiLnFold{uc, a.mean, a.rstd, a.M, a.N});
}

std::string supports_v2(const klab::Problem& p) {
  if (p.shape[2] > kRowRegistersMaxCols) return "rows longer than 32,768 elements do not fit in one block's registers";
  return lesson06::supports_linear_wgmma(p);
}

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "layernorm_linear", .name = "v1_layernorm_then_linear",
                                   .summary = "the layernorm writes x̂·gamma + beta; the matmul reads it back, the bias "
                                              "in its epilogue",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = lesson06::supports_linear_wgmma,
                                   .workspace = workspace_v1,
                                   .run = run_v1_layernorm_then_linear,
                                   .kernels = {"layernorm_v2_block_registers", "layernorm_v1_warp_welford",
                                               "matmul_wgmma@EpiBiasAct"}}));
KLAB_REGISTER(klab::register_impl({.op = "layernorm_linear", .name = "v2_folded_epilogue",
                                   .summary = "gamma folded into W, mean and rstd applied to the accumulators: the "
                                              "matmul runs on the raw x",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v2,
                                   .workspace = workspace_v2,
                                   .run = run_v2_folded_epilogue,
                                   .kernels = {"matmul_wgmma@EpiLnFold"}}));

}  // namespace
}  // namespace lesson08
