// CPU tests of lesson 09's attention_fwd (attention_ops.cu): its tolerance passes what a
// correct tensor-core kernel computes and fails what a wrong one does.
//
// The correct kernel is simulated as v2_mma_sync computes: fp32 scores, K/V in tiles of 64
// keys, the online softmax in base 2 (running max, correction, rescaled accumulator), P
// rounded to the input dtype before P·V (the mma takes 16-bit operands), fp32 accumulation,
// O = acc / l rounded once, L = (m + log2 l) ln 2. v1_simt_online's fp32 P passes too. Each
// mistake below must fail the op's judge at every test problem where it changes something:
// a row of O shifted by one, K read transposed, the K/V heads swapped, the 1/sqrt(d) scale
// missing, the causal mask one key short or one too long, the GQA group mapped by h % Hkv
// instead of h / (Hq / Hkv), L off by 1e-3, a row left unwritten (the poison, NaN).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "klab/compare.hpp"
#include "klab/dtype.hpp"
#include "klab/harness.hpp"
#include "klab/op.hpp"
#include "klab/rng.hpp"
#include "klab/tensor.hpp"

using namespace klab;

namespace {

using i64 = std::int64_t;

struct Mistake {
  bool fp32_p = false;          // v1: P never rounded (not a mistake)
  bool row_shift = false;       // O row r written with row r - 1's values
  bool k_transposed = false;    // K of a head read as (d, Sk)
  bool heads_swapped = false;   // K/V head hk + 1 read for head hk
  bool no_scale = false;        // scores not divided by sqrt(d)
  int causal_shift = 0;         // the causal mask one key short (-1) or one too long (+1)
  bool gqa_mod = false;         // query head h reads K/V head h % Hkv
  double lse_offset = 0;        // L off by a constant
  bool unwritten_row = false;   // one row of O and L left holding the poison (NaN)
};

struct Dims6 {
  i64 B, Hq, Hkv, Sq, Sk, d;
};

Dims6 dims_of(const Problem& p) { return {p.shape[0], p.shape[1], p.shape[2], p.shape[3], p.shape[4], p.shape[5]}; }

// O and L as the kernel (with the mistake) writes them.
std::vector<HostTensor> simulate(const Problem& p, const Inputs& in, const Mistake& mk) {
  const Dims6 s = dims_of(p);
  const bool causal = p.variant == "causal";
  HostTensor O(p.dtype, {s.B, s.Hq, s.Sq, s.d}), L(DType::f32, {s.B, s.Hq, s.Sq});
  const HostTensor &Q = in.tensors[0], &K = in.tensors[1], &V = in.tensors[2];
  const float scale_log2 =
      static_cast<float>(1.4426950408889634 / (mk.no_scale ? 1.0 : std::sqrt(static_cast<double>(s.d))));
  const i64 rows = s.B * s.Hq * s.Sq;
  parallel_for(rows, [&](i64 r0, i64 r1) {
    std::vector<float> q(static_cast<std::size_t>(s.d)), acc(static_cast<std::size_t>(s.d)), sc(64);
    for (i64 r = r0; r < r1; ++r) {
      const i64 i = r % s.Sq, bh = r / s.Sq, b = bh / s.Hq, h = bh % s.Hq;
      i64 hk = mk.gqa_mod ? h % s.Hkv : h / (s.Hq / s.Hkv);
      if (mk.heads_swapped) hk = (hk + 1) % s.Hkv;
      const i64 kv = (b * s.Hkv + hk) * s.Sk * s.d;
      const i64 n = causal ? std::clamp<i64>(i + s.Sk - s.Sq + 1 + mk.causal_shift, 0, s.Sk) : s.Sk;
      for (i64 e = 0; e < s.d; ++e) q[e] = static_cast<float>(Q.get(r * s.d + e));
      std::fill(acc.begin(), acc.end(), 0.f);
      float m = -INFINITY, l = 0.f;
      for (i64 j0 = 0; j0 < n; j0 += 64) {
        const i64 j1 = std::min<i64>(n, j0 + 64);
        float mx = -INFINITY;
        for (i64 j = j0; j < j1; ++j) {
          float dot = 0.f;
          for (i64 e = 0; e < s.d; ++e)
            dot += q[e] * static_cast<float>(K.get(kv + (mk.k_transposed ? e * s.Sk + j : j * s.d + e)));
          sc[j - j0] = dot * scale_log2;
          mx = std::max(mx, sc[j - j0]);
        }
        const float m_new = std::max(m, mx);
        const float corr = std::exp2(m - m_new);   // 0 on the first tile
        l *= corr;
        for (float& a : acc) a *= corr;
        for (i64 j = j0; j < j1; ++j) {
          const float pj = std::exp2(sc[j - j0] - m_new);
          l += pj;
          const float pr = mk.fp32_p ? pj : static_cast<float>(round_to(p.dtype, pj));
          for (i64 e = 0; e < s.d; ++e) acc[e] += pr * static_cast<float>(V.get(kv + j * s.d + e));
        }
        m = m_new;
      }
      for (i64 e = 0; e < s.d; ++e) O.set(r * s.d + e, l > 0.f ? acc[e] / l : 0.0);
      L.set(r, l > 0.f ? (m + std::log2(l)) * 0.69314718f + mk.lse_offset : -INFINITY);
    }
  }, s.Sk * s.d);
  if (mk.row_shift)
    for (i64 r = rows - 1; r >= 1; --r)
      for (i64 e = 0; e < s.d; ++e) O.set(r * s.d + e, O.get((r - 1) * s.d + e));
  if (mk.unwritten_row && rows > 0) {
    const i64 r = rows / 2;
    for (i64 e = 0; e < s.d; ++e) O.set(r * s.d + e, std::numeric_limits<double>::quiet_NaN());
    L.set(r, std::numeric_limits<double>::quiet_NaN());
  }
  std::vector<HostTensor> out;
  out.push_back(std::move(O));
  out.push_back(std::move(L));
  return out;
}

// Problems of every kind the op has: GQA, primes, Sq < Sk and Sq > Sk (causal), decoding,
// several tiles, both head dims.
std::vector<Problem> problems(const std::string& variant) {
  std::vector<Problem> ps;
  for (DType t : {DType::bf16, DType::f16})
    for (const Dims& d : std::vector<Dims>{{1, 4, 2, 127, 127, 64},
                                           {1, 2, 1, 67, 300, 128},
                                           {1, 2, 2, 150, 67, 64},
                                           {2, 3, 1, 1, 1000, 128},
                                           {1, 2, 2, 260, 260, 128}})
      ps.push_back({d, t, variant});
  return ps;
}

bool passes(const Op& op, const Problem& p, const Inputs& in, const Reference& ref, const std::vector<HostTensor>& out,
            std::string* why = nullptr) {
  VerifyRecord rec;
  judge(op, p, in, ref, out, rec);
  if (why) *why = rec.message;
  return rec.status == Status::pass;
}

const Op* attention_op() { return registry().find_op("attention_fwd"); }

}  // namespace

