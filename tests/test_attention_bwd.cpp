// CPU tests of lesson 09's backward, attention_bwd (attention_bwd_ops.cu, attention_ref.hpp).
//
// The reference: dQ, dK and dV agree with central finite differences of an fp64 forward
// written here on its own, for the loss F = Σ dO ⊙ O(Q, K, V), at small shapes: plain and
// causal, grouped-query (two query heads a K/V head), and Sq > Sk, whose first causal rows
// see no key (O = 0, L = −inf: no gradient). The reference reads O and L as inputs, as the
// kernels will: here the forward's own, unrounded. And a reference fed O = 0 (D = dO · O
// left out of dS) disagrees with the differences: the comparison can fail.
//
// The tolerance (attention_bwd_tolerance) passes what a correct tensor-core kernel computes
// and fails what a wrong one does. The correct kernel is simulated as a FlashAttention-2
// backward computes: D_i = dO_i · O_i, the scores S and dP = dO·Vᵀ as fp32 dot products,
// P = exp2(S log2(e) / sqrt(d) − L log2(e)) and dS = P (dP − D) in fp32, P and dS rounded to
// the dtype (the 16-bit operands of the next mma), dV = Pᵀ·dO, dQ = dS·K / sqrt(d) and
// dK = dSᵀ·Q / sqrt(d) accumulated in fp32, dK and dV summed over the query heads of a GQA
// group, each gradient rounded once. A kernel that keeps P and dS in fp32 passes too; both
// at every test shape the CPU can afford, bf16 and f16, plain and causal. Each mistake fails
// the judge at a shape chosen where it shows: a row of dQ, or of dK, shifted by one, K read
// transposed, dS without D, dQ without its 1/sqrt(d), dK and dV of the group's first head
// only, the causal mask one key too long, a row of dV left unwritten (the poison, NaN), dV
// made from dS in place of P. And the tolerance's model of each row's size (its rms, from
// the inputs' statistics) is checked against the fp64 reference: within a factor of 2 at
// every row of at least 32 terms, plain and causal, and the op's bound is 8 (u_p + e_s + c)
// times it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "../lessons/09-attention/attention_ref.hpp"
#include "klab/compare.hpp"
#include "klab/dtype.hpp"
#include "klab/harness.hpp"
#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "klab/tensor.hpp"
#include "test_util.hpp"

namespace {

using i64 = std::int64_t;
using lesson09::RefShape;
using Vec = std::vector<double>;

struct Get {
  const Vec* v;
  double operator()(i64 i) const { return (*v)[static_cast<std::size_t>(i)]; }
};

// O and L from the definition: scores over the keys the query sees, the softmax with its
// max subtracted, O = P V; a query that sees no key gets O = 0, L = -inf.
void forward(const RefShape& s, bool causal, const Vec& Q, const Vec& K, const Vec& V, Vec& O, Vec& L) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  O.assign(static_cast<std::size_t>(s.B * s.Hq * s.Sq * s.d), 0.0);
  L.assign(static_cast<std::size_t>(s.B * s.Hq * s.Sq), -std::numeric_limits<double>::infinity());
  for (i64 b = 0; b < s.B; ++b)
    for (i64 h = 0; h < s.Hq; ++h)
      for (i64 i = 0; i < s.Sq; ++i) {
        const i64 r = (b * s.Hq + h) * s.Sq + i, kv0 = (b * s.Hkv + h / (s.Hq / s.Hkv)) * s.Sk * s.d;
        Vec sc;
        for (i64 j = 0; j < s.Sk && lesson09::ref_sees(s, causal, i, j); ++j) {
          double a = 0;
          for (i64 e = 0; e < s.d; ++e) a += Q[r * s.d + e] * K[kv0 + j * s.d + e];
          sc.push_back(a * scale);
        }
        if (sc.empty()) continue;
        const double m = *std::max_element(sc.begin(), sc.end());
        double l = 0;
        for (double& x : sc) l += (x = std::exp(x - m));
        L[r] = m + std::log(l);
        for (std::size_t j = 0; j < sc.size(); ++j)
          for (i64 e = 0; e < s.d; ++e) O[r * s.d + e] += sc[j] / l * V[kv0 + static_cast<i64>(j) * s.d + e];
      }
}

