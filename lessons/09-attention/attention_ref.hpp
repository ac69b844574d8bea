// lessons/09-attention/attention_ref.hpp — the fp64 references of attention, forward and
// backward, written from the definitions, host only: the ops' references and generator
// (attention_ops.cu, attention_bwd_ops.cu) and the CPU tests use them.
//
// The forward (op attention_fwd): query row r's O and L, the softmax's max subtracted (fp64
// overflows too, at exp(710)), the mask the comparison j <= i + Sk - Sq itself (apart from
// the kernels' visible_keys()).
//
// The backward (op attention_bwd): dQ, dK and dV from Q, K, V, the forward's O and L, and
// the gradient dO of the loss with respect to O. From the forward's definition, with
// s_ij = q_i · k_j / sqrt(d) over the keys j that query i sees (attention.cuh: causal
// bottom-right) and P_ij = exp(s_ij − L_i):
//   dV_j = Σ_i P_ij dO_i
//   dP_ij = dO_i · v_j          D_i = dO_i · O_i  (= Σ_j P_ij dP_ij)
//   dS_ij = P_ij (dP_ij − D_i)
//   dQ_i = Σ_j dS_ij k_j / sqrt(d)      dK_j = Σ_i dS_ij q_i / sqrt(d)
// summed, for dK and dV, over the query heads that share a K/V head (grouped-query). It uses
// O and L as given, as a FlashAttention-2 backward does (D from O, P from L): the inputs
// exactly as the kernels see them. A query that sees no key (L = −inf) contributes nothing.
// tests/test_attention_bwd.cpp checks it against finite differences of an fp64 forward.
//
// Row functions, so that a bench shape can be checked at a sample: one query row's O, L or
// dQ costs Sk · d, one key row's dK and dV cost (Hq / Hkv) · Sq · d. Tensors are read through
// accessors (i64 flat index -> double): a HostTensor's get, a float array, or a plain array
// in the tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "klab/rng.hpp"