TEST(AttentionTolerance, TensorCoreAndFp32KernelsPass) {
  const Op* op = attention_op();
  if (!op) GTEST_SKIP() << "lesson 09 is not in this build";
  for (const std::string variant : {"", "causal"})
    for (const Problem& p : problems(variant))
      for (std::uint64_t seed : {1, 2}) {
        const Inputs in = make_inputs(*op, p, seed);
        const Reference ref = op->reference(p, in);
        std::string why;
        EXPECT_TRUE(passes(*op, p, in, ref, simulate(p, in, {}), &why)) << p.label() << " seed " << seed << ": " << why;
        EXPECT_TRUE(passes(*op, p, in, ref, simulate(p, in, {.fp32_p = true}), &why))
            << p.label() << " seed " << seed << " (fp32 P): " << why;
      }
}

TEST(AttentionTolerance, EachMistakeFails) {
  const Op* op = attention_op();
  if (!op) GTEST_SKIP() << "lesson 09 is not in this build";
  struct Case {
    std::string name;
    Mistake mk;
    bool causal_only = false, needs_two_kv_heads = false, needs_groups = false;
  };
  const std::vector<Case> cases = {
      {"row shifted", {.row_shift = true}},
      {"K transposed", {.k_transposed = true}},
      {"K/V heads swapped", {.heads_swapped = true}, false, true},
      {"scale missing", {.no_scale = true}},
      {"causal mask one key short", {.causal_shift = -1}, true},
      {"causal mask one key too many", {.causal_shift = 1}, true},
      {"GQA head h % Hkv", {.gqa_mod = true}, false, true, true},
      {"L off by 1e-3", {.lse_offset = 1e-3}},
      {"a row unwritten", {.unwritten_row = true}},
  };
  int checked = 0;
  for (const std::string variant : {"", "causal"})
    for (const Problem& p : problems(variant)) {
      const Dims6 s = dims_of(p);
      const Inputs in = make_inputs(*op, p, 1);
      const Reference ref = op->reference(p, in);
      const std::vector<HostTensor> right = simulate(p, in, {});
      for (const Case& c : cases) {
        if (c.causal_only && variant != "causal") continue;
        if (c.needs_two_kv_heads && s.Hkv < 2) continue;
        if (c.needs_groups && s.Hq == s.Hkv) continue;
        const std::vector<HostTensor> out = simulate(p, in, c.mk);
        // A mistake that changes nothing here (a mask one key too long for a query that
        // already sees every key) leaves no trace to catch.
        if (std::equal(out.begin(), out.end(), right.begin(), [](const HostTensor& x, const HostTensor& y) {
              return std::memcmp(x.data(), y.data(), x.bytes()) == 0;
            }))
          continue;
        EXPECT_FALSE(passes(*op, p, in, ref, out)) << p.label() << ": the tolerance accepts " << c.name;
        ++checked;
      }
    }
  EXPECT_GT(checked, 60);
}

