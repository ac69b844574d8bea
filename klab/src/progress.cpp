// klab/src/progress.cpp — the learner's progress file, the learning paths, the tracks and
// the certificate (klab/progress.hpp; `klab check` records, `klab progress` reports).
//
// Rules this file keeps:
//   - The progress file is per user and outside the repository (progress_path()).
//   - A missing file is an empty record. A file that is not valid JSON, or is valid JSON but
//     not ours ("format": "klab-progress", "version": 1), is an error with a message that
//     names the file and what to do; it is never overwritten: record_exercise_pass() loads
//     first and so refuses to save over it.
//   - Saving writes a temporary file beside the target, flushes it to disk and renames it
//     over the target: a reader (or a crash) sees the old file or the new one, never half.
//   - A hand-edited file is validated as strictly as a foreign one: ids are lesson ids
//     ("NN"), a lesson's further exercises ("09b") or named checkpoints, dates are
//     utc_now_iso()'s format, numbers are in range, strings have a bounded length; and whatever it holds is printed through
//     sanitize_text() (no control characters reach the terminal).
//   - A path is complete when every checkpoint on it has a recorded pass. A checkpoint that
//     does not exist yet (a lesson not in this build, the profiling and debugging
//     checkpoints) keeps its path open; a pass recorded earlier still counts when the
//     current build lacks that lesson, because the learner did pass it.
//   - The whole program is complete when all four tracks are: every planned lesson's
//     exercise (Missing elements, and with it Optimization), the debugging catalog
//     (checkpoint "debugging") and the capstone (checkpoint "capstone").
#include "klab/progress.hpp"
#include "klab/report.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "klab/error.hpp"

namespace fs = std::filesystem;

