// Lesson 09 — the flash attention forward in Triton (attention_triton.py), compiled ahead of time.
//
//   triton   op attention_fwd, bf16 and f16, head dims 64 and 128, causal and not: FlashAttention-2's
//            loop in Triton (BM query rows a program, K/V tiles of BN keys pipelined by cp.async,
//            both products by tl.dot: wgmma on Hopper; the online softmax in base 2 with the
//            scale folded into one multiply-add; causal tiles past the diagonal skipped, the
//            mask only on the tiles that need it), four linked tile configurations a head
//            dim, the fastest chosen per shape (run_triton)
//
// The build links the configurations of each dtype and head dim into one launcher
// (tr_attention_fwd_bf16_d128(stream, ..., algo_id) etc.); the first call for a shape times
// those that fit the device's shared memory and caches the fastest (klab::autotune, as
// lesson 05's `triton` does). Each is also a candidate of its own (`klab test` verifies every
// one; `--candidate 128x64/8w/3st` runs one, `--candidate all` times each as its own row: the
// sweep).
//
//   klab test 09 --impl triton
//   klab bench 09 --impl triton,cudnn --candidate all
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "attention.cuh"
#include "klab/autotune.hpp"
#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/triton.hpp"

#if KLAB_HAVE_TRITON
#include "attention_triton.h"
#endif

// The op (inputs, reference, tolerances, shapes): attention_ops.cu.

namespace lesson09 {
namespace {

// The configurations of each head dim, by algo_id: CONFIGS[D] in attention_triton.py, in its
// order, as BMxBN/warps/stages (tests/triton_algo_order.py compares the two lists). Both
// dtypes link the same lists; run_triton checks their lengths against the launchers' counts.
const std::vector<std::string> kTritonNamesD64 = {"128x64/8w/3st", "128x128/8w/3st", "128x64/4w/3st",
                                                  "64x64/4w/3st"};
const std::vector<std::string> kTritonNamesD128 = {"128x64/8w/3st", "128x128/8w/2st", "64x64/4w/3st",
                                                   "128x64/8w/4st"};

const std::vector<std::string>& triton_names(std::int64_t d) { return d == 64 ? kTritonNamesD64 : kTritonNamesD128; }

// The shared memory a configuration takes: Q's tile once and num_stages buffers of a K and a
// V tile, 2 bytes an element; what Triton allocated for every entry (tools/triton_ptx.py, sm_90;
// sm_80's is never larger). 64 KB to 160 KB: the H100's 227 KB and the A100's 163 KB take them
// all, a GPU with less (an 8.6 device: 99 KB) only some.
std::size_t triton_smem_bytes(const std::string& name, std::int64_t d) {
  int bm = 0, bn = 0, warps = 0, stages = 0;
  KLAB_REQUIRE(std::sscanf(name.c_str(), "%dx%d/%dw/%dst", &bm, &bn, &warps, &stages) == 4,
               "triton attention_fwd: malformed configuration name " + name);
  return static_cast<std::size_t>(bm + 2 * stages * bn) * static_cast<std::size_t>(d) * 2;
}

// What the autotuner times for a problem, as Impl::candidates reports it: the head dim's
// configurations whose shared memory fits the device (without a GPU, all of them). A head dim
// with no kernel (supports() says no) lists d = 128's, so that every problem names its
// candidates.
std::vector<std::string> triton_candidates(const klab::Problem& p) {
  const std::int64_t d = shape_of(p).d;
  const std::size_t limit = klab::device_info().smem_per_block_optin;
  std::vector<std::string> out;
  for (const auto& n : triton_names(d))
    if (limit == 0 || triton_smem_bytes(n, d == 64 ? 64 : 128) <= limit) out.push_back(n);
  return out;
}

#if KLAB_HAVE_TRITON
using Launcher = CUresult (*)(CUstream, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, int32_t,
                              int32_t, int32_t, int32_t, int32_t, int32_t, float, int);

struct Kernel {
  Launcher launch;
  int (*num_algos)(void);
  void (*load)(void);
};

// The launchers: {bf16, f16} x {d = 64, d = 128}, index 2 * (dtype is f16) + (d is 128).
int kernel_index(const klab::Problem& p) {
  return 2 * (p.dtype == klab::DType::f16 ? 1 : 0) + (shape_of(p).d == 128 ? 1 : 0);
}

const Kernel& kernel_of(int i) {
  static const Kernel all[] = {
      {tr_attention_fwd_bf16_d64, tr_attention_fwd_bf16_d64_get_num_algos, load_tr_attention_fwd_bf16_d64},
      {tr_attention_fwd_bf16_d128, tr_attention_fwd_bf16_d128_get_num_algos, load_tr_attention_fwd_bf16_d128},
      {tr_attention_fwd_f16_d64, tr_attention_fwd_f16_d64_get_num_algos, load_tr_attention_fwd_f16_d64},
      {tr_attention_fwd_f16_d128, tr_attention_fwd_f16_d128_get_num_algos, load_tr_attention_fwd_f16_d128},
  };
  static_assert(sizeof(all) / sizeof(all[0]) == 4, "one launcher per dtype and head dim");
  return all[i];
}
#endif

void run_triton(const klab::Launch& l) {
#if KLAB_HAVE_TRITON
  const AttnArgs a = attn_args(l);
  if (static_cast<i64>(a.B) * a.Hq * a.Sq == 0) return;   // no query row: nothing to write
  const int ki = kernel_index(l.problem);
  const Kernel& fn = kernel_of(ki);
  static bool loaded[4] = {false, false, false, false};
  if (!loaded[ki]) {
    klab::triton_prepare();
    fn.load();
    loaded[ki] = true;
  }
  const std::vector<std::string>& all = triton_names(a.d);
  KLAB_REQUIRE(fn.num_algos() == static_cast<int>(all.size()),
               "triton attention_fwd: the launcher links " + std::to_string(fn.num_algos()) + " configurations, " +
                   std::to_string(all.size()) + " named (the names follow CONFIGS in attention_triton.py)");
  // log2(e) / sqrt(d): the scores go into base 2 by one multiply, exp is one ex2.
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(a.d)));
  const auto ptr = [](const void* q) { return reinterpret_cast<CUdeviceptr>(q); };
  // The candidates are a subset of the head dim's names; the launcher takes the algo_id in the full list.
  const std::vector<std::string> names = triton_candidates(l.problem);
  const auto launch = [&](int i) {
    const int algo = static_cast<int>(std::find(all.begin(), all.end(), names.at(i)) - all.begin());
    KLAB_CHECK_CU(fn.launch(reinterpret_cast<CUstream>(a.stream), ptr(a.q), ptr(a.k), ptr(a.v), ptr(a.o), ptr(a.lse),
                            a.B * a.Hq, a.Hq, a.Hkv, a.Sq, a.Sk, a.causal ? 1 : 0, scale_log2, algo));
  };
  const int best = klab::autotune(l, "attention_fwd|triton|" + l.problem.label(), names, 0, launch);
  launch(best);
#else
  (void)l;
  KLAB_REQUIRE(false, "triton attention_fwd: not built");
#endif
}

