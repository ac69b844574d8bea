// Lesson 11 — AdamW over many tensors in Triton (adamw_triton.py), compiled ahead of time.
//
//   triton   op adamw, every variant: one Triton launch a step for every tensor (a program per
//            chunk of 8192 elements of any tensor, found through a table in the workspace;
//            chunks of 4096 a candidate), klab::adamw_update's arithmetic with IEEE sqrt and
//            division; the clip variant adds a sum-of-squares launch a step (1024 partials,
//            summed in one fixed order by every update program: deterministic) (run_triton)
//
// The table (adamw_triton.py's docstring has its layout) is built on the host and copied into
// the workspace once per call, before the first step: one cudaMemcpyAsync of about 64 bytes a
// tensor plus the padded chunk ends, from pageable memory (the runtime stages it before the
// call returns, so the host buffer may go at once; to stage it the driver may first wait
// for the stream's earlier work). What it costs is one more operation on the stream, a
// copy's latency, not its bytes; every step after the first reuses the table
// (step s finds its gradients at g + s · n · 4 bytes). A CUDA graph would replay the copy from
// a host buffer that is gone by then, so the impl refuses a capturing stream (`--graph`).
//
//   klab test 11 --op adamw --impl triton
//   klab bench 11 --op adamw --impl triton,v2_multi_tensor --candidate all
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "klab/error.hpp"
#include "klab/math.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"
#include "training.cuh"

#if KLAB_HAVE_TRITON
#include "adamw_triton.h"
#endif

// The op (inputs, reference, tolerances, shapes): adamw_ops.cu.

namespace lesson11 {
namespace {

using i64 = std::int64_t;

// adamw_triton.py's CHUNKS (the launchers' algo_ids, in this order), SCAN and PARTS.
const std::vector<i64> kChunks = {8192, 4096};
const std::vector<std::string> kChunkNames = {"8192", "4096"};
constexpr i64 kScan = 512;
constexpr i64 kParts = 1024;

// One tensor's row of the table, ROW = 8 int64 words: 64 bytes, so that a row never straddles
// a 128-byte line and a program's six loads of it are one line's.
struct TableRow {
  i64 p, g, m, v, p16, n, first_chunk, unused;
};
static_assert(sizeof(TableRow) == 8 * sizeof(i64), "adamw_triton.py reads 8 words a tensor");

// The workspace: the table, then the chunk ends (int32, padded with INT32_MAX to a multiple
// of SCAN), then the PARTS partials of the clip variant.
struct Layout {
  std::size_t ends, parts, bytes;
};
Layout layout_of(i64 tensors) {
  const auto ends = static_cast<std::size_t>(tensors) * sizeof(TableRow);
  const auto parts = ends + static_cast<std::size_t>(klab::ceil_div(tensors, kScan) * kScan) * sizeof(std::int32_t);
  return {ends, parts, parts + static_cast<std::size_t>(kParts) * sizeof(float)};
}

std::size_t triton_workspace(const klab::Problem& p) { return layout_of(p.shape[1]).bytes; }

// The chunk sizes, by name. Not timed per shape (klab::autotune): every trial launch would
// update p, m and v in place again. The first is the default; `--candidate` runs the other.
std::vector<std::string> triton_candidates(const klab::Problem&) { return kChunkNames; }

#if KLAB_HAVE_TRITON
using Update = CUresult (*)(CUstream, CUdeviceptr, CUdeviceptr, CUdeviceptr, int32_t, int32_t, int32_t, float, float,
                            float, float, float, float, float, float, float, int);

// The update launcher of a variant, with its addresses declared 16-byte aligned or not.
Update update_of(const klab::Problem& p, bool aligned) {
  if (adamw_clips(p)) return aligned ? tr_adamw_clip_aligned : tr_adamw_clip_any;
  if (adamw_copies(p)) return aligned ? tr_adamw_bf16_copy_aligned : tr_adamw_bf16_copy_any;
  return aligned ? tr_adamw_plain_aligned : tr_adamw_plain_any;
}

bool aligned16(i64 address) { return address % 16 == 0; }
#endif

void run_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const klab::Problem& pr = l.problem;
  const i64 tensors = pr.shape[1], steps = pr.shape[2];
  const int algo = l.candidate >= 0 ? l.candidate : 0;
  KLAB_REQUIRE(algo < static_cast<int>(kChunks.size()), "triton adamw: no candidate " + std::to_string(algo));
  KLAB_REQUIRE(tr_adamw_plain_aligned_get_num_algos() == static_cast<int>(kChunks.size()),
               "triton adamw: the launchers do not link kChunks (CHUNKS in adamw_triton.py)");
  if (l.chosen) *l.chosen = kChunkNames[static_cast<std::size_t>(algo)];
  const i64 chunk = kChunks[static_cast<std::size_t>(algo)];
  const std::vector<i64> sizes = adamw_sizes(pr.shape[0], tensors);
  const auto addr = [](const void* q) { return static_cast<i64>(reinterpret_cast<std::uintptr_t>(q)); };

