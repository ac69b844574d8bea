// Lesson 11 — the fused cross-entropy in Triton (cross_entropy_triton.py), compiled ahead of time.
//
//   triton   op cross_entropy_fwd, f32 and bf16: one program per row reads the row once, an
//            online (max, sum) per lane with one exp an element, writes lse and the row's loss
//            term; a one-program kernel sums the terms in fp64 in a fixed order and divides by
//            the rows not ignored (deterministic). Five linked configurations a dtype, the
//            fastest chosen per shape (run_cross_entropy_fwd_triton)
//   triton   op cross_entropy_bwd, f32 and bf16, out of place and in place: one program per
//            16384-element chunk of a row, d = scale · (exp(x − lse) − [j = t]), zeros in an
//            ignored row without reading it; three linked configurations, the first by default
//            (run_cross_entropy_bwd_triton)
//
// Both move 16 bytes an access on rows of any length: each row is split at the 16-byte
// boundaries of the flat tensor, the body under a mask Triton can prove constant over each
// 16-byte run, the head and tail (under 16 bytes each) masked element by element
// (cross_entropy_triton.py's docstring).
//
// The forward's configurations are timed on the first call for a shape and the fastest is
// cached (klab::autotune, as lesson 04's `triton` does); `klab test` verifies each. The
// backward's are not timed: the in-place variant overwrites its input, so a trial launch
// would leave the next one gradients to differentiate. `--candidate NAME` runs any of them
// and `--candidate all` times each as its own row (the sweep).
//
//   klab test 11 --op cross_entropy_fwd,cross_entropy_bwd --impl triton
//   klab bench 11 --op cross_entropy_fwd --impl triton --candidate all
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "klab/autotune.hpp"
#include "klab/error.hpp"
#include "klab/math.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#include "training.cuh"

#if KLAB_HAVE_TRITON
#include "cross_entropy_triton.h"
#endif

// The ops (inputs, references, tolerances, shapes): cross_entropy_ops.cu.