double loss(const RefShape& s, bool causal, const Vec& Q, const Vec& K, const Vec& V, const Vec& dO) {
  Vec O, L;
  forward(s, causal, Q, K, V, O, L);
  double f = 0;
  for (std::size_t k = 0; k < O.size(); ++k) f += dO[k] * O[k];
  return f;
}

Vec random_vec(i64 n, std::uint64_t seed) {
  Vec v(static_cast<std::size_t>(n));
  for (i64 k = 0; k < n; ++k) v[k] = 2 * klab::uniform01(seed, static_cast<std::uint64_t>(k)) - 1;
  return v;
}

struct Case {
  RefShape s;
  bool causal;
};

const std::vector<Case> kCases = {
    {{1, 2, 1, 5, 7, 3}, false}, {{1, 2, 1, 5, 7, 3}, true},   // grouped-query, Sq < Sk
    {{2, 2, 2, 6, 4, 3}, true},                                // Sq > Sk: rows 0 and 1 see no key
    {{1, 1, 1, 4, 4, 8}, true},                                // the square causal triangle
};

}  // namespace

TEST(AttentionBackwardReference, MatchesFiniteDifferencesOfTheForward) {
  std::uint64_t seed = 1;
  for (const Case& c : kCases) {
    const RefShape& s = c.s;
    Vec Q = random_vec(s.B * s.Hq * s.Sq * s.d, seed++), K = random_vec(s.B * s.Hkv * s.Sk * s.d, seed++),
        V = random_vec(s.B * s.Hkv * s.Sk * s.d, seed++), dO = random_vec(s.B * s.Hq * s.Sq * s.d, seed++);
    Vec O, L, dQ, dK, dV;
    forward(s, c.causal, Q, K, V, O, L);
    lesson09::attention_bwd_reference(s, c.causal, Get{&Q}, Get{&K}, Get{&V}, Get{&O}, Get{&dO}, Get{&L}, dQ, dK, dV);
    const auto f = [&] { return loss(s, c.causal, Q, K, V, dO); };
    const std::string where = std::to_string(s.Hq) + "/" + std::to_string(s.Hkv) + " heads, Sq " +
                              std::to_string(s.Sq) + ", Sk " + std::to_string(s.Sk) + (c.causal ? ", causal" : "");
    EXPECT_LT(klab_test::worst_fd_gap(Q, dQ, f), 1e-7) << "dQ, " << where;
    EXPECT_LT(klab_test::worst_fd_gap(K, dK, f), 1e-7) << "dK, " << where;
    EXPECT_LT(klab_test::worst_fd_gap(V, dV, f), 1e-7) << "dV, " << where;
    // Without D (O read as zeros) dS is P dP alone: dQ and dK must then disagree.
    const Vec zeros(O.size(), 0.0);
    Vec bQ, bK, bV;
    lesson09::attention_bwd_reference(s, c.causal, Get{&Q}, Get{&K}, Get{&V}, Get{&zeros}, Get{&dO}, Get{&L}, bQ, bK, bV);
    EXPECT_GT(klab_test::worst_fd_gap(Q, bQ, f), 1e-3) << "dQ without D, " << where;
    EXPECT_GT(klab_test::worst_fd_gap(K, bK, f), 1e-3) << "dK without D, " << where;
  }
}

