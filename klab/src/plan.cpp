// Planning: a selection (lessons, ops, impls, shape, dtype, variant) expanded into the
// cases the harness verifies or times. Unknown names and shapes an op rejects are usage
// errors (exit 2) with the reason.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "klab/error.hpp"
#include "klab/harness.hpp"

namespace klab {

// ---------------------------------------------------------------------------------------
// Planning: selection -> cases
// ---------------------------------------------------------------------------------------

std::int64_t largest_tensor(const Op& op, const Problem& p) {
  std::int64_t m = 0;
  for (const auto& s : op.inputs(p)) m = std::max(m, numel_of(s.shape));
  for (const auto& s : op.outputs(p)) m = std::max(m, numel_of(s.shape));
  return m;
}

static std::string known_lessons() {
  std::string s;
  for (const auto& l : registry().lessons()) s += (s.empty() ? "" : ", ") + l.id + " (" + l.slug + ")";
  return s;
}

std::vector<Case> plan(const Selection& sel, bool bench_shapes) {
  auto& reg = registry();
  std::vector<std::string> lesson_ids;
  for (const auto& key : sel.lessons) {
    const Lesson* l = reg.find_lesson(key);
    if (!l) throw UsageError(fmt::format("unknown lesson '{}'; lessons: {}", key, known_lessons()));
    lesson_ids.push_back(l->id);
  }
  if (lesson_ids.empty())
    for (const auto& l : reg.lessons()) lesson_ids.push_back(l.id);

  std::vector<const Op*> ops;
  for (const auto& id : lesson_ids)
    for (const Op* op : reg.ops_of(id))
      if (sel.ops.empty() || std::find(sel.ops.begin(), sel.ops.end(), op->name) != sel.ops.end())
        ops.push_back(op);
  for (const auto& name : sel.ops)
    if (std::none_of(ops.begin(), ops.end(), [&](const Op* o) { return o->name == name; }))
      throw UsageError(fmt::format("unknown op '{}' in the selected lessons (see `klab list`)", name));

  std::set<std::string> impls_seen;
  std::vector<std::string> skipped;  // why selected ops produced no case
  std::vector<Case> cases;
  for (const Op* op : ops) {
    std::vector<const Impl*> impls;
    for (const Impl* im : reg.impls_of(op->name)) {
      const bool is_ex = im->kind == ImplKind::exercise;
      const bool named = std::find(sel.impls.begin(), sel.impls.end(), im->name) != sel.impls.end();
      // Exercises run under `klab check`, or when named: `klab test 01 --impl exercise`.
      if (is_ex && !sel.exercises && !sel.only_exercises && !named) continue;
      if (!is_ex && sel.only_exercises) continue;
      if (!sel.impls.empty() && std::find(sel.impls.begin(), sel.impls.end(), im->name) == sel.impls.end()) continue;
      impls.push_back(im);
      impls_seen.insert(im->name);
    }
    if (impls.empty()) continue;

    std::vector<DType> dtypes = op->dtypes;
    if (sel.dtype) {
      if (std::find(dtypes.begin(), dtypes.end(), *sel.dtype) == dtypes.end()) {
        skipped.push_back(fmt::format("{} takes dtypes {}", op->name, dtype_list(op->dtypes)));
        continue;
      }
      dtypes = {*sel.dtype};
    }
    std::vector<std::string> variants = op->variants;
    if (sel.variant) {
      if (std::find(variants.begin(), variants.end(), *sel.variant) == variants.end()) {
        std::string vs;
        for (auto& v : op->variants) vs += (vs.empty() ? "" : ", ") + (v.empty() ? std::string("(none)") : v);
        skipped.push_back(fmt::format("{} takes variants {}", op->name, vs));
        continue;
      }
      variants = {*sel.variant};
    }
    std::vector<Dims> shapes = bench_shapes ? op->bench_shapes : op->test_shapes;
    if (sel.shape) {
      if (sel.shape->size() != op->dims.size()) {
        std::string d;
        for (auto& n : op->dims) d += (d.empty() ? "" : "x") + n;
        skipped.push_back(fmt::format("{} takes a shape {} ({} numbers), got {}", op->name, d, op->dims.size(), dims_to_string(*sel.shape)));
        continue;
      }
      shapes = {*sel.shape};
    }
    for (const auto& shape : shapes)
      for (DType t : dtypes)
        for (const auto& v : variants) {
          Problem p{shape, t, v};
          if (sel.max_elems > 0 && largest_tensor(*op, p) > sel.max_elems) continue;
          if (op->validate) {
            const std::string why = op->validate(p);
            if (!why.empty()) {
              if (sel.shape) throw UsageError(fmt::format("shape {} rejected by {}: {}", dims_to_string(shape), op->name, why));
              continue;
            }
          }
          cases.push_back({op, impls, p});
        }
  }
  for (const auto& name : sel.impls)
    if (!impls_seen.count(name))
      throw UsageError(fmt::format("unknown impl '{}' for the selected ops (see `klab list`)", name));
  if (cases.empty()) {
    std::string why = skipped.empty() ? std::string("no ops match") : skipped.front();
    for (std::size_t i = 1; i < skipped.size(); ++i) why += "; " + skipped[i];
    throw UsageError("nothing to run: " + why);
  }
  return cases;
}

}  // namespace klab
