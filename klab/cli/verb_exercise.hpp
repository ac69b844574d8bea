// klab/cli/verb_exercise.hpp — the verbs around an exercise: `klab hint`, `klab solution`,
// `klab reset`, and what `klab check` asks of them (the source tree, the stale-binary
// warning, the progress file checked before the work and a pass never lost silently).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "klab/progress.hpp"

namespace klab {

struct Impl;
struct Lesson;
struct ExerciseInfo;

struct ExerciseVerbArgs {
  std::string lesson;
  bool all = false;     // hint --all
  bool force = false;   // solution --force
  bool yes = false;     // reset --yes
  bool triton = false;  // --triton: the lesson's Triton exercise (exercise_triton.py)
};

// The Triton track's exercise of a lesson: the impl `exercise_triton` of its exercise op,
// timed against the lesson's `triton` version; nullptr for a lesson without one.
inline constexpr const char* kTritonExercise = "exercise_triton";
const Impl* triton_exercise_of(const Lesson& l);
// UsageError naming the lessons that have one, when `l` has no Triton exercise.
void require_triton_exercise(const Lesson& l);

// The CUDA exercise a key names ("09", "9", "attention": the lesson's own; "09b": its second),
// or with triton, the lesson's own whose Triton exercise is wanted. UsageError, one line
// naming what exists, for an unknown lesson, a lesson without one, an unknown letter, a
// letter with --triton, or --triton on a lesson without a Triton exercise.
ExerciseInfo exercise_for(const std::string& key, bool triton);

// Runs argv (found on PATH) with stdout captured and stderr discarded (or captured with it:
// with_stderr); rc -1 when it could not be started.
struct Captured {
  int rc = -1;
  std::string out;
};
Captured run_capture(const std::vector<std::string>& args, bool with_stderr = false);

// Adds hint, solution and reset to `app`; returns them (the caller allows their extras).
std::vector<CLI::App*> add_exercise_verbs(CLI::App& app, ExerciseVerbArgs& a);
// Runs whichever of them was parsed and returns its exit code; -1 when none was.
int run_exercise_verbs(const std::vector<CLI::App*>& verbs, const ExerciseVerbArgs& a);

// The Kernel Lab source tree: $KLAB_SOURCE_DIR when set, else the tree this klab was built
// from (the folder two levels above this file). Throws UsageError when it has no lessons/.
std::filesystem::path source_root();

// The `## Hint k` sections of a hints.md (k = 1, 2, ... in order), their text trimmed.
// Throws klab::Error naming `origin` when there are none, or they are misnumbered or empty.
std::vector<std::string> parse_hints(const std::string& text, const std::string& origin);
// The hints of a Triton exercise: the items of the "Hints" paragraph of the module
// docstring of an exercise_triton.py ("  1. text", continued on lines indented deeper),
// numbered 1, 2, ... in order. Throws klab::Error naming `origin` like parse_hints.
std::vector<std::string> parse_docstring_hints(const std::string& text, const std::string& origin);

// `klab check`, before its work: UsageError when the progress file is corrupt, foreign or
// cannot be saved (one line, exit 2).
void check_progress_before_run();
// `klab check`, before its work: the warning line (no newline) when the lesson's
// exercise file (exercise.cu, or exercise_triton.py for --triton) is newer than the running
// binary, else "".
std::string stale_exercise_warning(const Lesson& l, const std::string& file = "exercise.cu");
// `klab check`, after a pass: records it; prints where, and returns kExitOk, or prints on
// stderr that the pass was not recorded and why, and returns kExitFail.
int record_pass(const ExerciseRecord& r, bool triton = false);
// `klab check NN --triton`, before its work: compiles the impl's `built_from` (the learner's
// exercise_triton.py) ahead of time into a scratch folder, so that a file that does not
// compile is one line, "FILE:LINE: what" (UsageError); then, when the file is newer than
// this binary, rebuilds this binary's target and returns true: run it again. False when
// nothing was to do (or the build has no Triton: the check then says why nothing ran).
bool prepare_triton_exercise(const Impl& im);

}  // namespace klab