// A query that sees no key has no gradient, and gives none to the keys.
// A long row of dQ split over the host's cores (the reference's path for a decoding shape's
// few queries) is the serial row, its fp64 terms summed in another order: within 1e-10 of its
// norm. The bound can fail: the serial row without its last key (a chunk's edge dropped) is
// off by one term of 100,003, about 1/sqrt(n) of the norm, at 3e-3.
TEST(AttentionBackwardReference, ALongRowSplitOverTheCoresIsTheSerialRow) {
  const RefShape s{1, 1, 1, 3, 100003, 4};
  const RefShape short_s{1, 1, 1, 3, 100002, 4};   // the same keys but the last (B = Hkv = 1)
  for (const bool causal : {false, true}) {
    Vec Q = random_vec(s.Sq * s.d, 41), K = random_vec(s.Sk * s.d, 42), V = random_vec(s.Sk * s.d, 43),
        dO = random_vec(s.Sq * s.d, 44);
    Vec O, L;
    forward(s, causal, Q, K, V, O, L);
    const auto gap = [](const Vec& a, const Vec& b) {
      double num = 0, den = 0;
      for (std::size_t e = 0; e < a.size(); ++e) {
        num += (a[e] - b[e]) * (a[e] - b[e]);
        den += a[e] * a[e];
      }
      return std::sqrt(num / den);
    };
    for (i64 r = 0; r < s.Sq; ++r) {
      Vec serial(4), split(4), dropped(4);
      lesson09::attention_bwd_dq_row(s, causal, Get{&Q}, Get{&K}, Get{&V}, Get{&O}, Get{&dO}, Get{&L}, r,
                                     serial.data(), false);
      lesson09::attention_bwd_dq_row(s, causal, Get{&Q}, Get{&K}, Get{&V}, Get{&O}, Get{&dO}, Get{&L}, r,
                                     split.data(), true);
      EXPECT_LT(gap(serial, split), 1e-10) << "row " << r << (causal ? ", causal" : "");
      if (!causal) {
        lesson09::attention_bwd_dq_row(short_s, false, Get{&Q}, Get{&K}, Get{&V}, Get{&O}, Get{&dO}, Get{&L}, r,
                                       dropped.data(), false);
        EXPECT_GT(gap(serial, dropped), 1e-4) << "the control: one key left out must show, row " << r;
      }
    }
  }
}

TEST(AttentionBackwardReference, EmptyRowsHaveNoGradient) {
  const RefShape s{1, 1, 1, 6, 4, 3};   // causal: rows 0 and 1 see no key
  const Vec Q = random_vec(18, 11), K = random_vec(12, 12), V = random_vec(12, 13), dO = random_vec(18, 14);
  Vec O, L, dQ, dK, dV;
  forward(s, true, Q, K, V, O, L);
  ASSERT_EQ(L[0], -std::numeric_limits<double>::infinity());
  lesson09::attention_bwd_reference(s, true, Get{&Q}, Get{&K}, Get{&V}, Get{&O}, Get{&dO}, Get{&L}, dQ, dK, dV);
  for (i64 e = 0; e < 2 * s.d; ++e) EXPECT_EQ(dQ[e], 0.0) << e;
}

// ---- the tolerance: a simulated tensor-core kernel, right and wrong ------------------------