namespace lesson11 {
namespace {

using i64 = std::int64_t;

// FWD_CONFIGS and BWD_CONFIGS of cross_entropy_triton.py, in their order (the launchers'
// algo_ids): BLOCK/warps[/prefetch] and BLOCK/warps/CHUNK.
const std::vector<std::string> kFwdNames = {"2048/8w/prefetch", "4096/8w", "2048/8w", "4096/8w/prefetch", "2048/4w"};
const std::vector<std::string> kBwdNames = {"2048/4w/16384", "4096/8w/16384", "2048/8w/8192"};
const std::vector<i64> kBwdChunks = {16384, 16384, 8192};

std::vector<std::string> fwd_candidates(const klab::Problem&) { return kFwdNames; }
std::vector<std::string> bwd_candidates(const klab::Problem&) { return kBwdNames; }

// One fp32 loss term a row; 16 bytes more, so that rows = 0 still gets a buffer.
std::size_t fwd_workspace(const klab::Problem& p) { return static_cast<std::size_t>(p.shape[0]) * sizeof(float) + 16; }

#if KLAB_HAVE_TRITON
CUdeviceptr ptr(const void* q) { return reinterpret_cast<CUdeviceptr>(q); }
#endif

void run_cross_entropy_fwd_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const i64 rows = l.problem.shape[0], vocab = l.problem.shape[1];
  klab::triton_prepare();
  const auto s = reinterpret_cast<CUstream>(l.stream);
  const bool f32 = l.problem.dtype == klab::DType::f32;
  KLAB_REQUIRE((f32 ? tr_ce_fwd_f32_get_num_algos() : tr_ce_fwd_bf16_get_num_algos()) ==
                   static_cast<int>(kFwdNames.size()),
               "triton cross_entropy_fwd: the launcher does not link kFwdNames (FWD_CONFIGS, cross_entropy_triton.py)");
  const CUdeviceptr x = ptr(l.in[0].data), t = ptr(l.in[1].data), loss = ptr(l.out[0].data), lse = ptr(l.out[1].data),
                    term = ptr(l.workspace);
  const auto r32 = static_cast<int32_t>(rows);
  // The rows' kernel (no program for rows = 0), then the mean over them (0 for no rows).
  const auto launch = [&](int c) {
    if (rows > 0)
      KLAB_CHECK_CU(f32 ? tr_ce_fwd_f32(s, x, t, lse, term, r32, vocab, c)
                        : tr_ce_fwd_bf16(s, x, t, lse, term, r32, vocab, c));
    KLAB_CHECK_CU(tr_ce_loss_default(s, term, t, loss, r32));
  };
  launch(klab::autotune(l, "cross_entropy_fwd|triton|" + l.problem.label(), kFwdNames, 0, launch));
#else
  (void)l;
  KLAB_REQUIRE(false, "triton cross_entropy_fwd: not built");
#endif
}

void run_cross_entropy_bwd_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const i64 rows = l.problem.shape[0], vocab = l.problem.shape[1];
  const int c = l.candidate >= 0 ? l.candidate : 0;
  KLAB_REQUIRE(c < static_cast<int>(kBwdNames.size()), "triton cross_entropy_bwd: no candidate " + std::to_string(c));
  if (l.chosen) *l.chosen = kBwdNames[static_cast<std::size_t>(c)];
  if (rows == 0) return;   // nothing to write
  klab::triton_prepare();
  const auto s = reinterpret_cast<CUstream>(l.stream);
  const bool f32 = l.problem.dtype == klab::DType::f32;
  KLAB_REQUIRE((f32 ? tr_ce_bwd_f32_get_num_algos() : tr_ce_bwd_bf16_get_num_algos()) ==
                   static_cast<int>(kBwdNames.size()),
               "triton cross_entropy_bwd: the launcher does not link kBwdNames (BWD_CONFIGS, cross_entropy_triton.py)");
  // In place, the gradient goes over the logits: the same pointer as input and output.
  const CUdeviceptr x = ptr(l.in[0].data), t = ptr(l.in[1].data), lse = ptr(l.in[2].data),
                    d = l.out.empty() ? x : ptr(l.out[0].data);
  const auto chunks = static_cast<int32_t>(klab::ceil_div(vocab, kBwdChunks[static_cast<std::size_t>(c)]));
  const auto scale = static_cast<float>(l.scalars.at(0));
  const auto r32 = static_cast<int32_t>(rows);
  KLAB_CHECK_CU(f32 ? tr_ce_bwd_f32(s, x, t, lse, d, r32, vocab, chunks, scale, c)
                    : tr_ce_bwd_bf16(s, x, t, lse, d, r32, vocab, chunks, scale, c));
#else
  (void)l;
  KLAB_REQUIRE(false, "triton cross_entropy_bwd: not built");
#endif
}

std::string fwd_supports(const klab::Problem& p) {
  if (p.shape[0] > std::numeric_limits<int32_t>::max()) return "more than 2^31 - 1 rows (one program a row)";
  return klab::triton_supported();
}

std::string bwd_supports(const klab::Problem& p) {
  // The grid has rows · ceil(vocab / CHUNK) programs on its x axis, an int32 in the launcher;
  // the smallest CHUNK of kBwdChunks gives the most.
  if (p.shape[0] * klab::ceil_div<i64>(p.shape[1], 8192) > std::numeric_limits<int32_t>::max())
    return "more than 2^31 - 1 programs of 8192 logits";
  return klab::triton_supported();
}

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "cross_entropy_fwd", .name = "triton",
                                   .summary = "Triton, a row a program read once: a running (max, sum) per lane, "
                                              "16-byte loads on any row",
                                   .kind = klab::ImplKind::triton, .supports = fwd_supports,
                                   .workspace = fwd_workspace, .run = run_cross_entropy_fwd_triton,
                                   .candidates = fwd_candidates}));
KLAB_REGISTER(klab::register_impl({.op = "cross_entropy_bwd", .name = "triton",
                                   .summary = "Triton, a chunk of a row a program: 16-byte accesses on any row, in "
                                              "place or not",
                                   .kind = klab::ImplKind::triton, .supports = bwd_supports,
                                   .run = run_cross_entropy_bwd_triton, .candidates = bwd_candidates}));

}  // namespace lesson11
