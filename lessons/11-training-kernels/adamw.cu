// Lesson 11 — AdamW kernels: one launch a tensor, then one launch for all of them.
//
//   v1_per_tensor     a launch per tensor and step, one element a thread in a grid-stride
//                     loop, the whole update in registers (klab::adamw_update): p, g, m, v
//                     read once and p, m, v written once. Each launch pays its start, and
//                     a small tensor's launch fills a few SMs and leaves the rest idle.
//   v2_multi_tensor   one launch a step for all the tensors (multi_tensor.cuh's table of
//                     pointers and chunk prefix), 16 bytes of each of p, g, m, v a thread
//                     and pass where the tensor is aligned.
// Both clip with the same first pass (multi_tensor.cuh: a sum of squares a block, reduced
// by every block of the update in one fixed order, so the coefficient is the same bits in
// every block and every run).
//
//   klab test 11 --op adamw --impl v1_per_tensor,v2_multi_tensor
//   klab bench 11 --op adamw --variant plain
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "klab/device/adamw.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "multi_tensor.cuh"
#include "training.cuh"

namespace lesson11 {
namespace {

using std::int64_t;

// ======================================================================================
// v1_per_tensor
// ======================================================================================
__global__ void adamw_v1_per_tensor(float* __restrict__ g_p, const float* __restrict__ g_g, float* __restrict__ g_m,
                                    float* __restrict__ g_v, __nv_bfloat16* __restrict__ g_p16, int64_t n,
                                    klab::AdamWStep s, const float* __restrict__ g_part, int parts, float max_norm) {
  const float coef = block_clip_coefficient(g_part, parts, max_norm);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float p = g_p[i], m = g_m[i], v = g_v[i];
    klab::adamw_update(p, g_g[i] * coef, m, v, s);
    g_p[i] = p, g_m[i] = m, g_v[i] = v;
    if (g_p16) g_p16[i] = __float2bfloat16_rn(p);
  }
}

// ======================================================================================
// v2_multi_tensor
// ======================================================================================
// One element's update, loaded and stored by the caller.
__device__ __forceinline__ void update4(float4& p, float4 g, float4& m, float4& v, float coef, const klab::AdamWStep& s) {
  klab::adamw_update(p.x, g.x * coef, m.x, v.x, s);
  klab::adamw_update(p.y, g.y * coef, m.y, v.y, s);
  klab::adamw_update(p.z, g.z * coef, m.z, v.z, s);
  klab::adamw_update(p.w, g.w * coef, m.w, v.w, s);
}

__global__ void __launch_bounds__(kThreads) adamw_v2_multi_tensor(AdamWTable t, klab::AdamWStep s,
                                                                  const float* __restrict__ g_part, int parts,
                                                                  float max_norm) {
  const float coef = block_clip_coefficient(g_part, parts, max_norm);
  for (int c = blockIdx.x; c < table_chunks(t); c += gridDim.x) {
    const int k = chunk_tensor(t, c);
    const int64_t begin = static_cast<int64_t>(c - t.first_chunk[k]) * kChunk;   // a multiple of 4
    const int64_t end = min(begin + kChunk, t.n[k]);
    float* __restrict__ p = t.p[k];
    float* __restrict__ m = t.m[k];
    float* __restrict__ v = t.v[k];
    const float* __restrict__ g = t.g[k];
    __nv_bfloat16* __restrict__ p16 = t.p16[k];
    for (int64_t i = begin + 4 * threadIdx.x; i < end; i += 4 * kThreads) {
      if (t.vec4[k] && i + 4 <= end) {
        float4 rp = *reinterpret_cast<const float4*>(p + i), rm = *reinterpret_cast<const float4*>(m + i);
        float4 rv = *reinterpret_cast<const float4*>(v + i);
        update4(rp, *reinterpret_cast<const float4*>(g + i), rm, rv, coef, s);
        *reinterpret_cast<float4*>(p + i) = rp, *reinterpret_cast<float4*>(m + i) = rm;
        *reinterpret_cast<float4*>(v + i) = rv;
        if (p16) {
          *reinterpret_cast<__nv_bfloat162*>(p16 + i) = __floats2bfloat162_rn(rp.x, rp.y);
          *reinterpret_cast<__nv_bfloat162*>(p16 + i + 2) = __floats2bfloat162_rn(rp.z, rp.w);
        }
      } else {   // the tensor's last, partial vector, or a misaligned tensor
        for (int64_t e = i; e < end && e < i + 4; ++e) {
          float re = p[e], rme = m[e], rve = v[e];
          klab::adamw_update(re, g[e] * coef, rme, rve, s);
          p[e] = re, m[e] = rme, v[e] = rve;
          if (p16) p16[e] = __float2bfloat16_rn(re);
        }
      }
    }
  }
}

// ======================================================================================
// Launchers
// ======================================================================================
// The clipping pass of step `step` into the workspace; parts = 0 and null without clipping.
struct Clip {
  const float* part = nullptr;
  int parts = 0;
};
Clip clip_pass(const klab::Launch& l, const std::vector<AdamWTable>& tables) {
  if (!adamw_clips(l.problem)) return {};
  KLAB_REQUIRE(l.workspace_bytes >= sumsq_workspace(l.problem), "adamw: workspace too small for the clipping partials");
  auto* part = static_cast<float*>(l.workspace);
  return {part, launch_grad_sumsq(tables, part, l.stream)};
}

void run_v1_per_tensor(const klab::Launch& l) {
  const AdamWHyper h = adamw_hyper(l.scalars);
  const auto tensors = static_cast<std::size_t>(l.problem.shape[1]);
  for (int64_t step = 0; step < l.problem.shape[2]; ++step) {
    const std::vector<AdamWTable> tables = adamw_tables(l, step);
    const Clip clip = clip_pass(l, tables);
    const klab::AdamWStep s = adamw_step_at(h, step);
    for (std::size_t k = 0; k < tensors; ++k) {
      const int64_t n = l.in[kParam * tensors + k].numel();
      if (n == 0) continue;
      __nv_bfloat16* p16 = adamw_copies(l.problem) ? l.out[k].as<__nv_bfloat16>() : nullptr;
      adamw_v1_per_tensor<<<klab::grid_stride_blocks(n, kThreads), kThreads, 0, l.stream>>>(
          l.in[kParam * tensors + k].as<float>(), l.in[kGrad * tensors + k].as<const float>() + step * n,
          l.in[kExpAvg * tensors + k].as<float>(), l.in[kExpAvgSq * tensors + k].as<float>(), p16, n, s, clip.part,
          clip.parts, static_cast<float>(h.max_norm));
      KLAB_CHECK_LAUNCH();
    }
  }
}

void run_v2_multi_tensor(const klab::Launch& l) {
  const AdamWHyper h = adamw_hyper(l.scalars);
  for (int64_t step = 0; step < l.problem.shape[2]; ++step) {
    const std::vector<AdamWTable> tables = adamw_tables(l, step);
    const Clip clip = clip_pass(l, tables);
    const klab::AdamWStep s = adamw_step_at(h, step);
    for (const AdamWTable& t : tables) {
      if (table_chunks(t) == 0) continue;
      adamw_v2_multi_tensor<<<update_blocks(t), kThreads, 0, l.stream>>>(t, s, clip.part, clip.parts,
                                                                           static_cast<float>(h.max_norm));
      KLAB_CHECK_LAUNCH();
    }
  }
}

// ======================================================================================
// Registration
// ======================================================================================
KLAB_REGISTER(klab::register_impl({.op = "adamw", .name = "v1_per_tensor",
                                   .summary = "a launch per tensor, one element a thread, the update fused in registers",
                                   .kind = klab::ImplKind::cuda, .workspace = sumsq_workspace,
                                   .run = run_v1_per_tensor, .kernels = {"adamw_grad_sumsq"}}));
KLAB_REGISTER(klab::register_impl({.op = "adamw", .name = "v2_multi_tensor",
                                   .summary = "one launch for every tensor: a table of pointers, chunks, 16-byte accesses",
                                   .kind = klab::ImplKind::cuda, .workspace = sumsq_workspace,
                                   .run = run_v2_multi_tensor, .kernels = {"adamw_grad_sumsq"}}));

}  // namespace
}  // namespace lesson11
