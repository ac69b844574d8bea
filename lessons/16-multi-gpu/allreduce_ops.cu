// Lesson 16 — the all-reduce op, its CPU reference, and the per-rank data (allreduce.cuh).
//
//   allreduce   y[r] = Σ_q x[q] for every rank r        {ranks, n}   f32, bf16
//
// Each of `ranks` GPUs contributes one row of n elements and ends with the sum of all rows:
// what data-parallel training does to its gradients after every backward. A shape whose
// ranks exceed the GPUs present is reported unsupported, with the count it needs, so that
// `klab test 16` on one GPU runs the single-rank shapes and says the rest need more.
//
// Bytes are NCCL's bus bytes: an all-reduce of S bytes a rank moves S · 2(R−1)/R bytes over
// each rank's link in the ring's lower bound (R−1 steps of S/R to reduce and R−1 to gather),
// so the GB/s column is the bus bandwidth (busbw), comparable across rank counts; the
// algorithm bandwidth S / t is busbw · R / (2(R−1)).
//
// Tolerance. Every impl adds the R contributions one at a time in some order, rounding each
// partial sum to the dtype (the rings store their partials in the output's type, as NCCL
// does): R−1 roundings of partial sums no larger than Σ|x| <= R (inputs in [-1, 1)), each off
// by at most u · R with u = 2^-24 (fp32) or 2^-8 (bf16, round to nearest):
//   atol = (R − 1) · R · u   (fp32 R = 4: 7.2e-7; bf16 R = 4: 4.7e-2)
// At one or two ranks the one addition is rounded once: rtol = u (bf16: u + 2^-23, below),
// the correctly rounded sum.
// Any contribution missed or taken from the wrong element or row is off by about |x| ~ 0.5
// on most elements, 60 times the bf16 bound at R = 2, and fails. The bound grows as R²: bf16
// is taken up to 8 ranks (0.22; a host has at most 8 GPUs), fp32 up to 1024 (6e-2).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "allreduce.cuh"
#include "klab/error.hpp"
#include "klab/ranks.hpp"
#include "klab/tensor.hpp"

namespace lesson16 {
namespace {

using std::int64_t;
using klab::Dims;

int ranks_of(const klab::Problem& p) { return static_cast<int>(p.shape.at(0)); }

// Shared by every impl: one set of per-rank buffers, reused from impl to impl.
klab::RankBuffers& in_buffers() {
  static klab::RankBuffers b;
  return b;
}
klab::RankBuffers& out_buffers() {
  static klab::RankBuffers b;
  return b;
}
klab::RankBuffers& scratch_buffers() {
  static klab::RankBuffers b;
  return b;
}

double unit_roundoff(klab::DType t) { return t == klab::DType::bf16 ? 0x1p-8 : 0x1p-24; }

klab::Op make_allreduce_op() {
  klab::Op op;
  op.lesson = "16";
  op.name = "allreduce";
  op.summary = "y[r] = sum over ranks of x[q], on every rank (one GPU a rank)";
  op.dims = {"ranks", "n"};
  op.dtypes = {klab::DType::f32, klab::DType::bf16};
  // 0 and 1 element, a prime, sizes that leave a ragged last segment and a ragged chunk in
  // every version; 1 to 4 ranks, and 131 (fp32), a ring far longer than any machine's (the impls
  // that time report the shapes of more ranks than GPUs unsupported, with the count they
  // need; the exercise runs them, ranks sharing GPUs).
  op.test_shapes = {{1, 0},       {1, 1},       {1, 1000003}, {2, 0},  {2, 1},       {2, 7},
                    {2, 1000003}, {2, 9000011}, {3, 1000003}, {4, 17}, {4, 4000037}, {131, 1037}};
  op.no_huge_shape =
      "every rank holds its n elements three times (input, output, staging) and GPU 0 the "
      "harness's x and y of ranks x n: past 2^31 elements a rank that is 26 GB of fp32 on "
      "GPU 0 alone, and the fp64 reference 17 GB a rank on the host; the kernels index with "
      "64-bit integers all the same";
  // n from 2^9 to 2^29 by factors of 4: messages (bytes a rank) of 2 KB to 2 GB in fp32,
  // 1 KB to 1 GB in bf16; 2 ranks (`--shape 4x...` where a machine has more GPUs).
  for (int64_t n = 512; n <= (int64_t{1} << 29); n *= 4) op.bench_shapes.push_back({2, n});
  op.seeds = 2;
  op.baseline = "nccl";
  op.tour = {"v1_ring_memcpy", "v3_ring_p2p"};
  op.bound = klab::Bound::link;
  op.inputs = [](const klab::Problem& p) {
    return std::vector<klab::TensorSpec>{{"x", p.dtype, {p.shape[0], p.shape[1]}}};
  };
  op.outputs = [](const klab::Problem& p) {
    return std::vector<klab::TensorSpec>{{"y", p.dtype, {p.shape[0], p.shape[1]}}};
  };
  op.reference = [](const klab::Problem& p, const klab::Inputs& in) {
    const int R = ranks_of(p);
    const int64_t n = p.shape[1];
    const klab::HostTensor& x = in.tensors[0];
    klab::RefArray y(static_cast<std::size_t>(R * n));
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int q = 0; q < R; ++q) s += x.get(q * n + i);
      for (int r = 0; r < R; ++r) y[r * n + i] = s;
    }
    return klab::single_output(std::move(y));
  };
  op.tolerance = [](const klab::Problem& p, int) {
    const double R = ranks_of(p);
    klab::Tolerance t;
    if (R <= 2) {
      // One addition, added in fp32 and rounded once to the dtype: within half an ulp of the
      // exact sum (bf16: plus the fp32 add's own 2^-24, whose rounding can move a sum across
      // a bf16 tie). So every version, NCCL's included, must return the correctly rounded
      // sum, and at two ranks they agree bit for bit but at such ties.
      t.rtol = p.dtype == klab::DType::bf16 ? unit_roundoff(p.dtype) + 0x1p-23 : unit_roundoff(p.dtype);
      return t;
    }
    t.atol = (R - 1) * R * unit_roundoff(p.dtype);
    return t;
  };
  op.bytes = [](const klab::Problem& p) {
    const double R = ranks_of(p);
    return static_cast<double>(p.shape[1]) * klab::dtype_size(p.dtype) * 2 * (R - 1) / R;
  };
  op.validate = [](const klab::Problem& p) -> std::string {
    if (p.shape.size() != 2) return "allreduce takes {ranks, n}";
    if (p.shape[0] < 1 || p.shape[0] > 1024) return "ranks must be 1 to 1024";
    if (p.shape[1] < 0) return "n must be >= 0";
    if (p.dtype == klab::DType::bf16 && p.shape[0] > 8)
      return "bf16 takes at most 8 ranks: the rounding bound of its partial sums, (R - 1) R 2^-8, "
             "passes 0.22 there and would hide a wrong sum (fp32 takes up to 1024)";
    return "";
  };
  return op;
}

}  // namespace

