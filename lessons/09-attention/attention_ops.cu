// Lesson 09 — attention forward: the lesson, its op and its CPU reference.
//
//   attention_fwd   O = softmax(Q·Kᵀ / sqrt(d)) · V, per batch and head   {B, Hq, Hkv, Sq, Sk, d}
//                   bf16 and f16 in, fp32 accumulation; outputs O (the input dtype) and
//                   L = ln sum_j exp(s_j), s = q·k / sqrt(d), one fp32 per query row, which
//                   the backward pass needs to recompute P without a second softmax
//   variants        ""        every query sees every key
//                   "causal"  query i sees key j iff j <= i + Sk - Sq (attention.cuh: the
//                             diagonal aligned bottom-right; a query that sees no key gets
//                             O = 0 and L = -inf)
// Grouped-query: head h of Q reads K/V head h / (Hq / Hkv). The versions live in
// attention_materialized.cu (v0), attention_simt.cu (v1), attention_mma.cu (v2),
// attention_wgmma.cu (v3-v5, Hopper) and attention_triton.py (triton); CMakeLists.txt lists
// them all.
//
//   klab test 09
//   klab bench 09 --op attention_fwd --variant causal
//
// Inputs: Q, K, V uniform in [-1, 1), except that every fourth query row (flat row index
// r = (b Hq + h) Sq + i with r mod 4 = 3) of Q is scaled by 256: its scores have a standard
// deviation near 85 and reach several hundred, so exp(s) without the running max overflows
// fp32 (exp(89) is Inf) and a kernel that forgets the max returns NaN; its softmax is nearly
// one-hot. Every test shape with 4 query rows or more has such rows, beside ordinary ones.
//
// Tolerances: attention_tolerance below, derived there.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attention.cuh"
#include "attention_ref.hpp"
#include "klab/compare.hpp"
#include "klab/op.hpp"
#include "klab/rng.hpp"

namespace lesson09 {
namespace {

using klab::DType;
using klab::Problem;

constexpr double kLargeRowScale = 256.0;   // a power of two: q * 256 is exact in bf16 and f16

bool large_row(i64 r) { return (r & 3) == 3; }

void generate(const Problem& p, std::uint64_t seed, klab::Inputs& in) {
  for (std::size_t k = 0; k < 3; ++k) klab::fill_uniform(in.tensors[k], klab::derive_seed(seed, k), -1.0, 1.0);
  const Shape s = shape_of(p);
  klab::HostTensor& q = in.tensors[0];
  const i64 rows = s.B * s.Hq * s.Sq;
  klab::parallel_for(rows, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r)
      if (large_row(r))
        for (i64 e = 0; e < s.d; ++e) q.set(r * s.d + e, q.get(r * s.d + e) * kLargeRowScale);
  }, s.d);
}

// ---- the fp64 reference, one query row at a time ------------------------------------------
//
// attention_fwd_row (attention_ref.hpp), on the inputs as the kernels see them (rounded).
struct RowRef {
  RefShape s;
  const klab::Inputs& in;
  bool causal;

  void operator()(i64 r, double* o, double& L, bool parallel) const {
    attention_fwd_row(s, causal, HostGet{&in.tensors[0]}, HostGet{&in.tensors[1]}, HostGet{&in.tensors[2]}, r, o, L,
                      parallel);
  }
};

klab::Reference reference(const Problem& p, const klab::Inputs& in) {
  const Shape s = shape_of(p);
  const i64 rows = s.B * s.Hq * s.Sq;
  klab::Reference ref(2);
  ref[0] = klab::RefArray(static_cast<std::size_t>(rows * s.d));
  ref[1] = klab::RefArray(static_cast<std::size_t>(rows));
  const RowRef row{{s.B, s.Hq, s.Hkv, s.Sq, s.Sk, s.d}, in, is_causal(p)};
  if (rows >= 64) {
    klab::parallel_for(rows, [&](i64 r0, i64 r1) {
      for (i64 r = r0; r < r1; ++r) row(r, ref[0].data() + r * s.d, ref[1][r], false);
    }, s.Sk * s.d);
  } else {
    for (i64 r = 0; r < rows; ++r) row(r, ref[0].data() + r * s.d, ref[1][r], true);
  }
  return ref;
}

