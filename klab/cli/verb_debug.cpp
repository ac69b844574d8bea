// klab/cli/verb_debug.cpp — the debugging track's verbs (verb_debug.hpp):
//
//   klab debug list          the catalog's cases: the tool that catches each, what you see,
//                            fixed or not (the progress file)
//   klab debug show CASE     one case: its bug's symptom, its file, its tool, the commands
//   klab debug run CASE      the case's kernel as it is in your file, under its tool
//                            (compute-sanitizer's memcheck, racecheck, initcheck or synccheck),
//                            or through the harness alone for a bug the checks see: the
//                            tool's report and what to do with it. Exit 1 while the tool
//                            reports the bug, 0 once it is clean, 77 without a GPU.
//
// A case is a further exercise of the catalog's lesson (Lesson::more_exercises, id
// "debug/<case>"): `klab check debug/<case>` grades your fix, `klab hint debug/<case>` gives
// the hints. The check runs the case's tool as run_tool_on_exercise does here: a fix must
// leave the tool's report clean, not only the output right (a race can give the right sums
// by luck).
#include "verb_debug.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "klab/cli.hpp"
#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/progress.hpp"
#include "verb_exercise.hpp"

namespace klab {

namespace fs = std::filesystem;

namespace {

bool executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

// The catalog's cases, in registration order.
std::vector<ExerciseInfo> all_cases() {
  std::vector<ExerciseInfo> out;
  for (const auto& l : registry().lessons())
    if (!l.folder.empty())
      for (const auto& e : exercises_of(l)) out.push_back(e);
  return out;
}

// "missing_barrier" or "debug/missing_barrier": the case; UsageError naming the cases.
ExerciseInfo find_case(const std::string& name) {
  const auto cases = all_cases();
  for (const auto& e : cases)
    if (e.id == name || e.id.substr(e.id.find('/') + 1) == name) return e;
  std::string names;
  for (const auto& e : cases) names += (names.empty() ? "" : ", ") + e.id.substr(e.id.find('/') + 1);
  throw UsageError(fmt::format("no debugging case '{}' (the cases: {})", sanitize_text(name, 40),
                               names.empty() ? "none in this build" : names));
}

std::string tool_name(const ExerciseInfo& e) {
  return e.tool.empty() ? std::string("the harness's checks") : "compute-sanitizer --tool " + e.tool;
}

int cmd_debug_list() {
  const auto cases = all_cases();
  if (cases.empty()) {
    std::printf("No debugging case in this build (configure with every lesson, or KLAB_LESSONS naming debug).\n");
    return kExitOk;
  }
  ProgressData d;
  try {
    d = load_progress();
  } catch (const Error& err) {
    std::fprintf(stderr, "klab: %s\n", err.what());
  }
  std::printf("The debugging catalog: each case is a kernel with one bug. `klab debug show CASE` says what you\n"
              "see, `klab debug run CASE` runs it under the tool that catches the bug, `klab check debug/CASE`\n"
              "grades your fix.\n\n");
  std::printf("  %-22s %-11s %-7s %s\n", "case", "tool", "state", "the bug");
  for (const auto& e : cases) {
    const bool fixed = d.exercises.count(e.id) != 0;
    std::printf("  %-22s %-11s %-7s %s\n", e.id.substr(e.id.find('/') + 1).c_str(),
                e.tool.empty() ? "harness" : e.tool.c_str(), fixed ? "fixed" : "open", e.title.c_str());
  }
  return kExitOk;
}

int cmd_debug_show(const std::string& name) {
  const ExerciseInfo e = find_case(name);
  const std::string c = e.id.substr(e.id.find('/') + 1);
  std::printf("%s — %s\n\n", e.id.c_str(), e.title.c_str());
  std::printf("What you see:  %s\n", e.symptom.c_str());
  std::printf("The kernel:    %s (op %s)\n", e.where.c_str(), e.op.c_str());
  std::printf("What finds it: %s\n\n", tool_name(e).c_str());
  const std::string run = "klab debug run " + c, hint = "klab hint " + e.id, check = "klab check " + e.id;
  const int w = static_cast<int>(std::max({run.size(), hint.size(), check.size()})) + 2;   // one column for every name
  std::printf("  %-*s the kernel under its tool: the report that names the bug\n", w, run.c_str());
  std::printf("  %-*s how to read the report and where to look, one hint at a time\n", w, hint.c_str());
  std::printf("  %-*s grades your fix: the checks%s\n", w, check.c_str(),
              e.tool.empty() ? "" : (", then " + e.tool + " clean").c_str());
  return kExitOk;
}

}  // namespace

std::string tail_lines(const std::string& text, int n) {
  std::size_t end = text.size();
  if (end > 0 && text[end - 1] == '\n') --end;
  std::size_t at = end;
  for (int k = 0; k < n; ++k) {
    const auto nl = at == 0 ? std::string::npos : text.rfind('\n', at - 1);
    if (nl == std::string::npos) return text;
    at = nl;
  }
  return text.substr(at + 1);
}

namespace {

int cmd_debug_run(const std::string& name) {
  const ExerciseInfo e = find_case(name);
  require_gpu();   // no GPU: one line, exit 77, before any tool starts
  std::printf("%s — %s\n", e.id.c_str(), e.title.c_str());
  if (e.tool.empty()) {
    // A bug the checks see: the case's test, as `klab test` prints it.
    std::fflush(stdout);
    const Captured r = run_capture({fs::read_symlink("/proc/self/exe").string(), "test", e.lesson->id, "--op", e.op,
                                    "--impl", "exercise", "--max-elems", std::to_string(kToolMaxElems)},
                                   true);
    std::printf("%s", tail_lines(r.out, 30).c_str());
    if (r.rc == kExitNoGpu) return kExitNoGpu;
    if (r.rc == kExitOk) {
      std::printf("\nThe checks pass: the kernel in %s is fixed (`klab check %s` records it).\n", e.where.c_str(),
                  e.id.c_str());
      return kExitOk;
    }
    std::printf("\nThe checks find the bug (the FAIL lines above). `klab hint %s` says how to read them.\n",
                e.id.c_str());
    return kExitFail;
  }
  const ToolRun r = run_tool_on_exercise(e, kToolMaxElems);
  if (r.no_gpu) {
    std::printf("%s", r.why.c_str());
    return kExitNoGpu;
  }
  if (!r.ran) throw Error(r.why);
  // The report's first error block and its summary: what the tool says, not every hazard.
  std::printf("\n%s\n", tail_lines(r.output, 40).c_str());
  std::printf("%s\n", r.summary.c_str());
  if (r.errors > 0) {
    std::printf("\n%s reports the bug in %s (%ld error%s above). `klab hint %s` says how to read it.\n",
                e.tool.c_str(), e.where.c_str(), r.errors, r.errors == 1 ? "" : "s", e.id.c_str());
    return kExitFail;
  }
  const std::string checks = r.klab_rc == kExitOk ? ", and the checks pass: `klab check " + e.id + "` records the fix"
                                                  : ", but the checks fail (above)";
  std::printf("\n%s is clean on %s%s.\n", e.tool.c_str(), e.where.c_str(), checks.c_str());
  return r.klab_rc == kExitOk ? kExitOk : kExitFail;
}

}  // namespace

std::string find_compute_sanitizer() {
  if (const char* env = std::getenv("KLAB_COMPUTE_SANITIZER"); env && *env) return executable(env) ? env : "";
  std::vector<fs::path> tried;
#ifdef KLAB_CUDA_BIN_DIR
  tried.push_back(fs::path(KLAB_CUDA_BIN_DIR) / "compute-sanitizer");
#endif
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string dir; std::getline(ss, dir, ':');)
      if (!dir.empty()) tried.push_back(fs::path(dir) / "compute-sanitizer");
  }
  for (const auto& p : tried)
    if (executable(p)) return p.string();
  return "";
}

