// tests/test_exercise_verbs.cpp — `klab hint`, `klab solution`, `klab reset`, and what
// `klab check` does before and after its work (klab/cli/verb_exercise.cpp), plus the
// validation of hand-edited progress files (klab/src/progress.cpp). On the CPU: the
// functions directly, and the built klab (KLAB_BINARY) with its own progress file, source
// tree (KLAB_SOURCE_DIR) and, for `check`, no visible GPU.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "klab/cli.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/progress.hpp"
#include "test_util.hpp"
#include "verb_exercise.hpp"

namespace fs = std::filesystem;

namespace {

using klab_test::EnvVar;
using klab_test::read_text;
using klab_test::write_text;

bool has(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

std::size_t lines_of(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) n += c == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct Result {
  int rc = -1;
  std::string out;   // stdout and stderr together
};

// The source tree this test was built from (tests/ is beside lessons/).
fs::path repo_root() { return fs::path(__FILE__).parent_path().parent_path().lexically_normal(); }

const char* kFile = R"({"format":"klab-progress","version":1,"exercises":{}})";

class Verbs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/klab-exverbs-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    progress_ = dir_ / "progress.json";
    env_ = std::make_unique<EnvVar>("KLAB_PROGRESS_FILE", progress_.c_str());
  }
  void TearDown() override {
    env_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Runs the built klab with stdin from /dev/null (no terminal), no GPU visible, this
  // test's progress file, and `env` (VAR=value words) before it.
  Result klab(const std::string& args, const std::string& env = "") {
    const std::string cmd = "cd " + quote(dir_.string()) + " && env CUDA_VISIBLE_DEVICES=-1 KLAB_PROGRESS_FILE=" +
                            quote(progress_.string()) + " " + env + " " + quote(KLAB_BINARY) + " " + args +
                            " </dev/null 2>&1";
    Result r;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    std::size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int st = pclose(p);
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
  }
  nlohmann::json progress_json() { return nlohmann::json::parse(read_text(progress_)); }
  fs::path dir_, progress_;
  std::unique_ptr<EnvVar> env_;
};

}  // namespace

// ---- hints.md --------------------------------------------------------------------------

TEST(Hints, ParsesNumberedSectionsAndIgnoresHeadingsInCode) {
  const auto h = klab::parse_hints(
      "# Title\nintro\n\n## Hint 1\n\nfirst\n\n## Hint 2\nsecond\n```\n## not a heading\n```\n\n## Hint 3\nthird\n",
      "x.md");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0], "first");
  EXPECT_TRUE(has(h[1], "## not a heading")) << h[1];
  EXPECT_EQ(h[2], "third");
}

TEST(Hints, MisnumberedEmptyOrMissingSectionsAreErrors) {
  EXPECT_THROW(klab::parse_hints("## Hint 1\na\n## Hint 3\nb\n", "x.md"), klab::Error);
  EXPECT_THROW(klab::parse_hints("## Hint 1\n\n## Hint 2\nb\n", "x.md"), klab::Error);
  EXPECT_THROW(klab::parse_hints("# only a title\n", "x.md"), klab::Error);
  EXPECT_THROW(klab::parse_hints("## Hint 1\na\n## Notes\nb\n", "x.md"), klab::Error);
  try {
    klab::parse_hints("", "lessons/09-x/hints.md");
    ADD_FAILURE();
  } catch (const klab::Error& e) {
    EXPECT_TRUE(has(e.what(), "lessons/09-x/hints.md")) << e.what();
  }
}

TEST(Hints, EveryLessonWithAnExerciseHasThreeToFiveHints) {
  int lessons = 0;
  for (const auto& e : fs::directory_iterator(repo_root() / "lessons")) {
    if (!fs::exists(e.path() / "exercise.cu")) continue;
    ++lessons;
    const fs::path h = e.path() / "hints.md";
    ASSERT_TRUE(fs::exists(h)) << h;
    const auto hints = klab::parse_hints(read_text(h), h.string());
    EXPECT_GE(hints.size(), 3u) << h;
    EXPECT_LE(hints.size(), 5u) << h;
  }
  EXPECT_GE(lessons, 5);
}

TEST(Hints, TritonHintsAreTheDocstringsNumberedItems) {
  const auto h = klab::parse_docstring_hints(
      "\"\"\"Title.\n\nHints\n  1. first,\n     continued\n  2. second\n\nAfter.\n\"\"\"\nimport triton\n", "x.py");
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0], "first,\ncontinued");
  EXPECT_EQ(h[1], "second");
  EXPECT_THROW(klab::parse_docstring_hints("\"\"\"No hints.\"\"\"\n", "x.py"), klab::Error);
  EXPECT_THROW(klab::parse_docstring_hints("import triton\n", "x.py"), klab::Error);
  EXPECT_THROW(klab::parse_docstring_hints("\"\"\"\nHints\n  1. a\n  3. c\n\"\"\"", "x.py"), klab::Error);
  EXPECT_THROW(klab::parse_docstring_hints("\"\"\"\nHints\n  2. b\n\"\"\"", "x.py"), klab::Error);
  try {
    klab::parse_docstring_hints("\"\"\"\nHints\nnot an item\n\"\"\"", "lessons/09-x/exercise_triton.py");
    ADD_FAILURE();
  } catch (const klab::Error& e) {
    EXPECT_TRUE(has(e.what(), "lessons/09-x/exercise_triton.py")) << e.what();
  }
}

