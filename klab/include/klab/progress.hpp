// klab/progress.hpp — the learner's progress: exercises passed, paths, tracks, certificate.
//
// Progress lives in a per-user file, never in the repository:
//   $KLAB_PROGRESS_FILE, else $XDG_DATA_HOME/klab/progress.json, else
//   ~/.local/share/klab/progress.json
// so it survives rebuilds and fresh clones. A corrupt or foreign file is reported with a
// clear message (klab::Error) and never overwritten silently.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace klab {

struct ExerciseRecord {
  std::string lesson;          // "01"
  std::string passed_at;       // ISO-8601 UTC
  double speed_ratio = 0;      // exercise median / reference median (lower is faster)
  std::uint64_t seed = 0;      // run seed of the passing check
  std::string device;          // GPU it passed on
};

// What the learner asked for on the way (`klab hint`, `klab solution --force`), by lesson.
struct LessonAids {
  int hints_seen = 0;              // hints shown by `klab hint NN` (0 .. kMaxHintsSeen)
  std::string solution_seen_at;    // ISO-8601 UTC: the solution was shown before a pass; "" never
  int triton_hints_seen = 0;       // the same for the Triton exercise (`--triton`)
  std::string triton_solution_seen_at;
};
inline constexpr int kMaxHintsSeen = 100;

struct ProgressData {
  std::map<std::string, ExerciseRecord> exercises;   // by lesson id
  std::map<std::string, ExerciseRecord> triton;      // the Triton track's passes, by lesson id
  std::map<std::string, LessonAids> aids;            // by lesson id ("aids" in the file)
};

std::string progress_path();
ProgressData load_progress();                                 // empty when no file; throws on corrupt
ProgressData progress_from_json(const nlohmann::json& j, const std::string& origin);  // throws
nlohmann::json progress_to_json(const ProgressData& d);
void save_progress(const ProgressData& d);                    // atomic write (temp file + rename)
// Load, set, save; triton: a pass of the lesson's Triton exercise (`klab check NN --triton`).
void record_exercise_pass(const ExerciseRecord& r, bool triton = false);

// Before a verb spends minutes on work that ends in a save (`klab check`): throws
// klab::Error when the file is corrupt or foreign (load_progress()'s message), or when a
// save could not be written (its folder cannot be created or is not writable).
void check_progress_usable();

// The ids a progress file may hold: a two-digit lesson id ("01".."99", a lesson a newer
// klab may know), a lesson's further exercise ("09b": the id and a letter b..z), a case of
// the debugging catalog ("debug/missing_barrier") or a named checkpoint ("profiling",
// "debugging", "capstone"; "debugging" is recorded when every case of a build has passed).
bool valid_checkpoint_id(const std::string& id);
// "2026-11-22T10:31:05Z" exactly (what utc_now_iso() writes), with a plausible date.
bool valid_utc_timestamp(const std::string& s);
// Text from the file (or any outside source) made safe to print on one terminal line:
// control characters (C0, DEL, C1, and so escape sequences) become '?', and anything past
// max_chars code points is cut, ending in "...".
std::string sanitize_text(const std::string& s, std::size_t max_chars = 80);

// Learning paths (curriculum.md, seed 000) and tracks (seed 004).
struct PathInfo {
  std::string id, title;
  // Checkpoint ids: lesson ids ("01") whose exercises `klab check` grades, or named
  // checkpoints that no lesson grades yet ("profiling", "debugging"; "capstone" for the
  // Mastery track), which the verbs that will grade them record under the same id.
  std::vector<std::string> lessons;
};
const std::vector<PathInfo>& learning_paths();

// The progress report (lessons, paths, tracks; the certificate when a path or the whole
// program is complete). `available` lists lesson ids that have an exercise in this build;
// a checkpoint not in it shows as "not yet available" unless a pass was recorded earlier.
// A path is complete when every checkpoint has a recorded pass (unavailable ones keep it
// open); the whole program when every planned lesson, "debugging" and "capstone" have.
// Returns the text (it prints nothing: the CLI prints it, tests inspect it).
// `available_triton`: lesson ids with a Triton exercise in this build (the Triton track).
std::string progress_report(const ProgressData& d, const std::vector<std::string>& available,
                            const std::vector<std::string>& available_triton = {});

}  // namespace klab
