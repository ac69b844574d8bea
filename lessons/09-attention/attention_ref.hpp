// lessons/09-attention/attention_bwd_ref.hpp — the fp64 reference of attention's backward
// pass, for the op attention_bwd (its kernels are still to come): dQ, dK and dV from Q, K,
// V, the forward's O and L, and the gradient dO of the loss with respect to O.
//
// From the forward's definition (attention_ops.cu), with s_ij = q_i · k_j / sqrt(d) over the
// keys j that query i sees (attention.cuh: causal bottom-right) and P_ij = exp(s_ij − L_i):
//   dV_j = Σ_i P_ij dO_i
//   dP_ij = dO_i · v_j          D_i = dO_i · O_i  (= Σ_j P_ij dP_ij)
//   dS_ij = P_ij (dP_ij − D_i)
//   dQ_i = Σ_j dS_ij k_j / sqrt(d)      dK_j = Σ_i dS_ij q_i / sqrt(d)
// summed, for dK and dV, over the query heads that share a K/V head (grouped-query). It uses
// O and L as given, as a FlashAttention-2 backward does (D from O, P from L): the inputs
// exactly as the kernels see them. A query that sees no key (L = −inf) contributes nothing.
// tests/test_attention_bwd.cpp checks it against finite differences of an fp64 forward.
//
// Row functions, so that a bench shape can be checked at a sample: one query row's dQ costs
// Sk · d, one key row's dK and dV cost (Hq / Hkv) · Sq · d. Tensors are read through
// accessors (i64 flat index -> double): a HostTensor's get, or a plain array in the tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace lesson09 {

struct BwdShape {
  std::int64_t B, Hq, Hkv, Sq, Sk, d;
};

// Whether query i sees key j (attention.cuh's bottom-right causal convention, written as the
// comparison itself).
inline bool bwd_sees(const BwdShape& s, bool causal, std::int64_t i, std::int64_t j) {
  return !causal || j <= i + s.Sk - s.Sq;
}

// dQ of query row r = (b Hq + h) Sq + i into dq[0, d).
template <class Get>
void attention_bwd_dq_row(const BwdShape& s, bool causal, const Get& Q, const Get& K, const Get& V, const Get& O,
                          const Get& dO, const Get& L, std::int64_t r, double* dq) {
  using i64 = std::int64_t;
  const i64 i = r % s.Sq, bh = r / s.Sq, b = bh / s.Hq, h = bh % s.Hq;
  const i64 kv0 = (b * s.Hkv + h / (s.Hq / s.Hkv)) * s.Sk * s.d;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d)), Li = L(r);
  for (i64 e = 0; e < s.d; ++e) dq[e] = 0;
  if (Li == -std::numeric_limits<double>::infinity()) return;
  double D = 0;
  for (i64 e = 0; e < s.d; ++e) D += dO(r * s.d + e) * O(r * s.d + e);
  for (i64 j = 0; j < s.Sk; ++j) {
    if (!bwd_sees(s, causal, i, j)) continue;
    double sc = 0, dp = 0;
    for (i64 e = 0; e < s.d; ++e) {
      sc += Q(r * s.d + e) * K(kv0 + j * s.d + e);
      dp += dO(r * s.d + e) * V(kv0 + j * s.d + e);
    }
    const double ds = std::exp(sc * scale - Li) * (dp - D);
    for (i64 e = 0; e < s.d; ++e) dq[e] += ds * K(kv0 + j * s.d + e) * scale;
  }
}

// dK and dV of key row t = (b Hkv + hk) Sk + j into dk[0, d) and dv[0, d).
template <class Get>
void attention_bwd_dkv_row(const BwdShape& s, bool causal, const Get& Q, const Get& K, const Get& V, const Get& O,
                           const Get& dO, const Get& L, std::int64_t t, double* dk, double* dv) {
  using i64 = std::int64_t;
  const i64 j = t % s.Sk, bhk = t / s.Sk, b = bhk / s.Hkv, hk = bhk % s.Hkv, group = s.Hq / s.Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  for (i64 e = 0; e < s.d; ++e) dk[e] = dv[e] = 0;
  for (i64 h = hk * group; h < (hk + 1) * group; ++h)
    for (i64 i = 0; i < s.Sq; ++i) {
      const i64 r = (b * s.Hq + h) * s.Sq + i;
      const double Li = L(r);
      if (!bwd_sees(s, causal, i, j) || Li == -std::numeric_limits<double>::infinity()) continue;
      double sc = 0, dp = 0, D = 0;
      for (i64 e = 0; e < s.d; ++e) {
        sc += Q(r * s.d + e) * K(t * s.d + e);
        dp += dO(r * s.d + e) * V(t * s.d + e);
        D += dO(r * s.d + e) * O(r * s.d + e);
      }
      const double p = std::exp(sc * scale - Li), ds = p * (dp - D);
      for (i64 e = 0; e < s.d; ++e) {
        dv[e] += p * dO(r * s.d + e);
        dk[e] += ds * Q(r * s.d + e) * scale;
      }
    }
}

// The whole backward: dQ (B, Hq, Sq, d), dK and dV (B, Hkv, Sk, d), serially (small shapes;
// the op's reference splits the rows over the host's cores with the row functions).
template <class Get>
void attention_bwd_reference(const BwdShape& s, bool causal, const Get& Q, const Get& K, const Get& V, const Get& O,
                             const Get& dO, const Get& L, std::vector<double>& dQ, std::vector<double>& dK,
                             std::vector<double>& dV) {
  using i64 = std::int64_t;
  dQ.assign(static_cast<std::size_t>(s.B * s.Hq * s.Sq * s.d), 0.0);
  dK.assign(static_cast<std::size_t>(s.B * s.Hkv * s.Sk * s.d), 0.0);
  dV.assign(dK.size(), 0.0);
  for (i64 r = 0; r < s.B * s.Hq * s.Sq; ++r) attention_bwd_dq_row(s, causal, Q, K, V, O, dO, L, r, dQ.data() + r * s.d);
  for (i64 t = 0; t < s.B * s.Hkv * s.Sk; ++t)
    attention_bwd_dkv_row(s, causal, Q, K, V, O, dO, L, t, dK.data() + t * s.d, dV.data() + t * s.d);
}

}  // namespace lesson09
