// klab/cli/verb_debug.hpp — the debugging track's verbs: `klab debug list | show | run`, and
// what `klab check debug/<case>` asks of a case's tool (the fix must pass it clean).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace klab {

struct ExerciseInfo;

// One run of a compute-sanitizer tool over `klab test <lesson> --op <op> --impl exercise`
// (this binary, the shapes whose largest tensor has at most max_elems elements).
struct ToolRun {
  bool ran = false;        // false: the tool could not run (`why` says why), or no GPU
  bool no_gpu = false;     // klab test exited 77: nothing to judge
  std::string why;
  long errors = -1;        // the tool's error (racecheck: hazard) count
  std::string summary;     // its summary line: "RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)"
  std::string output;      // the tool's and klab's output
  int klab_rc = -1;        // klab test's own exit code under the tool
};
// The tool: $KLAB_COMPUTE_SANITIZER, the CUDA toolkit klab was built with, then PATH; ""
// when none.
std::string find_compute_sanitizer();
ToolRun run_tool_on_exercise(const ExerciseInfo& e, std::int64_t max_elems);
// The shapes a case's tool runs on: its test shapes up to this many elements.
inline constexpr std::int64_t kToolMaxElems = std::int64_t{1} << 20;

// The last n lines of a tool's output (a trailing newline ends the last line); all of it
// when it has no more.
std::string tail_lines(const std::string& text, int n);

struct DebugVerbArgs {
  std::string which;   // list | show | run
  std::string name;    // the case: "missing_barrier" or "debug/missing_barrier"
};
// Adds `debug` with its three sub-verbs to `app`; returns it.
CLI::App* add_debug_verb(CLI::App& app, DebugVerbArgs& a);
// Runs it when parsed and returns its exit code; -1 when it was not.
int run_debug_verb(const CLI::App* verb, const DebugVerbArgs& a);

}  // namespace klab
