#include <algorithm>

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
    if (!key.empty() && std::all_of(key.begin(), key.end(), ::isdigit) && key.size() < 4 &&
        std::stoi(key) == std::stoi(l.id))
      return &l;
  }
  return nullptr;
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

std::vector<const Impl*> Registry::impls_of(const std::string& op) const {
  std::vector<const Impl*> out;
  for (const auto& im : impls_)
    if (im.op == op) out.push_back(&im);
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
