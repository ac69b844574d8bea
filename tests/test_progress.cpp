// tests/test_progress.cpp — `klab progress` and the progress file (klab/progress.hpp).
//
// Every test points KLAB_PROGRESS_FILE into a fresh temporary folder, so nothing here reads
// or writes the real per-user file. Cases: where the file lives; empty (missing file),
// partial and complete records (the certificate); corrupt JSON, an empty file and foreign
// JSON (clear klab::Error, file left untouched); the save is atomic.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "klab/error.hpp"
#include "klab/progress.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using klab::ExerciseRecord;
using klab::ProgressData;

namespace {

using klab_test::EnvVar;
using klab_test::read_text;
using klab_test::write_text;

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

ExerciseRecord rec(const std::string& lesson, const std::string& date, double ratio = 1.1,
                   const std::string& device = "NVIDIA H100 80GB HBM3") {
  ExerciseRecord r;
  r.lesson = lesson;
  r.passed_at = date + "T12:00:00Z";
  r.speed_ratio = ratio;
  r.seed = 12345;
  r.device = device;
  return r;
}

const std::vector<std::string> kBuild = {"01", "02", "03", "04", "05"};

class Progress : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/klab-progress-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    file_ = dir_ / "sub" / "progress.json";   // the folder does not exist yet
    env_ = std::make_unique<EnvVar>("KLAB_PROGRESS_FILE", file_.c_str());
  }
  void TearDown() override {
    env_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Expects load_progress() to throw a klab::Error whose message names the file and `what`.
  void expect_load_error(const std::string& what) {
    try {
      klab::load_progress();
      ADD_FAILURE() << "load_progress() accepted a bad file";
    } catch (const klab::Error& e) {
      std::string msg = e.what();
      EXPECT_TRUE(contains(msg, file_.string())) << msg;
      EXPECT_TRUE(contains(msg, what)) << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a klab::Error: " << e.what();
    }
  }
  fs::path dir_, file_;
  std::unique_ptr<EnvVar> env_;
};

}  // namespace

// ---- where the file lives ------------------------------------------------------------

TEST(ProgressPath, ExplicitFileThenXdgThenHome) {
  {
    EnvVar a("KLAB_PROGRESS_FILE", "/somewhere/p.json");
    EnvVar b("XDG_DATA_HOME", "/xdg");
    EXPECT_EQ(klab::progress_path(), "/somewhere/p.json");
  }
  {
    EnvVar a("KLAB_PROGRESS_FILE", nullptr);
    EnvVar b("XDG_DATA_HOME", "/xdg");
    EXPECT_EQ(klab::progress_path(), "/xdg/klab/progress.json");
  }
  {
    EnvVar a("KLAB_PROGRESS_FILE", nullptr);
    EnvVar b("XDG_DATA_HOME", "relative/ignored");   // the XDG spec says: ignore
    EnvVar c("HOME", "/home/learner");
    EXPECT_EQ(klab::progress_path(), "/home/learner/.local/share/klab/progress.json");
  }
}

// ---- the paths -----------------------------------------------------------------------

TEST(LearningPaths, TheFivePathsOfTheCurriculum) {
  const auto& p = klab::learning_paths();
  ASSERT_EQ(p.size(), 5u);
  EXPECT_EQ(p[0].lessons, (std::vector<std::string>{"01", "04", "05"}));
  EXPECT_EQ(p[1].lessons, (std::vector<std::string>{"01", "02", "03", "04", "05", "06", "07",
                                                    "08", "09", "09b", "10", "11", "12", "13", "14"}));
  EXPECT_EQ(p[2].lessons, (std::vector<std::string>{"01", "04", "08", "09", "09b", "07"}));
  EXPECT_EQ(p[3].lessons, (std::vector<std::string>{"01", "05", "10", "04", "08", "07", "15"}));
  EXPECT_EQ(p[4].lessons, (std::vector<std::string>{"05", "09", "09b", "profiling", "debugging"}));
  for (const auto& path : p) EXPECT_FALSE(path.title.empty());
}

// ---- empty ---------------------------------------------------------------------------