// Long sequences (the bench shapes: 2^32 and more multiply-adds) and the shape past 2^31
// elements: the reference of whole query rows, chosen where bugs live: the first and last
// row of the problem, the first and last row of the first and last head (a causal mask's
// corners, the ragged last query tile), and 48 random rows; O at all d columns of each, L
// at each. The harness checks every other element for NaN, Inf or the poison.
std::vector<klab::SampledReference> sample(const Problem& p, const klab::Inputs& in, std::uint64_t seed) {
  const Shape s = shape_of(p);
  const i64 rows = s.B * s.Hq * s.Sq;
  std::vector<i64> pick;
  if (rows > 0) {
    pick = {0, s.Sq - 1, rows - s.Sq, rows - 1, std::min<i64>(63, rows - 1), std::min<i64>(64, rows - 1)};
    for (int k = 0; k < 48; ++k)
      pick.push_back(static_cast<i64>(klab::uniform01(seed, 7000 + k) * static_cast<double>(rows)) % rows);
  }
  std::sort(pick.begin(), pick.end());
  pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
  std::vector<klab::SampledReference> out(2);
  const RowRef row{{s.B, s.Hq, s.Hkv, s.Sq, s.Sk, s.d}, in, is_causal(p)};
  std::vector<double> o(static_cast<std::size_t>(s.d));
  for (i64 r : pick) {
    double L = 0;
    row(r, o.data(), L, true);
    for (i64 e = 0; e < s.d; ++e) {
      out[0].index.push_back(r * s.d + e);
      out[0].value.push_back(o[e]);
    }
    out[1].index.push_back(r);
    out[1].value.push_back(L);
  }
  return out;
}

bool sample_only(const Problem& p) {
  const Shape s = shape_of(p);
  const double work = static_cast<double>(s.B * s.Hq) * static_cast<double>(s.Sq) * static_cast<double>(s.Sk) *
                      static_cast<double>(s.d);
  const i64 largest = std::max(s.B * s.Hq * s.Sq * s.d, s.B * s.Hkv * s.Sk * s.d);
  return work > 4294967296.0 || largest > (i64{1} << 28);
}

}  // namespace

// Visible (query, key) pairs, in closed form: query i sees max(0, min(Sk, i + a)) keys with
// a = Sk - Sq + 1 (every key without the mask). The sum over i of min(Sk, max(0, i + a)) is
// the triangle 0 + 1 + ... up to where i + a reaches Sk, then Sk a row. In double: exact
// below 2^53.
double visible_pairs(const Problem& p) {
  const Shape s = shape_of(p);
  const double Sq = static_cast<double>(s.Sq), Sk = static_cast<double>(s.Sk);
  if (!is_causal(p)) return Sq * Sk;
  double pairs = 0;
  const double a = Sk - Sq + 1;
  // Rows i in [0, Sq) with 0 < i + a < Sk see i + a keys; rows with i + a >= Sk see Sk.
  const double lo = std::max(0.0, 1 - a), hi = std::min(Sq, Sk - a);   // partial rows: i in [lo, hi)
  if (hi > lo) pairs += (hi - lo) * (lo + a + hi - 1 + a) / 2;          // arithmetic series
  pairs += std::max(0.0, Sq - std::max(hi, lo)) * Sk;                    // full rows
  return pairs;
}

std::string validate_attention(const Problem& p) {
  if (p.shape.size() != 6) return "shape must be {B, Hq, Hkv, Sq, Sk, d}";
  const Shape s = shape_of(p);
  if (s.B < 0 || s.Sq < 0 || s.Sk < 0) return "B, Sq and Sk must be >= 0";
  if (s.Hq < 1 || s.Hkv < 1 || s.d < 1) return "Hq, Hkv and d must be >= 1";
  if (s.Hq % s.Hkv != 0) return "Hq must be a multiple of Hkv (grouped-query attention)";
  for (i64 x : p.shape)
    if (x > std::numeric_limits<int>::max()) return "every dim must fit in 31 bits";
  const i64 largest = std::max(s.B * s.Hq * s.Sq * s.d, s.B * s.Hkv * s.Sk * s.d);
  // Past 2^31 elements a check holds ~20 GB: bf16 only (f16 shares every index computation).
  if (largest > std::numeric_limits<int>::max() && p.dtype != DType::bf16) return "past 2^31 elements: bf16 only";
  return "";
}

