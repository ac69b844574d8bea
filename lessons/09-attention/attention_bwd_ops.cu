// Lesson 09 — attention backward: its op and its CPU reference.
//
//   attention_bwd   dQ, dK, dV of O = softmax(Q·Kᵀ / sqrt(d)) · V       {B, Hq, Hkv, Sq, Sk, d}
//                   from Q, K, V, the forward's outputs O and L (attention_fwd's, the
//                   log-sum-exp of each query row's scaled scores, fp32) and dO, the
//                   gradient of the loss with respect to O; bf16 and f16 in and out, fp32
//                   accumulation. dK and dV are summed over the query heads that share a K/V
//                   head (grouped-query).
//   variants        "" and "causal", attention_fwd's (attention.cuh: bottom-right; a query
//                   that sees no key has L = -inf and no gradient)
// The versions live in attention_bwd_mma.cu (v1, v2), attention_bwd_triton.py (triton) and
// attention_cudnn.cu (cudnn).
//
//   klab test 09 --op attention_bwd
//   klab bench 09 --op attention_bwd --variant causal
//
// Inputs: Q, K, V and dO uniform in [-1, 1); O and L the fp64 forward of those Q, K, V
// (forward_fast below, attention_ref.hpp's definition in a faster loop order), O rounded to
// the dtype and L to fp32, as a forward kernel leaves them: the backward sees what a
// training step hands it. (attention_fwd's large rows, a query row scaled by 256 to test
// the forward's running max, are left out: the backward reads L and has no max to forget;
// its tolerance below is derived for these inputs.)
//
// Tolerances: attention_bwd_tolerance below, derived there.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
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

enum Tensor { kQ, kK, kV, kO, kdO, kL };   // the inputs, in order

RefShape ref_shape(const Problem& p) {
  const Shape s = shape_of(p);
  return {s.B, s.Hq, s.Hkv, s.Sq, s.Sk, s.d};
}

// A tensor's elements as fp32 (exact: bf16 and f16 are subsets of fp32), for references that
// read every element Sk or Sq times: an array read is several times faster than get()'s
// conversion. Only below 2^28 elements; past it the references read get() (sampled there).
std::vector<float> as_floats(const klab::HostTensor& t) {
  std::vector<float> f(static_cast<std::size_t>(t.numel()));
  klab::parallel_for(t.numel(), [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; ++i) f[static_cast<std::size_t>(i)] = static_cast<float>(t.get(i));
  });
  return f;
}

struct FloatGet {
  const float* p;
  double operator()(i64 i) const { return p[i]; }
};

bool fits_floats(const Problem& p) {
  const Shape s = shape_of(p);
  return std::max(s.B * s.Hq * s.Sq * s.d, s.B * s.Hkv * s.Sk * s.d) <= (i64{1} << 28);
}

