// Lesson 03 exercise — the warp-shuffle sum reduction.
//
// Sum n values (f32, or i32 accumulated as uint32 so that overflow wraps, defined).
// The launcher and the grid-stride loop are written: every thread already holds r_acc,
// the sum of its slice. Your job is to combine the 256 r_acc of a block into one value
// WITHOUT a shared-memory tree, using warp shuffles:
//
//   1. warp_sum(v): five steps of  v += __shfl_down_sync(0xffffffff, v, offset)  with
//      offset = 16, 8, 4, 2, 1. After them lane 0 holds the sum of its warp's 32 values.
//      (__shfl_down_sync reads the register v of lane (lane + offset) directly: no shared
//      memory, no __syncthreads.)
//   2. In the kernel: r_acc = warp_sum(r_acc); lane 0 of each warp writes its result to
//      s_warp[warp]; __syncthreads(); then warp 0 loads s_warp[lane] (0 for lanes past the
//      number of warps) and calls warp_sum again.
//   3. Thread 0 writes the block's total to g_out[blockIdx.x].
//
// The launcher runs the kernel twice: G blocks write G partial sums, then one block sums
// the partials into the output. Make n = 0 work too (the output must be 0, not left
// unwritten: the harness fills outputs with NaN before every launch).
//
// Check:  klab check 03      (unseen seeds, edge sizes 0, 1, 7, 127, 4097, ...; then
//                             speed against v2_warp_shuffle)
#include <cuda_runtime.h>

#include <cstdint>

#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace {

constexpr int kThreads = 256;                // 8 warps
constexpr int kWarps = kThreads / 32;

template <class A>
__device__ __forceinline__ A warp_sum(A v) {
  // TODO 1: the five shuffle steps.
  return v;
}

template <class In, class A>
__global__ void sum_exercise(const In* __restrict__ g_in, A* __restrict__ g_out, std::int64_t n) {
  __shared__ A s_warp[kWarps];
  A r_acc = 0;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    r_acc += static_cast<A>(g_in[i]);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // TODO 2: reduce r_acc across the block with warp_sum and s_warp.
  // TODO 3: thread 0 writes the block total to g_out[blockIdx.x].
  (void)s_warp, (void)lane, (void)warp, (void)g_out;
  // end of TODO 3
}

template <class In, class A>
void launch(const klab::Launch& l) {
  const std::int64_t n = l.problem.shape[0];
  A* out = reinterpret_cast<A*>(l.out[0].data);
  const int g = static_cast<int>(klab::blocks_for(n, kThreads * 8, 1024));
  if (g == 1) {
    sum_exercise<In, A><<<1, kThreads, 0, l.stream>>>(l.in[0].as<In>(), out, n);
  } else {
    A* partials = static_cast<A*>(l.workspace);
    sum_exercise<In, A><<<g, kThreads, 0, l.stream>>>(l.in[0].as<In>(), partials, n);
    KLAB_CHECK_LAUNCH();
    sum_exercise<A, A><<<1, kThreads, 0, l.stream>>>(partials, out, g);
  }
  KLAB_CHECK_LAUNCH();
}

void run_exercise(const klab::Launch& l) {
  if (l.problem.dtype == klab::DType::f32) launch<float, float>(l);
  else launch<int, unsigned int>(l);  // uint32: wrap-around is defined, same bits as int32
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "sum", .name = "exercise",
                                   .summary = "your warp-shuffle block sum (exercise.cu)",
                                   .kind = klab::ImplKind::exercise,
                                   .workspace = [](const klab::Problem&) { return std::size_t{1024 * 4}; },
                                   .run = run_exercise}));