TEST(Hints, EveryTritonExerciseHasThreeToEightHints) {
  int lessons = 0;
  for (const auto& e : fs::directory_iterator(repo_root() / "lessons")) {
    const fs::path py = e.path() / "exercise_triton.py";
    if (!fs::exists(py)) continue;
    ++lessons;
    const auto hints = klab::parse_docstring_hints(read_text(py), py.string());
    EXPECT_GE(hints.size(), 3u) << py;
    EXPECT_LE(hints.size(), 8u) << py;
  }
  EXPECT_GE(lessons, 2);
}

// ---- hand-edited progress files ------------------------------------------------------

TEST(ProgressValidation, HandEditsThatMakeNoSenseAreRejected) {
  auto bad = [](const std::string& exercises, const std::string& aids, const std::string& what) {
    std::string text = R"({"format":"klab-progress","version":1,"exercises":)" + exercises;
    if (!aids.empty()) text += R"(,"aids":)" + aids;
    text += "}";
    try {
      klab::progress_from_json(nlohmann::json::parse(text), "hand-edited");
      ADD_FAILURE() << "accepted " << text;
    } catch (const klab::Error& e) {
      EXPECT_TRUE(has(e.what(), what)) << e.what();
      EXPECT_TRUE(has(e.what(), "hand-edited")) << e.what();
    }
  };
  const std::string ok = R"({"passed_at":"2026-11-22T10:31:05Z"})";
  bad(R"({"abc":)" + ok + "}", "", "not a lesson or checkpoint id");
  bad(R"({"1":)" + ok + "}", "", "not a lesson or checkpoint id");
  bad(R"({"001":)" + ok + "}", "", "not a lesson or checkpoint id");
  bad(R"({"01":{"passed_at":"yesterday"}})", "", "\"passed_at\"");
  bad(R"({"01":{"passed_at":"2026-13-40T10:31:05Z"}})", "", "\"passed_at\"");
  bad(R"({"01":{"passed_at":5}})", "", "\"passed_at\"");
  bad(R"({"01":{"passed_at":"2026-11-22T10:31:05Z","speed_ratio":-1}})", "", "\"speed_ratio\"");
  bad(R"({"01":{"passed_at":"2026-11-22T10:31:05Z","speed_ratio":1e300}})", "", "\"speed_ratio\"");
  bad(R"({"01":{"passed_at":"2026-11-22T10:31:05Z","device":")" + std::string(300, 'x') + "\"}}", "", "\"device\"");
  bad("{}", R"({"01":{"hints_seen":"2"}})", "\"hints_seen\"");
  bad("{}", R"({"01":{"hints_seen":-1}})", "\"hints_seen\"");
  bad("{}", R"({"01":{"hints_seen":1000000}})", "\"hints_seen\"");
  bad("{}", R"({"01":{"solution_seen_at":true}})", "\"solution_seen_at\"");
  bad("{}", R"({"zz":{"hints_seen":1}})", "not a lesson or checkpoint id");
  bad("{}", R"([1])", "\"aids\" is not an object");
}

TEST(ProgressValidation, AidsRoundTripAndNamedCheckpointsStayValid) {
  klab::ProgressData d;
  d.aids["01"].hints_seen = 3;
  d.aids["04"].solution_seen_at = "2026-11-22T10:31:05Z";
  d.aids["02"].triton_hints_seen = 2;
  d.aids["02"].triton_solution_seen_at = "2026-11-23T10:31:05Z";
  d.exercises["debugging"].lesson = "debugging";
  d.exercises["debugging"].passed_at = "2026-11-22T10:31:05Z";
  const auto back = klab::progress_from_json(klab::progress_to_json(d), "round trip");
  EXPECT_EQ(back.aids.at("01").hints_seen, 3);
  EXPECT_EQ(back.aids.at("04").solution_seen_at, "2026-11-22T10:31:05Z");
  EXPECT_EQ(back.aids.at("02").triton_hints_seen, 2);
  EXPECT_EQ(back.aids.at("02").hints_seen, 0);
  EXPECT_EQ(back.aids.at("02").triton_solution_seen_at, "2026-11-23T10:31:05Z");
  EXPECT_THROW(klab::progress_from_json(nlohmann::json::parse(
                   R"({"format":"klab-progress","version":1,"exercises":{},"aids":{"01":{"triton_hints_seen":-1}}})"),
                   "x"),
               klab::Error);
  EXPECT_THROW(klab::progress_from_json(nlohmann::json::parse(
                   R"({"format":"klab-progress","version":1,"exercises":{},"aids":{"01":{"triton_solution_seen_at":"x"}}})"),
                   "x"),
               klab::Error);
  EXPECT_EQ(back.exercises.count("debugging"), 1u);
  EXPECT_TRUE(klab::valid_checkpoint_id("17"));
  EXPECT_TRUE(klab::valid_checkpoint_id("capstone"));
  EXPECT_FALSE(klab::valid_checkpoint_id("00"));
  EXPECT_FALSE(klab::valid_checkpoint_id("../01"));
}