namespace {

using klab::DType;
using klab::HostTensor;
using klab::Inputs;
using klab::Problem;
using klab::Reference;

struct BwdMistake {
  bool fp32_pds = false;          // P and dS kept in fp32, never rounded (not a mistake)
  bool dq_row_shift = false;      // dQ row r written with row r - 1's values
  bool dk_row_shift = false;      // dK row t written with row t - 1's values (key t - 1)
  bool k_transposed = false;      // K of a head read as (d, Sk)
  bool no_d = false;              // dS = P dP: D_i taken as 0
  bool no_scale = false;          // dQ not multiplied by 1/sqrt(d)
  bool first_head_only = false;   // dK, dV of the group's first query head, not its sum
  int causal_shift = 0;           // +1: the causal mask one key too long
  bool unwritten_dv_row = false;  // one row of dV left holding the poison (NaN)
  bool dv_from_ds = false;        // dV = dSᵀ·dO in place of Pᵀ·dO
};

struct Dims6 {
  i64 B, Hq, Hkv, Sq, Sk, d;
};

Dims6 dims_of(const Problem& p) { return {p.shape[0], p.shape[1], p.shape[2], p.shape[3], p.shape[4], p.shape[5]}; }

std::vector<float> floats_of(const HostTensor& t) {
  std::vector<float> f(static_cast<std::size_t>(t.numel()));
  for (i64 i = 0; i < t.numel(); ++i) f[static_cast<std::size_t>(i)] = static_cast<float>(t.get(i));
  return f;
}

// dQ, dK and dV as the kernel (with the mistake) writes them. Two passes, as the kernels
// split the work: dQ by query row, dK and dV by key row, each recomputing S, P, dP and dS.
std::vector<HostTensor> simulate(const Problem& p, const Inputs& in, const BwdMistake& mk) {
  const Dims6 s = dims_of(p);
  const bool causal = p.variant == "causal";
  const i64 group = s.Hq / s.Hkv, d = s.d;
  const std::vector<float> Q = floats_of(in.tensors[0]), K = floats_of(in.tensors[1]), V = floats_of(in.tensors[2]),
                           O = floats_of(in.tensors[3]), dO = floats_of(in.tensors[4]), L = floats_of(in.tensors[5]);
  HostTensor dQ(p.dtype, {s.B, s.Hq, s.Sq, d}), dK(p.dtype, {s.B, s.Hkv, s.Sk, d}), dV(p.dtype, {s.B, s.Hkv, s.Sk, d});
  const double log2e = 1.4426950408889634;
  const float scale_log2 = static_cast<float>(log2e / std::sqrt(static_cast<double>(d)));
  const float log2e_f = static_cast<float>(log2e);
  const float inv_sqrt_d = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const i64 q_rows = s.B * s.Hq * s.Sq, kv_rows = s.B * s.Hkv * s.Sk;
  // How many keys query i sees (a prefix), with the mistake's mask.
  const auto n_keys = [&](i64 i) {
    return causal ? std::clamp<i64>(i + s.Sk - s.Sq + 1 + mk.causal_shift, 0, s.Sk) : s.Sk;
  };
  const auto k_at = [&](i64 kv, i64 j, i64 e) {
    return K[static_cast<std::size_t>(kv + (mk.k_transposed ? e * s.Sk + j : j * d + e))];
  };
  const auto operand = [&](float x) { return mk.fp32_pds ? x : static_cast<float>(klab::round_to(p.dtype, x)); };
  // D_i = dO_i · O_i in fp32.
  std::vector<float> D(static_cast<std::size_t>(q_rows), 0.f);
  for (i64 r = 0; r < q_rows; ++r) {
    float acc = 0.f;
    for (i64 e = 0; e < d; ++e) acc += dO[r * d + e] * O[r * d + e];
    D[r] = mk.no_d ? 0.f : acc;
  }
  // P and dS of query row r and key j of the K/V head at offset kv, in fp32.
  const auto pair = [&](i64 r, i64 kv, i64 j, float& P, float& dS) {
    float sc = 0.f, dp = 0.f;
    for (i64 e = 0; e < d; ++e) sc += Q[r * d + e] * k_at(kv, j, e);
    for (i64 e = 0; e < d; ++e) dp += dO[r * d + e] * V[kv + j * d + e];
    P = std::exp2(sc * scale_log2 - L[r] * log2e_f);
    dS = P * (dp - D[r]);
  };
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  klab::parallel_for(q_rows, [&](i64 r0, i64 r1) {
    std::vector<float> acc(static_cast<std::size_t>(d));
    for (i64 r = r0; r < r1; ++r) {
      const i64 i = r % s.Sq, bh = r / s.Sq, b = bh / s.Hq, h = bh % s.Hq;
      const i64 kv = (b * s.Hkv + h / group) * s.Sk * d;
      std::fill(acc.begin(), acc.end(), 0.f);
      if (L[r] != kNegInf)   // a row that sees no key: P = 0, no gradient
        for (i64 j = 0; j < n_keys(i); ++j) {
          float P, dS;
          pair(r, kv, j, P, dS);
          const float ds = operand(dS);
          for (i64 e = 0; e < d; ++e) acc[e] += ds * k_at(kv, j, e);
        }
      for (i64 e = 0; e < d; ++e) dQ.set(r * d + e, mk.no_scale ? acc[e] : acc[e] * inv_sqrt_d);
    }
  }, s.Sk * d);
  klab::parallel_for(kv_rows, [&](i64 t0, i64 t1) {
    std::vector<float> acc_k(static_cast<std::size_t>(d)), acc_v(static_cast<std::size_t>(d));
    for (i64 t = t0; t < t1; ++t) {
      const i64 j = t % s.Sk, bhk = t / s.Sk, b = bhk / s.Hkv, hk = bhk % s.Hkv;
      const i64 kv = bhk * s.Sk * d;
      std::fill(acc_k.begin(), acc_k.end(), 0.f);
      std::fill(acc_v.begin(), acc_v.end(), 0.f);
      for (i64 h = hk * group; h < hk * group + (mk.first_head_only ? 1 : group); ++h)
        for (i64 i = 0; i < s.Sq; ++i) {
          const i64 r = (b * s.Hq + h) * s.Sq + i;
          if (j >= n_keys(i) || L[r] == kNegInf) continue;
          float P, dS;
          pair(r, kv, j, P, dS);
          const float pr = operand(P), ds = operand(dS);
          for (i64 e = 0; e < d; ++e) {
            acc_v[e] += (mk.dv_from_ds ? ds : pr) * dO[r * d + e];
            acc_k[e] += ds * Q[r * d + e];
          }
        }
      for (i64 e = 0; e < d; ++e) {
        dK.set(t * d + e, acc_k[e] * inv_sqrt_d);
        dV.set(t * d + e, acc_v[e]);
      }
    }
  }, group * s.Sq * d);
  const auto shift_rows = [&](HostTensor& x, i64 rows) {
    for (i64 r = rows - 1; r >= 1; --r)
      for (i64 e = 0; e < d; ++e) x.set(r * d + e, x.get((r - 1) * d + e));
  };
  if (mk.dq_row_shift) shift_rows(dQ, q_rows);
  if (mk.dk_row_shift) shift_rows(dK, kv_rows);
  if (mk.unwritten_dv_row && kv_rows > 0)
    for (i64 e = 0; e < d; ++e) dV.set(kv_rows / 2 * d + e, std::numeric_limits<double>::quiet_NaN());
  std::vector<HostTensor> out;
  out.push_back(std::move(dQ));
  out.push_back(std::move(dK));
  out.push_back(std::move(dV));
  return out;
}

const klab::Op* attention_bwd_op() { return klab::registry().find_op("attention_bwd"); }

double work_of(const Dims6& s) {
  return static_cast<double>(s.B) * static_cast<double>(s.Hq) * static_cast<double>(s.Sq) *
         static_cast<double>(s.Sk) * static_cast<double>(s.d);
}

// The test shapes whose reference and simulation the CPU affords (B Hq Sq Sk d <= 5e7):
// all but {1, 2, 2, 1009, 1009, 128}, {259, 259, 7, 3, 5, 64} and the shape past 2^31.
constexpr double kMaxWork = 5e7;

// The largest |out - ref| / (atol_at + rtol |ref|) of an output (a bound of 0: 0 if exact,
// else infinity).
double worst_ratio(const klab::Tolerance& tol, const HostTensor& out, const klab::RefArray& ref) {
  double w = 0;
  for (i64 i = 0; i < out.numel(); ++i) {
    const double x = ref[static_cast<std::size_t>(i)], err = std::fabs(out.get(i) - x);
    const double lim = (tol.atol_at ? tol.atol_at(i) : tol.atol) + tol.rtol * std::fabs(x);
    w = std::max(w, lim > 0 ? err / lim : (err > 0 ? std::numeric_limits<double>::infinity() : 0.0));
  }
  return w;
}

const char* const kOutputs[3] = {"dQ", "dK", "dV"};

}  // namespace