TEST_F(Progress, MissingFileIsAnEmptyRecord) {
  ASSERT_FALSE(fs::exists(file_));
  ProgressData d = klab::load_progress();
  EXPECT_TRUE(d.exercises.empty());
  EXPECT_FALSE(fs::exists(file_)) << "loading must not create the file";

  std::string r = klab::progress_report(d, kBuild);
  EXPECT_TRUE(contains(r, "01 vector-add")) << r;
  EXPECT_TRUE(contains(r, "to do: klab check 01")) << r;
  EXPECT_TRUE(contains(r, "not yet available")) << r;       // lessons 06..17
  for (const auto& p : klab::learning_paths()) EXPECT_TRUE(contains(r, p.title)) << p.title;
  for (const char* t : {"Missing elements", "Optimization", "Debugging", "Mastery"})
    EXPECT_TRUE(contains(r, t)) << t;
  EXPECT_TRUE(contains(r, "0/5")) << r;                     // exercises passed of those built
  EXPECT_TRUE(contains(r, "0/0")) << r;                     // debugging catalog not there yet
  EXPECT_TRUE(contains(r, "klab check 01`")) << r;          // the next step
  EXPECT_FALSE(contains(r, "Certificate")) << r;
  EXPECT_FALSE(contains(r, "COMPLETE")) << r;
}

TEST_F(Progress, EmptyExercisesObjectAndNoExercisesKeyBothLoad) {
  fs::create_directories(file_.parent_path());
  write_text(file_, R"({"format":"klab-progress","version":1,"exercises":{}})");
  EXPECT_TRUE(klab::load_progress().exercises.empty());
  write_text(file_, R"({"format":"klab-progress","version":1})");
  EXPECT_TRUE(klab::load_progress().exercises.empty());
}

// ---- recording, partial --------------------------------------------------------------

TEST_F(Progress, RecordCreatesTheFileAndRoundTrips) {
  ExerciseRecord r = rec("01", "2026-11-22", 0.97);
  r.seed = std::numeric_limits<std::uint64_t>::max();   // a full 64-bit run seed survives
  klab::record_exercise_pass(r);
  ASSERT_TRUE(fs::exists(file_));

  auto j = nlohmann::json::parse(read_text(file_));
  EXPECT_EQ(j["format"], "klab-progress");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["exercises"]["01"]["passed_at"], "2026-11-22T12:00:00Z");

  ProgressData d = klab::load_progress();
  ASSERT_EQ(d.exercises.size(), 1u);
  const ExerciseRecord& got = d.exercises.at("01");
  EXPECT_EQ(got.lesson, "01");
  EXPECT_EQ(got.passed_at, "2026-11-22T12:00:00Z");
  EXPECT_DOUBLE_EQ(got.speed_ratio, 0.97);
  EXPECT_EQ(got.seed, std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(got.device, "NVIDIA H100 80GB HBM3");
}

TEST_F(Progress, RecordFillsTheDateAndLaterPassReplacesEarlier) {
  ExerciseRecord r = rec("04", "2026-11-22");
  r.passed_at.clear();
  klab::record_exercise_pass(r);
  std::string when = klab::load_progress().exercises.at("04").passed_at;
  ASSERT_EQ(when.size(), 20u) << when;   // 2026-11-22T12:00:00Z
  EXPECT_EQ(when[10], 'T');
  EXPECT_EQ(when.back(), 'Z');

  klab::record_exercise_pass(rec("01", "2026-11-23", 1.5));
  klab::record_exercise_pass(rec("04", "2026-11-24", 0.9));
  ProgressData d = klab::load_progress();
  ASSERT_EQ(d.exercises.size(), 2u);     // the other lesson is kept
  EXPECT_EQ(d.exercises.at("04").passed_at, "2026-11-24T12:00:00Z");
  EXPECT_DOUBLE_EQ(d.exercises.at("04").speed_ratio, 0.9);
}

TEST_F(Progress, RecordWithoutAValidLessonIdIsAnError) {
  EXPECT_THROW(klab::record_exercise_pass(rec("", "2026-11-22")), klab::Error);
  EXPECT_THROW(klab::record_exercise_pass(rec("../01", "2026-11-22")), klab::Error);
  EXPECT_FALSE(fs::exists(file_));
  ProgressData d;
  d.exercises["a b"] = rec("a b", "2026-11-22");
  EXPECT_THROW(klab::save_progress(d), klab::Error);   // would not load back
  EXPECT_FALSE(fs::exists(file_));
}

TEST_F(Progress, UntimedPassSavesNullAndLoadsAsZero) {
  klab::record_exercise_pass(rec("01", "2026-11-22", std::nan("")));
  auto j = nlohmann::json::parse(read_text(file_));
  EXPECT_TRUE(j["exercises"]["01"]["speed_ratio"].is_null());
  EXPECT_EQ(klab::load_progress().exercises.at("01").speed_ratio, 0.0);
}

