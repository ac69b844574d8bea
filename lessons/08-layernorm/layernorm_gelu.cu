// lessons/08-layernorm/layernorm_gelu.cu — layernorm followed by GELU, as two kernels and as
// one (op layernorm_gelu, layernorm_gelu_ops.cu).
//
// Impls registered here:
//   v1_layernorm_then_gelu  this lesson's best layernorm forward for the width
//                           (v2_block_registers, v1_warp_welford past 32,768 columns), then a
//                           GELU kernel over its output in place: y written, read and written
//                           again, 4 tensors' traffic for the op's 2.
//   v2_fused_gelu           v2_block_registers with GELU applied to each value before its
//                           store (layernorm_row.cuh's GELU flag): x read once, y written once.
//                           Rows up to 32,768 elements.
//
//   klab test 08 --op layernorm_gelu
//   klab bench 08 --op layernorm_gelu
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "klab/device/activation.cuh"
#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "layernorm.cuh"
#include "layernorm_row.cuh"

namespace lesson08 {
namespace {

using i64 = std::int64_t;

constexpr int kThreads = 256;   // the GELU kernel's blocks

// ============================================================================================
// v1_layernorm_then_gelu
// ============================================================================================

// y = gelu(y) in place: 16 bytes a thread and iteration (the tensor is 256-byte aligned, so
// element 0 starts a vector), element by element over the tail; grid stride.
template <class T>
__global__ void gelu_v1_layernorm_then_gelu(T* __restrict__ g_y, i64 n) {
  constexpr int E = klab::kVec16<T>;                 // f32 4, bf16 8
  using V = klab::Vec<T, E>;
  const i64 vecs = n / E, stride = static_cast<i64>(gridDim.x) * blockDim.x;
  const i64 tid = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (i64 v = tid; v < vecs; v += stride) {
    V r = reinterpret_cast<const V*>(g_y)[v];
#pragma unroll
    for (int e = 0; e < E; ++e) r.v[e] = klab::from_f32<T>(klab::gelu_tanh(klab::to_f32(r.v[e])));
    reinterpret_cast<V*>(g_y)[v] = r;
  }
  for (i64 i = vecs * E + tid; i < n; i += stride) g_y[i] = klab::from_f32<T>(klab::gelu_tanh(klab::to_f32(g_y[i])));
}

void run_v1_layernorm_then_gelu(const klab::Launch& l) {
  const LnArgs a = ln_args(l);
  layernorm_forward(a, l.problem.dtype, l.stream);
  const i64 n = a.rows * a.cols;
  if (n == 0) return;
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    gelu_v1_layernorm_then_gelu<T>
        <<<klab::grid_stride_blocks(n / klab::kVec16<T> + 1, kThreads), kThreads, 0, l.stream>>>(static_cast<T*>(a.y), n);
  });
  KLAB_CHECK_LAUNCH();
}

std::string supports_v1(const klab::Problem& p) {
  if (klab::ceil_div<i64>(p.shape[0], 8) > 0x7fffffff) return "too many rows for one grid";
  return "";
}

// ============================================================================================
// v2_fused_gelu
// ============================================================================================

template <class T, int VEC, int NV>
__global__ void __launch_bounds__(1024)
layernorm_gelu_v2_fused_gelu(const T* __restrict__ g_x, const T* __restrict__ g_gamma, const T* __restrict__ g_beta,
                             T* __restrict__ g_y, float* __restrict__ g_mean, float* __restrict__ g_rstd, int cols) {
  norm_row_in_registers<T, VEC, NV, false, true>(g_x, g_gamma, g_beta, g_y, g_mean, g_rstd, cols);
}

void run_v2_fused_gelu(const klab::Launch& l) {
  const LnArgs a = ln_args(l);
  if (a.rows == 0) return;
  klab::dispatch_f32_bf16(l.problem.dtype, [&]<class T>() {
    const auto go = [&]<int VEC>() {
      const RowPlan pl = plan_row_registers(a.cols, VEC);
      dispatch_row_nv<VEC>(pl.nv, [&]<int NV>() {
        layernorm_gelu_v2_fused_gelu<T, VEC, NV><<<static_cast<unsigned>(a.rows), pl.threads, 0, l.stream>>>(
            static_cast<const T*>(a.x), static_cast<const T*>(a.gamma), static_cast<const T*>(a.beta),
            static_cast<T*>(a.y), a.mean, a.rstd, static_cast<int>(a.cols));
      });
    };
    constexpr int VEC16 = klab::kVec16<T>;
    const bool vec_ok = a.cols % VEC16 == 0 && klab::aligned16(a.x) && klab::aligned16(a.y) &&
                        klab::aligned16(a.gamma) && klab::aligned16(a.beta);
    if (vec_ok) go.template operator()<VEC16>();
    else go.template operator()<1>();
  });
  KLAB_CHECK_LAUNCH();
}

std::string supports_v2(const klab::Problem& p) {
  if (p.shape[1] > kRowRegistersMaxCols) return "rows longer than 32,768 elements do not fit in one block's registers";
  if (p.shape[0] > 0x7fffffff) return "too many rows for one grid";
  return "";
}

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "layernorm_gelu", .name = "v1_layernorm_then_gelu",
                                   .summary = "the layernorm, then GELU over its output in place: y written, "
                                              "read and written again",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v1,
                                   .run = run_v1_layernorm_then_gelu,
                                   .kernels = {"layernorm_v2_block_registers", "layernorm_v1_warp_welford"}}));
KLAB_REGISTER(klab::register_impl({.op = "layernorm_gelu", .name = "v2_fused_gelu",
                                   .summary = "v2_block_registers with GELU before each store: x read once, "
                                              "y written once",
                                   .kind = klab::ImplKind::cuda,
                                   .supports = supports_v2,
                                   .run = run_v2_fused_gelu}));

}  // namespace
}  // namespace lesson08
