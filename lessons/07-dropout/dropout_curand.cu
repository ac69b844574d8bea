// Lesson 07 — the vendor baseline: dropout with cuRAND drawing the mask.
//
//   curand_mask   what a cuRAND user writes: the library's Philox4x32-10 generator
//                 (curandGenerate, seeded with the op's seed, its offset set to the op's
//                 offset) fills a workspace with one 32-bit word an element, and a second
//                 kernel keeps x where the word reaches the threshold floor(p · 2^32). The
//                 words travel through memory: 4 bytes an element written and read beside
//                 x and y, and a backward pass would read them again (or draw them again
//                 from the generator's state).
//
// cuRAND's Philox lays its counter out its own way, so its words are not this lesson's
// stream: the element-by-element compare with the reference cannot judge it. It is judged
// by the op's properties instead (Impl::judged_by_properties; dropout_ops.cu): each output
// 0 or x · scale, p = 0 and p = 1 exact, the keep rate inside a 6-sigma binomial bound.
//
//   klab test 07 --impl curand_mask
//   klab bench 07 --variant p0.1 --impl v2_philox_fused,curand_mask
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <curand.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>

#include "dropout.cuh"
#include "klab/device/vec.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace lesson07 {
namespace {

using std::int64_t;

// ======================================================================================
// curand_mask
// ======================================================================================
// y[i] = word[i] >= threshold ? x[i] · scale : 0, a quad (4 words, 16 bytes) per thread and
// iteration; the workspace is 16-byte aligned and holds whole quads.
template <class T>
__global__ void dropout_curand_apply(const T* __restrict__ g_x, const uint4* __restrict__ g_words,
                                     T* __restrict__ g_y, int64_t n, DropoutArgs a) {
  const int64_t quads = (n + 3) / 4, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < quads; q += stride) {
    const uint4 w4 = g_words[q];
    const unsigned w[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (4 * q + e < n)
        g_y[4 * q + e] = klab::from_f32<T>(w[e] >= a.threshold ? klab::to_f32(g_x[4 * q + e]) * a.scale : 0.0f);
  }
}

// ======================================================================================
// Launcher
// ======================================================================================
// One generator for the process, created on first use (creating one allocates its state):
// each launch re-seeds it and sets its offset, which cuRAND applies at the next draw.
curandGenerator_t generator() {
  static curandGenerator_t gen = [] {
    curandGenerator_t g = nullptr;
    KLAB_CHECK_CURAND(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    return g;
  }();
  return gen;
}

void run_curand_mask(const klab::Launch& l) {
  const int64_t n = numel(l.problem);
  if (n == 0) return;
  const DropoutArgs a = dropout_args(l);
  const std::size_t words = static_cast<std::size_t>((n + 3) / 4) * 4;
  KLAB_REQUIRE(l.workspace_bytes >= words * sizeof(unsigned), "curand_mask: workspace too small");
  KLAB_REQUIRE(reinterpret_cast<std::uintptr_t>(l.workspace) % 16 == 0, "curand_mask: workspace not 16-byte aligned");
  auto* g_words = static_cast<unsigned*>(l.workspace);
  static std::mutex m;   // one generator: its seed, offset and stream are set together
  {
    const std::lock_guard<std::mutex> lock(m);
    curandGenerator_t gen = generator();
    KLAB_CHECK_CURAND(curandSetStream(gen, l.stream));
    KLAB_CHECK_CURAND(curandSetPseudoRandomGeneratorSeed(gen, a.seed));
    // At most 2^30 words a call, each call's offset moved past the words drawn before it.
    // One call for 2^31 + 8 words returned success, yet the check found no element kept
    // (2 x 1073741827 fp32 on the H100, 2026-11-26), so the baseline draws in chunks.
    constexpr std::size_t kChunk = std::size_t{1} << 30;
    for (std::size_t first = 0; first < words; first += kChunk) {
      KLAB_CHECK_CURAND(curandSetGeneratorOffset(gen, a.offset + first));
      KLAB_CHECK_CURAND(curandGenerate(gen, g_words + first, std::min(kChunk, words - first)));
    }
  }
  const int64_t quads = (n + 3) / 4;
  if (l.problem.dtype == klab::DType::f32)
    dropout_curand_apply<float><<<klab::grid_stride_blocks(quads, kThreads), kThreads, 0, l.stream>>>(
        l.in[0].as<const float>(), reinterpret_cast<const uint4*>(g_words), l.out[0].as<float>(), n, a);
  else
    dropout_curand_apply<__nv_bfloat16><<<klab::grid_stride_blocks(quads, kThreads), kThreads, 0, l.stream>>>(
        l.in[0].as<const __nv_bfloat16>(), reinterpret_cast<const uint4*>(g_words), l.out[0].as<__nv_bfloat16>(), n, a);
  KLAB_CHECK_LAUNCH();
}

// One 32-bit word an element, in whole quads.
std::size_t workspace_curand(const klab::Problem& p) { return static_cast<std::size_t>((numel(p) + 3) / 4) * 16; }

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "dropout", .name = "curand_mask",
                                   .summary = "cuRAND's Philox generator writes a word an element, a second "
                                              "kernel applies it (another stream: judged by the op's properties)",
                                   .kind = klab::ImplKind::vendor,
                                   .workspace = workspace_curand,
                                   .run = run_curand_mask,
                                   .judged_by_properties = true}));

}  // namespace lesson07