TEST(AttentionBwdTolerance, TensorCoreAndFp32KernelsPass) {
  const klab::Op* op = attention_bwd_op();
  if (!op) GTEST_SKIP() << "lesson 09 is not in this build";
  // Per dtype and kind of kernel (16-bit P and dS, or fp32), per output: the worst
  // error / bound ratio over the shapes, and the worst rel-L2 / its bound, for the log.
  struct Worst {
    double bound = 0, l2 = 0;
    std::string at_bound, at_l2;
  };
  Worst worst[2][2][3];
  int checked = 0, shapes = 0;
  for (const klab::Dims& dims : op->test_shapes) shapes += work_of(dims_of({dims, DType::bf16, ""})) <= kMaxWork;
  EXPECT_GE(shapes, 10);
  std::uint64_t seed = 2;   // fresh seeds, two for each dtype and variant: the op's own checks use 1 and 2
  for (DType t : {DType::bf16, DType::f16})
    for (const std::string variant : {"", "causal"})
      for (int twice = 0; twice < 2; ++twice) {
        ++seed;
        for (const klab::Dims& dims : op->test_shapes) {
          const Problem p{dims, t, variant};
          if (work_of(dims_of(p)) > kMaxWork) continue;
          const Inputs in = klab::make_inputs(*op, p, seed);
          const Reference ref = op->reference(p, in);
          for (int fp32 = 0; fp32 < 2; ++fp32) {
            const std::vector<HostTensor> out = simulate(p, in, {.fp32_pds = fp32 == 1});
            klab::VerifyRecord rec;
            klab::judge(*op, p, in, ref, out, rec);
            EXPECT_EQ(rec.status, klab::Status::pass)
                << p.label() << " seed " << seed << (fp32 ? " (fp32 P, dS)" : "") << ": " << rec.message;
            ++checked;
            for (int k = 0; k < 3 && rec.outputs.size() == 3; ++k) {
              const klab::Tolerance tol = op->tolerance(p, k);
              Worst& w = worst[t == DType::f16][fp32][k];
              const double b = worst_ratio(tol, out[k], ref[k]), l2 = rec.outputs[k].rel_l2 / tol.max_rel_l2;
              if (b > w.bound) w.bound = b, w.at_bound = p.label();
              if (l2 > w.l2) w.l2 = l2, w.at_l2 = p.label();
            }
          }
        }
      }
  EXPECT_EQ(checked, 4 * 2 * 2 * shapes);
  for (int t = 0; t < 2; ++t)
    for (int fp32 = 0; fp32 < 2; ++fp32)
      for (int k = 0; k < 3; ++k) {
        const Worst& w = worst[t][fp32][k];
        std::printf("[   info   ] attention_bwd %s, %s P and dS, %s: worst error/bound %.3f (%s), "
                    "rel_l2/bound %.3f (%s)\n",
                    t ? "f16" : "bf16", fp32 ? "fp32" : "16-bit", kOutputs[k], w.bound, w.at_bound.c_str(), w.l2,
                    w.at_l2.c_str());
      }
}

