// lessons/04-softmax/softmax_triton.cu — the Triton track's launcher for softmax_rows: the
// kernels are softmax_triton.py, compiled ahead of time (tools/triton_aot.py) into
// softmax_triton.h / .c in the build tree.
//
// Impls registered here (op softmax_rows):
//   triton  one program per row: softmax_row_kernel holds the row in one tile (the smallest
//           of 1024 .. 32768 that fits), softmax_loop_kernel reads it twice in BLOCK steps
//           (the two-sweep online loop, with or without a prefetch of the next BLOCK; the
//           only choice past 32768 columns). The first call
//           for a shape times every candidate (the row tile's warp counts and the loop's
//           configurations) and caches the fastest (klab::autotune); `klab test` verifies
//           each one. Without Triton in the build it reports why.
//
// Run:  klab test 04 --impl triton       klab run 04 --impl triton,v6_exp2 --shape 8192x8192
//       klab bench 04 --impl triton --shape 4096x32768 --dtype bf16 --candidate loop/4096/8w
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "klab/autotune.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#include "softmax_common.cuh"

#if KLAB_HAVE_TRITON
#include "softmax_triton.h"
#endif

// The op (inputs, reference, tolerances, shapes): softmax_op.cu.

using klab::DType;
using klab::Problem;

namespace {

// ROW_TILES and LOOP_CONFIGS of softmax_triton.py, in their order (the launchers' algo_ids).
struct RowTile {
  std::int64_t block;
  std::vector<int> warps;
};
const std::vector<RowTile> kRowTiles = {{1024, {4}}, {4096, {8}}, {8192, {16}}, {16384, {16}}, {32768, {32, 16}}};
struct LoopConfig {
  int block, warps;
  bool prefetch;
};
const std::vector<LoopConfig> kLoopConfigs = {{4096, 8, false}, {8192, 16, false}, {16384, 16, false},
                                              {2048, 4, false}, {4096, 8, true},   {8192, 16, true},
                                              {2048, 4, true}};

// The smallest tile that holds the row (null past 32768 columns).
const RowTile* row_tile(std::int64_t cols) {
  for (const auto& t : kRowTiles)
    if (cols <= t.block) return &t;
  return nullptr;
}

// What the autotuner times for a problem, as Impl::candidates reports it: the row tile's
// warp counts ("row/32768/32w"), then every loop configuration ("loop/4096/8w",
// "loop+prefetch/4096/8w").
std::vector<std::string> triton_candidates(const Problem& p) {
  std::vector<std::string> names;
  const std::int64_t cols = p.shape.size() == 2 ? p.shape[1] : 0;
  if (const RowTile* t = row_tile(cols))
    for (int w : t->warps) names.push_back("row/" + std::to_string(t->block) + "/" + std::to_string(w) + "w");
  for (const auto& c : kLoopConfigs)
    names.push_back(std::string(c.prefetch ? "loop+prefetch/" : "loop/") + std::to_string(c.block) + "/" +
                    std::to_string(c.warps) + "w");
  return names;
}

#if KLAB_HAVE_TRITON
using Launcher = CUresult (*)(CUstream, CUdeviceptr, CUdeviceptr, int32_t, int32_t, int32_t, int);
struct Linked {
  Launcher launch;
  int (*num_algos)(void);
};

// The linked launcher of a row tile or of the loop, for a dtype.
Linked linked(bool f32, std::int64_t block) {
  switch (block) {
    case 1024: return f32 ? Linked{tr_softmax_f32_b1024, tr_softmax_f32_b1024_get_num_algos}
                          : Linked{tr_softmax_bf16_b1024, tr_softmax_bf16_b1024_get_num_algos};
    case 4096: return f32 ? Linked{tr_softmax_f32_b4096, tr_softmax_f32_b4096_get_num_algos}
                          : Linked{tr_softmax_bf16_b4096, tr_softmax_bf16_b4096_get_num_algos};
    case 8192: return f32 ? Linked{tr_softmax_f32_b8192, tr_softmax_f32_b8192_get_num_algos}
                          : Linked{tr_softmax_bf16_b8192, tr_softmax_bf16_b8192_get_num_algos};
    case 16384: return f32 ? Linked{tr_softmax_f32_b16384, tr_softmax_f32_b16384_get_num_algos}
                           : Linked{tr_softmax_bf16_b16384, tr_softmax_bf16_b16384_get_num_algos};
    case 32768: return f32 ? Linked{tr_softmax_f32_b32768, tr_softmax_f32_b32768_get_num_algos}
                           : Linked{tr_softmax_bf16_b32768, tr_softmax_bf16_b32768_get_num_algos};
    default: return f32 ? Linked{tr_softmax_f32_loop, tr_softmax_f32_loop_get_num_algos}
                        : Linked{tr_softmax_bf16_loop, tr_softmax_bf16_loop_get_num_algos};
  }
}

void run_triton(const klab::Launch& l) {
  const lesson04::RowArgs a = lesson04::row_args(l);
  if (a.rows * a.cols == 0) return;
  klab::triton_prepare();
  const auto x = reinterpret_cast<CUdeviceptr>(a.x);
  const auto y = reinterpret_cast<CUdeviceptr>(a.y);
  const auto rows = static_cast<int32_t>(a.rows), cols = static_cast<int32_t>(a.cols),
             diag = static_cast<int32_t>(a.diag);
  CUstream s = reinterpret_cast<CUstream>(a.stream);
  const bool f32 = l.problem.dtype == DType::f32;
  const RowTile* tile = row_tile(a.cols);
  const int n_row = tile ? static_cast<int>(tile->warps.size()) : 0;
  const Linked row = linked(f32, tile ? tile->block : 0), loop = linked(f32, 0);
  KLAB_REQUIRE(loop.num_algos() == static_cast<int>(kLoopConfigs.size()) && (!tile || row.num_algos() == n_row),
               "triton softmax: the linked launchers do not match kRowTiles / kLoopConfigs (softmax_triton.py's "
               "ROW_TILES / LOOP_CONFIGS)");
  // Candidate c < n_row: the row tile with its c-th warp count; then the loop configurations.
  auto launch = [&](int c) {
    KLAB_CHECK_CU(c < n_row ? row.launch(s, x, y, rows, cols, diag, c)
                            : loop.launch(s, x, y, rows, cols, diag, c - n_row));
  };
  launch(klab::autotune(l, "softmax_rows|triton|" + l.problem.label(), triton_candidates(l.problem), 0, launch));
}
#else
void run_triton(const klab::Launch&) { KLAB_REQUIRE(false, "built without Triton"); }
#endif

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "softmax_rows", .name = "triton",
                                   .summary = "Triton: one program per row (a row tile or the two-sweep "
                                              "online loop), the fastest configuration chosen per shape",
                                   .kind = klab::ImplKind::triton,
                                   .supports = [](const Problem&) { return klab::triton_supported(); },
                                   .run = run_triton,
                                   .candidates = triton_candidates}));

}  // namespace
