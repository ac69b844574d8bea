// Planning: a selection (lessons, ops, impls, shape, dtype, variant) expanded into the
// cases the harness verifies or times. Unknown names, and a shape that no selected op can
// take in any dtype, are usage errors (exit 2) with the reason; a --shape that only some
// dtypes can take runs those and notes the others.
#include "klab/plan.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "klab/device.hpp"
#include "klab/error.hpp"

namespace klab {

// ---------------------------------------------------------------------------------------
// Sizes: overflow and memory, checked before anything is allocated
// ---------------------------------------------------------------------------------------

std::optional<std::int64_t> checked_numel(const Dims& shape) {
  std::int64_t n = 1;
  for (const auto d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  return n;
}

MemoryLimits memory_limits() {
  const auto& d = device_info();
  return {host_memory_bytes(), d.present ? static_cast<std::int64_t>(d.global_mem) : 0};
}

static std::string gb(std::int64_t bytes) { return fmt::format("{:.1f} GB", static_cast<double>(bytes) / 1e9); }

namespace {
// Bytes of a problem's tensors, each counted once, and of its fp64 reference.
struct Footprint {
  std::int64_t tensors = 0;     // inputs and outputs, on the device and again on the host
  std::int64_t reference = 0;   // 8 bytes per checked element, unless the op samples it
  std::int64_t host = 0;        // tensors + reference
  bool overflow = false;        // a count or a sum passed 2^63 - 1
};

Footprint footprint(const Op& op, const Problem& p) {
  Footprint f;
  const bool full_reference = !(op.sample_only && op.sample_only(p));
  auto add = [&](const TensorSpec& t, bool checked) {
    const auto n = checked_numel(t.shape);
    std::int64_t bytes = 0, ref = 0;
    f.overflow = f.overflow || !n || __builtin_mul_overflow(*n, static_cast<std::int64_t>(dtype_size(t.dtype)), &bytes) ||
                 __builtin_add_overflow(f.tensors, bytes, &f.tensors) ||
                 (checked && full_reference &&
                  (__builtin_mul_overflow(*n, std::int64_t{8}, &ref) || __builtin_add_overflow(f.reference, ref, &f.reference)));
  };
  for (const auto& t : op.inputs(p)) add(t, t.init == Init::inout);
  for (const auto& t : op.outputs(p)) add(t, true);
  f.overflow = f.overflow || __builtin_add_overflow(f.tensors, f.reference, &f.host);
  return f;
}
}  // namespace

std::string why_too_large(const Op& op, const Problem& p, const MemoryLimits& lim) {
  const Footprint f = footprint(op, p);
  if (f.overflow) return "its tensors take more than 2^63 bytes";
  // Lower bounds of what the harness holds at once, so a shape refused here cannot have
  // run: on the device every input and output; on the host the same tensors (generated
  // inputs, downloaded outputs) plus the fp64 reference of every checked element.
  if (lim.device > 0 && f.tensors > lim.device)
    return fmt::format("its tensors take {} of GPU memory; the GPU has {}", gb(f.tensors), gb(lim.device));
  if (lim.host > 0 && f.host > lim.host)
    return fmt::format("its tensors and fp64 reference take {} of host memory; this machine has {}", gb(f.host),
                       gb(lim.host));
  return "";
}

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

// Why problem p is not planned: the op's validate, and for a size the user asked for, the
// element count first (validate may multiply the sizes itself) and the memory last.
static std::string why_rejected(const Op& op, const Problem& p, bool user_shape, const MemoryLimits& lim) {
  if (user_shape && !checked_numel(p.shape)) return "the element count passes 2^63";
  if (op.validate)
    if (std::string why = op.validate(p); !why.empty()) return why;
  return user_shape ? why_too_large(op, p, lim) : "";
}

// "f16, bf16 (past 2^31 elements: f32 only); f32 (...)": problems grouped by reason.
static std::string group_reasons(const std::vector<std::pair<std::string, std::string>>& label_why) {
  std::vector<std::pair<std::string, std::string>> groups;  // reason -> labels, in first-seen order
  for (const auto& [label, why] : label_why) {
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == why; });
    if (g == groups.end()) groups.push_back({why, label});
    else g->second += ", " + label;
  }
  std::string s;
  for (const auto& [why, labels] : groups) s += fmt::format("{}{} ({})", s.empty() ? "" : "; ", labels, why);
  return s;
}

std::vector<Case> plan(const Selection& sel, bool bench_shapes) {
  return make_plan(sel, bench_shapes, sel.shape ? memory_limits() : MemoryLimits{}).cases;
}

std::optional<Case> first_case_all_run(const std::vector<Case>& cases) {
  for (const Case& c : cases)
    if (std::all_of(c.impls.begin(), c.impls.end(),
                    [&](const Impl* im) { return unsupported_reason(*im, c.problem).empty(); }))
      return c;
  return std::nullopt;
}

