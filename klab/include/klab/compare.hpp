// klab/compare.hpp — comparing a kernel's output with an fp64 reference.
//
// An element passes when |out - ref| <= atol + rtol * |ref|. On top of that the relative
// L2 error ||out - ref|| / ||ref|| must stay under max_rel_l2; with ref_scale set (the
// typical size of a reference element), ||ref|| counts as at least ref_scale * sqrt(n), so
// that a few outputs that happen to be near zero do not turn a small absolute error into a
// large relative one (a single dot product of 4097 random terms can come out at 0.01 while
// its typical size is 21). NaN or Inf in the output
// where the reference is finite fails, whatever the tolerance; an output NaN where the
// reference is NaN (an op whose semantics produce one) passes.
//
// Per-element bounds: one atol for a whole output must be sized for its worst element, and
// that can hide a wrong answer elsewhere. A prefix sum's element i adds i + 1 terms, so its
// rounding error grows with i; an atol sized for the last element of 2^24 (2.3) accepts an
// exclusive scan, whose early elements are off by one input (< 1). Tolerance::atol_at gives
// each element its own absolute bound, from its flat index in the output:
//   element i passes when |out - ref| <= atol_at(i) + rtol * |ref|   (atol unused)
// Callers that look at a subset of an output (a sampled reference) pass the flat indices
// of their elements (the second compare() below); within() is the rule for one element, for
// code that must agree with compare() (which poison an element accepts).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "klab/dtype.hpp"
#include "klab/tensor.hpp"

namespace klab {

struct Tolerance {
  double atol = 0;
  double rtol = 0;
  double max_rel_l2 = std::numeric_limits<double>::infinity();
  double ref_scale = 0;  // floor of the rel-L2 denominator, per element (0: none)
  // Optional: the absolute bound of element i (its flat index in the whole output), in place
  // of atol. Set atol to the largest bound it gives, for code that reads atol alone.
  std::function<double(std::int64_t)> atol_at;
};

// compare()'s rule for element i (flat index) holding `out` against `ref`: true = passes.
bool within(const Tolerance& tol, std::int64_t i, double out, double ref);

// Per-dtype defaults for ops whose every output element is a short computation on
// inputs of that dtype (one or a few roundings): about 8 units in the last place.
//   f32  2^-24 * 8 ~ 1e-6 -> rtol 1e-5, atol 1e-6
//   f16  2^-11         -> rtol 2e-3, atol 1e-4 (f16 subnormals start at 6e-5)
//   bf16 2^-8          -> rtol 1.6e-2, atol 1e-3
//   i32/u8 exact
// tf32 (10-bit mantissa, used by tensor-core fp32 matmul) has its own entry.
Tolerance default_tolerance(DType t);
Tolerance tf32_tolerance();

struct CompareResult {
  bool ok = true;
  std::int64_t count = 0;        // elements compared
  std::int64_t bad = 0;          // elements outside tolerance (NaN/Inf included)
  std::int64_t nonfinite = 0;    // NaN/Inf in output where the reference is finite
  double rel_l2 = 0;             // ||out - ref|| / max(||ref||, ref_scale·sqrt(n)); absolute L2 when both are 0
  double max_abs = 0;            // max |out - ref| over finite pairs
  std::int64_t first_bad = -1;   // index of the first failing element
  double first_bad_out = 0, first_bad_ref = 0;
  std::string summary() const;   // "rel_l2 1.2e-08 max_abs 3.0e-07" or the first failure
};

CompareResult compare(const HostTensor& out, std::span<const double> ref, const Tolerance& tol);
// The same for a subset of an output: out[k] and ref[k] are its element index[k] (the flat
// index atol_at takes and first_bad reports).
CompareResult compare(const HostTensor& out, std::span<const double> ref, const Tolerance& tol,
                      const std::vector<std::int64_t>& index);
// A reference written in place ({1.0, 2.0}): a span cannot be made from a braced list.
inline CompareResult compare(const HostTensor& out, std::initializer_list<double> ref, const Tolerance& tol) {
  return compare(out, std::span<const double>(ref.begin(), ref.size()), tol);
}
inline CompareResult compare(const HostTensor& out, std::initializer_list<double> ref, const Tolerance& tol,
                             const std::vector<std::int64_t>& index) {
  return compare(out, std::span<const double>(ref.begin(), ref.size()), tol, index);
}

}  // namespace klab