// The fp64 forward of every query row, for the generator where the tensors fit as fp32
// arrays: the definition of attention_fwd_row, in the loop order that makes it fast enough
// for the bench shapes (2^40 multiply-adds at 16384 keys). K of each K/V head is transposed
// to (d, Sk) once, so that a row's scores are passes of multiply-adds over contiguous keys
// (independent sums the compiler vectorizes; the dot product's one running sum would stall on
// its own latency), four head dims a pass (a score is loaded and stored once per four
// products, not per product). Eight query rows of a head go together: a chunk of 512 keys
// of the transpose is read once for the eight and stays in cache, and each row of V feeds
// the eight rows of O. Only the visible keys, a prefix (attention.cuh), are computed.
// Against one row at a time and one head dim a pass: 1.6x (plain) and 1.5x (causal) on two
// cores of a development machine at 1x2x2x4096x4096x128. tests/test_attention_bwd.cpp checks
// it against attention_fwd_row.
void forward_fast(const RefShape& s, bool causal, const std::vector<float>& q, const std::vector<float>& k,
                  const std::vector<float>& v, klab::HostTensor& O, klab::HostTensor& L) {
  constexpr i64 kRows = 8, kKeys = 512;   // query rows a block (V read once for 8); keys a chunk of the scores
  const i64 kv_heads = s.B * s.Hkv, heads = s.B * s.Hq, blocks_per_head = (s.Sq + kRows - 1) / kRows;
  std::vector<float> kt(k.size());
  klab::parallel_for(kv_heads * s.d, [&](i64 x0, i64 x1) {   // (head, e) rows of the transpose
    for (i64 x = x0; x < x1; ++x) {
      const i64 hk = x / s.d, e = x % s.d;
      for (i64 j = 0; j < s.Sk; ++j)
        kt[static_cast<std::size_t>((hk * s.d + e) * s.Sk + j)] = k[static_cast<std::size_t>((hk * s.Sk + j) * s.d + e)];
    }
  }, s.Sk);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  klab::parallel_for(heads * blocks_per_head, [&](i64 x0, i64 x1) {
    std::vector<double> sc(static_cast<std::size_t>(kRows * s.Sk)), o(static_cast<std::size_t>(kRows * s.d));
    for (i64 x = x0; x < x1; ++x) {
      const i64 bh = x / blocks_per_head, i0 = (x % blocks_per_head) * kRows, rows = std::min(kRows, s.Sq - i0);
      const i64 b = bh / s.Hq, h = bh % s.Hq, hk = b * s.Hkv + h / (s.Hq / s.Hkv), r0 = bh * s.Sq + i0;
      i64 n[kRows] = {};   // keys row a sees; the last row sees the most (a prefix that grows with i)
      for (i64 a = 0; a < rows; ++a) n[a] = visible_keys(i0 + a, s.Sq, s.Sk, causal);
      const i64 n_max = n[rows - 1];
      // Scores of each row, a chunk of keys at a time (the chunk of K's transpose stays in
      // cache for all the block's rows): four head dims a pass, then the remaining ones.
      for (i64 a = 0; a < rows; ++a) std::fill(sc.data() + a * s.Sk, sc.data() + a * s.Sk + n[a], 0.0);
      for (i64 j0 = 0; j0 < n_max; j0 += kKeys) {
        i64 e = 0;
        for (; e + 4 <= s.d; e += 4) {
          const float* k0 = kt.data() + (hk * s.d + e) * s.Sk;
          const float *k1 = k0 + s.Sk, *k2 = k1 + s.Sk, *k3 = k2 + s.Sk;
          for (i64 a = 0; a < rows; ++a) {
            double* row = sc.data() + a * s.Sk;
            const float* qa = q.data() + (r0 + a) * s.d + e;
            const double q0 = qa[0], q1 = qa[1], q2 = qa[2], q3 = qa[3];
            for (i64 j = j0, j1 = std::min(j0 + kKeys, n[a]); j < j1; ++j)
              row[j] += (q0 * k0[j] + q1 * k1[j]) + (q2 * k2[j] + q3 * k3[j]);
          }
        }
        for (; e < s.d; ++e) {
          const float* ke = kt.data() + (hk * s.d + e) * s.Sk;
          for (i64 a = 0; a < rows; ++a) {
            double* row = sc.data() + a * s.Sk;
            const double qe = q[static_cast<std::size_t>((r0 + a) * s.d + e)];
            for (i64 j = j0, j1 = std::min(j0 + kKeys, n[a]); j < j1; ++j) row[j] += qe * ke[j];
          }
        }
      }
      // The softmax of each row: probabilities in place of its scores, 0 past its visible keys.
      double l[kRows] = {}, m[kRows];
      for (i64 a = 0; a < rows; ++a) {
        double* row = sc.data() + a * s.Sk;
        m[a] = -std::numeric_limits<double>::infinity();
        for (i64 j = 0; j < n[a]; ++j) m[a] = std::max(m[a], row[j] *= scale);
        for (i64 j = 0; j < n[a]; ++j) l[a] += (row[j] = std::exp(row[j] - m[a]));
        std::fill(row + n[a], row + n_max, 0.0);
      }
      // O = P·V for the block's rows together.
      std::fill(o.begin(), o.end(), 0.0);
      for (i64 j = 0; j < n_max; ++j) {
        const float* vj = v.data() + (hk * s.Sk + j) * s.d;
        for (i64 a = 0; a < rows; ++a) {
          const double pa = sc[static_cast<std::size_t>(a * s.Sk + j)];
          double* oa = o.data() + a * s.d;
          for (i64 e = 0; e < s.d; ++e) oa[e] += pa * vj[e];
        }
      }
      for (i64 a = 0; a < rows; ++a) {
        const i64 r = r0 + a;
        if (n[a] == 0) {   // no key seen: O = 0, L = -inf
          for (i64 e = 0; e < s.d; ++e) O.set(r * s.d + e, 0.0);
          L.set(r, -std::numeric_limits<double>::infinity());
          continue;
        }
        for (i64 e = 0; e < s.d; ++e) O.set(r * s.d + e, o[static_cast<std::size_t>(a * s.d + e)] / l[a]);
        L.set(r, m[a] + std::log(l[a]));
      }
    }
  }, kRows * s.Sk * s.d);
}

