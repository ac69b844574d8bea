// debugging/half_accumulation.cu — case half_accumulation: f16 values summed in f16.
//
// Impl registered here (op `debug_half_sum`, f16 in, f32 out):
//   exercise       the row sum below, with its bug: yours to find and fix
//
// One warp a row of an f16 matrix (values in [0, 1)): each lane adds every 32nd element of
// the row, the warp adds the 32 partial sums, lane 0 writes the total as f32. The inputs
// are f16, so the kernel keeps its sums in f16 too: half the registers, and f16 adds. The
// checks fail on every row of more than one element, and the longest rows come out inf.
//
//   klab debug run half_accumulation     the kernel through the checks (their FAIL lines)
//   klab hint debug/half_accumulation    how to read them, one hint at a time
//   klab check debug/half_accumulation   grades your fix
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "catalog.cuh"
#include "klab/device/warp.cuh"
#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace debugging {
namespace {

constexpr int kRowsPerBlock = kThreads / 32;   // one warp a row

// Grid: one block per kRowsPerBlock rows.
__global__ void __launch_bounds__(kThreads) debug_half_sum_exercise(const __half* __restrict__ g_x,
                                                                    float* __restrict__ g_y, i64 rows, i64 cols) {
  const i64 r = static_cast<i64>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;   // a whole warp leaves: no barrier below
  const __half* x = g_x + r * cols;
  // The fix: the sum in f32. f16 keeps 11 significant bits: a lane's sum of 2048 has a unit
  // of 2 in its last place, and adding a value below 1 to it changes nothing. Each f16 value
  // converts to f32 exactly; only the sums round, at f32's 24 bits.
  float acc = 0.f;
  for (i64 c = lane; c < cols; c += 32) acc += __half2float(x[c]);
  acc = klab::warp_sum(acc);
  if (lane == 0) g_y[r] = acc;
}

void run_exercise(const klab::Launch& l) {
  const i64 rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0) return;
  debug_half_sum_exercise<<<klab::blocks_for(rows, kRowsPerBlock), kThreads, 0, l.stream>>>(
      l.in[0].as<const __half>(), l.out[0].as<float>(), rows, cols);
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "debug_half_sum", .name = "exercise",
                                   .summary = "your fix of the f16 row sum's accumulator (debugging/half_accumulation.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .run = run_exercise}));

}  // namespace
}  // namespace debugging
