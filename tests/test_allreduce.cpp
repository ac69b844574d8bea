// CPU tests of lesson 16's ring all-reduce (allreduce_ops.cu, ring.cu): its schedule, run on
// the host, gives every rank the sum within the op's tolerance and has no race under the
// ordering the GPU code enforces; each mistake below fails.
//
// The host run takes the lesson's own schedule (lesson16::ring_step, lesson16::segment) and
// executes it step by step, every rank's reads of a step before any of its writes, rounding
// each partial sum to the dtype as the kernels do (fp32 add, one rounding). The ordering is
// checked separately: step k of rank r runs after step k−1 of ranks r−1 and r
// (klab::Ranks::ring_step), so an access of step k' by rank b is ordered after one of step
// k < k' by rank a when b is at most k' − k places after a around the ring. Two accesses of
// one element, one a write, by different ranks or steps must be so ordered.
//
// Mistakes that must fail: at two ranks, a bf16 sum truncated instead of rounded; the reduce
// working on segment (r − k) instead of (r − 1 − k); the
// gather copying a segment its neighbour does not yet hold complete; a ragged last segment one element short (left
// poisoned); every rank's result shifted by one element; and, for the ordering, steps with
// no wait between ranks (rank r would read rank r−1's partial before it is written). Also:
// the op's bus bytes and rank limits, and klab/ranks.hpp's GPU count and rank placement.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../lessons/16-multi-gpu/allreduce.cuh"
#include "klab/harness.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/ranks.hpp"
#include "test_util.hpp"

using namespace klab;
using lesson16::RingStep;