void generate(const Problem& p, std::uint64_t seed, klab::Inputs& in) {
  for (int k : {kQ, kK, kV, kdO}) klab::fill_uniform(in.tensors[k], klab::derive_seed(seed, k), -1.0, 1.0);
  const RefShape s = ref_shape(p);
  const bool causal = is_causal(p);
  klab::HostTensor &O = in.tensors[kO], &L = in.tensors[kL];
  if (fits_floats(p)) {
    forward_fast(s, causal, as_floats(in.tensors[kQ]), as_floats(in.tensors[kK]), as_floats(in.tensors[kV]), O, L);
    return;
  }
  // The shape past 2^31 elements: few rows, each split over the cores; O rounded by set().
  std::vector<double> o(static_cast<std::size_t>(s.d));
  for (i64 r = 0; r < s.B * s.Hq * s.Sq; ++r) {
    double l = 0;
    attention_fwd_row(s, causal, HostGet{&in.tensors[kQ]}, HostGet{&in.tensors[kK]}, HostGet{&in.tensors[kV]}, r,
                      o.data(), l, true);
    for (i64 e = 0; e < s.d; ++e) O.set(r * s.d + e, o[e]);
    L.set(r, l);
  }
}

// ---- the fp64 reference ---------------------------------------------------------------------
//
// The row functions of attention_ref.hpp: dQ by query row, dK and dV by key row, over the host's
// cores. The full reference for the test shapes, a sample of rows for the bench shapes.
template <class Get>
void bwd_rows(const Problem& p, const Get& Q, const Get& K, const Get& V, const Get& O, const Get& dO, const Get& L,
              const std::vector<i64>& q_rows, const std::vector<i64>& kv_rows, double* dq, double* dk, double* dv) {
  const RefShape s = ref_shape(p);
  const bool causal = is_causal(p);
  const i64 group = s.Hq / s.Hkv;
  // Fewer rows than chunks of attention_ref.hpp's split (a decoding shape's few queries, each
  // millions of keys long): each row over the cores in turn; else the rows over the cores.
  if (q_rows.size() < 64) {
    for (std::size_t x = 0; x < q_rows.size(); ++x)
      attention_bwd_dq_row(s, causal, Q, K, V, O, dO, L, q_rows[x], dq + x * s.d, true);
  } else {
    klab::parallel_for(static_cast<i64>(q_rows.size()), [&](i64 a, i64 b) {
      for (i64 x = a; x < b; ++x) attention_bwd_dq_row(s, causal, Q, K, V, O, dO, L, q_rows[x], dq + x * s.d);
    }, s.Sk * s.d);
  }
  klab::parallel_for(static_cast<i64>(kv_rows.size()), [&](i64 a, i64 b) {
    for (i64 x = a; x < b; ++x)
      attention_bwd_dkv_row(s, causal, Q, K, V, O, dO, L, kv_rows[x], dk + x * s.d, dv + x * s.d);
  }, group * s.Sq * s.d);
}