// A lesson's further exercise is a checkpoint of its own: "09b" (digits, then one letter b..z).
TEST(ProgressValidation, AFurtherExerciseIdIsValidAndOnlyThatShape) {
  EXPECT_TRUE(klab::valid_checkpoint_id("09b"));
  EXPECT_TRUE(klab::valid_checkpoint_id("11z"));
  EXPECT_FALSE(klab::valid_checkpoint_id("09a")) << "a: the lesson's own, which is 09";
  EXPECT_FALSE(klab::valid_checkpoint_id("09B"));
  EXPECT_FALSE(klab::valid_checkpoint_id("09bb"));
  EXPECT_FALSE(klab::valid_checkpoint_id("9b"));
  EXPECT_FALSE(klab::valid_checkpoint_id("00b"));
  const std::string ok = R"({"passed_at":"2026-11-22T10:31:05Z"})";
  const auto d = klab::progress_from_json(
      nlohmann::json::parse(R"({"format":"klab-progress","version":1,"exercises":{"09b":)" + ok +
                            R"(},"aids":{"09b":{"hints_seen":2}}})"),
      "x");
  EXPECT_EQ(d.exercises.count("09b"), 1u);
  EXPECT_EQ(d.aids.at("09b").hints_seen, 2);
  // No Triton version: a Triton pass under it is not ours.
  EXPECT_THROW(klab::progress_from_json(nlohmann::json::parse(
                   R"({"format":"klab-progress","version":1,"exercises":{},"triton":{"09b":)" + ok + "}}"),
                   "x"),
               klab::Error);
}

// The report lists 09b after 09, on the paths that hold 09, and counts it among the
// planned exercises: a learner who passed every lesson but 09b has not finished.
TEST(ProgressReport, AFurtherExerciseIsACheckpointOfItsOwn) {
  klab::ProgressData d;
  d.exercises["09"].lesson = "09";
  d.exercises["09"].passed_at = "2026-11-22T10:31:05Z";
  std::string text = klab::progress_report(d, {"09", "09b"});
  EXPECT_TRUE(has(text, "09b attention backward")) << text;
  EXPECT_TRUE(has(text, "to do: klab check 09b")) << text;
  EXPECT_LT(text.find("09 attention"), text.find("09b attention backward")) << text;
  EXPECT_TRUE(has(text, "Next: open lessons/09-attention/README.md, complete its exercise_bwd.cu, then run "
                        "`klab check 09b`")) << text;
  EXPECT_TRUE(has(text, "09 done  09b todo")) << text;
  d.exercises["09b"].lesson = "09b";
  d.exercises["09b"].passed_at = "2026-11-23T10:31:05Z";
  text = klab::progress_report(d, {"09", "09b"});
  EXPECT_TRUE(has(text, "09 done  09b done")) << text;
}

TEST(ProgressValidation, PrintedStringsAreSanitized) {
  EXPECT_EQ(klab::sanitize_text("\x1b[2Jred\n"), "?[2Jred?");
  EXPECT_EQ(klab::sanitize_text("a\xc2\x9b" "b"), "a?b");             // C1 CSI
  EXPECT_EQ(klab::sanitize_text("H100 é"), "H100 é");                  // ordinary UTF-8 kept
  EXPECT_EQ(klab::sanitize_text(std::string(100, 'x'), 10), std::string(10, 'x') + "...");

  klab::ProgressData d;
  auto& r = d.exercises["01"];
  r.lesson = "01";
  r.passed_at = "2026-11-22T10:31:05Z";
  r.device = "GPU\x1b]0;owned\x07" + std::string(200, 'y');
  const std::string rep = klab::progress_report(d, {"01"});
  EXPECT_FALSE(has(rep, "\x1b")) << rep;
  EXPECT_FALSE(has(rep, "\x07")) << rep;
  EXPECT_FALSE(has(rep, std::string(100, 'y'))) << "an overlong value is cut";
}

// ---- check: the progress file before the work, a pass never lost -----------------------

TEST_F(Verbs, ProgressUsableAcceptsAFreshPathAndRejectsBadOnes) {
  EXPECT_NO_THROW(klab::check_progress_usable());   // no file yet: fine, it will be created
  write_text(progress_, "{not json");
  EXPECT_THROW(klab::check_progress_usable(), klab::Error);
  write_text(dir_ / "plain", "x");
  EnvVar under_file("KLAB_PROGRESS_FILE", (dir_ / "plain" / "sub" / "p.json").c_str());
  try {
    klab::check_progress_usable();
    ADD_FAILURE() << "a file under a regular file was accepted";
  } catch (const klab::Error& e) {
    EXPECT_TRUE(has(e.what(), "is not a directory")) << e.what();
  }
}