TEST_F(Progress, PartialShowsCountsAndNoCertificate) {
  klab::record_exercise_pass(rec("01", "2026-11-22"));
  klab::record_exercise_pass(rec("04", "2026-11-23"));
  std::string r = klab::progress_report(klab::load_progress(), kBuild);
  EXPECT_TRUE(contains(r, "passed 2026-11-22")) << r;
  EXPECT_TRUE(contains(r, "time 1.10x reference")) << r;
  EXPECT_TRUE(contains(r, "2/3")) << r;                  // fast track: 01, 04 of 01, 04, 05
  EXPECT_TRUE(contains(r, "05 todo")) << r;
  EXPECT_TRUE(contains(r, "2/5")) << r;                  // exercises passed of those built
  EXPECT_TRUE(contains(r, "klab check 02`")) << r;       // lowest lesson not yet passed
  EXPECT_FALSE(contains(r, "Certificate")) << r;
}

TEST_F(Progress, PassRecordedEarlierCountsWhenTheBuildLacksTheLesson) {
  klab::record_exercise_pass(rec("05", "2026-11-22"));
  std::string r = klab::progress_report(klab::load_progress(), {"01"});
  EXPECT_TRUE(contains(r, "(not in this build)")) << r;
  EXPECT_TRUE(contains(r, "05 done")) << r;
  EXPECT_TRUE(contains(r, "0/1")) << r;                         // counted over this build
  EXPECT_TRUE(contains(r, "1 more passed, not in this build")) << r;
}

// ---- complete ------------------------------------------------------------------------

TEST_F(Progress, CompletePathPrintsItsCertificate) {
  klab::record_exercise_pass(rec("01", "2026-11-22"));
  klab::record_exercise_pass(rec("04", "2026-11-23"));
  klab::record_exercise_pass(rec("05", "2026-11-25"));
  std::string r = klab::progress_report(klab::load_progress(), kBuild);
  EXPECT_TRUE(contains(r, "Certificate of completion")) << r;
  EXPECT_TRUE(contains(r, "Learning path: Fast track")) << r;
  EXPECT_TRUE(contains(r, "05 matmul")) << r;
  EXPECT_TRUE(contains(r, "completed 2026-11-25")) << r;
  EXPECT_TRUE(contains(r, "on NVIDIA H100 80GB HBM3")) << r;
  EXPECT_TRUE(contains(r, "╔")) << r;                   // framed
  EXPECT_FALSE(contains(r, "Learning path: Deep understanding")) << r;
  EXPECT_FALSE(contains(r, "complete program")) << r;

  // Every framed line has the same display width (the frame closes).
  std::istringstream lines(r);
  std::string line;
  std::size_t frame_w = 0;
  auto cps = [](const std::string& s) {
    std::size_t w = 0;
    for (unsigned char c : s) w += (c & 0xC0) != 0x80;
    return w;
  };
  while (std::getline(lines, line)) {
    if (line.rfind("║", 0) == 0 || line.rfind("╔", 0) == 0 || line.rfind("╚", 0) == 0) {
      if (frame_w == 0) frame_w = cps(line);
      EXPECT_EQ(cps(line), frame_w) << line;
    }
  }
  EXPECT_GT(frame_w, 0u);
}

TEST_F(Progress, CertificateNamesEveryDeviceUsed) {
  klab::record_exercise_pass(rec("01", "2026-11-22", 1.0, "NVIDIA H100 80GB HBM3"));
  klab::record_exercise_pass(rec("04", "2026-11-23", 1.0, "NVIDIA A100-SXM4-80GB"));
  klab::record_exercise_pass(rec("05", "2026-11-24", 1.0, "NVIDIA H100 80GB HBM3"));
  std::string r = klab::progress_report(klab::load_progress(), kBuild);
  EXPECT_TRUE(contains(r, "on NVIDIA H100 80GB HBM3, NVIDIA A100-SXM4-80GB")) << r;
}

TEST_F(Progress, UnavailableCheckpointsKeepAPathOpen) {
  klab::record_exercise_pass(rec("05", "2026-11-22"));
  klab::record_exercise_pass(rec("09", "2026-11-23"));
  std::string r = klab::progress_report(klab::load_progress(), kBuild);
  EXPECT_TRUE(contains(r, "profiling n/a")) << r;
  EXPECT_TRUE(contains(r, "debugging n/a")) << r;
  EXPECT_FALSE(contains(r, "Learning path: Performance engineering")) << r;
}