namespace lesson09 {

struct RefShape {
  std::int64_t B, Hq, Hkv, Sq, Sk, d;
};

// The accessor of a HostTensor (or anything with get(i64) -> double): element i as fp64.
template <class T>
struct HostGet {
  const T* t;
  double operator()(std::int64_t i) const { return t->get(i); }
};
template <class T>
HostGet(const T*) -> HostGet<T>;

// Whether query i sees key j (attention.cuh's bottom-right causal convention, written as the
// comparison itself).
inline bool ref_sees(const RefShape& s, bool causal, std::int64_t i, std::int64_t j) {
  return !causal || j <= i + s.Sk - s.Sq;
}

// Adds the sum over keys [0, n) that body(j0, j1, acc) accumulates into acc[0, d) to out[0, d):
// serially, or (parallel: for the few long rows of a decoding shape) in 64 chunks over the
// host's cores, each into a partial row of its own, the partials added in chunk order.
template <class Body>
void sum_over_keys(std::int64_t n, std::int64_t d, bool parallel, double* out, const Body& body) {
  using i64 = std::int64_t;
  if (!parallel) {
    body(0, n, out);
    return;
  }
  const i64 chunks = 64, per = (n + chunks - 1) / chunks;
  std::vector<double> part(static_cast<std::size_t>(chunks * d), 0.0);
  klab::parallel_for(chunks, [&](i64 c0, i64 c1) {
    for (i64 c = c0; c < c1; ++c) body(std::min(n, c * per), std::min(n, (c + 1) * per), part.data() + c * d);
  }, per * d);
  for (i64 c = 0; c < chunks; ++c)
    for (i64 e = 0; e < d; ++e) out[e] += part[c * d + e];
}

// O of query row r = (b Hq + h) Sq + i into o[0, d), and L: scores in fp64 from the inputs as
// given, the max subtracted, probabilities normalized, O = P·V, L = max + ln(sum exp(s - max)).
// A row that sees no key: O = 0, L = -inf (attention.cuh's convention). `parallel`: split the
// keys over the host's cores (for the few long rows of a decoding shape); else serial (the
// caller splits the rows).
template <class Get>
void attention_fwd_row(const RefShape& s, bool causal, const Get& Q, const Get& K, const Get& V, std::int64_t r,
                       double* o, double& L, bool parallel) {
  using i64 = std::int64_t;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const i64 i = r % s.Sq, bh = r / s.Sq, b = bh / s.Hq, h = bh % s.Hq;
  const i64 kv0 = (b * s.Hkv + h / (s.Hq / s.Hkv)) * s.Sk * s.d;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  std::vector<double> q(static_cast<std::size_t>(s.d)), sc(static_cast<std::size_t>(s.Sk));
  for (i64 e = 0; e < s.d; ++e) q[e] = Q(r * s.d + e);
  auto scores = [&](i64 j0, i64 j1) {
    for (i64 j = j0; j < j1; ++j) {
      double acc = 0;
      for (i64 e = 0; e < s.d; ++e) acc += q[e] * K(kv0 + j * s.d + e);
      sc[j] = ref_sees(s, causal, i, j) ? acc * scale : -kInf;
    }
  };
  if (parallel) klab::parallel_for(s.Sk, scores, s.d);
  else scores(0, s.Sk);
  double m = -kInf;
  for (i64 j = 0; j < s.Sk; ++j) m = std::max(m, sc[j]);
  std::fill(o, o + s.d, 0.0);
  if (m == -kInf) {   // no key seen
    L = -kInf;
    return;
  }
  double l = 0;
  for (i64 j = 0; j < s.Sk; ++j) l += (sc[j] = std::exp(sc[j] - m));
  L = m + std::log(l);
  sum_over_keys(s.Sk, s.d, parallel, o, [&](i64 j0, i64 j1, double* acc) {
    for (i64 j = j0; j < j1; ++j)
      if (sc[j] != 0)
        for (i64 e = 0; e < s.d; ++e) acc[e] += sc[j] * V(kv0 + j * s.d + e);
  });
  for (i64 e = 0; e < s.d; ++e) o[e] /= l;
}

// dQ of query row r = (b Hq + h) Sq + i into dq[0, d). `parallel`: the keys split over the
// host's cores, as in attention_fwd_row.
template <class Get>
void attention_bwd_dq_row(const RefShape& s, bool causal, const Get& Q, const Get& K, const Get& V, const Get& O,
                          const Get& dO, const Get& L, std::int64_t r, double* dq, bool parallel = false) {
  using i64 = std::int64_t;
  const i64 i = r % s.Sq, bh = r / s.Sq, b = bh / s.Hq, h = bh % s.Hq;
  const i64 kv0 = (b * s.Hkv + h / (s.Hq / s.Hkv)) * s.Sk * s.d;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d)), Li = L(r);
  for (i64 e = 0; e < s.d; ++e) dq[e] = 0;
  if (Li == -std::numeric_limits<double>::infinity()) return;
  std::vector<double> q(static_cast<std::size_t>(s.d)), go(q.size());   // the row's q_i and dO_i
  double D = 0;
  for (i64 e = 0; e < s.d; ++e) {
    q[e] = Q(r * s.d + e);
    go[e] = dO(r * s.d + e);
    D += go[e] * O(r * s.d + e);
  }
  sum_over_keys(s.Sk, s.d, parallel, dq, [&](i64 j0, i64 j1, double* acc) {
    for (i64 j = j0; j < j1; ++j) {
      if (!ref_sees(s, causal, i, j)) continue;
      double sc = 0, dp = 0;
      for (i64 e = 0; e < s.d; ++e) {
        sc += q[e] * K(kv0 + j * s.d + e);
        dp += go[e] * V(kv0 + j * s.d + e);
      }
      const double ds = std::exp(sc * scale - Li) * (dp - D);
      for (i64 e = 0; e < s.d; ++e) acc[e] += ds * K(kv0 + j * s.d + e) * scale;
    }
  });
}

// dK and dV of key row t = (b Hkv + hk) Sk + j into dk[0, d) and dv[0, d).
template <class Get>
void attention_bwd_dkv_row(const RefShape& s, bool causal, const Get& Q, const Get& K, const Get& V, const Get& O,
                           const Get& dO, const Get& L, std::int64_t t, double* dk, double* dv) {
  using i64 = std::int64_t;
  const i64 j = t % s.Sk, bhk = t / s.Sk, b = bhk / s.Hkv, hk = bhk % s.Hkv, group = s.Hq / s.Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  for (i64 e = 0; e < s.d; ++e) dk[e] = dv[e] = 0;
  for (i64 h = hk * group; h < (hk + 1) * group; ++h)
    for (i64 i = 0; i < s.Sq; ++i) {
      const i64 r = (b * s.Hq + h) * s.Sq + i;
      const double Li = L(r);
      if (!ref_sees(s, causal, i, j) || Li == -std::numeric_limits<double>::infinity()) continue;
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
void attention_bwd_reference(const RefShape& s, bool causal, const Get& Q, const Get& K, const Get& V, const Get& O,
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
