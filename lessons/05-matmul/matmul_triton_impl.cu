// Lesson 05 — the Triton matmul (matmul_triton.py), compiled ahead of time.
//
//   triton   op matmul, bf16, all three layouts: a tl.dot kernel with masks for any shape
//            in nine tile configurations, and a persistent one in three, the fastest
//            chosen per shape (run_triton)
//
// The build links the tile configurations of each layout and kernel into one launcher
// (tr_matmul_nn(stream, ..., algo_id), tr_matmul_persistent_nn); the first call for a shape
// times them all on the stream and caches the fastest (klab::autotune, the same mechanism
// as v8_autotuned).
// Each is also a candidate of its own (`klab test` verifies every one; `--candidate
// 64x128x64/4w/4st/g8` runs one, `--candidate all` times each as its own row: the sweep).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#include "matmul.cuh"

#if KLAB_HAVE_TRITON
#include "matmul_triton.h"
#endif

namespace lesson05 {

std::vector<std::string> triton_tiles_that_fit(const std::vector<std::string>& names, int b_tiles) {
  const std::size_t limit = klab::device_info().smem_per_block_optin;
  std::vector<std::string> out;
  for (const auto& n : names) {
    int bm = 0, bn = 0, bk = 0, warps = 0, stages = 0;
    KLAB_REQUIRE(std::sscanf(n.c_str(), "%dx%dx%d/%dw/%dst", &bm, &bn, &bk, &warps, &stages) == 5,
                 "triton: malformed configuration name " + n);
    if (limit == 0 || static_cast<std::size_t>(stages) * (bm + b_tiles * bn) * bk * 2 <= limit) out.push_back(n);
  }
  return out;
}

std::string triton_offsets_fit(std::int64_t M, std::int64_t N, std::int64_t K) {
  if (std::max({M, N, K}) >= (std::int64_t{1} << 23))
    return "a dimension of 2^23 or more: the kernel's offsets inside a tile are 32-bit";
  return "";
}

namespace {

// The configurations: CONFIGS in matmul_triton.py, in its order, as
// BMxBNxBK/warps/stages/gGROUP_M (algo_id i of tr_matmul_*), then PERSISTENT_CONFIGS with a
// /persistent suffix (algo_id i - kClassic of tr_matmul_persistent_*). Every layout links
// the same lists; run_triton checks their lengths against the launchers' counts.
const std::vector<std::string> kTritonNames = {"128x256x64/8w/3st/g8", "128x128x64/4w/4st/g8",
                                               "128x128x32/4w/4st/g8", "64x128x64/4w/4st/g8",
                                               "256x128x64/8w/3st/g8", "128x256x32/8w/4st/g8",
                                               "128x256x64/8w/3st/g1", "128x256x64/8w/4st/g8",
                                               "256x128x64/8w/4st/g8",
                                               "128x256x64/8w/3st/g8/persistent", "128x256x64/8w/4st/g8/persistent",
                                               "256x128x64/8w/3st/g8/persistent"};
constexpr int kClassic = 9;  // the first persistent name's index

// The persistent configurations where their 32-bit offsets hold (matmul_kernel's are 64-bit).
std::vector<std::string> triton_candidates(const klab::Problem& p) {
  const Shape s = shape_of(p);
  const bool persistent_fits = triton_offsets_fit(s.M, s.N, s.K).empty();
  std::vector<std::string> names;
  for (const auto& n : kTritonNames)
    if (n.find("/persistent") == std::string::npos || persistent_fits) names.push_back(n);
  return triton_tiles_that_fit(names);
}

#if KLAB_HAVE_TRITON
using Launcher = CUresult (*)(CUstream, CUdeviceptr, CUdeviceptr, CUdeviceptr, int32_t, int32_t, int32_t, int32_t,
                              int32_t, int32_t, int);

struct Layout {
  Launcher launch, launch_persistent;
  int (*num_algos)(void);
  int (*num_persistent)(void);
  void (*load)(void);
  void (*load_persistent)(void);
};

const Layout& layout_of(const std::string& v) {
  static const Layout nn{tr_matmul_nn, tr_matmul_persistent_nn, tr_matmul_nn_get_num_algos,
                         tr_matmul_persistent_nn_get_num_algos, load_tr_matmul_nn, load_tr_matmul_persistent_nn};
  static const Layout tn{tr_matmul_tn, tr_matmul_persistent_tn, tr_matmul_tn_get_num_algos,
                         tr_matmul_persistent_tn_get_num_algos, load_tr_matmul_tn, load_tr_matmul_persistent_tn};
  static const Layout nt{tr_matmul_nt, tr_matmul_persistent_nt, tr_matmul_nt_get_num_algos,
                         tr_matmul_persistent_nt_get_num_algos, load_tr_matmul_nt, load_tr_matmul_persistent_nt};
  if (v == "nn") return nn;
  if (v == "tn") return tn;
  KLAB_REQUIRE(v == "nt", "triton matmul: unknown variant " + v);
  return nt;
}
#endif

void run_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const GemmArgs g = gemm_args(l);
  if (empty_output(g)) return;
  const Layout& lay = layout_of(l.problem.variant);
  static bool loaded[3] = {false, false, false};
  bool& is_loaded = loaded[l.problem.variant == "nn" ? 0 : l.problem.variant == "tn" ? 1 : 2];
  if (!is_loaded) {
    klab::triton_prepare();
    lay.load();
    lay.load_persistent();
    is_loaded = true;
  }
  auto launch_algo = [&](int algo) {
    const bool persistent = algo >= kClassic;
    KLAB_CHECK_CU((persistent ? lay.launch_persistent : lay.launch)(
        reinterpret_cast<CUstream>(l.stream), reinterpret_cast<CUdeviceptr>(g.A), reinterpret_cast<CUdeviceptr>(g.B),
        reinterpret_cast<CUdeviceptr>(g.C), g.M, g.N, g.K, static_cast<int32_t>(g.lda), static_cast<int32_t>(g.ldb),
        static_cast<int32_t>(g.ldc), persistent ? algo - kClassic : algo));
  };
  const int linked = lay.num_algos() + lay.num_persistent();
  KLAB_REQUIRE(lay.num_algos() == kClassic && linked == static_cast<int>(kTritonNames.size()),
               "triton matmul: the launchers link " + std::to_string(lay.num_algos()) + " + " +
                   std::to_string(lay.num_persistent()) + " configurations, " + std::to_string(kTritonNames.size()) +
                   " named (kTritonNames follows CONFIGS and PERSISTENT_CONFIGS in matmul_triton.py)");
  // The candidates are a subset of kTritonNames; the launcher takes the algo_id in the full list.
  const std::vector<std::string> names = triton_candidates(l.problem);
  const auto launch = [&](int i) {
    launch_algo(static_cast<int>(std::find(kTritonNames.begin(), kTritonNames.end(), names.at(i)) - kTritonNames.begin()));
  };
  const int best = klab::autotune(l, "matmul|triton|" + l.problem.label(), names, 0, launch);
  launch(best);
#else
  (void)l;
  KLAB_REQUIRE(false, "triton matmul: not built");
#endif
}

std::string supports_triton(const klab::Problem& p) {
  if (p.dtype != klab::DType::bf16) return "bf16 only (the Triton track of this lesson)";
  return klab::triton_supported();
}

KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "triton",
                                   .summary = "Triton tl.dot, 9 tile configs + 3 persistent, fastest chosen per shape",
                                   .kind = klab::ImplKind::triton, .supports = supports_triton,
                                   .run = run_triton, .candidates = triton_candidates}));

}  // namespace
}  // namespace lesson05