TEST_F(Verbs, APassThatCannotBeSavedExitsNonZeroAndSaysSo) {
  write_text(dir_ / "plain", "x");
  EnvVar under_file("KLAB_PROGRESS_FILE", (dir_ / "plain" / "p.json").c_str());
  klab::ExerciseRecord r;
  r.lesson = "01";
  testing::internal::CaptureStderr();
  const int rc = klab::record_pass(r);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, klab::kExitFail);
  EXPECT_TRUE(has(err, "passed, but the pass was NOT recorded")) << err;
}

TEST_F(Verbs, APassThatIsSavedExitsZero) {
  klab::ExerciseRecord r;
  r.lesson = "01";
  testing::internal::CaptureStdout();
  EXPECT_EQ(klab::record_pass(r), klab::kExitOk);
  EXPECT_TRUE(has(testing::internal::GetCapturedStdout(), "progress recorded"));
  EXPECT_EQ(klab::load_progress().exercises.count("01"), 1u);
}

TEST_F(Verbs, CheckRejectsABadProgressFileBeforeAskingForTheGpu) {
  write_text(progress_, "{not json");
  Result r = klab("check 01");
  EXPECT_EQ(r.rc, 2) << r.out;   // not 77: found before require_gpu()
  EXPECT_EQ(lines_of(r.out), 1u) << r.out;
  EXPECT_TRUE(has(r.out, "is not valid JSON")) << r.out;

  write_text(progress_, R"({"format":"klab-progress","version":1,"exercises":{"1":{"passed_at":"x"}}})");
  r = klab("check 01");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_TRUE(has(r.out, "not a lesson or checkpoint id")) << r.out;

  write_text(dir_ / "plain", "x");
  r = klab("check 01", "KLAB_PROGRESS_FILE=" + quote((dir_ / "plain" / "p.json").string()));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_EQ(lines_of(r.out), 1u) << r.out;
  EXPECT_TRUE(has(r.out, "cannot be saved")) << r.out;
}

TEST_F(Verbs, CheckWarnsWhenTheExerciseIsNewerThanTheBinary) {
  const fs::path tree = dir_ / "tree";
  const fs::path ex = tree / "lessons" / "01-vector-add" / "exercise.cu";
  write_text(ex, "// edited just now\n");
  const std::string src = "KLAB_SOURCE_DIR=" + quote(tree.string());
  Result r = klab("check 01", src);
  EXPECT_EQ(r.rc, 77) << r.out;   // no GPU visible: the warning comes before that
  EXPECT_TRUE(has(r.out, "lessons/01-vector-add/exercise.cu is newer than this klab binary: rebuild with `make` first"))
      << r.out;
  // Older than the binary: no warning.
  fs::last_write_time(ex, fs::last_write_time(KLAB_BINARY) - std::chrono::hours(1));
  r = klab("check 01", src);
  EXPECT_EQ(r.rc, 77) << r.out;
  EXPECT_FALSE(has(r.out, "newer than this klab binary")) << r.out;
}

// ---- hint ------------------------------------------------------------------------------

TEST_F(Verbs, HintShowsOneMoreEachCallRecordsTheCountAndStopsAtTheLast) {
  const auto n = klab::parse_hints(read_text(repo_root() / "lessons/01-vector-add/hints.md"), "01").size();
  const std::string of = " of " + std::to_string(n);
  Result r = klab("hint 01 --all");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "No hint of lesson 01 seen yet")) << r.out;

  r = klab("hint 01");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "Hint 1" + of)) << r.out;
  EXPECT_EQ(progress_json()["aids"]["01"]["hints_seen"], 1);
  r = klab("hint 01");
  EXPECT_TRUE(has(r.out, "Hint 2" + of)) << r.out;
  EXPECT_FALSE(has(r.out, "Hint 1" + of)) << r.out;

  r = klab("hint 01 --all");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "Hint 1" + of)) << r.out;
  EXPECT_TRUE(has(r.out, "Hint 2" + of)) << r.out;
  EXPECT_FALSE(has(r.out, "Hint 3" + of)) << r.out;
  EXPECT_EQ(progress_json()["aids"]["01"]["hints_seen"], 2) << "--all shows, it does not advance";

  for (std::size_t k = 3; k <= n; ++k) r = klab("hint 01");
  EXPECT_TRUE(has(r.out, "Hint " + std::to_string(n) + of)) << r.out;
  EXPECT_TRUE(has(r.out, "that was the last hint")) << r.out;
  r = klab("hint 01");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "No more hints")) << r.out;
  EXPECT_EQ(progress_json()["aids"]["01"]["hints_seen"], static_cast<int>(n));

  r = klab("progress");
  EXPECT_TRUE(has(r.out, std::to_string(n) + " hints")) << r.out;
}

