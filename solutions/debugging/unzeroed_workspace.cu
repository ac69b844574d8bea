// debugging/unzeroed_workspace.cu — case unzeroed_workspace: a sum accumulated into a
// workspace that was never zeroed.
//
// Impl registered here (op `debug_split_sum`, f32):
//   exercise       the split row sums below, with their bug: yours to find and fix
//
// The row sums come in column chunks: one launch per chunk of 1024 columns adds the chunk to
// each row's running sum, kept in the workspace the harness hands the impl (Launch::workspace,
// Impl::workspace: rows floats); a last launch copies the sums to y. (Split the work this way
// when a row is too long for one launch, or the columns arrive a chunk at a time.) The sums
// can be right the first time a shape runs and wrong after, or wrong from the start.
//
//   klab debug run unzeroed_workspace     the kernels under compute-sanitizer's initcheck
//   klab hint debug/unzeroed_workspace    how to read its report, one hint at a time
//   klab check debug/unzeroed_workspace   grades your fix: the checks, then initcheck clean
#include <cuda_runtime.h>

#include <algorithm>

#include "catalog.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace debugging {
namespace {

// Grid: one thread per row. Adds columns c0 .. c0 + kColChunk of each row to its sum.
__global__ void __launch_bounds__(kThreads) debug_split_sum_exercise(const float* __restrict__ g_x, float* g_sum,
                                                                     i64 rows, i64 cols, i64 c0) {
  const i64 r = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* row = g_x + r * cols;
  float acc = g_sum[r];
  for (i64 c = c0; c < std::min(cols, c0 + kColChunk); ++c) acc += row[c];
  g_sum[r] = acc;
}

// Grid: one thread per row: y = the sums.
__global__ void __launch_bounds__(kThreads) debug_split_sum_exercise_store(const float* g_sum, float* g_y, i64 rows) {
  const i64 r = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows) g_y[r] = g_sum[r];
}

void run_exercise(const klab::Launch& l) {
  const i64 rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0) return;
  auto* sum = static_cast<float*>(l.workspace);   // (rows) the running sums
  const unsigned blocks = klab::blocks_for(rows, kThreads);
  // The fix: the running sums start at 0. The harness hands over the workspace as it is: new
  // memory from cudaMalloc (whose contents nobody wrote) or what the last launch left there.
  // (Impl::zero_workspace = true asks the harness to zero it instead, outside the timing.)
  KLAB_CHECK_CUDA(cudaMemsetAsync(sum, 0, static_cast<std::size_t>(rows) * sizeof(float), l.stream));
  for (i64 c0 = 0; c0 < cols; c0 += kColChunk)
    debug_split_sum_exercise<<<blocks, kThreads, 0, l.stream>>>(l.in[0].as<const float>(), sum, rows, cols, c0);
  debug_split_sum_exercise_store<<<blocks, kThreads, 0, l.stream>>>(sum, l.out[0].as<float>(), rows);
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "debug_split_sum", .name = "exercise",
                                   .summary = "your fix of the split sums' workspace (debugging/unzeroed_workspace.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .workspace = [](const klab::Problem& p) { return static_cast<std::size_t>(p.shape[0]) * sizeof(float); },
                                   .run = run_exercise}));

}  // namespace
}  // namespace debugging