TEST(AttentionBwdTolerance, EachMistakeFails) {
  const klab::Op* op = attention_bwd_op();
  if (!op) GTEST_SKIP() << "lesson 09 is not in this build";
  struct Case {
    std::string name;
    BwdMistake mk;
    klab::Dims shape;
    std::string variant;
  };
  const klab::Dims primes{1, 4, 2, 127, 127, 64}, five{1, 1, 1, 5, 5, 64}, gqa{1, 8, 2, 67, 1009, 64};
  const std::vector<Case> cases = {
      {"dQ row shifted", {.dq_row_shift = true}, primes, ""},
      {"dQ row shifted", {.dq_row_shift = true}, primes, "causal"},
      {"dK row shifted", {.dk_row_shift = true}, primes, ""},
      {"dK row shifted", {.dk_row_shift = true}, primes, "causal"},
      {"K transposed", {.k_transposed = true}, primes, ""},
      {"K transposed", {.k_transposed = true}, primes, "causal"},
      {"dS without D", {.no_d = true}, five, ""},
      {"dS without D", {.no_d = true}, primes, ""},
      {"dS without D", {.no_d = true}, primes, "causal"},
      {"dQ without 1/sqrt(d)", {.no_scale = true}, primes, ""},
      {"dQ without 1/sqrt(d)", {.no_scale = true}, primes, "causal"},
      {"dK, dV of the group's first head only", {.first_head_only = true}, primes, ""},
      {"dK, dV of the group's first head only", {.first_head_only = true}, gqa, "causal"},
      {"causal mask one key too long", {.causal_shift = 1}, primes, "causal"},
      {"causal mask one key too long", {.causal_shift = 1}, five, "causal"},
      {"a dV row unwritten", {.unwritten_dv_row = true}, primes, ""},
      {"dV from dS", {.dv_from_ds = true}, primes, ""},
  };
  for (DType t : {DType::bf16, DType::f16})
    for (const Case& c : cases) {
      const Problem p{c.shape, t, c.variant};
      const Inputs in = klab::make_inputs(*op, p, 5);
      const Reference ref = op->reference(p, in);
      const std::string right = klab_test::check(*op, p, in, ref, simulate(p, in, {}));
      ASSERT_EQ(right, "") << p.label() << ": the correct simulation fails";
      const std::string why = klab_test::check(*op, p, in, ref, simulate(p, in, c.mk));
      EXPECT_NE(why, "") << p.label() << ": the tolerance accepts " << c.name;
      std::printf("[   info   ] attention_bwd %s, %s: %s\n", p.label().c_str(), c.name.c_str(), why.c_str());
    }
}