TEST_F(Progress, AllLessonsWithoutDebuggingAndCapstoneIsNotTheWholeProgram) {
  std::vector<std::string> all;
  for (int i = 1; i <= 17; ++i) {
    char id[3];
    std::snprintf(id, sizeof id, "%02d", i);
    all.push_back(id);
    klab::record_exercise_pass(rec(id, "2026-12-01"));
  }
  // Lesson 09's second exercise is a checkpoint of the paths that hold 09: without it, they
  // stay open.
  std::string r = klab::progress_report(klab::load_progress(), all);
  EXPECT_FALSE(contains(r, "Learning path: Deep understanding")) << r;
  EXPECT_TRUE(contains(r, "Learning path: Fast track")) << r;
  all.push_back("09b");
  klab::record_exercise_pass(rec("09b", "2026-12-01"));
  r = klab::progress_report(klab::load_progress(), all);
  EXPECT_TRUE(contains(r, "18/18")) << r;
  for (const char* p : {"Fast track", "Deep understanding", "Transformer focus", "Computer vision"})
    EXPECT_TRUE(contains(r, std::string("Learning path: ") + p)) << p;
  EXPECT_FALSE(contains(r, "Learning path: Performance engineering")) << r;
  EXPECT_FALSE(contains(r, "complete program")) << r;   // Debugging and Mastery are 0/0
}

TEST_F(Progress, EverythingPassedPrintsTheProgramCertificate) {
  ProgressData d;
  for (int i = 1; i <= 17; ++i) {
    char id[3];
    std::snprintf(id, sizeof id, "%02d", i);
    d.exercises[id] = rec(id, "2026-12-01");
  }
  d.exercises["09b"] = rec("09b", "2026-12-01");
  for (const char* id : {"profiling", "debugging", "capstone"}) d.exercises[id] = rec(id, "2026-12-02");
  klab::save_progress(d);
  std::string r = klab::progress_report(klab::load_progress(), kBuild);
  EXPECT_TRUE(contains(r, "Kernel Lab — complete program")) << r;
  EXPECT_TRUE(contains(r, "Learning path: Performance engineering")) << r;
  EXPECT_TRUE(contains(r, "17 low-precision")) << r;
  EXPECT_TRUE(contains(r, "completed 2026-12-02")) << r;
}

// ---- corrupt and foreign files -------------------------------------------------------

TEST_F(Progress, CorruptJsonIsAClearErrorAndIsNeverOverwritten) {
  fs::create_directories(file_.parent_path());
  const std::string bad = R"({"format":"klab-progress","version":1,"exercises":{"01":)";
  write_text(file_, bad);
  expect_load_error("is not valid JSON");
  EXPECT_THROW(klab::record_exercise_pass(rec("02", "2026-11-22")), klab::Error);
  EXPECT_EQ(read_text(file_), bad) << "a corrupt file must be left as it was";
}

TEST_F(Progress, EmptyFileIsAClearError) {
  fs::create_directories(file_.parent_path());
  write_text(file_, "\n");
  expect_load_error("is empty");
}

TEST_F(Progress, ForeignJsonIsAClearError) {
  fs::create_directories(file_.parent_path());
  write_text(file_, R"({"name":"my-app","exercises":{}})");
  expect_load_error("not a Kernel Lab progress file");
  write_text(file_, R"([1,2,3])");
  expect_load_error("not a Kernel Lab progress file");
  write_text(file_, R"({"format":"klab-progress"})");
  expect_load_error("\"version\"");
  write_text(file_, R"({"format":"klab-progress","version":"1"})");
  expect_load_error("\"version\"");
  write_text(file_, R"({"format":"klab-progress","version":2,"exercises":{}})");
  expect_load_error("newer klab");
  write_text(file_, R"({"format":"klab-progress","version":1,"exercises":[]})");
  expect_load_error("\"exercises\" is not an object");
  write_text(file_, R"({"format":"klab-progress","version":1,"exercises":{"01":{"seed":1}}})");
  expect_load_error("\"passed_at\"");
  write_text(file_,
             R"({"format":"klab-progress","version":1,"exercises":{"01":{"passed_at":"x","seed":-4}}})");
  expect_load_error("\"seed\"");
  write_text(file_,
             R"({"format":"klab-progress","version":1,"exercises":{"../x":{"passed_at":"x"}}})");
  expect_load_error("not a lesson or checkpoint id");

  // The same rules through progress_from_json, with the caller's origin in the message.
  try {
    klab::progress_from_json(nlohmann::json{{"format", "other"}}, "test input");
    ADD_FAILURE() << "accepted a foreign document";
  } catch (const klab::Error& e) {
    EXPECT_TRUE(contains(e.what(), "test input")) << e.what();
  }
}

TEST_F(Progress, ADirectoryWhereTheFileShouldBeIsAClearError) {
  fs::create_directories(file_);
  expect_load_error("not a regular file");
}

// ---- atomic save ---------------------------------------------------------------------

