// CPU tests of the harness's verification rules, with ops and CPU impls built here (never
// registered, so the registry-wide tests do not see them): the poison is chosen so that no
// legal answer equals it, in-out inputs are restored and checked, every candidate of an
// impl is verified, a failing reference is an error of that case only, and a sampled
// check still finds unwritten elements outside its sample.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "klab/error.hpp"
#include "klab/harness.hpp"

using namespace klab;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A one-output op over n elements of `out_dtype` whose reference is `ref_of(i)`.
Op op_with_reference(DType out_dtype, std::function<double(std::int64_t)> ref_of) {
  Op op;
  op.lesson = "t";
  op.name = "t_op";
  op.dims = {"n"};
  op.dtypes = {DType::f32};
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", DType::f32, p.shape}}; };
  op.outputs = [out_dtype](const Problem& p) { return std::vector<TensorSpec>{{"y", out_dtype, p.shape}}; };
  op.reference = [ref_of](const Problem& p, const Inputs&) {
    RefArray r(static_cast<std::size_t>(p.shape[0]));
    for (std::int64_t i = 0; i < p.shape[0]; ++i) r[static_cast<std::size_t>(i)] = ref_of(i);
    return Reference{r};
  };
  op.tolerance = [](const Problem&, int) { return Tolerance{0, 0}; };
  return op;
}

// A CPU impl that writes the reference to every element except `skip` (-1: none).
Impl cpu_impl(const Op& op, std::int64_t skip, std::string name = "cpu_test") {
  Impl im;
  im.op = op.name;
  im.name = std::move(name);
  im.kind = ImplKind::cpu;
  im.run = [&op, skip](const Launch& l) {
    Inputs dummy;
    const Reference ref = op.reference(l.problem, dummy);
    for (std::int64_t i = 0; i < l.out[0].numel(); ++i)
      if (i != skip) store_from_double(l.out[0].data, l.out[0].dtype, i, ref[0][static_cast<std::size_t>(i)]);
  };
  return im;
}

RunOptions quiet() {
  RunOptions o;
  o.run_seed = 1234;
  o.seeds = {1};
  o.progress = false;
  return o;
}

Status verify_one(const Op& op, const Impl& im, std::int64_t n, const RunOptions& o = quiet()) {
  const auto recs = verify({Case{&op, {&im}, Problem{{n}, DType::f32, ""}}}, o);
  Status worst = Status::pass;
  for (const auto& r : recs)
    if (r.status != Status::pass) worst = r.status;
  return worst;
}

}  // namespace

// ---- poison ------------------------------------------------------------------------------

TEST(Poison, NaNIsFirstWhereTheReferenceIsFinite) {
  const auto ranked = rank_poisons(DType::f32, std::vector<double>{1.0, -2.0, 0.0}, Tolerance{1e-6, 1e-5});
  EXPECT_EQ(ranked.front().first, 0xFF);
  EXPECT_EQ(ranked.front().second, 0);
}

TEST(Poison, AvoidsALegalNaNAndALegalMinusOne) {
  // The mean of nothing is NaN and 0xFF bytes are NaN: another pattern must be used.
  EXPECT_NE(rank_poisons(DType::f32, std::vector<double>{kNaN}, Tolerance{0, 0}).front().first, 0xFF);
  EXPECT_EQ(rank_poisons(DType::f32, std::vector<double>{kNaN}, Tolerance{0, 0}).front().second, 0);
  // The argmax index of nothing is -1, which is 0xFF bytes in i32.
  EXPECT_NE(rank_poisons(DType::i32, std::vector<double>{-1}, Tolerance{0, 0}).front().first, 0xFF);
  EXPECT_EQ(rank_poisons(DType::i32, std::vector<double>{-1}, Tolerance{0, 0}).front().second, 0);
}

TEST(Poison, UnwrittenNaNMeanFails) {
  const Op op = op_with_reference(DType::f32, [](std::int64_t) { return kNaN; });
  EXPECT_EQ(verify_one(op, cpu_impl(op, -1), 1), Status::pass);
  EXPECT_EQ(verify_one(op, cpu_impl(op, 0), 1), Status::fail);   // writes nothing
}

