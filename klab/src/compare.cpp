#include "klab/compare.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>

#include <fmt/format.h>

#include "klab/error.hpp"
#include "klab/rng.hpp"

namespace klab {

Tolerance default_tolerance(DType t) {
  switch (t) {
    case DType::f32: return {1e-6, 1e-5, 1e-5};
    case DType::f16: return {1e-4, 2e-3, 2e-3};
    case DType::bf16: return {1e-3, 1.6e-2, 1.6e-2};
    case DType::i32:
    case DType::u8: return {0, 0, 0};
  }
  return {};
}

// TF32 keeps 10 mantissa bits (like fp16) in products; accumulation stays fp32.
Tolerance tf32_tolerance() { return {1e-3, 5e-3, 5e-3}; }

std::string CompareResult::summary() const {
  if (ok) return fmt::format("rel_l2 {:.1e} max_abs {:.1e}", rel_l2, max_abs);
  std::string s = fmt::format("{} of {} elements wrong", bad, count);
  if (nonfinite) s += fmt::format(" ({} NaN/Inf)", nonfinite);
  if (first_bad >= 0) s += fmt::format("; first at [{}]: got {:.7g}, want {:.7g}", first_bad, first_bad_out, first_bad_ref);
  s += fmt::format("; rel_l2 {:.1e} max_abs {:.1e}", rel_l2, max_abs);
  return s;
}

bool within(const Tolerance& tol, std::int64_t i, double out, double ref) {
  // The op's semantics produce NaN/Inf here: the output must match it exactly.
  if (!std::isfinite(ref)) return std::isnan(ref) ? std::isnan(out) : out == ref;
  if (!std::isfinite(out)) return false;
  const double atol = tol.atol_at ? tol.atol_at(i) : tol.atol;
  return std::fabs(out - ref) <= atol + tol.rtol * std::fabs(ref);
}

namespace {
struct Partial {
  std::int64_t bad = 0, nonfinite = 0, first_bad = -1;
  double first_out = 0, first_ref = 0;
  double err2 = 0, ref2 = 0, max_abs = 0;
};

// index: the flat index of element k in the whole output; empty: k itself.
CompareResult compare_at(const HostTensor& out, std::span<const double> ref, const Tolerance& tol,
                         const std::vector<std::int64_t>& index) {
  KLAB_REQUIRE(static_cast<std::int64_t>(ref.size()) == out.numel(), "compare: reference size differs from output");
  KLAB_REQUIRE(index.empty() || index.size() == ref.size(), "compare: index size differs from output");
  CompareResult r;
  r.count = out.numel();
  Partial total;
  std::mutex m;
  parallel_for(r.count, [&](std::int64_t b, std::int64_t e) {
    Partial p;
    for (std::int64_t k = b; k < e; ++k) {
      const std::int64_t i = index.empty() ? k : index[static_cast<std::size_t>(k)];
      const double o = out.get(k), x = ref[static_cast<std::size_t>(k)];
      const bool bad = !within(tol, i, o, x);
      if (std::isfinite(x) && !std::isfinite(o)) ++p.nonfinite;
      if (std::isfinite(x) && std::isfinite(o)) {
        const double d = std::fabs(o - x);
        p.err2 += d * d;
        p.ref2 += x * x;
        if (d > p.max_abs) p.max_abs = d;
      }
      if (bad) {
        if (p.first_bad < 0) { p.first_bad = i; p.first_out = o; p.first_ref = x; }
        ++p.bad;
      }
    }
    std::lock_guard lock(m);
    total.bad += p.bad;
    total.nonfinite += p.nonfinite;
    total.err2 += p.err2;
    total.ref2 += p.ref2;
    if (p.max_abs > total.max_abs) total.max_abs = p.max_abs;
    if (p.first_bad >= 0 && (total.first_bad < 0 || p.first_bad < total.first_bad)) {
      total.first_bad = p.first_bad; total.first_out = p.first_out; total.first_ref = p.first_ref;
    }
  });
  r.bad = total.bad;
  r.nonfinite = total.nonfinite;
  r.max_abs = total.max_abs;
  const double floor2 = tol.ref_scale * tol.ref_scale * static_cast<double>(r.count);
  const double ref2 = std::max(total.ref2, floor2);
  r.rel_l2 = ref2 > 0 ? std::sqrt(total.err2 / ref2) : std::sqrt(total.err2);
  r.first_bad = total.first_bad;
  r.first_bad_out = total.first_out;
  r.first_bad_ref = total.first_ref;
  r.ok = r.bad == 0 && !(r.rel_l2 > tol.max_rel_l2);
  return r;
}
}  // namespace

CompareResult compare(const HostTensor& out, std::span<const double> ref, const Tolerance& tol) {
  return compare_at(out, ref, tol, {});
}

CompareResult compare(const HostTensor& out, std::span<const double> ref, const Tolerance& tol,
                      const std::vector<std::int64_t>& index) {
  return compare_at(out, ref, tol, index);
}

}  // namespace klab
