// Lesson 07 — what the dropout files share (namespace lesson07): the problem's parameters
// as a launch carries them, and the launch shape of the grid-stride kernels. It registers
// no impl.
//
// The op (dropout_ops.cu): y = x · keep / (1 − p) over a (rows, cols) tensor, element i at
// flat index r · cols + c, where keep is the dropout stream of klab/device/philox.cuh:
// element i is kept when word i % 4 of philox(seed, offset, i / 4) is at least
// floor(p · 2^32). The variant names p ("p0.1"); seed and offset are the op's two scalars.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "klab/device/philox.cuh"
#include "klab/kernels.cuh"
#include "klab/op.hpp"
#include "klab/rng.hpp"

namespace lesson07 {

// The variants: the drop probabilities the op is tested and timed at. 0 and 1 are exact
// (keep all, keep none); 0.1 is a transformer's usual rate.
inline double drop_probability(const std::string& variant) { return std::stod(variant.substr(1)); }

// What every dropout kernel takes: the stream, the threshold a word must reach, and the
// scale 1 / (1 − p) of the kept elements (never used at p = 1, where nothing is kept).
struct DropoutArgs {
  std::uint64_t seed = 0, offset = 0, threshold = 0;
  float scale = 1.0f;
};
inline DropoutArgs dropout_args(const klab::Launch& l) {
  const double p = drop_probability(l.problem.variant);
  DropoutArgs a;
  a.seed = static_cast<std::uint64_t>(l.scalars.at(0));
  a.offset = static_cast<std::uint64_t>(l.scalars.at(1));
  a.threshold = klab::dropout_threshold(p);
  a.scale = p < 1.0 ? static_cast<float>(1.0 / (1.0 - p)) : 0.0f;
  return a;
}

// The stream's two scalars as an op draws them from its seed: a stream seed below 2^52 and an
// offset below 2^32 (both exact as doubles), from the seed's derived draws k and k + 1. Every
// op that draws this stream (dropout_ops.cu; lesson 08's fused residual block) calls it.
inline std::vector<double> draw_stream_scalars(std::uint64_t seed, std::uint64_t k) {
  return {std::floor(klab::uniform01(seed, k) * 4503599627370496.0),    // 2^52
          std::floor(klab::uniform01(seed, k + 1) * 4294967296.0)};     // 2^32
}

inline std::int64_t numel(const klab::Problem& p) { return p.shape[0] * p.shape[1]; }

// Threads a block of the grid-stride kernels; their grids: klab::grid_stride_blocks.
inline constexpr int kThreads = 256;

}  // namespace lesson07