TEST(Poison, UnwrittenMinusOneIndexFails) {
  const Op op = op_with_reference(DType::i32, [](std::int64_t) { return -1; });
  EXPECT_EQ(verify_one(op, cpu_impl(op, -1), 1), Status::pass);
  EXPECT_EQ(verify_one(op, cpu_impl(op, 0), 1), Status::fail);
}

TEST(Poison, EveryByteValueLegalNeedsTwoLaunches) {
  // A u8 output that holds every byte value accepts every single pattern somewhere; the
  // harness launches twice with two patterns, and an unwritten element fails either way.
  const Op op = op_with_reference(DType::u8, [](std::int64_t i) { return static_cast<double>(i % 256); });
  EXPECT_EQ(verify_one(op, cpu_impl(op, -1), 512), Status::pass);
  for (std::int64_t skip : {0, 127, 255, 0xA5, 256 + 0x7F, 511})
    EXPECT_EQ(verify_one(op, cpu_impl(op, skip), 512), Status::fail) << "unwritten element " << skip;
}

// ---- in-out inputs -------------------------------------------------------------------------

namespace {
// x += 1 in place (an optimizer-style update); the reference is the updated x.
Op inout_op() {
  Op op;
  op.lesson = "t";
  op.name = "t_inplace";
  op.dims = {"n"};
  op.dtypes = {DType::f32};
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", DType::f32, p.shape, Init::inout}}; };
  op.outputs = [](const Problem&) { return std::vector<TensorSpec>{}; };
  op.reference = [](const Problem&, const Inputs& in) {
    RefArray r(static_cast<std::size_t>(in.tensors[0].numel()));
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = in.tensors[0].get(static_cast<std::int64_t>(i)) + 1;
    return Reference{r};
  };
  op.tolerance = [](const Problem&, int) { return Tolerance{1e-6, 1e-6}; };
  return op;
}
Impl inout_impl(float add) {
  Impl im;
  im.op = "t_inplace";
  im.name = "cpu_inplace";
  im.kind = ImplKind::cpu;
  im.run = [add](const Launch& l) {
    for (std::int64_t i = 0; i < l.in[0].numel(); ++i) l.in[0].as<float>()[i] += add;
  };
  return im;
}
}  // namespace

TEST(InOut, UpdatedInPlaceIsCheckedAndTheInputsStayPristine) {
  const Op op = inout_op();
  const Impl good = inout_impl(1.f), none = inout_impl(0.f), twice = inout_impl(2.f);
  RunOptions o = quiet();
  o.seeds = {1, 2, 3};
  // Three seeds and a run seed: each check starts from freshly generated x, and a second
  // impl on the same inputs still sees the pristine x (the first one's update is not kept).
  const auto recs = verify({Case{&op, {&good, &good}, Problem{{100}, DType::f32, ""}}}, o);
  ASSERT_EQ(recs.size(), 8u);
  for (const auto& r : recs) EXPECT_EQ(r.status, Status::pass) << r.message;
  EXPECT_EQ(verify_one(op, none, 100), Status::fail);
  EXPECT_EQ(verify_one(op, twice, 100), Status::fail);
}

// ---- candidates --------------------------------------------------------------------------

namespace {
// Candidate 0 ("good") and the impl's own choice are right; candidate 1 ("bad") is off by
// one in its last element, as a wrong tile configuration would be.
Impl with_candidates(const Op& op) {
  Impl im;
  im.op = op.name;
  im.name = "cpu_tuned";
  im.kind = ImplKind::cpu;
  im.candidates = [](const Problem&) { return std::vector<std::string>{"good", "bad"}; };
  im.run = [&op](const Launch& l) {
    Inputs dummy;
    const Reference ref = op.reference(l.problem, dummy);
    for (std::int64_t i = 0; i < l.out[0].numel(); ++i)
      store_from_double(l.out[0].data, l.out[0].dtype, i, ref[0][static_cast<std::size_t>(i)]);
    if (l.candidate == 1 && l.out[0].numel() > 0) l.out[0].as<float>()[l.out[0].numel() - 1] += 1.f;
  };
  return im;
}
}  // namespace

