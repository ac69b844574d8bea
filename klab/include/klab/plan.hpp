// klab/plan.hpp — a selection expanded into cases (plan.cpp), with what it left out and why.
//
// harness.hpp's plan() is make_plan() with this machine's memory, keeping only the cases.
// A --shape is checked here, before anything is allocated or a GPU is asked for: sizes
// whose element or byte counts overflow 64 bits, and tensors that cannot fit the host's or
// the GPU's memory, are usage errors with the numbers, not crashes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "klab/harness.hpp"

namespace klab {

// Bytes a problem's tensors must fit in; 0: no limit known (no GPU, unreadable host size).
struct MemoryLimits {
  std::int64_t host = 0, device = 0;
};
MemoryLimits memory_limits();   // this machine's physical memory, and its GPU's when one is present

struct Plan {
  std::vector<Case> cases;
  // For a --shape that some dtypes or variants of a planned op cannot take: which, and why
  // ("relu at 2147483648: bf16 unsupported (past 2^31 elements: f32 only)"). Printed as
  // notes; only a shape that nothing can take is an error.
  std::vector<std::string> notes;
};
Plan make_plan(const Selection& sel, bool bench_shapes, const MemoryLimits& lim);

// The first case that every one of its impls can run (unsupported_reason), or nothing: what
// `klab check` times the exercise on against its reference (lesson 05's first bench shape
// is f32, which neither Triton matmul takes).
std::optional<Case> first_case_all_run(const std::vector<Case>& cases);

// The tour: what `klab run` runs unless --full (or a filter) asks for more. It must stay a
// few minutes however many lessons exist (a GPU CTest holds each lesson to 30 s):
//   verify: every op, impl, dtype and variant at the test shapes whose largest tensor has at
//           most kTourMaxElems elements (the edge cases: 0, 1, primes, ragged tiles), but
//           the vendor libraries' impls, which the bench checks where it times them;
//   bench:  each op's first bench shape, first variant, every dtype, for the impls the op
//           names in Op::tour (its first and best versions) and its baseline.
// The shapes past 2^31 elements and the other bench shapes are `klab test` / `klab run --full`.
inline constexpr std::int64_t kTourMaxElems = std::int64_t{1} << 24;

// The product of a shape's sizes; nullopt when a size is negative or the product passes
// 2^63 - 1.
std::optional<std::int64_t> checked_numel(const Dims& shape);

// Why problem p cannot run at all at this size: an element or byte count of one of its
// tensors past 2^63 - 1, or tensors that cannot fit the host's or the device's memory
// (limits of 0 are not checked). "" when it fits. p must have passed op.validate.
std::string why_too_large(const Op& op, const Problem& p, const MemoryLimits& lim);

}  // namespace klab
