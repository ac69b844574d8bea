// Lesson 06 — SwiGLU in Triton (swiglu_triton.py), compiled ahead of time.
//
//   triton   op linear_swiglu, bf16: the persistent nt tl.dot loop of linear_triton.py with
//            two accumulators, x · W_gᵀ and x · W_uᵀ over the interleaved w, and
//            silu(g) · u on the fp32 tiles before the one store; three linked tile
//            configurations, the fastest chosen per shape (run_triton)
//
// The build links the configurations into one launcher (tr_swiglu(stream, ..., algo_id));
// the first call for a shape times them all on the stream and caches the fastest
// (klab::autotune). Each is also a candidate of its own (`klab test` verifies every one;
// `--candidate all` times each as its own row).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "../05-matmul/matmul.cuh"
#include "klab/autotune.hpp"
#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"

#if KLAB_HAVE_TRITON
#include "swiglu_triton.h"
#endif

namespace lesson06 {
namespace {

// The configurations, by algo_id: CONFIGS in swiglu_triton.py, in its order, as
// BMxBNxBK/warps/stages/gGROUP_M; run_triton checks the count against the launcher's.
const std::vector<std::string> kSwigluTritonNames = {"128x128x64/8w/3st/g8", "128x128x64/8w/4st/g8",
                                                     "64x128x64/4w/4st/g8"};

// Those whose stages fit the device's shared memory: a stage is x's (BM, BK) tile and the
// two (BK, BN) tiles of w. Without a GPU, all.
std::vector<std::string> triton_candidates(const klab::Problem&) {
  return lesson05::triton_tiles_that_fit(kSwigluTritonNames, /*b_tiles=*/2);
}

void run_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  // y (M, N) = silu(x · W_gᵀ) · (x · W_uᵀ), w (2N, K) interleaved: both operands K-contiguous.
  const auto& d = l.problem.shape;
  KLAB_REQUIRE(d.size() == 3, "triton linear_swiglu: the shape is {M, N, K}");
  const auto M = static_cast<int32_t>(d[0]), N = static_cast<int32_t>(d[1]), K = static_cast<int32_t>(d[2]);
  if (M == 0 || N == 0) return;   // no output element; K == 0 stores silu(0) · 0 = 0
  static bool loaded = false;
  if (!loaded) {
    klab::triton_prepare();
    load_tr_swiglu();
    loaded = true;
  }
  KLAB_REQUIRE(tr_swiglu_get_num_algos() == static_cast<int>(kSwigluTritonNames.size()),
               "triton linear_swiglu: the launcher links " + std::to_string(tr_swiglu_get_num_algos()) +
                   " configurations, " + std::to_string(kSwigluTritonNames.size()) +
                   " named (kSwigluTritonNames follows CONFIGS in swiglu_triton.py)");
  // The candidates are a subset of kSwigluTritonNames; the launcher takes the algo_id in the full list.
  const std::vector<std::string> names = triton_candidates(l.problem);
  const auto launch = [&](int i) {
    const int algo = static_cast<int>(std::find(kSwigluTritonNames.begin(), kSwigluTritonNames.end(), names.at(i)) -
                                      kSwigluTritonNames.begin());
    KLAB_CHECK_CU(tr_swiglu(reinterpret_cast<CUstream>(l.stream), reinterpret_cast<CUdeviceptr>(l.in.at(0).data),
                            reinterpret_cast<CUdeviceptr>(l.in.at(1).data),
                            reinterpret_cast<CUdeviceptr>(l.out.at(0).data), M, N, K, /*ldx=*/K, /*ldw=*/K,
                            /*ldy=*/N, algo));
  };
  launch(klab::autotune(l, "linear_swiglu|triton|" + l.problem.label(), names, 0, launch));
#else
  (void)l;
  KLAB_REQUIRE(false, "triton linear_swiglu: not built");
#endif
}

std::string supports_triton(const klab::Problem& p) {
  if (p.dtype != klab::DType::bf16) return "bf16 only (the Triton track of this lesson)";
  // The kernel's offsets inside a tile are 32-bit, as lesson 05's persistent kernel's.
  if (std::string why = lesson05::triton_offsets_fit(p.shape[0], p.shape[1], p.shape[2]); !why.empty()) return why;
  return klab::triton_supported();
}

KLAB_REGISTER(klab::register_impl({.op = "linear_swiglu", .name = "triton",
                                   .summary = "Triton: two tl.dot accumulators over the interleaved w, silu(g) * u "
                                              "on the fp32 tiles, persistent, 3 linked configs",
                                   .kind = klab::ImplKind::triton, .supports = supports_triton,
                                   .run = run_triton, .candidates = triton_candidates}));

}  // namespace
}  // namespace lesson06