// Calls go(Q, K, V, O, dO, L), six accessors of one type: fp32 copies of the inputs where they
// fit, else get().
template <class F>
void with_accessors(const Problem& p, const klab::Inputs& in, F&& go) {
  const auto& t = in.tensors;
  if (fits_floats(p)) {
    std::vector<float> f[6];
    for (int k = 0; k < 6; ++k) f[k] = as_floats(t[k]);
    go(FloatGet{f[kQ].data()}, FloatGet{f[kK].data()}, FloatGet{f[kV].data()}, FloatGet{f[kO].data()},
       FloatGet{f[kdO].data()}, FloatGet{f[kL].data()});
  } else {
    go(HostGet{&t[kQ]}, HostGet{&t[kK]}, HostGet{&t[kV]}, HostGet{&t[kO]}, HostGet{&t[kdO]}, HostGet{&t[kL]});
  }
}

std::vector<i64> iota(i64 n) {
  std::vector<i64> v(static_cast<std::size_t>(n));
  for (i64 k = 0; k < n; ++k) v[static_cast<std::size_t>(k)] = k;
  return v;
}

klab::Reference reference(const Problem& p, const klab::Inputs& in) {
  const Shape s = shape_of(p);
  const i64 q_rows = s.B * s.Hq * s.Sq, kv_rows = s.B * s.Hkv * s.Sk;
  klab::Reference ref(3);
  ref[0] = klab::RefArray(static_cast<std::size_t>(q_rows * s.d));
  ref[1] = klab::RefArray(static_cast<std::size_t>(kv_rows * s.d));
  ref[2] = klab::RefArray(static_cast<std::size_t>(kv_rows * s.d));
  with_accessors(p, in, [&](const auto& Q, const auto& K, const auto& V, const auto& O, const auto& dO, const auto& L) {
    bwd_rows(p, Q, K, V, O, dO, L, iota(q_rows), iota(kv_rows), ref[0].data(), ref[1].data(), ref[2].data());
  });
  return ref;
}

// The bench shapes: whole rows, chosen where bugs live: the first and last row of the
// problem, of the first and of the last head (a causal mask's corners, a ragged last tile),
// rows 63 and 64 (a tile's edge), and 48 random rows; dQ's query rows and dK's and dV's key
// rows (the same for both), at all d columns. The harness checks every other element for
// NaN, Inf or the poison.
std::vector<i64> pick_rows(i64 rows, i64 per_head, std::uint64_t seed) {
  std::vector<i64> pick;
  if (rows == 0) return pick;
  pick = {0, per_head - 1, rows - per_head, rows - 1, std::min<i64>(63, rows - 1), std::min<i64>(64, rows - 1)};
  for (int k = 0; k < 48; ++k)
    pick.push_back(static_cast<i64>(klab::uniform01(seed, static_cast<std::uint64_t>(k)) * static_cast<double>(rows)) %
                   rows);
  std::sort(pick.begin(), pick.end());
  pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
  return pick;
}

std::vector<klab::SampledReference> sample(const Problem& p, const klab::Inputs& in, std::uint64_t seed) {
  const Shape s = shape_of(p);
  const std::vector<i64> q_rows = pick_rows(s.B * s.Hq * s.Sq, s.Sq, klab::derive_seed(seed, 7001));
  const std::vector<i64> kv_rows = pick_rows(s.B * s.Hkv * s.Sk, s.Sk, klab::derive_seed(seed, 7002));
  std::vector<double> dq(q_rows.size() * static_cast<std::size_t>(s.d));
  std::vector<double> dk(kv_rows.size() * static_cast<std::size_t>(s.d)), dv(dk.size());
  const auto& t = in.tensors;
  // get() throughout: converting whole bench tensors would cost more than the sample.
  bwd_rows(p, HostGet{&t[kQ]}, HostGet{&t[kK]}, HostGet{&t[kV]}, HostGet{&t[kO]}, HostGet{&t[kdO]}, HostGet{&t[kL]},
           q_rows, kv_rows, dq.data(), dk.data(), dv.data());
  std::vector<klab::SampledReference> out(3);
  auto put = [&](klab::SampledReference& o, const std::vector<i64>& rows, const std::vector<double>& v) {
    for (std::size_t x = 0; x < rows.size(); ++x)
      for (i64 e = 0; e < s.d; ++e) {
        o.index.push_back(rows[x] * s.d + e);
        o.value.push_back(v[x * static_cast<std::size_t>(s.d) + static_cast<std::size_t>(e)]);
      }
  };
  put(out[0], q_rows, dq);
  put(out[1], kv_rows, dk);
  put(out[2], kv_rows, dv);
  return out;
}