TEST_F(Verbs, HintKeepsPassesAndRefusesACorruptFile) {
  write_text(progress_, R"({"format":"klab-progress","version":1,"exercises":{"03":{"passed_at":"2026-11-22T10:31:05Z"}}})");
  Result r = klab("hint 01");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(progress_json()["exercises"]["03"]["passed_at"], "2026-11-22T10:31:05Z");
  write_text(progress_, "{");
  r = klab("hint 01");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_EQ(lines_of(r.out), 1u) << r.out;
  EXPECT_EQ(read_text(progress_), "{") << "never saved over";
}

// ---- solution --------------------------------------------------------------------------

TEST_F(Verbs, SolutionStaysClosedUntilPassedOrForcedAndForcingIsNoted) {
  const std::string solution = read_text(repo_root() / "solutions/01-vector-add/exercise.cu");
  ASSERT_FALSE(solution.empty());
  Result r = klab("solution 01");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(has(r.out, "has not passed yet")) << r.out;
  EXPECT_FALSE(has(r.out, solution)) << "the solution was printed";
  EXPECT_FALSE(fs::exists(progress_));

  r = klab("solution 01 --force");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, solution)) << r.out;
  EXPECT_TRUE(has(r.out, "shown before your exercise passed")) << r.out;
  const std::string seen = progress_json()["aids"]["01"]["solution_seen_at"];
  EXPECT_TRUE(klab::valid_utc_timestamp(seen)) << seen;
  r = klab("progress");
  EXPECT_TRUE(has(r.out, "solution seen before passing")) << r.out;
}

TEST_F(Verbs, SolutionOpensAfterAPassWithoutANote) {
  write_text(progress_, R"({"format":"klab-progress","version":1,"exercises":{"01":{"passed_at":"2026-11-22T10:31:05Z"}}})");
  Result r = klab("solution 01");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, read_text(repo_root() / "solutions/01-vector-add/exercise.cu")));
  EXPECT_FALSE(progress_json().contains("aids")) << read_text(progress_);
  EXPECT_FALSE(has(klab("progress").out, "solution seen")) << "a pass first: nothing to note";
}

TEST_F(Verbs, TritonHintsAndSolutionAreCountedApartFromTheCudaOnes) {
  const auto n = klab::parse_docstring_hints(read_text(repo_root() / "lessons/01-vector-add/exercise_triton.py"), "01")
                     .size();
  Result r = klab("hint 01 --triton");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "Hint 1 of " + std::to_string(n))) << r.out;
  EXPECT_TRUE(has(r.out, "klab hint 01 --triton` shows hint 2")) << r.out;
  EXPECT_EQ(progress_json()["aids"]["01"]["triton_hints_seen"], 1);
  EXPECT_FALSE(progress_json()["aids"]["01"].contains("hints_seen")) << "the CUDA count is untouched";
  r = klab("progress");
  EXPECT_TRUE(has(r.out, "01 (Triton):   1 hint")) << r.out;

  const std::string solution = read_text(repo_root() / "solutions/01-vector-add/exercise_triton.py");
  r = klab("solution 01 --triton");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(has(r.out, "klab solution 01 --triton --force")) << r.out;
  EXPECT_FALSE(has(r.out, solution));
  // A CUDA pass does not open the Triton solution.
  write_text(progress_, R"({"format":"klab-progress","version":1,"exercises":{"01":{"passed_at":"2026-11-22T10:31:05Z"}}})");
  EXPECT_EQ(klab("solution 01 --triton").rc, 1);
  r = klab("solution 01 --triton --force");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, solution));
  EXPECT_TRUE(klab::valid_utc_timestamp(progress_json()["aids"]["01"]["triton_solution_seen_at"]));
  EXPECT_FALSE(progress_json()["aids"]["01"].contains("solution_seen_at"));
  r = klab("progress");
  EXPECT_TRUE(has(r.out, "01 (Triton):   (solution seen before passing, ")) << r.out;
  // A Triton pass opens it without a note.
  write_text(progress_, R"({"format":"klab-progress","version":1,"exercises":{},"triton":{"01":{"passed_at":"2026-11-22T10:31:05Z"}}})");
  r = klab("solution 01 --triton");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, solution));
}

// Every lesson has a Triton exercise, so the refusal is tested on a lesson made up here:
// its exercise op, `histogram`, has no impl `exercise_triton`. (The exercise impls are
// linked into klab, not into this binary: here no lesson has one.)
TEST(TritonExercise, ALessonWithoutOneIsAUsageErrorNamingThoseWithOne) {
  klab::Lesson none;
  none.id = "98";
  none.exercise_op = "histogram";
  EXPECT_EQ(klab::triton_exercise_of(none), nullptr);
  try {
    klab::require_triton_exercise(none);
    ADD_FAILURE() << "no error";
  } catch (const klab::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "lesson 98 has no Triton exercise yet (lessons with one: none in this build)");
  }
  klab::Lesson no_exercise;
  no_exercise.id = "97";
  EXPECT_EQ(klab::triton_exercise_of(no_exercise), nullptr) << "a lesson without an exercise op has none";
}

