// lessons/08-layernorm/layernorm_backward_triton.cu — the Triton layernorm backward's launcher.
//
// Impl registered here (op layernorm_backward):
//   triton   layernorm_backward_triton.py: a program a run of rows (dx, and dgamma's and
//            dbeta's terms summed in registers into the program's partial row), then a
//            second Triton kernel adding the partial rows in a fixed order. Rows up to 16,384
//            elements (the widest block compiled).
//
// The programs: one wave of them, as many as are resident on an SM at once (never more
// than the rows), each taking rows_per_prog consecutive rows. A program works on one row at
// a time with nothing prefetched (the Triton loop is not pipelined: no cp.async in its PTX
// at any num_stages), so the loads in flight come from the programs side by side; more than
// fit would make a second wave, and every extra program adds a partial row to sum. Measured
// on the H100 (2026-11-26, programs per SM 1, 2, 4, 8, 16 at each bench shape), the best
// was each width's residency: 8 for the 1024-wide block (56 registers, 128 threads), 2 for
// the 4096-wide (100-115 registers, 256 threads), 1 for the 16384-wide (1024 threads).
// Their partials live in the workspace: dbeta's start at a multiple of 4 floats, because
// the compiled kernels take every pointer as 16-byte aligned (the `:16` of their
// signatures) and the linked launcher refuses one that is not (CUDA_ERROR_INVALID_VALUE).
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
#if KLAB_HAVE_TRITON
#include "layernorm_backward_triton.h"
#endif

namespace lesson08 {
namespace {

using i64 = std::int64_t;

constexpr i64 kTritonBwdMaxCols = 16384;

// The programs of each compiled block width resident on an SM at once (see the top).
i64 programs_per_sm(i64 cols) { return cols <= 1024 ? 8 : cols <= 4096 ? 2 : 1; }
constexpr i64 kTritonMostPerSm = 8;

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
  // One wave of programs, never more than the rows; then the fewest that still take every
  // row at rows_per_prog each.
  const i64 most = std::min<i64>(a.rows, i64{klab::sm_count()} * programs_per_sm(a.cols));
  const i64 per = most > 0 ? klab::ceil_div<i64>(a.rows, most) : 1;
  const i64 parts = most > 0 ? klab::ceil_div<i64>(a.rows, per) : 0;
  const i64 db_at = klab::ceil_div<i64>(parts * a.cols, 4) * 4;   // 16-byte aligned
  KLAB_REQUIRE(static_cast<std::size_t>(db_at + parts * a.cols) * sizeof(float) <= l.workspace_bytes,
               "triton: more partials than the workspace holds");
  auto* part = static_cast<float*>(l.workspace);
  const CUdeviceptr p_dg = ptr(part), p_db = ptr(part + db_at);
  if (a.rows > 0) {                                   // a grid of zero programs is not a launch
    const CUdeviceptr x = ptr(a.x), g = ptr(a.gamma), dy = ptr(a.dy), m = ptr(a.mean), r = ptr(a.rstd), dx = ptr(a.dx);
    const auto rows = static_cast<std::int32_t>(a.rows), rpp = static_cast<std::int32_t>(per);
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
                                              static_cast<std::int32_t>(parts), cols));
#else
  (void)l;
#endif
}

// Two partial rows a program at most, plus dbeta's 16-byte alignment.
std::size_t workspace_triton(const klab::Problem& p) {
  const i64 most = std::min(p.shape[0], i64{klab::sm_count()} * kTritonMostPerSm);
  return 2 * sizeof(float) * static_cast<std::size_t>(most * p.shape[1]) + 16;
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