Segment segment(int64_t n, int ranks, int s) {
  const int64_t per = (n + ranks - 1) / ranks;
  const int64_t size = (per + 7) / 8 * 8;
  const int64_t begin = std::min<int64_t>(n, s * size);
  return {begin, std::min<int64_t>(n, begin + size) - begin};
}

RingStep ring_step(int r, int k, int ranks) {
  const int R = ranks;
  if (k < R - 1) return {((r - 1 - k) % R + R) % R, true, k == 0};
  const int g = k - (R - 1);
  return {((r - g) % R + R) % R, false, false};
}

int ring_steps(int ranks) { return 2 * (ranks - 1); }

RankIO rank_io(const klab::Launch& l) {
  RankIO io;
  io.ranks = ranks_of(l.problem);
  io.n = l.problem.shape[1];
  io.elem = klab::dtype_size(l.problem.dtype);
  io.in.push_back(l.in[0].data);
  io.out.push_back(l.out[0].data);
  for (int r = 1; r < io.ranks; ++r) {
    io.in.push_back(in_buffers().get(r, io.bytes()));
    io.out.push_back(out_buffers().get(r, io.bytes()));
  }
  return io;
}

void copy_own(const RankIO& io, cudaStream_t launch) {
  if (io.bytes()) KLAB_CHECK_CUDA(cudaMemcpyAsync(io.out[0], io.in[0], io.bytes(), cudaMemcpyDeviceToDevice, launch));
}

void* rank_scratch(int r, std::size_t bytes) { return scratch_buffers().get(r, bytes); }

void stage(const klab::Launch& l) {
  const RankIO io = rank_io(l);
  if (io.ranks == 1) return;
  for (int r = 1; r < io.ranks; ++r) {
    if (io.bytes() == 0) continue;
    const auto* x = static_cast<const char*>(l.in[0].data) + r * io.bytes();
    const auto* y = static_cast<const char*>(l.out[0].data) + r * io.bytes();
    KLAB_CHECK_CUDA(cudaMemcpyPeerAsync(const_cast<void*>(io.in[r]), klab::rank_device(r), x, 0, io.bytes(), l.stream));
    KLAB_CHECK_CUDA(cudaMemcpyPeerAsync(io.out[r], klab::rank_device(r), y, 0, io.bytes(), l.stream));
  }
  klab::Ranks::of(io.ranks).flush_l2(l.stream);
}

void gather(const klab::Launch& l) {
  const RankIO io = rank_io(l);
  for (int r = 1; r < io.ranks; ++r) {
    if (io.bytes() == 0) continue;
    auto* y = static_cast<char*>(l.out[0].data) + r * io.bytes();
    KLAB_CHECK_CUDA(cudaMemcpyPeerAsync(y, 0, io.out[r], klab::rank_device(r), io.bytes(), l.stream));
  }
}

KLAB_REGISTER(klab::register_lesson({.id = "16",
                                     .slug = "multi-gpu",
                                     .title = "Multi-GPU: NCCL's all-reduce, a ring written by hand, and a data-parallel step",
                                     .exercise_op = "allreduce",
                                     .exercise_reference = "v3_ring_p2p",
                                     .exercise_hint = "lessons/16-multi-gpu/exercise.cu"}));
KLAB_REGISTER(klab::register_op(make_allreduce_op()));

}  // namespace lesson16