ToolRun run_tool_on_exercise(const ExerciseInfo& e, std::int64_t max_elems) {
  ToolRun r;
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::vector<std::string> test = {self, "test", e.lesson->id, "--op", e.op, "--impl", "exercise",
                                         "--max-elems", std::to_string(max_elems)};
  const std::string san = find_compute_sanitizer();
  if (san.empty()) {
    r.why = "compute-sanitizer was not found (it ships in the CUDA toolkit's bin/; KLAB_COMPUTE_SANITIZER names it)";
    return r;
  }
  std::vector<std::string> args = {san, "--tool", e.tool};
  args.insert(args.end(), test.begin(), test.end());
  const Captured c = run_capture(args, true);
  r.output = c.out;
  r.klab_rc = c.rc;
  if (c.rc == kExitNoGpu) {
    r.no_gpu = true;
    r.why = "klab: no GPU: the case's kernel cannot run here (see docs/no-gpu.md)\n";
    return r;
  }
  // racecheck: "RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)"; the others:
  // "ERROR SUMMARY: 2 errors".
  const std::regex summary_re(e.tool == "racecheck" ? R"(RACECHECK SUMMARY: [0-9]+ hazards? displayed \(([0-9]+) errors?[^)]*\))"
                                                    : R"(ERROR SUMMARY: ([0-9]+) errors?)");
  for (auto it = std::sregex_iterator(c.out.begin(), c.out.end(), summary_re); it != std::sregex_iterator(); ++it) {
    r.summary = it->str();
    r.errors = std::stol((*it)[1].str());
  }
  if (r.summary.empty()) {
    r.why = fmt::format("compute-sanitizer --tool {} printed no summary (exit {}): {}", e.tool, c.rc,
                        sanitize_text(tail_lines(c.out, 3), 300));
    return r;
  }
  r.ran = true;
  return r;
}

CLI::App* add_debug_verb(CLI::App& app, DebugVerbArgs& a) {
  auto* debug = app.add_subcommand("debug", "the debugging track: list, show or run the broken-kernel catalog's cases");
  debug->add_option("what", a.which, "list | show CASE | run CASE")->required()->check(CLI::IsMember({"list", "show", "run"}));
  debug->add_option("case", a.name, "the case, e.g. missing_barrier");
  return debug;
}

int run_debug_verb(const CLI::App* verb, const DebugVerbArgs& a) {
  if (!verb->parsed()) return -1;
  if (a.which == "list") {
    if (!a.name.empty()) throw UsageError("debug list takes no case (`klab debug show " + sanitize_text(a.name, 40) + "`)");
    return cmd_debug_list();
  }
  if (a.name.empty()) throw UsageError(fmt::format("debug {} needs a case (`klab debug list` names them)", a.which));
  return a.which == "show" ? cmd_debug_show(a.name) : cmd_debug_run(a.name);
}

}  // namespace klab