TEST_F(Progress, SaveLeavesNoTemporaryFiles) {
  for (int i = 0; i < 5; ++i) klab::record_exercise_pass(rec("0" + std::to_string(i + 1), "2026-11-22"));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(file_.parent_path()))
    names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"progress.json"});
}

TEST_F(Progress, FailedSaveLeavesNoTemporaryFileAndThrows) {
  // A non-empty directory where the file should be: the final rename must fail.
  fs::create_directories(file_ / "x");
  ProgressData d;
  d.exercises["01"] = rec("01", "2026-11-22");
  EXPECT_THROW(klab::save_progress(d), klab::Error);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(file_.parent_path()))
    names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"progress.json"});
}

TEST_F(Progress, ReaderNeverSeesAHalfWrittenFile) {
  // Two alternating records of different sizes; a concurrent reader must always parse a
  // complete one. A save that truncated and rewrote the file in place would let the reader
  // see an empty or cut file here.
  ProgressData small, big;
  small.exercises["01"] = rec("01", "2026-11-22");
  for (int i = 1; i <= 17; ++i) {
    char id[3];
    std::snprintf(id, sizeof id, "%02d", i);
    big.exercises[id] = rec(id, "2026-11-22", 1.0, std::string(200, 'x'));
  }
  klab::save_progress(small);

  std::atomic<bool> stop{false};
  std::atomic<int> reads{0}, bad{0};
  std::string first_bad;
  std::thread reader([&] {
    while (!stop.load()) {
      try {
        std::size_t n = klab::load_progress().exercises.size();
        if (n != 1 && n != 17) ++bad;
      } catch (const std::exception& e) {
        if (bad++ == 0) first_bad = e.what();
      }
      ++reads;
    }
  });
  for (int i = 0; i < 200; ++i) klab::save_progress(i % 2 ? small : big);
  while (reads.load() < 50) std::this_thread::yield();   // the reader did run
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0) << first_bad;
}

// ---- the Triton track ---------------------------------------------------------------------

TEST_F(Progress, TritonPassIsRecordedApartAndRoundTrips) {
  klab::record_exercise_pass(rec("01", "2026-11-25", 1.02), /*triton=*/true);
  auto j = nlohmann::json::parse(read_text(file_));
  EXPECT_EQ(j["triton"]["01"]["passed_at"], "2026-11-25T12:00:00Z");
  EXPECT_TRUE(j["exercises"].empty());   // the CUDA exercise of 01 is not passed by it
  ProgressData d = klab::load_progress();
  EXPECT_TRUE(d.exercises.empty());
  ASSERT_EQ(d.triton.size(), 1u);
  EXPECT_DOUBLE_EQ(d.triton.at("01").speed_ratio, 1.02);
  klab::record_exercise_pass(rec("01", "2026-11-26", 0.9));   // the CUDA one, later
  d = klab::load_progress();
  EXPECT_EQ(d.exercises.size(), 1u);
  EXPECT_EQ(d.triton.at("01").passed_at, "2026-11-25T12:00:00Z");   // kept
}

TEST_F(Progress, TritonTrackInTheReport) {
  klab::record_exercise_pass(rec("01", "2026-11-25"), /*triton=*/true);
  const std::string r = klab::progress_report(klab::load_progress(), kBuild, {"01"});
  EXPECT_TRUE(contains(r, "Triton             1/1")) << r;
  EXPECT_TRUE(contains(r, ": 01")) << r;
  // A Triton pass is not a CUDA pass: lesson 01 is still to do, and no path is complete.
  EXPECT_TRUE(contains(r, "Missing elements   0/5")) << r;
  EXPECT_FALSE(contains(r, "Certificate of completion")) << r;
  const std::string none = klab::progress_report(ProgressData{}, kBuild, {"01"});
  EXPECT_TRUE(contains(none, "Triton             0/1")) << none;
}

TEST_F(Progress, TritonSectionIsValidatedLikeTheOthers) {
  fs::create_directories(file_.parent_path());
  write_text(file_, R"({"format":"klab-progress","version":1,"exercises":{},"triton":[]})");
  expect_load_error("\"triton\" is not an object");
  write_text(file_, R"({"format":"klab-progress","version":1,"triton":{"debugging":{"passed_at":"2026-11-25T12:00:00Z"}}})");
  expect_load_error("not a lesson id");
  write_text(file_, R"({"format":"klab-progress","version":1,"triton":{"01":{"passed_at":"yesterday"}}})");
  expect_load_error("not a UTC time");
  EXPECT_THROW(klab::record_exercise_pass(rec("debugging", "2026-11-25"), true), klab::Error);
}