// ---- a lesson's further exercises (Lesson::more_exercises: 09b) -------------------------

// Each further exercise has its stub, its solution and 3-5 hints, an op of its lesson with
// the reference impl it is timed against, and a place in the progress report.
TEST(MoreExercises, EachHasItsFilesHintsOpAndCheckpoint) {
  int n = 0;
  EXPECT_EQ(klab::registry().validate(), std::vector<std::string>{});
  for (const auto& l : klab::registry().lessons())
    for (const auto& e : l.more_exercises) {
      ++n;
      const fs::path folder = klab::lesson_folder(l);
      EXPECT_TRUE(fs::exists(repo_root() / folder / e.file)) << e.id;
      EXPECT_TRUE(fs::exists(repo_root() / "solutions" / folder.filename() / e.file)) << e.id;
      const fs::path h = repo_root() / folder / e.hints;
      ASSERT_TRUE(fs::exists(h)) << h;
      const auto hints = klab::parse_hints(read_text(h), h.string());
      EXPECT_GE(hints.size(), 3u) << h;
      EXPECT_LE(hints.size(), 5u) << h;
      const std::string text = klab::progress_report({}, {e.id});
      if (l.folder.empty())   // a lesson's second exercise: planned in progress.cpp's kMore
        EXPECT_TRUE(has(text, e.id + " " + e.title)) << "progress.cpp's kMore lacks " << e.id << ":\n" << text;
      else   // a debugging case: under the Debugging track
        EXPECT_TRUE(has(text, "to do: klab check " + e.id)) << text;
    }
  EXPECT_GE(n, 5);
}

TEST(MoreExercises, KeysNameTheLessonsOwnOrAFurtherOne) {
  klab::ExerciseInfo e;
  const klab::Lesson* l = nullptr;
  ASSERT_TRUE(klab::find_exercise("09b", e, &l));
  EXPECT_EQ(e.id, "09b");
  EXPECT_EQ(e.op, "attention_bwd");
  EXPECT_EQ(e.file, "exercise_bwd.cu");
  EXPECT_EQ(e.where, "lessons/09-attention/exercise_bwd.cu");
  EXPECT_EQ(l, e.lesson);
  ASSERT_TRUE(klab::find_exercise("9b", e));
  EXPECT_EQ(e.id, "09b");
  for (const char* key : {"09", "9", "attention", "09-attention"}) {
    ASSERT_TRUE(klab::find_exercise(key, e)) << key;
    EXPECT_EQ(e.id, "09") << key;
    EXPECT_EQ(e.op, "attention_fwd") << key;
    EXPECT_EQ(e.file, "exercise.cu") << key;
    EXPECT_EQ(e.hints, "hints.md") << key;
  }
  EXPECT_FALSE(klab::find_exercise("09c", e, &l));
  EXPECT_NE(l, nullptr) << "the lesson exists; the letter does not";
  EXPECT_FALSE(klab::find_exercise("01b", e, &l));
  EXPECT_FALSE(klab::find_exercise("98b", e, &l));
  EXPECT_EQ(l, nullptr);
  try {
    (void)klab::exercise_for("09c", false);
    ADD_FAILURE();
  } catch (const klab::UsageError& x) {
    EXPECT_EQ(std::string(x.what()), "lesson 09 has no exercise '09c' (its exercises: 09, 09b)");
  }
  try {
    (void)klab::exercise_for("09b", true);
    ADD_FAILURE();
  } catch (const klab::UsageError& x) {
    EXPECT_EQ(std::string(x.what()),
              "exercise 09b has no Triton version; the Triton exercise is `klab check 09 --triton`");
  }
}

