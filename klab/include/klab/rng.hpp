// klab/rng.hpp — seeded, counter-based input generation.
//
// Element i of a tensor generated from seed s is a pure function of (s, i): the fill is
// parallel, the same on every machine and thread count, and any element of a failure can
// be recomputed from the printed seed.
#pragma once

#include <cstdint>
#include <functional>

#include "klab/tensor.hpp"

namespace klab {

std::uint64_t mix64(std::uint64_t x);                           // splitmix64 finaliser
double uniform01(std::uint64_t seed, std::uint64_t i);          // [0, 1)
std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream);  // one seed per tensor

// Fill a tensor (any dtype; values rounded once to it). Runs on all host cores.
void fill_uniform(HostTensor& t, std::uint64_t seed, double lo, double hi);
void fill_normal(HostTensor& t, std::uint64_t seed, double mean, double stddev);
void fill_int(HostTensor& t, std::uint64_t seed, std::int64_t lo, std::int64_t hi);  // [lo, hi]

// Run f(begin, end) over [0, n) split across the host's cores, serial when the work is small.
// work_per_item: about how many elements one index stands for (a row's length when the
// items are rows): the split is sized by n * work_per_item, so that 16385 rows of 131072
// columns use every core rather than counting as "16385 items: serial".
void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& f,
                  std::int64_t work_per_item = 1);

}  // namespace klab