TEST(Candidates, EveryCandidateIsVerified) {
  const Op op = op_with_reference(DType::f32, [](std::int64_t i) { return static_cast<double>(i); });
  const Impl im = with_candidates(op);
  const auto recs = verify({Case{&op, {&im}, Problem{{10}, DType::f32, ""}}}, quiet());
  int bad_failed = 0, others_passed = 0;
  for (const auto& r : recs) {
    if (r.candidate == "bad") bad_failed += r.status == Status::fail;
    else others_passed += r.status == Status::pass;
  }
  EXPECT_EQ(recs.size(), 6u);     // (own choice, good, bad) x (seed 1, run seed)
  EXPECT_EQ(bad_failed, 2);
  EXPECT_EQ(others_passed, 4);
}

TEST(Candidates, OneCandidateByName) {
  const Op op = op_with_reference(DType::f32, [](std::int64_t i) { return static_cast<double>(i); });
  const Impl im = with_candidates(op);
  RunOptions o = quiet();
  o.candidate = "good";
  auto recs = verify({Case{&op, {&im}, Problem{{10}, DType::f32, ""}}}, o);
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) EXPECT_EQ(r.status, Status::pass) << r.message;
  o.candidate = "nope";
  recs = verify({Case{&op, {&im}, Problem{{10}, DType::f32, ""}}}, o);
  for (const auto& r : recs) EXPECT_EQ(r.status, Status::unsupported);
}

// ---- failures stay in their case ---------------------------------------------------------

TEST(Failures, AThrowingReferenceIsAnErrorOfItsCaseOnly) {
  Op bad = op_with_reference(DType::f32, [](std::int64_t) { return 0.0; });
  bad.reference = [](const Problem&, const Inputs&) -> Reference { throw std::runtime_error("reference exploded"); };
  const Op good = op_with_reference(DType::f32, [](std::int64_t) { return 2.0; });
  const Impl bad_im = cpu_impl(bad, -1), good_im = cpu_impl(good, -1);
  const auto recs = verify({Case{&bad, {&bad_im}, Problem{{4}, DType::f32, ""}},
                            Case{&good, {&good_im}, Problem{{4}, DType::f32, ""}}},
                           quiet());
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[0].status, Status::error);
  EXPECT_NE(recs[0].message.find("reference exploded"), std::string::npos) << recs[0].message;
  EXPECT_EQ(recs[2].status, Status::pass);
  EXPECT_EQ(recs[3].status, Status::pass);
}

TEST(Failures, FailLinesCarryTheSeed) {
  const Op op = op_with_reference(DType::f32, [](std::int64_t) { return 1.0; });
  std::vector<std::string> lines;
  RunOptions o = quiet();
  o.log = [&](const std::string& l) { lines.push_back(l); };
  const Impl im = cpu_impl(op, 0);
  (void)verify({Case{&op, {&im}, Problem{{3}, DType::f32, ""}}}, o);
  ASSERT_FALSE(lines.empty());
  for (const auto& l : lines) EXPECT_NE(l.find("seed "), std::string::npos) << l;
}

// ---- sampled references ------------------------------------------------------------------

TEST(Sampled, UnwrittenElementOutsideTheSampleFails) {
  Op op = op_with_reference(DType::f32, [](std::int64_t i) { return static_cast<double>(i); });
  op.sample_only = [](const Problem&) { return true; };
  op.reference_sample = [](const Problem&, const Inputs&, std::uint64_t) {
    return std::vector<SampledReference>{{{0, 1, 2}, {0, 1, 2}}};   // only the first three
  };
  EXPECT_EQ(verify_one(op, cpu_impl(op, -1), 100), Status::pass);
  EXPECT_EQ(verify_one(op, cpu_impl(op, 77), 100), Status::fail);   // outside the sample
}

TEST(Sampled, PropertiesAreCheckedToo) {
  Op op = op_with_reference(DType::f32, [](std::int64_t i) { return static_cast<double>(i); });
  op.sample_only = [](const Problem&) { return true; };
  op.reference_sample = [](const Problem&, const Inputs&, std::uint64_t) {
    return std::vector<SampledReference>{{{0}, {0}}};
  };
  op.properties = [](const Problem&, const Inputs&, const std::vector<HostTensor>& out) {
    return out[0].get(50) == 50 ? std::string() : std::string("y[50] != 50");
  };
  Impl im = cpu_impl(op, -1);
  EXPECT_EQ(verify_one(op, im, 100), Status::pass);
  im.run = [](const Launch& l) {
    for (std::int64_t i = 0; i < l.out[0].numel(); ++i) l.out[0].as<float>()[i] = i == 50 ? 49.f : static_cast<float>(i);
  };
  EXPECT_EQ(verify_one(op, im, 100), Status::fail);
}

