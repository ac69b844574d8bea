// CPU tests that no tolerance accepts an answer an indexing mistake produces. For every
// registered op, dtype, variant and test shape, the fp64 reference stored in the output's
// dtype (rounded as a kernel stores it) must pass judge(); then each mutation of it below,
// the output of a kernel with that bug, must fail:
//   shift by one element, one row (rank >= 2), one tile (32 elements, or 32 rows); a
//   transposed layout (rank >= 2); one element left unwritten (holding the poison the
//   harness would choose); for a scan, the exclusive scan instead of the inclusive one.
// The test iterates the registry: an op added later is covered with no new test code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "klab/harness.hpp"

using namespace klab;

namespace {

// Shapes whose largest tensor is past this are skipped to keep the CPU tests fast (the
// references of the 2^31-element shapes take minutes and tens of GB); every op's smaller
// test shapes hold the same layouts, so the mutations lose nothing there.
constexpr std::int64_t kMaxElems = std::int64_t{1} << 22;
constexpr std::int64_t kTile = 32;  // the tile the "one tile" shift moves by

std::byte* bytes_of(HostTensor& t) { return static_cast<std::byte*>(t.data()); }

// What a kernel that writes element i - s where it should write i leaves (the first s
// elements as they were): a flat shift by s elements. s >= numel changes nothing.
void shift_by(HostTensor& t, std::int64_t s) {
  const std::int64_t n = t.numel();
  if (s <= 0 || s >= n) return;
  const std::size_t es = dtype_size(t.dtype());
  std::memmove(bytes_of(t) + s * es, bytes_of(t), static_cast<std::size_t>(n - s) * es);
}

std::int64_t row_length(const HostTensor& t) { return t.shape().empty() ? 1 : t.shape().back(); }

// Each (R, C) matrix of the last two dims written in the transposed layout: element (r, c)
// at c * R + r, as a kernel that swapped its row and column indices would.
void transpose_last_two(HostTensor& t) {
  const Dims& d = t.shape();
  const std::int64_t R = d[d.size() - 2], C = d.back(), mat = R * C;
  if (mat == 0) return;
  const std::size_t es = dtype_size(t.dtype());
  std::vector<std::byte> tmp(static_cast<std::size_t>(mat) * es);
  for (std::int64_t b = 0; b < t.numel() / mat; ++b) {
    std::byte* base = bytes_of(t) + static_cast<std::size_t>(b * mat) * es;
    std::memcpy(tmp.data(), base, tmp.size());
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t c = 0; c < C; ++c)
        std::memcpy(base + static_cast<std::size_t>(c * R + r) * es, tmp.data() + static_cast<std::size_t>(r * C + c) * es, es);
  }
}

// The reference of output k, stored as a kernel of that dtype stores it.
HostTensor stored(const TensorSpec& spec, const RefArray& ref) {
  HostTensor t(spec.dtype, spec.shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, ref[static_cast<std::size_t>(i)]);
  return t;
}

// An output is an inclusive scan of input 0 along its last dim when it has that input's
// shape and every element is the one before it (0 at a row's start) plus the input: then
// its exclusive scan, element minus input, is what a kernel off by one term writes. The
// reference is fp64, so "is" allows a relative 1e-12 (its own rounding is 2^-53 per add).
bool is_scan_of_input0(const Inputs& in, const TensorSpec& spec, const RefArray& ref) {
  if (in.tensors.empty() || in.tensors[0].shape() != spec.shape || spec.shape.empty()) return false;
  const HostTensor& x = in.tensors[0];
  const std::int64_t C = spec.shape.back();
  if (C < 2 || x.numel() == 0) return false;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double prev = i % C == 0 ? 0.0 : ref[static_cast<std::size_t>(i - 1)];
    const double want = ref[static_cast<std::size_t>(i)];
    if (!(std::fabs(prev + x.get(i) - want) <= 1e-12 * (std::fabs(prev) + std::fabs(want) + 1.0))) return false;
  }
  return true;
}

struct Mutation {
  std::string name;
  // Mutates output k in place; the inputs and the reference are given for those that need them.
  std::function<void(HostTensor&, const Inputs&, const RefArray&)> apply;
  // Only for outputs where it means something (rank >= 2, a scan).
  std::function<bool(const Inputs&, const TensorSpec&, const RefArray&)> applies;
};

std::vector<Mutation> shape_mutations() {
  auto any = [](const Inputs&, const TensorSpec&, const RefArray&) { return true; };
  auto rank2 = [](const Inputs&, const TensorSpec& s, const RefArray&) { return s.shape.size() >= 2; };
  return {
      {"shift by one element", [](HostTensor& t, const Inputs&, const RefArray&) { shift_by(t, 1); }, any},
      {"shift by one row", [](HostTensor& t, const Inputs&, const RefArray&) { shift_by(t, row_length(t)); }, rank2},
      {"shift by one tile",
       [](HostTensor& t, const Inputs&, const RefArray&) {
         shift_by(t, t.shape().size() >= 2 ? kTile * row_length(t) : kTile);
       },
       any},
      {"transpose", [](HostTensor& t, const Inputs&, const RefArray&) { transpose_last_two(t); }, rank2},
      {"exclusive scan",
       [](HostTensor& t, const Inputs& in, const RefArray& ref) {
         for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, ref[static_cast<std::size_t>(i)] - in.tensors[0].get(i));
       },
       is_scan_of_input0},
  };
}