// Cases worked out by hand. Q = 0: every score is 0, so the softmax is uniform over the keys
// a query sees: O is the mean of their V rows and L = ln n. Causal with Sq = 3 > Sk = 2:
// query 0 sees no key (O = 0, L = -inf), query 1 sees key 0, query 2 both.
TEST(AttentionReference, UniformScoresAndTheDiagonal) {
  const Op* op = attention_op();
  if (!op) GTEST_SKIP() << "lesson 09 is not in this build";
  const Problem p{{1, 1, 1, 3, 2, 2}, DType::bf16, "causal"};
  Inputs in;
  for (const auto& spec : op->inputs(p)) in.tensors.emplace_back(spec.dtype, spec.shape);
  // Q = 0; V rows (1, 2) and (3, -4).
  for (i64 x = 0; x < 6; ++x) in.tensors[0].set(x, 0.0);
  for (i64 x = 0; x < 4; ++x) in.tensors[1].set(x, 0.25 * static_cast<double>(x));
  const double v[4] = {1, 2, 3, -4};
  for (i64 x = 0; x < 4; ++x) in.tensors[2].set(x, v[x]);
  const Reference ref = op->reference(p, in);
  ASSERT_EQ(ref.size(), 2u);
  EXPECT_EQ(ref[0][0], 0.0);
  EXPECT_EQ(ref[0][1], 0.0);
  EXPECT_EQ(ref[1][0], -std::numeric_limits<double>::infinity());
  EXPECT_DOUBLE_EQ(ref[0][2], 1.0);
  EXPECT_DOUBLE_EQ(ref[0][3], 2.0);
  EXPECT_DOUBLE_EQ(ref[1][1], 0.0);
  EXPECT_DOUBLE_EQ(ref[0][4], 2.0);
  EXPECT_DOUBLE_EQ(ref[0][5], -1.0);
  EXPECT_DOUBLE_EQ(ref[1][2], std::log(2.0));
  // Without the mask every query sees both keys.
  const Reference plain = op->reference({p.shape, p.dtype, ""}, in);
  EXPECT_DOUBLE_EQ(plain[0][0], 2.0);
  EXPECT_DOUBLE_EQ(plain[1][0], std::log(2.0));
}

// The FLOP count is 4 B Hq d times the visible (query, key) pairs, in closed form: checked
// against a loop over the rows, for Sq < Sk, Sq = Sk, Sq > Sk and the empty cases.
TEST(AttentionOp, FlopsCountTheVisiblePairs) {
  const Op* op = attention_op();
  if (!op) GTEST_SKIP() << "lesson 09 is not in this build";
  for (const std::string variant : {"", "causal"})
    for (i64 Sq : {0, 1, 2, 7, 64, 100})
      for (i64 Sk : {0, 1, 3, 64, 100, 257}) {
        const Problem p{{2, 3, 1, Sq, Sk, 8}, DType::bf16, variant};
        double pairs = 0;
        for (i64 i = 0; i < Sq; ++i)
          pairs += static_cast<double>(variant == "causal" ? std::clamp<i64>(i + Sk - Sq + 1, 0, Sk) : Sk);
        EXPECT_DOUBLE_EQ(op->flops(p), 4.0 * 2 * 3 * 8 * pairs) << p.label();
      }
}

// Every fourth query row is scaled so that an exp without the running max overflows: the
// generator's claim, checked on one problem (some score past ln(FLT_MAX) = 88.7).
TEST(AttentionOp, LargeRowsOverflowAnUnscaledExp) {
  const Op* op = attention_op();
  if (!op) GTEST_SKIP() << "lesson 09 is not in this build";
  const Problem p{{1, 1, 1, 8, 256, 128}, DType::bf16, ""};
  const Inputs in = make_inputs(*op, p, 1);
  double top = 0;
  for (i64 j = 0; j < 256; ++j) {
    double dot = 0;
    for (i64 e = 0; e < 128; ++e) dot += in.tensors[0].get(3 * 128 + e) * in.tensors[1].get(j * 128 + e);
    top = std::max(top, dot / std::sqrt(128.0));
  }
  EXPECT_GT(top, 88.8);
}