bool sample_only(const Problem& p) {
  const Shape s = shape_of(p);
  const double work = static_cast<double>(s.B * s.Hq) * static_cast<double>(s.Sq) * static_cast<double>(s.Sk) *
                      static_cast<double>(s.d);
  return work > 4294967296.0 || !fits_floats(p);
}

}  // namespace

// ---- the tolerance ---------------------------------------------------------------------------
//
// u = 2^-24 (fp32), u_p = the unit roundoff of the dtype (bf16 2^-8, f16 2^-11). A
// tensor-core backward computes S = Q·Kᵀ and dP = dO·Vᵀ in fp32 from 16-bit operands,
// P = exp(S/sqrt(d) - L) and dS = P (dP - D) in fp32, then rounds P (for dV = Pᵀ·dO) and dS
// (for dQ = dS·K and dK = dSᵀ·Q) to the dtype, the operands of the next products, and each
// gradient to the dtype once at the end. So every term t of the sum that makes an element
// (P_ij dO_i for dV; dS_ij k_j / sqrt(d) for dQ, dS_ij q_i / sqrt(d) for dK) carries a
// relative error of at most u_p (its 16-bit operand) plus e_s = d u in P (the fp32 score, a
// dot product of d exact products of size <= 1, as in attention_fwd's tolerance); D, dP - D
// and the fp32 sums add errors below u of their own sizes. Those relative errors are
// independent from term to term, so an element's error is a random walk: of size
// (u_p + e_s) ||t||_2 / sqrt(3), with ||t||_2 the root of the sum of its terms' squares.
//
// ||t||_2 from the inputs' statistics (uniform in [-1, 1): E[x^2] = 1/3). The scores have
// variance d (1/9) / d = 1/9, so P_ij ~ e^s / (n e^(1/18)) over the n keys query i sees and
// E[P^2] = e^(1/9) / n^2 = 1.12 / n^2; dP has variance d / 9, and dP - D, less its weighted
// mean, about (d / 9)(1 - 1/n): f(n) = max(2^-8, 1 - 1/n) below. A query that sees one key
// has dS = 0 exactly; the floor keeps a bound for the fp32 rounding of its dP - D, some
// sqrt(d) u |dP| ~ 1e-5, where 2^-8 makes the bound on dQ 4e-4 (bf16) and 5e-5 (f16).
// Per element:
//   dQ_i:  ||t||^2 = (1/d) sum_j dS_ij^2 k^2  ~  (1.12 / 27) f(n_i) / n_i
//   dK_j:  ||t||^2 = (1/d) sum_i dS_ij^2 q^2  ~  (1.12 / 27) sum_i f(n_i) / n_i^2
//   dV_j:  ||t||^2 = sum_i P_ij^2 dO^2        ~  (1.12 / 3)  sum_i 1 / n_i^2
// the sums over the query rows, of every head of the group, that see key j. Each element is
// itself such a sum of terms of random sign, so ||t||_2 is also the typical size of the
// gradient's elements (tests/test_attention_bwd.cpp checks the model against the fp64
// reference at test shapes: the rms of every row of 32 terms or more within a factor of 2
// of it; rows of fewer terms scatter more, their few terms' own spread). Rows with no term at
// all (a query that sees no key, a key no query sees) get atol 0: the kernel must write an
// exact 0 there.
//
// The bound: atol = 8 (u_p + e_s + c) rms_model, rtol = 1.5 u_p (the output's rounding):
// 8 / sqrt(3) = 4.6 times the random walk's size, and a factor of 2 for the model. c is the
// tensor cores' truncated accumulation (attention_fwd's tolerance: up to 2^-23 of the running
// sum a k16 step), ceil(n / 16) 2^-23 over the n terms of the longest sum. The relative L2
// error: 2 (u_p + e_s) + c, as the forward's. What it rejects (tests/test_attention_bwd.cpp
// checks each at a test shape): a row of another query or key (off by a row: the difference
// is the size of the row itself, rms_model, 8 (u_p + e_s) = 1/30 of it for bf16), a
// transposed tile, dS without D (dP alone: at 5 keys D is a third of dP's size), a missing
// 1/sqrt(d), one head's dK or dV instead of the group's sum, and an unwritten row.
double dp_spread(double n) { return std::max(std::ldexp(1.0, -8), 1.0 - 1.0 / n); }   // f(n) above