TEST_F(Verbs, AFurtherExercisesHintsSolutionListAndCheckAreItsOwn) {
  const auto n = klab::parse_hints(read_text(repo_root() / "lessons/09-attention/hints_bwd.md"), "09b").size();
  Result r = klab("hint 09b");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "Hint 1 of " + std::to_string(n) + " — exercise 09b (attention backward)")) << r.out;
  EXPECT_TRUE(has(r.out, "klab hint 09b` shows hint 2")) << r.out;
  EXPECT_EQ(progress_json()["aids"]["09b"]["hints_seen"], 1);
  EXPECT_FALSE(progress_json()["aids"].contains("09")) << "lesson 09's own count is untouched";
  r = klab("hint 09");
  EXPECT_TRUE(has(r.out, "Hint 1 of")) << "09's hints are counted apart: " << r.out;

  const std::string solution = read_text(repo_root() / "solutions/09-attention/exercise_bwd.cu");
  r = klab("solution 09b");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(has(r.out, "klab solution 09b --force")) << r.out;
  EXPECT_FALSE(has(r.out, solution));
  // 09's pass does not open 09b's solution; 09b's does.
  write_text(progress_, R"({"format":"klab-progress","version":1,"exercises":{"09":{"passed_at":"2026-11-22T10:31:05Z"}}})");
  EXPECT_EQ(klab("solution 09b").rc, 1);
  write_text(progress_, R"({"format":"klab-progress","version":1,"exercises":{"09b":{"passed_at":"2026-11-22T10:31:05Z"}}})");
  r = klab("solution 09b");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, solution));

  r = klab("list 09");
  EXPECT_TRUE(has(r.out, "[exercise open: klab check 09]   [09b solved]")) << r.out;
  r = klab("hint 09c");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_TRUE(has(r.out, "its exercises: 09, 09b")) << r.out;
  r = klab("check 09b --triton");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_TRUE(has(r.out, "exercise 09b has no Triton version")) << r.out;
  r = klab("check 09b");
  EXPECT_EQ(r.rc, 77) << "no GPU: the key is accepted, the work skipped: " << r.out;
}

// A debugging case is a further exercise of the catalog's lesson: its hints, solution,
// check, list line and progress work like 09b's, under its id debug/<case>.
TEST_F(Verbs, ADebuggingCaseIsGradedLikeAnExercise) {
  Result r = klab("hint debug/missing_barrier");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "Hint 1 of 3 — exercise debug/missing_barrier")) << r.out;
  EXPECT_TRUE(has(r.out, "racecheck")) << r.out;
  EXPECT_EQ(progress_json()["aids"]["debug/missing_barrier"]["hints_seen"], 1);
  r = klab("solution debug/missing_barrier");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(has(r.out, "klab solution debug/missing_barrier --force")) << r.out;
  r = klab("check debug/missing_barrier");
  EXPECT_EQ(r.rc, 77) << "no GPU: " << r.out;
  r = klab("check debug/nope");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_TRUE(has(r.out, "its exercises: debug/missing_barrier, debug/missing_mask")) << r.out;
  r = klab("debug run missing_mask");
  EXPECT_EQ(r.rc, 77) << "no GPU: " << r.out;
  r = klab("list debug");
  EXPECT_TRUE(has(r.out, "[0 of 11 cases fixed: klab debug list]")) << r.out;
  r = klab("progress");
  EXPECT_TRUE(has(r.out, "Debugging          0/11   broken kernels fixed")) << r.out;
  EXPECT_TRUE(has(r.out, "to do: klab check debug/unstable_softmax")) << r.out;
  EXPECT_TRUE(has(r.out, "debug/missing_barrier           to do: klab check debug/missing_barrier   1 hint")) << r.out;
  // The cases' passes fix them in `klab debug list`; the checkpoint "debugging" is what the
  // paths and the certificate count, recorded by the check that passes the last case.
  write_text(progress_, R"({"format":"klab-progress","version":1,"exercises":{)"
                        R"("debug/missing_barrier":{"passed_at":"2026-11-22T10:31:05Z"},)"
                        R"("debug/missing_mask":{"passed_at":"2026-11-22T10:31:05Z"}}})");
  r = klab("debug list");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "missing_barrier        racecheck   fixed")) << r.out;
  EXPECT_TRUE(has(r.out, "unzeroed_workspace     initcheck   open")) << r.out;
  r = klab("progress");
  EXPECT_TRUE(has(r.out, "Debugging          2/11")) << r.out;
  EXPECT_FALSE(has(r.out, "Debugging          2/11   broken kernels fixed (`klab debug list`)   COMPLETE")) << r.out;
}

// ---- reset -----------------------------------------------------------------------------

class Reset : public Verbs {
 protected:
  void SetUp() override {
    Verbs::SetUp();
    tree_ = dir_ / "tree";
    ex_ = tree_ / "lessons" / "01-vector-add" / "exercise.cu";
    write_text(ex_, "// stub\n");
  }
  void git_init() {
    const std::string q = quote(tree_.string());
    ASSERT_EQ(std::system(("git -C " + q + " init -q && git -C " + q + " add lessons && git -C " + q +
                           " -c user.name=t -c user.email=t@example.com commit -q -m stub")
                              .c_str()),
              0);
  }
  std::vector<fs::path> backups() {
    std::vector<fs::path> b;
    for (const auto& e : fs::directory_iterator(ex_.parent_path()))
      if (e.path().extension() == ".bak") b.push_back(e.path());
    return b;
  }
  std::string src() { return "KLAB_SOURCE_DIR=" + quote(tree_.string()); }
  fs::path tree_, ex_;
};

