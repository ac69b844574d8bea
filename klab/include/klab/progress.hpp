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

struct ProgressData {
  std::map<std::string, ExerciseRecord> exercises;   // by lesson id
};

std::string progress_path();
ProgressData load_progress();                                 // empty when no file; throws on corrupt
ProgressData progress_from_json(const nlohmann::json& j, const std::string& origin);  // throws
nlohmann::json progress_to_json(const ProgressData& d);
void save_progress(const ProgressData& d);                    // atomic write (temp file + rename)
void record_exercise_pass(const ExerciseRecord& r);           // load, set, save

// Learning paths (curriculum.md, seed 000) and tracks (seed 004).
struct PathInfo {
  std::string id, title;
  std::vector<std::string> lessons;   // lesson ids whose exercises are the checkpoints
};
const std::vector<PathInfo>& learning_paths();

// Prints the progress report (lessons, paths, tracks; the certificate when a path or the
// whole program is complete). `available` lists lesson ids that have an exercise in this
// build. Returns the text so tests can inspect it.
std::string progress_report(const ProgressData& d, const std::vector<std::string>& available);

}  // namespace klab
