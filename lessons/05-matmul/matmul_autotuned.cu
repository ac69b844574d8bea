// Lesson 05 — the best bf16 matmul: every bf16 version that can take the problem, timed
// once per shape, the fastest cached and run from then on.
//
//   v20_autotuned   candidates: v13_mma_autotuned's four mma.sync configurations (they take
//                   every shape and layout, on sm_80 too) and, on Hopper where TMA can
//                   describe the operands (row pitches multiples of 8), v16_persistent,
//                   v18_cluster_multicast, v19_tma_store (and v19 with four stages, its C tile
//                   staged in two rounds of 128 columns), v21_pingpong and v17_splitk_wgmma — split-K for the outputs too
//                   small to fill the GPU. So it takes any M, N, K and any of nn/tn/nt, and
//                   on the shapes the Hopper kernels serve it picks among them.
//
//   klab bench 05 --op matmul --dtype bf16 --impl v20_autotuned,cublas
//   klab bench 05 --op matmul --dtype bf16 --impl v20_autotuned --candidate all   (the sweep)
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "klab/autotune.hpp"
#include "klab/op.hpp"
#include "matmul.cuh"

namespace lesson05 {
namespace {

// The Hopper candidates, after v13's configurations, in this order.
struct HopperCandidate {
  const char* name;
  void (*run)(const klab::Launch&);
};
const HopperCandidate kHopper[] = {{"v16_persistent", run_v16_persistent},
                                   {"v18_cluster_multicast", run_v18_cluster_multicast},
                                   {"v19_tma_store", run_v19_tma_store},
                                   {"v19_tma_store/4st/c2rounds", run_v19_tma_store_4st},
                                   {"v21_pingpong", run_v21_pingpong},
                                   {"v21_pingpong/cluster4", run_v21_pingpong_cluster4},
                                   {"v17_splitk_wgmma", run_v17_splitk_wgmma}};

bool hopper_ok(const klab::Problem& p) { return supports_wgmma(p).empty(); }

std::vector<std::string> v20_candidates(const klab::Problem& p) {
  std::vector<std::string> names;
  for (const std::string& n : v13_config_names()) names.push_back("v13 " + n);
  if (hopper_ok(p))
    for (const HopperCandidate& h : kHopper) names.push_back(h.name);
  return names;
}

void run_v20_candidate(const klab::Launch& l, int c) {
  const int mma = static_cast<int>(v13_config_names().size());
  if (c < mma) run_v13_config(l, c);
  else kHopper[c - mma].run(l);
}

void run_v20_autotuned(const klab::Launch& l) {
  const std::string key = "best|" + l.problem.label();
  const int best = klab::autotune(l, key, v20_candidates(l.problem), 0, [&](int c) { run_v20_candidate(l, c); });
  run_v20_candidate(l, best);
}

// v17's workspace when it is a candidate (the harness allocates it once, before tuning).
std::size_t workspace_v20_autotuned(const klab::Problem& p) {
  return hopper_ok(p) ? workspace_v17_splitk_wgmma(p) : 0;
}

KLAB_REGISTER(klab::register_impl({.op = "matmul", .name = "v20_autotuned",
                                   .summary = "the fastest of v13's configurations and the Hopper versions, per shape",
                                   .kind = klab::ImplKind::cuda, .supports = bf16_tc,
                                   .workspace = workspace_v20_autotuned, .run = run_v20_autotuned,
                                   .candidates = v20_candidates,
                                   .kernels = {"matmul_mma_sync", "matmul_wgmma", "matmul_v12_splitk_reduce"}}));

}  // namespace
}  // namespace lesson05
