// CPU tests of lesson 09's backward reference (attention_bwd_ref.hpp): dQ, dK and dV agree
// with central finite differences of an fp64 forward written here on its own, for the loss
// F = Σ dO ⊙ O(Q, K, V), at small shapes: plain and causal, grouped-query (two query heads
// a K/V head), and Sq > Sk, whose first causal rows see no key (O = 0, L = −inf: no
// gradient). The reference reads O and L as inputs, as the kernels will: here the forward's
// own, unrounded. And a reference fed O = 0 (D = dO · O left out of dS) disagrees with the
// differences: the comparison can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../lessons/09-attention/attention_bwd_ref.hpp"
#include "klab/rng.hpp"
#include "test_util.hpp"

namespace {

using i64 = std::int64_t;
using lesson09::BwdShape;
using Vec = std::vector<double>;

struct Get {
  const Vec* v;
  double operator()(i64 i) const { return (*v)[static_cast<std::size_t>(i)]; }
};

// O and L from the definition: scores over the keys the query sees, the softmax with its
// max subtracted, O = P V; a query that sees no key gets O = 0, L = -inf.
void forward(const BwdShape& s, bool causal, const Vec& Q, const Vec& K, const Vec& V, Vec& O, Vec& L) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  O.assign(static_cast<std::size_t>(s.B * s.Hq * s.Sq * s.d), 0.0);
  L.assign(static_cast<std::size_t>(s.B * s.Hq * s.Sq), -std::numeric_limits<double>::infinity());
  for (i64 b = 0; b < s.B; ++b)
    for (i64 h = 0; h < s.Hq; ++h)
      for (i64 i = 0; i < s.Sq; ++i) {
        const i64 r = (b * s.Hq + h) * s.Sq + i, kv0 = (b * s.Hkv + h / (s.Hq / s.Hkv)) * s.Sk * s.d;
        Vec sc;
        for (i64 j = 0; j < s.Sk && lesson09::bwd_sees(s, causal, i, j); ++j) {
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

double loss(const BwdShape& s, bool causal, const Vec& Q, const Vec& K, const Vec& V, const Vec& dO) {
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
  BwdShape s;
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
    const BwdShape& s = c.s;
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
TEST(AttentionBackwardReference, EmptyRowsHaveNoGradient) {
  const BwdShape s{1, 1, 1, 6, 4, 3};   // causal: rows 0 and 1 see no key
  const Vec Q = random_vec(18, 11), K = random_vec(12, 12), V = random_vec(12, 13), dO = random_vec(18, 14);
  Vec O, L, dQ, dK, dV;
  forward(s, true, Q, K, V, O, L);
  ASSERT_EQ(L[0], -std::numeric_limits<double>::infinity());
  lesson09::attention_bwd_reference(s, true, Get{&Q}, Get{&K}, Get{&V}, Get{&O}, Get{&dO}, Get{&L}, dQ, dK, dV);
  for (i64 e = 0; e < 2 * s.d; ++e) EXPECT_EQ(dQ[e], 0.0) << e;
}