namespace klab {

namespace {

constexpr const char* kFormat = "klab-progress";
constexpr int kVersion = 1;

// ---- the curriculum as `klab progress` knows it (curriculum.md) ----------------------

struct LessonEntry {
  const char* id;
  const char* slug;
};

// Every planned lesson. Which of them exist in a build comes from the `available` list the
// CLI passes (the registry's lessons with an exercise), not from this table.
constexpr LessonEntry kLessons[] = {
    {"01", "vector-add"},       {"02", "memory-access"},      {"03", "reductions"},
    {"04", "softmax"},          {"05", "matmul"},             {"06", "kernel-fusion"},
    {"07", "dropout"},          {"08", "layernorm"},          {"09", "attention"},
    {"10", "conv2d"},           {"11", "training-kernels"},   {"12", "moe"},
    {"13", "sparse"},           {"14", "extern-functions"},   {"15", "streams-and-graphs"},
    {"16", "multi-gpu"},        {"17", "low-precision"},
};

// A lesson's further exercises (Lesson::more_exercises), planned like the lessons: each is a
// checkpoint of its own, "09b", graded by `klab check 09b`.
struct MoreExercise {
  const char* id;
  const char* title;   // "attention backward"
  const char* file;    // the stub, in the lesson's folder
};
constexpr MoreExercise kMore[] = {
    {"09b", "attention backward", "exercise_bwd.cu"},
};

const MoreExercise* find_more(const std::string& id) {
  for (const auto& m : kMore)
    if (id == m.id) return &m;
  return nullptr;
}

// Checkpoints that no lesson grades. The verbs that will grade them (`klab profile`,
// `klab debug`, the capstone) record their pass under these ids, like a lesson id.
struct NamedCheckpoint {
  const char* id;
  const char* title;
  const char* note;   // what will provide it
};
constexpr NamedCheckpoint kNamed[] = {
    {"profiling", "profiling", "planned: `klab profile`"},
    {"debugging", "debugging track", "planned: the debugging/ broken-kernel catalog"},
    {"capstone", "capstone", "planned: the capstone/ transformer training step"},
};

const NamedCheckpoint* find_named(const std::string& id) {
  for (const auto& n : kNamed)
    if (id == n.id) return &n;
  return nullptr;
}

std::string slug_of(const std::string& id) {
  for (const auto& l : kLessons)
    if (id == l.id) return l.slug;
  return "";
}

// Ids the file may hold: lesson ids and named checkpoints; nothing that could be a path.
bool valid_id(const std::string& id) { return valid_checkpoint_id(id); }

constexpr double kMaxSpeedRatio = 1e6;       // an exercise a million times slower: not a record
constexpr std::size_t kMaxDeviceBytes = 256;  // GPU names are ~30 characters

bool is_lesson_id(const std::string& id) {
  return !id.empty() && std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A lesson id, or a lesson's further exercise: "09b".
bool is_exercise_id(const std::string& id) {
  return is_lesson_id(id) || (id.size() > 1 && id.back() >= 'b' && id.back() <= 'z' &&
                              is_lesson_id(id.substr(0, id.size() - 1)));
}

// A case of the debugging catalog: "debug/missing_barrier" (lower case, digits and _, at
// most 40 characters after the slash: nothing that could name another path).
bool is_case_id(const std::string& id) {
  constexpr std::string_view kPrefix = "debug/";
  if (id.size() <= kPrefix.size() || id.size() > kPrefix.size() + 40 || id.compare(0, kPrefix.size(), kPrefix) != 0)
    return false;
  const std::string name = id.substr(kPrefix.size());
  return name[0] >= 'a' && name[0] <= 'z' &&
         std::all_of(name.begin(), name.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

// "01 vector-add", "09b attention backward", "profiling", "18" (a lesson this klab does
// not know by name).
std::string checkpoint_label(const std::string& id) {
  if (const auto* n = find_named(id)) return n->title;
  if (const auto* m = find_more(id)) return id + " " + m->title;
  std::string slug = slug_of(id);
  return slug.empty() ? id : id + " " + slug;
}

// Every planned exercise: the lessons' and their further ones ("09" then "09b").
std::vector<std::string> planned_lesson_ids() {
  std::vector<std::string> ids;
  for (const auto& l : kLessons) ids.push_back(l.id);
  for (const auto& m : kMore) ids.push_back(m.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

// ---- small helpers -------------------------------------------------------------------

std::string getenv_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// "2026-11-22T10:31:05Z" -> "2026-11-22"; anything shorter is shown as it is.
std::string date_of(const std::string& iso) { return iso.size() >= 10 ? iso.substr(0, 10) : iso; }

// What an exercise was helped by, for the end of its report line: "   2 hints   (solution
// seen before passing, 2026-11-22)"; "" when nothing.
std::string aids_text(int hints_seen, const std::string& solution_seen_at) {
  std::string t;
  if (hints_seen > 0) t += "   " + std::to_string(hints_seen) + (hints_seen == 1 ? " hint" : " hints");
  if (!solution_seen_at.empty()) t += "   (solution seen before passing, " + date_of(solution_seen_at) + ")";
  return t;
}

// Display width of UTF-8 text: code points (everything this file prints is single-width).
std::size_t width(const std::string& s) {
  std::size_t w = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++w;
  return w;
}

std::string pad(const std::string& s, std::size_t w) {
  std::size_t have = width(s);
  return have >= w ? s : s + std::string(w - have, ' ');
}

std::string repeat(const std::string& s, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += s;
  return out;
}

std::string fmt_ratio(double r) {
  if (!(r > 0) || !std::isfinite(r)) return "";
  char buf[48];
  std::snprintf(buf, sizeof buf, "time %.2fx reference", r);
  return buf;
}

[[noreturn]] void fail(const std::string& origin, const std::string& what) {
  throw Error(origin + ": " + what);
}

std::string not_ours_advice() {
  return " klab leaves the file untouched. Point KLAB_PROGRESS_FILE at another file, or move "
         "this one away to start a fresh record (each `klab check NN` that passes records "
         "its lesson again).";
}

// ---- report pieces -------------------------------------------------------------------

struct State {
  const ProgressData& d;
  std::set<std::string> available;
  bool passed(const std::string& id) const { return d.exercises.count(id) != 0; }
  bool exists(const std::string& id) const { return available.count(id) != 0; }
};

// "done" / "todo" / "n/a": passed, available and not passed, not in this build.
const char* mark(const State& s, const std::string& id) {
  if (s.passed(id)) return "done";
  if (s.exists(id)) return "todo";
  return "n/a";
}

std::string framed(const std::vector<std::string>& lines) {
  std::size_t w = 0;
  for (const auto& l : lines) w = std::max(w, width(l));
  w += 4;   // two spaces each side
  std::string out = "╔" + repeat("═", w) + "╗\n";
  for (const auto& l : lines) {
    std::size_t left = (w - width(l)) / 2;   // centred: a certificate, not a table
    std::string row = std::string(left, ' ') + l;
    out += "║" + pad(row, w) + "║\n";
  }
  out += "╚" + repeat("═", w) + "╝\n";
  return out;
}

std::string certificate(const State& s, const std::string& what,
                        const std::vector<std::string>& checkpoints) {
  std::vector<std::string> lines = {"KERNEL LAB", "Certificate of completion", "", what, ""};
  std::size_t label_w = 0;
  for (const auto& id : checkpoints) label_w = std::max(label_w, width(checkpoint_label(id)));
  std::string last_date;
  std::vector<std::string> devices;
  for (const auto& id : checkpoints) {
    const ExerciseRecord& r = s.d.exercises.at(id);
    lines.push_back(pad(checkpoint_label(id), label_w) + "   passed " + date_of(r.passed_at));
    last_date = std::max(last_date, date_of(r.passed_at));
    if (!r.device.empty() && std::find(devices.begin(), devices.end(), r.device) == devices.end())
      devices.push_back(r.device);
  }
  lines.push_back("");
  std::string dev;
  for (std::size_t i = 0; i < devices.size(); ++i) dev += (i ? ", " : "") + devices[i];
  lines.push_back("on " + (dev.empty() ? std::string("(device not recorded)") : sanitize_text(dev, 120)));
  if (!last_date.empty()) lines.push_back("completed " + last_date);
  return framed(lines);
}

}  // namespace

// ---- validation and printing ---------------------------------------------------------

bool valid_checkpoint_id(const std::string& id) {
  if (find_named(id)) return true;
  if (is_case_id(id)) return true;
  // "01".."99", and a lesson's further exercise, "09b".."09z".
  const bool letter = id.size() == 3 && id[2] >= 'b' && id[2] <= 'z';
  const std::string digits = letter ? id.substr(0, 2) : id;
  return digits.size() == 2 && digits[0] >= '0' && digits[0] <= '9' && digits[1] >= '0' && digits[1] <= '9' &&
         digits != "00";
}

bool valid_utc_timestamp(const std::string& s) {
  // YYYY-MM-DDTHH:MM:SSZ
  static const char kShape[] = "dddd-dd-ddTdd:dd:ddZ";
  if (s.size() != sizeof kShape - 1) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (kShape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != kShape[i]) return false;
  }
  auto num = [&](std::size_t at, std::size_t n) { return std::stoi(s.substr(at, n)); };
  const int year = num(0, 4), month = num(5, 2), day = num(8, 2), h = num(11, 2), m = num(14, 2), sec = num(17, 2);
  return year >= 2000 && year <= 2999 && month >= 1 && month <= 12 && day >= 1 && day <= 31 && h <= 23 &&
         m <= 59 && sec <= 60;
}

std::string sanitize_text(const std::string& s, std::size_t max_chars) {
  std::string out;
  std::size_t chars = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    const bool starts_char = (c & 0xC0) != 0x80;
    if (starts_char && chars == max_chars) {
      out += "...";
      return out;
    }
    chars += starts_char;
    if (c < 0x20 || c == 0x7F) {
      out += '?';
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9F) {
      out += '?';   // a C1 control (U+0080..U+009F), e.g. CSI
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

// ---- the progress file ---------------------------------------------------------------

std::string progress_path() {
  std::string explicit_path = getenv_str("KLAB_PROGRESS_FILE");
  if (!explicit_path.empty()) return explicit_path;
  // XDG: a relative XDG_DATA_HOME is invalid and must be ignored.
  std::string xdg = getenv_str("XDG_DATA_HOME");
  if (!xdg.empty() && xdg[0] == '/') return (fs::path(xdg) / "klab" / "progress.json").string();
  std::string home = getenv_str("HOME");
  if (home.empty()) {
    struct passwd pw {};
    struct passwd* res = nullptr;
    char buf[4096];
    if (getpwuid_r(getuid(), &pw, buf, sizeof buf, &res) == 0 && res && res->pw_dir)
      home = res->pw_dir;
  }
  if (home.empty())
    throw Error("cannot place the progress file: neither KLAB_PROGRESS_FILE, XDG_DATA_HOME nor "
                "HOME is set (set KLAB_PROGRESS_FILE=/path/to/progress.json)");
  return (fs::path(home) / ".local" / "share" / "klab" / "progress.json").string();
}

ProgressData progress_from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat)
    fail(origin, "not a Kernel Lab progress file (it has no \"format\": \"klab-progress\" field)." +
                     not_ours_advice());
  const auto& v = j.contains("version") ? j["version"] : nlohmann::json();
  if (!v.is_number_integer())
    fail(origin, "progress file without an integer \"version\" field." + not_ours_advice());
  if (v.get<long long>() != kVersion) {
    if (v.get<long long>() > kVersion)
      fail(origin, "progress file version " + v.dump() + " was written by a newer klab; this klab "
                   "reads version 1. Update this checkout, or point KLAB_PROGRESS_FILE elsewhere.");
    fail(origin, "unknown progress file version " + v.dump() + " (this klab reads version 1)." +
                     not_ours_advice());
  }
  ProgressData d;
  // "exercises": the CUDA exercises and named checkpoints; "triton": the Triton track's
  // exercises (`klab check NN --triton`), lesson ids only. The same record in both.
  for (const char* section : {"exercises", "triton"}) {
    const bool triton = std::string(section) == "triton";
    if (!j.contains(section)) continue;   // a fresh file may have no passes yet
    const auto& ex = j[section];
    if (!ex.is_object()) fail(origin, "\"" + std::string(section) + "\" is not an object." + not_ours_advice());
    for (const auto& [key, rec] : ex.items()) {
      const std::string where = (triton ? "Triton exercise \"" : "exercise \"") + sanitize_text(key, 40) + "\"";
      if (triton && !is_lesson_id(key)) fail(origin, where + " is not a lesson id." + not_ours_advice());
      if (!valid_id(key)) fail(origin, where + " is not a lesson or checkpoint id." + not_ours_advice());
      if (!rec.is_object()) fail(origin, where + " is not an object." + not_ours_advice());
      ExerciseRecord r;
      r.lesson = key;
      if (!rec.contains("passed_at") || !rec["passed_at"].is_string())
        fail(origin, where + " has no \"passed_at\" date." + not_ours_advice());
      r.passed_at = rec["passed_at"].get<std::string>();
      if (rec.contains("speed_ratio")) {
        const auto& s = rec["speed_ratio"];
        // null: the check could not time it (a NaN is written as null).
        if (s.is_number()) r.speed_ratio = s.get<double>();
        else if (!s.is_null()) fail(origin, where + ": \"speed_ratio\" is not a number." + not_ours_advice());
        if (!(r.speed_ratio >= 0 && r.speed_ratio <= kMaxSpeedRatio))
          fail(origin, where + ": \"speed_ratio\" " + s.dump() + " is out of range (0 to 1e6)." + not_ours_advice());
      }
      if (rec.contains("seed")) {
        const auto& s = rec["seed"];
        if (s.is_number_unsigned()) r.seed = s.get<std::uint64_t>();
        else if (s.is_number_integer() && s.get<long long>() >= 0)
          r.seed = static_cast<std::uint64_t>(s.get<long long>());
        else fail(origin, where + ": \"seed\" is not a non-negative integer." + not_ours_advice());
      }
      if (rec.contains("device")) {
        if (!rec["device"].is_string())
          fail(origin, where + ": \"device\" is not a string." + not_ours_advice());
        r.device = rec["device"].get<std::string>();
        if (r.device.size() > kMaxDeviceBytes)
          fail(origin, where + ": \"device\" is " + std::to_string(r.device.size()) + " bytes long (at most " +
                           std::to_string(kMaxDeviceBytes) + ")." + not_ours_advice());
      }
      if (!valid_utc_timestamp(r.passed_at))
        fail(origin, where + ": \"passed_at\" \"" + sanitize_text(r.passed_at, 40) +
                         "\" is not a UTC time like 2026-11-22T10:31:05Z." + not_ours_advice());
      (triton ? d.triton : d.exercises)[key] = std::move(r);
    }
  }
  if (j.contains("aids")) {
    const auto& aids = j["aids"];
    if (!aids.is_object()) fail(origin, "\"aids\" is not an object." + not_ours_advice());
    for (const auto& [key, rec] : aids.items()) {
      const std::string where = "aids of \"" + sanitize_text(key, 40) + "\"";
      if (!valid_id(key)) fail(origin, where + ": not a lesson or checkpoint id." + not_ours_advice());
      if (!rec.is_object()) fail(origin, where + " is not an object." + not_ours_advice());
      LessonAids a;
      auto count = [&](const char* name, int& out) {
        if (!rec.contains(name)) return;
        const auto& h = rec[name];
        if (!h.is_number_integer() || h.get<long long>() < 0 || h.get<long long>() > kMaxHintsSeen)
          fail(origin, where + ": \"" + name + "\" " + sanitize_text(h.dump(), 40) + " is not a count from 0 to " +
                           std::to_string(kMaxHintsSeen) + "." + not_ours_advice());
        out = static_cast<int>(h.get<long long>());
      };
      auto time = [&](const char* name, std::string& out) {
        if (!rec.contains(name)) return;
        const auto& t = rec[name];
        if (!t.is_string() || !valid_utc_timestamp(t.get<std::string>()))
          fail(origin, where + ": \"" + name + "\" " + sanitize_text(t.dump(), 40) +
                           " is not a UTC time like 2026-11-22T10:31:05Z." + not_ours_advice());
        out = t.get<std::string>();
      };
      count("hints_seen", a.hints_seen);
      time("solution_seen_at", a.solution_seen_at);
      count("triton_hints_seen", a.triton_hints_seen);
      time("triton_solution_seen_at", a.triton_solution_seen_at);
      d.aids[key] = std::move(a);
    }
  }
  return d;
}

nlohmann::json progress_to_json(const ProgressData& d) {
  auto records = [](const std::map<std::string, ExerciseRecord>& m) {
    nlohmann::json ex = nlohmann::json::object();
    for (const auto& [id, r] : m) {
      nlohmann::json rec;
      rec["passed_at"] = r.passed_at;
      rec["speed_ratio"] = std::isfinite(r.speed_ratio) ? nlohmann::json(r.speed_ratio) : nlohmann::json();
      rec["seed"] = r.seed;
      rec["device"] = r.device;
      ex[id] = std::move(rec);
    }
    return ex;
  };
  nlohmann::json j = {{"format", kFormat}, {"version", kVersion}, {"exercises", records(d.exercises)}};
  if (!d.triton.empty()) j["triton"] = records(d.triton);
  nlohmann::json aids = nlohmann::json::object();
  for (const auto& [id, a] : d.aids) {
    nlohmann::json rec = nlohmann::json::object();
    if (a.hints_seen > 0) rec["hints_seen"] = a.hints_seen;
    if (!a.solution_seen_at.empty()) rec["solution_seen_at"] = a.solution_seen_at;
    if (a.triton_hints_seen > 0) rec["triton_hints_seen"] = a.triton_hints_seen;
    if (!a.triton_solution_seen_at.empty()) rec["triton_solution_seen_at"] = a.triton_solution_seen_at;
    if (!rec.empty()) aids[id] = std::move(rec);
  }
  if (!aids.empty()) j["aids"] = std::move(aids);
  return j;
}

ProgressData load_progress() {
  const std::string path = progress_path();
  const std::string origin = "progress file " + path;
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (ec || st.type() == fs::file_type::not_found) {
    if (st.type() == fs::file_type::not_found) return {};   // nothing passed yet
    fail(origin, "cannot be examined: " + ec.message());
  }
  if (st.type() != fs::file_type::regular) fail(origin, "is not a regular file.");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(origin, std::string("cannot be opened: ") + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(origin, "cannot be read.");
  const std::string text = ss.str();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    fail(origin, "is empty, not a progress record (an interrupted copy?)." + not_ours_advice());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string why = e.what();
    if (auto p = why.find("] "); p != std::string::npos) why = why.substr(p + 2);
    fail(origin, "is not valid JSON (" + why + ")." + not_ours_advice());
  }
  return progress_from_json(j, origin);
}

void save_progress(const ProgressData& d) {
  const fs::path path = progress_path();
  const std::string origin = "progress file " + path.string();
  // Never write a file that load_progress() would reject.
  for (const auto& [id, r] : d.exercises)
    if (!valid_id(id)) fail(origin, "refusing to save the invalid checkpoint id \"" + sanitize_text(id, 40) + "\"");
  for (const auto& [id, a] : d.aids)
    if (!valid_id(id) || a.hints_seen < 0 || a.hints_seen > kMaxHintsSeen || a.triton_hints_seen < 0 ||
        a.triton_hints_seen > kMaxHintsSeen)
      fail(origin, "refusing to save invalid aids for \"" + sanitize_text(id, 40) + "\"");
  std::error_code ec;
  if (path.has_parent_path()) {
    fs::create_directories(path.parent_path(), ec);
    if (ec) fail(origin, "cannot create its folder " + path.parent_path().string() + ": " + ec.message());
  }
  const std::string text = progress_to_json(d).dump(2) + "\n";

  // Temporary name unique per process and per call, in the same folder (rename is atomic
  // only within one file system).
  static std::atomic<unsigned> counter{0};
  const std::string tmp = path.string() + ".tmp-" + std::to_string(getpid()) + "-" +
                          std::to_string(counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail(origin, "cannot write " + tmp + ": " + std::strerror(errno));
  auto give_up = [&](const std::string& step) {
    int e = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail(origin, step + ": " + std::strerror(e) + " (the previous file, if any, is unchanged)");
  };
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      give_up("cannot write " + tmp);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) give_up("cannot flush " + tmp);
  if (::close(fd) != 0) {
    fd = -1;
    give_up("cannot close " + tmp);
  }
  fd = -1;
  if (::rename(tmp.c_str(), path.c_str()) != 0) give_up("cannot replace it with " + tmp);
  // Make the rename itself durable; failure here loses nothing that is already visible.
  const std::string dir = path.has_parent_path() ? path.parent_path().string() : ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void check_progress_usable() {
  (void)load_progress();   // corrupt, foreign, not a regular file: its own message
  const fs::path path = progress_path();
  const std::string origin = "progress file " + path.string();
  // A save writes a temporary file in the file's folder and renames it: the folder (or the
  // nearest one that exists, which save_progress() would create the rest under) must be a
  // writable directory.
  fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::error_code ec;
  while (!fs::exists(dir, ec) && dir.has_parent_path() && dir != dir.parent_path()) dir = dir.parent_path();
  if (!fs::is_directory(dir, ec))
    fail(origin, "cannot be saved: " + dir.string() + " is not a directory (point KLAB_PROGRESS_FILE elsewhere).");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail(origin, "cannot be saved: " + dir.string() + " is not writable (" + std::strerror(errno) +
                     "); a pass could not be recorded (fix its permissions or point KLAB_PROGRESS_FILE elsewhere).");
}

void record_exercise_pass(const ExerciseRecord& r, bool triton) {
  if (!valid_id(r.lesson) || (triton && !is_lesson_id(r.lesson)))
    throw Error("record_exercise_pass: invalid lesson id \"" + sanitize_text(r.lesson, 40) + "\"");
  ProgressData d = load_progress();   // throws on a corrupt or foreign file: never saved over
  ExerciseRecord rec = r;
  if (rec.passed_at.empty()) rec.passed_at = utc_now_iso();
  // The latest passing check replaces an earlier one: the record describes the code the
  // learner has now (its speed, its device), and a certificate dates from the last pass.
  (triton ? d.triton : d.exercises)[rec.lesson] = std::move(rec);
  save_progress(d);
}

// ---- paths and the report ------------------------------------------------------------

const std::vector<PathInfo>& learning_paths() {
  static const std::vector<PathInfo> paths = {
      {"fast-track", "Fast track", {"01", "04", "05"}},
      {"deep-understanding", "Deep understanding",
       {"01", "02", "03", "04", "05", "06", "07", "08", "09", "09b", "10", "11", "12", "13", "14"}},
      {"transformer", "Transformer focus", {"01", "04", "08", "09", "09b", "07"}},
      {"computer-vision", "Computer vision", {"01", "05", "10", "04", "08", "07", "15"}},
      {"performance", "Performance engineering", {"05", "09", "09b", "profiling", "debugging"}},
  };
  return paths;
}

std::string progress_report(const ProgressData& d, const std::vector<std::string>& available,
                            const std::vector<std::string>& available_triton) {
  State s{d, std::set<std::string>(available.begin(), available.end())};
  std::ostringstream o;

  std::string where;
  try {
    where = progress_path();
  } catch (const Error& e) {
    where = "(no progress file: " + std::string(e.what()) + ")";
  }
  o << "Kernel Lab progress   (" << where << ")\n\n";

  // Lessons: every planned one, plus any lesson the build or the file knows that this
  // table does not (a newer lesson, an older file).
  std::set<std::string> lesson_ids;
  for (const auto& id : planned_lesson_ids()) lesson_ids.insert(id);
  for (const auto& id : available)
    if (is_exercise_id(id)) lesson_ids.insert(id);
  for (const auto& [id, r] : d.exercises)
    if (is_exercise_id(id)) lesson_ids.insert(id);
  for (const auto& [id, a] : d.aids)
    if (is_exercise_id(id)) lesson_ids.insert(id);

  o << "Lessons — `klab check NN` grades an exercise (09b: lesson 09's second) and records the pass\n";
  std::string next;
  for (const auto& id : lesson_ids) {
    std::string line = "  " + pad(checkpoint_label(id), 24);
    if (s.passed(id)) {
      const ExerciseRecord& r = d.exercises.at(id);
      line += "passed " + date_of(r.passed_at);
      std::string ratio = fmt_ratio(r.speed_ratio);
      if (!ratio.empty()) line += "   " + ratio;
      if (!r.device.empty()) line += "   " + sanitize_text(r.device, 60);
      if (!s.exists(id)) line += "   (not in this build)";
    } else if (s.exists(id)) {
      line += "to do: klab check " + id;
      if (next.empty()) next = id;
    } else {
      line += "not yet available";
    }
    if (auto a = d.aids.find(id); a != d.aids.end()) line += aids_text(a->second.hints_seen, a->second.solution_seen_at);
    // Trim the padding of short lines.
    line.erase(line.find_last_not_of(' ') + 1);
    o << line << "\n";
  }

  o << "\nLearning paths — complete when every checkpoint has passed; a checkpoint that is\n"
       "not yet available keeps its path open (done / todo / n/a = not yet available)\n";
  std::vector<const PathInfo*> complete_paths;
  for (const auto& p : learning_paths()) {
    std::size_t n_done = 0;
    for (const auto& id : p.lessons) n_done += s.passed(id);
    const bool complete = n_done == p.lessons.size();
    if (complete) complete_paths.push_back(&p);
    std::string head = "  " + pad(p.title, 25) +
                       pad(std::to_string(n_done) + "/" + std::to_string(p.lessons.size()), 7);
    head += complete ? "COMPLETE" : "";
    head.erase(head.find_last_not_of(' ') + 1);
    o << head << "\n";
    std::string row = "      ";
    for (const auto& id : p.lessons) {
      std::string tok = id + " " + mark(s, id);
      if (width(row) + width(tok) + 2 > 88) {
        row.erase(row.find_last_not_of(' ') + 1);
        o << row << "\n";
        row = "      ";
      }
      row += tok + "  ";
    }
    row.erase(row.find_last_not_of(' ') + 1);
    o << row << "\n";
  }

  // Tracks (seed 004).
  const auto planned = planned_lesson_ids();
  // Counted over the lessons of this build; passes of lessons this build lacks are noted.
  std::size_t ex_avail = 0, ex_passed = 0, ex_elsewhere = 0, ex_passed_planned = 0;
  for (const auto& id : lesson_ids) {
    ex_avail += s.exists(id);
    ex_passed += s.exists(id) && s.passed(id);
    ex_elsewhere += !s.exists(id) && s.passed(id);
  }
  for (const auto& id : planned) ex_passed_planned += s.passed(id);
  const bool lessons_done = ex_passed_planned == planned.size();
  auto count = [](std::size_t a, std::size_t b) { return std::to_string(a) + "/" + std::to_string(b); };
  std::string avail_note = " (" + std::to_string(ex_avail) + " in this build, " +
                           std::to_string(planned.size()) + " planned";
  if (ex_elsewhere) avail_note += "; " + std::to_string(ex_elsewhere) + " more passed, not in this build";
  avail_note += ")";

  o << "\nTracks\n";
  o << "  " << pad("Missing elements", 19) << pad(count(ex_passed, ex_avail), 7)
    << "exercises passed" << avail_note << (lessons_done ? "   COMPLETE" : "") << "\n";
  o << "  " << pad("Optimization", 19) << pad(count(ex_passed, ex_avail), 7)
    << "version ladders; a lesson counts when its exercise passed"
    << (lessons_done ? "   COMPLETE" : "") << "\n";
  auto named_track = [&](const char* title, const std::string& id) {
    const auto* n = find_named(id);
    o << "  " << pad(title, 19);
    if (s.passed(id))
      o << pad("1/1", 7) << "passed " << date_of(d.exercises.at(id).passed_at) << "   COMPLETE\n";
    else if (s.exists(id))
      o << pad("0/1", 7) << "to do\n";
    else
      o << pad("0/0", 7) << "not yet available (" << n->note << ")\n";
    return s.passed(id);
  };
  {
    // The Triton track: lessons whose exercise_triton.py this build grades, and passes.
    std::size_t avail = 0, passed = 0, elsewhere = 0;
    for (const auto& id : available_triton) {
      ++avail;
      passed += d.triton.count(id);
    }
    for (const auto& [id, r] : d.triton)
      elsewhere += std::find(available_triton.begin(), available_triton.end(), id) == available_triton.end();
    o << "  " << pad("Triton", 19) << pad(count(passed, avail), 7) << "Triton exercises passed (`klab check NN --triton`)";
    if (elsewhere) o << "; " << elsewhere << " more passed, not in this build";
    std::string ids;
    for (const auto& [id, r] : d.triton) ids += (ids.empty() ? "" : ", ") + id;
    if (!ids.empty()) o << ": " << ids;
    o << "\n";
    for (const auto& [id, a] : d.aids)   // what the Triton exercises were helped by
      if (const std::string t = aids_text(a.triton_hints_seen, a.triton_solution_seen_at); !t.empty())
        o << "      " << id << " (Triton):" << t << "\n";
  }
  // Debugging: the catalog's cases (`klab check debug/<case>`); the checkpoint "debugging"
  // is recorded when every case of the build has passed.
  std::set<std::string> cases;
  for (const auto& id : available)
    if (is_case_id(id)) cases.insert(id);
  for (const auto& [id, r] : d.exercises)
    if (is_case_id(id)) cases.insert(id);
  bool debugging_done = false;
  if (cases.empty()) {
    debugging_done = named_track("Debugging", "debugging");
  } else {
    std::size_t fixed = 0;
    for (const auto& id : cases) fixed += s.passed(id);
    debugging_done = s.passed("debugging");
    o << "  " << pad("Debugging", 19) << pad(count(fixed, cases.size()), 7) << "broken kernels fixed (`klab debug list`)"
      << (debugging_done ? "   COMPLETE" : "") << "\n";
    for (const auto& id : cases) {
      std::string line = "      " + pad(id, 32);
      if (s.passed(id)) line += "passed " + date_of(d.exercises.at(id).passed_at) + (s.exists(id) ? "" : "   (not in this build)");
      else if (s.exists(id)) line += "to do: klab check " + id;
      else line += "not yet available";
      if (auto a = d.aids.find(id); a != d.aids.end()) line += aids_text(a->second.hints_seen, a->second.solution_seen_at);
      o << line << "\n";
    }
  }
  const bool mastery_done = named_track("Mastery", "capstone");
  const bool program_done = lessons_done && debugging_done && mastery_done;

  if (!next.empty()) {
    const auto* more = find_more(next);
    const std::string lesson = more ? next.substr(0, next.size() - 1) : next;
    std::string slug = slug_of(lesson);
    o << "\nNext: open lessons/" << lesson << (slug.empty() ? "" : "-" + slug) << "/README.md, complete its "
      << (more ? more->file : "exercise.cu") << ", then run `klab check " << next << "`.\n";
  } else if (!program_done && ex_avail > 0 && ex_passed >= ex_avail) {
    o << "\nEvery exercise in this build has passed; the other checkpoints are not yet available.\n";
  }

  for (const PathInfo* p : complete_paths)
    o << "\n" << certificate(s, "Learning path: " + p->title, p->lessons);
  if (program_done) {
    std::vector<std::string> all = planned;
    all.push_back("debugging");
    all.push_back("capstone");
    o << "\n" << certificate(s, "Kernel Lab — complete program", all);
  }
  return o.str();
}

}  // namespace klab