  // The table, and the chunk each tensor ends at.
  std::vector<TableRow> table(static_cast<std::size_t>(tensors));
  std::vector<std::int32_t> ends(static_cast<std::size_t>(klab::ceil_div(tensors, kScan) * kScan), INT32_MAX);
  i64 chunks = 0;
  for (i64 k = 0; k < tensors; ++k) {
    const auto u = static_cast<std::size_t>(k);
    const i64 n = sizes[u];
    table[u] = {addr(l.in[static_cast<std::size_t>(kParam * tensors + k)].data),
                addr(l.in[static_cast<std::size_t>(kGrad * tensors + k)].data),
                addr(l.in[static_cast<std::size_t>(kExpAvg * tensors + k)].data),
                addr(l.in[static_cast<std::size_t>(kExpAvgSq * tensors + k)].data),
                adamw_copies(pr) ? addr(l.out[u].data) : 0,
                n,
                chunks,
                0};
    chunks += klab::ceil_div(n, chunk);
    ends[u] = static_cast<std::int32_t>(chunks);
  }
  if (chunks == 0) return;   // every tensor empty: nothing to update, no norm to take
  KLAB_REQUIRE(chunks <= INT32_MAX, "triton adamw: more than 2^31 - 1 chunks");

  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  KLAB_CHECK_CUDA(cudaStreamIsCapturing(l.stream, &capture));
  KLAB_REQUIRE(capture == cudaStreamCaptureStatusNone,
               "triton adamw: its table is copied from a host buffer that a CUDA graph's replay would no longer find "
               "(time it without --graph)");
  const Layout lay = layout_of(tensors);
  KLAB_REQUIRE(l.workspace_bytes >= lay.bytes, "triton adamw: workspace too small");
  // The table and the ends side by side, as the workspace holds them: one copy.
  std::vector<unsigned char> host(lay.parts);
  std::memcpy(host.data(), table.data(), lay.ends);
  std::memcpy(host.data() + lay.ends, ends.data(), lay.parts - lay.ends);
  auto* ws = static_cast<unsigned char*>(l.workspace);
  KLAB_CHECK_CUDA(cudaMemcpyAsync(ws, host.data(), host.size(), cudaMemcpyHostToDevice, l.stream));

  klab::triton_prepare();
  const auto s = reinterpret_cast<CUstream>(l.stream);
  const auto d_table = reinterpret_cast<CUdeviceptr>(ws);
  const auto d_ends = reinterpret_cast<CUdeviceptr>(ws + lay.ends);
  const auto d_parts = reinterpret_cast<CUdeviceptr>(ws + lay.parts);
  const AdamWHyper h = adamw_hyper(l.scalars);
  const auto t32 = static_cast<int32_t>(tensors), c32 = static_cast<int32_t>(chunks);
  for (i64 step = 0; step < steps; ++step) {
    // Vector accesses when every address the step touches is 16-byte aligned: always at the
    // first step (cudaMalloc aligns each tensor); step s's gradients start s · n · 4 bytes
    // into g, off 16 bytes for an n that is no multiple of 4.
    bool aligned = true;
    for (const TableRow& r : table)
      if (r.n > 0)
        aligned = aligned && aligned16(r.p) && aligned16(r.g + step * r.n * 4) && aligned16(r.m) &&
                  aligned16(r.v) && aligned16(r.p16);
    const auto s32 = static_cast<int32_t>(step);
    if (adamw_clips(pr))
      KLAB_CHECK_CU((aligned ? tr_adamw_sumsq_aligned : tr_adamw_sumsq_any)(s, d_table, d_ends, d_parts, t32, c32, s32,
                                                                          algo));
    const klab::AdamWStep c = adamw_step_at(h, step);
    KLAB_CHECK_CU(update_of(pr, aligned)(s, d_table, d_ends, d_parts, t32, c32, s32, static_cast<float>(h.max_norm),
                                         c.beta1, c.one_minus_beta1, c.beta2, c.one_minus_beta2, c.eps, c.decay,
                                         c.step_size, c.inv_sqrt_bc2, algo));
  }
#else
  (void)l;
  KLAB_REQUIRE(false, "triton adamw: not built");
#endif
}

std::string triton_supports(const klab::Problem&) { return klab::triton_supported(); }

}  // namespace

KLAB_REGISTER(klab::register_impl({.op = "adamw", .name = "triton",
                                   .summary = "Triton, one launch a step for every tensor: a program per chunk, "
                                              "its tensor found in a table in the workspace",
                                   .kind = klab::ImplKind::triton, .supports = triton_supports,
                                   .workspace = triton_workspace, .run = run_triton,
                                   .candidates = triton_candidates}));

}  // namespace lesson11