Plan make_plan(const Selection& sel, bool bench_shapes, const MemoryLimits& lim) {
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

  std::set<std::string> impls_seen, variants_seen, variants_known;
  std::vector<std::pair<std::string, std::string>> skipped;  // (op, why it produced no case)
  Plan out;
  std::vector<Case>& cases = out.cases;
  for (const Op* op : ops) {
    std::vector<const Impl*> impls;
    for (const Impl* im : reg.impls_of(op->name)) {
      const bool is_ex = im->kind == ImplKind::exercise;
      const bool named = std::find(sel.impls.begin(), sel.impls.end(), im->name) != sel.impls.end();
      // Exercises run under `klab check`, or when named: `klab test 01 --impl exercise`.
      if (is_ex && !sel.exercises && !sel.only_exercises && !named) continue;
      if (!is_ex && sel.only_exercises) continue;
      if (!sel.impls.empty() && std::find(sel.impls.begin(), sel.impls.end(), im->name) == sel.impls.end()) continue;
      if (sel.tour && bench_shapes && im->name != op->baseline &&
          std::find(op->tour.begin(), op->tour.end(), im->name) == op->tour.end())
        continue;
      // The tour verifies the lesson's own versions; a vendor library's it checks where it
      // benches it (the bench checks before and after timing). cuDNN builds a graph for
      // every problem (0.6 s each on the H100: most of the 58 s lesson 09's tour spent
      // checking); `klab test` checks the vendor at every test shape.
      if (sel.tour && !bench_shapes && im->kind == ImplKind::vendor) continue;
      impls.push_back(im);
      impls_seen.insert(im->name);
    }
    if (impls.empty()) continue;

    std::vector<DType> dtypes = op->dtypes;
    if (sel.dtype) {
      if (std::find(dtypes.begin(), dtypes.end(), *sel.dtype) == dtypes.end()) {
        skipped.push_back({op->name, fmt::format("{} takes dtypes {}", op->name, dtype_list(op->dtypes))});
        continue;
      }
      dtypes = {*sel.dtype};
    }
    std::vector<std::string> variants = op->variants;
    if (sel.tour && bench_shapes && sel.variants.empty()) variants.resize(1);
    if (!sel.variants.empty()) {   // the op's own that were listed, in the op's order
      std::vector<std::string> listed;
      for (const auto& v : variants) {
        variants_known.insert(v);
        if (std::find(sel.variants.begin(), sel.variants.end(), v) != sel.variants.end()) listed.push_back(v);
      }
      variants_seen.insert(listed.begin(), listed.end());
      if (listed.empty()) {
        std::string vs;
        for (auto& v : op->variants) vs += (vs.empty() ? "" : ", ") + (v.empty() ? std::string("(none)") : v);
        skipped.push_back({op->name, fmt::format("{} takes variants {}", op->name, vs)});
        continue;
      }
      variants = listed;
    }
    std::vector<Dims> shapes = bench_shapes ? op->bench_shapes : op->test_shapes;
    if (sel.tour && bench_shapes && shapes.size() > 1) shapes.resize(1);
    if (sel.shape) {
      if (sel.shape->size() != op->dims.size()) {
        std::string d;
        for (auto& n : op->dims) d += (d.empty() ? "" : "x") + n;
        skipped.push_back({op->name, fmt::format("{} takes a shape {} ({} numbers), got {}", op->name, d, op->dims.size(),
                                                 dims_to_string(*sel.shape))});
        continue;
      }
      shapes = {*sel.shape};
    }
    int accepted = 0;
    std::vector<std::pair<std::string, std::string>> rejected;  // (dtype [variant], why), for a --shape
    for (const auto& shape : shapes)
      for (DType t : dtypes)
        for (const auto& v : variants) {
          Problem p{shape, t, v};
          if (const std::string why = why_rejected(*op, p, sel.shape.has_value(), lim); !why.empty()) {
            if (sel.shape) rejected.push_back({v.empty() ? dtype_name(t) : fmt::format("{} {}", dtype_name(t), v), why});
            continue;  // an op's own shapes that it rejects in one dtype are not run in it
          }
          ++accepted;
          if (sel.max_elems > 0 && largest_tensor(*op, p) > sel.max_elems) continue;
          if (sel.tour && !bench_shapes && largest_tensor(*op, p) > kTourMaxElems) continue;
          cases.push_back({op, impls, p});
        }
    if (rejected.empty()) continue;
    const std::string why = group_reasons(rejected);
    if (accepted > 0)
      out.notes.push_back(fmt::format("{} at {}: unsupported: {}", op->name, dims_to_string(*sel.shape), why));
    else
      skipped.push_back({op->name, fmt::format("shape {} rejected by {}: {}", dims_to_string(*sel.shape), op->name, why)});
  }
  for (const auto& name : sel.impls)
    if (!impls_seen.count(name))
      throw UsageError(fmt::format("unknown impl '{}' for the selected ops (see `klab list`)", name));
  if (cases.empty()) {
    // One readable line: the first op's reason, the others by name.
    std::string why = skipped.empty() ? std::string("no ops match") : skipped.front().second;
    // The debugging catalog's only kernels are its cases' (the broken ones, impl `exercise`).
    if (!lesson_ids.empty() && sel.impls.empty() && std::all_of(lesson_ids.begin(), lesson_ids.end(), [&](const std::string& id) {
          const Lesson* l = reg.find_lesson(id);
          return l && !l->folder.empty();
        }))
      why = "the catalog's kernels are its cases' broken ones: `klab debug run CASE`, or --impl exercise";
    std::string others;
    for (std::size_t i = 1; i < skipped.size(); ++i) others += (others.empty() ? "" : ", ") + skipped[i].first;
    if (!others.empty()) why += fmt::format("; nor can {} (--op NAME gives the reason)", others);
    throw UsageError("nothing to run: " + why);
  }
  // A listed variant that none of the selected ops has: a typo beside a name that matched.
  for (const auto& v : sel.variants)
    if (!variants_seen.count(v)) {
      std::string known;
      for (const auto& k : variants_known) known += (known.empty() ? "" : ", ") + (k.empty() ? std::string("(none)") : k);
      throw UsageError(fmt::format("unknown variant '{}' for the selected ops (they take: {})", v, known));
    }
  return out;
}

}  // namespace klab
