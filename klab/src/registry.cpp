#include <algorithm>
#include <cctype>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"

namespace klab {

std::string Problem::label() const {
  std::string s = dims_to_string(shape) + " " + dtype_name(dtype);
  if (!variant.empty()) s += " " + variant;
  return s;
}

const char* impl_kind_name(ImplKind k) {
  switch (k) {
    case ImplKind::cpu: return "cpu";
    case ImplKind::cuda: return "cuda";
    case ImplKind::triton: return "triton";
    case ImplKind::vendor: return "vendor";
    case ImplKind::exercise: return "exercise";
  }
  return "?";
}

Registry& registry() {
  static Registry r;  // function-local: safe to use from other files' static initialisers
  return r;
}

// Registration runs before main(), in an unspecified order across files, so add() only
// records; consistency (every impl's op exists, names unique) is checked by validate().
bool Registry::add(Lesson l) { lessons_.push_back(std::move(l)); return true; }
bool Registry::add(Op op) { ops_.push_back(std::move(op)); return true; }
bool Registry::add(Impl impl) { impls_.push_back(std::move(impl)); return true; }

std::vector<std::string> Registry::validate() const {
  std::vector<std::string> problems;
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    const auto& op = ops_[i];
    if (!find_lesson(op.lesson)) problems.push_back(fmt::format("op {}: lesson {} is not registered", op.name, op.lesson));
    if (!op.inputs || !op.outputs || !op.reference) problems.push_back(fmt::format("op {}: inputs, outputs and reference are required", op.name));
    for (std::size_t j = 0; j < i; ++j)
      if (ops_[j].name == op.name) problems.push_back(fmt::format("op {} registered twice", op.name));
  }
  for (const auto& l : lessons_)
    for (const auto& e : l.more_exercises) {
      if (l.folder.empty()) {
        // "09b", "09c", ...: the lesson's id and one letter past a (a: the lesson's own).
        if (e.id.size() != l.id.size() + 1 || e.id.compare(0, l.id.size(), l.id) != 0 || e.id.back() < 'b' ||
            e.id.back() > 'z')
          problems.push_back(fmt::format("lesson {}: exercise id '{}' is not {}b, {}c, ...", l.id, e.id, l.id, l.id));
      } else {
        // A catalog's case: "<lesson>/<name>", the name in lower case, digits and _.
        const std::string name = e.id.rfind(l.id + "/", 0) == 0 ? e.id.substr(l.id.size() + 1) : "";
        const bool ok = !name.empty() && name.size() <= 40 && std::islower(static_cast<unsigned char>(name[0])) &&
                        std::all_of(name.begin(), name.end(), [](char c) {
                          return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_';
                        });
        if (!ok) problems.push_back(fmt::format("lesson {}: case id '{}' is not {}/<name>", l.id, e.id, l.id));
      }
      if (!e.tool.empty() && e.tool != "memcheck" && e.tool != "racecheck" && e.tool != "initcheck" &&
          e.tool != "synccheck")
        problems.push_back(fmt::format("lesson {}: exercise {}: tool '{}' is not a compute-sanitizer tool", l.id,
                                       e.id, e.tool));
      if (e.op.empty() || (e.reference.empty() && l.folder.empty()) || e.file.empty() || e.hints.empty())
        problems.push_back(fmt::format("lesson {}: exercise {} needs op, reference, file and hints", l.id, e.id));
      else if (const Op* op = find_op(e.op); !op || op->lesson != l.id)
        problems.push_back(fmt::format("lesson {}: exercise {}: op {} is not the lesson's", l.id, e.id, e.op));
      else if (!e.reference.empty() && !find_impl(e.op, e.reference))
        problems.push_back(fmt::format("lesson {}: exercise {}: no impl {}/{}", l.id, e.id, e.op, e.reference));
    }
  for (std::size_t i = 0; i < impls_.size(); ++i) {
    const auto& im = impls_[i];
    if (!find_op(im.op)) problems.push_back(fmt::format("impl {}: op {} is not registered", im.name, im.op));
    if (!im.run) problems.push_back(fmt::format("impl {}/{}: no run()", im.op, im.name));
    for (std::size_t j = 0; j < i; ++j)
      if (impls_[j].op == im.op && impls_[j].name == im.name) problems.push_back(fmt::format("impl {}/{} registered twice", im.op, im.name));
  }
  return problems;
}

const Lesson* Registry::find_lesson(const std::string& key) const {
  for (const auto& l : lessons_) {
    if (key == l.id || key == l.slug || key == l.id + "-" + l.slug) return &l;
    // "1" for "01"
    // ("debug", the catalog's id, is no number.)
    if (!key.empty() && std::all_of(key.begin(), key.end(), ::isdigit) && key.size() < 4 && !l.id.empty() &&
        std::all_of(l.id.begin(), l.id.end(), ::isdigit) && std::stoi(key) == std::stoi(l.id))
      return &l;
  }
  return nullptr;
}