klab::Tolerance attention_bwd_tolerance(const Problem& p, int output) {
  const Shape s = shape_of(p);
  const bool causal = is_causal(p);
  const double u = std::ldexp(1.0, -24);
  const double up = p.dtype == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double e_s = static_cast<double>(s.d) * u;
  const double group = static_cast<double>(s.Hq / std::max<i64>(1, s.Hkv));
  const i64 terms = output == 0 ? s.Sk : static_cast<i64>(group) * s.Sq;
  const double c = std::ceil(static_cast<double>(terms) / 16.0) * std::ldexp(1.0, -23);
  const double rel = up + e_s + c;
  klab::Tolerance t;
  t.rtol = 1.5 * up;
  t.max_rel_l2 = 2.0 * (up + e_s) + c;
  if (output == 0) {
    const auto bound = [=](i64 idx) {
      const i64 i = (idx / std::max<i64>(1, s.d)) % std::max<i64>(1, s.Sq);
      const double n = static_cast<double>(visible_keys(i, s.Sq, s.Sk, causal));
      return n == 0 ? 0.0 : 8.0 * rel * std::sqrt(1.12 / 27.0 * dp_spread(n) / n);
    };
    t.atol_at = bound;
    t.atol = 8.0 * rel * std::sqrt(1.12 / 27.0 * 0.25);   // the largest bound (n = 2)
    return t;
  }
  // sum_{i sees j} f(n_i) / n_i^2 (dK; dV without f) for key j: the queries that see key j are
  // a suffix i >= first(j) of the rows (all of them without the mask), so a suffix sum over the
  // rows answers it.
  auto suffix = std::make_shared<std::vector<double>>(static_cast<std::size_t>(s.Sq + 1), 0.0);
  for (i64 i = s.Sq - 1; i >= 0; --i) {
    const double n = static_cast<double>(visible_keys(i, s.Sq, s.Sk, causal));
    const double term = n > 0 ? (output == 1 ? dp_spread(n) : 1.0) / (n * n) : 0.0;
    (*suffix)[static_cast<std::size_t>(i)] = (*suffix)[static_cast<std::size_t>(i + 1)] + term;
  }
  const double per = output == 1 ? 1.12 / 27.0 : 1.12 / 3.0;
  const auto bound = [=](i64 idx) {
    const i64 j = (idx / std::max<i64>(1, s.d)) % std::max<i64>(1, s.Sk);
    // Query i sees key j iff i >= j - (Sk - Sq) (without the mask: every i).
    const i64 first = causal ? std::clamp<i64>(j - (s.Sk - s.Sq), 0, s.Sq) : 0;
    return 8.0 * rel * std::sqrt(per * group * (*suffix)[static_cast<std::size_t>(first)]);
  };
  t.atol_at = bound;
  t.atol = 8.0 * rel * std::sqrt(per * group * (*suffix)[0]);   // the largest bound (key 0)
  return t;
}