// ---- the tolerance ---------------------------------------------------------------------------
//
// u = 2^-24 (fp32), u_p = the unit roundoff of the input dtype (bf16 2^-8, f16 2^-11), which
// is also the dtype of P in a tensor-core kernel and of O. For query row i, with n keys seen,
// the probabilities pi_j = p_j / l (p_j = exp(s_j - m)), |v| <= V = 1:
//
//   s   an fp32 dot product of d terms (the products of two bf16/f16 values are exact in
//       fp32): its rounding is a random walk over partial sums of size ~ A sqrt(k) / 3,
//       A = max|q| max|k| (1; 256 in the large rows). Summed and scaled by 1/sqrt(d) that
//       is below  e_s = d u A  with a margin of about 4.
//   P   a tensor-core kernel rounds p_j to u_p before P·V (mma takes 16-bit operands):
//       error sum_j delta_j p_j v_j / l, |delta_j| <= u_p, independent, so of size
//       u_p ||pi||_2 V. For the uniform rows ||pi||_2 = e^(sigma^2/2) / sqrt(n) with
//       sigma = 1/3 the spread of the scores: 1.06 / sqrt(n); we bound it by
//       rho = min(1, 2 / sqrt(n)). The large rows are nearly one-hot: rho = 1.
//   sum P·V accumulates n fp32 products in tiles: ~ sqrt(Sk) u ||pi||_2 V.
//   exp ex2.approx: 2^-22 relative, an error of that size in every p_j: inside e_s's margin.
//   O   rounded to its dtype once: u_p |O| (the rtol).
//   So   |O - ref| <= 4 rho V (u_p + e_s + sqrt(Sk) u) + 1.5 u_p |ref|.
//   L = m + ln l: m carries e_s; l is a sum of n fp32 terms, each off by 2^-22 (ex2), the
//       sum by sqrt(Sk) u, and ln (lg2.approx) by 2^-22 absolute:
//        |L - ref| <= 4 (e_s + sqrt(Sk) u + 2^-21) + 4 u |ref|.
// The bound grows with d (e_s) and Sk; it is a property of the arithmetic, never of what a
// kernel achieved. What it rejects (tests/test_attention.cpp checks each): a mask off by one
// moves L of a row with n keys by ~1/n (n = 1009: 1e-3, the bound ~6e-5) and O of the first
// rows by O(1); a missing 1/sqrt(d), swapped heads or a wrong GQA group change O by its own
// size (0.6 / sqrt(n), the bound's 2 u_p / sqrt(n) is 1/50 of that); L off by 1e-3 fails.
// The relative L2 error: output rounding and P's rounding, each ~ u_p / sqrt(3) of the
// typical element: bounded by 2 u_p (O) and 1e-5 (L: its rows differ by ~ 0.35 / sqrt(n)
// over ln n ~ 7-10, so a shift by one row moves it by ~ 5e-4). Plus, for O, the tensor
// cores' accumulation: an mma adds its products to the fp32 accumulator after aligning them
// to the largest exponent and dropping the bits past fp32's (truncated, not rounded), so
// each k16 step may shrink the running sum by up to 2^-23 of itself, always the same way.
// Over a row's ceil(Sk / 16) steps, one after another in the same registers, that is at
// most ceil(Sk / 16) 2^-23 relative: 3e-5 at 4096 keys, nothing beside 2 u_p, but 0.125 at
// 16,777,259 (the K/V past 2^31 shape), where the H100 measured 1.9e-2 from both v2_mma_sync
// and cuDNN's SDPA and 2e-3 from v1 (fp32 FFMA, rounded) (2026-11-26). A wrong row still
// fails it: a shifted or foreign row is off by its own size (relative L2 ~ 1.4).
klab::Tolerance attention_tolerance(const Problem& p, int output) {
  const Shape s = shape_of(p);
  const bool causal = is_causal(p);
  const double u = std::ldexp(1.0, -24);
  const double up = p.dtype == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double sum_err = std::sqrt(static_cast<double>(s.Sk)) * u;
  const auto e_s = [s, u](i64 row) { return static_cast<double>(s.d) * u * (large_row(row) ? kLargeRowScale : 1.0); };
  klab::Tolerance t;
  if (output == 0) {
    const auto bound = [=](i64 idx) {
      const i64 row = idx / s.d;
      const double n = static_cast<double>(visible_keys(row % s.Sq, s.Sq, s.Sk, causal));
      const double rho = large_row(row) || n < 4 ? 1.0 : 2.0 / std::sqrt(n);
      return 4.0 * rho * (up + e_s(row) + sum_err);
    };
    t.atol_at = bound;
    t.atol = 4.0 * (up + e_s(3) + sum_err);   // the largest bound (code that reads atol alone)
    t.rtol = 1.5 * up;
    t.max_rel_l2 = 2.0 * up + std::ceil(static_cast<double>(s.Sk) / 16.0) * std::ldexp(1.0, -23);
  } else {
    const double tail = sum_err + std::ldexp(1.0, -21);
    t.atol_at = [=](i64 row) { return 4.0 * (e_s(row) + tail); };
    t.atol = 4.0 * (e_s(3) + tail);
    t.rtol = 4.0 * u;
    t.max_rel_l2 = 1e-5;
  }
  return t;
}