std::string case_name(const Op& op, const Problem& p, const Impl* impl, const std::string& tensor) {
  return op.name + " " + p.label() + (impl ? " (tolerance of impl " + impl->name + ")" : "") + ", " + tensor;
}

bool fails(const Op& op, const Problem& p, const Inputs& in, const Reference& ref, const std::vector<HostTensor>& out,
           const Impl* impl) {
  VerifyRecord rec;
  judge(op, p, in, ref, out, rec, impl);
  return rec.status == Status::fail;
}

}  // namespace

TEST(Mutations, EveryOpsToleranceRejectsIndexingMistakes) {
  const std::vector<Mutation> mutations = shape_mutations();
  std::map<std::string, std::int64_t> checked_per_op;
  std::map<std::string, std::int64_t> checked_per_mutation;
  std::int64_t skipped_unchanged = 0, skipped_large = 0;
  for (const Op& op : registry().ops()) {
    checked_per_op[op.name] = 0;
    // The op's own tolerance, and that of every impl that replaces it (a lower precision mode).
    std::vector<const Impl*> owners = {nullptr};
    for (const Impl* im : registry().impls_of(op.name))
      if (im->tolerance) owners.push_back(im);
    for (DType dt : op.dtypes)
      for (const std::string& variant : op.variants)
        for (const Dims& shape : op.test_shapes) {
          const Problem p{shape, dt, variant};
          if (op.validate && !op.validate(p).empty()) continue;   // e.g. past 2^31: f32 only
          if (largest_tensor(op, p) > kMaxElems) {
            ++skipped_large;
            continue;
          }
          const Inputs in = make_inputs(op, p, 1);
          const Reference ref = op.reference(p, in);
          const auto specs = checked_specs(op, p);
          ASSERT_EQ(ref.size(), specs.size()) << op.name << " " << p.label();
          std::vector<HostTensor> right;
          for (std::size_t k = 0; k < specs.size(); ++k) right.push_back(stored(specs[k], ref[k]));

          for (const Impl* owner : owners) {
            // An impl's tolerance is for the problems it runs (TF32 is a mode of f32 only).
            if (owner && owner->supports && !owner->supports(p).empty()) continue;
            // The right answer, as a kernel stores it, passes: else no mutation means anything.
            VerifyRecord rec;
            judge(op, p, in, ref, right, rec, owner);
            if (rec.status != Status::pass) {
              ADD_FAILURE() << case_name(op, p, owner, "") << ": the rounded reference fails: " << rec.message;
              continue;
            }
            for (std::size_t k = 0; k < specs.size(); ++k) {
              const std::string where = case_name(op, p, owner, specs[k].name);
              const std::vector<std::span<const double>> spans(ref.begin(), ref.end());
              const Tolerance tol = tolerance_for(op, owner, p, static_cast<int>(k), specs[k].dtype, &spans);
              if (!dtype_is_float(specs[k].dtype))   // integer outputs are exact: no arithmetic to round
                EXPECT_TRUE(tol.atol == 0 && tol.rtol == 0 && !tol.atol_at) << where << ": an integer output with a tolerance";
              auto check = [&](const std::string& name, const std::function<void(HostTensor&)>& mutate) {
                std::vector<HostTensor> out = right;
                mutate(out[k]);
                if (out[k].bytes() == 0 || std::memcmp(out[k].data(), right[k].data(), out[k].bytes()) == 0) {
                  ++skipped_unchanged;   // constant data, too few elements: the bug leaves no trace
                  return;
                }
                EXPECT_TRUE(fails(op, p, in, ref, out, owner)) << where << ": the tolerance accepts a " << name;
                ++checked_per_op[op.name];
                ++checked_per_mutation[name];
              };
              for (const Mutation& m : mutations)
                if (m.applies(in, specs[k], ref[k]))
                  check(m.name, [&](HostTensor& t) { m.apply(t, in, ref[k]); });
              // One unwritten element (the last: where a missed tail is) holds the poison the
              // harness fills it with: its first pattern, and where that one is a legal value
              // somewhere, the second launch's pattern too. Either launch failing catches it.
              const auto ranked = rank_poisons(specs[k].dtype, ref[k], tol);
              const std::int64_t last = right[k].numel() - 1;
              if (last < 0) continue;
              bool caught = false, changed = false;
              for (std::size_t j = 0; j < ranked.size() && j < 2; ++j) {
                if (j == 1 && ranked[0].second == 0) break;   // one launch only
                std::vector<HostTensor> out = right;
                const std::size_t es = dtype_size(specs[k].dtype);
                std::memset(bytes_of(out[k]) + static_cast<std::size_t>(last) * es, ranked[j].first, es);
                if (std::memcmp(out[k].data(), right[k].data(), out[k].bytes()) == 0) continue;
                changed = true;
                caught = caught || fails(op, p, in, ref, out, owner);
              }
              if (!changed) {
                ++skipped_unchanged;
                continue;
              }
              EXPECT_TRUE(caught) << where << ": the tolerance accepts an unwritten element";
              ++checked_per_op[op.name];
              ++checked_per_mutation["unwritten element"];
            }
          }
        }
  }
  std::int64_t total = 0;
  for (const auto& [name, n] : checked_per_op) {
    EXPECT_GT(n, 0) << name << ": no mutation applies to any of its test shapes";
    total += n;
  }
  // Each kind of mutation met at least one op it applies to (the scan detection above
  // found the scan, the rank-2 ones found 2D outputs): else the test lost a check silently.
  for (const Mutation& m : mutations) EXPECT_GT(checked_per_mutation[m.name], 0) << m.name << " was never applied";
  EXPECT_GT(checked_per_mutation["unwritten element"], 0);
  std::string per_mutation;
  for (const auto& [name, n] : checked_per_mutation) per_mutation += " " + name + " " + std::to_string(n) + ";";
  std::printf("[mutations] %lld (op, problem, mutation) checks over %zu ops;%s %lld left no "
              "trace (skipped), %lld shapes past %lld elements skipped\n",
              static_cast<long long>(total), checked_per_op.size(), per_mutation.c_str(),
              static_cast<long long>(skipped_unchanged), static_cast<long long>(skipped_large),
              static_cast<long long>(kMaxElems));
}