// The tolerance's model of each gradient row's size (attention_bwd_ops.cu): its rms is
//   dQ_i: sqrt((1.12 / 27) f(n_i) / n_i)   dK_j: sqrt((1.12 / 27) S_j)   dV_j: sqrt((1.12 / 3) T_j)
// with n_i the keys query i sees, f(n) = max(2^-8, 1 - 1/n), and S_j (T_j) the sum of
// f(n_i) / n_i^2 (1 / n_i^2) over the query rows, of every head of the group, that see key j.
// Checked against the fp64 reference's rms of each row of at least 32 terms: within a factor
// of 2 (rows of fewer terms scatter by their few terms' own spread). And the op's atol_at is
// 8 (u_p + e_s + c) times it.
TEST(AttentionBwdTolerance, RmsModelMatchesTheReference) {
  const klab::Op* op = attention_bwd_op();
  if (!op) GTEST_SKIP() << "lesson 09 is not in this build";
  const double u = std::ldexp(1.0, -24), up = std::ldexp(1.0, -8);
  for (const klab::Dims& dims : std::vector<klab::Dims>{{1, 4, 2, 127, 127, 64}, {2, 2, 2, 256, 256, 64}})
    for (const std::string variant : {"", "causal"}) {
      const Problem p{dims, DType::bf16, variant};
      const Dims6 s = dims_of(p);
      const bool causal = variant == "causal";
      const i64 group = s.Hq / s.Hkv;
      const Inputs in = klab::make_inputs(*op, p, 6);
      const Reference ref = op->reference(p, in);
      const auto n_of = [&](i64 i) { return causal ? std::clamp<i64>(i + s.Sk - s.Sq + 1, 0, s.Sk) : s.Sk; };
      for (int k = 0; k < 3; ++k) {
        const klab::Tolerance tol = op->tolerance(p, k);
        const i64 terms = k == 0 ? s.Sk : group * s.Sq;
        const double c = std::ceil(static_cast<double>(terms) / 16.0) * std::ldexp(1.0, -23);
        const double rel = up + static_cast<double>(s.d) * u + c;
        const i64 rows = k == 0 ? s.B * s.Hq * s.Sq : s.B * s.Hkv * s.Sk, per_head = k == 0 ? s.Sq : s.Sk;
        double lo = std::numeric_limits<double>::infinity(), hi = 0;
        i64 counted = 0, lo_row = -1, hi_row = -1;
        for (i64 r = 0; r < rows; ++r) {
          const i64 x = r % per_head;
          // The row's terms and the model's rms.
          i64 n_terms = 0;
          double model = 0;
          if (k == 0) {
            n_terms = n_of(x);
            const double n = static_cast<double>(n_terms);
            model = n_terms > 0 ? std::sqrt(1.12 / 27.0 * std::max(std::ldexp(1.0, -8), 1.0 - 1.0 / n) / n) : 0.0;
          } else {
            double sum = 0;
            for (i64 i = 0; i < s.Sq; ++i)
              if (x < n_of(i)) {
                n_terms += group;
                const double n = static_cast<double>(n_of(i));
                sum += static_cast<double>(group) * (k == 1 ? std::max(std::ldexp(1.0, -8), 1.0 - 1.0 / n) : 1.0) / (n * n);
              }
            model = std::sqrt((k == 1 ? 1.12 / 27.0 : 1.12 / 3.0) * sum);
          }
          // The op's bound is 8 rel times the model (the comment's formulas, as coded).
          EXPECT_NEAR(tol.atol_at(r * s.d), 8.0 * rel * model, 1e-12 * (1 + model))
              << p.label() << " " << kOutputs[k] << " row " << r;
          if (n_terms < 32) continue;
          double sq = 0;
          for (i64 e = 0; e < s.d; ++e) sq += ref[k][r * s.d + e] * ref[k][r * s.d + e];
          const double ratio = std::sqrt(sq / static_cast<double>(s.d)) / model;
          if (ratio < lo) lo = ratio, lo_row = r;
          if (ratio > hi) hi = ratio, hi_row = r;
          ++counted;
          EXPECT_GE(ratio, 0.5) << p.label() << " " << kOutputs[k] << " row " << r << " (" << n_terms << " terms)";
          EXPECT_LE(ratio, 2.0) << p.label() << " " << kOutputs[k] << " row " << r << " (" << n_terms << " terms)";
        }
        EXPECT_GT(counted, 0);
        std::printf("[   info   ] attention_bwd %s %s: rms / model over %lld rows: min %.3f (row %lld), "
                    "max %.3f (row %lld)\n",
                    p.label().c_str(), kOutputs[k], static_cast<long long>(counted), lo, static_cast<long long>(lo_row),
                    hi, static_cast<long long>(hi_row));
      }
    }
}