// ---- impls judged by properties (a vendor random generator) --------------------------------

// An op whose valid outputs are any y with y[i] in {0, i} (a mask of its own draw), and whose
// reference is one such draw (all kept).
Op op_with_masked_outputs() {
  Op op = op_with_reference(DType::f32, [](std::int64_t i) { return static_cast<double>(i); });
  op.properties = [](const Problem&, const Inputs&, const std::vector<HostTensor>& out) {
    for (std::int64_t i = 0; i < out[0].numel(); ++i)
      if (const double v = out[0].get(i); v != 0.0 && v != static_cast<double>(i))
        return "y[" + std::to_string(i) + "] is neither 0 nor " + std::to_string(i);
    return std::string();
  };
  return op;
}

// Writes i where (i % 3) != 0 and 0 elsewhere: a valid output that is not the reference.
Impl other_draw_impl(bool judged_by_properties) {
  Impl im;
  im.op = "t_op";
  im.name = "other_draw";
  im.kind = ImplKind::cpu;
  im.judged_by_properties = judged_by_properties;
  im.run = [](const Launch& l) {
    for (std::int64_t i = 0; i < l.out[0].numel(); ++i) l.out[0].as<float>()[i] = i % 3 ? static_cast<float>(i) : 0.f;
  };
  return im;
}

TEST(JudgedByProperties, AnotherValidDrawPassesOnlyWhenSoMarked) {
  const Op op = op_with_masked_outputs();
  EXPECT_EQ(verify_one(op, other_draw_impl(false), 100), Status::fail);   // compared: differs
  EXPECT_EQ(verify_one(op, other_draw_impl(true), 100), Status::pass);
}

TEST(JudgedByProperties, AnInvalidOrUnwrittenOutputFails) {
  const Op op = op_with_masked_outputs();
  Impl im = other_draw_impl(true);
  im.run = [](const Launch& l) {   // one element off by one
    for (std::int64_t i = 0; i < l.out[0].numel(); ++i) l.out[0].as<float>()[i] = i == 41 ? 42.f : static_cast<float>(i);
  };
  EXPECT_EQ(verify_one(op, im, 100), Status::fail);
  im.run = [](const Launch& l) {   // the last element unwritten (still the poison)
    for (std::int64_t i = 0; i + 1 < l.out[0].numel(); ++i) l.out[0].as<float>()[i] = static_cast<float>(i);
  };
  EXPECT_EQ(verify_one(op, im, 100), Status::fail);
}

TEST(JudgedByProperties, FailsWhereTheOpHasNoProperties) {
  const Op op = op_with_reference(DType::f32, [](std::int64_t i) { return static_cast<double>(i); });
  Impl im = cpu_impl(op, -1);
  im.judged_by_properties = true;   // even an exact output: nothing can judge it
  EXPECT_EQ(verify_one(op, im, 100), Status::fail);
}

// Op::tolerance_at_ref: the bound comes from the check's reference (here a tenth of its
// largest element), replaces Op::tolerance, and a caller that gives no reference is refused.
TEST(Harness, ToleranceFromTheReference) {
  Op op = op_with_reference(DType::f32, [](std::int64_t i) { return static_cast<double>(i); });
  op.tolerance_at_ref = [](const Problem&, int, const std::vector<std::span<const double>>& ref) {
    double most = 0;
    for (double v : ref.at(0)) most = std::max(most, std::fabs(v));
    return Tolerance{0.1 * most, 0};
  };
  const Problem p{{11}, DType::f32, ""};
  const Inputs in = make_inputs(op, p, 1);
  const Reference ref = op.reference(p, in);
  HostTensor out(DType::f32, {11});
  for (std::int64_t i = 0; i < 11; ++i) out.set(i, static_cast<double>(i) + 0.9);   // under 10 · 0.1
  VerifyRecord rec;
  judge(op, p, in, ref, {out}, rec);
  EXPECT_EQ(rec.status, Status::pass) << rec.message;   // Op::tolerance (exact) would fail it
  out.set(3, 3 + 1.1);
  judge(op, p, in, ref, {out}, rec);
  EXPECT_EQ(rec.status, Status::fail);
  EXPECT_THROW(tolerance_for(op, nullptr, p, 0, DType::f32), Error);
}