// The mean's output is one number, so the shifts above cannot reach it; its mistakes are
// in which elements it adds. A mean that skips the last element, or reads one past the end,
// must fail at every test shape. The element is one of size 1 (-1, the edge of the
// generator's [-1, 1)), so the mistake moves the mean by about 1 / n: the tolerance must be
// below that (sum.cu's mean_tolerance; the any-order bound of a float sum is not, past
// n ~ 2^21). Where both answers are stored as the same float (n = 1 with one more -1: the
// mean stays -1) the mistake leaves no trace and is skipped.
TEST(Mutations, MeanRejectsOneElementMoreOrLess) {
  const Op* op = registry().find_op("mean");
  ASSERT_NE(op, nullptr);
  int checked = 0;
  for (DType dt : op->dtypes)
    for (const Dims& shape : op->test_shapes) {
      const std::int64_t n = shape.at(0);
      // A mean costs O(n): shapes up to 2^25 take a fraction of a second and reach the
      // lengths (past ~7e6) where the any-order bound is above 1 / n; 2^31 (8 GiB) is left out.
      if (n > (std::int64_t{1} << 25)) continue;
      const Problem p{shape, dt, ""};
      Inputs in = make_inputs(*op, p, 1);
      if (n > 0) in.tensors[0].set(n - 1, -1.0);
      const Reference ref = op->reference(p, in);
      const TensorSpec spec = checked_specs(*op, p).at(0);
      // The answer over the first m elements of x, then `extra` more of -1.
      auto mean_of = [&](std::int64_t m, std::int64_t extra) {
        const Problem q{{m + extra}, dt, ""};
        Inputs other;
        other.tensors.emplace_back(dt, Dims{m + extra});
        for (std::int64_t i = 0; i < m; ++i) other.tensors[0].set(i, in.tensors[0].get(i));
        for (std::int64_t i = m; i < m + extra; ++i) other.tensors[0].set(i, -1.0);
        return stored(spec, op->reference(q, other).at(0));
      };
      std::vector<HostTensor> right{stored(spec, ref.at(0))};
      VerifyRecord rec;
      judge(*op, p, in, ref, right, rec);
      ASSERT_EQ(rec.status, Status::pass) << p.label() << ": " << rec.message;
      std::vector<std::pair<std::string, HostTensor>> wrong;
      if (n > 0) wrong.emplace_back("one element less", mean_of(n - 1, 0));
      wrong.emplace_back("one element more", mean_of(n, 1));
      for (auto& [name, t] : wrong) {
        if (std::memcmp(t.data(), right[0].data(), t.bytes()) == 0) continue;
        std::vector<HostTensor> out{t};
        EXPECT_TRUE(fails(*op, p, in, ref, out, nullptr)) << p.label() << ": the tolerance accepts " << name
                                                          << " (got " << t.get(0) << ", want " << ref[0][0] << ")";
        ++checked;
      }
    }
  EXPECT_GT(checked, 0);
  std::printf("[mutations] mean: %d one-element-more/less answers checked\n", checked);
}
