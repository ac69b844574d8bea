// klab/device/philox.cuh — a counter-based random generator, Philox4x32-10, and the dropout
// keep mask built on it (host and device: the CPU references call the same functions the
// kernels do, and CI checks them against the generator's published known answers).
//
// Counter-based: the output is a pure function of (counter, key). No state is stored or
// carried between threads, so element i of a tensor can draw its own number wherever and
// whenever it is computed — in the forward kernel, and again in the backward, bit for bit.
// That is why dropout need never store its mask: the backward regenerates it.
//
// Philox4x32-10 (Salmon, Moraes, Dror and Shaw, SC'11): 10 rounds on a 128-bit counter,
// each round two 32x32 -> 64-bit multiplies whose high halves are XORed with the other
// words and the round key; the 64-bit key is bumped by two Weyl constants between rounds.
// Four 32-bit outputs per call.
//
// The dropout stream (dropout_bits, dropout_keep):
//   key     = (seed low 32 bits, seed high 32 bits)
//   counter = (i/4 low, i/4 high, offset low, offset high)
//   element i takes output word i % 4, so four consecutive elements cost one call.
// `offset` separates the streams of one seed (a layer, a step); element i is kept when its
// word is at least threshold = floor(p · 2^32): keep probability 1 - p within 2^-32, and
// p = 0 (threshold 0) keeps every element, p = 1 (threshold 2^32) none, exactly.
#pragma once

#include <cstdint>

#include "klab/math.hpp"   // KLAB_HOST_DEVICE

namespace klab {

struct Philox4 {
  std::uint32_t x[4];
};

// The 64-bit product a · b as (high, low) 32-bit halves.
KLAB_HOST_DEVICE inline void mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
#if defined(__CUDA_ARCH__)
  hi = __umulhi(a, b);
  lo = a * b;
#else
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
#endif
}

KLAB_HOST_DEVICE inline Philox4 philox4x32_10(Philox4 ctr, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;  // round multipliers
  constexpr std::uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;  // key bumps (golden ratio, sqrt(3) - 1)
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k0 += W0, k1 += W1;
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo32(M0, ctr.x[0], hi0, lo0);
    mulhilo32(M1, ctr.x[2], hi1, lo1);
    ctr = Philox4{{hi1 ^ ctr.x[1] ^ k0, lo1, hi0 ^ ctr.x[3] ^ k1, lo0}};
  }
  return ctr;
}

// The four words of the dropout stream (seed, offset) for elements 4q .. 4q + 3.
KLAB_HOST_DEVICE inline Philox4 dropout_bits(std::uint64_t seed, std::uint64_t offset, std::uint64_t q) {
  const Philox4 ctr{{static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(q >> 32),
                     static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(offset >> 32)}};
  return philox4x32_10(ctr, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// floor(p · 2^32) for p in [0, 1]: the smallest word that keeps its element.
KLAB_HOST_DEVICE inline std::uint64_t dropout_threshold(double p) {
  if (!(p > 0.0)) return 0;  // p <= 0 (and NaN, which callers reject): keep all
  if (p >= 1.0) return std::uint64_t{1} << 32;
  return static_cast<std::uint64_t>(p * 4294967296.0);
}

// Whether element i of the stream (seed, offset) survives dropout at this threshold.
KLAB_HOST_DEVICE inline bool dropout_keep(std::uint64_t seed, std::uint64_t offset, std::uint64_t i,
                                          std::uint64_t threshold) {
  return dropout_bits(seed, offset, i / 4).x[i % 4] >= threshold;
}

// The keep bits of the E elements i0 .. i0 + E - 1 of the stream, for a kernel that holds a
// run of them (a 16-byte vector): one Philox call a quad where E is a multiple of 4, which
// needs i0 to start a quad (i0 % 4 == 0, the caller's promise: a whole vector of a row whose
// width is a multiple of the vector's); else one call an element.
template <int E>
KLAB_HOST_DEVICE inline void dropout_keep_run(std::uint64_t seed, std::uint64_t offset, std::uint64_t i0,
                                              std::uint64_t threshold, bool (&keep)[E]) {
  if constexpr (E % 4 == 0) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int q = 0; q < E / 4; ++q) {
      const Philox4 bits = dropout_bits(seed, offset, i0 / 4 + static_cast<std::uint64_t>(q));
      for (int w = 0; w < 4; ++w) keep[4 * q + w] = bits.x[w] >= threshold;
    }
  } else {
    for (int e = 0; e < E; ++e) keep[e] = dropout_keep(seed, offset, i0 + static_cast<std::uint64_t>(e), threshold);
  }
}

}  // namespace klab
