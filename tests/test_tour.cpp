// The tour that `klab run` runs without --full (plan.hpp): every op declares it, and the plan
// keeps to it, so the main job stays a few minutes however many lessons are added.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "klab/harness.hpp"
#include "klab/plan.hpp"
#include "klab/report.hpp"

namespace {

using namespace klab;

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The debugging catalog's ops (debugging/) have no impl but their cases' broken kernels,
// which are exercises: the tour has nothing of them to run, and does not.
bool in_catalog(const Op& op) {
  const Lesson* l = registry().find_lesson(op.lesson);
  return l && !l->folder.empty();
}

TEST(Tour, EveryOpNamesRegisteredImplsWithACudaVersion) {
  for (const Op& op : registry().ops()) {
    if (in_catalog(op)) {
      EXPECT_TRUE(op.tour.empty()) << op.name;
      continue;
    }
    ASSERT_FALSE(op.tour.empty()) << op.name << ": no Op::tour (the impls `klab run` benches)";
    bool cuda = false;
    for (const auto& name : op.tour) {
      const Impl* im = registry().find_impl(op.name, name);
      ASSERT_NE(im, nullptr) << op.name << ": tour names '" << name << "', which is not registered";
      EXPECT_NE(im->kind, ImplKind::exercise) << op.name << ": the tour never runs the exercise";
      cuda = cuda || im->kind == ImplKind::cuda;
    }
    EXPECT_TRUE(cuda) << op.name << ": the tour benches none of the lesson's own CUDA versions";
    if (!op.baseline.empty()) EXPECT_NE(registry().find_impl(op.name, op.baseline), nullptr) << op.name;
  }
}

TEST(Tour, VerifiesEveryOpAtSmallTestShapesOnly) {
  Selection sel;
  sel.tour = true;
  const Plan p = make_plan(sel, false, {});
  std::set<std::string> ops;
  std::map<std::string, int> shapes_full, shapes_tour;
  for (const Case& c : p.cases) {
    EXPECT_LE(largest_tensor(*c.op, c.problem), kTourMaxElems) << c.op->name << " " << c.problem.label();
    ops.insert(c.op->name);
    ++shapes_tour[c.op->name];
  }
  for (const Op& op : registry().ops())
    EXPECT_EQ(ops.count(op.name), in_catalog(op) ? 0u : 1u) << op.name << (in_catalog(op) ? " (a debugging case) is" : " is not")
                                                            << " verified by the tour";
  // It is a subset: the full plan has every one of these cases and more (the huge shapes).
  Selection full;
  for (const Case& c : make_plan(full, false, {}).cases) ++shapes_full[c.op->name];
  std::size_t fewer = 0;
  for (const auto& [op, n] : shapes_tour) {
    EXPECT_LE(n, shapes_full[op]) << op;
    fewer += n < shapes_full[op];
  }
  EXPECT_GT(fewer, 0u) << "the tour left out no test shape of any op";
}

// The vendor libraries' impls are verified by the tour's bench (before and after timing),
// not at every edge shape: cuDNN builds a graph a problem, which alone passed lesson 09's
// 30 s. `klab test` (the full plan) still checks them everywhere.
TEST(Tour, VerifiesTheLessonsOwnVersionsAndBenchesTheVendors) {
  Selection sel;
  sel.tour = true;
  std::size_t vendor_full = 0, vendor_bench = 0;
  for (const Case& c : make_plan(sel, false, {}).cases)
    for (const Impl* im : c.impls) EXPECT_NE(im->kind, ImplKind::vendor) << c.op->name << " " << im->name;
  for (const Case& c : make_plan(Selection{}, false, {}).cases)
    for (const Impl* im : c.impls) vendor_full += im->kind == ImplKind::vendor;
  for (const Case& c : make_plan(sel, true, {}).cases)
    for (const Impl* im : c.impls) vendor_bench += im->kind == ImplKind::vendor;
  EXPECT_GT(vendor_full, 0u) << "klab test checks the vendors";
  EXPECT_GT(vendor_bench, 0u) << "the tour benches (and so checks) them";
}

TEST(Tour, BenchesFirstBenchShapeFirstVariantTourImplsAndBaselineOnly) {
  Selection sel;
  sel.tour = true;
  const Plan p = make_plan(sel, true, {});
  std::map<std::string, std::set<std::string>> dtypes_seen;
  for (const Case& c : p.cases) {
    const Op& op = *c.op;
    EXPECT_EQ(c.problem.shape, op.bench_shapes.front()) << op.name;
    EXPECT_EQ(c.problem.variant, op.variants.front()) << op.name;
    for (const Impl* im : c.impls)
      EXPECT_TRUE(contains(op.tour, im->name) || im->name == op.baseline) << op.name << " " << im->name;
    dtypes_seen[op.name].insert(dtype_name(c.problem.dtype));
  }
  for (const Op& op : registry().ops())
    if (!in_catalog(op))
      EXPECT_EQ(dtypes_seen[op.name].size(), op.dtypes.size()) << op.name << ": the tour benches every dtype";
}

TEST(Tour, StaysSmallPerLesson) {
  // Bench rows (impl x problem) per lesson: a bound that makes a lesson's tour seconds, not
  // minutes (each row is capped at 0.25 s of timed launches); a lesson that needs more says
  // so by raising this with its reason.
  Selection sel;
  sel.tour = true;
  std::map<std::string, std::size_t> rows;
  for (const Case& c : make_plan(sel, true, {}).cases) rows[c.op->lesson] += c.impls.size();
  for (const auto& [lesson, n] : rows) EXPECT_LE(n, 40u) << "lesson " << lesson << " benches " << n << " rows in the tour";
}

TEST(Tour, AnOpFilterKeepsTheTourShapes) {
  // make_plan honours sel.tour; the CLI sets it only without filters (cli.cpp cmd_run). A
  // tour with an op filter still keeps to the tour's shapes: checked here so a filter never
  // widens a tour by accident.
  Selection sel;
  sel.tour = true;
  sel.ops = {registry().ops().front().name};
  for (const Case& c : make_plan(sel, false, {}).cases) EXPECT_LE(largest_tensor(*c.op, c.problem), kTourMaxElems);
}

// KLAB_PROGRESS_LINES=1 with stderr not a terminal (a log): a line per update, numbered, with
// the seconds since the start; without it, nothing (the rewriting line is for terminals).
TEST(ProgressLine, OneLineAnUpdateInALogWhenAsked) {
  if (isatty(STDERR_FILENO)) GTEST_SKIP() << "stderr is a terminal here";
  auto run = [](bool enabled) {
    testing::internal::CaptureStderr();
    {
      ProgressLine p(12, enabled);
      p.update(0, "bench a v1 1024");
      p.update(10, "bench b v2 7");
    }
    return testing::internal::GetCapturedStderr();
  };
  ::setenv("KLAB_PROGRESS_LINES", "1", 1);
  const std::string on = run(true), off_by_caller = run(false);
  ::unsetenv("KLAB_PROGRESS_LINES");
  const std::string unset = run(true);
  EXPECT_NE(on.find("[ 1/12] 0.0 s bench a v1 1024\n"), std::string::npos) << on;
  EXPECT_NE(on.find("[11/12] "), std::string::npos) << on;
  EXPECT_NE(on.find(" s bench b v2 7\n"), std::string::npos) << on;
  EXPECT_EQ(off_by_caller, "");
  EXPECT_EQ(unset, "");
}

TEST(Eta, FromTheMeanCaseTime) {
  EXPECT_EQ(eta_text(1.0, 1, 10), "");        // too early to say
  EXPECT_EQ(eta_text(10.0, 0, 10), "");       // nothing done yet
  EXPECT_EQ(eta_text(10.0, 10, 10), "");      // all done
  EXPECT_EQ(eta_text(10.0, 5, 10), "ETA 10s");
  EXPECT_EQ(eta_text(30.0, 1, 8), "ETA 3m30s");
  EXPECT_EQ(eta_text(100.0, 1, 100), "ETA 2h45m");
  EXPECT_EQ(eta_text(std::nan(""), 1, 3), "");
}

}  // namespace

// `klab check` times the exercise at the first bench shape that it and its reference both
// take: a case one of them rejects is skipped, and none at all times nothing.
TEST(CheckTiming, FirstCaseEveryImplSupports) {
  Impl bf16_only, any;
  bf16_only.name = "exercise_triton";
  bf16_only.kind = any.kind = ImplKind::cpu;   // host impls: no GPU needed to run them here
  bf16_only.supports = [](const Problem& p) { return p.dtype == DType::bf16 ? "" : "bf16 only"; };
  any.name = "triton";   // no supports(): takes everything
  std::vector<Case> cases(3);
  for (auto& c : cases) c.impls = {&bf16_only, &any};
  cases[0].problem.dtype = DType::f32;
  cases[1].problem.dtype = DType::bf16;
  cases[1].problem.shape = {7};
  cases[2].problem.dtype = DType::bf16;
  const auto c = first_case_all_run(cases);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->problem.dtype, DType::bf16);
  EXPECT_EQ(c->problem.shape, std::vector<std::int64_t>{7}) << "the first that runs, not a later one";
  cases.erase(cases.begin() + 1, cases.end());
  EXPECT_FALSE(first_case_all_run(cases).has_value());
}
