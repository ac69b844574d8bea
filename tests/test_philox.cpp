// CPU tests of klab/device/philox.cuh: the generator against its published known answers,
// and the dropout keep mask's properties that lesson 07 relies on (exact at p = 0 and
// p = 1, keep rate within a binomial bound, neighbouring streams unrelated).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "klab/device/philox.cuh"

using namespace klab;

namespace {

struct Kat {
  std::uint32_t ctr[4], key[2], out[4];
};

// The three Philox4x32-10 known-answer vectors of the generator's reference distribution
// (counter, key, output).
constexpr Kat kKat[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000}, {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

// Tolerance of the statistical checks: 6 standard deviations, a false alarm probability
// under 2e-9 per check (normal approximation; n is large and the checks are few).
constexpr double kSigmas = 6.0;

}  // namespace

TEST(Philox, KnownAnswers) {
  for (const Kat& k : kKat) {
    const Philox4 out = philox4x32_10(Philox4{{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(out.x[w], k.out[w]) << "vector " << (&k - kKat) << " word " << w;
  }
}

// The stream layout of the header comment: element i is word i % 4 of the call for i / 4,
// with the offset in the counter's upper half and the seed as the key.
TEST(Philox, DropoutStreamLayout) {
  const std::uint64_t seed = 0x299f31d0a4093822ull, offset = 0x0370734413198a2eull;
  const Philox4 direct = philox4x32_10(Philox4{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0);
  const Philox4 via = dropout_bits(seed, offset, 0x85a308d3243f6a88ull);
  for (int w = 0; w < 4; ++w) EXPECT_EQ(via.x[w], direct.x[w]);
  EXPECT_EQ(direct.x[2], 0x5001e420u);  // the third known answer again, through the stream
}

TEST(Philox, ThresholdsAreExactAtTheEnds) {
  EXPECT_EQ(dropout_threshold(0.0), 0u);
  EXPECT_EQ(dropout_threshold(1.0), std::uint64_t{1} << 32);
  EXPECT_EQ(dropout_threshold(0.5), std::uint64_t{1} << 31);
  for (std::uint64_t i = 0; i < 100000; ++i) {
    EXPECT_TRUE(dropout_keep(7, 3, i, dropout_threshold(0.0))) << i;
    EXPECT_FALSE(dropout_keep(7, 3, i, dropout_threshold(1.0))) << i;
  }
}

// The number kept of n elements is binomial(n, 1 - p): within kSigmas standard deviations.
TEST(Philox, KeepRateWithinBinomialBound) {
  constexpr std::uint64_t n = 1 << 20;
  for (const double p : {0.1, 0.5, 0.9}) {
    const std::uint64_t t = dropout_threshold(p);
    std::uint64_t kept = 0;
    for (std::uint64_t i = 0; i < n; ++i) kept += dropout_keep(1234, 5, i, t);
    const double mean = n * (1 - p), sd = std::sqrt(n * p * (1 - p));
    EXPECT_LT(std::fabs(kept - mean), kSigmas * sd) << "p = " << p << ": kept " << kept << " of " << n;
  }
}

// Masks of neighbouring offsets (and of neighbouring seeds) at p = 0.5 agree on each element
// with probability 1/2 when unrelated: the count of agreements is binomial(n, 1/2).
TEST(Philox, NeighbouringStreamsAreUnrelated) {
  constexpr std::uint64_t n = 1 << 20;
  const std::uint64_t t = dropout_threshold(0.5);
  std::uint64_t same_offset = 0, same_seed = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const bool a = dropout_keep(99, 41, i, t);
    same_offset += a == dropout_keep(99, 42, i, t);
    same_seed += a == dropout_keep(100, 41, i, t);
  }
  const double mean = n / 2.0, sd = std::sqrt(n / 4.0);
  EXPECT_LT(std::fabs(same_offset - mean), kSigmas * sd) << same_offset;
  EXPECT_LT(std::fabs(same_seed - mean), kSigmas * sd) << same_seed;
}

// A mask that repeated with a short period along i (a counter bug: the quarter index
// dropped or truncated to 32 bits) would be caught: elements 2^34 apart differ as often as
// unrelated ones.
TEST(Philox, FarElementsAreUnrelated) {
  constexpr std::uint64_t n = 1 << 18;
  const std::uint64_t t = dropout_threshold(0.5);
  std::uint64_t same = 0;
  for (std::uint64_t i = 0; i < n; ++i) same += dropout_keep(5, 0, i, t) == dropout_keep(5, 0, i + (std::uint64_t{1} << 34), t);
  EXPECT_LT(std::fabs(same - n / 2.0), kSigmas * std::sqrt(n / 4.0)) << same;
}

// dropout_keep_run, the kernels' run of E elements (one Philox call a quad where E is a
// multiple of 4), gives each element the bit dropout_keep gives it.
TEST(Philox, KeepRunMatchesKeepElementByElement) {
  for (const double p : {0.1, 0.5, 0.9})
    for (const std::uint64_t i0 : {std::uint64_t{0}, std::uint64_t{4}, std::uint64_t{1} << 33, (std::uint64_t{1} << 31) - 4}) {
      const std::uint64_t t = dropout_threshold(p);
      bool k1[1], k4[4], k8[8];
      dropout_keep_run<1>(99, 17, i0 + 3, t, k1);
      dropout_keep_run<4>(99, 17, i0, t, k4);
      dropout_keep_run<8>(99, 17, i0, t, k8);
      EXPECT_EQ(k1[0], dropout_keep(99, 17, i0 + 3, t));
      for (int e = 0; e < 4; ++e) EXPECT_EQ(k4[e], dropout_keep(99, 17, i0 + e, t)) << i0 << " " << e;
      for (int e = 0; e < 8; ++e) EXPECT_EQ(k8[e], dropout_keep(99, 17, i0 + e, t)) << i0 << " " << e;
    }
}
