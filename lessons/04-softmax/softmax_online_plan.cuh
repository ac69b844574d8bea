// lessons/04-softmax/softmax_online_plan.cuh — how the online kernels of softmax_online.cu
// (v3_online, v5_cluster, v6_exp2) cut a row: blocks per row (a cluster when more than one),
// threads per block, vectors per thread; and the kernels the plan can pick (dispatch_nv).
// Host code only; no impl is registered here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "klab/error.hpp"
#include "klab/kernels.cuh"
#include "klab/op.hpp"

namespace lesson04 {

using i64 = std::int64_t;

// How the kernels cut a row: C blocks per row (a cluster when C > 1), `threads` per
// block, NV vectors of VEC elements per thread (at most 32 elements: 32 registers of data).
struct OnlinePlan {
  int blocks = 0, threads = 0, nv = 0;
  i64 slice = 0;
  bool ok = false;
};

// NV choices per vector width: the instantiated kernels.
inline std::vector<int> nv_choices(int vec) {
  if (vec == 1) return {1, 4, 32};
  std::vector<int> out;
  for (int nv = 1; nv * vec <= 32; nv *= 2) out.push_back(nv);
  return out;
}

// Prefer blocks of at most 256 threads (several blocks per SM, so one block's reduction
// overlaps another's loads), with as few blocks per row and as few elements per thread as
// that allows; failing that, up to 1024 threads. v3/v5 (fewest_blocks_first = false) split a
// row over a cluster before they use more than 256 threads; v6 (true) keeps the row in one
// block of up to 1024 threads while it fits and clusters only rows longer than 32,768: with
// v6's cheap arithmetic, one 1024-thread block per row streamed faster than a cluster of
// 256-thread blocks (the README's v6_exp2 section has the numbers).
inline OnlinePlan plan_online(i64 cols, int vec, int max_blocks,
                              bool fewest_blocks_first = false) {
  const auto try_plan = [&](int c, int cap) -> OnlinePlan {
    const i64 slice = klab::ceil_div<i64>(klab::ceil_div<i64>(cols, c), vec) * vec;
    for (int nv : nv_choices(vec)) {
      const i64 threads =
          klab::ceil_div<i64>(klab::ceil_div<i64>(slice, static_cast<i64>(vec) * nv), 32) * 32;
      if (threads <= cap) return {c, static_cast<int>(std::max<i64>(threads, 32)), nv, slice, true};
    }
    return {};
  };
  for (int first = 0; first < 2; ++first)            // pass 0: the preferred plans, 1: the rest
    for (int c = 1; c <= max_blocks; ++c)
      for (int cap : {256, 1024}) {
        const bool preferred = fewest_blocks_first ? true : cap == 256;
        if (preferred != (first == 0)) continue;
        if (const OnlinePlan pl = try_plan(c, cap); pl.ok) return pl;
      }
  return {};
}

constexpr int kMaxCluster = 8;   // the portable cluster size limit

// Calls f.template operator()<NV>() for the plan's NV (the instantiated choices of nv_choices).
template <int VEC, class F>
void dispatch_nv(int nv, F&& f) {
  if constexpr (VEC == 1) {
    switch (nv) {
      case 1: return f.template operator()<1>();
      case 4: return f.template operator()<4>();
      default: return f.template operator()<32>();
    }
  } else {
    switch (nv) {
      case 1: return f.template operator()<1>();
      case 2: return f.template operator()<2>();
      case 4: return f.template operator()<4>();
      default:
        if constexpr (VEC * 8 <= 32) {
          return f.template operator()<8>();
        } else {
          KLAB_REQUIRE(false, "online softmax: no kernel for this plan");
        }
    }
  }
}

inline std::string supports_online(const klab::Problem& p, int max_blocks) {
  const i64 cols = p.shape.at(1);
  // Vector width 1 is the worst case for the plan (it only depends on cols through it).
  if (!plan_online(cols, 1, max_blocks).ok)
    return "rows longer than " + std::to_string(max_blocks * 1024 * 32) +
           " do not fit in registers here (v4_long_rows handles any length)";
  if (p.shape.at(0) * max_blocks > std::numeric_limits<int>::max()) return "too many rows for one grid";
  return "";
}

}  // namespace lesson04