namespace {

std::vector<klab::TensorSpec> inputs(const Problem& p) {
  const Shape s = shape_of(p);
  return {{"Q", p.dtype, {s.B, s.Hq, s.Sq, s.d}},   {"K", p.dtype, {s.B, s.Hkv, s.Sk, s.d}},
          {"V", p.dtype, {s.B, s.Hkv, s.Sk, s.d}},  {"O", p.dtype, {s.B, s.Hq, s.Sq, s.d}},
          {"dO", p.dtype, {s.B, s.Hq, s.Sq, s.d}},  {"L", DType::f32, {s.B, s.Hq, s.Sq}}};
}

std::vector<klab::TensorSpec> outputs(const Problem& p) {
  const Shape s = shape_of(p);
  return {{"dQ", p.dtype, {s.B, s.Hq, s.Sq, s.d}},
          {"dK", p.dtype, {s.B, s.Hkv, s.Sk, s.d}},
          {"dV", p.dtype, {s.B, s.Hkv, s.Sk, s.d}}};
}

klab::Op make_attention_bwd_op() {
  klab::Op op;
  op.lesson = "09";
  op.name = "attention_bwd";
  op.summary = "dQ, dK, dV of attention from Q, K, V, O, dO and L (recomputing P); GQA; variant causal";
  op.dims = {"B", "Hq", "Hkv", "Sq", "Sk", "d"};
  op.dtypes = {DType::bf16, DType::f16};
  op.variants = {"", "causal"};
  op.test_shapes = {
      {0, 2, 2, 5, 5, 64},            // empty batch
      {1, 1, 1, 1, 1, 1},             // one element (d = 1: the reference only; the kernels say why)
      {1, 1, 1, 1, 1, 64},            // S = 1: dS = 0, dQ = dK = 0 exactly, dV = dO
      {1, 2, 2, 1, 1, 128},
      {1, 1, 1, 5, 5, 64},            // five keys: D a third of dP's size
      {2, 3, 1, 1, 4099, 128},        // decoding: one query, 4099 keys (prime), 3 query heads a K/V head
      {1, 4, 2, 127, 127, 64},        // primes: no tile of 16, 32 or 64 divides them
      {1, 2, 2, 65, 200, 128},        // a query tile and one row; three key tiles and a ragged one
      {2, 2, 2, 256, 256, 64},        // whole tiles only
      {1, 2, 2, 1009, 1009, 128},     // Sq = Sk, prime: the causal triangle crosses tiles off their corners
      {1, 8, 2, 67, 1009, 64},        // Sq < Sk, 4 query heads a K/V head
      {1, 2, 2, 1009, 67, 128},       // Sq > Sk: causal rows 0..941 see no key (no gradient)
      {259, 259, 7, 3, 5, 64},        // B * Hq = 67081 > 65535 (a grid's y and z limit), tiny S
      {1, 131, 131, 5, 7, 64},        // many K/V heads
      {1, 1, 1, 7, 9, 129},           // an odd head dim past 128: reference only, unsupported
      {1, 1, 1, 1, 16777259, 128},    // K, V, dK and dV have 2,147,489,152 elements: flat index past 2^31
  };
  // attention_fwd's problems (attention.cuh), after one whose inputs the host makes in seconds:
  // the tour (`klab run 09`) and `klab check 09b` time the first bench shape, and the
  // generator's fp64 forward (O and L) of the others is 2^37 to 2^39 multiply-adds, 8 to 32
  // times this one's, made twice a case (the timed inputs and the fresh ones of the re-check).
  op.bench_shapes = bench_problems();
  op.bench_shapes.insert(op.bench_shapes.begin(), {2, 16, 16, 2048, 2048, 128});
  op.seeds = 2;
  op.baseline = "cudnn";   // cuDNN's SDPA backward (attention_cudnn.cu)
  op.tour = {"v1_mma_atomic_dq", "cudnn"};
  op.bound = klab::Bound::compute;
  op.inputs = inputs;
  op.outputs = outputs;
  op.generate = generate;
  op.reference = reference;
  op.sample_only = sample_only;
  op.reference_sample = sample;
  op.tolerance = attention_bwd_tolerance;
  // Five products over the visible (query, key) pairs (S and dP recomputed, dV, dQ, dK),
  // 2 flops a multiply-add: 10 B Hq d pairs, 2.5 times the forward's count (the convention
  // of FlashAttention's papers and of cuDNN's figures; the recomputation of S is counted).
  op.flops = [](const Problem& p) {
    const Shape s = shape_of(p);
    return 10.0 * static_cast<double>(s.B * s.Hq) * static_cast<double>(s.d) * visible_pairs(p);
  };
  op.validate = validate_attention;
  return op;
}

}  // namespace

KLAB_REGISTER(klab::register_op(make_attention_bwd_op()));

}  // namespace lesson09