namespace {

std::vector<klab::TensorSpec> inputs(const Problem& p) {
  const Shape s = shape_of(p);
  return {{"Q", p.dtype, {s.B, s.Hq, s.Sq, s.d}}, {"K", p.dtype, {s.B, s.Hkv, s.Sk, s.d}},
          {"V", p.dtype, {s.B, s.Hkv, s.Sk, s.d}}};
}

std::vector<klab::TensorSpec> outputs(const Problem& p) {
  const Shape s = shape_of(p);
  return {{"O", p.dtype, {s.B, s.Hq, s.Sq, s.d}}, {"L", DType::f32, {s.B, s.Hq, s.Sq}}};
}


klab::Op make_attention_fwd_op() {
  klab::Op op;
  op.lesson = "09";
  op.name = "attention_fwd";
  op.summary = "O = softmax(Q·Kᵀ/sqrt(d))·V and L = logsumexp per query row; GQA; variant causal (bottom-right)";
  op.dims = {"B", "Hq", "Hkv", "Sq", "Sk", "d"};
  op.dtypes = {DType::bf16, DType::f16};
  op.variants = {"", "causal"};
  op.test_shapes = {
      {0, 2, 2, 5, 5, 64},            // empty batch
      {1, 1, 1, 1, 1, 1},             // one element (d = 1: the reference only; the kernels say why)
      {1, 1, 1, 1, 1, 64},            // S = 1
      {1, 2, 2, 1, 1, 128},
      {2, 3, 1, 1, 4099, 128},        // decoding: one query, 4099 keys (prime), 3 query heads a K/V head
      {1, 4, 2, 127, 127, 64},        // primes: no tile of 16, 32 or 64 divides them
      {1, 2, 2, 65, 200, 128},        // one query tile and one row; three key tiles and a ragged one
      {2, 2, 2, 256, 256, 64},        // whole tiles only
      {1, 2, 2, 1009, 1009, 128},     // Sq = Sk, prime: the causal triangle crosses tiles off their corners
      {1, 2, 1, 67, 1009, 64},        // Sq < Sk: causal queries are the last 67 positions
      {1, 2, 2, 1009, 67, 128},       // Sq > Sk: causal rows 0..941 see no key (O = 0, L = -inf)
      {259, 259, 7, 3, 5, 64},        // B * Hq = 67081 > 65535 (a grid's y and z limit), tiny S
      {1, 131, 131, 5, 7, 64},        // many K/V heads
      {1, 1, 1, 7, 9, 129},           // an odd head dim past 128: reference only, unsupported
      {1, 1, 1, 1, 16777259, 128},    // K and V have 2,147,489,152 elements: flat index past 2^31
  };
  op.bench_shapes = bench_problems();   // the lesson's targets (attention.cuh)
  op.seeds = 2;
  op.baseline = "cudnn";   // cuDNN's SDPA (attention_cudnn.cu)
  op.tour = {"v2_mma_sync", "cudnn"};   // v1 takes a tenth of a second a launch at these shapes
  op.bound = klab::Bound::compute;
  op.inputs = inputs;
  op.outputs = outputs;
  op.generate = generate;
  op.reference = reference;
  op.sample_only = sample_only;
  op.reference_sample = sample;
  op.tolerance = attention_tolerance;
  // Two products over the visible (query, key) pairs, 2 flops a multiply-add each:
  // 4 B Hq d pairs. Causal with Sq = Sk: pairs = S (S + 1) / 2, a little over half. The
  // softmax's exp and max are not counted (the convention of FlashAttention's papers).
  op.flops = [](const Problem& p) {
    const Shape s = shape_of(p);
    return 4.0 * static_cast<double>(s.B * s.Hq) * static_cast<double>(s.d) * visible_pairs(p);
  };
  op.validate = validate_attention;
  return op;
}

}  // namespace

KLAB_REGISTER(klab::register_lesson({.id = "09",
                                     .slug = "attention",
                                     .title = "Attention: the online softmax over K/V tiles on the tensor cores, and the backward",
                                     .exercise_op = "attention_fwd",
                                     .exercise_reference = "v1_simt_online",
                                     .exercise_hint = "lessons/09-attention/exercise.cu",
                                     // klab check 09b: dK and dV accumulated inside v1's key-block loop
                                     .more_exercises = {{.id = "09b",
                                                         .op = "attention_bwd",
                                                         .reference = "v1_mma_atomic_dq",
                                                         .file = "exercise_bwd.cu",
                                                         .hints = "hints_bwd.md",
                                                         .title = "attention backward"}}}));
KLAB_REGISTER(klab::register_op(make_attention_fwd_op()));

}  // namespace lesson09