std::string lesson_folder(const Lesson& l) { return l.folder.empty() ? "lessons/" + l.id + "-" + l.slug : l.folder; }

std::vector<ExerciseInfo> exercises_of(const Lesson& l) {
  std::vector<ExerciseInfo> out;
  const std::string folder = lesson_folder(l);
  if (!l.exercise_op.empty())
    out.push_back({.lesson = &l, .id = l.id, .op = l.exercise_op, .reference = l.exercise_reference,
                   .file = "exercise.cu", .hints = "hints.md", .where = l.exercise_hint, .title = "",
                   .folder = folder, .tool = "", .symptom = ""});
  for (const auto& e : l.more_exercises)
    out.push_back({.lesson = &l, .id = e.id, .op = e.op, .reference = e.reference, .file = e.file, .hints = e.hints,
                   .where = folder + "/" + e.file, .title = e.title, .folder = folder, .tool = e.tool,
                   .symptom = e.symptom});
  return out;
}

bool find_exercise(const std::string& key, ExerciseInfo& out, const Lesson** lesson_out) {
  // A catalog's case by its whole id ("debug/missing_barrier"): its lesson is the part
  // before the slash.
  if (const auto slash = key.find('/'); slash != std::string::npos) {
    const Lesson* l = registry().find_lesson(key.substr(0, slash));
    if (lesson_out) *lesson_out = l;
    if (!l) return false;
    for (const auto& e : exercises_of(*l))
      if (e.id == key) {
        out = e;
        return true;
      }
    return false;
  }
  // "09b", "9b": the digits name the lesson, the letter its exercise; else the whole key does.
  std::string lesson_key = key, letter;
  if (key.size() >= 2 && std::islower(static_cast<unsigned char>(key.back())) &&
      std::all_of(key.begin(), key.end() - 1, ::isdigit)) {
    lesson_key = key.substr(0, key.size() - 1);
    letter = key.substr(key.size() - 1);
  }
  const Lesson* l = registry().find_lesson(lesson_key);
  if (lesson_out) *lesson_out = l;
  if (!l) return false;
  for (const auto& e : exercises_of(*l))
    if (e.id == l->id + letter) {
      out = e;
      return true;
    }
  return false;
}

const Op* Registry::find_op(const std::string& name) const {
  for (const auto& op : ops_)
    if (op.name == name) return &op;
  return nullptr;
}

std::vector<const Op*> Registry::ops_of(const std::string& lesson_id) const {
  std::vector<const Op*> out;
  for (const auto& op : ops_)
    if (op.lesson == lesson_id) out.push_back(&op);
  return out;
}

// impls_of lists an op's impls as its ladder, whatever order the object files registered
// them in: the CPU and CUDA versions by their number (v2_... before v12_...; an unnumbered
// one, such as a cpu baseline, first), then Triton, then the vendor baselines, then the
// exercises; ties keep their registration order. klab list, test and bench show that order.
namespace {
// The rung of an impl on its op's ladder: (group, version number).
std::pair<int, long> rung(const Impl& im) {
  int group = 0;
  switch (im.kind) {
    case ImplKind::cpu:
    case ImplKind::cuda: group = 0; break;
    case ImplKind::triton: group = 1; break;
    case ImplKind::vendor: group = 2; break;
    case ImplKind::exercise: group = 3; break;
  }
  long version = 0;   // "v12_splitk" is 12; a name that is not vN_... is 0
  const std::string& n = im.name;
  if (n.size() > 2 && n[0] == 'v' && std::isdigit(static_cast<unsigned char>(n[1]))) {
    std::size_t i = 1;
    while (i < n.size() && std::isdigit(static_cast<unsigned char>(n[i]))) ++i;
    if (i < n.size() && n[i] == '_') version = std::stol(n.substr(1, i - 1));
  }
  return {group, group == 0 ? version : 0};
}
}  // namespace

std::vector<const Impl*> Registry::impls_of(const std::string& op) const {
  std::vector<const Impl*> out;
  for (const auto& im : impls_)
    if (im.op == op) out.push_back(&im);
  std::stable_sort(out.begin(), out.end(), [](const Impl* a, const Impl* b) { return rung(*a) < rung(*b); });
  return out;
}

const Impl* Registry::find_impl(const std::string& op, const std::string& name) const {
  for (const auto& im : impls_)
    if (im.op == op && im.name == name) return &im;
  return nullptr;
}

std::string require_cc(int min_cc) {
  const auto& d = device_info();
  if (!d.present) return "no GPU";
  if (d.cc() < min_cc) return fmt::format("needs compute capability >= {}.{} (device is {}.{})", min_cc / 10, min_cc % 10, d.cc_major, d.cc_minor);
  return "";
}

std::string require_index_fits_int32(std::int64_t n) {
  if (n > 2147483647) return "uses 32-bit indices: n > 2^31 - 1";
  return "";
}

}  // namespace klab