std::string supports_triton(const klab::Problem& p) {
  const Shape s = shape_of(p);
  if (s.d != 64 && s.d != 128)
    return "head dim d = " + std::to_string(s.d) +
           ": the Triton kernels are compiled for d = 64 and d = 128 only (D is a constexpr: the row of O a program "
           "holds is sized at compile time)";
  // One program per block of BM query rows of each (batch, head), on the grid's x axis (BM = 64
  // in the configuration with the most programs); B x Hq is an int32 argument.
  if (s.B * s.Hq > std::numeric_limits<int32_t>::max() ||
      s.B * s.Hq * ((s.Sq + 63) / 64) > std::numeric_limits<int32_t>::max())
    return "more than 2^31 - 1 programs of 64 query rows";
  if (std::string why = klab::triton_supported(); !why.empty()) return why;
  if (triton_candidates(p).empty())
    return "no tile configuration fits this device's " +
           std::to_string(klab::device_info().smem_per_block_optin / 1024) + " KB of shared memory a block";
  return "";
}

KLAB_REGISTER(klab::register_impl({.op = "attention_fwd", .name = "triton",
                                   .summary = "Triton flash attention forward: tl.dot (wgmma on Hopper), online "
                                              "softmax in base 2, K/V pipelined by cp.async, 4 linked tile configs "
                                              "a head dim, fastest chosen per shape",
                                   .kind = klab::ImplKind::triton, .supports = supports_triton,
                                   .run = run_triton, .candidates = triton_candidates}));

}  // namespace
}  // namespace lesson09
