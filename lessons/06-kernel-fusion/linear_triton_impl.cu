// Lesson 06 — the fused linear layer in Triton (linear_triton.py), compiled ahead of time.
//
//   triton   op linear_bias_act, bf16, every activation: lesson 05's persistent nt tl.dot loop with the
//            bias and the activation applied to the fp32 accumulator tile before its one
//            store, four linked tile configurations, the fastest chosen per shape (run_triton)
//
// The build links the tile configurations of each activation into one launcher
// (tr_linear_gelu(stream, ..., algo_id) etc.); the first call for a shape times them all on
// the stream and caches the fastest (klab::autotune, as lesson 05's `triton` does). Each is
// also a candidate of its own (`klab test` verifies every one; `--candidate
// 64x128x64/4w/4st/g8` runs one, `--candidate all` times each as its own row: the sweep).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../05-matmul/matmul.cuh"
#include "fusion.cuh"
#include "klab/autotune.hpp"
#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"

#if KLAB_HAVE_TRITON
#include "linear_triton.h"
#endif

namespace lesson06 {
namespace {

// The configurations, by algo_id: CONFIGS in linear_triton.py, in its order, as
// BMxBNxBK/warps/stages/gGROUP_M. Every activation links the same list; run_triton checks its
// length against the launcher's count.
const std::vector<std::string> kTritonNames = {"128x256x64/8w/3st/g8", "128x128x64/4w/4st/g8",
                                               "128x256x64/8w/4st/g8", "64x128x64/4w/4st/g8"};

// What the autotuner times for a problem, as Impl::candidates reports it: every linked
// configuration whose stages fit the device's shared memory (lesson 05's filter: the 4-stage
// 128x256 one needs Hopper's 227 KB), for every shape and activation (the kernel masks any
// shape). Without a GPU, all.
std::vector<std::string> triton_candidates(const klab::Problem&) { return lesson05::triton_tiles_that_fit(kTritonNames); }

// ACT of linear_triton.py's launchers is the Act enum's order (fusion.cuh): bias 0, relu 1,
// gelu 2, silu 3.
static_assert(static_cast<int>(Act::bias) == 0 && static_cast<int>(Act::relu) == 1 && static_cast<int>(Act::gelu) == 2 &&
                  static_cast<int>(Act::silu) == 3,
              "the launchers' order is ACTS in linear_triton.py");

#if KLAB_HAVE_TRITON
using Launcher = CUresult (*)(CUstream, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, int32_t, int32_t,
                              int32_t, int32_t, int32_t, int32_t, int);

struct Activation {
  Launcher launch;
  int (*num_algos)(void);
  void (*load)(void);
};

// The launchers, in Act order.
const Activation& launcher_of(int act) {
  static const Activation all[] = {
      {tr_linear_bias, tr_linear_bias_get_num_algos, load_tr_linear_bias},
      {tr_linear_relu, tr_linear_relu_get_num_algos, load_tr_linear_relu},
      {tr_linear_gelu, tr_linear_gelu_get_num_algos, load_tr_linear_gelu},
      {tr_linear_silu, tr_linear_silu_get_num_algos, load_tr_linear_silu},
  };
  static_assert(sizeof(all) / sizeof(all[0]) == 4, "one launcher per activation");
  return all[act];
}
#endif

void run_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  // y (M, N) = act(x (M, K) · W (N, K)ᵀ + b (N)): both operands K-contiguous.
  const auto& d = l.problem.shape;
  KLAB_REQUIRE(d.size() == 3, "triton linear_bias_act: the shape is {M, N, K}");
  for (const std::int64_t v : d)
    KLAB_REQUIRE(v <= std::numeric_limits<int32_t>::max(), "triton linear_bias_act: M, N and K are int32 arguments");
  const auto M = static_cast<int32_t>(d[0]), N = static_cast<int32_t>(d[1]), K = static_cast<int32_t>(d[2]);
  if (M == 0 || N == 0) return;   // no output element; K == 0 still stores act(b)
  const int act = static_cast<int>(act_of(l.problem.variant));  // an unknown variant throws
  const Activation& fn = launcher_of(act);
  static bool loaded[4] = {false, false, false, false};
  if (!loaded[act]) {
    klab::triton_prepare();
    fn.load();
    loaded[act] = true;
  }
  auto launch_algo = [&](int algo) {
    KLAB_CHECK_CU(fn.launch(reinterpret_cast<CUstream>(l.stream), reinterpret_cast<CUdeviceptr>(l.in.at(0).data),
                            reinterpret_cast<CUdeviceptr>(l.in.at(1).data),
                            reinterpret_cast<CUdeviceptr>(l.in.at(2).data),
                            reinterpret_cast<CUdeviceptr>(l.out.at(0).data), M, N, K, /*ldx=*/K, /*ldw=*/K,
                            /*ldy=*/N, algo));
  };
  KLAB_REQUIRE(fn.num_algos() == static_cast<int>(kTritonNames.size()),
               "triton linear_bias_act: the launcher links " + std::to_string(fn.num_algos()) + " configurations, " +
                   std::to_string(kTritonNames.size()) + " named (kTritonNames follows CONFIGS in linear_triton.py)");
  // The candidates are a subset of kTritonNames; the launcher takes the algo_id in the full list.
  const std::vector<std::string> names = triton_candidates(l.problem);
  const auto launch = [&](int i) {
    launch_algo(static_cast<int>(std::find(kTritonNames.begin(), kTritonNames.end(), names.at(i)) - kTritonNames.begin()));
  };
  const int best = klab::autotune(l, "linear_bias_act|triton|" + l.problem.label(), names, 0, launch);
  launch(best);
#else
  (void)l;
  KLAB_REQUIRE(false, "triton linear_bias_act: not built");
#endif
}

std::string supports_triton(const klab::Problem& p) {
  if (p.dtype != klab::DType::bf16) return "bf16 only (the Triton track of this lesson)";
  // The kernel's offsets inside a tile are 32-bit, as lesson 05's persistent kernel's.
  if (std::string why = lesson05::triton_offsets_fit(p.shape[0], p.shape[1], p.shape[2]); !why.empty()) return why;
  return klab::triton_supported();
}

KLAB_REGISTER(klab::register_impl({.op = "linear_bias_act", .name = "triton",
                                   .summary = "Triton tl.dot with bias + activation on the fp32 tile, persistent, 4 "
                                              "linked tile configs, fastest chosen per shape",
                                   .kind = klab::ImplKind::triton, .supports = supports_triton,
                                   .run = run_triton, .candidates = triton_candidates}));

}  // namespace
}  // namespace lesson06
