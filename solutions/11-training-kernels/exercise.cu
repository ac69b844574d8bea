// Lesson 11 exercise — the AdamW update of one element, inside a multi-tensor launch.
//
// Impl registered here (op `adamw`, every variant):
//   exercise       your multi-tensor AdamW, timed against v2_multi_tensor
//
// One launch a step updates every tensor of the list: the launcher passes a table
// (multi_tensor.cuh: each tensor's pointers, its size, and where its chunks start in the
// launch's numbering), and each block takes chunks of kChunk elements in turn. Fill in the
// TODOs so that every element gets one AdamW step, then run
//
//     klab check 11
//
// which compares your p, m, v (and the bf16 copies) with an fp64 AdamW over one to three
// steps, with and without gradient clipping, on lists of 1 to 40 tensors (some empty),
// then times your kernel against v2_multi_tensor.
//
// Hints (klab hint 11)
//   1. Chunk c belongs to the tensor k whose range [first_chunk[k], first_chunk[k + 1])
//      holds it (chunk_tensor does that walk); it covers the elements from
//      (c − first_chunk[k]) · kChunk, kChunk of them or up to the tensor's end.
//   2. The weight decay is decoupled: the parameter shrinks by s.decay = 1 − lr · wd before
//      the Adam step, whatever the gradient is.
//   3. m ← β1 m + (1 − β1) g and v ← β2 v + (1 − β2) g², g = t.g[k][i] · coef (clipped)
//      (s.one_minus_beta1 and s.one_minus_beta2 hold 1 − β, rounded once).
//   4. p ← p − s.step_size · m / (√v · s.inv_sqrt_bc2 + s.eps): s.step_size already holds
//      lr / (1 − β1^t), s.inv_sqrt_bc2 is 1 / √(1 − β2^t).
//   5. Variant bf16_copy: t.p16[k] is not null; store the updated parameter rounded to bf16.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "klab/device/adamw.cuh"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "multi_tensor.cuh"
#include "training.cuh"

namespace {

using lesson11::AdamWHyper;
using lesson11::AdamWTable;
using lesson11::kChunk;
using lesson11::kThreads;
using std::int64_t;

__global__ void adamw_exercise(AdamWTable t, klab::AdamWStep s, const float* __restrict__ g_part, int parts,
                               float max_norm) {
  const float coef = lesson11::block_clip_coefficient(g_part, parts, max_norm);   // 1 without clipping
  for (int c = blockIdx.x; c < lesson11::table_chunks(t); c += gridDim.x) {
    int k = 0;
    int64_t begin = 0, end = 0;
    // TODO 1: the chunk's tensor k and its elements [begin, end) (hint 1).
    k = lesson11::chunk_tensor(t, c);
    begin = static_cast<int64_t>(c - t.first_chunk[k]) * kChunk;
    end = min(begin + kChunk, t.n[k]);
    // end of TODO 1
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      float p = t.p[k][i], m = t.m[k][i], v = t.v[k][i];
      // TODO 2: the decoupled weight decay (hint 2).
      p *= s.decay;
      // end of TODO 2
      // TODO 3: the two moments of the clipped gradient t.g[k][i] * coef (hint 3).
      const float g = t.g[k][i] * coef;
      m = s.beta1 * m + s.one_minus_beta1 * g;
      v = s.beta2 * v + s.one_minus_beta2 * g * g;
      // end of TODO 3
      // TODO 4: the bias-corrected step (hint 4).
      p -= s.step_size * m / (sqrtf(v) * s.inv_sqrt_bc2 + s.eps);
      // end of TODO 4
      t.p[k][i] = p, t.m[k][i] = m, t.v[k][i] = v;
      // TODO 5: the bf16 copy, where the table has one (hint 5).
      if (t.p16[k]) t.p16[k][i] = __float2bfloat16_rn(p);
      // end of TODO 5
    }
  }
}

void run_exercise(const klab::Launch& l) {
  const AdamWHyper h = lesson11::adamw_hyper(l.scalars);
  for (int64_t step = 0; step < l.problem.shape[2]; ++step) {
    const std::vector<AdamWTable> tables = lesson11::adamw_tables(l, step);
    const float* part = lesson11::adamw_clips(l.problem) ? static_cast<const float*>(l.workspace) : nullptr;
    const int parts = part ? lesson11::launch_grad_sumsq(tables, static_cast<float*>(l.workspace), l.stream) : 0;
    const klab::AdamWStep s = lesson11::adamw_step_at(h, step);
    for (const AdamWTable& t : tables) {
      if (lesson11::table_chunks(t) == 0) continue;
      adamw_exercise<<<lesson11::update_blocks(t), kThreads, 0, l.stream>>>(t, s, part, parts, static_cast<float>(h.max_norm));
      KLAB_CHECK_LAUNCH();
    }
  }
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "adamw", .name = "exercise",
                                   .summary = "your multi-tensor AdamW update (exercise.cu)",
                                   .kind = klab::ImplKind::exercise, .workspace = lesson11::sumsq_workspace,
                                   .run = run_exercise, .kernels = {"adamw_grad_sumsq"}}));
