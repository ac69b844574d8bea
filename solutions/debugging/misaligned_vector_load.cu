// debugging/misaligned_vector_load.cu — case misaligned_vector_load: a 16-byte load from an
// address that is not a multiple of 16.
//
// Impl registered here (op `debug_row_scale`, f32):
//   exercise       the row scale below, with its bug: yours to find and fix
//
// One block of 256 threads scales one row of x by s[r], four elements at a time: each thread
// loads and stores a float4 (one 16-byte access, lesson 02's vectorized copy), then the last
// cols % 4 elements one at a time. It is right on rows whose length is a multiple of 4, and
// on the first row of any matrix. On the others the GPU stops the kernel, and the process's
// CUDA context with it.
//
//   klab debug run misaligned_vector_load     the kernel under compute-sanitizer's memcheck
//   klab hint debug/misaligned_vector_load    how to read its report, one hint at a time
//   klab check debug/misaligned_vector_load   grades your fix: the checks, then memcheck clean
#include <cuda_runtime.h>

#include <cstdint>

#include "catalog.cuh"
#include "klab/error.hpp"
#include "klab/op.hpp"

namespace debugging {
namespace {

// Grid: one block per row.
__global__ void __launch_bounds__(kThreads) debug_row_scale_exercise(const float* __restrict__ g_x,
                                                                     const float* __restrict__ g_s,
                                                                     float* __restrict__ g_y, i64 cols) {
  const i64 r = blockIdx.x;
  const float* x = g_x + r * cols;
  float* y = g_y + r * cols;
  const float s = g_s[r];
  // The fix: a float4 access needs an address that is a multiple of 16. Row r starts 4·r·cols
  // bytes past x (cudaMalloc's buffers start at multiples of 256): a multiple of 16 for every
  // row only when cols is a multiple of 4. Other rows take the scalar loop, whole.
  const bool aligned = cols % 4 == 0 && reinterpret_cast<std::uintptr_t>(g_x) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(g_y) % 16 == 0;
  const i64 quads = aligned ? cols / 4 : 0;   // the float4s of the row; the rest one at a time
  for (i64 q = threadIdx.x; q < quads; q += kThreads) {
    float4 v = reinterpret_cast<const float4*>(x)[q];
    v.x *= s; v.y *= s; v.z *= s; v.w *= s;
    reinterpret_cast<float4*>(y)[q] = v;
  }
  for (i64 c = 4 * quads + threadIdx.x; c < cols; c += kThreads) y[c] = s * x[c];
}

void run_exercise(const klab::Launch& l) {
  const i64 rows = l.problem.shape[0], cols = l.problem.shape[1];
  if (rows == 0 || cols == 0) return;
  debug_row_scale_exercise<<<static_cast<unsigned>(rows), kThreads, 0, l.stream>>>(
      l.in[0].as<const float>(), l.in[1].as<const float>(), l.out[0].as<float>(), cols);
  KLAB_CHECK_LAUNCH();
}

KLAB_REGISTER(klab::register_impl({.op = "debug_row_scale", .name = "exercise",
                                   .summary = "your fix of the row scale's vector loads (debugging/misaligned_vector_load.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .run = run_exercise}));

}  // namespace
}  // namespace debugging
