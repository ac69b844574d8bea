// lessons/08-layernorm/layernorm_backward_triton.cu — the Triton layernorm backward's launcher.
//
// Impl registered here (op layernorm_backward):
//   triton   layernorm_backward_triton.py: a program a run of rows (dx, and dgamma's and
//            dbeta's terms summed in registers into the program's partial row), then a
//            second Triton kernel adding the partial rows in a fixed order. Rows up to 16,384
//            elements (the widest block compiled).
//
// The programs and the workspace's layout: row_plans.hpp (triton_bwd_layout), which says
// how many programs and why.
//
//   klab test 08 --op layernorm_backward --impl triton
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#include "layernorm.cuh"
#include "row_plans.hpp"
#if KLAB_HAVE_TRITON
#include "layernorm_backward_triton.h"
#endif

namespace lesson08 {
namespace {

using i64 = std::int64_t;

constexpr i64 kTritonBwdMaxCols = 16384;

std::string supports_triton(const klab::Problem& p) {
  if (p.shape[1] > kTritonBwdMaxCols) return "rows longer than 16,384 elements (the widest block compiled)";
  return klab::triton_supported();
}

void run_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const LnBwdArgs a = ln_bwd_args(l);
  klab::triton_prepare();
  const auto ptr = [](const void* q) { return reinterpret_cast<CUdeviceptr>(q); };
  const auto cols = static_cast<std::int32_t>(a.cols);
  const TritonBwdLayout t = triton_bwd_layout(a.rows, a.cols, klab::sm_count());
  KLAB_REQUIRE(static_cast<std::size_t>(t.floats) * sizeof(float) <= l.workspace_bytes,
               "triton: more partials than the workspace holds");
  auto* part = static_cast<float*>(l.workspace);
  const CUdeviceptr p_dg = ptr(part), p_db = ptr(part + t.db_at);
  if (a.rows > 0) {                                   // a grid of zero programs is not a launch
    const CUdeviceptr x = ptr(a.x), g = ptr(a.gamma), dy = ptr(a.dy), m = ptr(a.mean), r = ptr(a.rstd), dx = ptr(a.dx);
    const auto rows = static_cast<std::int32_t>(a.rows), rpp = static_cast<std::int32_t>(t.rows_per_prog);
    const bool f32 = l.problem.dtype == klab::DType::f32;
    CUresult rc;
    if (cols <= 1024)
      rc = f32 ? tr_layernorm_bwd_f32_1024_default(l.stream, x, g, dy, m, r, dx, p_dg, p_db, rows, cols, rpp)
               : tr_layernorm_bwd_bf16_1024_default(l.stream, x, g, dy, m, r, dx, p_dg, p_db, rows, cols, rpp);
    else if (cols <= 4096)
      rc = f32 ? tr_layernorm_bwd_f32_4096_default(l.stream, x, g, dy, m, r, dx, p_dg, p_db, rows, cols, rpp)
               : tr_layernorm_bwd_bf16_4096_default(l.stream, x, g, dy, m, r, dx, p_dg, p_db, rows, cols, rpp);
    else
      rc = f32 ? tr_layernorm_bwd_f32_16384_default(l.stream, x, g, dy, m, r, dx, p_dg, p_db, rows, cols, rpp)
               : tr_layernorm_bwd_bf16_16384_default(l.stream, x, g, dy, m, r, dx, p_dg, p_db, rows, cols, rpp);
    KLAB_CHECK_CU(rc);
  }
  // No rows: no partials, and the sums write 0.
  KLAB_CHECK_CU(tr_layernorm_bwd_sums_default(l.stream, p_dg, p_db, ptr(a.dgamma), ptr(a.dbeta),
                                              static_cast<std::int32_t>(t.programs), cols));
#else
  (void)l;
#endif
}

std::size_t workspace_triton(const klab::Problem& p) {
  return triton_bwd_workspace(p.shape[0], p.shape[1], klab::sm_count());
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "layernorm_backward", .name = "triton",
                                   .summary = "Triton: a program a run of rows, dx and partial column sums in "
                                              "one pass, then a Triton kernel adding the partials",
                                   .kind = klab::ImplKind::triton,
                                   .supports = supports_triton,
                                   .workspace = workspace_triton,
                                   .run = run_triton}));

}  // namespace lesson08
