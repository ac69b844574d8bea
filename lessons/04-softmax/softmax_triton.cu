// lessons/04-softmax/softmax_triton.cu — the Triton track's launcher for softmax_rows: the
// kernels are softmax_triton.py, compiled ahead of time (tools/triton_aot.py) into
// softmax_triton.h / .c in the build tree.
//
// Impls registered here (op softmax_rows):
//   triton  one program per row: softmax_row_kernel holds the row in one tile (the smallest
//           of 1024 .. 32768 that fits), softmax_loop_kernel serves longer rows with a
//           two-sweep online loop. Without Triton in the build it reports why.
//
// Run:  klab test 04 --impl triton       klab run 04 --impl triton,v6_exp2 --shape 8192x8192
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

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

// The smallest Triton tile that holds the row; the two-sweep loop kernel past 32,768.
#if KLAB_HAVE_TRITON
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
  if (a.cols <= 1024)
    KLAB_CHECK_CU(f32 ? tr_softmax_f32_b1024_default(s, x, y, rows, cols, diag)
                      : tr_softmax_bf16_b1024_default(s, x, y, rows, cols, diag));
  else if (a.cols <= 4096)
    KLAB_CHECK_CU(f32 ? tr_softmax_f32_b4096_default(s, x, y, rows, cols, diag)
                      : tr_softmax_bf16_b4096_default(s, x, y, rows, cols, diag));
  else if (a.cols <= 8192)
    KLAB_CHECK_CU(f32 ? tr_softmax_f32_b8192_default(s, x, y, rows, cols, diag)
                      : tr_softmax_bf16_b8192_default(s, x, y, rows, cols, diag));
  else if (a.cols <= 16384)
    KLAB_CHECK_CU(f32 ? tr_softmax_f32_b16384_default(s, x, y, rows, cols, diag)
                      : tr_softmax_bf16_b16384_default(s, x, y, rows, cols, diag));
  else if (a.cols <= 32768)
    KLAB_CHECK_CU(f32 ? tr_softmax_f32_b32768_default(s, x, y, rows, cols, diag)
                      : tr_softmax_bf16_b32768_default(s, x, y, rows, cols, diag));
  else
    KLAB_CHECK_CU(f32 ? tr_softmax_f32_loop_default(s, x, y, rows, cols, diag)
                      : tr_softmax_bf16_loop_default(s, x, y, rows, cols, diag));
}
#else
void run_triton(const klab::Launch&) { KLAB_REQUIRE(false, "built without Triton"); }
#endif

// ============================================================================================
// Registration
// ============================================================================================

KLAB_REGISTER(klab::register_impl({.op = "softmax_rows", .name = "triton",
                                   .summary = "Triton: one program per row (tile or two-sweep "
                                              "online loop)",
                                   .kind = klab::ImplKind::triton,
                                   .supports = [](const Problem&) { return klab::triton_supported(); },
                                   .run = run_triton}));

}  // namespace