TEST_F(Reset, RestoresHeadAfterSavingTheLearnersFile) {
  git_init();
  write_text(ex_, "// my work\n");
  Result r = klab("reset 01 --yes", src());
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(read_text(ex_), "// stub\n");
  const auto b = backups();
  ASSERT_EQ(b.size(), 1u) << r.out;
  EXPECT_EQ(read_text(b[0]), "// my work\n");
  EXPECT_TRUE(b[0].filename().string().rfind("exercise.cu.", 0) == 0) << b[0];
  EXPECT_TRUE(has(r.out, "lessons/01-vector-add/" + b[0].filename().string())) << "says where: " << r.out;

  // Already the stub: one line, nothing changed, no new backup.
  r = klab("reset 01 --yes", src());
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(lines_of(r.out), 1u) << r.out;
  EXPECT_TRUE(has(r.out, "already equals git's HEAD")) << r.out;
  EXPECT_TRUE(has(r.out, "git checkout COMMIT -- lessons/01-vector-add/exercise.cu")) << "the way to an older stub";
  EXPECT_EQ(backups().size(), 1u);
}

TEST_F(Reset, TritonRestoresTheTritonFileOnly) {
  const fs::path py = ex_.parent_path() / "exercise_triton.py";
  write_text(py, "# stub\n");
  git_init();
  write_text(ex_, "// my CUDA work\n");
  write_text(py, "# my Triton work\n");
  const Result r = klab("reset 01 --triton --yes", src());
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(read_text(py), "# stub\n");
  EXPECT_EQ(read_text(ex_), "// my CUDA work\n") << "the CUDA exercise is not touched";
  EXPECT_TRUE(has(r.out, "klab check 01 --triton` compiles it again")) << r.out;
  const auto b = backups();
  ASSERT_EQ(b.size(), 1u) << r.out;
  EXPECT_EQ(read_text(b[0]), "# my Triton work\n");
}

TEST_F(Reset, WithoutATerminalOrYesItRefusesAndChangesNothing) {
  git_init();
  write_text(ex_, "// my work\n");
  Result r = klab("reset 01", src());   // stdin is /dev/null
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_EQ(lines_of(r.out), 1u) << r.out;
  EXPECT_TRUE(has(r.out, "--yes")) << r.out;
  EXPECT_EQ(read_text(ex_), "// my work\n");
  EXPECT_TRUE(backups().empty());
}

TEST_F(Reset, NotAGitCheckoutChangesNothing) {
  write_text(ex_, "// my work\n");
  Result r = klab("reset 01 --yes", src() + " GIT_CEILING_DIRECTORIES=" + quote(dir_.string()));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(lines_of(r.out), 1u) << r.out;
  EXPECT_TRUE(has(r.out, "not a git checkout")) << r.out;
  EXPECT_EQ(read_text(ex_), "// my work\n");
  EXPECT_TRUE(backups().empty());
}

// ---- klab check --triton: the learner's .py compiled first ---------------------------------

namespace {
// A copy of lesson 01's solution with `edit` applied to line `line` (1-based), in a scratch
// folder; an impl that says it was built from it.
klab::Impl triton_impl_from(const fs::path& dir, int line, const std::string& text) {
  std::ifstream in(fs::path(KLAB_TEST_SOURCE_DIR) / "solutions/01-vector-add/exercise_triton.py");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  if (line > 0) lines.at(static_cast<std::size_t>(line - 1)) = text;
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  write_text(dir / "exercise_triton.py", all);
  klab::Impl im;
  im.name = "exercise_triton";
  im.built_from = (dir / "exercise_triton.py").string();
  return im;
}
int line_of(const std::string& needle) {
  std::ifstream in(fs::path(KLAB_TEST_SOURCE_DIR) / "solutions/01-vector-add/exercise_triton.py");
  int n = 0;
  for (std::string l; std::getline(in, l);) {
    ++n;
    if (l.find(needle) != std::string::npos) return n;
  }
  return -1;
}
}  // namespace

// A file that does not compile is one line naming the file and the line, a usage error
// (exit 2), before any GPU is needed; a good file older than the binary needs nothing.
TEST(TritonCheck, CompileErrorsAreOneLineWithFileAndLine) {
  if (!KLAB_TEST_HAVE_TRITON) GTEST_SKIP() << "this build has no Triton";
  char tmpl[] = "/tmp/klab-triton-check-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  const int mask = line_of("    mask = offs < n");
  ASSERT_GT(mask, 0);
  struct Case {
    std::string text, what;
  };
  for (const Case& c : {Case{"    mask = offs < n +", "SyntaxError"}, Case{"    mask = offs < nn", "nn is not defined"}}) {
    const klab::Impl im = triton_impl_from(dir, mask, c.text);
    try {
      klab::prepare_triton_exercise(im);
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const klab::UsageError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(fmt::format("exercise_triton.py:{}: ", mask)), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.what), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  // Compiles, and older than this test binary: nothing to rebuild.
  const klab::Impl good = triton_impl_from(dir, 0, "");
  fs::last_write_time(good.built_from, fs::file_time_type::clock::now() - std::chrono::hours(24 * 365));
  EXPECT_FALSE(klab::prepare_triton_exercise(good));
  fs::remove_all(dir);
}