// The generator's O and L (attention_bwd_ops.cu's forward_fast, the loop order that makes the
// bench shapes affordable) are the fp64 forward of attention_ref.hpp, rounded once: O to the
// dtype (within its unit roundoff u_p of the fp64 value, or half f16's subnormal spacing,
// 2^-25, near zero), L to fp32.
TEST(AttentionBwdOp, TheGeneratorsOAndLAreTheReferenceForward) {
  const klab::Op* op = attention_bwd_op();
  if (!op) GTEST_SKIP() << "lesson 09 is not in this build";
  const std::vector<std::pair<klab::Dims, std::string>> cases = {{{1, 4, 2, 127, 127, 64}, ""},
                                                                 {{1, 4, 2, 127, 127, 64}, "causal"},
                                                                 {{1, 2, 2, 1009, 67, 128}, "causal"},
                                                                 {{2, 3, 1, 1, 4099, 128}, ""},
                                                                 {{1, 1, 1, 7, 9, 129}, "causal"}};   // d % 4 = 1
  for (const auto& [dims, variant] : cases)
    for (const DType t : {DType::bf16, DType::f16}) {
      const Problem p{dims, t, variant};
      const Dims6 s = dims_of(p);
      const lesson09::RefShape rs{s.B, s.Hq, s.Hkv, s.Sq, s.Sk, s.d};
      const Inputs in = klab::make_inputs(*op, p, 9);
      const double up = t == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
      std::vector<double> o(static_cast<std::size_t>(s.d));
      int worst_o = 0, worst_l = 0;
      for (i64 r = 0; r < s.B * s.Hq * s.Sq; ++r) {
        double l = 0;
        lesson09::attention_fwd_row(rs, variant == "causal", lesson09::HostGet{&in.tensors[0]},
                                    lesson09::HostGet{&in.tensors[1]}, lesson09::HostGet{&in.tensors[2]}, r, o.data(),
                                    l, false);
        const double got_l = in.tensors[5].get(r);
        if (std::isinf(l)) worst_l += got_l != l;
        else worst_l += std::abs(got_l - l) > std::ldexp(1.0, -24) * std::abs(l) + 1e-300;
        for (i64 e = 0; e < s.d; ++e) worst_o += std::abs(in.tensors[3].get(r * s.d + e) - o[e]) > up * std::abs(o[e]) + std::ldexp(1.0, -25);
      }
      EXPECT_EQ(worst_o, 0) << p.label() << ": elements of O off the fp64 forward by more than its rounding";
      EXPECT_EQ(worst_l, 0) << p.label() << ": rows of L off the fp64 forward by more than its rounding";
    }
}
