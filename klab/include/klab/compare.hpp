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
#pragma once

#include <cstdint>
#include <limits>
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
};

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

CompareResult compare(const HostTensor& out, const std::vector<double>& ref, const Tolerance& tol);

}  // namespace klab