namespace {

using i64 = std::int64_t;
using Plan = std::function<RingStep(int r, int k, int ranks)>;

#define ALLREDUCE_OP(var)                                                                  \
  const Op* var##_ptr = registry().find_op("allreduce");                                  \
  if (!var##_ptr) GTEST_SKIP() << "allreduce: lesson 16 is not in this build";             \
  const Op& var = *var##_ptr

struct Mistake {
  bool short_last = false;   // the last segment one element short
  bool shifted = false;      // every result one element late
  bool truncated = false;    // the fp32 sum cut to bf16 (round toward zero) instead of rounded
};

// The fp32 sum as a kernel that drops the low 16 bits would store it in bf16.
double truncate_to_bf16(double v) {
  float f = static_cast<float>(v);
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits &= 0xFFFF0000u;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Rank r's result, row r of y, as the GPU computes it under `plan`.
std::vector<HostTensor> ring_on_host(const Problem& p, const Inputs& in, const Plan& plan, Mistake mk = {}) {
  const int R = static_cast<int>(p.shape[0]);
  const i64 n = p.shape[1];
  const HostTensor& x = in.tensors[0];
  const double poison = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::vector<double>> out(R, std::vector<double>(n, poison));
  auto in_at = [&](int r, i64 i) { return x.get(r * n + i); };
  if (R == 1)
    for (i64 i = 0; i < n; ++i) out[0][i] = in_at(0, i);
  for (int k = 0; k < lesson16::ring_steps(R); ++k) {
    std::vector<std::vector<double>> next = out;   // every read of the step sees the state before it
    for (int r = 0; r < R; ++r) {
      const RingStep st = plan(r, k, R);
      const int left = (r + R - 1) % R;
      auto s = lesson16::segment(n, R, st.segment);
      if (mk.short_last && s.begin + s.count == n && s.count > 0) --s.count;
      for (i64 i = s.begin; i < s.begin + s.count; ++i)
        if (!st.reduce) {
          next[r][i] = out[left][i];
        } else {
          const double sum = in_at(r, i) + (st.from_input ? in_at(left, i) : out[left][i]);
          next[r][i] = mk.truncated ? truncate_to_bf16(sum) : round_to(p.dtype, sum);
        }
    }
    out = std::move(next);
  }
  HostTensor y(p.dtype, {R, n});
  for (int r = 0; r < R; ++r)
    for (i64 i = 0; i < n; ++i) y.set(r * n + i, out[r][mk.shifted ? (i + 1) % n : i]);
  return {std::move(y)};
}

std::string run_and_check(const Op& op, const Problem& p, const Plan& plan, Mistake mk = {}) {
  const Inputs in = make_inputs(op, p, 7);
  const Reference ref = op.reference(p, in);
  return klab_test::check(op, p, in, ref, ring_on_host(p, in, plan, mk));
}

const Plan kLesson = lesson16::ring_step;

const std::vector<Dims> kShapes = {{1, 0}, {1, 5},  {2, 1},  {2, 7},    {2, 1000}, {3, 17},
                                   {3, 1003}, {4, 9}, {4, 4099}, {5, 77}, {7, 1000}, {8, 4096}};

// The order the GPU code gives: step k of rank r runs after its own step k−1 and, where the
// ring steps wait (`waits`), after step k−1 of rank r−1; so a before b when b's step is later
// by at least the distance from a forward to b.
bool ordered(int a, int ka, int b, int kb, int R, bool waits) {
  if (kb <= ka) return false;
  if (a == b) return true;
  return waits && ((b - a) % R + R) % R <= kb - ka;
}

// The first pair of conflicting accesses that the order leaves unordered, or "".
std::string race(int R, i64 n, const Plan& plan, bool waits) {
  struct Access { int rank, step; bool write; int owner; bool input; i64 begin, count; };
  std::vector<Access> acc;
  for (int k = 0; k < lesson16::ring_steps(R); ++k)
    for (int r = 0; r < R; ++r) {
      const RingStep st = plan(r, k, R);
      const auto s = lesson16::segment(n, R, st.segment);
      if (s.count == 0) continue;
      const int left = (r + R - 1) % R;
      acc.push_back({r, k, true, r, false, s.begin, s.count});
      acc.push_back({r, k, false, left, st.from_input, s.begin, s.count});
    }
  for (std::size_t i = 0; i < acc.size(); ++i)
    for (std::size_t j = i + 1; j < acc.size(); ++j) {
      const Access &a = acc[i], &b = acc[j];
      if (!(a.write || b.write) || a.owner != b.owner || a.input != b.input) continue;
      if (a.begin >= b.begin + b.count || b.begin >= a.begin + a.count) continue;
      if (a.rank == b.rank && a.step == b.step) continue;
      if (!ordered(a.rank, a.step, b.rank, b.step, R, waits) && !ordered(b.rank, b.step, a.rank, a.step, R, waits))
        return "rank " + std::to_string(a.rank) + " step " + std::to_string(a.step) + " and rank " +
               std::to_string(b.rank) + " step " + std::to_string(b.step) + " touch rank " + std::to_string(a.owner) +
               "'s output unordered";
    }
  return "";
}

}  // namespace

TEST(Allreduce, SegmentsTileTheMessageOnSixteenByteBoundaries) {
  for (int R = 1; R <= 8; ++R)
    for (i64 n : {i64{0}, i64{1}, i64{7}, i64{8}, i64{9}, i64{17}, i64{1000}, i64{1000003}}) {
      i64 next = 0;
      for (int s = 0; s < R; ++s) {
        const auto seg = lesson16::segment(n, R, s);
        EXPECT_EQ(seg.begin, next) << R << " ranks, n " << n << ", segment " << s;
        if (seg.count > 0) EXPECT_EQ(seg.begin % 8, 0) << "segment " << s << " starts off a 16-byte boundary";
        EXPECT_GE(seg.count, 0);
        next = seg.begin + seg.count;
      }
      EXPECT_EQ(next, n) << R << " ranks: the segments leave elements out";
    }
}

TEST(Allreduce, RingGivesEveryRankTheSumWithinTolerance) {
  ALLREDUCE_OP(op);
  for (DType t : {DType::f32, DType::bf16})
    for (const Dims& s : kShapes) {
      const Problem p{s, t, ""};
      EXPECT_EQ(run_and_check(op, p, kLesson), "") << p.label();
    }
}

TEST(Allreduce, RingMistakesFail) {
  ALLREDUCE_OP(op);
  const Plan wrong_segment = [](int r, int k, int R) {
    RingStep st = lesson16::ring_step(r, k, R);
    if (st.reduce) st.segment = ((r - k) % R + R) % R;
    return st;
  };
  for (DType t : {DType::f32, DType::bf16})
    for (const Dims& s : kShapes) {
      const Problem p{s, t, ""};
      if (s[1] == 0) continue;                    // nothing to get wrong
      if (s[0] > 1) EXPECT_NE(run_and_check(op, p, wrong_segment), "") << "reduce on segment r-k: " << p.label();
      if (s[1] > 1) EXPECT_NE(run_and_check(op, p, kLesson, {.shifted = true}), "") << "shifted: " << p.label();
      if (s[0] > 1) EXPECT_NE(run_and_check(op, p, kLesson, {.short_last = true}), "") << "last segment short: " << p.label();
    }
}

// At two ranks the tolerance is half an ulp of the exact sum (allreduce_ops.cu): a kernel
// that truncates instead of rounding is off by up to an ulp on about half the elements.
TEST(Allreduce, TwoRanksMustRoundCorrectly) {
  ALLREDUCE_OP(op);
  for (const Dims& s : kShapes)
    if (s[0] == 2 && s[1] >= 7) {
      const Problem p{s, DType::bf16, ""};
      EXPECT_EQ(run_and_check(op, p, kLesson), "") << p.label();
      EXPECT_NE(run_and_check(op, p, kLesson, {.truncated = true}), "") << "truncated: " << p.label();
    }
}

TEST(Allreduce, GatherOfAnIncompleteSegmentFails) {
  ALLREDUCE_OP(op);
  // The gather copying a segment two places on, which rank r−1 does not yet hold complete.
  const Plan wrong_gather = [](int r, int k, int R) {
    RingStep st = lesson16::ring_step(r, k, R);
    if (!st.reduce) st.segment = (st.segment + 2) % R;
    return st;
  };
  for (const Dims& s : kShapes)
    if (s[0] >= 3 && s[1] >= 8 * s[0]) EXPECT_NE(run_and_check(op, Problem{s, DType::f32, ""}, wrong_gather), "") << s[0];
}

TEST(Allreduce, RingStepOrderLeavesNoRace) {
  for (int R = 1; R <= 8; ++R) {
    EXPECT_EQ(race(R, 1000, kLesson, true), "") << R << " ranks";
    if (R >= 2) EXPECT_NE(race(R, 1000, kLesson, false), "") << R << " ranks, no wait between the ranks' steps";
  }
}

// klab/ranks.hpp on whatever machine runs the tests (none, one or several GPUs): a job of R
// ranks needs R GPUs, and rank r runs on GPU r mod G.
TEST(Ranks, NeedAGpuEachAndWrapAround) {
  const int g = gpu_count();
  EXPECT_EQ(require_gpus(g > 0 ? g : 1) == "", g > 0);
  const std::string why = require_gpus(g + 1);
  EXPECT_NE(why.find("needs " + std::to_string(g + 1) + " GPUs; this machine has " + std::to_string(g)), std::string::npos)
      << why;
  for (int r = 0; r < 10; ++r) EXPECT_EQ(rank_device(r), g > 0 ? r % g : 0) << r;
  if (g == 0) EXPECT_THROW(Ranks::of(2), Error);
}

// The op's counts and limits: bus bytes 2(R − 1)/R of a rank's message (none for one rank),
// bf16 up to 8 ranks, fp32 up to 1024.
TEST(Allreduce, BusBytesAndRankLimits) {
  ALLREDUCE_OP(op);
  EXPECT_EQ(op.bytes(Problem{{1, 1000}, DType::f32, ""}), 0.0);
  EXPECT_EQ(op.bytes(Problem{{2, 1000}, DType::f32, ""}), 4000.0);
  EXPECT_EQ(op.bytes(Problem{{4, 1000}, DType::bf16, ""}), 3000.0);
  EXPECT_EQ(op.validate(Problem{{8, 10}, DType::bf16, ""}), "");
  EXPECT_NE(op.validate(Problem{{9, 10}, DType::bf16, ""}), "");
  EXPECT_EQ(op.validate(Problem{{1024, 10}, DType::f32, ""}), "");
  EXPECT_NE(op.validate(Problem{{1025, 10}, DType::f32, ""}), "");
  EXPECT_NE(op.validate(Problem{{0, 10}, DType::f32, ""}), "");
}
